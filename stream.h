// stream.h — everything that moves between host and GPU during training: the pinned host copies of the
// weights (bf16) and gradients, the ring of GPU weight slots, the three CUDA streams and their events.
// The model code asks for "layer l's weights" and "send layer l's grads"; it never calls cudaMemcpy itself.
// It does no math (train_gpt.cu, kernels.cuh) and no optimizer update (cpu_adam.cpp).
//
// Streams:  compute — every kernel and GEMM;  h2d — weights host->GPU;  d2h — gradients GPU->host.
// Ordering is by events only (no device-wide synchronization inside a pass):
//   slot_ready[s]  (h2d)     : the weights in slot s have arrived      -> compute waits before using them
//   slot_free[s]   (compute) : the last kernel reading slot s is done  -> h2d waits before overwriting it
//   staging_free[k] (d2h)    : gradient staging buffer k is on the host -> compute waits before refilling it
//   grads_on_host[l] (d2h)   : layer l's gradients are in host memory   -> the CPU AdamW thread waits on it
//                              (train_gpt -sd: its gradient writer, which then writes them to disk and frees
//                              the pinned ring slot they arrived in: stream_send_layer_grads_to)
// The embeddings (wte, wpe, final LayerNorm) and any GPU-resident layers (-R) are not streamed: they stay on
// the GPU (train_gpt.cu), and a pass's `order` lists only the streamed layers.
// With a HostReader (train_gpt -sd DIR -sw 1) the streamed layers' bf16 weights are not in host RAM: each
// layer of a pass is read from disk into one of a few pinned read buffers, as far ahead as buffers allow,
// and copied to its slot from there; a buffer is read into again only once its copy has run
// (read_copied[b], h2d). The caller's start / done do the disk part (ssd.h).
#pragma once
#include <stdint.h>
#include "cuda_common.h"

#define MAX_SLOTS        8
#define MAX_READ_BUFFERS 8
struct Timeline;

// Called on the main thread before layer l's weights are copied to the GPU: returns 1
// when the CPU optimizer has written that block's updated bf16 copy. With wait = 1 it blocks until then
// (and returns 1); with wait = 0 it only asks. This is the one place where the next step's forward pass
// waits for the previous step's AdamW.
typedef int (*HostReadyFn)(void* ctx, int layer, int wait);

// Where the streamed layers' bf16 weights come from when they are not in host RAM (-sw 1).
typedef struct {
    // Starts reading layer's bf16 weights (layer_stride elements) into dst; returns the read's id.
    int64_t (*start)(void* ctx, int layer, uint16_t* dst);
    // 1 once read `req` is complete (wait = 1: blocks until then); called once with a 1 for each read. A read
    // that fails is the caller's to report (it exits: the step cannot go on).
    int (*done)(void* ctx, int64_t req, int wait);
    void* ctx;
    int num_buffers;       // pinned read buffers, 1..MAX_READ_BUFFERS: more = more reads in flight ahead
    int64_t buffer_bytes;  // bytes of one (>= layer_stride * 2; the reader's size); each is DIRECT_IO_ALIGNed
    int first_streamed;  // layers below it are GPU-resident: weights_host_bf16 holds them, and no pass reads
} HostReader;

