// gpt.cuh — the streaming trainer's model as data: struct GPT, one layer's activations (LayerActs) and a
// layer's parameters as named pointers (LayerParams), with small accessors.
// Names follow gpt2_cpu.h, so layer_forward reads line for line against its CPU twin.
// Not here: anything that launches work or allocates; the activations' layout (llmc/memory_plan.cuh).
#pragma once
#include <string.h>
#include <algorithm>           // defines: std::rotate
#include <atomic>              // defines: std::atomic
#include "llmc/args.h"         // defines: TrainArgs
#include "llmc/cuda_common.h"  // defines: bf16, die
#include "llmc/model.h"        // defines: GPTConfig, ParamLayout, gpt_layer_offset, LN1W..FCPROJB, WTE..LNFB
#include "llmc/llama_model.h"  // defines: LlamaConfig, llama_layout, LL_ATTN_NORM..LL_W_DOWN, LL_EMBED..LL_LM_HEAD
#include "llmc/outliers.h"  // defines: OutlierWindow
#include "llmc/stream.h"    // defines: WeightStream
#include "llmc/timeline.h"  // defines: Timeline

// ----------------------------------------------------------------------------
// Activations of ONE layer for ONE micro-batch, named as gpt2_cpu.h's Activations. N = B*T tokens.
// A kept layer (-K) holds only the costly ones (llmc/memory_plan.cuh acts_layout).
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
    // the Llama family's, named as llama_cpu.h's LlamaActivations (NULL for GPT-2). QKV = (NH + 2 NKV) hd.
    bf16* rms1;      // (N, C) RMSNorm 1 output
    bf16* gate_up;   // (N, 2I) [gate | up], before SwiGLU (qkv above: (N, QKV), q and k rotated)
    bf16* swiglu;    // (N, I) silu(gate) * up
    bf16* rms2;      // (N, C)
    bf16* dswiglu;   // (N, I)
    bf16* dgate_up;  // (N, 2I)
    bf16* datty;     // (N, NH hd)
    float *rms1_rstd, *rms2_rstd;  // (N) each; the final RMSNorm's is lnf_rstd
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
// The Llama family (llama_model.h) in this trainer: its tensors in a ParamLayout, embeddings first.
// A ParamLayout's layer tensors are llama_layout's LL_ATTN_NORM..LL_W_DOWN, its embedding tensors
// LL_EMBED, LL_FINAL_NORM, LL_LM_HEAD (size 0 when tied) and an empty fourth.
// The model file's order is [layers | embeddings]: llama_file_order / llama_trainer_order convert.
static_assert((int)NUM_LLAMA_LAYER_TENSORS == (int)NUM_LAYER_TENSORS, "one ParamLayout for both families");
static_assert((int)NUM_LLAMA_EMBED_TENSORS < (int)NUM_EMBED_TENSORS, "one ParamLayout for both families");
static const int llama_embed_is_matrix4[NUM_EMBED_TENSORS] = {1, 0, 1, 0};  // embed, final_norm, lm_head

static inline ParamLayout llama_param_layout(const LlamaConfig* c) {
    const LlamaLayout ll = llama_layout(c);
    ParamLayout p;
    memset(&p, 0, sizeof p);
    for (int k = 0; k < NUM_LAYER_TENSORS; k++) {
        p.layer_size[k] = ll.layer_size[k];
        p.layer_offset[k] = ll.layer_offset[k];
    }
    p.layer_stride = ll.layer_stride;
    for (int k = 0; k < NUM_LLAMA_EMBED_TENSORS; k++) {
        p.embed_size[k] = ll.embed_size[k];
        p.embed_offset[k] = ll.embed_offset[k];
        p.embed_count += ll.embed_size[k];
    }
    p.embed_offset[NUM_EMBED_TENSORS - 1] = p.embed_count;  // the empty fourth
    p.total = ll.total;
    return p;
}

// A flat array (weights, m or v) between the model file's order [layers | embeddings] and this trainer's
// [embeddings | layers], in place.
static inline void llama_trainer_order(const ParamLayout* p, float* x) {
    std::rotate(x, x + (p->total - p->embed_count), x + p->total);
}
static inline void llama_file_order(const ParamLayout* p, float* x) {
    std::rotate(x, x + p->embed_count, x + p->total);
}

// The GPTConfig the family's buffers are sized by: C, L, NH, maxT; Vp = V (logits are (N, V)).
static inline GPTConfig llama_gpt_config(const LlamaConfig* c) {
    GPTConfig g;
    g.max_seq_len = c->max_seq_len;
    g.vocab_size = c->vocab_size;
    g.padded_vocab_size = c->vocab_size;
    g.num_layers = c->num_layers;
    g.num_heads = c->num_heads;
    g.channels = c->hidden_size;
    return g;
}

// The model's ParamLayout: GPT-2's, or the family's when llama is given (and has layers).
static inline ParamLayout model_layout(const GPTConfig* c, const LlamaConfig* llama) {
    return llama && llama->num_layers ? llama_param_layout(llama) : gpt_layout(c);
}

