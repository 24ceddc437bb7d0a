// test_sft_trainer.cpp — fine-tuning on chat shards in both trainers (train_gpt emulated): a step's loss is
// the mean over its target tokens (a micro-batch weighs by its count, so the split into micro-batches does
// not matter), train and validation agree on it, a step without targets updates nothing, the log says each
// step's targets. The shards are written here, so each row's targets are known. The data tool and the
// loader: test_chat_data, test_dataloader; the masked math: test_packed (CPU), test_gpu (GPU step).
#include <math.h>
#include "cli_test_common.h"
#include "chat_test_common.h"  // defines: Tok, row, write_chat_shard

namespace {

class SftTest : public CliTest {
  public:  // the helpers below take the fixture
    // A chat shard (dataloader.h's format) of these rows.
    std::string chat_shard(const std::string& name, const std::vector<std::vector<Tok>>& rows, int T,
                           int vocab = 50257) {
        return write_chat_shard(dir + "/" + name, rows, T, vocab);
    }
    Result train(const std::string& data, const std::string& val, const Args& more, const char* bin = kCpu) {
        return run_bin(bin, Args{"-e", "L2:C64:NH4:T32", "-t", "32", "-i", data, "-j", val, "-g", "0", "-l",
                                 "1e-2", "-u", "0"} +
                                more);
    }
};

// The first val line's loss, or -1.
double first_val(const std::string& out) {
    const size_t at = out.find("val loss ");
    return at == std::string::npos ? -1 : atof(out.c_str() + at + 9);
}

}  // namespace

// Two rows with 3 and 20 targets. One step over both, as one micro-batch of 2 rows or two of 1 row: the same
// losses and updates if each micro-batch weighs by its targets. A trainer averaging per micro-batch (the 3
// weigh as much as the 20) moved step 1 by 2.1e-3 here and failed. The CPU trainer: step 1 has the same
// weights, sums in another order (1e-6); steps 2-3 after updates: 1e-4 (AdamW's first steps amplify
// rounding, as in test_gpu). train_gpt: test_gpu's bounds for another accumulation split (1e-4, then 2.5e-4).
static void micro_batches_weigh_by_targets(SftTest* t, const std::string& dir, const char* bin, double first,
                                           double later) {
    const int T = 32;
    const std::string data =
        t->chat_shard("train.bin", {row(T, {12, 14}, {2, 1}, 1), row(T, {30}, {20}, 2)}, T);
    const Result one = t->train(data, data, Args{"-b", "2", "-d", "64", "-x", "3", "-v", "0"}, bin);
    const Result two = t->train(data, data, Args{"-b", "1", "-d", "64", "-x", "3", "-v", "0"}, bin);
    ASSERT_EQ(one.code, 0) << one.cmd << "\n" << one.err << one.out;
    ASSERT_EQ(two.code, 0) << two.cmd << "\n" << two.err << two.out;
    EXPECT_TRUE(has(one.out, "| targets 23 |")) << one.out;
    EXPECT_TRUE(has(two.out, "| targets 23 |")) << two.out;
    const auto a = step_losses(one.out), b = step_losses(two.out);
    ASSERT_EQ(a.size(), 3u) << one.out;
    ASSERT_EQ(b.size(), 3u) << two.out;
    for (int s = 1; s <= 3; s++) {
        const double x = atof(a.at(s).c_str()), y = atof(b.at(s).c_str());
        EXPECT_LE(fabs(x - y), (s == 1 ? first : later) * x)
            << bin << " step " << s << ": 1 x 2 rows " << x << ", 2 x 1 row " << y;
    }
}
TEST_F(SftTest, MicroBatchesWeighByTheirTargetTokens) {
    micro_batches_weigh_by_targets(this, dir, kCpu, 1e-6, 1e-4);
    if (!have_binary(kEmu)) GTEST_SKIP() << kEmu << " not built";
    micro_batches_weigh_by_targets(this, dir, kEmu, 1e-4, 2.5e-4);
}

