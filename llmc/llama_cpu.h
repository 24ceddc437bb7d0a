// llama_cpu.h — the CPU reference Llama (Llama 2 / 3 and Qwen2), fp32 + OpenMP.
// The oracle for Llama GPU kernels; matmul and loss are gpt2_cpu.h's.

// Not here: reading Hugging Face checkpoints (llama_hf.h), data, files, the GPU.

// Shapes: N = B*T, C channels, NH query and NKV key/value heads of hd, I MLP width, V tokens.

// A layer, as transformers' LlamaDecoderLayer:
//   h   = x + wo(attention(rope(wq rms1(x) + bq), rope(wk rms1(x) + bk), wv rms1(x) + bv))
//   out = h + w_down(silu(w_gate rms2(h)) * w_up rms2(h))

// Grouped-query attention: query head h reads key/value head h / (NH/NKV), never copied.

// Packed sequences as gpt2_cpu.h's; RoPE rotates by pos[t].
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_adam.h"     // defines: adamw_tensors_f32grad (AdamW per tensor, decay on matrices only)
#include "llama_model.h"  // defines: LlamaConfig, LlamaLayout, llama_layout, llama_layer_tensors
#include "gpt2_cpu.h"     // defines: matmul_forward, matmul_backward, matmul_nn, residual_forward,
                          // softmax_crossentropy_forward, crossentropy_softmax_backward
#include "cpu_model.h"    // defines: ActArray, cpu_model_alloc, _free, _carve, _check_batch, _keep_batch,
                          // _mean_loss

// ----------------------------------------------------------------------------
// RoPE frequencies, as transformers' rope init functions compute them in fp32

// inv_freq[i] = theta^(-2i/hd) for i < hd/2.
// llama3 scaling, Llama 3.1's rule (modeling_rope_utils.py), on wavelengths 2 pi / inv_freq:
//   above original/low_freq_factor: divided by factor
//   below original/high_freq_factor: kept
//   between: interpolated
static inline void llama_rope_inv_freq(const LlamaConfig* c, float* inv_freq) {
    const int hd = c->head_dim;
    for (int i = 0; i < hd / 2; i++) {
        float f = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)hd);
        if (c->rope_llama3) {
            const float factor = c->rope_factor, low = c->rope_low_freq_factor,
                        high = c->rope_high_freq_factor;
            const float old_len = (float)c->rope_original_max_pos;
            const float low_freq_wavelen = old_len / low, high_freq_wavelen = old_len / high;
            const float wavelen = (1.0f / f) * (float)(2.0 * M_PI);
            const float scaled = wavelen > low_freq_wavelen ? f / factor : f;
            const float smooth = (old_len / wavelen - low) / (high - low);
            const float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
            const int medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
            f = medium ? smoothed : scaled;
        }
        inv_freq[i] = f;
    }
}

// cos_t, sin_t (T, hd/2): the angle of position t, pair i is t * inv_freq[i] (fp32, as transformers).
static void rope_table(float* cos_t, float* sin_t, const LlamaConfig* c, int T) {
    const int half = c->head_dim / 2;
    float* inv_freq = (float*)malloc((size_t)half * sizeof(float));
    llama_rope_inv_freq(c, inv_freq);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            const float angle = (float)t * inv_freq[i];
            cos_t[(int64_t)t * half + i] = cosf(angle);
            sin_t[(int64_t)t * half + i] = sinf(angle);
        }
    free(inv_freq);
}

// ----------------------------------------------------------------------------
// The layers, forward and backward

// out[i] = embed[inp[i]] for N positions.
static void embedding_forward(float* out, const int* inp, const float* embed, int64_t N, int C) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++)
        memcpy(out + i * C, embed + (int64_t)inp[i] * C, (size_t)C * sizeof(float));
}

// dembed[inp[i]] += dout[i]. Serial: a token may repeat.
static void embedding_backward(float* dembed, const float* dout, const int* inp, int64_t N, int C) {
    for (int64_t i = 0; i < N; i++) {
        float* de = dembed + (int64_t)inp[i] * C;
        const float* d = dout + i * C;
        for (int c = 0; c < C; c++) de[c] += d[c];
    }
}

