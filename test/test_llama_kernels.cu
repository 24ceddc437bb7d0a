// test_llama_kernels.cu — llama_kernels.cuh's GPU kernels (RMSNorm, RoPE on the fused qkv layout, SwiGLU on
// the fused gate_up layout; forward and backward) against their fp32 twins in llama_cpu.h, called as they
// are (rmsnorm_*, rope_table + rope_*, swiglu_*), on the same inputs.
// Shapes: N = 259 rows (not a multiple of the 8 rows a norm block takes, two 256-row tiles of the weight
// gradient); C = 96, 60 and 1000; RoPE at head sizes 64 and 128 with NKV = NH, NH/2 and NH/8, plain
// (theta 1e4) and llama3-scaled (theta 5e5, Llama 3.1's factors), and one 3000-position sequence (angles up
// to 3000 rad); SwiGLU at H = 96, 100 and 1000 (past the emulated grid cap, so the grid-stride loops loop).
// RoPE also by the positions of packed sequences (pos). Not here: grouped-query and packed attention on the
// GPU (test_kernels.cu), the trainer.
// Every test skips when no CUDA device is present; make's emulated build (build/emu_test_llama_kernels)
// runs them on the CPU (test/fake_cuda/fake_device.h).
//
// Method: inputs are random, rounded to bf16, and the same values go to both sides, so a GPU result
// differs from the CPU's by its output rounding and fp32 operation order only. The measure is
// max|gpu - cpu| / max|cpu| over a tensor (a [margin] line each, gpu_test_common.h `within`). Bounds:
//   2^-7  a bf16 output rounded once from fp32 math: round-to-nearest moves a value by half an ulp, <= 2^-8
//         of the value (8 significant bits), so <= 2^-8 of the largest; the bound is 2x that. The fp32
//         order and the GPU's fast exp / rsqrt add ~1e-6 (a wrong index or formula gives O(1));
//   2^-6  a bf16 output rounded twice (RMSNorm's dinp after two += calls): <= 2 x 2^-8 of the largest, 2x;
//   1e-5  fp32 rstd (a sum of squares in another order, the GPU's approximate rsqrtf: ~1e-6);
//   1e-4  fp32 dweight (259 rows a call, summed in another order and by atomics: ~1e-6);
//   exact RoPE's v heads, which no rotation touches.
#include "gpu_test_common.h"
#include "llmc/llama_kernels.cuh"  // defines: rmsnorm_forward, rope_forward, swiglu_forward, rope_inv_freq_upload
#include <string>
#include <vector>

