// gpt2_cpu.h — the CPU reference GPT-2, fp32 + OpenMP, forward and backward.
// The GPU trainer's test oracle: one plain function per op.
// Also the reference optimizer step (AdamW, as llama_cpu.h). Not here: data, files.

// Shapes: N = B*T positions, C channels, NH heads of hs = C/NH, L layers, V tokens, Vp >= V padded.

// Packed sequences: pos (B*T, NULL: 0..T-1) is a token's position in its conversation.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_model.h"  // defines: ActArray, cpu_model_alloc, _free, _carve, _check_batch, _keep_batch,
                        // _mean_loss, check_positions
#include "model.h"
#include "args.h"      // defines: TrainArgs
#include "cpu_adam.h"  // defines: adamw_tensors_f32grad, sumsq_f32, clip_scale, ADAMW_BETA1

// ----------------------------------------------------------------------------
// Matrix multiply: C (M,N) = or += A (M,K) @ B (K,N).
// A has two strides, so dout^T needs no copy of dlogits.

// an MM_MR x MM_NR micro tile sits in registers
#define MM_MR 8
#define MM_NR 32
// an MM_MC x MM_NC tile is one OpenMP task
#define MM_MC 128
#define MM_NC 256
// K in MM_KC chunks keeps panels in L2
#define MM_KC 256

static inline int64_t mm_min(int64_t a, int64_t b) { return a < b ? a : b; }

// C = A @ B, or C += A @ B when accumulate; A(i,k) = A[i*a_row + k*a_col].
static void matmul_nn(float* C, const float* A, int64_t a_row, int64_t a_col, const float* B, int64_t M,
                      int64_t N, int64_t K, int accumulate) {
    const int64_t row_tiles = (M + MM_MC - 1) / MM_MC, col_tiles = (N + MM_NC - 1) / MM_NC;
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int64_t ti = 0; ti < row_tiles; ti++) {
        for (int64_t tj = 0; tj < col_tiles; tj++) {
            const int64_t i_lo = ti * MM_MC, i_hi = mm_min(i_lo + MM_MC, M);
            const int64_t j_lo = tj * MM_NC, j_hi = mm_min(j_lo + MM_NC, N);
            for (int64_t k0 = 0; k0 < K; k0 += MM_KC) {
                const int64_t k1 = mm_min(k0 + MM_KC, K);
                const int start_from_zero = (k0 == 0) && !accumulate;
                for (int64_t j0 = j_lo; j0 < j_hi; j0 += MM_NR) {
                    const int64_t nj = mm_min(MM_NR, j_hi - j0);
                    for (int64_t i0 = i_lo; i0 < i_hi; i0 += MM_MR) {
                        if (i0 + MM_MR <= i_hi && nj == MM_NR) {
                            // full micro tile: MR x NR accumulators in registers
                            float acc[MM_MR][MM_NR];
                            for (int r = 0; r < MM_MR; r++)
                                for (int j = 0; j < MM_NR; j++)
                                    acc[r][j] = start_from_zero ? 0.0f : C[(i0 + r) * N + j0 + j];
                            for (int64_t k = k0; k < k1; k++) {
                                const float* b = B + k * N + j0;
                                for (int r = 0; r < MM_MR; r++) {
                                    const float a = A[(i0 + r) * a_row + k * a_col];
                                    for (int j = 0; j < MM_NR; j++) acc[r][j] += a * b[j];
                                }
                            }
                            for (int r = 0; r < MM_MR; r++)
                                for (int j = 0; j < MM_NR; j++) C[(i0 + r) * N + j0 + j] = acc[r][j];
                        } else {
                            // ragged edge: plain loops, same summation order over k
                            for (int64_t i = i0; i < mm_min(i0 + MM_MR, i_hi); i++)
                                for (int64_t j = j0; j < j0 + nj; j++) {
                                    float s = start_from_zero ? 0.0f : C[i * N + j];
                                    for (int64_t k = k0; k < k1; k++)
                                        s += A[i * a_row + k * a_col] * B[k * N + j];
                                    C[i * N + j] = s;
                                }
                        }
                    }
                }
            }
        }
    }
}

