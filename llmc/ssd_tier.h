// ssd_tier.h — train_gpt's use of an SsdStore (-sd DIR, docs/ssd.md).
// Streamed layers' optimizer state lives on disk (several nodes: each node's part of each layer, in its own
// store).

// The step calls it in one line where it acts:
//   backward pass: ssd_tier_begin_backward, and send_layer_grads -> ssd_tier_send_grads
//   CPU AdamW: ssd_tier_submit, then the optimizer thread's ssd_tier_round
//   checkpoint: ssd_tier_checkpoint; -sw 1: the stream's reader, sw_reader

// Not here: the store and its I/O (ssd_store.cpp, ssd_io.cpp), AdamW (cpu_adam.h), loading (train_gpt.cu).

// FAKE_CUDA_HOST_*: emulator checks (cuda_common.h), empty in a real build.
#pragma once
#include <condition_variable>
#include <mutex>
#include <thread>
#include "llmc/adamw.h"        // defines: AdamWArgs
#include "llmc/checkpoint.h"   // defines: StreamedState
#include "llmc/collectives.h"  // defines: comm_node_part
#include "llmc/cpu_adam.h"     // defines: adamw_tensors_window_bf16grad
#include "llmc/gpt.cuh"        // defines: struct GPT
#include "llmc/gpu_args.h"     // defines: TIER_*, SW_READ_BUFFERS
#include "llmc/ssd.h"          // defines: SsdStore, ssd_store_round, ssd_store_checkpoint, ssd_store_wait
#include "llmc/stream.h"       // defines: HostReader, stream_send_layer_grads_to, pinned_alloc_direct_io

// Pinned layer buffers for gradients on their way to disk
#define GRAD_RING 3
static inline int64_t grads_ring_bytes(const ParamLayout* p) { return direct_io_bytes(p->layer_stride * 2); }

struct SsdTier {
    SsdStore* store;  // layer R + i is store layer i
    // the layers' elements [part_lo, part_lo + part_n) the store holds: all of them, or on several nodes the
    // node's part (comm_node_part); store element e is layer element part_lo + e
    int64_t part_lo, part_n;
    bool weights_on_disk;  // -sw 1: streamed bf16 weights are in the store too
    bool hands_over;       // -sw 1 on one node: the round hands its layers to the forward (handoff, below)
    // -sw 1 on several nodes: the store's DIR/layers.bf16 holds whole layers (whole_bf16_elems); the round
    // writes its part of layer l's new bf16 weights here, the nodes' exchange the others', then the store the
    // layer (ssd_tier_write_whole). Pinned, one layer.
    uint16_t* whole;
    bool keep_state;  // -sk 1: checkpoints' state files hold the store's m and v too (ssd_attach sets it)
    // the writer thread drains the main thread's sends to disk
    std::thread thread;
    std::mutex mu;
    std::condition_variable cv;
    uint16_t* buf[GRAD_RING];  // grads_ring_bytes each, 4096-aligned for O_DIRECT
    bool busy[GRAD_RING];      // sent, not yet on disk
    int next;                  // the buffer of the next send
    int queue_layer[GRAD_RING], queue_buf[GRAD_RING], queued;  // sends the writer has yet to take
    int64_t queue_pass[GRAD_RING];                             // the backward pass of each
    int64_t* written_pass;  // per layer: the backward pass the grads file holds
    // The backward's last GRAD_RING sends are the next round's first layers: they stay in their buffer
    // (busy, never written) and the round reads them from there (ssd_round_grads); it frees the buffer.
    int held_layer[GRAD_RING];  // the layer a buffer holds for the round, -1: none
    int64_t pass;               // backward passes so far
    int64_t round_pass;         // the backward pass the next AdamW round reads
    bool quit;
    // -sw 1: the round copies a layer's new bf16 weights into a free handoff buffer as it updates them, and
    // the next forward pass copies the layer to the GPU from there instead of reading back what the round
    // wrote (sw_lend). The round never waits for a buffer: without a free one, the layer is read from disk.
    uint16_t* handoff[SW_HANDOFF_BUFFERS];  // direct_io_bytes(layer_stride * 2) each, pinned
    int handoff_layer[SW_HANDOFF_BUFFERS];  // the layer it holds, fills or was lent for (-1: none)
    int handoff_state[SW_HANDOFF_BUFFERS];  // HANDOFF_*
    cudaEvent_t handoff_copied[SW_HANDOFF_BUFFERS];
    int handoff_next;  // the round has decided layers below this one (the rest: to come); L: no round due
};
enum { HANDOFF_FREE, HANDOFF_FILLING, HANDOFF_FILLED, HANDOFF_LENT, HANDOFF_COPYING };

