// cpu_adam.h — AdamW's CPU form (OpenMP + SIMD over host arrays); also the squared norm and bf16 casts.
// Not here: the math and the decay rule (adamw.h), the GPU form (kernels.cuh). No intrinsics: nvcc includes
// it.
#pragma once
#include <stdint.h>
#include <string.h>
#include "adamw.h"  // defines: AdamWArgs, AdamWConstants, adamw_tensors
#include "bf16.h"   // defines: float_to_bf16, bf16_to_float

// Threads for the parallel regions below; 0 = the OpenMP default.
void cpu_adam_set_threads(int n);
// The threads they take (cpu_adam_set_threads', or the OpenMP default).
int cpu_adam_threads(void);
// The SIMD path built: "avx512", "avx2" or "scalar".
const char* cpu_adam_simd_name(void);

// In place; bf16(params) into params_bf16_out unless NULL. Same bits for any n or threads.
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

// Over one layer's (or the embeddings') tensors, from their start.
template <typename Grad>
static inline void adamw_tensors_cpu(int count, const int64_t* offset, const int64_t* size,
                                     const int* is_matrix, float* params, const Grad* grads, float* m,
                                     float* v, uint16_t* bf16_out, const AdamWArgs* args) {
    adamw_tensors(count, offset, size, is_matrix, args, [&](int64_t o, int64_t n, const AdamWArgs* a) {
        uint16_t* out = bf16_out ? bf16_out + o : NULL;
        adamw_update(params + o, grads + o, m + o, v + o, out, n, a);  // fp32 or bf16 gradients
    });
}
static inline void adamw_tensors_f32grad(int count, const int64_t* offset, const int64_t* size,
                                         const int* is_matrix, float* params, const float* grads, float* m,
                                         float* v, uint16_t* bf16_out, const AdamWArgs* args) {
    adamw_tensors_cpu(count, offset, size, is_matrix, params, grads, m, v, bf16_out, args);
}
static inline void adamw_tensors_bf16grad(int count, const int64_t* offset, const int64_t* size,
                                          const int* is_matrix, float* params, const uint16_t* grads,
                                          float* m, float* v, uint16_t* bf16_out, const AdamWArgs* args) {
    adamw_tensors_cpu(count, offset, size, is_matrix, params, grads, m, v, bf16_out, args);
}

// The window [lo, lo + n) of a layer: the whole layer's bits.
void adamw_tensors_window_bf16grad(int count, const int64_t* offset, const int64_t* size,
                                   const int* is_matrix, int64_t lo, int64_t n, float* params,
                                   const uint16_t* grads, float* m, float* v, uint16_t* bf16_out,
                                   const AdamWArgs* args);
void adamw_tensors_window_f32grad(int count, const int64_t* offset, const int64_t* size, const int* is_matrix,
                                  int64_t lo, int64_t n, float* params, const float* grads, float* m,
                                  float* v, uint16_t* bf16_out, const AdamWArgs* args);

// Sum of squares in double; same bits for the same n and threads.
double sumsq_f32(const float* x, int64_t n);
double sumsq_bf16(const uint16_t* x, int64_t n);

// out[i] = float_to_bf16(in[i]) for i < n, in parallel.
void convert_f32_to_bf16(const float* in, uint16_t* out, int64_t n);
// memcpy of n bf16 values, in parallel (one thread does not fill a socket's memory bandwidth).
void copy_bf16(const uint16_t* in, uint16_t* out, int64_t n);
