// stream.h — all host<->GPU movement during training.
// The model asks for "layer l's weights" and never calls cudaMemcpy.
// Not here: math (train_gpt.cu, kernels.cuh), the optimizer (cpu_adam.cpp).

// Streams: compute (kernels, GEMMs), h2d (weights in), d2h (gradients out).

// Events order them (no device-wide sync inside a pass):
//   slot_ready[s]    (h2d)     : slot s's weights arrived      -> compute waits before use
//   slot_free[s]     (compute) : last reader of slot s done    -> h2d waits before overwriting
//   staging_free[k]  (d2h)     : staging buffer k on the host  -> compute waits before refilling
//   grads_on_host[l] (d2h)     : layer l's gradients on host   -> the CPU AdamW thread waits

// Not streamed: the embeddings and GPU-resident layers (-R).
#pragma once
#include <stdint.h>
#include "llmc/cuda_common.h"

#define MAX_SLOTS        8
#define MAX_READ_BUFFERS 8
struct Timeline;

// Is layer l's bf16 copy written? wait = 1 blocks until it is.
typedef int (*HostReadyFn)(void* ctx, int layer, int wait);

// -sw 1: the source of bf16 weights not in host RAM
typedef struct {
    // Starts a layer's read into dst. Returns its id.
    int64_t (*start)(void* ctx, int layer, uint16_t* dst);
    // 1 once `req` is complete. wait = 1 blocks.
    int (*done)(void* ctx, int64_t req, int wait);
    void* ctx;
    int num_buffers;       // pinned read buffers (1..MAX_READ_BUFFERS): reads in flight
    int64_t buffer_bytes;  // bytes each, >= layer_stride * 2, DIRECT_IO_ALIGNed
    int first_streamed;    // lower layers are resident, in weights_host_bf16, never read
    // Optional (NULL: every layer is read): the round's bf16 output of a layer handed over in pinned memory,
    // so that the next pass copies it from there instead of reading it back from disk. Returns 1: *buf
    // holds the layer (buf NULL: it will, ask again); 0: not known yet (wait = 0; wait = 1 blocks until it
    // is); -1: read it. A layer is lent once.
    int (*lend)(void* ctx, int layer, int wait, const uint16_t** buf);
    // The copy from a lent buffer is queued on `stream`: the buffer is the lender's again once it has run.
    void (*lent_copied)(void* ctx, int layer, cudaStream_t stream);
} HostReader;

// -sw 1: read-ahead pinned buffers between disk and slots
typedef struct {
    HostReader reader;
    uint16_t* buf[MAX_READ_BUFFERS];
    int layer[MAX_READ_BUFFERS];           // the layer held or being read (-1: none)
    int state[MAX_READ_BUFFERS];           // READ_FREE, READ_PENDING, READ_READY, READ_COPYING
    int64_t req[MAX_READ_BUFFERS];         // the read in flight
    int64_t copy_clock[MAX_READ_BUFFERS];  // when its copy was enqueued (use_clock): oldest reused first
    cudaEvent_t copied[MAX_READ_BUFFERS];
    int64_t count;  // reads started (a pass reads each layer it copies once)
    int64_t lent;   // layers copied from the lender's buffers instead (HostReader.lend)
} StreamReads;

