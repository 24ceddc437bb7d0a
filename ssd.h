// ssd.h — every host<->disk movement of the optimizer state (issue 22's SSD tier): the fp32 master weights
// and AdamW m, v of the streamed layers (and, optionally, their bf16 copy and their bf16 gradients) live in
// files under a directory on an NVMe drive; host RAM keeps a small ring of piece-sized buffers.
//
// Three layers, bottom up:
//   SsdIo    asynchronous direct I/O: O_DIRECT files, 4096-aligned buffers, each request split into large
//            sequential chunks (default 4 MiB) with several in flight, over io_uring (liburing). Where the
//            kernel refuses io_uring (containers: EPERM/ENOSYS) or SSD_IO_FALLBACK=1 is set, a pool of
//            pread/pwrite threads does the same; where a filesystem refuses O_DIRECT (EINVAL), the file is
//            opened buffered. Each fallback prints one warning line. Errors (EIO, ENOSPC, short transfers)
//            become one message through the return value of ssd_io_wait; nothing here exits or aborts.
//   SsdStore the per-layer state in two generations of files (below) and the pipelined AdamW round over it:
//            read the state of the pieces ahead, update the current one with the caller's update function
//            (which calls cpu_adam.h's adamw_update_*: same math as the in-RAM update, bit for bit), write
//            back the ones behind, so disk reads, the update and disk writes overlap.
//   helpers  ssd_plan (host RAM, disk bytes and disk traffic per step of a configuration, for -P 1) and
//            ssd_probe_bandwidth (the disk's O_DIRECT read and write bandwidth in a few seconds).
// Not here: which tensors decay, the lr, the clip (the trainer's update function decides; cpu_adam.h's
// adamw_tensors_window_bf16grad does a layer's tensors), anything about the GPU, the trainer's own checkpoint
// files (checkpoint.h), flags.
//
// ---- Files (DIR is the -sd directory)
//   DIR/ssd_manifest                  text: shape of the store and the step each generation holds (below)
//   DIR/gen0/{params,m,v}.f32, DIR/gen0/weights.bf16 (only with_bf16)       generation 0
//   DIR/gen1/...                                                             generation 1 (same files)
//   DIR/grads.bf16 (only grads_on_disk)                                      this step's gradients, one copy
// Layer l occupies [l * S, l * S + n * elem_size) of each file, S = n * elem_size rounded up to 4096, so
// every layer and every piece (a multiple of 2048 elements) starts on a 4096-byte boundary. All files are
// fully allocated (fallocate) when the store is created: a disk too small fails then, with the numbers.
//
// ---- Checkpoints with the state on disk: two generations, no copy
// Every generation g has a step in the manifest: step[g] >= 0 means "gen g holds the complete state after
// step step[g], durable"; -1 means "being written, or never complete". The invariants:
//   1. the store writes into a generation only after its step = -1 is durable in the manifest (so a
//      generation the manifest names as complete is never touched, whatever happens later: kill -9, power
//      loss, ENOSPC);
//   2. a generation's step is set only after its files are fsynced.
// A round reads each layer from the generation holding its newest state (src[l]) and writes to the write
// generation w. Between checkpoints it does so in place (src[l] = w): one copy of the state is written.
// ssd_store_checkpoint(step): fsync gen w, manifest step[w] = step (tmp + fsync + rename + fsync DIR), then
// w := the other generation. The next round reads every layer from the checkpoint's generation and writes to
// the other one, which therefore receives a full copy as a side effect of the round's normal writes: a
// checkpoint costs an fsync and a 200-byte manifest, no extra disk traffic, and the checkpoint's generation
// stays intact until the NEXT checkpoint is complete. Disk cost: exactly two copies of the state (the
// design's stated second copy), never three. (A layer not updated since the last checkpoint, e.g. two
// checkpoints without a round between them, is copied at the checkpoint: the only case that moves data.)
// Reflinks (FICLONE) were considered: a clone is free, but every step rewrites every byte of the state, so
// after one step a cloned checkpoint costs a full second copy anyway, and only btrfs/XFS have them; the A/B
// scheme needs nothing from the filesystem. Resume: ssd_store_open(DIR, cfg, step) finds the generation whose
// step is `step` (the trainer's checkpoint records its step); the first write after it goes to the other
// generation. The trainer writes its own checkpoint files (data position, hyperparameters: checkpoint.h)
// after ssd_store_checkpoint returned and before the next round starts, and its DONE marker last; a kill
// between the two leaves both generations valid (the other one is only invalidated by its first write), so
// either checkpoint can be resumed from.
//
// ---- How the trainer calls it (train_gpt.cu with -sd: ssd_attach, ssd_round, GradsWriter; -sw 1 not yet)
//   start:      plan = ssd_plan(...) for -P 1 and the space check; ssd_probe_bandwidth(DIR) for the printout;
//               st = ssd_store_create(DIR, cfg) then ssd_store_write_layer(l, master, 0, 0) per streamed
//               layer (a resume: st = ssd_store_open(DIR, cfg, step of the checkpoint)); host RAM keeps the
//               fp32 master, m, v of the GPU-resident prefix (embeddings, -R layers) only.
//   backward:   with grads_on_disk, after layer l's gradients reach a pinned staging buffer
//               (grads_on_host[l]), r = ssd_store_write_grads_async(st, l, buf); the buffer is reused once
//               ssd_store_wait(r) returns.
//   optimizer:  optimizer_thread_main's loop over layers R..L-1 becomes one ssd_store_round(st, layers, fns):
//               fns.grads waits for stream_wait_grads_on_host(l) and returns grads_host_bf16 + l*stride (or
//               NULL on disk); fns.update calls adamw_tensors_window_bf16grad(NUM_LAYER_TENSORS,
//               p->layer_offset, p->layer_size, layer_tensor_is_matrix, off, n, ...) with the round's
//               AdamWArgs; fns.bf16_dst returns ws.weights_host_bf16 + gpt_layer_offset(l); fns.layer_done
//               does what the loop body does after adamw_layer today (block_t0/t1, blocks_done = l + 1,
//               notify).
//   -sw 1:      the forward/backward read layer l's bf16 weights with ssd_store_read_bf16_async into a ring
//               of pinned, 4096-aligned layer buffers (instead of weights_host_bf16 + offset) after
//               layer_done(l).
//   checkpoint: save_checkpoint = optimizer_wait_all; ssd_store_checkpoint(st, step); then the trainer's own
//               state file (data position, hyperparameters, "state in DIR at step S" instead of m and v) and
//               DONE last. The model file of a checkpoint is then optional (it is a copy of the params:
//               export it with ssd_store_read_layer from the checkpoint's generation at the end of training).
//
// ---- Threads
// SsdIo is thread-safe. An SsdStore's round, checkpoint and write_layer/read_layer run on one thread at a
// time (the optimizer thread; the checkpoint when no round is running); ssd_store_read_bf16_async and
// ssd_store_write_grads_async may be called from any thread, concurrently with a round
// (the trainer's streams).
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

