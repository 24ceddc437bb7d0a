// dataloader.h — llm.c token shards as (B, T) batches of inputs, targets and positions.
// Not here: tokenizing, or exiting (errors return).
#pragma once
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

// Shards: a 256-int32 header, then the data; one loader reads one kind.
//   GPT-2:   {20240520, 1, N, 0...}, N uint16 ids (dev/data/tokenize.cpp)
//   Llama 3: {20240801, 7, N, 0...}, N uint32 ids (dev/data/hf_tokenize.py)
//   Chat:    {20261126, 1, W, T, R, V, ...}, R rows of T ids, R*T flags (dev/data/chat_shards.py)
#define DATALOADER_MAGIC        20240520  // GPT-2: uint16 ids
#define DATALOADER_VERSION      1
#define DATALOADER_MAGIC_U32    20240801  // Llama 3: uint32 ids
#define DATALOADER_VERSION_U32  7
#define DATALOADER_CHAT_MAGIC   20261126  // chat: packed conversations, flags
#define DATALOADER_CHAT_VERSION 1
#define DATALOADER_HEADER_BYTES (256 * 4)
// fseeko/ftello: a 32-bit off_t would wrap past 2 GiB.
static_assert(sizeof(off_t) == 8, "dataloader.h needs a 64-bit off_t (build with -D_FILE_OFFSET_BITS=64)");

// The chat header's int32 slots. Counts past 2^31 take two (int64, little-endian).
enum {
    CHAT_H_MAGIC = 0,
    CHAT_H_VERSION = 1,
    CHAT_H_TOKEN_BYTES = 2,   // 2 (uint16 ids) or 4 (uint32)
    CHAT_H_T = 3,             // row length: a run must use this T
    CHAT_H_ROWS = 4,          // R
    CHAT_H_VOCAB = 5,         // the tokenizer's vocabulary size (0: not recorded): dataloader_check_model
    CHAT_H_CONVS = 6,         // conversations in this shard (a split one counts once)
    CHAT_H_SEGMENTS = 7,      // conversation pieces (CHAT_START flags outside padding)
    CHAT_H_TARGETS = 8,       // int64 (slots 8, 9): tokens flagged CHAT_TARGET
    CHAT_H_PADS = 10,         // int64 (slots 10, 11): tokens flagged CHAT_PAD
    CHAT_H_SPLIT = 12,        // conversations longer than T cut into pieces
    CHAT_H_DROPPED = 13,      // conversations longer than T left out (information)
    CHAT_H_SPECIALS = 14,     // S <= CHAT_MAX_SPECIALS special tokens the shard holds (0: none recorded)
    CHAT_H_SPECIAL_IDS = 15,  // slots 15..15+S-1: their ids; their texts from byte CHAT_SPECIAL_TEXT_AT
};
#define CHAT_MAX_SPECIALS    16
#define CHAT_SPECIAL_TEXT_AT 128  // the S texts, each NUL-ended, in the header's last 896 bytes
// A chat row: whole conversations packed end to end, then padding; one flag byte per token.
//   CHAT_TARGET: to be predicted (an assistant turn)
//   CHAT_START:  a conversation's first token
//   CHAT_PAD:    padding after the last conversation
enum { CHAT_TARGET = 1, CHAT_START = 2, CHAT_PAD = 4 };
enum { DL_GPT2 = 1, DL_LLAMA3 = 2, DL_CHAT = 3 };  // DataLoader.kind

