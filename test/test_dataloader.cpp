// test_dataloader.cpp — GoogleTest suite for dataloader.h: sequential order against the raw tokens,
// inputs/targets offset, multi-shard glob order with wrap and epoch count, seeded shuffling (reproducible,
// seed-dependent, a true permutation), save/restore into a fresh loader, and every init error message;
// Llama 3 (uint32) shards and chat shards: targets -1, positions, row shuffle, flag and header refusals.
// Tests write their own small shards under a mkdtemp directory in /tmp (removed at the end); only the
// last test reads the shipped tinyshakespeare val shard, and skips if it has not been made yet.
// Run from the repo root. It does not write shards over 2 GiB; the 64-bit offset math is checked by review.
#include <gtest/gtest.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <set>
#include <string>
#include <utility>
#include <vector>
#include "dataloader.h"

typedef std::vector<int> V;

class DataLoaderTest : public ::testing::Test {
  protected:
    std::string dir;
    std::vector<std::string> files;
    void SetUp() override {
        char tmpl[] = "/tmp/test_dataloader_XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir = tmpl;
    }
    void TearDown() override {
        for (const std::string& f : files) remove(f.c_str());
        rmdir(dir.c_str());
    }
    // Writes a shard with the given header fields and tokens; returns its path.
    std::string write_shard(const std::string& name, const std::vector<uint16_t>& tok,
                            int magic = DATALOADER_MAGIC, int version = DATALOADER_VERSION,
                            int64_t header_count = -1, int extra_bytes = 0) {
        std::string path = dir + "/" + name;
        FILE* f = fopen(path.c_str(), "wb");
        EXPECT_NE(f, nullptr);
        int32_t h[256] = {0};
        h[0] = magic;
        h[1] = version;
        h[2] = (int32_t)(header_count >= 0 ? header_count : (int64_t)tok.size());
        fwrite(h, sizeof h, 1, f);
        if (!tok.empty()) fwrite(tok.data(), 2, tok.size(), f);
        for (int i = 0; i < extra_bytes; i++) fputc(0, f);
        fclose(f);
        files.push_back(path);
        return path;
    }
    // Shard s holds tokens s*1000 + i, so the first input of a batch tells which shard and offset
    // it came from.
    std::string write_numbered(const std::string& name, int s, int n) {
        std::vector<uint16_t> tok(n);
        for (int i = 0; i < n; i++) tok[i] = (uint16_t)(s * 1000 + i);
        return write_shard(name, tok);
    }
    std::string init_error(const std::string& pattern, int B = 2, int T = 4) {
        DataLoader dl;
        char err[512] = "";
        EXPECT_EQ(dataloader_init(&dl, pattern.c_str(), B, T, 0, 0, err, sizeof err), 0);
        dataloader_free(&dl);  // must be safe after a failed init
        EXPECT_EQ(strchr(err, '\n'), nullptr) << "error must be one line: " << err;
        return err;
    }
};

static V batch_inputs(const DataLoader* dl) { return V(dl->inputs, dl->inputs + dl->B * dl->T); }
static V batch_targets(const DataLoader* dl) { return V(dl->targets, dl->targets + dl->B * dl->T); }
// The next n batches, inputs followed by targets.
static std::vector<V> take(DataLoader* dl, int n) {
    std::vector<V> out;
    for (int i = 0; i < n; i++) {
        EXPECT_EQ(dataloader_next_batch(dl), 1) << dl->err;
        V b = batch_inputs(dl), t = batch_targets(dl);
        b.insert(b.end(), t.begin(), t.end());
        out.push_back(b);
    }
    return out;
}

TEST_F(DataLoaderTest, SequentialOrderIsTheRawTokenSequence) {
    const int B = 2, T = 3, n = 40;  // (40-1)/6 = 6 batches; the last 3 tokens are skipped
    std::vector<uint16_t> tok(n);
    for (int i = 0; i < n; i++) tok[i] = (uint16_t)(60000 + i);  // above 32767: ids must be read unsigned
    std::string path = write_shard("one.bin", tok);
    DataLoader dl;
    char err[512];
    ASSERT_EQ(dataloader_init(&dl, path.c_str(), B, T, 0, 0, err, sizeof err), 1) << err;
    EXPECT_EQ(dl.num_batches, 6);
    EXPECT_EQ(dataloader_eval_batches(&dl, 0), 6);
    EXPECT_EQ(dataloader_eval_batches(&dl, 4), 4);
    EXPECT_EQ(dataloader_eval_batches(&dl, 100), 6);
    for (int b = 0; b < 6; b++) {
        ASSERT_EQ(dataloader_next_batch(&dl), 1) << dl.err;
        for (int i = 0; i < B * T; i++) {
            EXPECT_EQ(dl.inputs[i], tok[b * B * T + i]) << "batch " << b << " i " << i;
            EXPECT_EQ(dl.targets[i], tok[b * B * T + i + 1]);  // targets are the inputs shifted by one
        }
    }
    EXPECT_EQ(dl.epoch, 1);  // one shard: after its last batch the loader wraps
    ASSERT_EQ(dataloader_next_batch(&dl), 1);
    EXPECT_EQ(dl.inputs[0], 60000);
    dataloader_reset(&dl);
    EXPECT_EQ(dl.epoch, 0);
    ASSERT_EQ(dataloader_next_batch(&dl), 1);
    EXPECT_EQ(dl.inputs[0], 60000);
    dataloader_free(&dl);
}

