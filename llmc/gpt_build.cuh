// llmc/gpt_build.cuh — a trainer's memory: gpt_build allocates what llmc/memory_plan.cuh planned (the GPU's
// from the plan, one allocation a field; the host's fp32 weights and AdamW state; -E 1's vocabulary buffers;
// several ranks: the node's one copy in shared memory), gpt_free frees it. The caller fills g->master, then
// gpt_weights_ready makes the bf16 copy and the GPU's resident prefix from it.
// Not here: the sizes (llmc/memory_plan.cuh), the step (train_gpt.cu), checkpoints (llmc/gpt_checkpoint.cuh).
#pragma once
#include <sys/mman.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <vector>
#include "llmc/attention_path.cuh"  // defines: use_flash_attention, use_cudnn_attention, attention_meta_bytes
#include "llmc/collectives.h"    // defines: Comm, comm_part, comm_node_part, node_shared_alloc, node_barrier
#include "llmc/cpu_adam.h"       // defines: convert_f32_to_bf16
#include "llmc/cpu_optimizer.h"  // defines: optimizer_start, optimizer_stop, optimizer_layer_ready
#include "llmc/gpt.cuh"          // defines: struct GPT, LayerActs, acts_layout, model_layout
#include "llmc/matmul.cuh"       // defines: matmul_handles_create, cublas_use_stream, cublas_workspace
#include "llmc/memory_plan.cuh"  // defines: MemoryPlan, gpt_memory_plan, vocab_chunk_rows
#include "llmc/ssd_tier.h"       // defines: ssd_tier_new, ssd_tier_free, sw_reader
#include "llmc/stream.h"         // defines: stream_init, stream_free, stream_invalidate, StreamHostArrays
#include "llmc/vocab_host.cuh"   // defines: HostVocab, vocab_head_worker_stop, vocab_upload_final_norm

// cudaMalloc that counts the trainer's GPU bytes.
static void* gpu_alloc(GPT* g, int64_t bytes) {
    void* p = NULL;
    if (bytes == 0) return NULL;  // -E 1 without -R: no GPU-resident parameter
    const cudaError_t err = cudaMalloc(&p, (size_t)bytes);
    if (err != cudaSuccess)
        die("out of GPU memory allocating %.3f GiB (%s)", bytes / 1073741824.0, cudaGetErrorString(err));
    g->gpu_bytes += bytes;
    return p;
}

// fp32 master weights and AdamW state: anonymous mmap, zero-filled lazily. Several ranks: the node's one
// copy.
static float* host_alloc_floats(int64_t n, Comm* comm = NULL, const char* what = "") {
    const size_t bytes = (size_t)n * 4;
    if (comm && comm->world > 1) return (float*)node_shared_alloc(comm, (int64_t)bytes, what);
    void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    madvise(p, bytes, MADV_HUGEPAGE);  // transparent huge pages where available
    return (float*)p;
}
static void host_free_floats(float* p, int64_t n) {
    if (p) munmap(p, (size_t)n * 4);
}

