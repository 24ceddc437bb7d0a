// llmc/vocab_host.cuh — -E 1: Llama's vocabulary tensors live in host RAM (docs/memory.md).
// That is the embeddings, final norm and lm_head, with their AdamW state and gradients.
// The head runs in vocabulary chunks: pass 1 a logsumexp, pass 2 the gradient.
// Several ranks of one node (-pn): the tensors, their state and fp32 gradients exist once, in the node's
// shared memory. Each chunk's gradient is summed over the ranks on the GPU and each rank writes its part;
// the embedding rows are added rank after rank (the micro-batches' order, as on one GPU); each rank updates
// its part of the tensors (vocab_rank_part). Several nodes: each keeps 1/N of the fp32 weights, AdamW state
// and gradients (vocab_node_part) and the bf16 weights whole; the embedding rows' gradient is summed on the
// GPUs too, a chunk at a time (vocab_embedding_rows_on_gpus); each node updates its part and the nodes
// exchange the new bf16 weights (vocab_exchange_bf16) before the next forward.
// The CPU AdamW of the vocabulary (one GPU): the final norm on the main thread; the embedding table on a
// thread of its own (VocabHeadWorker), beside the streamed layers' round and the next forward, whose
// embedding gathers take the rows they read first (vocab_rows_ready: a row is updated once, by whichever
// thread takes it first, so the forward waits for its own rows only, not the table); an untied lm_head on
// that thread after the round. The forward waits for the rest before the head. Several ranks or nodes update
// their parts of every tensor on the main thread, before the forward. Not here: sizes (llmc/memory_plan.cuh),
// allocation (llmc/gpt_build.cuh), the step (train_gpt.cu).
#pragma once
#include <math.h>
#include <string.h>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>
#include "llmc/gpt.cuh"        // defines: GPT, LayerActs, llama_embed_params, embed_is_matrix
#include "llmc/adamw.h"        // defines: AdamWArgs
#include "llmc/bf16.h"         // defines: bf16_to_float
#include "llmc/collectives.h"  // defines: comm_all_reduce, node_barrier (several ranks)
#include "llmc/cpu_adam.h"  // defines: sumsq_f32, adamw_tensors_f32grad, adamw_update_f32grad, cpu_adam_threads
#include "llmc/kernels.cuh"        // defines: block_max_sumexp, WARP
#include "llmc/llama_kernels.cuh"  // defines: rmsnorm_forward, rmsnorm_backward
#include "llmc/matmul.cuh"         // defines: matmul_forward, matmul_backward_weight, cublas_use_stream
#include "llmc/stream.h"           // defines: WeightStream (weights_host_bf16: the bf16 copy)

// The embedding table's and the untied lm_head's CPU AdamW on a thread that lives as long as the trainer:
// submit hands it a step's arguments, wait returns once the last submitted update is done. Every reader of
// their weights, gradients or AdamW state waits first: the head's step (vocab_head_step, vocab_prefetch),
// vocab_upload_chunk (sampling), optimizer_wait_all (checkpoints, the run's end), gpt_weights_ready (loads),
// the next submit, vocab_free;
// but the embedding gathers, which take their rows (vocab_rows_ready).
struct VocabHeadWorker {
    std::thread thread;
    std::mutex mu;
    std::condition_variable cv;
    bool pending = false, stop = false;
    bool rows = false, head = false;  // this update: the embedding table's rows, the untied head
    bool hold_updates = false;  // tests: each update waits for the gather after it, which takes its rows
    bool held = false;          //   this one waits (set and cleared by the main thread, under mu)
    AdamWArgs args;
};

// N = B*T tokens, C channels, M micro-batches. Chunks of `rows` vocabulary rows.
struct HostVocab {
    int64_t rows;  // vocabulary rows per chunk (llmc/memory_plan.cuh vocab_chunk_rows)
    // GPU
    bf16* w_chunk[2];   // (rows, C) each: chunk k of lm_head in w_chunk[k % 2], the next one copied meanwhile
    cudaStream_t copy;  // the chunks' uploads, beside the compute stream
    cudaEvent_t chunk_ready[2], chunk_free[2];  // (copy) chunk in place; (compute) its last reader queued
    float* dw_chunk[2];        // (rows, C) x 2: chunk k's gradient in [k % 2], summed over the micro-batches
    cudaStream_t copy_down;    // their downloads, beside the compute and the uploads (PCIe both ways)
    cudaEvent_t dw_summed[2];  // (compute) chunk k's gradient complete, summed over the ranks
    bf16* final_norm;          // (C): the final RMSNorm's weight
    float* dfinal_norm;        // (C): its gradient, summed over the micro-batches
    bf16* lnf;                 // (M, N, C): the final norm's output
    float* lnf_rstd;           // (M, N)
    float* dlnf;               // (M, N, C): head input gradient, summed over chunks
    float* row_max;            // (M, N): the running max, then each token's logsumexp
    float* row_sum;            // (M, N): the running sum of exponentials
    float* row_target;         // (M, N): the target's logit
    // host
    float* dw_host[2];         // pinned (rows, C) x 2: chunk gradients going to grads
    cudaEvent_t dw_copied[2];  // (copy_down) each one's copy from the GPU is done: dw_chunk[k % 2] free again
    uint16_t* rows_host;       // pinned (N, C): embedding rows up, residual gradient down
    float* grads;              // the vocabulary tensors' fp32 gradients, as the host arrays' embeddings
    std::vector<int> touched;  // tokens whose embedding rows hold gradients (untied: zeroed next step)
    double sumsq;              // squared norm of grads after the backward pass
    VocabHeadWorker
        head;  // the embeddings' and untied head's AdamW, beside the next forward (one rank a node)
    // each embedding row's AdamW of the step (one rank a node): 0 to do, 1 being done, 2 done; a row is
    // updated by whichever thread takes it first (vocab_row_update)
    std::atomic<uint8_t>* row_state;
    AdamWArgs row_args;                       // the step's, for the rows (the table's decay)
    std::atomic<int64_t> rows_by_forward{0};  // rows the gathers updated themselves, so far (tests)
};