TEST_F(DataLoaderTest, ExactFitUsesTheLastTokenAsTarget) {
    const int B = 1, T = 4;
    std::string path = write_numbered("fit.bin", 0, 9);  // 9 = 2*4 + 1: exactly two batches
    DataLoader dl;
    char err[512];
    ASSERT_EQ(dataloader_init(&dl, path.c_str(), B, T, 0, 0, err, sizeof err), 1) << err;
    EXPECT_EQ(dl.num_batches, 2);
    take(&dl, 1);
    ASSERT_EQ(dataloader_next_batch(&dl), 1);
    EXPECT_EQ(batch_inputs(&dl), V({4, 5, 6, 7}));
    EXPECT_EQ(batch_targets(&dl), V({5, 6, 7, 8}));
    dataloader_free(&dl);
}

TEST_F(DataLoaderTest, MultiShardGlobOrderWrapAndEpoch) {
    const int B = 1, T = 5;
    // Written out of order: the loader must sort. Batches: shard 0: 2, shard 1: 3, shard 2: 1.
    write_numbered("shard_002.bin", 2, 6);
    write_numbered("shard_000.bin", 0, 12);
    write_numbered("shard_001.bin", 1, 16);
    write_numbered("other_000.bin", 9, 50);  // must not match the pattern
    std::string pattern = dir + "/shard_*.bin";
    DataLoader dl;
    char err[512];
    ASSERT_EQ(dataloader_init(&dl, pattern.c_str(), B, T, 0, 0, err, sizeof err), 1) << err;
    ASSERT_EQ(dl.num_shards, 3);
    EXPECT_EQ(dl.num_batches, 6);
    const int want[] = {0, 5, 1000, 1005, 1010, 2000};
    for (int epoch = 0; epoch < 3; epoch++) {
        for (int b = 0; b < 6; b++) {
            EXPECT_EQ(dl.epoch, epoch);
            ASSERT_EQ(dataloader_next_batch(&dl), 1) << dl.err;
            EXPECT_EQ(dl.inputs[0], want[b]) << "epoch " << epoch << " batch " << b;
            EXPECT_EQ(dl.targets[T - 1], want[b] + T);
        }
    }
    EXPECT_EQ(dl.epoch, 3);
    dataloader_free(&dl);
}

// First input of each batch over n batches (identifies the batch, see write_numbered).
static V firsts(DataLoader* dl, int n) {
    V out;
    for (int i = 0; i < n; i++) {
        EXPECT_EQ(dataloader_next_batch(dl), 1) << dl->err;
        out.push_back(dl->inputs[0]);
    }
    return out;
}

TEST_F(DataLoaderTest, ShuffleIsSeededAndAPermutationPerEpoch) {
    const int B = 2, T = 4;  // 8 tokens per batch
    const int sizes[] = {8 * 7 + 1, 8 * 12 + 3, 8 * 1 + 1, 8 * 9 + 1, 8 * 5 + 7};
    int64_t total = 0;
    for (int s = 0; s < 5; s++) {
        write_numbered("s" + std::to_string(s) + ".bin", s, sizes[s]);
        total += (sizes[s] - 1) / 8;
    }
    std::string pattern = dir + "/s*.bin";
    DataLoader a, b, c, seq;
    char err[512];
    ASSERT_EQ(dataloader_init(&a, pattern.c_str(), B, T, 1, 1234, err, sizeof err), 1) << err;
    ASSERT_EQ(dataloader_init(&b, pattern.c_str(), B, T, 1, 1234, err, sizeof err), 1) << err;
    ASSERT_EQ(dataloader_init(&c, pattern.c_str(), B, T, 1, 1235, err, sizeof err), 1) << err;
    ASSERT_EQ(dataloader_init(&seq, pattern.c_str(), B, T, 0, 1234, err, sizeof err), 1) << err;
    ASSERT_EQ(a.num_batches, total);
    const int n = (int)total;
    std::set<int> all;
    for (int s = 0; s < 5; s++)
        for (int k = 0; k < (sizes[s] - 1) / 8; k++) all.insert(s * 1000 + k * 8);
    V a0 = firsts(&a, n), b0 = firsts(&b, n), c0 = firsts(&c, n), s0 = firsts(&seq, n);
    EXPECT_EQ(a0, b0);                                    // same seed: same order
    EXPECT_NE(a0, c0);                                    // another seed: another order
    EXPECT_NE(a0, s0);                                    // and not the sequential one
    EXPECT_EQ(std::set<int>(a0.begin(), a0.end()), all);  // each batch position exactly once per epoch
    EXPECT_EQ(std::set<int>(c0.begin(), c0.end()), all);
    EXPECT_EQ(std::set<int>(a0.begin(), a0.end()).size(), a0.size());
    // Batches of one shard stay together (shards are permuted, then batches inside each shard).
    int changes = 0;
    for (int i = 1; i < n; i++) changes += a0[i] / 1000 != a0[i - 1] / 1000;
    EXPECT_EQ(changes, 4);
    EXPECT_EQ(a.epoch, 1);
    V a1 = firsts(&a, n), b1 = firsts(&b, n);
    EXPECT_EQ(a1, b1);
    EXPECT_NE(a1, a0);  // a new permutation every epoch
    EXPECT_EQ(std::set<int>(a1.begin(), a1.end()), all);
    dataloader_reset(&a);
    EXPECT_EQ(firsts(&a, n), a0);  // reset replays epoch 0
    dataloader_free(&a);
    dataloader_free(&b);
    dataloader_free(&c);
    dataloader_free(&seq);
}

