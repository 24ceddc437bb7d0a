// test_tokenizer.cpp — GoogleTest suite for the GPT-2 BPE encoder (dev/data/gpt2_bpe.h), the shipped
// tinyshakespeare shards and gpt2_tokenizer.bin, and the trainers' decoder (tokenizer.h).
// Run from the repo root (paths are relative). It does not run build/tokenize; instead it checks
// that the shipped shards equal what the encoder produces now, which is what the tool writes.
// Expected ids: no reference tokenizer (tiktoken) is available here, so each expected id is either
// looked up in encoder.json (E("Ġworld")) or, for multi-token pieces, a well-known GPT-2 value that
// was cross-checked against an independent Python implementation (json + the `regex` module).
#include <gtest/gtest.h>
#include <stdio.h>
#include <string.h>
#include <algorithm>  // defines: std::shuffle
#include <chrono>
#include <random>  // defines: std::mt19937
#include <time.h>
#include <string>
#include <vector>
#include "dev/data/gpt2_bpe.h"
#include "llmc/tokenizer.h"

static const char* kEncoder = "dev/data/gpt2/encoder.json";
static const char* kVocab = "dev/data/gpt2/vocab.bpe";
static const char* kCorpus = "dev/data/tinyshakespeare/tinyshakespeare.txt";
static const char* kVal = "dev/data/tinyshakespeare/tiny_shakespeare_val.bin";
static const char* kTrain = "dev/data/tinyshakespeare/tiny_shakespeare_train.bin";
static const char* kTokBin = "gpt2_tokenizer.bin";

// Loaded once for the whole suite; a load failure fails every test that uses it, with the reason.
static const GPT2BPE* bpe() {
    static GPT2BPE t;
    static std::string err;
    static bool ok = gpt2_bpe_load(&t, kEncoder, kVocab, &err);
    EXPECT_TRUE(ok) << err;
    return ok ? &t : NULL;
}
static int E(const char* token) {  // id of a token string as written in encoder.json
    auto it = bpe()->encoder.find(token);
    return it == bpe()->encoder.end() ? -1 : it->second;
}
static std::vector<int> enc(const std::string& s) { return gpt2_bpe_encode(bpe(), s); }
static std::string dec(const std::vector<int>& ids) { return gpt2_bpe_decode(bpe(), ids); }
static std::string slurp(const char* path) {
    std::string s;
    EXPECT_TRUE(gpt2_read_file(path, &s)) << "cannot read " << path;
    return s;
}
typedef std::vector<int> V;

TEST(GPT2BPE, LoadsVocabulary) {
    ASSERT_NE(bpe(), nullptr);
    EXPECT_EQ(bpe()->decoder.size(), 50257u);
    EXPECT_EQ(bpe()->merges.size(), 50000u);
    EXPECT_EQ(bpe()->eot_token, 50256);
    EXPECT_EQ(E("<|endoftext|>"), 50256);
    EXPECT_EQ(E("!"), 0);
    EXPECT_EQ(E("\""), 1);                   // written as "\"" in the JSON
    EXPECT_EQ(bpe()->decoder[E("Ġ")], " ");  // byte-to-unicode undone: Ġ is the space byte
    EXPECT_EQ(bpe()->decoder[E("Ċ")], "\n");
}

TEST(GPT2BPE, LoadErrorsAreReported) {
    GPT2BPE t;
    std::string err;
    EXPECT_FALSE(gpt2_bpe_load(&t, "/tmp/no_such_encoder.json", kVocab, &err));
    EXPECT_NE(err.find("no_such_encoder"), std::string::npos);
    const char* bad = "/tmp/test_tokenizer_bad_encoder.json";
    FILE* f = fopen(bad, "wb");
    ASSERT_TRUE(f);
    fputs("{\"a\": 0, \"b\" 1}", f);
    fclose(f);
    err.clear();
    EXPECT_FALSE(gpt2_bpe_load(&t, bad, kVocab, &err));
    EXPECT_NE(err.find("expected ':'"), std::string::npos) << err;
    remove(bad);
}