// ----------------------------------------------------------------------------
// CUDA kernels

// Online logsumexp over a chunk, one block a token.
__global__ void __launch_bounds__(1024)
    chunk_logsumexp_kernel(const bf16* logits, int n, int v0, const int* targets, float* row_max,
                           float* row_sum, float* row_target) {
    __shared__ float shared[WARP];
    const int64_t row = blockIdx.x;
    const bf16* x = logits + row * n;
    const MaxSumExp r = block_max_sumexp(x, n, shared);
    const float mx = r.max, sum = r.sum;
    if (threadIdx.x != 0) return;
    const float m0 = row_max[row], m1 = fmaxf(m0, mx);
    row_sum[row] = row_sum[row] * expf(m0 - m1) + sum * expf(mx - m1);  // the first chunk: 0 * 0 + sum
    row_max[row] = m1;
    const int t = targets[row];
    if (t >= v0 && t < v0 + n) row_target[row] = (float)x[t - v0];
}

// Token losses (0 without a target). row_max becomes the logsumexp.
__global__ void chunk_loss_kernel(float* losses, float* row_max, const float* row_sum,
                                  const float* row_target, const int* targets, int64_t N) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float lse = row_max[i] + logf(row_sum[i]);
    losses[i] = targets[i] < 0 ? 0.0f : lse - row_target[i];
    row_max[i] = lse;
}

// logits = (softmax - one_hot) * dloss_scale, in place. 0 without a target.
__global__ void chunk_dlogits_kernel(bf16* logits, int n, int v0, const int* targets, const float* lse,
                                     float dloss_scale, int64_t N) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = i / n;
        const int t = targets[row], v = v0 + (int)(i % n);
        float g = 0.0f;
        if (t >= 0) g = (expf((float)logits[i] - lse[row]) - (v == t ? 1.0f : 0.0f)) * dloss_scale;
        logits[i] = __float2bfloat16(g);
    }
}

__global__ void fill_f32_kernel(float* x, float value, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = value;
}
__global__ void f32_to_bf16_kernel(bf16* out, const float* in, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16(in[i]);
}

// dinp (N, C) = dout (N, OC) @ w (OC, C) + beta * dinp, in fp32.
static void matmul_backward_input_f32(float* dinp, const bf16* dout, const bf16* w, int64_t N, int C, int OC,
                                      float beta, cudaStream_t s) {
    const float one = 1.0f;
    cublas_use_stream(s);
    cublasCheck(cublasGemmEx(cublas_handle, CUBLAS_OP_N, CUBLAS_OP_N, C, (int)N, OC, &one, w, CUDA_R_16BF, C,
                             dout, CUDA_R_16BF, OC, &beta, dinp, CUDA_R_32F, C, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT));
}

// dw (n, C) += the rows of dres (N, C) whose token is in [v0, v0 + n): fp32 atomics.
__global__ void embedding_rows_chunk_kernel(float* dw, const bf16* dres, const int* tokens, int64_t N, int C,
                                            int v0, int n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * C;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int t = tokens[i / C] - v0;
        if (t >= 0 && t < n) atomicAdd(&dw[(int64_t)t * C + i % C], (float)dres[i]);
    }
}

// ----------------------------------------------------------------------------
// The host's side

// The part [lo, hi) of the vocabulary arrays' embed_count elements whose fp32 weights, AdamW state and
// gradients node `node` keeps: all of them on one node, its 1/N on N nodes (comm_node_part, as the streamed
// layers'). Every node keeps the bf16 weights whole (each GPU reads every chunk).
static void vocab_node_part(const GPT* g, int node, int64_t* lo, int64_t* hi) {
    const int64_t E = g->layout.embed_count;
    if (g->comm->nodes > 1) return comm_node_part(g->comm, E, node, lo, hi);
    *lo = 0;
    *hi = E;
}
// This rank's part [lo, hi) of the elements [a, b) of the vocabulary arrays: what its node keeps of them,
// split over the node's ranks. The rank writes these gradients and updates these parameters.
static void vocab_rank_part(const GPT* g, int64_t a, int64_t b, int64_t* lo, int64_t* hi) {
    const Comm* c = g->comm;
    int64_t node_lo, node_hi;
    vocab_node_part(g, c->node_rank, &node_lo, &node_hi);
    a = std::max(a, node_lo);
    b = std::max(a, std::min(b, node_hi));
    const int64_t slice = (b - a + c->local_world - 1) / c->local_world;
    *lo = std::min<int64_t>(b, a + c->local * slice);
    *hi = std::min<int64_t>(b, *lo + slice);
}

