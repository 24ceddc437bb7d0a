// flash_attention.cuh — causal self-attention as fused tensor-core kernels (FlashAttention-2).
// Scores stay in registers, tile by tile. bf16 in, fp32 accumulation.
// Tiles cross from global to shared memory by cp.async while the previous product runs (the forward: V's
// load behind S = q k^T, the next K's behind O += P v; the dq and dk/dv kernels: the next tiles
// double-buffered, dk/dv's in dynamic shared memory). Key tiles every row sees in full skip the mask.
// Not here: choosing the path (train_gpt.cu), Hopper's wgmma and TMA.
#pragma once
#include "cuda_common.h"  // defines: bf16, cudaCheck, cudaCheckLaunch, grid_for, ceil_div64
#include "kernels.cuh"    // defines: warp_sum

// ----------------------------------------------------------------------------
// mma.sync m16n8k16: one warp computes C (16 x 8, fp32) += A (16 x 16) B (16 x 8), bf16.
// Layout: PTX ISA, "Matrix Fragments for mma.m16n8k16".

// Lane l holds (g = l / 4, t = l % 4, pairs low element first):
//   A: a[0] = A[g][2t, 2t+1]  a[1] = A[g+8][2t, 2t+1]  a[2] = A[g][2t+8, 2t+9]  a[3] = A[g+8][2t+8, 2t+9]
//   B: b[0] = B[2t, 2t+1][g]  b[1] = B[2t+8, 2t+9][g]
//   C: c[0], c[1] = C[g][2t, 2t+1]  c[2], c[3] = C[g+8][2t, 2t+1]

// Two adjacent C tiles are one A fragment, so P stays in registers.

// test/fake_cuda/fake_device.h emulates it. MmaFragmentLayoutMatchesMatmul tests it.

__device__ __forceinline__ void mma_bf16_16816(float c[4], const uint32_t a[4], const uint32_t b[2]) {
#ifdef FAKE_CUDA_DEVICE
    fake_device::mma_bf16_16816(c, a, b);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();  // no bf16 mma.sync before sm_80 (flash_attention_usable)
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// ldmatrix .x4: the warp loads four 8 x 8 matrices from shared memory.

// Lane l gets in r[i] (g = l / 4, t = l % 4):
//   plain:  matrix i's [g][2t], [g][2t+1]
//   .trans: matrix i's [2t][g], [2t+1][g]
// This is the mma fragment layout: one instruction fills four registers.

// fake_device.h emulates this table; test_kernels.cu's LdmatrixMatchesItsTable checks it.
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const bf16* row, bool transpose) {
#ifdef FAKE_CUDA_DEVICE
    fake_device::ldmatrix_x4(r, row, transpose);
#else
    // lane 8i + j: row j of matrix i, 16-byte aligned
    const uint32_t address = (uint32_t)__cvta_generic_to_shared(row);
    if (transpose)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(address)
                     : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(address)
                     : "memory");
#endif
}

// bf16 moves of 4 and 16 bytes
__device__ __forceinline__ uint32_t load_pair(const bf16* p) {  // p[0], p[1]; p 4-byte aligned
#ifdef FAKE_CUDA_DEVICE
    fake_device::require_aligned(p, 4, "load_pair");
    uint32_t u;
    memcpy(&u, p, 4);  // memcpy: no type punning on the host
    return u;
#else
    return *reinterpret_cast<const uint32_t*>(p);
#endif
}
__device__ __forceinline__ void store_pair(bf16* p, uint32_t u) {
#ifdef FAKE_CUDA_DEVICE
    fake_device::require_aligned(p, 4, "store_pair");
    memcpy(p, &u, 4);
#else
    *reinterpret_cast<uint32_t*>(p) = u;
#endif
}
__device__ __forceinline__ void copy16(bf16* dst, const bf16* src) {  // 8 elements; both 16-byte aligned
#ifdef FAKE_CUDA_DEVICE
    fake_device::require_aligned(dst, 16, "copy16 store");
    fake_device::require_aligned(src, 16, "copy16 load");
    memcpy(dst, src, 16);
#else
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
#endif
}
// cp.async (sm_80+): copy16 that does not hold the thread. The copy lands by cp_async_wait<N> (at most N of
// this thread's committed groups still in flight); other threads see it after a __syncthreads behind that.
// The emulator holds each copy until that wait, so a read before it sees stale bytes (fake_device.h).
__device__ __forceinline__ void cp_async16(bf16* dst, const bf16* src) {
#if defined(FAKE_CUDA_DEVICE)
    fake_device::cp_async16(dst, src);  // lands at the wait
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    copy16(dst, src);
#else
    const uint32_t address = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(src) : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(FAKE_CUDA_DEVICE)
    fake_device::cp_async_commit();
#elif !(defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800)
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(FAKE_CUDA_DEVICE)
    fake_device::cp_async_wait(N);
#elif !(defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800)
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}
__device__ __forceinline__ void zero16(bf16* dst) {
#ifdef FAKE_CUDA_DEVICE
    fake_device::require_aligned(dst, 16, "zero16");
    memset(dst, 0, 16);
#else
    *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
#endif
}
__device__ __forceinline__ uint32_t join_pair(bf16 lo, bf16 hi) {
    return (uint32_t)__bfloat16_as_ushort(lo) | ((uint32_t)__bfloat16_as_ushort(hi) << 16);
}
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {  // round to nearest even
#ifdef FAKE_CUDA_DEVICE
    return join_pair(__float2bfloat16(lo), __float2bfloat16(hi));
#else
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // one cvt.rn.bf16x2.f32; .x = lo: low half
    return *reinterpret_cast<const uint32_t*>(&v);
#endif
}
// Two adjacent 8-column C tiles as one A fragment
__device__ __forceinline__ void c_to_a(uint32_t a[4], const float left[4], const float right[4]) {
    a[0] = pack_pair(left[0], left[1]);
    a[1] = pack_pair(left[2], left[3]);
    a[2] = pack_pair(right[0], right[1]);
    a[3] = pack_pair(right[2], right[3]);
}

