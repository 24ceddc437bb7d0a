// test/fake_cuda/fake_cudnn.h — llmc/cudnn_att.h's functions in the CUDA emulation (make test), so that the
// trainers' cuDNN path (the plan's workspace, the ragged metadata's upload, the per-micro-batch fallback, the
// statistics kept for -K) runs here as it would on a GPU. Off unless LLMC_FAKE_CUDNN=1: the emulated runs
// keep our fused kernel, the reference, and say nothing of cuDNN. On, cudnn_att_open answers as a cuDNN
// 9.19.0 would, and the SDPA graphs behave as cudnn_att.cpp declares them: causal, GQA, B dense rows or
// ragged (THD) sequences read from the metadata on the device; the statistics are the natural-log logsumexp
// per token and query head in the real graphs' layouts ((B, NH, T) dense, (token, head) ragged); dq, dk, dv
// are overwritten. A shape's workspace is B*T*NH floats (the backward keeps each row's rowsum(dO * O) there,
// so a workspace smaller than planned faults) and 64 KiB a sequence slot: a larger bucket needs more than
// the plan's, as a real one may. Numerics: fp32 scores and sums, P and dS rounded to bf16 before their
// products, as cuDNN and our kernel do; not cuDNN's tiling or order of sums. Not emulated: graph building's
// cost, cuDNN's own failures.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <set>
#include <string>
#include <tuple>
#include <vector>
#include "cuda_bf16.h"     // defines: __nv_bfloat16
#include "cuda_runtime.h"  // defines: cudaMalloc, cudaStream_t
#include "fake_device.h"   // defines: FAKE_LAUNCH, threadIdx, blockIdx

