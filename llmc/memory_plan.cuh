// llmc/memory_plan.cuh — train_gpt's memory plan: every buffer gpt_build allocates, by name.
// Also the activation layout, GPU budget, -R -1 / -K -1 placement, -P 1's printout.
// gpt_build allocates from it. A new buffer: a field here, its gpu_alloc there.
#pragma once
#include <errno.h>  // defines: errno, ENOENT
#include <algorithm>
#include <string>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include "llmc/collectives.h"  // defines: node_part_of
#include "llmc/attention_path.cuh"  // defines: cudnn_attention_ready, _workspace, ATTN_CUDNN, flash_attention_usable
#include "llmc/gpt.cuh"             // defines: LayerActs
#include "llmc/gpu_args.h"          // defines: GpuArgs, ssd_tier
#include "llmc/run_dir.h"           // defines: parent_dir
#include "llmc/matmul.cuh"          // defines: kCublasWorkspaceBytes
#include "llmc/ssd.h"               // defines: ssd_plan, SsdStoreConfig
#include "llmc/ssd_tier.h"          // defines: GRAD_RING, grads_ring_bytes, sw_reader
#include "llmc/utils.h"             // defines: host_available_bytes

// Attention (-F): -1 the fastest that works: cuDNN's SDPA where attention_path_select found it working (and
// not slower than ours at the run's shape), our fused kernels where the head size allows and the GPU is
// sm_80+, else cuBLAS + softmax (attention.cuh), storing (T x T) scores. 0 cuBLAS, 1 fused (not cuDNN), 2
// cuDNN first (as -1).
static int flash_attention_flag = -1;
// Head size: C / NH for GPT-2, hd for Llama.
static int attention_head_size(const GPTConfig* c, const LlamaConfig* llama = NULL) {
    return llama && llama->num_layers ? llama->head_dim : c->channels / c->num_heads;
}
static bool use_cudnn_attention() {
    return cudnn_attention_ready && (flash_attention_flag == -1 || flash_attention_flag == ATTN_CUDNN);
}
// No T x T scores: cuDNN or the fused kernels. cuDNN on chat rows with a head size our kernels do not take:
// the scores too, for the micro-batches cuDNN cannot run (attention_forward_path's cuBLAS fallback).
static bool use_flash_attention(const GPTConfig* c, const LlamaConfig* llama = NULL) {
    const bool fused = flash_attention_usable(attention_head_size(c, llama));
    return (use_cudnn_attention() && (fused || !cudnn_attention_packed)) || (flash_attention_flag && fused);
}
// cuDNN's buffers: its workspace, and max_micro micro-batches' ragged metadata (ragged_meta_ints(N) each)
static int64_t attention_meta_bytes(int64_t N, int max_micro) {
    return (int64_t)max_micro * ragged_meta_ints(N) * 4;
}

// Overflow-checked byte counts: an absurd shape dies here, not in cudaMalloc.
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

// -E 1: head chunk rows, at most 64 Mi parameters (a 256 MiB fp32 gradient).
// Tests set VOCAB_CHUNK_ROWS to cut small vocabularies into chunks.
static int64_t vocab_chunk_rows(int64_t V, int64_t C) {
    int64_t rows = ((int64_t)1 << 26) / C;
    rows = rows >= 64 ? rows / 64 * 64 : std::max<int64_t>(rows, 1);  // GEMM-friendly multiples of 64
    const char* e = getenv("VOCAB_CHUNK_ROWS");
    if (e && atoll(e) > 0) rows = atoll(e);
    return std::min(rows, V);
}