// Tile row padding keeps 16-byte alignment and spreads ldmatrix rows over banks.
#define FA_PAD 8

// The block's rows' first keys t - pos[t]: x the least (the first key tile to load), y the greatest (from
// there on, no row's start masks a key). By the first warp: a lane per row, then a butterfly (floats are
// exact below 2^24 > T).
__device__ __forceinline__ int2 first_keys_of(const int* pos_b, int row0, int rows, int T, int2* shared) {
    if (!pos_b) return make_int2(0, 0);
    if (threadIdx.x < 32) {
        float lo = (float)row0, hi = 0.0f;
        for (int r = row0 + (int)threadIdx.x; r < min(row0 + rows, T); r += 32) {
            lo = fminf(lo, (float)(r - pos_b[r]));
            hi = fmaxf(hi, (float)(r - pos_b[r]));
        }
        for (int o = 16; o > 0; o >>= 1) {
            lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
            hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, o));
        }
        if (threadIdx.x == 0) *shared = make_int2((int)lo, (int)hi);
    }
    __syncthreads();  // so every thread must call it
    return *shared;
}
// The first key seen by query row r.
__device__ __forceinline__ int row_first_key(const int* pos_b, int r, int T) {
    return pos_b && r < T ? r - pos_b[r] : 0;
}

// A (T, HS) head's rows from row0 into a shared tile; ASYNC: by cp.async (the caller commits and waits).
template <int ROWS, int HS, bool ASYNC = false>
__device__ __forceinline__ void load_tile(bf16 (*tile)[HS + FA_PAD], const bf16* head, int64_t ld, int row0,
                                          int T) {
    for (int i = threadIdx.x; i < ROWS * HS / 8; i += blockDim.x) {
        const int r = i / (HS / 8), c = (i % (HS / 8)) * 8;
        if (row0 + r >= T) zero16(&tile[r][c]);
        else if (ASYNC) cp_async16(&tile[r][c], head + (int64_t)(row0 + r) * ld + c);
        else copy16(&tile[r][c], head + (int64_t)(row0 + r) * ld + c);
    }
}
// A fragments of head rows r0, r1 from global memory.
template <int HS>
__device__ __forceinline__ void load_a_rows(uint32_t f[HS / 16][4], const bf16* head, int64_t ld, int r0,
                                            int r1, int T) {
    const int t = threadIdx.x % 4;
    for (int kk = 0; kk < HS / 16; kk++) {  // f[kk]: columns [16kk, 16kk + 16)
        const int c = kk * 16 + 2 * t;
        f[kk][0] = r0 < T ? load_pair(head + (int64_t)r0 * ld + c) : 0u;
        f[kk][1] = r1 < T ? load_pair(head + (int64_t)r1 * ld + c) : 0u;
        f[kk][2] = r0 < T ? load_pair(head + (int64_t)r0 * ld + c + 8) : 0u;
        f[kk][3] = r1 < T ? load_pair(head + (int64_t)r1 * ld + c + 8) : 0u;
    }
}
// Fragments from a shared tile, one ldmatrix each.

// A fragment of the 16 x 16 block at (row, col).
template <int W>
__device__ __forceinline__ void a_from_tile(uint32_t a[4], const bf16 (*tile)[W + FA_PAD], int row, int col) {
    const int lane = threadIdx.x % 32, i = lane / 8;  // lane: row lane % 8 of matrix i
    ldmatrix_x4(a, &tile[row + (i % 2) * 8 + lane % 8][col + (i / 2) * 8], false);
}
// B = tile^T fragments (k rows in S = q k^T).
template <int W>
__device__ __forceinline__ void b2_from_rows(uint32_t b[4], const bf16 (*tile)[W + FA_PAD], int n0, int k0) {
    const int lane = threadIdx.x % 32, i = lane / 8;
    // b[2], b[3]: the tile at n0 + 8
    ldmatrix_x4(b, &tile[n0 + (i / 2) * 8 + lane % 8][k0 + (i % 2) * 8], false);
}
// The same for B = tile (v rows in O += P v): ldmatrix transposes.
template <int W>
__device__ __forceinline__ void b2_from_cols(uint32_t b[4], const bf16 (*tile)[W + FA_PAD], int k0, int n0) {
    const int lane = threadIdx.x % 32, i = lane / 8;
    ldmatrix_x4(b, &tile[k0 + (i % 2) * 8 + lane % 8][n0 + (i / 2) * 8], true);
}

