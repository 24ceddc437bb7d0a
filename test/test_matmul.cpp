// test_matmul.cpp — the trainer's cuBLAS wrappers (matmul.cuh) run on the CPU in CI: compiled against
// test/fake_cuda, whose cuBLAS computes what cuBLAS documents (column-major, op(A) op(B), leading dimensions,
// strided batches, bf16 / fp32 storage) and refuses the arguments cuBLAS refuses. Each wrapper must give
// gpt2_cpu.h's result: out = inp @ w^T, dinp = dout @ w, dw += dout^T @ inp (accumulating in fp32 across
// calls), and matmul_batched a plain per-batch product. Tolerances: a bf16 output is one rounding of an exact
// sum (<= 2^-9 relative per element: rel-L2 < 4e-3); fp32 outputs differ only in summation order (< 1e-5).
// Not checked here: real cuBLAS (test_kernels.cu on a GPU), performance.
#include <gtest/gtest.h>
#include <algorithm>
#include <math.h>
#include <vector>
#include "llmc/cpu_adam.h"     // float_to_bf16, bf16_to_float
#include "llmc/cuda_common.h"  // defines: bf16, cudaStream_t
#include "llmc/gpt2_cpu.h"
// matmul.cuh's fused GEMMs fall back to kernels.cuh's passes; this suite checks only the plain wrappers
static void add_bias(bf16*, const bf16*, const bf16*, int64_t, int, cudaStream_t) { abort(); }
static void bias_gelu_forward(bf16*, bf16*, const bf16*, int64_t, int, cudaStream_t) { abort(); }
static void gelu_backward(bf16*, const bf16*, int64_t, cudaStream_t) { abort(); }
#include "llmc/matmul.cuh"

namespace {

std::vector<float> rand_vec(int64_t n, uint64_t seed) {  // values exactly representable in bf16
    std::vector<float> v((size_t)n);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (auto& x : v) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x = bf16_to_float(float_to_bf16((float)((s >> 40) / 16777216.0) * 2.0f - 1.0f));
    }
    return v;
}
std::vector<bf16> to_bf16(const std::vector<float>& v) {
    std::vector<bf16> out(v.size());
    for (size_t i = 0; i < v.size(); i++) out[i].x = float_to_bf16(v[i]);
    return out;
}
std::vector<float> to_float(const std::vector<bf16>& v) {
    std::vector<float> out(v.size());
    for (size_t i = 0; i < v.size(); i++) out[i] = bf16_to_float(v[i].x);
    return out;
}
double rel_l2(const std::vector<float>& got, const std::vector<float>& ref) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < ref.size(); i++) {
        num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num / den);
}