// A loader's position, saved raw in checkpoints (8-byte fields, no padding).
// B, T, num_shards, total_tokens: a fingerprint of the data.
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
    int kind;         // DL_GPT2, DL_LLAMA3 or DL_CHAT: every shard of the glob is this kind
    int token_bytes;  // 2 or 4
    int vocab;        // chat: the vocabulary the shards were made with (0: not recorded), as every shard's
    int32_t tokenizer[256];   // chat: the header of the first shard that records special tokens (slots 14..)
    int64_t tokenizer_shard;  // chat: that shard's index in paths
    int64_t num_shards;
    char** paths;            // sorted glob matches
    int64_t* shard_batches;  // batches in each shard
    int64_t* shard_rows;     // chat: rows in each shard
    int64_t max_shard_batches;
    int64_t num_batches;                      // batches per epoch, all shards
    int64_t total_tokens;                     // sum of the shards' token counts
    int64_t total_targets;                    // chat: sum of the headers' target counts
    int64_t epoch, shard_index, batch_index;  // position of the next batch
    int64_t* shard_order;                     // file index of the i-th shard of the current epoch
    int64_t* batch_order;                     // shuffle: batch (pretraining) or row (chat) permutation
    int64_t order_epoch, order_shard;         // what the two orders were made for (-1: none)
    FILE* file;                               // the open shard (file_index)
    int64_t file_index;
    uint8_t* buf;           // raw ids: B*T+1 (pretraining) or B*T (chat), token_bytes each
    uint8_t* flags;         // chat: the batch's B*T flag bytes
    int64_t* rows;          // chat: the batch's B row indices in its shard
    int* inputs;            // B*T token ids
    int* targets;           // B*T next-token ids, or -1 where nothing is to be predicted (chat only)
    int* pos;               // B*T position of each token in its conversation (pretraining: i % T)
    int64_t batch_targets;  // targets != -1 in the last batch (pretraining: B*T)
    int64_t last_file;      // shard and token index of the last batch's first token
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

static inline const char* dl_kind_name(int kind, int token_bytes) {
    if (kind == DL_GPT2) return "GPT-2 (uint16 ids, version 1)";
    if (kind == DL_LLAMA3) return "Llama 3 (uint32 ids, version 7)";
    return token_bytes == 2 ? "chat (uint16 ids)" : "chat (uint32 ids)";
}

// Token i of the batch's raw buffer.
static inline uint32_t dl_token(const DataLoader* dl, int64_t i) {
    if (dl->token_bytes == 2) {
        uint16_t t;
        memcpy(&t, dl->buf + 2 * i, 2);
        return t;
    }
    uint32_t t;
    memcpy(&t, dl->buf + 4 * i, 4);
    return t;
}

static inline void dataloader_free(DataLoader* dl) {
    if (dl->file) fclose(dl->file);
    for (int64_t i = 0; dl->paths && i < dl->num_shards; i++) free(dl->paths[i]);
    free(dl->paths);
    free(dl->pattern);
    free(dl->shard_batches);
    free(dl->shard_rows);
    free(dl->shard_order);
    free(dl->batch_order);
    free(dl->buf);
    free(dl->flags);
    free(dl->rows);
    free(dl->inputs);
    free(dl->targets);
    free(dl->pos);
    memset(dl, 0, sizeof *dl);
}

// Back to the first batch of epoch 0.
static inline void dataloader_reset(DataLoader* dl) {
    dl->epoch = dl->shard_index = dl->batch_index = 0;
    dl->order_epoch = dl->order_shard = -1;
}

// What dl_check_shard found in a shard.
typedef struct {
    int kind, token_bytes;
    int64_t tokens;   // ids in the file
    int64_t rows;     // chat: R
    int64_t targets;  // chat: the header's target count
    int32_t h[256];   // the header
} DlShard;

static inline int64_t dl_int64_at(const int32_t* h, int slot) {
    return (int64_t)((uint64_t)(uint32_t)h[slot] | (uint64_t)(uint32_t)h[slot + 1] << 32);
}

