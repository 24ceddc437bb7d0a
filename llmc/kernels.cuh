// kernels.cuh — the GPU kernels of a layer, the embeddings, the loss and AdamW, each beside its launcher.
// bf16 activations, fp32 sums and parameter gradients (+=). Not here: matmuls (matmul.cuh).

// Packed sequences: pos (B*T, NULL: row % T) as in gpt2_cpu.h; target -1 has no loss.
#pragma once
#include "cuda_common.h"
#include "adamw.h"  // defines: AdamWConstants, adamw_constants, adamw_element (the CPU's bits)

#define WARP 32

template <typename Real>
__device__ __forceinline__ Real warp_sum(Real x) {
#ifdef FAKE_CUDA_DEVICE  // the same tree of sums in one exchange of the lanes (fake_device.h)
    return fake_device::warp_reduce(x, [](Real a, Real b) { return a + b; });
#else
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffff, x, o);
    return x;
#endif
}
__device__ __forceinline__ float warp_max(float x) {
#ifdef FAKE_CUDA_DEVICE
    return fake_device::warp_reduce(x, [](float a, float b) { return fmaxf(a, b); });
#else
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, o));
    return x;
#endif
}
// Sum over a block of up to 1024 threads; every thread gets the result. `shared` holds >= 32 values.
template <typename Real>
__device__ __forceinline__ Real block_sum(Real x, Real* shared) {
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, nwarps = (blockDim.x + WARP - 1) / WARP;
    x = warp_sum(x);
    __syncthreads();  // protect `shared` from a previous call
    if (lane == 0) shared[warp] = x;
    __syncthreads();
    x = lane < nwarps ? shared[lane] : (Real)0;
    return warp_sum(x);
}
__device__ __forceinline__ float block_max(float x, float* shared) {
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, nwarps = (blockDim.x + WARP - 1) / WARP;
    x = warp_max(x);
    __syncthreads();
    if (lane == 0) shared[warp] = x;
    __syncthreads();
    x = lane < nwarps ? shared[lane] : -INFINITY;
    return warp_max(x);
}
// A row's max and sum of exp(x - max), over the block; every thread gets both.
struct MaxSumExp {
    float max, sum;
};
__device__ __forceinline__ MaxSumExp block_max_sumexp(const bf16* x, int n, float* shared) {
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < n; i += blockDim.x) mx = fmaxf(mx, (float)x[i]);
    mx = block_max(mx, shared);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) sum += expf((float)x[i] - mx);
    return {mx, block_sum(sum, shared)};
}

// 8 bf16 as four 32-bit words: one 128-bit access. Other shapes take an element-wise twin.
struct Pack8 {
    uint32_t w[4];
};
__device__ __forceinline__ Pack8 load_pack8(const bf16* p) {
    Pack8 r;
#ifdef FAKE_CUDA_DEVICE
    fake_device::require_aligned(p, 16, "load_pack8");
    memcpy(r.w, p, 16);
#else
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    r.w[0] = u.x;
    r.w[1] = u.y;
    r.w[2] = u.z;
    r.w[3] = u.w;
#endif
    return r;
}
__device__ __forceinline__ void store_pack8(bf16* p, const Pack8& x) {
#ifdef FAKE_CUDA_DEVICE
    fake_device::require_aligned(p, 16, "store_pack8");
    memcpy(p, x.w, 16);
#else
    *reinterpret_cast<uint4*>(p) = make_uint4(x.w[0], x.w[1], x.w[2], x.w[3]);
#endif
}
__device__ __forceinline__ float pack8_get(const Pack8& x, int i) {  // exact, as (float)bf16
    return (float)__ushort_as_bfloat16((unsigned short)(i % 2 ? x.w[i / 2] >> 16 : x.w[i / 2] & 0xffffu));
}
__device__ __forceinline__ void pack8_set(Pack8& x, int i, float f) {  // rounded as __float2bfloat16
    const uint32_t b = __bfloat16_as_ushort(__float2bfloat16(f));
    x.w[i / 2] = i % 2 ? (x.w[i / 2] & 0xffffu) | (b << 16) : (x.w[i / 2] & 0xffff0000u) | b;
}
static inline bool aligned16(const void* p) { return ((uintptr_t)p & 15) == 0; }

// ----------------------------------------------------------------------------
// Embeddings: x[b,t,:] = wte[token] + wpe[p], p = pos[b,t] (pos NULL: t)