namespace {

// ----------------------------------------------------------------------------
// Helpers: the error measure (random inputs and device buffers: gpu_test_common.h).

// max|got - ref| / max|ref| against its bound; prints the [margin] line. NaN fails.
::testing::AssertionResult check(const std::string& what, const std::vector<float>& got,
                                 const std::vector<float>& ref, double bound) {
    if (got.size() != ref.size())
        return ::testing::AssertionFailure() << what << ": size " << got.size() << " vs " << ref.size();
    double diff = 0.0, mx = 0.0;
    for (size_t i = 0; i < ref.size(); i++) {
        const double d = fabs((double)got[i] - ref[i]);
        diff = d > diff || d != d ? d : diff;  // a NaN sticks
        mx = fabs((double)ref[i]) > mx ? fabs((double)ref[i]) : mx;
    }
    return within(what + " max-diff/max-ref", mx > 0 ? diff / mx : diff, bound);
}

const cudaStream_t kStream = 0;  // the legacy stream: nothing here needs another
const int kB = 7, kT = 37;       // N = 259 rows
const int64_t kN = (int64_t)kB * kT;
const double kOneRounding = 1.0 / 128;  // 2^-7, see the file's top
const double kTwoRoundings = 1.0 / 64;  // 2^-6

// ----------------------------------------------------------------------------
// RMSNorm

TEST(LlamaKernels, RmsNormForwardMatchesCpu) {
    REQUIRE_GPU();
    const int64_t N = kN;
    const float eps = 1e-5f;
    uint64_t seed = 100;
    // 96, 1000: one fused kernel; 60: the element-wise kernels; 8200: Pack8s, but too wide to fuse
    for (int C : {96, 60, 1000, 8200}) {
        SCOPED_TRACE("C = " + std::to_string(C));
        auto inp = rand_bf16(N * C, -2, 3, seed++), w = rand_bf16(C, 0.5f, 1.5f, seed++);
        DeviceMem m;
        bf16* out = m.zeros<bf16>(N * C);
        float* rstd = m.zeros<float>(N);
        rmsnorm_forward(out, rstd, m.bf16s(inp), m.bf16s(w), N, C, eps, kStream);
        std::vector<float> ref((size_t)(N * C)), ref_rstd((size_t)N);
        rmsnorm_forward(ref.data(), ref_rstd.data(), inp.data(), w.data(), N, C, eps);
        EXPECT_TRUE(check("rmsnorm_forward out", download(out, N * C), ref, kOneRounding));
        EXPECT_TRUE(check("rmsnorm_forward rstd", download(rstd, N), ref_rstd, 1e-5));
    }
}

// dinp starts from random values (the kernel adds), dweight from zero; two calls: both must accumulate.
TEST(LlamaKernels, RmsNormBackwardMatchesCpu) {
    REQUIRE_GPU();
    const int64_t N = kN;
    uint64_t seed = 200;
    // 96, 1000: one fused kernel; 60: the element-wise kernels; 8200: Pack8s, but too wide to fuse
    for (int C : {96, 60, 1000, 8200}) {
        SCOPED_TRACE("C = " + std::to_string(C));
        auto inp = rand_bf16(N * C, -2, 3, seed++), w = rand_bf16(C, 0.5f, 1.5f, seed++);
        auto dout = rand_bf16(N * C, -1, 1, seed++), dinp0 = rand_bf16(N * C, -1, 1, seed++);
        std::vector<float> y((size_t)(N * C)), rstd((size_t)N);
        rmsnorm_forward(y.data(), rstd.data(), inp.data(), w.data(), N, C, 1e-5f);
        DeviceMem m;  // both sides get the CPU's rstd
        bf16 *dinp = m.bf16s(dinp0), *d_dout = m.bf16s(dout), *d_inp = m.bf16s(inp), *d_w = m.bf16s(w);
        float *dw = m.copy(std::vector<float>((size_t)C, 0.0f)), *d_rstd = m.copy(rstd);
        std::vector<float> ref_dinp = dinp0, ref_dw((size_t)C, 0.0f);
        for (int call = 1; call <= 2; call++) {
            rmsnorm_backward(dinp, dw, d_dout, d_inp, d_w, d_rstd, N, C, kStream);
            rmsnorm_backward(ref_dinp.data(), ref_dw.data(), dout.data(), inp.data(), w.data(), rstd.data(),
                             N, C);
            const std::string at = " (call " + std::to_string(call) + ")";
            EXPECT_TRUE(check("rmsnorm_backward dinp" + at, download(dinp, N * C), ref_dinp,
                              call == 1 ? kOneRounding : kTwoRoundings));
            EXPECT_TRUE(check("rmsnorm_backward dweight" + at, download(dw, C), ref_dw, 1e-4));
        }
    }
}

// ----------------------------------------------------------------------------
// RoPE on the fused qkv layout (N, (NH + 2*NKV) * hd)

struct RopeCase {
    int B, T, NH, NKV, hd, llama3;
};
std::string name(const RopeCase& c) {
    return "B" + std::to_string(c.B) + " T" + std::to_string(c.T) + " NH" + std::to_string(c.NH) + " NKV" +
           std::to_string(c.NKV) + " hd" + std::to_string(c.hd) + (c.llama3 ? " llama3" : " plain");
}
// Only the RoPE fields matter here: Llama 2's theta, or Llama 3.1's theta and scaling.
LlamaConfig rope_config(const RopeCase& c) {
    LlamaConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.head_dim = c.hd;
    cfg.rope_theta = c.llama3 ? 500000.0f : 10000.0f;
    cfg.rope_llama3 = c.llama3;
    cfg.rope_factor = 8.0f;
    cfg.rope_low_freq_factor = 1.0f;
    cfg.rope_high_freq_factor = 4.0f;
    cfg.rope_original_max_pos = 8192;
    return cfg;
}
std::vector<RopeCase> rope_cases() {
    std::vector<RopeCase> cases;
    for (int hd : {64, 128, 24})   // 24: not a multiple of 16, the element-wise kernel
        for (int NKV : {8, 4, 1})  // NH, NH/2, NH/8
            for (int llama3 : {0, 1}) cases.push_back({3, kT, 8, NKV, hd, llama3});
    return cases;
}

// The GPU's rope_forward (backward: rope_backward) on a random fused qkv, against llama_cpu.h's on the q
// and k parts apart; the v part must come back unchanged. pos (B*T, may be empty): packed positions.
void check_rope(const RopeCase& c, bool backward, uint64_t seed, const std::vector<int>& pos = {}) {
    SCOPED_TRACE(name(c) + (backward ? " backward" : " forward"));
    const int64_t N = (int64_t)c.B * c.T, QD = (int64_t)c.NH * c.hd, KVD = (int64_t)c.NKV * c.hd;
    const int64_t W = QD + 2 * KVD;
    const LlamaConfig cfg = rope_config(c);
    auto qkv = rand_bf16(N * W, -2, 2, seed);
    DeviceMem m;
    bf16* d_qkv = m.bf16s(qkv);
    float* inv_freq = m.zeros<float>(c.hd / 2);
    rope_inv_freq_upload(inv_freq, &cfg);
    const int* p = pos.empty() ? nullptr : pos.data();
    int* d_pos = nullptr;
    if (p) {
        d_pos = m.zeros<int>(N);
        cudaCheck(cudaMemcpy(d_pos, p, (size_t)N * sizeof(int), cudaMemcpyHostToDevice));
        cudaCheck(cudaDeviceSynchronize());
    }
    if (backward) rope_backward(d_qkv, inv_freq, N, c.T, c.NH, c.NKV, c.hd, kStream, d_pos);
    else rope_forward(d_qkv, inv_freq, N, c.T, c.NH, c.NKV, c.hd, kStream, d_pos);
    const auto got = download(d_qkv, N * W);

    std::vector<float> cos_t((size_t)(c.T * c.hd / 2)), sin_t(cos_t.size());
    rope_table(cos_t.data(), sin_t.data(), &cfg, c.T);
    auto q = columns(qkv, N, W, 0, QD), k = columns(qkv, N, W, QD, KVD);
    if (backward) {
        rope_backward(q.data(), cos_t.data(), sin_t.data(), c.B, c.T, c.NH, c.hd, p);
        rope_backward(k.data(), cos_t.data(), sin_t.data(), c.B, c.T, c.NKV, c.hd, p);
    } else {
        rope_forward(q.data(), cos_t.data(), sin_t.data(), c.B, c.T, c.NH, c.hd, p);
        rope_forward(k.data(), cos_t.data(), sin_t.data(), c.B, c.T, c.NKV, c.hd, p);
    }
    const std::string what = backward ? "rope_backward " : "rope_forward ";
    EXPECT_TRUE(check(what + "q", columns(got, N, W, 0, QD), q, kOneRounding));
    EXPECT_TRUE(check(what + "k", columns(got, N, W, QD, KVD), k, kOneRounding));
    EXPECT_EQ(count_diff(columns(got, N, W, QD + KVD, KVD), columns(qkv, N, W, QD + KVD, KVD)), 0)
        << "v heads changed";
}

TEST(LlamaKernels, RopeForwardMatchesCpu) {
    REQUIRE_GPU();
    uint64_t seed = 300;
    for (const RopeCase& c : rope_cases()) check_rope(c, false, seed++);
}

TEST(LlamaKernels, RopeBackwardMatchesCpu) {
    REQUIRE_GPU();
    uint64_t seed = 400;
    for (const RopeCase& c : rope_cases()) check_rope(c, true, seed++);
}

// Positions up to 2999: angles of thousands of radians, where a fast single-precision sin/cos would drift.
TEST(LlamaKernels, RopeLongSequenceMatchesCpu) {
    REQUIRE_GPU();
    uint64_t seed = 500;
    for (int llama3 : {0, 1})
        for (bool backward : {false, true}) check_rope({1, 3000, 2, 1, 64, llama3}, backward, seed++);
}

// Packed sequences: each row holds conversations of 20, 9 and 5 tokens in turn, each rotated from 0.
TEST(LlamaKernels, RopeByPositionsMatchesCpu) {
    REQUIRE_GPU();
    uint64_t seed = 550;
    const RopeCase c = {3, kT, 8, 2, 64, 1};
    std::vector<int> pos((size_t)(c.B * c.T));
    const int lengths[3] = {20, 9, 5};
    for (int b = 0; b < c.B; b++)
        for (int t = 0, k = b, p = 0; t < c.T; t++) {
            if (p == lengths[k % 3]) p = 0, k++;
            pos[(size_t)(b * c.T + t)] = p++;
        }
    for (bool backward : {false, true}) check_rope(c, backward, seed++, pos);
}

// ----------------------------------------------------------------------------
// SwiGLU on the fused gate_up layout (N, 2H)

TEST(LlamaKernels, SwigluForwardMatchesCpu) {
    REQUIRE_GPU();
    const int64_t N = kN;
    uint64_t seed = 600;
    for (int H : {96, 100, 1000}) {
        SCOPED_TRACE("H = " + std::to_string(H));
        auto gate_up = rand_bf16(N * 2 * H, -6, 6, seed++);
        DeviceMem m;
        bf16* out = m.bf16s(rand_bf16(N * H, -1, 1, seed++));  // not zeros: every element must be written
        swiglu_forward(out, m.bf16s(gate_up), N, H, kStream);
        const auto gate = columns(gate_up, N, 2 * H, 0, H), up = columns(gate_up, N, 2 * H, H, H);
        std::vector<float> ref((size_t)(N * H));
        swiglu_forward(ref.data(), gate.data(), up.data(), N * H);
        EXPECT_TRUE(check("swiglu_forward out", download(out, N * H), ref, kOneRounding));
    }
}

TEST(LlamaKernels, SwigluBackwardMatchesCpu) {
    REQUIRE_GPU();
    const int64_t N = kN;
    uint64_t seed = 700;
    for (int H : {96, 100, 1000}) {
        SCOPED_TRACE("H = " + std::to_string(H));
        auto gate_up = rand_bf16(N * 2 * H, -6, 6, seed++), dout = rand_bf16(N * H, -1, 1, seed++);
        DeviceMem m;
        bf16* dgate_up = m.bf16s(rand_bf16(N * 2 * H, -1, 1, seed++));  // overwritten, every element
        swiglu_backward(dgate_up, m.bf16s(dout), m.bf16s(gate_up), N, H, kStream);
        const auto got = download(dgate_up, N * 2 * H);
        const auto gate = columns(gate_up, N, 2 * H, 0, H), up = columns(gate_up, N, 2 * H, H, H);
        std::vector<float> dgate((size_t)(N * H)), dup((size_t)(N * H));
        swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), N * H);
        EXPECT_TRUE(check("swiglu_backward dgate", columns(got, N, 2 * H, 0, H), dgate, kOneRounding));
        EXPECT_TRUE(check("swiglu_backward dup", columns(got, N, 2 * H, H, H), dup, kOneRounding));
    }
}

}  // namespace
