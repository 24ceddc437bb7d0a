// attention_path.cuh — which causal attention runs, and running it: cuDNN's SDPA (cudnn_att.cpp), our fused
// kernels (flash_attention.cuh) or cuBLAS + softmax (attention.cuh). At start: cuDNN's version, a support
// check of the run's graphs and a numerical self-check against our kernel; any failure is one line and the
// next path. Not here: the kernels themselves, the memory plan (llmc/memory_plan.cuh counts the workspace).
#pragma once
#include <math.h>
#include <string.h>
#include <algorithm>
#include <vector>
#include "attention.cuh"        // defines: attention_forward, attention_backward
#include "cudnn_att.h"          // defines: cudnn_att_open, cudnn_att_prepare, cudnn_att_forward
#include "flash_attention.cuh"  // defines: flash_attention_forward, _backward, _usable, _load
#include "ragged.h"             // defines: ragged_sequences, positions_valid, RaggedMeta, ragged_meta_at

enum { ATTN_CUBLAS = 0, ATTN_FUSED = 1, ATTN_CUDNN = 2 };
static const char* attention_path_name(int path) {
    return path == ATTN_CUDNN ? "cuDNN SDPA" : path == ATTN_FUSED ? "fused kernels" : "cuBLAS + softmax";
}

// Set by attention_path_select for this run's shape; read by the plan and gpt_build.
static bool cudnn_attention_ready = false;
static bool cudnn_attention_packed = false;    // chat rows: a micro-batch cuDNN cannot run takes another path
static int64_t cudnn_attention_workspace = 0;  // bytes: the largest of the run's graphs
static char cudnn_attention_note[512] = "";    // why cuDNN does not run, or what it is
static bool cudnn_attention_works = false;     // loaded, built this shape's graphs, passed the self-check
static float attention_ms[2] = {0, 0};    // -F -1: cuDNN's and our fused kernels' time at the run's shape
static bool attention_timed = false;      // attention_ms holds a measurement
static char attention_untimed[512] = "";  // why not, where cuDNN works and -F -1 would time it

// One micro-batch's ragged sequences: seqs -1 when dense rows or not expressible (then our kernel).
typedef struct AttnMicro {
    int seqs;        // the graph's bucket
    RaggedMeta dev;  // on the GPU
} AttnMicro;

// Launch one path. lse: the path's own row statistics (fused: base-2, cuDNN: natural), never mixed: a
// micro-batch takes the same path forward and backward (its AttnMicro decides).
static void attention_forward_path(int path, bf16* out, float* lse, bf16* att, bf16* qkv, int B, int T,
                                   int NH, int NKV, int hs, const int* pos, const AttnMicro* m,
                                   cudaStream_t s) {
    const int QD = NH * hs;
    if (path == ATTN_CUDNN && (!pos || (m && m->seqs > 0))) {
        const CudnnAttShape sh = {B, T, NH, NKV, hs, pos ? m->seqs : 0};
        char why[512];
        if (!cudnn_att_forward(out, lse, qkv, &sh, pos ? &m->dev : NULL, s, why, sizeof why))
            die("attention: %s", why);
    } else if (path == ATTN_FUSED || (path == ATTN_CUDNN && flash_attention_usable(hs)))
        flash_attention_forward(out, lse, qkv, B, T, QD, NH, s, NKV, pos);
    else
        attention_forward(out, att, qkv, B, T, QD, NH, s, NKV, pos);  // cuBLAS; cuDNN's packed runs whose
                                                                      // head size our kernel does not take
                                                                      // plan its scores (use_flash_attention)
}
static void attention_backward_path(int path, bf16* dqkv, float* dsum, bf16* datt, bf16* dout, bf16* out,
                                    bf16* att, bf16* qkv, const float* lse, int B, int T, int NH, int NKV,
                                    int hs, const int* pos, const AttnMicro* m, cudaStream_t s) {
    const int QD = NH * hs;
    if (path == ATTN_CUDNN && (!pos || (m && m->seqs > 0))) {
        const CudnnAttShape sh = {B, T, NH, NKV, hs, pos ? m->seqs : 0};
        char why[512];
        if (!cudnn_att_backward(dqkv, dout, qkv, out, lse, &sh, pos ? &m->dev : NULL, s, why, sizeof why))
            die("attention: %s", why);
    } else if (path == ATTN_FUSED || (path == ATTN_CUDNN && flash_attention_usable(hs)))
        flash_attention_backward(dqkv, dsum, dout, out, qkv, lse, B, T, QD, NH, s, NKV, pos);
    else attention_backward(dqkv, datt, dout, att, qkv, B, T, QD, NH, s, NKV, pos);
}

