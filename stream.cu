// stream.cu — host<->GPU copies: pinned buffers, weight slots, streams, events.
// llmc/stream.h has the map. No math, no optimizer.
#include "llmc/stream.h"
#include <string.h>
#include "llmc/timeline.h"

static void* pinned_alloc(int64_t bytes, const char* what) {
    void* p = NULL;
    cudaError_t err = cudaHostAlloc(&p, (size_t)bytes, cudaHostAllocDefault);
    if (err != cudaSuccess) {
        die("cannot pin %.2f GiB of host memory for %s: %s", bytes / 1073741824.0, what,
            cudaGetErrorString(err));
    }
    return p;
}
// O_DIRECT buffers, pinned by cudaHostRegister: some drivers refuse cudaHostAlloc memory.
void* pinned_alloc_direct_io(int64_t bytes, const char* what) {
    void* p = NULL;
    const int err = posix_memalign(&p, DIRECT_IO_ALIGN, (size_t)direct_io_bytes(bytes));
    if (err != 0)
        die("cannot allocate %.2f GiB of host memory for %s: %s", bytes / 1073741824.0, what, strerror(err));
    const cudaError_t cerr = cudaHostRegister(p, (size_t)direct_io_bytes(bytes), cudaHostRegisterDefault);
    if (cerr != cudaSuccess)
        die("cannot pin %.2f GiB of host memory for %s: %s", bytes / 1073741824.0, what,
            cudaGetErrorString(cerr));
    return p;
}
void pinned_free_direct_io(void* p) {
    if (!p) return;
    cudaCheck(cudaDeviceSynchronize());  // no copy may still read or write it
    cudaCheck(cudaHostUnregister(p));
    free(p);
}
static void* device_alloc(int64_t bytes, const char* what) {
    void* p = NULL;
    cudaError_t err = cudaMalloc(&p, (size_t)bytes);
    if (err != cudaSuccess) {
        die("cannot allocate %.2f GiB of GPU memory for %s: %s", bytes / 1073741824.0, what,
            cudaGetErrorString(err));
    }
    return p;
}

enum { READ_FREE, READ_PENDING, READ_READY, READ_COPYING };  // a read buffer's states (llmc/stream.h)

int64_t stream_host_bytes(int num_layers, int64_t layer_stride, int64_t embed_count, bool host_grads,
                          const HostReader* reader) {
    const int64_t host_layers = reader ? reader->first_streamed : num_layers;
    int64_t bytes = (embed_count + host_layers * layer_stride) * 2;
    if (host_grads) bytes += (int64_t)num_layers * layer_stride * 2;
    if (reader) bytes += reader->num_buffers * direct_io_bytes(reader->buffer_bytes);
    return bytes;
}
int64_t stream_gpu_bytes(int64_t layer_stride, int num_slots) {
    return (int64_t)num_slots * layer_stride * 2 + 2 * layer_stride * 2;
}

// The node's shared host array p, pinned in this process.
static void* pinned_register(void* p, int64_t bytes, const char* what) {
    const cudaError_t err = cudaHostRegister(p, (size_t)bytes, cudaHostRegisterDefault);
    if (err != cudaSuccess)
        die("cannot pin %.2f GiB of host memory for %s: %s", bytes / 1073741824.0, what,
            cudaGetErrorString(err));
    return p;
}

