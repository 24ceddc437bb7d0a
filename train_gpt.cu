// train_gpt.cu — trains a GPT-2 far larger than GPU memory on ONE GPU, streaming it layer by layer.

// Where the model lives:
//   host RAM: fp32 master weights, AdamW m and v; pinned bf16 weights and gradients (stream.cu).
//   GPU: a ring of layer weight slots, each layer's input per micro-batch, one layer's activations,
//        the embeddings with their AdamW state, and with -R the first R layers too.

// One step, numbered as in gpt_forward_backward and gpt_update below:
//   1. tokens and embeddings
//   2. forward, layer by layer: each layer's weights arrive once and serve every micro-batch
//   3. loss: final LayerNorm, tied lm_head, softmax cross-entropy, and their backward
//   4. backward, last layer first: recompute each layer from its input, send its gradients out
//   5. the one synchronization: loss and gradient norm
//   6. AdamW on a CPU thread, layer by layer, while the next step's forward pass runs

// The Llama family (Llama 3, Qwen2; llama_model.h) takes the same step: its layer, head and embeddings are
// llama_layers.cuh's, which layer_forward and the others hand over to (is_llama).

// Its parts: the model as data (gpt.cuh), the CPU AdamW thread (cpu_optimizer.h),
// the memory plan (memory_plan.cuh), its flags (gpu_args.h).
// Not here: kernels (kernels.cuh), GEMMs (matmul.cuh), copies (stream.cu), AdamW math (cpu_adam.cpp).

// The SSD tier (-sd DIR) keeps the optimizer state on disk: ssd_tier.h, docs/ssd.md.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>
#include <dirent.h>
#include <sys/mman.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "llmc/adamw.h"  // defines: adamw_layer_block_bf16grad, clip_scale, ADAMW_BETA1, ADAMW_EPS
#include "llmc/args.h"   // defines: TrainArgs, train_args_defaults, train_usage, parse_train_arg, help_flag
#include "checkpoint.h"  // defines: checkpoint_save, open_run_dir, check_resume_args, state_file_read
#include "llmc/cpu_adam.h"     // defines: cpu_adam_set_threads, convert_f32_to_bf16, bf16_to_float
#include "llmc/cpu_cores.h"    // defines: usable_cpu_cores, omp_short_spin_reexec
#include "llmc/cuda_common.h"  // defines: cudaCheck, cublasCheck, bf16
#include "dataloader.h"        // defines: DataLoader, dataloader_init, _next_batch, _check_pair
#include "llmc/kernels.cuh"  // defines: layernorm_forward, gelu_forward, fused_classifier, adamw_gpu, kernels_load
#include "llmc/logger.h"        // defines: TrainLogger, logger_open, logger_train, logger_val, logger_close
#include "llmc/hf_tokenizer.h"  // defines: tokenizer_init_hf (a Llama-family checkpoint's samples)
#include "llmc/llama_hf.h"    // defines: llama_hf_read_config, llama_hf_load (the Llama family's checkpoints)
#include "llmc/model_file.h"  // defines: GPTConfig, ParamLayout, gpt_layout, gpt_init_params, gpt_load_params
#include "llmc/model_specs.h"  // defines: parse_model_spec, warn_if_spec_shadows_path
#include "llmc/outliers.h"     // defines: OutlierWindow, outlier_skip, training_diverged, die_diverged
#include "llmc/run_dir.h"      // defines: lock_output_dir
#include "llmc/sampler.h"      // defines: random_u64, random_f32, sample_softmax, print_sample_token
#include "llmc/schedulers.h"   // defines: learning_rate_at
#include "ssd.h"               // defines: SsdStore, ssd_store_round, ssd_store_checkpoint, ssd_plan (-sd)
#include "llmc/stop_signal.h"  // defines: stop_signal_install, stop_if_signalled
#include "stream.h"  // defines: WeightStream, stream_wait_layer, stream_release_layer, pinned_alloc_direct_io
#include "llmc/timeline.h"   // defines: Timeline, timeline_begin, timeline_end, timeline_summarize (-Y 1)
#include "llmc/tokenizer.h"  // defines: Tokenizer, tokenizer_init
#include "llmc/utils.h"      // defines: die, SizeText, table_row, table_rule, progress_text, peak_rss_bytes

#include "llmc/matmul.cuh"           // defines: matmul_forward, lt_matmul, matmul_handles_create
#include "llmc/attention.cuh"        // defines: attention_forward, attention_backward (cuBLAS + softmax)
#include "llmc/flash_attention.cuh"  // defines: flash_attention_forward, _backward, flash_attention_load
#include "gpt.cuh"           // defines: struct GPT, LayerActs, LayerWeights, layer_params, layer_input
#include "llama_layers.cuh"  // defines: llama_layer_forward, _backward, llama_head_forward, llama_embedding_*
#include "vocab_host.cuh"    // defines: HostVocab, vocab_head_forward, _backward, vocab_embedding_* (-E 1)
#include "ssd_tier.h"        // defines: ssd_tier_new, ssd_tier_begin_backward, ssd_tier_checkpoint (-sd)
#include "cpu_optimizer.h"   // defines: optimizer_submit, optimizer_block_ready, send_layer_grads
#include "memory_plan.cuh"   // defines: MemoryPlan, gpt_memory_plan, place_layers, print_memory_plan

// ----------------------------------------------------------------------------
// One transformer layer, forward, as gpt2_cpu.h's gpt2_cpu_forward. x: the layer's input.
// out: its output, or NULL when recomputing for the backward pass (the last GEMM is skipped).
// pos: chat data's positions (NULL: t). What the backward pass reads stays in `a`.

static void layer_forward(GPT* g, const bf16* weights, const bf16* x, bf16* out, LayerActs* a, const int* pos,
                          cudaStream_t s) {
    if (is_llama(g)) return llama_layer_forward(g, weights, x, out, a, pos, s);  // the Llama family's layer
    const int B = g->B, T = g->T, C = g->config.channels, NH = g->config.num_heads;
    const int64_t N = (int64_t)B * T;
    const LayerWeights w = layer_params(&g->layout, weights);
    bf16* res2 = a->residual2;
    layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, w.ln1w, w.ln1b, N, C, s);
    matmul_forward_bias(a->qkv, a->ln1, w.qkvw, w.qkvb, NULL, N, C, 3 * C, s);
    if (g->flash) flash_attention_forward(a->atty, a->att_lse, a->qkv, B, T, C, NH, s, NH, pos);
    else attention_forward(a->atty, a->att, a->qkv, B, T, C, NH, s, NH, pos);
    matmul_forward_bias(res2, a->atty, w.attprojw, w.attprojb, x, N, C, C, s);  // projection + layer input
    layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, res2, w.ln2w, w.ln2b, N, C, s);
    matmul_forward_bias_gelu(a->fch, a->fch_gelu, a->ln2, w.fcw, w.fcb, N, C, 4 * C, s);
    if (out) matmul_forward_bias(out, a->fch_gelu, w.fcprojw, w.fcprojb, res2, N, 4 * C, C, s);  // + res2
}

// A kept layer (-K) redoes its LayerNorms and GELU before its backward pass.
// Three memory-bound passes replace a recompute's GEMMs and attention.
static void layer_redo_cheap_part(GPT* g, const bf16* weights, const bf16* x, LayerActs* a, cudaStream_t s) {
    if (is_llama(g)) return llama_layer_redo_cheap_part(g, weights, x, a, s);
    const int64_t N = (int64_t)g->B * g->T;
    const int C = g->config.channels;
    const LayerWeights w = layer_params(&g->layout, weights);
    layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, w.ln1w, w.ln1b, N, C, s);
    layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->residual2, w.ln2w, w.ln2b, N, C, s);
    gelu_forward(a->fch_gelu, a->fch, N * 4 * C, s);  // with -G 1, not cuBLASLt's GELU to the bit
}

// ----------------------------------------------------------------------------
// One transformer layer, backward, as gpt2_cpu.h's gpt2_cpu_backward, once `a` holds its activations.
// dres: the gradient of the layer's output on entry, of its input on return.
// Parameter gradients are ADDED to `grads`.