// Save mid-epoch, read N batches, restore into a FRESH loader: the same N batches, across shard and
// epoch boundaries.
static void check_resume(const std::string& pattern, int shuffle, int skip, int n) {
    const int B = 2, T = 3;
    DataLoader a, fresh;
    char err[512];
    ASSERT_EQ(dataloader_init(&a, pattern.c_str(), B, T, shuffle, 77, err, sizeof err), 1) << err;
    take(&a, skip);
    DataLoaderState st = dataloader_get_state(&a);
    std::vector<V> want = take(&a, n);
    // The fresh loader is given another seed and shuffle flag, and has read a batch in that order (so it
    // holds a stale epoch-0 shard order): the state's order must win.
    ASSERT_EQ(dataloader_init(&fresh, pattern.c_str(), B, T, !shuffle, 5, err, sizeof err), 1) << err;
    take(&fresh, 1);
    ASSERT_EQ(dataloader_set_state(&fresh, &st, err, sizeof err), 1) << err;
    EXPECT_EQ(take(&fresh, n), want) << "shuffle " << shuffle << " skip " << skip;
    // Restoring into the loader that already moved on rewinds it too.
    ASSERT_EQ(dataloader_set_state(&a, &st, err, sizeof err), 1) << err;
    EXPECT_EQ(take(&a, n), want);
    dataloader_free(&a);
    dataloader_free(&fresh);
}

TEST_F(DataLoaderTest, ResumeGivesTheSameBatches) {
    write_numbered("r0.bin", 0, 6 * 4 + 1);
    write_numbered("r1.bin", 1, 6 * 7 + 2);
    write_numbered("r2.bin", 2, 6 * 3 + 5);
    const std::string pattern = dir + "/r*.bin";  // 14 batches per epoch
    for (int shuffle = 0; shuffle <= 1; shuffle++)
        for (int skip : {0, 1, 4, 5, 13, 14, 20, 31}) check_resume(pattern, shuffle, skip, 25);
}

TEST_F(DataLoaderTest, SetStateRejectsMismatches) {
    write_numbered("m0.bin", 0, 50);
    write_numbered("m1.bin", 1, 50);
    const std::string pattern = dir + "/m*.bin";
    DataLoader a, b;
    char err[512];
    ASSERT_EQ(dataloader_init(&a, pattern.c_str(), 2, 4, 1, 3, err, sizeof err), 1) << err;
    take(&a, 3);
    const DataLoaderState good = dataloader_get_state(&a);
    ASSERT_EQ(dataloader_init(&b, pattern.c_str(), 2, 5, 1, 3, err, sizeof err), 1) << err;
    EXPECT_EQ(dataloader_set_state(&b, &good, err, sizeof err), 0);
    EXPECT_NE(strstr(err, "B=2 T=4"), nullptr) << err;
    DataLoaderState s = good;
    s.total_tokens += 1;
    EXPECT_EQ(dataloader_set_state(&a, &s, err, sizeof err), 0);
    EXPECT_NE(strstr(err, "tokens"), nullptr) << err;
    s = good;
    s.shard_index = 2;
    EXPECT_EQ(dataloader_set_state(&a, &s, err, sizeof err), 0);
    s = good;
    s.batch_index = 6;  // 49/8 = 6 batches per shard: index 6 is one past the end
    EXPECT_EQ(dataloader_set_state(&a, &s, err, sizeof err), 0);
    EXPECT_NE(strstr(err, "batch index"), nullptr) << err;
    s = good;
    s.epoch = -1;
    EXPECT_EQ(dataloader_set_state(&a, &s, err, sizeof err), 0);
    EXPECT_EQ(a.epoch, good.epoch);  // a refused state leaves the loader where it was
    EXPECT_EQ(a.batch_index, good.batch_index);
    EXPECT_EQ(dataloader_set_state(&a, &good, err, sizeof err), 1) << err;
    dataloader_free(&a);
    dataloader_free(&b);
}

static void expect_has(const std::string& err, const std::string& a, const std::string& b) {
    EXPECT_NE(err.find(a), std::string::npos) << "'" << err << "' lacks '" << a << "'";
    EXPECT_NE(err.find(b), std::string::npos) << "'" << err << "' lacks '" << b << "'";
}