// Llama's table (acts_layout's twin), named as llama_cpu.h. QKV = (NH + 2 NKV) hd, QD = NH hd.
// Kept layers redo RMSNorms and SwiGLU (2C + I per token), keep QKV + QD + C + 2I.
// -E 1: the logits hold one vocabulary chunk.
static int64_t llama_acts_layout(const LlamaConfig* c, int B, int T, bool kept_only, char* base, LayerActs* a,
                                 bool vocab_host = false) {
    const char* what =
        "the activation workspace of one layer (B*T*2I, B*NH*T*T attention scores or B*T*V logits; lower -b "
        "or -t)";
    const int64_t N = (int64_t)B * T, C = c->hidden_size, I = c->intermediate_size;
    const int64_t V = vocab_host ? vocab_chunk_rows(c->vocab_size, C) : c->vocab_size;  // logits' columns
    const int64_t QD = (int64_t)c->num_heads * c->head_dim,
                  QKV = QD + 2 * (int64_t)c->num_kv_heads * c->head_dim;
    const int64_t largest[4] = {plan_mul(N, 2 * I, what), plan_mul(N, QKV, what),
                                plan_mul(plan_mul((int64_t)B * c->num_heads, T, what), T, what),
                                plan_mul(N, V, what)};
    for (int i = 0; i < 4; i++) plan_add(plan_mul(largest[i], 2, what), 255, what);  // bf16, 256-aligned
    const GPTConfig gc = llama_gpt_config(c);
    const int64_t att = use_flash_attention(&gc, c) ? 0 : (int64_t)B * c->num_heads * T * T;
    const struct {
        bf16** p;
        int64_t n;
        bool kept;
    } arrays[] = {{&a->rms1, N * C, false},         {&a->qkv, N * QKV, true},     {&a->att, att, true},
                  {&a->atty, N * QD, true},         {&a->residual2, N * C, true}, {&a->rms2, N * C, false},
                  {&a->gate_up, N * 2 * I, true},   {&a->swiglu, N * I, false},   {&a->dswiglu, N * I, false},
                  {&a->dgate_up, N * 2 * I, false}, {&a->dln, N * C, false},      {&a->datty, N * QD, false},
                  {&a->dqkv, N * QKV, false},       {&a->datt, att, false},       {&a->lnf, N * C, false},
                  {&a->dlnf, N * C, false},         {&a->logits, N * V, false}};
    int64_t bytes = 0;
    for (const auto& x : arrays) {
        if (kept_only && !x.kept) continue;
        if (base) *x.p = (bf16*)(base + bytes);
        bytes = plan_add(bytes, round_up64(x.n * 2, 256), what);
    }
    float** stats[3] = {&a->rms1_rstd, &a->rms2_rstd, &a->lnf_rstd};
    for (int i = 0; i < (kept_only ? 0 : 3); i++) {  // a kept layer's are redone with its RMSNorms
        if (base) *stats[i] = (float*)(base + bytes);
        bytes = plan_add(bytes, round_up64(N * 4, 256), what);
    }
    const int64_t row_stats = plan_mul(plan_mul(N, c->num_heads, what), 4, what);  // (B, NH, T) floats
    float** rows[2] = {&a->att_lse, &a->att_dsum};
    for (int i = 0; i < (kept_only ? 1 : 2); i++) {
        if (base) *rows[i] = (float*)(base + bytes);
        bytes = plan_add(bytes, round_up64(row_stats, 256), what);
    }
    return round_up64(bytes, 256);
}

// A layer's activations, as llm.c's table of sizes: returns their bytes.
// With a base, points a's arrays into it. Llama: llama_acts_layout.
// kept_only: a -K layer redoes LayerNorms and GELU (6C per token), keeps 9C.
static int64_t acts_layout(const GPTConfig* c, int B, int T, bool kept_only, char* base, LayerActs* a,
                           const LlamaConfig* llama = NULL, bool vocab_host = false) {
    if (llama && llama->num_layers) return llama_acts_layout(llama, B, T, kept_only, base, a, vocab_host);
    const char* what =
        "the activation workspace of one layer (B*T*4C, B*NH*T*T attention scores or B*T*Vp logits; lower -b "
        "or -t)";
    const int64_t N = (int64_t)B * T, C = c->channels, Vp = c->padded_vocab_size;
    // the largest arrays first, so no size below can wrap
    const int64_t largest[3] = {plan_mul(N, 4 * C, what),
                                plan_mul(plan_mul((int64_t)B * c->num_heads, T, what), T, what),
                                plan_mul(N, Vp, what)};
    for (int i = 0; i < 3; i++) plan_add(plan_mul(largest[i], 2, what), 255, what);  // bf16, 256-aligned
    // (T x T) scores only on the cuBLAS path: fused kernels keep them in registers
    const int64_t att = use_flash_attention(c) ? 0 : (int64_t)B * c->num_heads * T * T;
    const struct {
        bf16** p;
        int64_t n;
        bool kept;
    } arrays[] = {{&a->ln1, N * C, false},    {&a->qkv, N * 3 * C, true},       {&a->att, att, true},
                  {&a->atty, N * C, true},    {&a->residual2, N * C, true},     {&a->ln2, N * C, false},
                  {&a->fch, N * 4 * C, true}, {&a->fch_gelu, N * 4 * C, false}, {&a->dfch, N * 4 * C, false},
                  {&a->dln, N * C, false},    {&a->dqkv, N * 3 * C, false},     {&a->datt, att, false},
                  {&a->lnf, N * C, false},    {&a->dlnf, N * C, false},         {&a->logits, N * Vp, false}};
    int64_t bytes = 0;
    for (const auto& x : arrays) {
        if (kept_only && !x.kept) continue;
        if (base) *x.p = (bf16*)(base + bytes);
        bytes = plan_add(bytes, round_up64(x.n * 2, 256), what);
    }
    float** stats[6] = {&a->ln1_mean, &a->ln1_rstd, &a->ln2_mean, &a->ln2_rstd, &a->lnf_mean, &a->lnf_rstd};
    for (int i = 0; i < (kept_only ? 0 : 6); i++) {  // a kept layer's are redone with its LayerNorms
        if (base) *stats[i] = (float*)(base + bytes);
        bytes = plan_add(bytes, N * 4, what);
    }
    const int64_t row_stats = plan_mul(plan_mul(N, c->num_heads, what), 4, what);  // (B, NH, T) floats
    float** rows[2] = {&a->att_lse, &a->att_dsum};
    for (int i = 0; i < (kept_only ? 1 : 2); i++) {
        if (base) *rows[i] = (float*)(base + bytes);
        bytes = plan_add(bytes, row_stats, what);
    }
    return round_up64(bytes, 256);  // kept layers laid end to end each start 256-byte aligned
}
static int64_t acts_bytes(const GPTConfig* c, int B, int T, bool kept_only, const LlamaConfig* llama = NULL,
                          bool vocab_host = false) {
    LayerActs unused;
    return acts_layout(c, B, T, kept_only, NULL, &unused, llama, vocab_host);
}

