// test_eval.cpp — -h, the multiple-choice (HellaSwag) evaluation: llmc/evalloader.h's reader against files
// written here (both id widths; every malformed field one error line naming the example), its batches
// (rows, targets, the rows past the set's end) and its scoring (the mean loss over a completion's targets,
// the first lowest on a tie); then the trainers as subprocesses: train_gpt_cpu and the emulated train_gpt
// learn a repeating text and score an eval set built from it, in which 10 of 13 labels are right and 3 point
// at a wrong completion, 10/13 at the end, on the step lines and in main.log; several emulated ranks, and -E
// 1 with 4 micro-batches a step (4 batches a forward pass), the same; a bad file or shape is one error line.
// Not here: the data script (test_chat_data runs dev/data/hellaswag.py), real HellaSwag (no download at test
// time).
#include "cli_test_common.h"
#include "llmc/evalloader.h"

namespace {

struct Ex {
    int label;
    std::vector<int> ctx, comp[4];
};
// An eval file of `ex`: width 2 (uint16) or 4 (uint32); patch(words) may change the example words first
std::vector<uint32_t> example_words(const Ex& e, int index, int width) {
    std::vector<uint32_t> w = {width == 2 ? 0xFFFFu : 0xFFFFFFFFu, 0, (uint32_t)index, (uint32_t)e.label, 4};
    w.push_back((uint32_t)e.ctx.size());
    for (int t : e.ctx) w.push_back((uint32_t)t);
    for (int c = 0; c < 4; c++) {
        w.push_back((uint32_t)e.comp[c].size());
        for (int t : e.comp[c]) w.push_back((uint32_t)t);
    }
    w[1] = (uint32_t)(w.size() * width);
    return w;
}
void write_eval(const std::string& path, const std::vector<std::vector<uint32_t>>& examples, int width,
                int count = -1) {
    int32_t h[256] = {0};
    h[0] = width == 2 ? EVAL_MAGIC_U16 : EVAL_MAGIC_U32;
    h[1] = width == 2 ? EVAL_VERSION_U16 : EVAL_VERSION_U32;
    h[2] = count >= 0 ? count : (int)examples.size();
    FILE* f = fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    for (const auto& e : examples) h[3] = std::max(h[3], (int32_t)(e.size() * width));
    fwrite(h, sizeof h, 1, f);
    for (const auto& e : examples)
        for (uint32_t x : e) {
            if (width == 2) {
                const uint16_t v = (uint16_t)x;
                fwrite(&v, 2, 1, f);
            } else fwrite(&x, 4, 1, f);
        }
    fclose(f);
}
std::vector<Ex> three() {
    return {{2, {5, 6}, {{7}, {8, 9}, {10}, {11, 12, 13}}},
            {0, {70000}, {{1}, {2}, {3}, {4}}},
            {3, {1, 2, 3}, {{4}, {4}, {4}, {4, 5}}}};
}

}  // namespace

TEST(EvalLoader, ReadsBothWidthsAndBatches) {
    char tmpl[] = "/tmp/test_eval_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::string dir = tmpl;
    for (int width : {2, 4}) {
        std::vector<Ex> ex = three();
        if (width == 2) ex[1].ctx = {700};
        std::vector<std::vector<uint32_t>> words;
        for (size_t i = 0; i < ex.size(); i++) words.push_back(example_words(ex[i], (int)i, width));
        const std::string path = dir + "/e" + std::to_string(width) + ".bin";
        write_eval(path, words, width);
        EvalSet set;
        char err[1024] = "";
        ASSERT_TRUE(evalset_read(path.c_str(), &set, err, sizeof err)) << err;
        ASSERT_EQ(set.examples.size(), 3u);
        EXPECT_EQ(set.examples[0].label, 2);
        EXPECT_EQ(set.examples[1].context, std::vector<int>{width == 2 ? 700 : 70000});
        EXPECT_EQ(set.examples[2].completion[3], (std::vector<int>{4, 5}));
        EXPECT_EQ(set.longest, 5);  // 1 2 3 | 4 5
        EXPECT_EQ(set.max_id, width == 2 ? 700 : 70000);
        const int V = width == 2 ? 65536 : 70001;  // uint16 ids: a vocabulary of at most 65536
        EXPECT_TRUE(evalset_check_fit(&set, 4, 5, V, err, sizeof err)) << err;
        EXPECT_FALSE(evalset_check_fit(&set, 4, 4, V, err, sizeof err));
        EXPECT_TRUE(has(err, "rows of 5 tokens, longer than -t 4")) << err;
        EXPECT_FALSE(evalset_check_fit(&set, 3, 8, V, err, sizeof err));
        EXPECT_TRUE(has(err, "-b 3 is too small")) << err;
        EXPECT_FALSE(evalset_check_fit(&set, 4, 8, set.max_id, err, sizeof err));
        EXPECT_TRUE(has(err, "past the model's vocabulary")) << err;
        if (width == 2) {  // a uint16 file on a vocabulary past 65536: another tokenizer's
            EXPECT_FALSE(evalset_check_fit(&set, 4, 8, 65537, err, sizeof err));
            EXPECT_TRUE(has(err, "holds uint16 ids")) << err;
        }

        // B 8: two examples a batch; the second batch holds one, its other rows empty
        const int B = 8, T = 6;
        std::vector<int> in(B * T), tg(B * T), labels(B);
        EXPECT_EQ(evalset_batch(&set, 0, B, T, in.data(), tg.data(), labels.data()), 2);
        EXPECT_EQ(labels[0], 2);
        EXPECT_EQ(labels[1], 0);
        // example 0, completion 1: 5 6 8 9 | targets at 1, 2 (the tokens before 8 and 9)
        EXPECT_EQ(std::vector<int>(in.begin() + 1 * T, in.begin() + 1 * T + 5),
                  (std::vector<int>{5, 6, 8, 9, 0}));
        EXPECT_EQ(std::vector<int>(tg.begin() + 1 * T, tg.begin() + 2 * T),
                  (std::vector<int>{-1, 8, 9, -1, -1, -1}));
        EXPECT_EQ(evalset_batch(&set, 2, B, T, in.data(), tg.data(), labels.data()), 1);
        EXPECT_EQ(std::count(tg.begin() + 4 * T, tg.end(), -1), 4 * T) << "rows past the set: no targets";
        EXPECT_EQ(std::count(in.begin() + 4 * T, in.end(), 0), 4 * T);
    }
    system(("rm -rf " + dir).c_str());
}