void stream_init(WeightStream* ws, int num_layers, int64_t layer_stride, int64_t embed_count, int num_slots,
                 HostReadyFn host_ready, void* host_ready_ctx, bool host_grads, const HostReader* reader,
                 const StreamHostArrays* shared) {
    memset(ws, 0, sizeof *ws);
    if (num_slots < 2 || num_slots > MAX_SLOTS) {
        // overlap needs 2: one slot computes while the other fills
        die("weight slots must be between 2 and %d (got %d)", MAX_SLOTS, num_slots);
    }
    if (reader && (!reader->start || !reader->done || !reader->lend != !reader->lent_copied ||
                   reader->num_buffers < 1 || reader->num_buffers > MAX_READ_BUFFERS ||
                   reader->buffer_bytes < layer_stride * 2 || reader->first_streamed < 0 ||
                   reader->first_streamed > num_layers))
        die("internal: a weight reader with %d buffers of %lld bytes from layer %d (layers of %lld bytes)",
            reader->num_buffers, (long long)reader->buffer_bytes, reader->first_streamed,
            (long long)(layer_stride * 2));
    ws->num_layers = num_layers;
    ws->num_slots = num_slots;
    ws->layer_stride = layer_stride;
    ws->embed_count = embed_count;
    ws->host_ready = host_ready;
    ws->host_ready_ctx = host_ready_ctx;
    ws->grad_lo = 0;
    ws->grad_hi = layer_stride;
    const int64_t host_layers = reader ? reader->first_streamed : num_layers;
    const int64_t weight_bytes = (embed_count + host_layers * layer_stride) * 2;
    if (shared && !host_grads) die("internal: shared host arrays without host gradients");
    ws->host_shared = shared != NULL;
    ws->weights_host_bf16 =
        shared ? (uint16_t*)pinned_register(shared->weights, weight_bytes, "the bf16 weights")
               : (uint16_t*)pinned_alloc(weight_bytes, "the bf16 weights");
    if (reader) {
        ws->reads.reader = *reader;
        for (int b = 0; b < reader->num_buffers; b++) {
            ws->reads.buf[b] =
                (uint16_t*)pinned_alloc_direct_io(reader->buffer_bytes, "the weights' read buffers");
            ws->reads.layer[b] = -1;
            ws->reads.state[b] = READ_FREE;
            // blocking sync: waiting threads do not spin
            cudaCheck(cudaEventCreateWithFlags(&ws->reads.copied[b],
                                               cudaEventDisableTiming | cudaEventBlockingSync));
        }
    }
    ws->grads_stride = shared ? shared->grads_stride : layer_stride;
    ws->grads_base = shared ? shared->grads_base : 0;
    if (host_grads)
        ws->grads_host_bf16 =
            shared ? (uint16_t*)pinned_register(shared->grads, (int64_t)num_layers * ws->grads_stride * 2,
                                                "the layer gradients")
                   : (uint16_t*)pinned_alloc((int64_t)num_layers * layer_stride * 2, "the layer gradients");

    ws->slots = (bf16*)device_alloc((int64_t)num_slots * layer_stride * 2, "the weight slots");
    for (int k = 0; k < 2; k++)
        ws->grad_staging[k] = (bf16*)device_alloc(layer_stride * 2, "gradient staging");

    // Default priority for all. Compute never waits on the host.
    cudaCheck(cudaStreamCreateWithFlags(&ws->compute, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&ws->h2d, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&ws->d2h, cudaStreamNonBlocking));
    for (int s = 0; s < num_slots; s++) {
        ws->slot_layer[s] = -1;
        cudaCheck(cudaEventCreateWithFlags(&ws->slot_ready[s], cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&ws->slot_free[s], cudaEventDisableTiming));
    }
    for (int k = 0; k < 2; k++)
        cudaCheck(cudaEventCreateWithFlags(&ws->staging_free[k], cudaEventDisableTiming));
    ws->grads_on_host = (cudaEvent_t*)malloc(sizeof(cudaEvent_t) * num_layers);
    ws->schedule = (int*)malloc(sizeof(int) * (num_layers > 0 ? num_layers : 1));
    if (!ws->grads_on_host || !ws->schedule) { die("out of host memory in stream_init"); }
    // blocking sync: the optimizer thread does not spin
    const unsigned host_wait_flags = cudaEventDisableTiming | cudaEventBlockingSync;
    for (int l = 0; l < num_layers; l++)
        cudaCheck(cudaEventCreateWithFlags(&ws->grads_on_host[l], host_wait_flags));
    cudaCheck(cudaEventCreateWithFlags(&ws->compute_mark, cudaEventDisableTiming));
}