// Disk errors exit at once (die: one line, several ranks' too): the main thread may be mid-step.
static void disk_error_text(const GPT* g, const char* what, const char* err, char* out, size_t n) {
    if (strstr(err, " is gone with it"))  // a file of the last checkpoint's generation removed mid-run
        snprintf(
            out, n,
            "%s: %s (no checkpoint of this store resumes; -o's model files are complete: start again from "
            "the last with -e, its AdamW state lost)",
            what, err);
    else if (g->checkpoint_step >= 0)  // rounds never write the last checkpoint's generation
        snprintf(out, n, "%s: %s (the last complete checkpoint is intact, step %lld: resume with -y 1)", what,
                 err, (long long)g->checkpoint_step);
    else snprintf(out, n, "%s: %s (no checkpoint was complete yet: nothing to resume)", what, err);
}
static void die_disk(const GPT* g, const char* what, const char* err) {
    char line[4608];
    disk_error_text(g, what, err, line, sizeof line);
    die("%s", line);
}
// A checkpoint's read from the store failed: err becomes the line that ends the run (checkpoint_save and
// gather_node_state say it). Returns 0.
static int ssd_checkpoint_read_failed(const GPT* g, char* err, size_t errlen) {
    const std::string e = err;
    disk_error_text(g, "reading the SSD tier for the checkpoint", e.c_str(), err, errlen);
    return 0;
}

// gpt_build's tier, before ssd_attach (llmc/run_weights.cuh) opens its store.
static SsdTier* ssd_tier_new(const GPT* g, int tier) {
    SsdTier* t = new SsdTier();
    t->weights_on_disk = tier == TIER_SSD_WEIGHTS;
    t->hands_over = t->weights_on_disk && g->comm->nodes == 1;
    t->part_lo = 0;
    t->part_n = g->layout.layer_stride;
    if (g->comm->nodes > 1) {
        int64_t hi;
        comm_node_part(g->comm, g->layout.layer_stride, g->comm->node_rank, &t->part_lo, &hi);
        t->part_n = hi - t->part_lo;
    }
    const int64_t bytes = grads_ring_bytes(&g->layout);
    for (int k = 0; k < GRAD_RING && !g->ssd_ranks; k++)  // several ranks: the gradients stay in host RAM
        t->buf[k] = (uint16_t*)pinned_alloc_direct_io(bytes, "the gradients' ring (written to -sd)");
    t->written_pass = (int64_t*)calloc((size_t)g->config.num_layers, sizeof(int64_t));
    if (!t->written_pass) die("out of host memory");
    for (int k = 0; k < GRAD_RING; k++) t->held_layer[k] = -1;
    t->handoff_next = g->config.num_layers;
    if (t->weights_on_disk && !t->hands_over)
        t->whole = (uint16_t*)pinned_alloc_direct_io(direct_io_bytes(g->layout.layer_stride * 2),
                                                     "a layer's bf16 weights, the nodes' parts (-sw 1)");
    for (int b = 0; t->hands_over && b < SW_HANDOFF_BUFFERS; b++) {
        t->handoff[b] = (uint16_t*)pinned_alloc_direct_io(direct_io_bytes(g->layout.layer_stride * 2),
                                                          "the round's bf16 handoff buffers (-sw 1)");
        t->handoff_layer[b] = -1;
        cudaCheck(cudaEventCreateWithFlags(&t->handoff_copied[b], cudaEventDisableTiming));
    }
    return t;
}

