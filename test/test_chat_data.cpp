// test_chat_data.cpp — GoogleTest suite for the data tools that use a model's own tokenizer, read back
// through dataloader.h: dev/data/hf_tokenize.py against the GPT-2 encoder of gpt2_bpe.h (the shipped shards
// byte for byte, tricky text, a vocabulary past 65536 as uint32), and dev/data/chat_shards.py on
// dev/data/chats.jsonl: the ids against an independent encoding, exactly the assistant turns as targets (by
// decoding), positions, packing, splitting, the summary's counts, the special tokens in the header, the two
// shards replaced together (never through a symlink), the prefix method's bounded renders, and every bad
// input named by its line; dev/data/hellaswag.py's eval files as llmc/evalloader.h reads them (GPT-2's BPE
// from the shipped files and from a tokenizer.json, a vocabulary past 65536 as uint32). The tokenizers are
// built offline from the shipped GPT-2 files (test/make_test_tokenizers.py). It needs Python with tokenizers,
// transformers and jinja2 ($HF_PYTHON, else .venv-hf): without them it skips, unless HF_REQUIRED=1. Run from
// the repo root.
#include <fstream>              // defines: std::ifstream, std::ofstream
#include "cli_test_common.h"    // defines: CliTest (a scratch dir), run, Result, slurp, has
#include "dev/data/gpt2_bpe.h"  // defines: GPT2BPE, gpt2_bpe_load, gpt2_bpe_encode, gpt2_bpe_decode
#include "llmc/evalloader.h"    // defines: EvalSet, evalset_read (hellaswag.py's files)
#include "llmc/json.h"          // defines: Json, json_parse

static const char* const kChats = "dev/data/chats.jsonl";
static const int kEot = 50256;
// The test tokenizers' special tokens after GPT-2's 50257 (make_test_tokenizers.py): chatml, then llama3.
static const std::vector<std::string> kChatml = {"<|im_start|>", "<|im_end|>"};
static const std::vector<std::string> kLlama3 = {"<|begin_of_text|>", "<|start_header_id|>",
                                                 "<|end_header_id|>", "<|eot_id|>"};
static const std::vector<std::string>* added = &kChatml;  // what dec() reads ids past 50256 as

// The Python with tokenizers and transformers: $HF_PYTHON, else .venv-hf (.ci/run makes it), else python3.
static std::string hf_python() {
    if (const char* p = getenv("HF_PYTHON")) return p;
    if (access(".venv-hf/bin/python", X_OK) == 0) return ".venv-hf/bin/python";
    return "python3";
}

static GPT2BPE* bpe() {
    static GPT2BPE b;
    static bool loaded = false;
    if (!loaded) {
        std::string err;
        loaded = gpt2_bpe_load(&b, "dev/data/gpt2/encoder.json", "dev/data/gpt2/vocab.bpe", &err);
        EXPECT_TRUE(loaded) << err;
    }
    return &b;
}
static std::vector<int> enc(const std::string& s) { return gpt2_bpe_encode(bpe(), s); }
// GPT-2 ids and the test tokenizers' added specials back to text.
static std::string dec(const std::vector<int>& ids) {
    std::string out;
    for (int id : ids) {
        if (id > kEot && id - kEot - 1 < (int)added->size()) out += (*added)[(size_t)(id - kEot - 1)];
        else out += gpt2_bpe_decode(bpe(), {id});
    }
    return out;
}

struct Msg {
    std::string role, content;
};
typedef std::vector<Msg> Conv;

// chats.jsonl's conversations, both forms, read with hf.h's JSON reader (not the tool's).
static std::vector<Conv> read_chats(const char* path) {
    std::vector<Conv> out;
    std::istringstream lines(slurp(path));
    std::string line;
    while (std::getline(lines, line)) {
        Json j;
        char err[300];
        EXPECT_TRUE(json_parse(line.data(), line.size(), &j, err, sizeof err)) << err;
        Conv c;
        if (const Json* m = j.get("messages")) {
            for (const Json& x : m->items) c.push_back({x.get("role")->str, x.get("content")->str});
        } else {
            if (const Json* s = j.get("system")) c.push_back({"system", s->str});
            const Json* in = j.get("input");
            c.push_back(
                {"user", j.get("instruction")->str + (in && !in->str.empty() ? "\n\n" + in->str : "")});
            c.push_back({"assistant", j.get("output")->str});
        }
        out.push_back(c);
    }
    return out;
}

// chat_shards.py's plain template, by hand: ids piece by piece, and which are targets.
static void plain_encoding(const Conv& c, std::vector<int>* ids, std::vector<char>* mask) {
    auto add = [&](const std::vector<int>& v, bool target) {
        ids->insert(ids->end(), v.begin(), v.end());
        mask->insert(mask->end(), v.size(), target);
    };
    add({kEot}, false);
    for (const Msg& m : c) {
        add(enc("<|" + m.role + "|>\n"), false);
        if (m.role == "assistant") {
            add(enc(m.content), true);
            add({kEot}, true);
        } else {
            add(enc(m.content + "\n"), false);
        }
    }
}

// One conversation piece as the loader gives it: from a start flag to the next start, pad or row end.
struct Segment {
    std::vector<int> ids, targets, pos;
    std::vector<char> target_flag;  // the token is a target (targets[i-1] != -1)
};

// Every row of a chat shard through dataloader.h (B=1, in order), cut into segments; checks the loader's
// invariants on the way: pos restarts at 0 on a start flag and counts up, a target is the next input of the
// same segment, batch_targets counts them.
static std::vector<Segment> read_segments(const std::string& path, int T, int64_t* targets_total) {
    std::vector<Segment> segs;
    DataLoader dl;
    char err[512];
    EXPECT_EQ(dataloader_init(&dl, path.c_str(), 1, T, 0, 0, err, sizeof err), 1) << err;
    *targets_total = 0;
    for (int64_t b = 0; b < dl.num_batches; b++) {
        EXPECT_EQ(dataloader_next_batch(&dl), 1) << dl.err;
        EXPECT_EQ(dataloader_check_tokens(&dl, 50261, err, sizeof err), 1) << err;
        int64_t count = 0;
        for (int i = 0; i < T; i++) {
            const uint8_t f = dl.flags[i];
            EXPECT_EQ(dl.pos[i] == 0, (f & CHAT_START) != 0) << path << " row " << b << " token " << i;
            if (i > 0 && !(f & CHAT_START)) { EXPECT_EQ(dl.pos[i], dl.pos[i - 1] + 1); }
            if (dl.targets[i] != -1) {
                count++;
                EXPECT_LT(i + 1, T);
                EXPECT_EQ(dl.targets[i], dl.inputs[i + 1]);
                EXPECT_EQ(dl.pos[i + 1], dl.pos[i] + 1) << "a target across conversations";
            }
            if (f & CHAT_PAD) {
                EXPECT_EQ(dl.targets[i], -1);
                continue;
            }
            if (f & CHAT_START) segs.push_back(Segment());
            Segment& s = segs.back();
            s.ids.push_back(dl.inputs[i]);
            s.pos.push_back(dl.pos[i]);
            s.target_flag.push_back(i > 0 && dl.targets[i - 1] != -1);
        }
        EXPECT_EQ(dl.batch_targets, count);
        *targets_total += count;
    }
    EXPECT_EQ(dl.epoch, 1);
    dataloader_free(&dl);
    return segs;
}

