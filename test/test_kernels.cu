// test_kernels.cu — kernel-level GPU tests: when test_gpu.cu's end-to-end comparison fails, the failing test
// here names the kernel. Each GPU kernel of kernels.cuh, each cuBLAS wrapper of matmul.cuh (matmul_batched
// through the attention path only), the whole attention path (per-head batched GEMMs reading q, k, v in
// place in qkv -> softmax_causal_* -> y written in place, attention_forward/backward on a GPT's
// workspace), the fused attention (flash_attention.cuh: the mma.sync fragment table against an exact integer
// matmul, the ldmatrix fragment loads, forward y and lse, backward dq/dk/dv, at head sizes 32/64/80/96/128
// and T = 1, 37, 64, 70, 100, 130, 200, 1024), and one whole layer with either attention (layer_forward, then
// layer_forward(NULL) + layer_backward) are compared with the fp32 functions of gpt2_cpu.h on the same
// inputs; both attention paths with grouped-query heads and packed sequences (pos) against llama_cpu.h's
// gqa_attention_*, the embeddings by pos and the loss with -1 targets too (issues 31, 32). Shapes exercise
// the edges: T = 37 (not a multiple of 32) and 64, C = 96 and 128 with hs = 32, attention also at hs = 64
// (GPT-2's) and hs = 20 (not a multiple of 8: cuBLAS strides without 16-byte alignment), N = 259 rows (not a
// multiple of the 8 rows per block, more than one 256-row tile), V = 2500 with Vp = 2560 (more than the 1024
// threads of a row block), element counts past grid_for's cap (so the grid-stride loops loop), and parameter
// gradients accumulated by two calls (they must ADD). Not checked here: head_forward/head_backward as a unit
// (their kernels are checked one by one), stream.cu (weight streaming, gradient hand-off: test_stream.cpp),
// the optimizer thread, gpt_step's orchestration and micro-batch accumulation (test_gpu.cu covers those),
// int64 indexing past 2^31 elements and the 65535 row-tile cap. Every test skips (GTEST_SKIP) when no CUDA
// device is present; make test also runs them all with the kernels emulated on the CPU
// (build/emu_test_kernels, test/fake_cuda/fake_device.h: CPU math, not the GPU's).
//
// Method: random inputs are ROUNDED TO bf16 first and the very same values go to both sides, so a GPU
// result differs from the CPU's only by its bf16 output rounding and fp32 summation order. Errors are the
// relative L2 error ||gpu - cpu|| / ||cpu|| over a whole tensor, printed for the device log. Tolerances:
//   1e-2  bf16 output of fp32 math on identical inputs: one rounding, <= 2^-9 ~ 2e-3 per element (a bug in
//         an index or a formula gives O(1));
//   1e-5 / 1e-4  fp32 results our kernels sum from identical inputs (only the order differs: ~1e-6);
//   1e-3  fp32 results of cuBLAS (dW): its tensor-core accumulation order is unspecified;
//   2e-2 / 3e-2  results behind several bf16 intermediates (attention, a whole layer forward / the layer's
//         gradients): a CPU emulation of the GPU's bf16 rounding points on these inputs gave <= 5e-3 forward,
//         <= 8e-3 for gradients, so the margin is ~4x;
//   exact  only where the GPU promises it: layout kernels, the bf16 conversion (round-to-nearest-even on both
//         sides), dloss_scale = 0, padded dlogits columns (structural zeros), small-integer mma products
//         (exact in fp32), the GPU AdamW against cpu_adam.cpp (the kernel uses the IEEE-rounded __f*_rn
//         intrinsics, which --use_fast_math leaves alone, and no atomics: the same correctly rounded
//         operations in one order), two runs of one of our kernels without atomics, and the recompute of a
//         layer (the same cuBLAS / cuBLASLt calls with our own workspace on one stream, which cuBLAS
//         documents as bit-wise reproducible on one GPU).
// Every bound is printed with what was measured ("[margin] ..." lines, gpu_test_common.h `within`), so the
// first run on a GPU shows how tight each is. Where a GPU's numerics differ from the emulation's (approximate
// exp, log, rsqrt and tanh under --use_fast_math; fp32 atomics in any order; cuBLAS's tensor-core summation
// order), the bound is set from the GPU's: each such difference is ~1e-6 relative, far below a
// bf16 rounding (2^-9).
#include "gpu_test_common.h"
#include "gqa_reference.h"  // defines: GqaCase, kGqaCases, GqaReference, gqa_name, packed_positions
#include <algorithm>
#include <string>
#include <vector>

namespace {

// ----------------------------------------------------------------------------
// Helpers: the error measure (random inputs and device buffers: gpu_test_common.h).

// ||got - ref|| / ||ref|| against its bound: prints the margin for the device log (gpu_test_common.h
// `within`) and passes when below it (NaN fails). EXPECT_TRUE(check(...)).
::testing::AssertionResult check(const std::string& what, const float* got, const float* ref, int64_t n,
                                 double bound) {
    return within(what + " rel-L2", rel_l2(got, ref, n), bound);
}
::testing::AssertionResult check(const std::string& what, const std::vector<float>& got,
                                 const std::vector<float>& ref, double bound) {
    if (got.size() != ref.size())
        return ::testing::AssertionFailure() << what << ": size " << got.size() << " vs " << ref.size();
    return check(what, got.data(), ref.data(), (int64_t)ref.size(), bound);
}
// dq, dk, dv of a (N, 3C) gradient apart (the q | k | v columns of each row), each within tol of ref: tells
// which of an attention backward's products is off.
void check_dqkv_parts(const char* what, const std::vector<float>& got, const std::vector<float>& ref,
                      int64_t N, int C, double tol) {
    const char* part_names[3] = {"dq", "dk", "dv"};
    for (int part = 0; part < 3; part++) {
        std::vector<float> g_part, r_part;
        for (int64_t r = 0; r < N; r++)
            for (int c = part * C; c < (part + 1) * C; c++) {
                g_part.push_back(got[(size_t)(r * 3 * C + c)]);
                r_part.push_back(ref[(size_t)(r * 3 * C + c)]);
            }
        const std::string name = std::string(what) + " " + part_names[part];
        EXPECT_TRUE(check(name.c_str(), g_part, r_part, tol)) << name;
    }
}
// Non-zero entries above the diagonal of (rows, T) causal score rows, row r being query t1 = r % T.
int64_t above_diagonal_nonzeros(const std::vector<float>& att, int64_t rows, int T) {
    int64_t n = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int j = (int)(r % T) + 1; j < T; j++) n += att[(size_t)(r * T + j)] != 0.0f;
    return n;
}

// A small GPT built for what the train_gpt.cu functions under test take from it: the cuBLAS handle (bound
// to g.stream.compute), B, T and the config, one layer's workspace g.acts and g.layer_grads. No weights.
struct TestGPT {
    GPT g;
    TestGPT(const GPTConfig& c, int B, int T) {
        TrainArgs a;
        train_args_defaults(&a);
        gpt_build(&g, &c, B, T, 1, 2, 0, 0, &a);
    }
    ~TestGPT() { gpt_free(&g); }
    TestGPT(const TestGPT&) = delete;
    TestGPT& operator=(const TestGPT&) = delete;
};

const cudaStream_t kStream = 0;      // the kernels that need no cuBLAS run on the legacy stream
const int kB = 7, kT = 37, kC = 96;  // N = 259 rows: not a multiple of 8 rows per block, two 256-row tiles
const int64_t kN = (int64_t)kB * kT;

// ----------------------------------------------------------------------------
// Embeddings

