// gpu_test_common.h — what the GPU suites (test_gpu.cu, test_kernels.cu) share: the trainer and the CPU
// reference compiled into one test, the skip when no CUDA device is present, a small-model config, and the
// relative L2 error every comparison uses. No tests and no tolerances here: each suite states its own.
#pragma once
#define TESTING
#include "train_gpt.cu"  // from -I. (or the emulated build's copy, see the Makefile)
#include "gpt2_cpu.h"
#include <gtest/gtest.h>
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
    c.num_layers = L; c.channels = C; c.num_heads = NH; c.max_seq_len = maxT; c.vocab_size = V;
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