typedef struct {
    int num_layers, num_slots;
    int64_t layer_stride;  // elements of one layer block (model.h ParamLayout)
    int64_t embed_count;   // elements of the embedding block

    // Pinned: [embeddings | layer 0 | ... | layer L-1] (-sw 1: to first_streamed).
    uint16_t* weights_host_bf16;
    uint16_t* grads_host_bf16;  // L * grads_stride; NULL without host_grads (stream_send_layer_grads_to)
    // layer l's gradient element x at grads_host_bf16[l * grads_stride + x - grads_base]: the layer, or over
    // several nodes the node's part of it [grads_base, grads_base + grads_stride) (StreamHostArrays)
    int64_t grads_stride, grads_base;

    // GPU
    bf16* slots;                 // num_slots * layer_stride: the weights of the layers in flight
    int slot_layer[MAX_SLOTS];   // which layer each slot holds (-1: none / stale)
    int slot_in_use[MAX_SLOTS];  // requested in this pass and not yet released
    int64_t slot_last_use[MAX_SLOTS];
    int64_t use_clock;
    cudaEvent_t slot_ready[MAX_SLOTS], slot_free[MAX_SLOTS];
    bf16* grad_staging[2];  // one fills while the other travels to the host
    cudaEvent_t staging_free[2];
    int staging_next;
    cudaEvent_t* grads_on_host;  // one per layer
    cudaEvent_t compute_mark;

    cudaStream_t compute, h2d, d2h;

    // This pass's layer order, and how far it is requested.
    int* schedule;
    int schedule_len, schedule_next;

    HostReadyFn host_ready;
    void* host_ready_ctx;

    StreamReads reads;  // -sw 1: the weights' way from disk (reads.reader.start == NULL: none)

    // A multi-GPU rank sends only its part [grad_lo, grad_hi) of each layer's gradients (collectives.h).
    int64_t grad_lo, grad_hi;
    bool host_shared;  // the pinned host arrays are the node's (StreamHostArrays): registered, not owned

    // Counters for the config table and the timeline
    int64_t bytes_h2d, bytes_d2h, layer_copies, layer_reuses;
    struct Timeline* timeline;  // -Y: where each copy records its span, or NULL
} WeightStream;

// A multi-GPU run's host arrays, shared by the node's ranks: stream_init pins them instead of allocating.
typedef struct {
    uint16_t* weights;  // stream_host_bytes' bf16 weights
    uint16_t* grads;  // and gradients: L x grads_stride, the part [grads_base, + grads_stride) of each layer
    int64_t grads_stride, grads_base;
} StreamHostArrays;

// Allocates everything or dies. reader: -sw 1, or NULL. shared: the node's host arrays, or NULL.
void stream_init(WeightStream* ws, int num_layers, int64_t layer_stride, int64_t embed_count, int num_slots,
                 HostReadyFn host_ready, void* host_ready_ctx, bool host_grads = true,
                 const HostReader* reader = NULL, const StreamHostArrays* shared = NULL);
void stream_free(WeightStream* ws);
// Pinned, aligned host memory for O_DIRECT, rounded up to DIRECT_IO_ALIGN.
#define DIRECT_IO_ALIGN 4096
static inline int64_t direct_io_bytes(int64_t bytes) {
    return (bytes + DIRECT_IO_ALIGN - 1) / DIRECT_IO_ALIGN * DIRECT_IO_ALIGN;
}
void* pinned_alloc_direct_io(int64_t bytes, const char* what);
void pinned_free_direct_io(void* p);  // waits for the device first
// stream_init's pinned and GPU bytes, for the fit check.
int64_t stream_host_bytes(int num_layers, int64_t layer_stride, int64_t embed_count, bool host_grads = true,
                          const HostReader* reader = NULL);
int64_t stream_gpu_bytes(int64_t layer_stride, int num_slots);

// Starts a pass. Layers still in slots are reused.
void stream_begin_pass(WeightStream* ws, const int* order, int n);
// Compute waits for layer l's slot. A copy not yet begun starts here, after AdamW.
const bf16* stream_wait_layer(WeightStream* ws, int l);
// Layer l's readers are queued: its slot frees after them.
void stream_release_layer(WeightStream* ws, int l);
// Host weights changed (optimizer step): reuse no slot.
void stream_invalidate(WeightStream* ws);

// Gradients: fill staging on compute, send to host on d2h.
bf16* stream_grad_staging(WeightStream* ws);
void stream_send_layer_grads(WeightStream* ws, int l);
// The same into pinned host_dst, busy until grads_on_host[l].
void stream_send_layer_grads_to(WeightStream* ws, int l, uint16_t* host_dst);
// Blocks until layer l's gradients reach the host.
void stream_wait_grads_on_host(WeightStream* ws, int l);
