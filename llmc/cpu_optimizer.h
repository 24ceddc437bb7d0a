// llmc/cpu_optimizer.h — a CPU thread: AdamW of the streamed layers, in layer order, one round a step,
// beside the next forward pass. -sd: over the SSD store (ssd_tier.h); with several ranks, the node's rank 0
// updates whole layers there (several nodes: the node's part, then the exchange) once every rank's gradient
// slice is on the host, the others only hand theirs over. Not here: AdamW math (cpu_adam.h), the GPU side of
// hand-overs (stream.cu).
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include "llmc/adamw.h"         // defines: AdamWArgs, ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS
#include "llmc/cpu_adam.h"      // defines: adamw_tensors_bf16grad
#include "llmc/gpt.cuh"         // defines: struct GPT, layer_is_matrix
#include "llmc/collectives.h"   // defines: Comm, NodeShared (several ranks: each updates its slice)
#include "llmc/ssd_tier.h"      // defines: ssd_tier_round, ssd_tier_submit, ssd_tier_send_grads
#include "llmc/vocab_host.cuh"  // defines: vocab_head_update_wait (-E 1: the table's and head's AdamW thread)

// Rounds update streamed layers R..L-1, in order.
struct Optimizer {
    std::thread thread;
    std::mutex mu;
    std::condition_variable cv;
    int64_t rounds_submitted, rounds_done;
    int layers_done;  // layers done in the round in progress
    bool quit;
    float lr, grad_scale;
    int64_t t;  // AdamW step, 1-based
    double last_round_seconds;
    double *layer_t0, *layer_t1;  // host clock per layer, start / end, last round
};

static AdamWArgs optimizer_adamw_args(const GPT* g) {
    const Optimizer* o = g->opt;
    return {o->lr, ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS, g->args.weight_decay, o->grad_scale, o->t};
}

// Layer l's AdamW, in host RAM. Several ranks: this rank's slice [grad_lo, grad_hi) of it.
static void adamw_layer(GPT* g, int l) {
    const AdamWArgs args = optimizer_adamw_args(g);
    const ParamLayout* p = &g->layout;
    const int64_t lo = g->stream.grad_lo, n = g->stream.grad_hi - lo, off = gpt_layer_offset(p, l) + lo;
    const uint16_t* grads =
        g->stream.grads_host_bf16 + (int64_t)l * g->stream.grads_stride + (lo - g->stream.grads_base);
    uint16_t* bf16_out = g->stream.weights_host_bf16 + off;
    if (n <= 0) return;
    FAKE_CUDA_HOST_ACCESS(grads, n * 2, false, "the CPU AdamW reading a layer's gradients");
    FAKE_CUDA_HOST_ACCESS(bf16_out, n * 2, true, "the CPU AdamW writing a layer's bf16 copy");
    // decay only matrices, llm.c's rule
    if (n == p->layer_stride)
        return adamw_tensors_bf16grad(NUM_LAYER_TENSORS, p->layer_offset, p->layer_size, layer_is_matrix(g),
                                      g->master + off, grads, g->adam_m + off, g->adam_v + off, bf16_out,
                                      &args);
    adamw_tensors_window_bf16grad(NUM_LAYER_TENSORS, p->layer_offset, p->layer_size, layer_is_matrix(g), lo,
                                  n, g->master + off, grads, g->adam_m + off, g->adam_v + off, bf16_out,
                                  &args);
}

// Several ranks: how far each rank's rounds are, (round - 1) * (L + 1) + layers done, in NodeShared.
static int64_t rank_progress_mark(const GPT* g, int64_t round, int layers_done) {
    return (round - 1) * (g->config.num_layers + 1) + layers_done;
}
static void publish_progress(GPT* g, int64_t round, int layers_done) {
    if (g->comm->world == 1) return;
    g->comm->node->progress[g->comm->local].store(rank_progress_mark(g, round, layers_done),
                                                  std::memory_order_release);
}
// Has every rank of this node (from rank `first` on) reached `mark`? wait: until they have.
static bool ranks_reached(const GPT* g, int64_t mark, int wait, int first = 0) {
    const Comm* c = g->comm;
    for (int r = first; r < c->local_world; r++)
        for (int spins = 0; c->node->progress[r].load(std::memory_order_acquire) < mark; spins++) {
            if (!wait) return false;
            if (spins > 2000) {
                usleep(20);
                if (c->node->progress[r].load(std::memory_order_acquire) < mark) comm_check_alive(c);
            }
        }
    return true;
}