TEST(GPT2BPE, JsonStringEscapes) {
    std::string out;
    std::string js = "\"a\\\"b\\\\c\\/d\\n\\t\\u00e9\\u65e5\\ud83d\\ude00\"";
    size_t i = 0;
    ASSERT_TRUE(gpt2_json_string(js, &i, &out));
    EXPECT_EQ(out, "a\"b\\c/d\n\t\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80");  // é 日 😀 as UTF-8
    EXPECT_EQ(i, js.size());
    i = 0;
    EXPECT_FALSE(gpt2_json_string("\"\\ud83d\"", &i, &out));  // lone high surrogate
    i = 0;
    EXPECT_FALSE(gpt2_json_string("\"abc", &i, &out));  // unterminated
}

TEST(GPT2BPE, PretokenizerFollowsTheRegex) {
    auto split = [](const std::string& s) {
        std::vector<std::pair<size_t, size_t>> p;
        gpt2_pretokenize(s, &p);
        std::vector<std::string> out;
        for (auto& r : p) out.push_back(s.substr(r.first, r.second - r.first));
        return out;
    };
    typedef std::vector<std::string> S;
    EXPECT_EQ(split("Hello  world's 123!!\n\n x"),
              (S{"Hello", " ", " world", "'s", " 123", "!!", "\n\n", " x"}));
    // \s+(?!\S) gives back the last whitespace char before a word; a lone non-space-char stays alone.
    EXPECT_EQ(split("a\n\nb"), (S{"a", "\n", "\n", "b"}));
    EXPECT_EQ(split("a \n b"), (S{"a", " \n", " b"}));
    EXPECT_EQ(split("\t\tx"), (S{"\t", "\t", "x"}));                  // only ' ' (not \t) may prefix a word
    EXPECT_EQ(split("hi   "), (S{"hi", "   "}));                      // trailing run kept whole
    EXPECT_EQ(split("IT'S x'll"), (S{"IT", "'", "S", " x", "'ll"}));  // contractions are lowercase only
    EXPECT_EQ(split("?'s"), (S{"?'", "s"}));  // punctuation run eats the apostrophe first
    EXPECT_EQ(split("h\xc3\xa9llo w\xc3\xb6rld \xd9\xa1\xd9\xa2"),
              (S{"h\xc3\xa9llo", " w\xc3\xb6rld",
                 " \xd9\xa1\xd9\xa2"}));                  // é ö letters, Arabic-Indic digits numbers
    EXPECT_EQ(split("\xc2\xa0x"), (S{"\xc2\xa0", "x"}));  // U+00A0 is \s but not the ' ' prefix
    EXPECT_EQ(split(""), S{});
}

TEST(GPT2BPE, KnownIds) {
    EXPECT_EQ(enc("Hello world"), (V{15496, 995}));
    EXPECT_EQ(enc("Hello world"), (V{E("Hello"), E("Ġworld")}));
    EXPECT_EQ(enc(" the"), (V{262}));
    EXPECT_EQ(enc(" the"), (V{E("Ġthe")}));
    EXPECT_EQ(enc("Hello, world!"), (V{15496, 11, 995, 0}));
    EXPECT_EQ(enc("Hello, world!"), (V{E("Hello"), E(","), E("Ġworld"), E("!")}));
    EXPECT_EQ(enc(" don't"), (V{E("Ġdon"), E("'t")}));
    EXPECT_EQ(enc(" don't"), (V{836, 470}));
    EXPECT_EQ(enc("I'm they'll we've you're he'd"), (V{E("I"), E("'m"), E("Ġthey"), E("'ll"), E("Ġwe"),
                                                       E("'ve"), E("Ġyou"), E("'re"), E("Ġhe"), E("'d")}));
    EXPECT_EQ(enc("a  b"), (V{E("a"), E("Ġ"), E("Ġb")}));           // 64 220 275
    EXPECT_EQ(enc("a\n\nb"), (V{E("a"), E("Ċ"), E("Ċ"), E("b")}));  // not "ĊĊ" (628): regex splits the run
    EXPECT_EQ(enc("x\n\n"), (V{E("x"), E("ĊĊ")}));                  // at the end the run stays whole
    EXPECT_EQ(enc("hi   "), (V{5303, 220, 220, 220}));
    EXPECT_EQ(enc(" 2024"), (V{E("Ġ2024")}));   // 48609
    EXPECT_EQ(enc("12345"), (V{10163, 2231}));  // "123" "45"
    EXPECT_EQ(enc("IT'S"), (V{E("IT"), E("'"), E("S")}));
    EXPECT_EQ(enc("h\xc3\xa9llo w\xc3\xb6rld"), (V{71, 2634, 18798, 266, 30570, 335}));  // héllo wörld
    EXPECT_EQ(enc("\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e"), (V{33768, 98, 17312, 105, 45739, 252}));  // 日本語
    // Special tokens are not parsed from text: tools add 50256 themselves.
    EXPECT_EQ(enc("<|endoftext|>"), (V{E("<"), E("|"), E("end"), E("of"), E("text"), E("|"),
                                       E(">")}));  // 27 91 437 1659 5239 91 29
    EXPECT_EQ(enc(""), V{});
}