#define RESIDENT_BYTES_PER_PARAM \
    18  // a GPU-resident parameter: bf16 weight, fp32 gradient, master, AdamW m, v

typedef struct {
    int64_t resident_count;  // parameters on the GPU: embeddings and the first R layers
    // host
    int64_t master_adam;  // fp32 master, AdamW m, v: 12 bytes a parameter (-sd: prefix only)
    int64_t pinned;       // bf16 weights, gradients, -sw 1 read buffers (stream_host_bytes), token staging
    int64_t ssd_ring;     // -sd: the store's ring of piece buffers
    int64_t ssd_disk;     // -sd: the store's files in DIR (not host memory)
    int64_t ssd_read_per_step, ssd_write_per_step;  // -sd: disk traffic of one step (ssd_plan)
    int64_t ssd_round_reads, ssd_round_writes;      // -sd: the round's disk work in the next forward
    int64_t vocab_grads;                            // -E 1: the vocabulary tensors' fp32 gradients
    int64_t vocab_staging;  // -E 1, pinned: one chunk's gradient and one micro-batch's rows
    // GPU
    int64_t embeddings;       // embeddings with their AdamW state (RESIDENT_BYTES_PER_PARAM each)
    int64_t vocab_chunks;     // -E 1 instead: a head chunk, its gradient, row buffers
    int64_t resident_layer;   // one -R layer with its AdamW state
    int64_t resident_layers;  // R of them
    int64_t slots;            // the weight slots (num_slots x one bf16 layer)
    int64_t grad_staging;     // two bf16 layers of gradients on their way to the host
    int64_t layer_grads;      // fp32 gradient of the streamed layer in flight
    int64_t layer_inputs;  // (L+1) x micro-batches x (N, C) bf16: each layer's input, kept for its backward
    int64_t dresid;        // micro-batches x (N, C) bf16: the residual stream's gradient
    int64_t tokens;        // micro-batches x N x 4 bytes, each of inputs, targets, positions, losses
    int64_t scalars;       // loss (fp32), squared norm (fp64), the cuBLAS workspace
    int64_t attn;          // cuDNN's attention: its workspace and the ragged metadata (also pinned)
    int64_t acts;          // one layer's activations for one micro-batch (acts_bytes)
    int64_t kept_acts;     // one layer's kept activations (-K) for one micro-batch
    int64_t kept_layer;    // one -K layer: micro-batches x kept_acts
    int64_t kept;          // K of them
    int64_t host_bytes, gpu_bytes;  // the sums
} MemoryPlan;