__global__ void embedding_forward_kernel(bf16* out, const int* tokens, const bf16* wte, const bf16* wpe,
                                         int64_t BT, int T, int C, const int* pos) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < BT * C;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t row = i / C;
        int c = (int)(i % C);
        int t = pos ? pos[row] : (int)(row % T);
        out[i] = __float2bfloat16((float)wte[(int64_t)tokens[row] * C + c] + (float)wpe[(int64_t)t * C + c]);
    }
}
// pos (BT, device, may be NULL): positions of packed sequences
static void embedding_forward(bf16* out, const int* tokens, const bf16* wte, const bf16* wpe, int64_t BT,
                              int T, int C, cudaStream_t s, const int* pos = nullptr) {
    embedding_forward_kernel<<<grid_for(BT * C, 256), 256, 0, s>>>(out, tokens, wte, wpe, BT, T, C, pos);
    cudaCheckLaunch();
}

// dwte[token] += dout, dwpe[p] += dout (fp32 atomics: a token may repeat).
__global__ void embedding_backward_kernel(float* dwte, float* dwpe, const bf16* dout, const int* tokens,
                                          int64_t BT, int T, int C, const int* pos) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < BT * C;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t row = i / C;
        int c = (int)(i % C);
        float d = (float)dout[i];
        atomicAdd(&dwte[(int64_t)tokens[row] * C + c], d);
        atomicAdd(&dwpe[(int64_t)(pos ? pos[row] : row % T) * C + c], d);
    }
}
static void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const int* tokens, int64_t BT,
                               int T, int C, cudaStream_t s, const int* pos = nullptr) {
    embedding_backward_kernel<<<grid_for(BT * C, 256), 256, 0, s>>>(dwte, dwpe, dout, tokens, BT, T, C, pos);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// LayerNorm (eps 1e-5). One warp per row; mean and rstd are kept for the backward pass.

__global__ void layernorm_forward_kernel(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w,
                                         const bf16* b, int64_t N, int C) {
    int64_t row = blockIdx.x * (int64_t)(blockDim.x / WARP) + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (row >= N) return;
    const bf16* x = inp + row * C;
    float sum = 0.0f;
    for (int c = lane; c < C; c += WARP) sum += (float)x[c];
    float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane; c < C; c += WARP) {
        float d = (float)x[c] - m;
        var += d * d;
    }
    float s = rsqrtf(warp_sum(var) / C + 1e-5f);
    bf16* o = out + row * C;
    for (int c = lane; c < C; c += WARP)
        o[c] = __float2bfloat16(((float)x[c] - m) * s * (float)w[c] + (float)b[c]);
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}
// the same in Pack8s: lane l reads elements [8l, 8l + 8) of every 256
__global__ void layernorm_forward_kernel8(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w,
                                          const bf16* b, int64_t N, int C) {
    int64_t row = blockIdx.x * (int64_t)(blockDim.x / WARP) + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (row >= N) return;  // the whole warp: one row per warp
    const bf16* x = inp + row * C;
    float sum = 0.0f;
    for (int c = lane * 8; c < C; c += WARP * 8) {
        const Pack8 v = load_pack8(x + c);
        for (int k = 0; k < 8; k++) sum += pack8_get(v, k);
    }
    float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane * 8; c < C; c += WARP * 8) {
        const Pack8 v = load_pack8(x + c);
        for (int k = 0; k < 8; k++) {
            float d = pack8_get(v, k) - m;
            var += d * d;
        }
    }
    float s = rsqrtf(warp_sum(var) / C + 1e-5f);
    bf16* o = out + row * C;
    for (int c = lane * 8; c < C; c += WARP * 8) {
        const Pack8 v = load_pack8(x + c), wv = load_pack8(w + c), bv = load_pack8(b + c);
        Pack8 y = {{0, 0, 0, 0}};
        for (int k = 0; k < 8; k++)
            pack8_set(y, k, (pack8_get(v, k) - m) * s * pack8_get(wv, k) + pack8_get(bv, k));
        store_pack8(o + c, y);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}
static void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w,
                              const bf16* b, int64_t N, int C, cudaStream_t s) {
    const int block = 256, rows_per_block = block / WARP;
    const unsigned grid = (unsigned)ceil_div64(N, rows_per_block);
    if (C % 8 == 0 && aligned16(out) && aligned16(inp) && aligned16(w) && aligned16(b))
        layernorm_forward_kernel8<<<grid, block, 0, s>>>(out, mean, rstd, inp, w, b, N, C);
    else layernorm_forward_kernel<<<grid, block, 0, s>>>(out, mean, rstd, inp, w, b, N, C);
    cudaCheckLaunch();
}

