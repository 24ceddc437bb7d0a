// train_gpt.cu — trains a GPT-2 far larger than GPU memory on ONE GPU by streaming it layer by layer.
//
// Where the model lives:
//   host RAM: fp32 master weights, AdamW m and v; pinned bf16 copies of weights and gradients (stream.cu).
//   GPU: a ring of layer-sized weight slots, each layer's input per micro-batch, one layer's activations,
//        the embeddings with their AdamW state, and with -R the first R layers too.
// One step, in the order of gpt_forward_backward and gpt_update below (numbered the same):
//   1. tokens and embeddings
//   2. forward, layer by layer: each layer's weights arrive once and serve every micro-batch
//   3. loss: final LayerNorm, tied lm_head, softmax cross-entropy, and their backward
//   4. backward, last layer first: recompute each layer from its input (-K: kept), send its gradients out
//   5. the one synchronization: loss and gradient norm
//   6. AdamW on a CPU thread, layer by layer, while the next step's forward pass already runs
// Not here: kernels (kernels.cuh, flash_attention.cuh), cuBLAS calls (matmul.cuh, attention.cuh), host<->GPU
// copies (stream.cu), AdamW math (cpu_adam.cpp), the CPU reference model (gpt2_cpu.h), disk I/O (ssd.cpp).
//
// The SSD tier (-sd DIR, issue 22; ssd.h): the fp32 master weights and AdamW m, v of the streamed layers
// R..L-1 live in an SsdStore under DIR (store layer i = layer R + i). The host arrays master / adam_m /
// adam_v then hold the resident prefix only (embeddings and -R layers: resident_count floats); nothing on
// the host ever holds a streamed layer's fp32 state beyond the store's ring and one layer-sized buffer at
// load and checkpoint time. Step 6 becomes ssd_store_round (read ahead, update, write behind), with the
// same update and the same per-layer hand-off to the next forward pass. Checkpoints: ssd_store_checkpoint
// (two generations in DIR, no copy), then the state file (version 102: "streamed state in DIR at step S",
// m, v of the prefix only) and model_S.bin, which is read layer by layer from the store: that model file is
// the one extra copy of the weights on disk (so export_hf and -e keep working). DONE last, as always.
// The streamed layers' bf16 gradients go to DIR too (GradsWriter: a ring of 3 pinned layer buffers instead
// of a pinned array of all layers); the pinned bf16 weights of all layers stay in host RAM (-sw 1: not yet).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <dirent.h>
#include <sys/mman.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "adamw.h"        // defines: adamw_layer_block_bf16grad, clip_scale, ADAMW_BETA1, ADAMW_EPS
#include "args.h"         // defines: TrainArgs, train_args_defaults, train_usage, parse_train_arg, help_flag
#include "checkpoint.h"   // defines: checkpoint_save, open_run_dir, check_resume_args, state_file_read
#include "cpu_adam.h"     // defines: cpu_adam_set_threads, convert_f32_to_bf16, bf16_to_float
#include "cpu_cores.h"    // defines: usable_cpu_cores, omp_short_spin_reexec
#include "cuda_common.h"  // defines: cudaCheck, cublasCheck, bf16
#include "dataloader.h"   // defines: DataLoader, dataloader_init, dataloader_next_batch
#include "kernels.cuh"    // defines: layernorm_forward, gelu_forward, fused_classifier, adamw_gpu
#include "logger.h"       // defines: TrainLogger, logger_open, logger_train, logger_val, logger_close
#include "model.h"        // defines: GPTConfig, ParamLayout, gpt_layout, gpt_init_params, gpt_load_params
#include "model_specs.h"  // defines: parse_model_spec
#include "outliers.h"     // defines: OutlierWindow, outlier_skip, training_diverged, die_diverged
#include "run_dir.h"      // defines: lock_output_dir
#include "sampler.h"      // defines: random_u64, random_f32, sample_softmax, print_sample_token
#include "schedulers.h"   // defines: learning_rate_at
#include "ssd.h"          // defines: SsdStore, ssd_store_round, ssd_store_checkpoint, ssd_plan (-sd)
#include "stop_signal.h"  // defines: stop_signal_install, stop_if_signalled
#include "stream.h"       // defines: WeightStream, stream_wait_layer, stream_release_layer
#include "timeline.h"     // defines: Timeline, timeline_begin, timeline_end, timeline_summarize (-Y 1)
#include "tokenizer.h"    // defines: Tokenizer, tokenizer_init
#include "utils.h"        // defines: die, table_row, table_rule, progress_text, peak_rss_bytes

#include "matmul.cuh"           // defines: matmul_forward, matmul_backward_input, lt_matmul
#include "attention.cuh"        // defines: attention_forward, attention_backward (cuBLAS + softmax)
#include "flash_attention.cuh"  // defines: flash_attention_forward, flash_attention_backward

// The attention of the layers: the fused kernels (flash_attention.cuh) where they take the head size and the
// GPU has bf16 mma.sync (sm_80+), else cuBLAS + softmax (attention.cuh), which stores the (T x T) scores.
// -F 0 forces the cuBLAS path.
static int flash_attention_flag = 1;
static bool use_flash_attention(const GPTConfig* c) {
    return flash_attention_flag && flash_attention_usable(c->channels / c->num_heads);
}

// GEMMs fused with the element-wise pass after them (bias, residual, GELU) as cuBLASLt epilogues (lt_matmul):
// the GEMM's output is not written and read again. Without a cuBLASLt algorithm: cuBLAS, then the kernels.cuh
// pass (warned once).
static int64_t cublaslt_fallbacks = 0;  // unfused calls made while fusion was asked for (the tests expect 0)
static void lt_fell_back(const char* what) {
    if (cublaslt_fusion && cublaslt_handle && cublaslt_fallbacks++ == 0)
        fprintf(stderr,
                "warning: cuBLASLt has no fused algorithm for %s; using cuBLAS and a separate kernel\n",
                what);
}
// out (N, OC) = inp (N, C) @ w (OC, C)^T + bias, + residual (N, OC) when not NULL (residual != out)
static void matmul_forward_bias(bf16* out, const bf16* inp, const bf16* w, const bf16* bias,
                                const bf16* residual, int64_t N, int C, int OC, cudaStream_t s) {
    if (lt_matmul(out, OC, w, CUBLAS_OP_T, C, inp, CUBLAS_OP_N, C, OC, (int)N, C, residual,
                  CUBLASLT_EPILOGUE_BIAS, bias, NULL, 0, s))
        return;
    lt_fell_back("a GEMM + bias");
    matmul_forward(out, inp, w, N, C, OC, s);
    add_bias(out, bias, residual, N, OC, s);
}
// pre (N, OC) = inp @ w^T + bias (kept for the backward pass), out = gelu(pre)
static void matmul_forward_bias_gelu(bf16* pre, bf16* out, const bf16* inp, const bf16* w, const bf16* bias,
                                     int64_t N, int C, int OC, cudaStream_t s) {
    if (lt_matmul(out, OC, w, CUBLAS_OP_T, C, inp, CUBLAS_OP_N, C, OC, (int)N, C, NULL,
                  CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias, pre, OC, s))
        return;
    lt_fell_back("a GEMM + bias + GELU");
    matmul_forward(pre, inp, w, N, C, OC, s);
    bias_gelu_forward(pre, out, bias, N, OC, s);
}
// dinp (N, C) = (dout (N, OC) @ w (OC, C)) * gelu'(pre (N, C))
static void matmul_backward_input_gelu(bf16* dinp, const bf16* dout, const bf16* w, const bf16* pre,
                                       int64_t N, int C, int OC, cudaStream_t s) {
    if (lt_matmul(dinp, C, w, CUBLAS_OP_N, C, dout, CUBLAS_OP_N, OC, C, (int)N, OC, NULL,
                  CUBLASLT_EPILOGUE_DGELU, NULL, pre, C, s))
        return;
    lt_fell_back("a GEMM + GELU backward");
    matmul_backward_input(dinp, dout, w, N, C, OC, s);
    gelu_backward(dinp, pre, N * C, s);
}

// ----------------------------------------------------------------------------
// Activations of ONE layer for ONE micro-batch: what its backward pass reads, recomputed from the layer's
// input. One allocation carved by a table of sizes, as llm.c's. N = B*T tokens of the micro-batch.
// A layer with kept activations (-K) holds only the costly ones (act_is_kept: 9C values per token). Its
// LayerNorm and GELU outputs (6C more) are redone before its backward pass (layer_redo_cheap_part), so a GiB
// keeps 5/3 as many layers as keeping them all would.

enum {
    ACT_LN1,       // (N, C) LayerNorm 1 output
    ACT_QKV,       // (N, 3C) q, k, v
    ACT_ATT,       // (B, NH, T, T) attention probabilities: the cuBLAS path only, empty when fused
    ACT_ATTY,      // (N, C) attention output, before its projection
    ACT_RES2,      // (N, C) residual after attention: x + attproj(atty)
    ACT_LN2,       // (N, C) LayerNorm 2 output
    ACT_FCH,       // (N, 4C) MLP pre-activation
    ACT_FCH_GELU,  // (N, 4C) GELU output
    ACT_DFCH,      // (N, 4C) backward scratch: gradient of the MLP pre-activation
    ACT_DC,        // (N, C) backward scratch: gradient of a LayerNorm output or of atty
    ACT_DQKV,      // (N, 3C) backward scratch: gradient of q, k, v
    ACT_DATT,      // (B, NH, T, T) backward scratch: the cuBLAS path only
    ACT_LNF,       // (N, C) final LayerNorm output (the head's)
    ACT_DLNF,      // (N, C) its gradient
    ACT_LOGITS,    // (N, Vp) logits, then their gradient
    NUM_ACTS
};
static inline bool act_is_kept(int i) {
    return i == ACT_QKV || i == ACT_ATT || i == ACT_ATTY || i == ACT_RES2 || i == ACT_FCH;
}
typedef struct {
    bf16* p[NUM_ACTS];
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lnf_mean, *lnf_rstd;  // (N) each
    float *att_lse, *att_dsum;  // (B, NH, T) each: the fused attention's row log-sum-exp and rowsum(dy * y)
    void* memory;
    int64_t bytes;
} LayerActs;

static void act_sizes(const GPTConfig* c, int B, int T, int64_t sizes[NUM_ACTS]) {
    // the (T x T) scores and their gradient only for the cuBLAS path: the fused kernels keep
    // them in registers
    const int64_t N = (int64_t)B * T, C = c->channels,
                  att = use_flash_attention(c) ? 0 : (int64_t)B * c->num_heads * T * T;
    const int64_t s[NUM_ACTS] = {N * C,     N * 3 * C, att,       N * C,     N * C,
                                 N * C,     N * 4 * C, N * 4 * C, N * 4 * C, N * C,
                                 N * 3 * C, att,       N * C,     N * C,     N * c->padded_vocab_size};
    memcpy(sizes, s, sizeof s);
}
// Byte counts of the memory plan, overflow-checked: an absurd shape (-e, -b, -t) must be refused here, not
// wrap to a negative count that passes the fit check and fails later in cudaMalloc.
static int64_t plan_mul(int64_t a, int64_t b, const char* what) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) die("config too large: the byte count of %s overflows int64", what);
    return r;
}
static int64_t plan_add(int64_t a, int64_t b, const char* what) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) die("config too large: the byte count of %s overflows int64", what);
    return r;
}
// The one description of the activations' layout: returns their bytes and, given a base, points w's arrays
// into it. kept_only: only what a kept layer holds (act_is_kept and att_lse; w's other arrays stay
// as they are).
static int64_t acts_layout(const GPTConfig* c, int B, int T, bool kept_only, char* base, LayerActs* w) {
    // the largest entries of act_sizes (every other one is smaller), checked first so that table cannot wrap
    const char* what =
        "the activation workspace of one layer (B*T*4C, B*NH*T*T attention scores or B*T*Vp logits; lower -b "
        "or -t)";
    const int64_t N = (int64_t)B * T;
    const int64_t largest[3] = {plan_mul(N, 4 * (int64_t)c->channels, what),
                                plan_mul(plan_mul((int64_t)B * c->num_heads, T, what), T, what),
                                plan_mul(N, c->padded_vocab_size, what)};
    for (int i = 0; i < 3; i++)
        plan_add(plan_mul(largest[i], 2, what), 255, what);                        // bf16, round_up64 to 256
    const int64_t row_stats = plan_mul(plan_mul(N, c->num_heads, what), 4, what);  // (B, NH, T) floats
    int64_t sizes[NUM_ACTS], bytes = 0;
    act_sizes(c, B, T, sizes);
    for (int i = 0; i < NUM_ACTS; i++) {
        if (kept_only && !act_is_kept(i)) continue;
        if (base) w->p[i] = (bf16*)(base + bytes);
        bytes = plan_add(bytes, round_up64(sizes[i] * 2, 256), what);
    }
    float** stats[6] = {&w->ln1_mean, &w->ln1_rstd, &w->ln2_mean, &w->ln2_rstd, &w->lnf_mean, &w->lnf_rstd};
    for (int i = 0; i < (kept_only ? 0 : 6); i++) {  // a kept layer's are redone with its LayerNorm outputs
        if (base) *stats[i] = (float*)(base + bytes);
        bytes = plan_add(bytes, N * 4, what);
    }
    float** rows[2] = {&w->att_lse, &w->att_dsum};
    for (int i = 0; i < (kept_only ? 1 : 2); i++) {
        if (base) *rows[i] = (float*)(base + bytes);
        bytes = plan_add(bytes, row_stats, what);
    }
    return round_up64(bytes, 256);  // so that kept blocks laid end to end each start 256-byte aligned
}
static int64_t acts_bytes(const GPTConfig* c, int B, int T, bool kept_only) {
    LayerActs unused;
    return acts_layout(c, B, T, kept_only, NULL, &unused);
}

// ----------------------------------------------------------------------------
// The model as the GPU trainer holds it

typedef struct GPT GPT;

// The CPU optimizer thread: one "round" per step updates the streamed layers R..L-1 in order.
typedef struct {
    std::thread thread;
    std::mutex mu;
    std::condition_variable cv;
    int64_t rounds_submitted, rounds_done;
    int blocks_done;  // of the round in progress
    bool quit;
    float lr, grad_scale;
    int64_t t;           // AdamW step, 1-based
    int64_t grads_pass;  // -sd: the backward pass whose gradients this round reads (GradsWriter)
    double last_round_seconds;
    double *block_t0, *block_t1;  // host clock at the start / end of each layer of the last round (timeline)
} Optimizer;

// -sd: the streamed layers' bf16 gradients go to the store's grads file (ssd_store_write_grads_async) through
// GRAD_RING pinned, 4096-aligned layer buffers instead of a pinned array of all layers. The main thread sends
// layer l into ring slot k once the writer thread has written the slot's previous layer to disk; the writer
// waits for grads_on_host[l] (stream.h), writes, then frees the slot and marks l written for this pass; the
// round reads l from the file once it is marked (ssd_round_grads).
#define GRAD_RING 3
typedef struct {
    std::thread thread;
    std::mutex mu;
    std::condition_variable cv;
    uint16_t* buf[GRAD_RING];  // 4096-aligned views into raw[k]
    void* raw[GRAD_RING];
    bool busy[GRAD_RING];                                       // sent and not yet written to disk
    int next;                                                   // the slot of the next send
    int queue_layer[GRAD_RING], queue_slot[GRAD_RING], queued;  // sends the writer has yet to take, in order
    int64_t* written_pass;  // per layer: the backward pass whose gradients the grads file holds
    int64_t pass;           // backward passes so far
    bool quit;
} GradsWriter;

struct GPT {
    GPTConfig config;
    ParamLayout layout;
    int B, T;        // micro-batch
    bool flash;      // attention: fused kernels (flash_attention.cuh) or cuBLAS + softmax
    int max_micro;   // micro-batches per step the buffers are sized for
    TrainArgs args;  // hyperparameters (lr, betas are llm.c's, weight decay, clip)

    // host
    float* master;        // fp32 master weights, layer-major (model.h)
    float* adam_m;        // fp32 AdamW first moment
    float* adam_v;        // fp32 AdamW second moment
    WeightStream stream;  // pinned bf16 weights and gradients, GPU slots, copy streams