// out (cols, rows) = in (rows, cols)^T, in 32x32 blocks so both sides stay in cache.
static void transpose(float* out, const float* in, int64_t rows, int64_t cols) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t r0 = 0; r0 < rows; r0 += 32)
        for (int64_t c0 = 0; c0 < cols; c0 += 32)
            for (int64_t r = r0; r < mm_min(r0 + 32, rows); r++)
                for (int64_t c = c0; c < mm_min(c0 + 32, cols); c++) out[c * rows + r] = in[r * cols + c];
}

// out (N,OC) = inp (N,IC) @ weight^T + bias (may be NULL); weight_t: scratch (IC,OC).
static void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                           int64_t IC, int64_t OC, float* weight_t) {
    transpose(weight_t, weight, OC, IC);
    matmul_nn(out, inp, IC, 1, weight_t, N, OC, IC, 0);
    if (bias) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < N; i++)
            for (int64_t o = 0; o < OC; o++) out[i * OC + o] += bias[o];
    }
}

// dinp = dout @ weight (overwritten), dweight += dout^T @ inp, dbias += column sums of dout (may be NULL).
static void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                            const float* weight, int64_t N, int64_t IC, int64_t OC) {
    matmul_nn(dinp, dout, OC, 1, weight, N, IC, OC, 0);
    matmul_nn(dweight, dout, 1, OC, inp, OC, IC, N, 1);  // A = dout^T in place: (o,i) at dout[i*OC + o]
    if (dbias) {
#pragma omp parallel for schedule(static)
        for (int64_t o0 = 0; o0 < OC; o0 += 64) {
            const int64_t o1 = mm_min(o0 + 64, OC);
            for (int64_t i = 0; i < N; i++)
                for (int64_t o = o0; o < o1; o++) dbias[o] += dout[i * OC + o];
        }
    }
}

// ----------------------------------------------------------------------------
// The other layers, forward and backward

// out[b,t,:] = wte[inp[b,t],:] + wpe[p,:], p = pos[b,t] (pos NULL: p = t)
static void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T,
                            int C, const int* pos = NULL) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float* o = out + ((int64_t)b * T + t) * C;
            const float* e = wte + (int64_t)inp[(int64_t)b * T + t] * C;
            const float* p = wpe + (int64_t)(pos ? pos[(int64_t)b * T + t] : t) * C;
            for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
        }
}

// dwte[inp[b,t]] += dout[b,t], dwpe[p] += dout[b,t]. Serial: a token may repeat.
static void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C,
                             const int* pos = NULL) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float* d = dout + ((int64_t)b * T + t) * C;
            float* de = dwte + (int64_t)inp[(int64_t)b * T + t] * C;
            float* dp = dwpe + (int64_t)(pos ? pos[(int64_t)b * T + t] : t) * C;
            for (int c = 0; c < C; c++) {
                de[c] += d[c];
                dp[c] += d[c];
            }
        }
}

// LayerNorm over C per row (eps 1e-5, biased variance); keeps mean, 1/std for backward.
static void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                              const float* bias, int64_t N, int C) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        const float* x = inp + i * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        float var = 0.0f;  // two passes: no cancellation from E[x^2] - m^2
        for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
        var /= C;
        const float s = 1.0f / sqrtf(var + 1e-5f);
        float* o = out + i * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[i] = m;
        rstd[i] = s;
    }
}