// dinp += d(LN)/d(inp) . dout  (+=: the residual's gradient also flows around the LN)
__global__ void layernorm_backward_input_kernel(bf16* dinp, const bf16* dout, const bf16* inp, const bf16* w,
                                                const float* mean, const float* rstd, int64_t N, int C) {
    int64_t row = blockIdx.x * (int64_t)(blockDim.x / WARP) + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (row >= N) return;
    const bf16* x = inp + row * C;
    const bf16* dy = dout + row * C;
    const float m = mean[row], s = rstd[row];
    float sum_dnorm = 0.0f, sum_dnorm_norm = 0.0f;
    for (int c = lane; c < C; c += WARP) {
        float dnorm = (float)w[c] * (float)dy[c];
        sum_dnorm += dnorm;
        sum_dnorm_norm += dnorm * ((float)x[c] - m) * s;
    }
    sum_dnorm = warp_sum(sum_dnorm) / C;
    sum_dnorm_norm = warp_sum(sum_dnorm_norm) / C;
    bf16* dx = dinp + row * C;
    for (int c = lane; c < C; c += WARP) {
        float norm = ((float)x[c] - m) * s;
        float dnorm = (float)w[c] * (float)dy[c];
        dx[c] = __float2bfloat16((float)dx[c] + s * (dnorm - sum_dnorm - norm * sum_dnorm_norm));
    }
}

// Column sums: a (32 x 8) block sums a tile in shared memory, then one atomic per column.
#define ROWS_PER_TILE   256
#define GPU_FILL_BLOCKS 528  // about 4 blocks on each of an H100's 132 SMs
// gridDim.y: at most 65535; the kernels loop over the remaining tiles.
static inline unsigned row_tiles_grid(int64_t N) {
    const int64_t tiles = ceil_div64(N, ROWS_PER_TILE);
    return (unsigned)(tiles < 65535 ? (tiles > 0 ? tiles : 1) : 65535);
}
__global__ void layernorm_backward_params_kernel(float* dw, float* db, const bf16* dout, const bf16* inp,
                                                 const float* mean, const float* rstd, int64_t N, int C) {
    __shared__ float sw[8][WARP + 1], sb[8][WARP + 1];
    int c = blockIdx.x * WARP + threadIdx.x;
    float aw = 0.0f, ab = 0.0f;
    if (c < C) {
        // stride gridDim.y (capped at 65535): any N is covered
        for (int64_t r0 = blockIdx.y * (int64_t)ROWS_PER_TILE; r0 < N;
             r0 += (int64_t)gridDim.y * ROWS_PER_TILE) {
            const int64_t r1 = min(N, r0 + ROWS_PER_TILE);
            for (int64_t r = r0 + threadIdx.y; r < r1; r += blockDim.y) {
                float dy = (float)dout[r * C + c];
                aw += dy * ((float)inp[r * C + c] - mean[r]) * rstd[r];
                ab += dy;
            }
        }
    }
    sw[threadIdx.y][threadIdx.x] = aw;
    sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        for (int k = 1; k < (int)blockDim.y; k++) {
            aw += sw[k][threadIdx.x];
            ab += sb[k][threadIdx.x];
        }
        atomicAdd(&dw[c], aw);
        atomicAdd(&db[c], ab);
    }
}

// A norm's backward in one kernel (the input's gradient and the parameters' in one pass over dout and inp): a
// warp takes a row at a time in Pack8s, the grid's rows in turn (at most NORM_BLOCKS blocks of 8 warps, about
// 4 on each of an H100's 132 SMs), and a block sums the parameters' gradients of its rows in shared memory
// (shared atomics), then adds them to the global ones, one atomic a column: the more rows a block takes, the
// fewer global atomics. The parameters' NORM_SUM_FLOATS floats must hold them all: wider rows take the two
// kernels.
#ifndef NORM_BLOCKS
#define NORM_BLOCKS 512  // the emulated tests' builds cap it lower (Makefile), so that warps loop over rows
#endif
#define NORM_SUM_FLOATS 8192  // 32 KiB of static shared memory
// Column 8j + k of a sum of C columns sits at k * (C / 8) + j: the 32 lanes of a warp add to 32 banks.
__device__ __forceinline__ int norm_sum_slot(int j, int k, int C) { return k * (C / 8) + j; }
__device__ __forceinline__ void norm_sums_clear(float* sums, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) sums[i] = 0.0f;
    __syncthreads();
}
// sums (C columns) added to dst (fp32, +=)
__device__ __forceinline__ void norm_sums_flush(float* dst, const float* sums, int C) {
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        atomicAdd(&dst[c], sums[norm_sum_slot(c / 8, c % 8, C)]);
}
static inline bool norm_backward_fused_fits(int C, int sums) {
    return C % 8 == 0 && (int64_t)C * sums <= NORM_SUM_FLOATS;
}
static inline unsigned norm_backward_fused_grid(int64_t N) {
    const int64_t blocks = ceil_div64(N, 8);  // 8 warps a block
    return (unsigned)(blocks < NORM_BLOCKS ? (blocks > 0 ? blocks : 1) : NORM_BLOCKS);
}