// ----------------------------------------------------------------------------
// The self-check: cuDNN against our kernel (fused where the head size allows, else cuBLAS) on B = 2 rows of
// 128 tokens with the run's heads, dense and packed (three conversations, a bucket of four: one empty slot).
// Bounds: both paths round P and the outputs to bf16 (2^-8 relative) and sum in other orders; the output
// (|y| <= max |v| = 1) within 2e-2, each gradient tensor within 5e-2 of its largest element. A wrong stride,
// head mapping or offset is off by O(1).

static float bf16_bits_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static float max_abs_diff(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, int64_t rows,
                          int64_t ld, int64_t from, int64_t count, float* ref_max) {
    float d = 0, m = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = from; j < from + count; j++) {
            const float x = bf16_bits_to_float(a[r * ld + j]), y = bf16_bits_to_float(b[r * ld + j]);
            if (!(fabsf(x - y) <= d)) d = isnan(x - y) ? INFINITY : fabsf(x - y);
            m = fmaxf(m, fabsf(y));
        }
    *ref_max = m;
    return d;
}

static bool attention_self_check(int NH, int NKV, int hs, bool packed, char* why, size_t n) {
    const int B = 2, T = 128;
    const int64_t N = (int64_t)B * T, ld = (int64_t)(NH + 2 * NKV) * hs, od = (int64_t)NH * hs;
    const bool fused = flash_attention_usable(hs);
    if (fused) flash_attention_load(hs);
    std::vector<uint16_t> qkv(N * ld), dout(N * od);
    uint64_t state = 0x9E3779B97F4A7C15ull;
    auto uniform = [&]() {  // xorshift: [-1, 1)
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        return (float)((state >> 40) * (1.0 / (1 << 23))) - 1.0f;
    };
    auto to_bf16 = [](float f) {
        uint32_t u;
        memcpy(&u, &f, 4);
        return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
    };
    for (auto& x : qkv) x = to_bf16(uniform());
    for (auto& x : dout) x = to_bf16(uniform());
    // packed: row 0 holds conversations of 50 and 78 tokens, row 1 one of 128
    std::vector<int> pos(N);
    for (int64_t i = 0; i < N; i++) pos[i] = i < 50 ? (int)i : i < T ? (int)(i - 50) : (int)(i - T);
    std::vector<int> meta(ragged_meta_ints(N));
    const RaggedMeta h = ragged_meta_at(meta.data(), N);
    int bucket = 0;
    if (packed && ragged_sequences(pos.data(), B, T, ld, od, NH, h, (int)N, &bucket) != 3)
        return snprintf(why, n, "internal: the self-check's ragged sequences"), false;

    bf16 *d_qkv, *d_dout, *d_out[2], *d_dqkv[2], *d_att = NULL, *d_datt = NULL;
    float *d_lse[2], *d_dsum;
    int *d_pos, *d_meta;
    cudaCheck(cudaMalloc(&d_qkv, N * ld * 2));
    cudaCheck(cudaMalloc(&d_dout, N * od * 2));
    for (int k = 0; k < 2; k++) {
        cudaCheck(cudaMalloc(&d_out[k], N * od * 2));
        cudaCheck(cudaMalloc(&d_dqkv[k], N * ld * 2));
        cudaCheck(cudaMalloc(&d_lse[k], N * NH * 4));
    }
    cudaCheck(cudaMalloc(&d_dsum, N * NH * 4));
    if (!fused) {
        cudaCheck(cudaMalloc(&d_att, (int64_t)B * NH * T * T * 2));
        cudaCheck(cudaMalloc(&d_datt, (int64_t)B * NH * T * T * 2));
    }
    cudaCheck(cudaMalloc(&d_pos, N * 4));
    cudaCheck(cudaMalloc(&d_meta, meta.size() * 4));
    cudaCheck(cudaMemcpy(d_qkv, qkv.data(), qkv.size() * 2, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_dout, dout.data(), dout.size() * 2, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_pos, pos.data(), N * 4, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_meta, meta.data(), meta.size() * 4, cudaMemcpyHostToDevice));
    AttnMicro m = {bucket, ragged_meta_at(d_meta, N)};

    bool ok = true;
    for (int pass = 0; pass < (packed ? 2 : 1) && ok; pass++) {
        const int* p = pass ? d_pos : NULL;
        const int ref = fused ? ATTN_FUSED : ATTN_CUBLAS;
        const int paths[2] = {ref, ATTN_CUDNN};
        for (int k = 0; k < 2; k++) {
            cudaCheck(cudaMemset(d_dqkv[k], 0xFF, N * ld * 2));  // NaN: a gradient left unwritten fails
            const CudnnAttShape sh = {B, T, NH, NKV, hs, pass ? bucket : 0};
            if (paths[k] == ATTN_CUDNN && !cudnn_att_prepare(&sh, why, n)) {
                ok = false;
                break;
            }
            char err[512];
            if (paths[k] == ATTN_CUDNN) {  // not attention_forward_path: a failure falls back, not dies
                ok = cudnn_att_forward(d_out[k], d_lse[k], d_qkv, &sh, p ? &m.dev : NULL, 0, err,
                                       sizeof err) &&
                     cudnn_att_backward(d_dqkv[k], d_dout, d_qkv, d_out[k], d_lse[k], &sh, p ? &m.dev : NULL,
                                        0, err, sizeof err);
                if (!ok) snprintf(why, n, "%s", err);
            } else {
                attention_forward_path(paths[k], d_out[k], d_lse[k], d_att, d_qkv, B, T, NH, NKV, hs, p, &m,
                                       0);
                attention_backward_path(paths[k], d_dqkv[k], d_dsum, d_datt, d_dout, d_out[k], d_att, d_qkv,
                                        d_lse[k], B, T, NH, NKV, hs, p, &m, 0);
            }
            if (!ok) break;
        }
        if (!ok) break;
        const cudaError_t err = cudaDeviceSynchronize();
        if (err != cudaSuccess) {
            snprintf(why, n, "the self-check's run failed: %s", cudaGetErrorString(err));
            ok = false;
            break;
        }
        std::vector<uint16_t> out[2], dqkv[2];
        for (int k = 0; k < 2; k++) {
            out[k].resize(N * od);
            dqkv[k].resize(N * ld);
            cudaCheck(cudaMemcpy(out[k].data(), d_out[k], N * od * 2, cudaMemcpyDeviceToHost));
            cudaCheck(cudaMemcpy(dqkv[k].data(), d_dqkv[k], N * ld * 2, cudaMemcpyDeviceToHost));
        }
        float ref_max;
        const float dy = max_abs_diff(out[1], out[0], N, od, 0, od, &ref_max);
        const char* name[3] = {"dq", "dk", "dv"};
        const int64_t from[3] = {0, od, od + (int64_t)NKV * hs},
                      count[3] = {od, (int64_t)NKV * hs, (int64_t)NKV * hs};
        float dg[3], gmax[3];
        for (int j = 0; j < 3; j++)
            dg[j] = max_abs_diff(dqkv[1], dqkv[0], N, ld, from[j], count[j], &gmax[j]);
        const char* layout = pass ? "packed" : "dense";
        if (!(dy <= 2e-2f)) {
            snprintf(why, n, "self-check (%s): cuDNN's output is %.3g from %s's", layout, dy,
                     attention_path_name(paths[0]));
            ok = false;
        }
        for (int j = 0; j < 3 && ok; j++)
            if (!(dg[j] <= 5e-2f * gmax[j])) {
                snprintf(why, n, "self-check (%s): cuDNN's %s is %.3g from %s's (largest %.3g)", layout,
                         name[j], dg[j], attention_path_name(paths[0]), gmax[j]);
                ok = false;
            }
    }
    cudaCheck(cudaFree(d_qkv));
    cudaCheck(cudaFree(d_dout));
    for (int k = 0; k < 2; k++) {
        cudaCheck(cudaFree(d_out[k]));
        cudaCheck(cudaFree(d_dqkv[k]));
        cudaCheck(cudaFree(d_lse[k]));
    }
    cudaCheck(cudaFree(d_dsum));
    if (d_att) cudaCheck(cudaFree(d_att));
    if (d_datt) cudaCheck(cudaFree(d_datt));
    cudaCheck(cudaFree(d_pos));
    cudaCheck(cudaFree(d_meta));
    return ok;
}