TEST_F(DataLoaderTest, InitErrorsNameTheFileAndTheProblem) {
    std::vector<uint16_t> tok(100, 7);
    const std::string missing = dir + "/missing.bin";
    expect_has(init_error(missing), missing, "no files");
    expect_has(init_error(dir + "/nothing_*.bin"), dir + "/nothing_*.bin", "no files");
    const std::string magic = write_shard("magic.bin", tok, 20240326);
    expect_has(init_error(magic), magic, "magic");
    const std::string version = write_shard("version.bin", tok, DATALOADER_MAGIC, 2);
    expect_has(init_error(version), version, "version");
    const std::string longer = write_shard("long.bin", tok, DATALOADER_MAGIC, 1, 100, 2);  // 1 token extra
    expect_has(init_error(longer), longer, "size");
    const std::string shorter = write_shard("short.bin", tok, DATALOADER_MAGIC, 1, 101);  // header says 101
    expect_has(init_error(shorter), shorter, "size");
    const std::string negative = write_shard("negative.bin", tok, DATALOADER_MAGIC, 1, 0xFFFFFFFFll);  // -1
    expect_has(init_error(negative), negative, "size");
    const std::string stub = dir + "/stub.bin";  // shorter than the header itself
    FILE* f = fopen(stub.c_str(), "wb");
    fputs("tiny", f);
    fclose(f);
    files.push_back(stub);
    expect_has(init_error(stub), stub, "size");
    const std::string few = write_shard("few.bin", tok);  // 100 tokens: B*T+1 = 101 does not fit
    expect_has(init_error(few, 10, 10), few, "too short");
    expect_has(init_error(few, 5, 20), "101 tokens", "too short");
    DataLoader ok;
    char err[512];
    EXPECT_EQ(dataloader_init(&ok, few.c_str(), 9, 11, 0, 0, err, sizeof err), 1) << err;  // 99+1 fits
    EXPECT_EQ(ok.num_batches, 1);
    dataloader_free(&ok);
    expect_has(init_error(few, 0, 4), few, "B=0");
    expect_has(init_error(few, 4, -1), few, "T=-1");
    // One bad shard in a glob fails the whole init (checked at start, not when it is reached).
    write_numbered("g_0.bin", 0, 100);
    const std::string bad = write_shard("g_1.bin", tok, 1);
    expect_has(init_error(dir + "/g_*.bin"), bad, "magic");
    // A NULL err buffer is allowed.
    DataLoader dl;
    EXPECT_EQ(dataloader_init(&dl, missing.c_str(), 1, 1, 0, 0, NULL, 0), 0);
    dataloader_free(&dl);
}

TEST_F(DataLoaderTest, ShardChangedAfterInitIsAnErrorNotACrash) {
    const std::string path = write_numbered("gone.bin", 0, 100);
    DataLoader dl;
    char err[512];
    ASSERT_EQ(dataloader_init(&dl, path.c_str(), 2, 4, 0, 0, err, sizeof err), 1) << err;
    ASSERT_EQ(truncate(path.c_str(), DATALOADER_HEADER_BYTES + 10), 0);
    EXPECT_EQ(dataloader_next_batch(&dl), 0);
    EXPECT_NE(strstr(dl.err, path.c_str()), nullptr) << dl.err;
    dataloader_free(&dl);
}

TEST(DataLoaderShipped, TinyShakespeareVal) {
    const char* path = "dev/data/tinyshakespeare/tiny_shakespeare_val.bin";
    if (access(path, R_OK) != 0) GTEST_SKIP() << path << " not made yet";
    DataLoader dl;
    char err[512];
    ASSERT_EQ(dataloader_init(&dl, path, 4, 64, 0, 0, err, sizeof err), 1) << err;
    EXPECT_GT(dl.num_batches, 0);
    EXPECT_EQ(dl.num_batches, (dl.total_tokens - 1) / (4 * 64));
    for (int64_t b = 0; b < dl.num_batches; b++) {
        ASSERT_EQ(dataloader_next_batch(&dl), 1) << dl.err;
        for (int i = 0; i < 4 * 64; i++) {
            ASSERT_GE(dl.inputs[i], 0);
            ASSERT_LT(dl.inputs[i], 50257);  // GPT-2 vocabulary
            if (i + 1 < 4 * 64) { ASSERT_EQ(dl.targets[i], dl.inputs[i + 1]); }
        }
    }
    EXPECT_EQ(dl.epoch, 1);
    dataloader_free(&dl);
}

// ----------------------------------------------------------------------------
// Llama 3 shards (uint32 ids) and chat shards (packed conversations)

// A Llama 3 shard: header {magic, version, count}, then 4-byte ids.
static std::string write_u32(const std::string& path, const std::vector<uint32_t>& tok,
                             int magic = DATALOADER_MAGIC_U32, int version = DATALOADER_VERSION_U32,
                             int64_t header_count = -1) {
    FILE* f = fopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    int32_t h[256] = {0};
    h[0] = magic;
    h[1] = version;
    h[2] = (int32_t)(header_count >= 0 ? header_count : (int64_t)tok.size());
    fwrite(h, sizeof h, 1, f);
    if (!tok.empty()) fwrite(tok.data(), 4, tok.size(), f);
    fclose(f);
    return path;
}

// A chat shard of R rows of T (ids and flags given row-major), token width w; header counts from flags.
struct ChatShard {
    int T = 0, w = 2, version = DATALOADER_CHAT_VERSION, header_T = -1;
    std::vector<uint32_t> tok;
    std::vector<uint8_t> flags;
    int64_t extra_bytes = 0;
};
static std::string write_chat(const std::string& path, const ChatShard& c) {
    FILE* f = fopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    const int64_t n = (int64_t)c.tok.size(), R = n / c.T;
    int32_t h[256] = {0};
    int64_t targets = 0, pads = 0, segments = 0;
    for (uint8_t x : c.flags) {
        targets += (x & CHAT_TARGET) != 0;
        pads += (x & CHAT_PAD) != 0;
        segments += (x & CHAT_START) && !(x & CHAT_PAD);
    }
    h[CHAT_H_MAGIC] = DATALOADER_CHAT_MAGIC;
    h[CHAT_H_VERSION] = c.version;
    h[CHAT_H_TOKEN_BYTES] = c.w;
    h[CHAT_H_T] = c.header_T >= 0 ? c.header_T : c.T;
    h[CHAT_H_ROWS] = (int32_t)R;
    h[CHAT_H_VOCAB] = 1 << 20;
    h[CHAT_H_CONVS] = h[CHAT_H_SEGMENTS] = (int32_t)segments;
    memcpy(&h[CHAT_H_TARGETS], &targets, 8);
    memcpy(&h[CHAT_H_PADS], &pads, 8);
    fwrite(h, sizeof h, 1, f);
    for (uint32_t t : c.tok) {
        if (c.w == 2) {
            const uint16_t s = (uint16_t)t;
            fwrite(&s, 2, 1, f);
        } else {
            fwrite(&t, 4, 1, f);
        }
    }
    fwrite(c.flags.data(), 1, c.flags.size(), f);
    for (int64_t i = 0; i < c.extra_bytes; i++) fputc(0, f);
    fclose(f);
    return path;
}