// -E 1: llmc/vocab_host.cuh's buffers (plan: vocab_chunks, vocab_staging, vocab_grads).
static void vocab_build(GPT* g, int64_t N, const MemoryPlan& plan) {
    HostVocab* v = new HostVocab();
    const int64_t C = g->llama.hidden_size, MN = g->max_micro * N;
    v->rows = vocab_chunk_rows(g->llama.vocab_size, C);
    for (int k = 0; k < 2; k++) {
        v->w_chunk[k] = (bf16*)gpu_alloc(g, v->rows * C * 2);
        cudaCheck(cudaEventCreateWithFlags(&v->chunk_ready[k], cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&v->chunk_free[k], cudaEventDisableTiming));
    }
    cudaCheck(cudaStreamCreateWithFlags(&v->copy, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&v->copy_down, cudaStreamNonBlocking));
    for (int k = 0; k < 2; k++) {
        v->dw_chunk[k] = (float*)gpu_alloc(g, v->rows * C * 4);
        cudaCheck(cudaEventCreateWithFlags(&v->dw_summed[k], cudaEventDisableTiming));
    }
    v->final_norm = (bf16*)gpu_alloc(g, C * 2);
    v->dfinal_norm = (float*)gpu_alloc(g, C * 4);
    v->lnf = (bf16*)gpu_alloc(g, MN * C * 2);
    v->lnf_rstd = (float*)gpu_alloc(g, MN * 4);
    v->dlnf = (float*)gpu_alloc(g, MN * C * 4);
    v->row_max = (float*)gpu_alloc(g, MN * 4);
    v->row_sum = (float*)gpu_alloc(g, MN * 4);
    v->row_target = (float*)gpu_alloc(g, MN * 4);
    for (int k = 0; k < 2; k++) {
        cudaCheck(cudaMallocHost(&v->dw_host[k], (size_t)(v->rows * C * 4)));
        cudaCheck(cudaEventCreateWithFlags(&v->dw_copied[k], cudaEventDisableTiming));
    }
    cudaCheck(cudaMallocHost(&v->rows_host, (size_t)(N * C * 2)));
    v->grads = host_alloc_floats(g->layout.embed_count, g->comm, "the vocabulary's gradients");
    if (!v->grads)
        die("out of host memory for the vocabulary's gradients (%.1f GiB)", plan.vocab_grads / 1073741824.0);
    v->row_state = new std::atomic<uint8_t>[(size_t)g->llama.vocab_size];  // updated: no step's AdamW pending
    for (int64_t r = 0; r < g->llama.vocab_size; r++) v->row_state[r].store(2, std::memory_order_relaxed);
    g->vocab = v;
}
static void vocab_free(GPT* g) {
    HostVocab* v = g->vocab;
    if (!v) return;
    vocab_head_worker_stop(g);
    cudaCheck(cudaStreamSynchronize(v->copy));
    cudaCheck(cudaStreamSynchronize(v->copy_down));
    for (void* p : {(void*)v->w_chunk[0], (void*)v->w_chunk[1], (void*)v->dw_chunk[0], (void*)v->dw_chunk[1],
                    (void*)v->final_norm, (void*)v->dfinal_norm, (void*)v->lnf, (void*)v->lnf_rstd,
                    (void*)v->dlnf, (void*)v->row_max, (void*)v->row_sum, (void*)v->row_target})
        cudaCheck(cudaFree(p));
    for (int k = 0; k < 2; k++) {
        cudaCheck(cudaEventDestroy(v->chunk_ready[k]));
        cudaCheck(cudaEventDestroy(v->chunk_free[k]));
    }
    cudaCheck(cudaStreamDestroy(v->copy));
    cudaCheck(cudaStreamDestroy(v->copy_down));
    for (int k = 0; k < 2; k++) cudaCheck(cudaEventDestroy(v->dw_summed[k]));
    for (int k = 0; k < 2; k++) {
        cudaCheck(cudaFreeHost(v->dw_host[k]));
        cudaCheck(cudaEventDestroy(v->dw_copied[k]));
    }
    cudaCheck(cudaFreeHost(v->rows_host));
    host_free_floats(v->grads, g->layout.embed_count);
    delete[] v->row_state;
    delete v;
    g->vocab = NULL;
}

static Comm single_rank;  // a run of one GPU

// Streamed layers' gradient buffer: the layer, or with several ranks one slice per rank (collectives.h).
static int64_t layer_grads_floats(const GPT* g) {
    const Comm* c = g->comm;
    return c->backend != COMM_SINGLE ? (int64_t)c->world * comm_slice(c, g->layout.layer_stride)
                                     : g->layout.layer_stride;
}

// The host bf16 weights: every layer's, or with -sw 1 (the streamed layers' on disk) the prefix's.
static int64_t host_weights_bytes(const GPT* g, bool on_disk) {
    const ParamLayout* p = &g->layout;
    return (p->embed_count +
            (int64_t)(on_disk ? g->resident_layers : g->config.num_layers) * p->layer_stride) *
           2;
}

// The node's pinned bf16 weights and gradients, once for all ranks (NULL: one rank, stream_init's own).
// Several nodes: the gradients of the node's part of each layer only (comm_node_part).
static StreamHostArrays* node_stream_arrays(GPT* g, bool weights_on_disk) {
    static StreamHostArrays shared;
    if (g->comm->local_world == 1 && g->comm->nodes == 1) return NULL;
    const ParamLayout* p = &g->layout;
    const int64_t L = g->config.num_layers;
    int64_t lo, hi;
    comm_node_part(g->comm, p->layer_stride, g->comm->node_rank, &lo, &hi);
    shared.grads_base = lo;
    shared.grads_stride = std::max<int64_t>(hi - lo, 1);
    shared.weights =
        (uint16_t*)node_shared_alloc(g->comm, host_weights_bytes(g, weights_on_disk), "the bf16 weights");
    shared.grads = (uint16_t*)node_shared_alloc(g->comm, L * shared.grads_stride * 2, "the layer gradients");
    return &shared;
}