// ----------------------------------------------------------------------------
// Forward: online softmax over key tiles. y = O / l, lse = m + log2(l).
// ASYNC: v's tile loads while S = q k^T runs, the next k's while O += P v runs (one buffer each); else the
// same steps with plain loads (the measured alternative: bench_attention's fused_sync).
template <int HS, bool ASYNC>
__global__ void __launch_bounds__(128)
    flash_attention_forward_kernel(bf16* y, float* lse, const bf16* qkv, int T, int NH, int NKV,
                                   const int* pos, float scale_log2) {
    // 64 queries of one (b, h): 4 warps of 16 rows
    constexpr int BQ = 64, BK = 64;
    __shared__ __align__(16) bf16 ks[BK][HS + FA_PAD];  // k rows: B of S = q k^T
    __shared__ __align__(16) bf16 vs[BK][HS + FA_PAD];  // v rows: B of O += P v (ldmatrix .trans)
    __shared__ int2 first_keys_s;
    const int C = NH * HS;
    const int64_t ld = (int64_t)(NH + 2 * NKV) * HS;  // a qkv row
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int q_tile = (int)gridDim.y - 1 - (int)blockIdx.y;  // the last tiles (most keys) first
    const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
    const bf16* q_head = qkv + (int64_t)b * T * ld + (int64_t)h * HS;
    const bf16* k_head = qkv + (int64_t)b * T * ld + (int64_t)(NH + h / (NH / NKV)) * HS;  // its group's
    const bf16* v_head = k_head + (int64_t)NKV * HS;
    const int r0 = q_tile * BQ + warp * 16 + g, r1 = r0 + 8;  // this lane's two query rows
    const int* pos_b = pos ? pos + (int64_t)b * T : nullptr;
    const int lo0 = row_first_key(pos_b, r0, T), lo1 = row_first_key(pos_b, r1, T);  // their first keys
    const int2 first_keys = first_keys_of(pos_b, q_tile * BQ, BQ, T, &first_keys_s);
    const int first_key = first_keys.x;

    uint32_t qf[HS / 16][4];
    load_a_rows<HS>(qf, q_head, ld, r0, r1, T);
    float o[HS / 8][4];
    for (int n = 0; n < HS / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    // Rows r0, r1: running max m, this lane's part of sum l.
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

    // key tiles up to the diagonal one (BK == BQ)
    load_tile<BK, HS, ASYNC>(ks, k_head, ld, first_key / BK * BK, T);
    cp_async_commit();
    for (int kt = first_key / BK; kt <= q_tile; kt++) {
        cp_async_wait<0>();
        __syncthreads();  // k's tile is in; every warp is done with the previous v tile
        load_tile<BK, HS, ASYNC>(vs, v_head, ld, kt * BK, T);
        cp_async_commit();

        float s[BK / 8][4];
        for (int n = 0; n < BK / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
        for (int kk = 0; kk < HS / 16; kk++)
            for (int n = 0; n < BK / 8; n += 2) {
                uint32_t bk[4];
                b2_from_rows<HS>(bk, ks, n * 8, kk * 16);
                mma_bf16_16816(s[n], qf[kk], bk);  // S = q k^T
                mma_bf16_16816(s[n + 1], qf[kk], bk + 2);
            }
        // scaled to base 2, masked where a key may be hidden (the diagonal tile, a packed row's first keys;
        // full: every row sees every key, the same for the whole block); each row's max
        const bool full = kt < q_tile && kt * BK >= first_keys.y;
        if (full)
            for (int n = 0; n < BK / 8; n++)
                for (int e = 0; e < 4; e++) s[n][e] *= scale_log2;
        else
            for (int n = 0; n < BK / 8; n++)
                for (int e = 0; e < 2; e++) {
                    const int key = kt * BK + n * 8 + 2 * t + e;
                    s[n][e] = key <= r0 && key >= lo0 ? s[n][e] * scale_log2 : -INFINITY;
                    s[n][2 + e] = key <= r1 && key >= lo1 ? s[n][2 + e] * scale_log2 : -INFINITY;
                }
        float mx0 = -INFINITY, mx1 = -INFINITY;
        for (int n = 0; n < BK / 8; n++)
            for (int e = 0; e < 2; e++) {
                mx0 = fmaxf(mx0, s[n][e]);
                mx1 = fmaxf(mx1, s[n][2 + e]);
            }
        // a row's scores sit in 4 lanes, 4g .. 4g+3
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffff, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffff, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffff, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffff, mx1, 2));
        const float new_m0 = fmaxf(m0, mx0), new_m1 = fmaxf(m1, mx1);
        // no key yet: m = -inf, so subtract 0 (-inf - -inf is NaN)
        const float base0 = new_m0 == -INFINITY ? 0.0f : new_m0, base1 = new_m1 == -INFINITY ? 0.0f : new_m1;
        const float alpha0 = exp2f(m0 - base0), alpha1 = exp2f(m1 - base1);
        m0 = new_m0;
        m1 = new_m1;
        float sum0 = 0.0f, sum1 = 0.0f;
        for (int n = 0; n < BK / 8; n++)
            for (int e = 0; e < 2; e++) {
                s[n][e] = exp2f(s[n][e] - base0);  // masked: exp2(-inf) = 0
                s[n][2 + e] = exp2f(s[n][2 + e] - base1);
                sum0 += s[n][e];
                sum1 += s[n][2 + e];
            }
        l0 = l0 * alpha0 + sum0;
        l1 = l1 * alpha1 + sum1;
        cp_async_wait<0>();
        __syncthreads();  // v's tile is in; every warp is done with k's
        if (kt < q_tile) {
            load_tile<BK, HS, ASYNC>(ks, k_head, ld, (kt + 1) * BK, T);
            cp_async_commit();
        }
        for (int n = 0; n < HS / 8; n++) {  // O *= exp2(m_old - m_new)
            o[n][0] *= alpha0;
            o[n][1] *= alpha0;
            o[n][2] *= alpha1;
            o[n][3] *= alpha1;
        }
        for (int kk = 0; kk < BK / 16; kk++) {  // O += P v, P (bf16) straight from S's registers
            uint32_t pa[4];
            c_to_a(pa, s[2 * kk], s[2 * kk + 1]);
            for (int n = 0; n < HS / 8; n += 2) {
                uint32_t bv[4];
                b2_from_cols<HS>(bv, vs, kk * 16, n * 8);
                mma_bf16_16816(o[n], pa, bv);
                mma_bf16_16816(o[n + 1], pa, bv + 2);
            }
        }
    }
    l0 += __shfl_xor_sync(0xffffffff, l0, 1);
    l0 += __shfl_xor_sync(0xffffffff, l0, 2);
    l1 += __shfl_xor_sync(0xffffffff, l1, 1);
    l1 += __shfl_xor_sync(0xffffffff, l1, 2);
    const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
    bf16* y_head = y + (int64_t)b * T * C + (int64_t)h * HS;
    for (int n = 0; n < HS / 8; n++) {
        if (r0 < T)
            store_pair(y_head + (int64_t)r0 * C + n * 8 + 2 * t, pack_pair(o[n][0] * inv0, o[n][1] * inv0));
        if (r1 < T)
            store_pair(y_head + (int64_t)r1 * C + n * 8 + 2 * t, pack_pair(o[n][2] * inv1, o[n][3] * inv1));
    }
    if (t == 0) {
        if (r0 < T) lse[(int64_t)bh * T + r0] = m0 + log2f(l0);
        if (r1 < T) lse[(int64_t)bh * T + r1] = m1 + log2f(l1);
    }
}

