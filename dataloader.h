// dataloader.h — llm.c token shards as (B, T) inputs and next-token targets, in order or shuffled per
// epoch from a seed; the position is saved in checkpoints. Not here: tokenizing, exiting (errors return).
// Shard: 256 int32 header {20240520, 1, N tokens, ...}, then N uint16 ids. Batch k reads tokens
// [k*B*T, k*B*T + B*T]; a tail short of a batch is skipped, as in llm.c. Shuffle permutes shards and
// batches from (seed, epoch, shard) alone, so {epoch, shard, batch} is a position.
#pragma once
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#define DATALOADER_MAGIC        20240520
#define DATALOADER_VERSION      1
#define DATALOADER_HEADER_BYTES (256 * 4)
// fseeko/ftello: a 32-bit off_t would wrap past 2 GiB.
static_assert(sizeof(off_t) == 8, "dataloader.h needs a 64-bit off_t (build with -D_FILE_OFFSET_BITS=64)");

// A loader's position, saved raw in checkpoints: 8-byte fields only (no padding). B, T, num_shards and
// total_tokens are a fingerprint: restoring over other data or batch shape is refused.
typedef struct {
    int64_t epoch;        // completed passes over all shards
    int64_t shard_index;  // position in this epoch's shard order
    int64_t batch_index;  // the NEXT batch, in that shard's batch order
    uint64_t seed;        // shuffle seed: the order depends on it
    int64_t shuffle;      // 0 or 1
    int64_t B, T;
    int64_t num_shards, total_tokens;
} DataLoaderState;

typedef struct {
    int B, T, shuffle;
    uint64_t seed;
    char* pattern;
    int64_t num_shards;
    char** paths;            // sorted glob matches
    int64_t* shard_batches;  // batches in each shard
    int64_t max_shard_batches;
    int64_t num_batches;                      // batches per epoch, all shards
    int64_t total_tokens;                     // sum of the header token counts
    int64_t epoch, shard_index, batch_index;  // position of the next batch
    int64_t* shard_order;                     // file index of the i-th shard of the current epoch
    int64_t* batch_order;                     // batch permutation of the current shard (shuffle only)
    int64_t order_epoch, order_shard;         // what the two orders were made for (-1: none)
    FILE* file;                               // the open shard (file_index)
    int64_t file_index;
    uint16_t* buf;      // B*T+1 raw tokens
    int* inputs;        // B*T token ids
    int* targets;       // B*T next-token ids: targets[i] = token after inputs[i]
    int64_t last_file;  // shard and token index of the last batch's first token
    int64_t last_token;
    char err[512];  // why dataloader_next_batch returned 0
} DataLoader;

