// stream.h — everything that moves between host and GPU during training.
// The model asks for "layer l's weights"; it never calls cudaMemcpy.
// Not here: math (train_gpt.cu, kernels.cuh), the optimizer (cpu_adam.cpp).

// Streams:  compute — every kernel and GEMM;  h2d — weights host->GPU;  d2h — gradients GPU->host.
// Ordering is by events only (no device-wide synchronization inside a pass):
//   slot_ready[s]  (h2d)     : the weights in slot s have arrived      -> compute waits before using them
//   slot_free[s]   (compute) : the last kernel reading slot s is done  -> h2d waits before overwriting it
//   staging_free[k] (d2h)    : gradient staging buffer k is on the host -> compute waits before refilling it
//   grads_on_host[l] (d2h)   : layer l's gradients are in host memory   -> the CPU AdamW thread waits on it

// Not streamed: the embeddings and GPU-resident layers (-R).
#pragma once
#include <stdint.h>
#include "llmc/cuda_common.h"

#define MAX_SLOTS        8
#define MAX_READ_BUFFERS 8
struct Timeline;

// Has the optimizer written layer l's bf16 copy? wait = 1 blocks until it has.
typedef int (*HostReadyFn)(void* ctx, int layer, int wait);

// Where streamed layers' bf16 weights come from when not in host RAM (-sw 1).
typedef struct {
    // Starts reading layer's bf16 weights (layer_stride elements) into dst; returns the read's id.
    int64_t (*start)(void* ctx, int layer, uint16_t* dst);
    // 1 once read `req` is complete (wait = 1: blocks until then).
    int (*done)(void* ctx, int64_t req, int wait);
    void* ctx;
    int num_buffers;       // pinned read buffers, 1..MAX_READ_BUFFERS: more = more reads in flight ahead
    int64_t buffer_bytes;  // bytes of one (>= layer_stride * 2; the reader's size); each is DIRECT_IO_ALIGNed
    int first_streamed;  // layers below it are GPU-resident: weights_host_bf16 holds them, and no pass reads
} HostReader;

// -sw 1: layers are read ahead into pinned buffers, then copied to their slots.
typedef struct {
    HostReader reader;
    uint16_t* buf[MAX_READ_BUFFERS];
    int layer[MAX_READ_BUFFERS];           // the layer it holds or is being read into (-1: none)
    int state[MAX_READ_BUFFERS];           // READ_FREE, READ_PENDING, READ_READY, READ_COPYING
    int64_t req[MAX_READ_BUFFERS];         // the read in flight
    int64_t copy_clock[MAX_READ_BUFFERS];  // when its copy was enqueued (use_clock): oldest reused first
    cudaEvent_t copied[MAX_READ_BUFFERS];
    int64_t count;  // reads started (a pass reads each layer it copies once)
} StreamReads;

typedef struct {
    int num_layers, num_slots;
    int64_t layer_stride;  // elements of one layer block (model.h ParamLayout)
    int64_t embed_count;   // elements of the embedding block

    // Host, pinned: [embeddings | layer 0 | ... | layer L-1] (with a reader: up to first_streamed).
    uint16_t* weights_host_bf16;
    uint16_t* grads_host_bf16;  // L * layer_stride; NULL without host_grads (stream_send_layer_grads_to)

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

    // The current pass's layer order, and how far ahead it is requested.
    int* schedule;
    int schedule_len, schedule_next;

    HostReadyFn host_ready;
    void* host_ready_ctx;

    StreamReads reads;  // -sw 1: the weights' way from disk (reads.reader.start == NULL: none)

    // Counters for the config table and the timeline
    int64_t bytes_h2d, bytes_d2h, layer_copies, layer_reuses;
    struct Timeline* timeline;  // NULL, or where each copy records its span (timeline.h, flag -Y)
} WeightStream;

// Allocates buffers, slots, streams and events; dies if it cannot. reader: -sw 1 or NULL.
void stream_init(WeightStream* ws, int num_layers, int64_t layer_stride, int64_t embed_count, int num_slots,
                 HostReadyFn host_ready, void* host_ready_ctx, bool host_grads = true,
                 const HostReader* reader = NULL);
void stream_free(WeightStream* ws);
// Pinned host memory for O_DIRECT I/O: DIRECT_IO_ALIGN-aligned, direct_io_bytes(bytes) of it.
#define DIRECT_IO_ALIGN 4096
static inline int64_t direct_io_bytes(int64_t bytes) {
    return (bytes + DIRECT_IO_ALIGN - 1) / DIRECT_IO_ALIGN * DIRECT_IO_ALIGN;
}
void* pinned_alloc_direct_io(int64_t bytes, const char* what);
void pinned_free_direct_io(void* p);  // waits for the device first
// The pinned and GPU bytes stream_init will allocate, for the fit check.
int64_t stream_host_bytes(int num_layers, int64_t layer_stride, int64_t embed_count, bool host_grads = true,
                          const HostReader* reader = NULL);
int64_t stream_gpu_bytes(int64_t layer_stride, int num_slots);

// Starts a pass over `order`; a layer still in its slot is not copied again.
void stream_begin_pass(WeightStream* ws, const int* order, int n);
// The compute stream waits for layer l's slot; returns its weights.
// A copy not yet started starts here, once the host has its AdamW.
const bf16* stream_wait_layer(WeightStream* ws, int l);
// Every kernel reading layer l is queued: its slot frees once they ran.
void stream_release_layer(WeightStream* ws, int l);
// The host weights changed (optimizer step): no slot content may be reused.
void stream_invalidate(WeightStream* ws);

// Gradients: fill a staging buffer on compute, then send it to the host on d2h.
bf16* stream_grad_staging(WeightStream* ws);
void stream_send_layer_grads(WeightStream* ws, int l);
// The same into the caller's pinned host_dst; reuse it only after grads_on_host[l].
void stream_send_layer_grads_to(WeightStream* ws, int l, uint16_t* host_dst);
// Blocks the optimizer thread until layer l's gradients are on the host.
void stream_wait_grads_on_host(WeightStream* ws, int l);