// Opens (create = 1: creates or truncates, then allocates `size` bytes with fallocate) path read-write with
// O_DIRECT; a filesystem that refuses O_DIRECT gets a buffered file and one warning line (env SSD_NO_DIRECT=1
// forces that, for tests). 0, or -1 with err set ("no space" names the bytes asked and free).
int ssd_file_open(SsdFile* f, const char* path, int create, int64_t size, int quiet, char* err,
                  size_t errlen);
void ssd_file_close(SsdFile* f);
int ssd_file_sync(SsdFile* f, char* err, size_t errlen);  // fsync

// Queues a read (write = 0) or write of `bytes` at `offset`; returns its id. A bad request (unaligned on an
// O_DIRECT file, out of the file) is not refused here: its ssd_io_wait returns the error. buf must stay valid
// until the request is waited for.
SsdReq ssd_io_submit(SsdIo* io, const SsdFile* f, int write, void* buf, int64_t bytes, int64_t offset);
// Blocks until request r is complete; 0, or -1 with err set to one line naming the file, the offset and why.
// Every submitted request must be waited for exactly once.
int ssd_io_wait(SsdIo* io, SsdReq r, char* err, size_t errlen);
int ssd_io_poll(SsdIo* io, SsdReq r);  // 1 when complete (ssd_io_wait then returns at once)

