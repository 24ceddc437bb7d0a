// cpu_optimizer.cuh — the CPU optimizer thread of train_gpt: AdamW of the streamed layers, one round per
// step, in layer order, overlapping the next forward pass (which waits per layer: optimizer_block_ready).
// With -sd the round runs over the SSD store (ssd_store_round), the gradients go to disk through a writer
// thread (GradsWriter), and with -sw 1 the stream reads the bf16 weights back from the store (sw_read_*). Not
// here: the AdamW math (cpu_adam.h), the disk I/O (ssd.cpp), the GPU side of the hand-overs (stream.cu).
// FAKE_CUDA_HOST_*: the emulated build's checks of host accesses (cuda_common.h); nothing in a real build.
#pragma once
#include <chrono>
#include "adamw.h"     // defines: ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS, adamw_layer_block_bf16grad
#include "cpu_adam.h"  // defines: adamw_tensors_window_bf16grad
#include "gpt.cuh"     // defines: struct GPT, Optimizer, GradsWriter

static void adamw_layer(GPT* g, int l) {
    Optimizer* o = g->opt;
    AdamWArgs args = {o->lr, ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS, g->args.weight_decay, o->grad_scale, o->t};
    const ParamLayout* p = &g->layout;
    const int64_t off = gpt_layer_offset(p, l);
    const uint16_t* grads = g->stream.grads_host_bf16 + (int64_t)l * p->layer_stride;
    uint16_t* bf16_out = g->stream.weights_host_bf16 + off;
    FAKE_CUDA_HOST_ACCESS(grads, p->layer_stride * 2, false, "the CPU AdamW reading a layer's gradients");
    FAKE_CUDA_HOST_ACCESS(bf16_out, p->layer_stride * 2, true, "the CPU AdamW writing a layer's bf16 copy");
    adamw_layer_block_bf16grad(p, g->master + off, grads, g->adam_m + off, g->adam_v + off, bf16_out, &args);
}

// The round's callbacks with -sd (ssd.h SsdRoundFns): store layer i is layer R + i.
static const uint16_t* ssd_round_grads(void* ctx, int i) {
    GPT* g = (GPT*)ctx;
    g->opt->block_t0[g->resident_layers + i] = timeline_now();
    return NULL;  // grads_on_disk: in the grads file, all of them before the round began (ssd_round)
}
static void ssd_round_update(void* ctx, int i, int64_t off, int64_t n, float* params, const uint16_t* grads,
                             float* m, float* v, uint16_t* bf16_out) {
    GPT* g = (GPT*)ctx;
    Optimizer* o = g->opt;
    const AdamWArgs args = {o->lr,         ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS, g->args.weight_decay,
                            o->grad_scale, o->t};
    const ParamLayout* p = &g->layout;
    adamw_tensors_window_bf16grad(NUM_LAYER_TENSORS, p->layer_offset, p->layer_size, layer_tensor_is_matrix,
                                  off, n, params, grads, m, v, bf16_out, &args);
}
static uint16_t* ssd_round_bf16_dst(void* ctx, int i) {
    GPT* g = (GPT*)ctx;
    uint16_t* dst = g->stream.weights_host_bf16 + gpt_layer_offset(&g->layout, g->resident_layers + i);
    FAKE_CUDA_HOST_ACCESS(dst, g->layout.layer_stride * 2, true, "the CPU AdamW writing a layer's bf16 copy");
    return dst;
}
// Layer l is updated: what the in-RAM loop does after adamw_layer (the stream's host-ready protocol).
static void optimizer_layer_done(GPT* g, int l) {
    Optimizer* o = g->opt;
    std::lock_guard<std::mutex> lock(o->mu);
    o->block_t1[l] = timeline_now();
    o->blocks_done = l + 1;
    FAKE_CUDA_HOST_RELEASE(o);
    o->cv.notify_all();
}
static void ssd_round_layer_done(void* ctx, int i) {
    GPT* g = (GPT*)ctx;
    optimizer_layer_done(g, g->resident_layers + i);
}