// -F -1: cuDNN and our fused kernels timed at the run's shape (B rows of T; chat rows: 4 conversations a
// row, the plan's bucket): what a recomputed layer runs, the forward twice and the backward once. The two
// paths take turns (after a warm-up each) until each has run 20 ms, 2 to 10 times; each keeps its fastest
// forward and backward. Before the plan: the GPU holds the handles and cuDNN's workspace for the prepared
// graphs (taken first). false with why: "untimed: ..." where the run's tensors are not free or the layout
// cannot be timed, else cuDNN failed at the run's shape. ms: cuDNN's, then ours. Tests: LLMC_TEST_ATTN_MS=c,f
// replaces the two figures (the emulation times nothing: 0 ms each).
static bool attention_time_paths(int B, int T, int NH, int NKV, int hs, bool packed, float ms[2], char* why,
                                 size_t n) {
    const int64_t N = (int64_t)B * T, ld = (int64_t)(NH + 2 * NKV) * hs, od = (int64_t)NH * hs;
    std::vector<int> pos, meta;
    int bucket = 0;
    if (packed) {  // 4 conversations a row (the last takes T % 4)
        pos.resize(N);
        const int len = std::max(T / 4, 1);
        for (int64_t i = 0; i < N; i++) {
            const int t = (int)(i % T);
            pos[i] = t < 4 * len ? t % len : t - 3 * len;
        }
        meta.resize(ragged_meta_ints(N));
        if (ragged_sequences(pos.data(), B, T, ld, od, NH, ragged_meta_at(meta.data(), N), (int)N, &bucket) <=
            0)
            return snprintf(why, n, "untimed: this chat shape's offsets pass 32 bits"), false;
    }
    char err[512];
    if (!cudnn_att_reserve_workspace(err, sizeof err)) return snprintf(why, n, "untimed: %.400s", err), false;
    void* p[8] = {};
    const int64_t bytes[8] = {N * ld * 2, N * od * 2, N * od * 2,         N * ld * 2,
                              N * NH * 4, N * NH * 4, packed ? N * 4 : 0, (int64_t)meta.size() * 4};
    bool ok = true;
    for (int k = 0; k < 8 && ok; k++)
        if (bytes[k] && cudaMalloc(&p[k], (size_t)bytes[k]) != cudaSuccess) {
            (void)cudaGetLastError();  // not sticky: the run goes on
            snprintf(why, n,
                     "untimed: the run's attention tensors (%.0f MiB) are not free on the GPU to time it",
                     (double)(bytes[0] + bytes[1] + bytes[2] + bytes[3] + bytes[4] + bytes[5]) / 1048576.0);
            ok = false;
        }
    bf16 *qkv = (bf16*)p[0], *dout = (bf16*)p[1], *out = (bf16*)p[2], *dqkv = (bf16*)p[3];
    float *lse = (float*)p[4], *dsum = (float*)p[5];
    int* d_pos = (int*)p[6];
    if (ok) {
        cudaCheck(cudaMemset(qkv, 0x3C, bytes[0]));  // bf16 0x3C3C: 0.0115, finite everywhere
        cudaCheck(cudaMemset(dout, 0x3C, bytes[1]));
        if (packed) {
            cudaCheck(cudaMemcpy(d_pos, pos.data(), bytes[6], cudaMemcpyHostToDevice));
            cudaCheck(cudaMemcpy(p[7], meta.data(), bytes[7], cudaMemcpyHostToDevice));
        }
    }
    const AttnMicro m = {bucket, ragged_meta_at((int*)p[7], N)};
    const CudnnAttShape sh = {B, T, NH, NKV, hs, bucket};
    cudaEvent_t ev[3];
    for (int k = 0; k < 3; k++) cudaCheck(cudaEventCreate(&ev[k]));
    float fwd[2] = {INFINITY, INFINITY}, bwd[2] = {INFINITY, INFINITY}, spent[2] = {0, 0};
    for (int rep = 0; rep < 11 && ok; rep++) {  // rep 0 warms up
        for (int path = 0; path < 2 && ok; path++) {
            cudaCheck(cudaEventRecord(ev[0], 0));
            if (path == 0) {  // cuDNN; a failure at the run's shape is the self-check's kind: cuDNN not used
                ok = cudnn_att_forward(out, lse, qkv, &sh, packed ? &m.dev : NULL, 0, err, sizeof err);
                cudaCheck(cudaEventRecord(ev[1], 0));
                ok = ok && cudnn_att_backward(dqkv, dout, qkv, out, lse, &sh, packed ? &m.dev : NULL, 0, err,
                                              sizeof err);
                if (!ok) snprintf(why, n, "at the run's shape: %.480s", err);
            } else {
                flash_attention_forward(out, lse, qkv, B, T, (int)od, NH, 0, NKV, packed ? d_pos : NULL);
                cudaCheck(cudaEventRecord(ev[1], 0));
                flash_attention_backward(dqkv, dsum, dout, out, qkv, lse, B, T, (int)od, NH, 0, NKV,
                                         packed ? d_pos : NULL);
            }
            cudaCheck(cudaEventRecord(ev[2], 0));
            const cudaError_t e = cudaEventSynchronize(ev[2]);
            if (e != cudaSuccess)
                die("attention: timing %s at the run's shape failed: %s",
                    attention_path_name(path ? ATTN_FUSED : ATTN_CUDNN), cudaGetErrorString(e));
            float f = 0, b = 0;
            cudaCheck(cudaEventElapsedTime(&f, ev[0], ev[1]));
            cudaCheck(cudaEventElapsedTime(&b, ev[1], ev[2]));
            if (rep == 0) continue;
            fwd[path] = std::min(fwd[path], f), bwd[path] = std::min(bwd[path], b), spent[path] += f + b;
        }
        if (rep >= 2 && ((spent[0] >= 20 && spent[1] >= 20) || spent[0] + spent[1] == 0))
            break;  // 0: emulated
    }
    for (int k = 0; k < 3; k++) cudaCheck(cudaEventDestroy(ev[k]));
    for (int k = 0; k < 8; k++)
        if (p[k]) cudaCheck(cudaFree(p[k]));
    for (int path = 0; path < 2; path++) ms[path] = 2 * fwd[path] + bwd[path];
    const char* e = getenv("LLMC_TEST_ATTN_MS");
    if (ok && e && sscanf(e, "%f,%f", &ms[0], &ms[1]) != 2)
        die("LLMC_TEST_ATTN_MS=%s: want two figures, c,f", e);
    return ok;
}

