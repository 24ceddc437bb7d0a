// test_attention.cpp — the index and stride math of attention.cuh (the GPU trainer's attention), checked on
// the CPU in CI. attention.cuh calls only matmul_batched and the two causal softmax launchers; here they are
// CPU stand-ins: matmul_batched is an fp32/double emulation of cublasGemmStridedBatchedEx's column-major
// semantics that also fails on arguments cuBLAS would reject (a leading dimension too small for its matrix,
// a non-positive size), and the softmaxes restate gpt2_cpu.h's. The result must equal gpt2_cpu.h's
// attention_forward / attention_backward (fp32, other summation order: ~1e-6), and every element of dqkv
// must be written. Grouped-query attention (NKV < NH, K and V read in place) and packed sequences (pos)
// against llama_cpu.h's gqa_attention_forward / _backward the same way. Not checked here: cuBLAS itself,
// bf16 rounding, the CUDA kernels (test_kernels.cu does those on a GPU with this same attention.cuh).
#include <gtest/gtest.h>
#include <math.h>
#include <string>
#include <vector>
#include "llmc/llama_cpu.h"  // defines: gqa_attention_forward, _backward; through gpt2_cpu.h attention_forward
#include "llmc/sampler.h"    // random_f32
#include "test_layouts.h"    // defines: columns, packed_positions

namespace {

// What attention.cuh expects to find declared before it.
typedef float bf16;
typedef int cudaStream_t;
typedef enum { CUBLAS_OP_N, CUBLAS_OP_T } cublasOperation_t;
std::vector<std::string> g_bad_calls;

void matmul_batched(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                    const bf16* A, int lda, int64_t strideA, const bf16* B, int ldb, int64_t strideB,
                    bf16* Cm, int ldc, int64_t strideC, int batch, cudaStream_t, float beta) {
    // cuBLAS's rules: A is m x k (op N) stored with lda >= m, or k x m (op T) with lda >= k; B alike; C is
    // m x n
    const int a_rows = ta == CUBLAS_OP_N ? m : k, b_rows = tb == CUBLAS_OP_N ? k : n;
    if (m <= 0 || n <= 0 || k <= 0 || batch <= 0 || lda < a_rows || ldb < b_rows || ldc < m) {
        g_bad_calls.push_back("m=" + std::to_string(m) + " n=" + std::to_string(n) +
                              " k=" + std::to_string(k) + " lda=" + std::to_string(lda) +
                              " ldb=" + std::to_string(ldb) + " ldc=" + std::to_string(ldc));
        return;
    }
    for (int bt = 0; bt < batch; bt++) {
        const bf16* a = A + bt * strideA;
        const bf16* b = B + bt * strideB;
        bf16* c = Cm + bt * strideC;
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double acc = 0.0;
                for (int l = 0; l < k; l++) {
                    const double x = ta == CUBLAS_OP_N ? a[i + (int64_t)l * lda] : a[l + (int64_t)i * lda];
                    const double y = tb == CUBLAS_OP_N ? b[l + (int64_t)j * ldb] : b[j + (int64_t)l * ldb];
                    acc += x * y;
                }
                float* out = &c[i + (int64_t)j * ldc];
                *out = (float)(alpha * acc + (beta != 0.0f ? beta * (double)*out : 0.0));  // beta 0: C unread
            }
    }
}
// Row r of the (rows, T) scores is query t1 = r % T of sequence r / (NH*T): softmax over columns lo..t1,
// lo = t1 - pos[b, t1] (0 without pos), zeros elsewhere.
int first_key(const int* pos, int64_t r, int T, int NH) {
    return pos ? (int)(r % T) - pos[r / ((int64_t)NH * T) * T + r % T] : 0;
}
void softmax_causal_forward(bf16* att, int64_t rows, int T, cudaStream_t, const int* pos, int NH) {
    for (int64_t r = 0; r < rows; r++) {
        const int t1 = (int)(r % T), lo = first_key(pos, r, T, NH);
        float* a = att + r * T;
        double mx = -INFINITY, sum = 0.0;
        for (int j = lo; j <= t1; j++) mx = fmax(mx, a[j]);
        for (int j = lo; j <= t1; j++) sum += exp(a[j] - mx);
        for (int j = 0; j < T; j++) a[j] = j <= t1 && j >= lo ? (float)(exp(a[j] - mx) / sum) : 0.0f;
    }
}
void softmax_causal_backward(bf16* datt, const bf16* att, int64_t rows, int T, cudaStream_t, const int* pos,
                             int NH) {
    for (int64_t r = 0; r < rows; r++) {
        const int t1 = (int)(r % T), lo = first_key(pos, r, T, NH);
        const float* a = att + r * T;
        float* d = datt + r * T;
        double dot = 0.0;
        for (int j = lo; j <= t1; j++) dot += (double)a[j] * d[j];
        for (int j = 0; j < T; j++) d[j] = j <= t1 && j >= lo ? (float)(a[j] * (d[j] - dot)) : 0.0f;
    }
}

