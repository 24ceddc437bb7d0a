// ssd.h — every host<->disk movement of the optimizer state (the SSD tier).
// Files on an NVMe drive hold the streamed layers' fp32 weights, AdamW m and v (optionally bf16 copies).
// Host RAM keeps a small ring of piece-sized buffers.

// Three layers, bottom up (docs/ssd.md has each in full):
//   SsdIo     asynchronous direct I/O over io_uring; errors come back through ssd_io_wait, nothing exits
//   SsdStore  the state in two generations of files, and the pipelined AdamW round over it
//   helpers   ssd_plan (for -P 1) and ssd_probe_bandwidth
// Not here: which tensors decay, the lr, the clip (the caller's update function), the GPU, flags.

// Threads: SsdIo is thread-safe.
// An SsdStore's round, checkpoint and write_layer/read_layer run on one thread at a time.
// ssd_store_read_bf16_async and ssd_store_write_grads_async may run on any thread, during a round.
#pragma once
#include <stddef.h>
#include <stdint.h>

#define SSD_ALIGN             4096             // O_DIRECT alignment of buffers, offsets and lengths
#define SSD_PIECE_ALIGN_ELEMS ((int64_t)2048)  // 2048 elements = 4096 bytes of bf16: pieces start aligned

// 4096-aligned host memory (free with ssd_free); NULL when out of memory. Zero-filled.
void* ssd_alloc(int64_t bytes);
void ssd_free(void* p);
static inline int64_t ssd_round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

// ============================================================================
// Asynchronous direct I/O

typedef struct SsdIo SsdIo;
typedef int64_t SsdReq;  // a request id (> 0)

typedef struct {
    int queue_depth;       // chunks in flight (io_uring entries / fallback threads' queue); 0: 16
    int64_t chunk_bytes;   // a request is split into chunks of this size (multiple of 4096); 0: 4 MiB
    int force_fallback;    // 1: pread/pwrite threads even where io_uring works (tests); env SSD_IO_FALLBACK=1
                           // too
    int fallback_threads;  // threads of the fallback (each has one chunk in flight); 0: queue_depth
    int quiet;             // 1: no warning line when falling back (tests that force it)
} SsdIoConfig;

SsdIo* ssd_io_open(const SsdIoConfig* cfg, char* err, size_t errlen);
void ssd_io_close(SsdIo* io);                 // waits for every request in flight first
const char* ssd_io_backend(const SsdIo* io);  // "io_uring" or "pread/pwrite threads"

typedef struct {
    int fd;
    int direct;  // opened with O_DIRECT (requests must then be 4096-aligned)
    int64_t size;
    char path[1024];
} SsdFile;

// Opens path read-write with O_DIRECT; create = 1 creates or truncates, then fallocates `size` bytes.
// A filesystem refusing O_DIRECT gets a buffered file and one warning (SSD_NO_DIRECT=1 forces it, for tests).
// 0, or -1 with err set ("no space" names the bytes asked and free).
int ssd_file_open(SsdFile* f, const char* path, int create, int64_t size, int quiet, char* err,
                  size_t errlen);
void ssd_file_close(SsdFile* f);
int ssd_file_sync(SsdFile* f, char* err, size_t errlen);  // fsync

// Queues a read (write = 0) or write of `bytes` at `offset`; returns its id.
// A bad request (unaligned under O_DIRECT, out of the file) fails in its ssd_io_wait, not here.
// buf must stay valid until the request is waited for.
SsdReq ssd_io_submit(SsdIo* io, const SsdFile* f, int write, void* buf, int64_t bytes, int64_t offset);
// Blocks until request r is complete. 0, or -1 with err naming the file, the offset and why.
// Every submitted request must be waited for exactly once.
int ssd_io_wait(SsdIo* io, SsdReq r, char* err, size_t errlen);
int ssd_io_poll(SsdIo* io, SsdReq r);  // 1 when complete (ssd_io_wait then returns at once)

// Test hook: from now, the (after + 1)-th chunk of kind `write` and all after it fail with errno err.
// The disk is untouched. err = 0: a short write/read of 0 bytes.
// kill = 1: SIGKILL there instead (a crash between two writes). after < 0 removes the fault.
void ssd_io_set_fault(SsdIo* io, int write, int64_t after, int err, int kill);
// Bytes moved so far (for the bench and the timeline).
void ssd_io_counters(const SsdIo* io, int64_t* bytes_read, int64_t* bytes_written);