// Validation and training agree: before any update, the step over every row and the validation over the same
// rows are the same mean over target tokens (CPU 1e-6: the same sums; train_gpt 1e-5: its step and its
// validation sum the same bf16 per-token losses in fp32, grouped differently).
TEST_F(SftTest, ValidationLossIsTheMeanOverTargetTokens) {
    const int T = 32;
    const std::string data = chat_shard(
        "d.bin", {row(T, {10, 9, 13}, {4, 0, 6}, 3), row(T, {25}, {1, 0}, 4), row(T, {31}, {29}, 5)}, T);
    for (const char* bin : {kCpu, kEmu}) {
        if (bin == kEmu && !have_binary(kEmu)) GTEST_SKIP() << kEmu << " not built";
        const Result r = train(data, data, Args{"-b", "1", "-d", "96", "-x", "1", "-v", "1", "-m", "3"}, bin);
        ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.err << r.out;
        const double val = first_val(r.out), step1 = atof(step_losses(r.out).at(1).c_str());
        EXPECT_LE(fabs(val - step1), (bin == kCpu ? 1e-6 : 1e-5) * step1)
            << bin << ": val " << val << ", step 1 " << step1 << "\n"
            << r.out;
        EXPECT_TRUE(has(r.out, "| targets 40 |")) << r.out;
    }
}

// A step whose rows hold no target token learns nothing from them: one warning, no update, and the next step
// trains on with the loss it would have had from the start (1e-6 CPU, 1e-5 train_gpt as above).
TEST_F(SftTest, AStepWithoutTargetsUpdatesNothing) {
    const int T = 32;
    const std::string none = chat_shard("none.bin", {row(T, {20}, {0}, 6)}, T),
                      some = chat_shard("some.bin", {row(T, {30}, {12}, 7)}, T);
    for (const char* bin : {kCpu, kEmu}) {
        if (bin == kEmu && !have_binary(kEmu)) GTEST_SKIP() << kEmu << " not built";
        // -i is a glob: both shards, one row each (in the order the shuffle gives), B 1: one step has no
        // targets
        const Result g =
            train(dir + "/[ns]o*.bin", some, Args{"-b", "1", "-x", "2", "-v", "2", "-m", "1"}, bin);
        ASSERT_EQ(g.code, 0) << g.cmd << "\n" << g.err << g.out;
        EXPECT_TRUE(has(g.err, "no target tokens in its 1 micro-batches: nothing to learn")) << g.err;
        EXPECT_TRUE(has(g.out, "update skipped: no target tokens in this step")) << g.out;
        const auto losses = step_losses(g.out);
        ASSERT_EQ(losses.size(), 1u) << bin << ": one step with a loss, one without\n" << g.out;
        // the trained step saw unchanged weights: its loss is the validation loss on that row before any step
        const double val = first_val(g.out), trained = atof(losses.begin()->second.c_str());
        EXPECT_LE(fabs(val - trained), (bin == kCpu ? 1e-6 : 1e-5) * val) << bin << "\n" << g.out;
    }
}
// A resume reads its model from the checkpoint, with no tokenizer.json to hold new shards against: shards of
// another tokenizer (here a vocabulary of 50200 ids, which the model's 50257 rows would take) trained on
// silently (a hostile trial). The run keeps its shards' tokenizer in -o (data_tokenizer.bin); a resume on
// other shards is refused in one line, on its own shards it goes on.
TEST_F(SftTest, AResumeOnShardsOfAnotherTokenizerIsRefused) {
    const int T = 32;
    const std::string mine = chat_shard("mine.bin", {row(T, {20}, {8}, 3), row(T, {30}, {12}, 4)}, T),
                      other =
                          chat_shard("other.bin", {row(T, {20}, {8}, 3), row(T, {30}, {12}, 4)}, T, 50200);
    for (const char* bin : {kCpu, kEmu}) {
        if (bin == kEmu && !have_binary(kEmu)) GTEST_SKIP() << kEmu << " not built";
        const std::string run = dir + "/run_" + (bin == kCpu ? "cpu" : "emu");
        const Result first = train(mine, mine, Args{"-b", "1", "-x", "2", "-v", "0", "-o", run}, bin);
        ASSERT_EQ(first.code, 0) << first.cmd << "\n" << first.err << first.out;
        EXPECT_TRUE(file_exists(run + "/data_tokenizer.bin"));
        EXPECT_TRUE(
            CleanError(train(other, other, Args{"-b", "1", "-x", "4", "-v", "0", "-o", run, "-y", "1"}, bin),
                       {"resume: shard", "a vocabulary of 50257 ids", "50200", "choose another -o"}))
            << bin;
        const Result again =
            train(mine, mine, Args{"-b", "1", "-x", "4", "-v", "0", "-o", run, "-y", "1"}, bin);
        EXPECT_EQ(again.code, 0) << again.err;
        EXPECT_TRUE(has(again.out, "(step 2)")) << again.out;
    }
}