TEST(Kernels, EmbeddingForwardMatchesEncoderForward) {
    REQUIRE_GPU();
    const int B = 2, T = 37, C = kC, V = 100, Vp = 128, maxT = 64;
    const int64_t N = (int64_t)B * T;
    auto wte = rand_bf16((int64_t)Vp * C, -1, 1, 1), wpe = rand_bf16((int64_t)maxT * C, -1, 1, 2);
    auto tok = rand_tokens(N, V, 3);
    tok[1] = V - 1;
    DeviceMem m;
    bf16* out = m.zeros<bf16>(N * C);
    embedding_forward(out, m.copy(tok), m.bf16s(wte), m.bf16s(wpe), N, T, C, kStream);
    std::vector<float> ref((size_t)(N * C));
    encoder_forward(ref.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    EXPECT_TRUE(
        check("embedding_forward out", download(out, N * C), ref, 1e-2));  // bf16 output: one rounding
}

TEST(Kernels, EmbeddingBackwardMatchesEncoderBackward) {
    REQUIRE_GPU();
    const int B = 2, T = 37, C = kC, V = 100, Vp = 128, maxT = 64;
    const int64_t N = (int64_t)B * T;
    auto dout = rand_bf16(N * C, -1, 1, 4);
    auto tok = rand_tokens(N, V, 5);
    tok[N - 1] = tok[N - 2] = tok[0];  // the same token at several positions: colliding atomics
    DeviceMem m;
    float* dwte = m.zeros<float>((int64_t)Vp * C);
    float* dwpe = m.zeros<float>((int64_t)maxT * C);
    bf16* d_dout = m.bf16s(dout);
    int* d_tok = m.copy(tok);
    std::vector<float> ref_wte((size_t)Vp * C, 0.0f), ref_wpe((size_t)maxT * C, 0.0f);
    for (int rep = 0; rep < 2; rep++) {  // twice: the second call must add to the first
        embedding_backward(dwte, dwpe, d_dout, d_tok, N, T, C, kStream);
        encoder_backward(ref_wte.data(), ref_wpe.data(), dout.data(), tok.data(), B, T, C);
    }
    // fp32 sums of a few identical bf16 values, only the order differs
    EXPECT_TRUE(check("embedding_backward dwte", download(dwte, (int64_t)Vp * C), ref_wte, 1e-5));
    EXPECT_TRUE(check("embedding_backward dwpe", download(dwpe, (int64_t)maxT * C), ref_wpe, 1e-5));
}

// ----------------------------------------------------------------------------
// LayerNorm

// LayerNorm: C = 96 (in 16-byte Pack8s) and C = 60 (element by element)
TEST(Kernels, LayerNormForwardMatchesCpu) {
    REQUIRE_GPU();
    const int64_t N = kN;
    for (int C : {kC, 60}) {
        auto inp = rand_bf16(N * C, -2, 3, 10), w = rand_bf16(C, 0.5f, 1.5f, 11),
             b = rand_bf16(C, -0.5f, 0.5f, 12);
        DeviceMem m;
        bf16* out = m.zeros<bf16>(N * C);
        float *mean = m.zeros<float>(N), *rstd = m.zeros<float>(N);
        layernorm_forward(out, mean, rstd, m.bf16s(inp), m.bf16s(w), m.bf16s(b), N, C, kStream);
        std::vector<float> ref((size_t)(N * C)), ref_mean((size_t)N), ref_rstd((size_t)N);
        layernorm_forward(ref.data(), ref_mean.data(), ref_rstd.data(), inp.data(), w.data(), b.data(), N, C);
        EXPECT_TRUE(check("layernorm_forward out", download(out, N * C), ref, 1e-2));  // bf16 output
        // fp32 from identical inputs (the mean is ~0.5, not near 0): order of sums and rsqrtf only
        EXPECT_TRUE(check("layernorm_forward mean", download(mean, N), ref_mean, 1e-5));
        EXPECT_TRUE(check("layernorm_forward rstd", download(rstd, N), ref_rstd, 1e-5));
    }
}

TEST(Kernels, LayerNormBackwardMatchesCpu) {
    REQUIRE_GPU();
    const int64_t N = kN;
    // kC: one fused kernel; 60: the element-wise kernels; 4104: Pack8s, but too wide to fuse (2C sums)
    for (int C : {kC, 60, 4104}) {
        SCOPED_TRACE("C = " + std::to_string(C));
        auto inp = rand_bf16(N * C, -2, 3, 13), w = rand_bf16(C, 0.5f, 1.5f, 14),
             b = rand_bf16(C, -0.5f, 0.5f, 15);
        auto dout = rand_bf16(N * C, -1, 1, 16);
        std::vector<float> ln((size_t)(N * C)), mean((size_t)N), rstd((size_t)N);
        layernorm_forward(ln.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
        DeviceMem m;  // both sides get the CPU's mean and rstd
        bf16* dinp = m.zeros<bf16>(N * C);
        float *dw = m.zeros<float>(C), *db = m.zeros<float>(C);
        bf16 *d_dout = m.bf16s(dout), *d_inp = m.bf16s(inp), *d_w = m.bf16s(w);
        float *d_mean = m.copy(mean), *d_rstd = m.copy(rstd);
        std::vector<float> ref_dinp((size_t)(N * C), 0.0f), ref_dw((size_t)C, 0.0f), ref_db((size_t)C, 0.0f);
        for (int rep = 0; rep < 2; rep++) {  // twice: dinp, dw and db must all accumulate
            layernorm_backward(dinp, dw, db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C, kStream);
            layernorm_backward(ref_dinp.data(), ref_dw.data(), ref_db.data(), dout.data(), inp.data(),
                               w.data(), mean.data(), rstd.data(), N, C);
        }
        EXPECT_TRUE(
            check("layernorm_backward dinp", download(dinp, N * C), ref_dinp, 1e-2));  // bf16, rounded twice
        EXPECT_TRUE(
            check("layernorm_backward dw", download(dw, C), ref_dw, 1e-4));  // fp32 sums over 259 rows
        EXPECT_TRUE(check("layernorm_backward db", download(db, C), ref_db, 1e-4));
    }
}

// ----------------------------------------------------------------------------
// Bias, GELU

// Element-wise kernels: OC a multiple of 8 (the 16-byte path) and not (element by element).
TEST(Kernels, AddBiasMatchesCpu) {
    REQUIRE_GPU();
    const int64_t N = 2001;
    // 3 * kC: N * OC = 576288 > grid_for's 2112 blocks x 256 threads x 8: the loop runs; 60: the scalar path
    for (int OC : {3 * kC, 60}) {
        auto out0 = rand_bf16(N * OC, -2, 2, 20), bias = rand_bf16(OC, -1, 1, 21),
             res = rand_bf16(N * OC, -2, 2, 22);
        DeviceMem m;
        printf("  OC = %d\n", OC);
        for (int with_res = 0; with_res < 2; with_res++) {
            bf16* out = m.bf16s(out0);
            add_bias(out, m.bf16s(bias), with_res ? m.bf16s(res) : NULL, N, OC, kStream);
            std::vector<float> ref(
                out0);  // gpt2_cpu.h adds the bias inside matmul_forward, then residual_forward
            for (int64_t i = 0; i < N; i++)
                for (int o = 0; o < OC; o++) ref[(size_t)(i * OC + o)] += bias[(size_t)o];
            if (with_res) residual_forward(ref.data(), ref.data(), res.data(), N * OC);
            EXPECT_TRUE(check(with_res ? "add_bias + residual" : "add_bias", download(out, N * OC), ref,
                              1e-2));  // bf16
        }
    }
}

TEST(Kernels, BiasBackwardMatchesMatmulBackwardDbias) {
    REQUIRE_GPU();
    const int64_t N = 2001;  // 8 row tiles of 256, the last one partial
    const int IC = 32;       // matmul_backward needs an input width; only its dbias is compared
    for (int OC : {kC, 3 * kC, 4 * kC, 100}) {  // 100: not a multiple of 8, the element-wise kernel
        auto dout = rand_bf16(N * OC, -1, 1, 30 + OC);
        DeviceMem m;
        float* db = m.zeros<float>(OC);
        bf16* d_dout = m.bf16s(dout);
        std::vector<float> ref_db((size_t)OC, 0.0f), dinp((size_t)(N * IC)), dw((size_t)OC * IC, 0.0f);
        std::vector<float> zero_inp((size_t)(N * IC), 0.0f), zero_w((size_t)OC * IC, 0.0f);
        for (int rep = 0; rep < 2; rep++) {  // twice: it must add
            bias_backward(db, d_dout, N, OC, kStream);
            matmul_backward(dinp.data(), dw.data(), ref_db.data(), dout.data(), zero_inp.data(),
                            zero_w.data(), N, IC, OC);
        }
        char name[64];
        snprintf(name, sizeof name, "bias_backward OC=%d", OC);
        EXPECT_TRUE(
            check(name, download(db, OC), ref_db, 1e-4));  // fp32 sums of 2001 identical values, any order
    }
}

// The fused MLP bias + GELU (layer_forward's only GELU): the pre-activation it keeps is exactly
// bf16(pre + bias) (one IEEE add of two bf16 values, one rounding, on both sides), the GELU of it matches
// gpt2_cpu.h up to its bf16 output (1e-2). N*OC past grid_for's cap, OC not a power of 2.
TEST(Kernels, BiasGeluForwardMatchesCpu) {
    REQUIRE_GPU();
    const int64_t N = 1501;
    for (int OC : {384, 60}) {  // the 16-byte path and the scalar one
        auto pre = rand_bf16(N * OC, -4, 4, 43), bias = rand_bf16(OC, -1, 1, 44);
        DeviceMem m;
        bf16 *pre_d = m.bf16s(pre), *out_d = m.zeros<bf16>(N * OC);
        bias_gelu_forward(pre_d, out_d, m.bf16s(bias), N, OC, kStream);
        std::vector<float> with_bias((size_t)(N * OC)), ref((size_t)(N * OC));
        for (int64_t i = 0; i < N * OC; i++)
            with_bias[(size_t)i] = bf16_to_float(float_to_bf16(pre[(size_t)i] + bias[(size_t)(i % OC)]));
        gelu_forward(ref.data(), with_bias.data(), N * OC);  // gpt2_cpu.h
        const int64_t bad_pre = count_bit_diff(download(pre_d, N * OC), with_bias);
        printf("  bias_gelu_forward: %lld of %lld kept pre-activations differ from bf16(pre + bias)\n",
               (long long)bad_pre, (long long)(N * OC));
        EXPECT_EQ(bad_pre, 0);
        EXPECT_TRUE(check("bias_gelu_forward gelu", download(out_d, N * OC), ref, 1e-2));  // bf16 output
    }
}

// The GELU a layer with kept activations redoes before its backward pass (train_gpt.cu) must give the values
// bias_gelu_forward gave in the forward pass, bit for bit, from the pre-activation it kept.
TEST(Kernels, GeluForwardRedoesBiasGeluForward) {
    REQUIRE_GPU();
    const int64_t N = 1501;
    for (int OC : {384, 60}) {  // the 16-byte paths, then the scalar ones (N * 60 is not a multiple of 8)
        auto pre = rand_bf16(N * OC, -6, 6, 45), bias = rand_bf16(OC, -1, 1, 46);
        DeviceMem m;
        bf16 *pre_d = m.bf16s(pre), *out_d = m.zeros<bf16>(N * OC), *redo_d = m.zeros<bf16>(N * OC);
        bias_gelu_forward(pre_d, out_d, m.bf16s(bias), N, OC, kStream);
        gelu_forward(redo_d, pre_d, N * OC, kStream);
        const std::vector<float> out = download(out_d, N * OC);
        EXPECT_EQ(count_bit_diff(download(redo_d, N * OC), out), 0) << "OC " << OC;
    }
}

TEST(Kernels, GeluBackwardMatchesCpu) {
    REQUIRE_GPU();
    for (int64_t n : {600001, 600000}) {  // scalar, then the 16-byte path
        auto inp = rand_bf16(n, -5, 5, 41), dout = rand_bf16(n, -1, 1, 42);
        DeviceMem m;
        bf16* d = m.bf16s(dout);
        gelu_backward(d, m.bf16s(inp), n, kStream);  // in place
        std::vector<float> ref((size_t)n);
        gelu_backward(ref.data(), inp.data(), dout.data(), n);
        EXPECT_TRUE(check("gelu_backward", download(d, n), ref, 1e-2));  // bf16 output
    }
}

// kernels.cuh computes GELU as x * s with s = 0.5 (1 + tanh u) = 1 / (1 + exp(-2u)), and its derivative with
// sech^2(u) = 4 e / (1 + e)^2, e = exp(-2|u|). Not tanhf: 1 + tanh(u) and 1 - tanh^2(u) cancel for x < 0 (at
// x = -3, 1 + tanh(u) = 0.0024; at x = -5, ~1e-7, below an fp32 ulp of 1), and under --use_fast_math nvcc
// makes tanhf the tanh.approx.f32 instruction, whose relative error of ~2^-11 is then ~20% of GELU(-3). e
// lies in (0, 1] (no overflow) and every step keeps its relative error near fp32's, also with the fast exp
// and division. GELU and its derivative at every normal bf16 value in [-9, 9] (beyond -9 the exp leaves
// fp32's normal range), element by element against double precision: the bf16 result within one bf16 ulp of
// the exact value rounded to bf16 (the fp32 result may fall on the other side of a rounding boundary), or
// within 1e-37 where the exact value is that small (subnormal in fp32: flushed to zero under --use_fast_math,
// e.g. GELU(1e-38)). rel-L2 (the tests above) cannot see errors where GELU is tiny, x < -2; this can: the
// textbook 0.5 x (1 + tanhf(u)) in fp32 fails it at x < -4 (1 + tanh(u) below an fp32 ulp of 1), and on a GPU
// under --use_fast_math (tanh.approx.f32) already at x = -3.
TEST(Kernels, GeluIsAccurateAtEveryBf16Input) {
    REQUIRE_GPU();
    std::vector<float> xs;
    for (uint32_t bits = 0; bits < 0x10000; bits++) {
        const float x = bf16_to_float((uint16_t)bits);
        if (std::isfinite(x) && fabsf(x) <= 9.0f && (x == 0.0f || fabsf(x) >= 1.17549435e-38f))
            xs.push_back(x);
    }
    const int64_t n = (int64_t)xs.size();
    DeviceMem m;
    bf16* y = m.zeros<bf16>(n);
    bf16* dy = m.bf16s(std::vector<float>((size_t)n, 1.0f));
    gelu_forward(y, m.bf16s(xs), n, kStream);
    gelu_backward(dy, m.bf16s(xs), n, kStream);  // gelu'(x) * 1
    const std::vector<float> got_y = download(y, n), got_dy = download(dy, n);
    auto off = [](float got,
                  double exact) {  // how far from bf16(exact), in bf16 ulps of it; 0 if within 1e-37
        const float ref = bf16_to_float(float_to_bf16((float)exact));
        if (fabs((double)got - exact) <= 1e-37) return 0.0;
        int e;
        frexp((double)ref, &e);
        return fabs((double)got - (double)ref) / ldexp(1.0, e - 8);  // bf16: 8 significant bits
    };
    // and, for the margin line, how far from the exact value itself, in bf16 ulps: <= 1.5 follows from the
    // test (the neighbour of bf16(exact) is at most 1.5 ulps away), and the distance is continuous,
    // not whole ulps
    auto off_exact = [](float got, double exact) {
        if (fabs((double)got - exact) <= 1e-37) return 0.0;
        int e;
        frexp((double)bf16_to_float(float_to_bf16((float)exact)), &e);
        return fabs((double)got - exact) / ldexp(1.0, e - 8);
    };
    double worst_y = 0.0, worst_dy = 0.0, worst_exact = 0.0;
    float at_y = 0.0f, at_dy = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        // 0.5 (1 + tanh u) and 1 - tanh^2 u without their cancellation (in double, 1 - tanh^2 is 0 from |u|
        // = 19 on)
        const double x = xs[(size_t)i], u = 0.7978845608028654 * (x + 0.044715 * x * x * x),
                     e = exp(-2.0 * fabs(u));
        const double s = u >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e), sech2 = 4.0 * e / ((1.0 + e) * (1.0 + e));
        const double gelu = x * s,
                     grad = s + 0.5 * x * sech2 * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
        const double oy = off(got_y[(size_t)i], gelu), ody = off(got_dy[(size_t)i], grad);
        if (!(oy <= worst_y)) {
            worst_y = oy;
            at_y = (float)x;
        }
        if (!(ody <= worst_dy)) {
            worst_dy = ody;
            at_dy = (float)x;
        }
        worst_exact =
            fmax(worst_exact, fmax(off_exact(got_y[(size_t)i], gelu), off_exact(got_dy[(size_t)i], grad)));
    }
    printf("  %lld inputs: GELU within %.2f bf16 ulps (worst at x = %g), GELU' within %.2f (at x = %g)\n",
           (long long)n, worst_y, at_y, worst_dy, at_dy);
    // the GPU's fp32 GELU is within ~1e-6 relative of the exact value (__expf: ex2.approx, ~2^-22), so its
    // bf16 rounding is the exact value's or, next to a rounding boundary, the neighbour (1 ulp,
    // reached by design)
    print_margin("GELU and GELU', worst distance from the exact value in bf16 ulps", worst_exact, 1.5);
    EXPECT_LE(worst_y, 1.0) << "at x = " << at_y;
    EXPECT_LE(worst_dy, 1.0) << "at x = " << at_dy;
}