// Writer thread: sent layers' gradients to the grads file.
static void grads_writer_main(GPT* g) {
    SsdTier* t = g->ssd;
    [[maybe_unused]] const int64_t bytes = g->layout.layer_stride * 2;  // the emulator's check
    for (;;) {
        int l, k;
        int64_t pass;
        {
            std::unique_lock<std::mutex> lock(t->mu);
            t->cv.wait(lock, [t] { return t->quit || t->queued > 0; });
            if (t->queued == 0) return;
            l = t->queue_layer[0];
            k = t->queue_buf[0];
            pass = t->queue_pass[0];
            t->queued--;
            for (int q = 0; q < t->queued; q++) {
                t->queue_layer[q] = t->queue_layer[q + 1];
                t->queue_buf[q] = t->queue_buf[q + 1];
                t->queue_pass[q] = t->queue_pass[q + 1];
            }
        }
        stream_wait_grads_on_host(&g->stream, l);
        FAKE_CUDA_HOST_ACCESS(t->buf[k], bytes, false, "the gradient writer reading a layer's gradients");
        char err[1024];
        const SsdReq r = ssd_store_write_grads_async(t->store, l - g->resident_layers, t->buf[k]);
        if (ssd_store_wait(t->store, r, err, sizeof err) != 0)
            die_disk(g, "writing the gradients to the SSD tier", err);
        std::lock_guard<std::mutex> lock(t->mu);
        t->busy[k] = false;
        t->written_pass[l] = pass;
        FAKE_CUDA_HOST_RELEASE(t);
        t->cv.notify_all();
    }
}
static void ssd_tier_start_writer(GPT* g) { g->ssd->thread = std::thread(grads_writer_main, g); }

static void ssd_tier_free(GPT* g) {
    SsdTier* t = g->ssd;
    if (!t) return;
    if (t->thread.joinable()) {
        {
            std::lock_guard<std::mutex> lock(t->mu);
            t->quit = true;
            t->cv.notify_all();
        }
        t->thread.join();
    }
    for (int k = 0; k < GRAD_RING; k++)
        if (t->buf[k]) pinned_free_direct_io(t->buf[k]);
    if (t->whole) pinned_free_direct_io(t->whole);
    for (int b = 0; t->hands_over && b < SW_HANDOFF_BUFFERS; b++) {
        pinned_free_direct_io(t->handoff[b]);
        cudaCheck(cudaEventDestroy(t->handoff_copied[b]));
    }
    free(t->written_pass);
    if (t->store) ssd_store_close(t->store);
    delete t;
    g->ssd = NULL;
}

// Each backward pass is a new generation of the grads file. Buffers still held for a round that did not run
// (an update skipped) are free again: the forward before this pass waited for every layer's update, and a
// round frees each held buffer at its layer's last piece (ssd_round_update).
static void ssd_tier_begin_backward(GPT* g) {
    if (!g->ssd) return;
    SsdTier* t = g->ssd;
    std::lock_guard<std::mutex> lock(t->mu);
    t->pass++;
    for (int k = 0; k < GRAD_RING; k++)
        if (t->held_layer[k] >= 0) {
            t->held_layer[k] = -1;
            t->busy[k] = false;
        }
}

// Layer l's gradients into a ring buffer, queued for the writer.
static void ssd_tier_send_grads(GPT* g, int l) {
    SsdTier* t = g->ssd;
    const int k = t->next;
    t->next = (k + 1) % GRAD_RING;
    {
        std::unique_lock<std::mutex> lock(t->mu);
        t->cv.wait(lock, [t, k] { return !t->busy[k]; });
        FAKE_CUDA_HOST_ACQUIRE(t);
        t->busy[k] = true;
    }
    stream_send_layer_grads_to(&g->stream, l, t->buf[k]);
    std::lock_guard<std::mutex> lock(t->mu);
    if (l - g->resident_layers < GRAD_RING) {  // the round's first layers: kept here, not written
        t->held_layer[k] = l;
        t->written_pass[l] = t->pass;
        t->cv.notify_all();
        return;
    }
    t->queue_layer[t->queued] = l;
    t->queue_buf[t->queued] = k;
    t->queue_pass[t->queued] = t->pass;
    t->queued++;
    t->cv.notify_all();
}

// This step's round reads this backward pass's gradients. -sw 1: its layers are to be handed over; what the
// last round handed and no pass took is stale.
static void ssd_tier_submit(GPT* g) {
    SsdTier* t = g->ssd;
    std::lock_guard<std::mutex> lock(t->mu);
    t->round_pass = t->pass;
    if (!t->hands_over) return;
    t->handoff_next = g->resident_layers;
    for (int b = 0; b < SW_HANDOFF_BUFFERS; b++)
        if (t->handoff_state[b] == HANDOFF_FILLED) {
            t->handoff_state[b] = HANDOFF_FREE;
            t->handoff_layer[b] = -1;
        }
}

