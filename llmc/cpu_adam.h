// cpu_adam.h — AdamW's math and its CPU form (OpenMP + SIMD); also the squared norm.

// Not here: which tensors decay (adamw.h), the GPU form (kernels.cuh). No intrinsics, so nvcc can include it.
#pragma once
#include <stdint.h>
#include <string.h>
#include "bf16.h"  // defines: float_to_bf16, bf16_to_float

// One AdamW step (torch.optim.AdamW), per element:
//   g = grad * grad_scale
//   m = beta1 * m + (1 - beta1) * g          v = beta2 * v + (1 - beta2) * g * g
//   mhat = m / (1 - beta1^t)                  vhat = v / (1 - beta2^t)
//   param -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * param)
typedef struct {
    float lr, beta1, beta2, eps;
    float weight_decay;  // the CALLER passes 0 for tensors that must not decay (adamw.h)
    float grad_scale;    // multiplies every gradient first: the clip factor and/or 1/accumulation
    int64_t t;           // 1-based step, for the bias corrections
} AdamWArgs;

// The step's constants, rounded once; both forms compute, in this order:
//   g = grad*scale;  m = fma(b1, m, omb1*g);  v = fma(b2, v, (omb2*g)*g);
//   upd = (m*ibc1) / fma(sqrt(v), irs2, eps);  param = fma(neg_lr, fma(wd, param, upd), param)
typedef struct {
    float b1, b2, omb1, omb2;  // beta1, beta2, 1-beta1, 1-beta2
    float ibc1;                // 1 / (1 - beta1^t)
    float irs2;                // 1 / sqrt(1 - beta2^t): sqrt(vhat) = sqrt(v) * irs2
    float eps, neg_lr, wd, scale;
} AdamWConstants;
AdamWConstants adamw_constants(const AdamWArgs* a);

// Threads for the parallel regions below; 0 = the OpenMP default.
void cpu_adam_set_threads(int n);
// "avx512", "avx2" or "scalar": the SIMD path this build was compiled with (for logs and the bench).
const char* cpu_adam_simd_name(void);

// The CPU form: params, m, v in place, bf16(params) into params_bf16_out unless NULL.
// An element's result depends on its inputs only, not on n or the threads.
void adamw_update_f32grad(float* params, const float* grads, float* m, float* v, uint16_t* params_bf16_out,
                          int64_t n, const AdamWArgs* a);
void adamw_update_bf16grad(float* params, const uint16_t* grads, float* m, float* v,
                           uint16_t* params_bf16_out, int64_t n, const AdamWArgs* a);
// The same, by the gradients' type.
static inline void adamw_update(float* params, const float* grads, float* m, float* v, uint16_t* bf16_out,
                                int64_t n, const AdamWArgs* a) {
    adamw_update_f32grad(params, grads, m, v, bf16_out, n, a);
}
static inline void adamw_update(float* params, const uint16_t* grads, float* m, float* v, uint16_t* bf16_out,
                                int64_t n, const AdamWArgs* a) {
    adamw_update_bf16grad(params, grads, m, v, bf16_out, n, a);
}

// AdamW over the window [lo, lo + n) of a layer; same bits as the whole layer.
void adamw_tensors_window_bf16grad(int count, const int64_t* offset, const int64_t* size,
                                   const int* is_matrix, int64_t lo, int64_t n, float* params,
                                   const uint16_t* grads, float* m, float* v, uint16_t* bf16_out,
                                   const AdamWArgs* args);

// Sum of squares of x[0..n) in double; the same bits for the same n and threads.
double sumsq_f32(const float* x, int64_t n);
double sumsq_bf16(const uint16_t* x, int64_t n);

// out[i] = float_to_bf16(in[i]) for i < n, in parallel.
void convert_f32_to_bf16(const float* in, uint16_t* out, int64_t n);