// Every malformed field: one line naming the file and, where it is an example's, which.
TEST(EvalLoader, MalformedFilesSayWhere) {
    char tmpl[] = "/tmp/test_eval_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::string dir = tmpl, path = dir + "/bad.bin";
    const std::vector<Ex> ex = three();
    auto words = [&]() {
        std::vector<std::vector<uint32_t>> w;
        for (size_t i = 0; i < ex.size(); i++) w.push_back(example_words(ex[i], (int)i, 2));
        return w;
    };
    auto expect_error = [&](const std::vector<std::vector<uint32_t>>& w, int count, const char* want) {
        write_eval(path, w, 2, count);
        EvalSet set;
        char err[1024] = "";
        EXPECT_FALSE(evalset_read(path.c_str(), &set, err, sizeof err)) << want;
        EXPECT_TRUE(has(err, want)) << err;
        EXPECT_TRUE(has(err, path)) << err;
        EXPECT_EQ(strchr(err, '\n'), nullptr) << err;
    };
    auto w = words();
    w[1][0] = 7;
    expect_error(w, -1, "example 1 of 3: no example delimiter");
    w = words();
    w[2][2] = 5;
    expect_error(w, -1, "example 2 of 3: its index is not its place");
    w = words();
    w[0][3] = 4;
    expect_error(w, -1, "example 0 of 3: its label is not 0..3");
    w = words();
    w[0][4] = 3;
    expect_error(w, -1, "it does not have 4 completions");
    w = words();
    w[0][5] = 0;  // an empty context
    expect_error(w, -1, "a part is empty");
    w = words();
    w[1][1] += 2;  // its byte count one id longer than its parts
    expect_error(w, -1, "example 1 of 3");
    w = words();
    w.pop_back();
    expect_error(w, 3, "example 2 of 3: the file ends inside it");
    expect_error(words(), 2, "bytes after its 2 examples");
    expect_error(words(), 0, "truncated or not an eval file");
    // a shard is not an eval file; nor is nothing
    write_eval(path, words(), 2);
    {
        FILE* f = fopen(path.c_str(), "r+b");
        const int32_t magic = 20240520;
        fwrite(&magic, 4, 1, f);
        fclose(f);
    }
    EvalSet set;
    char err[1024] = "";
    EXPECT_FALSE(evalset_read(path.c_str(), &set, err, sizeof err));
    EXPECT_TRUE(has(err, "magic 20240520 version 1, not an eval file")) << err;
    EXPECT_FALSE(evalset_read((dir + "/none.bin").c_str(), &set, err, sizeof err));
    EXPECT_TRUE(has(err, "cannot open the eval file")) << err;
    system(("rm -rf " + dir).c_str());
}