// tier: where streamed layers' state lives (TIER_*). llama: cfg is its llama_gpt_config. comm: the ranks.
static void gpt_build(GPT* g, const GPTConfig* cfg, int B, int T, int max_micro, int num_slots,
                      int resident_layers, int kept_layers, const TrainArgs* args, int tier = TIER_RAM,
                      const LlamaConfig* llama = NULL, bool vocab_host = false, Comm* comm = NULL) {
    const bool ssd = tier != TIER_RAM;
    memset(g, 0, sizeof *g);
    g->comm = comm ? comm : &single_rank;
    if (ssd && ((g->comm->world > 1) != ssd_grads_in_ram || g->comm->nodes != ssd_nodes ||
                g->comm->local_world != ssd_node_ranks))
        die("internal: the SSD tier on %d ranks of %d nodes (tier %d)", g->comm->world, g->comm->nodes, tier);
    g->ssd_ranks = ssd && g->comm->world > 1;
    g->checkpoint_step = -1;
    g->config = *cfg;
    if (llama) g->llama = *llama;
    g->layout = model_layout(cfg, llama);
    g->B = B;
    g->T = T;
    g->max_micro = max_micro;
    g->args = *args;
    g->flash = use_flash_attention(cfg, llama);
    g->attn_path = use_cudnn_attention() ? ATTN_CUDNN : g->flash ? ATTN_FUSED : ATTN_CUBLAS;
    const ParamLayout* p = &g->layout;
    const GPTConfig* c = &g->config;
    if (resident_layers < 0 || resident_layers > c->num_layers || kept_layers < 0 ||
        kept_layers > c->num_layers)
        die("internal: %d GPU-resident layers, %d with kept activations, of %d", resident_layers, kept_layers,
            c->num_layers);
    if (cublas_workspace)  // matmul.cuh's handles, workspace, algorithm cache: one per process
        die("internal: a second GPT built while one is alive (gpt_free the first)");
    if (vocab_host && !is_llama(g)) die("internal: -E 1 for GPT-2");
    const MemoryPlan plan =
        gpt_memory_plan(c, B, T, max_micro, num_slots, resident_layers, kept_layers, tier, llama, vocab_host);
    g->resident_layers = resident_layers;
    g->kept_layers = kept_layers;
    g->resident_count = plan.resident_count;
    g->resident_start = vocab_host ? p->embed_count : 0;

    // host: not pinned, only the CPU touches them. -sd: the prefix only.
    g->host_state_count = ssd ? plan.resident_count : p->total;
    g->master = host_alloc_floats(g->host_state_count, g->comm, "the fp32 weights");
    g->adam_m = host_alloc_floats(g->host_state_count, g->comm, "AdamW m");
    g->adam_v = host_alloc_floats(g->host_state_count, g->comm, "AdamW v");
    if (!g->master || !g->adam_m || !g->adam_v)
        die("out of host memory for the fp32 weights and AdamW state (%.1f GiB)",
            plan.master_adam / 1073741824.0);
    g->forward_order = (int*)malloc(sizeof(int) * (size_t)c->num_layers);
    g->backward_order = (int*)malloc(sizeof(int) * (size_t)c->num_layers);
    if (!g->forward_order || !g->backward_order) die("out of host memory");
    const int streamed = c->num_layers - resident_layers;
    for (int i = 0; i < streamed; i++) {
        g->forward_order[i] = resident_layers + i;
        g->backward_order[i] = c->num_layers - 1 - i;
    }
    const HostReader reader = sw_reader(g, p, resident_layers);
    const HostReader* from_disk = tier == TIER_SSD_WEIGHTS ? &reader : NULL;
    stream_init(&g->stream, c->num_layers, p->layer_stride, p->embed_count, num_slots, optimizer_layer_ready,
                g, !ssd || g->ssd_ranks, from_disk, node_stream_arrays(g, from_disk != NULL));
    // several ranks of one node read the store's files: rank 0 says which generation (ssd_tier.h); several
    // nodes' ranks read each node's store's file of whole layers, of no generation
    if (from_disk && g->comm->world > 1 && g->comm->nodes == 1)
        g->sw_gen =
            (std::atomic<uint8_t>*)node_shared_alloc(g->comm, streamed, "the bf16 weights' generations");
    if (g->comm->world > 1) comm_part(g->comm, p->layer_stride, &g->stream.grad_lo, &g->stream.grad_hi);
    if (ssd && g->comm->local == 0) g->ssd = ssd_tier_new(g, tier);  // its store comes with ssd_attach
    g->gpu_bytes += plan.slots + plan.grad_staging;                  // stream_init's

    // GPU, from the plan: one allocation per field
    matmul_handles_create();                                          // unless check_fit did
    cublas_workspace = gpu_alloc(g, (int64_t)kCublasWorkspaceBytes);  // plan.scalars
    cublas_stream = NULL;
    cublas_use_stream(g->stream.compute);
    // plan.embeddings + plan.resident_layers, RESIDENT_BYTES_PER_PARAM each (-E 1: the layers only):
    const int64_t rc = plan.resident_count - g->resident_start;
    g->resident = (bf16*)gpu_alloc(g, rc * 2);
    g->resident_grads = (float*)gpu_alloc(g, rc * 4);
    g->resident_master = (float*)gpu_alloc(g, rc * 4);
    g->resident_m = (float*)gpu_alloc(g, rc * 4);
    g->resident_v = (float*)gpu_alloc(g, rc * 4);
    // plan.layer_grads; several ranks: rounded up to a slice per rank
    g->layer_grads = (float*)gpu_alloc(g, std::max(plan.layer_grads, layer_grads_floats(g) * 4));
    g->layer_inputs = (bf16*)gpu_alloc(g, plan.layer_inputs);
    g->dresid = (bf16*)gpu_alloc(g, plan.dresid);
    g->tokens_in = (int*)gpu_alloc(g, plan.tokens);
    g->tokens_out = (int*)gpu_alloc(g, plan.tokens);
    g->tokens_pos = (int*)gpu_alloc(g, plan.tokens);
    g->losses = (float*)gpu_alloc(g, plan.tokens);
    g->loss_dev = (float*)gpu_alloc(g, 4);    // plan.scalars
    g->sumsq_dev = (double*)gpu_alloc(g, 8);  // plan.scalars
    if (is_llama(g)) {                        // plan.scalars
        g->rope_inv_freq = (float*)gpu_alloc(g, (int64_t)(g->llama.head_dim / 2) * 4);
        rope_inv_freq_upload(g->rope_inv_freq, &g->llama);
    }
    cudaCheck(cudaMallocHost(&g->tokens_host, (size_t)plan.tokens * 3));  // plan.pinned
    if (g->attn_path == ATTN_CUDNN) {  // plan.attn: the workspace, the ragged metadata (pinned too)
        const int64_t N = (int64_t)B * T, meta = attention_meta_bytes(N, max_micro);
        g->attn_workspace = gpu_alloc(g, cudnn_attention_workspace);
        cudnn_att_use_workspace(g->attn_workspace, cudnn_attention_workspace);
        g->attn_meta = (int*)gpu_alloc(g, meta);
        cudaCheck(cudaMallocHost(&g->attn_meta_host, (size_t)meta));
        g->attn_micro = (AttnMicro*)calloc((size_t)max_micro, sizeof(AttnMicro));
        if (!g->attn_micro) die("out of host memory");
        for (int mb = 0; mb < max_micro; mb++) {
            g->attn_micro[mb] = {-1, ragged_meta_at(g->attn_meta + mb * ragged_meta_ints(N), N)};
        }
    }
    cudaCheck(cudaMallocHost(&g->loss_host, 4));
    cudaCheck(cudaMallocHost(&g->sumsq_host, 8));
    g->acts.bytes = plan.acts;
    g->acts.memory = gpu_alloc(g, plan.acts);
    acts_layout(c, B, T, false, (char*)g->acts.memory, &g->acts, llama, vocab_host);
    if (vocab_host) vocab_build(g, B * (int64_t)T, plan);
    if (kept_layers > 0) {
        const int64_t n = (int64_t)kept_layers * max_micro;
        g->kept_memory = gpu_alloc(g, plan.kept);
        g->kept = (LayerActs*)malloc(sizeof(LayerActs) * (size_t)n);
        if (!g->kept) die("out of host memory");
        for (int64_t i = 0; i < n; i++) {
            g->kept[i] = g->acts;  // what a kept layer does not keep stays in g->acts
            acts_layout(c, B, T, true, (char*)g->kept_memory + i * plan.kept_acts, &g->kept[i], llama,
                        vocab_host);
        }
    }
    optimizer_start(g);
}

