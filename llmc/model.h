// model.h — GPT-2 shapes, the LAYER-MAJOR parameter layout, init, llm.c model files.
// Shared by both trainers. Not here: forward/backward math.

// The one flat fp32 parameter array, 64-bit offsets:
//   [ embeddings: wte (Vp x C) | wpe (maxT x C) | lnfw (C) | lnfb (C) ]
//   [ layer 0: ln1w ln1b qkvw qkvb attprojw attprojb ln2w ln2b fcw fcb fcprojw fcprojb ]
//   [ layer 1: ... ] ... [ layer L-1 ]
// A layer is contiguous: one copy, one transfer, one update.

// Matrices are (out, in) row-major, as nn.Linear: out = in @ W^T + b.
#pragma once
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "crc32c.h"
#include "utils.h"  // defines: fopen_regular, progress_tick, ProgressTicker

#define MODEL_MAGIC        20240326
#define MODEL_VERSION_FP32 3
#define MODEL_VERSION_BF16 \
    5  // llm.c's train_gpt2.cu writes its bf16 runs' checkpoints so (gpt2_124M_bf16.bin)

typedef struct {
    int max_seq_len;        // maxT: rows of the position embedding
    int vocab_size;         // V: real tokens (50257 for GPT-2)
    int padded_vocab_size;  // Vp: V rounded up to 128, for the lm_head GEMM
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
} GPTConfig;

enum LayerTensor {
    LN1W,
    LN1B,
    QKVW,
    QKVB,
    ATTPROJW,
    ATTPROJB,
    LN2W,
    LN2B,
    FCW,
    FCB,
    FCPROJW,
    FCPROJB,
    NUM_LAYER_TENSORS
};
static const char* const layer_tensor_names[NUM_LAYER_TENSORS] = {
    "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw",  "fcb",  "fcprojw",  "fcprojb"};
// Only matrices get weight decay, as in nanoGPT.
static const int layer_tensor_is_matrix[NUM_LAYER_TENSORS] = {0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0};

enum EmbedTensor { WTE, WPE, LNFW, LNFB, NUM_EMBED_TENSORS };
static const char* const embed_tensor_names[NUM_EMBED_TENSORS] = {"wte", "wpe", "lnfw", "lnfb"};
static const int embed_tensor_is_matrix[NUM_EMBED_TENSORS] = {1, 1, 0, 0};

typedef struct {
    int64_t layer_size[NUM_LAYER_TENSORS];    // elements of each tensor of one layer
    int64_t layer_offset[NUM_LAYER_TENSORS];  // offset of each tensor inside a layer block
    int64_t layer_stride;                     // elements of one layer block
    int64_t embed_size[NUM_EMBED_TENSORS];
    int64_t embed_offset[NUM_EMBED_TENSORS];  // offsets inside the embedding block (which starts at 0)
    int64_t embed_count;                      // elements of the embedding block
    int64_t total;                            // embed_count + L * layer_stride
} ParamLayout;