// Several nodes: has the node's leader exchanged the bf16 weights up to `mark`? wait: until it has.
static bool node_exchanged(const GPT* g, int64_t mark, int wait) {
    const Comm* c = g->comm;
    for (int spins = 0; c->node->exchanged.load(std::memory_order_acquire) < mark; spins++) {
        if (!wait) return false;
        if (spins > 2000) {
            usleep(20);
            if (c->node->exchanged.load(std::memory_order_acquire) < mark) comm_check_alive(c);
        }
    }
    return true;
}

// Several nodes, after this rank updated its slice of layer l (l = L: the round's end): once every rank of
// the node has, the node's leader sends the node's part of the layer's new bf16 weights straight to every
// node and takes theirs (net_exchange, over the mesh), then marks the layer exchanged for the node's ranks.
// -sd -sw 1: the layer is the tier's one-layer buffer, which then goes to the store's whole-layer file.
static void exchange_layer(GPT* g, int64_t round, int l) {
    Comm* c = g->comm;
    const int L = g->config.num_layers;
    const int64_t mark = rank_progress_mark(g, round, l + 1);
    publish_progress(g, round, l + 1);
    if (c->local != 0) return;
    ranks_reached(g, mark, 1);
    if (l < L) {
        const ParamLayout* p = &g->layout;
        uint16_t* whole = g->ssd ? g->ssd->whole : NULL;
        const int64_t off = whole ? 0 : gpt_layer_offset(p, l);
        std::vector<int64_t> lo((size_t)c->nodes), hi((size_t)c->nodes);
        for (int n = 0; n < c->nodes; n++) {
            comm_node_part(c, p->layer_stride, n, &lo[(size_t)n], &hi[(size_t)n]);
            lo[(size_t)n] = (off + lo[(size_t)n]) * 2;
            hi[(size_t)n] = (off + hi[(size_t)n]) * 2;
        }
        uint16_t* bf16 = whole ? whole : g->stream.weights_host_bf16;
        FAKE_CUDA_HOST_ACCESS(bf16 + off, p->layer_stride * 2, true, "the nodes' exchange of a layer's bf16");
        net_exchange(&c->net, c->net.mesh, (char*)bf16, lo.data(), hi.data());
        if (whole) ssd_tier_write_whole(g, l);
    }
    c->node->exchanged.store(mark, std::memory_order_release);
}

// Layer l done: the next forward may copy it.
static void optimizer_layer_done(GPT* g, int l) {
    Optimizer* o = g->opt;
    std::lock_guard<std::mutex> lock(o->mu);
    o->layer_t1[l] = timeline_now();
    o->layers_done = l + 1;
    publish_progress(g, o->rounds_done + 1, l + 1);
    FAKE_CUDA_HOST_RELEASE(o);
    o->cv.notify_all();
}

// -sd on several ranks, rank 0's round: layer l's gradients from this rank's copy and every other rank's
// (each publishes its progress past l once its slice is on the host: optimizer_round).
static void ranks_sent_grads(GPT* g, int l) {
    stream_wait_grads_on_host(&g->stream, l);
    ranks_reached(g, rank_progress_mark(g, g->opt->rounds_done + 1, l + 1), 1, 1);
}

// -sd on several nodes: the node's store updated its part of layer l; the exchange, then as one node.
static void ssd_node_layer_done(GPT* g, int l) {
    exchange_layer(g, g->opt->rounds_done + 1, l);
    optimizer_layer_done(g, l);
}

static void optimizer_round(GPT* g) {
    const int64_t round = g->opt->rounds_done + 1;  // this thread alone changes rounds_done
    if (g->ssd) {
        SsdRound round_fns = {g, optimizer_adamw_args(g), g->opt->layer_t0,
                              g->comm->nodes > 1 ? ssd_node_layer_done : optimizer_layer_done,
                              ranks_sent_grads};
        ssd_tier_round(&round_fns);
        if (g->comm->nodes > 1) exchange_layer(g, round, g->config.num_layers);  // the round's end
        return;
    }
    if (g->ssd_ranks) {  // not the node's rank 0: its slices go to rank 0's round through the host arrays
        for (int l = g->resident_layers; l < g->config.num_layers; l++) {
            stream_wait_grads_on_host(&g->stream, l);
            g->opt->layer_t0[l] = timeline_now();
            optimizer_layer_done(g, l);  // its progress: rank 0 updates layer l once every rank's is there
        }
        if (g->comm->nodes > 1) exchange_layer(g, round, g->config.num_layers);  // the round's end
        return;
    }
    for (int l = g->resident_layers; l < g->config.num_layers; l++) {
        stream_wait_grads_on_host(&g->stream, l);
        g->opt->layer_t0[l] = timeline_now();
        adamw_layer(g, l);
        if (g->comm->nodes > 1) exchange_layer(g, round, l);
        optimizer_layer_done(g, l);
    }
    if (g->comm->nodes > 1) exchange_layer(g, round, g->config.num_layers);  // the round's end
}