// layernorm_backward_input_kernel's math in Pack8s; fused: layernorm_backward_params_kernel's too
__global__ void layernorm_backward_kernel8(bf16* dinp, float* dw, float* db, const bf16* dout,
                                           const bf16* inp, const bf16* w, const float* mean,
                                           const float* rstd, int64_t N, int C, bool fused) {
    __shared__ float sums[NORM_SUM_FLOATS];  // dw's C, then db's C
    if (fused) norm_sums_clear(sums, 2 * C);
    const int warps = blockDim.x / WARP, lane = threadIdx.x % WARP;
    for (int64_t row = blockIdx.x * (int64_t)warps + threadIdx.x / WARP; row < N;
         row += (int64_t)gridDim.x * warps) {
        const bf16* x = inp + row * C;
        const bf16* dy = dout + row * C;
        const float m = mean[row], s = rstd[row];
        float sum_dnorm = 0.0f, sum_dnorm_norm = 0.0f;
        for (int c = lane * 8; c < C; c += WARP * 8) {
            const Pack8 xv = load_pack8(x + c), dv = load_pack8(dy + c), wv = load_pack8(w + c);
            for (int k = 0; k < 8; k++) {
                float dnorm = pack8_get(wv, k) * pack8_get(dv, k);
                sum_dnorm += dnorm;
                sum_dnorm_norm += dnorm * (pack8_get(xv, k) - m) * s;
            }
        }
        sum_dnorm = warp_sum(sum_dnorm) / C;
        sum_dnorm_norm = warp_sum(sum_dnorm_norm) / C;
        bf16* dx = dinp + row * C;
        for (int c = lane * 8; c < C; c += WARP * 8) {
            const Pack8 xv = load_pack8(x + c), dv = load_pack8(dy + c), wv = load_pack8(w + c);
            Pack8 g = load_pack8(dx + c);
            for (int k = 0; k < 8; k++) {
                float norm = (pack8_get(xv, k) - m) * s;
                float dnorm = pack8_get(wv, k) * pack8_get(dv, k);
                pack8_set(g, k, pack8_get(g, k) + s * (dnorm - sum_dnorm - norm * sum_dnorm_norm));
                if (fused) {
                    atomicAdd(&sums[norm_sum_slot(c / 8, k, C)], pack8_get(dv, k) * norm);
                    atomicAdd(&sums[C + norm_sum_slot(c / 8, k, C)], pack8_get(dv, k));
                }
            }
            store_pack8(dx + c, g);
        }
    }
    if (!fused) return;
    norm_sums_flush(dw, sums, C);
    norm_sums_flush(db, sums + C, C);
}

static void layernorm_backward(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp,
                               const bf16* w, const float* mean, const float* rstd, int64_t N, int C,
                               cudaStream_t s) {
    const int block = 256, rows_per_block = block / WARP;
    const unsigned grid_rows = (unsigned)ceil_div64(N, rows_per_block);
    const bool aligned = aligned16(dinp) && aligned16(dout) && aligned16(inp) && aligned16(w);
    const unsigned grid8 = norm_backward_fused_grid(N);
    if (aligned && norm_backward_fused_fits(C, 2)) {
        layernorm_backward_kernel8<<<grid8, block, 0, s>>>(dinp, dw, db, dout, inp, w, mean, rstd, N, C,
                                                           true);
        cudaCheckLaunch();
        return;
    }
    if (C % 8 == 0 && aligned)
        layernorm_backward_kernel8<<<grid8, block, 0, s>>>(dinp, dw, db, dout, inp, w, mean, rstd, N, C,
                                                           false);
    else layernorm_backward_input_kernel<<<grid_rows, block, 0, s>>>(dinp, dout, inp, w, mean, rstd, N, C);
    cudaCheckLaunch();
    dim3 grid((unsigned)ceil_div64(C, WARP), row_tiles_grid(N));
    layernorm_backward_params_kernel<<<grid, dim3(WARP, 8), 0, s>>>(dw, db, dout, inp, mean, rstd, N, C);
    cudaCheckLaunch();
}