// ----------------------------------------------------------------------------
// cuBLAS wrappers (matmul.cuh): out = inp @ w^T; dinp = dout @ w; dw += dout^T @ inp

struct GemmShape {
    int IC, OC;
};
// the layer's GEMMs (qkv, attproj, fc, fcproj) and the lm_head's (Vp = 640, a multiple of 128)
const GemmShape kGemmShapes[] = {{kC, 3 * kC}, {kC, kC}, {kC, 4 * kC}, {4 * kC, kC}, {kC, 640}};

TEST(Kernels, MatmulForwardMatchesCpu) {
    REQUIRE_GPU();
    TestGPT tg(tiny_config(1, kC, 3, 64, 100), 1, 1);  // for its cuBLAS handle
    const cudaStream_t s = tg.g.stream.compute;
    const int64_t N = kN;
    for (const GemmShape& sh : kGemmShapes) {
        auto inp = rand_bf16(N * sh.IC, -1, 1, 50 + sh.OC),
             w = rand_bf16((int64_t)sh.OC * sh.IC, -1, 1, 51 + sh.IC);
        DeviceMem m;
        bf16* out = m.zeros<bf16>(N * sh.OC);
        matmul_forward(out, m.bf16s(inp), m.bf16s(w), N, sh.IC, sh.OC, s);
        std::vector<float> ref((size_t)(N * sh.OC)), w_t((size_t)sh.OC * sh.IC);
        matmul_forward(ref.data(), inp.data(), w.data(), NULL, N, sh.IC, sh.OC, w_t.data());
        char name[64];
        snprintf(name, sizeof name, "matmul_forward (%lld,%d) -> %d", (long long)N, sh.IC, sh.OC);
        EXPECT_TRUE(
            check(name, download(out, N * sh.OC), ref, 1e-2));  // bf16 output of an fp32-accumulated GEMM
    }
}

TEST(Kernels, MatmulBackwardInputMatchesCpu) {
    REQUIRE_GPU();
    TestGPT tg(tiny_config(1, kC, 3, 64, 100), 1, 1);
    const cudaStream_t s = tg.g.stream.compute;
    const int64_t N = kN;
    for (const GemmShape& sh : kGemmShapes) {
        auto dout = rand_bf16(N * sh.OC, -1, 1, 52 + sh.OC),
             w = rand_bf16((int64_t)sh.OC * sh.IC, -1, 1, 53 + sh.IC);
        DeviceMem m;
        bf16* dinp = m.zeros<bf16>(N * sh.IC);
        matmul_backward_input(dinp, m.bf16s(dout), m.bf16s(w), N, sh.IC, sh.OC, s);
        std::vector<float> ref((size_t)(N * sh.IC)), dw_unused((size_t)sh.OC * sh.IC, 0.0f),
            inp_unused((size_t)(N * sh.IC), 0.0f);
        matmul_backward(ref.data(), dw_unused.data(), NULL, dout.data(), inp_unused.data(), w.data(), N,
                        sh.IC, sh.OC);
        char name[64];
        snprintf(name, sizeof name, "matmul_backward_input (%lld,%d) <- %d", (long long)N, sh.IC, sh.OC);
        EXPECT_TRUE(check(name, download(dinp, N * sh.IC), ref, 1e-2));  // bf16 output
    }
}

TEST(Kernels, MatmulBackwardWeightMatchesCpu) {
    REQUIRE_GPU();
    TestGPT tg(tiny_config(1, kC, 3, 64, 100), 1, 1);
    const cudaStream_t s = tg.g.stream.compute;
    const int64_t N = kN;
    for (const GemmShape& sh : kGemmShapes) {
        auto dout = rand_bf16(N * sh.OC, -1, 1, 54 + sh.OC), inp = rand_bf16(N * sh.IC, -1, 1, 55 + sh.IC);
        DeviceMem m;
        float* dw = m.zeros<float>((int64_t)sh.OC * sh.IC);
        bf16 *d_dout = m.bf16s(dout), *d_inp = m.bf16s(inp);
        std::vector<float> ref((size_t)sh.OC * sh.IC, 0.0f), dinp_unused((size_t)(N * sh.IC)),
            w_unused((size_t)sh.OC * sh.IC, 0.0f);
        for (int rep = 0; rep < 2; rep++) {  // twice: beta = 1, it must add
            matmul_backward_weight(dw, d_dout, d_inp, N, sh.IC, sh.OC, s);
            matmul_backward(dinp_unused.data(), ref.data(), NULL, dout.data(), inp.data(), w_unused.data(), N,
                            sh.IC, sh.OC);
        }
        char name[64];
        snprintf(name, sizeof name, "matmul_backward_weight (%d,%d)", sh.OC, sh.IC);
        EXPECT_TRUE(check(name, download(dw, (int64_t)sh.OC * sh.IC), ref, 1e-3));  // fp32 output of cuBLAS
    }
}

// ----------------------------------------------------------------------------
// Attention. Layouts: qkv (N, 3C) with q | k | v and head h at channels h*hs.. of each (gpt2_cpu.h), which
// the GEMMs read in place (train_gpt.cu heads_gemm); att (B, NH, T, T).

// gpt2_cpu.h has no standalone causal softmax: these restate the softmax lines of its attention_forward /
// attention_backward, in double. Row r of (rows, T) is query t1 = r % T; columns above t1 are 0.
std::vector<float> causal_softmax_ref(const std::vector<float>& scores, int64_t rows, int T) {
    std::vector<float> p(scores.size(), 0.0f);
    for (int64_t r = 0; r < rows; r++) {
        const int t1 = (int)(r % T);
        const float* s = scores.data() + r * T;
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j <= t1; j++) mx = std::max(mx, (double)s[j]);
        for (int j = 0; j <= t1; j++) sum += exp(s[j] - mx);
        for (int j = 0; j <= t1; j++) p[(size_t)(r * T + j)] = (float)(exp(s[j] - mx) / sum);
    }
    return p;
}
std::vector<float> causal_softmax_backward_ref(const std::vector<float>& datt, const std::vector<float>& att,
                                               int64_t rows, int T) {
    std::vector<float> ds(datt.size(), 0.0f);
    for (int64_t r = 0; r < rows; r++) {
        const int t1 = (int)(r % T);
        const float *a = att.data() + r * T, *d = datt.data() + r * T;
        double dot = 0.0;
        for (int j = 0; j <= t1; j++) dot += (double)a[j] * d[j];
        for (int j = 0; j <= t1; j++) ds[(size_t)(r * T + j)] = (float)(a[j] * (d[j] - dot));
    }
    return ds;
}

TEST(Kernels, SoftmaxCausalForwardMatchesCpuSoftmax) {
    REQUIRE_GPU();
    for (int T : {37, 64}) {
        const int64_t rows =
            2 * 3 * (int64_t)T;  // B = 2, NH = 3: 222 rows (not a multiple of 8 per block) / 384
        auto scores =
            rand_bf16(rows * T, -4, 4, 70 + T);  // above the diagonal too: junk that must be ignored
        DeviceMem m;
        bf16* att = m.bf16s(scores);
        softmax_causal_forward(att, rows, T, kStream);
        auto got = download(att, rows * T);
        char name[64];
        snprintf(name, sizeof name, "softmax_causal_forward T=%d", T);
        EXPECT_TRUE(check(name, got, causal_softmax_ref(scores, rows, T), 1e-2));  // bf16 output
        EXPECT_EQ(above_diagonal_nonzeros(got, rows, T), 0)
            << "att @ v relies on exact zeros above the diagonal";
    }
}

TEST(Kernels, SoftmaxCausalBackwardMatchesCpuSoftmaxBackward) {
    REQUIRE_GPU();
    for (int T : {37, 64}) {
        const int64_t rows = 2 * 3 * (int64_t)T;
        auto att = causal_softmax_ref(rand_bf16(rows * T, -4, 4, 72 + T), rows, T);
        for (auto& a : att)
            a = bf16_to_float(float_to_bf16(a));         // the probabilities as the forward stored them
        auto datt = rand_bf16(rows * T, -1, 1, 74 + T);  // full rows: the part above the diagonal is junk
        DeviceMem m;
        bf16* d = m.bf16s(datt);
        softmax_causal_backward(d, m.bf16s(att), rows, T, kStream);
        auto got = download(d, rows * T);
        char name[64];
        snprintf(name, sizeof name, "softmax_causal_backward T=%d", T);
        EXPECT_TRUE(check(name, got, causal_softmax_backward_ref(datt, att, rows, T), 1e-2));  // bf16 output
        EXPECT_EQ(above_diagonal_nonzeros(got, rows, T), 0);
    }
}

// The whole GPU attention path (attention.cuh) on a GPT's workspace vs gpt2_cpu.h attention_forward /
// attention_backward. test_attention.cpp checks the same code's index math on the CPU; this checks cuBLAS
// and the kernels really do it.
struct AttnShape {
    int T, C, NH;
};
const AttnShape kAttnShapes[] = {
    {37, 96, 3}, {64, 128, 4}, {64, 128, 2}, {37, 60, 3}};  // hs = 32, 32, 64, 20

// Which attention a GPT built in its scope uses (train_gpt.cu's -F), restored at the end of the scope.
struct AttentionChoice {
    int saved;
    explicit AttentionChoice(int flash) : saved(flash_attention_flag) { flash_attention_flag = flash; }
    ~AttentionChoice() { flash_attention_flag = saved; }
};

TEST(Kernels, AttentionForwardMatchesCpu) {
    REQUIRE_GPU();
    for (const AttnShape& sh : kAttnShapes) {
        const int B = 2, T = sh.T, C = sh.C, NH = sh.NH;
        const int64_t N = (int64_t)B * T, natt = (int64_t)B * NH * T * T;
        AttentionChoice cublas_path(0);  // the workspace then holds att
        TestGPT tg(tiny_config(1, C, NH, 64, 100), B, T);
        LayerActs* a = &tg.g.acts;
        auto qkv = rand_bf16(N * 3 * C, -1.5f, 1.5f, 80 + T);  // scores ~ N(0, 0.75^2): a non-flat softmax
        upload(a->qkv, qkv);
        attention_forward(a->atty, a->att, a->qkv, B, T, C, NH, tg.g.stream.compute);
        std::vector<float> out((size_t)(N * C)), att((size_t)natt);
        attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
        printf("  B=%d T=%d C=%d NH=%d\n", B, T, C, NH);
        auto gatt = download(a->att, natt);
        // probabilities: scores rounded to bf16 before the softmax, then the probabilities: 2 roundings;
        // y: 3 (scores, probabilities, y)
        EXPECT_TRUE(check("attention_forward att (B, NH, T, T)", gatt, att, 2e-2));
        EXPECT_EQ(above_diagonal_nonzeros(gatt, (int64_t)B * NH * T, T), 0);
        EXPECT_TRUE(check("attention_forward out (N, C)", download(a->atty, N * C), out, 2e-2));
    }
}

