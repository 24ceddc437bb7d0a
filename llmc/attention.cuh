// attention.cuh — causal self-attention for -F 0: per-head cuBLAS GEMMs, softmax kernels.
// test_attention.cpp checks the strides.
#pragma once

// Strided per-head matrices: one batched GEMM a sequence.
typedef struct {
    bf16* base;        // head 0 of sequence 0
    int ld;            // elements between consecutive rows of one head's matrix
    int64_t head;      // elements between heads h and h+1
    int64_t sequence;  // elements between sequences b and b+1
} HeadMatrices;

// beta 1: C += A B (GQA's dk, dv sums)
static void heads_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                       HeadMatrices A, HeadMatrices Bm, HeadMatrices Cm, int B, int heads, cudaStream_t s,
                       float beta = 0.0f) {
    for (int b = 0; b < B; b++)
        matmul_batched(ta, tb, m, n, k, alpha, A.base + b * A.sequence, A.ld, A.head,
                       Bm.base + b * Bm.sequence, Bm.ld, Bm.head, Cm.base + b * Cm.sequence, Cm.ld, Cm.head,
                       heads, s, beta);
}

// GQA: query head g*group + j reads kv head g.
typedef struct {
    int T, NH, NKV, hs, group;
    int64_t ld;  // a qkv row: [q (NH hs) | k (NKV hs) | v (NKV hs)]
} AttnHeads;
static AttnHeads attn_shape(int T, int C, int NH, int NKV) {
    const int nkv = NKV > 0 ? NKV : NH, hs = C / NH;
    return {T, NH, nkv, hs, NH / nkv, (int64_t)(NH + 2 * nkv) * hs};
}
// query heads j, j + group, ... of qkv or dqkv
static HeadMatrices q_heads(bf16* qkv, const AttnHeads& a, int j) {
    return {qkv + (int64_t)j * a.hs, (int)a.ld, (int64_t)a.group * a.hs, (int64_t)a.T * a.ld};
}
// key (which 1) or value (which 2) heads 0 .. NKV-1
static HeadMatrices kv_heads(bf16* qkv, const AttnHeads& a, int which) {
    const int64_t first = (int64_t)(a.NH + (which - 1) * a.NKV) * a.hs;
    return {qkv + first, (int)a.ld, a.hs, (int64_t)a.T * a.ld};
}
// the same for y, dy (B, T, NH*hs)
static HeadMatrices row_heads(bf16* y, const AttnHeads& a, int j) {
    const int64_t C = (int64_t)a.NH * a.hs;
    return {y + (int64_t)j * a.hs, (int)C, (int64_t)a.group * a.hs, (int64_t)a.T * C};
}
// the same for scores (B, NH, T, T)
static HeadMatrices score_heads(bf16* att, const AttnHeads& a, int j) {
    const int64_t TT = (int64_t)a.T * a.T;
    return {att + j * TT, a.T, a.group * TT, (int64_t)a.NH * TT};
}

// y (B, T, NH*hs) = softmax_causal(q k^T / sqrt(hs)) v per head. att (B, NH, T, T) keeps P.
// NKV 0: NH. pos: as flash_attention_forward's.
static void attention_forward(bf16* y, bf16* att, bf16* qkv, int B, int T, int C, int NH, cudaStream_t s,
                              int NKV = 0, const int* pos = nullptr) {
    const AttnHeads sh = attn_shape(T, C, NH, NKV);
    const HeadMatrices k = kv_heads(qkv, sh, 1), v = kv_heads(qkv, sh, 2);
    // scores = q @ k^T / sqrt(hs), a GEMM per group member
    for (int j = 0; j < sh.group; j++)
        heads_gemm(CUBLAS_OP_T, CUBLAS_OP_N, T, T, sh.hs, 1.0f / sqrtf((float)sh.hs), k, q_heads(qkv, sh, j),
                   score_heads(att, sh, j), B, sh.NKV, s);
    softmax_causal_forward(att, (int64_t)B * NH * T, T, s, pos, NH);
    // y = att @ v, straight into the projection's input rows
    for (int j = 0; j < sh.group; j++)
        heads_gemm(CUBLAS_OP_N, CUBLAS_OP_N, sh.hs, T, T, 1.0f, v, score_heads(att, sh, j),
                   row_heads(y, sh, j), B, sh.NKV, s);
}

// Overwrites all of dqkv (B, T, qkv row). datt: scratch.
static void attention_backward(bf16* dqkv, bf16* datt, bf16* dy, bf16* att, bf16* qkv, int B, int T, int C,
                               int NH, cudaStream_t s, int NKV = 0, const int* pos = nullptr) {
    const AttnHeads sh = attn_shape(T, C, NH, NKV);
    const float scale = 1.0f / sqrtf((float)sh.hs);
    const HeadMatrices k = kv_heads(qkv, sh, 1), v = kv_heads(qkv, sh, 2);
    const HeadMatrices dk = kv_heads(dqkv, sh, 1), dv = kv_heads(dqkv, sh, 2);
    // datt = dy @ v^T, dv = att^T @ dy (later group heads add)
    for (int j = 0; j < sh.group; j++) {
        const HeadMatrices d = row_heads(dy, sh, j);
        heads_gemm(CUBLAS_OP_T, CUBLAS_OP_N, T, T, sh.hs, 1.0f, v, d, score_heads(datt, sh, j), B, sh.NKV, s);
        heads_gemm(CUBLAS_OP_N, CUBLAS_OP_T, sh.hs, T, T, 1.0f, d, score_heads(att, sh, j), dv, B, sh.NKV, s,
                   j ? 1.0f : 0.0f);
    }
    softmax_causal_backward(datt, att, (int64_t)B * NH * T, T, s, pos, NH);  // now d(scores)
    // dq = dscores @ k * scale, dk = dscores^T @ q * scale
    for (int j = 0; j < sh.group; j++) {
        const HeadMatrices da = score_heads(datt, sh, j);
        heads_gemm(CUBLAS_OP_N, CUBLAS_OP_N, sh.hs, T, T, scale, k, da, q_heads(dqkv, sh, j), B, sh.NKV, s);
        heads_gemm(CUBLAS_OP_N, CUBLAS_OP_T, sh.hs, T, T, scale, q_heads(qkv, sh, j), da, dk, B, sh.NKV, s,
                   j ? 1.0f : 0.0f);
    }
}
