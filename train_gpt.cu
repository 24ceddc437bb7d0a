// train_gpt.cu — trains GPT-2 or Llama far larger than GPU memory on ONE GPU.

// Where the model lives:
//   host RAM: fp32 master weights, AdamW m, v, pinned bf16 weights and gradients (stream.cu)
//   GPU: a ring of weight slots, layer inputs per micro-batch, one layer's activations,
//        the embeddings with AdamW state (-E 1: host), and with -R the first R layers

// One step, numbered as in gpt_forward_backward and gpt_update:
//   1. tokens and embeddings
//   2. forward: each layer's weights arrive once and serve every micro-batch
//   3. loss: final LayerNorm, tied lm_head, cross-entropy, and their backward
//   4. backward, last layer first: recompute from the layer input, send gradients out
//   5. the one synchronization: loss and gradient norm
//   6. AdamW on a CPU thread, layer by layer, during the next step's forward

// Llama 3 and Qwen2 (llmc/llama_model.h) take the same step.
// is_llama hands layers, head and embeddings to llmc/llama_layers.cuh.

// Parts: model data (llmc/gpt.cuh), its allocation (llmc/gpt_build.cuh), checkpoints
// (llmc/gpt_checkpoint.cuh), CPU AdamW thread (llmc/cpu_optimizer.h), memory plan (llmc/memory_plan.cuh),
// flags (llmc/gpu_args.h), set-up (llmc/run_setup.cuh).
// Not here: kernels (llmc/kernels.cuh), GEMMs (llmc/matmul.cuh), copies (stream.cu),
// AdamW's math (llmc/adamw.h, for both its CPU form in cpu_adam.cpp and its GPU form).

// -sd DIR keeps the optimizer state on SSD: llmc/ssd_tier.h, docs/ssd.md.
#include <algorithm>
#include <vector>
#include <unistd.h>
#include "llmc/adamw.h"  // defines: AdamWArgs, adamw_tensors, clip_scale, ADAMW_BETA1, ADAMW_EPS
// defines: Comm, comm_reduce_scatter, comm_all_reduce, comm_sum_host, node_shared_alloc, node_barrier
#include "llmc/collectives.h"
#include "llmc/args.h"  // defines: TrainArgs, train_args_defaults, train_usage, parse_train_arg, help_flag
#include "llmc/checkpoint.h"   // defines: checkpoint_save, open_run_dir, check_resume_args, state_file_read
#include "llmc/cpu_adam.h"     // defines: cpu_adam_set_threads, convert_f32_to_bf16, bf16_to_float
#include "llmc/cpu_cores.h"    // defines: usable_cpu_cores, omp_short_spin_reexec
#include "llmc/cuda_common.h"  // defines: cudaCheck, cublasCheck, bf16
#include "dataloader.h"        // defines: DataLoader, dataloader_open_pair, _next_batch
// defines: layernorm_forward, gelu_forward, fused_classifier, adamw_gpu, kernels_load
#include "llmc/kernels.cuh"
#include "llmc/logger.h"        // defines: TrainLogger, logger_open, logger_train, logger_val, logger_eval
#include "llmc/hf_tokenizer.h"  // defines: tokenizer_init_hf (a Llama-family checkpoint's samples)
#include "llmc/llama_hf.h"      // defines: llama_hf_read_config, llama_hf_load_window (Hugging Face Llamas)
#include "llmc/model_file.h"  // defines: GPTConfig, ParamLayout, gpt_layout, gpt_init_params, gpt_load_params
#include "llmc/model_specs.h"  // defines: parse_model_spec, warn_if_spec_shadows_path
#include "llmc/outliers.h"     // defines: OutlierWindow, outlier_skip, training_diverged, die_diverged
#include "llmc/run_dir.h"      // defines: lock_output_dir
#include "llmc/sampler.h"      // defines: random_u64, random_f32, sample_softmax, print_sample_token
#include "llmc/schedulers.h"   // defines: learning_rate_at
#include "llmc/ssd.h"          // defines: SsdStore, ssd_store_round, ssd_store_checkpoint, ssd_plan (-sd)
#include "llmc/stop_signal.h"  // defines: stop_signal_install, stop_if_signalled
#include "llmc/stream.h"  // defines: WeightStream, stream_wait_layer, stream_release_layer, pinned_alloc_direct_io
#include "llmc/timeline.h"   // defines: Timeline, timeline_begin, timeline_end, timeline_summarize (-Y 1)
#include "llmc/tokenizer.h"  // defines: Tokenizer, tokenizer_init
#include "llmc/utils.h"      // defines: die, SizeText, table_row, table_rule, progress_text, peak_rss_bytes