TEST(Kernels, AttentionBackwardMatchesCpu) {
    REQUIRE_GPU();
    for (const AttnShape& sh : kAttnShapes) {
        const int B = 2, T = sh.T, C = sh.C, NH = sh.NH;
        const int64_t N = (int64_t)B * T, natt = (int64_t)B * NH * T * T;
        AttentionChoice cublas_path(0);
        TestGPT tg(tiny_config(1, C, NH, 64, 100), B, T);
        LayerActs* a = &tg.g.acts;
        const cudaStream_t s = tg.g.stream.compute;
        auto qkv = rand_bf16(N * 3 * C, -1.5f, 1.5f, 90 + T), datty = rand_bf16(N * C, -1, 1, 91 + T);
        upload(a->qkv, qkv);
        upload(a->dln, datty);  // where layer_backward passes it from
        attention_forward(a->atty, a->att, a->qkv, B, T, C, NH,
                          s);  // att for the backward
        attention_backward(a->dqkv, a->datt, a->dln, a->att, a->qkv, B, T, C, NH, s);
        auto got = download(a->dqkv, N * 3 * C);
        std::vector<float> out((size_t)(N * C)), att((size_t)natt), dqkv((size_t)(N * 3 * C)),
            dscore((size_t)B * NH * T);
        attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
        attention_backward(dqkv.data(), dscore.data(), datty.data(), qkv.data(), att.data(), B, T, C, NH);
        printf("  B=%d T=%d C=%d NH=%d\n", B, T, C, NH);
        // dq, dk, dv apart, to tell which GEMM of attention_backward is off: q | k | v columns of each row.
        // Behind bf16 att (forward), datt, d(scores) and the output: ~4 roundings (emulated:
        // ~3.5e-3) -> 2e-2.
        check_dqkv_parts("attention_backward", got, dqkv, N, C, 2e-2);
        EXPECT_TRUE(check("attention_backward dqkv (N, 3C)", got, dqkv, 2e-2));
    }
}

// ----------------------------------------------------------------------------
// Fused attention (flash_attention.cuh)

#ifdef FAKE_CUDA_DEVICE
#define TEST_LAUNCH(kernel, grid, block) FAKE_LAUNCH(kernel, grid, block, 0, 0)
#else
#define TEST_LAUNCH(kernel, grid, block) kernel<<<grid, block>>>
#endif

// One warp, one mma_bf16_16816: D (16 x 8) = C + A (16 x 16) B (16 x 8), the fragments built and read by the
// PTX ISA's table as flash_attention.cuh states it. On a GPU this checks that table against the hardware.
__global__ void mma_layout_kernel(float* d, const float* c, const bf16* a, const bf16* b) {
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    const uint32_t af[4] = {join_pair(a[g * 16 + 2 * t], a[g * 16 + 2 * t + 1]),
                            join_pair(a[(g + 8) * 16 + 2 * t], a[(g + 8) * 16 + 2 * t + 1]),
                            join_pair(a[g * 16 + 2 * t + 8], a[g * 16 + 2 * t + 9]),
                            join_pair(a[(g + 8) * 16 + 2 * t + 8], a[(g + 8) * 16 + 2 * t + 9])};
    const uint32_t bf[2] = {join_pair(b[(2 * t) * 8 + g], b[(2 * t + 1) * 8 + g]),
                            join_pair(b[(2 * t + 8) * 8 + g], b[(2 * t + 9) * 8 + g])};
    float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t],
                    c[(g + 8) * 8 + 2 * t + 1]};
    mma_bf16_16816(acc, af, bf);
    d[g * 8 + 2 * t] = acc[0];
    d[g * 8 + 2 * t + 1] = acc[1];
    d[(g + 8) * 8 + 2 * t] = acc[2];
    d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

TEST(Kernels, MmaFragmentLayoutMatchesMatmul) {
    REQUIRE_GPU();
    // small integers: every product and sum is exact in fp32, so any misplaced element shows as a difference
    std::vector<float> a(16 * 16), b(16 * 8), c(16 * 8), ref(16 * 8);
    uint64_t st = splitmix64(31) | 1;
    for (auto& x : a) x = (float)((int)(random_u64(&st) % 9) - 4);
    for (auto& x : b) x = (float)((int)(random_u64(&st) % 9) - 4);
    for (auto& x : c) x = (float)((int)(random_u64(&st) % 9) - 4);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            float sum = c[(size_t)(i * 8 + j)];
            for (int k = 0; k < 16; k++) sum += a[(size_t)(i * 16 + k)] * b[(size_t)(k * 8 + j)];
            ref[(size_t)(i * 8 + j)] = sum;
        }
    DeviceMem m;
    const bf16 *a_d = m.bf16s(a), *b_d = m.bf16s(b);
    const float* c_d = m.copy(c);
    float* d_d = m.zeros<float>(16 * 8);
    TEST_LAUNCH(mma_layout_kernel, 1, 32)(d_d, c_d, a_d, b_d);
    cudaCheckLaunch();
    EXPECT_EQ(count_diff(download(d_d, 16 * 8), ref), 0) << "the mma.m16n8k16 fragment table is off";
}

// One warp: a 16 x 16 shared tile of distinct values (bf16-exact integers); a_from_tile, b2_from_rows and
// b2_from_cols (ldmatrix, plain and .trans) must hand each lane the mma fragments the PTX table defines. On a
// GPU this checks ldmatrix's table and the helpers' row addresses against the hardware.
__global__ void ldmatrix_fragments_kernel(uint32_t* out, const bf16* src) {
    __shared__ __align__(16) bf16 tile[16][16 + FA_PAD];
    for (int i = threadIdx.x; i < 16 * 16; i += 32) tile[i / 16][i % 16] = src[i];
    __syncthreads();
    uint32_t a[4], brow[4], bcol[4];
    a_from_tile<16>(a, tile, 0, 0);
    b2_from_rows<16>(brow, tile, 0, 0);
    b2_from_cols<16>(bcol, tile, 0, 0);
    for (int i = 0; i < 4; i++) {
        out[threadIdx.x * 12 + i] = a[i];
        out[threadIdx.x * 12 + 4 + i] = brow[i];
        out[threadIdx.x * 12 + 8 + i] = bcol[i];
    }
}

TEST(Kernels, LdmatrixMatchesItsTable) {
    REQUIRE_GPU();
    std::vector<float> v(16 * 16);
    for (int i = 0; i < 256; i++) v[(size_t)i] = (float)i;  // tile[r][c] = 16 r + c, exact in bf16
    DeviceMem m;
    const bf16* src = m.bf16s(v);
    uint32_t* out = m.zeros<uint32_t>(32 * 12);
    TEST_LAUNCH(ldmatrix_fragments_kernel, 1, 32)(out, src);
    cudaCheckLaunch();
    const auto got = download(out, 32 * 12);
    auto tile = [](int r, int c) { return (uint32_t)float_to_bf16((float)(16 * r + c)); };
    auto pair = [&](int r0, int c0, int r1, int c1) { return tile(r0, c0) | (tile(r1, c1) << 16); };
    int64_t wrong = 0;
    for (int l = 0; l < 32; l++) {
        const int g = l / 4, t = l % 4;
        const uint32_t want[12] = {
            // A = tile: a[0..3] = A[g][2t..], A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..]
            pair(g, 2 * t, g, 2 * t + 1), pair(g + 8, 2 * t, g + 8, 2 * t + 1),
            pair(g, 2 * t + 8, g, 2 * t + 9), pair(g + 8, 2 * t + 8, g + 8, 2 * t + 9),
            // B[k][n] = tile[n][k]: n-tile 0 then 8, b = B[2t..][g], B[2t+8..][g]
            pair(g, 2 * t, g, 2 * t + 1), pair(g, 2 * t + 8, g, 2 * t + 9),
            pair(g + 8, 2 * t, g + 8, 2 * t + 1), pair(g + 8, 2 * t + 8, g + 8, 2 * t + 9),
            // B[k][n] = tile[k][n]
            pair(2 * t, g, 2 * t + 1, g), pair(2 * t + 8, g, 2 * t + 9, g),
            pair(2 * t, g + 8, 2 * t + 1, g + 8), pair(2 * t + 8, g + 8, 2 * t + 9, g + 8)};
        for (int i = 0; i < 12; i++) wrong += got[(size_t)(l * 12 + i)] != want[i];
    }
    EXPECT_EQ(wrong, 0) << "registers off the ldmatrix / fragment table (of 384)";
}

// The fused forward's lse on the CPU: log2(sum_{j <= t} exp(q_t . k_j / sqrt(hs))), in double.
std::vector<float> cpu_attention_lse(const std::vector<float>& qkv, int B, int T, int C, int NH) {
    const int hs = C / NH;
    std::vector<float> lse((size_t)B * NH * T);
    std::vector<double> sc((size_t)T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float* q = &qkv[((size_t)b * T + t) * 3 * C + (size_t)h * hs];
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j <= t; j++) {
                    const float* k = &qkv[((size_t)b * T + j) * 3 * C + C + (size_t)h * hs];
                    double dot = 0.0;
                    for (int i = 0; i < hs; i++) dot += (double)q[i] * k[i];
                    sc[(size_t)j] = dot / sqrt((double)hs);
                    mx = std::max(mx, sc[(size_t)j]);
                }
                for (int j = 0; j <= t; j++) sum += exp(sc[(size_t)j] - mx);
                lse[((size_t)b * NH + h) * T + t] = (float)((mx + log(sum)) / log(2.0));
            }
    return lse;
}

// Head sizes 32, 64, 80, 96, 128; T = 1, T below one tile, T not a multiple of the 64/32-row tiles (padded
// rows), several key tiles per query tile, B and NH > 1.
struct FlashShape {
    int B, T, C, NH;
};
const FlashShape kFlashShapes[] = {
    {2, 37, 96, 3},   {1, 1, 64, 1},    {2, 200, 128, 2}, {1, 130, 256, 2},
    {1, 64, 128, 4},  {1, 100, 160, 2}, {1, 70, 192, 2},  // ... hs 80 (the 2.7b preset's), 96
    {1, 1024, 256, 2}};  // 16 key tiles a query tile: the cp.async pipelines many rounds deep

TEST(Kernels, FlashAttentionForwardMatchesCpu) {
    REQUIRE_GPU();
    for (const FlashShape& sh : kFlashShapes) {
        const int B = sh.B, T = sh.T, C = sh.C, NH = sh.NH;
        const int64_t N = (int64_t)B * T;
        printf("  B=%d T=%d C=%d NH=%d (hs %d)\n", B, T, C, NH, C / NH);
        auto qkv = rand_bf16(N * 3 * C, -1.5f, 1.5f, 300 + T);
        DeviceMem m;
        const bf16* qkv_d = m.bf16s(qkv);
        bf16* y_d = m.zeros<bf16>(N * C);
        float* lse_d = m.zeros<float>((int64_t)B * NH * T);
        cudaCheck(
            cudaMemset(y_d, 0xff, (size_t)(N * C) * 2));  // NaN: an element never written fails the check
        cudaCheck(cudaMemset(lse_d, 0xff, (size_t)B * NH * T * 4));
        flash_attention_forward(y_d, lse_d, qkv_d, B, T, C, NH, kStream);
        std::vector<float> out((size_t)(N * C)), att((size_t)B * NH * T * T), out_got = download(y_d, N * C);
        attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
        // y: behind the probabilities rounded to bf16 for the second product and y's own rounding (the scores
        // stay fp32): 2 roundings of <= 2^-9 each -> 1e-2. lse: fp32 sums of exact products,
        // fast-math exp2/log2: 1e-4.
        EXPECT_TRUE(check("flash forward y (N, C)", out_got, out, 1e-2));
        EXPECT_TRUE(check("flash forward lse (B, NH, T)", download(lse_d, (int64_t)B * NH * T),
                          cpu_attention_lse(qkv, B, T, C, NH), 1e-4));
        // plain loads in place of cp.async: the same arithmetic, the same bits
        const bool async = flash_attention_async;
        flash_attention_async = !async;
        flash_attention_forward(y_d, lse_d, qkv_d, B, T, C, NH, kStream);
        flash_attention_async = async;
        EXPECT_EQ(count_bit_diff(download(y_d, N * C), out_got), 0) << "plain loads change y";
    }
}