// RMSNorm over C per row: out = weight * (x / sqrt(mean(x^2) + eps)); keeps 1/rms.
static void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int C,
                            float eps) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        const float* x = inp + i * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        const float s = 1.0f / sqrtf(ss / C + eps);
        float* o = out + i * C;
        for (int c = 0; c < C; c++) o[c] = weight[c] * (x[c] * s);
        rstd[i] = s;
    }
}

// dinp += RMSNorm'(dout), dweight += sum_i dout * x * rstd.
// With g = dout * weight: dx = rstd * (g - x * rstd^2 * mean(g * x)).
static void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                             const float* weight, const float* rstd, int64_t N, int C) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        const float* x = inp + i * C;
        const float* d = dout + i * C;
        float gx_mean = 0.0f;
        for (int c = 0; c < C; c++) gx_mean += d[c] * weight[c] * x[c];
        gx_mean /= C;
        const float s = rstd[i];
        float* dx = dinp + i * C;
        for (int c = 0; c < C; c++) dx[c] += s * (d[c] * weight[c] - x[c] * s * s * gx_mean);
    }
    // weight grads: serial over rows (they'd race), vectorized over C
    for (int64_t i = 0; i < N; i++) {
        const float* x = inp + i * C;
        const float* d = dout + i * C;
        for (int c = 0; c < C; c++) dweight[c] += d[c] * x[c] * rstd[i];
    }
}

// RoPE in place: channel i pairs with i + hd/2 (rotate_half); pos NULL means row t.
static void rope_forward(float* x, const float* cos_t, const float* sin_t, int B, int T, int nheads, int hd,
                         const int* pos = NULL) {
    const int half = hd / 2;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const int64_t p = pos ? pos[(int64_t)b * T + t] : t;
            const float* c = cos_t + p * half;
            const float* s = sin_t + p * half;
            for (int h = 0; h < nheads; h++) {
                float* v = x + (((int64_t)b * T + t) * nheads + h) * hd;
                for (int i = 0; i < half; i++) {
                    const float x1 = v[i], x2 = v[i + half];
                    v[i] = x1 * c[i] - x2 * s[i];
                    v[i + half] = x2 * c[i] + x1 * s[i];
                }
            }
        }
}

// The transpose of that rotation, in place on dx: d1 = d1' cos + d2' sin, d2 = d2' cos - d1' sin.
static void rope_backward(float* dx, const float* cos_t, const float* sin_t, int B, int T, int nheads, int hd,
                          const int* pos = NULL) {
    const int half = hd / 2;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const int64_t p = pos ? pos[(int64_t)b * T + t] : t;
            const float* c = cos_t + p * half;
            const float* s = sin_t + p * half;
            for (int h = 0; h < nheads; h++) {
                float* v = dx + (((int64_t)b * T + t) * nheads + h) * hd;
                for (int i = 0; i < half; i++) {
                    const float d1 = v[i], d2 = v[i + half];
                    v[i] = d1 * c[i] + d2 * s[i];
                    v[i + half] = d2 * c[i] - d1 * s[i];
                }
            }
        }
}