// ----------------------------------------------------------------------------
// AdamW over the store (ssd_store_round): read ahead, update, write behind

static_assert(std::atomic<uint8_t>::is_always_lock_free, "sw_gen lives in memory several processes map");
// Rank 0 of several, -sw 1: the generation holding store layer i's newest bf16 (all layers: i < 0), for the
// other ranks' reads. Before the layer's progress is published, which orders it for them.
static void sw_publish_gen(GPT* g, int i) {
    if (!g->sw_gen || !g->ssd) return;
    const int n = g->config.num_layers - g->resident_layers;
    for (int k = i < 0 ? 0 : i; k < (i < 0 ? n : i + 1); k++)
        g->sw_gen[k].store((uint8_t)ssd_store_layer_gen(g->ssd->store, k), std::memory_order_release);
}

// The optimizer thread's inputs to a round.
typedef struct {
    GPT* g;
    AdamWArgs adamw;
    double* layer_t0;                   // the timeline's start of each layer's update
    void (*layer_done)(GPT* g, int l);  // layer l updated: the next forward may copy it
    // several ranks (g->ssd_ranks): waits until every rank's slice of layer l's gradients is in the node's
    // host arrays (stream.grads_host_bf16), which the round then reads
    void (*grads_sent)(GPT* g, int l);
    int handoff = -1;  // -sw 1: the handoff buffer of the layer being updated, or -1
} SsdRound;

// ssd.h's SsdRoundFns; store layer i is layer R + i.
// The ring buffer holding layer l's gradients for the round (ssd_tier_send_grads), or -1: the grads file.
static int held_buffer(GPT* g, int l) {
    SsdTier* t = g->ssd;
    std::lock_guard<std::mutex> lock(t->mu);
    for (int k = 0; k < GRAD_RING; k++)
        if (t->held_layer[k] == l) return k;
    return -1;
}
static int ssd_round_grads_in_ram(void* ctx, int i) {
    GPT* g = ((SsdRound*)ctx)->g;
    return held_buffer(g, g->resident_layers + i) >= 0;
}
static const uint16_t* ssd_round_grads(void* ctx, int i) {
    SsdRound* r = (SsdRound*)ctx;
    GPT* g = r->g;
    const int l = g->resident_layers + i;
    if (g->ssd_ranks) {  // the store's grads_on_disk = 0: from the node's host arrays
        r->grads_sent(g, l);
        r->layer_t0[l] = timeline_now();
        // several nodes: the arrays hold the node's part, the store's (grads_base = part_lo)
        const uint16_t* grads = g->stream.grads_host_bf16 + (int64_t)l * g->stream.grads_stride;
        FAKE_CUDA_HOST_ACCESS(grads, g->ssd->part_n * 2, false, "the CPU AdamW reading a layer's gradients");
        return grads;
    }
    const int k = held_buffer(g, l);
    r->layer_t0[l] = timeline_now();
    if (k < 0) return NULL;  // in the grads file, written before the round began
    stream_wait_grads_on_host(&g->stream, l);
    FAKE_CUDA_HOST_ACCESS(g->ssd->buf[k], g->layout.layer_stride * 2, false,
                          "the CPU AdamW reading held gradients");
    return g->ssd->buf[k];
}
// -sw 1, at layer l's first piece: a free handoff buffer for its bf16 (a lent one once its copy has run), or
// -1. Either way layer l is decided: the pass waiting in sw_lend learns where to take it from.
static int handoff_claim(GPT* g, int l) {
    SsdTier* t = g->ssd;
    std::lock_guard<std::mutex> lock(t->mu);
    t->handoff_next = l + 1;
    t->cv.notify_all();
    for (int b = 0; b < SW_HANDOFF_BUFFERS; b++) {
        if (t->handoff_state[b] == HANDOFF_COPYING) {
            const cudaError_t e = cudaEventQuery(t->handoff_copied[b]);
            if (e == cudaErrorNotReady) continue;
            cudaCheck(e);
        } else if (t->handoff_state[b] != HANDOFF_FREE) continue;
        t->handoff_state[b] = HANDOFF_FILLING;
        t->handoff_layer[b] = l;
        return b;
    }
    return -1;
}
static void ssd_round_update(void* ctx, int i, int64_t off, int64_t n, float* params, const uint16_t* grads,
                             float* m, float* v, uint16_t* bf16_out) {
    SsdRound* r = (SsdRound*)ctx;
    GPT* g = r->g;
    const ParamLayout* p = &g->layout;
    SsdTier* t = g->ssd;
    adamw_tensors_window_bf16grad(NUM_LAYER_TENSORS, p->layer_offset, p->layer_size, layer_is_matrix(g),
                                  t->part_lo + off, n, params, grads, m, v, bf16_out, &r->adamw);
    const int l = g->resident_layers + i;
    // The layer's held gradients are used: the buffer is free. Now, not at layer_done: with -sw 1 the next
    // pass may reach its backward before that.
    if (off + n == t->part_n) {
        std::lock_guard<std::mutex> lock(t->mu);
        for (int k = 0; k < GRAD_RING; k++)
            if (t->held_layer[k] == l) {
                t->held_layer[k] = -1;
                t->busy[k] = false;
                FAKE_CUDA_HOST_RELEASE(t);
                t->cv.notify_all();
            }
    }
    if (!t->hands_over) return;
    if (off == 0) r->handoff = handoff_claim(g, l);
    if (r->handoff < 0) return;
    uint16_t* dst = t->handoff[r->handoff] + off;
    FAKE_CUDA_HOST_ACCESS(dst, n * 2, true, "the CPU AdamW handing a layer's bf16 over (-sw 1)");
    copy_bf16(bf16_out, dst, n);
    if (off + n < t->part_n) return;
    std::lock_guard<std::mutex> lock(t->mu);  // the whole layer is there: the pass may take it
    t->handoff_state[r->handoff] = HANDOFF_FILLED;
    FAKE_CUDA_HOST_RELEASE(t);
    t->cv.notify_all();
}
// Where the round writes its part of store layer i's new bf16 weights, the store holding none (several
// nodes): the node's host copy, or with -sw 1 the layer the nodes' exchange completes (ssd_tier_write_whole).
static uint16_t* ssd_round_bf16_dst(void* ctx, int i) {
    GPT* g = ((SsdRound*)ctx)->g;
    uint16_t* dst =
        (g->ssd->whole ? g->ssd->whole
                       : g->stream.weights_host_bf16 + gpt_layer_offset(&g->layout, g->resident_layers + i)) +
        g->ssd->part_lo;
    FAKE_CUDA_HOST_ACCESS(dst, g->ssd->part_n * 2, true, "the CPU AdamW writing a layer's bf16 copy");
    return dst;
}
static void ssd_round_layer_done(void* ctx, int i) {
    SsdRound* r = (SsdRound*)ctx;
    sw_publish_gen(r->g, i);  // -sw 1: written there
    r->layer_done(r->g, r->g->resident_layers + i);
}