enum { S = CHAT_START, G = CHAT_TARGET, P = CHAT_PAD };
// Two rows of T=6: conversations {10 11 12* 13*} {20 21*} | {30 31 32*} and 3 pads (* = target).
static ChatShard small_chat() {
    ChatShard c;
    c.T = 6;
    c.tok = {10, 11, 12, 13, 20, 21, 30, 31, 32, 0, 0, 0};
    c.flags = {S, 0, G, G, S, G, S, 0, G, P | S, P, P};
    return c;
}

TEST_F(DataLoaderTest, Uint32ShardsReadIdsAbove65535) {
    const int B = 2, T = 3, n = 20;  // (20-1)/6 = 3 batches
    std::vector<uint32_t> tok(n);
    for (int i = 0; i < n; i++) tok[i] = 65530u + 3u * (uint32_t)i;  // crosses 65535
    const std::string path = write_u32(dir + "/llama.bin", tok);
    files.push_back(path);
    DataLoader dl;
    char err[512];
    ASSERT_EQ(dataloader_init(&dl, path.c_str(), B, T, 0, 0, err, sizeof err), 1) << err;
    EXPECT_EQ(dl.kind, DL_LLAMA3);
    EXPECT_EQ(dl.token_bytes, 4);
    EXPECT_EQ(dl.num_batches, 3);
    for (int b = 0; b < 3; b++) {
        ASSERT_EQ(dataloader_next_batch(&dl), 1) << dl.err;
        EXPECT_EQ(dl.batch_targets, B * T);
        for (int i = 0; i < B * T; i++) {
            EXPECT_EQ(dl.inputs[i], (int)tok[b * B * T + i]);
            EXPECT_EQ(dl.targets[i], (int)tok[b * B * T + i + 1]);
            EXPECT_EQ(dl.pos[i], i % T);
        }
    }
    // batch 2 holds tokens 12..18; a vocabulary of 65566 refuses token 12 (65566): file, index, byte
    EXPECT_EQ(dataloader_check_tokens(&dl, 65585, err, sizeof err), 1) << err;
    EXPECT_EQ(dataloader_check_tokens(&dl, 65566, err, sizeof err), 0);
    expect_has(err, path, "token 12 (byte 1072) is 65566, outside the model's vocabulary of 65566");
    dataloader_free(&dl);
}

TEST_F(DataLoaderTest, Uint32HeaderErrorsAndNoMixing) {
    std::vector<uint32_t> tok(100, 7);
    std::vector<uint16_t> tok16(100, 7);
    const std::string v1 = write_u32(dir + "/v1.bin", tok, DATALOADER_MAGIC_U32, 1);
    const std::string half = write_u32(dir + "/half.bin", tok, DATALOADER_MAGIC_U32, 7, 200);  // 2-byte size
    const std::string gpt2_v7 = write_shard("gpt2_v7.bin", tok16, DATALOADER_MAGIC, 7);
    files.insert(files.end(), {v1, half});
    expect_has(init_error(v1), v1, "unsupported version 1 (want 7 for magic 20240801)");
    expect_has(init_error(half), half, "disagrees with the header's 200 tokens (want 1824 bytes)");
    expect_has(init_error(gpt2_v7), gpt2_v7, "unsupported version 7 (want 1 for magic 20240520)");
    // one glob, two kinds: refused, naming both
    files.push_back(write_u32(dir + "/mix_1.bin", tok));
    write_shard("mix_0.bin", tok16);
    expect_has(init_error(dir + "/mix_*.bin"), "mix_1.bin is Llama 3 (uint32 ids, version 7)",
               "mix_0.bin is GPT-2 (uint16 ids, version 1): one loader reads one kind");
    files.push_back(write_chat(dir + "/mix_2.bin", small_chat()));
    expect_has(init_error(dir + "/mix_[02].bin", 1, 6), "mix_2.bin is chat (uint16 ids)", "one loader");
    // train and val of one run: one token width
    DataLoader a, b, c;
    char err[512];
    ASSERT_EQ(dataloader_init(&a, (dir + "/mix_0.bin").c_str(), 2, 4, 0, 0, err, sizeof err), 1) << err;
    ASSERT_EQ(dataloader_init(&b, (dir + "/mix_1.bin").c_str(), 2, 4, 0, 0, err, sizeof err), 1) << err;
    ASSERT_EQ(dataloader_init(&c, (dir + "/mix_2.bin").c_str(), 1, 6, 0, 0, err, sizeof err), 1) << err;
    EXPECT_EQ(dataloader_check_pair(&a, &b, err, sizeof err), 0);
    expect_has(err, "mix_1.bin is Llama 3", "one run reads one token width");
    EXPECT_EQ(dataloader_check_pair(&a, &c, err, sizeof err), 1) << err;  // both uint16
    EXPECT_EQ(dataloader_check_pair(&a, &a, err, sizeof err), 1) << err;
    dataloader_free(&a);
    dataloader_free(&b);
    dataloader_free(&c);
}