// The README's path, end to end: a Hugging Face GPT-2, the shipped chats.jsonl through chat_shards.py with
// the plain template, a fine-tune in train_gpt_cpu (the validation loss over targets falls), export_hf with
// the tokenizer chat_shards.py saved, then transformers loads the result, renders a question with the
// template and answers it.
TEST_F(SftTest, FromHuggingFaceThroughChatShardsToTransformersChat) {
    const std::string py = getenv("HF_PYTHON")                        ? getenv("HF_PYTHON")
                           : access(".venv-hf/bin/python", X_OK) == 0 ? ".venv-hf/bin/python"
                                                                      : "python3";
    if (system((py + " -c 'import torch, transformers, jinja2' > /dev/null 2>&1").c_str()) != 0)
        GTEST_SKIP() << py << " lacks torch, transformers or jinja2: .ci/run installs them in .venv-hf";
    ASSERT_TRUE(have_binary("./export_hf")) << "make builds export_hf before the tests";
    auto sh = [&](const std::string& cmd) {
        FILE* p = popen((cmd + " 2>&1").c_str(), "r");
        std::string out;
        char buf[4096];
        size_t n;
        while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
        const int rc = p ? pclose(p) : -1;
        EXPECT_EQ(rc, 0) << cmd << "\n" << out;
        return out;
    };
    sh(py + " test/sft_e2e.py make " + dir);
    sh(py + " test/make_test_tokenizers.py " + dir + "/tok");
    const std::string made =
        sh(py + " dev/data/chat_shards.py --tokenizer " + dir + "/tok/gpt2 --input " +
           "dev/data/chats.jsonl --out-prefix " + dir + "/chats --seq-len 128 --val-convs 4 " +
           "--long split --save-tokenizer " + dir + "/chat_tok");
    EXPECT_TRUE(has(made, "template plain")) << made;
    const Result t = run_bin(kCpu, Args{"-e", dir + "/gpt2_hf",
                                        "-i", dir + "/chats_train.bin",
                                        "-j", dir + "/chats_val.bin",
                                        "-t", "128",
                                        "-b", "2",
                                        "-x", "30",
                                        "-l", "3e-3",
                                        "-u", "5",
                                        "-v", "30",
                                        "-g", "0",
                                        "-n", "30",
                                        "-o", dir + "/sft"});
    ASSERT_EQ(t.code, 0) << t.cmd << "\n" << t.err << t.out;
    EXPECT_TRUE(has(t.out, "Hugging Face checkpoint")) << t.out;
    const double first = first_val(t.out), last = atof(t.out.c_str() + t.out.rfind("val loss ") + 9);
    EXPECT_LT(last, first - 0.5) << "30 steps on the chats: the validation loss over targets falls\n"
                                 << t.out;
    printf("  val loss over targets: %.4f before, %.4f after 30 steps\n", first, last);
    const Result e =
        run_bin("./export_hf", Args{"-i", dir + "/sft", "-o", dir + "/sft_hf", "-t", dir + "/chat_tok"});
    ASSERT_EQ(e.code, 0) << e.cmd << "\n" << e.err << e.out;
    // -t another tokenizer than the shards' (the run keeps theirs: data_tokenizer.bin): refused, where it
    // exported the weights beside ids they were not trained on (a hostile trial)
    EXPECT_TRUE(CleanError(
        run_bin("./export_hf", Args{"-i", dir + "/sft", "-o", dir + "/sft_hf2", "-t", dir + "/tok/chatml"}),
        {"-t " + dir + "/tok/chatml is not the tokenizer of the shards the run in " + dir +
         "/sft trained on"}));
    EXPECT_FALSE(file_exists(dir + "/sft_hf2"));
    // -i one of the run's model files: the same check (it exported them, silently)
    EXPECT_TRUE(CleanError(run_bin("./export_hf", Args{"-i", dir + "/sft/model_00000030.bin", "-o",
                                                       dir + "/sft_hf2", "-t", dir + "/tok/chatml"}),
                           {"is not the tokenizer of the shards the run in " + dir + "/sft trained on"}));
    const std::string chat = sh(py + " test/sft_e2e.py chat " + dir + "/sft_hf");
    EXPECT_TRUE(has(chat, "<|assistant|>\\n'")) << "the prompt ends as the plain template asks for a turn\n"
                                                << chat;
    int new_tokens = 0;
    const size_t nl = chat.find('\n');
    if (nl != std::string::npos) new_tokens = atoi(chat.c_str() + nl + 1);
    EXPECT_GE(new_tokens, 1) << chat;
    printf("  transformers, after the template's prompt: %s", chat.c_str());
}