static inline int64_t round_up64(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The shapes the kernels rely on; 0 with err if bad.
static inline int gpt_config_check(const GPTConfig* c, char* err, size_t errlen) {
    if (c->num_layers < 1 || c->channels < 1 || c->num_heads < 1 || c->max_seq_len < 1 || c->vocab_size < 1) {
        snprintf(err, errlen, "all model dimensions must be positive (L=%d C=%d NH=%d maxT=%d V=%d)",
                 c->num_layers, c->channels, c->num_heads, c->max_seq_len, c->vocab_size);
        return 0;
    }
    // keeps gpt_layout's sizes far from int64 overflow
    if (c->num_layers > 100000 || c->channels > 1000000 || c->max_seq_len > 10000000 ||
        c->padded_vocab_size > 10000000) {
        snprintf(err, errlen, "model dimensions too large (L=%d C=%d maxT=%d Vp=%d)", c->num_layers,
                 c->channels, c->max_seq_len, c->padded_vocab_size);
        return 0;
    }
    // keeps tensor offsets 64-byte aligned for 16-byte bf16 loads
    if (c->channels % 32 != 0) {
        snprintf(err, errlen, "channels C=%d must be a multiple of 32", c->channels);
        return 0;
    }
    if (c->channels % c->num_heads != 0) {
        snprintf(err, errlen, "channels C=%d must be divisible by num_heads NH=%d", c->channels,
                 c->num_heads);
        return 0;
    }
    if (c->padded_vocab_size < c->vocab_size || c->padded_vocab_size % 128 != 0) {
        snprintf(err, errlen, "padded vocab Vp=%d must be >= V=%d and a multiple of 128",
                 c->padded_vocab_size, c->vocab_size);
        return 0;
    }
    if (c->vocab_size > 65536) {
        snprintf(err, errlen, "vocab V=%d does not fit uint16 token ids", c->vocab_size);
        return 0;
    }
    return 1;
}

// Vp = V rounded up to 128; 0 with err if invalid.
static inline int gpt_config_make(GPTConfig* cfg, int64_t L, int64_t C, int64_t NH, int64_t T, int64_t V,
                                  char* err, size_t errlen) {
    cfg->num_layers = (int)L;
    cfg->channels = (int)C;
    cfg->num_heads = (int)NH;
    cfg->max_seq_len = (int)T;
    cfg->vocab_size = (int)V;
    cfg->padded_vocab_size = (int)round_up64(V, 128);
    return gpt_config_check(cfg, err, errlen);
}

static inline ParamLayout gpt_layout(const GPTConfig* c) {
    ParamLayout p;
    const int64_t C = c->channels, Vp = c->padded_vocab_size, maxT = c->max_seq_len;
    const int64_t sizes[NUM_LAYER_TENSORS] = {C, C, 3 * C * C, 3 * C, C * C,     C,
                                              C, C, 4 * C * C, 4 * C, C * 4 * C, C};
    int64_t off = 0;
    for (int i = 0; i < NUM_LAYER_TENSORS; i++) {
        p.layer_size[i] = sizes[i];
        p.layer_offset[i] = off;
        off += sizes[i];
    }
    p.layer_stride = off;
    const int64_t esizes[NUM_EMBED_TENSORS] = {Vp * C, maxT * C, C, C};
    off = 0;
    for (int i = 0; i < NUM_EMBED_TENSORS; i++) {
        p.embed_size[i] = esizes[i];
        p.embed_offset[i] = off;
        off += esizes[i];
    }
    p.embed_count = off;
    p.total = p.embed_count + (int64_t)c->num_layers * p.layer_stride;
    return p;
}

// Offset of layer l's block in the flat array.
static inline int64_t gpt_layer_offset(const ParamLayout* p, int l) {
    return p->embed_count + (int64_t)l * p->layer_stride;
}

// Parameters as papers count them: without padded vocab rows.
static inline int64_t gpt_num_real_params(const GPTConfig* c, const ParamLayout* p) {
    return p->total - (int64_t)(c->padded_vocab_size - c->vocab_size) * c->channels;
}

// ----------------------------------------------------------------------------
// Init: a counter-based RNG, same bits on any thread count.

static inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
// N(0, 1) for (seed, stream, index): Box-Muller on 53-bit uniforms.
static inline float normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
    uint64_t h = splitmix64(seed ^ splitmix64(stream * 0x632BE59BD9B4E019ull + index));
    uint64_t h2 = splitmix64(h);
    double u1 = ((h >> 11) + 1.0) * (1.0 / 9007199254740993.0);  // (0, 1]
    double u2 = (h2 >> 11) * (1.0 / 9007199254740992.0);         // [0, 1)
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

// first: x[0] is the stream's element `first` (a window of a tensor)
static inline void fill_normal(float* x, int64_t n, float std, uint64_t seed, uint64_t stream,
                               int64_t first = 0) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) x[i] = std * normal_at(seed, stream, (uint64_t)(first + i));
}
static inline void fill_const(float* x, int64_t n, float v) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) x[i] = v;
}

// GPT-2 init: N(0, 0.02), residual projections scaled by 1/sqrt(2L); LayerNorm 1, 0.