// A chat shard's header and size against B, T; 0 with err.
static inline int dl_check_chat(const char* path, const int32_t* h, int64_t bytes, int B, int T, DlShard* s,
                                char* err, size_t errlen) {
    if (h[CHAT_H_VERSION] != DATALOADER_CHAT_VERSION) {
        snprintf(err, errlen, "shard %s: unsupported version %d of a chat shard (want %d)", path,
                 h[CHAT_H_VERSION], DATALOADER_CHAT_VERSION);
        return 0;
    }
    const int w = h[CHAT_H_TOKEN_BYTES];
    if (w != 2 && w != 4) {
        snprintf(err, errlen, "shard %s: chat shard token width %d bytes (want 2 or 4)", path, w);
        return 0;
    }
    if (h[CHAT_H_T] != T) {
        snprintf(
            err, errlen,
            "shard %s: its rows were packed for T=%d, the run has T=%d (run with -t %d, or make the shards "
            "again with --seq-len %d)",
            path, h[CHAT_H_T], T, h[CHAT_H_T], T);
        return 0;
    }
    const int64_t R = h[CHAT_H_ROWS], targets = dl_int64_at(h, CHAT_H_TARGETS);
    // R <= 2^31 and T <= 2^31: R*T*(w+1) stays below 2^63 only with this check
    if (R < 0 || (R > 0 && (int64_t)T > (INT64_MAX / 8) / R)) {
        snprintf(err, errlen, "shard %s: chat header says %lld rows of %d tokens", path, (long long)R, T);
        return 0;
    }
    const int64_t want = DATALOADER_HEADER_BYTES + R * T * (w + 1);
    if (bytes != want) {
        snprintf(
            err, errlen,
            "shard %s: file size %lld bytes disagrees with the header's %lld rows of %d tokens (want %lld "
            "bytes)",
            path, (long long)bytes, (long long)R, T, (long long)want);
        return 0;
    }
    if (targets < 0 || targets > R * T) {
        snprintf(err, errlen, "shard %s: chat header counts %lld targets in %lld tokens", path,
                 (long long)targets, (long long)(R * T));
        return 0;
    }
    if (R < B) {  // -t is the shard's --seq-len: fewer rows per batch, or shorter rows for more of them
        char fix[160];
        if (R > 0)
            snprintf(fix, sizeof fix,
                     "use -b %lld%s, or re-make the shards with a smaller --seq-len (a val shard: a larger "
                     "--val-convs)",
                     (long long)R, R > 1 ? " or fewer" : "");
        else snprintf(fix, sizeof fix, "re-make it with a smaller --seq-len or more conversations");
        snprintf(err, errlen, "shard %s: too short: %lld row%s, one batch needs B = %d rows: %s", path,
                 (long long)R, R == 1 ? "" : "s", B, fix);
        return 0;
    }
    const int S = h[CHAT_H_SPECIALS];
    const char* text = (const char*)h + CHAT_SPECIAL_TEXT_AT;
    int at = 0, ends = 0;  // the NUL-ended texts in the header's last bytes
    for (; at < DATALOADER_HEADER_BYTES - CHAT_SPECIAL_TEXT_AT && ends < S; at++) ends += text[at] == 0;
    bool bad_id = false;
    for (int i = 0; i < S && S <= CHAT_MAX_SPECIALS; i++)
        bad_id |= h[CHAT_H_SPECIAL_IDS + i] < 0 ||
                  (h[CHAT_H_VOCAB] > 0 && h[CHAT_H_SPECIAL_IDS + i] >= h[CHAT_H_VOCAB]);
    if (h[CHAT_H_VOCAB] < 0 || S < 0 || S > CHAT_MAX_SPECIALS || ends < S || bad_id) {
        snprintf(err, errlen, "shard %s: chat header's vocabulary %d or its %d special tokens are corrupt",
                 path, h[CHAT_H_VOCAB], S);
        return 0;
    }
    // the flags against the header's counts: a header that promises targets the flags do not mark would
    // train on nothing, each step skipped (one pass over R*T bytes, read in 1 MiB pieces)
    FILE* f = fopen(path, "rb");
    int64_t counted[3] = {0, 0, 0};  // targets, pads, conversation pieces (starts outside padding)
    static thread_local uint8_t piece[1 << 20];
    bool read_ok = f && fseeko(f, (off_t)(DATALOADER_HEADER_BYTES + R * T * w), SEEK_SET) == 0;
    for (int64_t left = R * T; read_ok && left > 0;) {
        const size_t n = (size_t)(left < (int64_t)sizeof piece ? left : (int64_t)sizeof piece);
        read_ok = fread(piece, 1, n, f) == n;
        for (size_t i = 0; read_ok && i < n; i++) {
            counted[0] += piece[i] & CHAT_TARGET;
            counted[1] += (piece[i] & CHAT_PAD) != 0;
            counted[2] += (piece[i] & (CHAT_START | CHAT_PAD)) == CHAT_START;
        }
        left -= (int64_t)n;
    }
    if (f) fclose(f);
    if (!read_ok) {
        snprintf(err, errlen, "shard %s: cannot read its flags", path);
        return 0;
    }
    if (counted[0] != targets || counted[1] != dl_int64_at(h, CHAT_H_PADS) ||
        counted[2] != h[CHAT_H_SEGMENTS]) {
        snprintf(
            err, errlen,
            "shard %s: its flags mark %lld targets, %lld padding tokens and %lld conversation pieces, its "
            "header says %lld, %lld and %d: a corrupt shard (make it again with dev/data/chat_shards.py)",
            path, (long long)counted[0], (long long)counted[1], (long long)counted[2], (long long)targets,
            (long long)dl_int64_at(h, CHAT_H_PADS), h[CHAT_H_SEGMENTS]);
        return 0;
    }
    s->kind = DL_CHAT;
    s->token_bytes = w;
    s->rows = R;
    s->tokens = R * T;
    s->targets = targets;
    return 1;
}