// -sd, the writer thread: each sent layer's gradients, once on the host, into the store's grads file.
static void die_disk(const GPT* g, const char* what, const char* err);
static void grads_writer_main(GPT* g) {
    GradsWriter* w = g->gw;
    [[maybe_unused]] const int64_t bytes = g->layout.layer_stride * 2;  // the emulator's host-access check
    for (;;) {
        int l, k;
        int64_t pass;
        {
            std::unique_lock<std::mutex> lock(w->mu);
            w->cv.wait(lock, [w] { return w->quit || w->queued > 0; });
            if (w->queued == 0) return;
            l = w->queue_layer[0];
            k = w->queue_slot[0];
            pass = w->queue_pass[0];
            w->queued--;
            for (int q = 0; q < w->queued; q++) {
                w->queue_layer[q] = w->queue_layer[q + 1];
                w->queue_slot[q] = w->queue_slot[q + 1];
                w->queue_pass[q] = w->queue_pass[q + 1];
            }
        }
        stream_wait_grads_on_host(&g->stream, l);
        FAKE_CUDA_HOST_ACCESS(w->buf[k], bytes, false, "the gradient writer reading a layer's gradients");
        char err[1024];
        const SsdReq r = ssd_store_write_grads_async(g->ssd, l - g->resident_layers, w->buf[k]);
        if (ssd_store_wait(g->ssd, r, err, sizeof err) != 0)
            die_disk(g, "writing the gradients to the SSD tier", err);
        std::lock_guard<std::mutex> lock(w->mu);
        w->busy[k] = false;
        w->written_pass[l] = pass;
        FAKE_CUDA_HOST_RELEASE(w);
        w->cv.notify_all();
    }
}

// Sends streamed layer l's gradients to the host: the pinned array (in RAM), or with -sd a free ring slot,
// queued for the writer once the copy is enqueued (its grads_on_host event recorded).
static void send_layer_grads(GPT* g, int l) {
    GradsWriter* w = g->gw;
    if (!w) {
        stream_send_layer_grads(&g->stream, l);
        return;
    }
    const int k = w->next;
    w->next = (k + 1) % GRAD_RING;
    {
        std::unique_lock<std::mutex> lock(w->mu);
        w->cv.wait(lock, [w, k] { return !w->busy[k]; });
        FAKE_CUDA_HOST_ACQUIRE(w);
        w->busy[k] = true;
    }
    stream_send_layer_grads_to(&g->stream, l, w->buf[k]);
    std::lock_guard<std::mutex> lock(w->mu);
    w->queue_layer[w->queued] = l;
    w->queue_slot[w->queued] = k;
    w->queue_pass[w->queued] = w->pass;
    w->queued++;
    w->cv.notify_all();
}

// A disk error during a round: one line, and out at once (the main thread may be inside a step). The
// store's last checkpoint generation is never written by a round, so the last checkpoint stays intact.
static void die_disk(const GPT* g, const char* what, const char* err) {
    fflush(stdout);
    if (g->checkpoint_step >= 0)
        fprintf(stderr,
                "error: %s: %s (the last complete checkpoint is intact, step %lld: resume with -y 1)\n", what,
                err, (long long)g->checkpoint_step);
    else fprintf(stderr, "error: %s: %s (no checkpoint was complete yet: nothing to resume)\n", what, err);
    fflush(stderr);
    _exit(1);
}

// -sw 1: the stream's HostReader (stream.h). The streamed layers' bf16 weights are read from the store into
// SW_READ_BUFFERS pinned buffers, ahead of each layer's copy to the GPU, in every pass.
static int64_t sw_read_start(void* ctx, int l, uint16_t* dst) {
    GPT* g = (GPT*)ctx;
    FAKE_CUDA_HOST_ACCESS(dst, g->layout.layer_stride * 2, true, "a disk read into a weights' read buffer");
    return ssd_store_read_bf16_async(g->ssd, l - g->resident_layers, dst);
}
static int sw_read_done(void* ctx, int64_t req, int wait) {
    GPT* g = (GPT*)ctx;
    if (!wait && !ssd_io_poll(ssd_store_io(g->ssd), req)) return 0;
    char err[1024];
    if (ssd_store_wait(g->ssd, req, err, sizeof err) != 0)
        die_disk(g, "reading the bf16 weights from the SSD tier", err);
    return 1;
}
static HostReader sw_reader(GPT* g, const ParamLayout* p, int resident_layers) {
    const HostReader r = {
        sw_read_start,  sw_read_done, g, SW_READ_BUFFERS, ssd_round_up(p->layer_stride * 2, SSD_ALIGN),
        resident_layers};
    return r;
}