#include "llmc/matmul.cuh"          // defines: matmul_forward, lt_matmul, matmul_handles_create
#include "llmc/attention_path.cuh"  // defines: attention_forward_path, _backward_path, attention_path_select
#include "llmc/ragged.h"            // defines: positions_valid, ragged_sequences
#include "llmc/gpt.cuh"             // defines: struct GPT, LayerActs, LayerWeights, layer_params, layer_input
#include "llmc/llama_layers.cuh"  // defines: llama_layer_forward, _backward, llama_head_forward, llama_embedding_*
#include "llmc/vocab_host.cuh"  // defines: HostVocab, vocab_head_forward, _backward, vocab_embedding_* (-E 1)
#include "llmc/ssd_tier.h"      // defines: ssd_tier_new, ssd_tier_begin_backward, ssd_tier_checkpoint (-sd)
#include "llmc/cpu_optimizer.h"     // defines: optimizer_submit, optimizer_layer_ready, send_layer_grads
#include "llmc/memory_plan.cuh"     // defines: MemoryPlan, gpt_memory_plan, place_layers, print_memory_plan
#include "llmc/race_check.cuh"      // defines: gpt_track_buffers, race_check_begin, _end (emulated builds)
#include "llmc/gpt_build.cuh"       // defines: gpt_build, gpt_free, gpt_weights_ready, host_alloc_floats
#include "llmc/gpt_checkpoint.cuh"  // defines: save_checkpoint, load_state, gather_node_state

// ----------------------------------------------------------------------------
// Layer forward, as gpt2_cpu_forward. What the backward reads stays in a.
// out NULL: a recompute, skipping the last GEMM. pos: chat positions or NULL.

static void layer_forward(GPT* g, const bf16* weights, const bf16* x, bf16* out, LayerActs* a, const int* pos,
                          cudaStream_t s) {
    if (is_llama(g)) return llama_layer_forward(g, weights, x, out, a, pos, s);  // the Llama family's layer
    const int B = g->B, T = g->T, C = g->config.channels, NH = g->config.num_heads;
    const int64_t N = (int64_t)B * T;
    const LayerWeights w = layer_params(&g->layout, weights);
    bf16* res2 = a->residual2;
    layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, w.ln1w, w.ln1b, N, C, s);
    matmul_forward_bias(a->qkv, a->ln1, w.qkvw, w.qkvb, NULL, N, C, 3 * C, s);
    attention_forward_path(g->attn_path, a->atty, a->att_lse, a->att, a->qkv, B, T, NH, NH, C / NH, pos,
                           attn_micro_of(g, pos), s);
    matmul_forward_bias(res2, a->atty, w.attprojw, w.attprojb, x, N, C, C, s);  // projection + layer input
    layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, res2, w.ln2w, w.ln2b, N, C, s);
    matmul_forward_bias_gelu(a->fch, a->fch_gelu, a->ln2, w.fcw, w.fcb, N, C, 4 * C, s);
    if (out) matmul_forward_bias(out, a->fch_gelu, w.fcprojw, w.fcprojb, res2, N, 4 * C, C, s);  // + res2
}

// A kept layer (-K) redoes only LayerNorms and GELU: three memory-bound passes, no GEMMs.
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
// Layer backward, as gpt2_cpu_backward. dres: output gradient in, input gradient out.
// Gradients are ADDED to grads.

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
    attention_backward_path(g->attn_path, a->dqkv, a->att_dsum, a->datt, a->dln, a->atty, a->att, a->qkv,
                            a->att_lse, B, T, NH, NH, C / NH, pos, attn_micro_of(g, pos), s);
    matmul_backward_weight(dw.qkvw, a->dqkv, a->ln1, N, C, 3 * C, s);
    bias_backward(dw.qkvb, a->dqkv, N, 3 * C, s);
    matmul_backward_input(a->dln, a->dqkv, w.qkvw, N, C, 3 * C, s);
    layernorm_backward(dres, dw.ln1w, dw.ln1b, a->dln, x, w.ln1w, a->ln1_mean, a->ln1_rstd, N, C, s);
}

// ----------------------------------------------------------------------------
// Final LayerNorm, tied lm_head, loss. Backward adds to wte, lnf grads, overwrites dres.

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

// AdamW of the GPU-resident prefix, per tensor. Decay on matrices only.
static void resident_adamw(GPT* g, const AdamWArgs& args, cudaStream_t s) {
    const ParamLayout* p = &g->layout;
    auto gpu_form = [g, s](int64_t base) {  // adamw.h's update for the tensors from `base`
        return [g, s, base](int64_t o, int64_t n, const AdamWArgs* a) {
            o += base;
            float *master = g->resident_master + o, *grads = g->resident_grads + o;
            adamw_gpu(master, grads, g->resident_m + o, g->resident_v + o, g->resident + o, n, a, s);
        };
    };
    if (!g->vocab)  // -E 1: the CPU's (vocab_adamw)
        adamw_tensors(NUM_EMBED_TENSORS, p->embed_offset, p->embed_size, embed_is_matrix(g), &args,
                      gpu_form(0));
    for (int l = 0; l < g->resident_layers; l++) {
        const int64_t base = gpt_layer_offset(p, l) - g->resident_start;
        adamw_tensors(NUM_LAYER_TENSORS, p->layer_offset, p->layer_size, layer_is_matrix(g), &args,
                      gpu_form(base));
    }
}

// ----------------------------------------------------------------------------
// The training step: forward (layer-outer), loss, backward with recompute, update.