void stream_free(WeightStream* ws) {
    cudaCheck(cudaDeviceSynchronize());
    for (int s = 0; s < ws->num_slots; s++) {
        cudaCheck(cudaEventDestroy(ws->slot_ready[s]));
        cudaCheck(cudaEventDestroy(ws->slot_free[s]));
    }
    for (int k = 0; k < 2; k++) {
        cudaCheck(cudaEventDestroy(ws->staging_free[k]));
        cudaCheck(cudaFree(ws->grad_staging[k]));
    }
    for (int l = 0; l < ws->num_layers; l++) cudaCheck(cudaEventDestroy(ws->grads_on_host[l]));
    for (int b = 0; ws->reads.reader.start && b < ws->reads.reader.num_buffers; b++) {
        if (ws->reads.state[b] == READ_PENDING)
            ws->reads.reader.done(ws->reads.reader.ctx, ws->reads.req[b], 1);
        cudaCheck(cudaEventDestroy(ws->reads.copied[b]));
        pinned_free_direct_io(ws->reads.buf[b]);
    }
    cudaCheck(cudaEventDestroy(ws->compute_mark));
    cudaCheck(cudaStreamDestroy(ws->compute));
    cudaCheck(cudaStreamDestroy(ws->h2d));
    cudaCheck(cudaStreamDestroy(ws->d2h));
    cudaCheck(cudaFree(ws->slots));
    if (ws->host_shared) {  // the owner unmaps them
        cudaCheck(cudaHostUnregister(ws->weights_host_bf16));
        cudaCheck(cudaHostUnregister(ws->grads_host_bf16));
    } else {
        cudaCheck(cudaFreeHost(ws->weights_host_bf16));
        if (ws->grads_host_bf16) cudaCheck(cudaFreeHost(ws->grads_host_bf16));
    }
    free(ws->grads_on_host);
    free(ws->schedule);
    memset(ws, 0, sizeof *ws);
}

static int slot_of(const WeightStream* ws, int l) {
    for (int s = 0; s < ws->num_slots; s++)
        if (ws->slot_layer[s] == l) return s;
    return -1;
}

// ---- Read buffers (-sw 1)
// Layers are read in pass order. A slot copy frees the buffer.

// The buffer holding or reading layer l, or -1.
static int read_buffer_of(const WeightStream* ws, int l) {
    for (int b = 0; b < ws->reads.reader.num_buffers; b++)
        if (ws->reads.layer[b] == l &&
            (ws->reads.state[b] == READ_PENDING || ws->reads.state[b] == READ_READY))
            return b;
    return -1;
}
// Waits for a read buffer's read and forgets its layer.
static void read_buffer_drop(WeightStream* ws, int b) {
    if (ws->reads.state[b] == READ_PENDING) ws->reads.reader.done(ws->reads.reader.ctx, ws->reads.req[b], 1);
    ws->reads.state[b] = READ_FREE;
    ws->reads.layer[b] = -1;
}
// A free or copied-from buffer, or -1 (wait = 0).
// wait = 1 may drop a read-ahead layer to find one.
static int read_buffer_take(WeightStream* ws, int wait) {
    const int n = ws->reads.reader.num_buffers;
    for (int b = 0; b < n; b++)
        if (ws->reads.state[b] == READ_FREE) return b;
    int oldest = -1;  // of the buffers being copied from
    for (int b = 0; b < n; b++) {
        if (ws->reads.state[b] != READ_COPYING) continue;
        if (oldest < 0 || ws->reads.copy_clock[b] < ws->reads.copy_clock[oldest]) oldest = b;
        if (wait) continue;
        const cudaError_t e = cudaEventQuery(ws->reads.copied[b]);
        if (e == cudaErrorNotReady) continue;
        cudaCheck(e);
        ws->reads.state[b] = READ_FREE;
        return b;
    }
    if (!wait) return -1;
    if (oldest >= 0) {
        cudaCheck(cudaEventSynchronize(ws->reads.copied[oldest]));
        ws->reads.state[oldest] = READ_FREE;
        return oldest;
    }
    int victim = 0, victim_pos = -1;  // every buffer holds a layer read ahead
    for (int b = 0; b < n; b++) {
        int pos = ws->schedule_next;
        while (pos < ws->schedule_len && ws->schedule[pos] != ws->reads.layer[b]) pos++;
        if (pos > victim_pos) {
            victim = b;
            victim_pos = pos;
        }
    }
    read_buffer_drop(ws, victim);
    return victim;
}
static void read_start(WeightStream* ws, int b, int l) {
    ws->reads.layer[b] = l;
    ws->reads.state[b] = READ_PENDING;
    ws->reads.req[b] = ws->reads.reader.start(ws->reads.reader.ctx, l, ws->reads.buf[b]);
    ws->reads.count++;
}
// Reads ahead, stopping at a layer AdamW has not written.
static void read_ahead(WeightStream* ws) {
    if (!ws->reads.reader.start) return;
    for (int pos = ws->schedule_next; pos < ws->schedule_len; pos++) {
        const int l = ws->schedule[pos];
        if (slot_of(ws, l) >= 0 || read_buffer_of(ws, l) >= 0) continue;
        if (ws->reads.reader.lend) {  // a layer the round hands over is not read
            const int lent = ws->reads.reader.lend(ws->reads.reader.ctx, l, 0, NULL);
            if (lent == 0) return;
            if (lent == 1) continue;
        }
        if (!ws->host_ready(ws->host_ready_ctx, l, 0)) return;
        const int b = read_buffer_take(ws, 0);
        if (b < 0) return;
        read_start(ws, b, l);
    }
}