// The README's fine-tuning commands, read from README.md's "### Fine-tuning on conversations" section (its
// first ```sh block), so the two cannot drift (issue 41: the recipe's -b did not fit its data, and it saved
// nothing to export). Run as written in a scratch directory, with three substitutions:
//   path/to/Qwen2.5-0.5B-Instruct -> a tiny random Qwen2 with a Qwen2.5-style chat template beside it
//                                    (test/sft_e2e.py qwen: GPT-2's BPE + <|im_start|> <|im_end|>, the
//                                    default system prompt; no model is downloaded here)
//   python3 -> the Python with transformers (HF_PYTHON, .venv-hf, else python3)
//   -x N    -> -x 10, for time (the README's -x 100 takes ~25 s on 2 cores; what is checked is the same)
// Checks: the shards are made (data/ created by chat_shards.py), the run saves its model in sft/ without -n,
// export_hf writes sft_hf, and transformers loads sft_hf with <|im_end|> among generation_config's eos ids.
// Then the run goes on as usage.md says (-y 1, no -e: the model from the checkpoint), in train_gpt too: with
// no tokenizer.json to check the shards against, the vocabulary rule (at most 1/64 over the ids) refused the
// stand- in's 941 padded rows, and named the default model (a hostile trial); the run's data_tokenizer.bin
// vouches. A README command that breaks (a -b that does not fit, a lost flag) fails this test.
TEST_F(SftTest, ReadmeRecipeRunsAsWritten) {
    const std::string py = getenv("HF_PYTHON")                        ? getenv("HF_PYTHON")
                           : access(".venv-hf/bin/python", X_OK) == 0 ? ".venv-hf/bin/python"
                                                                      : "python3";
    if (system((py + " -c 'import torch, transformers, tokenizers, jinja2' > /dev/null 2>&1").c_str()) != 0)
        GTEST_SKIP() << py
                     << " lacks torch, transformers, tokenizers or jinja2: .ci/run installs them in .venv-hf";
    ASSERT_TRUE(have_binary("./export_hf")) << "make builds export_hf before the tests";
    char cwd[PATH_MAX];
    ASSERT_NE(getcwd(cwd, sizeof cwd), nullptr);
    const std::string root = cwd,
                      pyabs = py[0] == '/' || py.find('/') == std::string::npos ? py : root + "/" + py;

    // the section's first ```sh block, its continued lines joined
    std::istringstream readme(slurp("README.md"));
    std::vector<std::string> cmds;
    std::string line, cont;
    int state = 0;  // 0 before the section, 1 in it before the block, 2 in the block
    while (state < 3 && std::getline(readme, line)) {
        if (state == 0) {
            state = line == "### Fine-tuning on conversations" ? 1 : 0;
        } else if (state == 1) {
            if (line.compare(0, 2, "##") == 0) break;  // the next section: no block
            state = line == "```sh" ? 2 : 1;
        } else if (line == "```") {
            state = 3;
        } else {
            const bool more = !line.empty() && line.back() == '\\';
            cont += more ? line.substr(0, line.size() - 1) : line;
            if (!more && !cont.empty()) cmds.push_back(cont), cont.clear();
        }
    }
    ASSERT_EQ(state, 3) << "README.md has no ```sh block in '### Fine-tuning on conversations'";
    ASSERT_EQ(cmds.size(), 3u) << "the recipe: chat_shards.py, train_gpt_cpu, export_hf";

    const std::string model = dir + "/Qwen2.5-0.5B-Instruct", work = dir + "/work";
    const Result made = run_bin(py.c_str(), {"test/sft_e2e.py", "qwen", model});
    ASSERT_EQ(made.code, 0) << made.err << made.out;
    ASSERT_EQ(mkdir(work.c_str(), 0755), 0);
    for (const char* f : {"dev", "train_gpt_cpu", "export_hf", "gpt2_tokenizer.bin"})
        ASSERT_EQ(symlink((root + "/" + f).c_str(), (work + "/" + f).c_str()), 0) << f;
    auto shell = [&](const std::string& cmd) {  // in work/, stdout and stderr together
        FILE* p = popen(("cd " + work + " && timeout 300 " + cmd + " 2>&1").c_str(), "r");
        std::string out;
        char buf[4096];
        size_t n;
        while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
        const int rc = p ? pclose(p) : -1;
        return std::make_pair(rc, out);
    };
    const std::vector<std::string> want = {"python3 dev/data/chat_shards.py ", "./train_gpt_cpu ",
                                           "./export_hf "};
    std::vector<std::string> outs;
    for (size_t i = 0; i < cmds.size(); i++) {
        std::string c = cmds[i];
        ASSERT_EQ(c.compare(0, want[i].size(), want[i]), 0) << "README command " << i + 1 << ": " << c;
        int subs = 0;
        for (size_t at; (at = c.find("path/to/Qwen2.5-0.5B-Instruct")) != std::string::npos; subs++)
            c.replace(at, strlen("path/to/Qwen2.5-0.5B-Instruct"), model);
        EXPECT_GE(subs, 1) << "README command " << i + 1 << " names no path/to/Qwen2.5-0.5B-Instruct: " << c;
        if (i == 0) c = pyabs + c.substr(strlen("python3"));
        c = std::regex_replace(c, std::regex(" -x [0-9]+"), " -x 10");
        if (i == 0) {
            EXPECT_NE(access((work + "/data").c_str(), F_OK), 0) << "data/ exists before the recipe";
        }
        const auto r = shell(c);
        ASSERT_EQ(r.first, 0) << "README command " << i + 1 << ", as run here:\n" << c << "\n" << r.second;
        outs.push_back(r.second);
    }
    EXPECT_TRUE(file_exists(work + "/data/chats_train.bin") && file_exists(work + "/data/chats_val.bin"))
        << outs[0];
    EXPECT_TRUE(has(outs[1], "saved checkpoint step 10 to sft")) << outs[1];
    EXPECT_TRUE(file_exists(work + "/sft/DONE_00000010"))
        << "the run saves its model when it ends, without -n";
    EXPECT_TRUE(file_exists(work + "/sft_hf/model.safetensors") && file_exists(work + "/sft_hf/config.json"))
        << outs[2];
    const Result e = run_bin(py.c_str(), {"test/sft_e2e.py", "eos", work + "/sft_hf"});
    ASSERT_EQ(e.code, 0) << e.err << e.out;
    EXPECT_TRUE(std::regex_search(e.out, std::regex("^eos \\[(\\d+,)*50258(,\\d+)*\\] end_of_turn 50258 ")))
        << "generation stops at <|im_end|> (50258)\n"
        << e.out;
    printf("  the README's recipe, -x 10: %s", e.out.c_str());

    // the fine-tune goes on: the README's train command without -e, -y 1, two steps more
    std::string more = std::regex_replace(cmds[1], std::regex(" -e [^ ]+"), "");
    more = std::regex_replace(more, std::regex(" -x [0-9]+"), " -x 12") + " -y 1";
    const auto go_on = shell(more);
    ASSERT_EQ(go_on.first, 0) << more << "\n" << go_on.second;
    EXPECT_TRUE(has(go_on.second, "saved checkpoint step 12 to sft")) << go_on.second;
    if (!have_binary(kEmu)) return;  // train_gpt (emulated): a run of one step, then one more from it
    const Args emu = {"-i", work + "/data/chats_train.bin",
                      "-j", work + "/data/chats_val.bin",
                      "-t", "256",
                      "-b", "2",
                      "-v", "0",
                      "-g", "0",
                      "-o", work + "/sft_emu"};
    const Result first = run_bin(kEmu, emu + Args{"-e", model, "-x", "1"});
    ASSERT_EQ(first.code, 0) << first.err << first.out;
    const Result resumed = run_bin(kEmu, emu + Args{"-x", "2", "-y", "1"});
    EXPECT_EQ(resumed.code, 0) << resumed.err << resumed.out;
    EXPECT_TRUE(has(resumed.out, "(step 1)")) << resumed.out;
}