TEST_F(DataLoaderTest, ChatBatchTargetsAndPositions) {
    for (int w : {2, 4}) {
        ChatShard c = small_chat();
        c.w = w;
        if (w == 4) c.tok[4] = 100000, c.tok[5] = 100001;  // ids past uint16 in a uint32 chat shard
        const std::string path = write_chat(dir + "/chat" + std::to_string(w) + ".bin", c);
        files.push_back(path);
        DataLoader dl;
        char err[512];
        ASSERT_EQ(dataloader_init(&dl, path.c_str(), 2, 6, 0, 0, err, sizeof err), 1) << err;
        EXPECT_EQ(dl.kind, DL_CHAT);
        EXPECT_EQ(dl.token_bytes, w);
        EXPECT_EQ(dl.num_batches, 1);
        EXPECT_EQ(dl.total_tokens, 12);
        EXPECT_EQ(dl.total_targets, 4);
        ASSERT_EQ(dataloader_next_batch(&dl), 1) << dl.err;
        const int a = (int)c.tok[4], b = (int)c.tok[5];
        EXPECT_EQ(batch_inputs(&dl), V({10, 11, 12, 13, a, b, 30, 31, 32, 0, 0, 0}));
        // -1: the next token is a prompt token, another conversation's, a pad, or beyond the row
        EXPECT_EQ(batch_targets(&dl), V({-1, 12, 13, -1, b, -1, -1, 32, -1, -1, -1, -1}));
        EXPECT_EQ(V(dl.pos, dl.pos + 12), V({0, 1, 2, 3, 0, 1, 0, 1, 2, 0, 1, 2}));
        EXPECT_EQ(dl.batch_targets, 4);
        EXPECT_EQ(dataloader_check_tokens(&dl, w == 4 ? 100002 : 33, err, sizeof err), 1) << err;
        // row 1's token 2 (32) is token 8 of the file: byte 1024 + 8w
        EXPECT_EQ(dataloader_check_tokens(&dl, w == 4 ? 100001 : 32, err, sizeof err), 0);
        expect_has(err, path, w == 4 ? "token 5 (byte 1044) is 100001" : "token 8 (byte 1040) is 32");
        dataloader_free(&dl);
    }
}

TEST_F(DataLoaderTest, ChatHeaderRefusals) {
    auto path = [&](const char* name) {
        files.push_back(dir + "/" + name);
        return dir + "/" + name;
    };
    const std::string ok = write_chat(path("ok.bin"), small_chat());
    expect_has(init_error(ok, 1, 8), ok, "its rows were packed for T=6, the run has T=8 (run with -t 6");
    expect_has(init_error(ok, 3, 6), ok, "too short: 2 rows, one batch needs B = 3 rows");
    ChatShard c = small_chat();
    c.version = 2;
    const std::string version = write_chat(path("version.bin"), c);
    expect_has(init_error(version, 1, 6), version, "unsupported version 2 of a chat shard");
    c = small_chat();
    c.w = 3;
    const std::string width = write_chat(path("width.bin"), c);
    expect_has(init_error(width, 1, 6), width, "token width 3 bytes");
    c = small_chat();
    c.extra_bytes = 1;
    const std::string longer = write_chat(path("long.bin"), c);
    expect_has(init_error(longer, 1, 6), longer, "disagrees with the header's 2 rows of 6 tokens");
    const std::string cut = write_chat(path("cut.bin"), small_chat());
    ASSERT_EQ(truncate(cut.c_str(), DATALOADER_HEADER_BYTES + 12 * 2 + 11), 0);  // the last flag lost
    expect_has(init_error(cut, 1, 6), cut, "file size 1059 bytes disagrees");
    const std::string header = write_chat(path("header.bin"), small_chat());
    ASSERT_EQ(truncate(header.c_str(), 1000), 0);
    expect_has(init_error(header, 1, 6), header, "smaller than the 1024-byte header");
    // a header whose R*T*(w+1) would overflow int64
    c = small_chat();
    c.header_T = 6;
    const std::string huge = write_chat(path("huge.bin"), c);
    FILE* f = fopen(huge.c_str(), "r+b");
    const int32_t rows = INT32_MAX;
    fseek(f, 4 * CHAT_H_ROWS, SEEK_SET);
    fwrite(&rows, 4, 1, f);
    fclose(f);
    expect_has(init_error(huge, 1, 6), huge, "disagrees with the header's 2147483647 rows");
    // a header that promises targets its flags do not mark: every step would be skipped (a hostile trial)
    const std::string promise = write_chat(path("promise.bin"), small_chat());
    f = fopen(promise.c_str(), "r+b");
    int32_t targets[2];
    fseek(f, 4 * CHAT_H_TARGETS, SEEK_SET);
    ASSERT_EQ(fread(targets, 4, 2, f), 2u);
    const int32_t more[2] = {targets[0] + 5, 0};
    fseek(f, 4 * CHAT_H_TARGETS, SEEK_SET);
    fwrite(more, 4, 2, f);
    fclose(f);
    expect_has(init_error(promise, 1, 6), promise,
               "its flags mark " + std::to_string(targets[0]) + " targets");
    expect_has(init_error(promise, 1, 6), promise, "a corrupt shard");
}