// -sb: host bytes for the store's ring (0: SSD_RING_MIN pieces). One per process, set from the flags before
// any plan, as flash_attention_flag.
static double ssd_ring_budget_bytes = 0;
#define SSD_RING_MIN 4
// -sd on several ranks of one node (-pn): one store, the node's rank 0's, whose round updates whole layers;
// the ranks' summed gradients wait in the node's shared host RAM (2 bytes a parameter, as in RAM), not in the
// tier's ring and grads file. Set from the flags before any plan, as ssd_ring_budget_bytes.
static bool ssd_grads_in_ram = false;
// -sd on N nodes of G ranks (-pN N -pn G): each node's store holds its part of each streamed layer, the fp32
// state its ranks' slices cover (comm_node_part); the plan counts the largest, node 0's. Set as the above.
static int ssd_nodes = 1, ssd_node_ranks = 1;

// -sd's store (several nodes: each node's, its part of each layer): layers R..L-1 in pieces of <= 64 Mi
// parameters, a ring of SSD_RING_MIN pieces, or as many as -sb's bytes hold, up to the round's pieces + 1
// (the whole round read ahead, none of its writes waited for).
static SsdStoreConfig ssd_store_config(const GPTConfig* c, int resident_layers, int tier,
                                       const LlamaConfig* llama = NULL) {
    SsdStoreConfig sc;
    memset(&sc, 0, sizeof sc);
    sc.num_layers = c->num_layers - resident_layers;
    sc.layer_elems = node_part_of(model_layout(c, llama).layer_stride, ssd_nodes, ssd_node_ranks);
    // -sw 1: in the store's generations; on several nodes (whose stores hold their part) whole layers in its
    // scratch file, layers.bf16
    sc.with_bf16 = tier == TIER_SSD_WEIGHTS && ssd_nodes == 1;
    sc.bf16_cached = sc.with_bf16 && ssd_node_ranks > 1;  // ssd_tier.h's sw_read_start on several ranks
    sc.whole_bf16_elems = tier == TIER_SSD_WEIGHTS && ssd_nodes > 1 ? model_layout(c, llama).layer_stride : 0;
    sc.ring = SSD_RING_MIN;
    sc.grads_on_disk = !ssd_grads_in_ram;  // ssd_tier.h's gradient writer
    sc.piece_elems = (int64_t)1 << 26;
    const char* e = getenv("SSD_PIECE_ELEMS");
    if (e && atoll(e) > 0) sc.piece_elems = atoll(e);  // the tests cut small layers into pieces
    if (ssd_ring_budget_bytes > 0 && sc.num_layers > 0) {
        SsdStoreConfig one = sc;
        one.ring = 1;
        const int64_t piece_bytes = ssd_store_ring_bytes(&one),
                      pieces = sc.num_layers * ssd_store_layer_pieces(&sc);
        const double fit = ssd_ring_budget_bytes / (double)piece_bytes;
        sc.ring = (int)std::max<double>(SSD_RING_MIN, std::min<double>(fit, (double)pieces + 1));
    }
    return sc;
}