// -sw 1 on several nodes: layer l's bf16 weights, whole in g->ssd->whole (load, or the round and the nodes'
// exchange), into the store's DIR/layers.bf16, through the page cache, where the node's ranks read it.
static void ssd_tier_write_whole(GPT* g, int l) {
    char err[1024];
    FAKE_CUDA_HOST_ACCESS(g->ssd->whole, g->layout.layer_stride * 2, false, "writing a layer's whole bf16");
    if (ssd_store_write_whole_bf16(g->ssd->store, l - g->resident_layers, g->ssd->whole, err, sizeof err) !=
        0)
        die_disk(g, "writing the bf16 weights to the SSD tier", err);
}

// Waits until every streamed layer's round gradients are on disk.
static void ssd_tier_wait_grads(GPT* g) {
    SsdTier* t = g->ssd;
    std::unique_lock<std::mutex> lock(t->mu);
    const int64_t pass = t->round_pass;
    t->cv.wait(lock, [g, t, pass] {
        for (int l = g->resident_layers; l < g->config.num_layers; l++)
            if (t->written_pass[l] < pass) return false;
        return true;
    });
}

// One AdamW round over the store, in layer order.
static void ssd_tier_round(SsdRound* round) {
    GPT* g = round->g;
    const int n = g->config.num_layers - g->resident_layers;
    int* layers = (int*)malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (!layers) die_disk(g, "the SSD tier's AdamW round", "out of host memory");
    for (int i = 0; i < n; i++) layers[i] = i;
    if (!g->ssd_ranks) ssd_tier_wait_grads(g);  // the round reads ahead from the grads file
    SsdRoundFns fns = {ssd_round_grads, ssd_round_update,      ssd_round_bf16_dst, ssd_round_layer_done,
                       round,           ssd_round_grads_in_ram};
    char err[1024];
    if (ssd_store_round(g->ssd->store, layers, n, &fns, err, sizeof err) != 0)
        die_disk(g, "the SSD tier's AdamW round", err);
    // several nodes, -sw 1: the round's layers.bf16 on the disk (its write-back's errors said here, once a
    // round)
    if (ssd_store_sync_whole(g->ssd->store, err, sizeof err) != 0)
        die_disk(g, "writing the bf16 weights to the SSD tier", err);
    free(layers);
}