// Pageable host <-> GPU via a pinned bounce buffer: pageable copies are slow.
// Freed after the copy, so the memory plan leaves it out.
static const int64_t kBounceBytes = (int64_t)8 << 20;
static void bounce_copy(GPT* g, void* const* dst, const void* const* src, int arrays, int64_t bytes,
                        cudaMemcpyKind kind) {
    cudaStream_t s = g->stream.compute;
    const bool h2d = kind == cudaMemcpyHostToDevice;
    char* bounce = NULL;
    cudaCheck(cudaMallocHost(&bounce, (size_t)kBounceBytes));
    for (int a = 0; a < arrays; a++)
        for (int64_t off = 0; off < bytes; off += kBounceBytes) {
            const size_t n = (size_t)std::min(kBounceBytes, bytes - off);
            if (h2d) memcpy(bounce, (const char*)src[a] + off, n);
            cudaCheck(cudaMemcpyAsync(h2d ? (char*)dst[a] + off : bounce,
                                      h2d ? bounce : (const char*)src[a] + off, n, kind, s));
            cudaCheck(cudaStreamSynchronize(s));  // the bounce buffer is free again
            if (!h2d) memcpy((char*)dst[a] + off, bounce, n);
        }
    cudaCheck(cudaFreeHost(bounce));
}

