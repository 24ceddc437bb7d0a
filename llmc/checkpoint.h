// checkpoint.h — both trainers' checkpoints, three files a step:
//   DIR/model_STEP.bin  fp32 master weights, llm.c's format (Llama: llama_model.h's)
//   DIR/state_STEP.bin  AdamW m, v, step, updates, data position, hyperparameters, -sl / -sg windows
//   DIR/DONE_STEP       written last, after fsyncing both: no DONE, no resume

// Here: the state format, saving, checks, the resume point.
// Not here: copying state off the GPU (train_gpt.cu), model files (model.h).
#pragma once
#include <errno.h>
#include <limits.h>  // defines: PATH_MAX
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <string>
#include <vector>
#include "dataloader.h"  // defines: DataLoader, DataLoaderState, dl_same_tokenizer (the top level's: llm.c's too)
#include "llmc/model_file.h"  // defines: gpt_read_header, gpt_load_params; model.h: write_crc, model_tmp_open
// defines: LlamaConfig, llama_is_model_file, llama_read_header, llama_save_params, llama_header
#include "llmc/llama_model.h"
#include "llmc/model_specs.h"  // defines: parse_model_spec
#include "llmc/args.h"         // defines: TrainArgs, lr_schedule_name
#include "llmc/outliers.h"     // defines: OutlierWindow
#include "llmc/run_dir.h"      // defines: lock_output_dir, fsync_dir, dir_latest_step, prune_checkpoints
#include "llmc/utils.h"        // defines: die

#define STATE_MAGIC   20241122
#define STATE_VERSION 3  // 2 added the hyperparameters (version 1 is refused), 3 the run tail (2 is read)
// -sd: streamed layers' state is in an SsdStore (ssd.h, docs/ssd.md). 102: before the run tail.
#define STATE_VERSION_SSD 103
static inline bool state_version_ssd(int64_t v) { return v == STATE_VERSION_SSD || v == 102; }
static inline bool state_version_known(int64_t v) {
    return v == STATE_VERSION || v == 2 || state_version_ssd(v);
}
// SSD_TAIL_NODE_PART: -sd on several nodes, the elements of each node's part of a layer (comm_node_part's
// stride: node n's store holds [n * it, (n + 1) * it)); 0: one store of whole layers (one node).
enum { SSD_TAIL_PREFIX, SSD_TAIL_STORE_STEP, SSD_TAIL_STREAMED_LAYERS, SSD_TAIL_NODE_PART, SSD_TAIL_FIELDS };

// The state header: 16 int64. Floats as bits, so resume compares exactly.
enum {
    ST_MAGIC,
    ST_VERSION,
    ST_STEP,
    ST_PARAMS,
    ST_DATA_STATE_BYTES,  // all that version 1 had
    ST_TOTAL_STEPS,
    ST_STEP_TOKENS,
    ST_B,
    ST_T,
    ST_LR,
    ST_WARMUP,
    ST_FINAL_LR_FRAC,
    ST_WEIGHT_DECAY,
    ST_GRAD_CLIP,
    ST_ADAM_T,       // updates applied: -sl / -sg skips lower it. Old files: 0
    ST_LR_SCHEDULE,  // -k (LR_COSINE ...). Old files: 0, cosine
    ST_HEADER_FIELDS = 16
};
static_assert(ST_LR_SCHEDULE < ST_HEADER_FIELDS, "the state header is full");

static int64_t float_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (int64_t)u;
}
static float bits_float(int64_t b) {
    const uint32_t u = (uint32_t)b;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

// The run tail (version 3 / 103): the state file's last bytes. What a resume needs besides the header's
// hyperparameters: -a, -sl, -sg, and the -sl / -sg windows, so that a resumed run skips the steps the
// uninterrupted run would have (without them it skipped none for OUTLIER_WINDOW steps).
typedef struct {
    int64_t present;            // 1 (0: a file from before the tail, the rest zero)
    int64_t overfit;            // -a
    int64_t skip_z_bits[2];     // -sl, -sg (float bits)
    int64_t count[2], next[2];  // the windows, losses then norms: OutlierWindow's
    double values[2][OUTLIER_WINDOW];
} RunTail;
static inline int64_t state_run_tail_bytes(int64_t version) {
    return version == STATE_VERSION || version == STATE_VERSION_SSD ? (int64_t)sizeof(RunTail) : 0;
}
// The run tail of a, losses and norms (NULL: empty windows).
static RunTail run_tail_of(const TrainArgs* a, const OutlierWindow* losses, const OutlierWindow* norms) {
    RunTail t;
    memset(&t, 0, sizeof t);
    t.present = 1;
    t.overfit = a->overfit_single_batch;
    t.skip_z_bits[0] = float_bits(a->skip_loss_z);
    t.skip_z_bits[1] = float_bits(a->skip_grad_z);
    const OutlierWindow* w[2] = {losses, norms};
    for (int i = 0; i < 2; i++)
        if (w[i]) {
            t.count[i] = w[i]->count, t.next[i] = w[i]->next;
            memcpy(t.values[i], w[i]->values, sizeof t.values[i]);
        }
    return t;
}
// The windows a checkpoint's tail holds (none before the tail: left empty, to fill again).
static void run_tail_windows(const RunTail* t, OutlierWindow* losses, OutlierWindow* norms) {
    OutlierWindow* w[2] = {losses, norms};
    for (int i = 0; i < 2; i++) {
        memset(w[i], 0, sizeof *w[i]);
        if (!t->present) continue;
        w[i]->count = (int)t->count[i], w[i]->next = (int)t->next[i];
        memcpy(w[i]->values, t->values[i], sizeof t->values[i]);
    }
}

static int read_all(FILE* f, void* p, int64_t bytes) {
    return (int64_t)fread(p, 1, (size_t)bytes, f) == bytes;
}

// Opens regular files only: a FIFO could block forever. NULL with err.
static FILE* open_regular(const char* path, const char* what, char* err, size_t errlen) {
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s %.400s: %.60s", what, path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(err, errlen, "%s %.400s is not a regular file", what, path);
        return NULL;
    }
    FILE* f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        snprintf(err, errlen, "cannot open %s %.400s: %.60s", what, path, strerror(errno));
    }
    return f;
}

// Size and CRC-32C of a file. 0 with err on failure.
static int file_crc32c(const char* path, int64_t* bytes, uint32_t* crc, char* err, size_t errlen) {
    FILE* f = open_regular(path, "checkpoint file", err, errlen);
    if (!f) return 0;
    const size_t chunk = (size_t)8 << 20;
    unsigned char* buf = (unsigned char*)malloc(chunk);
    if (!buf) {
        fclose(f);
        snprintf(err, errlen, "out of memory checking %.400s", path);
        return 0;
    }
    struct stat st;
    const int64_t size = fstat(fileno(f), &st) == 0 ? (int64_t)st.st_size : 0;
    *bytes = 0;
    *crc = 0;
    size_t n;
    int quarter = 0;
    while ((n = fread(buf, 1, chunk, f)) > 0) {
        *crc = crc32c_update(*crc, buf, n);
        *bytes += (int64_t)n;
        progress_tick();
        if (size > 0) read_progress("checking checksum of", path, *bytes, size, &quarter);
    }
    const int ok = !ferror(f);
    free(buf);
    fclose(f);
    if (!ok) snprintf(err, errlen, "read error in %.400s", path);
    return ok;
}