    // GPU. The resident prefix [embeddings | layers 0..R-1] is never streamed: a GPU AdamW updates it in
    // place. The host's master / adam_m / adam_v hold the prefix only for files (gpt_resident_state_to_*).
    int resident_layers;     // R
    int64_t resident_count;  // parameters in the prefix: embed_count + R * layer_stride
    bf16* resident;          // bf16 weights of the prefix (what the kernels read)
    float* resident_grads;   // fp32, accumulated over micro-batches
    float* resident_master;  // fp32 master weights of the prefix
    float* resident_m;       // its AdamW moments
    float* resident_v;
    float* layer_grads;  // fp32 gradient accumulator of the streamed layer in flight
    bf16* layer_inputs;  // (L+1) x max_micro x (N, C): each layer's input, and the final residual
    bf16* dresid;        // max_micro x (N, C): gradient of the residual stream
    int* tokens_in;      // max_micro x N
    int* tokens_out;     // max_micro x N targets
    float* losses;       // max_micro x N
    float* loss_dev;     // mean loss (1 float)
    double* sumsq_dev;   // squared gradient norm accumulator
    float* loss_host;    // pinned: mean loss and
    double* sumsq_host;  //   squared norm, read once per step
    LayerActs acts;      // one layer, one micro-batch: recompute, backward scratch, the head's buffers
    int kept_layers;     // K: the last K layers keep their costly activations (-K), no recompute
    LayerActs* kept;     // [(l - (L - K)) * max_micro + mb]: acts with the kept arrays in kept_memory
    void* kept_memory;

    Optimizer* opt;    // owned; separate so this struct stays plain data
    int64_t step;      // training steps taken (names the checkpoints)
    int64_t adam_t;    // updates applied (AdamW's t): step less the updates -sl / -sg skipped
    double last_norm;  // gradient norm of the last step
    OutlierWindow loss_window, norm_window;  // -sl / -sg
    char skipped[96];                        // why the last step updated nothing (-sl / -sg), or ""
    int64_t gpu_bytes;         // every byte this trainer allocated on the GPU (the "peak GPU" figure)
    SsdStore* ssd;             // -sd: the streamed layers' fp32 state (NULL: in the host arrays)
    GradsWriter* gw;           // -sd: the gradients' way to disk (NULL without -sd)
    int64_t host_state_count;  // floats in master / adam_m / adam_v: all, or the prefix with -sd
    int* forward_order;        // R, R+1, ..., L-1: the streamed layers in the order of a forward pass
    int* backward_order;       // L-1, ..., R
    Timeline* timeline;        // NULL unless -Y 1
};

static inline bf16* layer_input(GPT* g, int l, int mb) {
    const int64_t n = (int64_t)g->B * g->T * g->config.channels;
    return g->layer_inputs + ((int64_t)l * g->max_micro + mb) * n;
}
static inline bf16* dresid_at(GPT* g, int mb) {
    return g->dresid + (int64_t)mb * g->B * g->T * g->config.channels;
}
static inline const bf16* wt(const GPT* g, const bf16* layer, int t) {
    return layer + g->layout.layer_offset[t];
}
// Layer l's weights in the GPU-resident prefix.
static inline bf16* resident_layer(GPT* g, int l) { return g->resident + gpt_layer_offset(&g->layout, l); }
// Where layer l's forward pass for micro-batch mb leaves its activations: its own kept ones (-K), or the one
// g->acts that the backward pass refills by recomputing.
static inline bool layer_kept(const GPT* g, int l) { return l >= g->config.num_layers - g->kept_layers; }
static inline LayerActs* layer_acts(GPT* g, int l, int mb) {
    return layer_kept(g, l)
               ? &g->kept[(int64_t)(l - (g->config.num_layers - g->kept_layers)) * g->max_micro + mb]
               : &g->acts;
}

// ----------------------------------------------------------------------------
// One transformer layer, forward. x: the layer's input. out: its output, or NULL when recomputing for the
// backward pass (the last GEMM is then skipped). What the backward pass reads stays in `a`.

static void layer_forward(GPT* g, const bf16* w, const bf16* x, bf16* out, LayerActs* a, cudaStream_t s) {
    const int64_t N = (int64_t)g->B * g->T;
    const int C = g->config.channels;
    layernorm_forward(a->p[ACT_LN1], a->ln1_mean, a->ln1_rstd, x, wt(g, w, LN1W), wt(g, w, LN1B), N, C, s);
    matmul_forward_bias(a->p[ACT_QKV], a->p[ACT_LN1], wt(g, w, QKVW), wt(g, w, QKVB), NULL, N, C, 3 * C, s);
    if (g->flash)
        flash_attention_forward(a->p[ACT_ATTY], a->att_lse, a->p[ACT_QKV], g->B, g->T, C, g->config.num_heads,
                                s);
    else
        attention_forward(a->p[ACT_ATTY], a->p[ACT_ATT], a->p[ACT_QKV], g->B, g->T, C, g->config.num_heads,
                          s);
    // res2 = x + attn(x)
    matmul_forward_bias(a->p[ACT_RES2], a->p[ACT_ATTY], wt(g, w, ATTPROJW), wt(g, w, ATTPROJB), x, N, C, C,
                        s);
    layernorm_forward(a->p[ACT_LN2], a->ln2_mean, a->ln2_rstd, a->p[ACT_RES2], wt(g, w, LN2W), wt(g, w, LN2B),
                      N, C, s);
    matmul_forward_bias_gelu(a->p[ACT_FCH], a->p[ACT_FCH_GELU], a->p[ACT_LN2], wt(g, w, FCW), wt(g, w, FCB),
                             N, C, 4 * C, s);
    if (out)  // out = res2 + mlp(res2)
        matmul_forward_bias(out, a->p[ACT_FCH_GELU], wt(g, w, FCPROJW), wt(g, w, FCPROJB), a->p[ACT_RES2], N,
                            4 * C, C, s);
}

// Before a kept layer's backward pass: what it did not keep, from what it did. Both LayerNorms and the GELU:
// three memory-bound passes instead of a recompute's GEMMs and attention. (With -G 1 the forward's GELU was
// cuBLASLt's, which need not match this one to the bit.)
static void layer_redo_cheap_part(GPT* g, const bf16* w, const bf16* x, LayerActs* a, cudaStream_t s) {
    const int64_t N = (int64_t)g->B * g->T;
    const int C = g->config.channels;
    layernorm_forward(a->p[ACT_LN1], a->ln1_mean, a->ln1_rstd, x, wt(g, w, LN1W), wt(g, w, LN1B), N, C, s);
    layernorm_forward(a->p[ACT_LN2], a->ln2_mean, a->ln2_rstd, a->p[ACT_RES2], wt(g, w, LN2W), wt(g, w, LN2B),
                      N, C, s);
    gelu_forward(a->p[ACT_FCH_GELU], a->p[ACT_FCH], N * 4 * C, s);
}

// ----------------------------------------------------------------------------
// One transformer layer, backward, once `a` holds its activations. dres: the gradient of the layer's output
// on entry, of its input on return (the residual passes it through). Parameter gradients are
// ADDED to `grads`.

static void layer_backward(GPT* g, const bf16* w, float* grads, const bf16* x, bf16* dres, LayerActs* a,
                           cudaStream_t s) {
    const int64_t N = (int64_t)g->B * g->T;
    const int C = g->config.channels;
    auto gt = [g, grads](int t) { return grads + g->layout.layer_offset[t]; };  // tensor t's gradient
    // MLP: out = res2 + fcproj(gelu(fc(ln2(res2))))
    matmul_backward_weight(gt(FCPROJW), dres, a->p[ACT_FCH_GELU], N, 4 * C, C, s);
    bias_backward(gt(FCPROJB), dres, N, C, s);
    matmul_backward_input_gelu(a->p[ACT_DFCH], dres, wt(g, w, FCPROJW), a->p[ACT_FCH], N, 4 * C, C, s);
    matmul_backward_weight(gt(FCW), a->p[ACT_DFCH], a->p[ACT_LN2], N, C, 4 * C, s);
    bias_backward(gt(FCB), a->p[ACT_DFCH], N, 4 * C, s);
    matmul_backward_input(a->p[ACT_DC], a->p[ACT_DFCH], wt(g, w, FCW), N, C, 4 * C, s);
    layernorm_backward(dres, gt(LN2W), gt(LN2B), a->p[ACT_DC], a->p[ACT_RES2], wt(g, w, LN2W), a->ln2_mean,
                       a->ln2_rstd, N, C, s);
    // attention: res2 = x + attproj(attention(qkv(ln1(x))))
    matmul_backward_weight(gt(ATTPROJW), dres, a->p[ACT_ATTY], N, C, C, s);
    bias_backward(gt(ATTPROJB), dres, N, C, s);
    matmul_backward_input(a->p[ACT_DC], dres, wt(g, w, ATTPROJW), N, C, C, s);
    if (g->flash)
        flash_attention_backward(a->p[ACT_DQKV], a->att_dsum, a->p[ACT_DC], a->p[ACT_ATTY], a->p[ACT_QKV],
                                 a->att_lse, g->B, g->T, C, g->config.num_heads, s);
    else
        attention_backward(a->p[ACT_DQKV], a->p[ACT_DATT], a->p[ACT_DC], a->p[ACT_ATT], a->p[ACT_QKV], g->B,
                           g->T, C, g->config.num_heads, s);
    matmul_backward_weight(gt(QKVW), a->p[ACT_DQKV], a->p[ACT_LN1], N, C, 3 * C, s);
    bias_backward(gt(QKVB), a->p[ACT_DQKV], N, 3 * C, s);
    matmul_backward_input(a->p[ACT_DC], a->p[ACT_DQKV], wt(g, w, QKVW), N, C, 3 * C, s);
    layernorm_backward(dres, gt(LN1W), gt(LN1B), a->p[ACT_DC], x, wt(g, w, LN1W), a->ln1_mean, a->ln1_rstd, N,
                       C, s);
}

// ----------------------------------------------------------------------------
// Final LayerNorm + tied lm_head + loss. The backward pass overwrites the logits with their gradient, adds to
// the wte and lnf gradients, and overwrites dres.

static void head_forward(GPT* g, const bf16* x, const int* targets, float* losses, float dloss_scale,
                         cudaStream_t s) {
    const int64_t N = (int64_t)g->B * g->T;
    const int C = g->config.channels;
    LayerActs* a = &g->acts;
    const bf16* e = g->resident;
    layernorm_forward(a->p[ACT_LNF], a->lnf_mean, a->lnf_rstd, x, e + g->layout.embed_offset[LNFW],
                      e + g->layout.embed_offset[LNFB], N, C, s);
    matmul_forward(a->p[ACT_LOGITS], a->p[ACT_LNF], e + g->layout.embed_offset[WTE], N, C,
                   g->config.padded_vocab_size, s);
    if (targets)
        fused_classifier(a->p[ACT_LOGITS], losses, targets, N, g->config.vocab_size,
                         g->config.padded_vocab_size, dloss_scale, s);
}

static void head_backward(GPT* g, const bf16* x, bf16* dres, cudaStream_t s) {
    const int64_t N = (int64_t)g->B * g->T;
    const int C = g->config.channels, Vp = g->config.padded_vocab_size;
    LayerActs* a = &g->acts;
    const ParamLayout* p = &g->layout;
    matmul_backward_weight(g->resident_grads + p->embed_offset[WTE], a->p[ACT_LOGITS], a->p[ACT_LNF], N, C,
                           Vp, s);
    matmul_backward_input(a->p[ACT_DLNF], a->p[ACT_LOGITS], g->resident + p->embed_offset[WTE], N, C, Vp, s);
    cudaCheck(cudaMemsetAsync(dres, 0, (size_t)(N * C * 2), s));
    layernorm_backward(dres, g->resident_grads + p->embed_offset[LNFW],
                       g->resident_grads + p->embed_offset[LNFB], a->p[ACT_DLNF], x,
                       g->resident + p->embed_offset[LNFW], a->lnf_mean, a->lnf_rstd, N, C, s);
}

// ----------------------------------------------------------------------------
// The CPU optimizer thread: AdamW of the streamed layers, in order, overlapping the next forward pass.
// FAKE_CUDA_HOST_*: the emulated build's checks of host accesses (cuda_common.h); nothing in a real build.

static void adamw_layer(GPT* g, int l) {
    Optimizer* o = g->opt;
    AdamWArgs args = {o->lr, ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS, g->args.weight_decay, o->grad_scale, o->t};
    const ParamLayout* p = &g->layout;
    const int64_t off = gpt_layer_offset(p, l);
    const uint16_t* grads = g->stream.grads_host_bf16 + (int64_t)l * p->layer_stride;
    uint16_t* bf16_out = g->stream.weights_host_bf16 + off;
    FAKE_CUDA_HOST_ACCESS(grads, p->layer_stride * 2, false, "the CPU AdamW reading a layer's gradients");
    FAKE_CUDA_HOST_ACCESS(bf16_out, p->layer_stride * 2, true, "the CPU AdamW writing a layer's bf16 copy");
    adamw_layer_block_bf16grad(p, g->master + off, grads, g->adam_m + off, g->adam_v + off, bf16_out, &args);
}

// The round's callbacks with -sd (ssd.h SsdRoundFns): store layer i is layer R + i.
static const uint16_t* ssd_round_grads(void* ctx, int i) {
    GPT* g = (GPT*)ctx;
    g->opt->block_t0[g->resident_layers + i] = timeline_now();
    return NULL;  // grads_on_disk: in the grads file, all of them before the round began (ssd_round)
}
static void ssd_round_update(void* ctx, int i, int64_t off, int64_t n, float* params, const uint16_t* grads,
                             float* m, float* v, uint16_t* bf16_out) {
    GPT* g = (GPT*)ctx;
    Optimizer* o = g->opt;
    const AdamWArgs args = {o->lr,         ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS, g->args.weight_decay,
                            o->grad_scale, o->t};
    const ParamLayout* p = &g->layout;
    adamw_tensors_window_bf16grad(NUM_LAYER_TENSORS, p->layer_offset, p->layer_size, layer_tensor_is_matrix,
                                  off, n, params, grads, m, v, bf16_out, &args);
}
static uint16_t* ssd_round_bf16_dst(void* ctx, int i) {
    GPT* g = (GPT*)ctx;
    uint16_t* dst = g->stream.weights_host_bf16 + gpt_layer_offset(&g->layout, g->resident_layers + i);
    FAKE_CUDA_HOST_ACCESS(dst, g->layout.layer_stride * 2, true, "the CPU AdamW writing a layer's bf16 copy");
    return dst;
}
// Layer l is updated: what the in-RAM loop does after adamw_layer (the stream's host-ready protocol).
static void optimizer_layer_done(GPT* g, int l) {
    Optimizer* o = g->opt;
    std::lock_guard<std::mutex> lock(o->mu);
    o->block_t1[l] = timeline_now();
    o->blocks_done = l + 1;
    FAKE_CUDA_HOST_RELEASE(o);
    o->cv.notify_all();
}
static void ssd_round_layer_done(void* ctx, int i) {
    GPT* g = (GPT*)ctx;
    optimizer_layer_done(g, g->resident_layers + i);
}

// -sd, the writer thread: each sent layer's gradients, once on the host, into the store's grads file.
static void die_disk(const char* what, const char* err);
static void grads_writer_main(GPT* g) {
    GradsWriter* w = g->gw;
    [[maybe_unused]] const int64_t bytes = g->layout.layer_stride * 2;  // the emulator's host-access check
    for (;;) {
        int l, k;
        int64_t pass;
        {
            std::unique_lock<std::mutex> lock(w->mu);
            w->cv.wait(lock, [w] { return w->quit || w->queued > 0; });
            if (w->queued == 0) return;
            l = w->queue_layer[0];
            k = w->queue_slot[0];
            pass = w->pass;
            w->queued--;
            for (int q = 0; q < w->queued; q++) {
                w->queue_layer[q] = w->queue_layer[q + 1];
                w->queue_slot[q] = w->queue_slot[q + 1];
            }
        }
        stream_wait_grads_on_host(&g->stream, l);
        FAKE_CUDA_HOST_ACCESS(w->buf[k], bytes, false, "the gradient writer reading a layer's gradients");
        char err[1024];
        const SsdReq r = ssd_store_write_grads_async(g->ssd, l - g->resident_layers, w->buf[k]);
        if (ssd_store_wait(g->ssd, r, err, sizeof err) != 0)
            die_disk("writing the gradients to the SSD tier", err);
        std::lock_guard<std::mutex> lock(w->mu);
        w->busy[k] = false;
        w->written_pass[l] = pass;
        FAKE_CUDA_HOST_RELEASE(w);
        w->cv.notify_all();
    }
}

// Sends streamed layer l's gradients to the host: the pinned array (in RAM), or with -sd a free ring slot,
// queued for the writer once the copy is enqueued (its grads_on_host event recorded).
static void send_layer_grads(GPT* g, int l) {
    GradsWriter* w = g->gw;
    if (!w) {
        stream_send_layer_grads(&g->stream, l);
        return;
    }
    const int k = w->next;
    w->next = (k + 1) % GRAD_RING;
    {
        std::unique_lock<std::mutex> lock(w->mu);
        w->cv.wait(lock, [w, k] { return !w->busy[k]; });
        FAKE_CUDA_HOST_ACQUIRE(w);
        w->busy[k] = true;
    }
    stream_send_layer_grads_to(&g->stream, l, w->buf[k]);
    std::lock_guard<std::mutex> lock(w->mu);
    w->queue_layer[w->queued] = l;
    w->queue_slot[w->queued] = k;
    w->queued++;
    w->cv.notify_all();
}