// lm_head's offset in the embeddings' arrays (tied: the embedding's).
static int64_t vocab_head_offset(const GPT* g) {
    const ParamLayout* p = &g->layout;
    return p->embed_offset[p->embed_size[LL_LM_HEAD] ? LL_LM_HEAD : LL_EMBED];
}

// lm_head rows [v0, v0 + n) to the GPU's first chunk buffer, on stream s (sampling: one chunk at a time).
static void vocab_head_update_wait(GPT* g);
static void vocab_upload_chunk(GPT* g, int64_t v0, int64_t n, cudaStream_t s) {
    vocab_head_update_wait(g);
    const int64_t C = g->llama.hidden_size;
    const uint16_t* src = g->stream.weights_host_bf16 + vocab_head_offset(g) + v0 * C;
    cudaCheck(cudaMemcpyAsync(g->vocab->w_chunk[0], src, (size_t)(n * C * 2), cudaMemcpyHostToDevice, s));
}
// A pass over the chunks: chunk k's copy into w_chunk[k % 2] on the copy stream, once the compute that read
// that buffer (chunk k - 2) is queued before it; the compute waits for the copy. So chunk k + 1 crosses PCIe
// while chunk k computes. Start with vocab_prefetch(g, 0); per chunk: vocab_prefetch(g, k + 1),
// vocab_chunk_wait(g, k, s), the chunk's kernels, vocab_chunk_done(g, k, s).
static void vocab_head_update_wait(GPT* g);
static void vocab_prefetch(GPT* g, int k) {
    HostVocab* v = g->vocab;
    if (k == 0)
        vocab_head_update_wait(g);  // the table's and head's AdamW of the last step, beside this forward
    const int64_t V = g->llama.vocab_size, C = g->llama.hidden_size, v0 = k * v->rows;
    if (v0 >= V) return;
    const int64_t n = std::min(v->rows, V - v0);
    const uint16_t* src = g->stream.weights_host_bf16 + vocab_head_offset(g) + v0 * C;
    cudaCheck(cudaStreamWaitEvent(v->copy, v->chunk_free[k % 2], 0));
    cudaCheck(cudaMemcpyAsync(v->w_chunk[k % 2], src, (size_t)(n * C * 2), cudaMemcpyHostToDevice, v->copy));
    cudaCheck(cudaEventRecord(v->chunk_ready[k % 2], v->copy));
}
static const bf16* vocab_chunk_wait(GPT* g, int k, cudaStream_t s) {
    cudaCheck(cudaStreamWaitEvent(s, g->vocab->chunk_ready[k % 2], 0));
    return g->vocab->w_chunk[k % 2];
}
static void vocab_chunk_done(GPT* g, int k, cudaStream_t s) {
    cudaCheck(cudaEventRecord(g->vocab->chunk_free[k % 2], s));
}

// Final norm weight to the GPU, after each load or update.
static void vocab_upload_final_norm(GPT* g, cudaStream_t s) {
    const uint16_t* src = g->stream.weights_host_bf16 + g->layout.embed_offset[LL_FINAL_NORM];
    const size_t bytes = (size_t)g->llama.hidden_size * 2;
    cudaCheck(cudaMemcpyAsync(g->vocab->final_norm, src, bytes, cudaMemcpyHostToDevice, s));
}

// The emulated build's race check follows host threads it knows: the rows' loops run on the calling thread.
#ifdef FAKE_CUDA_DEVICE
static const bool kRowsInParallel = false;
#else
static const bool kRowsInParallel = true;
#endif