TEST(Kernels, FlashAttentionBackwardMatchesCpu) {
    REQUIRE_GPU();
    for (const FlashShape& sh : kFlashShapes) {
        const int B = sh.B, T = sh.T, C = sh.C, NH = sh.NH;
        const int64_t N = (int64_t)B * T;
        printf("  B=%d T=%d C=%d NH=%d (hs %d)\n", B, T, C, NH, C / NH);
        auto qkv = rand_bf16(N * 3 * C, -1.5f, 1.5f, 400 + T), dy = rand_bf16(N * C, -1, 1, 401 + T);
        DeviceMem m;
        const bf16 *qkv_d = m.bf16s(qkv), *dy_d = m.bf16s(dy);
        bf16* y_d = m.zeros<bf16>(N * C);
        bf16* dqkv_d = m.zeros<bf16>(N * 3 * C);
        float* lse_d = m.zeros<float>((int64_t)B * NH * T);
        float* dsum_d = m.zeros<float>((int64_t)B * NH * T);
        cudaCheck(cudaMemset(dqkv_d, 0xff, (size_t)(N * 3 * C) * 2));  // NaN: every element must be written
        flash_attention_forward(y_d, lse_d, qkv_d, B, T, C, NH, kStream);
        flash_attention_backward(dqkv_d, dsum_d, dy_d, y_d, qkv_d, lse_d, B, T, C, NH, kStream);
        auto got = download(dqkv_d, N * 3 * C);
        std::vector<float> out((size_t)(N * C)), att((size_t)B * NH * T * T), dqkv((size_t)(N * 3 * C)),
            dscore((size_t)B * NH * T);
        attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
        attention_backward(dqkv.data(), dscore.data(), dy.data(), qkv.data(), att.data(), B, T, C, NH);
        // behind bf16 y (in D = rowsum(dy * y)), P and dS rounded to bf16 for the products, and the output:
        // ~4 roundings, as the cuBLAS path -> 2e-2
        check_dqkv_parts("flash backward", got, dqkv, N, C, 2e-2);
        // no atomics and no cuBLAS, each block sums in a fixed order: a second backward pass gives the
        // very same bits, with cp.async's loads or plain ones
        const bool async_default = flash_attention_async;
        for (bool async : {async_default, !async_default}) {
            flash_attention_async = async;
            flash_attention_backward(dqkv_d, dsum_d, dy_d, y_d, qkv_d, lse_d, B, T, C, NH, kStream);
            EXPECT_EQ(count_bit_diff(download(dqkv_d, N * 3 * C), got), 0)
                << "the fused backward is not deterministic" << (async ? "" : " (plain loads)");
        }
        flash_attention_async = async_default;
    }
}

// cuDNN's SDPA (where this machine has it; skipped, saying why, elsewhere) on the fused kernels' shapes
// against the CPU: the same roundings as the fused path (scores fp32, P and the outputs bf16), so its bounds.
TEST(Kernels, CudnnAttentionMatchesCpu) {
    REQUIRE_GPU();
    char why[512];
    if (!cudnn_att_open(why, sizeof why)) GTEST_SKIP() << "cuDNN: " << why;
    for (const FlashShape& sh : kFlashShapes) {
        const int B = sh.B, T = sh.T, C = sh.C, NH = sh.NH;
        const int64_t N = (int64_t)B * T;
        printf("  B=%d T=%d C=%d NH=%d (hs %d)\n", B, T, C, NH, C / NH);
        const CudnnAttShape shape = {B, T, NH, NH, C / NH, 0};
        if (!cudnn_att_prepare(&shape, why, sizeof why)) {
            ADD_FAILURE() << "cuDNN cannot run this shape: " << why;
            continue;
        }
        auto qkv = rand_bf16(N * 3 * C, -1.5f, 1.5f, 500 + T), dy = rand_bf16(N * C, -1, 1, 501 + T);
        DeviceMem m;
        const bf16 *qkv_d = m.bf16s(qkv), *dy_d = m.bf16s(dy);
        bf16* y_d = m.zeros<bf16>(N * C);
        bf16* dqkv_d = m.zeros<bf16>(N * 3 * C);
        float* lse_d = m.zeros<float>(N * NH);
        cudaCheck(cudaMemset(y_d, 0xff, (size_t)(N * C) * 2));  // NaN: every element must be written
        cudaCheck(cudaMemset(dqkv_d, 0xff, (size_t)(N * 3 * C) * 2));
        ASSERT_TRUE(cudnn_att_forward(y_d, lse_d, qkv_d, &shape, NULL, kStream, why, sizeof why)) << why;
        ASSERT_TRUE(
            cudnn_att_backward(dqkv_d, dy_d, qkv_d, y_d, lse_d, &shape, NULL, kStream, why, sizeof why))
            << why;
        std::vector<float> out((size_t)(N * C)), att((size_t)B * NH * T * T), dqkv((size_t)(N * 3 * C)),
            dscore((size_t)B * NH * T);
        attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
        attention_backward(dqkv.data(), dscore.data(), dy.data(), qkv.data(), att.data(), B, T, C, NH);
        EXPECT_TRUE(check("cuDNN forward y (N, C)", download(y_d, N * C), out, 1e-2));
        check_dqkv_parts("cuDNN backward", download(dqkv_d, N * 3 * C), dqkv, N, C, 2e-2);
    }
    cudnn_att_free_own_workspace();
}

// ----------------------------------------------------------------------------
// Loss and gradient hand-off

TEST(Kernels, FusedClassifierMatchesSoftmaxCrossEntropy) {
    REQUIRE_GPU();
    const int V = 2500, Vp = 2560;  // V not a multiple of 128; more columns than the 1024 threads of a row
    const int64_t N = 74;           // B = 2, T = 37
    auto logits = rand_bf16(N * Vp, -4, 4, 100);  // the padded columns hold junk too: it must not count
    auto tg = rand_tokens(N, V, 101);
    tg[0] = 0;
    tg[1] = V - 1;
    std::vector<float> probs((size_t)(N * Vp)), losses((size_t)N), dlogits((size_t)(N * Vp));
    softmax_crossentropy_forward(probs.data(), losses.data(), logits.data(), tg.data(), N, V, Vp);
    const float scale = 1.0f / (float)N;  // the trainer's dloss_scale: d(mean loss)
    crossentropy_softmax_backward(dlogits.data(), probs.data(), tg.data(), scale, N, V, Vp);
    DeviceMem m;
    bf16* d_logits = m.bf16s(logits);
    float *losses_eval = m.zeros<float>(N), *losses_train = m.zeros<float>(N);
    int* d_tg = m.copy(tg);
    // losses are fp32 from identical inputs (fast-math expf/logf vs the CPU's polynomial exp): 1e-4
    // 1. dloss_scale = 0 (evaluation): the losses only, the logits untouched
    fused_classifier(d_logits, losses_eval, d_tg, N, V, Vp, 0.0f, kStream);
    EXPECT_TRUE(check("fused_classifier losses (dloss_scale = 0)", download(losses_eval, N), losses, 1e-4));
    EXPECT_EQ(count_diff(download(d_logits, N * Vp), logits), 0)
        << "dloss_scale = 0 must leave the logits untouched";
    // 2. training: the logits become dlogits
    fused_classifier(d_logits, losses_train, d_tg, N, V, Vp, scale, kStream);
    EXPECT_TRUE(check("fused_classifier losses", download(losses_train, N), losses, 1e-4));
    auto got = download(d_logits, N * Vp);
    EXPECT_TRUE(check("fused_classifier dlogits", got, dlogits, 1e-2));  // bf16 output
    // the target entries (p - 1)/N dominate the norm above: the softmax part alone, on the other real columns
    std::vector<float> g_soft, c_soft;
    int64_t pad_nonzero = 0;
    for (int64_t i = 0; i < N; i++) {
        for (int v = 0; v < V; v++)
            if (v != tg[(size_t)i]) {
                g_soft.push_back(got[(size_t)(i * Vp + v)]);
                c_soft.push_back(dlogits[(size_t)(i * Vp + v)]);
            }
        for (int v = V; v < Vp; v++) pad_nonzero += got[(size_t)(i * Vp + v)] != 0.0f;
    }
    EXPECT_TRUE(check("fused_classifier dlogits, non-target columns", g_soft, c_soft, 1e-2));
    EXPECT_EQ(pad_nonzero, 0) << "padded columns of dlogits must be exactly 0";
}

TEST(Kernels, GradsToBf16SumsqMatchesDoubleSum) {
    REQUIRE_GPU();
    const int64_t n1 = 1000, n2 = 1500007;  // n2 > grid_for's 2112 blocks x 512 threads: threads loop
    std::vector<float> g1((size_t)n1), g2((size_t)n2);
    uint64_t rng = 12345;
    for (auto& x : g1)
        x = (random_f32(&rng) - 0.5f) * 3.7f;  // full fp32 mantissas, so the bf16 rounding matters
    for (auto& x : g2) x = (random_f32(&rng) - 0.5f) * 3.7f;
    double ref1 = 0.0, ref2 = 0.0;
    for (float x : g1) ref1 += (double)x * x;
    for (float x : g2) ref2 += (double)x * x;
    DeviceMem m;
    float *d1 = m.copy(g1), *d2 = m.copy(g2);
    bf16* out = m.zeros<bf16>(n2);
    double* sumsq = m.zeros<double>(1);
    grads_to_bf16_sumsq(NULL, d1, n1, sumsq, kStream);  // out == NULL: the norm only
    const double got1 = download(sumsq, 1)[0];
    grads_to_bf16_sumsq(out, d2, n2, sumsq, kStream);  // adds to the first
    const double got2 = download(sumsq, 1)[0];
    printf("  sumsq (out NULL) gpu %.9e cpu %.9e; after the second call gpu %.9e cpu %.9e\n", got1, ref1,
           got2, ref1 + ref2);
    // every square and sum in double, only the order differs from the CPU's: ~1e-15 relative
    EXPECT_TRUE(within("sumsq (out NULL), relative", rel_diff(got1, ref1), 1e-10));
    EXPECT_TRUE(within("sumsq after the second call, relative", rel_diff(got2, ref1 + ref2), 1e-10));
    std::vector<float> rounded(g2);
    for (auto& x : rounded) x = bf16_to_float(float_to_bf16(x));
    const int64_t bad = count_diff(download(out, n2), rounded);
    printf("  bf16 conversion: %lld of %lld differ from round-to-nearest-even\n", (long long)bad,
           (long long)n2);
    EXPECT_EQ(bad, 0);  // both are IEEE round-to-nearest-even
}

