// adamw.h — AdamW over a layer or the embeddings, tensor by tensor; the clip factor.
// The per-element math is in cpu_adam.h; its GPU form is kernels.cuh's adamw_gpu.
#pragma once
#include <math.h>
#include <stdint.h>
#include "args.h"
#include "cpu_adam.h"
#include "model.h"

// clip / (norm + 1e-6) capped at 1, as torch's clip_grad_norm_; 1 when clip <= 0. norm must be finite.
static inline float clip_scale(float norm, float clip) {
    if (clip <= 0.0f) return 1.0f;
    const float s = clip / (norm + 1e-6f);
    return s < 1.0f ? s : 1.0f;
}

// AdamW over one layer's (or the embeddings') tensors, weight decay on matrices only.
// update(offset, n, args): one tensor's AdamW, CPU or GPU form.
template <typename Update>
static inline void adamw_tensors(int count, const int64_t* offset, const int64_t* size, const int* is_matrix,
                                 const AdamWArgs* args, Update update) {
    for (int i = 0; i < count; i++) {
        AdamWArgs a = *args;
        if (!is_matrix[i]) a.weight_decay = 0.0f;
        update(offset[i], size[i], &a);
    }
}

// The CPU's form over one layer or the embeddings; the pointers point at its start.
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

static inline void adamw_layer_f32grad(const ParamLayout* p, float* params, const float* grads, float* m,
                                       float* v, uint16_t* bf16_out, const AdamWArgs* args) {
    adamw_tensors_f32grad(NUM_LAYER_TENSORS, p->layer_offset, p->layer_size, layer_tensor_is_matrix, params,
                          grads, m, v, bf16_out, args);
}
static inline void adamw_layer_bf16grad(const ParamLayout* p, float* params, const uint16_t* grads, float* m,
                                        float* v, uint16_t* bf16_out, const AdamWArgs* args) {
    adamw_tensors_bf16grad(NUM_LAYER_TENSORS, p->layer_offset, p->layer_size, layer_tensor_is_matrix, params,
                           grads, m, v, bf16_out, args);
}
static inline void adamw_embed_f32grad(const ParamLayout* p, float* params, const float* grads, float* m,
                                       float* v, uint16_t* bf16_out, const AdamWArgs* args) {
    adamw_tensors_f32grad(NUM_EMBED_TENSORS, p->embed_offset, p->embed_size, embed_tensor_is_matrix, params,
                          grads, m, v, bf16_out, args);
}

// The whole model, fp32 gradients (the CPU trainer).
static inline void adamw_model_f32grad(const GPTConfig* c, const ParamLayout* p, float* params,
                                       const float* grads, float* m, float* v, const AdamWArgs* args) {
    adamw_embed_f32grad(p, params, grads, m, v, NULL, args);
    for (int l = 0; l < c->num_layers; l++) {
        const int64_t o = gpt_layer_offset(p, l);
        adamw_layer_f32grad(p, params + o, grads + o, m + o, v + o, NULL, args);
    }
}

// llm.c's AdamW constants; lr from the schedule, weight decay from -c.
#define ADAMW_BETA1 0.9f
#define ADAMW_BETA2 0.95f
#define ADAMW_EPS   1e-8f

// grads hold the SUM of accum micro-batches' gradients: the norm of their mean.
static inline float grad_norm_f32grad(const ParamLayout* p, const float* grads, int accum) {
    return (float)(sqrt(sumsq_f32(grads, p->total)) / accum);
}
// AdamW with grad_scale = clip factor / accum; t is the 1-based step; norm finite.
static inline void adamw_apply_model_f32grad(const GPTConfig* c, const ParamLayout* p, float* params,
                                             const float* grads, float* m, float* v, int accum, float lr,
                                             const TrainArgs* a, int64_t t, float norm) {
    AdamWArgs args = {lr,        ADAMW_BETA1,     ADAMW_BETA2,
                      ADAMW_EPS, a->weight_decay, clip_scale(norm, a->grad_clip) / (float)accum,
                      t};
    adamw_model_f32grad(c, p, params, grads, m, v, &args);
}
// Norm, then the update if it is finite (else the caller reports the divergence).
static inline float adamw_step_model_f32grad(const GPTConfig* c, const ParamLayout* p, float* params,
                                             const float* grads, float* m, float* v, int accum, float lr,
                                             const TrainArgs* a, int64_t t) {
    const float norm = grad_norm_f32grad(p, grads, accum);
    if (isfinite(norm)) adamw_apply_model_f32grad(c, p, params, grads, m, v, accum, lr, a, t, norm);
    return norm;
}