// The runs of consecutive targets of a segment, decoded.
static std::vector<std::string> target_runs(const Segment& s) {
    std::vector<std::string> runs;
    std::vector<int> cur;
    for (size_t i = 0; i <= s.ids.size(); i++) {
        if (i < s.ids.size() && s.target_flag[i]) {
            cur.push_back(s.ids[i]);
        } else if (!cur.empty()) {
            runs.push_back(dec(cur));
            cur.clear();
        }
    }
    return runs;
}

// "name: N conversations, R rows of T, ... " -> the numbers of one summary line, by word.
static std::map<std::string, int64_t> summary(const std::string& out, const std::string& name) {
    std::map<std::string, int64_t> m;
    std::smatch g;
    const std::regex re(name +
                        ": ([0-9]+) conversations, ([0-9]+) rows of [0-9]+, ([0-9]+) tokens, ([0-9]+) target "
                        "tokens, ([0-9]+) padding, ([0-9]+) split, ([0-9]+) dropped");
    EXPECT_TRUE(std::regex_search(out, g, re)) << out;
    if (g.size() < 8) return m;
    const char* keys[] = {"convs", "rows", "tokens", "targets", "pads", "split", "dropped"};
    for (int i = 0; i < 7; i++) m[keys[i]] = std::stoll(g[i + 1]);
    return m;
}

static std::vector<int32_t> header(const std::string& path) {
    const std::string raw = slurp(path);
    std::vector<int32_t> h(256, 0);
    if (raw.size() >= 1024) memcpy(h.data(), raw.data(), 1024);
    return h;
}

