// llmc/race_check.cuh — the CPU emulation's race check over a trainer's buffers
// (test/fake_cuda/cuda_runtime.h: every access to a tracked buffer, by a stream or a host thread, must be
// ordered by CUDA's rules, or the pair is a race). Which buffers it watches (gpt_track_buffers: the emulated
// suites' trainers) and train_gpt's LLMC_EMU_RACECHECK=1 (an emulated run, each rank of several: its own
// streams and threads; what orders the ranks' processes, node barriers and shared memory, is not modelled).
// The emulated build only: in the real one these are empty.
#pragma once
#include <stdlib.h>
#include "llmc/gpt.cuh"  // defines: GPT, layer_input, dresid_at (and after vocab_host.cuh, memory_plan.cuh)

#ifdef FAKE_CUDA_DEVICE
#include <string>
// Each buffer at the granularity whose order matters: a weight slot, a layer's pinned copy, a checkpoint;
// -E 1's embedding rows one by one (its thread and the forward's gathers update them, whichever comes
// first). Forgets what was tracked before.
static void gpt_track_buffers(GPT* g) {
    fake_cuda_untrack_all();
    const WeightStream* ws = &g->stream;
    const ParamLayout* p = &g->layout;
    const bool llama = is_llama(g);
    const int64_t S = p->layer_stride, C = g->config.channels, act = (int64_t)g->B * g->T * C,
                  N = (int64_t)g->B * g->T, M = g->max_micro;
    const int L = g->config.num_layers;
    for (int s = 0; s < ws->num_slots; s++)
        fake_cuda_track(ws->slots + s * S, S * 2, "weight slot " + std::to_string(s));
    for (int k = 0; k < 2; k++)
        fake_cuda_track(ws->grad_staging[k], S * 2, "gradient staging " + std::to_string(k));
    if (!llama) fake_cuda_track(ws->weights_host_bf16, p->embed_count * 2, "pinned bf16 embeddings");
    for (int t = 0; llama && t < NUM_EMBED_TENSORS;
         t++) {  // apart: -E 1 updates them on threads of their own
        if (!p->embed_size[t]) continue;
        if (g->vocab && t == LL_EMBED)
            for (int64_t r = 0; r < g->config.vocab_size; r++)
                fake_cuda_track(ws->weights_host_bf16 + p->embed_offset[t] + r * C, C * 2,
                                "pinned bf16 embedding row " + std::to_string(r));
        else
            fake_cuda_track(ws->weights_host_bf16 + p->embed_offset[t], p->embed_size[t] * 2,
                            "pinned bf16 embedding tensor " + std::to_string(t));
    }
    // the pinned bf16 copy: every layer (-sw 1: those below the first the disk streams); the gradients: a
    // layer's, or over several nodes the node's part of it (grads_stride)
    const int host_layers = ws->reads.reader.start ? ws->reads.reader.first_streamed : L;
    for (int l = 0; l < host_layers; l++)
        fake_cuda_track(ws->weights_host_bf16 + gpt_layer_offset(p, l), S * 2,
                        "pinned bf16 weights of layer " + std::to_string(l));
    for (int l = 0; ws->grads_host_bf16 && l < L; l++)
        fake_cuda_track(ws->grads_host_bf16 + l * ws->grads_stride, ws->grads_stride * 2,
                        "pinned gradients of layer " + std::to_string(l));
    for (int l = 0; l <= L; l++)
        for (int mb = 0; mb < M; mb++)
            fake_cuda_track(layer_input(g, l, mb), act * 2,
                            "checkpoint " + std::to_string(l) + "/" + std::to_string(mb));
    for (int mb = 0; mb < M; mb++) fake_cuda_track(dresid_at(g, mb), act * 2, "dresid " + std::to_string(mb));
    fake_cuda_track(g->layer_grads, S * 4, "layer gradient accumulator");
    const int64_t rc = g->resident_count - g->resident_start;
    fake_cuda_track(g->resident, rc * 2, "resident bf16 weights");
    fake_cuda_track(g->resident_grads, rc * 4, "resident gradients");
    fake_cuda_track(g->resident_master, rc * 4, "resident master weights");
    fake_cuda_track(g->resident_m, rc * 4, "resident AdamW m");
    fake_cuda_track(g->resident_v, rc * 4, "resident AdamW v");
    if (HostVocab* v = g->vocab) {
        const int64_t chunk = v->rows * C;
        for (int i = 0; i < 2; i++) {
            fake_cuda_track(v->w_chunk[i], chunk * 2, "lm_head chunk buffer " + std::to_string(i));
            fake_cuda_track(v->dw_chunk[i], chunk * 4, "lm_head chunk gradient " + std::to_string(i));
            fake_cuda_track(v->dw_host[i], chunk * 4, "pinned chunk gradient " + std::to_string(i));
        }
        fake_cuda_track(v->rows_host, act * 2, "pinned embedding rows");
        fake_cuda_track(v->final_norm, C * 2, "final norm");
        fake_cuda_track(v->lnf, M * act * 2, "final norm outputs");
        fake_cuda_track(v->dlnf, M * act * 4, "head input gradients");
    }
    fake_cuda_track(g->tokens_in, M * N * 4, "input tokens");
    fake_cuda_track(g->tokens_out, M * N * 4, "target tokens");
    fake_cuda_track(g->tokens_pos, M * N * 4, "positions");
    for (int k = 0; k < 3; k++)  // tokens_to_device's staging: inputs, targets, positions
        fake_cuda_track(g->tokens_host + k * M * N, M * N * 4, "pinned token staging " + std::to_string(k));
    if (g->attn_meta) {  // the cuDNN path's ragged metadata (chat rows)
        fake_cuda_track(g->attn_meta, attention_meta_bytes(N, g->max_micro), "ragged metadata");
        fake_cuda_track(g->attn_meta_host, attention_meta_bytes(N, g->max_micro), "pinned ragged metadata");
    }
    fake_cuda_track(g->losses, M * N * 4, "losses");
    fake_cuda_track(g->loss_dev, 4, "mean loss");
    fake_cuda_track(g->sumsq_dev, 8, "squared norm");
    fake_cuda_track(g->loss_host, 4, "pinned mean loss");
    fake_cuda_track(g->sumsq_host, 8, "pinned squared norm");
    if (llama) fake_cuda_track(g->rope_inv_freq, g->llama.head_dim / 2 * 4, "RoPE frequencies");
    fake_cuda_track(g->acts.memory, g->acts.bytes, "workspace");
    if (const SsdTier* t = g->ssd) {  // -sd: the gradients' ring; -sw 1: the round's handoff buffers
        for (int k = 0; k < GRAD_RING && t->buf[k]; k++)  // several ranks: none (the gradients stay in RAM)
            fake_cuda_track(t->buf[k], grads_ring_bytes(p),
                            "the gradients' ring buffer " + std::to_string(k));
        if (t->whole) fake_cuda_track(t->whole, S * 2, "a layer's bf16 weights, the nodes' parts");
        for (int b = 0; t->hands_over && b < SW_HANDOFF_BUFFERS; b++)
            fake_cuda_track(t->handoff[b], S * 2, "the round's handoff buffer " + std::to_string(b));
    }
    for (int b = 0; ws->reads.reader.start && b < ws->reads.reader.num_buffers; b++)  // -sw 1: from the disk
        fake_cuda_track(ws->reads.buf[b], S * 2, "the weights' read buffer " + std::to_string(b));
    if (g->comm->backend == COMM_HOST) {  // several ranks summing through the host: this rank's part of it
        fake_cuda_track(g->comm->scratch + (int64_t)g->comm->local * g->comm->chunk, g->comm->chunk * 4,
                        "this rank's part of the ranks' sums");
        fake_cuda_track(g->comm->staging, g->comm->chunk * 4, "the ranks' sum's staging");
    }
    if (g->kept_memory)
        fake_cuda_track(
            g->kept_memory,
            acts_bytes(&g->config, g->B, g->T, true, llama ? &g->llama : NULL) * g->kept_layers * M,
            "kept activations");
}
#endif

// LLMC_EMU_RACECHECK=1 (emulated train_gpt only; tests): the trainer's buffers tracked from the build on
// (race_check_begin), and the run ends with status 1 and the first race where any was seen (race_check_end,
// after the last step's work). Elsewhere: nothing.
static bool race_check_wanted() {
#ifdef FAKE_CUDA_DEVICE
    const char* e = getenv("LLMC_EMU_RACECHECK");
    return e && atoi(e) == 1;
#else
    return false;
#endif
}
static void race_check_begin(GPT* g) {
#ifdef FAKE_CUDA_DEVICE
    if (race_check_wanted()) gpt_track_buffers(g);
#endif
}
static void race_check_end() {
#ifdef FAKE_CUDA_DEVICE
    if (!race_check_wanted()) return;
    const std::vector<std::string> races = fake_cuda_races();
    fake_cuda_untrack_all();  // before the buffers are freed (and their addresses reused)
    if (!races.empty()) die("race check: %zu races, the first: %s", races.size(), races[0].c_str());
    printf("race check: no races\n");
#endif
}
