// adamw.h — AdamW's math, once: the per-element update both forms run, the clip factor, the decay rule.
// The CPU form (OpenMP + SIMD over host arrays) is cpu_adam.h; the GPU form is kernels.cuh's adamw_gpu.
// Not here: loops over arrays, threads, the model's tensors (gpt2_cpu.h, llama_cpu.h, llmc/cpu_optimizer.h).
#pragma once
#include <math.h>
#include <stdint.h>

// llm.c's AdamW constants; lr from the schedule, weight decay from -c.
#define ADAMW_BETA1 0.9f
#define ADAMW_BETA2 0.95f
#define ADAMW_EPS   1e-8f

// One AdamW step (torch.optim.AdamW), per element:
//   g = grad * grad_scale
//   m = beta1 * m + (1 - beta1) * g          v = beta2 * v + (1 - beta2) * g * g
//   mhat = m / (1 - beta1^t)                  vhat = v / (1 - beta2^t)
//   param -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * param)
typedef struct {
    float lr, beta1, beta2, eps;
    float weight_decay;  // the caller passes 0 for tensors that must not decay
    float grad_scale;    // the clip factor and/or 1/accumulation
    int64_t t;           // 1-based step, for the bias corrections
} AdamWArgs;

// The step's constants, rounded once.
typedef struct {
    float b1, b2, omb1, omb2;  // beta1, beta2, 1-beta1, 1-beta2
    float ibc1;                // 1 / (1 - beta1^t)
    float irs2;                // 1 / sqrt(1 - beta2^t): sqrt(vhat) = sqrt(v) * irs2
    float eps, neg_lr, wd, scale;
} AdamWConstants;

static inline AdamWConstants adamw_constants(const AdamWArgs* a) {
    AdamWConstants c;
    const double t = (double)a->t;
    c.b1 = a->beta1;
    c.b2 = a->beta2;
    c.omb1 = (float)(1.0 - (double)a->beta1);
    c.omb2 = (float)(1.0 - (double)a->beta2);
    c.ibc1 = (float)(1.0 / (1.0 - pow((double)a->beta1, t)));
    c.irs2 = (float)(1.0 / sqrt(1.0 - pow((double)a->beta2, t)));
    c.eps = a->eps;
    c.neg_lr = -a->lr;
    c.wd = a->weight_decay;
    c.scale = a->grad_scale;
    return c;
}

#ifdef __CUDACC__
#define ADAMW_HD __host__ __device__ __forceinline__
#else
#define ADAMW_HD static inline
#endif

// One IEEE rounding per op on both sides, despite nvcc's --use_fast_math.
ADAMW_HD float adamw_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
ADAMW_HD float adamw_div(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}
ADAMW_HD float adamw_sqrt(float a) {
#ifdef __CUDA_ARCH__
    return __fsqrt_rn(a);
#else
    return sqrtf(a);
#endif
}
ADAMW_HD float adamw_fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
    return __fmaf_rn(a, b, c);
#elif defined(__FMA__) || defined(FP_FAST_FMAF)
    return fmaf(a, b, c);  // as the SIMD fmadd
#else
    return a * b + c;  // no FMA: no FMA SIMD path to agree with
#endif
}

// One element's update; cpu_adam.cpp's SIMD loops mirror it op for op.
ADAMW_HD float adamw_element(float p, float grad, float* m, float* v, const AdamWConstants& c) {
    const float g = adamw_mul(grad, c.scale);
    const float mm = adamw_fma(c.b1, *m, adamw_mul(c.omb1, g));
    const float vv = adamw_fma(c.b2, *v, adamw_mul(adamw_mul(c.omb2, g), g));
    const float denom = adamw_fma(adamw_sqrt(vv), c.irs2, c.eps);  // sqrt(vhat) + eps
    const float upd = adamw_div(adamw_mul(mm, c.ibc1), denom);     // mhat / (sqrt(vhat) + eps)
    *m = mm;
    *v = vv;
    return adamw_fma(c.neg_lr, adamw_fma(c.wd, p, upd), p);  // p - lr * (upd + wd * p)
}

// clip / (norm + 1e-6), at most 1, as torch's clip_grad_norm_; 1 if clip <= 0.
static inline float clip_scale(float norm, float clip) {
    if (clip <= 0.0f) return 1.0f;
    const float s = clip / (norm + 1e-6f);
    return s < 1.0f ? s : 1.0f;
}

// AdamW tensor by tensor; update(offset, n, args) is the CPU or GPU form.
template <typename Update>
static inline void adamw_tensors(int count, const int64_t* offset, const int64_t* size, const int* is_matrix,
                                 const AdamWArgs* args, Update update) {
    for (int i = 0; i < count; i++) {
        AdamWArgs a = *args;
        if (!is_matrix[i]) a.weight_decay = 0.0f;  // decay on matrices only
        update(offset[i], size[i], &a);
    }
}