// The plan. Terms growing with -b, -t, -d are overflow-checked.
// llama: c is its llama_gpt_config. vocab_host: -E 1.
static MemoryPlan gpt_memory_plan(const GPTConfig* c, int B, int T, int max_micro, int num_slots,
                                  int resident_layers, int kept_layers, int tier = TIER_RAM,
                                  const LlamaConfig* llama = NULL, bool vocab_host = false) {
    const ParamLayout p = model_layout(c, llama);
    const int64_t N = (int64_t)B * T;
    MemoryPlan m;
    memset(&m, 0, sizeof m);
    // each per-parameter term and sum is under 64 bytes: one check covers all
    plan_mul(p.total, 64,
             "the parameters (fp32 weights, AdamW m and v, bf16 copies: choose a smaller model)");
    const bool ssd = tier != TIER_RAM;
    const int64_t prefix = p.embed_count + (int64_t)resident_layers * p.layer_stride;
    m.master_adam = (ssd ? prefix : p.total) * 12;
    const HostReader reader = sw_reader(NULL, &p, resident_layers);
    m.pinned = stream_host_bytes(c->num_layers, p.layer_stride, p.embed_count, !ssd || ssd_grads_in_ram,
                                 tier == TIER_SSD_WEIGHTS ? &reader : NULL);
    if (ssd && !ssd_grads_in_ram) m.pinned += GRAD_RING * grads_ring_bytes(&p);  // the gradients' ring
    if (tier == TIER_SSD_WEIGHTS)  // several nodes: one layer the nodes' exchange completes (SsdTier.whole)
        m.pinned += ssd_nodes > 1 ? direct_io_bytes(p.layer_stride * 2) : sw_handoff_bytes(&p);
    if (tier == TIER_SSD_WEIGHTS)  // the node's other ranks read the weights from disk too, each its buffers
        m.pinned += (int64_t)(ssd_node_ranks - 1) * reader.num_buffers * direct_io_bytes(reader.buffer_bytes);
    if (ssd && resident_layers < c->num_layers) {
        const SsdStoreConfig sc = ssd_store_config(c, resident_layers, tier, llama);
        SsdPlanInput in;
        memset(&in, 0, sizeof in);
        in.streamed_layers = sc.num_layers;
        in.layer_elems = sc.layer_elems;
        in.ring = sc.ring;
        in.piece_elems = sc.piece_elems;
        in.grads_on_disk = sc.grads_on_disk;
        in.with_bf16 = sc.with_bf16;
        in.whole_bf16_elems = sc.whole_bf16_elems;
        in.bf16_buffers = SW_READ_BUFFERS + (ssd_nodes > 1 ? 1 : SW_HANDOFF_BUFFERS);  // nodes: SsdTier.whole
        in.held_grads = GRAD_RING;
        const SsdPlan sp = ssd_plan(&in);
        m.ssd_ring = sp.host_ring;
        m.ssd_disk = sp.disk_bytes;
        m.ssd_read_per_step = sp.read_per_step;
        m.ssd_write_per_step = sp.write_per_step;
        m.ssd_round_reads = sp.round_reads;
        m.ssd_round_writes = sp.round_writes;
    }

    const char* inputs = "the layer-input checkpoints ((L+1) * micro-batches * B*T*C; lower -d, -b or -t)";
    const int64_t act = plan_mul(plan_mul(N, c->channels, inputs), 2, inputs);  // one (N, C) bf16 tensor
    m.resident_count = p.embed_count + (int64_t)resident_layers * p.layer_stride;
    m.embeddings = p.embed_count * RESIDENT_BYTES_PER_PARAM;
    if (vocab_host) {  // llmc/vocab_host.cuh's buffers
        const int64_t rows = vocab_chunk_rows(c->vocab_size, c->channels), C = c->channels;
        m.embeddings = 0;
        const int64_t tokens = plan_mul(max_micro, N, inputs);  // lnf, its rstd, dlnf (fp32), 3 row stats
        // two bf16 chunks (one computes, the next arrives) and two fp32 gradients (one fills, one goes down)
        m.vocab_chunks = rows * C * (2 * 2 + 2 * 4) + C * (2 + 4) + plan_mul(tokens, C * 6 + 4 * 4, inputs);
        m.vocab_grads = p.embed_count * 4;
        m.vocab_staging = 2 * rows * C * 4 + plan_mul(N, C * 2, inputs);  // two chunks' gradients, rows
    }
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
    plan_mul(m.tokens, 4, micro);
    m.pinned += 3 * m.tokens;  // gpt_build's tokens_host
    m.pinned += m.vocab_staging;
    m.host_bytes = m.master_adam + m.pinned + m.ssd_ring + m.vocab_grads;
    m.scalars = 4 + 8 + (int64_t)kCublasWorkspaceBytes;
    if (use_cudnn_attention()) {
        const int64_t meta = attention_meta_bytes(N, max_micro);  // m.tokens checked max_micro N
        m.attn = cudnn_attention_workspace + meta;
        m.pinned += meta;
        m.host_bytes += meta;
    }
    if (llama && llama->num_layers) m.scalars += (int64_t)(llama->head_dim / 2) * 4;  // RoPE's frequencies
    const char* kept =
        "the kept activations (-K layers * micro-batches * one layer's forward activations; lower -K)";
    m.kept_acts = acts_bytes(c, B, T, true, llama, vocab_host);
    m.kept_layer = plan_mul(max_micro, m.kept_acts, kept);
    m.kept = plan_mul(kept_layers, m.kept_layer, kept);
    m.acts = acts_bytes(c, B, T, false, llama, vocab_host);

    const int64_t parts[] = {m.embeddings,  m.vocab_chunks, m.resident_layers, m.slots,  m.grad_staging,
                             m.layer_grads, m.layer_inputs, m.dresid,          m.tokens, m.tokens,
                             m.tokens,      m.tokens,       m.scalars,         m.kept,   m.acts,
                             m.attn};
    m.gpu_bytes = 0;
    for (int64_t part : parts)
        m.gpu_bytes = plan_add(m.gpu_bytes, part, "the whole GPU plan (lower -b or -t)");
    return m;
}