// One stream for the whole suite (the CUDA model in test/fake_cuda hands out a handful of stream ids); fresh
// handles, workspace and cuBLASLt answers per test.
cudaStream_t suite_stream() {
    static cudaStream_t s = [] {
        cudaStream_t x;
        cudaCheck(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
        return x;
    }();
    return s;
}
struct Cublas {
    cudaStream_t s;
    Cublas() : s(suite_stream()) {
        cublasCheck(cublasCreate(&cublas_handle));
        cublasCheck(cublasLtCreate(&cublaslt_handle));
        cublas_workspace = malloc(16);
        cublas_stream = NULL;
    }
    ~Cublas() {
        cublasCheck(cublasDestroy(cublas_handle));
        cublasCheck(cublasLtDestroy(cublaslt_handle));
        lt_algo_cache.clear();
        free(cublas_workspace);
        cublas_handle = NULL;
        cublaslt_handle = NULL;
        cublas_workspace = NULL;
        cublas_stream = NULL;
    }
};

const int64_t kN = 37;  // rows (tokens): none of the sizes is a multiple of another or of 8
const int kC = 24, kOC = 40;

TEST(Matmul, ForwardIsInputTimesWeightTransposed) {
    Cublas cb;
    auto inp = rand_vec(kN * kC, 1), w = rand_vec((int64_t)kOC * kC, 2);
    auto inp_b = to_bf16(inp), w_b = to_bf16(w);
    std::vector<bf16> out((size_t)(kN * kOC));
    matmul_forward(out.data(), inp_b.data(), w_b.data(), kN, kC, kOC, cb.s);
    std::vector<float> ref((size_t)(kN * kOC)), w_t((size_t)kOC * kC);
    matmul_forward(ref.data(), inp.data(), w.data(), NULL, kN, kC, kOC, w_t.data());  // gpt2_cpu.h
    EXPECT_LT(rel_l2(to_float(out), ref), 4e-3);
}

TEST(Matmul, BackwardInputIsDoutTimesWeight) {
    Cublas cb;
    auto dout = rand_vec(kN * kOC, 3), w = rand_vec((int64_t)kOC * kC, 4), inp = rand_vec(kN * kC, 5);
    auto dout_b = to_bf16(dout), w_b = to_bf16(w);
    std::vector<bf16> dinp((size_t)(kN * kC));
    matmul_backward_input(dinp.data(), dout_b.data(), w_b.data(), kN, kC, kOC, cb.s);
    std::vector<float> ref((size_t)(kN * kC)), dw((size_t)kOC * kC, 0.0f);
    matmul_backward(ref.data(), dw.data(), NULL, dout.data(), inp.data(), w.data(), kN, kC,
                    kOC);  // gpt2_cpu.h
    EXPECT_LT(rel_l2(to_float(dinp), ref), 4e-3);
}

TEST(Matmul, BackwardWeightAccumulatesInFp32) {
    Cublas cb;
    std::vector<float> dw((size_t)kOC * kC, 0.0f), ref((size_t)kOC * kC, 0.0f), dinp((size_t)(kN * kC));
    auto w = rand_vec((int64_t)kOC * kC, 6);
    for (int call = 0; call < 2; call++) {  // two micro-batches: the second must ADD to the first
        auto dout = rand_vec(kN * kOC, 10 + call), inp = rand_vec(kN * kC, 20 + call);
        auto dout_b = to_bf16(dout), inp_b = to_bf16(inp);
        matmul_backward_weight(dw.data(), dout_b.data(), inp_b.data(), kN, kC, kOC, cb.s);
        matmul_backward(dinp.data(), ref.data(), NULL, dout.data(), inp.data(), w.data(), kN, kC, kOC);
    }
    EXPECT_LT(rel_l2(dw, ref), 1e-5);
}

TEST(Matmul, BatchedIsAPerBatchProduct) {
    Cublas cb;
    // row-major per batch: C (M x N) = A (M x K) @ B (K x N) as the column-major C^T = B^T A^T,
    // with padded rows
    const int M = 5, K = 7, N = 6, batch = 3, lda = K + 2, ldb = N + 1, ldc = N + 3;
    const int64_t sa = (int64_t)M * lda + 4, sb = (int64_t)K * ldb + 1, sc = (int64_t)M * ldc + 2;
    auto a = rand_vec(sa * batch, 30), b = rand_vec(sb * batch, 31);
    auto a_b = to_bf16(a), b_b = to_bf16(b);
    std::vector<bf16> c((size_t)(sc * batch));
    matmul_batched(CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, 0.5f, b_b.data(), ldb, sb, a_b.data(), lda, sa,
                   c.data(), ldc, sc, batch, cb.s);
    std::vector<float> got = to_float(c), want, seen;
    for (int t = 0; t < batch; t++)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double acc = 0.0;
                for (int l = 0; l < K; l++)
                    acc += (double)a[(size_t)(t * sa + i * lda + l)] * b[(size_t)(t * sb + l * ldb + j)];
                want.push_back((float)(0.5 * acc));
                seen.push_back(got[(size_t)(t * sc + i * ldc + j)]);
            }
    EXPECT_LT(rel_l2(seen, want), 4e-3);
}