// Issue 41: a chat shard with fewer rows than -b is refused with the -b that fits (the README's recipe gave 3
// train rows and -b 4, and the refusal did not say what would do), the train shard first, then the val one.
TEST_F(SftTest, TooFewRowsSaysWhichBatchSizeFits) {
    const int T = 32;
    const std::string data =
        chat_shard("train.bin", {row(T, {20}, {5}, 1), row(T, {20}, {5}, 2), row(T, {20}, {5}, 3)}, T);
    const std::string val = chat_shard("val.bin", {row(T, {20}, {5}, 4)}, T);
    for (const char* bin : {kCpu, kEmu}) {
        if (!have_binary(bin)) continue;
        EXPECT_TRUE(
            CleanError(train(data, val, Args{"-b", "4", "-x", "1"}, bin),
                       {data, "3 rows, one batch needs B = 4 rows: use -b 3 or fewer", "smaller --seq-len"}));
        EXPECT_TRUE(CleanError(train(data, val, Args{"-b", "2", "-x", "1"}, bin),
                               {val, "1 row, one batch needs B = 2 rows: use -b 1, or re-make"}));
    }
}

// Issue 41: a chat run's sample starts from a prompt in the run's template, the first val conversation up to
// where its answer starts (the tokens before its first target), printed apart from the completion (before:
// an unprompted sample after <|endoftext|>, which reads like a failed fine-tune). Both trainers.
TEST_F(SftTest, TheSampleAnswersTheFirstValPrompt) {
    const int T = 32;
    const std::vector<Tok> first = row(T, {20}, {5}, 4);  // the answer starts at token 15
    const std::string data = chat_shard("train.bin", {row(T, {20}, {5}, 1), row(T, {24}, {6}, 2)}, T);
    const std::string val = chat_shard("val.bin", {first}, T);
    Tokenizer tok;
    char err[600];
    ASSERT_TRUE(tokenizer_init(&tok, "gpt2_tokenizer.bin", err, sizeof err)) << err;
    std::string want = "prompt (the first val conversation, up to its answer):\n---\n";
    for (int j = 0; j < 15; j++) {  // as print_token prints them
        const char* piece = tokenizer_decode(&tok, (uint32_t)first[j].id);
        const unsigned char c = piece ? (unsigned char)piece[0] : 0;
        if (piece && c && !(piece[1] == '\0' && c < 0x80 && !(isprint(c) || isspace(c)))) want += piece;
    }
    want += "\n---\ngenerating:\n---\n";
    tokenizer_free(&tok);
    for (const char* bin : {kCpu, kEmu}) {
        if (!have_binary(bin)) continue;
        const Result r = train(data, val, Args{"-b", "1", "-x", "1", "-v", "0", "-g", "4"}, bin);
        ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.err << r.out;
        const size_t at = r.out.find(want);
        ASSERT_NE(at, std::string::npos) << bin << "\n" << r.out;
        const size_t end = r.out.find("\n---\n", at + want.size());
        ASSERT_NE(end, std::string::npos) << r.out;
        EXPECT_GT(end, at + want.size()) << "an empty completion";
    }
}