// -R / -K to try next, from a step's timeline and free GPU memory (docs/memory.md).
typedef struct {
    int resident, kept;
} Placement;
static Placement suggest_placement(const TimelineSummary* t, int L, Placement now, int64_t spare_bytes,
                                   int64_t resident_layer_bytes, int64_t kept_layer_bytes) {
    Placement next = now;
    const double adam_per_layer = t->adam_layers > 0 ? t->busy_s[TRACK_ADAM] / t->adam_layers : 0.0;
    // resident layers while the forward waits on CPU AdamW (over 2% of the step), then kept
    if (adam_per_layer > 0.0 && t->fwd_wait_s > 0.02 * t->step_s && spare_bytes > 0) {
        int64_t more = (int64_t)ceil(t->fwd_wait_s / adam_per_layer - 1e-6);  // exact counts stay exact
        more =
            std::min<int64_t>(std::min<int64_t>(more, L - now.resident), spare_bytes / resident_layer_bytes);
        next.resident += (int)more;
        spare_bytes -= more * resident_layer_bytes;
    }
    if (spare_bytes > 0) next.kept += (int)std::min<int64_t>(L - now.kept, spare_bytes / kept_layer_bytes);
    return next;
}

// Host bytes for the fit check: -M (a VM that grows with use), else MemAvailable.
// -1: unknown, no check.
static int64_t host_memory_to_count_on(const GpuArgs* ga) {
    return ga->host_gib > 0 ? (int64_t)((double)ga->host_gib * 1073741824.0) : host_available_bytes();
}

// Reserve for what the plan cannot count (docs/memory.md).
static const int64_t gpu_reserve_bytes = (int64_t)256 << 20;
static const int64_t gpu_margin_bytes = (int64_t)1 << 30;
// Budget: free memory, or -V if less.
static int64_t gpu_memory_budget(const GpuArgs* ga, int64_t gpu_free) {
    const int64_t given = (int64_t)((double)ga->gpu_gib * 1073741824.0);
    return ga->gpu_gib > 0 && given < gpu_free ? given : gpu_free;
}
// -E -1: vocabulary tensors go to the host if the GPU budget cannot hold them.
static int vocab_host_for(const GPTConfig* c, int B, int T, int n_micro, int slots, const GpuArgs* ga,
                          int64_t budget, const LlamaConfig* llama) {
    if (!llama || !llama->num_layers) return 0;
    if (ga->vocab_host >= 0) return ga->vocab_host;
    const MemoryPlan on_gpu = gpt_memory_plan(c, B, T, n_micro, slots, std::max(ga->resident, 0),
                                              std::max(ga->kept, 0), ssd_tier(ga), llama, false);
    return on_gpu.gpu_bytes + gpu_reserve_bytes + gpu_margin_bytes > budget ? 1 : 0;
}

// -R -1, then -K -1: as many layers as fit. Returns the plan. (-R auto / -K auto: plan_advice.cuh.)
static MemoryPlan place_layers(const GPTConfig* c, int B, int T, int n_micro, int slots, const GpuArgs* ga,
                               int64_t budget, int* resident, int* kept, const LlamaConfig* llama = NULL) {
    MemoryPlan plan =
        gpt_memory_plan(c, B, T, n_micro, slots, *resident, *kept, ssd_tier(ga), llama, ga->vocab_host > 0);
    auto layers_that_fit = [&](int64_t per_layer) {
        const int64_t spare = budget - gpu_reserve_bytes - gpu_margin_bytes - plan.gpu_bytes;
        return spare > 0 ? (int)std::min<int64_t>(spare / per_layer, c->num_layers) : 0;
    };
    if (ga->resident == -1) {
        *resident = layers_that_fit(plan.resident_layer);
        plan = gpt_memory_plan(c, B, T, n_micro, slots, *resident, *kept, ssd_tier(ga), llama,
                               ga->vocab_host > 0);
    }
    if (ga->kept == -1 && ga->resident != LAYERS_AUTO) {  // beside -R auto: plan_place_layers fills it
        *kept = layers_that_fit(plan.kept_layer);
        plan = gpt_memory_plan(c, B, T, n_micro, slots, *resident, *kept, ssd_tier(ga), llama,
                               ga->vocab_host > 0);
    }
    return plan;
}