// dinp += LayerNorm'(dout), dweight += sum_i dout*xhat, dbias += sum_i dout.
// With xhat = (x-mean)*rstd and g = dout*weight: dx = rstd * (g - mean(g) - xhat * mean(g*xhat)).
static void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* weight, const float* mean, const float* rstd, int64_t N, int C) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        const float* x = inp + i * C;
        const float* d = dout + i * C;
        float g_mean = 0.0f, gx_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            const float xhat = (x[c] - mean[i]) * rstd[i];
            g_mean += d[c] * weight[c];
            gx_mean += d[c] * weight[c] * xhat;
        }
        g_mean /= C;
        gx_mean /= C;
        float* dx = dinp + i * C;
        for (int c = 0; c < C; c++) {
            const float xhat = (x[c] - mean[i]) * rstd[i];
            dx[c] += rstd[i] * (d[c] * weight[c] - g_mean - xhat * gx_mean);
        }
    }
    // param grads: serial over rows (they'd race), vectorized over C
    for (int64_t i = 0; i < N; i++) {
        const float* x = inp + i * C;
        const float* d = dout + i * C;
        for (int c = 0; c < C; c++) {
            dweight[c] += d[c] * (x[c] - mean[i]) * rstd[i];
            dbias[c] += d[c];
        }
    }
}

// Causal self-attention; keeps att (B, NH, T, T) for backward.
// pos (may be NULL): query t sees keys t - pos[t] .. t.
static void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                              const int* pos = NULL) {
    const int hs = C / NH;
    const int64_t C3 = 3 * (int64_t)C;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float* q = qkv + ((int64_t)b * T + t) * C3 + h * hs;
                float* a = att + (((int64_t)b * NH + h) * T + t) * T;
                const int lo = pos ? t - pos[(int64_t)b * T + t] : 0;  // the first key t sees
                for (int t2 = 0; t2 < lo; t2++) a[t2] = 0.0f;
                float maxv = -INFINITY;
                for (int t2 = lo; t2 <= t; t2++) {
                    const float* k = qkv + ((int64_t)b * T + t2) * C3 + C + h * hs;
                    float s = 0.0f;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    a[t2] = s * scale;
                    if (a[t2] > maxv) maxv = a[t2];
                }
                float sum = 0.0f;
                for (int t2 = lo; t2 <= t; t2++) {
                    a[t2] = expf(a[t2] - maxv);
                    sum += a[t2];
                }
                for (int t2 = lo; t2 <= t; t2++) a[t2] /= sum;
                for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0.0f;
                float* o = out + ((int64_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0.0f;
                for (int t2 = lo; t2 <= t; t2++) {
                    const float* v = qkv + ((int64_t)b * T + t2) * C3 + 2 * C + h * hs;
                    for (int i = 0; i < hs; i++) o[i] += a[t2] * v[i];
                }
            }
}

// dqkv = attention'(dout), overwritten; parallel over (b, h). dscore: scratch (B, NH, T).
static void attention_backward(float* dqkv, float* dscore, const float* dout, const float* qkv,
                               const float* att, int B, int T, int C, int NH, const int* pos = NULL) {
    const int hs = C / NH;
    const int64_t C3 = 3 * (int64_t)C;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                float* dq = dqkv + ((int64_t)b * T + t) * C3 + h * hs;
                for (int i = 0; i < hs; i++) dq[i] = dq[i + C] = dq[i + 2 * C] = 0.0f;
            }
            float* ds = dscore + ((int64_t)b * NH + h) * T;
            for (int t = 0; t < T; t++) {
                const float* a = att + (((int64_t)b * NH + h) * T + t) * T;
                const float* d = dout + ((int64_t)b * T + t) * C + h * hs;
                const float* q = qkv + ((int64_t)b * T + t) * C3 + h * hs;
                float* dq = dqkv + ((int64_t)b * T + t) * C3 + h * hs;
                const int lo = pos ? t - pos[(int64_t)b * T + t] : 0;
                // out = sum_t2 a[t2] v[t2]  ->  da[t2] = d . v[t2],  dv[t2] += a[t2] d
                float da_dot_a = 0.0f;
                for (int t2 = lo; t2 <= t; t2++) {
                    const float* v = qkv + ((int64_t)b * T + t2) * C3 + 2 * C + h * hs;
                    float* dv = dqkv + ((int64_t)b * T + t2) * C3 + 2 * C + h * hs;
                    float s = 0.0f;
                    for (int i = 0; i < hs; i++) {
                        s += d[i] * v[i];
                        dv[i] += a[t2] * d[i];
                    }
                    ds[t2] = s;
                    da_dot_a += s * a[t2];
                }
                // softmax backward: dscore = a * (da - sum(a*da)); then score = scale * q.k
                for (int t2 = lo; t2 <= t; t2++) {
                    const float g = a[t2] * (ds[t2] - da_dot_a) * scale;
                    const float* k = qkv + ((int64_t)b * T + t2) * C3 + C + h * hs;
                    float* dk = dqkv + ((int64_t)b * T + t2) * C3 + C + h * hs;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += g * k[i];
                        dk[i] += g * q[i];
                    }
                }
            }
        }
}