// DONE: sizes and CRC-32C, apart so model files stay llm.c's.
//   checkpoint 1 crc32c
//   model_00000012.bin 1234567 1a2b3c4d
//   state_00000012.bin 2345678 5e6f7081
#define DONE_HEADER "checkpoint 1 crc32c\n"
typedef struct {
    int64_t bytes;
    uint32_t crc;
} FileSum;

// Writes DONE_<step> from sums {model, state}. 0 with err on failure.
static int checkpoint_write_done(const char* dir, int64_t step, const FileSum sums[2], char* err,
                                 size_t errlen) {
    char done[4200], tmp[4300];
    snprintf(done, sizeof done, "%s/DONE_%08lld", dir, (long long)step);
    snprintf(tmp, sizeof tmp, "%s.tmp", done);
    FILE* f = fopen(tmp, "w");
    if (!f) {
        snprintf(err, errlen, "cannot create %.400s: %.60s", tmp, strerror(errno));
        return 0;
    }
    errno = 0;
    const int ok = fprintf(f, DONE_HEADER "model_%08lld.bin %lld %08x\nstate_%08lld.bin %lld %08x\n",
                           (long long)step, (long long)sums[0].bytes, sums[0].crc, (long long)step,
                           (long long)sums[1].bytes, sums[1].crc) > 0;
    int why;
    if (!finish_atomic_write(f, ok, tmp, done, &why)) {  // atomic. The caller fsyncs dir.
        snprintf(err, errlen, "cannot write %.400s: %.60s", done, why ? strerror(why) : "short write");
        return 0;
    }
    return 1;
}

// Checks step's files' sizes, then CRC-32C, against DONE. 0 with err.
// model_only: the model file alone (-e of a run's folder reads no state).
static int checkpoint_verify(const char* dir, int64_t step, int* verified, char* err, size_t errlen,
                             bool model_only = false) {
    char done[4200];
    snprintf(done, sizeof done, "%s/DONE_%08lld", dir, (long long)step);
    *verified = 0;
    FILE* f = open_regular(done, "checkpoint marker", err, errlen);
    if (!f) return 0;
    char text[512];
    const size_t n = fread(text, 1, sizeof text - 1, f);
    const int more = fgetc(f) != EOF;
    fclose(f);
    text[n] = '\0';
    if (n == 0) return 1;  // an older build's empty marker: unverified
    char name[2][64];
    long long bytes[2];
    unsigned crc[2];
    int used = 0;
    if (more || strncmp(text, DONE_HEADER, strlen(DONE_HEADER)) != 0 ||
        sscanf(text + strlen(DONE_HEADER), "%63s %lld %8x\n%63s %lld %8x\n%n", name[0], &bytes[0], &crc[0],
               name[1], &bytes[1], &crc[1], &used) != 6 ||
        text[strlen(DONE_HEADER) + used] != '\0') {
        snprintf(err, errlen, "checkpoint marker %.400s: not a marker this build writes (damaged?)", done);
        return 0;
    }
    for (int i = 0; i < (model_only ? 1 : 2); i++) {
        char want[64], path[4300];
        snprintf(want, sizeof want, "%s_%08lld.bin", i == 0 ? "model" : "state", (long long)step);
        if (strcmp(name[i], want) != 0) {
            snprintf(err, errlen, "checkpoint marker %.400s names %.63s, not %s (damaged?)", done, name[i],
                     want);
            return 0;
        }
        snprintf(path, sizeof path, "%s/%s", dir, want);
        int64_t got_bytes;
        uint32_t got_crc;
        if (!file_crc32c(path, &got_bytes, &got_crc, err, errlen)) return 0;
        if (got_bytes != bytes[i]) {
            snprintf(err, errlen,
                     "%.400s: %lld bytes, its checkpoint marker says %lld (truncated or replaced)", path,
                     (long long)got_bytes, bytes[i]);
            return 0;
        }
        if (got_crc != crc[i]) {
            snprintf(err, errlen,
                     "%.400s: checksum mismatch (CRC-32C %08x, its checkpoint marker says %08x): the file is "
                     "damaged",
                     path, got_crc, crc[i]);
            return 0;
        }
    }
    *verified = 1;
    return 1;
}

// -sd: layers from first_layer on keep fp32 state on SSD. Several nodes (read_moment set): their state is
// spread over the nodes; read_layer and read_moment gather a layer's, and the state file is the usual one
// (m and v of every parameter), written a layer at a time. -sd on several nodes: read_layer gathers from
// the nodes' stores, read_moment is NULL (the stores keep m and v), read_vocab as below.
typedef struct {
    int64_t prefix;      // parameters in the caller's arrays: embeddings + -R layers
    int64_t store_step;  // the store generation's step (= the checkpoint's)
    int first_layer;     // the first streamed layer (-R)
    int (*read_layer)(void* ctx, int layer, float* params, char* err, size_t errlen);  // from the store
    void* ctx;
    // several nodes: layer l's AdamW m (which 1) or v (2); called for m's layers in order, then v's
    int (*read_moment)(void* ctx, int which, int layer, float* out, char* err, size_t errlen);
    // several nodes with -E 1 (Llama): the embedding block's [lo, hi) of the fp32 weights (which 0), m (1) or
    // v (2), in state_window_floats() windows, after each one's layers (the files: [layers | embeddings];
    // -sd's state file: the prefix's m and v, [embeddings | -R layers]); NULL: the prefix arrays hold them
    int (*read_vocab)(void* ctx, int which, int64_t lo, int64_t hi, float* out, char* err, size_t errlen);
    int64_t node_part;  // -sd on several nodes: the state file's SSD_TAIL_NODE_PART
} StreamedState;
// The windows of read_vocab, and of -E 1's loads on several nodes: 16M floats (tests:
// LLMC_TEST_STATE_WINDOW floats, on every node alike).
static inline int64_t state_window_floats() {
    const char* t = getenv("LLMC_TEST_STATE_WINDOW");
    return t && atoll(t) > 0 ? atoll(t) : (int64_t)1 << 24;
}

// The embedding block's n floats of `which` (StreamedState.read_vocab) to f, a window at a time.
static int write_vocab_windows(FILE* f, const StreamedState* ss, int which, int64_t n, uint32_t* crc,
                               char* err, size_t errlen) {
    const int64_t W = state_window_floats();
    float* w = (float*)malloc((size_t)std::min(n, W) * 4);
    int ok = w != NULL;
    for (int64_t a = 0; a < n && ok; a += W) {
        const int64_t b = std::min(n, a + W);
        ok = ss->read_vocab(ss->ctx, which, a, b, w, err, errlen) && write_crc(f, w, (b - a) * 4, crc);
    }
    free(w);
    return ok;
}

// Layer l: in the prefix, or read from the store into layer.
static const float* streamed_layer(const StreamedState* ss, int l, const float* in_prefix, float* layer,
                                   char* err, size_t errlen) {
    if (l < ss->first_layer) return in_prefix;
    return ss->read_layer(ss->ctx, l, layer, err, errlen) ? layer : NULL;
}

