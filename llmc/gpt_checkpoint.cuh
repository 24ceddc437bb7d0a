// llmc/gpt_checkpoint.cuh — a trainer's checkpoints. save_checkpoint gathers the state for
// llmc/checkpoint.h's files: from the optimizer thread, the GPU's resident prefix, the SSD tier's store
// and the other nodes. load_state reads the AdamW state and the data position back.
// Several nodes: rank 0 writes; the other nodes' leaders send their parts in the order it writes them
// (gather_node_state).
// Not here: the files' format (llmc/checkpoint.h), the model file's load (llmc/run_weights.cuh).
#pragma once
#include <string.h>
#include <vector>
#include "llmc/checkpoint.h"   // defines: checkpoint_save, StreamedState, StatePart, state_file_read_parts
#include "llmc/gpt.cuh"        // defines: struct GPT, llama_file_order, llama_trainer_order
#include "llmc/gpt_build.cuh"  // defines: gpt_resident_state_to_device, gpt_resident_state_to_host
#include "llmc/net.h"          // defines: net_gather, NET_MAIN
#include "llmc/utils.h"        // defines: die, ProgressTicker

// Several nodes: node n keeps the fp32 weights, m and v of its ranks' slices of each streamed layer
// (comm_node_part) and the prefix; the rest of its arrays is never touched, so the OS gives it no memory (and
// it reads as zeros: a use of another node's part would show in the results, which test_multi_gpu compares).
// Layer l's parts, layer-relative byte ranges of floats, each node's.
static void node_layer_ranges(const GPT* g, std::vector<int64_t>* lo, std::vector<int64_t>* hi) {
    const Comm* c = g->comm;
    lo->resize((size_t)c->nodes);
    hi->resize((size_t)c->nodes);
    for (int n = 0; n < c->nodes; n++) {
        comm_node_part(c, g->layout.layer_stride, n, &(*lo)[(size_t)n], &(*hi)[(size_t)n]);
        (*lo)[(size_t)n] *= 4;
        (*hi)[(size_t)n] *= 4;
    }
}
// Rank 0 saving: layer l of x (the fp32 weights, m or v) whole in out, its own part from x, the other nodes'
// from them (they send in the same order: gather_node_state).
static int gather_layer(GPT* g, const float* x, int l, float* out) {
    std::vector<int64_t> lo, hi;
    node_layer_ranges(g, &lo, &hi);
    memcpy((char*)out + lo[0], (const char*)(x + gpt_layer_offset(&g->layout, l)) + lo[0],
           (size_t)(hi[0] - lo[0]));
    net_gather(&g->comm->net, NET_MAIN, (char*)out, lo.data(), hi.data());
    return 1;
}
static int gather_layer_params(void* ctx, int l, float* out, char*, size_t) {
    GPT* g = (GPT*)ctx;
    return gather_layer(g, g->master, l, out);
}
static int gather_layer_moment(void* ctx, int which, int l, float* out, char*, size_t) {
    GPT* g = (GPT*)ctx;
    return gather_layer(g, which == 1 ? g->adam_m : g->adam_v, l, out);
}
// Rank 0 saving: the other nodes' parts of a layer into it (node_layer_ranges).
static void gather_node_parts(GPT* g, float* layer) {
    std::vector<int64_t> lo, hi;
    node_layer_ranges(g, &lo, &hi);
    net_gather(&g->comm->net, NET_MAIN, (char*)layer, lo.data(), hi.data());
}
// -sd on several nodes, rank 0 saving: layer l's fp32 weights whole in out, each node's part from its store
// (the other nodes' leaders read theirs and send it: gather_node_state).
static int gather_store_layer(void* ctx, int l, float* out, char* err, size_t errlen) {
    GPT* g = (GPT*)ctx;
    if (!ssd_read_layer_params(g, l, out, err, errlen)) return 0;
    gather_node_parts(g, out);
    return 1;
}
// -sd -sk 1 on several nodes, rank 0 saving: layer l's m (which 1) or v (2) whole, each node's part from its
// store, as gather_store_layer.
static int gather_store_moment(void* ctx, int which, int l, float* out, char* err, size_t errlen) {
    GPT* g = (GPT*)ctx;
    if (!ssd_read_layer_moment(g, which, l, out, err, errlen)) return 0;
    gather_node_parts(g, out);
    return 1;
}
// -E 1: the vocabulary's [a, b) of the fp32 weights (which 0), m (1) or v (2), from the nodes' parts.
static int gather_vocab(void* ctx, int which, int64_t a, int64_t b, float* out, char*, size_t) {
    GPT* g = (GPT*)ctx;
    vocab_state_window(g, which == 0 ? g->master : which == 1 ? g->adam_m : g->adam_v, a, b, out);
    return 1;
}
// The other nodes' leaders while rank 0 saves: their parts, in the order it writes them (the model file's
// layers, then m's, then v's; the Llama files: each followed by -E 1's vocabulary, a window at a time). -sd:
// the layers from the node's store: the model file's, and with -sk 1 m's and v's (else the state file holds m
// and v of the prefix only).
static void gather_node_state(GPT* g) {
    std::vector<int64_t> lo, hi;
    node_layer_ranges(g, &lo, &hi);
    const int64_t E = g->layout.embed_count, W = state_window_floats();
    std::vector<float> layer(g->ssd ? (size_t)g->layout.layer_stride : 0);
    const bool keep = g->ssd && g->ssd->keep_state;
    int which = 0;  // 0: the fp32 weights, 1: m, 2: v
    for (float* x : {g->master, g->adam_m, g->adam_v}) {
        for (int l = g->resident_layers; l < g->config.num_layers; l++) {
            char err[4608];
            if (!g->ssd) {
                net_gather(&g->comm->net, NET_MAIN, (char*)(x + gpt_layer_offset(&g->layout, l)), lo.data(),
                           hi.data());
                continue;
            }
            if (which > 0 && !keep) break;
            if (!(which == 0 ? ssd_read_layer_params(g, l, layer.data(), err, sizeof err)
                             : ssd_read_layer_moment(g, which, l, layer.data(), err, sizeof err)))
                die("%s", err);  // ssd_checkpoint_read_failed's line
            net_gather(&g->comm->net, NET_MAIN, (char*)layer.data(), lo.data(), hi.data());
        }
        for (int64_t a = 0; g->vocab && a < E; a += W) vocab_state_window(g, x, a, std::min(E, a + W), NULL);
        which++;
    }
}