// cuBLASLt with epilogues, called as train_gpt.cu calls lt_matmul (row-major tensors, the transposed
// products): out = inp @ w^T + bias + residual; pre = inp @ w^T + bias with out = gelu(pre); dinp = (dout @
// w) * gelu'(pre). The bf16 results are one rounding of exact sums (4e-3 as above); gelu(pre) is taken of the
// fp32 sum while the CPU side rounds nothing: still one rounding.
TEST(Matmul, LtBiasResidualEpilogue) {
    Cublas cb;
    auto inp = rand_vec(kN * kC, 40), w = rand_vec((int64_t)kOC * kC, 41), bias = rand_vec(kOC, 42),
         res = rand_vec(kN * kOC, 43);
    auto inp_b = to_bf16(inp), w_b = to_bf16(w), bias_b = to_bf16(bias), res_b = to_bf16(res);
    std::vector<bf16> out((size_t)(kN * kOC));
    for (int with_res = 0; with_res < 2; with_res++) {
        ASSERT_TRUE(lt_matmul(out.data(), kOC, w_b.data(), CUBLAS_OP_T, kC, inp_b.data(), CUBLAS_OP_N, kC,
                              kOC, (int)kN, kC, with_res ? res_b.data() : NULL, CUBLASLT_EPILOGUE_BIAS,
                              bias_b.data(), NULL, 0, cb.s));
        std::vector<float> ref((size_t)(kN * kOC)), w_t((size_t)kOC * kC);
        matmul_forward(ref.data(), inp.data(), w.data(), bias.data(), kN, kC, kOC, w_t.data());  // gpt2_cpu.h
        if (with_res) residual_forward(ref.data(), ref.data(), res.data(), kN * kOC);
        EXPECT_LT(rel_l2(to_float(out), ref), 4e-3) << "with residual: " << with_res;
    }
    // every matrix 2-byte aligned only (one bf16 into its buffer): the heuristic must be told
    // (MIN_ALIGNMENT), or cuBLASLt may pick an algorithm that needs 256 (the emulation refuses such a call,
    // and cublasCheck exits)
    std::vector<bf16> inp1(inp_b.size() + 1), w1(w_b.size() + 1), res1(res_b.size() + 1),
        out1(out.size() + 1);
    std::copy(inp_b.begin(), inp_b.end(), inp1.begin() + 1);
    std::copy(w_b.begin(), w_b.end(), w1.begin() + 1);
    std::copy(res_b.begin(), res_b.end(), res1.begin() + 1);
    ASSERT_TRUE(lt_matmul(out1.data() + 1, kOC, w1.data() + 1, CUBLAS_OP_T, kC, inp1.data() + 1, CUBLAS_OP_N,
                          kC, kOC, (int)kN, kC, res1.data() + 1, CUBLASLT_EPILOGUE_BIAS, bias_b.data(), NULL,
                          0, cb.s));
    std::vector<bf16> shifted(out1.begin() + 1, out1.end());
    EXPECT_EQ(memcmp(shifted.data(), out.data(), out.size() * sizeof(bf16)), 0)
        << "the same product, wherever it lies";
}

// The heuristic is asked once per kind of call: a repeated call reuses its answer (same result), a call with
// another shape or alignment asks again.
TEST(Matmul, LtAlgoCacheAsksOncePerKindOfCall) {
    Cublas cb;
    auto inp = rand_vec(kN * kC, 70), w = rand_vec((int64_t)kOC * kC, 71), bias = rand_vec(kOC, 72);
    auto inp_b = to_bf16(inp), w_b = to_bf16(w), bias_b = to_bf16(bias);
    std::vector<bf16> out((size_t)(kN * kOC));
    ASSERT_EQ(lt_algo_cache.size(), 0u);
    ASSERT_TRUE(lt_matmul(out.data(), kOC, w_b.data(), CUBLAS_OP_T, kC, inp_b.data(), CUBLAS_OP_N, kC, kOC,
                          (int)kN, kC, NULL, CUBLASLT_EPILOGUE_BIAS, bias_b.data(), NULL, 0, cb.s));
    const std::vector<bf16> first(out);
    ASSERT_TRUE(lt_matmul(out.data(), kOC, w_b.data(), CUBLAS_OP_T, kC, inp_b.data(), CUBLAS_OP_N, kC, kOC,
                          (int)kN, kC, NULL, CUBLASLT_EPILOGUE_BIAS, bias_b.data(), NULL, 0,
                          cb.s));  // the same buffers: the same alignments
    EXPECT_EQ(lt_algo_cache.size(), 1u);
    EXPECT_EQ(memcmp(out.data(), first.data(), out.size() * sizeof(bf16)), 0);
    ASSERT_TRUE(lt_matmul(out.data(), kOC, w_b.data(), CUBLAS_OP_T, kC, inp_b.data(), CUBLAS_OP_N, kC, kOC,
                          (int)kN - 1, kC, NULL, CUBLASLT_EPILOGUE_BIAS, bias_b.data(), NULL, 0,
                          cb.s));  // one row fewer: another shape
    EXPECT_EQ(lt_algo_cache.size(), 2u);
}