// Causal grouped-query attention: query head h reads kv head h / (NH/NKV).
// pos (may be NULL): query t sees keys t - pos[t] .. t.
static void gqa_attention_forward(float* out, float* att, const float* q, const float* k, const float* v,
                                  int B, int T, int NH, int NKV, int hd, const int* pos = NULL) {
    const int64_t QD = (int64_t)NH * hd, KVD = (int64_t)NKV * hd;
    const int group = NH / NKV;
    const float sqrt_hd = sqrtf((float)hd);  // transformers divides the scores by it
#pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const int64_t kv = (int64_t)(h / group) * hd;
                const float* qh = q + ((int64_t)b * T + t) * QD + (int64_t)h * hd;
                float* a = att + (((int64_t)b * NH + h) * T + t) * T;
                const int lo = pos ? t - pos[(int64_t)b * T + t] : 0;  // the first key t sees
                for (int t2 = 0; t2 < lo; t2++) a[t2] = 0.0f;
                float maxv = -INFINITY;
                for (int t2 = lo; t2 <= t; t2++) {
                    const float* kh = k + ((int64_t)b * T + t2) * KVD + kv;
                    float s = 0.0f;
                    for (int i = 0; i < hd; i++) s += qh[i] * kh[i];
                    a[t2] = s / sqrt_hd;
                    if (a[t2] > maxv) maxv = a[t2];
                }
                float sum = 0.0f;
                for (int t2 = lo; t2 <= t; t2++) {
                    a[t2] = expf(a[t2] - maxv);
                    sum += a[t2];
                }
                for (int t2 = lo; t2 <= t; t2++) a[t2] /= sum;
                for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0.0f;
                float* o = out + ((int64_t)b * T + t) * QD + (int64_t)h * hd;
                for (int i = 0; i < hd; i++) o[i] = 0.0f;
                for (int t2 = lo; t2 <= t; t2++) {
                    const float* vh = v + ((int64_t)b * T + t2) * KVD + kv;
                    for (int i = 0; i < hd; i++) o[i] += a[t2] * vh[i];
                }
            }
}

// dq, dk, dv = attention'(dout), overwritten. One thread owns a (b, kv head) group.
static void gqa_attention_backward(float* dq, float* dk, float* dv, float* dscore, const float* dout,
                                   const float* q, const float* k, const float* v, const float* att, int B,
                                   int T, int NH, int NKV, int hd, const int* pos = NULL) {
    const int64_t QD = (int64_t)NH * hd, KVD = (int64_t)NKV * hd;
    const int group = NH / NKV;
    const float sqrt_hd = sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < NKV; g++) {
            const int64_t kv = (int64_t)g * hd;
            for (int t = 0; t < T; t++) {
                const int64_t row = (int64_t)b * T + t;
                memset(dk + row * KVD + kv, 0, (size_t)hd * sizeof(float));
                memset(dv + row * KVD + kv, 0, (size_t)hd * sizeof(float));
                memset(dq + row * QD + kv * group, 0, (size_t)(group * hd) * sizeof(float));
            }
            float* ds = dscore + ((int64_t)b * NKV + g) * T;
            for (int h = g * group; h < (g + 1) * group; h++)
                for (int t = 0; t < T; t++) {
                    const int64_t row = (int64_t)b * T + t;
                    const float* a = att + (((int64_t)b * NH + h) * T + t) * T;
                    const float* d = dout + row * QD + (int64_t)h * hd;
                    const float* qh = q + row * QD + (int64_t)h * hd;
                    float* dqh = dq + row * QD + (int64_t)h * hd;
                    const int lo = pos ? t - pos[row] : 0;
                    // out = sum_t2 a[t2] v[t2]  ->  da[t2] = d . v[t2],  dv[t2] += a[t2] d
                    float da_dot_a = 0.0f;
                    for (int t2 = lo; t2 <= t; t2++) {
                        const float* vh = v + ((int64_t)b * T + t2) * KVD + kv;
                        float* dvh = dv + ((int64_t)b * T + t2) * KVD + kv;
                        float s = 0.0f;
                        for (int i = 0; i < hd; i++) {
                            s += d[i] * vh[i];
                            dvh[i] += a[t2] * d[i];
                        }
                        ds[t2] = s;
                        da_dot_a += s * a[t2];
                    }
                    // softmax backward: dscore = a * (da - sum(a*da)); then score = q.k / sqrt(hd)
                    for (int t2 = lo; t2 <= t; t2++) {
                        const float gs = a[t2] * (ds[t2] - da_dot_a) / sqrt_hd;
                        const float* kh = k + ((int64_t)b * T + t2) * KVD + kv;
                        float* dkh = dk + ((int64_t)b * T + t2) * KVD + kv;
                        for (int i = 0; i < hd; i++) {
                            dqh[i] += gs * kh[i];
                            dkh[i] += gs * qh[i];
                        }
                    }
                }
        }
}

// out = silu(gate) * up, silu(x) = x / (1 + exp(-x)).
static void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