// ----------------------------------------------------------------------------
// Saving and loading (the files: llmc/checkpoint.h)

// Llama files: [layers | embeddings], this trainer: [embeddings | layers]. Rotates in place.
static void llama_state_order(GPT* g, bool to_file) {
    ProgressTicker ticker;  // three rotations of the whole state: minutes at 70B (llmc/progress_watch.h)
    for (float* x : {g->master, g->adam_m, g->adam_v})
        to_file ? llama_file_order(&g->layout, x) : llama_trainer_order(&g->layout, x);
}

// Gathers state from the optimizer thread and GPU, then saves.
static void save_checkpoint(GPT* g, const char* dir, const DataLoaderState* data_state) {
    optimizer_wait_all(g);          // the last step's master, m, v complete
    gpt_resident_state_to_host(g);  // the resident prefix's state lives on the GPU
    const LlamaConfig* llama = is_llama(g) ? &g->llama : NULL;  // llama_model.h's file: the family's order
    if (g->ssd) {
        StreamedState ss = ssd_tier_checkpoint(g);
        if (g->ssd->keep_state) ss.read_moment = ssd_read_layer_moment;  // a state file like RAM's
        if (g->comm->nodes > 1) {                                        // each node's store holds its part
            ss.read_layer = gather_store_layer;
            if (g->ssd->keep_state) ss.read_moment = gather_store_moment;
            else ss.node_part = comm_node_stride(g->comm, g->layout.layer_stride);
            if (g->vocab) ss.read_vocab = gather_vocab;
        }
        checkpoint_save(dir, g->step, g->adam_t, &g->config, g->master, g->adam_m, g->adam_v, &g->args, g->B,
                        g->T, data_state, &g->loss_window, &g->norm_window, &ss, llama);
        return;
    }
    if (g->comm->nodes > 1) {  // the streamed layers gathered from the nodes, a layer at a time
        const StreamedState ss = {g->resident_count,
                                  g->step,
                                  g->resident_layers,
                                  gather_layer_params,
                                  g,
                                  gather_layer_moment,
                                  g->vocab ? gather_vocab : NULL,
                                  0};
        checkpoint_save(dir, g->step, g->adam_t, &g->config, g->master, g->adam_m, g->adam_v, &g->args, g->B,
                        g->T, data_state, &g->loss_window, &g->norm_window, &ss, llama);
        return;
    }
    if (llama) llama_state_order(g, true);
    checkpoint_save(dir, g->step, g->adam_t, &g->config, g->master, g->adam_m, g->adam_v, &g->args, g->B,
                    g->T, data_state, &g->loss_window, &g->norm_window, NULL, llama);
    if (llama) llama_state_order(g, false);
}