#define GELU_SCALE 0.7978845608028654f  // sqrt(2/pi)

// GELU, tanh approximation (GPT-2's): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
static void gelu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
    }
}

// dinp = gelu'(inp) * dout (overwritten; dinp may alias dout).
static void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float x = inp[i];
        const float th = tanhf(GELU_SCALE * (x + 0.044715f * x * x * x));
        const float dth = (1.0f - th * th) * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = (0.5f * (1.0f + th) + 0.5f * x * dth) * dout[i];
    }
}

// out = a + b
static void residual_forward(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// exp(x), x <= 0, within a few ulp of expf; branch-free so softmax vectorizes.

// exp(x) = 2^n exp(r), n = round(x / ln2); exp(r) by Cephes' polynomial.
// Below -87: ~1e-38, invisible in any softmax sum.
static inline float exp_nonpositive(float x) {
    x = x < -87.0f ? -87.0f : x;
    const float shifted = x * 1.44269504088896341f + 12582912.0f;  // 1.5 * 2^23 + round(x / ln2)
    const float n = shifted - 12582912.0f;
    const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float y = 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * r * r + r + 1.0f;
    int32_t bits;
    memcpy(&bits, &shifted, 4);
    bits = (bits - 0x4B400000 + 127) << 23;  // n in [-126, 0] -> the bits of the float 2^n
    float two_n;
    memcpy(&two_n, &bits, 4);
    return y * two_n;
}

// probs = softmax over the first V columns; losses[i] = -log probs[i, target[i]] (0 if target < 0).
static void softmax_crossentropy_forward(float* probs, float* losses, const float* logits, const int* targets,
                                         int64_t N, int V, int Vp) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        const float* z = logits + i * Vp;
        float* p = probs + i * Vp;
        float m = -INFINITY;
#pragma omp simd reduction(max : m)
        for (int v = 0; v < V; v++) m = z[v] > m ? z[v] : m;
        const float maxv = m;  // a plain local: the reduction variable would block vectorizing
#pragma omp simd
        for (int v = 0; v < V; v++) p[v] = exp_nonpositive(z[v] - maxv);
        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int v = 0; v < V; v++) sum += p[v];
        const float inv = (float)(1.0 / sum);
        for (int v = 0; v < V; v++) p[v] *= inv;
        for (int v = V; v < Vp; v++) p[v] = 0.0f;
        // -log p[target] straight from the logits: exact even if p[target] underflows
        losses[i] = targets[i] < 0 ? 0.0f : (float)(log(sum) - (double)(z[targets[i]] - maxv));
    }
}

// dlogits = (probs - onehot(target)) * dloss; padded columns and non-target rows are 0.
static void crossentropy_softmax_backward(float* dlogits, const float* probs, const int* targets, float dloss,
                                          int64_t N, int V, int Vp) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        float* d = dlogits + i * Vp;
        const float* p = probs + i * Vp;
        for (int v = 0; v < V; v++) d[v] = p[v] * dloss;
        for (int v = V; v < Vp; v++) d[v] = 0.0f;
        if (targets[i] < 0) memset(d, 0, (size_t)Vp * sizeof(float));
        else d[targets[i]] -= dloss;
    }
}

// ----------------------------------------------------------------------------
// The model