// dbias[oc] += sum over rows of dout[row, oc]
__global__ void bias_backward_kernel(float* dbias, const bf16* dout, int64_t N, int OC) {
    __shared__ float sb[8][WARP + 1];
    int c = blockIdx.x * WARP + threadIdx.x;
    float acc = 0.0f;
    if (c < OC)
        for (int64_t r0 = blockIdx.y * (int64_t)ROWS_PER_TILE; r0 < N;
             r0 += (int64_t)gridDim.y * ROWS_PER_TILE) {
            const int64_t r1 = min(N, r0 + ROWS_PER_TILE);
            for (int64_t r = r0 + threadIdx.y; r < r1; r += blockDim.y) acc += (float)dout[r * OC + c];
        }
    sb[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < OC) {
        for (int k = 1; k < (int)blockDim.y; k++) acc += sb[k][threadIdx.x];
        atomicAdd(&dbias[c], acc);
    }
}
// The same in Pack8s: a thread sums 8 columns (a warp 256, 512 bytes of a row in one go). OC % 8 == 0, dout
// 16-byte aligned.
// Tiles of `rows` rows (<= ROWS_PER_TILE): narrow OC gives few column blocks, so the launcher cuts the rows
// finer until the grid fills the GPU.
__global__ void bias_backward_kernel8(float* dbias, const bf16* dout, int64_t N, int OC, int rows) {
    __shared__ float sb[8][WARP * 8 + 1];
    const int c0 = (blockIdx.x * WARP + threadIdx.x) * 8;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (c0 < OC)
        for (int64_t r0 = blockIdx.y * (int64_t)rows; r0 < N; r0 += (int64_t)gridDim.y * rows) {
            const int64_t r1 = min(N, r0 + rows);
            for (int64_t r = r0 + threadIdx.y; r < r1; r += blockDim.y) {
                const Pack8 v = load_pack8(dout + r * OC + c0);
                for (int k = 0; k < 8; k++) acc[k] += pack8_get(v, k);
            }
        }
    for (int k = 0; k < 8; k++) sb[threadIdx.y][k * WARP + threadIdx.x] = acc[k];  // lanes on distinct banks
    __syncthreads();
    if (threadIdx.y == 0 && c0 < OC)
        for (int k = 0; k < 8; k++) {
            float sum = acc[k];
            for (int y = 1; y < (int)blockDim.y; y++) sum += sb[y][k * WARP + threadIdx.x];
            atomicAdd(&dbias[c0 + k], sum);
        }
}
static void bias_backward(float* dbias, const bf16* dout, int64_t N, int OC, cudaStream_t s) {
    if (OC % 8 == 0 && aligned16(dout)) {
        const int64_t cols = ceil_div64(OC, WARP * 8);
        int rows = ROWS_PER_TILE;  // down to 32 rows (4 a warp) while the grid is under ~4 blocks an SM
        while (rows > 32 && cols * ceil_div64(N, rows) < GPU_FILL_BLOCKS) rows /= 2;
        const int64_t tiles = ceil_div64(N, rows);
        dim3 grid((unsigned)cols, (unsigned)(tiles < 65535 ? (tiles > 0 ? tiles : 1) : 65535));
        bias_backward_kernel8<<<grid, dim3(WARP, 8), 0, s>>>(dbias, dout, N, OC, rows);
    } else {
        dim3 grid((unsigned)ceil_div64(OC, WARP), row_tiles_grid(N));
        bias_backward_kernel<<<grid, dim3(WARP, 8), 0, s>>>(dbias, dout, N, OC);
    }
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// Element-wise: bias, residual, GELU; in Pack8s (one column index per 8 elements) where the shape allows.

// out[row, :] += bias (+ residual[row, :] when residual is not NULL)
__global__ void add_bias_kernel(bf16* out, const bf16* bias, const bf16* residual, int64_t N, int OC) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * OC;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = (float)out[i] + (float)bias[i % OC];
        if (residual) v += (float)residual[i];
        out[i] = __float2bfloat16(v);
    }
}
__global__ void add_bias_kernel8(bf16* out, const bf16* bias, const bf16* residual, int64_t N, int OC) {
    for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * 8; i < N * OC;
         i += (int64_t)gridDim.x * blockDim.x * 8) {
        Pack8 o = load_pack8(out + i);
        const Pack8 b = load_pack8(bias + i % OC);
        Pack8 r = {{0, 0, 0, 0}};
        if (residual) r = load_pack8(residual + i);
        for (int k = 0; k < 8; k++) {
            float v = pack8_get(o, k) + pack8_get(b, k);
            if (residual) v += pack8_get(r, k);
            pack8_set(o, k, v);
        }
        store_pack8(out + i, o);
    }
}
static void add_bias(bf16* out, const bf16* bias, const bf16* residual, int64_t N, int OC, cudaStream_t s) {
    if (OC % 8 == 0 && aligned16(out) && aligned16(bias) && (!residual || aligned16(residual)))
        add_bias_kernel8<<<grid_for(N * OC / 8, 256), 256, 0, s>>>(out, bias, residual, N, OC);
    else add_bias_kernel<<<grid_for(N * OC, 256), 256, 0, s>>>(out, bias, residual, N, OC);
    cudaCheckLaunch();
}

