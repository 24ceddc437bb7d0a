// llama_kernels.cuh — Llama's kernels beyond GPT-2's: RMSNorm, RoPE, SwiGLU.
// bf16 in and out, fp32 math. Launchers share names with llama_cpu.h's fp32 twins.
// Not here: attention (attention.cuh, flash_attention.cuh), GEMMs (matmul.cuh).

// N = B*T rows, C channels, hd a head, H = llama_cpu.h's I.
#pragma once
#include <vector>
#include "cuda_common.h"  // defines: bf16, cudaCheck, cudaCheckLaunch, grid_for, ceil_div64
#include "kernels.cuh"    // defines: WARP, warp_sum, ROWS_PER_TILE, row_tiles_grid
#include "llama_cpu.h"    // defines: LlamaConfig, llama_rope_inv_freq (RoPE's frequencies, one rule)

// ----------------------------------------------------------------------------
// RMSNorm: out = weight * (x * rstd), rstd = 1 / sqrt(mean(x^2) + eps).

__global__ void rmsnorm_forward_kernel(bf16* out, float* rstd, const bf16* inp, const bf16* weight, int64_t N,
                                       int C, float eps) {
    const int64_t row = blockIdx.x * (int64_t)(blockDim.x / WARP) + threadIdx.x / WARP;
    const int lane = threadIdx.x % WARP;
    if (row >= N) return;  // the whole warp: one row per warp
    const bf16* x = inp + row * C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += WARP) ss += (float)x[c] * (float)x[c];
    const float s = rsqrtf(warp_sum(ss) / C + eps);
    bf16* o = out + row * C;
    for (int c = lane; c < C; c += WARP) o[c] = __float2bfloat16((float)weight[c] * ((float)x[c] * s));
    if (lane == 0) rstd[row] = s;  // kept for the backward pass
}
// the same in Pack8s (16-byte moves): lane l reads elements [8l, 8l + 8) of every 256
__global__ void rmsnorm_forward_kernel8(bf16* out, float* rstd, const bf16* inp, const bf16* weight,
                                        int64_t N, int C, float eps) {
    const int64_t row = blockIdx.x * (int64_t)(blockDim.x / WARP) + threadIdx.x / WARP;
    const int lane = threadIdx.x % WARP;
    if (row >= N) return;
    const bf16* x = inp + row * C;
    float ss = 0.0f;
    for (int c = lane * 8; c < C; c += WARP * 8) {
        const Pack8 v = load_pack8(x + c);
        for (int k = 0; k < 8; k++) ss += pack8_get(v, k) * pack8_get(v, k);
    }
    const float s = rsqrtf(warp_sum(ss) / C + eps);
    bf16* o = out + row * C;
    for (int c = lane * 8; c < C; c += WARP * 8) {
        const Pack8 v = load_pack8(x + c), w = load_pack8(weight + c);
        Pack8 y = {{0, 0, 0, 0}};
        for (int k = 0; k < 8; k++) pack8_set(y, k, pack8_get(w, k) * (pack8_get(v, k) * s));
        store_pack8(o + c, y);
    }
    if (lane == 0) rstd[row] = s;
}
static void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const bf16* weight, int64_t N, int C,
                            float eps, cudaStream_t s) {
    const int block = 256, rows_per_block = block / WARP;
    const unsigned grid = (unsigned)ceil_div64(N, rows_per_block);
    if (C % 8 == 0 && aligned16(out) && aligned16(inp) && aligned16(weight))
        rmsnorm_forward_kernel8<<<grid, block, 0, s>>>(out, rstd, inp, weight, N, C, eps);
    else rmsnorm_forward_kernel<<<grid, block, 0, s>>>(out, rstd, inp, weight, N, C, eps);
    cudaCheckLaunch();
}