// ----------------------------------------------------------------------------
// Backward: P = exp2(S * scale_log2 - lse) recomputed, D = rowsum(dy * y):
//   dv = P^T dy,  dP = dy v^T,  dS = P * (dP - D),  dq = scale * dS k,  dk = scale * dS^T q.

// D (B, NH, T) = rowsum(dy * y), one warp a row.
__global__ void flash_attention_dsum_kernel(float* dsum, const bf16* y, const bf16* dy, int64_t rows, int T,
                                            int NH, int HS) {
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
        float sum = 0.0f;
        for (int i = threadIdx.x % 32; i < HS; i += 32)
            sum += (float)y[row * HS + i] * (float)dy[row * HS + i];
        sum = warp_sum(sum);
        const int64_t bt = row / NH;  // row = (b * T + t) * NH + h
        const int h = (int)(row % NH), tpos = (int)(bt % T);
        const int64_t b = bt / T;
        if (threadIdx.x % 32 == 0) dsum[(b * NH + h) * T + tpos] = sum;
    }
}

// dq: 64 queries a block, 4 warps of 16 rows. ASYNC: the next key tile's k and v load (cp.async) into the
// other of two buffers while this one's products run; else plain loads, the same steps.
template <int HS, bool ASYNC>
__global__ void __launch_bounds__(128)
    flash_attention_backward_dq_kernel(bf16* dqkv, const bf16* qkv, const bf16* dy, const float* lse,
                                       const float* dsum, int T, int NH, int NKV, const int* pos, float scale,
                                       float scale_log2) {
    constexpr int BQ = 64, BK = 32;
    __shared__ __align__(16) bf16 ks[2][BK][HS + FA_PAD];  // k rows: B of S = q k^T, dq += dS k
    __shared__ __align__(16) bf16 vs[2][BK][HS + FA_PAD];  // v rows: B of dP = dy v^T
    __shared__ int2 first_keys_s;
    const int C = NH * HS;
    const int64_t ld = (int64_t)(NH + 2 * NKV) * HS;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int q_tile = (int)gridDim.y - 1 - (int)blockIdx.y;  // longest rows first
    const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
    const bf16* q_head = qkv + (int64_t)b * T * ld + (int64_t)h * HS;
    const bf16* k_head = qkv + (int64_t)b * T * ld + (int64_t)(NH + h / (NH / NKV)) * HS;
    const bf16* v_head = k_head + (int64_t)NKV * HS;
    const bf16* dy_head = dy + (int64_t)b * T * C + (int64_t)h * HS;
    const int r0 = q_tile * BQ + warp * 16 + g, r1 = r0 + 8;
    const int* pos_b = pos ? pos + (int64_t)b * T : nullptr;
    const int lo0 = row_first_key(pos_b, r0, T), lo1 = row_first_key(pos_b, r1, T);
    const int2 first_keys = first_keys_of(pos_b, q_tile * BQ, BQ, T, &first_keys_s);
    const int first_key = first_keys.x;

    uint32_t qf[HS / 16][4], df[HS / 16][4];
    load_a_rows<HS>(qf, q_head, ld, r0, r1, T);
    load_a_rows<HS>(df, dy_head, C, r0, r1, T);
    // rows past T: zero inputs, finite results, never stored
    const float lse0 = r0 < T ? lse[(int64_t)bh * T + r0] : 0.0f,
                lse1 = r1 < T ? lse[(int64_t)bh * T + r1] : 0.0f;
    const float d0 = r0 < T ? dsum[(int64_t)bh * T + r0] : 0.0f,
                d1 = r1 < T ? dsum[(int64_t)bh * T + r1] : 0.0f;
    float dq[HS / 8][4];
    for (int n = 0; n < HS / 8; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;

    const int last_tile = (min(q_tile * BQ + BQ, T) - 1) / BK;
    load_tile<BK, HS, ASYNC>(ks[0], k_head, ld, first_key / BK * BK, T);
    load_tile<BK, HS, ASYNC>(vs[0], v_head, ld, first_key / BK * BK, T);
    cp_async_commit();
    for (int key_tile = first_key / BK, buf = 0; key_tile <= last_tile; key_tile++, buf ^= 1) {
        cp_async_wait<0>();
        __syncthreads();  // this tile is in; every warp is done with the other buffer (the last tile's)
        if (key_tile < last_tile) {
            load_tile<BK, HS, ASYNC>(ks[buf ^ 1], k_head, ld, (key_tile + 1) * BK, T);
            load_tile<BK, HS, ASYNC>(vs[buf ^ 1], v_head, ld, (key_tile + 1) * BK, T);
            cp_async_commit();
        }
        float s[BK / 8][4], dp[BK / 8][4];
        for (int n = 0; n < BK / 8; n++)
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
        for (int kk = 0; kk < HS / 16; kk++)
            for (int n = 0; n < BK / 8; n += 2) {
                uint32_t bk[4], bv[4];
                b2_from_rows<HS>(bk, ks[buf], n * 8, kk * 16);
                mma_bf16_16816(s[n], qf[kk], bk);  // S = q k^T
                mma_bf16_16816(s[n + 1], qf[kk], bk + 2);
                b2_from_rows<HS>(bv, vs[buf], n * 8, kk * 16);
                mma_bf16_16816(dp[n], df[kk], bv);  // dP = dy v^T
                mma_bf16_16816(dp[n + 1], df[kk], bv + 2);
            }
        // full: every row sees every key of the tile (the same for the whole block), no mask
        if (key_tile * BK + BK - 1 <= q_tile * BQ && key_tile * BK >= first_keys.y)
            for (int n = 0; n < BK / 8; n++)
                for (int e = 0; e < 2; e++) {
                    s[n][e] = exp2f(s[n][e] * scale_log2 - lse0) * (dp[n][e] - d0);  // now dS
                    s[n][2 + e] = exp2f(s[n][2 + e] * scale_log2 - lse1) * (dp[n][2 + e] - d1);
                }
        else
            for (int n = 0; n < BK / 8; n++)
                for (int e = 0; e < 2; e++) {
                    const int key = key_tile * BK + n * 8 + 2 * t + e;
                    const float p0 = key <= r0 && key >= lo0 ? exp2f(s[n][e] * scale_log2 - lse0) : 0.0f;
                    const float p1 = key <= r1 && key >= lo1 ? exp2f(s[n][2 + e] * scale_log2 - lse1) : 0.0f;
                    s[n][e] = p0 * (dp[n][e] - d0);
                    s[n][2 + e] = p1 * (dp[n][2 + e] - d1);
                }
        for (int kk = 0; kk < BK / 16; kk++) {  // dq += dS k
            uint32_t da[4];
            c_to_a(da, s[2 * kk], s[2 * kk + 1]);
            for (int n = 0; n < HS / 8; n += 2) {
                uint32_t bk[4];
                b2_from_cols<HS>(bk, ks[buf], kk * 16, n * 8);
                mma_bf16_16816(dq[n], da, bk);
                mma_bf16_16816(dq[n + 1], da, bk + 2);
            }
        }
    }
    bf16* dq_head = dqkv + (int64_t)b * T * ld + (int64_t)h * HS;
    for (int n = 0; n < HS / 8; n++) {
        if (r0 < T)
            store_pair(dq_head + (int64_t)r0 * ld + n * 8 + 2 * t,
                       pack_pair(dq[n][0] * scale, dq[n][1] * scale));
        if (r1 < T)
            store_pair(dq_head + (int64_t)r1 * ld + n * 8 + 2 * t,
                       pack_pair(dq[n][2] * scale, dq[n][3] * scale));
    }
}

// dk, dv: each block owns 32 keys, so no atomics. The query tiles (q, dy and their rows' lse, D, first key)
// pass through two stages of dynamic shared memory (hs 128: 52 KiB with k and v, past the 48 KiB of static
// shared memory): ASYNC loads the next tile by cp.async while this one's four products run; else by plain
// loads, the same steps.
#define FA_DKDV_KEYS    32
#define FA_DKDV_QUERIES 32
#ifdef FAKE_CUDA_DEVICE
#define FA_DYNAMIC_SHARED(name) unsigned char* name = fake_device::dynamic_shared()
#else
#define FA_DYNAMIC_SHARED(name) extern __shared__ __align__(16) unsigned char name[]
#endif
// The dk/dv kernel's dynamic shared memory: k, v tiles, then per stage q, dy tiles, then per stage lse, D and
// first keys (BQ floats, floats, ints), then packed rows' seen bits (a bit a query tile of T).
static constexpr size_t flash_dkdv_shared_bytes(int hs, int T) {
    return (size_t)(2 * FA_DKDV_KEYS + 4 * FA_DKDV_QUERIES) * (hs + FA_PAD) * 2 +
           2 * 3 * FA_DKDV_QUERIES * 4 + (size_t)((T + FA_DKDV_QUERIES - 1) / FA_DKDV_QUERIES + 31) / 32 * 4;
}
template <int HS, bool ASYNC>
__global__ void __launch_bounds__(64)
    flash_attention_backward_dkdv_kernel(bf16* dqkv, const bf16* qkv, const bf16* dy, const float* lse,
                                         const float* dsum, int T, int NH, int NKV, const int* pos,
                                         float scale, float scale_log2) {
    constexpr int BKEY = FA_DKDV_KEYS, BQ = FA_DKDV_QUERIES;
    typedef bf16 Row[HS + FA_PAD];
    FA_DYNAMIC_SHARED(smem);
    Row* const ks = (Row*)smem;  // k rows: A of S^T = k q^T
    Row* const vs = ks + BKEY;   // v rows: A of dP^T = v dy^T
    Row* const qd = vs + BKEY;   // stage i: q rows at qd + 2 i BQ (B of S^T, dk += dS^T q), dy rows after
                                 // them (B of dP^T, dv += P^T dy)
    float* const rows_s = (float*)(qd + 4 * BQ);  // stage i at 3 i BQ: lse, D, first key (int) of each row
    const int C = NH * HS, group = NH / NKV;
    const int64_t ld = (int64_t)(NH + 2 * NKV) * HS;
    const int b = blockIdx.x / NKV, kvh = blockIdx.x % NKV;
    const int key_tile = blockIdx.y;  // the first keys (most queries) first
    const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
    const bf16* k_head = qkv + (int64_t)b * T * ld + (int64_t)(NH + kvh) * HS;
    const bf16* v_head = k_head + (int64_t)NKV * HS;
    const int k0 = key_tile * BKEY + warp * 16 + g, k1 = k0 + 8;  // this lane's two key rows
    const int* pos_b = pos ? pos + (int64_t)b * T : nullptr;
    const int last_key = key_tile * BKEY + BKEY - 1;

    float dk[HS / 8][4], dv[HS / 8][4];
    for (int n = 0; n < HS / 8; n++)
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;

    // The work: the group's query heads h, and for each the query tiles qt from this block's keys on (earlier
    // queries see none of them) that some query sees (packed rows: a tile whose queries all start after these
    // keys is skipped; the same for every thread, and for every head)
    const int q_tiles = (T + BQ - 1) / BQ, h_end = (kvh + 1) * group;
    // k and v in flight (committed with the first query tile) while the packed rows' bits are found
    load_tile<BKEY, HS, ASYNC>(ks, k_head, ld, key_tile * BKEY, T);
    load_tile<BKEY, HS, ASYNC>(vs, v_head, ld, key_tile * BKEY, T);
    // Packed rows: which tiles see these keys, a bit each, found once for every head: a warp a word of 32
    // tiles, a lane a query of each (BQ == 32), OR-ed across the warp
    static_assert(BQ == 32, "a lane a query of a tile");
    unsigned* const seen_bits = (unsigned*)(rows_s + 6 * BQ);
    const int qt_start = key_tile * BKEY / BQ;  // earlier queries see none of these keys
    if (pos_b) {
        const int lane = threadIdx.x % 32;
        for (int w = qt_start / 32 + warp; w < (q_tiles + 31) / 32; w += (int)blockDim.x / 32) {
            unsigned bits = 0;
            for (int i = 0; i < 32 && w * 32 + i < q_tiles; i++) {  // the same i for the whole warp
                const int qt = w * 32 + i, q = qt * BQ + lane;
                float seen = qt >= qt_start && q < T && q - pos_b[q] <= last_key ? 1.0f : 0.0f;
                for (int o = 16; o > 0; o >>= 1) seen = fmaxf(seen, __shfl_xor_sync(0xffffffffu, seen, o));
                if (seen > 0.0f) bits |= 1u << i;
            }
            if (lane == 0) seen_bits[w] = bits;
        }
        __syncthreads();
    }
    auto seen_from = [&](int qt) {  // the first tile from qt on that sees these keys, or q_tiles
        while (pos_b && qt < q_tiles && !((seen_bits[qt / 32] >> (qt % 32)) & 1u)) qt++;
        return qt;
    };
    const int first_qt = seen_from(qt_start);
    static_assert(BQ <= 64, "a thread a query row: the block's 64 threads");
    auto load_tiles = [&](int stage, int h, int qt) {  // head h's query tile qt: q and dy into a stage
        Row* const qs = qd + 2 * stage * BQ;
        load_tile<BQ, HS, ASYNC>(qs, qkv + (int64_t)b * T * ld + (int64_t)h * HS, ld, qt * BQ, T);
        load_tile<BQ, HS, ASYNC>(qs + BQ, dy + (int64_t)b * T * C + (int64_t)h * HS, C, qt * BQ, T);
        cp_async_commit();
    };
    // its rows' lse, D and first key: thread i reads row i into registers (in flight during the products),
    // then stores them in the stage (read after the next barrier)
    float row_lse = 0.0f, row_d = 0.0f;
    int row_lo = 0;
    auto fetch_rows = [&](int h, int qt) {
        const int q = qt * BQ + (int)threadIdx.x;
        const int64_t bh = (int64_t)b * NH + h;
        row_lse = threadIdx.x < BQ && q < T ? lse[bh * T + q] : 0.0f;
        row_d = threadIdx.x < BQ && q < T ? dsum[bh * T + q] : 0.0f;
        row_lo = row_first_key(pos_b, q, T);
    };
    auto store_rows = [&](int stage) {
        float* const r = rows_s + 3 * stage * BQ;
        if (threadIdx.x < BQ) {
            r[threadIdx.x] = row_lse;
            r[BQ + threadIdx.x] = row_d;
            ((int*)r)[2 * BQ + threadIdx.x] = row_lo;
        }
    };
    if (first_qt < q_tiles) {
        load_tiles(0, kvh * group, first_qt);  // with k and v: one group
        fetch_rows(kvh * group, first_qt);
        store_rows(0);
    }
    for (int h = kvh * group, qt = first_qt, stage = 0; qt < q_tiles; stage ^= 1) {
        // the next tile: the next seen one of this head, else the next head's first
        int next_h = h, next_qt = seen_from(qt + 1);
        if (next_qt == q_tiles && h + 1 < h_end) next_h = h + 1, next_qt = first_qt;
        cp_async_wait<0>();
        __syncthreads();  // this stage is in; every warp is done with the other (the last tile's)
        if (next_qt < q_tiles) {
            load_tiles(stage ^ 1, next_h, next_qt);
            fetch_rows(next_h, next_qt);
        }
        const Row* const qs = qd + 2 * stage * BQ;
        const Row* const dys = qs + BQ;
        const float* const lse_s = rows_s + 3 * stage * BQ;
        const float* const dsum_s = lse_s + BQ;
        const int* const lo_s = (const int*)(lse_s + 2 * BQ);
        {
            float st[BQ / 8][4], dpt[BQ / 8][4];
            for (int n = 0; n < BQ / 8; n++)
                for (int e = 0; e < 4; e++) st[n][e] = dpt[n][e] = 0.0f;
            for (int kk = 0; kk < HS / 16; kk++) {  // key-major: P^T, dS^T come out as A fragments
                uint32_t ka[4], va[4];
                a_from_tile<HS>(ka, ks, warp * 16, kk * 16);
                a_from_tile<HS>(va, vs, warp * 16, kk * 16);
                for (int n = 0; n < BQ / 8; n += 2) {
                    uint32_t bq[4], bd[4];
                    b2_from_rows<HS>(bq, qs, n * 8, kk * 16);
                    mma_bf16_16816(st[n], ka, bq);  // S^T = k q^T
                    mma_bf16_16816(st[n + 1], ka, bq + 2);
                    b2_from_rows<HS>(bd, dys, n * 8, kk * 16);
                    mma_bf16_16816(dpt[n], va, bd);  // dP^T = v dy^T
                    mma_bf16_16816(dpt[n + 1], va, bd + 2);
                }
            }
            // full: every query of the tile is real and sees every key of the block (no packing: no first
            // keys)
            const bool full = !pos_b && qt * BQ >= key_tile * BKEY + BKEY - 1 && qt * BQ + BQ <= T;
            for (int n = 0; n < BQ / 8; n++)
                for (int e = 0; e < 2; e++) {
                    const int qi = n * 8 + 2 * t + e, q = qt * BQ + qi;
                    const bool real = q < T;  // a padded query must add nothing to dk, dv
                    const bool see0 = full || (real && q >= k0 && k0 >= lo_s[qi]),
                               see1 = full || (real && q >= k1 && k1 >= lo_s[qi]);
                    const float p0 = see0 ? exp2f(st[n][e] * scale_log2 - lse_s[qi]) : 0.0f;
                    const float p1 = see1 ? exp2f(st[n][2 + e] * scale_log2 - lse_s[qi]) : 0.0f;
                    st[n][e] = p0;  // now P^T
                    st[n][2 + e] = p1;
                    dpt[n][e] = p0 * (dpt[n][e] - dsum_s[qi]);  // now dS^T
                    dpt[n][2 + e] = p1 * (dpt[n][2 + e] - dsum_s[qi]);
                }
            for (int kk = 0; kk < BQ / 16; kk++) {
                uint32_t pa[4], da[4];
                c_to_a(pa, st[2 * kk], st[2 * kk + 1]);
                c_to_a(da, dpt[2 * kk], dpt[2 * kk + 1]);
                for (int n = 0; n < HS / 8; n += 2) {
                    uint32_t bd[4], bq[4];
                    b2_from_cols<HS>(bd, dys, kk * 16, n * 8);
                    mma_bf16_16816(dv[n], pa, bd);  // dv += P^T dy
                    mma_bf16_16816(dv[n + 1], pa, bd + 2);
                    b2_from_cols<HS>(bq, qs, kk * 16, n * 8);
                    mma_bf16_16816(dk[n], da, bq);  // dk += dS^T q
                    mma_bf16_16816(dk[n + 1], da, bq + 2);
                }
            }
        }
        if (next_qt < q_tiles) store_rows(stage ^ 1);
        h = next_h;
        qt = next_qt;
    }
    cp_async_commit();  // nothing in flight at the end (no tile at all: k and v's)
    cp_async_wait<0>();
    bf16* dk_head = dqkv + (int64_t)b * T * ld + (int64_t)(NH + kvh) * HS;
    bf16* dv_head = dk_head + (int64_t)NKV * HS;
    for (int n = 0; n < HS / 8; n++) {
        const int c = n * 8 + 2 * t;
        if (k0 < T) {
            store_pair(dk_head + (int64_t)k0 * ld + c, pack_pair(dk[n][0] * scale, dk[n][1] * scale));
            store_pair(dv_head + (int64_t)k0 * ld + c, pack_pair(dv[n][0], dv[n][1]));
        }
        if (k1 < T) {
            store_pair(dk_head + (int64_t)k1 * ld + c, pack_pair(dk[n][2] * scale, dk[n][3] * scale));
            store_pair(dv_head + (int64_t)k1 * ld + c, pack_pair(dv[n][2], dv[n][3]));
        }
    }
}

// ----------------------------------------------------------------------------
// Launchers

// The head size whose kernels run for hs: hs where built (80: 2.7b), else 128's (flash_attention_usable
// refuses those).
static int flash_built_hs(int hs) { return hs == 32 || hs == 64 || hs == 80 || hs == 96 ? hs : 128; }
// Built head sizes, compute capability >= 8.0.
static int flash_attention_device_major = -1;  // device's major, asked once. -P presets it for another GPU
static bool flash_attention_usable(int head_size) {
    int& major = flash_attention_device_major;
    if (major < 0) {
        cudaDeviceProp p;
        int device = 0;
        major = cudaGetDevice(&device) == cudaSuccess && cudaGetDeviceProperties(&p, device) == cudaSuccess
                    ? p.major
                    : 0;
        cudaGetLastError();  // no device: the trainer reports it; clear
    }
    return major >= 8 && flash_built_hs(head_size) == head_size;
}

// 16-byte moves need 16-byte aligned q, k, v, y, dy.
static void flash_check_aligned(const void* a, const void* b, const void* c, const void* d) {
    if (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d) & 15) {
        die("flash attention: a tensor is not 16-byte aligned");
    }
}