// The embedding block only; params needs just embed_count floats.
static inline void gpt_init_embeddings(const GPTConfig* c, float* params, uint64_t seed) {
    ParamLayout p = gpt_layout(c);
    const float std = 0.02f;
    float* e = params;
    fill_normal(e + p.embed_offset[WTE], (int64_t)c->vocab_size * c->channels, std, seed, 1);
    fill_const(e + p.embed_offset[WTE] + (int64_t)c->vocab_size * c->channels,
               (int64_t)(c->padded_vocab_size - c->vocab_size) * c->channels, 0.0f);
    fill_normal(e + p.embed_offset[WPE], p.embed_size[WPE], std, seed, 2);
    fill_const(e + p.embed_offset[LNFW], p.embed_size[LNFW], 1.0f);
    fill_const(e + p.embed_offset[LNFB], p.embed_size[LNFB], 0.0f);
}
// Layer l into `base`, bit-equal to gpt_init_params (SSD tier).
static inline void gpt_init_layer(const GPTConfig* c, int l, float* base, uint64_t seed) {
    ParamLayout p = gpt_layout(c);
    const float std = 0.02f, resid_std = 0.02f / sqrtf(2.0f * c->num_layers);
    for (int t = 0; t < NUM_LAYER_TENSORS; t++) {
        float* x = base + p.layer_offset[t];
        int64_t n = p.layer_size[t];
        uint64_t stream = 100 + (uint64_t)l * NUM_LAYER_TENSORS + t;
        if (t == LN1W || t == LN2W) fill_const(x, n, 1.0f);
        else if (!layer_tensor_is_matrix[t]) fill_const(x, n, 0.0f);
        else fill_normal(x, n, (t == ATTPROJW || t == FCPROJW) ? resid_std : std, seed, stream);
    }
}
static inline void gpt_init_params(const GPTConfig* c, float* params, uint64_t seed) {
    ParamLayout p = gpt_layout(c);
    gpt_init_embeddings(c, params, seed);
    for (int l = 0; l < c->num_layers; l++) gpt_init_layer(c, l, params + gpt_layer_offset(&p, l), seed);
}

// ----------------------------------------------------------------------------
// llm.c model files: 256 int32 {20240326, 3, maxT, V, L, NH, C, Vp}, then tensor-major fp32.
// We read version 5 (bf16) too and write 3.

// Prints each quarter of a read over 1 GiB. *quarter: last printed.
static inline void read_progress(const char* what, const char* path, int64_t done, int64_t total,
                                 int* quarter) {
    if (total < ((int64_t)1 << 30)) return;
    const int q = (int)(4 * done / total);
    if (q <= *quarter) return;
    *quarter = q;
    printf("%s %.400s: %d%%\n", what, path, 25 * q);
    fflush(stdout);
}

// Order of tensors in an llm.c file, by (is_layer_tensor, index).
static const int llmc_file_order[16][2] = {
    {0, WTE},  {0, WPE},  {1, LN1W}, {1, LN1B}, {1, QKVW},    {1, QKVB},    {1, ATTPROJW}, {1, ATTPROJB},
    {1, LN2W}, {1, LN2B}, {1, FCW},  {1, FCB},  {1, FCPROJW}, {1, FCPROJB}, {0, LNFW},     {0, LNFB}};

// llm.c fp32 file header for cfg.
static inline void llmc_header(const GPTConfig* cfg, int header[256]) {
    memset(header, 0, 256 * sizeof(int));
    header[0] = MODEL_MAGIC;
    header[1] = MODEL_VERSION_FP32;
    header[2] = cfg->max_seq_len;
    header[3] = cfg->vocab_size;
    header[4] = cfg->num_layers;
    header[5] = cfg->num_heads;
    header[6] = cfg->channels;
    header[7] = cfg->padded_vocab_size;
}

// File byte offset of tensor k (llmc_file_order), layer l.
static inline int64_t llmc_tensor_offset(const GPTConfig* c, const ParamLayout* p, int k, int l, int esize) {
    int64_t at = 256 * 4;
    for (int j = 0; j < k; j++) {
        const int is_layer = llmc_file_order[j][0], t = llmc_file_order[j][1];
        at += esize * (is_layer ? p->layer_size[t] * c->num_layers : p->embed_size[t]);
    }
    const int is_layer = llmc_file_order[k][0], t = llmc_file_order[k][1];
    return at + (is_layer ? esize * (int64_t)l * p->layer_size[t] : 0);
}

// Any model file's 256-int header and size. *got 0: too short.
static inline int read_model_header(const char* path, int32_t header[256], int* got, int64_t* bytes,
                                    char* err, size_t errlen) {
    struct stat st;
    FILE* f = fopen_regular(path, "model file ", &st, err, errlen);
    if (!f) return 0;
    *got = fread(header, sizeof(int32_t), 256, f) == 256;
    fclose(f);
    *bytes = (int64_t)st.st_size;
    return 1;
}

