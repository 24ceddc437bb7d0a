// ragged.h — a chat micro-batch's conversations as ragged sequences (cuDNN's THD layout), from the positions
// the step uploads: a sequence starts at every position 0 and runs while positions count up by one.
// Host code, no CUDA. Not here: running attention (attention_path.cuh, cudnn_att.cpp).
#pragma once
#include <stdint.h>
#include <stdio.h>

// Positions of rows of T tokens: each in [0, its index in the row]. false + the first bad one in why.
static bool positions_valid(const int* pos, int64_t rows, int T, char* why, size_t n) {
    for (int64_t r = 0; r < rows; r++)
        for (int t = 0; t < T; t++) {
            const int p = pos[r * T + t];
            if (p < 0 || p > t) {
                snprintf(why, n,
                         "row %lld, token %d has position %d: a position must be 0 .. its index in the row",
                         (long long)r, t, p);
                return false;
            }
        }
    return true;
}

// The graph bucket for `count` sequences: the next power of two, at most N (the tokens). Few buckets: few
// graphs, and a count that varies by micro-batch does not rebuild them.
static int ragged_bucket(int count, int64_t N) {
    int64_t b = 1;
    while (b < count) b *= 2;
    return (int)(b < N ? b : N);
}

// A micro-batch's metadata (on the host or the GPU): the sequences' lengths, then each tensor's element
// offsets (bucket + 1 entries each), 32-bit. One block of ragged_meta_ints(N) ints holds the four arrays,
// each on 16 bytes: cuDNN declares its tensors 16-byte aligned.
typedef struct {
    int *seq_len, *off_qkv, *off_out, *off_stats;
} RaggedMeta;
static inline int64_t ragged_meta_stride(int64_t N) { return (N + 1 + 3) / 4 * 4; }  // N + 1 ints, rounded
static inline int64_t ragged_meta_ints(int64_t N) { return 4 * ragged_meta_stride(N); }
static inline RaggedMeta ragged_meta_at(int* block, int64_t N) {
    const int64_t s = ragged_meta_stride(N);
    return {block, block + s, block + 2 * s, block + 3 * s};
}

// B rows of T tokens with positions pos: the sequences (count returned) and their bucket's padding (length 0,
// offsets at the end). -1: not runs of 0, 1, 2, ... (our kernel's "keys t - pos[t] .. t" serves those), or
// more than cap sequences. ld, od, NH: qkv's row, the output's row, the statistics' row (elements).
static int ragged_sequences(const int* pos, int B, int T, int64_t ld, int64_t od, int NH, RaggedMeta h,
                            int cap, int* bucket) {
    const int64_t N = (int64_t)B * T;
    if (N * ld >= ((int64_t)1 << 31)) return -1;  // cuDNN's offsets here are 32-bit
    int count = 0;
    for (int64_t i = 0; i < N; i++) {
        const int p = pos[i];
        if (p == 0) {
            if (count == cap) return -1;
            h.seq_len[count] = 0;
            h.off_qkv[count] = (int)(i * ld);
            h.off_out[count] = (int)(i * od);
            h.off_stats[count] = (int)(i * NH);
            count++;
        } else if (i % T == 0 || p != pos[i - 1] + 1) return -1;
        h.seq_len[count - 1]++;
    }
    const int b = ragged_bucket(count, N);
    if (b > cap) return -1;
    for (int k = count; k <= b; k++) {
        if (k < b) h.seq_len[k] = 0;
        h.off_qkv[k] = (int)(N * ld);
        h.off_out[k] = (int)(N * od);
        h.off_stats[k] = (int)(N * NH);
    }
    *bucket = b;
    return count;
}