// Saves an llm.c model file, one streamed layer at a time.
static int save_model_streamed(const char* path, const GPTConfig* cfg, const float* prefix_params,
                               const StreamedState* ss, uint32_t* crc, char* err, size_t errlen) {
    const ParamLayout p = gpt_layout(cfg);
    char tmp[4300];
    FILE* f = model_tmp_open(path, tmp, sizeof tmp, err, errlen);
    if (!f) return 0;
    int header[256];
    llmc_header(cfg, header);
    int ok = fwrite(header, sizeof(int), 256, f) == 256;  // out of order: its CRC is read back after
    float* layer = (float*)malloc((size_t)p.layer_stride * 4);
    if (!layer) ok = 0;
    for (int l = -1; l < cfg->num_layers && ok; l++) {  // -1: the embeddings
        const float* src =
            l < 0 ? prefix_params
                  : streamed_layer(ss, l, prefix_params + gpt_layer_offset(&p, l), layer, err, errlen);
        if (!src) {
            fclose(f);
            remove(tmp);
            free(layer);
            return 0;
        }
        for (int k = 0; k < 16 && ok; k++) {
            const int is_layer = llmc_file_order[k][0], t = llmc_file_order[k][1];
            if (is_layer != (l >= 0)) continue;
            const int64_t n = is_layer ? p.layer_size[t] : p.embed_size[t];
            const int64_t off = llmc_tensor_offset(cfg, &p, k, is_layer ? l : 0, 4);
            ok = fseeko(f, (off_t)off, SEEK_SET) == 0 &&
                 (int64_t)fwrite(src + (is_layer ? p.layer_offset[t] : p.embed_offset[t]), 4, (size_t)n, f) ==
                     n;
            progress_tick();  // llmc/progress_watch.h
        }
    }
    free(layer);
    if (!model_tmp_finish(f, ok, tmp, path, err, errlen)) return 0;
    int64_t bytes;
    return file_crc32c(path, &bytes, crc, err, errlen);
}

// Saves llama_save_params' format, one streamed layer at a time.
static int llama_save_model_streamed(const char* path, const LlamaConfig* c, const float* prefix_params,
                                     const StreamedState* ss, uint32_t* crc, char* err, size_t errlen) {
    const LlamaLayout p = llama_layout(c);
    const int64_t embed_count = p.total - p.embed_base;  // the prefix: [embeddings | first layers]
    char tmp[4300];
    FILE* f = model_tmp_open(path, tmp, sizeof tmp, err, errlen);
    if (!f) return 0;
    int32_t h[256];
    llama_header(c, h);
    *crc = 0;
    int ok = write_crc(f, h, sizeof h, crc);
    float* layer = (float*)malloc((size_t)p.layer_stride * 4);
    if (!layer) ok = 0;
    for (int l = 0; l <= c->num_layers && ok; l++) {  // the file: [layers | embeddings (l = L)]
        const bool embeddings = l == c->num_layers;
        const float* src =
            embeddings
                ? prefix_params
                : streamed_layer(ss, l, prefix_params + embed_count + l * p.layer_stride, layer, err, errlen);
        if (!src) {
            fclose(f);
            remove(tmp);
            free(layer);
            return 0;
        }
        const int64_t n = embeddings ? embed_count : p.layer_stride;
        if (embeddings && ss->read_vocab) ok = write_vocab_windows(f, ss, 0, n, crc, err, errlen);
        else ok = write_crc(f, src, n * 4, crc);
    }
    free(layer);
    return model_tmp_finish(f, ok, tmp, path, err, errlen);
}

// Several nodes: the state file's m, then v, of every parameter, in the family's file order (GPT-2: this
// trainer's [embeddings | layers]; Llama: [layers | embeddings]); the prefix from m_prefix / v_prefix (this
// trainer's order), the streamed layers through ss->read_moment.
static int write_moments_streamed(FILE* f, const GPTConfig* cfg, const LlamaConfig* llama,
                                  const float* m_prefix, const float* v_prefix, const StreamedState* ss,
                                  uint32_t* crc, char* err, size_t errlen) {
    const int L = llama ? llama->num_layers : cfg->num_layers;
    const int64_t total = llama ? llama_layout(llama).total : gpt_layout(cfg).total;
    const int64_t stride = llama ? llama_layout(llama).layer_stride : gpt_layout(cfg).layer_stride;
    const int64_t embed = total - (int64_t)L * stride;
    float* layer = (float*)malloc((size_t)stride * 4);
    int ok = layer != NULL;
    for (int which = 1; which <= 2 && ok; which++) {
        const float* prefix = which == 1 ? m_prefix : v_prefix;
        if (!llama) ok = write_crc(f, prefix, embed * 4, crc);
        for (int l = 0; l < L && ok; l++) {
            const float* src = prefix + embed + (int64_t)l * stride;
            if (l >= ss->first_layer) {
                if (!ss->read_moment(ss->ctx, which, l, layer, err, errlen)) ok = 0;
                src = layer;
            }
            ok = ok && write_crc(f, src, stride * 4, crc);
        }
        if (llama && ss->read_vocab) ok = ok && write_vocab_windows(f, ss, which, embed, crc, err, errlen);
        else if (llama) ok = ok && write_crc(f, prefix, embed * 4, crc);
    }
    free(layer);
    return ok;
}

// A checkpoint's files, its marker first (-nk's removals, a resume's clean-up).
static const CheckpointFile kCheckpointFiles[] = {{"DONE_", ""}, {"model_", ".bin"}, {"state_", ".bin"}};