// Reads the header; 0 with err if the file size disagrees.
static inline int llmc_read_header(const char* path, GPTConfig* cfg, char* err, size_t errlen) {
    int32_t header[256];
    int got;
    int64_t bytes;
    if (!read_model_header(path, header, &got, &bytes, err, errlen)) return 0;
    if (!got) {
        snprintf(err, errlen, "model file %.400s: too short for its 1024-byte header", path);
        return 0;
    }
    if (header[0] != MODEL_MAGIC) {
        snprintf(err, errlen, "model file %.400s: bad magic %d (want %d)", path, header[0], MODEL_MAGIC);
        return 0;
    }
    if (header[1] != MODEL_VERSION_FP32 && header[1] != MODEL_VERSION_BF16) {
        snprintf(err, errlen, "model file %.400s: version %d not supported (want %d = fp32 or %d = bf16)",
                 path, header[1], MODEL_VERSION_FP32, MODEL_VERSION_BF16);
        return 0;
    }
    cfg->max_seq_len = header[2];
    cfg->vocab_size = header[3];
    cfg->num_layers = header[4];
    cfg->num_heads = header[5];
    cfg->channels = header[6];
    cfg->padded_vocab_size = header[7];
    char why[256];
    if (!gpt_config_check(cfg, why, sizeof why)) {
        snprintf(err, errlen, "model file %.400s: %.90s", path, why);
        return 0;
    }
    const int64_t want = 256 * 4 + gpt_layout(cfg).total * (header[1] == MODEL_VERSION_BF16 ? 2 : 4);
    if (bytes != want) {
        snprintf(err, errlen,
                 "model file %.400s: size %lld bytes, its header implies %lld (truncated or not this format)",
                 path, (long long)bytes, (long long)want);
        return 0;
    }
    return 1;
}

// First NaN or inf, or -1; loading refuses them.
static inline int64_t first_non_finite(const float* x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

// Loads into `params`; bf16 widens exactly.
// [lo, hi) of whole blocks: only those tensors (SSD tier).
static inline int llmc_load_params(const char* path, const GPTConfig* cfg, float* params, char* err,
                                   size_t errlen, int64_t lo = 0, int64_t hi = INT64_MAX) {
    ParamLayout p = gpt_layout(cfg);
    FILE* f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open model file %.400s", path);
        return 0;
    }
    int header[256];
    const int is_bf16 = fread(header, sizeof(int), 256, f) == 256 && header[1] == MODEL_VERSION_BF16;
    fseeko(f, 0, SEEK_END);
    int64_t bytes = (int64_t)ftello(f);
    int64_t want = 256 * 4 + p.total * (is_bf16 ? 2 : 4);
    if (bytes != want) {
        fclose(f);
        snprintf(err, errlen, "model file %.400s: size %lld bytes, header implies %lld", path,
                 (long long)bytes, (long long)want);
        return 0;
    }
    const int whole = lo == 0 && hi >= p.total;
    int ok = 1, quarter = 0;
    int64_t done = 256 * 4;
    for (int k = 0; k < 16 && ok; k++) {
        int is_layer = llmc_file_order[k][0], t = llmc_file_order[k][1];
        int reps = is_layer ? cfg->num_layers : 1;
        for (int l = 0; l < reps && ok; l++) {
            const int64_t at = is_layer ? gpt_layer_offset(&p, l) + p.layer_offset[t] : p.embed_offset[t];
            float* dst = params + (at - lo);
            int64_t n = is_layer ? p.layer_size[t] : p.embed_size[t];
            const int64_t file_at = done;
            done += n * (is_bf16 ? 2 : 4);
            if (at < lo || at >= hi) continue;
            if (fseeko(f, (off_t)file_at, SEEK_SET) != 0) ok = 0;
            if (whole) read_progress("loading model file", path, done, bytes, &quarter);
            if (!is_bf16) {
                ok = (int64_t)fread(dst, sizeof(float), (size_t)n, f) == n;
            } else {
                // bf16: read into dst's upper half, widen front to back.
                // Each float overwrites only bf16s already read.
                unsigned char* half = (unsigned char*)dst + 2 * n;
                ok = (int64_t)fread(half, 2, (size_t)n, f) == n;
                for (int64_t i = 0; i < n && ok; i++) {
                    uint16_t b;
                    memcpy(&b, half + 2 * i, 2);
                    const uint32_t bits = (uint32_t)b << 16;
                    memcpy(dst + i, &bits, 4);
                }
            }
            const int64_t bad = ok ? first_non_finite(dst, n) : -1;
            if (bad >= 0) {
                fclose(f);
                char layer[32] = "";
                if (is_layer) snprintf(layer, sizeof layer, " of layer %d", l);
                snprintf(err, errlen, "model file %.400s: %s%s holds %s at element %lld", path,
                         is_layer ? layer_tensor_names[t] : embed_tensor_names[t], layer,
                         isnan(dst[bad]) ? "a NaN" : "an infinity", (long long)bad);
                return 0;
            }
        }
    }
    fclose(f);
    if (!ok) snprintf(err, errlen, "model file %.400s: short read", path);
    return ok;
}