// The GPU AdamW (the embeddings' update) against cpu_adam.cpp: same constants, same IEEE operations in the
// same order, so weights, moments and the bf16 copy must be bit-identical, step after step. That holds on a
// GPU by construction: adamw_kernel spells every operation as an IEEE-rounded intrinsic (__fmul_rn,
// __fmaf_rn,
// __fsqrt_rn, __fdiv_rn: --use_fast_math neither approximates nor contracts them), subnormals are flushed on
// both sides (-ftz=true, cpu_adam's FTZ/DAZ), and there are no atomics and no cuBLAS.
TEST(Kernels, AdamwGpuMatchesCpuAdamBitForBit) {
    REQUIRE_GPU();
    const int64_t n = 1500007;  // > grid_for's 2112 blocks x 256 threads: threads loop
    std::vector<float> p((size_t)n), g((size_t)n), m((size_t)n), v((size_t)n);
    uint64_t rng = 777;
    for (int64_t i = 0; i < n; i++) {
        p[(size_t)i] = (random_f32(&rng) - 0.5f) * 0.2f;
        m[(size_t)i] = (random_f32(&rng) - 0.5f) * 1e-2f;
        v[(size_t)i] = random_f32(&rng) * 1e-4f;
    }
    DeviceMem d;
    float *dp = d.copy(p), *dg = d.zeros<float>(n), *dm = d.copy(m), *dv = d.copy(v);
    bf16* dout = d.zeros<bf16>(n);
    std::vector<uint16_t> out((size_t)n);
    for (int t = 1; t <= 3; t++) {
        for (auto& x : g) x = (random_f32(&rng) - 0.5f) * 2.0f;
        upload(dg, g);
        const AdamWArgs a = {1e-3f * t, 0.9f, 0.95f, 1e-8f, t == 2 ? 0.0f : 0.1f, 0.75f, (int64_t)t};
        adamw_update_f32grad(p.data(), g.data(), m.data(), v.data(), out.data(), n, &a);
        adamw_gpu(dp, dg, dm, dv, dout, n, &a, kStream);
        std::vector<float> out_f((size_t)n);
        for (int64_t i = 0; i < n; i++) out_f[(size_t)i] = bf16_to_float(out[(size_t)i]);
        const int64_t bp = count_bit_diff(download(dp, n), p), bm = count_bit_diff(download(dm, n), m),
                      bv = count_bit_diff(download(dv, n), v), bo = count_bit_diff(download(dout, n), out_f);
        printf("  step %d: elements that differ: param %lld, m %lld, v %lld, bf16 %lld of %lld\n", t,
               (long long)bp, (long long)bm, (long long)bv, (long long)bo, (long long)n);
        EXPECT_EQ(bp, 0);
        EXPECT_EQ(bm, 0);
        EXPECT_EQ(bv, 0);
        EXPECT_EQ(bo, 0);
    }
}

TEST(Kernels, MeanLossMatchesDoubleMean) {
    REQUIRE_GPU();
    for (int64_t N : {(int64_t)74, (int64_t)3001}) {  // fewer and more than the 1024 threads of the block
        std::vector<float> losses((size_t)N);
        uint64_t rng = 777 + (uint64_t)N;
        for (auto& x : losses) x = 10.0f * random_f32(&rng);
        double ref = 0.0;
        for (float x : losses) ref += x;
        ref /= (double)N;
        DeviceMem m;
        float* out = m.zeros<float>(1);
        mean_loss(out, m.copy(losses), N, kStream);
        const float got = download(out, 1)[0];
        printf("  mean_loss N=%lld gpu %.7f cpu %.7f\n", (long long)N, got, ref);
        // fp32 sum of <= 3001 values in the block's order: ~sqrt(3001) * 2^-24 ~ 3e-6 at worst
        EXPECT_TRUE(within("mean_loss N=" + std::to_string(N) + ", relative", rel_diff(got, ref), 1e-5));
    }
}

// ----------------------------------------------------------------------------
// One whole layer: layer_forward(out), then layer_forward(NULL) + layer_backward, vs the body of
// gpt2_cpu_forward's / gpt2_cpu_backward's layer loop on the same (bf16-exact) weights, input and dout.

// flash: the fused attention or the cuBLAS one; fused: the GEMMs' bias / GELU passes as cuBLASLt epilogues
// (where cuBLASLt offers an algorithm, which it must for these shapes) or as separate kernels.
void check_layer_against_cpu(int flash, int fused) {
    const int B = 2, T = 37, C = kC, NH = 3;  // hs 32: either attention path
    const int64_t N = (int64_t)B * T;
    AttentionChoice choice(flash);
    const int saved_fusion = cublaslt_fusion;
    cublaslt_fusion = fused;
    const int64_t fallbacks_before = cublaslt_fallbacks;
    struct Restore {
        int v;
        ~Restore() { cublaslt_fusion = v; }
    } restore{saved_fusion};
    TestGPT tg(tiny_config(1, C, NH, 64, 100), B, T);
    GPT* g = &tg.g;
    ASSERT_EQ(g->flash, flash != 0);
    LayerActs* a = &g->acts;
    const cudaStream_t s = g->stream.compute;
    const ParamLayout* p = &g->layout;
    const int64_t* off = p->layer_offset;
    // weights of std ~ 1/sqrt(fan_in), so that both branches change the residual stream by O(1) and an error
    // in either shows in the layer's output (GPT-2's init would hide them behind the residual)
    std::vector<float> w((size_t)p->layer_stride);
    for (int t = 0; t < NUM_LAYER_TENSORS; t++) {
        float lo = -0.2f, hi = 0.2f;  // biases
        if (t == LN1W || t == LN2W) {
            lo = 0.5f;
            hi = 1.5f;
        } else if (layer_tensor_is_matrix[t]) {
            hi = sqrtf(3.0f / (float)(t == FCPROJW ? 4 * C : C));
            lo = -hi;
        }
        fill_bf16(w.data() + off[t], p->layer_size[t], lo, hi, 200 + t);
    }
    auto x = rand_bf16(N * C, -1, 1, 220), dout = rand_bf16(N * C, -1, 1, 221);
    auto W = [&](int t) { return w.data() + off[t]; };

    // CPU forward
    std::vector<float> ln1((size_t)(N * C)), ln1_mean((size_t)N), ln1_rstd((size_t)N),
        qkv((size_t)(N * 3 * C)), atty((size_t)(N * C)), att((size_t)B * NH * T * T), res2((size_t)(N * C)),
        ln2((size_t)(N * C)), ln2_mean((size_t)N), ln2_rstd((size_t)N), fch((size_t)(N * 4 * C)),
        fch_gelu((size_t)(N * 4 * C)), out((size_t)(N * C)), w_t((size_t)4 * C * C);
    layernorm_forward(ln1.data(), ln1_mean.data(), ln1_rstd.data(), x.data(), W(LN1W), W(LN1B), N, C);
    matmul_forward(qkv.data(), ln1.data(), W(QKVW), W(QKVB), N, C, 3 * C, w_t.data());
    attention_forward(atty.data(), att.data(), qkv.data(), B, T, C, NH);
    matmul_forward(res2.data(), atty.data(), W(ATTPROJW), W(ATTPROJB), N, C, C, w_t.data());
    residual_forward(res2.data(), x.data(), res2.data(), N * C);
    layernorm_forward(ln2.data(), ln2_mean.data(), ln2_rstd.data(), res2.data(), W(LN2W), W(LN2B), N, C);
    matmul_forward(fch.data(), ln2.data(), W(FCW), W(FCB), N, C, 4 * C, w_t.data());
    gelu_forward(fch_gelu.data(), fch.data(), N * 4 * C);
    matmul_forward(out.data(), fch_gelu.data(), W(FCPROJW), W(FCPROJB), N, 4 * C, C, w_t.data());
    residual_forward(out.data(), res2.data(), out.data(), N * C);

    // GPU forward; each workspace tensor is compared, so the first one off names the stage
    DeviceMem m;
    const bf16 *w_d = m.bf16s(w), *x_d = m.bf16s(x);
    bf16* out_d = m.zeros<bf16>(N * C);
    layer_forward(g, w_d, x_d, out_d, a, NULL, s);
    using ActOf = bf16* LayerActs::*;  // which activation of a layer
    const struct {
        const char* name;
        ActOf act;
        const std::vector<float>* ref;
    } acts[] = {{"layer fwd ln1", &LayerActs::ln1, &ln1},
                {"layer fwd qkv (+bias)", &LayerActs::qkv, &qkv},
                {"layer fwd att", &LayerActs::att, &att},
                {"layer fwd atty", &LayerActs::atty, &atty},
                {"layer fwd res2", &LayerActs::residual2, &res2},
                {"layer fwd ln2", &LayerActs::ln2, &ln2},
                {"layer fwd fch (+bias)", &LayerActs::fch, &fch},
                {"layer fwd fch_gelu", &LayerActs::fch_gelu, &fch_gelu}};
    std::vector<std::vector<float>> first;
    for (const auto& t : acts) {
        if (t.act == &LayerActs::att && g->flash) {
            first.emplace_back();
            continue;
        }  // the fused path stores no att
        first.push_back(download(a->*t.act, (int64_t)t.ref->size()));
        // up to ~6 bf16 roundings deep (LN, GEMM, bias, 3 in attention, residual); emulated <= 5e-3
        EXPECT_TRUE(check(t.name, first.back(), *t.ref, 2e-2)) << t.name;
    }
    EXPECT_TRUE(check("layer fwd out", download(out_d, N * C), out, 2e-2));
    EXPECT_TRUE(
        check("layer fwd ln1 rstd", download(a->ln1_rstd, N), ln1_rstd, 1e-3));  // fp32 of a bf16 input
    EXPECT_TRUE(check("layer fwd ln2 rstd", download(a->ln2_rstd, N), ln2_rstd,
                      2e-2));  // of res2 (bf16 behind attention)

    // the recompute (out = NULL) must refill the workspace bit for bit: the same cuBLAS / cuBLASLt calls (the
    // algorithm cached, our own workspace, one stream: cuBLAS's documented condition for bit-wise
    // reproducible results on one GPU) and our kernels, none with atomics in the forward pass
    layer_forward(g, w_d, x_d, NULL, a, NULL, s);
    for (size_t i = 0; i < first.size(); i++)
        EXPECT_EQ(count_diff(download(a->*acts[i].act, (int64_t)first[i].size()), first[i]), 0)
            << "layer_forward(NULL) recomputed a different " << acts[i].name;

    // GPU backward
    bf16* dres_d = m.bf16s(dout);
    cudaCheck(cudaMemsetAsync(g->layer_grads, 0, (size_t)p->layer_stride * 4, s));
    layer_backward(g, w_d, g->layer_grads, x_d, dres_d, a, NULL, s);
    auto dw_gpu = download(g->layer_grads, p->layer_stride);
    auto dx_gpu = download(dres_d, N * C);

    // CPU backward
    std::vector<float> dres(dout), dw((size_t)p->layer_stride, 0.0f), dfch((size_t)(N * 4 * C)),
        dln((size_t)(N * C)), dqkv((size_t)(N * 3 * C)), dscore((size_t)B * NH * T);
    auto DW = [&](int t) { return dw.data() + off[t]; };
    matmul_backward(dfch.data(), DW(FCPROJW), DW(FCPROJB), dres.data(), fch_gelu.data(), W(FCPROJW), N, 4 * C,
                    C);
    gelu_backward(dfch.data(), fch.data(), dfch.data(), N * 4 * C);
    matmul_backward(dln.data(), DW(FCW), DW(FCB), dfch.data(), ln2.data(), W(FCW), N, C, 4 * C);
    layernorm_backward(dres.data(), DW(LN2W), DW(LN2B), dln.data(), res2.data(), W(LN2W), ln2_mean.data(),
                       ln2_rstd.data(), N, C);
    matmul_backward(dln.data(), DW(ATTPROJW), DW(ATTPROJB), dres.data(), atty.data(), W(ATTPROJW), N, C, C);
    attention_backward(dqkv.data(), dscore.data(), dln.data(), qkv.data(), att.data(), B, T, C, NH);
    matmul_backward(dln.data(), DW(QKVW), DW(QKVB), dqkv.data(), ln1.data(), W(QKVW), N, C, 3 * C);
    layernorm_backward(dres.data(), DW(LN1W), DW(LN1B), dln.data(), x.data(), W(LN1W), ln1_mean.data(),
                       ln1_rstd.data(), N, C);

    // gradients pass through about twice as many bf16 roundings as the forward (emulated <= 8e-3): 3e-2
    EXPECT_TRUE(check("layer bwd dfch (after gelu_backward)", download(a->dfch, N * 4 * C), dfch, 3e-2));
    EXPECT_TRUE(check("layer bwd dqkv", download(a->dqkv, N * 3 * C), dqkv, 3e-2));
    for (int t = 0; t < NUM_LAYER_TENSORS; t++) {
        char name[64];
        snprintf(name, sizeof name, "layer bwd grad %s", layer_tensor_names[t]);
        EXPECT_TRUE(check(name, dw_gpu.data() + off[t], dw.data() + off[t], p->layer_size[t], 3e-2)) << name;
    }
    EXPECT_TRUE(check("layer bwd dx (dres on return)", dx_gpu, dres, 3e-2));
    // At these tiny shapes cuBLASLt may have no fused algorithm on a real GPU (the unfused path then ran, and
    // was checked above just the same); Kernels.CublasLtFusesAtTheTrainersShapes requires one where it
    // matters. The emulation always offers one.
#ifdef FAKE_CUDA_DEVICE
    EXPECT_EQ(cublaslt_fallbacks, fallbacks_before) << "a fused GEMM fell back to cuBLAS + a kernel";
#else
    if (fused && cublaslt_fallbacks != fallbacks_before)
        printf(
            "  note: %lld GEMMs of this tiny layer fell back to cuBLAS + a kernel (allowed at these "
            "shapes)\n",
            (long long)(cublaslt_fallbacks - fallbacks_before));
#endif
}
TEST(Kernels, LayerForwardBackwardMatchCpuLayer) {  // the default: fused attention, cuBLASLt epilogues
    REQUIRE_GPU();
    check_layer_against_cpu(1, 1);
}
TEST(Kernels, LayerForwardBackwardMatchCpuLayerUnfused) {  // -F 0 and the GEMMs' passes as separate kernels
    REQUIRE_GPU();
    check_layer_against_cpu(0, 0);
}