// ----------------------------------------------------------------------------
// -sw 1: the stream's HostReader reads bf16 weights from the store

// Several ranks of a node: each reads the store's files through the page cache (g->sw_files), where one
// rank's read serves the others; the generation is the one rank 0 published with the layer's progress
// (sw_publish_gen), which the stream's host_ready waited for.
static int64_t sw_read_start(void* ctx, int l, uint16_t* dst) {
    GPT* g = (GPT*)ctx;
    FAKE_CUDA_HOST_ACCESS(dst, g->layout.layer_stride * 2, true, "a disk read into a weights' read buffer");
    const int i = l - g->resident_layers;
    if (g->sw_files)  // several nodes: one file, no generations
        return ssd_bf16_files_read(g->sw_files, g->sw_gen ? g->sw_gen[i].load(std::memory_order_acquire) : 0,
                                   i, dst);
    return ssd_store_read_bf16_async(g->ssd->store, i, dst);
}
static int sw_read_done(void* ctx, int64_t req, int wait) {
    GPT* g = (GPT*)ctx;
    SsdIo* io = g->sw_files ? ssd_bf16_files_io(g->sw_files) : ssd_store_io(g->ssd->store);
    if (!wait && !ssd_io_poll(io, req)) return 0;
    char err[1024];
    if (ssd_io_wait(io, req, err, sizeof err) != 0)
        die_disk(g, "reading the bf16 weights from the SSD tier", err);
    return 1;
}
// HostReader.lend: layer l from a handoff buffer (handoff_claim). buf NULL: only asks.
static int sw_lend(void* ctx, int l, int wait, const uint16_t** buf) {
    SsdTier* t = ((GPT*)ctx)->ssd;
    std::unique_lock<std::mutex> lock(t->mu);
    for (;;) {
        int b = 0;
        while (b < SW_HANDOFF_BUFFERS &&
               !(t->handoff_layer[b] == l &&
                 (t->handoff_state[b] == HANDOFF_FILLING || t->handoff_state[b] == HANDOFF_FILLED)))
            b++;
        if (b == SW_HANDOFF_BUFFERS && l < t->handoff_next) return -1;  // decided: from disk
        if (b < SW_HANDOFF_BUFFERS && !buf) return 1;
        if (b < SW_HANDOFF_BUFFERS && t->handoff_state[b] == HANDOFF_FILLED) {
            FAKE_CUDA_HOST_ACQUIRE(t);
            t->handoff_state[b] = HANDOFF_LENT;
            *buf = t->handoff[b];
            return 1;
        }
        if (!wait) return 0;
        t->cv.wait(lock);
    }
}
// HostReader.lent_copied: the buffer is free once the copy queued on `stream` has run.
static void sw_lent_copied(void* ctx, int l, cudaStream_t stream) {
    SsdTier* t = ((GPT*)ctx)->ssd;
    std::lock_guard<std::mutex> lock(t->mu);
    for (int b = 0; b < SW_HANDOFF_BUFFERS; b++)
        if (t->handoff_layer[b] == l && t->handoff_state[b] == HANDOFF_LENT) {
            cudaCheck(cudaEventRecord(t->handoff_copied[b], stream));
            t->handoff_state[b] = HANDOFF_COPYING;
            t->handoff_layer[b] = -1;
            return;
        }
    die("internal: layer %d's handoff buffer was not lent", l);
}
// g may be NULL: sizes only, for the memory plan. Several ranks: rank 0's round hands its layers to rank 0;
// several nodes: to none (each node's round has its part).
static HostReader sw_reader(GPT* g, const ParamLayout* p, int resident_layers) {
    const int64_t bytes = ssd_round_up(p->layer_stride * 2, SSD_ALIGN);
    const bool lends = !g || (g->comm->local == 0 && g->comm->nodes == 1);
    const HostReader r = {sw_read_start,
                          sw_read_done,
                          g,
                          SW_READ_BUFFERS,
                          bytes,
                          resident_layers,
                          lends ? sw_lend : NULL,
                          lends ? sw_lent_copied : NULL};
    return r;
}
// -sw 1's handoff buffers, for the memory plan
static int64_t sw_handoff_bytes(const ParamLayout* p) {
    return SW_HANDOFF_BUFFERS * direct_io_bytes(p->layer_stride * 2);
}