// A shard's header and size against B, T; 0 with err.
static inline int dl_check_shard(const char* path, int B, int T, DlShard* s, char* err, size_t errlen) {
    memset(s, 0, sizeof *s);
    // a directory opens fine on Linux: refuse anything but a file
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "shard %s is not a regular file", path);
        return 0;
    }
    FILE* f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open shard %s", path);
        return 0;
    }
    int32_t h[256];
    int64_t bytes = -1;
    const int got = fread(h, sizeof h, 1, f) == 1;
    if (fseeko(f, 0, SEEK_END) == 0) bytes = (int64_t)ftello(f);
    fclose(f);
    if (!got) {
        snprintf(err, errlen, "shard %s: file size %lld bytes is smaller than the %d-byte header", path,
                 (long long)bytes, DATALOADER_HEADER_BYTES);
        return 0;
    }
    memcpy(s->h, h, sizeof h);
    if (h[0] == DATALOADER_CHAT_MAGIC) return dl_check_chat(path, h, bytes, B, T, s, err, errlen);
    if (h[0] != DATALOADER_MAGIC && h[0] != DATALOADER_MAGIC_U32) {
        snprintf(err, errlen, "shard %s: bad magic %d (want %d, %d or %d; not an llm.c token shard)", path,
                 h[0], DATALOADER_MAGIC, DATALOADER_MAGIC_U32, DATALOADER_CHAT_MAGIC);
        return 0;
    }
    const int u32 = h[0] == DATALOADER_MAGIC_U32, version = u32 ? DATALOADER_VERSION_U32 : DATALOADER_VERSION;
    if (h[1] != version) {
        snprintf(err, errlen, "shard %s: unsupported version %d (want %d for magic %d)", path, h[1], version,
                 h[0]);
        return 0;
    }
    s->kind = u32 ? DL_LLAMA3 : DL_GPT2;
    s->token_bytes = u32 ? 4 : 2;
    // int32 count, 64-bit size: shards may pass 2 GiB
    const int64_t n = h[2], want = DATALOADER_HEADER_BYTES + s->token_bytes * n, BT = (int64_t)B * T;
    if (n < 0 || bytes != want) {
        snprintf(err, errlen,
                 "shard %s: file size %lld bytes disagrees with the header's %lld tokens (want %lld bytes)",
                 path, (long long)bytes, (long long)n, (long long)want);
        return 0;
    }
    if (n < BT + 1) {
        char fix[160];
        const int64_t fits = (n - 1) / T;  // the B that fits at this T
        if (fits > 0)
            snprintf(fix, sizeof fix, "use -b %lld%s, or a smaller -t", (long long)fits,
                     fits > 1 ? " or fewer" : "");
        else if (n > 1) snprintf(fix, sizeof fix, "use -b 1 and -t %lld or less", (long long)(n - 1));
        else snprintf(fix, sizeof fix, "it holds no pair of tokens to learn from");
        snprintf(err, errlen, "shard %s: too short: %lld tokens, one batch needs B*T+1 = %lld tokens: %s",
                 path, (long long)n, (long long)(BT + 1), fix);
        return 0;
    }
    s->tokens = n;
    return 1;
}

// Two chat headers made with one tokenizer: the same vocabulary and, where both record them, special tokens;
// 0 with err.
static inline int dl_same_tokenizer(const char* what, const char* a, const int32_t* ha, const char* b,
                                    const int32_t* hb, char* err, size_t errlen) {
    if (ha[CHAT_H_VOCAB] != hb[CHAT_H_VOCAB]) {
        snprintf(
            err, errlen,
            "%s: shard %s was made with a vocabulary of %d ids, shard %s with %d: one tokenizer's shards",
            what, a, ha[CHAT_H_VOCAB], b, hb[CHAT_H_VOCAB]);
        return 0;
    }
    const size_t at = CHAT_H_SPECIALS * 4;  // the specials' count, ids and texts: the header's rest
    if (ha[CHAT_H_SPECIALS] > 0 && hb[CHAT_H_SPECIALS] > 0 &&
        memcmp((const char*)ha + at, (const char*)hb + at, DATALOADER_HEADER_BYTES - at) != 0) {
        snprintf(err, errlen,
                 "%s: shard %s and shard %s record different special tokens: one tokenizer's shards", what, a,
                 b);
        return 0;
    }
    return 1;
}