static void layer_backward(GPT* g, const bf16* weights, float* grads, const bf16* x, bf16* dres, LayerActs* a,
                           const int* pos, cudaStream_t s) {
    if (is_llama(g)) return llama_layer_backward(g, weights, grads, x, dres, a, pos, s);
    const int B = g->B, T = g->T, C = g->config.channels, NH = g->config.num_heads;
    const int64_t N = (int64_t)B * T;
    const LayerWeights w = layer_params(&g->layout, weights);
    const LayerGrads dw = layer_params(&g->layout, grads);
    const bf16* res2 = a->residual2;
    // MLP branch: res3 = res2 + fcproj(gelu(fc(ln2(res2))))
    matmul_backward_weight(dw.fcprojw, dres, a->fch_gelu, N, 4 * C, C, s);
    bias_backward(dw.fcprojb, dres, N, C, s);
    matmul_backward_input_gelu(a->dfch, dres, w.fcprojw, a->fch, N, 4 * C, C, s);
    matmul_backward_weight(dw.fcw, a->dfch, a->ln2, N, C, 4 * C, s);
    bias_backward(dw.fcb, a->dfch, N, 4 * C, s);
    matmul_backward_input(a->dln, a->dfch, w.fcw, N, C, 4 * C, s);
    layernorm_backward(dres, dw.ln2w, dw.ln2b, a->dln, res2, w.ln2w, a->ln2_mean, a->ln2_rstd, N, C, s);
    // attention branch: res2 = x + attproj(attention(qkv(ln1(x))))
    matmul_backward_weight(dw.attprojw, dres, a->atty, N, C, C, s);
    bias_backward(dw.attprojb, dres, N, C, s);
    matmul_backward_input(a->dln, dres, w.attprojw, N, C, C, s);
    if (g->flash)
        flash_attention_backward(a->dqkv, a->att_dsum, a->dln, a->atty, a->qkv, a->att_lse, B, T, C, NH, s,
                                 NH, pos);
    else attention_backward(a->dqkv, a->datt, a->dln, a->att, a->qkv, B, T, C, NH, s, NH, pos);
    matmul_backward_weight(dw.qkvw, a->dqkv, a->ln1, N, C, 3 * C, s);
    bias_backward(dw.qkvb, a->dqkv, N, 3 * C, s);
    matmul_backward_input(a->dln, a->dqkv, w.qkvw, N, C, 3 * C, s);
    layernorm_backward(dres, dw.ln1w, dw.ln1b, a->dln, x, w.ln1w, a->ln1_mean, a->ln1_rstd, N, C, s);
}

// ----------------------------------------------------------------------------
// Final LayerNorm + tied lm_head + loss. The backward pass overwrites the logits with their gradient.
// It adds to the wte and lnf gradients, and overwrites dres.

static void head_forward(GPT* g, const bf16* x, const int* targets, float* losses, float dloss_scale,
                         cudaStream_t s) {
    if (g->vocab) return vocab_head_forward(g, x, targets, losses, s);  // -E 1: in chunks (evaluation)
    if (is_llama(g)) return llama_head_forward(g, x, targets, losses, dloss_scale, s);  // RMSNorm, lm_head
    const int64_t N = (int64_t)g->B * g->T;
    const int C = g->config.channels, V = g->config.vocab_size, Vp = g->config.padded_vocab_size;
    LayerActs* a = &g->acts;
    const EmbedWeights e = embed_params(&g->layout, (const bf16*)g->resident);
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x, e.lnfw, e.lnfb, N, C, s);
    matmul_forward(a->logits, a->lnf, e.wte, N, C, Vp, s);  // lm_head tied to wte
    if (targets) fused_classifier(a->logits, losses, targets, N, V, Vp, dloss_scale, s);
}

static void head_backward(GPT* g, const bf16* x, bf16* dres, cudaStream_t s) {
    if (is_llama(g)) return llama_head_backward(g, x, dres, s);
    const int64_t N = (int64_t)g->B * g->T;
    const int C = g->config.channels, Vp = g->config.padded_vocab_size;
    LayerActs* a = &g->acts;
    const EmbedWeights e = embed_params(&g->layout, (const bf16*)g->resident);
    const EmbedGrads de = embed_params(&g->layout, g->resident_grads);
    matmul_backward_weight(de.wte, a->logits, a->lnf, N, C, Vp, s);
    matmul_backward_input(a->dlnf, a->logits, e.wte, N, C, Vp, s);
    cudaCheck(cudaMemsetAsync(dres, 0, (size_t)(N * C * 2), s));
    layernorm_backward(dres, de.lnfw, de.lnfb, a->dlnf, x, e.lnfw, a->lnf_mean, a->lnf_rstd, N, C, s);
}

// ----------------------------------------------------------------------------
// Build / free. gpt_build allocates everything (nothing is allocated later); the caller then fills
// g->master (GPT-2 init or an llm.c model file) and calls gpt_weights_ready.

// cudaMalloc that counts, so the trainer reports exactly what it holds on the GPU.
static void* gpu_alloc(GPT* g, int64_t bytes) {
    void* p = NULL;
    if (bytes == 0) return NULL;  // -E 1 without -R: no GPU-resident parameter
    const cudaError_t err = cudaMalloc(&p, (size_t)bytes);
    if (err != cudaSuccess)
        die("out of GPU memory allocating %.3f GiB (%s)", bytes / 1073741824.0, cudaGetErrorString(err));
    g->gpu_bytes += bytes;
    return p;
}

// Host arrays for the fp32 master weights and AdamW state: anonymous mmap, zero-filled lazily.
static float* host_alloc_floats(int64_t n) {
    const size_t bytes = (size_t)n * 4;
    void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    madvise(p, bytes, MADV_HUGEPAGE);  // transparent huge pages where available
    return (float*)p;
}
static void host_free_floats(float* p, int64_t n) {
    if (p) munmap(p, (size_t)n * 4);
}

// -E 1: vocab_host.cuh's buffers, as the plan's vocab_chunks, vocab_staging and vocab_grads count them.
static void vocab_build(GPT* g, int64_t N, const MemoryPlan& plan) {
    HostVocab* v = new HostVocab();
    const int64_t C = g->llama.hidden_size, MN = g->max_micro * N;
    v->rows = vocab_chunk_rows(g->llama.vocab_size, C);
    v->w_chunk = (bf16*)gpu_alloc(g, v->rows * C * 2);
    v->dw_chunk = (float*)gpu_alloc(g, v->rows * C * 4);
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
    v->grads = host_alloc_floats(g->layout.embed_count);
    if (!v->grads)
        die("out of host memory for the vocabulary's gradients (%.1f GiB)", plan.vocab_grads / 1073741824.0);
    g->vocab = v;
}
static void vocab_free(GPT* g) {
    HostVocab* v = g->vocab;
    if (!v) return;
    for (void* p :
         {(void*)v->w_chunk, (void*)v->dw_chunk, (void*)v->final_norm, (void*)v->dfinal_norm, (void*)v->lnf,
          (void*)v->lnf_rstd, (void*)v->dlnf, (void*)v->row_max, (void*)v->row_sum, (void*)v->row_target})
        cudaCheck(cudaFree(p));
    for (int k = 0; k < 2; k++) {
        cudaCheck(cudaFreeHost(v->dw_host[k]));
        cudaCheck(cudaEventDestroy(v->dw_copied[k]));
    }
    cudaCheck(cudaFreeHost(v->rows_host));
    host_free_floats(v->grads, g->layout.embed_count);
    delete v;
    g->vocab = NULL;
}

// tier: where the streamed layers' state lives (TIER_*). With -sd the host arrays hold the prefix only.
// llama (with layers): a Llama-family model, cfg its llama_gpt_config.
static void gpt_build(GPT* g, const GPTConfig* cfg, int B, int T, int max_micro, int num_slots,
                      int resident_layers, int kept_layers, const TrainArgs* args, int tier = TIER_RAM,
                      const LlamaConfig* llama = NULL, bool vocab_host = false) {
    const bool ssd = tier != TIER_RAM;
    memset(g, 0, sizeof *g);
    g->checkpoint_step = -1;
    g->config = *cfg;
    if (llama) g->llama = *llama;
    g->layout = model_layout(cfg, llama);
    g->B = B;
    g->T = T;
    g->max_micro = max_micro;
    g->args = *args;
    g->flash = use_flash_attention(cfg, llama);
    const ParamLayout* p = &g->layout;
    const GPTConfig* c = &g->config;
    if (resident_layers < 0 || resident_layers > c->num_layers || kept_layers < 0 ||
        kept_layers > c->num_layers)
        die("internal: %d GPU-resident layers, %d with kept activations, of %d", resident_layers, kept_layers,
            c->num_layers);
    if (cublas_workspace)  // matmul.cuh's handles, workspace and algorithm cache are one per process
        die("internal: a second GPT built while one is alive (gpt_free the first)");
    if (vocab_host && !is_llama(g)) die("internal: -E 1 for GPT-2");
    const MemoryPlan plan =
        gpt_memory_plan(c, B, T, max_micro, num_slots, resident_layers, kept_layers, tier, llama, vocab_host);
    g->resident_layers = resident_layers;
    g->kept_layers = kept_layers;
    g->resident_count = plan.resident_count;
    g->resident_start = vocab_host ? p->embed_count : 0;

    // host: not pinned (only the CPU touches them); pages are faulted in by whoever writes first
    g->host_state_count = ssd ? plan.resident_count : p->total;
    g->master = host_alloc_floats(g->host_state_count);
    g->adam_m = host_alloc_floats(g->host_state_count);
    g->adam_v = host_alloc_floats(g->host_state_count);
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
    stream_init(&g->stream, c->num_layers, p->layer_stride, p->embed_count, num_slots, optimizer_block_ready,
                g, !ssd, from_disk);
    if (ssd) g->ssd = ssd_tier_new(g, tier);         // its store comes with ssd_attach
    g->gpu_bytes += plan.slots + plan.grad_staging;  // stream_init's

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
    g->layer_grads = (float*)gpu_alloc(g, plan.layer_grads);
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

// Pageable host arrays <-> the GPU through a pinned bounce buffer, a chunk at a time.
// A pageable copy would run at a fraction of the bus's speed.
// The buffer lives only during the copy, so the memory plan leaves it out.
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

// The resident prefix's fp32 weights and moments between the host arrays (for files) and the GPU.
// Synchronous: only at load and checkpoint time.
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
    // on the compute stream: after the last step's GPU AdamW, which runs there
    void* const dst[3] = {g->master + o, g->adam_m + o, g->adam_v + o};
    const void* const src[3] = {g->resident_master, g->resident_m, g->resident_v};
    bounce_copy(g, dst, src, 3, bytes, cudaMemcpyDeviceToHost);
}