static void optimizer_thread_main(GPT* g) {
    Optimizer* o = g->opt;
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(o->mu);
            o->cv.wait(lock, [o] { return o->quit || o->rounds_submitted > o->rounds_done; });
            if (o->quit && o->rounds_submitted == o->rounds_done) return;
            FAKE_CUDA_HOST_ACQUIRE(o);
        }
        auto t0 = std::chrono::steady_clock::now();
        optimizer_round(g);
        std::lock_guard<std::mutex> lock(o->mu);
        o->last_round_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        o->rounds_done++;
        o->layers_done = 0;
        publish_progress(g, o->rounds_done, g->config.num_layers + 1);  // the round's end
        o->cv.notify_all();
    }
}

static void optimizer_start(GPT* g) {
    const size_t L = (size_t)g->config.num_layers;
    g->opt = new Optimizer();
    g->opt->layer_t0 = (double*)calloc(L, sizeof(double));
    g->opt->layer_t1 = (double*)calloc(L, sizeof(double));
    if (!g->opt->layer_t0 || !g->opt->layer_t1) die("out of host memory");
    g->opt->thread = std::thread(optimizer_thread_main, g);
}
static void optimizer_stop(GPT* g) {
    Optimizer* o = g->opt;
    {
        std::lock_guard<std::mutex> lock(o->mu);
        o->quit = true;
        o->cv.notify_all();
    }
    o->thread.join();
    free(o->layer_t0);
    free(o->layer_t1);
    delete o;
    g->opt = NULL;
}

// HostReadyFn: is `layer` updated? wait: block until so.
// Several ranks: each updated its slice; the layer is ready when every rank's is.
static int optimizer_layer_ready(void* ctx, int layer, int wait) {
    GPT* g = (GPT*)ctx;
    Optimizer* o = g->opt;
    int64_t round = 0;
    {
        std::unique_lock<std::mutex> lock(o->mu);
        auto done = [o, layer] { return o->rounds_done == o->rounds_submitted || o->layers_done > layer; };
        if (wait) o->cv.wait(lock, done);
        if (!done()) return 0;
        FAKE_CUDA_HOST_ACQUIRE(o);
        round = o->rounds_submitted;
    }
    if (g->comm->world == 1 || round == 0) return 1;
    if (g->comm->nodes > 1) return node_exchanged(g, rank_progress_mark(g, round, layer + 1), wait) ? 1 : 0;
    return ranks_reached(g, rank_progress_mark(g, round, layer + 1), wait) ? 1 : 0;
}
// The rounds submitted so far are done; returns their count.
static int64_t optimizer_wait_rounds(GPT* g) {
    Optimizer* o = g->opt;
    std::unique_lock<std::mutex> lock(o->mu);
    o->cv.wait(lock, [o] { return o->rounds_done == o->rounds_submitted; });
    FAKE_CUDA_HOST_ACQUIRE(o);
    return o->rounds_submitted;
}
static void optimizer_wait_all(GPT* g) {
    vocab_head_update_wait(g);  // -E 1: the table's and the untied head's AdamW too
    const int64_t round = optimizer_wait_rounds(g);
    if (g->comm->nodes > 1 && round > 0) node_exchanged(g, rank_progress_mark(g, round + 1, 0), 1);
    else if (g->comm->world > 1 && round > 0) ranks_reached(g, rank_progress_mark(g, round + 1, 0), 1);
}
static void optimizer_submit(GPT* g, float lr, float grad_scale) {
    optimizer_wait_all(
        g);  // the forward waited for every layer; -sw 1: the round's last writes may not be done
    if (g->ssd) ssd_tier_submit(g);
    Optimizer* o = g->opt;
    std::lock_guard<std::mutex> lock(o->mu);
    o->lr = lr;
    o->grad_scale = grad_scale;
    o->t = ++g->adam_t;
    o->layers_done = 0;
    o->rounds_submitted++;
    FAKE_CUDA_HOST_RELEASE(o);
    o->cv.notify_all();
}

// Layer l's gradients to host: pinned, or -sd's ring.
static void send_layer_grads(GPT* g, int l) {
    if (g->ssd && !g->ssd_ranks) ssd_tier_send_grads(g, l);
    else stream_send_layer_grads(&g->stream, l);
}