// Layer l's weights: resident, or the stream slot it waits for.
static const bf16* layer_acquire(GPT* g, int l) {
    progress_tick();  // several ranks: the run moves on (llmc/progress_watch.h)
    return l < g->resident_layers ? resident_layer(g, l) : stream_wait_layer(&g->stream, l);
}
// Kernels reading layer l are queued: its slot may be reused once they ran.
static void layer_release(GPT* g, int l) {
    if (l >= g->resident_layers) stream_release_layer(&g->stream, l);
}

// Micro-batch mb's chat positions on the GPU, or NULL (position t).
static const int* positions(const GPT* g, int mb) {
    return g->packed ? g->tokens_pos + mb * (int64_t)g->B * g->T : NULL;
}

// Layer l's activations for mb before backward: kept, left over or recomputed.
static void restore_activations(GPT* g, const bf16* w, int l, int mb, int n_micro, cudaStream_t s) {
    LayerActs* a = layer_acts(g, l, mb);
    const bool last_forward = l == g->config.num_layers - 1 && mb == n_micro - 1;  // still in g->acts
    if (layer_kept(g, l)) layer_redo_cheap_part(g, w, layer_input(g, l, mb), a, s);
    else if (!last_forward) layer_forward(g, w, layer_input(g, l, mb), NULL, a, positions(g, mb), s);
}

// Layer l's gradient buffer: the streamed one, or its place in resident_grads.
static float* layer_grads_begin(GPT* g, int l, cudaStream_t s) {
    if (l < g->resident_layers)
        return g->resident_grads + gpt_layer_offset(&g->layout, l) - g->resident_start;
    cudaCheck(cudaMemsetAsync(g->layer_grads, 0, (size_t)(layer_grads_floats(g) * 4), s));
    return g->layer_grads;
}
// Streamed gradients to bf16 staging for the host. Squares add to the norm.
// Several ranks: summed over them, and each converts and sends its own slice [grad_lo, grad_hi).
static void layer_grads_end(GPT* g, int l, cudaStream_t s) {
    if (l < g->resident_layers) return;
    comm_reduce_scatter(g->comm, g->layer_grads, g->layout.layer_stride, s);
    const int64_t lo = g->stream.grad_lo, n = g->stream.grad_hi - lo;
    bf16* staging = stream_grad_staging(&g->stream);
    if (n > 0) grads_to_bf16_sumsq(staging + lo, g->layer_grads + lo, n, g->sumsq_dev, s);
}

// cuDNN path, chat data: each micro-batch's conversations as ragged sequences (ragged.h), via pinned staging.
// A micro-batch whose positions are not runs 0, 1, 2, ..., or whose bucket's graphs cannot be built, runs
// our fused kernel (said once).
static void attention_ragged_to_device(GPT* g, const int* pos, int n, cudaStream_t s) {
    const int64_t N = (int64_t)g->B * g->T, each = ragged_meta_ints(N);
    const int NH = is_llama(g) ? g->llama.num_heads : g->config.num_heads;
    const int hs = is_llama(g) ? g->llama.head_dim : g->config.channels / NH;
    const int NKV = is_llama(g) ? g->llama.num_kv_heads : NH;
    const int64_t ld = (int64_t)(NH + 2 * NKV) * hs, od = (int64_t)NH * hs;
    static bool said = false;
    FAKE_CUDA_HOST_ACCESS(g->attn_meta_host, n * each * 4, true, "the ragged metadata's staging");
    for (int mb = 0; mb < n; mb++) {
        const RaggedMeta r = ragged_meta_at(g->attn_meta_host + mb * each, N);
        int bucket = 0;
        const int count = ragged_sequences(pos + mb * N, g->B, g->T, ld, od, NH, r, (int)N, &bucket);
        char why[512] = "the positions are not runs of 0, 1, 2, ...";
        const CudnnAttShape shape = {g->B, g->T, NH, NKV, hs, bucket};
        const bool ok = count > 0 && cudnn_att_prepare(&shape, why, sizeof why);
        g->attn_micro[mb].seqs = ok ? bucket : -1;
        g->attn_ragged[ok ? 0 : 1]++;
        if (!ok && !said) {
            fprintf(stderr, "attention: a chat micro-batch runs %s, not cuDNN: %s\n",
                    flash_attention_usable(hs) ? "our fused kernel" : "cuBLAS + softmax", why);
            said = true;
        }
    }
    cudaCheck(
        cudaMemcpyAsync(g->attn_meta, g->attn_meta_host, (size_t)(n * each * 4), cudaMemcpyHostToDevice, s));
}

// n micro-batches of tokens to the GPU via pinned staging. targets, pos may be NULL.
static void tokens_to_device(GPT* g, const int* inputs, const int* targets, const int* pos, int n,
                             cudaStream_t s) {
    const int64_t count = (int64_t)n * g->B * g->T, stride = (int64_t)g->max_micro * g->B * g->T;
    int* staged[3] = {g->tokens_host, g->tokens_host + stride, g->tokens_host + 2 * stride};
    const int* from[3] = {inputs, targets, pos};
    int* to[3] = {g->tokens_in, g->tokens_out, g->tokens_pos};
    g->packed = pos != NULL;
    char why[160];
    if (pos && !positions_valid(pos, (int64_t)n * g->B, g->T, why, sizeof why))
        die("chat positions: %s", why);
    if (pos && g->attn_path == ATTN_CUDNN) attention_ragged_to_device(g, pos, n, s);
    for (int k = 0; k < 3; k++) {
        if (!from[k]) continue;
        FAKE_CUDA_HOST_ACCESS(staged[k], count * 4, true, "the host staging tokens");
        memcpy(staged[k], from[k], (size_t)count * 4);
        cudaCheck(cudaMemcpyAsync(to[k], staged[k], (size_t)count * 4, cudaMemcpyHostToDevice, s));
    }
}