// Saves model, state, then DONE. Failure exits, older ones stay valid.
// The model is written to model_N.bin.tmp and renamed after the state file: a failed state write
// (a full disk) leaves no model_N.bin that looks like a finished checkpoint.
static void checkpoint_save(const char* dir, int64_t step, int64_t adam_t, const GPTConfig* cfg,
                            const float* master, const float* m, const float* v, const TrainArgs* a, int B,
                            int T, const DataLoaderState* data_state, const OutlierWindow* losses,
                            const OutlierWindow* norms, const StreamedState* ss = NULL,
                            const LlamaConfig* llama = NULL) {
    const int64_t total = llama ? llama_layout(llama).total : gpt_layout(cfg).total;
    const bool ssd = ss && !ss->read_moment;           // -sd: the store holds the streamed layers' m, v
    const int64_t in_file = ssd ? ss->prefix : total;  // parameters whose m, v the state file holds
    char model[4200], staged[4300], path[4200], tmp[4300], done[4200], err[4352];  // -o: 4000 at most
    if (snprintf(model, sizeof model, "%s/model_%08lld.bin", dir, (long long)step) >= (int)sizeof model)
        die("checkpoint path too long in %.200s...", dir);
    snprintf(staged, sizeof staged, "%s.tmp", model);  // renamed to model once the state file is whole
    snprintf(path, sizeof path, "%s/state_%08lld.bin", dir, (long long)step);  // as long as model
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    snprintf(done, sizeof done, "%s/DONE_%08lld", dir, (long long)step);
    // a stale DONE of this step must not vouch for new files
    if (unlink(done) == 0) {
        if (!fsync_dir(dir, err, sizeof err)) die("%s", err);
    } else if (errno != ENOENT) {
        die("cannot remove the old marker %s: %s", done, strerror(errno));
    }
    FileSum sums[2];
    sums[0].bytes = 256 * 4 + total * 4;
    int saved;
    if (llama && ss)
        saved = llama_save_model_streamed(staged, llama, master, ss, &sums[0].crc, err, sizeof err);
    else if (llama) saved = llama_save_params(staged, llama, master, err, sizeof err, &sums[0].crc);
    else if (ss) saved = save_model_streamed(staged, cfg, master, ss, &sums[0].crc, err, sizeof err);
    else saved = gpt_save_params(staged, cfg, master, err, sizeof err, &sums[0].crc);
    if (!saved) {  // the error names the file the checkpoint was to write
        char* at = strstr(err, staged);
        if (at) memmove(at + strlen(model), at + strlen(staged), strlen(at + strlen(staged)) + 1);
        die("%s", err);
    }
    FILE* f = fopen(tmp, "wb");
    if (!f) {
        remove(staged);
        die("cannot create %s: %s", tmp, strerror(errno));
    }
    uint32_t crc = 0;
    int64_t header[ST_HEADER_FIELDS] = {0};
    header[ST_MAGIC] = STATE_MAGIC;
    header[ST_VERSION] = ssd ? STATE_VERSION_SSD : STATE_VERSION;
    header[ST_STEP] = step;
    header[ST_PARAMS] = total;
    header[ST_DATA_STATE_BYTES] = (int64_t)sizeof(DataLoaderState);
    header[ST_TOTAL_STEPS] = a->max_steps;  // main resolved -x -1 (one epoch) to steps
    header[ST_STEP_TOKENS] = a->total_batch_tokens ? a->total_batch_tokens : (int64_t)B * T;
    header[ST_B] = B;
    header[ST_T] = T;
    header[ST_LR] = float_bits(a->lr);
    header[ST_WARMUP] = a->warmup_steps;
    header[ST_FINAL_LR_FRAC] = float_bits(a->final_lr_frac);
    header[ST_WEIGHT_DECAY] = float_bits(a->weight_decay);
    header[ST_GRAD_CLIP] = float_bits(a->grad_clip);
    header[ST_ADAM_T] = adam_t;
    header[ST_LR_SCHEDULE] = a->lr_schedule;
    errno = 0;
    int64_t tail[SSD_TAIL_FIELDS] = {0};
    if (ssd) {
        tail[SSD_TAIL_PREFIX] = ss->prefix;
        tail[SSD_TAIL_STORE_STEP] = ss->store_step;
        tail[SSD_TAIL_STREAMED_LAYERS] = (llama ? llama->num_layers : cfg->num_layers) - ss->first_layer;
        tail[SSD_TAIL_NODE_PART] = ss->node_part;
    }
    err[0] = 0;  // a read of the streamed state that fails says why here (StreamedState's callbacks)
    int ok = write_crc(f, header, sizeof header, &crc) &&
             write_crc(f, data_state, sizeof *data_state, &crc) &&
             (!ssd || write_crc(f, tail, sizeof tail, &crc));
    if (ss && !ssd) ok = ok && write_moments_streamed(f, cfg, llama, m, v, ss, &crc, err, sizeof err);
    else if (ssd && ss->read_vocab) {  // -sd on several nodes with -E 1: the vocabulary's from the nodes
        const int64_t E =
            total - (int64_t)(llama ? llama->num_layers : cfg->num_layers) *
                        (llama ? llama_layout(llama).layer_stride : gpt_layout(cfg).layer_stride);
        for (int which = 1; which <= 2 && ok; which++)
            ok = write_vocab_windows(f, ss, which, E, &crc, err, sizeof err) &&
                 write_crc(f, (which == 1 ? m : v) + E, (in_file - E) * 4, &crc);
    } else ok = ok && write_crc(f, m, in_file * 4, &crc) && write_crc(f, v, in_file * 4, &crc);
    const RunTail run = run_tail_of(a, losses, norms);
    ok = ok && write_crc(f, &run, sizeof run, &crc);
    sums[1].bytes = (int64_t)sizeof header + (int64_t)sizeof *data_state + (ssd ? (int64_t)sizeof tail : 0) +
                    in_file * 8 + (int64_t)sizeof run;
    sums[1].crc = crc;
    int why;
    if (!finish_atomic_write(f, ok, tmp, path, &why)) {
        remove(staged);  // no model file without its state
        if (err[0]) die("%s", err);
        die("failed writing %s: %s", path, why ? strerror(why) : "short write");
    }
    if (rename(staged, model) != 0) die("cannot rename %s to %s: %s", staged, model, strerror(errno));
    // both files durable before the marker vouching for them
    if (!fsync_dir(dir, err, sizeof err)) die("%s", err);
    if (!checkpoint_write_done(dir, step, sums, err, sizeof err)) die("%s", err);
    if (!fsync_dir(dir, err, sizeof err)) die("%s", err);
    printf("saved checkpoint step %lld to %s\n", (long long)step, dir);
    // -nk / -nm prune older checkpoints
    if (!prune_checkpoints(dir, step, a->keep_checkpoints, a->major_checkpoint_every, kCheckpointFiles, 3,
                           err, sizeof err))
        die("%s", err);
    if (a->keep_checkpoints > 0) unfinished_checkpoints(dir, kCheckpointFiles, 3, step, false);
}

// Latest step with a DONE_<digits> marker in dir, or -1.
static int64_t latest_checkpoint(const char* dir) { return dir_latest_step(dir, "DONE_", "", INT64_MAX); }

// Reads a STATE_VERSION_SSD file's tail. 0 with err on failure.
static int state_file_ssd_tail(const char* path, int64_t tail[SSD_TAIL_FIELDS], char* err, size_t errlen) {
    FILE* f = open_regular(path, "optimizer state", err, errlen);
    if (!f) return 0;
    const int ok = fseeko(f, ST_HEADER_FIELDS * 8 + (off_t)sizeof(DataLoaderState), SEEK_SET) == 0 &&
                   read_all(f, tail, SSD_TAIL_FIELDS * 8);
    fclose(f);
    if (!ok) snprintf(err, errlen, "optimizer state %.400s: too short for its SSD-tier tail", path);
    return ok;
}