static dim3 flash_grid(int B, int NH, int T, int tile) {
    const int64_t heads = (int64_t)B * NH, tiles = ceil_div64(T, tile);
    if (heads > 0x7fffffff || tiles > 65535) {
        die("flash attention: B*NH = %lld or T = %d out of the kernels' grid range", (long long)heads, T);
    }
    return dim3((unsigned)heads, (unsigned)tiles);
}

// Tiles by cp.async (true) or plain loads; the same arithmetic, so the same bits either way.
// bench_attention times both (fused, fused_sync); keep the default that measures faster.
// LLMC_FLASH_ASYNC=0: plain loads (the GPU window's second try where the cp.async kernels fail their tests).
static bool flash_attention_async_default() {
    const char* e = getenv("LLMC_FLASH_ASYNC");
    return !(e && strcmp(e, "0") == 0);
}
static bool flash_attention_async = flash_attention_async_default();

// A kernel family's instance for head size hs and cp.async or not.
#define FLASH_KERNEL_AS(kernel, hs, A) \
    (hs == 32   ? kernel<32, A>        \
     : hs == 64 ? kernel<64, A>        \
     : hs == 80 ? kernel<80, A>        \
     : hs == 96 ? kernel<96, A>        \
                : kernel<128, A>)
#define FLASH_KERNEL_FOR(kernel, hs, async) \
    ((async) ? FLASH_KERNEL_AS(kernel, hs, true) : FLASH_KERNEL_AS(kernel, hs, false))