// dinp += rstd * (g - x * rstd^2 * mean(g * x)), g = dout * weight
__global__ void rmsnorm_backward_input_kernel(bf16* dinp, const bf16* dout, const bf16* inp,
                                              const bf16* weight, const float* rstd, int64_t N, int C) {
    const int64_t row = blockIdx.x * (int64_t)(blockDim.x / WARP) + threadIdx.x / WARP;
    const int lane = threadIdx.x % WARP;
    if (row >= N) return;
    const bf16* x = inp + row * C;
    const bf16* dy = dout + row * C;
    float gx = 0.0f;
    for (int c = lane; c < C; c += WARP) gx += (float)dy[c] * (float)weight[c] * (float)x[c];
    const float gx_mean = warp_sum(gx) / C;
    const float s = rstd[row];
    bf16* dx = dinp + row * C;
    for (int c = lane; c < C; c += WARP) {
        const float g = (float)dy[c] * (float)weight[c];
        // +=: the residual's gradient also flows around the norm
        dx[c] = __float2bfloat16((float)dx[c] + s * (g - (float)x[c] * s * s * gx_mean));
    }
}

// dweight[c] += sum over rows of dout * x * rstd
__global__ void rmsnorm_backward_weight_kernel(float* dweight, const bf16* dout, const bf16* inp,
                                               const float* rstd, int64_t N, int C) {
    __shared__ float sw[8][WARP + 1];
    const int c = blockIdx.x * WARP + threadIdx.x;
    float acc = 0.0f;
    if (c < C)
        // stride gridDim.y (capped at 65535): any N is covered
        for (int64_t r0 = blockIdx.y * (int64_t)ROWS_PER_TILE; r0 < N;
             r0 += (int64_t)gridDim.y * ROWS_PER_TILE) {
            const int64_t r1 = min(N, r0 + ROWS_PER_TILE);
            for (int64_t r = r0 + threadIdx.y; r < r1; r += blockDim.y)
                acc += (float)dout[r * C + c] * (float)inp[r * C + c] * rstd[r];
        }
    sw[threadIdx.y][threadIdx.x] = acc;  // the block's 8 row groups summed in shared memory
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {  // then one atomic per column
        for (int k = 1; k < (int)blockDim.y; k++) acc += sw[k][threadIdx.x];
        atomicAdd(&dweight[c], acc);
    }
}
// rmsnorm_backward_input_kernel's math in Pack8s; fused: rmsnorm_backward_weight_kernel's too (kernels.cuh's
// fused norm backward)
__global__ void rmsnorm_backward_kernel8(bf16* dinp, float* dweight, const bf16* dout, const bf16* inp,
                                         const bf16* weight, const float* rstd, int64_t N, int C,
                                         bool fused) {
    __shared__ float sums[NORM_SUM_FLOATS];  // dweight's C
    if (fused) norm_sums_clear(sums, C);
    const int warps = blockDim.x / WARP, lane = threadIdx.x % WARP;
    for (int64_t row = blockIdx.x * (int64_t)warps + threadIdx.x / WARP; row < N;
         row += (int64_t)gridDim.x * warps) {
        const bf16* x = inp + row * C;
        const bf16* dy = dout + row * C;
        float gx = 0.0f;
        for (int c = lane * 8; c < C; c += WARP * 8) {
            const Pack8 xv = load_pack8(x + c), dv = load_pack8(dy + c), wv = load_pack8(weight + c);
            for (int k = 0; k < 8; k++) gx += pack8_get(dv, k) * pack8_get(wv, k) * pack8_get(xv, k);
        }
        const float gx_mean = warp_sum(gx) / C;
        const float s = rstd[row];
        bf16* dx = dinp + row * C;
        for (int c = lane * 8; c < C; c += WARP * 8) {
            const Pack8 xv = load_pack8(x + c), dv = load_pack8(dy + c), wv = load_pack8(weight + c);
            Pack8 d = load_pack8(dx + c);
            for (int k = 0; k < 8; k++) {
                const float g = pack8_get(dv, k) * pack8_get(wv, k);
                pack8_set(d, k, pack8_get(d, k) + s * (g - pack8_get(xv, k) * s * s * gx_mean));
                if (fused)
                    atomicAdd(&sums[norm_sum_slot(c / 8, k, C)], pack8_get(dv, k) * pack8_get(xv, k) * s);
            }
            store_pack8(dx + c, d);
        }
    }
    if (fused) norm_sums_flush(dweight, sums, C);
}
static void rmsnorm_backward(bf16* dinp, float* dweight, const bf16* dout, const bf16* inp,
                             const bf16* weight, const float* rstd, int64_t N, int C, cudaStream_t s) {
    const int block = 256, rows_per_block = block / WARP;
    const unsigned grid_rows = (unsigned)ceil_div64(N, rows_per_block);
    const bool aligned = aligned16(dinp) && aligned16(dout) && aligned16(inp) && aligned16(weight);
    const unsigned grid8 = norm_backward_fused_grid(N);
    if (aligned && norm_backward_fused_fits(C, 1)) {
        rmsnorm_backward_kernel8<<<grid8, block, 0, s>>>(dinp, dweight, dout, inp, weight, rstd, N, C, true);
        cudaCheckLaunch();
        return;
    }
    if (C % 8 == 0 && aligned)
        rmsnorm_backward_kernel8<<<grid8, block, 0, s>>>(dinp, dweight, dout, inp, weight, rstd, N, C, false);
    else rmsnorm_backward_input_kernel<<<grid_rows, block, 0, s>>>(dinp, dout, inp, weight, rstd, N, C);
    cudaCheckLaunch();
    dim3 grid((unsigned)ceil_div64(C, WARP), row_tiles_grid(N));
    rmsnorm_backward_weight_kernel<<<grid, dim3(WARP, 8), 0, s>>>(dweight, dout, inp, rstd, N, C);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// RoPE rotates q and k in place in qkv rows.

// transformers' rotate_half: channel i pairs with i + hd/2.

// The backward rotates by -angle (sign = -1), the transposed rotation.

// d_inv_freq (hd/2, device) = llama_rope_inv_freq(c), plain or llama3-scaled.
static void rope_inv_freq_upload(float* d_inv_freq, const LlamaConfig* c) {
    std::vector<float> inv_freq((size_t)(c->head_dim / 2));
    llama_rope_inv_freq(c, inv_freq.data());
    cudaCheck(
        cudaMemcpy(d_inv_freq, inv_freq.data(), inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(
        cudaDeviceSynchronize());  // kernels on non-blocking streams do not wait for cudaMemcpy's stream
}

// One thread a (row, pair i), all q, k heads.
__global__ void rope_rotate_kernel(bf16* qkv, const float* inv_freq, int64_t N, int T, int NH, int NKV,
                                   int hd, float sign, const int* pos) {
    const int half = hd / 2;
    const int64_t row_width = (int64_t)(NH + 2 * NKV) * hd;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < N * half;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = idx / half;
        const int i = (int)(idx % half);
        const int t = pos ? pos[row] : (int)(row % T);  // pos (device): packed sequences
        const float angle = (float)t * inv_freq[i];     // fp32, as llama_cpu.h's rope_table
        // double: --use_fast_math's __sinf/__cosf are inexact at large angles
        double sin_d, cos_d;
        sincos((double)angle, &sin_d, &cos_d);
        const float cs = (float)cos_d, sn = sign * (float)sin_d;
        bf16* v = qkv + row * row_width;
        for (int h = 0; h < NH + NKV; h++, v += hd) {
            const float x1 = (float)v[i], x2 = (float)v[i + half];
            v[i] = __float2bfloat16(x1 * cs - x2 * sn);
            v[i + half] = __float2bfloat16(x2 * cs + x1 * sn);
        }
    }
}
// The same in Pack8s: one thread a (row, 8 pairs i0..i0+7), 16-byte moves of both halves of every head; each
// pair's angle and rounding as there. hd % 16 == 0, qkv 16-byte aligned.
__global__ void rope_rotate_kernel8(bf16* qkv, const float* inv_freq, int64_t N, int T, int NH, int NKV,
                                    int hd, float sign, const int* pos) {
    const int half = hd / 2, groups = half / 8;
    const int64_t row_width = (int64_t)(NH + 2 * NKV) * hd;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < N * groups;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = idx / groups;
        const int i0 = (int)(idx % groups) * 8;
        const int t = pos ? pos[row] : (int)(row % T);
        float cs[8], sn[8];
        for (int k = 0; k < 8; k++) {
            double sin_d, cos_d;
            sincos((double)((float)t * inv_freq[i0 + k]), &sin_d, &cos_d);
            cs[k] = (float)cos_d;
            sn[k] = sign * (float)sin_d;
        }
        // HEADS heads at a time, all loads before any store: more 16-byte loads in flight a thread
        constexpr int HEADS = 4;
        for (int h0 = 0; h0 < NH + NKV; h0 += HEADS) {
            bf16* v = qkv + row * row_width + (int64_t)h0 * hd + i0;
            const int nh = min(HEADS, NH + NKV - h0);
            Pack8 a[HEADS], b[HEADS];
            for (int j = 0; j < nh; j++) a[j] = load_pack8(v + j * hd), b[j] = load_pack8(v + j * hd + half);
            for (int j = 0; j < nh; j++) {
                Pack8 ra = a[j], rb = b[j];
                for (int k = 0; k < 8; k++) {
                    const float x1 = pack8_get(a[j], k), x2 = pack8_get(b[j], k);
                    pack8_set(ra, k, x1 * cs[k] - x2 * sn[k]);
                    pack8_set(rb, k, x2 * cs[k] + x1 * sn[k]);
                }
                store_pack8(v + j * hd, ra);
                store_pack8(v + j * hd + half, rb);
            }
        }
    }
}
// sign 1: the forward; -1: the backward (the transposed rotation)
static void rope_rotate(bf16* qkv, const float* inv_freq, int64_t N, int T, int NH, int NKV, int hd,
                        float sign, cudaStream_t s, const int* pos) {
    if (hd % 16 == 0 && aligned16(qkv)) {
        const int64_t n = N * (hd / 16);
        rope_rotate_kernel8<<<grid_for(n, 256), 256, 0, s>>>(qkv, inv_freq, N, T, NH, NKV, hd, sign, pos);
    } else {
        const int64_t n = N * (hd / 2);
        rope_rotate_kernel<<<grid_for(n, 256), 256, 0, s>>>(qkv, inv_freq, N, T, NH, NKV, hd, sign, pos);
    }
    cudaCheckLaunch();
}
static void rope_forward(bf16* qkv, const float* inv_freq, int64_t N, int T, int NH, int NKV, int hd,
                         cudaStream_t s, const int* pos = nullptr) {
    rope_rotate(qkv, inv_freq, N, T, NH, NKV, hd, 1.0f, s, pos);
}
// in place on dq, dk. dv is untouched.
static void rope_backward(bf16* dqkv, const float* inv_freq, int64_t N, int T, int NH, int NKV, int hd,
                          cudaStream_t s, const int* pos = nullptr) {
    rope_rotate(dqkv, inv_freq, N, T, NH, NKV, hd, -1.0f, s, pos);
}

// ----------------------------------------------------------------------------
// SwiGLU: gate_up rows (2H) are H gate, then H up columns.
// [w_gate; w_up] is one (2H, C) matrix: one matmul.

// out (N, H) = silu(gate) * up
__global__ void swiglu_forward_kernel(bf16* out, const bf16* gate_up, int64_t N, int H) {
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < N * H;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const bf16* gu = gate_up + (idx / H) * 2 * H + idx % H;
        const float g = (float)gu[0], u = (float)gu[H];
        out[idx] = __float2bfloat16(g / (1.0f + expf(-g)) * u);
    }
}
// the same 8 columns at a time (16-byte moves); bit for bit the scalar kernel's
__global__ void swiglu_forward_kernel8(bf16* out, const bf16* gate_up, int64_t N, int H) {
    for (int64_t idx = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * 8; idx < N * H;
         idx += (int64_t)gridDim.x * blockDim.x * 8) {
        const bf16* gu = gate_up + (idx / H) * 2 * H + idx % H;
        const Pack8 g = load_pack8(gu), u = load_pack8(gu + H);
        Pack8 y = {{0, 0, 0, 0}};
        for (int k = 0; k < 8; k++) {
            const float x = pack8_get(g, k);
            pack8_set(y, k, x / (1.0f + expf(-x)) * pack8_get(u, k));
        }
        store_pack8(out + idx, y);
    }
}
static void swiglu_forward(bf16* out, const bf16* gate_up, int64_t N, int H, cudaStream_t s) {
    if (H % 8 == 0 && aligned16(out) && aligned16(gate_up))
        swiglu_forward_kernel8<<<grid_for(N * H / 8, 256), 256, 0, s>>>(out, gate_up, N, H);
    else swiglu_forward_kernel<<<grid_for(N * H, 256), 256, 0, s>>>(out, gate_up, N, H);
    cudaCheckLaunch();
}