// Checks a state file against total, before large allocations. 0 with err.
static int state_file_check(const char* path, int64_t total, int64_t header[ST_HEADER_FIELDS], char* err,
                            size_t errlen) {
    FILE* f = open_regular(path, "optimizer state", err, errlen);
    if (!f) return 0;
    memset(header, 0, ST_HEADER_FIELDS * sizeof(int64_t));
    const int got = read_all(f, header, ST_HEADER_FIELDS * sizeof(int64_t));
    const int64_t size = fseeko(f, 0, SEEK_END) == 0 ? (int64_t)ftello(f) : -1;
    fclose(f);
    const int64_t data_bytes = (int64_t)sizeof(DataLoaderState);
    if (!got || header[ST_MAGIC] != STATE_MAGIC) {
        snprintf(err, errlen,
                 "optimizer state %.400s: bad header (not a state file, or shorter than its header)", path);
        return 0;
    }
    if (header[ST_VERSION] == 1) {
        snprintf(err, errlen,
                 "optimizer state %.400s: version 1 (an older train_gpt's, without the run's "
                 "hyperparameters) is not supported: this build reads version %d",
                 path, STATE_VERSION);
        return 0;
    }
    if (!state_version_known(header[ST_VERSION])) {
        snprintf(err, errlen, "optimizer state %.400s: bad header (version %lld, want %d)", path,
                 (long long)header[ST_VERSION], STATE_VERSION);
        return 0;
    }
    if (header[ST_DATA_STATE_BYTES] != data_bytes) {
        snprintf(err, errlen,
                 "optimizer state %.400s: its data-loader position is %lld bytes, this build's is %lld "
                 "(written by another build of train_gpt)",
                 path, (long long)header[ST_DATA_STATE_BYTES], (long long)data_bytes);
        return 0;
    }
    if (header[ST_PARAMS] != total) {
        snprintf(err, errlen, "optimizer state %.400s: holds %lld parameters, the model has %lld", path,
                 (long long)header[ST_PARAMS], (long long)total);
        return 0;
    }
    if (header[ST_STEP] < 1) {
        snprintf(err, errlen, "optimizer state %.400s: bad step %lld", path, (long long)header[ST_STEP]);
        return 0;
    }
    if (header[ST_ADAM_T] < 0 || header[ST_ADAM_T] > header[ST_STEP]) {
        snprintf(err, errlen, "optimizer state %.400s: bad update count %lld for step %lld", path,
                 (long long)header[ST_ADAM_T], (long long)header[ST_STEP]);
        return 0;
    }
    if (header[ST_LR_SCHEDULE] < 0 || header[ST_LR_SCHEDULE] >= LR_SCHEDULES) {
        snprintf(err, errlen, "optimizer state %.400s: bad lr schedule %lld", path,
                 (long long)header[ST_LR_SCHEDULE]);
        return 0;
    }
    int64_t in_file = total, tail_bytes = 0;
    if (state_version_ssd(header[ST_VERSION])) {
        int64_t tail[SSD_TAIL_FIELDS];
        if (!state_file_ssd_tail(path, tail, err, errlen)) return 0;
        in_file = tail[SSD_TAIL_PREFIX];
        tail_bytes = (int64_t)sizeof tail;
        if (in_file < 0 || in_file > total || tail[SSD_TAIL_STORE_STEP] != header[ST_STEP]) {
            snprintf(err, errlen, "optimizer state %.400s: bad SSD-tier tail (prefix %lld, store step %lld)",
                     path, (long long)in_file, (long long)tail[SSD_TAIL_STORE_STEP]);
            return 0;
        }
    }
    const int64_t want = ST_HEADER_FIELDS * 8 + data_bytes + tail_bytes + in_file * 8 +
                         state_run_tail_bytes(header[ST_VERSION]);
    if (size != want) {
        snprintf(err, errlen, "optimizer state %.400s: %lld bytes, expected %lld (truncated or too long)",
                 path, (long long)size, (long long)want);
        return 0;
    }
    return 1;
}

// A checked state file's run tail (its last bytes); present 0 in a file from before it. 0 with err: a tail
// no save writes (a damaged file whose marker is of an older build: DONE's checksums catch the rest).
static int state_file_run_tail(const char* path, const int64_t header[ST_HEADER_FIELDS], RunTail* t,
                               char* err, size_t errlen) {
    memset(t, 0, sizeof *t);
    if (state_run_tail_bytes(header[ST_VERSION]) == 0) return 1;
    FILE* f = open_regular(path, "optimizer state", err, errlen);
    if (!f) return 0;
    const int ok = fseeko(f, -(off_t)sizeof *t, SEEK_END) == 0 && read_all(f, t, sizeof *t);
    fclose(f);
    bool good = ok && t->present == 1 && (t->overfit == 0 || t->overfit == 1);
    for (int i = 0; i < 2 && good; i++) {
        const float z = bits_float(t->skip_z_bits[i]);
        good = t->skip_z_bits[i] >= 0 && t->skip_z_bits[i] <= 0xFFFFFFFFll && isfinite(z) && z >= 0 &&
               t->count[i] >= 0 && t->count[i] <= OUTLIER_WINDOW && t->next[i] >= 0 &&
               t->next[i] < OUTLIER_WINDOW;
        for (int64_t k = 0; k < t->count[i] && good; k++) good = isfinite(t->values[i][k]);
    }
    if (!good) {
        snprintf(err, errlen, "optimizer state %.400s: %s", path,
                 ok ? "a damaged run tail (-a, -sl, -sg and their windows)" : "reading its run tail failed");
        return 0;
    }
    return 1;
}

// state_file_check that dies on a problem. Returns the file's step.
static int64_t check_state_file(const char* path, int64_t total) {
    int64_t header[ST_HEADER_FIELDS];
    char err[4352];
    if (!state_file_check(path, total, header, err, sizeof err)) die("%s", err);
    return header[ST_STEP];
}

// Newest DONE_N with good files, or -1. Dies if all are bad.
// A Llama checkpoint fills *llama.
static int64_t pick_checkpoint(const char* dir, char* model, char* state, size_t pathlen, GPTConfig* cfg,
                               int64_t header[ST_HEADER_FIELDS], LlamaConfig* llama = NULL) {
    if (llama) memset(llama, 0, sizeof *llama);
    char err[4352], newest_err[4352] = "";
    int skipped = 0;
    for (int64_t step = latest_checkpoint(dir); step >= 0; step = dir_latest_step(dir, "DONE_", "", step)) {
        snprintf(model, pathlen, "%s/model_%08lld.bin", dir, (long long)step);
        snprintf(state, pathlen, "%s/state_%08lld.bin", dir, (long long)step);
        const int is_llama = llama_is_model_file(model);
        if (is_llama && !llama)
            die("resume: the checkpoint of step %lld in %s holds a Llama-family model: this trainer computes "
                "GPT-2 only (train_gpt_cpu trains the Llama family)",
                (long long)step, dir);
        int ok = is_llama ? llama_read_header(model, llama, err, sizeof err) &&
                                state_file_check(state, llama_layout(llama).total, header, err, sizeof err)
                          : gpt_read_header(model, cfg, err, sizeof err) &&
                                state_file_check(state, gpt_layout(cfg).total, header, err, sizeof err);
        if (!is_llama && llama) llama->num_layers = 0;
        if (ok && header[ST_STEP] != step) {
            snprintf(err, sizeof err, "optimizer state %.400s does not hold step %lld (it holds %lld)", state,
                     (long long)step, (long long)header[ST_STEP]);
            ok = 0;
        }
        int verified = 0;
        if (ok) ok = checkpoint_verify(dir, step, &verified, err, sizeof err);
        RunTail tail;  // checked here too: an unverified marker's bad tail falls back as a bad file would
        if (ok) ok = state_file_run_tail(state, header, &tail, err, sizeof err);
        if (ok) {
            if (!verified)
                fprintf(stderr,
                        "warning: resume: the checkpoint of step %lld has no checksums (an older build's): "
                        "resumed unverified\n",
                        (long long)step);
            return step;
        }
        fprintf(stderr, "warning: resume: skipping the checkpoint of step %lld: %s\n", (long long)step, err);
        if (!skipped++) snprintf(newest_err, sizeof newest_err, "%s", err);
    }
    if (skipped)
        die("resume: no valid checkpoint in %s (%d with a DONE marker, all skipped; the newest: %s)", dir,
            skipped, newest_err);
    return -1;
}