// The busy log (the timeline's disk tracks, -Y 1). Off by default: one branch per request.
// On: a direction is busy while at least one of its requests is in flight (timeline_now()'s clock).
// The busy intervals never overlap; a ring keeps the newest SSD_BUSY_LOG per direction.
#define SSD_BUSY_LOG 4096
typedef struct {
    double t0, t1;  // seconds on the steady clock
} SsdBusySpan;
void ssd_io_log_busy(SsdIo* io, int on);
// Busy intervals of direction `write` ending after t_from, oldest first, cut at t_from; an open one ends now.
// Over cap (>= 1), the closest neighbours are joined. Returns how many it wrote.
int ssd_io_busy_spans(SsdIo* io, int write, double t_from, SsdBusySpan* out, int cap);

// ============================================================================
// The state store and the pipelined AdamW round

typedef struct SsdStore SsdStore;

typedef struct {
    int num_layers;       // the streamed layers: store layer i is whatever the trainer maps to it
    int64_t layer_elems;  // parameters of one layer
    int with_bf16;        // -sw 1: the bf16 weight copy lives in the store too (the round writes it there)
    int grads_on_disk;  // the bf16 gradients go to DIR/grads.bf16 (ssd_store_write_grads_async), read by the
                        // round
    int ring;           // piece buffers in host RAM (>= 3): ring - 2 pieces read ahead, 1 updated, 1 written
    int64_t piece_elems;  // elements per piece (rounded down to a multiple of 2048); 0: a whole layer
    SsdIoConfig io;
    const char* owner;  // the run the store belongs to (train_gpt: its -o as an absolute path). NULL or "": a
                        // run without checkpoints, whose store any run may replace; another owner's, never.
} SsdStoreConfig;

// A fresh store under dir (created if missing), every file at full size. NULL with err on failure.
// A store already there is replaced only if its owner is the same or none.
// The state is undefined until ssd_store_write_layer.
SsdStore* ssd_store_create(const char* dir, const SsdStoreConfig* cfg, char* err, size_t errlen);
// An existing store of cfg's owner at its checkpoint of `step` (< 0: the newest); the shape must match.
// Every file of that generation is read once and checked against its checksums.
// NULL with err, e.g. "DIR holds the state of steps 40 and 50, not 45", or the damaged file.
SsdStore* ssd_store_open(const char* dir, const SsdStoreConfig* cfg, int64_t step, char* err, size_t errlen);
// Locks dir for this process (DIR/ssd_lock, flock, released at exit): one run per store.
// The lock's fd, or -1 with err naming the holder's pid.
int ssd_lock_dir(const char* dir, char* err, size_t errlen);
void ssd_store_close(SsdStore* st);
SsdIo* ssd_store_io(SsdStore* st);
// The step each generation holds (-1: none).
void ssd_store_steps(const SsdStore* st, int64_t steps[2]);
// Bytes the store's files take on disk, and its ring's host bytes.
int64_t ssd_store_disk_bytes(const SsdStoreConfig* cfg);
int64_t ssd_store_ring_bytes(const SsdStoreConfig* cfg);
// Bytes of one layer's bf16 region (2 * layer_elems rounded up to 4096): the size of a buffer for
// ssd_store_read_bf16_async / ssd_store_write_grads_async.
int64_t ssd_store_bf16_layer_bytes(const SsdStore* st);

// Synchronous whole-layer transfers through the ring, any alignment: initial state, resume, export, tests.
// write_layer writes the write generation (and bf16(params) with with_bf16); m or v NULL: zeros.
// read_layer reads the newest state, skipping NULL arrays.
int ssd_store_write_layer(SsdStore* st, int layer, const float* params, const float* m, const float* v,
                          char* err, size_t errlen);
int ssd_store_read_layer(SsdStore* st, int layer, float* params, float* m, float* v, uint16_t* bf16,
                         char* err, size_t errlen);