// Ends an atomic save: fsync, close, rename tmp to path; 0 sets *why.
static inline int finish_atomic_write(FILE* f, int ok, const char* tmp, const char* path, int* why) {
    ProgressTicker ticker;  // the fsync of a large file: minutes (llmc/progress_watch.h)
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    *why = ok ? 0 : errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        *why = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        *why = errno;
    }
    if (!ok) remove(tmp);
    return ok;
}

// A model file's atomic save: model_tmp_open, write_crc for each piece, model_tmp_finish.
// Opens path.tmp (tmp gets the name); NULL with err.
static inline FILE* model_tmp_open(const char* path, char* tmp, size_t tmplen, char* err, size_t errlen) {
    if (snprintf(tmp, tmplen, "%s.tmp", path) >= (int)tmplen) {
        snprintf(err, errlen, "model file path too long (%zu characters)", strlen(path));
        return NULL;
    }
    FILE* f = fopen(tmp, "wb");
    if (!f) snprintf(err, errlen, "cannot create %.400s: %.60s", tmp, strerror(errno));
    errno = 0;
    return f;
}
// Writes bytes and adds them to *crc; 0 on a short write.
static inline int write_crc(FILE* f, const void* p, int64_t bytes, uint32_t* crc) {
    const char* c = (const char*)p;
    for (int64_t at = 0; at < bytes;) {  // 256 MiB at a time, each one progress (llmc/progress_watch.h)
        const int64_t n = bytes - at < ((int64_t)1 << 28) ? bytes - at : ((int64_t)1 << 28);
        *crc = crc32c_update(*crc, c + at, (size_t)n);
        if ((int64_t)fwrite(c + at, 1, (size_t)n, f) != n) return 0;
        progress_tick();
        at += n;
    }
    return 1;
}
// Renames path.tmp to path (the caller fsyncs the directory); 0 with err.
static inline int model_tmp_finish(FILE* f, int ok, const char* tmp, const char* path, char* err,
                                   size_t errlen) {
    int why;
    if (finish_atomic_write(f, ok, tmp, path, &why)) return 1;
    snprintf(err, errlen, "failed writing model file %.400s: %.80s", path,
             why ? strerror(why) : "short write");
    return 0;
}

// Atomic save; the caller fsyncs the directory.
// crc (optional): gets the file's CRC-32C.
static inline int gpt_save_params(const char* path, const GPTConfig* cfg, const float* params, char* err,
                                  size_t errlen, uint32_t* crc = NULL) {
    ParamLayout p = gpt_layout(cfg);
    char tmp[4200];
    FILE* f = model_tmp_open(path, tmp, sizeof tmp, err, errlen);
    if (!f) return 0;
    int header[256];
    llmc_header(cfg, header);
    uint32_t sum = 0;
    int ok = write_crc(f, header, sizeof header, &sum);
    for (int k = 0; k < 16 && ok; k++) {
        int is_layer = llmc_file_order[k][0], t = llmc_file_order[k][1];
        int reps = is_layer ? cfg->num_layers : 1;
        for (int l = 0; l < reps && ok; l++) {
            const float* src =
                is_layer ? params + gpt_layer_offset(&p, l) + p.layer_offset[t] : params + p.embed_offset[t];
            int64_t n = is_layer ? p.layer_size[t] : p.embed_size[t];
            ok = write_crc(f, src, n * 4, &sum);
        }
    }
    if (crc) *crc = sum;
    return model_tmp_finish(f, ok, tmp, path, err, errlen);
}

// ----------------------------------------------------------------------------
// Host memory

// MemAvailable from /proc/meminfo in bytes, or -1.
static inline int64_t host_available_bytes(void) {
    FILE* f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    int64_t kb = -1;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemAvailable: %lld kB", (long long*)&kb) == 1) break;
    }
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}
