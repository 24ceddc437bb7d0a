// ssd.h — the SSD tier: all host<->disk movement of the optimizer state.
// Files hold streamed layers' fp32 weights, m and v. RAM holds a small ring.

// Three parts, bottom up (docs/ssd.md in full):
//   SsdIo     direct I/O over io_uring; errors return, nothing exits
//   SsdStore  two generations of files, and the AdamW round over them
//   helpers   ssd_plan (-P 1) and ssd_probe_bandwidth
// Not here: the update's math, the GPU, flags.

// Threads: SsdIo is thread-safe. An SsdStore: one thread at a time, except _async calls.
#pragma once
#include <stddef.h>
#include <stdint.h>

#define SSD_ALIGN             4096             // O_DIRECT alignment of buffers, offsets and lengths
#define SSD_PIECE_ALIGN_ELEMS ((int64_t)2048)  // 4096 bytes of bf16: pieces start aligned

// 4096-aligned, zero-filled host memory, or NULL. Free with ssd_free.
void* ssd_alloc(int64_t bytes);
void ssd_free(void* p);
static inline int64_t ssd_round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

// ============================================================================
// Asynchronous direct I/O

typedef struct SsdIo SsdIo;
typedef int64_t SsdReq;  // a request id (> 0)

typedef struct {
    int queue_depth;       // chunks in flight (io_uring entries or thread queue); 0: 16
    int64_t chunk_bytes;   // request split size, a multiple of 4096; 0: 4 MiB
    int force_fallback;    // 1 (or env SSD_IO_FALLBACK=1): pread/pwrite threads, for tests
    int fallback_threads;  // fallback threads, one chunk each in flight; 0: queue_depth
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

// Opens with O_DIRECT, else buffered with a warning. create = 1 fallocates `size`.
int ssd_file_open(SsdFile* f, const char* path, int create, int64_t size, int quiet, char* err,
                  size_t errlen);
// Opens an existing file read-only through the page cache: what one process reads, the next finds there.
int ssd_file_open_cached(SsdFile* f, const char* path, char* err, size_t errlen);
// Drops O_DIRECT from an open file: its writes go through the page cache, where readers find them.
int ssd_file_buffered(SsdFile* f, char* err, size_t errlen);
void ssd_file_close(SsdFile* f);
int ssd_file_sync(SsdFile* f, char* err, size_t errlen);  // fsync

// Queues a read or write. Keep buf until the wait, which reports errors.
SsdReq ssd_io_submit(SsdIo* io, const SsdFile* f, int write, void* buf, int64_t bytes, int64_t offset);
// A read someone waits on now (-sw 1's weights for the backward): ahead of every queued read (the
// read-ahead), after the urgent ones queued before it.
SsdReq ssd_io_submit_urgent(SsdIo* io, const SsdFile* f, void* buf, int64_t bytes, int64_t offset);
// Waits for r: 0, or -1 with err. Once per request.
int ssd_io_wait(SsdIo* io, SsdReq r, char* err, size_t errlen);
int ssd_io_poll(SsdIo* io, SsdReq r);  // 1 when complete (ssd_io_wait then returns at once)
// A request whose wait fails with msg (bad arguments).
SsdReq ssd_io_fail(SsdIo* io, const char* msg);

// Test hook: hold = 1 queues requests and starts none until hold = 0 (an order test's queue, whatever the
// timing).
void ssd_io_hold(SsdIo* io, int hold);
// Test hook: fail `write` chunks past `after` with err (kill = 1: SIGKILL).
void ssd_io_set_fault(SsdIo* io, int write, int64_t after, int err, int kill);
// The fault above for one transfer made beside the queue (a chunk of its count): 0 none, an errno, or -1 a
// short transfer; "kill" kills the process.
int ssd_io_fault_take(SsdIo* io, int write);
// Test hook: the directions of the first 4095 chunks as they started ('r', 'w'; 'u' an urgent read), into
// out. Returns the count.
int ssd_io_started_order(SsdIo* io, char* out, int cap);
// Bytes moved so far (for the bench and the timeline).
void ssd_io_counters(const SsdIo* io, int64_t* bytes_read, int64_t* bytes_written);

// Busy log (-Y 1): when reads, writes had requests in flight.
#define SSD_BUSY_LOG 4096
typedef struct {
    double t0, t1;  // seconds on the steady clock
} SsdBusySpan;
void ssd_io_log_busy(SsdIo* io, int on);
// Spans ending after t_from, oldest first, neighbours joined.
int ssd_io_busy_spans(SsdIo* io, int write, double t_from, SsdBusySpan* out, int cap);

// ============================================================================
// The state store and the pipelined AdamW round

typedef struct SsdStore SsdStore;

typedef struct {
    int num_layers;       // streamed layers, numbered as the trainer maps them
    int64_t layer_elems;  // parameters of one layer
    int with_bf16;        // -sw 1: the bf16 copy lives in the store too
    int grads_on_disk;    // bf16 gradients via DIR/grads.bf16, read by the round
    // -sw 1 on several ranks of a node: the bf16 files are written through the page cache (no O_DIRECT), so
    // that the other ranks' reads of a layer the round just wrote find it there (ssd_bf16_files_read)
    int bf16_cached;
    // -sw 1 on several nodes: DIR/layers.bf16 holds each streamed layer's whole bf16 weights
    // (whole_bf16_elems of them; the store's state is its part, layer_elems). A scratch file as grads.bf16 is
    // (rewritten at every start, in no checkpoint), written through the page cache
    // (ssd_store_write_whole_bf16), read by every rank of the node (ssd_bf16_files_open). 0: none.
    int64_t whole_bf16_elems;
    int ring;             // piece buffers (>= 3): ring - 2 read ahead, 1 updated, 1 written
    int64_t piece_elems;  // elements per piece, a multiple of 2048; 0: a layer
    SsdIoConfig io;
    // NULL or "": no checkpoints, so any run may replace the store.
    const char* owner;  // the owning run (train_gpt: its -o, absolute)
} SsdStoreConfig;

// New full-size store under dir, or NULL. Replaces only its owner's.
SsdStore* ssd_store_create(const char* dir, const SsdStoreConfig* cfg, char* err, size_t errlen);
// Opens dir's checkpoint of `step` (< 0: newest), all files checked, or NULL.
SsdStore* ssd_store_open(const char* dir, const SsdStoreConfig* cfg, int64_t step, char* err, size_t errlen);
// flock on dir: one run per store. The fd, or -1.
int ssd_lock_dir(const char* dir, char* err, size_t errlen);
void ssd_store_close(SsdStore* st);
SsdIo* ssd_store_io(SsdStore* st);
// The step each generation holds (-1: none).
void ssd_store_steps(const SsdStore* st, int64_t steps[2]);
// Disk bytes of the files, host bytes of the ring.
int64_t ssd_store_disk_bytes(const SsdStoreConfig* cfg);
// The disk a store in dir holds now (its files' allocated bytes; 0: none): what ssd_store_create frees first.
int64_t ssd_store_held_bytes(const char* dir);
int64_t ssd_store_ring_bytes(const SsdStoreConfig* cfg);
int64_t ssd_store_layer_pieces(const SsdStoreConfig* cfg);  // the pieces a layer is cut into
// Buffer size for the two _async calls: one layer's bf16.
int64_t ssd_store_bf16_layer_bytes(const SsdStore* st);

// Synchronous whole-layer transfers (init, resume, export, tests).
// m or v NULL: zeros written, skipped read.
int ssd_store_write_layer(SsdStore* st, int layer, const float* params, const float* m, const float* v,
                          char* err, size_t errlen);
int ssd_store_read_layer(SsdStore* st, int layer, float* params, float* m, float* v, uint16_t* bf16,
                         char* err, size_t errlen);

// One layer's bf16 to or from 4096-aligned memory. Wait with ssd_store_wait.
SsdReq ssd_store_read_bf16_async(SsdStore* st, int layer, uint16_t* dst);
SsdReq ssd_store_write_grads_async(SsdStore* st, int layer, const uint16_t* src);
// whole_bf16_elems: layer's whole bf16 weights (whole_bf16_elems) into DIR/layers.bf16 (the page cache);
// -1 with err. ssd_store_sync_whole: every such write on the disk (fdatasync), or -1 with err.
int ssd_store_write_whole_bf16(SsdStore* st, int layer, const uint16_t* src, char* err, size_t errlen);
int ssd_store_sync_whole(SsdStore* st, char* err, size_t errlen);
int ssd_store_wait(SsdStore* st, SsdReq r, char* err, size_t errlen);
// The generation (0, 1) whose files hold layer's newest state: what ssd_bf16_files_read reads.
int ssd_store_layer_gen(const SsdStore* st, int layer);

// -sw 1 on several ranks of a node: every rank, the store's own too, reads the bf16 weights of the store in
// dir through the page cache, so that one rank's read from disk serves the others. Read-only, no lock: the
// store's process says which generation holds each layer, and when it is written. whole: the store's
// DIR/layers.bf16 instead (several nodes: whole_bf16_elems = layer_elems), one file, the generation ignored.
typedef struct SsdBf16Files SsdBf16Files;
SsdBf16Files* ssd_bf16_files_open(const char* dir, int num_layers, int64_t layer_elems, int whole, char* err,
                                  size_t errlen);
void ssd_bf16_files_close(SsdBf16Files* b);
SsdIo* ssd_bf16_files_io(SsdBf16Files* b);  // wait and poll the reads with it
// Reads layer's bf16 of generation gen into dst (ssd_round_up(layer_elems * 2, SSD_ALIGN) bytes).
SsdReq ssd_bf16_files_read(SsdBf16Files* b, int gen, int layer, uint16_t* dst);

// What a round calls back (on the round's thread).
typedef struct {
    // Blocks until layer's gradients are in RAM. grads_on_disk: NULL, or returns NULL.
    const uint16_t* (*grads)(void* ctx, int layer);
    // Updates [offset, offset + n), pointers at `offset`. bf16_out may be NULL.
    void (*update)(void* ctx, int layer, int64_t offset, int64_t n, float* params, const uint16_t* grads,
                   float* m, float* v, uint16_t* bf16_out);
    // Without with_bf16: where the bf16 copy goes, or NULL.
    uint16_t* (*bf16_dst)(void* ctx, int layer);
    // Layer updated, bf16 copy complete. May be NULL.
    void (*layer_done)(void* ctx, int layer);
    void* ctx;
    // grads_on_disk: 1 where layer's gradients are in RAM still (grads returns them), so the round reads none
    // of the grads file for it. May be NULL (all from the file).
    int (*grads_in_ram)(void* ctx, int layer);
} SsdRoundFns;

// AdamW over layers[0..n) in order: 0, or -1 with err.
// After an error, rounds are refused. The last checkpoint stays intact.
int ssd_store_round(SsdStore* st, const int* layers, int n, const SsdRoundFns* fns, char* err, size_t errlen);
// Makes the newest state durable as `step`'s checkpoint (docs/ssd.md).
int ssd_store_checkpoint(SsdStore* st, int64_t step, char* err, size_t errlen);

// ============================================================================
// Capacity plan and bandwidth probe

typedef struct {
    int64_t streamed_layers;  // layers whose state is on disk
    int64_t layer_elems;
    int64_t resident_elems;  // embeddings and -R layers, their state kept in host RAM
    int with_bf16;           // -sw 1
    int grads_on_disk;
    int ring;
    int64_t piece_elems;       // 0: whole layers
    int bf16_buffers;          // -sw 1: pinned bf16 layer buffers (slots + read-ahead)
    int64_t whole_bf16_elems;  // -sw 1 on several nodes: SsdStoreConfig's (with_bf16 = 0 then)
    int grad_buffers;          // grads_on_disk: pinned layer-sized gradient staging buffers
    int held_grads;            // grads_on_disk: the backward's last layers whose gradients the round reads
                               // from their staging buffer (ssd_tier.h's GRAD_RING), never from the disk
    int64_t other_host_bytes;  // the trainer's other host RAM (tokens, logits, ...)
} SsdPlanInput;

typedef struct {
    // host RAM, part by part
    int64_t host_resident;   // 14 B a resident param: fp32 master, m, v, pinned bf16
    int64_t host_bf16;       // streamed pinned bf16 weights (-sw 1: the buffers)
    int64_t host_grads;      // pinned bf16 gradients (grads on disk: staging buffers)
    int64_t host_ring;       // the round's piece ring
    int64_t host_bytes;      // the sum, + other_host_bytes
    int64_t disk_bytes;      // both generations (+ the gradients file)
    int64_t read_per_step;   // a step's disk reads: the round (+ -sw 1: the backward's bf16 weights; several
                             // ranks: the forward's too)
    int64_t write_per_step;  // a step's disk writes: the round (+ gradients)
    // The disk work the round itself waits for, during the next forward pass (the forward needs each layer's
    // update): its reads, read_per_step less what moved to the backward (the first ring - 1 pieces' p, m, v
    // read ahead, -sw 1's bf16 weights) and the held gradients; and the writes it must wait for: a ring
    // entry is read into again only once its piece is written, so every piece's but the last ring's (-sw 1's
    // forward takes each layer from the round's handoff buffers as soon as it is updated, not once written).
    // A ring of the round's pieces + 1 waits for no write.
    int64_t round_reads, round_writes;
} SsdPlan;
SsdPlan ssd_plan(const SsdPlanInput* in);

// The disk as the tier uses it (issue 42: measure first): writes alone, reads alone, then reads of one file
// and writes of another at once through one SsdIo (its reads-first order), each phase about `seconds`, with
// `queue_depth` chunks of 4 MiB in flight. Two files of up to max_bytes (at most a quarter of the free
// space).
typedef struct {
    double read_bps, write_bps;              // alone
    double mixed_read_bps, mixed_write_bps;  // at once
    int direct;                              // O_DIRECT held (0: buffered, the figures are the page cache's)
    const char* backend;                     // "io_uring" or "pread/pwrite threads"
} SsdRates;
int ssd_probe_rates(const char* dir, double seconds, int64_t max_bytes, int queue_depth, SsdRates* out,
                    char* err, size_t errlen);

// dir's O_DIRECT write and read bandwidth (bytes/s), in about `seconds`.
// *direct = 0: O_DIRECT refused.
int ssd_probe_bandwidth(const char* dir, double seconds, int64_t max_bytes, double* read_bps,
                        double* write_bps, int* direct, char* err, size_t errlen);