TEST(Matmul, LtBiasGeluEpilogueKeepsThePreActivation) {
    Cublas cb;
    const int OC = 48;  // the aux leading dimension must be a multiple of 8
    auto inp = rand_vec(kN * kC, 50), w = rand_vec((int64_t)OC * kC, 51), bias = rand_vec(OC, 52);
    auto inp_b = to_bf16(inp), w_b = to_bf16(w), bias_b = to_bf16(bias);
    std::vector<bf16> pre((size_t)(kN * OC)), out((size_t)(kN * OC));
    ASSERT_TRUE(lt_matmul(out.data(), OC, w_b.data(), CUBLAS_OP_T, kC, inp_b.data(), CUBLAS_OP_N, kC, OC,
                          (int)kN, kC, NULL, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias_b.data(), pre.data(), OC,
                          cb.s));
    std::vector<float> ref_pre((size_t)(kN * OC)), ref_out((size_t)(kN * OC)), w_t((size_t)OC * kC);
    matmul_forward(ref_pre.data(), inp.data(), w.data(), bias.data(), kN, kC, OC, w_t.data());
    gelu_forward(ref_out.data(), ref_pre.data(), kN * OC);
    EXPECT_LT(rel_l2(to_float(pre), ref_pre), 4e-3);
    EXPECT_LT(rel_l2(to_float(out), ref_out), 4e-3);
    // an aux leading dimension cuBLASLt refuses (not a multiple of 8): no algorithm, nothing written
    std::vector<bf16> untouched(out);
    EXPECT_FALSE(lt_matmul(out.data(), OC, w_b.data(), CUBLAS_OP_T, kC, inp_b.data(), CUBLAS_OP_N, kC, OC,
                           (int)kN, kC, NULL, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias_b.data(), pre.data(),
                           OC + 1, cb.s));
    EXPECT_EQ(memcmp(out.data(), untouched.data(), out.size() * sizeof(bf16)), 0);
}

TEST(Matmul, LtGeluBackwardEpilogue) {
    Cublas cb;
    const int C = 48, OC = kOC;  // dinp (N, C) = (dout (N, OC) @ w (OC, C)) * gelu'(pre (N, C))
    auto dout = rand_vec(kN * OC, 60), w = rand_vec((int64_t)OC * C, 61), pre = rand_vec(kN * C, 62),
         inp = rand_vec(kN * C, 63);
    for (auto& x : pre) x *= 3.0f;  // across GELU's curved part
    auto dout_b = to_bf16(dout), w_b = to_bf16(w), pre_b = to_bf16(pre);
    std::vector<bf16> dinp((size_t)(kN * C));
    ASSERT_TRUE(lt_matmul(dinp.data(), C, w_b.data(), CUBLAS_OP_N, C, dout_b.data(), CUBLAS_OP_N, OC, C,
                          (int)kN, OC, NULL, CUBLASLT_EPILOGUE_DGELU, NULL, pre_b.data(), C, cb.s));
    std::vector<float> dx((size_t)(kN * C)), dw((size_t)OC * C, 0.0f), ref((size_t)(kN * C));
    pre = to_float(pre_b);
    matmul_backward(dx.data(), dw.data(), NULL, dout.data(), inp.data(), w.data(), kN, C, OC);  // gpt2_cpu.h
    gelu_backward(ref.data(), pre.data(), dx.data(), kN * C);
    EXPECT_LT(rel_l2(to_float(dinp), ref), 4e-3);
}

}  // namespace