// splitmix64 (Steele et al.), so the order never depends on a library's RNG.
static inline uint64_t dl_splitmix64(uint64_t* s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline uint64_t dl_stream_seed(uint64_t seed, int64_t epoch, uint64_t stream) {
    uint64_t s = seed, x = dl_splitmix64(&s);
    s = x ^ (uint64_t)epoch;
    x = dl_splitmix64(&s);
    s = x ^ stream;
    return dl_splitmix64(&s);
}
// Fisher–Yates; rejection sampling avoids %'s bias.
static inline void dl_permute(int64_t* a, int64_t n, uint64_t rng) {
    for (int64_t i = 0; i < n; i++) a[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        const uint64_t m = (uint64_t)i + 1, limit = UINT64_MAX - UINT64_MAX % m;
        uint64_t r;
        do { r = dl_splitmix64(&rng); } while (r >= limit);
        const int64_t j = (int64_t)(r % m), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static inline void dataloader_free(DataLoader* dl) {
    if (dl->file) fclose(dl->file);
    for (int64_t i = 0; dl->paths && i < dl->num_shards; i++) free(dl->paths[i]);
    free(dl->paths);
    free(dl->pattern);
    free(dl->shard_batches);
    free(dl->shard_order);
    free(dl->batch_order);
    free(dl->buf);
    free(dl->inputs);
    free(dl->targets);
    memset(dl, 0, sizeof *dl);
}

// Back to the first batch of epoch 0.
static inline void dataloader_reset(DataLoader* dl) {
    dl->epoch = dl->shard_index = dl->batch_index = 0;
    dl->order_epoch = dl->order_shard = -1;
}

// A shard's token count after checking header and size; -1 with err.
static inline int64_t dl_check_shard(const char* path, int64_t BT, char* err, size_t errlen) {
    // a directory opens fine on Linux: refuse anything but a file
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "shard %s is not a regular file", path);
        return -1;
    }
    FILE* f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open shard %s", path);
        return -1;
    }
    int32_t h[256];
    int64_t bytes = -1;
    const int got = fread(h, sizeof h, 1, f) == 1;
    if (fseeko(f, 0, SEEK_END) == 0) bytes = (int64_t)ftello(f);
    fclose(f);
    if (!got) {
        snprintf(err, errlen, "shard %s: file size %lld bytes is smaller than the %d-byte header", path,
                 (long long)bytes, DATALOADER_HEADER_BYTES);
        return -1;
    }
    if (h[0] != DATALOADER_MAGIC) {
        snprintf(err, errlen, "shard %s: bad magic %d (want %d; not an llm.c token shard)", path, h[0],
                 DATALOADER_MAGIC);
        return -1;
    }
    if (h[1] != DATALOADER_VERSION) {
        snprintf(err, errlen, "shard %s: unsupported version %d (want %d)", path, h[1], DATALOADER_VERSION);
        return -1;
    }
    // int32 count, 64-bit size: shards may pass 2 GiB
    const int64_t n = h[2], want = DATALOADER_HEADER_BYTES + 2 * n;
    if (n < 0 || bytes != want) {
        snprintf(err, errlen,
                 "shard %s: file size %lld bytes disagrees with the header's %lld tokens (want %lld bytes)",
                 path, (long long)bytes, (long long)n, (long long)want);
        return -1;
    }
    if (n < BT + 1) {
        snprintf(err, errlen, "shard %s: too short: %lld tokens, one batch needs B*T+1 = %lld tokens", path,
                 (long long)n, (long long)(BT + 1));
        return -1;
    }
    return n;
}

// Opens every shard of a glob(3) pattern and checks all headers now, not hours into a run.
// 0 on failure, with err and *dl empty (safe to free).
static inline int dataloader_init(DataLoader* dl, const char* pattern, int B, int T, int shuffle,
                                  uint64_t seed, char* err, size_t errlen) {
    memset(dl, 0, sizeof *dl);
    char dummy[8];
    if (!err) {
        err = dummy;
        errlen = sizeof dummy;
    }
    if (B < 1 || T < 1) {
        snprintf(err, errlen, "data %s: B=%d and T=%d must both be >= 1", pattern, B, T);
        return 0;
    }
    glob_t g;
    memset(&g, 0, sizeof g);
    const int rc = glob(pattern, 0, NULL, &g);  // sorted (no GLOB_NOSORT)
    if (rc != 0 || g.gl_pathc == 0) {
        snprintf(err, errlen,
                 rc == GLOB_NOMATCH || rc == 0 ? "no files match pattern %s" : "glob failed for pattern %s",
                 pattern);
        globfree(&g);
        return 0;
    }
    const int64_t BT = (int64_t)B * T, ns = (int64_t)g.gl_pathc;
    dl->B = B;
    dl->T = T;
    dl->shuffle = shuffle ? 1 : 0;
    dl->seed = seed;
    dl->pattern = strdup(pattern);
    dl->num_shards = ns;
    dl->paths = (char**)calloc((size_t)ns, sizeof(char*));
    dl->shard_batches = (int64_t*)calloc((size_t)ns, sizeof(int64_t));
    dl->shard_order = (int64_t*)calloc((size_t)ns, sizeof(int64_t));
    for (int64_t i = 0; i < ns; i++) dl->paths[i] = strdup(g.gl_pathv[i]);
    globfree(&g);
    for (int64_t i = 0; i < ns; i++) {
        const int64_t n = dl_check_shard(dl->paths[i], BT, err, errlen);
        if (n < 0) {
            dataloader_free(dl);
            return 0;
        }
        dl->shard_batches[i] = (n - 1) / BT;
        dl->num_batches += dl->shard_batches[i];
        dl->total_tokens += n;
        if (dl->shard_batches[i] > dl->max_shard_batches) dl->max_shard_batches = dl->shard_batches[i];
    }
    dl->batch_order = (int64_t*)calloc((size_t)dl->max_shard_batches, sizeof(int64_t));
    dl->buf = (uint16_t*)malloc(sizeof(uint16_t) * (size_t)(BT + 1));
    dl->inputs = (int*)malloc(sizeof(int) * (size_t)BT);
    dl->targets = (int*)malloc(sizeof(int) * (size_t)BT);
    if (!dl->pattern || !dl->batch_order || !dl->buf || !dl->inputs || !dl->targets) {
        snprintf(err, errlen, "data %s: out of memory for B=%d T=%d", pattern, B, T);
        dataloader_free(dl);
        return 0;
    }
    dl->file_index = -1;
    dataloader_reset(dl);
    return 1;
}

