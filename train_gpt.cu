// train_gpt.cu — trains a GPT-2 far larger than GPU memory on ONE GPU by streaming it layer by layer.
//
// The technique, in the order of a training step (gpt_step below is its table of contents):
//   host RAM : fp32 master weights, fp32 AdamW m and v (plain memory), and in pinned memory the bf16 copy
//              of the weights that is streamed to the GPU and the bf16 gradients that come back (stream.cu).
//   GPU      : a ring of >= 2 layer-sized weight slots, one layer of fp32 gradient accumulator, each
//              layer's INPUT as a bf16 checkpoint (per micro-batch), one layer of recompute workspace, and
//              the embeddings (wte/wpe/final LN) resident with their fp32 gradients: they are needed at both
//              ends of every pass and are a constant that does not grow with depth.
//   forward  : layer-outer, micro-batch-inner: layer l's weights are copied once per step and applied to
//              every micro-batch while layer l+1 is copied on the h2d stream. Only layer inputs are kept.
//   loss     : final LN + tied lm_head + fused softmax/cross-entropy, backward through them right away.
//   backward : last layer first: wait for the layer's weights (the last layers of the forward pass are still
//              resident), recompute its forward from the checkpoint, run its backward for every micro-batch
//              into one fp32 gradient buffer (so gradient accumulation needs no second copy), convert to bf16
//              and add the squared norm on the GPU, send it to the host on the d2h stream.
//   optimizer: once the global norm is known (one sync per step), a CPU thread runs AdamW (cpu_adam.cpp)
//              block by block — embeddings, layer 0, 1, ... — writing the bf16 copy in the same pass. The NEXT
//              step's forward starts at once and copies layer l as soon as its update is done, so the CPU
//              update of layer l+k overlaps the GPU forward of layer l. The clip is exact: no update uses a
//              gradient before the norm of all gradients is known.
// Not here: kernels (kernels.cuh), host<->GPU copies (stream.cu), AdamW math (cpu_adam.cpp), the CPU
// reference model (gpt2_cpu.h).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cpu_adam.h"      // adamw_update_*, bf16 conversion
#include "cuda_common.h"   // cudaCheck, cublasCheck, bf16
#include "dataloader.h"    // DataLoader: llm.c token shards
#include "kernels.cuh"     // layernorm, gelu, attention softmax, classifier, embedding kernels
#include "model.h"         // GPTConfig, ParamLayout (layer-major), model files, init
#include "stream.h"        // WeightStream: slots, pinned buffers, copy streams
#include "tokenizer.h"     // decoding samples
#include "train_common.h"  // flags, lr schedule, clip scale, logger, sampler, per-block AdamW

// ----------------------------------------------------------------------------
// Matrix multiplies: cuBLAS, bf16 inputs, fp32 accumulation. Our matrices are row-major; cuBLAS is
// column-major, so each call computes the transposed product (C^T = B^T A^T) and no data is moved.

static cublasHandle_t cublas_handle;