// Resident prefix's fp32 state, host <-> GPU, at load and checkpoint.
static void gpt_resident_state_to_device(GPT* g) {
    const int64_t o = g->resident_start, bytes = (g->resident_count - o) * 4;
    cudaStream_t s = g->stream.compute;
    void* const dst[3] = {g->resident_master, g->resident_m, g->resident_v};
    const void* const src[3] = {g->master + o, g->adam_m + o, g->adam_v + o};
    bounce_copy(g, dst, src, 3, bytes, cudaMemcpyHostToDevice);
    const size_t bf16_bytes = (size_t)(g->resident_count - o) * 2;
    if (bf16_bytes)
        cudaCheck(cudaMemcpyAsync(g->resident, g->stream.weights_host_bf16 + o, bf16_bytes,
                                  cudaMemcpyHostToDevice, s));
    if (g->vocab) vocab_upload_final_norm(g, s);
    cudaCheck(cudaStreamSynchronize(s));
}
static void gpt_resident_state_to_host(GPT* g) {
    const int64_t o = g->resident_start, bytes = (g->resident_count - o) * 4;
    // on the compute stream, so after the last GPU AdamW
    void* const dst[3] = {g->master + o, g->adam_m + o, g->adam_v + o};
    const void* const src[3] = {g->resident_master, g->resident_m, g->resident_v};
    bounce_copy(g, dst, src, 3, bytes, cudaMemcpyDeviceToHost);
}

// Master weights changed outside AdamW: new bf16 copy and resident prefix, empty slots.
static void gpt_weights_ready(GPT* g) {
    vocab_head_update_wait(g);  // -E 1: no table or head update still writing what the load replaced
    uint16_t* bf16 = g->stream.weights_host_bf16;
    // -sd: the prefix only; several nodes too (load_node_weights wrote the streamed layers' copies, and -E
    // 1's vocabulary's)
    const int64_t n = g->comm->nodes > 1 ? g->resident_count : g->host_state_count;
    const int64_t from = g->comm->nodes > 1 ? g->resident_start : 0;
    if (g->comm->local == 0) {  // several ranks: the node's one copy
        FAKE_CUDA_HOST_ACCESS(bf16 + from, (n - from) * 2, true, "the host writing the bf16 copy (load)");
        convert_f32_to_bf16(g->master + from, bf16 + from, n - from);
    }
    node_barrier(g->comm);
    gpt_resident_state_to_device(g);
    stream_invalidate(&g->stream);
}