// -y 1: the hyperparameters not on the command line come from the checkpoint, not from this trainer's
// defaults (train_gpt's and train_gpt_cpu's differ: a run moving between them keeps its own).
// The run tail's -a, -sl, -sg too (files from before it: the command line's).
static void resume_recorded_hyperparameters(const int64_t* h, const RunTail* t, TrainArgs* a) {
    char taken[300] = "";
    auto take_int = [&](unsigned bit, const char* flag, int* x, int64_t v) {
        if (!(a->given & bit) && *x != v)
            snprintf(taken + strlen(taken), sizeof taken - strlen(taken), " %s %lld", flag, (long long)v);
        if (!(a->given & bit)) *x = (int)v;
    };
    auto take_float = [&](unsigned bit, const char* flag, float* x, int64_t bits) {
        if (!(a->given & bit) && float_bits(*x) != bits)
            snprintf(taken + strlen(taken), sizeof taken - strlen(taken), " %s %g", flag, bits_float(bits));
        if (!(a->given & bit)) *x = bits_float(bits);
    };
    take_int(GIVEN_X, "-x", &a->max_steps, h[ST_TOTAL_STEPS]);
    take_float(GIVEN_L, "-l", &a->lr, h[ST_LR]);
    take_int(GIVEN_U, "-u", &a->warmup_steps, h[ST_WARMUP]);
    take_float(GIVEN_Q, "-q", &a->final_lr_frac, h[ST_FINAL_LR_FRAC]);
    if (!(a->given & GIVEN_K) && a->lr_schedule != h[ST_LR_SCHEDULE])
        snprintf(taken + strlen(taken), sizeof taken - strlen(taken), " -k %s",
                 lr_schedule_name(h[ST_LR_SCHEDULE]));
    if (!(a->given & GIVEN_K)) a->lr_schedule = (int)h[ST_LR_SCHEDULE];
    take_float(GIVEN_C, "-c", &a->weight_decay, h[ST_WEIGHT_DECAY]);
    take_float(GIVEN_GC, "-gc", &a->grad_clip, h[ST_GRAD_CLIP]);
    if (t->present) {
        take_int(GIVEN_A, "-a", &a->overfit_single_batch, t->overfit);
        take_float(GIVEN_SL, "-sl", &a->skip_loss_z, t->skip_z_bits[0]);
        take_float(GIVEN_SG, "-sg", &a->skip_grad_z, t->skip_z_bits[1]);
    }
    if (taken[0]) printf("resume: the checkpoint's%s (flags given here override them)\n", taken);
}

// B, T, tokens per step must match the checkpoint's. Other flags warn.
// warn: false on all but one rank (several ranks each check; one says it)
// t: the checkpoint's run tail (NULL or not present: from before it, nothing to compare).
static void check_resume_args(const int64_t* h, const TrainArgs* a, int total_steps, int64_t step_tokens,
                              const char* dir, const RunTail* t = NULL, bool warn = true) {
    if (h[ST_B] != a->B || h[ST_T] != a->T || h[ST_STEP_TOKENS] != step_tokens)
        die("resume: -b %d -t %d, %lld tokens per step (-d) differ from the checkpoint in %s (-b %lld -t "
            "%lld, %lld "
            "tokens per step): keep them to resume, or choose another -o",
            a->B, a->T, (long long)step_tokens, dir, (long long)h[ST_B], (long long)h[ST_T],
            (long long)h[ST_STEP_TOKENS]);
    if (!warn) return;
    const char* sched = "the lr schedule changes from here";
    if (h[ST_TOTAL_STEPS] != total_steps)
        fprintf(stderr, "warning: resume: -x %d differs from the checkpoint's %lld: %s\n", total_steps,
                (long long)h[ST_TOTAL_STEPS], sched);
    if (h[ST_WARMUP] != a->warmup_steps)
        fprintf(stderr, "warning: resume: -u %d differs from the checkpoint's %lld: %s\n", a->warmup_steps,
                (long long)h[ST_WARMUP], sched);
    if (h[ST_LR_SCHEDULE] != a->lr_schedule)
        fprintf(stderr, "warning: resume: -k %s differs from the checkpoint's %s: %s\n",
                lr_schedule_name(a->lr_schedule), lr_schedule_name(h[ST_LR_SCHEDULE]), sched);
    const struct {
        const char* flag;
        float now;
        int field;
        const char* effect;
    } f[] = {{"-l", a->lr, ST_LR, sched},
             {"-q", a->final_lr_frac, ST_FINAL_LR_FRAC, sched},
             {"-c", a->weight_decay, ST_WEIGHT_DECAY, "the weight decay changes from here"},
             {"-gc", a->grad_clip, ST_GRAD_CLIP, "the gradient clip changes from here"}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (float_bits(f[i].now) != h[f[i].field])
            fprintf(stderr, "warning: resume: %s %g differs from the checkpoint's %g: %s\n", f[i].flag,
                    f[i].now, bits_float(h[f[i].field]), f[i].effect);
    if (!t || !t->present) return;
    if (t->overfit != a->overfit_single_batch)
        fprintf(stderr, "warning: resume: -a %d differs from the checkpoint's %lld: %s\n",
                a->overfit_single_batch, (long long)t->overfit,
                a->overfit_single_batch ? "every step trains on the data's first tokens from here"
                                        : "the steps train on the data from here, no longer one batch");
    const float z[2] = {a->skip_loss_z, a->skip_grad_z};
    const char* flags[2] = {"-sl", "-sg"};
    for (int i = 0; i < 2; i++)
        if (float_bits(z[i]) != t->skip_z_bits[i])
            fprintf(stderr,
                    "warning: resume: %s %g differs from the checkpoint's %g: the skips change from here\n",
                    flags[i], z[i], bits_float(t->skip_z_bits[i]));
}

// A full (version 2 / 3) state file's m and v of [at, at + n) of its parameters, in its order: -sd's store
// filled from a checkpoint of a run in RAM (the file was checked when the run directory opened). 0 with err.
static int state_file_read_moments(const char* path, int64_t total, int64_t at, int64_t n, float* m, float* v,
                                   char* err, size_t errlen) {
    FILE* f = open_regular(path, "optimizer state", err, errlen);
    if (!f) return 0;
    const off_t base = (off_t)(ST_HEADER_FIELDS * 8) + (off_t)sizeof(DataLoaderState);
    int ok = at >= 0 && n >= 0 && at + n <= total;
    for (int which = 0; which < 2 && ok; which++)
        ok = fseeko(f, base + (off_t)((which * total + at) * 4), SEEK_SET) == 0 &&
             read_all(f, which ? v : m, n * 4);
    fclose(f);
    if (!ok)
        snprintf(err, errlen, "optimizer state %.400s: reading m and v of [%lld, %lld) failed", path,
                 (long long)at, (long long)(at + n));
    return ok;
}

// Reads m, v, data position, step and updates. Exits on failure.
// Several nodes: only parts of m and v, [at, at + count) of the file's parameters into dst + to, each part.
// ssd_prefix: an -sd checkpoint's file (its m, v: of the prefix only).
struct StatePart {
    int64_t to, at, count;
};
static void state_file_read_parts(const char* path, int64_t total, float* m, float* v,
                                  DataLoaderState* data_state, int64_t* step, int64_t* adam_t,
                                  const std::vector<StatePart>& parts, bool ssd_prefix = false) {
    *step = check_state_file(path, total);
    char err[4352];
    FILE* f = open_regular(path, "optimizer state", err, sizeof err);
    if (!f) die("%s", err);
    int64_t header[ST_HEADER_FIELDS], tail[SSD_TAIL_FIELDS];
    int ok = read_all(f, header, sizeof header) && read_all(f, data_state, sizeof *data_state);
    const bool ssd = ok && state_version_ssd(header[ST_VERSION]);
    if (ssd != ssd_prefix)
        die("optimizer state %s: %s", path,
            ssd ? "its streamed layers' state is in an SSD store (train_gpt -sd): resume it with -sd DIR"
                : "it holds all its state (a run without -sd): resume it without -sd");
    int64_t in_file = total;  // -sd: the prefix's m, v only, its parts' `at` in trainer order
    if (ssd) ok = read_all(f, tail, sizeof tail), in_file = tail[SSD_TAIL_PREFIX];
    const off_t base = (off_t)sizeof header + (off_t)sizeof *data_state + (ssd ? (off_t)sizeof tail : 0);
    for (const StatePart& p : parts)
        for (int which = 0; which < 2 && ok; which++)
            ok = p.at >= 0 && p.at + p.count <= in_file &&
                 fseeko(f, base + (off_t)((which * in_file + p.at) * 4), SEEK_SET) == 0 &&
                 read_all(f, (which ? v : m) + p.to, p.count * 4);
    if (!ok) die("optimizer state %s: read failed", path);
    fclose(f);
    *adam_t = header[ST_ADAM_T] > 0 ? header[ST_ADAM_T] : *step;
}

// A full state file (train_gpt's in RAM, train_gpt_cpu's): every parameter's m, v. An -sd checkpoint's
// (version 102 / 103: the prefix's only; train_gpt reads it as parts: load_state) is refused in one line.
static void state_file_read(const char* path, int64_t total, float* m, float* v, DataLoaderState* data_state,
                            int64_t* step, int64_t* adam_t) {
    *step = check_state_file(path, total);
    char err[4352];
    FILE* f = open_regular(path, "optimizer state", err, sizeof err);
    if (!f) die("%s", err);
    int64_t header[ST_HEADER_FIELDS];
    int ok = read_all(f, header, sizeof header) && read_all(f, data_state, sizeof *data_state);
    if (ok && state_version_ssd(header[ST_VERSION]))
        die("optimizer state %s: its streamed layers' state is in an SSD store (train_gpt -sd): resume it "
            "with "
            "train_gpt -sd DIR",
            path);
    if (!ok || !read_all(f, m, total * 4) || !read_all(f, v, total * 4))
        die("optimizer state %s: read failed", path);
    fclose(f);
    *adam_t = header[ST_ADAM_T] > 0 ? header[ST_ADAM_T] : *step;
}

// ----------------------------------------------------------------------------
// The output directory: one run each, never overwriting another's files.

// Removes interrupted saves' .tmp files, our names only.
// The caller holds LOCK, so no running save owns them.
static void remove_stale_tmp_files(const char* dir) {
    DIR* d = opendir(dir);
    if (!d) return;
    int removed = 0;
    struct dirent* e;
    while ((e = readdir(d))) {
        char base[256];
        size_t len = strlen(e->d_name);
        if (len < 5 || len >= sizeof base || strcmp(e->d_name + len - 4, ".tmp") != 0) continue;
        memcpy(base, e->d_name, len + 1);
        while (len > 4 && strcmp(base + len - 4, ".tmp") == 0) base[len -= 4] = '\0';  // model_N.bin.tmp.tmp
        if (strcmp(base, "main.log") != 0 && checkpoint_name_step(base, "DONE_", "") < 0 &&
            checkpoint_name_step(base, "model_", ".bin") < 0 &&
            checkpoint_name_step(base, "state_", ".bin") < 0)
            continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) == 0) removed++;
    }
    closedir(d);
    if (removed)
        printf("removed %d temporary file%s of an interrupted save in %s\n", removed, removed > 1 ? "s" : "",
               dir);
}