typedef void (*FlashForwardKernel)(bf16*, float*, const bf16*, int, int, int, const int*, float);
typedef void (*FlashBackwardKernel)(bf16*, const bf16*, const bf16*, const float*, const float*, int, int,
                                    int, const int*, float, float);
static FlashForwardKernel flash_forward_kernel_for(int hs, bool async) {
    return FLASH_KERNEL_FOR(flash_attention_forward_kernel, hs, async);
}
static FlashBackwardKernel flash_dq_kernel_for(int hs, bool async) {
    return FLASH_KERNEL_FOR(flash_attention_backward_dq_kernel, hs, async);
}
static FlashBackwardKernel flash_dkdv_kernel_for(int hs, bool async) {
    return FLASH_KERNEL_FOR(flash_attention_backward_dkdv_kernel, hs, async);
}
// Loads hs's kernels now (see kernels_load in kernels.cuh).
static void flash_attention_load(int hs) {
    const bool a = flash_attention_async;
    const void* kernels[] = {
        (const void*)flash_forward_kernel_for(hs, a), (const void*)flash_dq_kernel_for(hs, a),
        (const void*)flash_dkdv_kernel_for(hs, a), (const void*)flash_attention_dsum_kernel};
    cudaFuncAttributes attr;
    for (const void* k : kernels) cudaCheck(cudaFuncGetAttributes(&attr, k));
}