// One forward's activations for (B, T), from one allocation; per-layer arrays are (L, ...).
typedef struct {
    float* encoded;                    // (N, C) embedding sum, the input of layer 0
    float *ln1, *ln1_mean, *ln1_rstd;  // (L, N, C), (L, N), (L, N)
    float* qkv;                        // (L, N, 3C)
    float* atty;                       // (L, N, C) attention output, before the projection
    float* att;                        // (L, B, NH, T, T) softmax probabilities
    float* residual2;                  // (L, N, C) layer input + attention branch
    float *ln2, *ln2_mean, *ln2_rstd;  // (L, N, C), (L, N), (L, N)
    float* fch;                        // (L, N, 4C) fc output, before GELU
    float* fch_gelu;                   // (L, N, 4C)
    float* residual3;                  // (L, N, C) layer output
    float *lnf, *lnf_mean, *lnf_rstd;  // (N, C), (N), (N)
    float* logits;                     // (N, Vp)
    float* probs;                      // (N, Vp) softmax over the first V columns
    float* losses;                     // (N) per-position cross-entropy
    // backward scratch, reused by every layer
    float* dresidual;  // (N, C) gradient of the residual stream
    float* dln;        // (N, C) gradient of a LayerNorm output / of atty
    float* dqkv;       // (N, 3C)
    float* dfch;       // (N, 4C)
    float* dscore;     // (B, NH, T)
    float* dlogits;    // (N, Vp)
} Activations;

typedef struct {
    GPTConfig config;
    ParamLayout layout;
    float* params;    // layout.total, layer-major (model.h)
    float* grads;     // same layout; backward ADDS into it
    float* weight_t;  // scratch for a transposed weight matrix, max(Vp*C, 4C*C)
    Activations acts;
    float* act_memory;     // the one allocation behind acts
    int64_t act_capacity;  // floats in act_memory
    int B, T;              // shape of the last forward pass
    int* inputs;           // (B*T) copies of the last batch, for backward
    int* targets;          // (B*T), valid when has_targets; -1: not a target
    int* pos;              // (B*T) positions of the last batch, valid when has_pos
    int has_targets, has_pos;
    int64_t num_targets;  // targets >= 0 in the last batch
    float mean_loss;      // mean loss over targets after a forward with targets, else -1
    char error[256];      // why the last call returned 0
} GPT2CPU;

// Named pointers into a flat array (params or grads).
typedef struct {
    float *wte, *wpe, *lnfw, *lnfb;
} EmbedTensors;
typedef struct {
    float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} LayerTensors;

static inline EmbedTensors embed_tensors(const ParamLayout* p, float* base) {
    EmbedTensors e = {base + p->embed_offset[WTE], base + p->embed_offset[WPE], base + p->embed_offset[LNFW],
                      base + p->embed_offset[LNFB]};
    return e;
}
static inline LayerTensors layer_tensors(const ParamLayout* p, float* base, int l) {
    float* b = base + gpt_layer_offset(p, l);
    const int64_t* o = p->layer_offset;
    LayerTensors t = {b + o[LN1W], b + o[LN1B], b + o[QKVW], b + o[QKVB], b + o[ATTPROJW], b + o[ATTPROJB],
                      b + o[LN2W], b + o[LN2B], b + o[FCW],  b + o[FCB],  b + o[FCPROJW],  b + o[FCPROJB]};
    return t;
}

// params (uninitialized) and zeroed grads; 0 with model->error.
static int gpt2_cpu_build(GPT2CPU* model, const GPTConfig* config) {
    memset(model, 0, sizeof *model);
    model->mean_loss = -1.0f;
    if (!gpt_config_check(config, model->error, sizeof model->error)) return 0;
    model->config = *config;
    model->layout = gpt_layout(config);
    const int64_t C = config->channels, Vp = config->padded_vocab_size;
    const int64_t wt = Vp * C > 4 * C * C ? Vp * C : 4 * C * C;
    return cpu_model_alloc(model, model->layout.total, wt);
}

// Safe after a failed build.
static void gpt2_cpu_free(GPT2CPU* model) { cpu_model_free(model); }