// Tokens to the GPU, then each micro-batch's embeddings: layer 0's input.
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

// Each micro-batch's loss and head backward. Loss: the mean over the step's targets.
static void head_forward_backward(GPT* g, int n_micro, int64_t num_targets, cudaStream_t s) {
    const int L = g->config.num_layers;
    const int64_t N = (int64_t)g->B * g->T;
    const size_t grad_bytes = (size_t)(g->resident_count - g->resident_start) * 4;
    if (grad_bytes) cudaCheck(cudaMemsetAsync(g->resident_grads, 0, grad_bytes, s));  // they start here
    cudaCheck(cudaMemsetAsync(g->sumsq_dev, 0, 8, s));
    ScopedSpan span(g->timeline, TRACK_COMPUTE, "head", -1, s);
    const float dloss = g->packed ? 1.0f / (float)num_targets  // each target's share, over every rank's
                                  : 1.0f / (float)(N * n_micro * g->comm->world);
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

// Embeddings backward, then the resident prefix's squared norm. Its gradients stay on the GPU.
static void embeddings_backward(GPT* g, int n_micro, cudaStream_t s) {
    const ParamLayout* p = &g->layout;
    const int64_t N = (int64_t)g->B * g->T;
    ScopedSpan span(g->timeline, TRACK_COMPUTE, "embed bwd", -1, s);
    if (g->vocab)
        vocab_embedding_backward(g, g->tokens_host, g->tokens_in, n_micro, s);  // the inputs' staging
    for (int mb = 0; mb < n_micro && !g->vocab; mb++)
        if (is_llama(g)) llama_embedding_backward(g, dresid_at(g, mb), g->tokens_in + mb * N, s);
        else
            embedding_backward(g->resident_grads + p->embed_offset[WTE],
                               g->resident_grads + p->embed_offset[WPE], dresid_at(g, mb),
                               g->tokens_in + mb * N, N, g->T, g->config.channels, s, positions(g, mb));
    const int64_t n = g->resident_count - g->resident_start;
    comm_all_reduce(g->comm, g->resident_grads, n, s);  // every rank updates the prefix alike
    if (n && g->comm->rank == 0) grads_to_bf16_sumsq(NULL, g->resident_grads, n, g->sumsq_dev, s);
}

// Waits for stream s: returns the mean loss, sets g->last_norm.
static float read_loss_and_norm(GPT* g, cudaStream_t s) {
    cudaCheck(cudaMemcpyAsync(g->loss_host, g->loss_dev, 4, cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaMemcpyAsync(g->sumsq_host, g->sumsq_dev, 8, cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
    // several ranks: the sum of their squares; their losses' sum (chat: scaled by the step's targets)
    // -E 1: the host's part of the squares too (several ranks: each rank's part of it)
    double sums[2] = {*g->loss_host * (g->packed ? 1.0 : 1.0 / g->comm->world),
                      *g->sumsq_host + (g->vocab ? g->vocab->sumsq : 0.0)};
    comm_sum_host(g->comm, sums, 2);
    g->last_norm = sqrt(sums[1]);
    return g->comm->world > 1 ? (float)sums[0] : *g->loss_host;
}

// One step's forward and backward: the mean loss, and g->last_norm. No update.
static float gpt_forward_backward(GPT* g, const int* inputs, const int* targets, const int* pos, int n_micro,
                                  int64_t num_targets) {
    const int L = g->config.num_layers, R = g->resident_layers;
    cudaStream_t s = g->stream.compute;
    Timeline* tl = g->timeline;
    if (n_micro < 1 || n_micro > g->max_micro) die("internal: %d micro-batches", n_micro);

    // 1. tokens and embeddings (resident weights are current: GPU AdamW ran on this stream)
    embeddings_forward(g, inputs, targets, pos, n_micro, s);

    // 2. forward: each layer's weights arrive once, for every micro-batch
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

    // 4. backward, last layer and micro-batch first. Streamed gradients go to the host.
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

    // 5. the step's one synchronization: loss and global norm
    return read_loss_and_norm(g, s);
}

// 6. AdamW: streamed layers on the CPU thread, the resident prefix on the GPU.
static void gpt_update(GPT* g, float lr) {
    const float grad_scale = clip_scale((float)g->last_norm, g->args.grad_clip);
    // first: -sw 1's weight reads end before the round rewrites them
    stream_invalidate(&g->stream);
    optimizer_submit(g, lr, grad_scale);
    const AdamWArgs args = {lr,         ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS, g->args.weight_decay,
                            grad_scale, g->adam_t};
    if (g->vocab) vocab_adamw(g, &args, g->stream.compute);  // the table on its thread (-E 1)
    ScopedSpan span(g->timeline, TRACK_COMPUTE, "resident adamw", -1, g->stream.compute);
    resident_adamw(g, args, g->stream.compute);
}

// -Y 1: last step's CPU AdamW ran during this forward. Add it to this timeline.
static void timeline_add_adamw_round(GPT* g) {
    optimizer_wait_all(g);  // the forward waited for every layer (-sw 1: perhaps not the round's last writes)
    if (g->opt->rounds_done == 0 || g->skipped[0]) return;
    const Optimizer* o = g->opt;
    for (int l = g->resident_layers; l < g->config.num_layers; l++)
        timeline_host_span(g->timeline, TRACK_ADAM, "adamw", l, o->layer_t0[l], o->layer_t1[l]);
}

// One step's loss, norm, and whether it diverged or skipped the update.
typedef struct {
    float loss;
    double norm;
    int64_t targets;    // tokens the loss averages over. Chat: 0 skips the step
    char diverged[96];  // why the run must stop before this update, or ""
    bool skipped;       // -sl / -sg, or no targets: no update (g->skipped says why)
} StepResult;

// Targets that are not -1 among n.
static int64_t count_targets(const int* targets, int64_t n) {
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) count += targets[i] >= 0;
    return count;
}

// One training step, as llm.c's: forward and backward, then the update.
// None when it diverged, -sl / -sg skip it, or chat data has no target.
static StepResult gpt_step(GPT* g, const int* inputs, const int* targets, int n_micro, float lr,
                           const int* pos = NULL) {
    StepResult r = {};
    const int64_t tokens = (int64_t)n_micro * g->B * g->T;
    double targets_all = (double)(pos ? count_targets(targets, tokens) : tokens * g->comm->world);
    if (pos) comm_sum_host(g->comm, &targets_all, 1);  // several ranks: the step's targets, every rank's
    r.targets = (int64_t)targets_all;
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
    if (!r.skipped) gpt_update(g, lr);  // skipped: weights, slots and AdamW state stay as they were
    return r;
}

// Forward only, n <= max_micro batches per walk of the layers.
// With targets: each batch's mean loss and count. Without: the last batch's logits in g->acts.
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
// One batch's mean loss. targets NULL: 0, logits in the workspace.
static float gpt_forward_eval(GPT* g, const int* inputs, const int* targets, const int* pos = NULL) {
    float loss = 0.0f;
    gpt_forward_eval_batches(g, inputs, targets, 1, &loss, pos);
    return loss;
}

// Position (b, t)'s Vp logits to host floats.
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
// Sampling from <|endoftext|>, or a chat run's prompt: each token, a full forward streaming the model once.

static void gpt_sample(GPT* g, const Tokenizer* tok, int gen_tokens, uint64_t* rng, const int* prompt,
                       int prompt_len) {
    const int64_t N = (int64_t)g->B * g->T;
    const int V = g->config.vocab_size, want = tok->init_ok ? tok->eot_token : 50256;  // -1: none
    const int eot = want < 0 ? 0 : want < V ? want : V - 1;
    int* tokens = (int*)malloc(sizeof(int) * N);
    float* logits = (float*)malloc(sizeof(float) * g->config.padded_vocab_size);
    for (int64_t i = 0; i < N; i++) tokens[i] = eot;
    const int first = prompt_len > 0 ? prompt_len : 1;  // row 0 holds the prompt, then the sample
    if (prompt_len > 0) {
        memcpy(tokens, prompt, sizeof(int) * prompt_len);
        print_sample_prompt(tok, prompt, prompt_len);
    }
    printf("generating:\n---\n");
    for (int t = first; t < first + gen_tokens && t < g->T; t++) {
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

// Model FLOPs per step, as PyTorch peers count: 6 * params * tokens + causal attention, no recompute.
static double step_flops(const GPT* g, int64_t tokens) {
    const GPTConfig* c = &g->config;
    const double width = is_llama(g) ? (double)g->llama.num_heads * g->llama.head_dim : c->channels;
    return 6.0 * (double)g->layout.total * tokens + 6.0 * c->num_layers * width * g->T * tokens;
}

// MFU denominator: dense bf16 peak by a word of the GPU name (docs/memory.md). 0: unknown.
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
// main: flags, fit check, config table, training loop (-B: benchmark loop).

#ifndef TESTING

#include "llmc/rank_launch.h"    // defines: rank_start, rank_gate_wait (-pn G, or another launcher's ranks)
#include "llmc/run_setup.cuh"    // defines: Run, open_data, open_logger, print_config_table
#include "llmc/run_fit.cuh"      // defines: plan_run, check_fit, print_plan_only
#include "llmc/run_weights.cuh"  // defines: ssd_node_dir, build_model
#include "llmc/progress_watch.h"  // defines: progress_timeout_seconds, progress_watch_start, progress_watch_stop

// Mean loss of the first `batches` val batches, max_micro per walk. Chat: per target token.
// Several ranks: each walk reads max_micro batches per rank, and each rank evaluates its own.
static float validation_loss(GPT* g, DataLoader* val, int64_t batches, StepTokens* buf) {
    const bool chat = val->kind == DL_CHAT;
    const int64_t N = (int64_t)g->B * g->T, walk = (int64_t)g->max_micro * g->comm->world;
    dataloader_reset(val);
    double sum = 0.0, targets = 0.0;
    std::vector<float> losses((size_t)g->max_micro);
    std::vector<int64_t> counts((size_t)g->max_micro);
    for (int64_t done = 0; done < batches;) {
        const int all = (int)std::min<int64_t>(walk, batches - done), first = g->comm->rank * g->max_micro;
        const int n = std::max(0, std::min(g->max_micro, all - first));  // this rank's
        for (int i = 0; i < all; i++) fetch_batch(val, g->config.vocab_size, "val", buf, i);
        if (n > 0)
            gpt_forward_eval_batches(g, buf->inputs + first * N, buf->targets + first * N, n, losses.data(),
                                     chat ? buf->pos + first * N : NULL, counts.data());
        for (int i = 0; i < n; i++) {
            const double count = chat ? (double)counts[(size_t)i] : 1.0;  // pretraining: a mean each
            sum += losses[i] * count;
            targets += count;
        }
        done += all;
    }
    double sums[2] = {sum, targets};
    comm_sum_host(g->comm, sums, 2);
    sum = sums[0];
    targets = sums[1];
    if (chat && targets == 0)
        die("val data %s: no target tokens in its first %lld batches", val->pattern, (long long)batches);
    return (float)(sum / targets);
}

// -h: the examples of the eval file the model answers right. Each round of the walk is max_micro batches a
// rank, B / 4 examples a batch (llmc/evalloader.h); the ranks sum their counts. -1: a stop signal cut it
// short on some rank (each rank still sums once).
static int eval_correct(GPT* g, const EvalSet* set) {
    const int B = g->B, T = g->T, per = B / EVAL_CHOICES, M = g->max_micro;
    const int64_t N = (int64_t)B * T, examples = (int64_t)set->examples.size();
    const int64_t batches = (examples + per - 1) / per, walk = (int64_t)M * g->comm->world;
    std::vector<int> inputs((size_t)(M * N)), targets((size_t)(M * N)), labels((size_t)(M * B)),
        held((size_t)M);
    std::vector<float> losses((size_t)(M * N)), means((size_t)M);
    double sums[2] = {0, 0};  // correct, ranks cut short
    for (int64_t done = 0; done < batches; done += walk) {
        if (stop_signal_pending()) {
            sums[1] = 1;
            break;
        }
        const int all = (int)std::min<int64_t>(walk, batches - done), first = g->comm->rank * M;
        const int n = std::max(0, std::min(M, all - first));  // this rank's
        for (int i = 0; i < n; i++)
            held[(size_t)i] = evalset_batch(set, (done + first + i) * per, B, T, inputs.data() + i * N,
                                            targets.data() + i * N, labels.data() + i * B);
        if (n == 0) continue;
        gpt_forward_eval_batches(g, inputs.data(), targets.data(), n, means.data());
        cudaStream_t s = g->stream.compute;  // the forward's losses, each token's
        cudaCheck(cudaMemcpyAsync(losses.data(), g->losses, (size_t)(n * N) * 4, cudaMemcpyDeviceToHost, s));
        cudaCheck(cudaStreamSynchronize(s));
        for (int i = 0; i < n; i++)
            sums[0] += evalset_correct(losses.data() + i * N, targets.data() + i * N, labels.data() + i * B,
                                       held[(size_t)i], T);
    }
    comm_sum_host(g->comm, sums, 2);
    return sums[1] > 0 ? -1 : (int)sums[0];
}

// Prints the step's line. Chat data adds "| targets N".
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

// Validation every -v steps, a sample every -s, both at the end.
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
    if (!r->bench && a.hellaswag && ((a.val_every > 0 && step > 0 && step % a.val_every == 0) || last)) {
        const int n = (int)r->eval.examples.size(), right = eval_correct(g, &r->eval);
        if (right < 0) printf("HellaSwag: cut short by the stop signal\n");
        else printf("HellaSwag: %d/%d = %.6f\n", right, n, (double)right / n);
        if (right >= 0) logger_eval(&r->logger, step, (float)right / (float)n);
    }
    if (sample_now && g->comm->rank == 0)  // several ranks: rank 0's
        gpt_sample(g, &r->tok, r->sample_tokens, &r->sample_rng, r->prompt, r->prompt_len);
}

// Next step's micro-batches (-a 1: the same first ones).
// Every rank reads all of them (the same loader, the same order): rank r trains on its n_micro of them.
static void load_step_batches(Run* r) {
    if (r->args.overfit_single_batch) dataloader_reset(&r->train);
    for (int mb = 0; mb < r->n_micro_all; mb++)
        fetch_batch(&r->train, r->cfg.vocab_size, "train", &r->batch, mb);
}

// Tests (test_multi_gpu): LLMC_TEST_RANK_DIES=r:s:save kills rank r, another node's leader, in step s's save:
// after its node's part is the checkpoint's (-sd: its store's), before rank 0 has it.
static void test_rank_dies_in_save(const Run* r, int64_t step) {
    const char* e = getenv("LLMC_TEST_RANK_DIES");
    int rank = -1, at = -1;
    char where[8] = "";
    if (e && sscanf(e, "%d:%d:%7s", &rank, &at, where) == 3 && strcmp(where, "save") == 0 &&
        rank == r->comm->rank && at == step)
        raise(SIGKILL);
}

// Several ranks: rank 0 writes the node's state, once. Several nodes: the other nodes' parts first.
static void save_run_checkpoint(Run* r, GPT* g) {
    DataLoaderState data_state = dataloader_get_state(&r->train);
    if (r->comm->nodes > 1 && r->comm->local == 0 && r->comm->rank != 0) {
        optimizer_wait_all(g);               // this node's parts are the step's
        if (g->ssd) ssd_tier_checkpoint(g);  // -sd: its store's checkpoint, durable before its parts go
        test_rank_dies_in_save(r, g->step);
        gather_node_state(g);
    }
    if (r->comm->rank == 0) {
        // tests: LLMC_TEST_SLOW_SAVE=s makes rank 0's save last s seconds longer, progressing
        // (test_multi_gpu: a slow part one rank does alone, longer than LLMC_PROGRESS_TIMEOUT, ends no rank)
        const char* slow = getenv("LLMC_TEST_SLOW_SAVE");
        for (int k = 0; slow && k < 4 * atoi(slow); k++) usleep(250 * 1000), progress_tick();
        save_checkpoint(g, r->args.output_dir, &data_state);
    }
    // the other ranks count it before rank 0's save ends, but read nothing from a disk until then: their
    // reads start on the main thread (stream.cu), whose next call is stop_if_asked's sum, which waits for
    // rank 0
    g->checkpoint_step = g->step;
}

// Tests (test_multi_gpu): LLMC_TEST_RANK_DIES=r:s kills rank r after step s (a rank that dies);
// LLMC_TEST_RANK_HANGS=r:s stops rank r's main thread there for good, its process and heartbeats alive (a
// rank that hangs).
static void test_rank_dies(const Run* r, int steps_done) {
    const char* e = getenv("LLMC_TEST_RANK_DIES");
    int rank = -1, step = -1;
    if (e && !strstr(e, ":save") && sscanf(e, "%d:%d", &rank, &step) == 2 && rank == r->comm->rank &&
        step == steps_done)
        raise(SIGKILL);
    e = getenv("LLMC_TEST_RANK_HANGS");
    if (e && sscanf(e, "%d:%d", &rank, &step) == 2 && rank == r->comm->rank && step == steps_done)
        for (;;) pause();
}

// Several ranks stop together: a stop signal on any rank is a stop signal on all.
// The stop signal every rank acts on: any rank's (SIGINT first), or 0. A signal that reaches a rank after
// the sum waits for the next agreement: a rank that stopped alone would leave the others in a collective.
// A rank that takes another's signal does not mark it as its own: its own, arriving during the save, is then
// a first signal (the handler would take it for a second and exit without the checkpoint).
static int agree_on_stop_signal(const Run* r) {
    const int sig = stop_signal_pending();
    if (r->comm->world == 1) return sig;
    double got[2] = {sig == SIGINT ? 1.0 : 0.0, sig == SIGTERM ? 1.0 : 0.0};
    comm_sum_host(r->comm, got, 2);
    return got[0] > 0 ? SIGINT : got[1] > 0 ? SIGTERM : 0;
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
    static Comm ranks;
    parse_args(argc, argv, &r.args, &r.ga);
    stop_signal_install_setup();  // until the first step: a signal ends the set-up at once, in one line
    progress_timeout_seconds();   // a bad LLMC_PROGRESS_TIMEOUT is refused before any work (one GPU too)
    r.comm = &ranks;
    if (!r.ga.plan_only) {
        // -pn G (-pN N), or another launcher's ranks: this is one of G (x N) processes
        rank_start(&ranks, r.ga.ranks, r.ga.nodes, r.ga.node_rank, r.ga.node_address, r.ga.llmc_fs);
        r.ga.ranks = ranks.local_world;        // another launcher's ranks count as -pn and -pN
        stop_signal_quiet = ranks.local != 0;  // a node's ranks: its first says what a signal does
        r.ga.nodes = ranks.nodes;
    } else {  // -P 1 under another launcher's environment: plan its nodes of GPUs, as -pn and -pN
        int rank = 0, world = 1, local_world = 1;
        if (r.ga.ranks == 1 && r.ga.nodes == 1 && env_ranks(&rank, &world, &local_world) && local_world > 0 &&
            world % local_world == 0)
            r.ga.ranks = local_world, r.ga.nodes = world / local_world;
    }
    rank_gate_wait(&ranks);                         // the other ranks: after rank 0's checks
    r.args.model = model_of_run_dir(r.args.model);  // -e a run's -o: its latest checkpoint
    const TrainArgs& args = r.args;
    flash_attention_flag = r.ga.flash;  // before the memory plan: the cuBLAS path stores the scores
    cublaslt_fusion = r.ga.epilogues;
    ssd_ring_budget_bytes = std::max(0.0f, r.ga.ssd_ring_gib) * 1073741824.0;  // -sb (auto: check_fit)
    ssd_grads_in_ram = r.ga.ranks * r.ga.nodes > 1;       // -sd with -pn (and -P 1's advice of -sd for -pn)
    ssd_nodes = r.ga.nodes, ssd_node_ranks = r.ga.ranks;  // -sd with -pN: each node's store, its part
    r.bench = r.ga.bench_steps > 0;
    open_output_dir(&r);
    plan_run(&r);
    if (r.ga.plan_only) return print_plan_only(&r);
    open_data(&r);
    if (ranks.world > 1) require_gpu(&r);  // said once, by rank 0 (one rank: after the host's fit check)
    rank_gate_open(&ranks, run_fingerprint(&r));  // every rank's and node's flags alike
    ssd_node_dir(&r);                             // -sd on several nodes: DIR/node<n>, each node's
    check_fit(&r);
    GPT g;
    build_model(&r, &g);
    race_check_begin(&g);
    open_logger(&r);
    print_config_table(&r, &g);

    // the training loop
    int64_t saved_step = r.resume_step;         // the step of the newest checkpoint in -o (-1: none)
    auto stop_if_asked = [&](int steps_done) {  // Ctrl-C / SIGTERM: finish the step, checkpoint, exit
        const int sig = agree_on_stop_signal(&r);
        stop_if_signalled(
            steps_done, r.start_step, r.total_steps, saved_step, r.bench ? NULL : args.output_dir,
            [&] { save_run_checkpoint(&r, &g); }, sig,
            [&] {  // saved or not: each rank's share of the update, rank 0's save, then every node's end
                optimizer_wait_all(&g);
                progress_watch_stop();
                comm_stop_watch(r.comm);  // from here the ranks end each at its own time: not a failure
                node_barrier(r.comm);
                net_finish(&r.comm->net);
                race_check_end();  // the emulated tests' LLMC_EMU_RACECHECK: what the stopped run saw
            });
    };
    stop_signal_install();
    if (const char* e = getenv("LLMC_TEST_SLOW_START")) {  // tests: rank r's set-up takes s seconds longer
        int rank = -1, seconds = 0;
        if (sscanf(e, "%d:%d", &rank, &seconds) == 2 && rank == r.comm->rank) sleep((unsigned)seconds);
    }
    progress_watch_start(r.comm);  // several ranks: a run that no longer moves on ends in one line
    const double run_t0 = timeline_now();
    for (int step = r.start_step; step <= r.total_steps; step++) {
        stop_if_asked(step);  // a signal during validation or sampling
        evaluate(&r, &g, step);
        if (step == r.total_steps) break;

        const double step_start = timeline_now();  // the step's time runs to its end below
        if (!r.bench) load_step_batches(&r);
        const float lr = learning_rate_at(&args, step, r.total_steps);
        const int64_t mine =
            (int64_t)r.comm->rank * r.n_micro * args.B * args.T;  // this rank's micro-batches
        const StepResult res = gpt_step(&g, r.batch.inputs + mine, r.batch.targets + mine, r.n_micro, lr,
                                        r.batch.pos ? r.batch.pos + mine : NULL);
        const bool ran = res.targets > 0;  // chat data: a step without targets runs nothing
        if (g.timeline && ran) r.last_timeline = timeline_summarize(g.timeline);  // waits for the GPU
        const double step_end = timeline_now(), dt = step_end - step_start;
        if (res.diverged[0]) die_diverged(step + 1, res.loss, res.norm, res.diverged, saved_step);
        r.step_seconds[step] = dt;
        print_step_line(&r, &g, step, &res, lr, dt, step_end - run_t0);
        if (step == r.start_step) print_gpu_margin(&r, &g, step);
        if (g.timeline && ran)  // several ranks: rank 0's trace.json, not every rank's over one another
            print_timeline(&g, r.last_timeline, r.comm->rank == 0 ? args.output_dir : NULL);
        fflush(stdout);
        if (ran) logger_train(&r.logger, step + 1, res.loss, lr, (float)res.norm);
        const bool last = step + 1 == r.total_steps;
        const int every = args.checkpoint_every;  // and the last step with -o: a run that ends saves
        if (!r.bench && args.output_dir && ((every > 0 && (step + 1) % every == 0) || last)) {
            save_run_checkpoint(&r, &g);
            saved_step = step + 1;
        }
        if (r.comm->world > 1) test_rank_dies(&r, step + 1);
        stop_if_asked(step + 1);
    }
    stop_if_asked(r.total_steps);  // a signal during the last validation or sample
    optimizer_wait_all(&g);
    progress_watch_stop();
    comm_stop_watch(r.comm);   // the last collective is done: from here a rank that ended is no failure
    net_finish(&r.comm->net);  // several nodes: from here a node may end before another
    race_check_end();
    print_run_summary(&r, &g);
    free_run(&r, &g);
    if (r.comm->backend == COMM_NCCL) {  // exit's CUDA teardown would run under NCCL's own threads
        fflush(NULL);
        _exit(0);
    }
    return 0;
}

#endif  // TESTING