// out (N, OC) = inp (N, C) @ w (OC, C)^T          [bias added separately]
static void matmul_forward(bf16* out, const bf16* inp, const bf16* w, int64_t N, int C, int OC, cudaStream_t s) {
    const float one = 1.0f, zero = 0.0f;
    cublasCheck(cublasSetStream(cublas_handle, s));
    cublasCheck(cublasGemmEx(cublas_handle, CUBLAS_OP_T, CUBLAS_OP_N, OC, (int)N, C, &one, w, CUDA_R_16BF, C, inp,
                             CUDA_R_16BF, C, &zero, out, CUDA_R_16BF, OC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
// dinp (N, C) = dout (N, OC) @ w (OC, C)
static void matmul_backward_input(bf16* dinp, const bf16* dout, const bf16* w, int64_t N, int C, int OC, cudaStream_t s) {
    const float one = 1.0f, zero = 0.0f;
    cublasCheck(cublasSetStream(cublas_handle, s));
    cublasCheck(cublasGemmEx(cublas_handle, CUBLAS_OP_N, CUBLAS_OP_N, C, (int)N, OC, &one, w, CUDA_R_16BF, C, dout,
                             CUDA_R_16BF, OC, &zero, dinp, CUDA_R_16BF, C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
// dw (OC, C) += dout (N, OC)^T @ inp (N, C), accumulated in fp32 across micro-batches
static void matmul_backward_weight(float* dw, const bf16* dout, const bf16* inp, int64_t N, int C, int OC, cudaStream_t s) {
    const float one = 1.0f;
    cublasCheck(cublasSetStream(cublas_handle, s));
    cublasCheck(cublasGemmEx(cublas_handle, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, (int)N, &one, inp, CUDA_R_16BF, C, dout,
                             CUDA_R_16BF, OC, &one, dw, CUDA_R_32F, C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
// One (B*NH)-batched GEMM over per-head (T x hs) / (T x T) matrices, all bf16.
static void matmul_batched(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                           const bf16* A, int lda, int64_t strideA, const bf16* B, int ldb, int64_t strideB,
                           bf16* Cm, int ldc, int64_t strideC, int batch, cudaStream_t s) {
    const float zero = 0.0f;
    cublasCheck(cublasSetStream(cublas_handle, s));
    cublasCheck(cublasGemmStridedBatchedEx(cublas_handle, ta, tb, m, n, k, &alpha, A, CUDA_R_16BF, lda, strideA, B,
                                           CUDA_R_16BF, ldb, strideB, &zero, Cm, CUDA_R_16BF, ldc, strideC, batch,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// ----------------------------------------------------------------------------
// Workspace of ONE layer for ONE micro-batch: what the backward pass needs, recomputed from the checkpoint.
// One allocation carved by a table of sizes (the layout is data, as in llm.c).

enum {
    ACT_LN1, ACT_QKV, ACT_Q, ACT_K, ACT_V, ACT_ATT, ACT_YHEADS, ACT_ATTY, ACT_RES2, ACT_LN2, ACT_FCH, ACT_FCH_GELU,
    ACT_DFCH, ACT_DC, ACT_DQ, ACT_DK, ACT_DV, ACT_DQKV, ACT_DATT, ACT_LNF, ACT_DLNF, ACT_LOGITS, NUM_ACTS
};
typedef struct {
    bf16* p[NUM_ACTS];
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lnf_mean, *lnf_rstd;  // (N) each
    void* memory;
    int64_t bytes;
} Workspace;

static void workspace_sizes(const GPTConfig* c, int B, int T, int64_t sizes[NUM_ACTS]) {
    const int64_t N = (int64_t)B * T, C = c->channels, att = (int64_t)B * c->num_heads * T * T;
    const int64_t s[NUM_ACTS] = {N * C, N * 3 * C, N * C, N * C, N * C, att, N * C, N * C, N * C, N * C, N * 4 * C, N * 4 * C,
                                 N * 4 * C, N * C, N * C, N * C, N * C, N * 3 * C, att, N * C, N * C, N * c->padded_vocab_size};
    memcpy(sizes, s, sizeof s);
}
static int64_t workspace_bytes(const GPTConfig* c, int B, int T) {
    int64_t sizes[NUM_ACTS], bytes = 6 * (int64_t)B * T * 4;
    workspace_sizes(c, B, T, sizes);
    for (int i = 0; i < NUM_ACTS; i++) bytes += round_up64(sizes[i] * 2, 256);
    return bytes;
}
static void workspace_alloc(Workspace* w, const GPTConfig* c, int B, int T) {
    int64_t sizes[NUM_ACTS];
    workspace_sizes(c, B, T, sizes);
    w->bytes = workspace_bytes(c, B, T);
    cudaCheck(cudaMalloc(&w->memory, (size_t)w->bytes));
    char* ptr = (char*)w->memory;
    for (int i = 0; i < NUM_ACTS; i++) { w->p[i] = (bf16*)ptr; ptr += round_up64(sizes[i] * 2, 256); }
    float** stats[6] = {&w->ln1_mean, &w->ln1_rstd, &w->ln2_mean, &w->ln2_rstd, &w->lnf_mean, &w->lnf_rstd};
    for (int i = 0; i < 6; i++) { *stats[i] = (float*)ptr; ptr += (int64_t)B * T * 4; }
}

// ----------------------------------------------------------------------------
// The model as the GPU trainer holds it

typedef struct GPT GPT;

// The CPU optimizer thread: one "round" per step updates block 0 (embeddings) then blocks 1..L (layers).
typedef struct {
    std::thread thread;
    std::mutex mu;
    std::condition_variable cv;
    int64_t rounds_submitted, rounds_done;
    int blocks_done;  // of the round in progress
    bool quit;
    float lr, grad_scale;
    int64_t t;        // AdamW step, 1-based
    double last_round_seconds;
} Optimizer;

struct GPT {
    GPTConfig config;
    ParamLayout layout;
    int B, T;                   // micro-batch
    int max_micro;              // micro-batches per step the buffers are sized for
    TrainArgs args;             // hyperparameters (lr, betas are llm.c's, weight decay, clip)

    // host
    float* master;              // fp32 master weights, layer-major (model.h)
    float* adam_m;              // fp32 AdamW first moment
    float* adam_v;              // fp32 AdamW second moment
    WeightStream ws;            // pinned bf16 weights/grads, GPU slots, streams

    // GPU
    bf16* embed;                // resident bf16 embeddings block: wte | wpe | lnfw | lnfb
    float* embed_grads;         // fp32, accumulated over micro-batches
    float* layer_grads;         // fp32 gradient accumulator of the layer in flight
    bf16* ckpt;                 // (L+1) x max_micro x (B*T*C): each layer's input (and the final residual)
    bf16* dresid;               // max_micro x (B*T*C): gradient of the residual stream, per micro-batch
    int* tokens_in;             // max_micro x B*T
    int* tokens_out;            // targets
    float* losses;              // max_micro x B*T
    float* loss_dev;            // mean loss (1 float)
    double* sumsq_dev;          // squared gradient norm accumulator
    float* loss_host;           // pinned: mean loss and
    double* sumsq_host;         //   squared norm, read once per step
    Workspace ws_act;

    Optimizer* opt;             // owned; separate so this struct stays plain data
    int64_t step;               // optimizer steps taken
    double last_norm;
};

static inline bf16* ckpt_at(GPT* g, int l, int mb) {
    const int64_t n = (int64_t)g->B * g->T * g->config.channels;
    return g->ckpt + ((int64_t)l * g->max_micro + mb) * n;
}
static inline bf16* dresid_at(GPT* g, int mb) { return g->dresid + (int64_t)mb * g->B * g->T * g->config.channels; }
static inline const bf16* wt(const GPT* g, const bf16* layer, int t) { return layer + g->layout.layer_offset[t]; }
static inline float* gt(GPT* g, int t) { return g->layer_grads + g->layout.layer_offset[t]; }

// ----------------------------------------------------------------------------
// One transformer layer, forward. x: the layer's input (its checkpoint). out: where to write the layer's
// output, or NULL when recomputing for the backward pass (the output itself is not needed there, so the
// last GEMM is skipped). Everything the backward pass needs stays in the workspace.

static void attention_forward(GPT* g, Workspace* a, cudaStream_t s) {
    const int B = g->B, T = g->T, NH = g->config.num_heads, hs = g->config.channels / NH;
    const int64_t head = (int64_t)T * hs, scores = (int64_t)T * T;
    split_heads(a->p[ACT_Q], a->p[ACT_K], a->p[ACT_V], a->p[ACT_QKV], B, T, NH, hs, s);
    // scores = q @ k^T / sqrt(hs), per (batch, head)
    matmul_batched(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f / sqrtf((float)hs), a->p[ACT_K], hs, head, a->p[ACT_Q], hs,
                   head, a->p[ACT_ATT], T, scores, B * NH, s);
    softmax_causal_forward(a->p[ACT_ATT], (int64_t)B * NH * T, T, s);
    // y = att @ v
    matmul_batched(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, a->p[ACT_V], hs, head, a->p[ACT_ATT], T, scores,
                   a->p[ACT_YHEADS], hs, head, B * NH, s);
    permute_heads(a->p[ACT_ATTY], a->p[ACT_YHEADS], B, T, NH, hs, 0, s);
}

static void layer_forward(GPT* g, const bf16* w, const bf16* x, bf16* out, Workspace* a, cudaStream_t s) {
    const int64_t N = (int64_t)g->B * g->T;
    const int C = g->config.channels;
    layernorm_forward(a->p[ACT_LN1], a->ln1_mean, a->ln1_rstd, x, wt(g, w, LN1W), wt(g, w, LN1B), N, C, s);
    matmul_forward(a->p[ACT_QKV], a->p[ACT_LN1], wt(g, w, QKVW), N, C, 3 * C, s);
    add_bias(a->p[ACT_QKV], wt(g, w, QKVB), NULL, N, 3 * C, s);
    attention_forward(g, a, s);
    matmul_forward(a->p[ACT_RES2], a->p[ACT_ATTY], wt(g, w, ATTPROJW), N, C, C, s);
    add_bias(a->p[ACT_RES2], wt(g, w, ATTPROJB), x, N, C, s);  // res2 = x + attn(x)
    layernorm_forward(a->p[ACT_LN2], a->ln2_mean, a->ln2_rstd, a->p[ACT_RES2], wt(g, w, LN2W), wt(g, w, LN2B), N, C, s);
    matmul_forward(a->p[ACT_FCH], a->p[ACT_LN2], wt(g, w, FCW), N, C, 4 * C, s);
    add_bias(a->p[ACT_FCH], wt(g, w, FCB), NULL, N, 4 * C, s);
    gelu_forward(a->p[ACT_FCH_GELU], a->p[ACT_FCH], N * 4 * C, s);
    if (out) {
        matmul_forward(out, a->p[ACT_FCH_GELU], wt(g, w, FCPROJW), N, 4 * C, C, s);
        add_bias(out, wt(g, w, FCPROJB), a->p[ACT_RES2], N, C, s);  // out = res2 + mlp(res2)
    }
}

// ----------------------------------------------------------------------------
// One transformer layer, backward, after layer_forward(out = NULL) refilled the workspace.
// dres: gradient w.r.t. the layer's output on entry, w.r.t. its input on return (updated in place, since
// the residual connections pass it through unchanged). Parameter gradients are ADDED to g->layer_grads.

static void attention_backward(GPT* g, Workspace* a, const bf16* datty, cudaStream_t s) {
    const int B = g->B, T = g->T, NH = g->config.num_heads, hs = g->config.channels / NH;
    const int64_t head = (int64_t)T * hs, scores = (int64_t)T * T;
    const float scale = 1.0f / sqrtf((float)hs);
    bf16* dy = a->p[ACT_YHEADS];  // the forward's y is not needed any more: reuse its space for dy
    permute_heads(dy, datty, B, T, NH, hs, 1, s);
    // datt = dy @ v^T ; dv = att^T @ dy
    matmul_batched(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, a->p[ACT_V], hs, head, dy, hs, head, a->p[ACT_DATT], T,
                   scores, B * NH, s);
    matmul_batched(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, dy, hs, head, a->p[ACT_ATT], T, scores, a->p[ACT_DV], hs,
                   head, B * NH, s);
    softmax_causal_backward(a->p[ACT_DATT], a->p[ACT_ATT], (int64_t)B * NH * T, T, s);  // now d(scores)
    // dq = dscores @ k * scale ; dk = dscores^T @ q * scale
    matmul_batched(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, scale, a->p[ACT_K], hs, head, a->p[ACT_DATT], T, scores,
                   a->p[ACT_DQ], hs, head, B * NH, s);
    matmul_batched(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, scale, a->p[ACT_Q], hs, head, a->p[ACT_DATT], T, scores,
                   a->p[ACT_DK], hs, head, B * NH, s);
    merge_qkv_grads(a->p[ACT_DQKV], a->p[ACT_DQ], a->p[ACT_DK], a->p[ACT_DV], B, T, NH, hs, s);
}

static void layer_backward(GPT* g, const bf16* w, const bf16* x, bf16* dres, Workspace* a, cudaStream_t s) {
    const int64_t N = (int64_t)g->B * g->T;
    const int C = g->config.channels;
    // MLP: out = res2 + fcproj(gelu(fc(ln2(res2))))
    matmul_backward_weight(gt(g, FCPROJW), dres, a->p[ACT_FCH_GELU], N, 4 * C, C, s);
    bias_backward(gt(g, FCPROJB), dres, N, C, s);
    matmul_backward_input(a->p[ACT_DFCH], dres, wt(g, w, FCPROJW), N, 4 * C, C, s);
    gelu_backward(a->p[ACT_DFCH], a->p[ACT_FCH], N * 4 * C, s);
    matmul_backward_weight(gt(g, FCW), a->p[ACT_DFCH], a->p[ACT_LN2], N, C, 4 * C, s);
    bias_backward(gt(g, FCB), a->p[ACT_DFCH], N, 4 * C, s);
    matmul_backward_input(a->p[ACT_DC], a->p[ACT_DFCH], wt(g, w, FCW), N, C, 4 * C, s);
    layernorm_backward(dres, gt(g, LN2W), gt(g, LN2B), a->p[ACT_DC], a->p[ACT_RES2], wt(g, w, LN2W), a->ln2_mean,
                       a->ln2_rstd, N, C, s);
    // attention: res2 = x + attproj(attention(qkv(ln1(x))))
    matmul_backward_weight(gt(g, ATTPROJW), dres, a->p[ACT_ATTY], N, C, C, s);
    bias_backward(gt(g, ATTPROJB), dres, N, C, s);
    matmul_backward_input(a->p[ACT_DC], dres, wt(g, w, ATTPROJW), N, C, C, s);
    attention_backward(g, a, a->p[ACT_DC], s);
    matmul_backward_weight(gt(g, QKVW), a->p[ACT_DQKV], a->p[ACT_LN1], N, C, 3 * C, s);
    bias_backward(gt(g, QKVB), a->p[ACT_DQKV], N, 3 * C, s);
    matmul_backward_input(a->p[ACT_DC], a->p[ACT_DQKV], wt(g, w, QKVW), N, C, 3 * C, s);
    layernorm_backward(dres, gt(g, LN1W), gt(g, LN1B), a->p[ACT_DC], x, wt(g, w, LN1W), a->ln1_mean, a->ln1_rstd, N, C, s);
}

// ----------------------------------------------------------------------------
// Final LayerNorm + tied lm_head + loss. With backward: the logits buffer is overwritten by dlogits and the
// gradient flows into wte/lnf (fp32, accumulated) and into dres (overwritten).

static void head_forward(GPT* g, const bf16* x, const int* targets, float* losses, float dloss_scale, cudaStream_t s) {
    const int64_t N = (int64_t)g->B * g->T;
    const int C = g->config.channels;
    Workspace* a = &g->ws_act;
    const bf16* e = g->embed;
    layernorm_forward(a->p[ACT_LNF], a->lnf_mean, a->lnf_rstd, x, e + g->layout.embed_offset[LNFW],
                      e + g->layout.embed_offset[LNFB], N, C, s);
    matmul_forward(a->p[ACT_LOGITS], a->p[ACT_LNF], e + g->layout.embed_offset[WTE], N, C, g->config.padded_vocab_size, s);
    if (targets) fused_classifier(a->p[ACT_LOGITS], losses, targets, N, g->config.vocab_size, g->config.padded_vocab_size,
                                  dloss_scale, s);
}

static void head_backward(GPT* g, const bf16* x, bf16* dres, cudaStream_t s) {
    const int64_t N = (int64_t)g->B * g->T;
    const int C = g->config.channels, Vp = g->config.padded_vocab_size;
    Workspace* a = &g->ws_act;
    const ParamLayout* p = &g->layout;
    matmul_backward_weight(g->embed_grads + p->embed_offset[WTE], a->p[ACT_LOGITS], a->p[ACT_LNF], N, C, Vp, s);
    matmul_backward_input(a->p[ACT_DLNF], a->p[ACT_LOGITS], g->embed + p->embed_offset[WTE], N, C, Vp, s);
    cudaCheck(cudaMemsetAsync(dres, 0, (size_t)(N * C * 2), s));
    layernorm_backward(dres, g->embed_grads + p->embed_offset[LNFW], g->embed_grads + p->embed_offset[LNFB],
                       a->p[ACT_DLNF], x, g->embed + p->embed_offset[LNFW], a->lnf_mean, a->lnf_rstd, N, C, s);
}

// ----------------------------------------------------------------------------
// The CPU optimizer thread (see the file comment for how it overlaps the next step's forward pass).

static void adamw_block(GPT* g, int block) {
    Optimizer* o = g->opt;
    AdamWArgs args = {o->lr, 0.9f, 0.95f, 1e-8f, g->args.weight_decay, o->grad_scale, o->t};
    const ParamLayout* p = &g->layout;
    if (block == 0) {
        adamw_embed_block_f32grad(p, g->master, g->ws.embed_grads_host_fp32, g->adam_m, g->adam_v, g->ws.weights_host_bf16, &args);
    } else {
        const int l = block - 1;
        const int64_t off = gpt_layer_offset(p, l);
        adamw_layer_block_bf16grad(p, g->master + off, g->ws.grads_host_bf16 + (int64_t)l * p->layer_stride, g->adam_m + off,
                                   g->adam_v + off, g->ws.weights_host_bf16 + off, &args);
    }
}

static void optimizer_thread_main(GPT* g) {
    Optimizer* o = g->opt;
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(o->mu);
            o->cv.wait(lock, [o] { return o->quit || o->rounds_submitted > o->rounds_done; });
            if (o->quit && o->rounds_submitted == o->rounds_done) return;
        }
        auto t0 = std::chrono::steady_clock::now();
        for (int block = 0; block <= g->config.num_layers; block++) {
            stream_wait_grads_on_host(&g->ws, block - 1);
            adamw_block(g, block);
            std::lock_guard<std::mutex> lock(o->mu);
            o->blocks_done = block + 1;
            o->cv.notify_all();
        }
        std::lock_guard<std::mutex> lock(o->mu);
        o->last_round_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        o->rounds_done++;
        o->blocks_done = 0;
        o->cv.notify_all();
    }
}

// HostReadyFn for the stream: block until the optimizer has finished layer `layer` (-1: embeddings).
static void optimizer_wait_block(void* ctx, int layer) {
    Optimizer* o = ((GPT*)ctx)->opt;
    std::unique_lock<std::mutex> lock(o->mu);
    o->cv.wait(lock, [o, layer] { return o->rounds_done == o->rounds_submitted || o->blocks_done > layer + 1; });
}
static void optimizer_wait_all(GPT* g) {
    Optimizer* o = g->opt;
    std::unique_lock<std::mutex> lock(o->mu);
    o->cv.wait(lock, [o] { return o->rounds_done == o->rounds_submitted; });
}
static void optimizer_submit(GPT* g, float lr, float grad_scale) {
    optimizer_wait_all(g);  // never true in practice: this step's forward already waited for every block
    Optimizer* o = g->opt;
    std::lock_guard<std::mutex> lock(o->mu);
    o->lr = lr; o->grad_scale = grad_scale; o->t = ++g->step;
    o->blocks_done = 0;
    o->rounds_submitted++;
    o->cv.notify_all();
}

// ----------------------------------------------------------------------------
// Memory plan: computed before any allocation so a config that cannot fit is refused with the numbers.

typedef struct { int64_t host_bytes, gpu_bytes; } MemoryPlan;

static MemoryPlan gpt_memory_plan(const GPTConfig* c, int B, int T, int max_micro, int num_slots) {
    ParamLayout p = gpt_layout(c);
    MemoryPlan m;
    m.host_bytes = p.total * 4 * 3 + stream_host_bytes(c->num_layers, p.layer_stride, p.embed_count);
    const int64_t act = (int64_t)B * T * c->channels * 2;
    m.gpu_bytes = p.embed_count * (2 + 4) + p.layer_stride * 4 + stream_gpu_bytes(p.layer_stride, num_slots) +
                  (int64_t)(c->num_layers + 1) * max_micro * act + (int64_t)max_micro * act +
                  (int64_t)max_micro * B * T * (4 + 4 + 4) + workspace_bytes(c, B, T) +
                  ((int64_t)512 << 20);  // cuBLAS workspace and the CUDA context's own allocations
    return m;
}

// ----------------------------------------------------------------------------
// Build / free

static void gpt_build(GPT* g, const GPTConfig* cfg, const float* init_params, int B, int T, int max_micro, int num_slots,
                      const TrainArgs* args) {
    memset(g, 0, sizeof *g);
    g->config = *cfg; g->layout = gpt_layout(cfg);
    g->B = B; g->T = T; g->max_micro = max_micro; g->args = *args;
    const ParamLayout* p = &g->layout;
    const GPTConfig* c = &g->config;

    g->master = (float*)malloc((size_t)(p->total * 4));
    g->adam_m = (float*)calloc((size_t)p->total, 4);
    g->adam_v = (float*)calloc((size_t)p->total, 4);
    if (!g->master || !g->adam_m || !g->adam_v) { fprintf(stderr, "error: out of host memory for the fp32 weights and AdamW state\n"); exit(1); }
    memcpy(g->master, init_params, (size_t)(p->total * 4));

    g->opt = new Optimizer();
    stream_init(&g->ws, c->num_layers, p->layer_stride, p->embed_count, num_slots, optimizer_wait_block, g);
    convert_f32_to_bf16(g->master, g->ws.weights_host_bf16, p->total);

    const int64_t N = (int64_t)B * T, act = N * c->channels;
    cudaCheck(cudaMalloc(&g->embed, (size_t)(p->embed_count * 2)));
    cudaCheck(cudaMalloc(&g->embed_grads, (size_t)(p->embed_count * 4)));
    cudaCheck(cudaMalloc(&g->layer_grads, (size_t)(p->layer_stride * 4)));
    cudaCheck(cudaMalloc(&g->ckpt, (size_t)((int64_t)(c->num_layers + 1) * max_micro * act * 2)));
    cudaCheck(cudaMalloc(&g->dresid, (size_t)(max_micro * act * 2)));
    cudaCheck(cudaMalloc(&g->tokens_in, (size_t)(max_micro * N * 4)));
    cudaCheck(cudaMalloc(&g->tokens_out, (size_t)(max_micro * N * 4)));
    cudaCheck(cudaMalloc(&g->losses, (size_t)(max_micro * N * 4)));
    cudaCheck(cudaMalloc(&g->loss_dev, 4));
    cudaCheck(cudaMalloc(&g->sumsq_dev, 8));
    cudaCheck(cudaMallocHost(&g->loss_host, 4));
    cudaCheck(cudaMallocHost(&g->sumsq_host, 8));
    workspace_alloc(&g->ws_act, c, B, T);

    g->opt->thread = std::thread(optimizer_thread_main, g);
}

static void gpt_free(GPT* g) {
    {
        std::lock_guard<std::mutex> lock(g->opt->mu);
        g->opt->quit = true;
        g->opt->cv.notify_all();
    }
    g->opt->thread.join();
    stream_free(&g->ws);
    cudaCheck(cudaFree(g->embed)); cudaCheck(cudaFree(g->embed_grads)); cudaCheck(cudaFree(g->layer_grads));
    cudaCheck(cudaFree(g->ckpt)); cudaCheck(cudaFree(g->dresid)); cudaCheck(cudaFree(g->tokens_in));
    cudaCheck(cudaFree(g->tokens_out)); cudaCheck(cudaFree(g->losses)); cudaCheck(cudaFree(g->loss_dev));
    cudaCheck(cudaFree(g->sumsq_dev)); cudaCheck(cudaFreeHost(g->loss_host)); cudaCheck(cudaFreeHost(g->sumsq_host));
    cudaCheck(cudaFree(g->ws_act.memory));
    free(g->master); free(g->adam_m); free(g->adam_v);
    delete g->opt;
}

// ----------------------------------------------------------------------------
// The training step: forward (layer-outer), loss, backward with recompute, gradient hand-off, optimizer.
// inputs/targets: n_micro x (B*T) tokens. Returns the mean loss; g->last_norm gets the gradient norm.

static float gpt_step(GPT* g, const int* inputs, const int* targets, int n_micro, float lr) {
    const GPTConfig* c = &g->config;
    const ParamLayout* p = &g->layout;
    const int L = c->num_layers, C = c->channels, T = g->T;
    const int64_t N = (int64_t)g->B * T;
    cudaStream_t s = g->ws.compute;
    Workspace* a = &g->ws_act;
    if (n_micro < 1 || n_micro > g->max_micro) { fprintf(stderr, "error: internal: %d micro-batches\n", n_micro); exit(1); }

    // 1. tokens and the (updated) embeddings
    cudaCheck(cudaMemcpyAsync(g->tokens_in, inputs, (size_t)(n_micro * N * 4), cudaMemcpyHostToDevice, s));
    cudaCheck(cudaMemcpyAsync(g->tokens_out, targets, (size_t)(n_micro * N * 4), cudaMemcpyHostToDevice, s));
    stream_upload_embeddings(&g->ws, g->embed);
    const bf16* wte = g->embed + p->embed_offset[WTE];
    const bf16* wpe = g->embed + p->embed_offset[WPE];
    for (int mb = 0; mb < n_micro; mb++) embedding_forward(ckpt_at(g, 0, mb), g->tokens_in + mb * N, wte, wpe, N, T, C, s);

    // 2. forward: each layer's weights arrive once and serve every micro-batch
    int* order = (int*)malloc(sizeof(int) * L);
    for (int l = 0; l < L; l++) order[l] = l;
    stream_begin_pass(&g->ws, order, L);
    for (int l = 0; l < L; l++) {
        const bf16* w = stream_wait_layer(&g->ws, l);
        for (int mb = 0; mb < n_micro; mb++) layer_forward(g, w, ckpt_at(g, l, mb), ckpt_at(g, l + 1, mb), a, s);
        stream_release_layer(&g->ws, l);
    }

    // 3. loss and its backward through lm_head and the final LayerNorm (dlogits scaled to the step's mean)
    cudaCheck(cudaMemsetAsync(g->embed_grads, 0, (size_t)(p->embed_count * 4), s));
    cudaCheck(cudaMemsetAsync(g->sumsq_dev, 0, 8, s));
    for (int mb = 0; mb < n_micro; mb++) {
        head_forward(g, ckpt_at(g, L, mb), g->tokens_out + mb * N, g->losses + mb * N, 1.0f / (float)(N * n_micro), s);
        head_backward(g, ckpt_at(g, L, mb), dresid_at(g, mb), s);
    }
    mean_loss(g->loss_dev, g->losses, n_micro * N, s);

    // 4. backward, last layer first, recomputing each layer from its checkpoint
    for (int l = 0; l < L; l++) order[l] = L - 1 - l;
    stream_begin_pass(&g->ws, order, L);
    for (int l = L - 1; l >= 0; l--) {
        const bf16* w = stream_wait_layer(&g->ws, l);
        cudaCheck(cudaMemsetAsync(g->layer_grads, 0, (size_t)(p->layer_stride * 4), s));
        for (int mb = 0; mb < n_micro; mb++) {
            layer_forward(g, w, ckpt_at(g, l, mb), NULL, a, s);
            layer_backward(g, w, ckpt_at(g, l, mb), dresid_at(g, mb), a, s);
        }
        stream_release_layer(&g->ws, l);
        bf16* staging = stream_grad_staging(&g->ws);
        grads_to_bf16_sumsq(staging, g->layer_grads, p->layer_stride, g->sumsq_dev, s);
        stream_send_layer_grads(&g->ws, l);
    }
    free(order);
    for (int mb = 0; mb < n_micro; mb++)
        embedding_backward(g->embed_grads + p->embed_offset[WTE], g->embed_grads + p->embed_offset[WPE], dresid_at(g, mb),
                           g->tokens_in + mb * N, N, T, C, s);
    grads_to_bf16_sumsq(NULL, g->embed_grads, p->embed_count, g->sumsq_dev, s);
    stream_send_embed_grads(&g->ws, g->embed_grads);

    // 5. the one synchronization of the step: loss and global norm
    cudaCheck(cudaMemcpyAsync(g->loss_host, g->loss_dev, 4, cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaMemcpyAsync(g->sumsq_host, g->sumsq_dev, 8, cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
    g->last_norm = sqrt(*g->sumsq_host);

    // 6. AdamW on the CPU thread; the next step's forward pass picks up each block as soon as it is done
    stream_invalidate(&g->ws);
    optimizer_submit(g, lr, clip_scale((float)g->last_norm, g->args.grad_clip));
    return *g->loss_host;
}

// Forward only, on micro-batch slot 0: validation loss (targets given) or logits for sampling (targets NULL).
// Returns the mean loss (0 without targets); the logits stay in the workspace.
static float gpt_forward_eval(GPT* g, const int* inputs, const int* targets) {
    const GPTConfig* c = &g->config;
    const int L = c->num_layers, C = c->channels, T = g->T;
    const int64_t N = (int64_t)g->B * T;
    cudaStream_t s = g->ws.compute;
    cudaCheck(cudaMemcpyAsync(g->tokens_in, inputs, (size_t)(N * 4), cudaMemcpyHostToDevice, s));
    if (targets) cudaCheck(cudaMemcpyAsync(g->tokens_out, targets, (size_t)(N * 4), cudaMemcpyHostToDevice, s));
    stream_upload_embeddings(&g->ws, g->embed);
    embedding_forward(ckpt_at(g, 0, 0), g->tokens_in, g->embed + g->layout.embed_offset[WTE],
                      g->embed + g->layout.embed_offset[WPE], N, T, C, s);
    int* order = (int*)malloc(sizeof(int) * L);
    for (int l = 0; l < L; l++) order[l] = l;
    stream_begin_pass(&g->ws, order, L);
    free(order);
    for (int l = 0; l < L; l++) {
        const bf16* w = stream_wait_layer(&g->ws, l);
        layer_forward(g, w, ckpt_at(g, l, 0), ckpt_at(g, l + 1, 0), &g->ws_act, s);
        stream_release_layer(&g->ws, l);
    }
    head_forward(g, ckpt_at(g, L, 0), targets ? g->tokens_out : NULL, g->losses, 0.0f, s);
    float loss = 0.0f;
    if (targets) {
        mean_loss(g->loss_dev, g->losses, N, s);
        cudaCheck(cudaMemcpyAsync(g->loss_host, g->loss_dev, 4, cudaMemcpyDeviceToHost, s));
    }
    cudaCheck(cudaStreamSynchronize(s));
    if (targets) loss = *g->loss_host;
    return loss;
}

// Copies the logits of position (b, t) to host floats (Vp of them).
static void gpt_copy_logits(GPT* g, int b, int t, float* out) {
    const int Vp = g->config.padded_vocab_size;
    uint16_t* tmp = (uint16_t*)malloc(sizeof(uint16_t) * Vp);
    const bf16* src = g->ws_act.p[ACT_LOGITS] + ((int64_t)b * g->T + t) * Vp;
    cudaCheck(cudaMemcpyAsync(tmp, src, (size_t)Vp * 2, cudaMemcpyDeviceToHost, g->ws.compute));
    cudaCheck(cudaStreamSynchronize(g->ws.compute));
    for (int i = 0; i < Vp; i++) out[i] = bf16_to_float(tmp[i]);
    free(tmp);
}