// A disk error during a round: one line, and out at once (the main thread may be inside a step). The
// store's last checkpoint generation is never written by a round, so the last checkpoint stays intact.
static void die_disk(const char* what, const char* err) {
    fflush(stdout);
    fprintf(stderr, "error: %s: %s (the last complete checkpoint is intact: resume with -y 1)\n", what, err);
    fflush(stderr);
    _exit(1);
}

// Test hook: env SSD_FAULT="WRITE,AFTER,ERRNO" (ssd_io_set_fault: the AFTER+1-th chunk written (WRITE 1) or
// read (0) from the store's opening on fails with ERRNO, 0 = a short transfer; ERRNO "kill": the process
// kills itself there, a crash between two writes). Unset: nothing.
static void ssd_set_fault_from_env(SsdStore* st) {
    const char* e = getenv("SSD_FAULT");
    if (!e || !e[0]) return;
    int write = 0;
    long long after = 0;
    char what[16] = "";
    if (sscanf(e, "%d,%lld,%15s", &write, &after, what) != 3) die("SSD_FAULT=%s: want WRITE,AFTER,ERRNO", e);
    const int kill = strcmp(what, "kill") == 0;
    ssd_io_set_fault(ssd_store_io(st), write, after, kill ? 0 : atoi(what), kill);
}

// One round over the streamed layers' state in the SSD store (-sd).
static void ssd_round(GPT* g) {
    const int n = g->config.num_layers - g->resident_layers;
    int* layers = (int*)malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (!layers) die_disk("the SSD tier's AdamW round", "out of host memory");
    for (int i = 0; i < n; i++) layers[i] = i;
    {  // the round reads ahead from the grads file: every layer of this pass must be written first
        GradsWriter* w = g->gw;
        std::unique_lock<std::mutex> lock(w->mu);
        const int64_t pass = g->opt->grads_pass;
        w->cv.wait(lock, [g, w, pass] {
            for (int l = g->resident_layers; l < g->config.num_layers; l++)
                if (w->written_pass[l] < pass) return false;
            return true;
        });
    }
    SsdRoundFns fns = {ssd_round_grads, ssd_round_update, ssd_round_bf16_dst, ssd_round_layer_done, g};
    char err[1024];
    if (ssd_store_round(g->ssd, layers, n, &fns, err, sizeof err) != 0)
        die_disk("the SSD tier's AdamW round", err);
    free(layers);
}

static void optimizer_thread_main(GPT* g) {
    Optimizer* o = g->opt;
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(o->mu);
            o->cv.wait(lock, [o] { return o->quit || o->rounds_submitted > o->rounds_done; });
            if (o->quit && o->rounds_submitted == o->rounds_done) return;
            FAKE_CUDA_HOST_ACQUIRE(o);
        }
        auto t0 = std::chrono::steady_clock::now();
        if (g->ssd) ssd_round(g);
        for (int l = g->resident_layers; l < g->config.num_layers && !g->ssd; l++) {
            stream_wait_grads_on_host(&g->stream, l);
            o->block_t0[l] = timeline_now();
            adamw_layer(g, l);
            optimizer_layer_done(g, l);
        }
        std::lock_guard<std::mutex> lock(o->mu);
        o->last_round_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        o->rounds_done++;
        o->blocks_done = 0;
        o->cv.notify_all();
    }
}

// HostReadyFn for the stream: has the optimizer finished layer `layer`? wait: block until so.
static int optimizer_block_ready(void* ctx, int layer, int wait) {
    Optimizer* o = ((GPT*)ctx)->opt;
    std::unique_lock<std::mutex> lock(o->mu);
    auto done = [o, layer] { return o->rounds_done == o->rounds_submitted || o->blocks_done > layer; };
    if (wait) o->cv.wait(lock, done);
    if (!done()) return 0;
    FAKE_CUDA_HOST_ACQUIRE(o);
    return 1;
}
static void optimizer_wait_all(GPT* g) {
    Optimizer* o = g->opt;
    std::unique_lock<std::mutex> lock(o->mu);
    o->cv.wait(lock, [o] { return o->rounds_done == o->rounds_submitted; });
    FAKE_CUDA_HOST_ACQUIRE(o);
}
static void optimizer_submit(GPT* g, float lr, float grad_scale) {
    optimizer_wait_all(g);  // never true in practice: this step's forward already waited for every block
    Optimizer* o = g->opt;
    std::lock_guard<std::mutex> lock(o->mu);
    o->lr = lr;
    o->grad_scale = grad_scale;
    o->t = ++g->adam_t;
    if (g->gw) {
        std::lock_guard<std::mutex> wlock(g->gw->mu);
        o->grads_pass = g->gw->pass;
    }
    o->blocks_done = 0;
    o->rounds_submitted++;
    FAKE_CUDA_HOST_RELEASE(o);
    o->cv.notify_all();
}

// ----------------------------------------------------------------------------
// Memory plan: every buffer gpt_build allocates, by name, known before any allocation. gpt_build allocates
// from it; the fit check, -P 1 and the config table only read it. A new buffer: a field here,
// its gpu_alloc there.

#define RESIDENT_BYTES_PER_PARAM \
    18  // a GPU-resident parameter: bf16 weight, fp32 gradient, master, AdamW m, v

typedef struct {
    int64_t resident_count;  // parameters that live on the GPU: the embeddings and the first R layers
    // host
    int64_t master_adam;  // fp32 master weights, AdamW m and v (12 bytes per parameter; -sd: the prefix's)
    int64_t pinned;       // bf16 weights and layer gradients (stream_host_bytes)
    int64_t ssd_ring;     // -sd: the store's ring of piece buffers
    int64_t ssd_disk;     // -sd: the store's files in DIR (not host memory)
    int64_t ssd_read_per_step, ssd_write_per_step;  // -sd: disk traffic of one step (ssd_plan)
    // GPU
    int64_t embeddings;       // embeddings with their AdamW state (RESIDENT_BYTES_PER_PARAM each)
    int64_t resident_layer;   // one -R layer with its AdamW state
    int64_t resident_layers;  // R of them
    int64_t slots;            // the weight slots (num_slots x one bf16 layer)
    int64_t grad_staging;     // two bf16 layers of gradients on their way to the host
    int64_t layer_grads;      // fp32 gradient of the streamed layer in flight
    int64_t layer_inputs;  // (L+1) x micro-batches x (N, C) bf16: each layer's input, kept for its backward
    int64_t dresid;        // micro-batches x (N, C) bf16: the residual stream's gradient
    int64_t tokens;        // micro-batches x N x 4 bytes: one array each for inputs, targets and losses
    int64_t scalars;       // loss (fp32), squared norm (fp64), the cuBLAS workspace
    int64_t acts;          // one layer's activations for one micro-batch (acts_bytes)
    int64_t kept_acts;     // one layer's kept activations (-K) for one micro-batch
    int64_t kept_layer;    // one -K layer: micro-batches x kept_acts
    int64_t kept;          // K of them
    int64_t host_bytes, gpu_bytes;  // the sums
} MemoryPlan;

// The SSD store of a run with -sd: layers R..L-1, whole layers or pieces of at most 64 Mi parameters (env
// SSD_PIECE_ELEMS overrides: the tests cut small layers into pieces), a ring of 4 pieces.
static SsdStoreConfig ssd_store_config(const GPTConfig* c, int resident_layers) {
    SsdStoreConfig sc;
    memset(&sc, 0, sizeof sc);
    sc.num_layers = c->num_layers - resident_layers;
    sc.layer_elems = gpt_layout(c).layer_stride;
    sc.ring = 4;
    sc.grads_on_disk = 1;  // GradsWriter
    sc.piece_elems = (int64_t)1 << 26;
    const char* e = getenv("SSD_PIECE_ELEMS");
    if (e && atoll(e) > 0) sc.piece_elems = atoll(e);
    return sc;
}

// Every term that grows with -b, -t, -d is overflow-checked (plan_mul / plan_add): an absurd config dies with
// "config too large" instead of a wrapped count. ssd: the streamed layers' fp32 state is on disk (-sd).
static MemoryPlan gpt_memory_plan(const GPTConfig* c, int B, int T, int max_micro, int num_slots,
                                  int resident_layers, int kept_layers, bool ssd = false) {
    const ParamLayout p = gpt_layout(c);
    const int64_t N = (int64_t)B * T;
    MemoryPlan m;
    memset(&m, 0, sizeof m);
    // every per-parameter term is under 64 bytes per parameter: checking that bound covers them
    // and their sums
    plan_mul(p.total, 64,
             "the parameters (fp32 weights, AdamW m and v, bf16 copies: choose a smaller model)");
    const int64_t prefix = p.embed_count + (int64_t)resident_layers * p.layer_stride;
    m.master_adam = (ssd ? prefix : p.total) * 12;
    m.pinned = stream_host_bytes(c->num_layers, p.layer_stride, p.embed_count, !ssd);
    if (ssd)
        m.pinned += GRAD_RING * (ssd_round_up(p.layer_stride * 2, SSD_ALIGN) + SSD_ALIGN);  // GradsWriter
    if (ssd && resident_layers < c->num_layers) {
        const SsdStoreConfig sc = ssd_store_config(c, resident_layers);
        SsdPlanInput in;
        memset(&in, 0, sizeof in);
        in.streamed_layers = sc.num_layers;
        in.layer_elems = sc.layer_elems;
        in.ring = sc.ring;
        in.piece_elems = sc.piece_elems;
        in.grads_on_disk = sc.grads_on_disk;
        const SsdPlan sp = ssd_plan(&in);
        m.ssd_ring = sp.host_ring;
        m.ssd_disk = sp.disk_bytes;
        m.ssd_read_per_step = sp.read_per_step;
        m.ssd_write_per_step = sp.write_per_step;
    }
    m.host_bytes = m.master_adam + m.pinned + m.ssd_ring;

    const char* inputs = "the layer-input checkpoints ((L+1) * micro-batches * B*T*C; lower -d, -b or -t)";
    const int64_t act = plan_mul(plan_mul(N, c->channels, inputs), 2, inputs);  // one (N, C) bf16 tensor
    m.resident_count = p.embed_count + (int64_t)resident_layers * p.layer_stride;
    m.embeddings = p.embed_count * RESIDENT_BYTES_PER_PARAM;
    m.resident_layer = p.layer_stride * RESIDENT_BYTES_PER_PARAM;
    m.resident_layers = resident_layers * m.resident_layer;
    m.slots = num_slots * p.layer_stride * 2;
    m.grad_staging = stream_gpu_bytes(p.layer_stride, num_slots) - m.slots;
    m.layer_grads = p.layer_stride * 4;
    m.layer_inputs = plan_mul(plan_mul(c->num_layers + 1, max_micro, inputs), act, inputs);
    const char* micro =
        "the per-micro-batch buffers (residual gradients, tokens, losses; lower -d, -b or -t)";
    m.dresid = plan_mul(max_micro, act, micro);
    m.tokens = plan_mul(plan_mul(max_micro, N, micro), 4, micro);
    plan_mul(m.tokens, 3, micro);
    m.scalars = 4 + 8 + (int64_t)kCublasWorkspaceBytes;
    const char* kept =
        "the kept activations (-K layers * micro-batches * one layer's forward activations; lower -K)";
    m.kept_acts = acts_bytes(c, B, T, true);
    m.kept_layer = plan_mul(max_micro, m.kept_acts, kept);
    m.kept = plan_mul(kept_layers, m.kept_layer, kept);
    m.acts = acts_bytes(c, B, T, false);

    const int64_t parts[] = {
        m.embeddings, m.resident_layers, m.slots,  m.grad_staging, m.layer_grads, m.layer_inputs, m.dresid,
        m.tokens,     m.tokens,          m.tokens, m.scalars,      m.kept,        m.acts};
    m.gpu_bytes = 0;
    for (int64_t part : parts)
        m.gpu_bytes = plan_add(m.gpu_bytes, part, "the whole GPU plan (lower -b or -t)");
    return m;
}

// -R / -K worth trying next, from a step's timeline and the GPU memory still free (docs/memory.md): resident
// layers while the forward pass waits for the CPU AdamW (over 2% of the step), then kept ones.
typedef struct {
    int resident, kept;
} Placement;
static Placement suggest_placement(const TimelineSummary* t, int L, Placement now, int64_t spare_bytes,
                                   int64_t resident_layer_bytes, int64_t kept_layer_bytes) {
    Placement next = now;
    const double adam_per_layer = t->adam_layers > 0 ? t->busy_s[TRACK_ADAM] / t->adam_layers : 0.0;
    if (adam_per_layer > 0.0 && t->fwd_wait_s > 0.02 * t->step_s && spare_bytes > 0) {
        int64_t more =
            (int64_t)ceil(t->fwd_wait_s / adam_per_layer - 1e-6);  // a whole number of layers stays one
        more =
            std::min<int64_t>(std::min<int64_t>(more, L - now.resident), spare_bytes / resident_layer_bytes);
        next.resident += (int)more;
        spare_bytes -= more * resident_layer_bytes;
    }
    if (spare_bytes > 0) next.kept += (int)std::min<int64_t>(L - now.kept, spare_bytes / kept_layer_bytes);
    return next;
}

// ----------------------------------------------------------------------------
// Build / free. gpt_build allocates everything (nothing is allocated later); the caller then fills
// g->master (GPT-2 init or an llm.c model file) and calls gpt_weights_ready.

// cudaMalloc that counts, so the trainer reports exactly what it holds on the GPU.
static void* gpu_alloc(GPT* g, int64_t bytes) {
    void* p = NULL;
    const cudaError_t err = cudaMalloc(&p, (size_t)bytes);
    if (err != cudaSuccess)
        die("out of GPU memory allocating %.3f GiB (%s)", bytes / 1073741824.0, cudaGetErrorString(err));
    g->gpu_bytes += bytes;
    return p;
}

// Host arrays for the fp32 master weights and AdamW state: anonymous mmap, page-aligned, zero-filled lazily
// by the kernel, and backed by transparent huge pages where available.
static float* host_alloc_floats(int64_t n) {
    const size_t bytes = (size_t)n * 4;
    void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    madvise(p, bytes, MADV_HUGEPAGE);  // a hint: failure is harmless
    return (float*)p;
}
static void host_free_floats(float* p, int64_t n) {
    if (p) munmap(p, (size_t)n * 4);
}