#include "llmc/attention.cuh"

double max_rel(const std::vector<float>& got, const std::vector<float>& ref) {
    double err = 0.0, scale = 0.0;
    for (size_t i = 0; i < ref.size(); i++) {
        err = fmax(err, fabs((double)got[i] - ref[i]));
        scale = fmax(scale, fabs((double)ref[i]));
    }
    return err / scale;
}

struct Shape {
    int B, T, C, NH;
};

TEST(AttentionLayout, ForwardAndBackwardMatchTheCpuModel) {
    // T not a multiple of 32, hs = 32 / 64 / 20 (not a multiple of 8) / 128, one and three sequences
    const Shape shapes[] = {{2, 37, 96, 3}, {3, 64, 128, 2}, {2, 37, 60, 3}, {1, 16, 256, 2}};
    for (const Shape& sh : shapes) {
        const int B = sh.B, T = sh.T, C = sh.C, NH = sh.NH;
        const int64_t N = (int64_t)B * T, natt = (int64_t)B * NH * T * T;
        std::vector<float> qkv((size_t)(N * 3 * C)), dy((size_t)(N * C));
        uint64_t rng = 11 + T;
        for (auto& x : qkv) x = 3.0f * random_f32(&rng) - 1.5f;
        for (auto& x : dy) x = 2.0f * random_f32(&rng) - 1.0f;
        const float kUnwritten = 12345.0f;  // every output element must be overwritten
        std::vector<float> y((size_t)(N * C), kUnwritten), att((size_t)natt, kUnwritten),
            datt((size_t)natt, kUnwritten), dqkv((size_t)(N * 3 * C), kUnwritten);
        g_bad_calls.clear();
        attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH, 0);
        attention_backward(dqkv.data(), datt.data(), dy.data(), att.data(), qkv.data(), B, T, C, NH, 0);
        EXPECT_TRUE(g_bad_calls.empty()) << "a GEMM cuBLAS would refuse: " << g_bad_calls[0];

        std::vector<float> ref_y((size_t)(N * C)), ref_att((size_t)natt), ref_dqkv((size_t)(N * 3 * C)),
            dscore((size_t)(B * NH * T));
        ::attention_forward(ref_y.data(), ref_att.data(), qkv.data(), B, T, C, NH);  // gpt2_cpu.h
        ::attention_backward(ref_dqkv.data(), dscore.data(), dy.data(), qkv.data(), ref_att.data(), B, T, C,
                             NH);
        const double e_att = max_rel(att, ref_att), e_y = max_rel(y, ref_y), e_dqkv = max_rel(dqkv, ref_dqkv);
        printf(
            "B=%d T=%d C=%d NH=%d (hs %d): max error att %.1e, y %.1e, dqkv %.1e (relative to the largest)\n",
            B, T, C, NH, C / NH, e_att, e_y, e_dqkv);
        EXPECT_LT(e_att, 1e-5);
        EXPECT_LT(e_y, 1e-5);
        EXPECT_LT(e_dqkv, 1e-5);
    }
}

struct GqaShape {
    int B, T, NH, NKV, hs, packed;
};