namespace fake_cudnn {
typedef __nv_bfloat16 bf16_t;
static inline float round_bf16(float x) { return (float)__float2bfloat16(x); }

// One launch's geometry: slots sequence slots (dense: the B rows), each of its tokens' rows at qkv, out and
// stats offsets (elements); ragged offsets come from the device metadata.
struct Dims {
    int T, NH, NKV, hs, slots;
    int64_t ld, od;
    bool ragged;
};
struct Seq {
    int64_t qkv, out, stats, stats_t, stats_h;  // stats index of (t, h): stats + t * stats_t + h * stats_h
    int len;
};
static inline Seq seq_at(const Dims& d, int b, const int* seq_len, const int* off_qkv, const int* off_out,
                         const int* off_stats) {
    if (d.ragged) return {off_qkv[b], off_out[b], off_stats[b], d.NH, 1, seq_len[b]};
    return {(int64_t)b * d.T * d.ld, (int64_t)b * d.T * d.od, (int64_t)b * d.NH * d.T, 1, d.T, d.T};
}
static inline float dot(const bf16_t* a, const bf16_t* b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += (float)a[i] * (float)b[i];
    return s;
}

// A block a (slot, query head), threads over its queries: O and the statistics.
static void sdpa_forward_kernel(bf16_t* out, float* stats, const bf16_t* qkv, const int* seq_len,
                                const int* off_qkv, const int* off_out, const int* off_stats, Dims d) {
    const int b = (int)blockIdx.x / d.NH, h = (int)blockIdx.x % d.NH, g = h / (d.NH / d.NKV);
    const Seq s = seq_at(d, b, seq_len, off_qkv, off_out, off_stats);
    const float scale = 1.0f / sqrtf((float)d.hs);
    std::vector<float> p((size_t)(s.len > 0 ? s.len : 1)), o((size_t)d.hs);
    for (int t = (int)threadIdx.x; t < s.len; t += (int)blockDim.x) {
        const bf16_t* q = qkv + s.qkv + t * d.ld + (int64_t)h * d.hs;
        float mx = -INFINITY, sum = 0.0f;
        for (int j = 0; j <= t; j++) {
            p[(size_t)j] = scale * dot(q, qkv + s.qkv + j * d.ld + (int64_t)(d.NH + g) * d.hs, d.hs);
            mx = fmaxf(mx, p[(size_t)j]);
        }
        for (int j = 0; j <= t; j++) sum += expf(p[(size_t)j] - mx);
        const float lse = mx + logf(sum);
        for (float& x : o) x = 0.0f;
        for (int j = 0; j <= t; j++) {
            const float pj = round_bf16(expf(p[(size_t)j] - lse));
            const bf16_t* v = qkv + s.qkv + j * d.ld + (int64_t)(d.NH + d.NKV + g) * d.hs;
            for (int i = 0; i < d.hs; i++) o[(size_t)i] += pj * (float)v[i];
        }
        for (int i = 0; i < d.hs; i++)
            out[s.out + t * d.od + (int64_t)h * d.hs + i] = __float2bfloat16(o[(size_t)i]);
        stats[s.stats + t * s.stats_t + h * s.stats_h] = lse;
    }
}

// The backward's row sums D = rowsum(dO * O), in the workspace at the statistics' index.
static void sdpa_rowsum_kernel(float* D, const bf16_t* dout, const bf16_t* out, const int* seq_len,
                               const int* off_qkv, const int* off_out, const int* off_stats, Dims d) {
    const int b = (int)blockIdx.x / d.NH, h = (int)blockIdx.x % d.NH;
    const Seq s = seq_at(d, b, seq_len, off_qkv, off_out, off_stats);
    for (int t = (int)threadIdx.x; t < s.len; t += (int)blockDim.x) {
        const int64_t o = s.out + t * d.od + (int64_t)h * d.hs;
        D[s.stats + t * s.stats_t + h * s.stats_h] = dot(dout + o, out + o, d.hs);
    }
}

// dS of query t and key j of head h: P (from the statistics) times (dO . v - D), rounded to bf16; *p: P.
static inline float dscore(const Dims& d, const Seq& s, const bf16_t* qkv, const bf16_t* dout,
                           const float* stats, const float* D, int h, int t, int j, float* p) {
    const int g = h / (d.NH / d.NKV);
    const int64_t i = s.stats + t * s.stats_t + h * s.stats_h;
    const bf16_t* q = qkv + s.qkv + t * d.ld + (int64_t)h * d.hs;
    const float score =
        dot(q, qkv + s.qkv + j * d.ld + (int64_t)(d.NH + g) * d.hs, d.hs) / sqrtf((float)d.hs);
    *p = round_bf16(expf(score - stats[i]));
    const float dp = dot(dout + s.out + t * d.od + (int64_t)h * d.hs,
                         qkv + s.qkv + j * d.ld + (int64_t)(d.NH + d.NKV + g) * d.hs, d.hs);
    return round_bf16(*p * (dp - D[i]));
}

// dq: a block a (slot, query head), threads over its queries.
static void sdpa_dq_kernel(bf16_t* dqkv, const bf16_t* dout, const bf16_t* qkv, const float* stats,
                           const float* D, const int* seq_len, const int* off_qkv, const int* off_out,
                           const int* off_stats, Dims d) {
    const int b = (int)blockIdx.x / d.NH, h = (int)blockIdx.x % d.NH, g = h / (d.NH / d.NKV);
    const Seq s = seq_at(d, b, seq_len, off_qkv, off_out, off_stats);
    const float scale = 1.0f / sqrtf((float)d.hs);
    std::vector<float> dq((size_t)d.hs);
    for (int t = (int)threadIdx.x; t < s.len; t += (int)blockDim.x) {
        for (float& x : dq) x = 0.0f;
        for (int j = 0; j <= t; j++) {
            float p;
            const float ds = dscore(d, s, qkv, dout, stats, D, h, t, j, &p);
            const bf16_t* k = qkv + s.qkv + j * d.ld + (int64_t)(d.NH + g) * d.hs;
            for (int i = 0; i < d.hs; i++) dq[(size_t)i] += ds * (float)k[i];
        }
        for (int i = 0; i < d.hs; i++)
            dqkv[s.qkv + t * d.ld + (int64_t)h * d.hs + i] = __float2bfloat16(scale * dq[(size_t)i]);
    }
}

// dk, dv: a block a (slot, kv head), threads over its keys, the group's query heads summed.
static void sdpa_dkdv_kernel(bf16_t* dqkv, const bf16_t* dout, const bf16_t* qkv, const float* stats,
                             const float* D, const int* seq_len, const int* off_qkv, const int* off_out,
                             const int* off_stats, Dims d) {
    const int b = (int)blockIdx.x / d.NKV, g = (int)blockIdx.x % d.NKV, group = d.NH / d.NKV;
    const Seq s = seq_at(d, b, seq_len, off_qkv, off_out, off_stats);
    const float scale = 1.0f / sqrtf((float)d.hs);
    std::vector<float> dk((size_t)d.hs), dv((size_t)d.hs);
    for (int j = (int)threadIdx.x; j < s.len; j += (int)blockDim.x) {
        for (int i = 0; i < d.hs; i++) dk[(size_t)i] = dv[(size_t)i] = 0.0f;
        for (int h = g * group; h < (g + 1) * group; h++)
            for (int t = j; t < s.len; t++) {
                float p;
                const float ds = dscore(d, s, qkv, dout, stats, D, h, t, j, &p);
                const bf16_t* q = qkv + s.qkv + t * d.ld + (int64_t)h * d.hs;
                const bf16_t* dy = dout + s.out + t * d.od + (int64_t)h * d.hs;
                for (int i = 0; i < d.hs; i++) {
                    dk[(size_t)i] += ds * (float)q[i];
                    dv[(size_t)i] += p * (float)dy[i];
                }
            }
        bf16_t* row = dqkv + s.qkv + j * d.ld;
        for (int i = 0; i < d.hs; i++) {
            row[(int64_t)(d.NH + g) * d.hs + i] = __float2bfloat16(scale * dk[(size_t)i]);
            row[(int64_t)(d.NH + d.NKV + g) * d.hs + i] = __float2bfloat16(dv[(size_t)i]);
        }
    }
}

struct State {
    bool open = false, planned = false, own = false;
    std::set<std::tuple<int, int, int, int, int, int>> graphs;
    void* workspace = nullptr;
    int64_t bytes = 0, need = 0;
};
static inline State& state() {
    static State s;
    return s;
}
static inline bool fail(char* why, size_t n, const std::string& what) {
    snprintf(why, n, "%s", what.c_str());
    return false;
}
static inline Dims dims_of(const CudnnAttShape* s) {
    return {s->T,
            s->NH,
            s->NKV,
            s->hs,
            s->seqs > 0 ? s->seqs : s->B,
            (int64_t)(s->NH + 2 * s->NKV) * s->hs,
            (int64_t)s->NH * s->hs,
            s->seqs > 0};
}
// Our own workspace before the plan, the plan's only after it (cudnn_att.cpp's workspace_for).
static inline bool workspace_for(int64_t need, char* why, size_t n) {
    State& st = state();
    if (need <= st.bytes) return true;
    if (st.planned) {
        char msg[160];
        snprintf(msg, sizeof msg, "cuDNN's graphs for it need %.1f MiB of workspace, the plan holds %.1f MiB",
                 need / 1048576.0, st.bytes / 1048576.0);
        return fail(why, n, msg);
    }
    if (st.own && st.workspace) cudaFree(st.workspace);
    st.workspace = nullptr, st.bytes = 0, st.own = false;
    if (cudaMalloc(&st.workspace, (size_t)need) != cudaSuccess) {
        (void)cudaGetLastError();
        st.workspace = nullptr;
        return fail(why, n, "cuDNN workspace: out of memory");
    }
    st.bytes = need, st.own = true;
    return true;
}
static inline int64_t workspace_size(const CudnnAttShape* s) {
    return (int64_t)s->B * s->T * s->NH * 4 + 65536 * (int64_t)(s->seqs > 0 ? s->seqs : 1);
}
static inline bool graphs_for(const CudnnAttShape* s, char* why, size_t n) {
    State& st = state();
    if (!st.open) return fail(why, n, "cuDNN is not loaded");
    const int64_t group = s->NKV > 0 ? (s->NH + s->NKV - 1) / s->NKV : 1;
    if (s->seqs > 0 && (int64_t)s->B * s->T * (s->NH + 2 * s->NKV) * s->hs * group >= ((int64_t)1 << 31))
        return fail(why, n,
                    "a micro-batch's qkv, times the heads' group, has 2^31 elements or more: the 32-bit "
                    "ragged offsets cannot address it");
    if (st.graphs.insert({s->B, s->T, s->NH, s->NKV, s->hs, s->seqs}).second && workspace_size(s) > st.need)
        st.need = workspace_size(s);
    return true;
}
}  // namespace fake_cudnn