// ssd: the streamed layers' fp32 state will live in an SsdStore (-sd; the caller attaches it as g->ssd): the
// host arrays then hold the resident prefix only.
static void gpt_build(GPT* g, const GPTConfig* cfg, int B, int T, int max_micro, int num_slots,
                      int resident_layers, int kept_layers, const TrainArgs* args, bool ssd = false) {
    memset(g, 0, sizeof *g);
    g->config = *cfg;
    g->layout = gpt_layout(cfg);
    g->B = B;
    g->T = T;
    g->max_micro = max_micro;
    g->args = *args;
    g->flash = use_flash_attention(cfg);
    const ParamLayout* p = &g->layout;
    const GPTConfig* c = &g->config;
    if (resident_layers < 0 || resident_layers > c->num_layers || kept_layers < 0 ||
        kept_layers > c->num_layers)
        die("internal: %d GPU-resident layers, %d with kept activations, of %d", resident_layers, kept_layers,
            c->num_layers);
    if (cublas_handle)  // matmul.cuh's handles, workspace and algorithm cache are one per process
        die("internal: a second GPT built while one is alive (gpt_free the first)");
    const MemoryPlan plan = gpt_memory_plan(c, B, T, max_micro, num_slots, resident_layers, kept_layers, ssd);
    g->resident_layers = resident_layers;
    g->kept_layers = kept_layers;
    g->resident_count = plan.resident_count;

    // host: not pinned (only the CPU touches them); pages are faulted in by whoever writes first
    g->host_state_count = ssd ? plan.resident_count : p->total;
    g->master = host_alloc_floats(g->host_state_count);
    g->adam_m = host_alloc_floats(g->host_state_count);
    g->adam_v = host_alloc_floats(g->host_state_count);
    if (!g->master || !g->adam_m || !g->adam_v)
        die("out of host memory for the fp32 weights and AdamW state (%.1f GiB)",
            plan.master_adam / 1073741824.0);
    g->opt = new Optimizer();
    g->opt->block_t0 = (double*)calloc((size_t)c->num_layers, sizeof(double));
    g->opt->block_t1 = (double*)calloc((size_t)c->num_layers, sizeof(double));
    g->forward_order = (int*)malloc(sizeof(int) * (size_t)c->num_layers);
    g->backward_order = (int*)malloc(sizeof(int) * (size_t)c->num_layers);
    if (!g->opt->block_t0 || !g->opt->block_t1 || !g->forward_order || !g->backward_order)
        die("out of host memory");
    const int streamed = c->num_layers - resident_layers;
    for (int i = 0; i < streamed; i++) {
        g->forward_order[i] = resident_layers + i;
        g->backward_order[i] = c->num_layers - 1 - i;
    }
    stream_init(&g->stream, c->num_layers, p->layer_stride, p->embed_count, num_slots, optimizer_block_ready,
                g, !ssd);
    if (ssd) {  // the gradients' ring; its thread starts once the store is attached (ssd_attach)
        g->gw = new GradsWriter();
        const int64_t bytes = ssd_round_up(p->layer_stride * 2, SSD_ALIGN) + SSD_ALIGN;
        for (int k = 0; k < GRAD_RING; k++) {
            cudaCheck(cudaMallocHost(&g->gw->raw[k], (size_t)bytes));
            g->gw->buf[k] = (uint16_t*)(((uintptr_t)g->gw->raw[k] + SSD_ALIGN - 1) / SSD_ALIGN * SSD_ALIGN);
        }
        g->gw->written_pass = (int64_t*)calloc((size_t)c->num_layers, sizeof(int64_t));
        if (!g->gw->written_pass) die("out of host memory");
    }
    g->gpu_bytes += plan.slots + plan.grad_staging;  // stream_init's

    // GPU, from the plan: one allocation per field
    cublasCheck(cublasCreate(&cublas_handle));
    cublasCheck(cublasLtCreate(&cublaslt_handle));
    cublas_workspace = gpu_alloc(g, (int64_t)kCublasWorkspaceBytes);  // plan.scalars
    cublas_stream = NULL;
    cublas_use_stream(g->stream.compute);
    const int64_t rc =
        plan.resident_count;  // plan.embeddings + plan.resident_layers, RESIDENT_BYTES_PER_PARAM each:
    g->resident = (bf16*)gpu_alloc(g, rc * 2);
    g->resident_grads = (float*)gpu_alloc(g, rc * 4);
    g->resident_master = (float*)gpu_alloc(g, rc * 4);
    g->resident_m = (float*)gpu_alloc(g, rc * 4);
    g->resident_v = (float*)gpu_alloc(g, rc * 4);
    g->layer_grads = (float*)gpu_alloc(g, plan.layer_grads);
    g->layer_inputs = (bf16*)gpu_alloc(g, plan.layer_inputs);
    g->dresid = (bf16*)gpu_alloc(g, plan.dresid);
    g->tokens_in = (int*)gpu_alloc(g, plan.tokens);
    g->tokens_out = (int*)gpu_alloc(g, plan.tokens);
    g->losses = (float*)gpu_alloc(g, plan.tokens);
    g->loss_dev = (float*)gpu_alloc(g, 4);    // plan.scalars
    g->sumsq_dev = (double*)gpu_alloc(g, 8);  // plan.scalars
    cudaCheck(cudaMallocHost(&g->loss_host, 4));
    cudaCheck(cudaMallocHost(&g->sumsq_host, 8));
    g->acts.bytes = plan.acts;
    g->acts.memory = gpu_alloc(g, plan.acts);
    acts_layout(c, B, T, false, (char*)g->acts.memory, &g->acts);
    if (kept_layers > 0) {
        const int64_t n = (int64_t)kept_layers * max_micro;
        g->kept_memory = gpu_alloc(g, plan.kept);
        g->kept = (LayerActs*)malloc(sizeof(LayerActs) * (size_t)n);
        if (!g->kept) die("out of host memory");
        for (int64_t i = 0; i < n;
             i++) {  // what a kept layer does not keep (redone, scratch) stays in g->acts
            g->kept[i] = g->acts;
            acts_layout(c, B, T, true, (char*)g->kept_memory + i * plan.kept_acts, &g->kept[i]);
        }
    }

    g->opt->thread = std::thread(optimizer_thread_main, g);
}