// Test hook: env SSD_FAULT="WRITE,AFTER,ERRNO" (ssd_io_set_fault: the AFTER+1-th chunk written (WRITE 1) or
// read (0) from the store's opening on fails with ERRNO, 0 = a short transfer; ERRNO "kill": the process
// kills itself there, a crash between two writes). Unset: nothing.
static void ssd_set_fault_from_env(SsdStore* st) {
    const char* e = getenv("SSD_FAULT");
    if (!e || !e[0]) return;
    int write = 0;
    long long after = 0;
    char what[16] = "";
    if (sscanf(e, "%d,%lld,%15s", &write, &after, what) != 3) die("SSD_FAULT=%s: want WRITE,AFTER,ERRNO", e);
    const int kill = strcmp(what, "kill") == 0;
    ssd_io_set_fault(ssd_store_io(st), write, after, kill ? 0 : atoi(what), kill);
}

// One round over the streamed layers' state in the SSD store (-sd).
static void ssd_round(GPT* g) {
    const int n = g->config.num_layers - g->resident_layers;
    int* layers = (int*)malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (!layers) die_disk(g, "the SSD tier's AdamW round", "out of host memory");
    for (int i = 0; i < n; i++) layers[i] = i;
    {  // the round reads ahead from the grads file: every layer of this pass must be written first
        GradsWriter* w = g->gw;
        std::unique_lock<std::mutex> lock(w->mu);
        const int64_t pass = g->opt->grads_pass;
        w->cv.wait(lock, [g, w, pass] {
            for (int l = g->resident_layers; l < g->config.num_layers; l++)
                if (w->written_pass[l] < pass) return false;
            return true;
        });
    }
    SsdRoundFns fns = {ssd_round_grads, ssd_round_update, ssd_round_bf16_dst, ssd_round_layer_done, g};
    char err[1024];
    if (ssd_store_round(g->ssd, layers, n, &fns, err, sizeof err) != 0)
        die_disk(g, "the SSD tier's AdamW round", err);
    free(layers);
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
        if (g->ssd) ssd_round(g);
        for (int l = g->resident_layers; l < g->config.num_layers && !g->ssd; l++) {
            stream_wait_grads_on_host(&g->stream, l);
            o->block_t0[l] = timeline_now();
            adamw_layer(g, l);
            optimizer_layer_done(g, l);
        }
        std::lock_guard<std::mutex> lock(o->mu);
        o->last_round_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        o->rounds_done++;
        o->blocks_done = 0;
        o->cv.notify_all();
    }
}

// HostReadyFn for the stream: has the optimizer finished layer `layer`? wait: block until so.
static int optimizer_block_ready(void* ctx, int layer, int wait) {
    Optimizer* o = ((GPT*)ctx)->opt;
    std::unique_lock<std::mutex> lock(o->mu);
    auto done = [o, layer] { return o->rounds_done == o->rounds_submitted || o->blocks_done > layer; };
    if (wait) o->cv.wait(lock, done);
    if (!done()) return 0;
    FAKE_CUDA_HOST_ACQUIRE(o);
    return 1;
}
static void optimizer_wait_all(GPT* g) {
    Optimizer* o = g->opt;
    std::unique_lock<std::mutex> lock(o->mu);
    o->cv.wait(lock, [o] { return o->rounds_done == o->rounds_submitted; });
    FAKE_CUDA_HOST_ACQUIRE(o);
}
static void optimizer_submit(GPT* g, float lr, float grad_scale) {
    optimizer_wait_all(g);  // never true in practice: this step's forward already waited for every block
    Optimizer* o = g->opt;
    std::lock_guard<std::mutex> lock(o->mu);
    o->lr = lr;
    o->grad_scale = grad_scale;
    o->t = ++g->adam_t;
    if (g->gw) {
        std::lock_guard<std::mutex> wlock(g->gw->mu);
        o->grads_pass = g->gw->pass;
    }
    o->blocks_done = 0;
    o->rounds_submitted++;
    FAKE_CUDA_HOST_RELEASE(o);
    o->cv.notify_all();
}