// The fused GEMMs at the trainer's real shapes: one layer forward and recompute + backward at B*T = 8192 (B
// 8, T 1024) and the widths of d12 (768), GPT-2 XL (1600), the 1.3B benchmark (2048) and the 5B one (4096),
// so the 3C, C, 4C (bias + GELU) and C outputs and the GELU backward's 4C one. cuBLASLt must offer a fused
// algorithm for each (of the 8 candidates matmul.cuh asks for, the first usable one): a fallback there would
// cost the trainer an extra pass over a (B*T, 4C) tensor per GEMM. Numerics are not checked here (the tests
// above do, at small shapes); the output must only be finite. ~1.5 GiB of GPU memory, milliseconds
// of GPU time.
TEST(Kernels, CublasLtFusesAtTheTrainersShapes) {
    REQUIRE_GPU();
    SKIP_IN_EMULATION("GEMMs of 8192 rows take minutes on the CPU (the emulated cuBLASLt always fuses)");
    const int B = 8, T = 1024;
    for (int C : {768, 1600, 2048, 4096}) {
        const int NH = C / 64;
        AttentionChoice choice(1);
        const int saved_fusion = cublaslt_fusion;
        cublaslt_fusion = 1;
        struct Restore {
            int v;
            ~Restore() { cublaslt_fusion = v; }
        } restore{saved_fusion};
        TestGPT tg(tiny_config(1, C, NH, T, 1000), B,
                   T);  // a small vocabulary: the lm_head is not a fused GEMM
        GPT* g = &tg.g;
        const int64_t N = (int64_t)B * T, S = g->layout.layer_stride;
        DeviceMem m;
        // weights at the trainer's offsets in one layer's block, as in a weight slot (their alignment is what
        // the heuristic sees; their values are not), zero: cheap to make, and every output stays finite
        bf16* w = m.zeros<bf16>(S);
        bf16 *x = m.bf16s(rand_bf16(N * C, -1, 1, 501)), *out = m.zeros<bf16>(N * C),
             *dres = m.bf16s(rand_bf16(N * C, -1, 1, 502));
        const int64_t before = cublaslt_fallbacks;
        layer_forward(g, w, x, out, &g->acts, NULL, g->stream.compute);
        layer_forward(g, w, x, NULL, &g->acts, NULL, g->stream.compute);
        cudaCheck(cudaMemsetAsync(g->layer_grads, 0, (size_t)S * 4, g->stream.compute));
        layer_backward(g, w, g->layer_grads, x, dres, &g->acts, NULL, g->stream.compute);
        const std::vector<float> y = download(out, N * C), dx = download(dres, N * C);
        int64_t nonfinite = 0;
        for (size_t i = 0; i < y.size(); i++) nonfinite += !std::isfinite(y[i]) + !std::isfinite(dx[i]);
        printf("  C=%d NH=%d B*T=%lld: %lld fused GEMMs fell back, %lld non-finite outputs\n", C, NH,
               (long long)N, (long long)(cublaslt_fallbacks - before), (long long)nonfinite);
        EXPECT_EQ(cublaslt_fallbacks, before) << "C " << C << ": cuBLASLt offered no usable fused algorithm";
        EXPECT_EQ(nonfinite, 0) << "C " << C;
    }
}

// ----------------------------------------------------------------------------
// Grouped-query attention and packed sequences (issues 31, 32), both attention paths, against llama_cpu.h's
// gqa_attention_forward / _backward (q, k, v split out of the fused row) and gpt2_cpu.h's encoder and loss.
// The fused row is [q (NH*hs) | k (NKV*hs) | v (NKV*hs)]; NH/NKV = 1, 2, 8 (NKV 1 too), hs 64 and 128.
// Packed rows hold conversations of 70, 9, 23 and 41 tokens in turn (each row starts at another): masked
// key tiles are skipped (query tile 2 of the 130-token row starts its keys at 70). Bounds are the MHA
// tests': the same bf16 rounding points per element, the mask only removes terms (see the file's top).

// dq, dk, dv columns of a fused-row gradient against the reference, each within tol.
void check_gqa_grads(const std::string& what, const std::vector<float>& got, const GqaReference& r,
                     double tol) {
    EXPECT_TRUE(check(what + " dq", columns(got, r.N, r.W, 0, r.QD), r.dq, tol));
    EXPECT_TRUE(check(what + " dk", columns(got, r.N, r.W, r.QD, r.KVD), r.dk, tol));
    EXPECT_TRUE(check(what + " dv", columns(got, r.N, r.W, r.QD + r.KVD, r.KVD), r.dv, tol));
}

TEST(Kernels, FlashAttentionGqaPackedMatchesCpu) {
    REQUIRE_GPU();
    uint64_t seed = 500;
    for (const GqaCase& c : kGqaCases) {
        SCOPED_TRACE(gqa_name(c));
        printf("  %s\n", gqa_name(c).c_str());
        const GqaReference r(c, seed += 2);
        const int C = c.NH * c.hs;
        DeviceMem m;
        const bf16 *qkv_d = m.bf16s(r.qkv), *dy_d = m.bf16s(r.dy);
        const int* pos_d = c.packed ? m.copy(r.pos) : nullptr;
        bf16* y_d = m.zeros<bf16>(r.N * C);
        bf16* dqkv_d = m.zeros<bf16>(r.N * r.W);
        float* lse_d = m.zeros<float>((int64_t)c.B * c.NH * c.T);
        float* dsum_d = m.zeros<float>((int64_t)c.B * c.NH * c.T);
        cudaCheck(cudaMemset(y_d, 0xff, (size_t)(r.N * C) * 2));  // NaN: every element must be written
        cudaCheck(cudaMemset(dqkv_d, 0xff, (size_t)(r.N * r.W) * 2));
        flash_attention_forward(y_d, lse_d, qkv_d, c.B, c.T, C, c.NH, kStream, c.NKV, pos_d);
        flash_attention_backward(dqkv_d, dsum_d, dy_d, y_d, qkv_d, lse_d, c.B, c.T, C, c.NH, kStream, c.NKV,
                                 pos_d);
        // as FlashAttentionForwardMatchesCpu / BackwardMatchesCpu: y 1e-2, lse 1e-4, gradients 2e-2
        EXPECT_TRUE(check("flash gqa y", download(y_d, r.N * C), r.y, 1e-2));
        EXPECT_TRUE(check("flash gqa lse", download(lse_d, (int64_t)c.B * c.NH * c.T), r.lse, 1e-4));
        const auto got = download(dqkv_d, r.N * r.W);
        check_gqa_grads("flash gqa backward", got, r, 2e-2);
        // dk, dv: one block per key tile sums its group's heads, no atomics: the same bits again, with plain
        // loads for cp.async's too
        const bool async = flash_attention_async;
        flash_attention_async = false;
        flash_attention_backward(dqkv_d, dsum_d, dy_d, y_d, qkv_d, lse_d, c.B, c.T, C, c.NH, kStream, c.NKV,
                                 pos_d);
        flash_attention_async = async;
        EXPECT_EQ(count_bit_diff(download(dqkv_d, r.N * r.W), got), 0) << "not deterministic";
    }
}

TEST(Kernels, AttentionGqaPackedMatchesCpu) {  // the cuBLAS path (-F 0)
    REQUIRE_GPU();
    TestGPT tg(tiny_config(1, 64, 1, 64, 100), 1, 8);  // the cuBLAS handle and its stream
    const cudaStream_t s = tg.g.stream.compute;
    uint64_t seed = 600;
    for (const GqaCase& c : kGqaCases) {
        SCOPED_TRACE(gqa_name(c));
        printf("  %s\n", gqa_name(c).c_str());
        const GqaReference r(c, seed += 2);
        const int C = c.NH * c.hs;
        const int64_t natt = (int64_t)c.B * c.NH * c.T * c.T;
        DeviceMem m;
        bf16 *qkv_d = m.bf16s(r.qkv), *dy_d = m.bf16s(r.dy);
        const int* pos_d = c.packed ? m.copy(r.pos) : nullptr;
        bf16 *y_d = m.zeros<bf16>(r.N * C), *att_d = m.zeros<bf16>(natt), *datt_d = m.zeros<bf16>(natt);
        bf16* dqkv_d = m.zeros<bf16>(r.N * r.W);
        cudaCheck(cudaMemset(dqkv_d, 0xff, (size_t)(r.N * r.W) * 2));  // NaN: every element must be written
        cudaCheck(cudaDeviceSynchronize());  // the memset's legacy stream before the compute stream
        attention_forward(y_d, att_d, qkv_d, c.B, c.T, C, c.NH, s, c.NKV, pos_d);
        attention_backward(dqkv_d, datt_d, dy_d, att_d, qkv_d, c.B, c.T, C, c.NH, s, c.NKV, pos_d);
        // as AttentionForwardMatchesCpu: att and y behind 2 and 3 bf16 roundings, 2e-2
        EXPECT_TRUE(check("cublas gqa att", download(att_d, natt), r.att, 2e-2));
        EXPECT_TRUE(check("cublas gqa y", download(y_d, r.N * C), r.y, 2e-2));
        // dk, dv add the group's heads in bf16 (beta 1): up to NH/NKV - 1 = 7 more roundings of a partial
        // sum, each <= 2^-9 of it, random in sign: ~sqrt(7) 2^-9 ~ 5e-3 more in rel-L2; 3e-2
        check_gqa_grads("cublas gqa backward", download(dqkv_d, r.N * r.W), r, 3e-2);
    }
}