// Counts run files (main.log, DONE_N, model_N.bin, state_N.bin).
// found: "main.log, model_00000004.bin and 2 more".
static int dir_run_files(const char* dir, char* found, size_t len) {
    found[0] = '\0';
    DIR* d = opendir(dir);
    if (!d) return 0;
    int count = 0;
    struct dirent* e;
    while ((e = readdir(d))) {
        const char* n = e->d_name;
        if (strcmp(n, "main.log") != 0 && checkpoint_name_step(n, "DONE_", "") < 0 &&
            checkpoint_name_step(n, "model_", ".bin") < 0 && checkpoint_name_step(n, "state_", ".bin") < 0)
            continue;
        if (++count <= 2) {
            const size_t used = strlen(found);
            snprintf(found + used, len - used, "%s%.100s", count > 1 ? ", " : "", n);
        }
    }
    closedir(d);
    if (count > 2) {
        const size_t used = strlen(found);
        snprintf(found + used, len - used, " and %d more", count - 2);
    }
    return count;
}

// Makes and locks -o. Returns the step to resume (-y 1), or -1; its state file's header and run tail.
// Dies before overwriting a run's files.
static int64_t open_run_dir(TrainArgs* a, char* model, char* state, size_t pathlen, GPTConfig* cfg,
                            int64_t header[ST_HEADER_FIELDS], RunTail* tail, LlamaConfig* llama = NULL) {
    if (llama) memset(llama, 0, sizeof *llama);
    memset(tail, 0, sizeof *tail);
    if (!a->output_dir) return -1;
    const char* dir = a->output_dir;
    char err[4352];
    if (!lock_output_dir(dir, err, sizeof err)) die("%s", err);  // one run per directory
    remove_stale_tmp_files(dir);
    const int64_t latest = latest_checkpoint(dir);
    if (a->resume) {
        const int64_t step =
            pick_checkpoint(dir, model, state, pathlen, cfg, header, llama);  // dies if none is valid
        if (step >= 0) {
            unfinished_checkpoints(dir, kCheckpointFiles, 3, 0, true);  // said, not removed: see -nk
            if (!state_file_run_tail(state, header, tail, err, sizeof err)) die("%s", err);
            resume_recorded_hyperparameters(header, tail, a);
            return step;
        }
    } else if (latest >= 0) {
        die("%s already holds checkpoints (latest step %lld): resume with -y 1, or choose another -o", dir,
            (long long)latest);
    }
    char found[400];
    if (dir_run_files(dir, found, sizeof found) > 0) {
        if (a->resume)  // a run killed before its first checkpoint: nothing to go on from
            die("%s has no complete checkpoint yet (%s): the run was stopped before its first save, so there "
                "is "
                "nothing to resume; to start over, remove %s (or choose another -o) and run without -y 1",
                dir, found, dir);
        die("%s already holds files of another run (%s) but no complete checkpoint: a fresh run would "
            "overwrite them; choose another -o",
            dir, found);
    }
    if (a->resume) printf("no checkpoint in %s: starting from scratch\n", dir);
    return -1;
}