// Loads AdamW state, step, data position. The model file loads apart.
// Several ranks: rank 0 reads into the node's arrays and tells the others where the run stands.
// ckpt_ssd: the checkpoint's state file is -sd's (version 102 / 103: the prefix's m, v in this trainer's
// order); else it holds every parameter's in the family's order, which -sd takes the prefix's of (its store
// is filled from the same file: ssd_attach).
static void load_state(GPT* g, const char* path, DataLoaderState* data_state, bool ckpt_ssd = false) {
    if ((g->comm->nodes > 1 || g->ssd) && g->comm->local == 0) {  // the prefix, and this node's parts
        const ParamLayout* p = &g->layout;
        const int64_t E = p->embed_count, S = p->layer_stride, L = g->config.num_layers;
        const bool file_order = is_llama(g) && !ckpt_ssd;  // the Llama files: [layers | embeddings]
        int64_t lo, hi;
        comm_node_part(g->comm, S, g->comm->node_rank, &lo, &hi);
        int64_t vlo = 0, vhi = E;  // -E 1: the vocabulary's part (the GPU's embeddings: whole)
        if (g->vocab) vocab_node_part(g, g->comm->node_rank, &vlo, &vhi);
        std::vector<StatePart> parts = {{vlo, (file_order ? p->total - E : 0) + vlo, vhi - vlo}};
        for (int64_t l = 0; l < (g->ssd ? g->resident_layers : L); l++) {  // -sd: its store has the rest
            const bool mine = l >= g->resident_layers;  // the resident layers whole, the others' node part
            const int64_t a = mine ? lo : 0, n = mine ? hi - lo : S;
            parts.push_back({E + l * S + a, (file_order ? 0 : E) + l * S + a, n});
        }
        state_file_read_parts(path, p->total, g->adam_m, g->adam_v, data_state, &g->step, &g->adam_t, parts,
                              ckpt_ssd);
    } else if (g->comm->local == 0) {
        state_file_read(path, g->layout.total, g->adam_m, g->adam_v, data_state, &g->step, &g->adam_t);
        if (is_llama(g))  // m, v from file order to ours
            for (float* x : {g->adam_m, g->adam_v}) llama_trainer_order(&g->layout, x);
    }
    struct {
        DataLoaderState data;
        int64_t step, adam_t;
    } at = {*data_state, g->step, g->adam_t};
    comm_share(g->comm, &at, sizeof at);
    *data_state = at.data;
    g->step = at.step;
    g->adam_t = at.adam_t;
    gpt_resident_state_to_device(g);  // resident prefix's weights and moments to the GPU
}
