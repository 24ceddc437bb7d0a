// test_attention_path.cpp — the cuDNN attention path's host side: chat positions checked, conversations as
// ragged (THD) sequences with their buckets (llmc/ragged.h), and, where the build has cuDNN's path, loading
// libcudnn: a missing library or no GPU is a false with one readable reason, never a crash.
// Not here: cuDNN's numbers (test_gpu, test_gpu_llama and the self-check at start, on a GPU).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <string>
#include <vector>
#include "llmc/ragged.h"
#ifdef ENABLE_CUDNN
#include "llmc/cudnn_att.h"
#endif

TEST(Positions, EachWithinItsRowIndex) {
    char why[160];
    std::vector<int> pos = {0, 1, 2, 0, 0, 1, 2, 3};  // two rows of 4
    EXPECT_TRUE(positions_valid(pos.data(), 2, 4, why, sizeof why));
    pos[4] = 1;  // row 1's first token cannot see a token before its row
    EXPECT_FALSE(positions_valid(pos.data(), 2, 4, why, sizeof why));
    EXPECT_NE(std::string(why).find("row 1, token 0 has position 1"), std::string::npos) << why;
    pos[4] = 0;
    pos[2] = -1;
    EXPECT_FALSE(positions_valid(pos.data(), 2, 4, why, sizeof why));
}

struct Meta {
    std::vector<int> m;
    RaggedMeta h;
    explicit Meta(int N) : m(ragged_meta_ints(N), -7) { h = ragged_meta_at(m.data(), N); }
};

// cuDNN declares every tensor 16-byte aligned: each of the four arrays starts on 16 bytes of its block, and
// a micro-batch's block is whole 16-byte units (the blocks of several micro-batches follow each other).
TEST(Ragged, EachArrayStartsOn16Bytes) {
    for (int64_t N : {1, 2, 3, 4, 12, 255, 256, 257, 32768}) {
        const int64_t s = ragged_meta_stride(N);
        EXPECT_GE(s, N + 1) << N;
        EXPECT_LT(s, N + 5) << N;
        EXPECT_EQ(ragged_meta_ints(N) * 4 % 16, 0) << N;
        std::vector<int> block(ragged_meta_ints(N));
        const RaggedMeta h = ragged_meta_at(block.data(), N);
        for (const int* a : {h.off_qkv, h.off_out, h.off_stats}) EXPECT_EQ((a - h.seq_len) * 4 % 16, 0) << N;
        EXPECT_LE(h.off_stats + N + 1, block.data() + block.size()) << N;
    }
}

TEST(Ragged, ConversationsBecomeSequencesWithElementOffsets) {
    // B 2, T 6: row 0 holds conversations of 2 and 4 tokens, row 1 of 3, 1 (a piece) and 2
    const std::vector<int> pos = {0, 1, 0, 1, 2, 3, 0, 1, 2, 0, 0, 1};
    const int B = 2, T = 6, NH = 4, NKV = 2, hs = 8, N = B * T;
    const int64_t ld = (NH + 2 * NKV) * hs, od = NH * hs;
    Meta meta(N);
    int bucket = 0;
    ASSERT_EQ(ragged_sequences(pos.data(), B, T, ld, od, NH, meta.h, N, &bucket), 5);
    EXPECT_EQ(bucket, 8);  // a power of two: counts 5..8 share one graph
    const int len[8] = {2, 4, 3, 1, 2, 0, 0, 0}, start[5] = {0, 2, 6, 9, 10};
    for (int k = 0; k < 8; k++) EXPECT_EQ(meta.h.seq_len[k], len[k]) << k;
    for (int k = 0; k <= 8; k++) {
        const int first = k < 5 ? start[k] : N;  // empty slots, and the end, at the last token + 1
        EXPECT_EQ(meta.h.off_qkv[k], first * ld) << k;
        EXPECT_EQ(meta.h.off_out[k], first * od) << k;
        EXPECT_EQ(meta.h.off_stats[k], first * NH) << k;
    }
    int total = 0;
    for (int k = 0; k < bucket; k++) total += meta.h.seq_len[k];
    EXPECT_EQ(total, N);  // every token, padding included, in exactly one sequence
}

TEST(Ragged, PositionsThatAreNotRunsFromZeroAreLeftToOurKernel) {
    const int B = 1, T = 6, N = 6;
    Meta meta(N);
    int bucket = 0;
    const std::vector<int> skip = {0, 1, 3, 4, 5, 6};  // a gap: the fused kernel's "keys t - pos[t] .. t"
    EXPECT_EQ(ragged_sequences(skip.data(), B, T, 8, 8, 1, meta.h, N, &bucket), -1);
    const std::vector<int> fine = {0, 1, 2, 3, 4, 5};
    EXPECT_EQ(ragged_sequences(fine.data(), B, T, 8, 8, 1, meta.h, N, &bucket), 1);
    EXPECT_EQ(bucket, 1);
    EXPECT_EQ(ragged_sequences(fine.data(), B, T, 8, 8, 1, meta.h, 0, &bucket), -1);  // over the capacity
    // 32-bit offsets: a micro-batch whose qkv has 2^31 elements or more is left to our kernel
    EXPECT_EQ(ragged_sequences(fine.data(), B, T, (int64_t)1 << 29, 8, 1, meta.h, N, &bucket), -1);
}

TEST(Ragged, BucketsAreFewAndBoundedByTheTokens) {
    EXPECT_EQ(ragged_bucket(1, 1024), 1);
    EXPECT_EQ(ragged_bucket(3, 1024), 4);
    EXPECT_EQ(ragged_bucket(4, 1024), 4);
    EXPECT_EQ(ragged_bucket(600, 1000), 1000);  // never more sequences than tokens
    int distinct = 0, last = 0;
    for (int c = 1; c <= 8192; c++)
        if (ragged_bucket(c, 8192) != last) last = ragged_bucket(c, 8192), distinct++;
    EXPECT_EQ(distinct, 14);  // 8192 possible counts, 14 graphs at most
}

#ifdef ENABLE_CUDNN
// The loader names what it tried and how to point it elsewhere; no GPU here: cudnnCreate's failure is a line.
TEST(CudnnLoader, AMissingLibraryIsOneReadableLine) {
    setenv("LLMC_CUDNN_LIB", "/nonexistent/libcudnn.so.9", 1);
    char why[512] = "";
    EXPECT_FALSE(cudnn_att_open(why, sizeof why));
    EXPECT_NE(std::string(why).find("no libcudnn.so.9 found"), std::string::npos) << why;
    EXPECT_NE(std::string(why).find("LLMC_CUDNN_LIB"), std::string::npos) << why;
    EXPECT_EQ(std::string(why).find('\n'), std::string::npos) << why;
    unsetenv("LLMC_CUDNN_LIB");
}
TEST(CudnnLoader, WithoutAGpuItFailsCleanlyOrRuns) {
    char why[512] = "";
    const bool ok = cudnn_att_open(why, sizeof why);
    int devices = 0;
    if (!ok) {
        EXPECT_GT(strlen(why), 10u);
        EXPECT_EQ(std::string(why).find('\n'), std::string::npos) << why;
        printf("cudnn_att_open: %s\n", why);
    } else {
        printf("cudnn_att_open: cuDNN %ld from %s\n", cudnn_att_version(), cudnn_att_library());
        EXPECT_GE(cudnn_att_version(), 90000);
        (void)devices;
    }
    // a graph without a handle is refused, not run
    const CudnnAttShape s = {1, 64, 2, 2, 64, 0};
    if (!ok) EXPECT_FALSE(cudnn_att_prepare(&s, why, sizeof why));
}
#endif