// Embedding row r's AdamW of this step, once: the thread that takes the row first updates it (the worker
// going through the table, or a gather that needs it). wait: return only once the row is updated (a gather);
// else leave a row another thread took. Elementwise: the same bits whichever thread updates a row.
static void vocab_row_update(GPT* g, int64_t r, bool wait) {
    HostVocab* v = g->vocab;
    std::atomic<uint8_t>& state = v->row_state[r];
    uint8_t todo = 0;
    if (state.load(std::memory_order_acquire) == 0 &&
        state.compare_exchange_strong(todo, 1, std::memory_order_acq_rel)) {
        const int64_t C = g->llama.hidden_size, o = g->layout.embed_offset[LL_EMBED] + r * C;
        uint16_t* bf16 = g->stream.weights_host_bf16;
        FAKE_CUDA_HOST_ACCESS(bf16 + o, C * 2, true, "an embedding row's AdamW");
        adamw_update_f32grad(g->master + o, v->grads + o, g->adam_m + o, g->adam_v + o, bf16 + o, C,
                             &v->row_args);
        FAKE_CUDA_HOST_RELEASE(&state);
        state.store(2, std::memory_order_release);
        if (wait) v->rows_by_forward.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    if (!wait) return;
    while (state.load(std::memory_order_acquire) != 2) std::this_thread::yield();  // one row: microseconds
    FAKE_CUDA_HOST_ACQUIRE(&state);
}
// Every row of the table (the worker), in parallel, leaving the rows a gather took.
static void vocab_rows_update_all(GPT* g) {
    const int64_t V = g->llama.vocab_size;
#pragma omp parallel for schedule(dynamic, 64) num_threads(cpu_adam_threads()) if (kRowsInParallel)
    for (int64_t r = 0; r < V; r++) vocab_row_update(g, r, false);
}
// The rows of tokens[0, n) updated (this step's AdamW), before a gather reads them.
static void vocab_rows_ready(GPT* g, const int* tokens, int64_t n) {
#pragma omp parallel for schedule(dynamic, 256) num_threads(cpu_adam_threads()) if (kRowsInParallel)
    for (int64_t i = 0; i < n; i++) vocab_row_update(g, tokens[i], true);
}

// out (N, C) = embed[tokens], gathered on the host, one copy up.
static void vocab_embedding_forward(GPT* g, bf16* out, const int* tokens, cudaStream_t s) {
    HostVocab* v = g->vocab;
    const int64_t N = (int64_t)g->B * g->T, C = g->llama.hidden_size;
    const uint16_t* embed = g->stream.weights_host_bf16 + g->layout.embed_offset[LL_EMBED];
    vocab_rows_ready(g, tokens, N);  // the step's AdamW of these rows, if the worker has not got to them
    for (int64_t i = 0; i < N && !kRowsInParallel; i++)  // the emulation: row by row, as they were ordered
        FAKE_CUDA_HOST_ACCESS(embed + (int64_t)tokens[i] * C, C * 2, false, "the host reading embeddings");
    FAKE_CUDA_HOST_ACCESS(v->rows_host, N * C * 2, true, "the host gathering embedding rows");
#pragma omp parallel for
    for (int64_t i = 0; i < N; i++)
        memcpy(v->rows_host + i * C, embed + (int64_t)tokens[i] * C, (size_t)C * 2);
    if (v->head.held) {  // tests: the held worker may go on
        std::lock_guard<std::mutex> lock(v->head.mu);
        v->head.held = false;
        v->head.cv.notify_all();
    }
    cudaCheck(cudaMemcpyAsync(out, v->rows_host, (size_t)(N * C * 2), cudaMemcpyHostToDevice, s));
    cudaCheck(cudaStreamSynchronize(s));  // rows_host is free again
}

// Final norm of micro-batch mb's x, and a fresh logsumexp.
static void vocab_head_norm(GPT* g, const bf16* x, int mb, cudaStream_t s) {
    HostVocab* v = g->vocab;
    const int64_t N = (int64_t)g->B * g->T, o = mb * N;
    const int C = g->llama.hidden_size;
    rmsnorm_forward(v->lnf + o * C, v->lnf_rstd + o, x, v->final_norm, N, C, g->llama.rms_norm_eps, s);
    fill_f32_kernel<<<grid_for(N, 256), 256, 0, s>>>(v->row_max + o, -INFINITY, N);
    cudaCheckLaunch();
    cudaCheck(cudaMemsetAsync(v->row_sum + o, 0, (size_t)N * 4, s));
    cudaCheck(cudaMemsetAsync(v->row_target + o, 0, (size_t)N * 4, s));
}

// A pass over the vocabulary's chunks, their uploads double-buffered (vocab_prefetch): body(k, v0, n, w) for
// chunk k of rows [v0, v0 + n), its bf16 rows w on the GPU, queued on s; the body calls vocab_chunk_done(g,
// k, s) once its last reader of w is queued. Returns the number of chunks.
template <typename Body>
static int vocab_for_chunks(GPT* g, cudaStream_t s, Body body) {
    HostVocab* v = g->vocab;
    const int64_t V = g->llama.vocab_size;
    vocab_prefetch(g, 0);
    int k = 0;
    for (int64_t v0 = 0; v0 < V; v0 += v->rows, k++) {
        vocab_prefetch(g, k + 1);
        body(k, v0, (int)std::min(v->rows, V - v0), vocab_chunk_wait(g, k, s));
    }
    return k;
}

// Pass 1: losses (as fused_classifier's) and each token's logsumexp in row_max.
static void vocab_head_loss_pass(GPT* g, const bf16* const* xs, const int* targets, float* losses,
                                 int n_micro, cudaStream_t s) {
    HostVocab* v = g->vocab;
    const int64_t N = (int64_t)g->B * g->T;
    const int C = g->llama.hidden_size;
    for (int mb = 0; mb < n_micro; mb++) vocab_head_norm(g, xs[mb], mb, s);
    vocab_for_chunks(g, s, [&](int k, int64_t v0, int n, const bf16* w) {
        for (int mb = 0; mb < n_micro; mb++) {
            const int64_t o = mb * N;
            matmul_forward(g->acts.logits, v->lnf + o * C, w, N, C, n, s);
            chunk_logsumexp_kernel<<<(unsigned)N, ROW_BLOCK_THREADS, 0, s>>>(
                g->acts.logits, n, (int)v0, targets + o, v->row_max + o, v->row_sum + o, v->row_target + o);
            cudaCheckLaunch();
        }
        vocab_chunk_done(g, k, s);
    });
    for (int mb = 0; mb < n_micro; mb++) {
        const int64_t o = mb * N;
        chunk_loss_kernel<<<grid_for(N, 256), 256, 0, s>>>(losses + o, v->row_max + o, v->row_sum + o,
                                                           v->row_target + o, targets + o, N);
        cudaCheckLaunch();
    }
}

// Evaluation: the losses. Without targets, only the final norm, for vocab_copy_logits.
static void vocab_head_forward(GPT* g, const bf16* x, const int* targets, float* losses, cudaStream_t s) {
    if (!targets) return vocab_head_norm(g, x, 0, s);
    vocab_head_loss_pass(g, &x, targets, losses, 1, s);
}

// Chunk k's gradient from dw_host[k % 2] into grads, once copied. Several ranks: this rank's part of it.
static void vocab_take_chunk_grads(GPT* g, int k, int64_t v0, int64_t n) {
    HostVocab* v = g->vocab;
    const int64_t C = g->llama.hidden_size, base = vocab_head_offset(g) + v0 * C;
    int64_t lo, hi;
    vocab_rank_part(g, base, base + n * C, &lo, &hi);
    cudaCheck(cudaEventSynchronize(v->dw_copied[k % 2]));
    FAKE_CUDA_HOST_ACCESS(v->dw_host[k % 2], (hi - lo) * 4, false, "the host reading a chunk's gradient");
    memcpy(v->grads + lo, v->dw_host[k % 2], (size_t)((hi - lo) * 4));
}

// The step's head: losses (pass 1), then gradients into dres[mb] (pass 2).
static void vocab_head_step(GPT* g, const bf16* const* xs, const int* targets, float* losses,
                            bf16* const* dres, int n_micro, float dloss_scale, cudaStream_t s) {
    HostVocab* v = g->vocab;
    const int64_t N = (int64_t)g->B * g->T, V = g->llama.vocab_size, C = g->llama.hidden_size;
    vocab_head_update_wait(g);             // the table's AdamW read the gradients written from here
    if (g->layout.embed_size[LL_LM_HEAD])  // untied: last step's embedding rows (tied: the head overwrites)
        for (int t : v->touched)
            memset(v->grads + g->layout.embed_offset[LL_EMBED] + t * C, 0, (size_t)C * 4);
    v->touched.clear();
    vocab_head_loss_pass(g, xs, targets, losses, n_micro, s);
    // chunk k's gradient in dw_chunk[k % 2] goes down on copy_down while chunk k + 1 computes into the other
    const int k = vocab_for_chunks(g, s, [&](int k, int64_t v0, int n, const bf16* w) {
        float* dw = v->dw_chunk[k % 2];
        if (k >= 2) cudaCheck(cudaStreamWaitEvent(s, v->dw_copied[k % 2], 0));  // chunk k - 2's copied down
        cudaCheck(cudaMemsetAsync(dw, 0, (size_t)(n * C * 4), s));
        for (int mb = 0; mb < n_micro; mb++) {
            const int64_t o = mb * N;
            bf16* logits = g->acts.logits;
            matmul_forward(logits, v->lnf + o * C, w, N, (int)C, n, s);
            chunk_dlogits_kernel<<<grid_for(N * n, 256), 256, 0, s>>>(logits, n, (int)v0, targets + o,
                                                                      v->row_max + o, dloss_scale, N);
            cudaCheckLaunch();
            matmul_backward_weight(dw, logits, v->lnf + o * C, N, (int)C, n, s);
            matmul_backward_input_f32(v->dlnf + o * C, logits, w, N, (int)C, n, v0 ? 1.0f : 0.0f, s);
        }
        vocab_chunk_done(g, k, s);
        comm_all_reduce(g->comm, dw, n * C, s);  // several ranks: every rank's micro-batches
        cudaCheck(cudaEventRecord(v->dw_summed[k % 2], s));
        const int64_t base = vocab_head_offset(g) + v0 * C;
        int64_t lo, hi;
        vocab_rank_part(g, base, base + n * C, &lo, &hi);
        cudaCheck(cudaStreamWaitEvent(v->copy_down, v->dw_summed[k % 2], 0));
        if (hi > lo)  // several nodes: a chunk may lie outside this node's part
            cudaCheck(cudaMemcpyAsync(v->dw_host[k % 2], dw + (lo - base), (size_t)((hi - lo) * 4),
                                      cudaMemcpyDeviceToHost, v->copy_down));
        cudaCheck(cudaEventRecord(v->dw_copied[k % 2], v->copy_down));
        // the previous chunk to grads, while the GPU computes this one
        if (k > 0) vocab_take_chunk_grads(g, k - 1, v0 - v->rows, v->rows);
    });
    vocab_take_chunk_grads(g, k - 1, (k - 1) * v->rows, V - (k - 1) * v->rows);
    cudaCheck(cudaMemsetAsync(v->dfinal_norm, 0, (size_t)C * 4, s));
    for (int mb = 0; mb < n_micro; mb++) {
        const int64_t o = mb * N;
        bf16* dlnf = g->acts.dlnf;
        f32_to_bf16_kernel<<<grid_for(N * C, 256), 256, 0, s>>>(dlnf, v->dlnf + o * C, N * C);
        cudaCheckLaunch();
        cudaCheck(cudaMemsetAsync(dres[mb], 0, (size_t)(N * C * 2), s));
        rmsnorm_backward(dres[mb], v->dfinal_norm, dlnf, xs[mb], v->final_norm, v->lnf_rstd + o, N, (int)C,
                         s);
    }
}

// Several nodes: the embedding rows' gradient of every rank, a vocabulary chunk at a time: scattered on the
// GPU, summed over the ranks (comm_all_reduce), each rank's part of it (of its node's part) to the node's
// gradients (tied: added to the head's, the same elements this rank wrote; untied: the rows' part whole,
// nothing to zero).
static void vocab_embedding_rows_on_gpus(GPT* g, const int* tokens_dev, int n_micro, cudaStream_t s) {
    HostVocab* v = g->vocab;
    const int64_t N = (int64_t)g->B * g->T, V = g->llama.vocab_size, C = g->llama.hidden_size;
    const bool tied = g->layout.embed_size[LL_LM_HEAD] == 0;
    float* dw = v->dw_chunk[0];
    cudaCheck(cudaStreamWaitEvent(s, v->dw_copied[0], 0));  // the head's last download from it is done
    for (int64_t v0 = 0; v0 < V; v0 += v->rows) {
        const int n = (int)std::min(v->rows, V - v0);
        cudaCheck(cudaMemsetAsync(dw, 0, (size_t)(n * C * 4), s));
        for (int mb = 0; mb < n_micro; mb++) {
            embedding_rows_chunk_kernel<<<grid_for(N * C, 256), 256, 0, s>>>(
                dw, dresid_at(g, mb), tokens_dev + mb * N, N, (int)C, (int)v0, n);
            cudaCheckLaunch();
        }
        comm_all_reduce(g->comm, dw, n * C, s);
        const int64_t base = g->layout.embed_offset[LL_EMBED] + v0 * C;
        int64_t lo, hi;
        vocab_rank_part(g, base, base + n * C, &lo, &hi);
        if (hi > lo)  // a chunk may lie outside this node's part
            cudaCheck(cudaMemcpyAsync(v->dw_host[0], dw + (lo - base), (size_t)((hi - lo) * 4),
                                      cudaMemcpyDeviceToHost, s));
        cudaCheck(cudaStreamSynchronize(s));
        FAKE_CUDA_HOST_ACCESS(v->dw_host[0], (hi - lo) * 4, false, "the host reading a chunk's row gradient");
        float* dst = v->grads + lo;
        const float* src = v->dw_host[0];
        if (!tied) memcpy(dst, src, (size_t)((hi - lo) * 4));
        else
#pragma omp parallel for
            for (int64_t i = 0; i < hi - lo; i++) dst[i] += src[i];
    }
}

// Embeddings' backward: the residual's gradient added to host rows.
// tokens: host, n_micro x N (tokens_dev: the same on the GPU). Several ranks: one rank after the other, in
// rank order; several nodes: on the GPUs (vocab_embedding_rows_on_gpus).
static void vocab_embedding_backward(GPT* g, const int* tokens, const int* tokens_dev, int n_micro,
                                     cudaStream_t s) {
    HostVocab* v = g->vocab;
    const int64_t N = (int64_t)g->B * g->T, C = g->llama.hidden_size;
    float* dembed = v->grads + g->layout.embed_offset[LL_EMBED];
    Comm* c = g->comm;
    comm_all_reduce(c, v->dfinal_norm, C, s);
    if (c->nodes > 1) vocab_embedding_rows_on_gpus(g, tokens_dev, n_micro, s);
    if (c->nodes > 1) n_micro = 0;  // the rows are in place
    node_barrier(c);  // every rank's part of the head gradient and zeroed rows are in place (vocab_head_step)
    for (int r = 0; r < c->local && n_micro; r++) node_barrier(c);
    for (int mb = 0; mb < n_micro; mb++) {
        cudaCheck(
            cudaMemcpyAsync(v->rows_host, dresid_at(g, mb), (size_t)(N * C * 2), cudaMemcpyDeviceToHost, s));
        cudaCheck(cudaStreamSynchronize(s));
        FAKE_CUDA_HOST_ACCESS(v->rows_host, N * C * 2, false, "the host reading the residual's gradient");
        const int* tok = tokens + mb * N;
        // columns in parallel, tokens in order: race-free, deterministic sums
#pragma omp parallel for
        for (int64_t c0 = 0; c0 < C; c0 += 64)
            for (int64_t i = 0; i < N; i++) {
                float* dst = dembed + (int64_t)tok[i] * C;
                const uint16_t* src = v->rows_host + i * C;
                for (int64_t c = c0; c < std::min(c0 + 64, C); c++) dst[c] += bf16_to_float(src[c]);
            }
        v->touched.insert(v->touched.end(), tok, tok + N);
    }
    for (int r = c->local; r < c->local_world && n_micro; r++) node_barrier(c);  // then the next rank's turn
    float* dnorm = v->grads + g->layout.embed_offset[LL_FINAL_NORM];
    if (c->local == 0)
        cudaCheck(cudaMemcpyAsync(dnorm, v->dfinal_norm, (size_t)C * 4, cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
    node_barrier(c);
    int64_t lo, hi;  // several ranks: each its part's squares, summed with the GPU's (read_loss_and_norm)
    vocab_rank_part(g, 0, g->layout.embed_count, &lo, &hi);
    v->sumsq = sumsq_f32(v->grads + lo, hi - lo);
}

// The untied head's AdamW (one tensor of the vocabulary's): on the worker's thread.
static void vocab_head_adamw(GPT* g, const AdamWArgs* args) {
    const ParamLayout* p = &g->layout;
    uint16_t* bf16 = g->stream.weights_host_bf16;  // the embeddings come first
    const int64_t o = p->embed_offset[LL_LM_HEAD], n = p->embed_size[LL_LM_HEAD];
    FAKE_CUDA_HOST_ACCESS(bf16 + o, n * 2, true, "the head's AdamW thread updating its bf16 copy");
    adamw_tensors_f32grad(1, &o, &n, embed_is_matrix(g) + LL_LM_HEAD, g->master, g->vocab->grads, g->adam_m,
                          g->adam_v, bf16, args);
}
static int64_t optimizer_wait_rounds(GPT* g);  // cpu_optimizer.h
static void vocab_head_worker_loop(GPT* g) {
    VocabHeadWorker* w = &g->vocab->head;
    std::unique_lock<std::mutex> lock(w->mu);
    for (;;) {
        w->cv.wait(lock, [w] { return w->pending || w->stop; });
        if (w->stop) return;
        FAKE_CUDA_HOST_ACQUIRE(&w->args);  // after what the step did before it submitted
        const AdamWArgs a = w->args;
        const bool rows = w->rows, head = w->head;
        w->cv.wait(lock, [w] { return !w->held || w->stop; });  // tests: until a gather let it go
        lock.unlock();
        // tests: LLMC_TEST_HEAD_DELAY_MS holds each update back (a free right after a step must wait for it;
        // the next forward's gathers update their rows themselves)
        if (const char* d = getenv("LLMC_TEST_HEAD_DELAY_MS")) usleep((useconds_t)atoi(d) * 1000);
        // the table beside the round, as the main thread did before it went on to the forward
        if (rows) vocab_rows_update_all(g);
        // the head after the streamed layers' round, which the forward needs first (the head it needs last):
        // the two would share the host's memory bandwidth and cores, and slow the layers' updates
        if (head) {
            optimizer_wait_rounds(g);
            vocab_head_adamw(g, &a);
        }
        lock.lock();
        w->pending = false;
        FAKE_CUDA_HOST_RELEASE(w);
        w->cv.notify_all();
    }
}
// The last submitted head update is done (no-op without one).
static void vocab_head_update_wait(GPT* g) {
    if (!g->vocab) return;
    VocabHeadWorker* w = &g->vocab->head;
    std::unique_lock<std::mutex> lock(w->mu);
    if (w->held) {  // tests: whoever waits for the update will not gather first
        w->held = false;
        w->cv.notify_all();
    }
    w->cv.wait(lock, [w] { return !w->pending; });
    FAKE_CUDA_HOST_ACQUIRE(w);
}
static void vocab_head_update_submit(GPT* g, const AdamWArgs* args, bool rows, bool head) {
    VocabHeadWorker* w = &g->vocab->head;
    vocab_head_update_wait(g);
    std::lock_guard<std::mutex> lock(w->mu);
    if (!w->thread.joinable()) w->thread = std::thread(vocab_head_worker_loop, g);
    w->args = *args;
    w->rows = rows;
    w->head = head;
    w->held = w->hold_updates;
    w->pending = true;
    FAKE_CUDA_HOST_RELEASE(&w->args);
    w->cv.notify_all();
}
static void vocab_head_worker_stop(GPT* g) {
    VocabHeadWorker* w = &g->vocab->head;
    vocab_head_update_wait(g);
    {
        std::lock_guard<std::mutex> lock(w->mu);
        w->stop = true;
        w->cv.notify_all();
    }
    if (w->thread.joinable()) w->thread.join();
}

// Several nodes, after each updated its part: every node's part of the vocabulary's new bf16 weights straight
// to every other node (net_exchange over the main thread's mesh, mesh_main: no node carries the others'
// parts; the optimizer thread's mesh carries the layers' meanwhile). Each node's leader; its ranks wait at a
// barrier. Each node's part of the vocabulary's elements [a, b), as byte offsets from a of `bytes`-byte
// elements (for net.h's exchanges and gathers).
static void vocab_node_ranges(const GPT* g, int64_t a, int64_t b, int bytes, std::vector<int64_t>* lo,
                              std::vector<int64_t>* hi) {
    const int nodes = g->comm->nodes;
    lo->resize((size_t)nodes);
    hi->resize((size_t)nodes);
    for (int n = 0; n < nodes; n++) {
        int64_t l, h;
        vocab_node_part(g, n, &l, &h);
        l = std::min(std::max(l, a), b);
        h = std::max(std::min(h, b), l);
        (*lo)[(size_t)n] = (l - a) * bytes;
        (*hi)[(size_t)n] = (h - a) * bytes;
    }
}
static void vocab_exchange_bf16(GPT* g) {
    const Comm* c = g->comm;
    std::vector<int64_t> lo, hi;
    vocab_node_ranges(g, 0, g->layout.embed_count, 2, &lo, &hi);
    uint16_t* bf16 = g->stream.weights_host_bf16;  // the embeddings come first
    FAKE_CUDA_HOST_ACCESS(bf16, g->layout.embed_count * 2, true,
                          "the nodes' exchange of the vocabulary's bf16");
    net_exchange(&c->net, c->net.mesh_main, (char*)bf16, lo.data(), hi.data());
}

// Several nodes, each node's leader, for rank 0's save: the vocabulary's elements [a, b) of x (the fp32
// weights, m or v). Node 0 puts each node's part of them in out[0, b - a) (its own from x, the others' as
// they send them over NET_MAIN); every other node sends its part (out unused). Called alike on every node,
// window after window (llmc/checkpoint.h's StreamedState.read_vocab), so node 0 never holds the others'
// parts.
static void vocab_state_window(GPT* g, const float* x, int64_t a, int64_t b, float* out) {
    const Comm* c = g->comm;
    std::vector<int64_t> lo, hi;  // bytes of out
    vocab_node_ranges(g, a, b, 4, &lo, &hi);
    const int me = c->node_rank;
    if (me == 0) memcpy((char*)out + lo[0], (const char*)(x + a) + lo[0], (size_t)(hi[0] - lo[0]));
    net_gather(&c->net, NET_MAIN, me == 0 ? (char*)out : (char*)(x + a), lo.data(), hi.data());
}

// CPU AdamW of the vocabulary tensors. Matrices decay. Several ranks: each its part, then all are done.
// One rank on one node: the final norm here; the embedding table and an untied head on the worker
// (vocab_head_update_submit), beside the next forward, whose gathers take the rows they need first. AdamW is
// elementwise: the same bits whichever thread updates a tensor or a row. Several nodes: each node its part
// (its ranks theirs), then the bf16 weights are exchanged, before the forward (whose first gathers may need
// any node's rows).
static void vocab_adamw(GPT* g, const AdamWArgs* args, cudaStream_t s) {
    const ParamLayout* p = &g->layout;
    uint16_t* bf16 = g->stream.weights_host_bf16;  // the embeddings come first
    int64_t lo, hi;
    vocab_rank_part(g, 0, p->embed_count, &lo, &hi);
    vocab_head_update_wait(g);  // the last one (the forward waited for it already)
    if (g->comm->local_world == 1 && g->comm->nodes == 1) {
        HostVocab* v = g->vocab;
        int64_t size[NUM_EMBED_TENSORS] = {};
        size[LL_FINAL_NORM] = p->embed_size[LL_FINAL_NORM];
        FAKE_CUDA_HOST_ACCESS(bf16 + p->embed_offset[LL_FINAL_NORM], size[LL_FINAL_NORM] * 2, true,
                              "the host updating the final norm's bf16 copy");
        adamw_tensors_f32grad(NUM_EMBED_TENSORS, p->embed_offset, size, embed_is_matrix(g), g->master,
                              v->grads, g->adam_m, g->adam_v, bf16, args);
        v->row_args = *args;
        if (!embed_is_matrix(g)[LL_EMBED]) v->row_args.weight_decay = 0.0f;  // adamw_tensors' rule
        for (int64_t r = 0; r < g->llama.vocab_size; r++) v->row_state[r].store(0, std::memory_order_relaxed);
        vocab_head_update_submit(g, args, true, p->embed_size[LL_LM_HEAD] > 0);  // releases the states too
    } else {
        FAKE_CUDA_HOST_ACCESS(bf16 + lo, (hi - lo) * 2, true, "the host updating the vocabulary's bf16 copy");
        adamw_tensors_window_f32grad(NUM_EMBED_TENSORS, p->embed_offset, p->embed_size, embed_is_matrix(g),
                                     lo, hi - lo, g->master + lo, g->vocab->grads + lo, g->adam_m + lo,
                                     g->adam_v + lo, bf16 + lo, args);
    }
    node_barrier(g->comm);  // the next forward reads every part
    if (g->comm->nodes > 1) {
        if (g->comm->local == 0) vocab_exchange_bf16(g);
        node_barrier(g->comm);
    }
    vocab_upload_final_norm(g, s);
}

// Token row's V logits for sampling, after vocab_head_forward without targets.
static void vocab_copy_logits(GPT* g, int64_t row, float* out, cudaStream_t s) {
    HostVocab* v = g->vocab;
    const int64_t V = g->llama.vocab_size;
    const int C = g->llama.hidden_size;
    std::vector<uint16_t> tmp((size_t)v->rows);
    for (int64_t v0 = 0; v0 < V; v0 += v->rows) {
        const int n = (int)std::min(v->rows, V - v0);
        vocab_upload_chunk(g, v0, n, s);
        matmul_forward(g->acts.logits, v->lnf + row * C, v->w_chunk[0], 1, C, n, s);
        cudaCheck(cudaMemcpyAsync(tmp.data(), g->acts.logits, (size_t)n * 2, cudaMemcpyDeviceToHost, s));
        cudaCheck(cudaStreamSynchronize(s));
        for (int i = 0; i < n; i++) out[v0 + i] = bf16_to_float(tmp[(size_t)i]);
    }
}