// The next batch into inputs / targets; advances at once past a shard's or epoch's end, so a saved state
// points at a real batch. 0 with dl->err if a shard cannot be read.
static inline int dataloader_next_batch(DataLoader* dl) {
    const int64_t BT = (int64_t)dl->B * dl->T;
    if (dl->order_epoch != dl->epoch) {  // a new epoch, reset or restore: its shard order
        if (dl->shuffle)
            dl_permute(dl->shard_order, dl->num_shards, dl_stream_seed(dl->seed, dl->epoch, UINT64_MAX));
        else
            for (int64_t i = 0; i < dl->num_shards; i++) dl->shard_order[i] = i;
        dl->order_epoch = dl->epoch;
        dl->order_shard = -1;
    }
    const int64_t fi = dl->shard_order[dl->shard_index], nb = dl->shard_batches[fi];
    if (dl->shuffle && dl->order_shard != dl->shard_index) {
        dl_permute(dl->batch_order, nb, dl_stream_seed(dl->seed, dl->epoch, (uint64_t)fi));
        dl->order_shard = dl->shard_index;
    }
    if (dl->file_index != fi) {
        if (dl->file) fclose(dl->file);
        dl->file_index = -1;
        dl->file = fopen(dl->paths[fi], "rb");
        if (!dl->file) {
            snprintf(dl->err, sizeof dl->err, "cannot open shard %s", dl->paths[fi]);
            return 0;
        }
        dl->file_index = fi;
    }
    const int64_t k = dl->shuffle ? dl->batch_order[dl->batch_index] : dl->batch_index;
    const int64_t offset = DATALOADER_HEADER_BYTES + 2 * k * BT;
    if (fseeko(dl->file, (off_t)offset, SEEK_SET) != 0 ||
        fread(dl->buf, 2, (size_t)(BT + 1), dl->file) != (size_t)(BT + 1)) {
        snprintf(dl->err, sizeof dl->err,
                 "shard %s: read of %lld tokens at byte %lld failed (file changed since init?)",
                 dl->paths[fi], (long long)(BT + 1), (long long)offset);
        return 0;
    }
    for (int64_t i = 0; i < BT; i++) {
        dl->inputs[i] = dl->buf[i];
        dl->targets[i] = dl->buf[i + 1];
    }
    dl->last_file = fi;
    dl->last_token = k * BT;
    if (++dl->batch_index == nb) {
        dl->batch_index = 0;
        if (++dl->shard_index == dl->num_shards) {
            dl->shard_index = 0;
            dl->epoch++;
        }
    }
    return 1;
}