// cuDNN's SDPA on the grouped-query and packed cases (issue 40 item 4: MHA, GQA and packed against the CPU
// reference and our kernel), packed rows as ragged sequences in their bucket (ragged.h, as the trainer makes
// them). Bounds as the fused path's, the same roundings (y 1e-2, gradients 2e-2); cuDNN against the fused
// kernel within the two bounds' sum (y 2e-2, gradients 4e-2). A wrong stride, offset or head map is O(1).
TEST(Kernels, CudnnAttentionGqaPackedMatchesCpuAndFused) {
    REQUIRE_GPU();
    char why[512];
    if (!cudnn_att_open(why, sizeof why)) GTEST_SKIP() << "cuDNN: " << why;
    uint64_t seed = 700;
    for (const GqaCase& c : kGqaCases) {
        SCOPED_TRACE(gqa_name(c));
        printf("  %s\n", gqa_name(c).c_str());
        const GqaReference r(c, seed += 2);
        const int C = c.NH * c.hs;
        int bucket = 0;
        std::vector<int> meta;
        if (c.packed) {
            meta.resize((size_t)ragged_meta_ints(r.N));
            const int count = ragged_sequences(r.pos.data(), c.B, c.T, r.W, r.QD, c.NH,
                                               ragged_meta_at(meta.data(), r.N), (int)r.N, &bucket);
            ASSERT_GT(count, 0) << "the packed rows are not runs of 0, 1, 2, ...";
        }
        const CudnnAttShape shape = {c.B, c.T, c.NH, c.NKV, c.hs, bucket};
        if (!cudnn_att_prepare(&shape, why, sizeof why)) {
            ADD_FAILURE() << "cuDNN cannot run this shape: " << why;
            continue;
        }
        DeviceMem m;
        const bf16 *qkv_d = m.bf16s(r.qkv), *dy_d = m.bf16s(r.dy);
        RaggedMeta rm = {};
        if (c.packed) rm = ragged_meta_at(m.copy(meta), r.N);
        bf16* y_d = m.zeros<bf16>(r.N * C);
        bf16* dqkv_d = m.zeros<bf16>(r.N * r.W);
        float* stats_d = m.zeros<float>(r.N * c.NH);
        cudaCheck(cudaMemset(y_d, 0xff, (size_t)(r.N * C) * 2));  // NaN: every element must be written
        cudaCheck(cudaMemset(dqkv_d, 0xff, (size_t)(r.N * r.W) * 2));
        ASSERT_TRUE(cudnn_att_forward(y_d, stats_d, qkv_d, &shape, c.packed ? &rm : nullptr, kStream, why,
                                      sizeof why))
            << why;
        ASSERT_TRUE(cudnn_att_backward(dqkv_d, dy_d, qkv_d, y_d, stats_d, &shape, c.packed ? &rm : nullptr,
                                       kStream, why, sizeof why))
            << why;
        const auto y = download(y_d, r.N * C), got = download(dqkv_d, r.N * r.W);
        EXPECT_TRUE(check("cudnn gqa y", y, r.y, 1e-2));
        check_gqa_grads("cudnn gqa backward", got, r, 2e-2);
        if (!flash_attention_usable(c.hs)) continue;
        const int* pos_d = c.packed ? m.copy(r.pos) : nullptr;
        bf16* fy_d = m.zeros<bf16>(r.N * C);
        bf16* fdqkv_d = m.zeros<bf16>(r.N * r.W);
        float* lse_d = m.zeros<float>((int64_t)c.B * c.NH * c.T);
        float* dsum_d = m.zeros<float>((int64_t)c.B * c.NH * c.T);
        flash_attention_forward(fy_d, lse_d, qkv_d, c.B, c.T, C, c.NH, kStream, c.NKV, pos_d);
        flash_attention_backward(fdqkv_d, dsum_d, dy_d, fy_d, qkv_d, lse_d, c.B, c.T, C, c.NH, kStream, c.NKV,
                                 pos_d);
        EXPECT_TRUE(check("cudnn vs fused y", y, download(fy_d, r.N * C), 2e-2));
        EXPECT_TRUE(check("cudnn vs fused dqkv", got, download(fdqkv_d, r.N * r.W), 4e-2));
    }
    cudnn_att_free_own_workspace();
}

// Measured, not checked: cuDNN's workspace for a chat micro-batch's ragged graphs, by bucket (1..64
// sequences), at Llama 3 8B's and GPT-2 1.3B's heads, 8 rows of 1024. The plan counts the bucket of B
// sequences; a micro-batch of more conversations builds a larger bucket's graphs when first met, and falls
// back to our kernel where their workspace is past the plan's. The window records these lines to size it.
TEST(Kernels, CudnnRaggedWorkspaceByBucket) {
    REQUIRE_GPU();
    char why[512];
    if (!cudnn_att_open(why, sizeof why)) GTEST_SKIP() << "cuDNN: " << why;
    const CudnnAttShape heads[2] = {{8, 1024, 32, 8, 128, 0}, {8, 1024, 16, 16, 128, 0}};
    for (const CudnnAttShape& h : heads) {
        std::string line = "cuDNN workspace MiB, B 8 T 1024 NH " + std::to_string(h.NH) + " NKV " +
                           std::to_string(h.NKV) + ", dense and buckets 1..64:";
        for (int seqs : {0, 1, 2, 4, 8, 16, 32, 64}) {
            CudnnAttShape s = h;
            s.seqs = seqs;
            const int64_t w = cudnn_att_workspace_of(&s, why, sizeof why);
            ASSERT_GE(w, 0) << "bucket " << seqs << ": " << why;
            char x[32];
            snprintf(x, sizeof x, " %.1f", w / 1048576.0);
            line += x;
        }
        printf("%s\n", line.c_str());
    }
}

// Explicit positions 0..T-1 in every row are the plain causal case: the same bits as pos = NULL on both
// paths (the mask adds key >= t - pos[t], which then always holds).
TEST(Kernels, AttentionPlainPositionsSameBitsAsNoPositions) {
    REQUIRE_GPU();
    TestGPT tg(tiny_config(1, 64, 1, 64, 100), 1, 8);
    const cudaStream_t s = tg.g.stream.compute;
    const GqaCase c = {2, 70, 4, 2, 64, 0};
    const GqaReference r(c, 700);
    const int C = c.NH * c.hs;
    const int64_t natt = (int64_t)c.B * c.NH * c.T * c.T;
    std::vector<int> plain((size_t)r.N);
    for (int64_t i = 0; i < r.N; i++) plain[(size_t)i] = (int)(i % c.T);
    DeviceMem m;
    bf16 *qkv_d = m.bf16s(r.qkv), *dy_d = m.bf16s(r.dy);
    const int* pos_d = m.copy(plain);
    bf16 *y_d = m.zeros<bf16>(r.N * C), *att_d = m.zeros<bf16>(natt), *datt_d = m.zeros<bf16>(natt);
    bf16* dqkv_d = m.zeros<bf16>(r.N * r.W);
    float *lse_d = m.zeros<float>((int64_t)c.B * c.NH * c.T),
          *dsum_d = m.zeros<float>((int64_t)c.B * c.NH * c.T);
    std::vector<float> outs[2][3];
    for (int with_pos = 0; with_pos < 2; with_pos++) {
        const int* p = with_pos ? pos_d : nullptr;
        flash_attention_forward(y_d, lse_d, qkv_d, c.B, c.T, C, c.NH, s, c.NKV, p);
        flash_attention_backward(dqkv_d, dsum_d, dy_d, y_d, qkv_d, lse_d, c.B, c.T, C, c.NH, s, c.NKV, p);
        outs[with_pos][0] = download(dqkv_d, r.N * r.W);
        attention_forward(y_d, att_d, qkv_d, c.B, c.T, C, c.NH, s, c.NKV, p);
        outs[with_pos][1] = download(y_d, r.N * C);
        attention_backward(dqkv_d, datt_d, dy_d, att_d, qkv_d, c.B, c.T, C, c.NH, s, c.NKV, p);
        outs[with_pos][2] = download(dqkv_d, r.N * r.W);
    }
    EXPECT_EQ(count_bit_diff(outs[0][0], outs[1][0]), 0) << "flash dqkv";
    EXPECT_EQ(count_bit_diff(outs[0][1], outs[1][1]), 0) << "cublas y";
    EXPECT_EQ(count_bit_diff(outs[0][2], outs[1][2]), 0) << "cublas dqkv";
}

// wpe rows by position: gpt2_cpu.h's encoder with the same pos (two calls of the backward: they add).
TEST(Kernels, EmbeddingByPositionsMatchesEncoder) {
    REQUIRE_GPU();
    const int B = 2, T = 37, C = kC, V = 100, Vp = 128, maxT = 64;
    const int64_t N = (int64_t)B * T;
    auto wte = rand_bf16((int64_t)Vp * C, -1, 1, 11), wpe = rand_bf16((int64_t)maxT * C, -1, 1, 12);
    auto dout = rand_bf16(N * C, -1, 1, 13);
    auto tok = rand_tokens(N, V, 14);
    const auto pos = packed_positions(B, T, {20, 9, 5});
    DeviceMem m;
    bf16* out = m.zeros<bf16>(N * C);
    const int *d_tok = m.copy(tok), *d_pos = m.copy(pos);
    embedding_forward(out, d_tok, m.bf16s(wte), m.bf16s(wpe), N, T, C, kStream, d_pos);
    std::vector<float> ref((size_t)(N * C));
    encoder_forward(ref.data(), tok.data(), wte.data(), wpe.data(), B, T, C, pos.data());
    EXPECT_TRUE(check("embedding_forward (pos) out", download(out, N * C), ref, 1e-2));  // one rounding
    float *dwte = m.zeros<float>((int64_t)Vp * C), *dwpe = m.zeros<float>((int64_t)maxT * C);
    const bf16* d_dout = m.bf16s(dout);
    std::vector<float> ref_wte((size_t)Vp * C, 0.0f), ref_wpe((size_t)maxT * C, 0.0f);
    for (int rep = 0; rep < 2; rep++) {
        embedding_backward(dwte, dwpe, d_dout, d_tok, N, T, C, kStream, d_pos);
        encoder_backward(ref_wte.data(), ref_wpe.data(), dout.data(), tok.data(), B, T, C, pos.data());
    }
    // fp32 sums of identical bf16 values in another order (atomics)
    EXPECT_TRUE(check("embedding_backward (pos) dwte", download(dwte, (int64_t)Vp * C), ref_wte, 1e-5));
    EXPECT_TRUE(check("embedding_backward (pos) dwpe", download(dwpe, (int64_t)maxT * C), ref_wpe, 1e-5));
}

// Targets -1: loss 0 and a zero gradient row; the others weighted by the caller's normalizer.
TEST(Kernels, FusedClassifierSkipsNonTargets) {
    REQUIRE_GPU();
    const int V = 2500, Vp = 2560;
    const int64_t N = 74;
    auto logits = rand_bf16(N * Vp, -4, 4, 120);
    auto tg = rand_tokens(N, V, 121);
    int64_t targets = 0;
    for (int64_t i = 0; i < N; i++) {
        if (i % 3 == 0 || i < 5) tg[(size_t)i] = -1;
        targets += tg[(size_t)i] >= 0;
    }
    const float normalizer = 1.0f / (float)(targets * 3);  // as if the step had 3 such micro-batches
    std::vector<float> probs((size_t)(N * Vp)), losses((size_t)N), dlogits((size_t)(N * Vp));
    softmax_crossentropy_forward(probs.data(), losses.data(), logits.data(), tg.data(), N, V, Vp);
    crossentropy_softmax_backward(dlogits.data(), probs.data(), tg.data(), normalizer, N, V, Vp);
    DeviceMem m;
    bf16* d_logits = m.bf16s(logits);
    float* d_losses = m.zeros<float>(N);
    cudaCheck(cudaMemset(d_losses, 0xff, (size_t)N * 4));  // NaN: every loss must be written
    fused_classifier(d_logits, d_losses, m.copy(tg), N, V, Vp, normalizer, kStream);
    const auto got_losses = download(d_losses, N);
    const auto got = download(d_logits, N * Vp);
    EXPECT_TRUE(check("fused_classifier (-1 targets) losses", got_losses, losses, 1e-4));  // fp32, as above
    EXPECT_TRUE(check("fused_classifier (-1 targets) dlogits", got, dlogits, 1e-2));       // bf16 output
    int64_t nonzero = 0;  // rows without a target: loss and gradient exactly 0
    for (int64_t i = 0; i < N; i++)
        if (tg[(size_t)i] < 0) {
            nonzero += got_losses[(size_t)i] != 0.0f;
            for (int v = 0; v < Vp; v++) nonzero += got[(size_t)(i * Vp + v)] != 0.0f;
        }
    EXPECT_EQ(nonzero, 0);
    // the step's loss: the sum over the targets times the normalizer (fp32 sum of 74 values: ~1e-7)
    double sum = 0.0;
    for (float l : losses) sum += l;
    float* d_mean = m.zeros<float>(1);
    mean_loss(d_mean, d_losses, N, kStream, normalizer);
    EXPECT_TRUE(
        within("mean_loss (normalizer), relative", rel_diff(download(d_mean, 1)[0], sum * normalizer), 1e-5));
}

}  // namespace