// Chat shards' tokenizer (the first shard's header: vocabulary and special tokens), kept in -o as
// data_tokenizer.bin: a resume reads its model from the checkpoint, with no tokenizer to check new shards
// against (-e's tokenizer.json is not given again), so shards of another tokenizer would train on. A fresh
// run writes it (writer: rank 0); a resume compares, or writes it for a run from before this file.
// True: a resume whose shards matched the record its run started with (model_run_trained_on).
static bool run_data_tokenizer(const char* dir, const DataLoader* train, bool resuming, bool writer) {
    if (!dir || train->kind != DL_CHAT) return false;
    const std::string path = std::string(dir) + "/data_tokenizer.bin";
    char err[4352];
    if (resuming && access(path.c_str(), F_OK) == 0) {
        FILE* f = open_regular(path.c_str(), "run file", err, sizeof err);
        if (!f) die("%s", err);
        int32_t saved[DATALOADER_HEADER_BYTES / 4];
        const bool ok = read_all(f, saved, sizeof saved);
        fclose(f);
        if (!ok) die("run file %s: shorter than a shard's header", path.c_str());
        if (!dl_same_tokenizer("resume", path.c_str(), saved, train->paths[train->tokenizer_shard],
                               train->tokenizer, err, sizeof err))
            die("%s (the first records the shards the run in %s trained on: resume on shards of its "
                "tokenizer, "
                "or choose another -o)",
                err, dir);
        return true;
    }
    if (!writer) return false;
    const std::string tmp = path + ".tmp";
    FILE* w = fopen(tmp.c_str(), "wb");
    int why = 0;
    if (!w || !finish_atomic_write(
                  w, fwrite(train->tokenizer, 1, DATALOADER_HEADER_BYTES, w) == DATALOADER_HEADER_BYTES,
                  tmp.c_str(), path.c_str(), &why))
        die("cannot write %s: %s", path.c_str(), strerror(w ? why : errno));
    return false;
}

// 1 where the model file's run (data_tokenizer.bin in its folder) trained on shards of dl's tokenizer:
// they were checked against the model's vocabulary when that run started, with -e's tokenizer.json. A resume,
// or -e of a run's checkpoint, has no tokenizer.json to check them again, and the size rule alone (a
// vocabulary at most 1/64 over the tokenizer's) refused a small model's fine-tune (1000 ids, 1024 embedding
// rows). The record must predate this run: in this run's own -o (out) it counts only where a resume compared
// it (resumed_match: run_data_tokenizer's answer), not where this run has just written it. A spec names no
// file. 0: no record; -1 with err: the record is of another tokenizer (the model's ids are not the shards').
static int model_run_trained_on(const char* model, const DataLoader* dl, const char* out, bool resumed_match,
                                char* err, size_t errlen) {
    struct stat st;
    if (!model || dl->kind != DL_CHAT || stat(model, &st) != 0) return 0;
    const std::string dir = S_ISDIR(st.st_mode) ? std::string(model) : parent_dir(model);
    char here[PATH_MAX], there[PATH_MAX];
    if (out && realpath(out, here) && realpath(dir.c_str(), there) && strcmp(here, there) == 0)
        return resumed_match ? 1 : 0;  // a resume's own record: run_data_tokenizer compared it
    const std::string path = dir + "/data_tokenizer.bin";
    if (access(path.c_str(), F_OK) != 0) return 0;
    FILE* f = open_regular(path.c_str(), "run file", err, errlen);
    if (!f) return 0;
    int32_t saved[DATALOADER_HEADER_BYTES / 4];
    const bool ok = read_all(f, saved, sizeof saved);
    fclose(f);
    if (!ok) return 0;
    char why[4352];
    if (dl_same_tokenizer("model", path.c_str(), saved, dl->paths[dl->tokenizer_shard], dl->tokenizer, why,
                          sizeof why))
        return 1;
    snprintf(
        err, errlen,
        "%.3000s (the first records the shards the run that made -e %.400s trained on: the model's ids are "
        "that tokenizer's; make the shards with it)",
        why, model);
    return -1;
}

// -e DIR where DIR is a run's -o (checkpoints, no Hugging Face model in it): its latest checkpoint's model
// file, as export_hf -i reads a run. Any other -e as given.
static const char* model_of_run_dir(const char* model) {
    static char path[4200];
    if (!model || !is_dir(model) || file_exists(std::string(model) + "/config.json")) return model;
    // the newest checkpoint whose model file is whole, as -y 1 and export_hf -i take it (a damaged one
    // trained on, silently: a hostile trial)
    char err[4352];
    int skipped = 0;
    for (int64_t step = latest_checkpoint(model); step >= 0;
         step = dir_latest_step(model, "DONE_", "", step)) {
        if (snprintf(path, sizeof path, "%s/model_%08lld.bin", model, (long long)step) >= (int)sizeof path)
            return model;
        GPTConfig c;
        LlamaConfig l;
        int verified = 0;
        const bool header = llama_is_model_file(path) ? llama_read_header(path, &l, err, sizeof err)
                                                      : gpt_read_header(path, &c, err, sizeof err);
        if (header && checkpoint_verify(model, step, &verified, err, sizeof err, true)) {
            printf("-e %s: the run's %s checkpoint, step %lld\n", model, skipped ? "newest whole" : "latest",
                   (long long)step);
            return path;
        }
        fprintf(stderr, "warning: -e %s: skipping the checkpoint of step %lld: %s\n", model, (long long)step,
                err);
        skipped++;
    }
    if (skipped) die("-e %s: no whole checkpoint (%d with a DONE marker, all damaged)", model, skipped);
    return model;
}

// -y 1 with -e: -e's model must match the checkpoint, or die.
static void check_resume_model(const char* model, const char* output_dir, const GPTConfig* ckpt) {
    GPTConfig want;
    char err[4352];
    const int kind = parse_model_spec(model, &want, err, sizeof err);
    if (kind == 0 || (kind == 2 && !gpt_read_header(model, &want, err, sizeof err))) die("%s", err);
    if (memcmp(&want, ckpt, sizeof want) != 0)  // GPTConfig is six ints, no padding
        die("-e %s does not match the checkpoint in %s (L%d C%d NH%d maxT%d V%d against its L%d C%d NH%d "
            "maxT%d "
            "V%d): drop -e or choose another -o",
            model, output_dir, want.num_layers, want.channels, want.num_heads, want.max_seq_len,
            want.vocab_size, ckpt->num_layers, ckpt->channels, ckpt->num_heads, ckpt->max_seq_len,
            ckpt->vocab_size);
}
// -y 1 with -e, either family: want is -e's Llama config where llama_given, llama_ckpt the checkpoint's
// (num_layers 0: a GPT-2). Dies naming what differs (a spec cannot say rope_theta or eps: both sides printed
// the same shape before).
static void check_resume_family(const char* model, const char* dir, bool llama_given, const LlamaConfig* want,
                                const GPTConfig* ckpt, const LlamaConfig* llama_ckpt) {
    const bool llama_saved = llama_ckpt->num_layers > 0;
    if (llama_given != llama_saved)
        die("-e %s is a %s, the checkpoint in %s a %s: drop -e or choose another -o", model,
            llama_given ? "Llama-family model" : "GPT-2", dir, llama_saved ? "Llama-family model" : "GPT-2");
    if (!llama_saved) return check_resume_model(model, dir, ckpt);
    char diff[1024];
    if (llama_config_diff(want, llama_ckpt, diff, sizeof diff))
        die("-e %s does not match the checkpoint in %s (-e's %s): drop -e or choose another -o", model, dir,
            diff);
}