class ChatData : public CliTest {
  protected:
    static std::string tok;  // the test tokenizers' directory, made once (needs tokenizers)
    static std::string py;
    static bool chat_ok;  // transformers and jinja2 too (chat_shards.py)
    static void SetUpTestSuite() {
        py = hf_python();
        chat_ok = system((py + " -c 'import transformers, jinja2' >/dev/null 2>&1").c_str()) == 0;
        if (system((py + " -c 'import tokenizers, numpy' >/dev/null 2>&1").c_str()) != 0) return;
        char tmpl[] = "/tmp/test_chat_data_tok_XXXXXX";
        if (!mkdtemp(tmpl)) return;
        const Result r = run(py, {"test/make_test_tokenizers.py", tmpl}, tmpl);
        if (r.code == 0) tok = tmpl;
        else fprintf(stderr, "make_test_tokenizers.py failed:\n%s\n", r.err.c_str());
    }
    static void TearDownTestSuite() {
        if (!tok.empty()) nftw(tok.c_str(), rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    }
    // Skips (fails with HF_REQUIRED=1) when Python lacks what the test needs.
    static bool missing(bool ok, const char* what) {
        if (ok) return false;
        const char* req = getenv("HF_REQUIRED");
        if (req && strcmp(req, "1") == 0) ADD_FAILURE() << py << " lacks " << what << " (HF_REQUIRED=1)";
        else printf("%s lacks %s: .ci/run installs them in .venv-hf\n", py.c_str(), what);
        return true;
    }
    void SetUp() override {
        if (missing(!tok.empty(), "tokenizers or numpy, or the test tokenizers failed")) GTEST_SKIP();
        CliTest::SetUp();
    }
    Result tool(const char* script, const Args& args) {
        Args a = {script};
        a.insert(a.end(), args.begin(), args.end());
        return run_bin(py.c_str(), a);
    }
    Result chat(const std::string& tokenizer, const std::string& input, int T, const Args& more = {}) {
        Args a = {"--tokenizer", tok + "/" + tokenizer, "--input",        input, "--out-prefix",
                  dir + "/c",    "--seq-len",           std::to_string(T)};
        a.insert(a.end(), more.begin(), more.end());
        return tool("dev/data/chat_shards.py", a);
    }
};
std::string ChatData::tok, ChatData::py;
bool ChatData::chat_ok = false;

// ----------------------------------------------------------------------------
// hf_tokenize.py

TEST_F(ChatData, HfTokenizeEqualsTheShippedGpt2Shards) {
    const Result r = tool("dev/data/hf_tokenize.py", {"--tokenizer", tok + "/gpt2/tokenizer.json", "--input",
                                                      "dev/data/tinyshakespeare/tinyshakespeare.txt",
                                                      "--out-prefix", dir + "/ts", "--val-tokens", "32768"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(has(r.out, "7222 documents, 338028 tokens")) << r.out;
    // the shipped shards are build/tokenize's output (test_tokenizer checks that)
    EXPECT_TRUE(slurp(dir + "/ts_val.bin") == slurp("dev/data/tinyshakespeare/tiny_shakespeare_val.bin"));
    EXPECT_TRUE(slurp(dir + "/ts_train.bin") == slurp("dev/data/tinyshakespeare/tiny_shakespeare_train.bin"));
}

// Both shards of a prefix, their ids in order (the header says the width).
static std::vector<int64_t> shard_ids(const std::string& prefix) {
    std::vector<int64_t> ids;
    for (const char* part : {"_val.bin", "_train.bin"}) {
        const std::string raw = slurp(prefix + part);
        const std::vector<int32_t> h = header(prefix + part);
        const int w = h[0] == DATALOADER_MAGIC_U32 ? 4 : 2;
        EXPECT_EQ(raw.size(), 1024 + (size_t)w * (size_t)h[2]) << prefix << part;
        for (size_t i = 1024; i + w <= raw.size(); i += w) {
            uint32_t v = 0;
            memcpy(&v, raw.data() + i, w);
            ids.push_back(v);
        }
    }
    return ids;
}

TEST_F(ChatData, HfTokenizeTrickyTextAsGpt2BpeDoes) {
    // contractions, Unicode letters and digits, whitespace runs, blank-line runs, special-token text
    const std::string text =
        "It's 2026; they'll say \"d\xc3\xa9j\xc3\xa0 vu\" \xe2\x80\x94 \xce\xb1\xce\xb2\xce\xb3 "
        "123,456.\n\n\n"
        "  indented   words\t\ttabs\n\nA literal <|endoftext|> stays text.\n\n\n\nend";
    FILE* f = fopen((dir + "/t.txt").c_str(), "wb");
    fwrite(text.data(), 1, text.size(), f);
    fclose(f);
    const Result r = tool("dev/data/hf_tokenize.py", {"--tokenizer", tok + "/gpt2", "--input", dir + "/t.txt",
                                                      "--out-prefix", dir + "/t", "--val-tokens", "3"});
    ASSERT_EQ(r.code, 0) << r.err;
    std::vector<int64_t> want;
    for (size_t start = 0; start < text.size();) {  // tokenize.cpp's cut
        const size_t cut = text.find("\n\n", start), end = cut == std::string::npos ? text.size() : cut + 2;
        want.push_back(kEot);
        for (int id : enc(text.substr(start, end - start))) want.push_back(id);
        start = end;
    }
    EXPECT_EQ(shard_ids(dir + "/t"), want);
    EXPECT_EQ(header(dir + "/t_val.bin")[0], DATALOADER_MAGIC);
}

// hf_tokenize.py wrote each shard in place (a second trial): through a symbolic link (the file it pointed at
// overwritten), and the val shard before the train one, so a failure left a new val beside the old train
// (the trainer took the pair). Now both or neither, never through a link, the folder made (shard_files.py).
TEST_F(ChatData, HfTokenizeWritesBothShardsOrNeither) {
    FILE* f = fopen((dir + "/p.txt").c_str(), "wb");
    fputs("one two three four five six seven\n\neight nine ten", f);
    fclose(f);
    const Args args = {"--tokenizer", tok + "/gpt2", "--input", dir + "/p.txt", "--val-tokens", "3"};
    const std::string precious = dir + "/precious.txt";
    f = fopen(precious.c_str(), "wb");
    fputs("precious", f);
    fclose(f);
    mkdir((dir + "/link").c_str(), 0755);
    ASSERT_EQ(symlink(precious.c_str(), (dir + "/link/h_val.bin").c_str()), 0);
    EXPECT_TRUE(CleanError(tool("dev/data/hf_tokenize.py", args + Args{"--out-prefix", dir + "/link/h"}),
                           {"h_val.bin is a symbolic link: refusing to write through it"}));
    EXPECT_EQ(slurp(precious), "precious");
    EXPECT_FALSE(file_exists(dir + "/link/h_train.bin")) << "nothing written";
    // a train path that cannot be written (a directory): the old pair stays as it was
    const Result first = tool("dev/data/hf_tokenize.py", args + Args{"--out-prefix", dir + "/pair/h"});
    ASSERT_EQ(first.code, 0) << first.err;  // the folder made
    const std::string val = slurp(dir + "/pair/h_val.bin");
    ASSERT_EQ(unlink((dir + "/pair/h_train.bin").c_str()), 0);
    mkdir((dir + "/pair/h_train.bin").c_str(), 0755);
    f = fopen((dir + "/p.txt").c_str(), "wb");
    fputs("other words entirely, so the val shard would change\n\nmore", f);
    fclose(f);
    EXPECT_TRUE(CleanError(tool("dev/data/hf_tokenize.py", args + Args{"--out-prefix", dir + "/pair/h"}),
                           {"h_train.bin exists and is not a regular file"}));
    EXPECT_EQ(slurp(dir + "/pair/h_val.bin"), val) << "the val shard of the old pair is kept";
}

// hellaswag.py: each context as gpt2_bpe.h encodes it, each ending with one space before it (llm.c's rule);
// the shipped GPT-2 files and the same tokenizer as a tokenizer.json write the same bytes; a vocabulary past
// 65536 ids writes uint32 ids; a line that is not HellaSwag's is one error naming it.
TEST_F(ChatData, HellaswagPyWritesWhatTheEvalLoaderReads) {
    const std::vector<std::string> ctx = {"A man is sitting on a roof. he",
                                          "It's 2026; d\xc3\xa9j\xc3\xa0 vu  <w15999>"};
    const std::vector<std::vector<std::string>> ends = {
        {"is using wrap to wrap a pair of skis.", "is ripping level tiles off.", "starts pulling up roofing.",
         "x"},
        {"a", "b c", "  two spaces", "<|endoftext|> stays text"}};
    std::string jsonl;
    for (int e = 0; e < 2; e++) {
        jsonl += "{\"ind\": " + std::to_string(e) + ", \"ctx\": \"" + ctx[(size_t)e] + "\", \"endings\": [";
        for (int c = 0; c < 4; c++)
            jsonl += std::string(c ? ", " : "") + "\"" + ends[(size_t)e][(size_t)c] + "\"";
        jsonl += "], \"label\": " + std::to_string(3 - e) + "}\n";
    }
    FILE* f = fopen((dir + "/hs.jsonl").c_str(), "wb");
    fwrite(jsonl.data(), 1, jsonl.size(), f);
    fclose(f);
    for (const std::string& t : {std::string("gpt2"), tok + "/gpt2"}) {
        const std::string out = dir + "/hs_" + std::to_string(t.size()) + ".bin";
        const Result r =
            tool("dev/data/hellaswag.py", {"--input", dir + "/hs.jsonl", "--tokenizer", t, "--out", out});
        ASSERT_EQ(r.code, 0) << r.err;
        EXPECT_TRUE(has(r.out, "2 examples, uint16 ids")) << r.out;
        EvalSet set;
        char err[1024];
        ASSERT_TRUE(evalset_read(out.c_str(), &set, err, sizeof err)) << err;
        ASSERT_EQ(set.examples.size(), 2u);
        for (int e = 0; e < 2; e++) {
            EXPECT_EQ(set.examples[(size_t)e].label, 3 - e);
            EXPECT_EQ(set.examples[(size_t)e].context, enc(ctx[(size_t)e]));
            for (int c = 0; c < 4; c++)
                EXPECT_EQ(set.examples[(size_t)e].completion[c], enc(" " + ends[(size_t)e][(size_t)c]))
                    << e << c;
        }
    }
    EXPECT_TRUE(slurp(dir + "/hs_4.bin") ==
                slurp(dir + "/hs_" + std::to_string((tok + "/gpt2").size()) + ".bin"));
    // a vocabulary past 65536: uint32 ids, <w15999> one id
    const Result big = tool("dev/data/hellaswag.py", {"--input", dir + "/hs.jsonl", "--tokenizer",
                                                      tok + "/big", "--out", dir + "/w.bin"});
    ASSERT_EQ(big.code, 0) << big.err;
    EXPECT_TRUE(has(big.out, "2 examples, uint32 ids")) << big.out;
    EvalSet set;
    char err[1024];
    ASSERT_TRUE(evalset_read((dir + "/w.bin").c_str(), &set, err, sizeof err)) << err;
    EXPECT_EQ(set.examples[1].context.back(), 50257 + 15999);
    EXPECT_EQ(header(dir + "/w.bin")[0], EVAL_MAGIC_U32);
    // --bos auto: what the tokenizer puts before a text (Llama 3's <|begin_of_text|>), before each context
    // only
    for (const char* how : {"auto", "none"}) {
        const Result r =
            tool("dev/data/hellaswag.py", {"--input", dir + "/hs.jsonl", "--tokenizer", tok + "/bos", "--bos",
                                           how, "--out", dir + "/bos.bin"});
        ASSERT_EQ(r.code, 0) << r.err;
        ASSERT_TRUE(evalset_read((dir + "/bos.bin").c_str(), &set, err, sizeof err)) << err;
        std::vector<int> want = enc(ctx[0]);
        if (std::string(how) == "auto") want.insert(want.begin(), 50257);
        EXPECT_EQ(set.examples[0].context, want) << how;
        EXPECT_EQ(set.examples[0].completion[0], enc(" " + ends[0][0])) << how;
    }
    // not HellaSwag's: one line naming the line
    f = fopen((dir + "/bad.jsonl").c_str(), "wb");
    fputs("{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": 0}\n", f);
    fclose(f);
    EXPECT_TRUE(
        CleanError(tool("dev/data/hellaswag.py", {"--input", dir + "/bad.jsonl", "--out", dir + "/b.bin"}),
                   {"bad.jsonl:1: want a string ctx, 4 string endings and a label 0..3"}));
    auto bad = [&](const char* line) {
        FILE* b = fopen((dir + "/bad.jsonl").c_str(), "wb");
        fputs(line, b);
        fclose(b);
        return tool("dev/data/hellaswag.py", {"--input", dir + "/bad.jsonl", "--out", dir + "/b.bin"});
    };
    EXPECT_TRUE(
        CleanError(bad("{\"ctx\": \"a\", \"endings\": [\"b\", \"c\", \"d\", \"e\"], \"label\": 1.7}\n"),
                   {"bad.jsonl:1: want a string ctx"}));  // a label that is not a whole number
    EXPECT_TRUE(CleanError(bad("\n{\"ctx\": \"a\", \"endings\": [\"b\", \"c\", \"d\", \"e\"]}\n"),
                           {"bad.jsonl:2: not a HellaSwag line: no 'label'", "test split has no labels"}));
    EXPECT_TRUE(CleanError(tool("dev/data/hellaswag.py", {"--input", dir + "/hs.jsonl", "--out", dir}),
                           {"a directory; name the file"}));
    EXPECT_EQ(access((dir + ".tmp").c_str(), F_OK), -1) << "no stray file beside --out";
}

TEST_F(ChatData, HfTokenizeWideVocabularyWritesUint32) {
    const std::string text = "alpha <w15999> beta\n\n<w00000>gamma";
    FILE* f = fopen((dir + "/w.txt").c_str(), "wb");
    fwrite(text.data(), 1, text.size(), f);
    fclose(f);
    const Result r = tool("dev/data/hf_tokenize.py", {"--tokenizer", tok + "/big", "--input", dir + "/w.txt",
                                                      "--out-prefix", dir + "/w", "--val-tokens", "1"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(has(r.out, "uint32 (version 7) ids, vocabulary 66257")) << r.out;
    std::vector<int64_t> want = {kEot};
    for (int id : enc("alpha ")) want.push_back(id);
    want.push_back(50257 + 15999);
    for (int id : enc(" beta\n\n")) want.push_back(id);
    want.insert(want.end(), {kEot, 50257});
    for (int id : enc("gamma")) want.push_back(id);
    EXPECT_EQ(shard_ids(dir + "/w"), want);
    const std::vector<int32_t> h = header(dir + "/w_train.bin");
    EXPECT_EQ(h[0], DATALOADER_MAGIC_U32);
    EXPECT_EQ(h[1], DATALOADER_VERSION_U32);
    // the loader reads it; a GPT-2-sized model refuses the first id past 50256 with file and byte
    const std::string train = dir + "/w_train.bin";
    DataLoader dl;
    char err[512];
    const int n = h[2];
    ASSERT_EQ(dataloader_init(&dl, train.c_str(), 1, n - 1, 0, 0, err, sizeof err), 1) << err;
    EXPECT_EQ(dl.kind, DL_LLAMA3);
    ASSERT_EQ(dataloader_next_batch(&dl), 1) << dl.err;
    for (int i = 0; i < n - 1; i++) EXPECT_EQ(dl.inputs[i], want[(size_t)i + 1]);
    EXPECT_EQ(dataloader_check_tokens(&dl, 66257, err, sizeof err), 1) << err;
    EXPECT_EQ(dataloader_check_tokens(&dl, 50257, err, sizeof err), 0);
    const int at = (int)enc("alpha ").size();  // train token index of <w15999>
    EXPECT_TRUE(has(err, train + ": token " + std::to_string(at) + " (byte " + std::to_string(1024 + 4 * at) +
                             ") is 66256, outside the model's vocabulary of 50257"))
        << err;
    dataloader_free(&dl);
}

TEST_F(ChatData, HfTokenizeDocTokensFilesAndErrors) {
    auto write = [&](const std::string& name, const std::string& text) {
        FILE* f = fopen((dir + "/" + name).c_str(), "wb");
        fwrite(text.data(), 1, text.size(), f);
        fclose(f);
        return dir + "/" + name;
    };
    const std::string a = write("a.txt", "one two\n\nthree"), b = write("b.txt", "four five six");
    auto hf = [&](const Args& more, const std::string& tokenizer = "gpt2") {
        const Args base = {"--tokenizer", tok + "/" + tokenizer, "--out-prefix",
                           dir + "/o",    "--val-tokens",        "1"};
        return tool("dev/data/hf_tokenize.py", base + more);
    };
    // two files: each file's last document ends at its end; a chosen delimiter, or none
    Result r = hf({"--input", a, b, "--doc-token", "<w00042>"}, "big");
    ASSERT_EQ(r.code, 0) << r.err;
    std::vector<int64_t> want;
    for (const char* d : {"one two\n\n", "three", "four five six"}) {
        want.push_back(50257 + 42);
        for (int id : enc(d)) want.push_back(id);
    }
    EXPECT_EQ(shard_ids(dir + "/o"), want);
    r = hf({"--input", a, b, "--doc-token", "none"});
    ASSERT_EQ(r.code, 0) << r.err;
    want.clear();
    for (const char* d : {"one two\n\n", "three", "four five six"})
        for (int id : enc(d)) want.push_back(id);
    EXPECT_EQ(shard_ids(dir + "/o"), want);
    // bad input: one clear line, exit 1
    const std::string bad = write("bad.txt", "ok \xff\xfe");
    const struct {
        Args args;
        std::string why;
    } cases[] = {
        {{"--input", bad}, bad + ": not UTF-8 at byte 3"},
        {{"--input", a, "--val-tokens", "100"}, "6 tokens: too few for --val-tokens 100"},
        {{"--input", a, "--val-tokens", "0"}, "--val-tokens wants a count >= 1"},
        {{"--input", dir + "/none.txt"}, "cannot read " + dir + "/none.txt"},
        {{"--input", a, "--doc-token", "<nope>"}, "the tokenizer has no token '<nope>'"},
    };
    for (const auto& k : cases) {
        const Result e = hf(k.args);
        EXPECT_EQ(e.code, 1) << k.why;
        EXPECT_TRUE(has(e.err, "error: " + k.why)) << e.err;
    }
    const Result t =
        tool("dev/data/hf_tokenize.py", {"--tokenizer", dir, "--input", a, "--out-prefix", dir + "/o"});
    EXPECT_TRUE(has(t.err, "error: no tokenizer.json at " + dir)) << t.err;
}

// ----------------------------------------------------------------------------
// chat_shards.py

// Runs the tool on chats.jsonl with the plain template (GPT-2) and checks both shards against the
// independent encoding: each kept conversation once, in order, whole or (split) in pieces of T.
static void check_plain(const std::string& out, const std::string& prefix, int T, bool split, int width = 2,
                        int vocab = 50257) {
    const std::vector<Conv> convs = read_chats(kChats);
    const int nval = std::max(1, (int)(convs.size() + 5) / 10);  // the tool's default --val-convs
    std::map<std::string, int64_t> sum[2] = {summary(out, "val"), summary(out, "train")};
    size_t next = 0;
    for (int part = 0; part < 2; part++) {
        const std::string path = prefix + (part ? "_train.bin" : "_val.bin");
        int64_t targets = 0;
        const std::vector<Segment> segs = read_segments(path, T, &targets);
        const std::vector<int32_t> h = header(path);
        const size_t end = part ? convs.size() : (size_t)nval;
        int64_t kept = 0, dropped = 0, splits = 0, pieces = 0;
        size_t s = 0;
        for (; next < end; next++) {
            std::vector<int> ids;
            std::vector<char> mask;
            plain_encoding(convs[next], &ids, &mask);
            if ((int)ids.size() > T && !split) {
                dropped++;
                continue;
            }
            kept++;
            splits += (int)ids.size() > T;
            std::vector<int> got;
            std::vector<char> got_mask;
            for (size_t at = 0; at < ids.size(); at += T, s++, pieces++) {  // one piece per T tokens
                ASSERT_LT(s, segs.size()) << path << ": conversation " << next << " missing";
                EXPECT_EQ(segs[s].pos[0], 0);
                EXPECT_FALSE(segs[s].target_flag[0]) << "a piece's first token is a target";
                got.insert(got.end(), segs[s].ids.begin(), segs[s].ids.end());
                got_mask.insert(got_mask.end(), segs[s].target_flag.begin(), segs[s].target_flag.end());
                mask[at] = 0;  // nothing before a piece's start: not a target
            }
            EXPECT_EQ(got, ids) << path << ": conversation " << next << " (line " << next + 1 << ")";
            EXPECT_EQ(got_mask, mask) << path << ": conversation " << next;
            if ((int)ids.size() <= T) {  // decoded: each assistant turn, its end-of-turn, nothing else
                std::vector<std::string> want;
                for (const Msg& m : convs[next])
                    if (m.role == "assistant") want.push_back(m.content + "<|endoftext|>");
                EXPECT_EQ(target_runs(segs[s - 1]), want) << "conversation " << next;
            }
        }
        EXPECT_EQ(s, segs.size()) << path << ": segments beyond the conversations";
        const char* name = part ? "train" : "val";
        EXPECT_EQ(sum[part]["convs"], kept) << name;
        EXPECT_EQ(sum[part]["dropped"], dropped) << name;
        EXPECT_EQ(sum[part]["split"], splits) << name;
        EXPECT_EQ(sum[part]["targets"], targets) << name;
        EXPECT_EQ(sum[part]["rows"] * T, sum[part]["tokens"]);
        EXPECT_EQ(h[CHAT_H_MAGIC], DATALOADER_CHAT_MAGIC);
        EXPECT_EQ(h[CHAT_H_TOKEN_BYTES], width);
        EXPECT_EQ(h[CHAT_H_T], T);
        EXPECT_EQ(h[CHAT_H_ROWS], sum[part]["rows"]);
        EXPECT_EQ(h[CHAT_H_VOCAB], vocab);
        EXPECT_EQ(h[CHAT_H_CONVS], kept);
        EXPECT_EQ(h[CHAT_H_SEGMENTS], pieces);
        EXPECT_EQ(dl_int64_at(h.data(), CHAT_H_TARGETS), targets);
        EXPECT_EQ(dl_int64_at(h.data(), CHAT_H_PADS), sum[part]["pads"]);
        EXPECT_EQ(h[CHAT_H_SPLIT], splits);
        EXPECT_EQ(h[CHAT_H_DROPPED], dropped);
        // the special tokens the shard holds, for the trainers' check against the model's tokenizer
        EXPECT_EQ(h[CHAT_H_SPECIALS], 1);
        EXPECT_EQ(h[CHAT_H_SPECIAL_IDS], kEot);
        EXPECT_STREQ((const char*)h.data() + CHAT_SPECIAL_TEXT_AT, "<|endoftext|>");
    }
}

TEST_F(ChatData, PlainTemplateTargetsExactlyTheAssistantTurns) {
    if (missing(chat_ok, "transformers or jinja2")) GTEST_SKIP();
    const Result r = chat("gpt2", kChats, 128);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(has(r.out, "1 dropped")) << r.out;  // chats.jsonl's long conversation
    EXPECT_TRUE(has(r.out, "template plain, targets by generation")) << r.out;
    check_plain(r.out, dir + "/c", 128, false);
    // the prefix method finds the same targets
    const std::string gen = slurp(dir + "/c_train.bin");
    const Result p = chat("gpt2", kChats, 128, {"--mask", "prefix"});
    ASSERT_EQ(p.code, 0) << p.err;
    EXPECT_TRUE(slurp(dir + "/c_train.bin") == gen) << "--mask prefix and generation differ";
}

TEST_F(ChatData, LongConversationsSplitIntoPiecesOfT) {
    if (missing(chat_ok, "transformers or jinja2")) GTEST_SKIP();
    const Result r = chat("gpt2", kChats, 48, {"--long", "split"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_FALSE(has(r.out, "train: 0 split")) << r.out;
    check_plain(r.out, dir + "/c", 48, true);
    const Result d = chat("gpt2", kChats, 48);  // drop: fewer conversations, none split
    ASSERT_EQ(d.code, 0) << d.err;
    check_plain(d.out, dir + "/c", 48, false);
}

TEST_F(ChatData, ChatTemplateWithoutMarkersByPrefix) {
    if (missing(chat_ok, "transformers or jinja2")) GTEST_SKIP();
    added = &kChatml;
    const Result r = chat("chatml", kChats, 128, {"--long", "split", "--val-convs", "5"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(has(r.out, "template the tokenizer's, targets by prefix")) << r.out;
    const std::vector<Conv> convs = read_chats(kChats);
    size_t c = 0;
    for (const char* part : {"_val.bin", "_train.bin"}) {
        int64_t targets = 0;
        const std::vector<Segment> segs = read_segments(dir + "/c" + part, 128, &targets);
        EXPECT_EQ(summary(r.out, part[1] == 'v' ? "val" : "train")["targets"], targets);
        for (size_t s = 0; s < segs.size(); s++, c++) {
            ASSERT_LT(c, convs.size());
            std::string text;
            std::vector<std::string> want;
            for (const Msg& m : convs[c]) {
                text += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
                if (m.role == "assistant") want.push_back(m.content + "<|im_end|>\n");
            }
            std::vector<int> all = segs[s].ids;
            while (s + 1 < segs.size() && (int)segs[s].ids.size() == 128 && dec(all) != text) {
                s++;  // a split conversation's next piece
                all.insert(all.end(), segs[s].ids.begin(), segs[s].ids.end());
            }
            EXPECT_EQ(dec(all), text) << "conversation " << c;
            if (all.size() <= 128) { EXPECT_EQ(target_runs(segs[s]), want) << "conversation " << c; }
        }
    }
    EXPECT_EQ(c, convs.size());
    const Result g = chat("chatml", kChats, 128, {"--mask", "generation"});
    EXPECT_NE(g.code, 0);
    EXPECT_TRUE(has(g.err, "no {% generation %} markers")) << g.err;
}

// A Llama 3 style template (BOS, header tokens, trimmed content, <|eot_id|>): each turn's target is its
// trimmed content and <|eot_id|>. And the plain template over a 66257-id vocabulary: uint32 chat shards.
TEST_F(ChatData, Llama3StyleTemplateAndUint32Ids) {
    if (missing(chat_ok, "transformers or jinja2")) GTEST_SKIP();
    added = &kLlama3;
    const Result r = chat("llama3", kChats, 160, {"--long", "split"});
    ASSERT_EQ(r.code, 0) << r.err;
    const std::vector<Conv> convs = read_chats(kChats);
    auto trim = [](const std::string& x) {
        const size_t a = x.find_first_not_of(" \n\t"), b = x.find_last_not_of(" \n\t");
        return a == std::string::npos ? std::string() : x.substr(a, b - a + 1);
    };
    size_t c = 0;
    for (const char* part : {"_val.bin", "_train.bin"}) {
        int64_t targets = 0;
        const std::vector<Segment> segs = read_segments(dir + "/c" + part, 160, &targets);
        for (size_t s = 0; s < segs.size(); s++, c++) {
            ASSERT_LT(c, convs.size());
            std::string text = "<|begin_of_text|>";
            std::vector<std::string> want;
            for (const Msg& m : convs[c]) {
                text +=
                    "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
                if (m.role == "assistant") want.push_back(trim(m.content) + "<|eot_id|>");
            }
            std::vector<int> all = segs[s].ids;
            while (s + 1 < segs.size() && (int)segs[s].ids.size() == 160 && dec(all) != text) {
                s++;
                all.insert(all.end(), segs[s].ids.begin(), segs[s].ids.end());
            }
            EXPECT_EQ(dec(all), text) << "conversation " << c;
            if (all.size() <= 160) { EXPECT_EQ(target_runs(segs[s]), want) << "conversation " << c; }
        }
    }
    EXPECT_EQ(c, convs.size());
    const std::vector<int32_t> h = header(dir + "/c_train.bin");  // its four special tokens, by id
    ASSERT_EQ(h[CHAT_H_SPECIALS], 4);
    const char* text = (const char*)h.data() + CHAT_SPECIAL_TEXT_AT;
    for (int i = 0; i < 4; i++, text += strlen(text) + 1) {
        EXPECT_EQ(h[CHAT_H_SPECIAL_IDS + i], kEot + 1 + i);
        EXPECT_EQ(text, kLlama3[(size_t)i]);
    }
    added = &kChatml;
    const Result w = chat("big", kChats, 128);
    ASSERT_EQ(w.code, 0) << w.err;
    EXPECT_TRUE(has(w.out, "uint32 ids (vocabulary 66257)")) << w.out;
    check_plain(w.out, dir + "/c", 128, false, 4, 66257);
}

TEST_F(ChatData, LoaderRefusesAnotherT) {
    if (missing(chat_ok, "transformers or jinja2")) GTEST_SKIP();
    const Result r = chat("gpt2", kChats, 64);
    ASSERT_EQ(r.code, 0) << r.err;
    DataLoader dl;
    char err[512];
    const std::string path = dir + "/c_train.bin";
    EXPECT_EQ(dataloader_init(&dl, path.c_str(), 4, 128, 0, 0, err, sizeof err), 0);
    EXPECT_TRUE(has(err, path + ": its rows were packed for T=64, the run has T=128")) << err;
    dataloader_free(&dl);
    EXPECT_EQ(dataloader_init(&dl, path.c_str(), 1000, 64, 0, 0, err, sizeof err), 0);
    EXPECT_TRUE(has(err, "one batch needs B = 1000 rows")) << err;
    dataloader_free(&dl);
}

TEST_F(ChatData, BadInputNamesTheLineAndWritesNothing) {
    if (missing(chat_ok, "transformers or jinja2")) GTEST_SKIP();
    const std::string ok =
        R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})";
    struct Case {
        std::string line, why;
        const char* tokenizer;
    };
    const std::vector<Case> cases = {
        {R"({"messages": [})", "not JSON", "gpt2"},
        {R"({"messages": [{"role": "tool", "content": "x"}, {"role": "assistant", "content": "y"}]})",
         "message 0 has the unknown role 'tool' (want system, user or assistant)", "gpt2"},
        {R"({"messages": []})", "an empty conversation", "gpt2"},
        {R"({"messages": [{"role": "user", "content": "x"}]})", "no assistant message", "gpt2"},
        {R"({"messages": [{"role": "user", "content": 5}, {"role": "assistant", "content": "y"}]})",
         "message 0's content is missing or not a string", "gpt2"},
        {R"({"messages": "hello"})", "'messages' is not a list", "gpt2"},
        {R"([1, 2])", "a conversation is a JSON object", "gpt2"},
        {R"({"text": "x"})", "no 'messages', nor 'instruction' and 'output'", "gpt2"},
        {R"({"instruction": "x"})", "'output' is missing or not a string", "gpt2"},
        {"   ", "an empty line", "gpt2"},
        {"{\"messages\": \"\xff\"}", "not UTF-8 at byte 14", "gpt2"},
        {R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "a<|endoftext|>b"}]})",
         "message 1 contains the special token text '<|endoftext|>'", "gpt2"},
        {R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "x"}, )"
         R"({"role": "assistant", "content": "y"}]})",
         "the chat template failed: TemplateError: no system messages here", "strict"},
    };
    // one file, one bad line each (lines 2..): all are listed, with their line numbers
    const std::string path = dir + "/bad.jsonl";
    std::string text = ok + "\n";
    for (const Case& k : cases)
        if (!strcmp(k.tokenizer, "gpt2")) text += k.line + "\n";
    text += ok + "\n";
    FILE* f = fopen(path.c_str(), "wb");
    fwrite(text.data(), 1, text.size(), f);
    fclose(f);
    const Result r = chat("gpt2", path, 64);
    EXPECT_NE(r.code, 0);
    int line = 2;
    for (const Case& k : cases) {
        if (strcmp(k.tokenizer, "gpt2")) continue;
        EXPECT_TRUE(has(r.err, path + ":" + std::to_string(line++) + ": " + k.why)) << k.line << "\n"
                                                                                    << r.err;
    }
    EXPECT_TRUE(has(r.err, std::to_string(line - 2) + " bad line(s)")) << r.err;
    // a template that raises
    const std::string strict = dir + "/strict.jsonl";
    f = fopen(strict.c_str(), "wb");
    fprintf(f, "%s\n%s\n%s\n", ok.c_str(), cases.back().line.c_str(), ok.c_str());
    fclose(f);
    const Result t = chat("strict", strict, 64);
    EXPECT_NE(t.code, 0);
    EXPECT_TRUE(has(t.err, strict + ":2: " + cases.back().why)) << t.err;
    EXPECT_TRUE(has(t.err, "1 bad line(s)")) << t.err;
    EXPECT_NE(access((dir + "/c_train.bin").c_str(), F_OK), 0) << "a shard written despite bad lines";
    // flags and files
    EXPECT_TRUE(has(chat("gpt2", kChats, 1).err, "--seq-len wants T >= 2")) << "T=1";
    EXPECT_TRUE(has(chat("gpt2", dir + "/none.jsonl", 64).err, "cannot read")) << "no input";
    FILE* e = fopen((dir + "/one.jsonl").c_str(), "wb");
    fprintf(e, "%s\n", ok.c_str());
    fclose(e);
    EXPECT_TRUE(has(chat("gpt2", dir + "/one.jsonl", 64).err, "a val and a train split need at least 2"));
    EXPECT_TRUE(has(chat("gpt2", kChats, 64, {"--val-convs", "31"}).err, "--val-convs 31: want 1 to 30"));
}

// The two shards are replaced together: written beside their paths, then renamed. A write that fails
// (a file-size limit standing for a full disk) leaves both old shards as they were and no temporary file; an
// output path that is a symlink is refused, its target untouched; a missing directory is made.
TEST_F(ChatData, ShardsReplacedTogetherNeverThroughASymlink) {
    if (missing(chat_ok, "transformers or jinja2")) GTEST_SKIP();
    ASSERT_EQ(mkdir((dir + "/out").c_str(), 0755), 0);
    const std::string prefix = dir + "/out/c", val = prefix + "_val.bin", train = prefix + "_train.bin";
    auto make = [&](const Args& more, int64_t max_file_bytes = 0) {
        Args a = {"dev/data/chat_shards.py",
                  "--tokenizer",
                  tok + "/gpt2",
                  "--input",
                  kChats,
                  "--out-prefix",
                  prefix,
                  "--seq-len",
                  "128"};
        a.insert(a.end(), more.begin(), more.end());
        return run_bin(py.c_str(), a, max_file_bytes);
    };
    Result r = make({});
    ASSERT_EQ(r.code, 0) << r.err;
    const std::string old_val = slurp(val), old_train = slurp(train);
    // in place, a hard link to the old train shard would see the new bytes
    ASSERT_EQ(link(train.c_str(), (dir + "/old_train.bin").c_str()), 0);
    // one conversation of val (1 row, 1408 bytes) fits under the limit, the train shard does not
    ASSERT_GT(old_train.size(), 4096u);
    r = make({"--val-convs", "1"}, 4096);
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_TRUE(has(r.err, "error: cannot write ")) << r.err;
    EXPECT_TRUE(slurp(val) == old_val) << "a new val shard beside the old train shard";
    EXPECT_TRUE(slurp(train) == old_train) << "the train shard changed";
    EXPECT_EQ(names_in(dir + "/out"), (std::vector<std::string>{"c_train.bin", "c_val.bin"}))
        << "temporary files left behind";
    r = make({"--val-convs", "1"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_FALSE(slurp(val) == old_val);
    EXPECT_TRUE(slurp(dir + "/old_train.bin") == old_train) << "the train shard was rewritten in place";
    EXPECT_EQ(names_in(dir + "/out"), (std::vector<std::string>{"c_train.bin", "c_val.bin"}));
    // a symlink at an output path: refused before any work, its target untouched
    const std::string victim = dir + "/victim.txt";
    FILE* f = fopen(victim.c_str(), "wb");
    fputs("keep", f);
    fclose(f);
    ASSERT_EQ(unlink(train.c_str()), 0);
    ASSERT_EQ(symlink(victim.c_str(), train.c_str()), 0);
    r = make({});
    EXPECT_EQ(r.code, 1);
    EXPECT_TRUE(has(r.err, "error: " + train + " is a symbolic link: refusing to write through it")) << r.err;
    EXPECT_TRUE(slurp(victim) == "keep") << "written through the symlink";
    // the README's data/ need not exist
    const Result d = chat("gpt2", kChats, 128, {"--out-prefix", dir + "/new/data/chats"});
    ASSERT_EQ(d.code, 0) << d.err;
    EXPECT_EQ(names_in(dir + "/new/data"), (std::vector<std::string>{"chats_train.bin", "chats_val.bin"}));
}

// Input that once ended in a Python traceback or a silent success: one error line naming the file and line
// (or the flag), exit 1, nothing written.
TEST_F(ChatData, MoreBadInputIsOneLineEach) {
    if (missing(chat_ok, "transformers or jinja2")) GTEST_SKIP();
    const std::string ok =
        R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})";
    auto file = [&](const std::string& name, const std::string& line) {
        const std::string path = dir + "/" + name;
        FILE* f = fopen(path.c_str(), "wb");
        fprintf(f, "%s\n%s\n%s\n", ok.c_str(), line.c_str(), ok.c_str());
        fclose(f);
        return path;
    };
    const struct {
        std::string input, tokenizer, why;
        Args more;
    } cases[] = {
        {file("surrogate.jsonl", R"({"messages": [{"role": "user", "content": "a\ud800b"}, )"
                                 R"({"role": "assistant", "content": "y"}]})"),
         "gpt2",
         ":2: message 0's content has a lone surrogate \\ud800 at character 1: not text",
         {}},
        {file("deep.jsonl", std::string(100000, '[') + std::string(100000, ']')),
         "gpt2",
         ":2: not JSON this tool reads: nested deeper than Python's json module goes",
         {}},
        {file("first.jsonl", R"({"messages": [{"role": "assistant", "content": "Hello"}, )"
                             R"({"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]})"),
         "chatml",
         ":2: message 0 is an assistant turn with no prompt before it: the prefix method needs a user",
         {}},
        {kChats, "gpt2", "--val-convs wants a count >= 1, got -5", {"--val-convs", "-5"}},
        {kChats,
         "gpt2",
         "--save-tokenizer " + dir + "/surrogate.jsonl: exists and is not a directory",
         {"--save-tokenizer", dir + "/surrogate.jsonl"}},
        // a second trial: argparse's 5-line usage; --save-tokenizer failing after the shards were written;
        // a template that does not compile blamed on every line of the data
        {kChats, "gpt2", "argument --seq-len: invalid int value: 'abc'", {"--seq-len", "abc"}},
        {kChats,
         "gpt2",
         "--save-tokenizer " + dir + "/surrogate.jsonl/sub: Not a directory",
         {"--save-tokenizer", dir + "/surrogate.jsonl/sub"}},
        {kChats, "syn", tok + "/syn: its chat template does not compile: TemplateSyntaxError", {}},
    };
    mkdir((tok + "/syn").c_str(), 0755);  // chatml's tokenizer, its template broken
    {
        std::ifstream in(tok + "/chatml/tokenizer.json", std::ios::binary);
        std::ofstream out(tok + "/syn/tokenizer.json", std::ios::binary);
        out << in.rdbuf();
        const Result r = run(py,
                             {"-c",
                              "import json, sys; c = json.load(open(sys.argv[1])); "
                              "c['chat_template'] = \"{% for m in messages %}{{ m['content'] }\"; "
                              "json.dump(c, open(sys.argv[2], 'w'))",
                              tok + "/chatml/tokenizer_config.json", tok + "/syn/tokenizer_config.json"},
                             dir);  // its stdout.txt / stderr.txt there, not in the repository's root
        ASSERT_EQ(r.code, 0) << r.err;
    }
    for (const auto& k : cases) {
        const Result r = chat(k.tokenizer, k.input, 64, k.more);
        EXPECT_EQ(r.code, 1) << k.why << "\n" << r.err;
        EXPECT_TRUE(has(r.err, "error: " + (k.why[0] == ':' ? k.input : "") + k.why)) << r.err;
        EXPECT_FALSE(has(r.err, "Traceback")) << r.err;
        EXPECT_NE(access((dir + "/c_train.bin").c_str(), F_OK), 0) << "a shard written despite " << k.why;
    }
}

