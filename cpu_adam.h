// cpu_adam.h — the CPU side of the optimizer: AdamW over fp32 weights and moments that also writes the bf16
// copy streamed to the GPU next; the squared gradient norm; fp32 -> bf16 conversion; scalar bf16 helpers.
// It does not choose hyperparameters or which tensors decay (adamw.h), and moves nothing to the GPU.
// No intrinsics here, so nvcc can include it; bf16 values are uint16_t (the upper half of an IEEE float).
#pragma once
#include <stdint.h>
#include <string.h>

// float -> bf16, round to nearest, ties to even. Overflow rounds to +-Inf exactly as RNE says (the largest
// finite float becomes Inf), subnormals are rounded (not flushed), -0 stays -0, and every NaN stays a NaN
// with its sign and the quiet bit set: without that, a NaN whose payload sits only in the low 16 bits
// would truncate to Inf. The vectorized convert_f32_to_bf16 / adamw_update_* give the same bits.
static inline uint16_t float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x0040u);  // NaN: keep it, make it quiet
    u += 0x7FFFu + ((u >> 16) & 1u);  // below half an ulp: truncates; above: carries; exactly half: to even
    return (uint16_t)(u >> 16);
}

// bf16 -> float is exact: the bf16 bits are the upper half of the float.
static inline float bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// One AdamW step (PyTorch torch.optim.AdamW / llm.c), per element:
//   g = grad * grad_scale
//   m = beta1 * m + (1 - beta1) * g          v = beta2 * v + (1 - beta2) * g * g
//   mhat = m / (1 - beta1^t)                  vhat = v / (1 - beta2^t)
//   param -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * param)     (decoupled weight decay)
typedef struct {
    float lr, beta1, beta2, eps;
    float weight_decay;  // the CALLER passes 0 for tensors that must not decay (biases, layernorm, ...):
                         // these functions see only a range of floats and cannot know what it is
    float grad_scale;    // multiplies every gradient first: the global-norm clip factor and/or 1/accumulation
    int64_t t;           // 1-based step number, for the bias corrections; must be >= 1
} AdamWArgs;

// The per-step constants of the update, rounded to float once; 1/(1-beta1^t) and 1/sqrt(1-beta2^t) are
// computed in double so the bias corrections carry no error of their own. Public so that the GPU's AdamW
// (kernels.cuh, for the GPU-resident embeddings) uses the very same constants and operation order:
//   g = grad*scale;  m = fma(b1, m, omb1*g);  v = fma(b2, v, (omb2*g)*g);
//   upd = (m*ibc1) / fma(sqrt(v), irs2, eps);  param = fma(neg_lr, fma(wd, param, upd), param)
typedef struct {
    float b1, b2, omb1, omb2;  // beta1, beta2, 1-beta1, 1-beta2
    float ibc1;                // 1 / (1 - beta1^t)
    float irs2;                // 1 / sqrt(1 - beta2^t): sqrt(vhat) = sqrt(v) * irs2
    float eps, neg_lr, wd, scale;
} AdamWConstants;
AdamWConstants adamw_constants(const AdamWArgs* a);

// Threads for the parallel regions below: 0 (the start value) = the OpenMP default (OMP_NUM_THREADS or
// omp_set_num_threads of the calling thread). The GPU trainer calls these from its own optimizer thread
// and may set fewer, to leave cores for the copy threads. Ranges under 32768 elements always run on the
// calling thread alone (the trainer updates tensor by tensor and most biases are tiny).
void cpu_adam_set_threads(int n);
// "avx512", "avx2" or "scalar": the SIMD path this build was compiled with (for logs and the bench).
const char* cpu_adam_simd_name(void);

// Updates params, m and v in place; when params_bf16_out is not NULL also writes bf16(updated param)
// there, bit-for-bit equal to float_to_bf16(params[i]). The arrays must not overlap one another. The result
// of each element does not depend on n, on its position or on the thread count (SIMD body and scalar tail
// do the same IEEE operations in the same order). Subnormal inputs and results count as zero during the
// update (x86 FTZ/DAZ, set and restored per call: subnormals are slow and far below what eps lets matter).
void adamw_update_f32grad(float* params, const float* grads, float* m, float* v, uint16_t* params_bf16_out,
                          int64_t n, const AdamWArgs* a);
void adamw_update_bf16grad(float* params, const uint16_t* grads, float* m, float* v,
                           uint16_t* params_bf16_out, int64_t n, const AdamWArgs* a);

// AdamW over the window [lo, lo + n) of a block made of `count` tensors (tensor i: elements [offset[i],
// offset[i] + size[i]) of the block; is_matrix[i] != 0: args->weight_decay, else none): each tensor's part
// inside the window, with its decay. params, grads, m, v and bf16_out (may be NULL) point at element lo of
// the block. Gives the same bits as updating the whole block tensor by tensor (an element's result depends
// only on its own inputs), so a block can be updated piece by piece as it streams from disk (ssd.h).
void adamw_tensors_window_bf16grad(int count, const int64_t* offset, const int64_t* size,
                                   const int* is_matrix, int64_t lo, int64_t n, float* params,
                                   const uint16_t* grads, float* m, float* v, uint16_t* bf16_out,
                                   const AdamWArgs* args);

// Sum of squares of x[0..n), accumulated in double (each square of a float is exact in double). The order
// of the additions depends only on n and the thread count, so repeated calls give the same bits.
double sumsq_f32(const float* x, int64_t n);
double sumsq_bf16(const uint16_t* x, int64_t n);

// out[i] = float_to_bf16(in[i]) for i < n, in parallel.
void convert_f32_to_bf16(const float* in, uint16_t* out, int64_t n);