// A layer's parameters as named pointers, as llama_cpu.h's LlamaLayerTensors; absent biases NULL.
// wq, wk, wv are adjacent: wq is also the fused (NH + 2 NKV) hd x C matrix [wq; wk; wv], and bq the fused
// bias. w_gate, w_up too: w_gate is the fused (2I, C) matrix [w_gate; w_up].
template <typename T>
struct LlamaLayerParams {
    T *attn_norm, *wq, *wk, *wv, *bq, *bk, *bv, *wo, *mlp_norm, *w_gate, *w_up, *w_down;
};
template <typename T>
static inline LlamaLayerParams<T> llama_layer_params(const ParamLayout* p, T* layer) {
    T* t[NUM_LAYER_TENSORS];
    for (int k = 0; k < NUM_LAYER_TENSORS; k++) t[k] = p->layer_size[k] ? layer + p->layer_offset[k] : NULL;
    return {t[LL_ATTN_NORM], t[LL_WQ], t[LL_WK],       t[LL_WV],     t[LL_BQ],   t[LL_BK],
            t[LL_BV],        t[LL_WO], t[LL_MLP_NORM], t[LL_W_GATE], t[LL_W_UP], t[LL_W_DOWN]};
}
// The embeddings' parameters, as llama_cpu.h's LlamaEmbedTensors: lm_head is embed when tied.
template <typename T>
struct LlamaEmbedParams {
    T *embed, *final_norm, *lm_head;
};
template <typename T>
static inline LlamaEmbedParams<T> llama_embed_params(const ParamLayout* p, T* base) {
    const int64_t* o = p->embed_offset;
    return {base + o[LL_EMBED], base + o[LL_FINAL_NORM],
            base + o[p->embed_size[LL_LM_HEAD] ? LL_LM_HEAD : LL_EMBED]};
}

// ----------------------------------------------------------------------------
// The model as the GPU trainer holds it

struct Optimizer;     // the CPU AdamW thread (llmc/cpu_optimizer.h)
struct SsdTier;       // -sd: the SSD tier (ssd_tier.h)
struct SsdBf16Files;  // -sd -sw 1 on several ranks: the store's bf16 files, read-only (ssd.h)
struct HostVocab;     // -E 1: the vocabulary tensors in host RAM (llmc/vocab_host.cuh)
struct AttnMicro;     // a micro-batch's ragged sequences for cuDNN (attention_path.cuh)
struct Comm;          // a multi-GPU run's ranks (collectives.h)

typedef struct GPT GPT;
struct GPT {
    GPTConfig config;      // GPT-2's, or the sizes of the Llama family's buffers (llama_gpt_config)
    LlamaConfig llama;     // the Llama family's config; num_layers 0: GPT-2
    float* rope_inv_freq;  // the family's RoPE frequencies (hd/2 floats, GPU)
    ParamLayout layout;
    int B, T;        // micro-batch
    bool flash;      // attention without T x T scores stored: cuDNN or our fused kernels (else cuBLAS)
    int attn_path;   // ATTN_CUDNN, ATTN_FUSED or ATTN_CUBLAS (attention_path.cuh)
    int max_micro;   // micro-batches per step the buffers are sized for
    TrainArgs args;  // hyperparameters (lr, betas are llm.c's, weight decay, clip)

    // host
    float* master;        // fp32 master weights, layer-major (model.h)
    float* adam_m;        // fp32 AdamW first moment
    float* adam_v;        // fp32 AdamW second moment
    WeightStream stream;  // pinned bf16 weights and gradients, GPU slots, copy streams

    // GPU. The resident prefix [embeddings | layers 0..R-1] is never streamed.
    // A GPU AdamW updates it in place; the host arrays hold it only for files.
    // With -E 1 the embeddings stay on the host: the GPU arrays start at parameter resident_start.
    int resident_layers;     // R
    int64_t resident_count;  // parameters in the prefix: embed_count + R * layer_stride
    int64_t resident_start;  // 0, or embed_count with -E 1
    HostVocab* vocab;        // -E 1 (NULL: the embeddings are GPU-resident)
    bf16* resident;          // bf16 weights of the prefix (what the kernels read)
    float* resident_grads;   // fp32, accumulated over micro-batches
    float* resident_master;  // fp32 master weights of the prefix
    float* resident_m;       // its AdamW moments
    float* resident_v;
    float* layer_grads;  // fp32 gradient accumulator of the streamed layer in flight
    bf16* layer_inputs;  // (L+1) x max_micro x (N, C): each layer's input, and the final residual
    bf16* dresid;        // max_micro x (N, C): gradient of the residual stream
    int* tokens_host;  // pinned: [inputs | targets | positions], max_micro x N each, on their way to the GPU
    int* tokens_in;    // max_micro x N
    int* tokens_out;   // max_micro x N targets (-1: no loss)
    int* tokens_pos;   // max_micro x N positions in their conversation (chat data)
    bool packed;       // this pass's data is chat data: tokens_pos holds positions (else t)
    AttnMicro* attn_micro;   // cuDNN path: max_micro micro-batches' ragged sequences
    int* attn_meta;          //   their metadata on the GPU, ragged_meta_ints(N) each
    int* attn_meta_host;     //   pinned, on its way
    void* attn_workspace;    //   cuDNN's workspace (plan.attn)
    int64_t attn_ragged[2];  //   chat micro-batches that ran cuDNN's ragged graphs [0], our fused kernel [1]
    float* losses;           // max_micro x N
    float* loss_dev;         // mean loss (1 float)
    double* sumsq_dev;       // squared gradient norm accumulator
    float* loss_host;        // pinned: mean loss and
    double* sumsq_host;      //   squared norm, read once per step
    LayerActs acts;          // one layer, one micro-batch: recompute, backward scratch, the head's buffers
    int kept_layers;         // K: the last K layers keep their costly activations (-K), no recompute
    LayerActs* kept;         // [(l - (L - K)) * max_micro + mb]: acts with the kept arrays in kept_memory
    void* kept_memory;