// Every token of the last batch < V (else the lookup reads outside wte); 0 with err: shard, index, value.
static inline int dataloader_check_tokens(const DataLoader* dl, int V, char* err, size_t errlen) {
    const int64_t n = (int64_t)dl->B * dl->T + 1;
    for (int64_t i = 0; i < n; i++)
        if ((int)dl->buf[i] >= V) {
            snprintf(err, errlen,
                     "shard %.400s: token %lld (byte %lld) is %d, outside the model's vocabulary of %d",
                     dl->paths[dl->last_file], (long long)(dl->last_token + i),
                     (long long)(DATALOADER_HEADER_BYTES + 2 * (dl->last_token + i)), (int)dl->buf[i], V);
            return 0;
        }
    return 1;
}

static inline DataLoaderState dataloader_get_state(const DataLoader* dl) {
    DataLoaderState s;
    memset(&s, 0, sizeof s);
    s.epoch = dl->epoch;
    s.shard_index = dl->shard_index;
    s.batch_index = dl->batch_index;
    s.seed = dl->seed;
    s.shuffle = dl->shuffle;
    s.B = dl->B;
    s.T = dl->T;
    s.num_shards = dl->num_shards;
    s.total_tokens = dl->total_tokens;
    return s;
}

// Restores a position, with its shuffle flag and seed (the order it means). 0 with err, loader
// unchanged, if the state does not fit this data.
static inline int dataloader_set_state(DataLoader* dl, const DataLoaderState* s, char* err, size_t errlen) {
    char dummy[8];
    if (!err) {
        err = dummy;
        errlen = sizeof dummy;
    }
    if (s->B != dl->B || s->T != dl->T) {
        snprintf(err, errlen, "data %s: saved state is for B=%lld T=%lld, the loader has B=%d T=%d",
                 dl->pattern, (long long)s->B, (long long)s->T, dl->B, dl->T);
        return 0;
    }
    if (s->num_shards != dl->num_shards || s->total_tokens != dl->total_tokens) {
        snprintf(err, errlen,
                 "data %s: saved state is for %lld shards / %lld tokens, found %lld shards / %lld tokens",
                 dl->pattern, (long long)s->num_shards, (long long)s->total_tokens, (long long)dl->num_shards,
                 (long long)dl->total_tokens);
        return 0;
    }
    if (s->epoch < 0 || s->shard_index < 0 || s->shard_index >= dl->num_shards ||
        (s->shuffle != 0 && s->shuffle != 1)) {
        snprintf(err, errlen, "data %s: saved state is corrupt (epoch %lld, shard %lld, shuffle %lld)",
                 dl->pattern, (long long)s->epoch, (long long)s->shard_index, (long long)s->shuffle);
        return 0;
    }
    // with shuffle the shard at shard_index depends on (seed, epoch): check them all
    int64_t nb = dl->shard_batches[s->shard_index];
    if (s->shuffle) {
        int64_t* order = (int64_t*)malloc(sizeof(int64_t) * (size_t)dl->num_shards);
        if (!order) {
            snprintf(err, errlen, "data %s: out of memory", dl->pattern);
            return 0;
        }
        dl_permute(order, dl->num_shards, dl_stream_seed(s->seed, s->epoch, UINT64_MAX));
        nb = dl->shard_batches[order[s->shard_index]];
        free(order);
    }
    if (s->batch_index < 0 || s->batch_index >= nb) {
        snprintf(err, errlen, "data %s: saved batch index %lld is outside the shard's %lld batches",
                 dl->pattern, (long long)s->batch_index, (long long)nb);
        return 0;
    }
    dl->epoch = s->epoch;
    dl->shard_index = s->shard_index;
    dl->batch_index = s->batch_index;
    dl->seed = s->seed;
    dl->shuffle = (int)s->shuffle;
    dl->order_epoch = dl->order_shard = -1;  // rebuilt from (seed, epoch) on the next batch
    return 1;
}

// Batches of one validation pass (an unshuffled loader, reset first): all, or at most max_batches > 0.
static inline int64_t dataloader_eval_batches(const DataLoader* dl, int64_t max_batches) {
    return max_batches > 0 && max_batches < dl->num_batches ? max_batches : dl->num_batches;
}