// Which path runs, once cuDNN's checks and times are in (on several ranks: every rank's, summed in
// run_fit.cuh). cuDNN runs where it works (everywhere) and, under -F -1, unless our fused kernels
// took less than 97% of its time at the run's shape (a tie is cuDNN's). Sets cudnn_attention_ready and the
// config table's note.
static void attention_path_settle(int flag, bool works, bool timed, const float ms[2], int hs) {
    cudnn_attention_ready = works;
    if (!works) return;
    const long v = cudnn_att_version();
    char what[256];
    snprintf(what, sizeof what, "cuDNN %ld.%ld.%ld SDPA (%s)", v / 10000, v / 100 % 100, v % 100,
             cudnn_att_library());
    if (!timed) {
        snprintf(cudnn_attention_note, sizeof cudnn_attention_note, "%s", what);
        if (attention_untimed[0]) printf("attention: cuDNN (%s)\n", attention_untimed);
        return;
    }
    char times[200];
    snprintf(times, sizeof times,
             "a micro-batch's attention (forward twice, as recomputed, and backward) at this shape: cuDNN "
             "%.3g ms, ours %.3g ms",
             ms[0], ms[1]);
    if (flag == -1 && flash_attention_usable(hs) && ms[1] < 0.97f * ms[0]) {
        cudnn_attention_ready = false;
        snprintf(cudnn_attention_note, sizeof cudnn_attention_note, "%s; %s (-F 2 runs cuDNN)", what, times);
        printf("attention: our fused kernels, faster than cuDNN here (%s; -F 2 runs cuDNN)\n", times);
        return;
    }
    snprintf(cudnn_attention_note, sizeof cudnn_attention_note, "%s; %s", what, times);
}