// Test hook: the (after + 1)-th chunk of kind `write` from now, and every one after it, fails with errno err
// (err = 0: transfers 0 bytes, a short write/read) without touching the disk; kill = 1: the process kills
// itself with SIGKILL there instead (a crash between two writes). after < 0 removes the fault.
void ssd_io_set_fault(SsdIo* io, int write, int64_t after, int err, int kill);
// Bytes moved so far (for the bench and the timeline).
void ssd_io_counters(const SsdIo* io, int64_t* bytes_read, int64_t* bytes_written);

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
} SsdStoreConfig;

// A fresh store under dir (created if missing; an existing store there is replaced): every file allocated
// at full size. Its state is undefined until written (ssd_store_write_layer). NULL with err set on failure.
SsdStore* ssd_store_create(const char* dir, const SsdStoreConfig* cfg, char* err, size_t errlen);
// An existing store at its checkpoint of `step` (step < 0: the newest checkpoint). The shape in cfg must
// match the manifest's. NULL with err set (e.g. "DIR holds the state of steps 40 and 50, not 45").
SsdStore* ssd_store_open(const char* dir, const SsdStoreConfig* cfg, int64_t step, char* err, size_t errlen);
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

// Synchronous whole-layer transfers through the ring (any alignment of the caller's arrays), for the initial
// state, a resume that loads the state, exporting a model file, and tests. write_layer writes into the write
// generation (bf16 = bf16(params) too with with_bf16; m or v NULL: zeros, a fresh state); read_layer reads
// the newest state, skipping NULL arrays.
int ssd_store_write_layer(SsdStore* st, int layer, const float* params, const float* m, const float* v,
                          char* err, size_t errlen);
int ssd_store_read_layer(SsdStore* st, int layer, float* params, float* m, float* v, uint16_t* bf16,
                         char* err, size_t errlen);

// -sw 1: layer's bf16 weights (newest) into dst; -sd with grads on disk: layer's gradients from src into the
// grads file. dst/src 4096-aligned with ssd_store_bf16_layer_bytes bytes. Wait with ssd_store_wait.
SsdReq ssd_store_read_bf16_async(SsdStore* st, int layer, uint16_t* dst);
SsdReq ssd_store_write_grads_async(SsdStore* st, int layer, const uint16_t* src);
int ssd_store_wait(SsdStore* st, SsdReq r, char* err, size_t errlen);

// What a round calls back (on the round's thread).
typedef struct {
    // Once per layer, before its first update: blocks until its gradients are ready and returns them (bf16,
    // in RAM: the layer's layer_elems gradients); NULL with grads_on_disk (the round reads them from the
    // file: the caller has waited for its ssd_store_write_grads_async first). May be NULL with grads_on_disk.
    const uint16_t* (*grads)(void* ctx, int layer);
    // Updates elements [offset, offset + n) of the layer: params, grads, m, v, bf16_out (NULL: none) point at
    // element `offset`. Typically adamw_tensors_window_bf16grad (cpu_adam.h) with the layer's tensor table.
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

// The AdamW round over layers[0..n) in that order. 0, or -1 with err set; after an error the store refuses
// further rounds and checkpoints (the write generation may be torn; the last checkpoint's is intact).
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

// Measures dir's O_DIRECT sequential write, then read bandwidth (bytes/s) with a temporary file of at most
// max_bytes (0: 1 GiB, less when the filesystem has less than 4x that free), about `seconds` in all. *direct
// = 0 when the filesystem refused O_DIRECT (the read figure is then the page cache's). 0, or -1 with err set.
int ssd_probe_bandwidth(const char* dir, double seconds, int64_t max_bytes, double* read_bps,
                        double* write_bps, int* direct, char* err, size_t errlen);