// A chat shard's vocabulary and special tokens (chat_shards.py records them): checked for sense, one glob
// holds one tokenizer's shards, and dataloader_check_model holds them against the model's tokenizer.
TEST_F(DataLoaderTest, ChatShardsOfOneTokenizer) {
    auto patch = [&](const std::string& name, std::vector<std::pair<int, int32_t>> slots, const char* text) {
        const std::string path = write_chat(dir + "/" + name, small_chat());
        files.push_back(path);
        FILE* f = fopen(path.c_str(), "r+b");
        for (const auto& s : slots) {
            fseek(f, 4 * s.first, SEEK_SET);
            fwrite(&s.second, 4, 1, f);
        }
        fseek(f, CHAT_SPECIAL_TEXT_AT, SEEK_SET);
        fwrite(text, 1, strlen(text) + 1, f);
        fclose(f);
        return path;
    };
    const char* eot = "<|eot|>";
    const std::string a =
        patch("tok_a.bin", {{CHAT_H_VOCAB, 1000}, {CHAT_H_SPECIALS, 1}, {CHAT_H_SPECIAL_IDS, 999}}, eot);
    const std::string many = patch("many.bin", {{CHAT_H_SPECIALS, CHAT_MAX_SPECIALS + 1}}, eot);
    expect_has(init_error(many, 1, 6), many,
               "chat header's vocabulary 1048576 or its 17 special tokens are corrupt");
    const std::string past =
        patch("past.bin", {{CHAT_H_VOCAB, 1000}, {CHAT_H_SPECIALS, 1}, {CHAT_H_SPECIAL_IDS, 1000}}, eot);
    expect_has(init_error(past, 1, 6), past, "its 1 special tokens are corrupt");
    // one glob: the same vocabulary and specials (a shard recording none passes)
    patch("glob_0.bin", {{CHAT_H_VOCAB, 1000}, {CHAT_H_SPECIALS, 1}, {CHAT_H_SPECIAL_IDS, 999}}, eot);
    patch("glob_1.bin", {{CHAT_H_VOCAB, 2000}}, "");
    expect_has(init_error(dir + "/glob_*.bin", 1, 6), dir + "/glob_1.bin",
               "was made with a vocabulary of 2000 ids, shard " + dir + "/glob_0.bin with 1000");
    patch("glob_1.bin", {{CHAT_H_VOCAB, 1000}, {CHAT_H_SPECIALS, 1}, {CHAT_H_SPECIAL_IDS, 999}}, "<|end|>");
    expect_has(init_error(dir + "/glob_*.bin", 1, 6), dir + "/glob_1.bin", "record different special tokens");
    patch("glob_1.bin", {{CHAT_H_VOCAB, 1000}}, "");
    DataLoader dl;
    char err[512];
    ASSERT_EQ(dataloader_init(&dl, (dir + "/glob_*.bin").c_str(), 1, 6, 0, 0, err, sizeof err), 1) << err;
    EXPECT_EQ(dl.vocab, 1000);
    // against a model: its tokenizer's size and texts, or with none its vocabulary (unused rows up to V/64)
    std::vector<std::string> names(1000, "x");
    std::vector<const char*> table;
    for (const std::string& n : names) table.push_back(n.c_str());
    auto check = [&](int V, int64_t n, const char* tok) {
        err[0] = 0;
        return dataloader_check_model(&dl, V, "M", n ? table.data() : NULL, n, tok, err, sizeof err);
    };
    EXPECT_EQ(check(1000, 1000, "t.json"), 0);
    EXPECT_NE(strstr(err,
                     "token 999 is '<|eot|>' in the tokenizer the shards were made with, 'x' in the model "
                     "M's tokenizer t.json"),
              nullptr)
        << err;
    names[999] = eot;
    table[999] = names[999].c_str();
    EXPECT_EQ(check(1000, 1000, "t.json"), 1) << err;
    EXPECT_EQ(check(1200, 999, "t.json"), 0);
    EXPECT_NE(strstr(err, "was made with a tokenizer of 1000 ids, the model M's tokenizer t.json has 999"),
              nullptr)
        << err;
    EXPECT_EQ(check(1015, 0, ""), 1) << err;  // 15 unused rows <= 1015/64
    EXPECT_EQ(check(1016, 0, ""), 0);         // 16 > 1016/64 = 15
    EXPECT_NE(strstr(err, "a tokenizer of 1000 ids, the model M has a vocabulary of 1016"), nullptr) << err;
    EXPECT_EQ(check(999, 0, ""), 0);
    dataloader_free(&dl);
}

TEST_F(DataLoaderTest, ChatMalformedFlagsAreAnErrorAtTheirBatch) {
    struct Case {
        int at;
        uint8_t flag;
        const char* why;
    };
    const Case cases[] = {
        {6, 0, "row 1, token 0: the row does not begin a conversation"},
        {7, 8, "row 1, token 1: unknown flag bits"},
        {6, S | G, "row 1, token 0: a conversation's first token or a pad is flagged a target"},
        {11, P | G, "row 1, token 5: a conversation's first token or a pad is flagged a target"},
        {11, 0, "row 1, token 5: a token after the padding"},
        {9, P, "row 1, token 3: the padding does not begin with a start flag"}};
    for (const Case& k : cases) {
        ChatShard c = small_chat();
        c.flags[k.at] = k.flag;
        const std::string path = write_chat(dir + "/flags.bin", c);
        DataLoader dl;
        char err[512];
        ASSERT_EQ(dataloader_init(&dl, path.c_str(), 1, 6, 0, 0, err, sizeof err), 1) << err;
        ASSERT_EQ(dataloader_next_batch(&dl), 1) << dl.err;  // row 0 is fine
        EXPECT_EQ(dataloader_next_batch(&dl), 0) << k.why;
        expect_has(dl.err, path, k.why);
        dataloader_free(&dl);
    }
    files.push_back(dir + "/flags.bin");
}