// grads = 0, before the first micro-batch of a step.
static void gpt2_cpu_zero_grad(GPT2CPU* model) { cpu_model_zero_grad(model); }

// Points model->acts into one allocation for (B, T); 0 if OOM.
static int gpt2_cpu_layout_activations(GPT2CPU* model, int B, int T) {
    const int64_t L = model->config.num_layers, C = model->config.channels, NH = model->config.num_heads;
    const int64_t Vp = model->config.padded_vocab_size, N = (int64_t)B * T;
    Activations* a = &model->acts;
    const ActArray table[] = {{&a->encoded, N * C},
                              {&a->ln1, L * N * C},
                              {&a->ln1_mean, L * N},
                              {&a->ln1_rstd, L * N},
                              {&a->qkv, L * N * 3 * C},
                              {&a->atty, L * N * C},
                              {&a->att, L * B * NH * T * T},
                              {&a->residual2, L * N * C},
                              {&a->ln2, L * N * C},
                              {&a->ln2_mean, L * N},
                              {&a->ln2_rstd, L * N},
                              {&a->fch, L * N * 4 * C},
                              {&a->fch_gelu, L * N * 4 * C},
                              {&a->residual3, L * N * C},
                              {&a->lnf, N * C},
                              {&a->lnf_mean, N},
                              {&a->lnf_rstd, N},
                              {&a->logits, N * Vp},
                              {&a->probs, N * Vp},
                              {&a->losses, N},
                              {&a->dresidual, N * C},
                              {&a->dln, N * C},
                              {&a->dqkv, N * 3 * C},
                              {&a->dfch, N * 4 * C},
                              {&a->dscore, B * NH * T},
                              {&a->dlogits, N * Vp}};
    return cpu_model_carve(model, table, (int)(sizeof table / sizeof table[0]), B, T);
}

// Forward over inputs (B, T); with targets (may be NULL), the losses too.
// 0 with model->error on bad input or OOM.
static int gpt2_cpu_forward(GPT2CPU* model, const int* inputs, const int* targets, int B, int T,
                            const int* pos = NULL) {
    const GPTConfig* cfg = &model->config;
    const int L = cfg->num_layers, C = cfg->channels, NH = cfg->num_heads, V = cfg->vocab_size;
    const int Vp = cfg->padded_vocab_size;
    if (!cpu_model_check_batch(model, inputs, targets, pos, B, T, V, cfg->max_seq_len, "maxT")) return 0;
    if (!gpt2_cpu_layout_activations(model, B, T)) return 0;
    pos = cpu_model_keep_batch(model, inputs, targets, pos, B, T);
    const int64_t N = (int64_t)B * T;

    const ParamLayout* p = &model->layout;
    Activations* a = &model->acts;
    EmbedTensors e = embed_tensors(p, model->params);
    encoder_forward(a->encoded, inputs, e.wte, e.wpe, B, T, C, pos);
    for (int l = 0; l < L; l++) {
        LayerTensors w = layer_tensors(p, model->params, l);
        const float* x = l == 0 ? a->encoded : a->residual3 + (int64_t)(l - 1) * N * C;
        float* ln1 = a->ln1 + (int64_t)l * N * C;
        float* qkv = a->qkv + (int64_t)l * N * 3 * C;
        float* atty = a->atty + (int64_t)l * N * C;
        float* att = a->att + (int64_t)l * B * NH * T * T;
        float* res2 = a->residual2 + (int64_t)l * N * C;
        float* ln2 = a->ln2 + (int64_t)l * N * C;
        float* fch = a->fch + (int64_t)l * N * 4 * C;
        float* fch_gelu = a->fch_gelu + (int64_t)l * N * 4 * C;
        float* res3 = a->residual3 + (int64_t)l * N * C;
        layernorm_forward(ln1, a->ln1_mean + l * N, a->ln1_rstd + l * N, x, w.ln1w, w.ln1b, N, C);
        matmul_forward(qkv, ln1, w.qkvw, w.qkvb, N, C, 3 * C, model->weight_t);
        attention_forward(atty, att, qkv, B, T, C, NH, pos);
        matmul_forward(res2, atty, w.attprojw, w.attprojb, N, C, C, model->weight_t);  // projection, then
        residual_forward(res2, x, res2, N * C);                                        // + layer input
        layernorm_forward(ln2, a->ln2_mean + l * N, a->ln2_rstd + l * N, res2, w.ln2w, w.ln2b, N, C);
        matmul_forward(fch, ln2, w.fcw, w.fcb, N, C, 4 * C, model->weight_t);
        gelu_forward(fch_gelu, fch, N * 4 * C);
        matmul_forward(res3, fch_gelu, w.fcprojw, w.fcprojb, N, 4 * C, C, model->weight_t);
        residual_forward(res3, res2, res3, N * C);
    }
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, a->residual3 + (int64_t)(L - 1) * N * C, e.lnfw,
                      e.lnfb, N, C);
    matmul_forward(a->logits, a->lnf, e.wte, NULL, N, C, Vp, model->weight_t);  // lm_head tied to wte
    if (targets) {
        softmax_crossentropy_forward(a->probs, a->losses, a->logits, targets, N, V, Vp);
        cpu_model_mean_loss(model, a->losses, targets, N);
    }
    return 1;
}