// dgate = dout * up * silu'(gate), dup = dout * silu(gate) (overwritten).
// With s = sigmoid(x): silu'(x) = s * (1 + x * (1 - s)).
static void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                            int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float x = gate[i], s = 1.0f / (1.0f + expf(-x));
        dgate[i] = dout[i] * up[i] * (s * (1.0f + x * (1.0f - s)));
        dup[i] = dout[i] * (x * s);
    }
}

// matmul_backward that ADDS to dinp (two or three projections read one input).
static void matmul_backward_add(float* dinp, float* dweight, float* dbias, const float* dout,
                                const float* inp, const float* weight, int64_t N, int64_t IC, int64_t OC) {
    matmul_nn(dinp, dout, OC, 1, weight, N, IC, OC, 1);
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
// The model

// One forward's activations for (B, T), from one allocation; per-layer arrays are (L, ...).
typedef struct {
    float* embedded;             // (N, C) embedding rows, the input of layer 0
    float *rms1, *rms1_rstd;     // (L, N, C), (L, N) attention RMSNorm
    float *q, *k, *v;            // (L, N, QD), (L, N, KVD), (L, N, KVD); q and k after RoPE
    float* att;                  // (L, B, NH, T, T) softmax probabilities
    float* atty;                 // (L, N, QD) attention output, before wo
    float* residual2;            // (L, N, C) layer input + attention branch
    float *rms2, *rms2_rstd;     // (L, N, C), (L, N) MLP RMSNorm
    float *gate, *up;            // (L, N, I) the two MLP projections
    float* swiglu;               // (L, N, I) silu(gate) * up
    float* residual3;            // (L, N, C) layer output
    float *rmsf, *rmsf_rstd;     // (N, C), (N) final RMSNorm
    float* logits;               // (N, V)
    float* probs;                // (N, V)
    float* losses;               // (N) per-position cross-entropy
    float *rope_cos, *rope_sin;  // (T, hd/2)
    // backward scratch, reused by every layer
    float* dresidual;              // (N, C) gradient of the residual stream
    float* dln;                    // (N, C) gradient of an RMSNorm output
    float* datty;                  // (N, QD)
    float *dq, *dk, *dv;           // (N, QD), (N, KVD), (N, KVD)
    float *dgate, *dup, *dswiglu;  // (N, I)
    float* dscore;                 // (B, NKV, T)
    float* dlogits;                // (N, V)
} LlamaActivations;

typedef struct {
    LlamaConfig config;
    LlamaLayout layout;
    float* params;    // layout.total, layer-major
    float* grads;     // same layout; backward ADDS into it
    float* weight_t;  // scratch for a transposed weight matrix: the largest matrix
    LlamaActivations acts;
    float* act_memory;     // the one allocation behind acts
    int64_t act_capacity;  // floats in act_memory
    int B, T;              // shape of the last forward pass
    int* inputs;           // (B*T) copies of the last batch, for backward
    int* targets;          // (B*T), valid when has_targets; -1: not a target
    int* pos;              // (B*T) positions of the last batch, valid when has_pos
    int has_targets, has_pos;
    int64_t num_targets;  // targets >= 0 in the last batch
    float mean_loss;      // mean loss over targets after a forward with targets, else -1
    char error[1024];     // why the last call returned 0
} LlamaCPU;

// params (uninitialized) and zeroed grads; 0 with model->error.
static int llama_cpu_build(LlamaCPU* model, const LlamaConfig* config) {
    memset(model, 0, sizeof *model);
    model->mean_loss = -1.0f;
    if (!llama_config_check(config, model->error, sizeof model->error)) return 0;
    model->config = *config;
    model->layout = llama_layout(config);
    const LlamaLayout* p = &model->layout;
    int64_t wt = p->embed_size[LL_EMBED];
    for (int k = 0; k < NUM_LLAMA_LAYER_TENSORS; k++) wt = p->layer_size[k] > wt ? p->layer_size[k] : wt;
    return cpu_model_alloc(model, p->total, wt);
}

// Safe after a failed build.
static void llama_cpu_free(LlamaCPU* model) { cpu_model_free(model); }

// grads = 0, before the first micro-batch of a step.
static void llama_cpu_zero_grad(LlamaCPU* model) { cpu_model_zero_grad(model); }

// Points model->acts into one allocation for (B, T); 0 if OOM.
static int llama_cpu_layout_activations(LlamaCPU* model, int B, int T) {
    const LlamaConfig* c = &model->config;
    const int64_t L = c->num_layers, C = c->hidden_size, NH = c->num_heads, NKV = c->num_kv_heads;
    const int64_t QD = NH * c->head_dim, KVD = NKV * c->head_dim, I = c->intermediate_size;
    const int64_t V = c->vocab_size, N = (int64_t)B * T, half = c->head_dim / 2;
    LlamaActivations* a = &model->acts;
    const ActArray table[] = {{&a->embedded, N * C},
                              {&a->rms1, L * N * C},
                              {&a->rms1_rstd, L * N},
                              {&a->q, L * N * QD},
                              {&a->k, L * N * KVD},
                              {&a->v, L * N * KVD},
                              {&a->att, L * B * NH * T * T},
                              {&a->atty, L * N * QD},
                              {&a->residual2, L * N * C},
                              {&a->rms2, L * N * C},
                              {&a->rms2_rstd, L * N},
                              {&a->gate, L * N * I},
                              {&a->up, L * N * I},
                              {&a->swiglu, L * N * I},
                              {&a->residual3, L * N * C},
                              {&a->rmsf, N * C},
                              {&a->rmsf_rstd, N},
                              {&a->logits, N * V},
                              {&a->probs, N * V},
                              {&a->losses, N},
                              {&a->rope_cos, T * half},
                              {&a->rope_sin, T * half},
                              {&a->dresidual, N * C},
                              {&a->dln, N * C},
                              {&a->datty, N * QD},
                              {&a->dq, N * QD},
                              {&a->dk, N * KVD},
                              {&a->dv, N * KVD},
                              {&a->dgate, N * I},
                              {&a->dup, N * I},
                              {&a->dswiglu, N * I},
                              {&a->dscore, B * NKV * T},
                              {&a->dlogits, N * V}};
    return cpu_model_carve(model, table, (int)(sizeof table / sizeof table[0]), B, T);
}

// Forward over inputs (B, T); with targets (may be NULL), the losses too.
// 0 with model->error on bad input or OOM.
static int llama_cpu_forward(LlamaCPU* model, const int* inputs, const int* targets, int B, int T,
                             const int* pos = NULL) {
    const LlamaConfig* cfg = &model->config;
    const int L = cfg->num_layers, C = cfg->hidden_size, NH = cfg->num_heads, NKV = cfg->num_kv_heads;
    const int hd = cfg->head_dim, I = cfg->intermediate_size, V = cfg->vocab_size;
    const int QD = NH * hd, KVD = NKV * hd;
    if (!cpu_model_check_batch(model, inputs, targets, pos, B, T, V, cfg->max_seq_len, "max_seq_len"))
        return 0;
    if (!llama_cpu_layout_activations(model, B, T)) return 0;
    pos = cpu_model_keep_batch(model, inputs, targets, pos, B, T);
    const int64_t N = (int64_t)B * T;

    const LlamaLayout* p = &model->layout;
    LlamaActivations* a = &model->acts;
    LlamaEmbedTensors e = llama_embed_tensors(p, model->params);
    rope_table(a->rope_cos, a->rope_sin, cfg, T);
    embedding_forward(a->embedded, inputs, e.embed, N, C);
    for (int l = 0; l < L; l++) {
        LlamaLayerTensors w = llama_layer_tensors(p, model->params, l);
        const float* x = l == 0 ? a->embedded : a->residual3 + (int64_t)(l - 1) * N * C;
        float* rms1 = a->rms1 + (int64_t)l * N * C;
        float* q = a->q + (int64_t)l * N * QD;
        float* k = a->k + (int64_t)l * N * KVD;
        float* v = a->v + (int64_t)l * N * KVD;
        float* att = a->att + (int64_t)l * B * NH * T * T;
        float* atty = a->atty + (int64_t)l * N * QD;
        float* res2 = a->residual2 + (int64_t)l * N * C;
        float* rms2 = a->rms2 + (int64_t)l * N * C;
        float* gate = a->gate + (int64_t)l * N * I;
        float* up = a->up + (int64_t)l * N * I;
        float* swiglu = a->swiglu + (int64_t)l * N * I;
        float* res3 = a->residual3 + (int64_t)l * N * C;
        // attention: res2 = x + wo(attention(rope(q), rope(k), v)), q k v projections of rms1(x)
        rmsnorm_forward(rms1, a->rms1_rstd + l * N, x, w.attn_norm, N, C, cfg->rms_norm_eps);
        matmul_forward(q, rms1, w.wq, w.bq, N, C, QD, model->weight_t);
        matmul_forward(k, rms1, w.wk, w.bk, N, C, KVD, model->weight_t);
        matmul_forward(v, rms1, w.wv, w.bv, N, C, KVD, model->weight_t);
        rope_forward(q, a->rope_cos, a->rope_sin, B, T, NH, hd, pos);
        rope_forward(k, a->rope_cos, a->rope_sin, B, T, NKV, hd, pos);
        gqa_attention_forward(atty, att, q, k, v, B, T, NH, NKV, hd, pos);
        matmul_forward(res2, atty, w.wo, NULL, N, QD, C, model->weight_t);  // projection, then
        residual_forward(res2, x, res2, N * C);                             // + layer input
        // MLP: res3 = res2 + w_down(silu(w_gate rms2(res2)) * w_up rms2(res2))
        rmsnorm_forward(rms2, a->rms2_rstd + l * N, res2, w.mlp_norm, N, C, cfg->rms_norm_eps);
        matmul_forward(gate, rms2, w.w_gate, NULL, N, C, I, model->weight_t);
        matmul_forward(up, rms2, w.w_up, NULL, N, C, I, model->weight_t);
        swiglu_forward(swiglu, gate, up, N * I);
        matmul_forward(res3, swiglu, w.w_down, NULL, N, I, C, model->weight_t);
        residual_forward(res3, res2, res3, N * C);
    }
    rmsnorm_forward(a->rmsf, a->rmsf_rstd, a->residual3 + (int64_t)(L - 1) * N * C, e.final_norm, N, C,
                    cfg->rms_norm_eps);
    matmul_forward(a->logits, a->rmsf, e.lm_head, NULL, N, C, V, model->weight_t);
    if (targets) {
        softmax_crossentropy_forward(a->probs, a->losses, a->logits, targets, N, V, V);
        cpu_model_mean_loss(model, a->losses, targets, N);
    }
    return 1;
}

// ADDS d(loss)/d(params) of the last forward into model->grads.
// loss = normalizer * sum of target losses; 0 means 1/(B*T).
static int llama_cpu_backward(LlamaCPU* model, float normalizer = 0.0f) {
    if (!cpu_model_has_targets(model)) return 0;
    const LlamaConfig* cfg = &model->config;
    const int L = cfg->num_layers, C = cfg->hidden_size, NH = cfg->num_heads, NKV = cfg->num_kv_heads;
    const int hd = cfg->head_dim, I = cfg->intermediate_size, V = cfg->vocab_size;
    const int QD = NH * hd, KVD = NKV * hd, B = model->B, T = model->T;
    const int64_t N = (int64_t)B * T;
    const LlamaLayout* p = &model->layout;
    LlamaActivations* a = &model->acts;
    LlamaEmbedTensors e = llama_embed_tensors(p, model->params);
    LlamaEmbedTensors de = llama_embed_tensors(p, model->grads);

    // d(loss)/d(each position's loss); a tied lm_head adds into embed
    const float dloss = normalizer != 0.0f ? normalizer : 1.0f / (float)N;
    const int* pos = model->has_pos ? model->pos : NULL;
    crossentropy_softmax_backward(a->dlogits, a->probs, model->targets, dloss, N, V, V);
    matmul_backward(a->dln, de.lm_head, NULL, a->dlogits, a->rmsf, e.lm_head, N, C, V);
    memset(a->dresidual, 0, (size_t)(N * C) * sizeof(float));
    rmsnorm_backward(a->dresidual, de.final_norm, a->dln, a->residual3 + (int64_t)(L - 1) * N * C,
                     e.final_norm, a->rmsf_rstd, N, C);

    // dresidual: d(loss)/d(layer l's output); each layer makes it d/d(its input)
    for (int l = L - 1; l >= 0; l--) {
        LlamaLayerTensors w = llama_layer_tensors(p, model->params, l);
        LlamaLayerTensors dw = llama_layer_tensors(p, model->grads, l);
        const float* x = l == 0 ? a->embedded : a->residual3 + (int64_t)(l - 1) * N * C;
        const float* rms1 = a->rms1 + (int64_t)l * N * C;
        const float* q = a->q + (int64_t)l * N * QD;
        const float* k = a->k + (int64_t)l * N * KVD;
        const float* v = a->v + (int64_t)l * N * KVD;
        const float* att = a->att + (int64_t)l * B * NH * T * T;
        const float* atty = a->atty + (int64_t)l * N * QD;
        const float* res2 = a->residual2 + (int64_t)l * N * C;
        const float* rms2 = a->rms2 + (int64_t)l * N * C;
        const float* gate = a->gate + (int64_t)l * N * I;
        const float* up = a->up + (int64_t)l * N * I;
        const float* swiglu = a->swiglu + (int64_t)l * N * I;
        // MLP branch: res3 = res2 + w_down(silu(w_gate rms2(res2)) * w_up rms2(res2))
        matmul_backward(a->dswiglu, dw.w_down, NULL, a->dresidual, swiglu, w.w_down, N, I, C);
        swiglu_backward(a->dgate, a->dup, a->dswiglu, gate, up, N * I);
        matmul_backward(a->dln, dw.w_gate, NULL, a->dgate, rms2, w.w_gate, N, C, I);
        matmul_backward_add(a->dln, dw.w_up, NULL, a->dup, rms2, w.w_up, N, C, I);
        rmsnorm_backward(a->dresidual, dw.mlp_norm, a->dln, res2, w.mlp_norm, a->rms2_rstd + l * N, N, C);
        // attention branch: res2 = x + wo(attention(rope(q), rope(k), v))
        matmul_backward(a->datty, dw.wo, NULL, a->dresidual, atty, w.wo, N, QD, C);
        gqa_attention_backward(a->dq, a->dk, a->dv, a->dscore, a->datty, q, k, v, att, B, T, NH, NKV, hd,
                               pos);
        rope_backward(a->dq, a->rope_cos, a->rope_sin, B, T, NH, hd, pos);
        rope_backward(a->dk, a->rope_cos, a->rope_sin, B, T, NKV, hd, pos);
        matmul_backward(a->dln, dw.wq, dw.bq, a->dq, rms1, w.wq, N, C, QD);
        matmul_backward_add(a->dln, dw.wk, dw.bk, a->dk, rms1, w.wk, N, C, KVD);
        matmul_backward_add(a->dln, dw.wv, dw.bv, a->dv, rms1, w.wv, N, C, KVD);
        rmsnorm_backward(a->dresidual, dw.attn_norm, a->dln, x, w.attn_norm, a->rms1_rstd + l * N, N, C);
    }
    embedding_backward(de.embed, a->dresidual, model->inputs, N, C);
    return 1;
}

// ----------------------------------------------------------------------------
// The reference optimizer step

// AdamW over every tensor, as torch.optim.AdamW; decay on matrices only.
static void llama_cpu_adamw(LlamaCPU* model, float* m, float* v, const AdamWArgs* args) {
    const LlamaLayout* p = &model->layout;
    for (int l = 0; l < model->config.num_layers; l++) {
        const int64_t o = (int64_t)l * p->layer_stride;
        adamw_tensors_f32grad(NUM_LLAMA_LAYER_TENSORS, p->layer_offset, p->layer_size,
                              llama_layer_tensor_is_matrix, model->params + o, model->grads + o, m + o, v + o,
                              NULL, args);
    }
    const int64_t o = p->embed_base;
    adamw_tensors_f32grad(NUM_LLAMA_EMBED_TENSORS, p->embed_offset, p->embed_size,
                          llama_embed_tensor_is_matrix, model->params + o, model->grads + o, m + o, v + o,
                          NULL, args);
}