TEST(GPT2BPE, RoundTripsOddInput) {
    const char* cases[] = {"h\xc3\xa9llo w\xc3\xb6rld", "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e",
                           "emoji \xf0\x9f\x98\x80!",   "\xff\xfe bad \xc3 utf8 \xed\xa0\x80 \xc0\xaf",
                           "tabs\t\tand\r\nCRLF  \n",   "\x01\x1c\x1f ctrl"};
    for (const char* c : cases) EXPECT_EQ(dec(enc(c)), std::string(c)) << c;
    std::string all;  // every byte value, twice
    for (int k = 0; k < 512; k++) all.push_back((char)(k & 255));
    EXPECT_EQ(dec(enc(all)), all);
}

TEST(GPT2BPE, RoundTripsWholeCorpusQuickly) {
    std::string text = slurp(kCorpus);
    ASSERT_EQ(text.size(), 1115394u);
    // CPU time of this thread, not wall time: a loaded machine (other builds on 2 cores) must not fail the
    // test, a slow (say quadratic) encoder must
    auto cpu_now = [] {
        timespec t;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
        return t.tv_sec + 1e-9 * t.tv_nsec;
    };
    const double t0 = cpu_now();
    std::vector<int> ids = enc(text);
    double secs = cpu_now() - t0;
    printf("encoded %zu bytes into %zu tokens in %.3f s of CPU time\n", text.size(), ids.size(), secs);
    EXPECT_LT(secs, 10.0);
    EXPECT_GT(ids.size(), 250000u);
    EXPECT_LT(ids.size(), 400000u);
    EXPECT_EQ(dec(ids), text);
}

// The merge loop as it was (encoder.py's, a scan of the whole piece per merge: quadratic), the reference the
// heap-based gpt2_bpe_piece must match token for token.
static std::vector<int> reference_bpe_piece(const GPT2BPE* t, const std::string& piece) {
    std::vector<int> w;
    for (unsigned char c : piece) w.push_back(t->byte_token[c]);
    while (w.size() > 1) {
        int best_rank = -1, left = 0, right = 0, merged = 0;
        for (size_t i = 0; i + 1 < w.size(); i++) {
            auto it = t->merges.find(((uint64_t)w[i] << 32) | (uint32_t)w[i + 1]);
            if (it != t->merges.end() && (best_rank < 0 || it->second.first < best_rank)) {
                best_rank = it->second.first;
                left = w[i];
                right = w[i + 1];
                merged = it->second.second;
            }
        }
        if (best_rank < 0) break;
        size_t o = 0;
        for (size_t i = 0; i < w.size(); i++) {
            if (i + 1 < w.size() && w[i] == left && w[i + 1] == right) {
                w[o++] = merged;
                i++;
            } else w[o++] = w[i];
        }
        w.resize(o);
    }
    return w;
}
static std::vector<int> heap_bpe_piece(const GPT2BPE* t, const std::string& piece) {
    std::vector<int> out;
    gpt2_bpe_piece(t, (const unsigned char*)piece.data(), piece.size(), &out);
    return out;
}