// train_gpt's cuDNN path on chat rows, end to end on the emulation's cuDNN stand-in (LLMC_FAKE_CUDNN=1,
// test/fake_cuda/fake_cudnn.h): chosen by default, each micro-batch's conversations as ragged sequences. The
// plan holds the workspace of a bucket of 4 sequences a row; a micro-batch of more (row 1: 10 conversations
// and its padding, a bucket of 16) would need more than the plan holds, and runs our fused kernel (head size
// 32), or where our kernel does not take the head size (16), cuBLAS + softmax, whose scores the plan then
// holds (before, that micro-batch ended the run): said once, counted at the end, GPU memory as planned. The
// losses track the other path's (-F 1, or -F 0) within 5e-3 relative (test_gpu's bound for cuDNN against
// fused: both keep scores in fp32 and round P to bf16; the cuBLAS path rounds them to bf16 too).
TEST_F(SftTest, CudnnPathOnChatRowsFallsBackWhereThePlanEnds) {
    if (!have_binary(kEmu)) GTEST_SKIP() << kEmu << " not built";
    const int T = 32;
    const std::vector<int> lens(10, 3), targets(10, 1);
    const std::string data =
        chat_shard("train.bin", {row(T, {12, 14}, {2, 1}, 1), row(T, lens, targets, 2)}, T);
    for (const char* spec : {"L2:C128:NH4:T32", "L2:C64:NH4:T32"}) {
        SCOPED_TRACE(spec);
        const bool fused_hs = std::string(spec) == "L2:C128:NH4:T32";
        const Args run = {"-e", spec, "-b", "1", "-d", "64", "-x", "3", "-v", "0"};
        setenv("LLMC_FAKE_CUDNN", "1", 1);
        setenv("LLMC_EMU_RACECHECK", "1", 1);  // the ragged metadata's staging and uploads ordered too
        const Result cudnn = train(data, data, run, kEmu);
        unsetenv("LLMC_EMU_RACECHECK");
        const Result other = train(data, data, run + Args{"-F", fused_hs ? "1" : "0"}, kEmu);
        unsetenv("LLMC_FAKE_CUDNN");
        ASSERT_EQ(cudnn.code, 0) << cudnn.cmd << "\n" << cudnn.err << cudnn.out;
        ASSERT_EQ(other.code, 0) << other.cmd << "\n" << other.err << other.out;
        const std::string path = fused_hs ? "our fused kernel" : "cuBLAS + softmax";
        EXPECT_TRUE(has(cudnn.out, "cuDNN 9.19.0 SDPA")) << cudnn.out;
        EXPECT_TRUE(has(cudnn.out, "race check: no races")) << cudnn.out;
        EXPECT_TRUE(has(cudnn.err, "attention: a chat micro-batch runs " + path +
                                       ", not cuDNN: cuDNN's graphs for it need "))
            << cudnn.err;
        EXPECT_TRUE(has(cudnn.out, "attention: 3 of 6 chat micro-batches ran " + path + ", not cuDNN"))
            << cudnn.out;
        EXPECT_FALSE(has(other.out + other.err, "cuDNN")) << "-F 0 / 1 try no cuDNN\n"
                                                          << other.out << other.err;
        const auto a = step_losses(cudnn.out), b = step_losses(other.out);
        ASSERT_EQ(a.size(), 3u) << cudnn.out;
        ASSERT_EQ(b.size(), 3u) << other.out;
        for (int s = 1; s <= 3; s++) {
            const double x = atof(a.at(s).c_str()), y = atof(b.at(s).c_str());
            EXPECT_LE(fabs(x - y), 5e-3 * y) << "step " << s << ": cuDNN " << x << ", the other path " << y;
        }
    }
}