// The GPU-resident prefix's fp32 weights and AdamW moments: host arrays (g->master, adam_m, adam_v, where
// files are read and written; the prefix is their first resident_count floats) <-> their GPU home.
// Synchronous: only at load and checkpoint time.
static void gpt_resident_state_to_device(GPT* g) {
    const size_t bytes = (size_t)g->resident_count * 4;
    cudaStream_t s = g->stream.compute;
    cudaCheck(cudaMemcpyAsync(g->resident_master, g->master, bytes, cudaMemcpyHostToDevice, s));
    cudaCheck(cudaMemcpyAsync(g->resident_m, g->adam_m, bytes, cudaMemcpyHostToDevice, s));
    cudaCheck(cudaMemcpyAsync(g->resident_v, g->adam_v, bytes, cudaMemcpyHostToDevice, s));
    cudaCheck(cudaMemcpyAsync(g->resident, g->stream.weights_host_bf16, (size_t)g->resident_count * 2,
                              cudaMemcpyHostToDevice, s));
    cudaCheck(cudaStreamSynchronize(s));
}
static void gpt_resident_state_to_host(GPT* g) {
    const size_t bytes = (size_t)g->resident_count * 4;
    cudaStream_t s = g->stream.compute;  // after the last step's GPU AdamW, which runs on this stream
    cudaCheck(cudaMemcpyAsync(g->master, g->resident_master, bytes, cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaMemcpyAsync(g->adam_m, g->resident_m, bytes, cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaMemcpyAsync(g->adam_v, g->resident_v, bytes, cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
}

// The master weights changed outside the optimizer (init, model file, resume): refresh the bf16 copy
// that is streamed (with -sd, the streamed layers' copy was written as they were stored) and the
// GPU-resident prefix (with the host's AdamW moments: zero, or a resumed
// state's), and drop whatever the GPU slots hold.
static void gpt_weights_ready(GPT* g) {
    FAKE_CUDA_HOST_ACCESS(g->stream.weights_host_bf16, g->host_state_count * 2, true,
                          "the host writing the bf16 copy (load)");
    convert_f32_to_bf16(g->master, g->stream.weights_host_bf16, g->host_state_count);  // -sd: the prefix
    gpt_resident_state_to_device(g);
    stream_invalidate(&g->stream);
}

static void gpt_free(GPT* g) {
    {
        std::lock_guard<std::mutex> lock(g->opt->mu);
        g->opt->quit = true;
        g->opt->cv.notify_all();
    }
    g->opt->thread.join();
    if (g->gw) {
        if (g->gw->thread.joinable()) {
            {
                std::lock_guard<std::mutex> lock(g->gw->mu);
                g->gw->quit = true;
                g->gw->cv.notify_all();
            }
            g->gw->thread.join();
        }
        for (int k = 0; k < GRAD_RING; k++) cudaCheck(cudaFreeHost(g->gw->raw[k]));
        free(g->gw->written_pass);
        delete g->gw;
    }
    // the cuBLAS handle first: it is bound to the compute stream, which stream_free destroys
    cublasCheck(cublasDestroy(cublas_handle));
    cublasCheck(cublasLtDestroy(cublaslt_handle));
    lt_algo_cache.clear();  // the answers of that handle
    cudaCheck(cudaFree(cublas_workspace));
    cublas_handle = NULL;
    cublaslt_handle = NULL;
    cublas_workspace = NULL;
    cublas_stream = NULL;
    stream_free(&g->stream);
    cudaCheck(cudaFree(g->resident));
    cudaCheck(cudaFree(g->resident_grads));
    cudaCheck(cudaFree(g->layer_grads));
    cudaCheck(cudaFree(g->resident_master));
    cudaCheck(cudaFree(g->resident_m));
    cudaCheck(cudaFree(g->resident_v));
    cudaCheck(cudaFree(g->layer_inputs));
    cudaCheck(cudaFree(g->dresid));
    cudaCheck(cudaFree(g->tokens_in));
    cudaCheck(cudaFree(g->tokens_out));
    cudaCheck(cudaFree(g->losses));
    cudaCheck(cudaFree(g->loss_dev));
    cudaCheck(cudaFree(g->sumsq_dev));
    cudaCheck(cudaFreeHost(g->loss_host));
    cudaCheck(cudaFreeHost(g->sumsq_host));
    cudaCheck(cudaFree(g->acts.memory));
    if (g->kept_memory) cudaCheck(cudaFree(g->kept_memory));
    free(g->kept);
    host_free_floats(g->master, g->host_state_count);
    host_free_floats(g->adam_m, g->host_state_count);
    host_free_floats(g->adam_v, g->host_state_count);
    if (g->ssd) ssd_store_close(g->ssd);
    free(g->opt->block_t0);
    free(g->opt->block_t1);
    free(g->forward_order);
    free(g->backward_order);
    delete g->opt;
}

// AdamW of the GPU-resident prefix, tensor by tensor (weight decay on matrices only, as adamw.h's
// block updates do), with the t optimizer_submit just took.
static void resident_adamw(GPT* g, float lr, float grad_scale, cudaStream_t s) {
    const ParamLayout* p = &g->layout;
    const AdamWArgs args = {lr,         ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS, g->args.weight_decay,
                            grad_scale, g->adam_t};
    auto update = [&](int64_t o, int64_t n, int is_matrix) {
        AdamWArgs a = args;
        if (!is_matrix) a.weight_decay = 0.0f;
        adamw_gpu(g->resident_master + o, g->resident_grads + o, g->resident_m + o, g->resident_v + o,
                  g->resident + o, n, &a, s);
    };
    for (int t = 0; t < NUM_EMBED_TENSORS; t++)
        update(p->embed_offset[t], p->embed_size[t], embed_tensor_is_matrix[t]);
    for (int l = 0; l < g->resident_layers; l++)
        for (int t = 0; t < NUM_LAYER_TENSORS; t++)
            update(gpt_layer_offset(p, l) + p->layer_offset[t], p->layer_size[t], layer_tensor_is_matrix[t]);
}

// ----------------------------------------------------------------------------
// The training step: forward (layer-outer), loss, backward with recompute, gradient hand-off, update.

// Layer l's weights for this pass: in the GPU-resident prefix, or in the stream slot it waits for.
static const bf16* layer_acquire(GPT* g, int l) {
    return l < g->resident_layers ? resident_layer(g, l) : stream_wait_layer(&g->stream, l);
}
// Every kernel that reads layer l's weights is queued: a streamed layer's slot may be reused once they ran.
static void layer_release(GPT* g, int l) {
    if (l >= g->resident_layers) stream_release_layer(&g->stream, l);
}

// Layer l's activations for micro-batch mb, before its backward pass. A kept layer (-K) redoes the cheap
// part. The last layer's last micro-batch still has them from the forward pass. Any other is recomputed.
static void restore_activations(GPT* g, const bf16* w, int l, int mb, int n_micro, cudaStream_t s) {
    LayerActs* a = layer_acts(g, l, mb);
    if (layer_kept(g, l)) layer_redo_cheap_part(g, w, layer_input(g, l, mb), a, s);
    else if (l < g->config.num_layers - 1 || mb < n_micro - 1)
        layer_forward(g, w, layer_input(g, l, mb), NULL, a, s);
}

// Where layer l's gradients accumulate: the streamed layers' one buffer (zeroed here), or the layer's place
// in resident_grads (zeroed with the embeddings' before the head).
static float* layer_grads_begin(GPT* g, int l, cudaStream_t s) {
    if (l < g->resident_layers) return g->resident_grads + gpt_layer_offset(&g->layout, l);
    cudaCheck(cudaMemsetAsync(g->layer_grads, 0, (size_t)(g->layout.layer_stride * 4), s));
    return g->layer_grads;
}
// A streamed layer's gradients, as bf16, into a staging buffer for the host; their squares go to the norm.
static void layer_grads_end(GPT* g, int l, cudaStream_t s) {
    if (l < g->resident_layers) return;
    grads_to_bf16_sumsq(stream_grad_staging(&g->stream), g->layer_grads, g->layout.layer_stride, g->sumsq_dev,
                        s);
}

// The step's tokens to the GPU, and each micro-batch's embeddings: the input of layer 0.
static void embeddings_forward(GPT* g, const int* inputs, const int* targets, int n_micro, cudaStream_t s) {
    const ParamLayout* p = &g->layout;
    const int64_t N = (int64_t)g->B * g->T;
    cudaCheck(cudaMemcpyAsync(g->tokens_in, inputs, (size_t)(n_micro * N * 4), cudaMemcpyHostToDevice, s));
    cudaCheck(cudaMemcpyAsync(g->tokens_out, targets, (size_t)(n_micro * N * 4), cudaMemcpyHostToDevice, s));
    const bf16 *wte = g->resident + p->embed_offset[WTE], *wpe = g->resident + p->embed_offset[WPE];
    for (int mb = 0; mb < n_micro; mb++)
        embedding_forward(layer_input(g, 0, mb), g->tokens_in + mb * N, wte, wpe, N, g->T, g->config.channels,
                          s);
}

// The loss of every micro-batch and its backward through lm_head and the final LayerNorm (dlogits scaled to
// the step's mean). Zeroes the resident prefix's gradients and the norm first: this is where they start.
static void head_forward_backward(GPT* g, int n_micro, cudaStream_t s) {
    const int L = g->config.num_layers;
    const int64_t N = (int64_t)g->B * g->T;
    cudaCheck(cudaMemsetAsync(g->resident_grads, 0, (size_t)(g->resident_count * 4), s));
    cudaCheck(cudaMemsetAsync(g->sumsq_dev, 0, 8, s));
    ScopedSpan span(g->timeline, TRACK_COMPUTE, "head", -1, s);
    for (int mb = 0; mb < n_micro; mb++) {
        head_forward(g, layer_input(g, L, mb), g->tokens_out + mb * N, g->losses + mb * N,
                     1.0f / (float)(N * n_micro), s);
        head_backward(g, layer_input(g, L, mb), dresid_at(g, mb), s);
    }
    mean_loss(g->loss_dev, g->losses, n_micro * N, s);
}

// The embeddings' backward, then the resident prefix's squared norm (its gradients stay on the GPU).
static void embeddings_backward(GPT* g, int n_micro, cudaStream_t s) {
    const ParamLayout* p = &g->layout;
    const int64_t N = (int64_t)g->B * g->T;
    ScopedSpan span(g->timeline, TRACK_COMPUTE, "embed bwd", -1, s);
    for (int mb = 0; mb < n_micro; mb++)
        embedding_backward(g->resident_grads + p->embed_offset[WTE], g->resident_grads + p->embed_offset[WPE],
                           dresid_at(g, mb), g->tokens_in + mb * N, N, g->T, g->config.channels, s);
    grads_to_bf16_sumsq(NULL, g->resident_grads, g->resident_count, g->sumsq_dev, s);
}

// Waits for the step's work on stream s: the mean loss, and the gradient norm into g->last_norm.
static float read_loss_and_norm(GPT* g, cudaStream_t s) {
    cudaCheck(cudaMemcpyAsync(g->loss_host, g->loss_dev, 4, cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaMemcpyAsync(g->sumsq_host, g->sumsq_dev, 8, cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
    g->last_norm = sqrt(*g->sumsq_host);
    return *g->loss_host;
}

// Forward and backward of one step: inputs / targets are n_micro x (B*T) tokens. Returns the mean loss;
// g->last_norm gets the gradient norm. Updates nothing (gpt_update does).
static float gpt_forward_backward(GPT* g, const int* inputs, const int* targets, int n_micro) {
    const int L = g->config.num_layers, R = g->resident_layers;
    cudaStream_t s = g->stream.compute;
    Timeline* tl = g->timeline;
    if (n_micro < 1 || n_micro > g->max_micro) die("internal: %d micro-batches", n_micro);

    // 1. tokens and embeddings (the resident prefix is up to date: the last GPU AdamW ran on this stream)
    embeddings_forward(g, inputs, targets, n_micro, s);

    // 2. forward: each layer's weights arrive once and serve every micro-batch (resident layers first)
    stream_begin_pass(&g->stream, g->forward_order, L - R);
    for (int l = 0; l < L; l++) {
        const bf16* w = layer_acquire(g, l);
        {
            ScopedSpan span(tl, TRACK_COMPUTE, "fwd", l, s);
            for (int mb = 0; mb < n_micro; mb++)
                layer_forward(g, w, layer_input(g, l, mb), layer_input(g, l + 1, mb), layer_acts(g, l, mb),
                              s);
        }
        layer_release(g, l);
    }

    // 3. loss, and its backward through lm_head and the final LayerNorm
    head_forward_backward(g, n_micro, s);

    // 4. backward, last layer first, last micro-batch first; a streamed layer's gradients go to the host
    if (g->gw) {  // -sd: this pass's gradients are a new generation of the grads file
        std::lock_guard<std::mutex> lock(g->gw->mu);
        g->gw->pass++;
    }
    stream_begin_pass(&g->stream, g->backward_order, L - R);
    for (int l = L - 1; l >= 0; l--) {
        const bf16* w = layer_acquire(g, l);
        {
            ScopedSpan span(tl, TRACK_COMPUTE, "bwd", l, s);
            float* grads = layer_grads_begin(g, l, s);
            for (int mb = n_micro - 1; mb >= 0; mb--) {
                restore_activations(g, w, l, mb, n_micro, s);
                layer_backward(g, w, grads, layer_input(g, l, mb), dresid_at(g, mb), layer_acts(g, l, mb), s);
            }
            layer_release(g, l);
            layer_grads_end(g, l, s);
        }
        if (l >= R) send_layer_grads(g, l);
    }
    embeddings_backward(g, n_micro, s);

    // 5. the one synchronization of the step: loss and global norm
    return read_loss_and_norm(g, s);
}

// 6. AdamW: the streamed layers on the CPU thread (the next forward pass takes each one once it is done), the
// GPU-resident prefix here on the compute stream, before the next step's kernels.
static void gpt_update(GPT* g, float lr) {
    const float grad_scale = clip_scale((float)g->last_norm, g->args.grad_clip);
    stream_invalidate(&g->stream);
    optimizer_submit(g, lr, grad_scale);
    ScopedSpan span(g->timeline, TRACK_COMPUTE, "resident adamw", -1, g->stream.compute);
    resident_adamw(g, lr, grad_scale, g->stream.compute);
}

// -Y 1: the previous step's CPU AdamW round ran during this step's forward pass; it joins this step's
// timeline (no round when -sl / -sg skipped that step's update).
static void timeline_add_adamw_round(GPT* g) {
    optimizer_wait_all(g);  // already done: the forward pass waited for every block
    if (g->opt->rounds_done == 0 || g->skipped[0]) return;
    for (int l = g->resident_layers; l < g->config.num_layers; l++)
        timeline_host_span(g->timeline, TRACK_ADAM, "adamw", l, g->opt->block_t0[l], g->opt->block_t1[l]);
}

// -Y 1 with -sd: the disk's busy intervals from the step's origin until now (the previous step's round during
// the forward pass, this step's gradient writes), reads and writes on a track each (ssd.h's busy log).
static void timeline_add_disk(GPT* g) {
    SsdBusySpan spans[TIMELINE_DISK_SPANS];
    for (int write = 0; write <= 1; write++) {
        const int n = ssd_io_busy_spans(ssd_store_io(g->ssd), write, g->timeline->origin_host, spans,
                                        TIMELINE_DISK_SPANS);
        for (int i = 0; i < n; i++)
            timeline_host_span(g->timeline, write ? TRACK_DISK_WRITE : TRACK_DISK_READ,
                               write ? "write" : "read", -1, spans[i].t0, spans[i].t1);
    }
}

// One step of the training loop, as llm.c's: forward and backward, then the update unless the step diverged
// (the caller stops) or -sl / -sg find it an outlier (g->skipped says why). Returns the mean loss.
static float gpt_step(GPT* g, const int* inputs, const int* targets, int n_micro, float lr) {
    timeline_start_step(g->timeline, g->stream.compute);
    const float loss = gpt_forward_backward(g, inputs, targets, n_micro);
    if (g->timeline) timeline_add_adamw_round(g);
    if (g->timeline && g->ssd) timeline_add_disk(g);
    char diverged[96];
    if (training_diverged(loss, g->last_norm, g->config.vocab_size, diverged, sizeof diverged)) return loss;
    g->step++;
    if (outlier_skip(&g->args, &g->loss_window, &g->norm_window, loss, g->last_norm, g->skipped,
                     sizeof g->skipped))
        return loss;  // the weights, the slots and the AdamW state stay those of the last step
    gpt_update(g, lr);
    return loss;
}

// Forward only, on micro-batch slot 0: validation loss (targets given) or logits for sampling (targets NULL).
// Returns the mean loss (0 without targets); the logits stay in the workspace.
static float gpt_forward_eval(GPT* g, const int* inputs, const int* targets) {
    const GPTConfig* c = &g->config;
    const int L = c->num_layers, C = c->channels, T = g->T;
    const int64_t N = (int64_t)g->B * T;
    cudaStream_t s = g->stream.compute;
    cudaCheck(cudaMemcpyAsync(g->tokens_in, inputs, (size_t)(N * 4), cudaMemcpyHostToDevice, s));
    if (targets)
        cudaCheck(cudaMemcpyAsync(g->tokens_out, targets, (size_t)(N * 4), cudaMemcpyHostToDevice, s));
    embedding_forward(layer_input(g, 0, 0), g->tokens_in, g->resident + g->layout.embed_offset[WTE],
                      g->resident + g->layout.embed_offset[WPE], N, T, C, s);
    const int R = g->resident_layers;
    stream_begin_pass(&g->stream, g->forward_order, L - R);
    for (int l = 0; l < L; l++) {
        layer_forward(g, layer_acquire(g, l), layer_input(g, l, 0), layer_input(g, l + 1, 0), &g->acts, s);
        layer_release(g, l);
    }
    head_forward(g, layer_input(g, L, 0), targets ? g->tokens_out : NULL, g->losses, 0.0f, s);
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
    const bf16* src = g->acts.p[ACT_LOGITS] + ((int64_t)b * g->T + t) * Vp;
    cudaCheck(cudaMemcpyAsync(tmp, src, (size_t)Vp * 2, cudaMemcpyDeviceToHost, g->stream.compute));
    cudaCheck(cudaStreamSynchronize(g->stream.compute));
    for (int i = 0; i < Vp; i++) out[i] = bf16_to_float(tmp[i]);
    free(tmp);
}

// ----------------------------------------------------------------------------
// Checkpoints (the files and their checks: checkpoint.h). The state lives partly on the GPU (the resident
// prefix) and is being updated by the optimizer thread: it is gathered first.

// StreamedState's read_layer with -sd: layer l's fp32 weights from the store (its newest state).
static int ssd_read_layer_params(void* ctx, int l, float* params, char* err, size_t errlen) {
    GPT* g = (GPT*)ctx;
    return ssd_store_read_layer(g->ssd, l - g->resident_layers, params, NULL, NULL, NULL, err, errlen) == 0;
}

// With -sd the store's state becomes the checkpoint of this step first (ssd_store_checkpoint: an fsync and
// its manifest), then the state file says so and model_S.bin is read from the store layer by layer.
static void save_checkpoint(GPT* g, const char* dir, const DataLoaderState* data_state) {
    optimizer_wait_all(g);          // the master weights and m, v of the last step must be complete
    gpt_resident_state_to_host(g);  // the GPU-resident prefix of them lives on the GPU
    if (!g->ssd) {
        checkpoint_save(dir, g->step, g->adam_t, &g->config, g->master, g->adam_m, g->adam_v, &g->args, g->B,
                        g->T, data_state);
        return;
    }
    char err[1024];
    if (ssd_store_checkpoint(g->ssd, g->step, err, sizeof err) != 0)
        die_disk("the SSD tier's checkpoint", err);
    const StreamedState ss = {g->host_state_count, g->step, g->resident_layers, ssd_read_layer_params, g};
    checkpoint_save(dir, g->step, g->adam_t, &g->config, g->master, g->adam_m, g->adam_v, &g->args, g->B,
                    g->T, data_state, &ss);
}

// AdamW state, step and data position of a checkpoint (its model file is loaded separately, into g->master).
// With -sd the file holds the prefix's m, v only (the store holds the rest).
static void load_state(GPT* g, const char* path, DataLoaderState* data_state) {
    state_file_read(path, g->layout.total, g->adam_m, g->adam_v, data_state, &g->step, &g->adam_t,
                    g->ssd ? &g->host_state_count : NULL);
    gpt_resident_state_to_device(g);  // the GPU-resident prefix's weights and moments live on the GPU
}

// ----------------------------------------------------------------------------
// Sampling: generate from <|endoftext|> with full forward passes (each one streams the model once).

static void gpt_sample(GPT* g, const Tokenizer* tok, int gen_tokens, uint64_t* rng) {
    const int64_t N = (int64_t)g->B * g->T;
    const int V = g->config.vocab_size, eot = 50256 < V ? 50256 : V - 1;
    int* tokens = (int*)malloc(sizeof(int) * N);
    float* logits = (float*)malloc(sizeof(float) * g->config.padded_vocab_size);
    for (int64_t i = 0; i < N; i++) tokens[i] = eot;
    printf("generating:\n---\n");
    for (int t = 1; t < gen_tokens + 1 && t < g->T; t++) {
        gpt_forward_eval(g, tokens, NULL);
        gpt_copy_logits(g, 0, t - 1, logits);
        int next = sample_softmax(logits, V, random_f32(rng));
        tokens[t] = next;
        print_sample_token(tok, next);
        fflush(stdout);
    }
    printf("\n---\n");
    free(tokens);
    free(logits);
}

// Model FLOPs of one step, counted as PyTorch peers do: 6 * params * tokens + causal attention (no
// recompute).
static double step_flops(const GPT* g, int64_t tokens) {
    const GPTConfig* c = &g->config;
    return 6.0 * (double)g->layout.total * tokens + 6.0 * c->num_layers * (double)c->channels * g->T * tokens;
}

// The MFU denominator: the GPU's dense bf16 tensor-core peak, found by a whole word of its name; the first
// match wins, so the H100 variants come first. 0 (no MFU) for a GPU not in the table. Sources:
// docs/memory.md.
static double gpu_bf16_peak_flops(const char* device_name, const char** label) {
    static const struct {
        const char* word;
        double flops;
        const char* label;
    } peaks[] = {{"GH200", 989.4e12, "GH200 bf16 dense"},
                 {"H200", 989.4e12, "H200 bf16 dense"},
                 {"H100 PCIe", 756e12, "H100 PCIe bf16 dense"},
                 {"H100 NVL", 835e12, "H100 NVL bf16 dense"},
                 {"H100", 989.4e12, "H100 SXM bf16 dense"},
                 {"B200", 2250e12, "B200 bf16 dense"},
                 {"A100", 312e12, "A100 bf16 dense"},
                 {"A10", 125e12, "A10 bf16 dense, approx."},
                 {"L40S", 362e12, "L40S bf16 dense"},
                 {"L4", 121e12, "L4 bf16 dense"},
                 {"RTX 4090", 165.2e12, "RTX 4090 bf16 dense, fp32 accumulation"}};
    for (const auto& p : peaks) {
        // a whole word: "A10" is not "A100", "L4" is not "L40S"
        const size_t n = strlen(p.word);
        for (const char* at = strstr(device_name, p.word); at; at = strstr(at + 1, p.word)) {
            const bool starts = at == device_name || at[-1] == ' ' || at[-1] == '-';
            const bool ends = at[n] == '\0' || at[n] == ' ' || at[n] == '-';
            if (starts && ends) {
                if (label) *label = p.label;
                return p.flops;
            }
        }
    }
    if (label) *label = NULL;
    return 0.0;
}

// ----------------------------------------------------------------------------
// main: flags, fit check, config table, the training loop (or the benchmark loop with -B).

#ifndef TESTING

#define INIT_SEED      1337ull     // weights of a model made from a spec (the CPU trainer uses the same)
#define SHUFFLE_SEED   42ull       // order of the train batches
#define SAMPLE_SEED    1234567ull  // sampling RNG
#define SYNTHETIC_SEED 7ull        // tokens of the benchmark mode
static const char* kTokenizerPath = "gpt2_tokenizer.bin";

// The flags only this trainer has (the shared ones are in args.h).
typedef struct {
    int num_slots;     // -S  GPU weight slots (>= 2)
    int bench_steps;   // -B  > 0: benchmark mode, that many timed steps on synthetic tokens
    int bench_warmup;  // -W  untimed steps before them
    int timeline;      // -Y  1: per-step timeline (and DIR/trace.json with -o)
    int adam_threads;  // -A  OpenMP threads of the CPU AdamW, 0 = all cores but one
    int model_given;   // -e was on the command line (with -y 1 it must then match the checkpoint)
    int resident;      // -R  first layers kept on the GPU with their AdamW state: 0 = none, -1 = all that fit
    int kept;          // -K  last layers that keep their activations: 0 = none, -1 = all that fit
    int flash;         // -F  1: fused attention kernels where the head size allows, 0: cuBLAS + softmax
    int epilogues;     // -G  1: bias / GELU fused into the GEMMs (cuBLASLt epilogues), 0: separate kernels
    int plan_only;     // -P  1: print the memory this run would need and exit (no GPU, no data needed)
    float host_gib;    // -M  host memory the fit check counts on, GiB; 0 = MemAvailable
    float gpu_gib;     // -V  GPU memory this run may use, GiB; 0 = all that is free on the device
    const char* ssd_dir;  // -sd the streamed layers' fp32 weights and AdamW m, v in an SsdStore there; NULL
} GpuArgs;

// What the host-memory fit check counts on, in bytes: -M where given (a VM whose memory grows as it is used),
// else MemAvailable (-1: unknown, no check).
static int64_t host_memory_to_count_on(const GpuArgs* ga) {
    return ga->host_gib > 0 ? (int64_t)((double)ga->host_gib * 1073741824.0) : host_available_bytes();
}

// GPU memory beyond the plan: the fit check leaves gpu_reserve_bytes free, -R -1 and -K -1 gpu_margin_bytes
// more, for what the plan cannot count (docs/memory.md). The budget: the free memory, or -V where
// that is less.
static const int64_t gpu_reserve_bytes = (int64_t)256 << 20;
static const int64_t gpu_margin_bytes = (int64_t)1 << 30;
static int64_t gpu_memory_budget(const GpuArgs* ga, int64_t gpu_free) {
    const int64_t given = (int64_t)((double)ga->gpu_gib * 1073741824.0);
    return ga->gpu_gib > 0 && given < gpu_free ? given : gpu_free;
}
// -R -1, then -K -1: as many layers as fit in the budget after the rest of the plan (resident ones first:
// docs/memory.md). Updates *resident / *kept and returns the plan with them.
static MemoryPlan place_layers(const GPTConfig* c, int B, int T, int n_micro, int slots, const GpuArgs* ga,
                               int64_t budget, int* resident, int* kept) {
    MemoryPlan plan = gpt_memory_plan(c, B, T, n_micro, slots, *resident, *kept, ga->ssd_dir != NULL);
    auto layers_that_fit = [&](int64_t per_layer) {
        const int64_t spare = budget - gpu_reserve_bytes - gpu_margin_bytes - plan.gpu_bytes;
        return spare > 0 ? (int)std::min<int64_t>(spare / per_layer, c->num_layers) : 0;
    };
    if (ga->resident < 0) {
        *resident = layers_that_fit(plan.resident_layer);
        plan = gpt_memory_plan(c, B, T, n_micro, slots, *resident, *kept, ga->ssd_dir != NULL);
    }
    if (ga->kept < 0) {
        *kept = layers_that_fit(plan.kept_layer);
        plan = gpt_memory_plan(c, B, T, n_micro, slots, *resident, *kept, ga->ssd_dir != NULL);
    }
    return plan;
}

static void gpu_train_defaults(TrainArgs* a, GpuArgs* ga) {
    train_args_defaults(a);
    a->model = "d12";  // GPT-2 124M shape, from a random init
    a->B = 8;
    a->T = 1024;
    a->lr = 6e-4f;
    a->warmup_steps = 10;
    a->final_lr_frac = 0.1f;
    a->max_steps = 70;  // about two epochs of the shipped train shard at 8K tokens per step
    a->val_every = 10;
    a->val_max_batches =
        4;  // a cap for big val sets: the shipped val shard (32,768 tokens) holds only 3 batches of
            // B*T = 8192 (the last, partial one is never read), so it is validated whole
    ga->num_slots = 2;
    ga->bench_steps = 0;
    ga->bench_warmup = 2;
    ga->timeline = 0;
    ga->adam_threads = 0;
    ga->model_given = 0;
    ga->resident = 0;
    ga->kept = 0;
    ga->flash = 1;
    ga->epilogues = 1;
    ga->plan_only = 0;
    ga->host_gib = 0;
    ga->gpu_gib = 0;
    ga->ssd_dir = NULL;
}

static void gpu_usage(const TrainArgs* d, const GpuArgs* gd) {
    printf(
        "usage: ./train_gpt [flags]   (no flags: train GPT-2 small (d12) on the shipped tinyshakespeare "
        "shards)\n");
    train_usage(stdout, d);
    printf(
        "flags of the streaming trainer:\n"
        "  -S <int>    GPU weight slots, 2..%d (default %d)\n"
        "  -B <int>    benchmark mode: N timed steps on synthetic tokens, then a RESULT json line (default "
        "off)\n"
        "  -W <int>    benchmark warm-up steps, not timed (default %d)\n"
        "  -Y <0|1>    per-step timeline: busy time per stream and of the CPU AdamW, GPU idle; with -o also\n"
        "              DIR/trace.json, a Chrome trace of the last step; at the end, the -R / -K that the\n"
        "              last step's timeline suggests (default %d)\n"
        "  -A <int>    CPU AdamW threads, 0 = all cores but one (default %d)\n"
        "  -R <int>    keep the first N layers on the GPU with their fp32 weights and AdamW state (updated "
        "there,\n"
        "              never copied): uses GPU memory the streaming leaves free to shorten the CPU AdamW;\n"
        "              0 = stream every layer, -1 = as many as fit (default %d)\n"
        "  -K <int>    keep the last N layers' activations from the forward to the backward pass, which "
        "then\n"
        "              skips their recompute (a quarter of their compute); costs about 18*C*tokens-per-step\n"
        "              bytes per layer: 0 = recompute every layer, -1 = as many as fit after -R (default "
        "%d)\n"
        "  -F <0|1>    attention: 1 = fused tensor-core kernels (head sizes 32, 64, 80, 96, 128; others use\n"
        "              the cuBLAS path), 0 = cuBLAS GEMMs + softmax over stored (T x T) scores (default %d)\n"
        "  -G <0|1>    1 = the bias, residual and GELU passes after the GEMMs run as cuBLASLt epilogues,\n"
        "              0 = as separate kernels (default %d)\n"
        "  -P <0|1>    print the host and GPU memory this run would need, part by part, and exit: a "
        "capacity\n"
        "              check that needs no GPU and no data (default %d)\n"
        "  -M <GiB>    host memory the fit check may count on, 0 = MemAvailable of /proc/meminfo: for "
        "machines\n"
        "              whose memory grows as it is used (VMs with memory hotplug) (default %g)\n"
        "  -V <GiB>    GPU memory this run may use (its fit check, -R -1, -K -1; with -P 1 they are planned\n"
        "              for it), 0 = all that is free: e.g. -V 79 places layers as on an H100 80GB (default "
        "%g)\n"
        "  -sd <dir>   SSD tier: the streamed layers' fp32 weights and AdamW m, v live in files under dir "
        "(an\n"
        "              NVMe drive; O_DIRECT over io_uring), and their bf16 gradients too: 14 bytes per\n"
        "              parameter less RAM, 26 on disk (two generations: checkpoints copy nothing). Measures "
        "the\n"
        "              disk at start. Resume (-y 1) with the same dir and -R (default off)\n",
        MAX_SLOTS, gd->num_slots, gd->bench_warmup, gd->timeline, gd->adam_threads, gd->resident, gd->kept,
        gd->flash, gd->epilogues, gd->plan_only, gd->host_gib, gd->gpu_gib);
}

// Parses argv: our flags first, then the shared ones. Exits on any error, prints usage on -h.
static void parse_args(int argc, char** argv, TrainArgs* a, GpuArgs* ga) {
    TrainArgs d;
    GpuArgs gd;
    gpu_train_defaults(&d, &gd);
    *a = d;
    *ga = gd;
    char err[512];
    for (int i = 1; i < argc; i += 2) {
        const char* flag = argv[i];
        const int help = help_flag(argc, argv, i, err, sizeof err);
        if (help < 0) die("%s", err);
        if (help) {
            gpu_usage(&d, &gd);
            exit(0);
        }
        if (i + 1 >= argc) die("flag %s needs a value (run ./train_gpt -h for the flags)", flag);
        const char* value = argv[i + 1];
        int64_t v = 0;
        int ok = 1;
        if (strcmp(flag, "-S") == 0) {
            ok = parse_int_in(flag, value, 2, MAX_SLOTS, &v, err, sizeof err);
            ga->num_slots = (int)v;
        } else if (strcmp(flag, "-B") == 0) {
            ok = parse_int_in(flag, value, 0, 1000000, &v, err, sizeof err);
            ga->bench_steps = (int)v;
        } else if (strcmp(flag, "-W") == 0) {
            ok = parse_int_in(flag, value, 0, 1000000, &v, err, sizeof err);
            ga->bench_warmup = (int)v;
        } else if (strcmp(flag, "-Y") == 0) {
            ok = parse_int_in(flag, value, 0, 1, &v, err, sizeof err);
            ga->timeline = (int)v;
        } else if (strcmp(flag, "-A") == 0) {
            ok = parse_int_in(flag, value, 0, 4096, &v, err, sizeof err);
            ga->adam_threads = (int)v;
        } else if (strcmp(flag, "-R") == 0) {
            ok = parse_int_in(flag, value, -1, 1 << 20, &v, err, sizeof err);
            ga->resident = (int)v;
        } else if (strcmp(flag, "-K") == 0) {
            ok = parse_int_in(flag, value, -1, 1 << 20, &v, err, sizeof err);
            ga->kept = (int)v;
        } else if (strcmp(flag, "-F") == 0) {
            ok = parse_int_in(flag, value, 0, 1, &v, err, sizeof err);
            ga->flash = (int)v;
        } else if (strcmp(flag, "-P") == 0) {
            ok = parse_int_in(flag, value, 0, 1, &v, err, sizeof err);
            ga->plan_only = (int)v;
        } else if (strcmp(flag, "-G") == 0) {
            ok = parse_int_in(flag, value, 0, 1, &v, err, sizeof err);
            ga->epilogues = (int)v;
        } else if (strcmp(flag, "-M") == 0)
            ok = parse_float_in(flag, value, 0.0, 1 << 24, &ga->host_gib, err, sizeof err);
        else if (strcmp(flag, "-V") == 0)
            ok = parse_float_in(flag, value, 0.0, 1 << 20, &ga->gpu_gib, err, sizeof err);
        else if (strcmp(flag, "-sd") == 0) {
            if (!value[0]) die("-sd needs a directory (run ./train_gpt -h for the flags)");
            ga->ssd_dir = value;
        } else {
            if (strcmp(flag, "-e") == 0) ga->model_given = 1;
            const int r = parse_train_arg(a, flag, value, err, sizeof err);
            if (r < 0) {
                unknown_flag_error(flag, err, sizeof err);
                die("%s (run ./train_gpt -h for the flags)", err);
            }
            ok = r;
        }
        if (!ok) die("%s (run ./train_gpt -h for the flags)", err);
    }
    if (!train_args_check(a, err, sizeof err)) die("%s (run ./train_gpt -h for the flags)", err);
}

// Model config from -e: a spec (random init), an llm.c model file (its header) or a Hugging
// Face checkpoint (hf.h).
static int resolve_model(const char* spec, GPTConfig* cfg) {
    char err[4352];
    const int kind = parse_model_spec(spec, cfg, err, sizeof err);
    if (kind == 0) die("%s", err);
    if (kind == 2 && !gpt_read_header(spec, cfg, err, sizeof err)) die("%s", err);
    return kind;
}

// Free bytes of the filesystem holding dir (made if missing), or -1 with errno set.
static int64_t dir_free_bytes(const char* dir) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return -1;
    struct statvfs sv;
    if (statvfs(dir, &sv) != 0) return -1;
    return (int64_t)sv.f_bavail * (int64_t)sv.f_frsize;
}

// -P 1: what gpt_build would allocate for this run, part by part, and whether the host RAM here holds it.
static void print_memory_plan(const GPTConfig* c, int B, int T, int n_micro, int slots, int resident,
                              int kept, const GpuArgs* ga, MemoryPlan plan, bool no_gpu_here) {
    const double GiB = 1073741824.0;
    const ParamLayout p = gpt_layout(c);
    const int64_t host_avail = host_memory_to_count_on(ga);
    const MemoryPlan& m = plan;
    printf("memory plan: L%d C%d NH%d, %.3f B parameters, %d x %d tokens x %d micro-batches per step\n",
           c->num_layers, c->channels, c->num_heads, gpt_num_real_params(c, &p) / 1e9, B, T, n_micro);
    printf("attention: %s%s\n",
           use_flash_attention(c) ? "fused kernels (no T x T scores stored)"
                                  : "cuBLAS + softmax (T x T scores stored in the workspace)",
           no_gpu_here ? "; no GPU here: planned for an sm_90 one" : "");
    printf(
        "host %9.2f GiB: fp32 master weights and AdamW m, v %.2f%s; pinned bf16 weights and gradients %.2f",
        m.host_bytes / GiB, m.master_adam / GiB, ga->ssd_dir ? " (embeddings and -R layers: -sd)" : "",
        m.pinned / GiB);
    if (ga->ssd_dir) printf("; the SSD tier's ring %.2f", m.ssd_ring / GiB);
    if (host_avail >= 0)
        printf(" (%s: %.1f GiB %s)", plan.host_bytes <= host_avail ? "fits" : "does NOT fit",
               host_avail / GiB, ga->host_gib > 0 ? "given by -M" : "available here");
    printf(
        "\nGPU  %9.2f GiB: layer-input checkpoints %.2f; %d weight slots %.2f; embeddings with their AdamW "
        "state %.2f; "
        "%d resident layers %.2f; %d layers' kept activations %.2f; one layer's workspace %.2f and fp32 "
        "gradient %.2f; "
        "the rest %.2f",
        m.gpu_bytes / GiB, m.layer_inputs / GiB, slots, (m.slots + m.grad_staging) / GiB, m.embeddings / GiB,
        resident, m.resident_layers / GiB, kept, m.kept / GiB, m.acts / GiB, m.layer_grads / GiB,
        (m.dresid + 3 * m.tokens + m.scalars) / GiB);
    if (ga->gpu_gib > 0)  // the fit check of a run: the plan and the reserve within the budget
        printf(
            " (%s: %.1f GiB given by -V)",
            plan.gpu_bytes + gpu_reserve_bytes <= gpu_memory_budget(ga, INT64_MAX) ? "fits" : "does NOT fit",
            ga->gpu_gib);
    if (ga->ssd_dir)
        printf(
            "\ndisk %9.2f GiB in %s: two generations of the streamed layers' fp32 weights, AdamW m and v, "
            "and their "
            "bf16 gradients; "
            "per step %.2f GiB read, %.2f GiB written",
            m.ssd_disk / GiB, ga->ssd_dir, m.ssd_read_per_step / GiB, m.ssd_write_per_step / GiB);
    if (ga->ssd_dir) {
        const int64_t avail = dir_free_bytes(ga->ssd_dir);
        if (avail >= 0)
            printf(" (%s: %.1f GiB free there)", m.ssd_disk <= avail ? "fits" : "does NOT fit", avail / GiB);
    }
    printf("\neach further -R layer %.2f GiB, each further -K layer %.2f GiB%s\n", m.resident_layer / GiB,
           m.kept_layer / GiB,
           (ga->resident < 0 || ga->kept < 0) && ga->gpu_gib <= 0
               ? " (-R -1 / -K -1 are chosen on the GPU from its free memory: 0 here; -V GiB plans them for "
                 "that much)"
               : "");
}

// Fills n_micro micro-batches from the loader into contiguous host arrays.
static void next_step_batches(DataLoader* dl, int n_micro, int* inputs, int* targets, int V) {
    const int64_t N = (int64_t)dl->B * dl->T;
    for (int mb = 0; mb < n_micro; mb++) {
        if (!dataloader_next_batch(dl)) die("%s", dl->err);
        char err[600];
        if (!dataloader_check_tokens(dl, V, err, sizeof err)) die("train data: %s", err);
        memcpy(inputs + mb * N, dl->inputs, (size_t)N * sizeof(int));
        memcpy(targets + mb * N, dl->targets, (size_t)N * sizeof(int));
    }
}

static float validation_loss(GPT* g, DataLoader* val, int64_t batches) {
    dataloader_reset(val);
    double sum = 0.0;
    for (int64_t i = 0; i < batches; i++) {
        if (!dataloader_next_batch(val)) die("%s", val->err);
        char err[600];
        if (!dataloader_check_tokens(val, g->config.vocab_size, err, sizeof err)) die("val data: %s", err);
        sum += gpt_forward_eval(g, val->inputs, val->targets);
    }
    return (float)(sum / (double)batches);
}

static void print_timeline(GPT* g, const TimelineSummary& t, const char* output_dir) {
    printf(
        "TIMELINE {\"step_s\": %.4f, \"compute_busy_s\": %.4f, \"h2d_busy_s\": %.4f, \"d2h_busy_s\": %.4f, "
        "\"adam_busy_s\": %.4f, \"gpu_idle_s\": %.4f, \"fwd_wait_s\": %.4f, \"bwd_wait_s\": %.4f",
        t.step_s, t.busy_s[TRACK_COMPUTE], t.busy_s[TRACK_H2D], t.busy_s[TRACK_D2H], t.busy_s[TRACK_ADAM],
        t.gpu_idle_s, t.fwd_wait_s, t.bwd_wait_s);
    if (g->ssd)  // -sd: the disk's busy time
        printf(", \"disk_read_busy_s\": %.4f, \"disk_write_busy_s\": %.4f", t.busy_s[TRACK_DISK_READ],
               t.busy_s[TRACK_DISK_WRITE]);
    printf("}\n");
    if (output_dir) {
        char path[4200];
        snprintf(path, sizeof path, "%s/trace.json", output_dir);
        if (!timeline_write_chrome_trace(g->timeline, path))
            fprintf(stderr, "warning: cannot write %s\n", path);
    }
}

static int compare_double(const void* a, const void* b) {
    const double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

// The run: what main settles before the training loop (its shape, where its layers live, its device) and the
// host state of the loop (data, tokenizer, log, token buffers, step times).
typedef struct {
    TrainArgs args;
    GpuArgs ga;
    GPTConfig cfg;
    int kind;  // 1: a model spec (GPT-2 init), 2: an llm.c model file
    int bench, n_micro, total_steps, start_step;
    int64_t step_tokens;
    int resident, kept;  // -R / -K, once -1 is resolved
    MemoryPlan plan;
    bool no_gpu_here;
    cudaDeviceProp prop;
    int64_t gpu_free_at_start, gpu_total, gpu_budget;
    int adam_threads;
    double peak_flops;  // 0: a GPU not in gpu_bf16_peak_flops's table (no MFU)
    const char* peak_label;
    int64_t resume_step;  // -1: a fresh run
    int64_t resume_header[ST_HEADER_SLOTS];
    char resume_model[4200], resume_state[4200];
    // the loop's
    DataLoader train, val;
    int64_t val_batches;
    Tokenizer tok;
    TrainLogger logger;
    int *inputs, *targets;  // one step's tokens
    double* step_seconds;   // each step's time
    uint64_t sample_rng;
    Timeline timeline;              // -Y 1
    TimelineSummary last_timeline;  // of the last step
} Run;

// -o: one run per directory, a fresh run only where no run left files, -y 1 from the newest valid checkpoint
// (open_run_dir). Benchmark mode writes there only the timeline's trace.json (-Y 1) and resumes nothing; -P 1
// writes nothing. A resumed run's model file replaces -e, which, if given, must describe it.
static void open_output_dir(Run* r) {
    char err[4352];
    const GpuArgs& ga = r->ga;
    r->resume_step = -1;
    if (r->args.output_dir && r->bench && ga.timeline && !ga.plan_only &&
        !lock_output_dir(r->args.output_dir, err, sizeof err))
        die("%s", err);
    if (r->bench || ga.plan_only) return;
    GPTConfig ckpt;
    r->resume_step = open_run_dir(&r->args, r->resume_model, r->resume_state, sizeof r->resume_model, &ckpt,
                                  r->resume_header);
    if (r->resume_step < 0) return;
    if (ga.model_given) {
        GPTConfig want;
        resolve_model(r->args.model, &want);
        if (memcmp(&want, &ckpt, sizeof want) != 0)  // GPTConfig is six ints, no padding
            die("-e %s does not match the checkpoint in %s (L%d C%d NH%d maxT%d V%d): drop -e or choose "
                "another -o",
                r->args.model, r->args.output_dir, ckpt.num_layers, ckpt.channels, ckpt.num_heads,
                ckpt.max_seq_len, ckpt.vocab_size);
    }
    r->args.model = r->resume_model;
}

// The host buffers of the loop: one step's tokens (in benchmark mode one fixed batch of random tokens, as the
// PyTorch peers use) and each step's time.
static void alloc_step_buffers(Run* r) {
    r->inputs = (int*)malloc((size_t)r->step_tokens * sizeof(int));
    r->targets = (int*)malloc((size_t)r->step_tokens * sizeof(int));
    r->step_seconds = (double*)calloc((size_t)r->total_steps + 1, sizeof(double));
    if (!r->inputs || !r->targets || !r->step_seconds) die("out of host memory for the token buffers");
    uint64_t rng = SYNTHETIC_SEED;
    for (int64_t i = 0; r->bench && i < r->step_tokens; i++) {
        r->inputs[i] = (int)(random_u64(&rng) % 50257);
        r->targets[i] = (int)(random_u64(&rng) % 50257);
    }
}

// The data (not in benchmark mode: synthetic tokens there, so any T and -d work without a corpus), the run's
// length, the checks of a resumed run against it, and the loop's token buffers.
static void open_data(Run* r) {
    char err[4352];
    TrainArgs* a = &r->args;
    DataLoader *train = &r->train, *val = &r->val;
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    r->total_steps = r->bench ? r->ga.bench_warmup + r->ga.bench_steps : a->max_steps;
    r->val_batches = 0;
    if (!r->bench) {
        if (!dataloader_init(train, a->train_data, a->B, a->T, 1, SHUFFLE_SEED, err, sizeof err))
            die("%s", err);
        if (!dataloader_init(val, a->val_data, a->B, a->T, 0, 0, err, sizeof err)) die("%s", err);
        if (r->total_steps < 0) r->total_steps = (int)(train->num_batches / r->n_micro);
        if (a->max_steps < 0 && r->total_steps < 1)
            die("train data %s holds fewer than %d batches of B*T: one step needs that many", a->train_data,
                r->n_micro);
        r->val_batches = dataloader_eval_batches(val, a->val_max_batches);
        a->max_steps = r->total_steps;  // -x -1 resolved: checkpoints record the run's length
    }
    if (r->resume_step >= 0)
        check_resume_args(r->resume_header, a, r->total_steps, r->step_tokens, a->output_dir);
    if (r->resume_step >= r->total_steps)
        die("resume: the checkpoint in %s is at step %lld, the run ends at step %d: nothing to train (raise "
            "-x)",
            a->output_dir, (long long)r->resume_step, r->total_steps);
    alloc_step_buffers(r);
}

// -sd, a fresh run: DIR must hold the store (ssd_store_create allocates every file at full size).
static void check_ssd_space(const Run* r) {
    const double GiB = 1073741824.0;
    const char* dir = r->ga.ssd_dir;
    if (!dir || r->resume_step >= 0) return;
    const int64_t avail = dir_free_bytes(dir);
    if (avail < 0) die("-sd %s: %s", dir, strerror(errno));
    if (avail < r->plan.ssd_disk)
        die("-sd %s: the optimizer state needs %.2f GiB on disk (two generations of the fp32 weights, m and "
            "v "
            "of %d streamed layers), the filesystem has %.2f GiB free",
            dir, r->plan.ssd_disk / GiB, r->cfg.num_layers - r->resident, avail / GiB);
}

// The fit check, before any large allocation: host RAM first (no GPU needed to know it will not fit), then
// the device, -R -1 / -K -1 placed in its free memory, and the whole plan against that.
static void check_fit(Run* r) {
    const double GiB = 1073741824.0;
    const GpuArgs* ga = &r->ga;
    const int64_t host_avail = host_memory_to_count_on(ga);
    check_ssd_space(r);
    if (host_avail >= 0 && r->plan.host_bytes > host_avail)
        die("host RAM too small for this config: needs %.1f GiB (fp32 weights + AdamW m, v + pinned bf16 "
            "weights and "
            "grads), %.1f GiB %s",
            r->plan.host_bytes / GiB, host_avail / GiB,
            ga->host_gib > 0
                ? "given by -M"
                : "available (MemAvailable; where memory grows as it is used, -M GiB says how much)");
    if (r->no_gpu_here)
        die("no CUDA device found: this trainer needs an NVIDIA GPU; ./train_gpt_cpu trains on the CPU");
    cudaCheck(cudaGetDeviceProperties(&r->prop, 0));
    cudaCheck(cudaSetDevice(0));
    r->peak_flops = gpu_bf16_peak_flops(r->prop.name, &r->peak_label);
    size_t gpu_free = 0, gpu_total = 0;
    cudaCheck(cudaMemGetInfo(&gpu_free, &gpu_total));
    r->gpu_free_at_start = (int64_t)gpu_free;
    r->gpu_total = (int64_t)gpu_total;
    r->gpu_budget = gpu_memory_budget(ga, r->gpu_free_at_start);
    r->plan = place_layers(&r->cfg, r->args.B, r->args.T, r->n_micro, ga->num_slots, ga, r->gpu_budget,
                           &r->resident, &r->kept);
    const MemoryPlan& m = r->plan;
    if (m.gpu_bytes + gpu_reserve_bytes <= r->gpu_budget) return;
    char budget_text[512];
    if (r->gpu_budget < r->gpu_free_at_start)
        snprintf(budget_text, sizeof budget_text, "%.2f GiB given by -V (%.2f GiB free on %s)",
                 r->gpu_budget / GiB, r->gpu_free_at_start / GiB, r->prop.name);
    else
        snprintf(budget_text, sizeof budget_text, "%.2f GiB free on %s", r->gpu_free_at_start / GiB,
                 r->prop.name);
    die("GPU memory too small for this config: needs %.2f GiB (of which %.2f GiB layer-input checkpoints: "
        "lower -d, "
        "-b or -t; %.2f GiB for %d GPU-resident layers: lower -R; %.2f GiB for %d layers' kept activations: "
        "lower "
        "-K), %s",
        m.gpu_bytes / GiB, m.layer_inputs / GiB, m.resident_layers / GiB, r->resident, m.kept / GiB, r->kept,
        budget_text);
}

// The model (-e, or the resumed checkpoint's), its shape against the flags, the micro-batches per step, and
// the memory plan (which dies on a config whose byte counts overflow). -R -1 / -K -1 count as 0 until the
// GPU's free memory is known.
static void plan_run(Run* r) {
    const TrainArgs& a = r->args;
    const GpuArgs& ga = r->ga;
    r->kind = resolve_model(a.model, &r->cfg);
    if (a.T > r->cfg.max_seq_len)
        die("-t %d exceeds the model's max sequence length %d", a.T, r->cfg.max_seq_len);
    r->n_micro = grad_accum_steps(&a);
    r->step_tokens = (int64_t)r->n_micro * a.B * a.T;
    if (ga.resident > r->cfg.num_layers)
        die("-R %d: the model has only %d layers", ga.resident, r->cfg.num_layers);
    if (ga.kept > r->cfg.num_layers) die("-K %d: the model has only %d layers", ga.kept, r->cfg.num_layers);
    r->resident = ga.resident > 0 ? ga.resident : 0;
    r->kept = ga.kept > 0 ? ga.kept : 0;
    int devices = 0;
    r->no_gpu_here = cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0;
    cudaGetLastError();
    if (ga.plan_only && r->no_gpu_here)
        flash_attention_device_major = 9;  // plan for an H100's attention path
    r->plan = gpt_memory_plan(&r->cfg, a.B, a.T, r->n_micro, ga.num_slots, r->resident, r->kept,
                              ga.ssd_dir != NULL);
    if (ga.ssd_dir && ga.resident >= r->cfg.num_layers)
        die("-sd %s with -R %d: every layer is GPU-resident, no state is left to put on disk", ga.ssd_dir,
            ga.resident);
    if (r->resume_step >= 0) {  // a checkpoint's streamed state is in an SSD store, or in its files
        const bool ckpt_ssd = r->resume_header[ST_VERSION] == STATE_VERSION_SSD;
        if (ckpt_ssd && !ga.ssd_dir)
            die("resume: the checkpoint of step %lld in %s keeps its streamed layers' state in an SSD store: "
                "resume with -sd DIR (the run's -sd directory)",
                (long long)r->resume_step, a.output_dir);
        if (!ckpt_ssd && ga.ssd_dir)
            die("resume: the checkpoint of step %lld in %s holds all its state in its files (a run without "
                "-sd): resume it without -sd",
                (long long)r->resume_step, a.output_dir);
    }
}

// -P 1: prints the plan and exits. With -V, -R -1 / -K -1 are placed for that much GPU memory, as
// a run would.
static int print_plan_only(Run* r) {
    const GpuArgs* ga = &r->ga;
    if (ga->gpu_gib > 0)
        r->plan = place_layers(&r->cfg, r->args.B, r->args.T, r->n_micro, ga->num_slots, ga,
                               gpu_memory_budget(ga, INT64_MAX), &r->resident, &r->kept);
    print_memory_plan(&r->cfg, r->args.B, r->args.T, r->n_micro, ga->num_slots, r->resident, r->kept, ga,
                      r->plan, r->no_gpu_here);
    return 0;
}

// -sd: the disk's bandwidth (ssd_probe_bandwidth: O_DIRECT, a few seconds; env SSD_PROBE_SECONDS and
// SSD_PROBE_MIB shorten it for tests) and the disk time per step it implies. A failed probe only warns.
static void ssd_print_bandwidth(const Run* r) {
    const char* dir = r->ga.ssd_dir;
    const char* sec = getenv("SSD_PROBE_SECONDS");
    const char* mib = getenv("SSD_PROBE_MIB");
    const double seconds = sec ? atof(sec) : 3.0;
    const int64_t max_bytes = mib && atoll(mib) > 0 ? atoll(mib) << 20 : (int64_t)1 << 30;
    double rbps = 0, wbps = 0;
    int direct = 0;
    char err[1024];
    if (ssd_probe_bandwidth(dir, seconds, max_bytes, &rbps, &wbps, &direct, err, sizeof err) != 0) {
        fprintf(stderr, "warning: -sd %s: %s; the disk's part of a step is not estimated\n", dir, err);
        return;
    }
    const MemoryPlan& m = r->plan;
    printf(
        "disk %s: read %.2f GB/s, write %.2f GB/s%s; one step moves %.2f GB from it and %.2f GB to it: "
        "%.3f s of disk time per step at these rates (overlapped with the GPU's forward pass)\n",
        dir, rbps / 1e9, wbps / 1e9, direct ? " (O_DIRECT)" : " (buffered: the filesystem refused O_DIRECT)",
        m.ssd_read_per_step / 1e9, m.ssd_write_per_step / 1e9,
        m.ssd_read_per_step / rbps + m.ssd_write_per_step / wbps);
}

// -sd: the store in DIR and the weights. A fresh run creates it (after checking DIR's free space) and
// writes every streamed layer into it through one layer-sized buffer (GPT-2 init or -e, one layer at a
// time: the same bits as the in-RAM load), with zero moments; the prefix goes to the host arrays. A resumed
// run opens the store at its checkpoint's step (refused when DIR no longer holds it) and reads each
// streamed layer's weights back for the pinned bf16 copy; the prefix comes from the model file.
static void ssd_attach(Run* r, GPT* g) {
    const double GiB = 1073741824.0;
    const char* dir = r->ga.ssd_dir;
    const GPTConfig* c = &r->cfg;
    const ParamLayout* p = &g->layout;
    const int R = g->resident_layers;
    char err[4352];
    SsdStoreConfig sc = ssd_store_config(c, R);
    const bool resume = r->resume_step >= 0;
    if (resume) {
        int64_t tail[SSD_TAIL_SLOTS];
        if (!state_file_ssd_tail(r->resume_state, tail, err, sizeof err)) die("resume: %s", err);
        if (tail[SSD_TAIL_PREFIX] != g->host_state_count)
            die("resume: -R %d differs from the checkpoint's (%lld streamed layers in its SSD store, %d "
                "now): "
                "keep -R to resume with -sd",
                R, (long long)tail[SSD_TAIL_STREAMED_LAYERS], c->num_layers - R);
        g->ssd = ssd_store_open(dir, &sc, r->resume_step, err, sizeof err);
        if (!g->ssd) die("resume: -sd %s: %s", dir, err);
    } else {
        g->ssd = ssd_store_create(dir, &sc, err, sizeof err);
        if (!g->ssd) die("-sd %s: %s", dir, err);
    }
    ssd_set_fault_from_env(g->ssd);
    // the prefix (embeddings, -R layers): into the host arrays, from the init, -e or the checkpoint's model
    if (r->kind == 1 && !resume) {
        gpt_init_embeddings(c, g->master, INIT_SEED);
        for (int l = 0; l < R; l++) gpt_init_layer(c, l, g->master + gpt_layer_offset(p, l), INIT_SEED);
    } else if (!gpt_load_params(r->args.model, c, g->master, err, sizeof err, 0, g->host_state_count)) {
        die("%s", err);
    }
    // the streamed layers, one at a time through one buffer
    float* layer = (float*)malloc((size_t)p->layer_stride * 4);
    if (!layer) die("out of host memory for one layer");
    for (int l = R; l < c->num_layers; l++) {
        int rc = 0;
        if (resume) rc = ssd_store_read_layer(g->ssd, l - R, layer, NULL, NULL, NULL, err, sizeof err);
        else {
            if (r->kind == 1) gpt_init_layer(c, l, layer, INIT_SEED);
            else if (!gpt_load_params(r->args.model, c, layer, err, sizeof err, gpt_layer_offset(p, l),
                                      gpt_layer_offset(p, l) + p->layer_stride))
                die("%s", err);
            rc = ssd_store_write_layer(g->ssd, l - R, layer, NULL, NULL, err, sizeof err);  // zero m, v
        }
        if (rc != 0) die("-sd %s: %s", dir, err);
        uint16_t* bf16 = g->stream.weights_host_bf16 + gpt_layer_offset(p, l);
        FAKE_CUDA_HOST_ACCESS(bf16, p->layer_stride * 2, true, "the host writing the bf16 copy (load)");
        convert_f32_to_bf16(layer, bf16, p->layer_stride);
    }
    free(layer);
    if (r->ga.timeline) ssd_io_log_busy(ssd_store_io(g->ssd), 1);  // the timeline's disk tracks
    g->gw->thread = std::thread(grads_writer_main, g);
    printf("SSD tier: %d layers' fp32 weights and AdamW m, v in %s (%.2f GiB on disk, %s; %s)\n",
           sc.num_layers, dir, r->plan.ssd_disk / GiB, ssd_io_backend(ssd_store_io(g->ssd)),
           resume ? "resumed at its checkpoint" : "created");
}

// Builds the model, fills its weights (GPT-2 init or an llm.c model file) and, with -y 1, its AdamW state and
// the data position.
static void build_model(Run* r, GPT* g) {
    char err[4352];
    // the CPU AdamW's threads: every usable core but one, which launches kernels and issues copies
    const int cores = usable_cpu_cores();
    r->adam_threads = r->ga.adam_threads > 0 ? r->ga.adam_threads : (cores > 2 ? cores - 1 : 1);
    cpu_adam_set_threads(r->adam_threads);
    if (r->ga.ssd_dir) {  // the probe first: its buffers are gone before the model's arrive
        if (mkdir(r->ga.ssd_dir, 0755) != 0 && errno != EEXIST)
            die("-sd %s: cannot create it: %s", r->ga.ssd_dir, strerror(errno));
        ssd_print_bandwidth(r);
    }
    gpt_build(g, &r->cfg, r->args.B, r->args.T, r->n_micro, r->ga.num_slots, r->resident, r->kept, &r->args,
              r->ga.ssd_dir != NULL);
    if (r->ga.ssd_dir) ssd_attach(r, g);
    else if (r->kind == 1) gpt_init_params(&r->cfg, g->master, INIT_SEED);
    else if (!gpt_load_params(r->args.model, &r->cfg, g->master, err, sizeof err)) die("%s", err);
    gpt_weights_ready(g);
    if (r->ga.timeline) {
        timeline_init(&r->timeline, 8 * r->cfg.num_layers + 64 + (g->ssd ? 2 * TIMELINE_DISK_SPANS : 0));
        g->timeline = g->stream.timeline = &r->timeline;
    }
    r->start_step = 0;
    if (r->resume_step < 0) return;
    DataLoaderState data_state;
    load_state(g, r->resume_state, &data_state);
    if (!dataloader_set_state(&r->train, &data_state, err, sizeof err)) die("resume: %s", err);
    r->start_step = (int)g->step;
    printf("resumed from %s (step %d)\n", r->resume_model, r->start_step);
}

// The tokenizer for samples (without it they print as token ids), and DIR/main.log (none in benchmark mode).
static void open_tokenizer_and_log(Run* r) {
    char err[4352];
    memset(&r->tok, 0, sizeof r->tok);
    if (!r->bench && !tokenizer_init(&r->tok, kTokenizerPath, err, sizeof err))
        fprintf(stderr, "warning: %s; samples are printed as token ids\n", err);
    if (!logger_open(&r->logger, r->bench ? NULL : r->args.output_dir, r->resume_step, err, sizeof err))
        die("%s", err);
    r->sample_rng = SAMPLE_SEED;
}

static void print_config_table(const Run* r, const GPT* g) {
    const double GiB = 1073741824.0;
    const TrainArgs& args = r->args;
    const GPTConfig& cfg = r->cfg;
    const MemoryPlan& plan = r->plan;
    const ParamLayout* p = &g->layout;
    const int64_t real_params = gpt_num_real_params(&cfg, p);
    table_rule();
    table_row("model", "%s (%s)", args.model,
              r->kind == 1                   ? "spec, GPT-2 init"
              : hf_is_checkpoint(args.model) ? "Hugging Face checkpoint"
                                             : "llm.c model file");
    table_row("L / C / NH / maxT", "%d / %d / %d / %d", cfg.num_layers, cfg.channels, cfg.num_heads,
              cfg.max_seq_len);
    table_row("V / Vp", "%d / %d", cfg.vocab_size, cfg.padded_vocab_size);
    table_row("parameters", "%.3f B (%lld; %lld with the padded vocab)", real_params / 1e9,
              (long long)real_params, (long long)p->total);
    table_row("B / T / accumulation", "%d / %d / %d = %lld tokens per step", args.B, args.T, r->n_micro,
              (long long)r->step_tokens);
    table_row("lr / warmup / schedule", "%.2e / %d / %s to %.2f x lr", args.lr, args.warmup_steps,
              lr_schedule_name(args.lr_schedule), args.final_lr_frac);
    table_row("weight decay / clip", "%.2f / %.2f", args.weight_decay, args.grad_clip);
    table_row("steps", r->bench ? "%d (benchmark: %d warm-up + %d timed)" : "%d", r->total_steps,
              r->ga.bench_warmup, r->ga.bench_steps);
    if (r->ga.ssd_dir)
        table_row("host memory",
                  "%.2f GiB (fp32 master+m+v of the prefix %.2f, pinned bf16 %.2f, SSD ring %.2f)",
                  plan.host_bytes / GiB, plan.master_adam / GiB, plan.pinned / GiB, plan.ssd_ring / GiB);
    else
        table_row("host memory", "%.2f GiB (fp32 master+m+v %.2f, pinned bf16 %.2f)", plan.host_bytes / GiB,
                  plan.master_adam / GiB, plan.pinned / GiB);
    if (r->ga.ssd_dir)
        table_row("SSD tier (-sd)",
                  "%s: %.2f GiB on disk, %.3f GiB ring; per step %.2f GB read, %.2f GB written",
                  r->ga.ssd_dir, plan.ssd_disk / GiB, plan.ssd_ring / GiB, plan.ssd_read_per_step / 1e9,
                  plan.ssd_write_per_step / 1e9);
    table_row("GPU memory", "%.2f GiB (checkpoints %.2f, %d weight slots %.3f)", g->gpu_bytes / GiB,
              plan.layer_inputs / GiB, r->ga.num_slots, plan.slots / GiB);
    table_row("GPU-resident layers",
              r->resident ? "%d of %d (%.2f GiB with their AdamW state)" : "%d of %d (all streamed)",
              r->resident, cfg.num_layers, plan.resident_layers / GiB);
    table_row(
        "kept activations",
        r->kept ? "last %d of %d layers (%.2f GiB; no recompute there)" : "%d of %d layers (all recomputed)",
        r->kept, cfg.num_layers, plan.kept / GiB);
    table_row("attention", "%s",
              g->flash      ? "fused tensor-core kernels (flash_attention.cuh)"
              : r->ga.flash ? "cuBLAS GEMMs + softmax, T x T scores stored (head size not 32, 64, 80, 96, "
                              "128 or GPU before sm_80)"
                            : "cuBLAS GEMMs + softmax, T x T scores stored (-F 0)");
    table_row("GEMM epilogues", "%s",
              r->ga.epilogues ? "bias, residual, GELU fused (cuBLASLt)" : "separate kernels (-G 0)");
    table_row("device", "%s, %.1f GiB", r->prop.name, r->gpu_total / GiB);
    if (r->peak_flops > 0) table_row("MFU vs", "%.0f TFLOP/s (%s)", r->peak_flops / 1e12, r->peak_label);
    else table_row("MFU vs", "n/a (this GPU is not in gpu_bf16_peak_flops's table)");
    table_row("cpu adamw", "%d threads, %s", r->adam_threads, cpu_adam_simd_name());
    table_rule();
    fflush(stdout);
}

// After the first step of a run: what this process took on the GPU beyond its plan (the margin check).
static void print_gpu_margin(const Run* r, const GPT* g, int step) {
    const double GiB = 1073741824.0;
    size_t free_now = 0, total_now = 0;
    cudaCheck(cudaMemGetInfo(&free_now, &total_now));
    printf(
        "GPU memory after step %d: %.2f GiB free of %.2f, this process %.2f GiB beyond its plan "
        "(-R -1 / -K -1 leave %.2f GiB for that)\n",
        step + 1, free_now / GiB, total_now / GiB,
        ((double)(r->gpu_free_at_start - (int64_t)free_now) - (double)g->gpu_bytes) / GiB,
        (gpu_reserve_bytes + gpu_margin_bytes) / GiB);
}

// The median step time, and in benchmark mode the RESULT json line that dev/bench reads.
static void print_median_and_result(const Run* r, const GPT* g, int timed, double median) {
    const double GiB = 1073741824.0, flops = step_flops(g, r->step_tokens), peak = r->peak_flops;
    char mfu[32] = "MFU n/a", mfu_json[32] = "null", peak_json[32] = "null";
    if (peak > 0) {
        snprintf(mfu, sizeof mfu, "MFU %.1f%%", 100.0 * flops / median / peak);
        snprintf(mfu_json, sizeof mfu_json, "%.4f", flops / median / peak);
        snprintf(peak_json, sizeof peak_json, "%.1f", peak / 1e12);
    }
    printf("median step time over %d steps: %.1f ms, %.0f tok/s, %.1f model TFLOP/s (%s)\n", timed,
           median * 1e3, r->step_tokens / median, flops / median / 1e12, mfu);
    if (!r->bench) return;
    const GPTConfig& c = r->cfg;
    printf(
        "RESULT {\"mode\": \"stream\", \"model\": \"%s\", \"params_B\": %.4f, \"L\": %d, \"C\": %d, \"NH\": "
        "%d, "
        "\"B\": %d, \"T\": %d, \"tokens_per_step\": %lld, \"grad_accum\": %d, \"slots\": %d, "
        "\"resident_layers\": %d, "
        "\"kept_layers\": %d, \"flash\": %d, \"epilogues\": %d, "
        "\"step_s\": %.5f, "
        "\"tok_per_s\": %.1f, \"model_TFLOPs\": %.2f, \"mfu\": %s, \"peak_TFLOPs\": %s, \"peak_gpu_GiB\": "
        "%.3f, "
        "\"host_GiB\": %.2f}\n",
        r->args.model, g->layout.total / 1e9, c.num_layers, c.channels, c.num_heads, r->args.B, r->args.T,
        (long long)r->step_tokens, r->n_micro, r->ga.num_slots, r->resident, r->kept, (int)g->flash,
        r->ga.epilogues, median, r->step_tokens / median, flops / median / 1e12, mfu_json, peak_json,
        g->gpu_bytes / GiB, r->plan.host_bytes / GiB);
}

// -Y 1: what the last step's timeline says about -R and -K, with the GPU memory left of the budget.
static void print_tuning_advice(const Run* r, const TimelineSummary* t) {
    const double GiB = 1073741824.0;
    size_t gpu_free = 0, gpu_total = 0;
    cudaCheck(cudaMemGetInfo(&gpu_free, &gpu_total));
    // what is left of the budget (all that is free, or -V less what this run took), less -R -1's margins
    const int64_t spare =
        std::min<int64_t>((int64_t)gpu_free, r->gpu_budget - (r->gpu_free_at_start - (int64_t)gpu_free)) -
        gpu_reserve_bytes - gpu_margin_bytes;
    const int64_t resident_bytes = r->plan.resident_layer, kept_bytes = r->plan.kept_layer;
    const Placement next =
        suggest_placement(t, r->cfg.num_layers, {r->resident, r->kept}, spare, resident_bytes, kept_bytes);
    printf(
        "tuning, from the last step's timeline: the forward pass waited %.3f s for weights (CPU AdamW %.1f "
        "ms per "
        "streamed layer, forward %.1f ms per layer), the backward pass %.3f s; %.2f GiB of GPU memory to "
        "spare "
        "(%.2f GiB per GPU-resident layer, %.2f GiB per kept one)",
        t->fwd_wait_s, t->adam_layers ? 1e3 * t->busy_s[TRACK_ADAM] / t->adam_layers : 0.0,
        t->fwd_layers ? 1e3 * t->fwd_busy_s / t->fwd_layers : 0.0, t->bwd_wait_s,
        std::max<int64_t>(spare, 0) / GiB, resident_bytes / GiB, kept_bytes / GiB);
    if (next.resident != r->resident || next.kept != r->kept)
        printf(": try -R %d -K %d\n", next.resident, next.kept);
    else printf(": -R %d -K %d fit this step\n", r->resident, r->kept);
}

// The end of a run: bytes streamed, peak memory, the median step (over the timed steps of a benchmark, else
// all but the first), the benchmark's RESULT line, and with -Y 1 the -R / -K the last
// step's timeline suggests.
static void print_run_summary(const Run* r, GPT* g) {
    const double GiB = 1073741824.0;
    printf(
        "streamed over the run: %.2f GB host->GPU (%lld layer copies, %lld layers reused from the previous "
        "pass), "
        "%.2f GB GPU->host; last CPU AdamW round %.3f s\n",
        g->stream.bytes_h2d / 1e9, (long long)g->stream.layer_copies, (long long)g->stream.layer_reuses,
        g->stream.bytes_d2h / 1e9, g->opt->last_round_seconds);
    size_t gpu_free = 0,
           gpu_total = 0;  // every GPU buffer exists before the first step: the use now is the peak
    cudaCheck(cudaMemGetInfo(&gpu_free, &gpu_total));
    printf(
        "peak host memory: %.3f GiB resident; GPU memory: %.2f GiB allocated by this run (%.2f GiB in use on "
        "the device of %.2f)\n",
        peak_rss_bytes() / GiB, g->gpu_bytes / GiB, (gpu_total - gpu_free) / GiB, gpu_total / GiB);
    const int first_timed = r->bench ? r->ga.bench_warmup : r->start_step + 1;
    const int timed = r->total_steps - first_timed;
    if (timed > 0) {
        double* sorted = (double*)malloc(sizeof(double) * (size_t)timed);
        memcpy(sorted, r->step_seconds + first_timed, sizeof(double) * (size_t)timed);
        qsort(sorted, (size_t)timed, sizeof(double), compare_double);
        const double median = sorted[timed / 2];
        free(sorted);
        print_median_and_result(r, g, timed, median);
    }
    if (g->timeline && timed > 0) print_tuning_advice(r, &r->last_timeline);
    fflush(stdout);
}

// One step's line: loss, norm, lr, time, throughput, MFU, progress, and why an update was skipped
// (-sl / -sg).
static void print_step_line(const Run* r, const GPT* g, int step, float loss, float lr, double dt,
                            double elapsed) {
    char mfu[32] = "MFU n/a", progress[64];
    if (r->peak_flops > 0)
        snprintf(mfu, sizeof mfu, "MFU %.1f%%", 100.0 * step_flops(g, r->step_tokens) / dt / r->peak_flops);
    progress_text(elapsed, step + 1, r->start_step, r->total_steps, progress, sizeof progress);
    printf("step %4d/%d | loss %.6f | norm %.4f | lr %.2e | ms %.1f | tok/s %.0f | %s%s%s%s\n", step + 1,
           r->total_steps, loss, g->last_norm, lr, dt * 1e3, r->step_tokens / dt, mfu, progress,
           g->skipped[0] ? " | update skipped: " : "", g->skipped);
}

// Validation (every -v steps and at the end) and a sample (every -s steps and at the end). Returns whether
// it ran either.
static bool evaluate(Run* r, GPT* g, int step) {
    const TrainArgs& a = r->args;
    const bool last = step == r->total_steps;
    const bool val_now = !r->bench && a.val_every > 0 && (step % a.val_every == 0 || last);
    const bool sample_now = !r->bench && sample_tokens(&a) > 0 &&
                            ((a.sample_every > 0 && step > 0 && step % a.sample_every == 0) || last);
    if (val_now) {
        const float vl = validation_loss(g, &r->val, r->val_batches);
        printf("val loss %.6f\n", vl);
        logger_val(&r->logger, step, vl);
    }
    if (sample_now) gpt_sample(g, &r->tok, sample_tokens(&a), &r->sample_rng);
    return val_now || sample_now;
}

// The next step's micro-batches (-a 1: the same first ones every step).
static void load_step_batches(Run* r) {
    if (r->args.overfit_single_batch) dataloader_reset(&r->train);
    next_step_batches(&r->train, r->n_micro, r->inputs, r->targets, r->cfg.vocab_size);
}

static void save_run_checkpoint(Run* r, GPT* g) {
    DataLoaderState data_state = dataloader_get_state(&r->train);
    save_checkpoint(g, r->args.output_dir, &data_state);
}

static void free_run(Run* r, GPT* g) {
    free(r->inputs);
    free(r->targets);
    free(r->step_seconds);
    logger_close(&r->logger);
    tokenizer_free(&r->tok);
    if (!r->bench) {
        dataloader_free(&r->train);
        dataloader_free(&r->val);
    }
    if (g->timeline) {
        g->timeline = g->stream.timeline = NULL;
        timeline_free(&r->timeline);
    }
    gpt_free(g);
}

int main(int argc, char** argv) {
    omp_short_spin_reexec(argv);  // first: libgomp reads its spin count before main (cpu_cores.h)
    static Run r;                 // static: zero-initialized
    parse_args(argc, argv, &r.args, &r.ga);
    const TrainArgs& args = r.args;
    flash_attention_flag = r.ga.flash;  // before the memory plan: the cuBLAS path stores the scores
    cublaslt_fusion = r.ga.epilogues;
    r.bench = r.ga.bench_steps > 0;
    open_output_dir(&r);
    plan_run(&r);
    if (r.ga.plan_only) return print_plan_only(&r);
    open_data(&r);
    check_fit(&r);
    GPT g;
    build_model(&r, &g);
    open_tokenizer_and_log(&r);
    print_config_table(&r, &g);

    // the training loop
    int64_t saved_step = r.resume_step;         // the step of the newest checkpoint in -o (-1: none)
    auto stop_if_asked = [&](int steps_done) {  // Ctrl-C / SIGTERM: finish the step, checkpoint, exit
        stop_if_signalled(steps_done, r.start_step, saved_step, r.bench ? NULL : args.output_dir,
                          [&] { save_run_checkpoint(&r, &g); });
    };
    stop_signal_install();
    const double run_t0 = timeline_now();
    double last_return = run_t0;  // a step's time runs from the last one's return: waiting for AdamW counts
    for (int step = r.start_step; step <= r.total_steps; step++) {
        stop_if_asked(step);                                       // a signal during validation or sampling
        if (evaluate(&r, &g, step)) last_return = timeline_now();  // not part of the step time
        if (step == r.total_steps) break;

        if (!r.bench) load_step_batches(&r);
        const float lr = learning_rate_at(&args, step, r.total_steps);
        const float loss = gpt_step(&g, r.inputs, r.targets, r.n_micro, lr);
        if (g.timeline)
            r.last_timeline = timeline_summarize(g.timeline);  // waits for the step's last GPU work
        const double now = timeline_now(), dt = now - last_return;
        last_return = now;
        char diverged[96];
        if (training_diverged(loss, g.last_norm, r.cfg.vocab_size, diverged, sizeof diverged))
            die_diverged(step + 1, loss, g.last_norm, diverged, saved_step);
        r.step_seconds[step] = dt;
        print_step_line(&r, &g, step, loss, lr, dt, timeline_now() - run_t0);
        if (step == r.start_step) print_gpu_margin(&r, &g, step);
        if (g.timeline) print_timeline(&g, r.last_timeline, args.output_dir);
        if (step == r.start_step || g.timeline) last_return = timeline_now();  // printing is not step time
        fflush(stdout);
        logger_train(&r.logger, step + 1, loss, lr, (float)g.last_norm);
        if (!r.bench && args.checkpoint_every > 0 &&
            ((step + 1) % args.checkpoint_every == 0 || step + 1 == r.total_steps)) {
            save_run_checkpoint(&r, &g);
            saved_step = step + 1;
            last_return = timeline_now();
        }
        stop_if_asked(step + 1);
    }
    stop_if_asked(r.total_steps);  // a signal during the last validation or sample
    optimizer_wait_all(&g);
    print_run_summary(&r, &g);
    free_run(&r, &g);
    return 0;
}

#endif  // TESTING
