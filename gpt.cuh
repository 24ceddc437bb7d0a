// gpt.cuh — the streaming trainer's model as data: struct GPT, one layer's activations (LayerActs) and a
// layer's parameters as named pointers (LayerParams), with small accessors.
// Names follow gpt2_cpu.h, so layer_forward reads line for line against its CPU twin.
// Not here: anything that launches work or allocates; the activations' layout (memory_plan.cuh).
#pragma once
#include <string.h>
#include "llmc/args.h"         // defines: TrainArgs
#include "llmc/cuda_common.h"  // defines: bf16, die
#include "llmc/model.h"        // defines: GPTConfig, ParamLayout, gpt_layer_offset, LN1W..FCPROJB, WTE..LNFB
#include "llmc/outliers.h"     // defines: OutlierWindow
#include "stream.h"            // defines: WeightStream
#include "llmc/timeline.h"     // defines: Timeline

// ----------------------------------------------------------------------------
// Activations of ONE layer for ONE micro-batch, named as gpt2_cpu.h's Activations. N = B*T tokens.
// A kept layer (-K) holds only the costly ones (memory_plan.cuh acts_layout).
typedef struct {
    bf16* ln1;        // (N, C) LayerNorm 1 output
    bf16* qkv;        // (N, 3C)
    bf16* att;        // (B, NH, T, T) softmax probabilities: the cuBLAS path only
    bf16* atty;       // (N, C) attention output, before the projection
    bf16* residual2;  // (N, C) layer input + attention branch
    bf16* ln2;        // (N, C)
    bf16* fch;        // (N, 4C) fc output, before GELU
    bf16* fch_gelu;   // (N, 4C)
    // backward scratch, reused by every layer
    bf16* dfch;  // (N, 4C)
    bf16* dln;   // (N, C) gradient of a LayerNorm output / of atty
    bf16* dqkv;  // (N, 3C)
    bf16* datt;  // (B, NH, T, T): the cuBLAS path only
    // the head's
    bf16* lnf;                                                               // (N, C)
    bf16* dlnf;                                                              // (N, C)
    bf16* logits;                                                            // (N, Vp), then their gradient
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lnf_mean, *lnf_rstd;  // (N) each
    float *att_lse, *att_dsum;  // (B, NH, T) each: the fused attention's row statistics
    void* memory;
    int64_t bytes;
} LayerActs;

// A layer's parameters as named pointers, as gpt2_cpu.h's LayerTensors: bf16 weights or fp32 gradients.
template <typename T>
struct LayerParams {
    T *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
};
typedef LayerParams<const bf16> LayerWeights;
typedef LayerParams<float> LayerGrads;
template <typename T>
static inline LayerParams<T> layer_params(const ParamLayout* p, T* layer) {
    const int64_t* o = p->layer_offset;
    return {layer + o[LN1W],     layer + o[LN1B],     layer + o[QKVW],    layer + o[QKVB],
            layer + o[ATTPROJW], layer + o[ATTPROJB], layer + o[LN2W],    layer + o[LN2B],
            layer + o[FCW],      layer + o[FCB],      layer + o[FCPROJW], layer + o[FCPROJB]};
}
// The embeddings' parameters, as gpt2_cpu.h's EmbedTensors.
template <typename T>
struct EmbedParams {
    T *wte, *wpe, *lnfw, *lnfb;
};
template <typename T>
static inline EmbedParams<T> embed_params(const ParamLayout* p, T* base) {
    const int64_t* o = p->embed_offset;
    return {base + o[WTE], base + o[WPE], base + o[LNFW], base + o[LNFB]};
}

typedef EmbedParams<const bf16> EmbedWeights;
typedef EmbedParams<float> EmbedGrads;

// ----------------------------------------------------------------------------
// The model as the GPU trainer holds it

struct Optimizer;  // the CPU AdamW thread (cpu_optimizer.h)
struct SsdTier;    // -sd: the SSD tier (ssd_tier.h)

typedef struct GPT GPT;
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

    // GPU. The resident prefix [embeddings | layers 0..R-1] is never streamed.
    // A GPU AdamW updates it in place; the host arrays hold it only for files.
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
    int* tokens_host;   // pinned: [inputs | targets | positions], max_micro x N each, on their way to the GPU
    int* tokens_in;     // max_micro x N
    int* tokens_out;    // max_micro x N targets (-1: no loss)
    int* tokens_pos;    // max_micro x N positions in their conversation (chat data)
    bool packed;        // this pass's data is chat data: tokens_pos holds positions (else t)
    float* losses;      // max_micro x N
    float* loss_dev;    // mean loss (1 float)
    double* sumsq_dev;  // squared gradient norm accumulator
    float* loss_host;   // pinned: mean loss and
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
    SsdTier* ssd;              // -sd: the streamed layers' state on disk (NULL: in the host arrays)
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
