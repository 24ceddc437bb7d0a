// ssd.h — the SSD tier: every host<->disk movement of the optimizer state.
// NVMe files hold the streamed layers' fp32 weights and AdamW m, v; RAM keeps a small ring.

// Three layers, bottom up (docs/ssd.md has each in full):
//   SsdIo     direct I/O over io_uring; errors return, nothing exits
//   SsdStore  two generations of files, and the AdamW round over them
//   helpers   ssd_plan (-P 1) and ssd_probe_bandwidth
// Not here: the update's math, the GPU, flags.

// Threads: SsdIo is thread-safe; an SsdStore is used by one thread at a time (its _async calls: any).
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

// Opens path with O_DIRECT (buffered, with a warning, where refused); create = 1 fallocates `size`.
int ssd_file_open(SsdFile* f, const char* path, int create, int64_t size, int quiet, char* err,
                  size_t errlen);
void ssd_file_close(SsdFile* f);
int ssd_file_sync(SsdFile* f, char* err, size_t errlen);  // fsync

// Queues a read (write = 0) or write; returns its id. buf lives until the wait.
// A bad request fails in its ssd_io_wait, not here.
SsdReq ssd_io_submit(SsdIo* io, const SsdFile* f, int write, void* buf, int64_t bytes, int64_t offset);
// Blocks until request r is complete: 0, or -1 with err set. One wait per request.
int ssd_io_wait(SsdIo* io, SsdReq r, char* err, size_t errlen);
int ssd_io_poll(SsdIo* io, SsdReq r);  // 1 when complete (ssd_io_wait then returns at once)
// A request that fails with msg in its ssd_io_wait (a caller's bad arguments).
SsdReq ssd_io_fail(SsdIo* io, const char* msg);

// Test hook: chunks of kind `write` after the first `after` fail with errno err; kill = 1: SIGKILL.
void ssd_io_set_fault(SsdIo* io, int write, int64_t after, int err, int kill);
// Bytes moved so far (for the bench and the timeline).
void ssd_io_counters(const SsdIo* io, int64_t* bytes_read, int64_t* bytes_written);

// The busy log (-Y 1's disk tracks), off by default: when each direction had a request in flight.
#define SSD_BUSY_LOG 4096
typedef struct {
    double t0, t1;  // seconds on the steady clock
} SsdBusySpan;
void ssd_io_log_busy(SsdIo* io, int on);
// Busy intervals of direction `write` ending after t_from, oldest first; at most cap, neighbours joined.
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

// A fresh store under dir, files at full size; NULL with err. Replaces only its owner's store.
SsdStore* ssd_store_create(const char* dir, const SsdStoreConfig* cfg, char* err, size_t errlen);
// An existing store at its checkpoint of `step` (< 0: the newest), every file checked; NULL with err.
SsdStore* ssd_store_open(const char* dir, const SsdStoreConfig* cfg, int64_t step, char* err, size_t errlen);
// Locks dir for this process (flock): one run per store. The fd, or -1 with err.
int ssd_lock_dir(const char* dir, char* err, size_t errlen);
void ssd_store_close(SsdStore* st);
SsdIo* ssd_store_io(SsdStore* st);
// The step each generation holds (-1: none).
void ssd_store_steps(const SsdStore* st, int64_t steps[2]);
// Bytes the store's files take on disk, and its ring's host bytes.
int64_t ssd_store_disk_bytes(const SsdStoreConfig* cfg);
int64_t ssd_store_ring_bytes(const SsdStoreConfig* cfg);
// Bytes of one layer's bf16 region: the buffer size for the two _async calls.
int64_t ssd_store_bf16_layer_bytes(const SsdStore* st);

// Synchronous whole-layer transfers: initial state, resume, export, tests.
// m or v NULL: zeros when writing, skipped when reading.
int ssd_store_write_layer(SsdStore* st, int layer, const float* params, const float* m, const float* v,
                          char* err, size_t errlen);
int ssd_store_read_layer(SsdStore* st, int layer, float* params, float* m, float* v, uint16_t* bf16,
                         char* err, size_t errlen);

// -sw 1 and grads on disk: one layer's bf16 from or to 4096-aligned memory; wait with ssd_store_wait.
SsdReq ssd_store_read_bf16_async(SsdStore* st, int layer, uint16_t* dst);
SsdReq ssd_store_write_grads_async(SsdStore* st, int layer, const uint16_t* src);
int ssd_store_wait(SsdStore* st, SsdReq r, char* err, size_t errlen);

// What a round calls back (on the round's thread).
typedef struct {
    // Blocks until layer's bf16 gradients are in RAM. grads_on_disk: may be or return NULL.
    const uint16_t* (*grads)(void* ctx, int layer);
    // Updates elements [offset, offset + n) (the pointers at `offset`); bf16_out may be NULL.
    void (*update)(void* ctx, int layer, int64_t offset, int64_t n, float* params, const uint16_t* grads,
                   float* m, float* v, uint16_t* bf16_out);
    // Without with_bf16: where the layer's bf16 copy goes, or NULL for none.
    uint16_t* (*bf16_dst)(void* ctx, int layer);
    // The layer is updated and its bf16 copy complete. May be NULL.
    void (*layer_done)(void* ctx, int layer);
    void* ctx;
} SsdRoundFns;

// The AdamW round over layers[0..n) in that order: 0, or -1 with err set.
// After an error the store refuses rounds; the last checkpoint stays intact.
int ssd_store_round(SsdStore* st, const int* layers, int n, const SsdRoundFns* fns, char* err, size_t errlen);
// Makes the newest state durable as the checkpoint of `step` (docs/ssd.md). 0, or -1 with err set.
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

// Measures dir's O_DIRECT write and read bandwidth (bytes/s) in about `seconds`.
// *direct = 0: O_DIRECT refused. 0, or -1 with err set.
int ssd_probe_bandwidth(const char* dir, double seconds, int64_t max_bytes, double* read_bps,
                        double* write_bps, int* direct, char* err, size_t errlen);