// ----------------------------------------------------------------------------
// Checkpoints, fault injection, the timeline

// StreamedState's read_layer: layer l's newest fp32 weights from the store (several nodes: the node's part,
// at its place in params).
static int ssd_read_layer_params(void* ctx, int l, float* params, char* err, size_t errlen) {
    GPT* g = (GPT*)ctx;
    SsdStore* st = g->ssd->store;
    if (ssd_store_read_layer(st, l - g->resident_layers, params + g->ssd->part_lo, NULL, NULL, NULL, err,
                             errlen) != 0)
        return ssd_checkpoint_read_failed(g, err, errlen);
    return 1;
}
// -sk 1: layer l's AdamW m (which 1) or v (2), as ssd_read_layer_params.
static int ssd_read_layer_moment(void* ctx, int which, int l, float* out, char* err, size_t errlen) {
    GPT* g = (GPT*)ctx;
    float* at = out + g->ssd->part_lo;
    if (ssd_store_read_layer(g->ssd->store, l - g->resident_layers, NULL, which == 1 ? at : NULL,
                             which == 2 ? at : NULL, NULL, err, errlen) != 0)
        return ssd_checkpoint_read_failed(g, err, errlen);
    return 1;
}
// The store's state becomes this step's checkpoint (fsync, manifest).
static StreamedState ssd_tier_checkpoint(GPT* g) {
    char err[1024];
    if (ssd_store_checkpoint(g->ssd->store, g->step, err, sizeof err) != 0)
        die_disk(g, "the SSD tier's checkpoint", err);
    sw_publish_gen(g, -1);  // layers it copied to the checkpoint's generation
    // what the state file and model_S.bin read
    return {g->host_state_count, g->step, g->resident_layers, ssd_read_layer_params, g, NULL, NULL, 0};
}

// Test hook: SSD_FAULT="WRITE,AFTER,ERRNO" fails chunk AFTER+1 of writes (1) or reads (0).
// ERRNO 0: a short transfer.
// -sw 1 on several ranks: each rank's reads of the bf16 weights (sw_files) count their own chunks.
static void ssd_set_fault_from_env(SsdIo* io) {
    const char* e = getenv("SSD_FAULT");
    if (!e || !e[0]) return;
    int write = 0;
    long long after = 0;
    char what[16] = "";
    if (sscanf(e, "%d,%lld,%15s", &write, &after, what) != 3) die("SSD_FAULT=%s: want WRITE,AFTER,ERRNO", e);
    const int kill = strcmp(what, "kill") == 0;  // "kill": the process dies at that chunk
    ssd_io_set_fault(io, write, after, kill ? 0 : atoi(what), kill);
}

// -Y 1: disk reads and writes as timeline tracks.
static void ssd_tier_timeline(GPT* g) {
    if (!g->timeline || !g->ssd) return;
    SsdBusySpan spans[TIMELINE_DISK_SPANS];
    // the store's reads and writes; -sw 1 on several ranks: this rank's bf16 reads through the page cache
    SsdIo* const ios[2] = {ssd_store_io(g->ssd->store), g->sw_files ? ssd_bf16_files_io(g->sw_files) : NULL};
    for (int write = 0; write <= 1; write++)
        for (SsdIo* io : ios) {
            if (!io) continue;
            const int n = ssd_io_busy_spans(io, write, g->timeline->origin_host, spans, TIMELINE_DISK_SPANS);
            const int track = write ? TRACK_DISK_WRITE : TRACK_DISK_READ;
            for (int i = 0; i < n; i++)
                timeline_host_span(g->timeline, track, write ? "write" : "read", -1, spans[i].t0,
                                   spans[i].t1);
        }
}