// ADDS d(loss)/d(params) of the last forward into model->grads.
// loss = normalizer * sum of target losses; 0 means 1/(B*T).
static int gpt2_cpu_backward(GPT2CPU* model, float normalizer = 0.0f) {
    if (!cpu_model_has_targets(model)) return 0;
    const GPTConfig* cfg = &model->config;
    const int L = cfg->num_layers, C = cfg->channels, NH = cfg->num_heads, V = cfg->vocab_size;
    const int Vp = cfg->padded_vocab_size, B = model->B, T = model->T;
    const int64_t N = (int64_t)B * T;
    const ParamLayout* p = &model->layout;
    Activations* a = &model->acts;
    EmbedTensors e = embed_tensors(p, model->params);
    EmbedTensors de = embed_tensors(p, model->grads);

    // d(loss)/d(each position's loss)
    const float dloss = normalizer != 0.0f ? normalizer : 1.0f / (float)N;
    const int* pos = model->has_pos ? model->pos : NULL;
    crossentropy_softmax_backward(a->dlogits, a->probs, model->targets, dloss, N, V, Vp);
    matmul_backward(a->dln, de.wte, NULL, a->dlogits, a->lnf, e.wte, N, C, Vp);
    memset(a->dresidual, 0, (size_t)(N * C) * sizeof(float));
    layernorm_backward(a->dresidual, de.lnfw, de.lnfb, a->dln, a->residual3 + (int64_t)(L - 1) * N * C,
                       e.lnfw, a->lnf_mean, a->lnf_rstd, N, C);

    // dresidual: d(loss)/d(layer l's output); each layer makes it d/d(its input)
    for (int l = L - 1; l >= 0; l--) {
        LayerTensors w = layer_tensors(p, model->params, l);
        LayerTensors dw = layer_tensors(p, model->grads, l);
        const float* x = l == 0 ? a->encoded : a->residual3 + (int64_t)(l - 1) * N * C;
        const float* ln1 = a->ln1 + (int64_t)l * N * C;
        const float* qkv = a->qkv + (int64_t)l * N * 3 * C;
        const float* atty = a->atty + (int64_t)l * N * C;
        const float* att = a->att + (int64_t)l * B * NH * T * T;
        const float* res2 = a->residual2 + (int64_t)l * N * C;
        const float* ln2 = a->ln2 + (int64_t)l * N * C;
        const float* fch = a->fch + (int64_t)l * N * 4 * C;
        const float* fch_gelu = a->fch_gelu + (int64_t)l * N * 4 * C;
        // MLP branch: res3 = res2 + fcproj(gelu(fc(ln2(res2))))
        matmul_backward(a->dfch, dw.fcprojw, dw.fcprojb, a->dresidual, fch_gelu, w.fcprojw, N, 4 * C, C);
        gelu_backward(a->dfch, fch, a->dfch, N * 4 * C);
        matmul_backward(a->dln, dw.fcw, dw.fcb, a->dfch, ln2, w.fcw, N, C, 4 * C);
        layernorm_backward(a->dresidual, dw.ln2w, dw.ln2b, a->dln, res2, w.ln2w, a->ln2_mean + l * N,
                           a->ln2_rstd + l * N, N, C);
        // attention branch: res2 = x + attproj(attention(qkv(ln1(x))))
        matmul_backward(a->dln, dw.attprojw, dw.attprojb, a->dresidual, atty, w.attprojw, N, C, C);
        attention_backward(a->dqkv, a->dscore, a->dln, qkv, att, B, T, C, NH, pos);
        matmul_backward(a->dln, dw.qkvw, dw.qkvb, a->dqkv, ln1, w.qkvw, N, C, 3 * C);
        layernorm_backward(a->dresidual, dw.ln1w, dw.ln1b, a->dln, x, w.ln1w, a->ln1_mean + l * N,
                           a->ln1_rstd + l * N, N, C);
    }
    encoder_backward(de.wte, de.wpe, a->dresidual, model->inputs, B, T, C, pos);
    return 1;
}