// Key/value heads: NKV, or NH when 0. Must divide NH.
static int flash_kv_heads(int NH, int NKV) {
    const int nkv = NKV > 0 ? NKV : NH;
    if (NH % nkv) { die("flash attention: %d key/value heads do not divide %d query heads", nkv, NH); }
    return nkv;
}

// y (B, T, NH * hs) = causal softmax(q k^T / sqrt(hs)) v per head.
// qkv (B, T, (NH + 2 NKV) hs). lse (B, NH, T): base-2 logsumexp.
// pos (B, T) or NULL: query t sees keys t - pos[t] .. t.
static void flash_attention_forward(bf16* y, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                                    cudaStream_t s, int NKV = 0, const int* pos = nullptr) {
    const int hs = C / NH, nkv = flash_kv_heads(NH, NKV);
    flash_check_aligned(y, qkv, qkv, qkv);
    const float scale_log2 = 1.0f / sqrtf((float)hs) * 1.4426950408889634f;  // exp(x) = exp2(x * log2(e))
    const FlashForwardKernel kernel = flash_forward_kernel_for(hs, flash_attention_async);
    kernel<<<flash_grid(B, NH, T, 64), 128, 0, s>>>(y, lse, qkv, T, NH, nkv, pos, scale_log2);
    cudaCheckLaunch();
}