// -F: -1 the fastest that works (cuDNN or our fused kernels, timed; else cuBLAS), 0 cuBLAS, 1 fused, 2 cuDNN
// first.
// Tries cuDNN for the run's shape (B rows of T, heads NH / NKV of hs) unless -F 0 / 1; packed: the chat
// shape's graphs too (a bucket of 4 B sequences; other buckets build when first met). Sets the globals above.
// The eval micro-batch is the same shape. Prints one line when cuDNN could have run and does not. -F -1 with
// our fused kernels usable: both timed (attention_time_paths). settle false: the ranks agree first.
static void attention_path_select(int flag, int B, int T, int NH, int NKV, int hs, bool packed,
                                  bool settle = true) {
    cudnn_attention_ready = cudnn_attention_works = attention_timed = false;
    attention_ms[0] = attention_ms[1] = 0;
    attention_untimed[0] = 0;
    cudnn_attention_packed = packed;
    cudnn_attention_workspace = 0;
    cudnn_attention_note[0] = 0;
    if (flag == ATTN_CUBLAS || flag == ATTN_FUSED) return;
    const char* skip = getenv("LLMC_NO_CUDNN");  // 1: as if cuDNN were absent
    if (skip && *skip && strcmp(skip, "0") && strcmp(skip, "1"))
        die("LLMC_NO_CUDNN=%.40s: 1 (no cuDNN) or 0", skip);
    char why[512] = "";
    bool ok = !(skip && atoi(skip) == 1);
    if (!ok) snprintf(why, sizeof why, "LLMC_NO_CUDNN=1");
    ok = ok && cudnn_att_open(why, sizeof why);
    if (ok) {
        const CudnnAttShape dense = {B, T, NH, NKV, hs, 0};
        ok = cudnn_att_prepare(&dense, why, sizeof why);
        if (ok && packed) {  // up to 4 conversations a row on average; more: a bucket built when first met,
                             // run by cuDNN where the plan's workspace holds it, else by our kernel
            const CudnnAttShape ragged = {B, T, NH, NKV, hs, ragged_bucket(4 * B, (int64_t)B * T)};
            ok = cudnn_att_prepare(&ragged, why, sizeof why);
        }
    }
    ok = ok && attention_self_check(NH, NKV, hs, packed, why, sizeof why);
    if (ok && flag == -1 && flash_attention_usable(hs)) {
        char untimed[512] = "";
        attention_timed =
            attention_time_paths(B, T, NH, NKV, hs, packed, attention_ms, untimed, sizeof untimed);
        if (!attention_timed && strncmp(untimed, "untimed", 7)) {  // cuDNN failed at the run's shape
            snprintf(why, sizeof why, "%s", untimed);
            ok = false;
        } else if (!attention_timed)  // said once the path is settled (several ranks: agreed)
            snprintf(attention_untimed, sizeof attention_untimed, "%s", untimed);
    }
    if (ok) {
        cudnn_attention_works = true;
        cudnn_attention_workspace = cudnn_att_workspace_need();
        cudnn_att_free_own_workspace();  // the self-check's and the timing's; the plan allocates the run's
        if (settle) attention_path_settle(flag, true, attention_timed, attention_ms, hs);
        return;
    }
    cudnn_att_free_own_workspace();
    snprintf(cudnn_attention_note, sizeof cudnn_attention_note, "%s", why);
    if (flag == ATTN_CUDNN || cudnn_att_built())  // a build without the path says so in the config table only
        fprintf(stderr, "attention: cuDNN not used: %s; %s instead\n", why,
                flash_attention_usable(hs) ? "our fused kernels" : "cuBLAS + softmax");
}