// GPT-2's GELU, 0.5 x (1 + tanh(u)), as x / (1 + exp(-2u)): accurate at every bf16 input.
#define GELU_SCALE 0.7978845608028654f  // sqrt(2/pi)
#define GELU_CUBE  0.044715f
__device__ __forceinline__ float gelu_half_one_plus_tanh(float u, float* sech2) {
    const float e = expf(-2.0f * fabsf(u));
    const float r = 1.0f / (1.0f + e);
    if (sech2) *sech2 = 4.0f * e * r * r;
    return u >= 0.0f ? r : e * r;
}
__device__ __forceinline__ float gelu_tanh(float x) {
    return x * gelu_half_one_plus_tanh(GELU_SCALE * (x + GELU_CUBE * x * x * x), nullptr);
}

// Bias and GELU in one pass: pre += bias (kept), out = gelu(pre).
__global__ void bias_gelu_forward_kernel(bf16* pre, bf16* out, const bf16* bias, int64_t N, int OC) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * OC;
         i += (int64_t)gridDim.x * blockDim.x) {
        const bf16 x = __float2bfloat16((float)pre[i] + (float)bias[i % OC]);
        pre[i] = x;
        out[i] = __float2bfloat16(gelu_tanh((float)x));
    }
}
__global__ void bias_gelu_forward_kernel8(bf16* pre, bf16* out, const bf16* bias, int64_t N, int OC) {
    for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * 8; i < N * OC;
         i += (int64_t)gridDim.x * blockDim.x * 8) {
        Pack8 x = load_pack8(pre + i), y = {{0, 0, 0, 0}};
        const Pack8 b = load_pack8(bias + i % OC);
        for (int k = 0; k < 8; k++) pack8_set(x, k, pack8_get(x, k) + pack8_get(b, k));
        for (int k = 0; k < 8; k++)
            pack8_set(y, k, gelu_tanh(pack8_get(x, k)));  // of the rounded pre-activation
        store_pack8(pre + i, x);
        store_pack8(out + i, y);
    }
}
static void bias_gelu_forward(bf16* pre, bf16* out, const bf16* bias, int64_t N, int OC, cudaStream_t s) {
    if (OC % 8 == 0 && aligned16(pre) && aligned16(out) && aligned16(bias))
        bias_gelu_forward_kernel8<<<grid_for(N * OC / 8, 256), 256, 0, s>>>(pre, out, bias, N, OC);
    else bias_gelu_forward_kernel<<<grid_for(N * OC, 256), 256, 0, s>>>(pre, out, bias, N, OC);
    cudaCheckLaunch();
}

// out = gelu(inp), bit for bit bias_gelu_forward's: a layer with kept activations redoes its GELU.
__global__ void gelu_forward_kernel(bf16* out, const bf16* inp, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16(gelu_tanh((float)inp[i]));
}
__global__ void gelu_forward_kernel8(bf16* out, const bf16* inp, int64_t n) {
    for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * 8; i < n;
         i += (int64_t)gridDim.x * blockDim.x * 8) {
        const Pack8 x = load_pack8(inp + i);
        Pack8 y = {{0, 0, 0, 0}};
        for (int k = 0; k < 8; k++) pack8_set(y, k, gelu_tanh(pack8_get(x, k)));
        store_pack8(out + i, y);
    }
}
static void gelu_forward(bf16* out, const bf16* inp, int64_t n, cudaStream_t s) {
    if (n % 8 == 0 && aligned16(out) && aligned16(inp))
        gelu_forward_kernel8<<<grid_for(n / 8, 256), 256, 0, s>>>(out, inp, n);
    else gelu_forward_kernel<<<grid_for(n, 256), 256, 0, s>>>(out, inp, n);
    cudaCheckLaunch();
}