static inline bool fake_cudnn_on() {
    const char* e = getenv("LLMC_FAKE_CUDNN");
    return e && atoi(e) == 1;
}
static inline bool cudnn_att_built() { return fake_cudnn_on(); }
static inline bool cudnn_att_open(char* why, size_t n) {
    if (!fake_cudnn_on())
        return fake_cudnn::fail(why, n,
                                "no libcudnn.so.9 in the emulation (LLMC_FAKE_CUDNN=1: its stand-in)");
    fake_cudnn::state().open = true;
    return true;
}
static inline const char* cudnn_att_library() {
    return fake_cudnn::state().open ? "test/fake_cuda/fake_cudnn.h" : "";
}
static inline long cudnn_att_version() { return fake_cudnn::state().open ? 91900 : 0; }
static inline bool cudnn_att_prepare(const CudnnAttShape* s, char* why, size_t n) {
    if (!fake_cudnn::graphs_for(s, why, n)) return false;
    return !fake_cudnn::state().planned || fake_cudnn::workspace_for(fake_cudnn::workspace_size(s), why, n);
}
static inline int64_t cudnn_att_workspace_need() { return fake_cudnn::state().need; }
static inline int64_t cudnn_att_workspace_of(const CudnnAttShape* s, char* why, size_t n) {
    return fake_cudnn::graphs_for(s, why, n) ? fake_cudnn::workspace_size(s) : -1;
}
static inline bool cudnn_att_reserve_workspace(char* why, size_t n) {
    return fake_cudnn::workspace_for(fake_cudnn::state().need, why, n);
}
static inline void cudnn_att_free_own_workspace() {
    fake_cudnn::State& st = fake_cudnn::state();
    if (st.own && st.workspace) cudaFree(st.workspace);
    st.workspace = nullptr, st.bytes = 0, st.own = false;
}
static inline void cudnn_att_use_workspace(void* p, int64_t bytes) {
    cudnn_att_free_own_workspace();
    fake_cudnn::State& st = fake_cudnn::state();
    st.workspace = p, st.bytes = bytes, st.planned = p != nullptr;
}
static inline bool cudnn_att_forward(void* out, float* stats, const void* qkv, const CudnnAttShape* s,
                                     const RaggedMeta* r, cudaStream_t stream, char* why, size_t n) {
    using namespace fake_cudnn;
    if (!graphs_for(s, why, n) || !workspace_for(workspace_size(s), why, n)) return false;
    const Dims d = dims_of(s);
    const RaggedMeta m = d.ragged ? *r : RaggedMeta{nullptr, nullptr, nullptr, nullptr};
    FAKE_LAUNCH(sdpa_forward_kernel, d.slots * d.NH, 64, 0, stream)
    ((bf16_t*)out, stats, (const bf16_t*)qkv, m.seq_len, m.off_qkv, m.off_out, m.off_stats, d);
    return cudaGetLastError() == cudaSuccess || fail(why, n, "cuDNN SDPA forward: the launch failed");
}
static inline bool cudnn_att_backward(void* dqkv, const void* dout, const void* qkv, const void* out,
                                      const float* stats, const CudnnAttShape* s, const RaggedMeta* r,
                                      cudaStream_t stream, char* why, size_t n) {
    using namespace fake_cudnn;
    if (!graphs_for(s, why, n) || !workspace_for(workspace_size(s), why, n)) return false;
    const Dims d = dims_of(s);
    const RaggedMeta m = d.ragged ? *r : RaggedMeta{nullptr, nullptr, nullptr, nullptr};
    float* D = (float*)state().workspace;
    FAKE_LAUNCH(sdpa_rowsum_kernel, d.slots * d.NH, 64, 0, stream)
    (D, (const bf16_t*)dout, (const bf16_t*)out, m.seq_len, m.off_qkv, m.off_out, m.off_stats, d);
    FAKE_LAUNCH(sdpa_dq_kernel, d.slots * d.NH, 64, 0, stream)
    ((bf16_t*)dqkv, (const bf16_t*)dout, (const bf16_t*)qkv, stats, (const float*)D, m.seq_len, m.off_qkv,
     m.off_out, m.off_stats, d);
    FAKE_LAUNCH(sdpa_dkdv_kernel, d.slots * d.NKV, 64, 0, stream)
    ((bf16_t*)dqkv, (const bf16_t*)dout, (const bf16_t*)qkv, stats, (const float*)D, m.seq_len, m.off_qkv,
     m.off_out, m.off_stats, d);
    return cudaGetLastError() == cudaSuccess || fail(why, n, "cuDNN SDPA backward: the launch failed");
}