// Overwrites all of dqkv (B, T, qkv row). dsum (B, NH, T): scratch.
// parts: which of its kernels run (FLASH_BWD_ALL; bench_attention times them one by one).
enum { FLASH_BWD_DSUM = 1, FLASH_BWD_DQ = 2, FLASH_BWD_DKDV = 4, FLASH_BWD_ALL = 7 };
static void flash_attention_backward(bf16* dqkv, float* dsum, const bf16* dy, const bf16* y, const bf16* qkv,
                                     const float* lse, int B, int T, int C, int NH, cudaStream_t s,
                                     int NKV = 0, const int* pos = nullptr, int parts = FLASH_BWD_ALL) {
    const int hs = C / NH, nkv = flash_kv_heads(NH, NKV);
    flash_check_aligned(dqkv, dy, y, qkv);
    const float scale = 1.0f / sqrtf((float)hs), scale_log2 = scale * 1.4426950408889634f;
    const int64_t rows = (int64_t)B * T * NH;
    if (parts & FLASH_BWD_DSUM) {
        flash_attention_dsum_kernel<<<grid_for(rows * 32, 256), 256, 0, s>>>(dsum, y, dy, rows, T, NH, hs);
        cudaCheckLaunch();
    }
    const FlashBackwardKernel dq = flash_dq_kernel_for(hs, flash_attention_async),
                              dkdv = flash_dkdv_kernel_for(hs, flash_attention_async);
    if (parts & FLASH_BWD_DQ) {
        dq<<<flash_grid(B, NH, T, 64), 128, 0, s>>>(dqkv, qkv, dy, lse, dsum, T, NH, nkv, pos, scale,
                                                    scale_log2);
        cudaCheckLaunch();
    }
    if (!(parts & FLASH_BWD_DKDV)) return;
    // past 48 KiB at hs 128: asked for (once a kernel and size); the seen bits for packed rows only
    const size_t dkdv_shared = flash_dkdv_shared_bytes(flash_built_hs(hs), pos ? T : 0);
    static const void* asked_kernel = nullptr;
    static size_t asked_bytes = 0;
    if ((const void*)dkdv != asked_kernel || dkdv_shared > asked_bytes) {
        cudaCheck(cudaFuncSetAttribute((const void*)dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)dkdv_shared));
        asked_kernel = (const void*)dkdv;
        asked_bytes = dkdv_shared;
    }
    dkdv<<<flash_grid(B, nkv, T, FA_DKDV_KEYS), 64, dkdv_shared, s>>>(dqkv, qkv, dy, lse, dsum, T, NH, nkv,
                                                                      pos, scale, scale_log2);
    cudaCheckLaunch();
}