    Optimizer* opt;           // owned; separate so this struct stays plain data
    int64_t step;             // training steps taken (names the checkpoints)
    int64_t adam_t;           // updates applied (AdamW's t): step less the updates -sl / -sg skipped
    int64_t checkpoint_step;  // the newest complete checkpoint's step (-1: none yet), for disk errors' lines
    double last_norm;         // gradient norm of the last step
    OutlierWindow loss_window, norm_window;  // -sl / -sg
    char skipped[96];                        // why the last step updated nothing (-sl / -sg), or ""
    int64_t gpu_bytes;  // every byte this trainer allocated on the GPU (the "peak GPU" figure)
    SsdTier* ssd;       // -sd: the streamed layers' state on disk (NULL: in the host arrays)
    // -sd on several ranks of a node: rank 0 alone holds the store (ssd) and updates whole layers; every rank
    // sends its slice of the gradients to the node's shared host arrays (memory_plan.cuh ssd_grads_in_ram)
    bool ssd_ranks;
    // -sd -sw 1 on several ranks of a node: every rank reads the bf16 weights from the store's files through
    // the page cache (ssd_tier.h sw_read_start); sw_gen[i], in the node's shared memory, is the generation
    // whose file holds store layer i, which rank 0 sets before each layer's progress says it is written
    SsdBf16Files* sw_files;
    std::atomic<uint8_t>* sw_gen;
    int64_t host_state_count;  // floats in master / adam_m / adam_v: all, or the prefix with -sd
    int* forward_order;        // R, R+1, ..., L-1: the streamed layers in the order of a forward pass
    int* backward_order;       // L-1, ..., R
    Timeline* timeline;        // NULL unless -Y 1
    Comm* comm;                // the ranks (-pn): one, or G sharing the host arrays above
};

static inline bool is_llama(const GPT* g) { return g->llama.num_layers > 0; }
// The ragged sequences of the micro-batch whose positions start at pos (cuDNN path; else NULL).
static inline const AttnMicro* attn_micro_of(const GPT* g, const int* pos) {
    if (!pos || !g->attn_micro) return NULL;
    return g->attn_micro + (pos - g->tokens_pos) / ((int64_t)g->B * g->T);
}
// Which tensors are matrices (weight decay, llm.c's rule): the family's flags or GPT-2's.
static inline const int* layer_is_matrix(const GPT* g) {
    return is_llama(g) ? llama_layer_tensor_is_matrix : layer_tensor_is_matrix;
}
static inline const int* embed_is_matrix(const GPT* g) {
    return is_llama(g) ? llama_embed_is_matrix4 : embed_tensor_is_matrix;
}

static inline bf16* layer_input(GPT* g, int l, int mb) {
    const int64_t n = (int64_t)g->B * g->T * g->config.channels;
    return g->layer_inputs + ((int64_t)l * g->max_micro + mb) * n;
}
static inline bf16* dresid_at(GPT* g, int mb) {
    return g->dresid + (int64_t)mb * g->B * g->T * g->config.channels;
}
// Layer l's weights in the GPU-resident prefix.
static inline bf16* resident_layer(GPT* g, int l) {
    return g->resident + gpt_layer_offset(&g->layout, l) - g->resident_start;
}
// Where layer l's forward pass for micro-batch mb leaves its activations: its own kept ones (-K), or the one
// g->acts that the backward pass refills by recomputing.
static inline bool layer_kept(const GPT* g, int l) { return l >= g->config.num_layers - g->kept_layers; }
static inline LayerActs* layer_acts(GPT* g, int l, int mb) {
    return layer_kept(g, l)
               ? &g->kept[(int64_t)(l - (g->config.num_layers - g->kept_layers)) * g->max_micro + mb]
               : &g->acts;
}