// d_inout = gelu'(inp) * d_inout, in place
__device__ __forceinline__ float gelu_tanh_grad(float x) {  // see gelu_tanh
    float sech2;
    const float s = gelu_half_one_plus_tanh(GELU_SCALE * (x + GELU_CUBE * x * x * x), &sech2);
    return s + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
}
__global__ void gelu_backward_kernel(bf16* d_inout, const bf16* inp, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        d_inout[i] = __float2bfloat16(gelu_tanh_grad((float)inp[i]) * (float)d_inout[i]);
}
__global__ void gelu_backward_kernel8(bf16* d_inout, const bf16* inp, int64_t n) {
    for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * 8; i < n;
         i += (int64_t)gridDim.x * blockDim.x * 8) {
        Pack8 d = load_pack8(d_inout + i);
        const Pack8 x = load_pack8(inp + i);
        for (int k = 0; k < 8; k++) pack8_set(d, k, gelu_tanh_grad(pack8_get(x, k)) * pack8_get(d, k));
        store_pack8(d_inout + i, d);
    }
}
static void gelu_backward(bf16* d_inout, const bf16* inp, int64_t n, cudaStream_t s) {
    if (n % 8 == 0 && aligned16(d_inout) && aligned16(inp))
        gelu_backward_kernel8<<<grid_for(n / 8, 256), 256, 0, s>>>(d_inout, inp, n);
    else gelu_backward_kernel<<<grid_for(n, 256), 256, 0, s>>>(d_inout, inp, n);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// Causal softmax over (B*NH, T, T) scores, in place, a warp a row; exact zeros outside the mask.

__device__ __forceinline__ int softmax_first_key(const int* pos, int64_t row, int T, int NH, int t1) {
    return pos ? t1 - pos[row / ((int64_t)NH * T) * T + t1] : 0;
}
__global__ void softmax_causal_forward_kernel(bf16* att, int64_t rows, int T, const int* pos, int NH) {
    int64_t row = blockIdx.x * (int64_t)(blockDim.x / WARP) + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (row >= rows) return;
    int t1 = (int)(row % T), lo = softmax_first_key(pos, row, T, NH, t1);
    bf16* a = att + row * T;
    float mx = -INFINITY;
    for (int j = lo + lane; j <= t1; j += WARP) mx = fmaxf(mx, (float)a[j]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int j = lo + lane; j <= t1; j += WARP) sum += expf((float)a[j] - mx);
    float inv = 1.0f / warp_sum(sum);
    for (int j = lane; j < T; j += WARP)
        a[j] = __float2bfloat16(j <= t1 && j >= lo ? expf((float)a[j] - mx) * inv : 0.0f);
}
// pos (B*T, device, may be NULL) and NH: the mask of packed sequences
static void softmax_causal_forward(bf16* att, int64_t rows, int T, cudaStream_t s, const int* pos = nullptr,
                                   int NH = 1) {
    const int block = 256;
    softmax_causal_forward_kernel<<<(unsigned)ceil_div64(rows, block / WARP), block, 0, s>>>(att, rows, T,
                                                                                             pos, NH);
    cudaCheckLaunch();
}

// d_score = att * (d_att - sum_j att_j d_att_j), written in place over d_att; zero outside the mask.
__global__ void softmax_causal_backward_kernel(bf16* datt, const bf16* att, int64_t rows, int T,
                                               const int* pos, int NH) {
    int64_t row = blockIdx.x * (int64_t)(blockDim.x / WARP) + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (row >= rows) return;
    int t1 = (int)(row % T), lo = softmax_first_key(pos, row, T, NH, t1);
    const bf16* a = att + row * T;
    bf16* d = datt + row * T;
    float dot = 0.0f;
    for (int j = lo + lane; j <= t1; j += WARP) dot += (float)a[j] * (float)d[j];
    dot = warp_sum(dot);
    for (int j = lane; j < T; j += WARP)
        d[j] = __float2bfloat16(j <= t1 && j >= lo ? (float)a[j] * ((float)d[j] - dot) : 0.0f);
}
static void softmax_causal_backward(bf16* datt, const bf16* att, int64_t rows, int T, cudaStream_t s,
                                    const int* pos = nullptr, int NH = 1) {
    const int block = 256;
    softmax_causal_backward_kernel<<<(unsigned)ceil_div64(rows, block / WARP), block, 0, s>>>(datt, att, rows,
                                                                                              T, pos, NH);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// A block a row of the vocabulary (fused_classifier, vocab_host.cuh's chunks): its threads. The emulated
// trainer builds take fewer (Makefile): a block's threads are fibers there, each barrier a switch per thread,
// and the tests' rows are short. The kernels take any multiple of 32 up to 1024.
#ifndef ROW_BLOCK_THREADS
#define ROW_BLOCK_THREADS 1024
#endif

// Softmax + cross-entropy over the first V columns: losses[row] = logsumexp - logit[target].
// dloss_scale != 0: logits become (softmax - one_hot) * dloss_scale in place.

__global__ void __launch_bounds__(1024)
    fused_classifier_kernel(bf16* logits, float* losses, const int* targets, int64_t N, int V, int Vp,
                            float dloss_scale) {
    __shared__ float shared[WARP];
    int64_t row = blockIdx.x;
    bf16* x = logits + row * Vp;
    // target -1: loss 0, gradient 0; every row still runs the reductions (the emulation needs it).
    const int target = targets[row];
    const MaxSumExp r = block_max_sumexp(x, V, shared);
    const float mx = r.max, sum = r.sum;
    if (threadIdx.x == 0) losses[row] = target < 0 ? 0.0f : logf(sum) + mx - (float)x[target];
    if (dloss_scale == 0.0f) return;
    __syncthreads();  // everyone has read x[target] before it is overwritten
    const float inv = 1.0f / sum;
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
        float g = 0.0f;
        if (i < V && target >= 0)
            g = (expf((float)x[i] - mx) * inv - (i == target ? 1.0f : 0.0f)) * dloss_scale;
        x[i] = __float2bfloat16(g);
    }
}
static void fused_classifier(bf16* logits, float* losses, const int* targets, int64_t N, int V, int Vp,
                             float dloss_scale, cudaStream_t s) {
    fused_classifier_kernel<<<(unsigned)N, ROW_BLOCK_THREADS, 0, s>>>(logits, losses, targets, N, V, Vp,
                                                                      dloss_scale);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// fp32 gradients -> bf16 for the host, and their sum of squares (in double), in one read.

__global__ void grads_to_bf16_sumsq_kernel(bf16* out, const float* in, int64_t n, double* sumsq) {
    __shared__ double shared[WARP];
    double acc = 0.0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float g = in[i];
        acc += (double)g * g;
        if (out) out[i] = __float2bfloat16(g);
    }
    acc = block_sum(acc, shared);
    if (threadIdx.x == 0) atomicAdd(sumsq, acc);
}
static void grads_to_bf16_sumsq(bf16* out, const float* in, int64_t n, double* sumsq, cudaStream_t s) {
    grads_to_bf16_sumsq_kernel<<<grid_for(n, 512), 512, 0, s>>>(out, in, n, sumsq);
    cudaCheckLaunch();
}

// AdamW's GPU form, for parameters kept on the GPU: adamw.h's adamw_element, the CPU's bits.
__global__ void adamw_kernel(float* p, const float* grad, float* m, float* v, bf16* p_bf16, int64_t n,
                             AdamWConstants c) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float pp = adamw_element(p[i], grad[i], m + i, v + i, c);
        p[i] = pp;
        p_bf16[i] = __float2bfloat16(pp);
    }
}
static void adamw_gpu(float* p, const float* grad, float* m, float* v, bf16* p_bf16, int64_t n,
                      const AdamWArgs* args, cudaStream_t s) {
    adamw_kernel<<<grid_for(n, 256), 256, 0, s>>>(p, grad, m, v, p_bf16, n, adamw_constants(args));
    cudaCheckLaunch();
}