// ----------------------------------------------------------------------------
// The reference optimizer step

static inline void adamw_layer_f32grad(const ParamLayout* p, float* params, const float* grads, float* m,
                                       float* v, uint16_t* bf16_out, const AdamWArgs* args) {
    adamw_tensors_f32grad(NUM_LAYER_TENSORS, p->layer_offset, p->layer_size, layer_tensor_is_matrix, params,
                          grads, m, v, bf16_out, args);
}
static inline void adamw_embed_f32grad(const ParamLayout* p, float* params, const float* grads, float* m,
                                       float* v, uint16_t* bf16_out, const AdamWArgs* args) {
    adamw_tensors_f32grad(NUM_EMBED_TENSORS, p->embed_offset, p->embed_size, embed_tensor_is_matrix, params,
                          grads, m, v, bf16_out, args);
}

// The whole model, fp32 gradients (the CPU trainer).
static inline void adamw_model_f32grad(const GPTConfig* c, const ParamLayout* p, float* params,
                                       const float* grads, float* m, float* v, const AdamWArgs* args) {
    adamw_embed_f32grad(p, params, grads, m, v, NULL, args);
    for (int l = 0; l < c->num_layers; l++) {
        const int64_t o = gpt_layer_offset(p, l);
        adamw_layer_f32grad(p, params + o, grads + o, m + o, v + o, NULL, args);
    }
}

// grads hold the SUM of accum micro-batches' gradients: the norm of their mean.
static inline float grad_norm_f32grad(const ParamLayout* p, const float* grads, int accum) {
    return (float)(sqrt(sumsq_f32(grads, p->total)) / accum);
}
// AdamW with grad_scale = clip factor / accum; t is the 1-based step; norm finite.
static inline void adamw_apply_model_f32grad(const GPTConfig* c, const ParamLayout* p, float* params,
                                             const float* grads, float* m, float* v, int accum, float lr,
                                             const TrainArgs* a, int64_t t, float norm) {
    AdamWArgs args = {lr,        ADAMW_BETA1,     ADAMW_BETA2,
                      ADAMW_EPS, a->weight_decay, clip_scale(norm, a->grad_clip) / (float)accum,
                      t};
    adamw_model_f32grad(c, p, params, grads, m, v, &args);
}
// Norm, then the update if it is finite (else the caller reports the divergence).
static inline float adamw_step_model_f32grad(const GPTConfig* c, const ParamLayout* p, float* params,
                                             const float* grads, float* m, float* v, int accum, float lr,
                                             const TrainArgs* a, int64_t t) {
    const float norm = grad_norm_f32grad(p, grads, accum);
    if (isfinite(norm)) adamw_apply_model_f32grad(c, p, params, grads, m, v, accum, lr, a, t, norm);
    return norm;
}