// The fused row [q (NH*hs) | k (NKV*hs) | v (NKV*hs)], K and V read in place by every query head of a group;
// ratios 1, 2, 8 and NKV = 1, hs 64 and 128, with and without packed sequences.
TEST(AttentionLayout, GroupedQueryAndPackedMatchLlamaCpu) {
    const GqaShape shapes[] = {{2, 37, 4, 4, 64, 0},
                               {2, 37, 4, 2, 64, 1},
                               {1, 40, 8, 1, 64, 1},
                               {2, 33, 8, 1, 128, 0},
                               {1, 45, 16, 2, 64, 1}};
    for (const GqaShape& sh : shapes) {
        const int B = sh.B, T = sh.T, NH = sh.NH, NKV = sh.NKV, hs = sh.hs;
        const int64_t N = (int64_t)B * T, QD = (int64_t)NH * hs, KVD = (int64_t)NKV * hs, W = QD + 2 * KVD;
        const int64_t natt = (int64_t)B * NH * T * T;
        std::vector<float> qkv((size_t)(N * W)), dy((size_t)(N * QD));
        uint64_t rng = 21 + T + NKV;
        for (auto& x : qkv) x = 3.0f * random_f32(&rng) - 1.5f;
        for (auto& x : dy) x = 2.0f * random_f32(&rng) - 1.0f;
        const std::vector<int> pos = packed_positions(B, T, {11, 5, 17});
        const int* p = sh.packed ? pos.data() : nullptr;
        const float kUnwritten = 12345.0f;
        std::vector<float> y((size_t)(N * QD), kUnwritten), att((size_t)natt, kUnwritten),
            datt((size_t)natt, kUnwritten), dqkv((size_t)(N * W), kUnwritten);
        g_bad_calls.clear();
        attention_forward(y.data(), att.data(), qkv.data(), B, T, (int)QD, NH, 0, NKV, p);
        attention_backward(dqkv.data(), datt.data(), dy.data(), att.data(), qkv.data(), B, T, (int)QD, NH, 0,
                           NKV, p);
        EXPECT_TRUE(g_bad_calls.empty()) << "a GEMM cuBLAS would refuse: " << g_bad_calls[0];

        const auto q = columns(qkv, N, W, 0, QD), k = columns(qkv, N, W, QD, KVD),
                   v = columns(qkv, N, W, QD + KVD, KVD);
        std::vector<float> ref_y((size_t)(N * QD)), ref_att((size_t)natt), dq((size_t)(N * QD)),
            dk((size_t)(N * KVD)), dv((size_t)(N * KVD)), dscore((size_t)(B * NKV * T));
        gqa_attention_forward(ref_y.data(), ref_att.data(), q.data(), k.data(), v.data(), B, T, NH, NKV, hs,
                              p);
        gqa_attention_backward(dq.data(), dk.data(), dv.data(), dscore.data(), dy.data(), q.data(), k.data(),
                               v.data(), ref_att.data(), B, T, NH, NKV, hs, p);
        const double e_att = max_rel(att, ref_att), e_y = max_rel(y, ref_y);
        const double e_dq = max_rel(columns(dqkv, N, W, 0, QD), dq),
                     e_dk = max_rel(columns(dqkv, N, W, QD, KVD), dk),
                     e_dv = max_rel(columns(dqkv, N, W, QD + KVD, KVD), dv);
        printf("B=%d T=%d NH=%d NKV=%d hs=%d packed=%d: max error att %.1e y %.1e dq %.1e dk %.1e dv %.1e\n",
               B, T, NH, NKV, hs, sh.packed, e_att, e_y, e_dq, e_dk, e_dv);
        // fp32 (the stand-in GEMMs sum in double) against fp32 loops: ~1e-6
        EXPECT_LT(e_att, 1e-5);
        EXPECT_LT(e_y, 1e-5);
        EXPECT_LT(e_dq, 1e-5);
        EXPECT_LT(e_dk, 1e-5);
        EXPECT_LT(e_dv, 1e-5);
    }
}

}  // namespace