typedef struct {
    int num_layers, num_slots;
    int64_t layer_stride;  // elements of one layer block (model.h ParamLayout)
    int64_t embed_count;   // elements of the embedding block

    // Host, pinned (DMA-able, so copies run at full PCIe speed and asynchronously)
    uint16_t* weights_host_bf16;  // [embeddings | layer 0 | ... | layer L-1], written by the CPU AdamW; laid
                                  // out like the fp32 master weights (the embedding part is only used to load
                                  // them: the embeddings live and are updated on the GPU, train_gpt.cu).
                                  // With a reader: [embeddings | layers 0..first_streamed-1] only
    uint16_t* grads_host_bf16;    // L * layer_stride: each layer's gradient, sent once per step (NULL when
                                  // stream_init was told host_grads = false: the caller gives each layer's
                                  // destination to stream_send_layer_grads_to, e.g. train_gpt -sd's ring)

    // GPU
    bf16* slots;                 // num_slots * layer_stride: the weights of the layers in flight
    int slot_layer[MAX_SLOTS];   // which layer each slot holds (-1: none / stale)
    int slot_in_use[MAX_SLOTS];  // requested in this pass and not yet released
    int64_t slot_last_use[MAX_SLOTS];
    int64_t use_clock;
    cudaEvent_t slot_ready[MAX_SLOTS], slot_free[MAX_SLOTS];
    bf16* grad_staging[2];  // two bf16 buffers: one is filled while the other travels to the host
    cudaEvent_t staging_free[2];
    int staging_next;
    cudaEvent_t* grads_on_host;  // one per layer
    cudaEvent_t compute_mark;

    cudaStream_t compute, h2d, d2h;

    // The order in which the current pass visits layers, and how far ahead we have requested.
    int* schedule;
    int schedule_len, schedule_next;

    HostReadyFn host_ready;
    void* host_ready_ctx;

    // With a HostReader (reader.start != NULL): the pinned read buffers, each free, being read into, holding
    // a layer, or being copied from (until read_copied[b] on h2d).
    HostReader reader;
    uint16_t* read_buf[MAX_READ_BUFFERS];
    int read_layer[MAX_READ_BUFFERS];  // the layer it holds or is being read into (-1: none)
    int read_state[MAX_READ_BUFFERS];  // READ_FREE, READ_PENDING, READ_READY, READ_COPYING
    int64_t read_req[MAX_READ_BUFFERS];
    int64_t read_copy_clock[MAX_READ_BUFFERS];  // when its copy was enqueued (use_clock): the oldest is
                                                // reused first
    cudaEvent_t read_copied[MAX_READ_BUFFERS];
    int64_t layer_reads;  // reads started (the config table; a pass reads each layer it copies once)

    // Counters for the config table and the timeline
    int64_t bytes_h2d, bytes_d2h, layer_copies, layer_reuses;
    struct Timeline* timeline;  // NULL, or where each copy records its span (timeline.h, flag -Y)
} WeightStream;

// Allocates the pinned host buffers (the caller fills weights_host_bf16), the GPU slots and staging, the
// streams and events. Exits with a one-line error if an allocation fails.
// reader: NULL, or where the streamed layers' weights come from (-sw 1; copied).
void stream_init(WeightStream* ws, int num_layers, int64_t layer_stride, int64_t embed_count, int num_slots,
                 HostReadyFn host_ready, void* host_ready_ctx, bool host_grads = true,
                 const HostReader* reader = NULL);
void stream_free(WeightStream* ws);
// Pinned host memory that O_DIRECT I/O reads into or writes from (the -sw 1 read buffers, train_gpt's
// gradient ring): DIRECT_IO_ALIGN-aligned, direct_io_bytes(bytes) of it. Exits with one line if it fails.
#define DIRECT_IO_ALIGN 4096
static inline int64_t direct_io_bytes(int64_t bytes) {
    return (bytes + DIRECT_IO_ALIGN - 1) / DIRECT_IO_ALIGN * DIRECT_IO_ALIGN;
}
void* pinned_alloc_direct_io(int64_t bytes, const char* what);
void pinned_free_direct_io(void* p);  // waits for the device first
// Bytes of pinned host memory and of GPU memory stream_init will allocate (for the fit check before it).
int64_t stream_host_bytes(int num_layers, int64_t layer_stride, int64_t embed_count, bool host_grads = true,
                          const HostReader* reader = NULL);
int64_t stream_gpu_bytes(int64_t layer_stride, int num_slots);

// A pass visits layers in `order` (forward: 0..L-1, backward: L-1..0). Starts copying the first
// num_slots - 1 of them whose weights are ready on the host; a layer still resident from the previous pass
// (and not stale) is not copied again.
void stream_begin_pass(WeightStream* ws, const int* order, int n);
// Makes the compute stream wait until layer l is in its slot; returns the slot's weights. If l's copy has
// not been started yet (its AdamW was not done when a slot came free), the host waits for the optimizer
// here and starts it.
const bf16* stream_wait_layer(WeightStream* ws, int l);
// The compute stream has been given every kernel that reads layer l: free its slot once they have run,
// and start copying the next layers of the pass (up to num_slots - 1 ahead) whose weights are ready.
void stream_release_layer(WeightStream* ws, int l);
// The host weights changed (optimizer step): no slot content may be reused.
void stream_invalidate(WeightStream* ws);

// Gradients: get a staging buffer for layer l (compute waits until it is free), fill it on the compute
// stream, then send it: the copy to grads_host_bf16[l] runs on the d2h stream.
bf16* stream_grad_staging(WeightStream* ws);
void stream_send_layer_grads(WeightStream* ws, int l);
// The same into host_dst (pinned, layer_stride bf16): the event protocol is unchanged (grads_on_host[l] once
// it is there); the caller must not reuse host_dst before that event and its own use of the data.
void stream_send_layer_grads_to(WeightStream* ws, int l, uint16_t* host_dst);
// Blocks the calling (optimizer) thread until layer l's gradients are in host memory.
void stream_wait_grads_on_host(WeightStream* ws, int l);