// Opens and checks every shard of a glob; 0 with err (*dl safe to free).
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
    dl->shard_rows = (int64_t*)calloc((size_t)ns, sizeof(int64_t));
    dl->shard_order = (int64_t*)calloc((size_t)ns, sizeof(int64_t));
    for (int64_t i = 0; i < ns; i++) dl->paths[i] = strdup(g.gl_pathv[i]);
    globfree(&g);
    int64_t max_order = 0;  // the longest permutation shuffle needs
    for (int64_t i = 0; i < ns; i++) {
        DlShard s;
        if (!dl_check_shard(dl->paths[i], B, T, &s, err, errlen)) {
            dataloader_free(dl);
            return 0;
        }
        if (i > 0 && (s.kind != dl->kind || s.token_bytes != dl->token_bytes)) {
            snprintf(err, errlen, "data %s: shard %s is %s, shard %s is %s: one loader reads one kind",
                     pattern, dl->paths[i], dl_kind_name(s.kind, s.token_bytes), dl->paths[0],
                     dl_kind_name(dl->kind, dl->token_bytes));
            dataloader_free(dl);
            return 0;
        }
        if (i > 0 && s.kind == DL_CHAT &&
            !dl_same_tokenizer(pattern, dl->paths[i], s.h, dl->paths[dl->tokenizer_shard], dl->tokenizer, err,
                               errlen)) {
            dataloader_free(dl);
            return 0;
        }
        if (s.kind == DL_CHAT && (i == 0 || (!dl->tokenizer[CHAT_H_SPECIALS] && s.h[CHAT_H_SPECIALS]))) {
            memcpy(dl->tokenizer, s.h, sizeof s.h);  // the first shard that records specials
            dl->tokenizer_shard = i;
            dl->vocab = s.h[CHAT_H_VOCAB];
        }
        dl->kind = s.kind;
        dl->token_bytes = s.token_bytes;
        dl->shard_rows[i] = s.rows;
        dl->shard_batches[i] = s.kind == DL_CHAT ? s.rows / B : (s.tokens - 1) / BT;
        dl->num_batches += dl->shard_batches[i];
        dl->total_tokens += s.tokens;
        dl->total_targets += s.targets;
        if (dl->shard_batches[i] > dl->max_shard_batches) dl->max_shard_batches = dl->shard_batches[i];
        const int64_t order = s.kind == DL_CHAT ? s.rows : dl->shard_batches[i];
        if (order > max_order) max_order = order;
    }
    const int64_t raw = dl->kind == DL_CHAT ? BT : BT + 1;
    dl->batch_order = (int64_t*)calloc((size_t)max_order, sizeof(int64_t));
    dl->buf = (uint8_t*)malloc((size_t)(dl->token_bytes * raw));
    dl->flags = (uint8_t*)calloc((size_t)BT, 1);
    dl->rows = (int64_t*)calloc((size_t)B, sizeof(int64_t));
    dl->inputs = (int*)malloc(sizeof(int) * (size_t)BT);
    dl->targets = (int*)malloc(sizeof(int) * (size_t)BT);
    dl->pos = (int*)malloc(sizeof(int) * (size_t)BT);
    if (!dl->pattern || !dl->batch_order || !dl->buf || !dl->flags || !dl->rows || !dl->inputs ||
        !dl->targets || !dl->pos) {
        snprintf(err, errlen, "data %s: out of memory for B=%d T=%d", pattern, B, T);
        dataloader_free(dl);
        return 0;
    }
    dl->file_index = -1;
    dataloader_reset(dl);
    return 1;
}

// Train and val of one run: the same token width (one tokenizer). 0 with err.
static inline int dataloader_check_pair(const DataLoader* train, const DataLoader* val, char* err,
                                        size_t errlen) {
    if (train->token_bytes != val->token_bytes) {
        snprintf(err, errlen, "train data %.150s is %s, val data %.150s is %s: one run reads one token width",
                 train->pattern, dl_kind_name(train->kind, train->token_bytes), val->pattern,
                 dl_kind_name(val->kind, val->token_bytes));
        return 0;
    }
    if (train->kind != DL_CHAT || val->kind != DL_CHAT) return 1;
    return dl_same_tokenizer("train and val data", train->paths[train->tokenizer_shard], train->tokenizer,
                             val->paths[val->tokenizer_shard], val->tokenizer, err, errlen);
}