// A completion's score is the mean loss over its targets; the lowest wins, the first of equals.
TEST(EvalLoader, ScoresByMeanLossOverTheCompletion) {
    const int T = 4, n = 2;
    std::vector<int> targets(8 * T, -1), labels = {1, 0};
    std::vector<float> losses(8 * T, 100.0f);  // where there is no target: ignored
    // example 0: completion 1 has the lowest mean (1 + 3) / 2 = 2 against 2.5, 3, 9
    const float means[2][4] = {{2.5f, 0, 3.0f, 9.0f}, {5.0f, 5.0f, 7.0f, 6.0f}};
    for (int e = 0; e < n; e++)
        for (int c = 0; c < 4; c++) {
            const int row = (e * 4 + c) * T;
            targets[row + 1] = 1;
            losses[row + 1] = means[e][c];
        }
    targets[(0 * 4 + 1) * T + 1] = 1, losses[(0 * 4 + 1) * T + 1] = 1.0f;
    targets[(0 * 4 + 1) * T + 2] = 1, losses[(0 * 4 + 1) * T + 2] = 3.0f;
    EXPECT_EQ(evalset_correct(losses.data(), targets.data(), labels.data(), n, T), 2)
        << "example 1: completions 0 and 1 tie at 5, the first wins (its label 0)";
    labels = {1, 1};
    EXPECT_EQ(evalset_correct(losses.data(), targets.data(), labels.data(), n, T), 1);
    EXPECT_EQ(evalset_correct(losses.data(), targets.data(), labels.data(), 1, T), 1);
}

// ----------------------------------------------------------------------------
// The trainers: a repeating text of 6 sentences ("<s> c_j n_j is here ."), learned in a few steps; the eval
// set asks which noun follows each colour, 13 examples, 3 of them (9-11) labelled wrong: a model that learned
// it scores 10/13 exactly (its margins are far wider than bf16's rounding).

class EvalRun : public CliTest {
  protected:
    std::string train, val, eval;
    void SetUp() override {
        CliTest::SetUp();
        std::vector<uint16_t> text;
        for (int i = 0; i < 12000; i++) {
            const int j = i % 6;
            for (int t : {50256, 464, 1000 + j, 2000 + j, 318, 994, 13}) text.push_back((uint16_t)t);
        }
        train = shard_of("train.bin", text);
        val = shard_of("val.bin", std::vector<uint16_t>(text.begin(), text.begin() + 4096));
        std::vector<std::vector<uint32_t>> words;
        for (int k = 0; k < 13; k++) {
            const int j = k % 6, right = k % 4;
            Ex e;
            e.ctx = {50256, 464, 1000 + j};
            for (int c = 0, d = 1; c < 4; c++)
                e.comp[c] = {c == right ? 2000 + j : 2000 + (j + d++) % 6, 318, 994, 13};
            e.label = k >= 9 && k <= 11 ? (right + 1) % 4 : right;
            words.push_back(example_words(e, k, 2));
        }
        eval = dir + "/eval.bin";
        write_eval(eval, words, 2);
    }
    // 60 steps at a constant 3e-3: both families' val loss ~0.2 by then, 10/13 from step 30 on
    // (train_gpt_cpu)
    Args args(const std::string& model, bool out = true) {
        Args a = {"-e", model, "-i",       train, "-j",   val,  "-b", "4",  "-t", "32", "-x", "60", "-u",
                  "0",  "-k",  "constant", "-l",  "3e-3", "-v", "30", "-m", "2",  "-g", "0",  "-h", eval};
        return out ? a + Args{"-o", dir + "/out"} : a;
    }
    // the "HellaSwag: R/N = A" lines, in order
    static std::vector<std::string> scores(const std::string& out) {
        std::vector<std::string> s;
        std::istringstream in(out);
        for (std::string line; std::getline(in, line);)
            if (line.rfind("HellaSwag: ", 0) == 0) s.push_back(line.substr(11, line.find(' ', 11) - 11));
        return s;
    }
};

TEST_F(EvalRun, BothTrainersScoreWhatTheyLearned) {
    for (const char* bin : {kCpu, kEmu}) {
        if (!have_binary(bin)) continue;
        for (const char* model : {"L2:C64:NH4", "llama:L2:C64:NH4:KV2:I128:V50257"}) {
            system(("rm -rf " + dir + "/out").c_str());
            const Result r = run_bin(bin, args(model));
            ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.err;
            EXPECT_TRUE(has(r.out, "eval.bin: 13 examples, 1 a batch")) << r.out;
            const std::vector<std::string> s = scores(r.out);
            ASSERT_EQ(s.size(), 2u) << r.out;  // steps 30 and 60 (llm.c's: not step 0)
            EXPECT_EQ(s[1], "10/13") << bin << " " << model << "\n" << r.out;
            EXPECT_TRUE(has(slurp(dir + "/out/main.log"), "s:60 eval:0.769231"))
                << slurp(dir + "/out/main.log");
        }
    }
}