// -sw 1: layer's newest bf16 weights into dst. Grads on disk: layer's gradients from src into the file.
// dst/src: 4096-aligned, ssd_store_bf16_layer_bytes long. Wait with ssd_store_wait.
SsdReq ssd_store_read_bf16_async(SsdStore* st, int layer, uint16_t* dst);
SsdReq ssd_store_write_grads_async(SsdStore* st, int layer, const uint16_t* src);
int ssd_store_wait(SsdStore* st, SsdReq r, char* err, size_t errlen);

// What a round calls back (on the round's thread).
typedef struct {
    // Once per layer, before its first update: blocks until its layer_elems bf16 gradients are in RAM.
    // With grads_on_disk: may be NULL, or returns NULL; the round reads the file.
    // (The caller has then waited for its ssd_store_write_grads_async.)
    const uint16_t* (*grads)(void* ctx, int layer);
    // Updates the layer's elements [offset, offset + n); the pointers point at element `offset`.
    // bf16_out may be NULL. Typically adamw_tensors_window_bf16grad (cpu_adam.h).
    void (*update)(void* ctx, int layer, int64_t offset, int64_t n, float* params, const uint16_t* grads,
                   float* m, float* v, uint16_t* bf16_out);
    // Without with_bf16: where the layer's bf16 copy goes (the pinned weights), or NULL for none.
    // Unused with it.
    uint16_t* (*bf16_dst)(void* ctx, int layer);
    // The layer is updated and its bf16 copy complete (in RAM; with with_bf16, written to the store).
    // May be NULL.
    void (*layer_done)(void* ctx, int layer);
    void* ctx;
} SsdRoundFns;

// The AdamW round over layers[0..n) in that order. 0, or -1 with err set.
// After an error the store refuses rounds and checkpoints: the write generation may be torn.
// The last checkpoint's generation stays intact.
int ssd_store_round(SsdStore* st, const int* layers, int n, const SsdRoundFns* fns, char* err, size_t errlen);
// Makes the newest state durable as the checkpoint of `step` (see the file comment). 0, or -1 with err set.
int ssd_store_checkpoint(SsdStore* st, int64_t step, char* err, size_t errlen);

// ============================================================================
// Capacity plan and bandwidth probe

typedef struct {
    int64_t streamed_layers;  // layers whose state is on disk
    int64_t layer_elems;
    int64_t resident_elems;  // embeddings + GPU-resident (-R) layers: fp32 master, m, v kept in host RAM for
                             // files
    int with_bf16;           // -sw 1
    int grads_on_disk;
    int ring;
    int64_t piece_elems;       // 0: whole layers
    int bf16_buffers;          // -sw 1: pinned layer-sized bf16 buffers feeding the GPU (slots + read-ahead)
    int grad_buffers;          // grads_on_disk: pinned layer-sized gradient staging buffers
    int64_t other_host_bytes;  // everything else the trainer holds in host RAM (tokens, logits, ...)
} SsdPlanInput;

typedef struct {
    // host RAM, part by part
    int64_t host_resident;   // 14 B per resident param (fp32 master, m, v + the pinned bf16 copy)
    int64_t host_bf16;       // pinned bf16 weights of the streamed layers (all, or the buffers with -sw 1)
    int64_t host_grads;      // pinned bf16 gradients (all, or the staging buffers with grads on disk)
    int64_t host_ring;       // the round's piece ring
    int64_t host_bytes;      // the sum, + other_host_bytes
    int64_t disk_bytes;      // both generations (+ the gradients file)
    int64_t read_per_step;   // disk traffic of one step: the round's reads (+ -sw 1: the forward's and the
    int64_t write_per_step;  //   backward's bf16 reads); the round's writes (+ gradients)
} SsdPlan;
SsdPlan ssd_plan(const SsdPlanInput* in);

// Measures dir's O_DIRECT sequential write, then read bandwidth (bytes/s), about `seconds` in all.
// The temporary file is at most max_bytes (0: 1 GiB, less if under 4x that is free).
// *direct = 0: O_DIRECT refused, and the read figure is the page cache's. 0, or -1 with err set.
int ssd_probe_bandwidth(const char* dir, double seconds, int64_t max_bytes, double* read_bps,
                        double* write_bps, int* direct, char* err, size_t errlen);