// A run's train and val data (train shuffled by seed), checked as a pair. A token shard too short for one
// batch is named by the shortest among both: its advice (-b K) then fits the other's shards too (the train
// shard's alone could advise a -b the val shard then refuses). 0 with err (both safe to free).
static inline int dataloader_open_pair(DataLoader* train, const char* train_pattern, DataLoader* val,
                                       const char* val_pattern, int B, int T, uint64_t seed, char* err,
                                       size_t errlen) {
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    char* shortest = NULL;
    int64_t fewest = INT64_MAX;
    const char* patterns[2] = {train_pattern, val_pattern};
    for (const char* pattern : patterns) {
        glob_t g;
        memset(&g, 0, sizeof g);
        if (pattern && glob(pattern, 0, NULL, &g) == 0)
            for (size_t i = 0; i < g.gl_pathc; i++) {
                DlShard sh;
                // a bad shard: dataloader_init below says why (err is overwritten on any failure)
                if (dl_check_shard(g.gl_pathv[i], 1, 1, &sh, err, errlen) && sh.kind != DL_CHAT &&
                    sh.tokens < fewest) {
                    fewest = sh.tokens;
                    free(shortest);
                    shortest = strdup(g.gl_pathv[i]);
                }
            }
        globfree(&g);
    }
    DlShard sh;
    const int too_short = shortest && B >= 1 && T >= 1 && fewest < (int64_t)B * T + 1 &&
                          !dl_check_shard(shortest, B, T, &sh, err, errlen);
    free(shortest);
    if (too_short) return 0;
    return dataloader_init(train, train_pattern, B, T, 1, seed, err, errlen) &&
           dataloader_init(val, val_pattern, B, T, 0, 0, err, errlen) &&
           dataloader_check_pair(train, val, err, errlen);
}

// The shards against the model: V its vocabulary, table its tokenizer's id -> text (n ids; NULL: none
// known, tok names it). A chat shard's vocabulary must be the tokenizer's, its special tokens the same
// texts; with no tokenizer, V may exceed the shard's vocabulary by unused rows (Qwen2.5: 151,936 for
// 151,665 ids), at most V/64. 1: fits; 0: refused, err says why (uint16 pretraining shards, which record
// no vocabulary, for a model past 65536 ids: GPT-2's ids for Llama 3's vocabulary); 2: fits with a warning.
static inline int dataloader_check_model(const DataLoader* dl, int V, const char* model,
                                         const char* const* table, int64_t n, const char* tok, char* err,
                                         size_t errlen) {
    const char* data = dl->pattern;
    if (dl->kind == DL_GPT2 && V > 65536) {  // ids of another tokenizer: an embedding trained on nonsense
        snprintf(err, errlen,
                 "data %.90s holds uint16 ids and records no vocabulary (GPT-2's shards?), the model %.90s "
                 "has %d ids: make shards of its own tokenizer (uint32, dev/data/hf_tokenize.py), or give a "
                 "spec GPT-2's vocabulary (:V50257)",
                 data, model, V);
        return 0;
    }
    if (dl->kind != DL_CHAT || dl->vocab == 0) return 1;  // ids are still checked per batch
    if (table && n != dl->vocab) {
        snprintf(
            err, errlen,
            "data %.90s was made with a tokenizer of %d ids, the model %.90s's tokenizer %.90s has %lld: "
            "make the shards with the model's tokenizer",
            data, dl->vocab, model, tok, (long long)n);
        return 0;
    }
    if (!table && (dl->vocab > V || V - dl->vocab > V / 64)) {
        snprintf(err, errlen,
                 "data %.90s was made with a tokenizer of %d ids, the model %.90s has a vocabulary of %d: "
                 "make the shards with the model's tokenizer",
                 data, dl->vocab, model, V);
        return 0;
    }
    const char* text = (const char*)dl->tokenizer + CHAT_SPECIAL_TEXT_AT;
    for (int i = 0; table && i < dl->tokenizer[CHAT_H_SPECIALS]; i++, text += strlen(text) + 1) {
        const int id = dl->tokenizer[CHAT_H_SPECIAL_IDS + i];
        if (id < n && table[id] && strcmp(table[id], text) == 0) continue;
        snprintf(err, errlen,
                 "data %.90s: token %d is '%.40s' in the tokenizer the shards were made with, '%.40s' in the "
                 "model %.90s's tokenizer %.90s: make the shards with the model's tokenizer",
                 data, id, text, id < n && table[id] ? table[id] : "(none)", model, tok);
        return 0;
    }
    return 1;
}