// Free bytes on dir's filesystem (dir, or its parent where a run would create it), or -1 with errno:
// neither there (-P 1 for another machine's disk: a grandparent's disk says nothing of it).
static int64_t dir_free_bytes(const char* dir) {
    struct statvfs sv;
    if (statvfs(dir, &sv) != 0 && (errno != ENOENT || statvfs(parent_dir(dir).c_str(), &sv) != 0)) return -1;
    return (int64_t)sv.f_bavail * (int64_t)sv.f_frsize;
}

// -sd DIR as a run will use it: a directory it can write in, or one it can create (mkdir: its parent must
// exist). false with why: -P 1 refuses what a run here would (it said the disk had room for a file's path),
// but for a parent not there (*elsewhere: another machine's disk, planned with its free space unknown).
static bool ssd_dir_usable(const char* dir, char* why, size_t n, bool* elsewhere = nullptr) {
    if (elsewhere) *elsewhere = false;
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) return snprintf(why, n, "-sd %s is not a directory", dir), false;
        if (access(dir, W_OK | X_OK) != 0)
            return snprintf(why, n, "-sd %s: cannot write in it: %s", dir, strerror(errno)), false;
        return true;
    }
    const std::string parent = parent_dir(dir);
    const bool there = stat(parent.c_str(), &st) == 0;
    if (elsewhere) *elsewhere = !there && errno == ENOENT;
    if (!there || !S_ISDIR(st.st_mode))
        return snprintf(why, n, "-sd %s: cannot create it: %s %s (a run creates DIR, not its parents)", dir,
                        parent.c_str(), there ? "is not a directory" : "does not exist"),
               false;
    if (access(parent.c_str(), W_OK | X_OK) != 0)
        return snprintf(why, n, "-sd %s: cannot create it in %s: %s", dir, parent.c_str(), strerror(errno)),
               false;
    return true;
}