// Mean of the per-position losses; normalizer != 0: their sum times it.
__global__ void __launch_bounds__(1024)
    mean_loss_kernel(float* out, const float* losses, int64_t N, float normalizer) {
    __shared__ float shared[WARP];
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) acc += losses[i];
    acc = block_sum(acc, shared);
    if (threadIdx.x == 0) *out = normalizer != 0.0f ? acc * normalizer : acc / (float)N;
}
static void mean_loss(float* out, const float* losses, int64_t N, cudaStream_t s, float normalizer = 0.0f) {
    mean_loss_kernel<<<1, 1024, 0, s>>>(out, losses, N, normalizer);
    cudaCheckLaunch();
}

// Loads every kernel now: lazy loading would take memory the fit check counted as free.
static void kernels_load() {
    const void* kernels[] = {(const void*)embedding_forward_kernel,
                             (const void*)embedding_backward_kernel,
                             (const void*)layernorm_forward_kernel,
                             (const void*)layernorm_forward_kernel8,
                             (const void*)layernorm_backward_input_kernel,
                             (const void*)layernorm_backward_kernel8,
                             (const void*)layernorm_backward_params_kernel,
                             (const void*)bias_backward_kernel,
                             (const void*)bias_backward_kernel8,
                             (const void*)add_bias_kernel,
                             (const void*)add_bias_kernel8,
                             (const void*)bias_gelu_forward_kernel,
                             (const void*)bias_gelu_forward_kernel8,
                             (const void*)gelu_forward_kernel,
                             (const void*)gelu_forward_kernel8,
                             (const void*)gelu_backward_kernel,
                             (const void*)gelu_backward_kernel8,
                             (const void*)softmax_causal_forward_kernel,
                             (const void*)softmax_causal_backward_kernel,
                             (const void*)fused_classifier_kernel,
                             (const void*)grads_to_bf16_sumsq_kernel,
                             (const void*)adamw_kernel,
                             (const void*)mean_loss_kernel};
    cudaFuncAttributes attr;
    for (const void* k : kernels) cudaCheck(cudaFuncGetAttributes(&attr, k));
}