// Layer l's host weights. NULL if not ready, unless wait = 1. *lent: in the reader's buffer (lend).
static const uint16_t* host_weights(WeightStream* ws, int l, int wait, bool* lent) {
    *lent = false;
    if (ws->reads.reader.lend) {
        const uint16_t* buf = NULL;
        const int r = ws->reads.reader.lend(ws->reads.reader.ctx, l, wait, &buf);
        if (r == 0) return NULL;
        if (r == 1) {
            *lent = true;
            return buf;
        }
    }
    if (!ws->host_ready(ws->host_ready_ctx, l, wait)) return NULL;
    if (!ws->reads.reader.start)
        return ws->weights_host_bf16 + ws->embed_count + (int64_t)l * ws->layer_stride;
    read_ahead(ws);
    int b = read_buffer_of(ws, l);
    if (b < 0) {
        if (!wait) return NULL;
        b = read_buffer_take(ws, 1);
        read_start(ws, b, l);
    }
    if (ws->reads.state[b] == READ_PENDING) {
        if (!ws->reads.reader.done(ws->reads.reader.ctx, ws->reads.req[b], wait)) return NULL;
        ws->reads.state[b] = READ_READY;
    }
    return ws->reads.buf[b];
}

// Puts layer l in a slot. 0 if not ready (wait = 0).
static int request_layer(WeightStream* ws, int l, int wait) {
    int s = slot_of(ws, l);
    if (s >= 0) {  // still resident from the previous pass
        if (!ws->slot_in_use[s]) {
            ws->slot_in_use[s] = 1;
            ws->layer_reuses++;
        }
        return 1;
    }
    bool lent = false;
    const uint16_t* src = host_weights(ws, l, wait, &lent);
    if (!src) return 0;
    // Victim: the least recently used slot not in use.
    int victim = -1;
    for (int k = 0; k < ws->num_slots; k++)
        if (!ws->slot_in_use[k] && (victim < 0 || ws->slot_last_use[k] < ws->slot_last_use[victim]))
            victim = k;
    if (victim < 0) { die("internal: no free weight slot for layer %d", l); }
    cudaCheck(cudaStreamWaitEvent(ws->h2d, ws->slot_free[victim], 0));
    const int64_t bytes = ws->layer_stride * 2;
    const int span = timeline_begin(ws->timeline, TRACK_H2D, "weights", l, ws->h2d);
    cudaCheck(cudaMemcpyAsync(ws->slots + (int64_t)victim * ws->layer_stride, src, (size_t)bytes,
                              cudaMemcpyHostToDevice, ws->h2d));
    timeline_end(ws->timeline, span, ws->h2d);
    cudaCheck(cudaEventRecord(ws->slot_ready[victim], ws->h2d));
    if (lent) {
        ws->reads.reader.lent_copied(ws->reads.reader.ctx, l, ws->h2d);
        ws->reads.lent++;
    } else if (ws->reads.reader.start) {  // the buffer is reused once this copy has run
        const int b = read_buffer_of(ws, l);
        ws->reads.state[b] = READ_COPYING;
        ws->reads.layer[b] = -1;
        ws->reads.copy_clock[b] = ws->use_clock + 1;  // the slot's clock below
        cudaCheck(cudaEventRecord(ws->reads.copied[b], ws->h2d));
    }
    ws->slot_layer[victim] = l;
    ws->slot_in_use[victim] = 1;
    ws->slot_last_use[victim] = ++ws->use_clock;
    ws->bytes_h2d += bytes;
    ws->layer_copies++;
    return 1;
}

// Requests layers up to schedule position `until`, never blocking.
static void request_ready_layers(WeightStream* ws, int until) {
    while (ws->schedule_next < ws->schedule_len && ws->schedule_next <= until) {
        if (!request_layer(ws, ws->schedule[ws->schedule_next], 0)) break;
        ws->schedule_next++;
    }
    read_ahead(ws);
}