// Random pieces (letters, bytes, runs of one letter, corpus words) under GPT-2's merges, then random merge
// tables whose later tokens may merge at lower ranks than the pairs that made them (a table built to tell a
// heap that does not work in rounds from encoder.py's passes).
TEST(GPT2BPE, HeapMergesMatchTheQuadraticLoop) {
    ASSERT_NE(bpe(), nullptr);
    std::mt19937 rng(33);
    const std::string corpus = slurp(kCorpus);
    int compared = 0;
    for (int k = 0; k < 20000; k++) {
        const int len = 1 + (int)(rng() % (k % 100 == 0 ? 3000 : 40));
        std::string piece;
        const int kind = k % 4;
        for (int i = 0; i < len; i++)
            piece += kind == 0   ? (char)('a' + rng() % 26)
                     : kind == 1 ? (char)(rng() % 256)
                     : kind == 2 ? 'a' + (char)(k % 3)
                                 : corpus[(k * 7919 + i) % corpus.size()];
        ASSERT_EQ(heap_bpe_piece(bpe(), piece), reference_bpe_piece(bpe(), piece)) << "piece " << k;
        compared++;
    }
    for (int table = 0; table < 200; table++) {
        GPT2BPE t;
        for (int b = 0; b < 256; b++) t.byte_token[b] = b % 3;  // every byte one of three tokens
        int ids = 3;
        std::vector<int> ranks(40);
        for (int r = 0; r < 40; r++) ranks[r] = r;
        std::shuffle(ranks.begin(), ranks.end(), rng);
        for (int m = 0; m < 40; m++) {
            const int a = (int)(rng() % ids), b = (int)(rng() % ids);
            t.merges.emplace(((uint64_t)a << 32) | (uint32_t)b, std::make_pair(ranks[m], ids++));
        }
        for (int k = 0; k < 50; k++) {
            std::string piece(1 + rng() % 60, '\0');
            for (char& c : piece) c = (char)(rng() % 3);
            ASSERT_EQ(heap_bpe_piece(&t, piece), reference_bpe_piece(&t, piece)) << "table " << table;
            compared++;
        }
    }
    printf("%d pieces, the same tokens\n", compared);
}

// A single 1 MB word of letters: the quadratic loop took 83 s; CPU time, not wall time (see above).
TEST(GPT2BPE, LongWordEncodesInNLogN) {
    ASSERT_NE(bpe(), nullptr);
    std::mt19937 rng(7);
    std::string word(1 << 20, 'a');
    for (char& c : word) c = (char)('a' + rng() % 26);
    timespec t0, t1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    const std::vector<int> ids = enc(word);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    const double secs = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
    printf("a %zu-byte word: %zu tokens in %.2f s of CPU time\n", word.size(), ids.size(), secs);
    EXPECT_LT(secs, 20.0);
    EXPECT_EQ(dec(ids), word);
}

// ---- shipped shards ----

static std::vector<uint16_t> read_shard(const char* path) {
    std::string s = slurp(path);
    std::vector<uint16_t> tok;
    if (s.size() < 1024) {
        ADD_FAILURE() << path << ": shorter than its header";
        return tok;
    }
    int32_t h[256];
    memcpy(h, s.data(), sizeof h);
    EXPECT_EQ(h[0], 20240520) << path;
    EXPECT_EQ(h[1], 1) << path;
    for (int i = 3; i < 256; i++) EXPECT_EQ(h[i], 0) << path << " header[" << i << "]";
    EXPECT_EQ((int64_t)s.size(), 1024 + 2 * (int64_t)h[2])
        << path << ": token count does not match file size";
    tok.resize((s.size() - 1024) / 2);
    memcpy(tok.data(), s.data() + 1024, tok.size() * 2);
    return tok;
}

TEST(Shards, ValidAndEqualToAFreshEncoding) {
    std::vector<uint16_t> val = read_shard(kVal), train = read_shard(kTrain);
    ASSERT_EQ(val.size(), 32768u);
    ASSERT_GT(train.size(), 0u);
    for (uint16_t t : val) ASSERT_LT(t, 50257);
    for (uint16_t t : train) ASSERT_LT(t, 50257);
    EXPECT_EQ(val[0], 50256);  // the first document starts with <|endoftext|>

    // Val decodes to the start of the corpus once the EOT tokens are dropped; val + train to all of it.
    std::string text = slurp(kCorpus);
    V val_ids;
    for (uint16_t t : val)
        if (t != 50256) val_ids.push_back(t);
    std::string val_text = dec(val_ids);
    EXPECT_EQ(val_text, text.substr(0, val_text.size()));
    EXPECT_GT(val_text.size(), 100000u);

    // Exactly what build/tokenize makes: EOT, then each "\n\n"-terminated document encoded alone.
    V expect;
    GPT2BPECache cache;
    for (size_t start = 0; start < text.size();) {
        size_t cut = text.find("\n\n", start), end = cut == std::string::npos ? text.size() : cut + 2;
        expect.push_back(50256);
        V d = gpt2_bpe_encode(bpe(), text.substr(start, end - start), &cache);
        expect.insert(expect.end(), d.begin(), d.end());
        start = end;
    }
    V got(val.begin(), val.end());
    got.insert(got.end(), train.begin(), train.end());
    EXPECT_EQ(got.size(), expect.size());
    EXPECT_TRUE(got == expect)
        << "shipped shards differ from a fresh encoding; re-make them (dev/data/README.md)";
}