// The master weights changed outside the optimizer (init, model file, resume).
// Refreshes the streamed bf16 copy and the resident prefix, and empties the slots.
static void gpt_weights_ready(GPT* g) {
    uint16_t* bf16 = g->stream.weights_host_bf16;
    const int64_t n = g->host_state_count;  // -sd: the prefix only
    FAKE_CUDA_HOST_ACCESS(bf16, n * 2, true, "the host writing the bf16 copy (load)");
    convert_f32_to_bf16(g->master, bf16, n);
    gpt_resident_state_to_device(g);
    stream_invalidate(&g->stream);
}

static void gpt_free(GPT* g) {
    optimizer_stop(g);
    ssd_tier_free(g);
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
    cudaCheck(cudaFree(g->tokens_pos));
    cudaCheck(cudaFree(g->losses));
    cudaCheck(cudaFree(g->loss_dev));
    cudaCheck(cudaFree(g->sumsq_dev));
    if (g->rope_inv_freq) cudaCheck(cudaFree(g->rope_inv_freq));
    cudaCheck(cudaFreeHost(g->tokens_host));
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

// AdamW of the resident prefix on the GPU, tensor by tensor; weight decay on matrices only.
static void resident_adamw(GPT* g, const AdamWArgs& args, cudaStream_t s) {
    const ParamLayout* p = &g->layout;
    auto gpu_form = [g, s](int64_t block) {  // adamw.h's update for the block at `block`
        return [g, s, block](int64_t o, int64_t n, const AdamWArgs* a) {
            o += block;
            float *master = g->resident_master + o, *grads = g->resident_grads + o;
            adamw_gpu(master, grads, g->resident_m + o, g->resident_v + o, g->resident + o, n, a, s);
        };
    };
    if (!g->vocab)  // -E 1: the CPU's (vocab_adamw)
        adamw_tensors(NUM_EMBED_TENSORS, p->embed_offset, p->embed_size, embed_is_matrix(g), &args,
                      gpu_form(0));
    for (int l = 0; l < g->resident_layers; l++) {
        const int64_t block = gpt_layer_offset(p, l) - g->resident_start;
        adamw_tensors(NUM_LAYER_TENSORS, p->layer_offset, p->layer_size, layer_is_matrix(g), &args,
                      gpu_form(block));
    }
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

// Micro-batch mb's positions on the GPU: chat data's, or NULL (position t).
static const int* positions(const GPT* g, int mb) {
    return g->packed ? g->tokens_pos + mb * (int64_t)g->B * g->T : NULL;
}

// Layer l's activations for micro-batch mb, before its backward pass: kept, left over, or recomputed.
static void restore_activations(GPT* g, const bf16* w, int l, int mb, int n_micro, cudaStream_t s) {
    LayerActs* a = layer_acts(g, l, mb);
    const bool last_forward = l == g->config.num_layers - 1 && mb == n_micro - 1;  // still in g->acts
    if (layer_kept(g, l)) layer_redo_cheap_part(g, w, layer_input(g, l, mb), a, s);
    else if (!last_forward) layer_forward(g, w, layer_input(g, l, mb), NULL, a, positions(g, mb), s);
}

// Where layer l's gradients accumulate: a streamed layer's buffer, or its place in resident_grads.
static float* layer_grads_begin(GPT* g, int l, cudaStream_t s) {
    if (l < g->resident_layers)
        return g->resident_grads + gpt_layer_offset(&g->layout, l) - g->resident_start;
    cudaCheck(cudaMemsetAsync(g->layer_grads, 0, (size_t)(g->layout.layer_stride * 4), s));
    return g->layer_grads;
}
// A streamed layer's gradients, as bf16, into a staging buffer for the host; their squares go to the norm.
static void layer_grads_end(GPT* g, int l, cudaStream_t s) {
    if (l < g->resident_layers) return;
    bf16* staging = stream_grad_staging(&g->stream);
    grads_to_bf16_sumsq(staging, g->layer_grads, g->layout.layer_stride, g->sumsq_dev, s);
}

// n micro-batches of tokens to the GPU through the pinned staging; targets and pos may be NULL.
static void tokens_to_device(GPT* g, const int* inputs, const int* targets, const int* pos, int n,
                             cudaStream_t s) {
    const int64_t count = (int64_t)n * g->B * g->T, stride = (int64_t)g->max_micro * g->B * g->T;
    int* staged[3] = {g->tokens_host, g->tokens_host + stride, g->tokens_host + 2 * stride};
    const int* from[3] = {inputs, targets, pos};
    int* to[3] = {g->tokens_in, g->tokens_out, g->tokens_pos};
    g->packed = pos != NULL;
    for (int k = 0; k < 3; k++) {
        if (!from[k]) continue;
        FAKE_CUDA_HOST_ACCESS(staged[k], count * 4, true, "the host staging tokens");
        memcpy(staged[k], from[k], (size_t)count * 4);
        cudaCheck(cudaMemcpyAsync(to[k], staged[k], (size_t)count * 4, cudaMemcpyHostToDevice, s));
    }
}

// The step's tokens to the GPU, and each micro-batch's embeddings: the input of layer 0.
static void embeddings_forward(GPT* g, const int* inputs, const int* targets, const int* pos, int n_micro,
                               cudaStream_t s) {
    const int64_t N = (int64_t)g->B * g->T;
    const int C = g->config.channels;
    tokens_to_device(g, inputs, targets, pos, n_micro, s);
    const EmbedWeights e = embed_params(&g->layout, (const bf16*)g->resident);
    for (int mb = 0; mb < n_micro; mb++) {
        const int* tokens = g->tokens_in + mb * N;
        if (g->vocab) vocab_embedding_forward(g, layer_input(g, 0, mb), inputs + mb * N, s);  // -E 1
        else if (is_llama(g)) llama_embedding_forward(g, layer_input(g, 0, mb), tokens, s);   // no wpe: RoPE
        else embedding_forward(layer_input(g, 0, mb), tokens, e.wte, e.wpe, N, g->T, C, s, positions(g, mb));
    }
}

// Each micro-batch's loss and its backward through lm_head and the final LayerNorm.
// The step's loss is the mean over its targets: N * n_micro tokens, or chat data's num_targets.
static void head_forward_backward(GPT* g, int n_micro, int64_t num_targets, cudaStream_t s) {
    const int L = g->config.num_layers;
    const int64_t N = (int64_t)g->B * g->T;
    const size_t grad_bytes = (size_t)(g->resident_count - g->resident_start) * 4;
    if (grad_bytes) cudaCheck(cudaMemsetAsync(g->resident_grads, 0, grad_bytes, s));  // they start here
    cudaCheck(cudaMemsetAsync(g->sumsq_dev, 0, 8, s));
    ScopedSpan span(g->timeline, TRACK_COMPUTE, "head", -1, s);
    const float dloss =
        g->packed ? 1.0f / (float)num_targets : 1.0f / (float)(N * n_micro);  // each target's share
    if (g->vocab) {  // -E 1: the vocabulary's chunks outside, the micro-batches inside
        std::vector<const bf16*> xs;
        std::vector<bf16*> dres;
        for (int mb = 0; mb < n_micro; mb++) {
            xs.push_back(layer_input(g, L, mb));
            dres.push_back(dresid_at(g, mb));
        }
        vocab_head_step(g, xs.data(), g->tokens_out, g->losses, dres.data(), n_micro, dloss, s);
    }
    for (int mb = 0; mb < n_micro && !g->vocab; mb++) {
        const bf16* x = layer_input(g, L, mb);
        head_forward(g, x, g->tokens_out + mb * N, g->losses + mb * N, dloss, s);
        head_backward(g, x, dresid_at(g, mb), s);
    }
    mean_loss(g->loss_dev, g->losses, n_micro * N, s, g->packed ? dloss : 0.0f);  // non-targets add 0
}

// The embeddings' backward, then the resident prefix's squared norm (its gradients stay on the GPU).
static void embeddings_backward(GPT* g, int n_micro, cudaStream_t s) {
    const ParamLayout* p = &g->layout;
    const int64_t N = (int64_t)g->B * g->T;
    ScopedSpan span(g->timeline, TRACK_COMPUTE, "embed bwd", -1, s);
    if (g->vocab) vocab_embedding_backward(g, g->tokens_host, n_micro, s);  // the inputs' staging
    for (int mb = 0; mb < n_micro && !g->vocab; mb++)
        if (is_llama(g)) llama_embedding_backward(g, dresid_at(g, mb), g->tokens_in + mb * N, s);
        else
            embedding_backward(g->resident_grads + p->embed_offset[WTE],
                               g->resident_grads + p->embed_offset[WPE], dresid_at(g, mb),
                               g->tokens_in + mb * N, N, g->T, g->config.channels, s, positions(g, mb));
    const int64_t n = g->resident_count - g->resident_start;
    if (n) grads_to_bf16_sumsq(NULL, g->resident_grads, n, g->sumsq_dev, s);
}

// Waits for the step's work on stream s: the mean loss, and the gradient norm into g->last_norm.
static float read_loss_and_norm(GPT* g, cudaStream_t s) {
    cudaCheck(cudaMemcpyAsync(g->loss_host, g->loss_dev, 4, cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaMemcpyAsync(g->sumsq_host, g->sumsq_dev, 8, cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
    g->last_norm = sqrt(*g->sumsq_host + (g->vocab ? g->vocab->sumsq : 0.0));  // -E 1: the host's part
    return *g->loss_host;
}

// Forward and backward of one step over n_micro x (B*T) tokens; returns the mean loss.
// Chat data: pos, and the step's num_targets (> 0). g->last_norm gets the gradient norm. Updates nothing.
static float gpt_forward_backward(GPT* g, const int* inputs, const int* targets, const int* pos, int n_micro,
                                  int64_t num_targets) {
    const int L = g->config.num_layers, R = g->resident_layers;
    cudaStream_t s = g->stream.compute;
    Timeline* tl = g->timeline;
    if (n_micro < 1 || n_micro > g->max_micro) die("internal: %d micro-batches", n_micro);

    // 1. tokens and embeddings (the resident prefix is up to date: the last GPU AdamW ran on this stream)
    embeddings_forward(g, inputs, targets, pos, n_micro, s);

    // 2. forward: each layer's weights arrive once and serve every micro-batch (resident layers first)
    stream_begin_pass(&g->stream, g->forward_order, L - R);
    for (int l = 0; l < L; l++) {
        const bf16* w = layer_acquire(g, l);
        {
            ScopedSpan span(tl, TRACK_COMPUTE, "fwd", l, s);
            for (int mb = 0; mb < n_micro; mb++) {
                bf16* out = layer_input(g, l + 1, mb);
                layer_forward(g, w, layer_input(g, l, mb), out, layer_acts(g, l, mb), positions(g, mb), s);
            }
        }
        layer_release(g, l);
    }

    // 3. loss, and its backward through lm_head and the final LayerNorm
    head_forward_backward(g, n_micro, num_targets, s);

    // 4. backward, last layer first, last micro-batch first; a streamed layer's gradients go to the host
    ssd_tier_begin_backward(g);  // -sd: a new generation of the grads file
    stream_begin_pass(&g->stream, g->backward_order, L - R);
    for (int l = L - 1; l >= 0; l--) {
        const bf16* w = layer_acquire(g, l);
        {
            ScopedSpan span(tl, TRACK_COMPUTE, "bwd", l, s);
            float* grads = layer_grads_begin(g, l, s);
            for (int mb = n_micro - 1; mb >= 0; mb--) {
                restore_activations(g, w, l, mb, n_micro, s);
                layer_backward(g, w, grads, layer_input(g, l, mb), dresid_at(g, mb), layer_acts(g, l, mb),
                               positions(g, mb), s);
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

// 6. AdamW: the streamed layers on the CPU thread, the resident prefix here on the GPU.
static void gpt_update(GPT* g, float lr) {
    const float grad_scale = clip_scale((float)g->last_norm, g->args.grad_clip);
    // first: -sw 1's reads of this step's weights end before the round rewrites them
    stream_invalidate(&g->stream);
    optimizer_submit(g, lr, grad_scale);
    const AdamWArgs args = {lr,         ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS, g->args.weight_decay,
                            grad_scale, g->adam_t};
    if (g->vocab) vocab_adamw(g, &args, g->stream.compute);  // on this thread, beside the streamed layers'
    ScopedSpan span(g->timeline, TRACK_COMPUTE, "resident adamw", -1, g->stream.compute);
    resident_adamw(g, args, g->stream.compute);
}

// -Y 1: the previous step's CPU AdamW round ran during this forward pass: it joins this timeline.
static void timeline_add_adamw_round(GPT* g) {
    optimizer_wait_all(g);  // already done: the forward pass waited for every block
    if (g->opt->rounds_done == 0 || g->skipped[0]) return;
    const Optimizer* o = g->opt;
    for (int l = g->resident_layers; l < g->config.num_layers; l++)
        timeline_host_span(g->timeline, TRACK_ADAM, "adamw", l, o->block_t0[l], o->block_t1[l]);
}

// What one step did: its loss and norm, and whether it diverged or skipped its update.
typedef struct {
    float loss;
    double norm;
    int64_t targets;    // the tokens its loss is the mean over (chat data: 0 skips the step)
    char diverged[96];  // why the run must stop before this update, or ""
    bool skipped;       // -sl / -sg, or no targets: no update (g->skipped says why)
} StepResult;

// Targets that are not -1 among n.
static int64_t count_targets(const int* targets, int64_t n) {
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) count += targets[i] >= 0;
    return count;
}

// One step of the training loop, as llm.c's: forward and backward, then the update.
// pos: chat data's positions (NULL: pretraining). No update when the step diverged (the caller stops),
// -sl / -sg find it an outlier, or chat data has no target in the step.
static StepResult gpt_step(GPT* g, const int* inputs, const int* targets, int n_micro, float lr,
                           const int* pos = NULL) {
    StepResult r = {};
    const int64_t tokens = (int64_t)n_micro * g->B * g->T;
    r.targets = pos ? count_targets(targets, tokens) : tokens;
    if (r.targets == 0) {  // nothing to learn: no forward pass, no update
        snprintf(g->skipped, sizeof g->skipped, "no target tokens in this step");
        g->last_norm = 0.0;
        r.skipped = true;
        return r;
    }
    timeline_start_step(g->timeline, g->stream.compute);
    r.loss = gpt_forward_backward(g, inputs, targets, pos, n_micro, r.targets);
    r.norm = g->last_norm;
    if (g->timeline) timeline_add_adamw_round(g);
    ssd_tier_timeline(g);
    if (training_diverged(r.loss, r.norm, g->config.vocab_size, r.diverged, sizeof r.diverged)) return r;
    g->step++;
    r.skipped = outlier_skip(&g->args, &g->loss_window, &g->norm_window, r.loss, r.norm, g->skipped,
                             sizeof g->skipped);
    if (!r.skipped) gpt_update(g, lr);  // skipped: the weights, slots and AdamW state stay as they were
    return r;
}

// Forward only over n <= max_micro batches in one walk of the layers.
// With targets, losses[i] gets batch i's mean loss (chat data, pos given: over its targets, 0 with none)
// and counts[i] (if given) its targets; without, the last batch's logits stay in g->acts.
static void gpt_forward_eval_batches(GPT* g, const int* inputs, const int* targets, int n, float* losses,
                                     const int* pos = NULL, int64_t* counts = NULL) {
    const int L = g->config.num_layers, R = g->resident_layers;
    const int64_t N = (int64_t)g->B * g->T;
    cudaStream_t s = g->stream.compute;
    if (n < 1 || n > g->max_micro) die("internal: %d batches in one evaluation pass", n);
    embeddings_forward(g, inputs, targets, pos, n, s);
    stream_begin_pass(&g->stream, g->forward_order, L - R);
    for (int l = 0; l < L; l++) {
        const bf16* w = layer_acquire(g, l);
        for (int i = 0; i < n; i++)
            layer_forward(g, w, layer_input(g, l, i), layer_input(g, l + 1, i), &g->acts, positions(g, i), s);
        layer_release(g, l);
    }
    for (int i = 0; i < n; i++) {
        const int* t = targets ? g->tokens_out + i * N : NULL;
        head_forward(g, layer_input(g, L, i), t, g->losses + i * N, 0.0f, s);
        if (!targets) continue;
        const int64_t count = pos ? count_targets(targets + i * N, N) : N;
        if (counts) counts[i] = count;
        if (count == 0) {
            losses[i] = 0.0f;
            continue;
        }
        mean_loss(g->loss_dev, g->losses + i * N, N, s, pos ? 1.0f / (float)count : 0.0f);
        cudaCheck(cudaMemcpyAsync(g->loss_host, g->loss_dev, 4, cudaMemcpyDeviceToHost, s));
        cudaCheck(cudaStreamSynchronize(s));
        losses[i] = *g->loss_host;
    }
    cudaCheck(cudaStreamSynchronize(s));
}
// One batch: its mean loss (targets given), or 0 and its logits in the workspace (targets NULL).
static float gpt_forward_eval(GPT* g, const int* inputs, const int* targets, const int* pos = NULL) {
    float loss = 0.0f;
    gpt_forward_eval_batches(g, inputs, targets, 1, &loss, pos);
    return loss;
}

// Copies the logits of position (b, t) to host floats (Vp of them).
static void gpt_copy_logits(GPT* g, int b, int t, float* out) {
    if (g->vocab) return vocab_copy_logits(g, (int64_t)b * g->T + t, out, g->stream.compute);  // -E 1
    const int Vp = g->config.padded_vocab_size;
    uint16_t* tmp = (uint16_t*)malloc(sizeof(uint16_t) * Vp);
    const bf16* src = g->acts.logits + ((int64_t)b * g->T + t) * Vp;
    cudaCheck(cudaMemcpyAsync(tmp, src, (size_t)Vp * 2, cudaMemcpyDeviceToHost, g->stream.compute));
    cudaCheck(cudaStreamSynchronize(g->stream.compute));
    for (int i = 0; i < Vp; i++) out[i] = bf16_to_float(tmp[i]);
    free(tmp);
}

// ----------------------------------------------------------------------------
// Checkpoints (the files: checkpoint.h)

// The Llama family's model file (and state file) order is [layers | embeddings], this trainer's
// [embeddings | layers]: rotating the host arrays in place converts, without a second copy.
static void llama_state_order(GPT* g, bool to_file) {
    for (float* x : {g->master, g->adam_m, g->adam_v})
        to_file ? llama_file_order(&g->layout, x) : llama_trainer_order(&g->layout, x);
}

// Gathers the state from the optimizer thread and the GPU, then writes the checkpoint.
// -sd: the prefix stays in this trainer's order; checkpoint_save writes the family's model file.
static void save_checkpoint(GPT* g, const char* dir, const DataLoaderState* data_state) {
    optimizer_wait_all(g);          // the master weights and m, v of the last step must be complete
    gpt_resident_state_to_host(g);  // the GPU-resident prefix of them lives on the GPU
    const LlamaConfig* llama = is_llama(g) ? &g->llama : NULL;  // llama_model.h's file: the family's order
    if (g->ssd) {
        const StreamedState ss = ssd_tier_checkpoint(g);
        checkpoint_save(dir, g->step, g->adam_t, &g->config, g->master, g->adam_m, g->adam_v, &g->args, g->B,
                        g->T, data_state, &ss, llama);
        return;
    }
    if (llama) llama_state_order(g, true);
    checkpoint_save(dir, g->step, g->adam_t, &g->config, g->master, g->adam_m, g->adam_v, &g->args, g->B,
                    g->T, data_state, NULL, llama);
    if (llama) llama_state_order(g, false);
}

// A checkpoint's AdamW state, step and data position; its model file is loaded apart.
static void load_state(GPT* g, const char* path, DataLoaderState* data_state) {
    state_file_read(path, g->layout.total, g->adam_m, g->adam_v, data_state, &g->step, &g->adam_t,
                    g->ssd ? &g->host_state_count : NULL);
    if (is_llama(g) && !g->ssd)  // m, v in the family's file order: to this trainer's (-sd: already)
        for (float* x : {g->adam_m, g->adam_v}) llama_trainer_order(&g->layout, x);
    gpt_resident_state_to_device(g);  // the GPU-resident prefix's weights and moments live on the GPU
}

// ----------------------------------------------------------------------------
// Sampling: generate from <|endoftext|> with full forward passes (each one streams the model once).

static void gpt_sample(GPT* g, const Tokenizer* tok, int gen_tokens, uint64_t* rng) {
    const int64_t N = (int64_t)g->B * g->T;
    const int V = g->config.vocab_size, want = tok->init_ok ? tok->eot_token : 50256;  // -1: none
    const int eot = want < 0 ? 0 : want < V ? want : V - 1;
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
    const double width = is_llama(g) ? (double)g->llama.num_heads * g->llama.head_dim : c->channels;
    return 6.0 * (double)g->layout.total * tokens + 6.0 * c->num_layers * width * g->T * tokens;
}

// The MFU denominator: the GPU's dense bf16 peak, by a word of its name (docs/memory.md).
// The first match wins, so the H100 variants come first; 0 for a GPU not in the table.
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

// -e as a Llama-family model (llama_model.h): a spec or preset (1), a model file (2), a Hugging Face
// checkpoint (3); 0: GPT-2. Dies on a malformed Llama spec or file, or a shape the GPU kernels refuse.
static int llama_source_kind(const char* spec, LlamaConfig* llama) {
    char err[4352];
    memset(llama, 0, sizeof *llama);
    int kind = parse_llama_spec(spec, llama, err, sizeof err);
    if (kind == 0) die("%s", err);
    if (kind == 2 && llama_is_model_file(spec)) {
        if (!llama_read_header(spec, llama, err, sizeof err)) die("%s", err);
    } else if (kind == 2) {
        const int hf = llama_hf_read_config(spec, llama, err, sizeof err);
        if (hf == 0) die("%s", err);
        if (hf != 1) {
            memset(llama, 0, sizeof *llama);
            return 0;
        }
        kind = 3;
    }
    // every tensor a multiple of 8 elements keeps every tensor and layer 16-byte aligned (copies, cuBLASLt)
    const LlamaConfig& c = *llama;
    const int QD = c.num_heads * c.head_dim, KVD = c.num_kv_heads * c.head_dim;
    if (c.hidden_size % 8 || QD % 8 || KVD % 8 || c.intermediate_size % 8)
        die("-e %s: this trainer needs C, NH*HD, KV*HD and I multiples of 8 (C%d, %d, %d, I%d)", spec,
            c.hidden_size, QD, KVD, c.intermediate_size);
    return kind;
}

// Model config from -e: a spec (random init), an llm.c model file (its header) or a Hugging
// Face checkpoint (hf.h); or the Llama family's (llama_source_kind: *llama gets its config, cfg its
// llama_gpt_config). llama->num_layers 0: GPT-2.
static int resolve_model(const char* spec, GPTConfig* cfg, LlamaConfig* llama) {
    char err[4352];
    const int llama_kind = llama_source_kind(spec, llama);
    if (llama_kind) {
        *cfg = llama_gpt_config(llama);
        return llama_kind == 1 ? 1 : 2;
    }
    const int kind = parse_model_spec(spec, cfg, err, sizeof err);
    if (kind == 0) die("%s", err);
    warn_if_spec_shadows_path(spec, kind);
    if (kind == 2 && !gpt_read_header(spec, cfg, err, sizeof err)) die("%s", err);
    return kind;
}

// One step's tokens on the host: n_micro x N each; pos only for chat data (else NULL).
typedef struct {
    int *inputs, *targets, *pos;
} StepTokens;

// The loader's next batch, its tokens checked against the vocabulary, into batch mb of `to`.
static void fetch_batch(DataLoader* dl, int V, const char* which, StepTokens* to, int mb) {
    const int64_t N = (int64_t)dl->B * dl->T;
    if (!dataloader_next_batch(dl)) die("%s", dl->err);
    char err[600];
    if (!dataloader_check_tokens(dl, V, err, sizeof err)) die("%s data: %s", which, err);
    memcpy(to->inputs + mb * N, dl->inputs, (size_t)N * sizeof(int));
    memcpy(to->targets + mb * N, dl->targets, (size_t)N * sizeof(int));
    // chat rows begin a conversation, so 0 <= pos[t] <= t < T: the kernels' masks stay in the row
    if (to->pos) memcpy(to->pos + mb * N, dl->pos, (size_t)N * sizeof(int));
}

// The mean loss of the first `batches` validation batches, max_micro per walk of the layers.
// Chat data: the mean over their target tokens.
static float validation_loss(GPT* g, DataLoader* val, int64_t batches, StepTokens* buf) {
    const bool chat = val->kind == DL_CHAT;
    dataloader_reset(val);
    double sum = 0.0, targets = 0.0;
    std::vector<float> losses((size_t)g->max_micro);
    std::vector<int64_t> counts((size_t)g->max_micro);
    for (int64_t done = 0; done < batches;) {
        const int n = (int)std::min<int64_t>(g->max_micro, batches - done);
        for (int i = 0; i < n; i++) fetch_batch(val, g->config.vocab_size, "val", buf, i);
        gpt_forward_eval_batches(g, buf->inputs, buf->targets, n, losses.data(), chat ? buf->pos : NULL,
                                 counts.data());
        for (int i = 0; i < n; i++) {
            const double count = chat ? (double)counts[(size_t)i] : 1.0;  // pretraining: a mean each
            sum += losses[i] * count;
            targets += count;
        }
        done += n;
    }
    if (chat && targets == 0)
        die("val data %s: no target tokens in its first %lld batches", val->pattern, (long long)batches);
    return (float)(sum / targets);
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

// The run: what main settles before the loop, and the loop's host state.
typedef struct {
    TrainArgs args;
    GpuArgs ga;
    GPTConfig cfg;      // GPT-2's, or the Llama family's llama_gpt_config
    LlamaConfig llama;  // the Llama family's config (num_layers 0: GPT-2)
    int kind;           // 1: a model spec (seeded init), 2: a model file or Hugging Face checkpoint
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
    char ssd_owner[4200];  // -sd: the store's owner, -o as an absolute path ("": a run without checkpoints)
    // the loop's
    DataLoader train, val;
    int64_t val_batches;
    Tokenizer tok;
    TrainLogger logger;
    StepTokens batch;      // one step's tokens
    double* step_seconds;  // each step's time
    uint64_t sample_rng;
    int sample_tokens;              // per sample (gpu_sample_tokens: 0 by default for a large model)
    Timeline timeline;              // -Y 1
    TimelineSummary last_timeline;  // of the last step
} Run;

// -y 1 with -e: the model -e names must be the checkpoint's, GPT-2 (check_resume_model) or Llama family.
static void check_resume_family(const char* model, const char* dir, const GPTConfig* ckpt,
                                const LlamaConfig* llama_ckpt) {
    LlamaConfig want;
    const bool llama_given = llama_source_kind(model, &want) != 0, llama_saved = llama_ckpt->num_layers > 0;
    if (llama_given != llama_saved)
        die("-e %s is a %s, the checkpoint in %s a %s: drop -e or choose another -o", model,
            llama_given ? "Llama-family model" : "GPT-2", dir, llama_saved ? "Llama-family model" : "GPT-2");
    if (!llama_saved) return check_resume_model(model, dir, ckpt);
    if (memcmp(&want, llama_ckpt, sizeof want) != 0)  // ints and floats, no padding
        die("-e %s does not match the checkpoint in %s (L%d C%d NH%d NKV%d I%d V%d): drop -e or "
            "choose another -o",
            model, dir, llama_ckpt->num_layers, llama_ckpt->hidden_size, llama_ckpt->num_heads,
            llama_ckpt->num_kv_heads, llama_ckpt->intermediate_size, llama_ckpt->vocab_size);
}

// -o: one run per directory; -y 1 resumes from its newest valid checkpoint (open_run_dir).
// A benchmark writes only trace.json there; -P 1 writes nothing.
static void open_output_dir(Run* r) {
    char err[4352];
    const GpuArgs& ga = r->ga;
    r->resume_step = -1;
    if (r->args.output_dir && r->bench && ga.timeline && !ga.plan_only &&
        !lock_output_dir(r->args.output_dir, err, sizeof err))
        die("%s", err);
    if (r->bench || ga.plan_only) return;
    GPTConfig ckpt;
    LlamaConfig llama_ckpt;  // num_layers 0: the checkpoint is a GPT-2
    r->resume_step = open_run_dir(&r->args, r->resume_model, r->resume_state, sizeof r->resume_model, &ckpt,
                                  r->resume_header, &llama_ckpt);
    if (r->args.output_dir && !realpath(r->args.output_dir, r->ssd_owner))
        r->ssd_owner[0] = 0;  // it exists now
    if (r->resume_step < 0) return;
    if (ga.model_given) check_resume_family(r->args.model, r->args.output_dir, &ckpt, &llama_ckpt);
    r->args.model = r->resume_model;
}

// One step's tokens (a benchmark: one fixed random batch, as its peers) and each step's time.
static void alloc_step_buffers(Run* r) {
    StepTokens* b = &r->batch;
    const size_t bytes = (size_t)r->step_tokens * sizeof(int);
    b->inputs = (int*)malloc(bytes);
    b->targets = (int*)malloc(bytes);
    b->pos = r->train.kind == DL_CHAT ? (int*)malloc(bytes) : NULL;
    r->step_seconds = (double*)calloc((size_t)r->total_steps + 1, sizeof(double));
    if (!b->inputs || !b->targets || (r->train.kind == DL_CHAT && !b->pos) || !r->step_seconds)
        die("out of host memory for the token buffers");
    uint64_t rng = SYNTHETIC_SEED;
    for (int64_t i = 0; r->bench && i < r->step_tokens; i++) {
        b->inputs[i] = (int)(random_u64(&rng) % (uint64_t)r->cfg.vocab_size);  // 50257 for GPT-2's vocabulary
        b->targets[i] = (int)(random_u64(&rng) % (uint64_t)r->cfg.vocab_size);
    }
}

// The data (none in benchmark mode), the run's length, and the checks of a resumed run.
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
        if (!dataloader_check_pair(train, val, err, sizeof err)) die("%s", err);
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
    const char* dir = r->ga.ssd_dir;
    if (!dir || r->resume_step >= 0) return;
    const int64_t avail = dir_free_bytes(dir);
    if (avail < 0) die("-sd %s: %s", dir, strerror(errno));
    if (avail < r->plan.ssd_disk)
        die("-sd %s: the optimizer state needs %s on disk (two generations of the fp32 weights, m and "
            "v%s of %d streamed layers, and their gradients), the filesystem has %s free",
            dir, SizeText((double)r->plan.ssd_disk).s, r->ga.ssd_weights ? " and the bf16 weights" : "",
            r->cfg.num_layers - r->resident, SizeText((double)avail).s);
}

// The fit check, before any large allocation: host RAM first, then the GPU.
static void check_host_fit(const Run* r) {
    const double GiB = 1073741824.0;
    const GpuArgs* ga = &r->ga;
    const int64_t host_avail = host_memory_to_count_on(ga);
    if (host_avail >= 0 && r->plan.host_bytes > host_avail)
        die("host RAM too small for this config: needs %.1f GiB (fp32 weights + AdamW m, v + pinned bf16 "
            "weights and "
            "grads), %.1f GiB %s",
            r->plan.host_bytes / GiB, host_avail / GiB,
            ga->host_gib > 0
                ? "given by -M"
                : "available (MemAvailable; where memory grows as it is used, -M GiB says how much)");
}
static void check_fit(Run* r) {
    const double GiB = 1073741824.0;
    GpuArgs* ga = &r->ga;
    check_ssd_space(r);
    check_host_fit(r);
    if (r->no_gpu_here)
        die("no CUDA device found: this trainer needs an NVIDIA GPU; ./train_gpt_cpu trains on the CPU");
    // before the context exists: a host thread that waits for the GPU sleeps instead of spinning a core
    cudaCheck(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
    cudaCheck(cudaGetDeviceProperties(&r->prop, 0));
    cudaCheck(cudaSetDevice(0));
    r->peak_flops = gpu_bf16_peak_flops(r->prop.name, &r->peak_label);
    // what the cuBLAS handles and our kernels take is not free for the plan: they come first
    matmul_handles_create();
    kernels_load();
    if (use_flash_attention(&r->cfg, &r->llama))
        flash_attention_load(attention_head_size(&r->cfg, &r->llama));
    size_t gpu_free = 0, gpu_total = 0;
    cudaCheck(cudaMemGetInfo(&gpu_free, &gpu_total));
    r->gpu_free_at_start = (int64_t)gpu_free;
    r->gpu_total = (int64_t)gpu_total;
    r->gpu_budget = gpu_memory_budget(ga, r->gpu_free_at_start);
    const int vocab_host = ga->vocab_host;
    ga->vocab_host = vocab_host_for(&r->cfg, r->args.B, r->args.T, r->n_micro, ga->num_slots, ga,
                                    r->gpu_budget, &r->llama);
    r->plan = place_layers(&r->cfg, r->args.B, r->args.T, r->n_micro, ga->num_slots, ga, r->gpu_budget,
                           &r->resident, &r->kept, &r->llama);
    if (vocab_host < 0 && ga->vocab_host > 0) {  // -E -1 chose the host: its RAM must hold them too
        printf(
            "vocabulary tensors: in host RAM (-E -1: they do not fit the GPU's budget with the layers')\n");
        check_host_fit(r);
    }
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

// The model, its shape against the flags, and the memory plan (-R -1 / -K -1 count as 0 here).
static void plan_run(Run* r) {
    const TrainArgs& a = r->args;
    const GpuArgs& ga = r->ga;
    r->kind = resolve_model(a.model, &r->cfg, &r->llama);
    if (ga.vocab_host > 0 && !r->llama.num_layers)
        die("-E 1 moves the Llama family's vocabulary tensors to the host: GPT-2's stay on the GPU");
    if (!r->llama.num_layers) r->ga.vocab_host = 0;  // -E -1 decides with the GPU's budget (check_fit)
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
                              ssd_tier(&ga), &r->llama, ga.vocab_host > 0);
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
    GpuArgs* ga = &r->ga;
    ga->vocab_host = ga->gpu_gib > 0
                         ? vocab_host_for(&r->cfg, r->args.B, r->args.T, r->n_micro, ga->num_slots, ga,
                                          gpu_memory_budget(ga, INT64_MAX), &r->llama)
                         : std::max(ga->vocab_host, 0);  // -E -1 without -V: on the GPU
    r->plan = gpt_memory_plan(&r->cfg, r->args.B, r->args.T, r->n_micro, ga->num_slots, r->resident, r->kept,
                              ssd_tier(ga), &r->llama, ga->vocab_host > 0);
    if (ga->gpu_gib > 0)
        r->plan = place_layers(&r->cfg, r->args.B, r->args.T, r->n_micro, ga->num_slots, ga,
                               gpu_memory_budget(ga, INT64_MAX), &r->resident, &r->kept, &r->llama);
    print_memory_plan(&r->cfg, r->args.B, r->args.T, r->n_micro, ga->num_slots, r->resident, r->kept, ga,
                      r->plan, r->no_gpu_here, &r->llama);
    return 0;
}

// -sd: the disk's bandwidth and the disk time per step it implies; a failed probe only warns.
// Env SSD_PROBE_SECONDS and SSD_PROBE_MIB shorten the probe for tests.
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

// -sd, the Llama family: the window [lo, hi) of -e's parameters (the model file's order) into dst.
// A Hugging Face directory is read tensor by tensor: only the window's (llama_hf_load_window).
static void llama_load_window(const Run* r, float* dst, int64_t lo, int64_t hi) {
    char err[4352];
    const char* model = r->args.model;
    const int ok = llama_is_model_file(model)
                       ? llama_load_params(model, &r->llama, dst, err, sizeof err, lo, hi)
                       : llama_hf_load_window(model, &r->llama, dst, lo, hi, err, sizeof err);
    if (!ok) die("%s", err);
}

// -sd: the prefix (embeddings, layers 0..R-1) into g->master, in this trainer's order.
// From the seeded init, -e, or the checkpoint's model file (a resumed run's -e).
static void ssd_load_prefix(Run* r, GPT* g) {
    char err[4352];
    const ParamLayout* p = &g->layout;
    const int R = g->resident_layers;
    const bool init = r->kind == 1 && r->resume_step < 0;
    if (init && is_llama(g)) {
        llama_init_embeddings(&r->llama, g->master, INIT_SEED);
        for (int l = 0; l < R; l++)
            llama_init_layer(&r->llama, l, g->master + gpt_layer_offset(p, l), INIT_SEED);
    } else if (init) {
        gpt_init_embeddings(&r->cfg, g->master, INIT_SEED);
        for (int l = 0; l < R; l++) gpt_init_layer(&r->cfg, l, g->master + gpt_layer_offset(p, l), INIT_SEED);
    } else if (is_llama(g)) {  // the file is [layers | embeddings]
        llama_load_window(r, g->master, p->total - p->embed_count, p->total);
        if (R > 0) llama_load_window(r, g->master + p->embed_count, 0, (int64_t)R * p->layer_stride);
    } else if (!gpt_load_params(r->args.model, &r->cfg, g->master, err, sizeof err, 0, g->host_state_count)) {
        die("%s", err);
    }
}

// -sd, a fresh run: streamed layer l's fp32 weights, from the seeded init or -e.
static void ssd_load_layer(Run* r, const GPT* g, int l, float* layer) {
    char err[4352];
    const ParamLayout* p = &g->layout;
    const int64_t lo = (int64_t)l * p->layer_stride;  // the family's file: layer l's offset
    if (is_llama(g) && r->kind == 1) llama_init_layer(&r->llama, l, layer, INIT_SEED);
    else if (is_llama(g)) llama_load_window(r, layer, lo, lo + p->layer_stride);
    else if (r->kind == 1) gpt_init_layer(&r->cfg, l, layer, INIT_SEED);
    else if (!gpt_load_params(r->args.model, &r->cfg, layer, err, sizeof err, gpt_layer_offset(p, l),
                              gpt_layer_offset(p, l) + p->layer_stride))
        die("%s", err);
}

// -sd, either family: the store in DIR, and the weights. A fresh run writes each streamed layer into a new
// store. A resumed run opens the store at its checkpoint and reads each layer's weights back.
// The prefix goes to the host arrays either way.
static void ssd_attach(Run* r, GPT* g) {
    const double GiB = 1073741824.0;
    const char* dir = r->ga.ssd_dir;
    const GPTConfig* c = &r->cfg;
    const ParamLayout* p = &g->layout;
    const int R = g->resident_layers;
    SsdStore*& st = g->ssd->store;
    char err[4352];
    SsdStoreConfig sc = ssd_store_config(c, R, ssd_tier(&r->ga), &r->llama);
    if (sc.num_layers < 1)  // -R -1 placed every layer on the GPU
        die("-sd %s with -R %d: all %d layers fit on the GPU, no state is left to put on disk: drop -sd", dir,
            r->ga.resident, c->num_layers);
    sc.owner = r->ssd_owner;  // another run's store is neither replaced nor resumed
    const bool resume = r->resume_step >= 0;
    double verify_s = 0;
    if (resume) {
        int64_t tail[SSD_TAIL_SLOTS];
        if (!state_file_ssd_tail(r->resume_state, tail, err, sizeof err)) die("resume: %s", err);
        if (tail[SSD_TAIL_PREFIX] != g->host_state_count)
            die("resume: -R %d differs from the checkpoint's (%lld streamed layers in its SSD store, %d "
                "now): "
                "keep -R to resume with -sd",
                R, (long long)tail[SSD_TAIL_STREAMED_LAYERS], c->num_layers - R);
        const double t0 = timeline_now();
        st = ssd_store_open(dir, &sc, r->resume_step, err, sizeof err);  // reads it once: checksums
        verify_s = timeline_now() - t0;
        if (!st && strstr(err, "other checkpoint, step "))  // damaged, the older checkpoint intact
            die("resume: -sd %s: %s: to resume from that one, remove %s/DONE_%08lld", dir, err,
                r->args.output_dir, (long long)r->resume_step);
        if (!st && strstr(err, " is damaged")) die("resume: -sd %s: %s", dir, err);
        if (!st) die("resume: -sd %s: %s (resume with the run's -R and -sw)", dir, err);
    } else {
        st = ssd_store_create(dir, &sc, err, sizeof err);
        if (!st) die("-sd %s: %s", dir, err);
    }
    ssd_set_fault_from_env(st);
    ssd_load_prefix(r, g);
    // the streamed layers, one at a time through one buffer
    float* layer = (float*)malloc((size_t)p->layer_stride * 4);
    if (!layer) die("out of host memory for one layer");
    for (int l = R; l < c->num_layers; l++) {
        int rc = 0;
        if (resume) rc = ssd_store_read_layer(st, l - R, layer, NULL, NULL, NULL, err, sizeof err);
        else {
            ssd_load_layer(r, g, l, layer);
            rc = ssd_store_write_layer(st, l - R, layer, NULL, NULL, err, sizeof err);  // zero m, v
        }
        if (rc != 0) die("-sd %s: %s", dir, err);
        if (g->ssd->weights_on_disk) continue;  // the store wrote their bf16 copy (-sw 1)
        uint16_t* bf16 = g->stream.weights_host_bf16 + gpt_layer_offset(p, l);
        FAKE_CUDA_HOST_ACCESS(bf16, p->layer_stride * 2, true, "the host writing the bf16 copy (load)");
        convert_f32_to_bf16(layer, bf16, p->layer_stride);
    }
    free(layer);
    if (r->ga.timeline) ssd_io_log_busy(ssd_store_io(st), 1);  // the timeline's disk tracks
    ssd_tier_start_writer(g);
    char how[96] = "created";
    if (resume)
        snprintf(how, sizeof how, "resumed at its checkpoint, its checksums verified in %.1f s", verify_s);
    printf("SSD tier: %d layers' fp32 weights and AdamW m, v%s in %s (%.2f GiB on disk, %s; %s)\n",
           sc.num_layers, g->ssd->weights_on_disk ? " and bf16 weights" : "", dir, r->plan.ssd_disk / GiB,
           ssd_io_backend(ssd_store_io(st)), how);
}

// The Llama family's weights into g->master: the seeded init, a model file or a Hugging Face checkpoint,
// each in the model file's order, then rotated into this trainer's (llama_trainer_order).
static void load_llama_weights(Run* r, GPT* g) {
    char err[4352];
    const char* model = r->args.model;
    if (r->kind == 1) llama_init_params(&r->llama, g->master, INIT_SEED);
    else if (llama_is_model_file(model)) {
        if (!llama_load_params(model, &r->llama, g->master, err, sizeof err)) die("%s", err);
    } else {  // llama_hf_load reads into a CPU model: 4 more bytes a parameter for a moment (grads untouched)
        LlamaCPU hf;
        if (!llama_hf_load(model, &hf)) die("%s", hf.error);
        if (memcmp(&hf.config, &r->llama, sizeof r->llama) != 0)
            die("%s: its config changed while the trainer read it", model);
        memcpy(g->master, hf.params, (size_t)g->layout.total * 4);
        llama_cpu_free(&hf);
    }
    llama_trainer_order(&g->layout, g->master);
}

// Builds the model and fills its weights; with -y 1 also its AdamW state and data position.
static void build_model(Run* r, GPT* g) {
    char err[4352];
    // the CPU AdamW's threads: every usable core but one for each thread that runs beside them
    const int cores = usable_cpu_cores(), beside = adam_threads_beside(r->ga.ssd_dir != NULL);
    r->adam_threads = r->ga.adam_threads > 0 ? r->ga.adam_threads : std::max(1, cores - beside);
    cpu_adam_set_threads(r->adam_threads);
    if (r->ga.ssd_dir) {  // the probe first: its buffers are gone before the model's arrive
        if (mkdir(r->ga.ssd_dir, 0755) != 0 && errno != EEXIST)
            die("-sd %s: cannot create it: %s", r->ga.ssd_dir, strerror(errno));
        if (ssd_lock_dir(r->ga.ssd_dir, err, sizeof err) < 0) die("-sd: %s", err);  // held until exit
        ssd_print_bandwidth(r);
    }
    gpt_build(g, &r->cfg, r->args.B, r->args.T, r->n_micro, r->ga.num_slots, r->resident, r->kept, &r->args,
              ssd_tier(&r->ga), &r->llama, r->ga.vocab_host > 0);
    if (r->ga.ssd_dir) ssd_attach(r, g);  // either family, one layer at a time
    else if (r->llama.num_layers) load_llama_weights(r, g);
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
    g->checkpoint_step = g->step;
    printf("resumed from %s (step %d)\n", r->resume_model, r->start_step);
}

// The tokenizer for samples (without it they print as token ids), and DIR/main.log (none in benchmark mode).
// Samples decode with a Llama-family checkpoint's tokenizer.json, GPT-2's tokenizer for GPT-2's vocabulary,
// else print ids (as train_gpt_cpu).
static void open_tokenizer(Run* r) {
    char err[4352];
    const bool llama = r->llama.num_layers > 0;
    const std::string json = std::string(r->args.model) + "/tokenizer.json";
    if (llama && is_dir(r->args.model) && file_exists(json)) {
        if (!tokenizer_init_hf(&r->tok, json.c_str(), err, sizeof err)) fprintf(stderr, "warning: %s\n", err);
        else if ((int64_t)r->tok.vocab_size > r->cfg.vocab_size) {
            fprintf(stderr, "warning: %s has %u tokens, the model %d: samples are printed as token ids\n",
                    json.c_str(), r->tok.vocab_size, r->cfg.vocab_size);
            tokenizer_free(&r->tok);
        }
    } else if (!llama || r->cfg.vocab_size == 50257) {
        if (!tokenizer_init(&r->tok, kTokenizerPath, err, sizeof err))
            fprintf(stderr, "warning: %s; samples are printed as token ids\n", err);
    }
}

static void open_tokenizer_and_log(Run* r) {
    char err[4352];
    memset(&r->tok, 0, sizeof r->tok);
    if (!r->bench) open_tokenizer(r);
    if (!logger_open(&r->logger, r->bench ? NULL : r->args.output_dir, r->resume_step, err, sizeof err))
        die("%s", err);
    r->sample_rng = SAMPLE_SEED;
    const int64_t params = model_layout(&r->cfg, &r->llama).total;
    r->sample_tokens = gpu_sample_tokens(&r->args, &r->ga, params);
    if (!r->bench && r->sample_tokens == 0 && sample_tokens(&r->args) > 0)
        printf(
            "samples off by default (%.1fB parameters%s: each token streams the model once); -g N asks for "
            "them\n",
            params / 1e9, ssd_tier(&r->ga) == TIER_SSD_WEIGHTS ? ", weights on disk" : "");
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
              r->kind == 1 && r->llama.num_layers ? "spec, Llama init"
              : r->kind == 1                      ? "spec, GPT-2 init"
              : hf_is_checkpoint(args.model)      ? "Hugging Face checkpoint"
              : r->llama.num_layers               ? "Llama-family model file"
                                                  : "llm.c model file");
    if (r->llama.num_layers)
        table_row("Llama family", "KV %d / hd %d / I %d / rope theta %g%s / %s / %s", r->llama.num_kv_heads,
                  r->llama.head_dim, r->llama.intermediate_size, r->llama.rope_theta,
                  r->llama.rope_llama3 ? " llama3-scaled" : "",
                  r->llama.qkv_bias ? "q/k/v biases" : "no biases",
                  r->llama.tied_embeddings ? "tied lm_head" : "untied lm_head");
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
        table_row(r->ga.ssd_weights ? "SSD tier (-sd -sw 1)" : "SSD tier (-sd)",
                  "%s: %.2f GiB on disk, %.3f GiB ring; per step %.2f GB read, %.2f GB written",
                  r->ga.ssd_dir, plan.ssd_disk / GiB, plan.ssd_ring / GiB, plan.ssd_read_per_step / 1e9,
                  plan.ssd_write_per_step / 1e9);
    table_row("GPU memory", "%.2f GiB (checkpoints %.2f, %d weight slots %.3f)", g->gpu_bytes / GiB,
              plan.layer_inputs / GiB, r->ga.num_slots, plan.slots / GiB);
    if (g->vocab)
        table_row("vocabulary tensors", "host RAM, CPU AdamW; the head in chunks of %lld rows (-E 1)",
                  (long long)g->vocab->rows);
    else if (r->llama.num_layers) table_row("vocabulary tensors", "GPU, with their AdamW state (-E 0)");
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

// The end of a run: bytes streamed, peak memory, the median step, RESULT, and -Y 1's advice.
static void print_run_summary(const Run* r, GPT* g) {
    const double GiB = 1073741824.0;
    printf(
        "streamed over the run: %.2f GB host->GPU (%lld layer copies, %lld layers reused from the previous "
        "pass), "
        "%.2f GB GPU->host; last CPU AdamW round %.3f s\n",
        g->stream.bytes_h2d / 1e9, (long long)g->stream.layer_copies, (long long)g->stream.layer_reuses,
        g->stream.bytes_d2h / 1e9, g->opt->last_round_seconds);
    if (g->ssd && g->ssd->weights_on_disk)
        printf("bf16 weights read from the SSD tier over the run (-sw 1): %lld layers, %.2f GB\n",
               (long long)g->stream.reads.count, g->stream.reads.count * g->layout.layer_stride * 2 / 1e9);
    size_t gpu_free = 0,
           gpu_total = 0;  // every GPU buffer exists before the first step: the use now is the peak
    cudaCheck(cudaMemGetInfo(&gpu_free, &gpu_total));
    printf(
        "peak host memory: %.3f GiB resident; GPU memory: %.2f GiB allocated by this run (%.2f GiB in use on "
        "the device of %.2f)\n",
        peak_rss_bytes() / GiB, g->gpu_bytes / GiB, (gpu_total - gpu_free) / GiB, gpu_total / GiB);
    const int first_timed = r->bench ? r->ga.bench_warmup : r->start_step + 1;  // the first is warm-up
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
// Chat data: "| targets N" (the tokens the loss is the mean over); a step without any has no loss.
static void print_step_line(const Run* r, const GPT* g, int step, const StepResult* res, float lr, double dt,
                            double elapsed) {
    char mfu[32] = "MFU n/a", progress[64], targets[48] = "";
    if (r->peak_flops > 0)
        snprintf(mfu, sizeof mfu, "MFU %.1f%%", 100.0 * step_flops(g, r->step_tokens) / dt / r->peak_flops);
    progress_text(elapsed, step + 1, r->start_step, r->total_steps, progress, sizeof progress);
    if (r->batch.pos) snprintf(targets, sizeof targets, " | targets %lld", (long long)res->targets);
    if (res->targets == 0) {
        fprintf(stderr, "warning: step %d: no target tokens in its %d micro-batches: nothing to learn\n",
                step + 1, r->n_micro);
        printf("step %4d/%d | loss - | lr %.2e | ms %.1f%s | update skipped: %s\n", step + 1, r->total_steps,
               lr, dt * 1e3, targets, g->skipped);
        return;
    }
    printf("step %4d/%d | loss %.6f | norm %.4f | lr %.2e | ms %.1f | tok/s %.0f%s | %s%s%s%s\n", step + 1,
           r->total_steps, res->loss, g->last_norm, lr, dt * 1e3, r->step_tokens / dt, targets, mfu, progress,
           g->skipped[0] ? " | update skipped: " : "", g->skipped);
}

// Validation (every -v steps and at the end) and a sample (every -s steps and at the end).
static void evaluate(Run* r, GPT* g, int step) {
    const TrainArgs& a = r->args;
    const bool last = step == r->total_steps;
    const bool val_now = !r->bench && a.val_every > 0 && (step % a.val_every == 0 || last);
    const bool sample_now = !r->bench && r->sample_tokens > 0 &&
                            ((a.sample_every > 0 && step > 0 && step % a.sample_every == 0) || last);
    if (val_now) {
        const float vl = validation_loss(g, &r->val, r->val_batches, &r->batch);
        printf("val loss %.6f\n", vl);
        logger_val(&r->logger, step, vl);
    }
    if (sample_now) gpt_sample(g, &r->tok, r->sample_tokens, &r->sample_rng);
}

// The next step's micro-batches (-a 1: the same first ones every step).
static void load_step_batches(Run* r) {
    if (r->args.overfit_single_batch) dataloader_reset(&r->train);
    for (int mb = 0; mb < r->n_micro; mb++) fetch_batch(&r->train, r->cfg.vocab_size, "train", &r->batch, mb);
}

static void save_run_checkpoint(Run* r, GPT* g) {
    DataLoaderState data_state = dataloader_get_state(&r->train);
    save_checkpoint(g, r->args.output_dir, &data_state);
    g->checkpoint_step = g->step;
}

static void free_run(Run* r, GPT* g) {
    free(r->batch.inputs);
    free(r->batch.targets);
    free(r->batch.pos);
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
    for (int step = r.start_step; step <= r.total_steps; step++) {
        stop_if_asked(step);  // a signal during validation or sampling
        evaluate(&r, &g, step);
        if (step == r.total_steps) break;

        const double step_start = timeline_now();  // the step's time runs to its end below
        if (!r.bench) load_step_batches(&r);
        const float lr = learning_rate_at(&args, step, r.total_steps);
        const StepResult res = gpt_step(&g, r.batch.inputs, r.batch.targets, r.n_micro, lr, r.batch.pos);
        const bool ran = res.targets > 0;  // chat data: a step without targets runs nothing
        if (g.timeline && ran) r.last_timeline = timeline_summarize(g.timeline);  // waits for the GPU
        const double step_end = timeline_now(), dt = step_end - step_start;
        if (res.diverged[0]) die_diverged(step + 1, res.loss, res.norm, res.diverged, saved_step);
        r.step_seconds[step] = dt;
        print_step_line(&r, &g, step, &res, lr, dt, step_end - run_t0);
        if (step == r.start_step) print_gpu_margin(&r, &g, step);
        if (g.timeline && ran) print_timeline(&g, r.last_timeline, args.output_dir);
        fflush(stdout);
        if (ran) logger_train(&r.logger, step + 1, res.loss, lr, (float)res.norm);
        const bool last = step + 1 == r.total_steps;
        const int every = args.checkpoint_every;
        if (!r.bench && every > 0 && ((step + 1) % every == 0 || last)) {
            save_run_checkpoint(&r, &g);
            saved_step = step + 1;
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
