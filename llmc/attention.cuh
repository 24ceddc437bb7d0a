// attention.cuh — causal self-attention (-F 0), forward and backward: cuBLAS batched GEMMs per head and the
// causal softmax kernels, in place on the activations' layouts. No CUDA API of its own, so
// test/test_attention.cpp checks its stride math on the CPU.
#pragma once

// Per-head matrices in place: q, k, v of head h are column blocks of qkv (B, T, 3, NH, hs) (row stride 3C);
// y, dy of (B, T, NH, hs) (row stride C); scores of (b, h) are block b*NH + h of att (T x T).
// Heads are uniformly strided (hs, or T*T): one batched GEMM per sequence.
typedef struct {
    bf16* base;        // head 0 of sequence 0
    int ld;            // elements between consecutive rows of one head's matrix
    int64_t head;      // elements between heads h and h+1
    int64_t sequence;  // elements between sequences b and b+1
} HeadMatrices;

static void heads_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                       HeadMatrices A, HeadMatrices Bm, HeadMatrices Cm, int B, int NH, cudaStream_t s) {
    for (int b = 0; b < B; b++)
        matmul_batched(ta, tb, m, n, k, alpha, A.base + b * A.sequence, A.ld, A.head,
                       Bm.base + b * Bm.sequence, Bm.ld, Bm.head, Cm.base + b * Cm.sequence, Cm.ld, Cm.head,
                       NH, s);
}
// which = 0, 1, 2: the q, k or v blocks of a (B, T, 3C) tensor (qkv or dqkv)
static HeadMatrices qkv_heads(bf16* qkv, int which, int T, int C, int hs) {
    return {qkv + (int64_t)which * C, 3 * C, hs, (int64_t)T * 3 * C};
}
static HeadMatrices row_heads(bf16* y, int T, int C, int hs) {
    return {y, C, hs, (int64_t)T * C};
}  // (B, T, C)
static HeadMatrices score_heads(bf16* att, int T, int NH) {
    return {att, T, (int64_t)T * T, (int64_t)NH * T * T};
}

// y (B, T, C) = softmax_causal(q k^T / sqrt(hs)) v per head; att (B, NH, T, T) keeps the probabilities.
// qkv (B, T, 3C), bias added.
static void attention_forward(bf16* y, bf16* att, bf16* qkv, int B, int T, int C, int NH, cudaStream_t s) {
    const int hs = C / NH;
    const HeadMatrices q = qkv_heads(qkv, 0, T, C, hs), k = qkv_heads(qkv, 1, T, C, hs),
                       v = qkv_heads(qkv, 2, T, C, hs), a = score_heads(att, T, NH);
    // scores = q @ k^T / sqrt(hs)  (column-major: scores^T = k q^T)
    heads_gemm(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f / sqrtf((float)hs), k, q, a, B, NH, s);
    softmax_causal_forward(att, (int64_t)B * NH * T, T, s);
    // y = att @ v, straight into the (B, T, NH, hs) rows the projection reads
    heads_gemm(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, v, a, row_heads(y, T, C, hs), B, NH, s);
}

// dqkv (B, T, 3C), every element, from dy (B, T, C) and the forward's qkv and att; datt: scratch.
static void attention_backward(bf16* dqkv, bf16* datt, bf16* dy, bf16* att, bf16* qkv, int B, int T, int C,
                               int NH, cudaStream_t s) {
    const int hs = C / NH;
    const float scale = 1.0f / sqrtf((float)hs);
    const HeadMatrices q = qkv_heads(qkv, 0, T, C, hs), k = qkv_heads(qkv, 1, T, C, hs),
                       v = qkv_heads(qkv, 2, T, C, hs), a = score_heads(att, T, NH),
                       da = score_heads(datt, T, NH), d = row_heads(dy, T, C, hs);
    // datt = dy @ v^T ; dv = att^T @ dy
    heads_gemm(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, v, d, da, B, NH, s);
    heads_gemm(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, d, a, qkv_heads(dqkv, 2, T, C, hs), B, NH, s);
    softmax_causal_backward(datt, att, (int64_t)B * NH * T, T, s);  // now d(scores)
    // dq = dscores @ k * scale ; dk = dscores^T @ q * scale
    heads_gemm(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, scale, k, da, qkv_heads(dqkv, 0, T, C, hs), B, NH, s);
    heads_gemm(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, scale, q, da, qkv_heads(dqkv, 1, T, C, hs), B, NH, s);
}