// Several nodes: bytes of the fp32 weights, m and v in this node's RAM (mincore), and its share: the prefix
// whole (-E 1: the vocabulary's part, vocab_node_part), its parts of the streamed layers.
static void node_state_bytes(const GPT* g, double* resident, double* share) {
    const ParamLayout* p = &g->layout;
    const int64_t page = sysconf(_SC_PAGESIZE), n = g->host_state_count;
    const bool in_arrays = n == p->total;  // -sd: the prefix only (the streamed layers' part: the store's)
    *resident = 0;
    *share = 0;
    for (float* x : {g->master, g->adam_m, g->adam_v}) {
        const int64_t a = (int64_t)x / page * page, pages = ((int64_t)(x + n) - a + page - 1) / page;
        std::vector<unsigned char> in((size_t)pages);
        if (mincore((void*)a, (size_t)(pages * page), in.data()) != 0) return;
        for (unsigned char b : in) *resident += (b & 1) ? (double)page : 0.0;
    }
    int64_t lo, hi;
    comm_node_part(g->comm, p->layer_stride, g->comm->node_rank, &lo, &hi);
    const int streamed = in_arrays ? g->config.num_layers - g->resident_layers : 0;
    *share = 12.0 * ((double)n - (double)streamed * p->layer_stride + (double)streamed * (hi - lo));
    if (g->vocab) {
        vocab_node_part(g, g->comm->node_rank, &lo, &hi);
        *share -= 12.0 * ((double)p->embed_count - (double)(hi - lo));
    }
}

static void gpt_free(GPT* g) {
    // -E 1's head worker first: its last update waits for the optimizer's rounds and writes the host bf16
    // copy, which optimizer_stop and stream_free end (a caller that frees right after a step did not wait for
    // it)
    if (g->vocab) vocab_head_worker_stop(g);
    optimizer_stop(g);
    ssd_tier_free(g);
    // cuBLAS first: its handle is bound to the compute stream, which stream_free destroys
    cublasCheck(cublasDestroy(cublas_handle));
    cublasCheck(cublasLtDestroy(cublaslt_handle));
    lt_algo_cache.clear();  // the answers of that handle
    cudaCheck(cudaFree(cublas_workspace));
    cublas_handle = NULL;
    cublaslt_handle = NULL;
    cublas_workspace = NULL;
    cublas_stream = NULL;
    const bool shared = g->stream.host_shared;
    uint16_t *weights_bf16 = g->stream.weights_host_bf16, *grads_bf16 = g->stream.grads_host_bf16;
    const bool on_disk = g->stream.reads.reader.start != NULL;
    stream_free(&g->stream);  // its reads in flight end first
    ssd_bf16_files_close(g->sw_files);
    node_shared_free(g->sw_gen, g->config.num_layers - g->resident_layers);
    if (shared) {
        node_shared_free(weights_bf16, host_weights_bytes(g, on_disk));
        node_shared_free(grads_bf16, (int64_t)g->config.num_layers * g->stream.grads_stride * 2);
    }
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
    cudaCheck(cudaFree(g->tokens_pos));
    cudaCheck(cudaFree(g->losses));
    cudaCheck(cudaFree(g->loss_dev));
    cudaCheck(cudaFree(g->sumsq_dev));
    if (g->rope_inv_freq) cudaCheck(cudaFree(g->rope_inv_freq));
    cudaCheck(cudaFreeHost(g->tokens_host));
    if (g->attn_path == ATTN_CUDNN) {
        cudnn_att_use_workspace(NULL, 0);
        if (g->attn_workspace) cudaCheck(cudaFree(g->attn_workspace));
        cudaCheck(cudaFree(g->attn_meta));
        cudaCheck(cudaFreeHost(g->attn_meta_host));
        free(g->attn_micro);
    }
    cudaCheck(cudaFreeHost(g->loss_host));
    cudaCheck(cudaFreeHost(g->sumsq_host));
    cudaCheck(cudaFree(g->acts.memory));
    vocab_free(g);
    if (g->kept_memory) cudaCheck(cudaFree(g->kept_memory));
    free(g->kept);
    host_free_floats(g->master, g->host_state_count);
    host_free_floats(g->adam_m, g->host_state_count);
    host_free_floats(g->adam_v, g->host_state_count);
    free(g->forward_order);
    free(g->backward_order);
}