// --tokenizer DIR/tokenizer.json reads DIR's tokenizer_config.json too: its chat template, not the plain one.
TEST_F(ChatData, TokenizerJsonPathKeepsTheTemplateBesideIt) {
    if (missing(chat_ok, "transformers or jinja2")) GTEST_SKIP();
    const Result r = chat("chatml/tokenizer.json", kChats, 128);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(has(r.out, "template the tokenizer's, targets by prefix")) << r.out;
    const std::string file = slurp(dir + "/c_train.bin");
    ASSERT_EQ(chat("chatml", kChats, 128).code, 0);
    EXPECT_TRUE(slurp(dir + "/c_train.bin") == file);
}

// Issue 41: shards in a template the tokenizer lacks (GPT-2's plain one) say at once that --save-tokenizer
// DIR is needed for export_hf -t DIR, not at the end in transformers ("chat_template is not set").
TEST_F(ChatData, ATemplateTheTokenizerLacksAsksForSaveTokenizer) {
    if (missing(chat_ok, "transformers or jinja2")) GTEST_SKIP();
    Result r = chat("gpt2", kChats, 128);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(has(r.err,
                    "warning: the tokenizer lacks the template these shards use (plain): add "
                    "--save-tokenizer DIR"))
        << r.err;
    r = chat("gpt2", kChats, 128, {"--save-tokenizer", dir + "/with_template"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_FALSE(has(r.err, "lacks the template")) << r.err;
    r = chat("chatml", kChats, 128);  // its own template: nothing to say
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_FALSE(has(r.err, "lacks the template")) << r.err;
}

// The prefix method renders a conversation a bounded number of times (one streamed render, checked against
// the real prefixes of three turns), not twice per turn: 2,000 turns take seconds, not minutes. A template
// whose loop does not fetch each message where its text begins falls back to every prefix, same shards.
TEST_F(ChatData, PrefixMethodRendersEachConversationAFewTimes) {
    if (missing(chat_ok, "transformers or jinja2")) GTEST_SKIP();
    const std::string path = dir + "/long.jsonl";
    FILE* f = fopen(path.c_str(), "wb");
    fprintf(f, R"({"messages": [{"role": "system", "content": "Be brief."})");
    for (int i = 0; i < 1000; i++)
        fprintf(f, R"(, {"role": "user", "content": "Q%d?"}, {"role": "assistant", "content": "A%d."})", i,
                i);
    fprintf(f, "]}\n%s\n",
            R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})");
    fclose(f);
    Result r = chat("chatml", path, 128, {"--long", "split", "--val-convs", "1"});
    ASSERT_EQ(r.code, 0) << r.err;
    std::smatch g;
    ASSERT_TRUE(std::regex_search(r.out, g,
                                  std::regex("prefix method: ([0-9]+) template renders for 2 "
                                             "conversations, 0 of them rendered prefix by prefix")))
        << r.out;
    EXPECT_LE(std::stoi(g[1]), 2 * 8) << "at most 8 renders a conversation (the full one, the streamed one, "
                                         "three turns' two prefixes)";
    int64_t targets = 0;
    const std::vector<Segment> segs = read_segments(dir + "/c_val.bin", 128, &targets);
    std::string text, want;  // decoded: the whole conversation, and the runs of targets
    for (const Segment& s : segs) text += dec(s.ids);
    for (const Segment& s : segs)
        for (const std::string& run : target_runs(s)) want += run;
    std::string expect = "<|im_start|>system\nBe brief.<|im_end|>\n", expect_targets;
    for (int i = 0; i < 1000; i++) {
        expect += "<|im_start|>user\nQ" + std::to_string(i) + "?<|im_end|>\n<|im_start|>assistant\nA" +
                  std::to_string(i) + ".<|im_end|>\n";
        expect_targets += "A" + std::to_string(i) + ".<|im_end|>\n";
    }
    EXPECT_EQ(text, expect);
    // a piece's first token is never a target: the runs lose the turn a row boundary cuts at its start
    EXPECT_LE(want.size(), expect_targets.size());
    EXPECT_GT(want.size(), expect_targets.size() * 9 / 10);
    // the slow path: the same shards as chatml's on chats.jsonl
    ASSERT_EQ(chat("chatml", kChats, 128).code, 0);
    const std::string val = slurp(dir + "/c_val.bin"), train = slurp(dir + "/c_train.bin");
    r = chat("scan", kChats, 128);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(
        std::regex_search(r.out, std::regex("for 31 conversations, [1-9][0-9]* of them rendered prefix")))
        << r.out;
    EXPECT_TRUE(slurp(dir + "/c_val.bin") == val && slurp(dir + "/c_train.bin") == train);
}