// -P 1: gpt_build's allocations, part by part. Whether they fit: llmc/plan_advice.cuh.
static void print_memory_plan(const GPTConfig* c, int B, int T, int n_micro, int slots, int resident,
                              int kept, const GpuArgs* ga, MemoryPlan plan, bool no_gpu_here,
                              const LlamaConfig* llama = NULL) {
    const double GiB = 1073741824.0;
    const ParamLayout p = model_layout(c, llama);
    const MemoryPlan& m = plan;
    const int G = ga->ranks * ga->nodes;  // several GPUs: the plan is each GPU's, for its micro-batches
    char per_step[96];
    snprintf(per_step, sizeof per_step, "%d x %d tokens x %d micro-batch%s per step%s", B, T, n_micro,
             n_micro == 1 ? "" : "es", G > 1 ? " on each GPU" : "");
    if (llama && llama->num_layers)
        printf("memory plan: Llama family L%d C%d NH%d KV%d hd%d I%d V%d, %.3f B parameters, %s\n",
               c->num_layers, c->channels, c->num_heads, llama->num_kv_heads, llama->head_dim,
               llama->intermediate_size, llama->vocab_size, p.total / 1e9, per_step);
    else
        printf("memory plan: L%d C%d NH%d, %.3f B parameters, %s\n", c->num_layers, c->channels, c->num_heads,
               gpt_num_real_params(c, &p) / 1e9, per_step);
    printf("attention: %s%s\n",
           use_cudnn_attention() && use_flash_attention(c, llama)
               ? "cuDNN SDPA (no T x T scores stored; its workspace counted)"
           : use_cudnn_attention() ? "cuDNN SDPA (its workspace counted), T x T scores stored for the chat "
                                     "micro-batches it cannot run"
           : use_flash_attention(c, llama) ? "fused kernels (no T x T scores stored)"
                                           : "cuBLAS + softmax (T x T scores stored in the workspace)",
           no_gpu_here ? "; no GPU here: planned for an sm_90 one" : "");
    printf(
        "host %9.2f GiB: fp32 master weights and AdamW m, v %.2f%s; pinned bf16 weights and gradients %.2f%s",
        m.host_bytes / GiB, m.master_adam / GiB, ga->ssd_dir ? " (embeddings and -R layers: -sd)" : "",
        m.pinned / GiB,
        !ga->ssd_dir || !ga->ssd_weights ? ""
        : ga->nodes > 1
            ? " (the prefix's weights, each GPU's read buffers, a layer the nodes' exchange completes, "
              "the gradients: -sw 1)"
        : ga->ranks > 1 ? " (the prefix's weights, each GPU's read and rank 0's handoff layer buffers, the "
                          "gradients: -sw 1)"
                        : " (the prefix's weights, read, handoff and gradient layer buffers: -sw 1)");
    if (ga->ssd_dir) printf("; the SSD tier's ring %.2f", m.ssd_ring / GiB);
    if (ga->vocab_host > 0)
        printf("; the vocabulary tensors' fp32 gradients %.2f (-E 1)", m.vocab_grads / GiB);
    if (ga->nodes > 1)
        printf(
            " (the arrays of one whole copy; each node holds the bf16 weights whole%s, the prefix's fp32 "
            "state "
            "whole (-E 1's vocabulary: 1/N) and 1/N of the rest: the table's host RAM, node)",
            ga->ssd_dir && ga->ssd_weights ? " (-sw 1: the prefix's, the layers' on its disk)" : "");
    else if (ga->ranks > 1 && ga->vocab_host > 0)
        printf(" (once for the node's %d GPUs; each GPU's -E 1 staging too: the table's host RAM)",
               ga->ranks);
    printf(
        "\nGPU  %9.2f GiB: layer-input checkpoints %.2f; %d weight slots %.2f; %s %.2f; "
        "%d resident layers %.2f; %d layers' kept activations %.2f; one layer's workspace %.2f and fp32 "
        "gradient %.2f; "
        "the rest %.2f",
        m.gpu_bytes / GiB, m.layer_inputs / GiB, slots, (m.slots + m.grad_staging) / GiB,
        ga->vocab_host > 0 ? "vocabulary chunk buffers (-E 1)" : "embeddings with their AdamW state",
        (m.embeddings + m.vocab_chunks) / GiB, resident, m.resident_layers / GiB, kept, m.kept / GiB,
        m.acts / GiB, m.layer_grads / GiB, (m.dresid + 4 * m.tokens + m.scalars + m.attn) / GiB);
    char node_part[64] = "";  // -sd on several nodes: each node's store, its part of each layer
    if (ga->nodes > 1) snprintf(node_part, sizeof node_part, "its 1/%d of ", ga->nodes);
    if (ga->ssd_dir)
        printf(
            "\ndisk %9.2f GiB in %s%s: two generations of %sthe streamed layers' fp32 weights, AdamW m and "
            "v%s%s; "
            "per step %.2f GiB read, %.2f GiB written",
            m.ssd_disk / GiB, ga->ssd_dir, ga->nodes > 1 ? "/node<n> on each node" : "", node_part,
            !ga->ssd_weights ? ""
            : ga->nodes > 1  ? " (-sw 1: and each layer's bf16 weights whole, once, in layers.bf16)"
                             : " and bf16 weights",
            ssd_grads_in_ram ? " (several GPUs: their bf16 gradients in host RAM)"
                             : ", and their bf16 gradients",
            m.ssd_read_per_step / GiB, m.ssd_write_per_step / GiB);
    // what each checkpoint writes to -o (the state file: every parameter's m and v, -sd's the prefix's unless
    // -sk 1)
    const double model_file = 4.0 * (double)p.total,
                 in_state = ga->ssd_dir && !ga->ssd_keep_state
                                ? (double)p.embed_count + (double)resident * (double)p.layer_stride
                                : (double)p.total;
    printf("\ncheckpoint %.2f GiB in -o each: model_N.bin %.2f, state_N.bin %.2f (%s)",
           (model_file + 8 * in_state) / GiB, model_file / GiB, 8 * in_state / GiB,
           !ga->ssd_dir ? "AdamW m and v"
           : ga->ssd_keep_state
               ? "AdamW m and v of every parameter, read from the store at the save: -sk 1"
               : "the prefix's AdamW m and v; the store keeps the rest: resumes with -sd only, "
                 "-sk 1 resumes anywhere");
    printf("\neach further -R layer %.2f GiB, each further -K layer %.2f GiB%s\n", m.resident_layer / GiB,
           m.kept_layer / GiB,
           (ga->resident < 0 || ga->kept < 0) && ga->gpu_gib <= 0 && no_gpu_here
               ? " (-R / -K, auto or -1, are placed on the GPU's free memory: 0 here; -V GiB plans them for "
                 "that much)"
               : "");
}