// ---- tokenizer.h and gpt2_tokenizer.bin ----

TEST(Tokenizer, LoadsShippedFileAndDecodes) {
    Tokenizer tok;
    char err[256] = "";
    ASSERT_TRUE(tokenizer_init(&tok, kTokBin, err, sizeof err)) << err;
    EXPECT_EQ(tok.init_ok, 1);
    EXPECT_EQ(tok.vocab_size, 50257u);
    EXPECT_EQ(tok.eot_token, 50256);
    EXPECT_STREQ(tokenizer_decode(&tok, 15496), "Hello");
    EXPECT_STREQ(tokenizer_decode(&tok, 995), " world");
    EXPECT_STREQ(tokenizer_decode(&tok, 198), "\n");
    EXPECT_STREQ(tokenizer_decode(&tok, 50256), "<|endoftext|>");
    EXPECT_EQ(tokenizer_decode(&tok, 50257), nullptr);
    EXPECT_EQ(tokenizer_decode(&tok, 0xFFFFFFFFu), nullptr);
    // Every entry equals the encoder's decoded bytes (the 0x00 token reads back as "" in C strings).
    for (uint32_t i = 0; i < tok.vocab_size; i++) {
        const std::string& want = bpe()->decoder[i];
        if (want.find('\0') != std::string::npos) continue;
        ASSERT_EQ(std::string(tokenizer_decode(&tok, i)), want) << "id " << i;
    }
    tokenizer_free(&tok);
    EXPECT_EQ(tok.init_ok, 0);
    EXPECT_EQ(tokenizer_decode(&tok, 15496), nullptr);
}

static void write_bytes(const char* path, const void* p, size_t n) {
    FILE* f = fopen(path, "wb");
    ASSERT_TRUE(f) << path;
    fwrite(p, 1, n, f);
    fclose(f);
}

TEST(Tokenizer, ErrorsInsteadOfCrashing) {
    Tokenizer tok;
    char err[256] = "";
    EXPECT_EQ(tokenizer_init(&tok, "/tmp/no_such_tokenizer.bin", err, sizeof err), 0);
    EXPECT_NE(strstr(err, "cannot open"), nullptr) << err;
    EXPECT_EQ(tok.init_ok, 0);
    EXPECT_EQ(tokenizer_decode(&tok, 0), nullptr);
    tokenizer_free(&tok);

    const char* path = "/tmp/test_tokenizer_bad.bin";
    uint32_t h[256] = {12345, 2, 3, 2};
    write_bytes(path, h, sizeof h);
    err[0] = '\0';
    EXPECT_EQ(tokenizer_init(&tok, path, err, sizeof err), 0);
    EXPECT_NE(strstr(err, "bad magic"), nullptr) << err;

    h[0] = TOKENIZER_MAGIC;
    h[1] = 7;
    write_bytes(path, h, sizeof h);
    EXPECT_EQ(tokenizer_init(&tok, path, err, sizeof err), 0);
    EXPECT_NE(strstr(err, "version"), nullptr) << err;

    h[1] = 2;
    std::string body((const char*)h, sizeof h);
    body += std::string(
        "\x01"
        "a"
        "\x02"
        "bc",
        5);  // 2 of the 3 tokens
    write_bytes(path, body.data(), body.size());
    EXPECT_EQ(tokenizer_init(&tok, path, err, sizeof err), 0);
    EXPECT_NE(strstr(err, "truncated"), nullptr) << err;
    EXPECT_EQ(tok.token_table, nullptr);

    write_bytes(path, h, 100);  // short header
    EXPECT_EQ(tokenizer_init(&tok, path, err, sizeof err), 0);
    EXPECT_NE(strstr(err, "truncated header"), nullptr) << err;

    body += std::string("\x00", 1);  // a third, empty token: now complete
    write_bytes(path, body.data(), body.size());
    ASSERT_EQ(tokenizer_init(&tok, path, err, sizeof err), 1) << err;
    EXPECT_STREQ(tokenizer_decode(&tok, 1), "bc");
    EXPECT_EQ(tok.eot_token, 2);
    tokenizer_free(&tok);
    remove(path);
}