// Reads n bytes at offset of the open shard; 0 with dl->err.
static inline int dl_read_at(DataLoader* dl, int64_t offset, void* dst, int64_t n) {
    if (fseeko(dl->file, (off_t)offset, SEEK_SET) != 0 || fread(dst, 1, (size_t)n, dl->file) != (size_t)n) {
        snprintf(dl->err, sizeof dl->err,
                 "shard %s: read of %lld bytes at byte %lld failed (file changed since init?)",
                 dl->paths[dl->file_index], (long long)n, (long long)offset);
        return 0;
    }
    return 1;
}

// A chat batch: B rows (batch k in row order), flags checked, then inputs, targets, pos.
static inline int dl_chat_batch(DataLoader* dl, int64_t fi, int64_t k) {
    const int B = dl->B, T = dl->T, w = dl->token_bytes;
    const int64_t R = dl->shard_rows[fi], flags_at = DATALOADER_HEADER_BYTES + R * T * w;
    for (int b = 0; b < B; b++) {
        const int64_t r = dl->shuffle ? dl->batch_order[k * B + b] : k * B + b;
        dl->rows[b] = r;
        if (!dl_read_at(dl, DATALOADER_HEADER_BYTES + r * T * w, dl->buf + (int64_t)b * T * w,
                        (int64_t)T * w) ||
            !dl_read_at(dl, flags_at + r * T, dl->flags + (int64_t)b * T, T))
            return 0;
    }
    dl->batch_targets = 0;
    for (int b = 0; b < B; b++) {
        const uint8_t* f = dl->flags + (int64_t)b * T;
        const int64_t row = (int64_t)b * T;
        const char* why = NULL;
        int j = 0;
        for (; j < T && !why; j++) {
            if (f[j] & ~(CHAT_TARGET | CHAT_START | CHAT_PAD)) why = "unknown flag bits";
            else if (j == 0 && !(f[j] & CHAT_START)) why = "the row does not begin a conversation";
            else if ((f[j] & CHAT_TARGET) && (f[j] & (CHAT_START | CHAT_PAD)))
                why = "a conversation's first token or a pad is flagged a target";
            else if (j > 0 && (f[j - 1] & CHAT_PAD) && !(f[j] & CHAT_PAD)) why = "a token after the padding";
            else if (j > 0 && !(f[j - 1] & CHAT_PAD) && (f[j] & CHAT_PAD) && !(f[j] & CHAT_START))
                why = "the padding does not begin with a start flag";
        }
        if (why) {
            snprintf(dl->err, sizeof dl->err, "shard %s: row %lld, token %d: %s (flag byte %d)",
                     dl->paths[fi], (long long)dl->rows[b], j - 1, why, f[j - 1]);
            return 0;
        }
        for (j = 0; j < T; j++) {
            const int64_t i = row + j;
            dl->inputs[i] = (int)dl_token(dl, i);
            // pos: 0 at a START
            dl->pos[i] = (f[j] & CHAT_START) ? 0 : dl->pos[i - 1] + 1;
            // target: the next token if in the row and flagged, else -1 (ignored)
            const int next = j + 1 < T && (f[j + 1] & CHAT_TARGET);
            dl->targets[i] = next ? (int)dl_token(dl, i + 1) : -1;
            dl->batch_targets += next;
        }
    }
    dl->last_file = fi;
    dl->last_token = dl->rows[0] * T;
    return 1;
}

// Shuffle depends on (seed, epoch, shard) only: {epoch, shard, batch} is a position.