// -F -1 times cuDNN against our fused kernels at the run's shape (here chat rows: the ragged graph) and runs
// the faster; a tie within 3% is cuDNN's. The emulation times nothing (0 ms each: cuDNN), so
// LLMC_TEST_ATTN_MS sets the two figures. Ours faster: the run says so in one line and trains bit for bit as
// -F 1 does (the same kernels and plan); cuDNN faster, or ours within 3%: cuDNN runs and the config table has
// both figures; -F 2 runs cuDNN untimed.
TEST_F(SftTest, DefaultAttentionIsTheFasterOfCudnnAndOurs) {
    if (!have_binary(kEmu)) GTEST_SKIP() << kEmu << " not built";
    const int T = 32;
    const std::string data = chat_shard("train.bin", {row(T, {12, 14}, {2, 1}, 1), row(T, {30}, {20}, 2)}, T);
    const Args run = {"-e", "L2:C128:NH4:T32", "-b", "1", "-d", "64", "-x", "3", "-v", "0"};
    auto with = [&](const char* ms, const Args& more) {
        setenv("LLMC_FAKE_CUDNN", "1", 1);
        setenv("LLMC_TEST_ATTN_MS", ms, 1);
        const Result r = train(data, data, run + more, kEmu);
        unsetenv("LLMC_FAKE_CUDNN");
        unsetenv("LLMC_TEST_ATTN_MS");
        EXPECT_EQ(r.code, 0) << r.cmd << "\n" << r.err << r.out;
        return r;
    };
    const Result ours = with("2,1", {}), fused = train(data, data, run + Args{"-F", "1"}, kEmu);
    ASSERT_EQ(fused.code, 0) << fused.cmd << "\n" << fused.err << fused.out;
    EXPECT_TRUE(
        has(ours.out,
            "attention: our fused kernels, faster than cuDNN here (a micro-batch's attention (forward "
            "twice, as recomputed, and backward) at this shape: cuDNN 2 ms, ours 1 ms; -F 2 runs cuDNN)"))
        << ours.out;
    EXPECT_TRUE(
        has(ours.out, "fused tensor-core kernels (flash_attention.cuh); cuDNN not used: cuDNN 9.19.0"))
        << ours.out;
    const auto a = step_losses(ours.out), b = step_losses(fused.out);
    ASSERT_EQ(a.size(), 3u) << ours.out;
    EXPECT_EQ(a, b) << "-F -1 on our kernels against -F 1";
    for (const char* ms : {"1,2", "1,0.98"}) {
        SCOPED_TRACE(ms);
        const Result cudnn = with(ms, {});
        EXPECT_TRUE(has(cudnn.out, std::string("at this shape: cuDNN 1 ms, ours ") +
                                       (ms[2] == '2' ? "2" : "0.98") + " ms, workspace"))
            << cudnn.out;
        EXPECT_FALSE(has(cudnn.out, "faster than cuDNN")) << cudnn.out;
    }
    const Result forced = with("2,1", {"-F", "2"});
    EXPECT_TRUE(has(forced.out, "cuDNN 9.19.0 SDPA (")) << forced.out;
    EXPECT_FALSE(has(forced.out, "at this shape")) << "-F 2 times nothing\n" << forced.out;
}
