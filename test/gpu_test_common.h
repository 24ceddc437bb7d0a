// gpu_test_common.h — what the GPU suites (test_gpu.cu, test_kernels.cu) share: the trainer and the CPU
// reference compiled into one test, the skip when no CUDA device is present, a small-model config, the
// relative L2 error every comparison uses, and `within`, which prints each comparison's measured margin.
// No tests and no tolerances here: each suite states its own, with the GPU numerics it follows from.
#pragma once
#define TESTING
#include "train_gpt.cu"  // from -I. (or the emulated build's copy, see the Makefile)
#include "llmc/gpt2_cpu.h"
#include <gtest/gtest.h>
#include <string>
#include <vector>

static inline bool have_gpu() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
// First line of every GPU test: CI machines have no GPU, and a skipped test says why.
#define REQUIRE_GPU() \
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device: GPU suite skipped"
// The same suites also run with the kernels emulated on the CPU (build/emu_test_*, test/fake_cuda): a test
// that measures time, or is too large to emulate in make test's time, says so and skips there.
#ifdef FAKE_CUDA_DEVICE
#define SKIP_IN_EMULATION(why) GTEST_SKIP() << "CPU emulation: " << why
#else
#define SKIP_IN_EMULATION(why)
#endif

static inline GPTConfig tiny_config(int L, int C, int NH, int maxT, int V) {
    GPTConfig c;
    c.num_layers = L;
    c.channels = C;
    c.num_heads = NH;
    c.max_seq_len = maxT;
    c.vocab_size = V;
    c.padded_vocab_size = (int)round_up64(V, 128);
    return c;
}

// ||got - ref|| / ||ref|| in double (the absolute norm when ref is all zeros).
static inline double rel_l2(const float* got, const float* ref, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double d = (double)got[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

// One comparison against its bound: prints `[margin] Suite.Test | what | measured | bound | % of bound` (one
// line, for the device log: the first run on a GPU shows how tight each bound is; dev/bench/gpu_window.sh
// names the tightest) and passes when measured < bound (NaN fails). Use as EXPECT_TRUE(within("logits
// rel-L2", err, 2e-2)).
static inline void print_margin(const std::string& what, double measured, double bound) {
    const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
    printf("[margin] %s.%s | %s | %.3e | bound %.1e | %.1f%% of bound\n", t ? t->test_suite_name() : "?",
           t ? t->name() : "?", what.c_str(), measured, bound, 100.0 * measured / bound);
}
static inline ::testing::AssertionResult within(const std::string& what, double measured, double bound) {
    print_margin(what, measured, bound);
    if (measured < bound) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what << ": " << measured << " is not below its bound " << bound;
}
// |got - ref| / |ref| (|got - ref| where ref is 0)
static inline double rel_diff(double got, double ref) {
    return ref != 0 ? fabs(got - ref) / fabs(ref) : fabs(got - ref);
}