// Rows of T=4, row r = {r+100 (start), r+200, r+300 (target), r+400 (target)}: the first input names the row.
static ChatShard numbered_rows(int R) {
    ChatShard c;
    c.T = 4;
    for (int r = 0; r < R; r++) {
        c.tok.insert(c.tok.end(),
                     {(uint32_t)r + 100, (uint32_t)r + 200, (uint32_t)r + 300, (uint32_t)r + 400});
        c.flags.insert(c.flags.end(), {S, 0, G, G});
    }
    return c;
}

TEST_F(DataLoaderTest, ChatShufflesRowsAndResumes) {
    files.push_back(write_chat(dir + "/rows_0.bin", numbered_rows(20)));  // B=3: 6 batches, 2 rows left out
    files.push_back(write_chat(dir + "/rows_1.bin", numbered_rows(7)));   // 2 batches
    const std::string pattern = dir + "/rows_*.bin";
    DataLoader seq, a, b;
    char err[512];
    ASSERT_EQ(dataloader_init(&seq, pattern.c_str(), 3, 4, 0, 0, err, sizeof err), 1) << err;
    ASSERT_EQ(dataloader_init(&a, pattern.c_str(), 3, 4, 1, 42, err, sizeof err), 1) << err;
    ASSERT_EQ(dataloader_init(&b, pattern.c_str(), 3, 4, 1, 42, err, sizeof err), 1) << err;
    EXPECT_EQ(seq.num_batches, 8);
    std::vector<int> seq_rows, shuf_rows;
    for (int k = 0; k < 8; k++) {
        ASSERT_EQ(dataloader_next_batch(&seq), 1) << seq.err;
        ASSERT_EQ(dataloader_next_batch(&a), 1) << a.err;
        for (int r = 0; r < 3; r++) {
            seq_rows.push_back(seq.inputs[4 * r] - 100);
            shuf_rows.push_back(a.inputs[4 * r] - 100 + (a.last_file == 1 ? 1000 : 0));
            EXPECT_EQ(a.targets[4 * r + 1], a.inputs[4 * r] + 200);  // each row stays whole
            EXPECT_EQ(a.targets[4 * r + 3], -1);
        }
        EXPECT_EQ(a.batch_targets, 6);
    }
    const V want_seq = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 0, 1, 2, 3, 4, 5};
    EXPECT_EQ(seq_rows, want_seq);
    std::set<int> distinct(shuf_rows.begin(), shuf_rows.end());
    EXPECT_EQ(distinct.size(), shuf_rows.size());  // no row twice in an epoch
    int in_first = 0;
    for (int r : shuf_rows) in_first += r < 1000;
    EXPECT_EQ(in_first, 18);
    EXPECT_NE(shuf_rows, want_seq);
    // rows of a batch are not neighbours in the file: the shuffle is per row
    int neighbours = 0;
    for (size_t i = 0; i + 1 < shuf_rows.size(); i += 3) neighbours += shuf_rows[i + 1] == shuf_rows[i] + 1;
    EXPECT_LT(neighbours, 8);
    dataloader_free(&seq);
    dataloader_free(&a);
    dataloader_free(&b);
    for (int shuffle = 0; shuffle <= 1; shuffle++)
        for (int skip : {0, 3, 5, 6, 8, 13}) {
            DataLoader x, y;
            ASSERT_EQ(dataloader_init(&x, pattern.c_str(), 3, 4, shuffle, 9, err, sizeof err), 1) << err;
            ASSERT_EQ(dataloader_init(&y, pattern.c_str(), 3, 4, !shuffle, 1, err, sizeof err), 1) << err;
            take(&x, skip);
            const DataLoaderState st = dataloader_get_state(&x);
            const std::vector<V> want = take(&x, 10);
            take(&y, 1);
            ASSERT_EQ(dataloader_set_state(&y, &st, err, sizeof err), 1) << err;
            EXPECT_EQ(take(&y, 10), want) << "shuffle " << shuffle << " skip " << skip;
            dataloader_free(&x);
            dataloader_free(&y);
        }
}

TEST_F(DataLoaderTest, PretrainingPositionsAndTargetCount) {
    const std::string path = write_numbered("p.bin", 0, 30);
    DataLoader dl;
    char err[512];
    ASSERT_EQ(dataloader_init(&dl, path.c_str(), 2, 5, 0, 0, err, sizeof err), 1) << err;
    EXPECT_EQ(dl.kind, DL_GPT2);
    ASSERT_EQ(dataloader_next_batch(&dl), 1) << dl.err;
    EXPECT_EQ(V(dl.pos, dl.pos + 10), V({0, 1, 2, 3, 4, 0, 1, 2, 3, 4}));
    EXPECT_EQ(dl.batch_targets, 10);
    for (int i = 0; i < 10; i++) EXPECT_NE(dl.targets[i], -1);
    dataloader_free(&dl);
}