// Several ranks: the model one rank learned, scored by 2 ranks at -b 12 (3 examples a batch, 5 batches, the
// last holding one), 2 batches a rank a forward pass: the second round's one batch is rank 0's, rank 1 scores
// nothing there. -l 0 keeps the weights of the step before the score. -E 1: 4 batches a forward pass.
TEST_F(EvalRun, RanksAndTheVocabularyOnTheHostScoreTheSame) {
    if (!have_binary(kEmu)) GTEST_SKIP() << "no emulated train_gpt";
    Result r = run_bin(kEmu, args("L2:C64:NH4"));
    ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.err;
    ASSERT_EQ(scores(r.out).back(), "10/13") << r.out;
    r = run_bin(kEmu,
                args(dir + "/out", false) + Args{"-pn", "2", "-b", "12", "-d", "1536", "-x", "1", "-l", "0"});
    ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.err;
    EXPECT_TRUE(has(r.out, "eval.bin: 13 examples, 3 a batch")) << r.out;
    EXPECT_EQ(scores(r.out), std::vector<std::string>{"10/13"}) << r.cmd << "\n" << r.out;
    system(("rm -rf " + dir + "/out").c_str());
    r = run_bin(kEmu, args("llama:L2:C64:NH4:KV2:I128:V50257") + Args{"-E", "1", "-d", "512"});
    ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.err;
    const std::vector<std::string> s = scores(r.out);
    ASSERT_EQ(s.size(), 2u) << r.out;
    EXPECT_EQ(s[1], "10/13") << r.cmd << "\n" << r.out;
}

// A resume scores its first step again: main.log keeps one eval line a step (as its tel lines).
TEST_F(EvalRun, AResumeWritesEachStepsScoreOnce) {
    const Args a = args("L2:C64:NH4") + Args{"-v", "2", "-m", "1"};
    Result r = run_bin(kCpu, a + Args{"-x", "4"});
    ASSERT_EQ(r.code, 0) << r.err;
    r = run_bin(kCpu, a + Args{"-x", "6", "-y", "1"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(scores(r.out).size(), 2u) << r.out;  // steps 4 (again) and 6
    const std::string log = slurp(dir + "/out/main.log");
    for (const char* step : {"s:2 eval:", "s:4 eval:", "s:6 eval:"}) {
        const size_t at = log.find(step);
        EXPECT_NE(at, std::string::npos) << step << "\n" << log;
        EXPECT_EQ(log.find(step, at + 1), std::string::npos) << step << " twice\n" << log;
    }
}

TEST_F(EvalRun, BadEvalInputIsOneErrorLine) {
    for (const char* bin : {kCpu, kEmu}) {
        if (!have_binary(bin)) continue;
        const Args base = args("L2:C64:NH4", false) + Args{"-x", "1"};
        EXPECT_TRUE(
            CleanError(run_bin(bin, base + Args{"-h", dir + "/none.bin"}), {"cannot open the eval file"}));
        EXPECT_TRUE(CleanError(run_bin(bin, base + Args{"-h", train}), {"not an eval file"}));
        EXPECT_TRUE(CleanError(run_bin(bin, base + Args{"-h", "/dev/zero"}), {"not a regular file"}));
        // a uint16 file (at most 65535 ids) on a larger vocabulary: made with another tokenizer
        EXPECT_TRUE(CleanError(run_bin(bin, base + Args{"-e", "llama:L2:C64:NH4:KV2:I128:V70000"}),
                               {"holds uint16 ids", "vocabulary is 70000"}));
        EXPECT_TRUE(CleanError(run_bin(bin, base + Args{"-b", "2"}), {"-b 2 is too small"}));
        EXPECT_TRUE(
            CleanError(run_bin(bin, base + Args{"-t", "4", "-e", "L2:C64:NH4:T4"}), {"longer than -t 4"}));
        EXPECT_TRUE(CleanError(run_bin(bin, base + Args{"-h", ""}), {"flag -h: 0, 1 or an eval file"}));
        // -h 1 is llm.c's file, not there in this checkout
        EXPECT_TRUE(
            CleanError(run_bin(bin, base + Args{"-h", "1"}), {"dev/data/hellaswag/hellaswag_val.bin"}));
        // -h 0: none; -h alone: the help
        const Result none = run_bin(bin, base + Args{"-h", "0"});
        EXPECT_EQ(none.code, 0) << none.err;
        EXPECT_FALSE(has(none.out, "HellaSwag")) << none.out;
        const Result help = run_bin(bin, Args{"-h"});
        EXPECT_EQ(help.code, 0) << help.err;
        EXPECT_TRUE(has(help.out, "-h <0|1|file>")) << help.out;
    }
}