// dgate = dout * up * silu'(gate), dup = dout * silu(gate).
// Overwrites dgate_up, which must not alias gate_up.
__global__ void swiglu_backward_kernel(bf16* dgate_up, const bf16* dout, const bf16* gate_up, int64_t N,
                                       int H) {
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < N * H;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t at = (idx / H) * 2 * H + idx % H;
        const float x = (float)gate_up[at], u = (float)gate_up[at + H], d = (float)dout[idx];
        const float s = 1.0f / (1.0f + expf(-x));
        dgate_up[at] = __float2bfloat16(d * u * (s * (1.0f + x * (1.0f - s))));  // silu'(x), s = sigmoid(x)
        dgate_up[at + H] = __float2bfloat16(d * (x * s));
    }
}
__global__ void swiglu_backward_kernel8(bf16* dgate_up, const bf16* dout, const bf16* gate_up, int64_t N,
                                        int H) {
    for (int64_t idx = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * 8; idx < N * H;
         idx += (int64_t)gridDim.x * blockDim.x * 8) {
        const int64_t at = (idx / H) * 2 * H + idx % H;
        const Pack8 g = load_pack8(gate_up + at), u = load_pack8(gate_up + at + H),
                    d = load_pack8(dout + idx);
        Pack8 dg = {{0, 0, 0, 0}}, du = {{0, 0, 0, 0}};
        for (int k = 0; k < 8; k++) {
            const float x = pack8_get(g, k), dk = pack8_get(d, k);
            const float s = 1.0f / (1.0f + expf(-x));
            pack8_set(dg, k, dk * pack8_get(u, k) * (s * (1.0f + x * (1.0f - s))));
            pack8_set(du, k, dk * (x * s));
        }
        store_pack8(dgate_up + at, dg);
        store_pack8(dgate_up + at + H, du);
    }
}
static void swiglu_backward(bf16* dgate_up, const bf16* dout, const bf16* gate_up, int64_t N, int H,
                            cudaStream_t s) {
    if (H % 8 == 0 && aligned16(dgate_up) && aligned16(dout) && aligned16(gate_up))
        swiglu_backward_kernel8<<<grid_for(N * H / 8, 256), 256, 0, s>>>(dgate_up, dout, gate_up, N, H);
    else swiglu_backward_kernel<<<grid_for(N * H, 256), 256, 0, s>>>(dgate_up, dout, gate_up, N, H);
    cudaCheckLaunch();
}

// Loads the Llama family's kernels now, as kernels_load does GPT-2's.
static void llama_kernels_load() {
    const void* kernels[] = {
        (const void*)rmsnorm_forward_kernel,        (const void*)rmsnorm_forward_kernel8,
        (const void*)rmsnorm_backward_input_kernel, (const void*)rmsnorm_backward_weight_kernel,
        (const void*)rmsnorm_backward_kernel8,      (const void*)rope_rotate_kernel,
        (const void*)rope_rotate_kernel8,           (const void*)swiglu_forward_kernel,
        (const void*)swiglu_forward_kernel8,        (const void*)swiglu_backward_kernel,
        (const void*)swiglu_backward_kernel8};
    cudaFuncAttributes attr;
    for (const void* k : kernels) cudaCheck(cudaFuncGetAttributes(&attr, k));
}