void stream_begin_pass(WeightStream* ws, const int* order, int n) {
    for (int s = 0; s < ws->num_slots; s++) ws->slot_in_use[s] = 0;
    if (n > 0) memcpy(ws->schedule, order, sizeof(int) * n);  // a pass over no streamed layer may pass NULL
    ws->schedule_len = n;
    ws->schedule_next = 0;
    // Requests num_slots - 1 layers ahead. Each release admits one more.

    // Resident layers are pinned first, so copies never evict them.
    const int ahead = ws->num_slots - 1;
    const int first = n < ahead ? n : ahead;
    for (int i = 0; i < first; i++)
        if (slot_of(ws, order[i]) >= 0) request_layer(ws, order[i], 0);
    request_ready_layers(ws, first - 1);
}

const bf16* stream_wait_layer(WeightStream* ws, int l) {
    int s = slot_of(ws, l);
    if (s < 0 && ws->schedule_next < ws->schedule_len && ws->schedule[ws->schedule_next] == l) {
        request_layer(ws, l, 1);  // blocks for layer l's AdamW (-sw 1: and its read)
        ws->schedule_next++;
        s = slot_of(ws, l);
    }
    if (s < 0 || !ws->slot_in_use[s]) { die("internal: layer %d was not requested before use", l); }
    cudaCheck(cudaStreamWaitEvent(ws->compute, ws->slot_ready[s], 0));
    ws->slot_last_use[s] = ++ws->use_clock;
    return ws->slots + (int64_t)s * ws->layer_stride;
}

void stream_release_layer(WeightStream* ws, int l) {
    int s = slot_of(ws, l);
    if (s < 0) { die("internal: release of layer %d that holds no slot", l); }
    cudaCheck(cudaEventRecord(ws->slot_free[s], ws->compute));
    ws->slot_in_use[s] = 0;
    // num_slots - 1 layers past l may now be in flight
    int pos = 0;
    while (pos < ws->schedule_len && ws->schedule[pos] != l) pos++;
    request_ready_layers(ws, pos + ws->num_slots - 1);
}

void stream_invalidate(WeightStream* ws) {
    for (int s = 0; s < ws->num_slots; s++) {
        ws->slot_layer[s] = -1;
        ws->slot_in_use[s] = 0;
    }
    for (int b = 0; ws->reads.reader.start && b < ws->reads.reader.num_buffers;
         b++)  // read before the update: stale
        if (ws->reads.state[b] == READ_PENDING || ws->reads.state[b] == READ_READY) read_buffer_drop(ws, b);
}

bf16* stream_grad_staging(WeightStream* ws) {
    const int k = ws->staging_next;
    cudaCheck(cudaStreamWaitEvent(ws->compute, ws->staging_free[k], 0));
    return ws->grad_staging[k];
}

// Layer l's gradients [grad_lo, grad_hi) to dst_lo, where element grad_lo goes.
static void send_grads(WeightStream* ws, int l, uint16_t* dst_lo) {
    const int k = ws->staging_next;
    ws->staging_next ^= 1;
    const int64_t lo = ws->grad_lo, bytes = (ws->grad_hi - lo) * 2;  // this rank's part
    cudaCheck(cudaEventRecord(ws->compute_mark, ws->compute));
    cudaCheck(cudaStreamWaitEvent(ws->d2h, ws->compute_mark, 0));
    const int span = timeline_begin(ws->timeline, TRACK_D2H, "grads", l, ws->d2h);
    if (bytes > 0)
        cudaCheck(cudaMemcpyAsync(dst_lo, ws->grad_staging[k] + lo, (size_t)bytes, cudaMemcpyDeviceToHost,
                                  ws->d2h));
    timeline_end(ws->timeline, span, ws->d2h);
    cudaCheck(cudaEventRecord(ws->staging_free[k], ws->d2h));
    cudaCheck(cudaEventRecord(ws->grads_on_host[l], ws->d2h));
    ws->bytes_d2h += bytes;
}

void stream_send_layer_grads(WeightStream* ws, int l) {
    send_grads(ws, l, ws->grads_host_bf16 + (int64_t)l * ws->grads_stride + (ws->grad_lo - ws->grads_base));
}

void stream_send_layer_grads_to(WeightStream* ws, int l, uint16_t* host_dst) {
    send_grads(ws, l, host_dst + ws->grad_lo);
}

void stream_wait_grads_on_host(WeightStream* ws, int l) {
    cudaCheck(cudaEventSynchronize(ws->grads_on_host[l]));
}
