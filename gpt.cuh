// gpt.cuh — the streaming trainer's model as data: one layer's activations (LayerActs: one allocation carved
// by a table of sizes, as llm.c's) and struct GPT (what it holds on the host and on the GPU, and the state
// the CPU optimizer thread and the SSD tier hand over), with small accessors. Included by train_gpt.cu and
// its parts (cpu_optimizer.cuh, memory_plan.cuh). Not here: anything that launches work or allocates.
#pragma once
#include <condition_variable>
#include <mutex>
#include <string.h>
#include <thread>
#include "args.h"               // defines: TrainArgs
#include "cuda_common.h"        // defines: bf16, die, round_up64
#include "flash_attention.cuh"  // defines: flash_attention_usable
#include "gpu_args.h"           // defines: TIER_*, SW_READ_BUFFERS
#include "model.h"              // defines: GPTConfig, ParamLayout
#include "outliers.h"           // defines: OutlierWindow
#include "ssd.h"                // defines: SsdStore
#include "stream.h"             // defines: WeightStream, direct_io_bytes
#include "timeline.h"           // defines: Timeline

// The attention of the layers: the fused kernels (flash_attention.cuh) where they take the head size and the
// GPU has bf16 mma.sync (sm_80+), else cuBLAS + softmax (attention.cuh), which stores the (T x T) scores.
// -F 0 forces the cuBLAS path.
static int flash_attention_flag = 1;
static bool use_flash_attention(const GPTConfig* c) {
    return flash_attention_flag && flash_attention_usable(c->channels / c->num_heads);
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
static inline int64_t grads_ring_bytes(const ParamLayout* p) { return direct_io_bytes(p->layer_stride * 2); }
typedef struct {
    std::thread thread;
    std::mutex mu;
    std::condition_variable cv;
    uint16_t* buf[GRAD_RING];  // grads_ring_bytes each, pinned_alloc_direct_io (written with O_DIRECT)
    bool busy[GRAD_RING];      // sent and not yet written to disk
    int next;                  // the slot of the next send
    int queue_layer[GRAD_RING], queue_slot[GRAD_RING], queued;  // sends the writer has yet to take, in order
    int64_t queue_pass[GRAD_RING];  // the backward pass of each (a skipped update's may still be queued when
                                    // the next backward pass begins)
    int64_t* written_pass;          // per layer: the backward pass whose gradients the grads file holds
    int64_t pass;                   // backward passes so far
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
    int* tokens_host;    // pinned: [inputs | targets], max_micro x N each, on their way to tokens_in / out
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

    Optimizer* opt;           // owned; separate so this struct stays plain data
    int64_t step;             // training steps taken (names the checkpoints)
    int64_t adam_t;           // updates applied (AdamW's t): step less the updates -sl / -sg skipped
    int64_t checkpoint_step;  // the newest complete checkpoint's step (-1: none yet), for disk errors' lines
    double last_norm;         // gradient norm of the last step
    OutlierWindow loss_window, norm_window;  // -sl / -sg
    char skipped[96];                        // why the last step updated nothing (-sl / -sg), or ""
    int64_t gpu_bytes;         // every byte this trainer allocated on the GPU (the "peak GPU" figure)
    SsdStore* ssd;             // -sd: the streamed layers' fp32 state (NULL: in the host arrays)
    bool weights_on_disk;      // -sd -sw 1: their bf16 weights too (the stream reads them: sw_read_*)
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