// The next batch; 0 with dl->err on a bad shard. Saved states point at real batches.
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
    const int chat = dl->kind == DL_CHAT;
    if (dl->shuffle && dl->order_shard != dl->shard_index) {  // chat permutes rows, pretraining batches
        dl_permute(dl->batch_order, chat ? dl->shard_rows[fi] : nb,
                   dl_stream_seed(dl->seed, dl->epoch, (uint64_t)fi));
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
    if (chat) {
        if (!dl_chat_batch(dl, fi, dl->batch_index)) return 0;
    } else {
        // pretraining: batch k is tokens [k*B*T, k*B*T + B*T]; short tails skipped
        const int64_t k = dl->shuffle ? dl->batch_order[dl->batch_index] : dl->batch_index;
        const int w = dl->token_bytes;
        if (!dl_read_at(dl, DATALOADER_HEADER_BYTES + w * k * BT, dl->buf, w * (BT + 1))) return 0;
        for (int64_t i = 0; i < BT; i++) {
            dl->inputs[i] = (int)dl_token(dl, i);
            dl->targets[i] = (int)dl_token(dl, i + 1);
            dl->pos[i] = (int)(i % dl->T);
        }
        dl->batch_targets = BT;
        dl->last_file = fi;
        dl->last_token = k * BT;
    }
    if (++dl->batch_index == nb) {
        dl->batch_index = 0;
        if (++dl->shard_index == dl->num_shards) {
            dl->shard_index = 0;
            dl->epoch++;
        }
    }
    return 1;
}

// Every token of the last batch < V; else 0 with err naming where.
static inline int dataloader_check_tokens(const DataLoader* dl, int V, char* err, size_t errlen) {
    const int chat = dl->kind == DL_CHAT;
    const int64_t n = (int64_t)dl->B * dl->T + (chat ? 0 : 1);
    for (int64_t i = 0; i < n; i++) {
        const uint32_t t = dl_token(dl, i);
        if (V < 0 || t >= (uint32_t)V) {
            // chat rows are not contiguous: batch row b is dl->rows[b]
            const int64_t at = chat ? dl->rows[i / dl->T] * dl->T + i % dl->T : dl->last_token + i;
            snprintf(err, errlen,
                     "shard %.400s: token %lld (byte %lld) is %u, outside the model's vocabulary of %d",
                     dl->paths[dl->last_file], (long long)at,
                     (long long)(DATALOADER_HEADER_BYTES + dl->token_bytes * at), t, V);
            return 0;
        }
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

// Restores a position; 0 with err, loader unchanged, if it does not fit.
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
                 "data %s: saved state is for %lld shard%s / %lld tokens, found %lld shard%s / %lld tokens",
                 dl->pattern, (long long)s->num_shards, s->num_shards == 1 ? "" : "s",
                 (long long)s->total_tokens, (long long)dl->num_shards, dl->num_shards == 1 ? "" : "s",
                 (long long)dl->total_tokens);
        return 0;
    }
    if (s->epoch < 0 || s->shard_index < 0 || s->shard_index >= dl->num_shards ||
        (s->shuffle != 0 && s->shuffle != 1)) {
        snprintf(err, errlen, "data %s: saved state is corrupt (epoch %lld, shard %lld, shuffle %lld)",
                 dl->pattern, (long long)s->epoch, (long long)s->shard_index, (long long)s->shuffle);
        return 0;
    }
    // shuffled, shard_index's shard depends on (seed, epoch): check all
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

// A chat run's sample prompt: the first row's first conversation with a target, up to that target (where
// the assistant's turn starts), into prompt. Its length, or 0 (not chat data, or longer than max_len).
// Resets dl (an unshuffled val loader).
static inline int dataloader_chat_prompt(DataLoader* dl, int* prompt, int max_len) {
    if (dl->kind != DL_CHAT) return 0;
    dataloader_reset(dl);
    int start = 0, n = 0;
    if (dataloader_next_batch(dl))
        for (int j = 0; j < dl->T && n == 0; j++) {
            if (dl->pos[j] == 0) start = j;              // a conversation starts
            if (dl->targets[j] >= 0) n = j + 1 - start;  // inputs[j] is the last token before the answer
        }
    if (n > max_len) n = 0;
    if (n > 0) memcpy(prompt, dl->inputs + start, (size_t)n * sizeof(int));
    dataloader_reset(dl);
    return n;
}

// Chat: the rows past each shard's last full batch of B, which no step or validation reads (as llm.c leaves
// a token shard's tail); 0 for token shards.
static inline int64_t dataloader_rows_left_out(const DataLoader* dl) {
    int64_t n = 0;
    for (int64_t i = 0; dl->kind == DL_CHAT && i < dl->num_shards; i++)
        n += dl->shard_rows[i] - dl->shard_batches[i] * dl->B;
    return n;
}

// Batches per validation pass (unshuffled loader, reset first): all, or at most max_batches > 0.
static inline int64_t dataloader_eval_batches(const DataLoader* dl, int64_t max_batches) {
    return max_batches > 0 && max_batches < dl->num_batches ? max_batches : dl->num_batches;
}
