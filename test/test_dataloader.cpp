// test_dataloader.cpp — GoogleTest suite for dataloader.h: sequential order against the raw tokens,
// inputs/targets offset, multi-shard glob order with wrap and epoch count, seeded shuffling (reproducible,
// seed-dependent, a true permutation), save/restore into a fresh loader, and every init error message.
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
