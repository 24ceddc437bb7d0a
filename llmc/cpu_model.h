// cpu_model.h — what the two CPU reference models share, as templates.
// gpt2_cpu.h and llama_cpu.h name the fields alike. Not here: layer math.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model.h"  // defines: round_up64

// One activation array: where its pointer goes, and its floats.
typedef struct {
    float** where;
    int64_t size;
} ActArray;

// params (uninitialized), zeroed grads, weight_t scratch; 0 with model->error if OOM.
template <typename Model>
static int cpu_model_alloc(Model* model, int64_t total, int64_t weight_t_floats) {
    model->params = (float*)malloc((size_t)total * sizeof(float));
    model->grads = (float*)calloc((size_t)total, sizeof(float));
    model->weight_t = (float*)malloc((size_t)weight_t_floats * sizeof(float));
    if (!model->params || !model->grads || !model->weight_t) {
        snprintf(model->error, sizeof model->error, "out of memory for %lld parameters", (long long)total);
        return 0;
    }
    return 1;
}

// Safe after a failed build.
template <typename Model>
static void cpu_model_free(Model* model) {
    free(model->params);
    free(model->grads);
    free(model->weight_t);
    free(model->act_memory);
    free(model->inputs);
    free(model->targets);
    free(model->pos);
    memset(model, 0, sizeof *model);
}

// grads = 0, before a step's first micro-batch.
template <typename Model>
static void cpu_model_zero_grad(Model* model) {
    memset(model->grads, 0, (size_t)model->layout.total * sizeof(float));
}

// Points `table`'s arrays into act_memory, grown as needed; 0 if OOM.
template <typename Model>
static int cpu_model_carve(Model* model, const ActArray* table, int count, int B, int T) {
    const int64_t N = (int64_t)B * T;
    int64_t total = 0;
    for (int i = 0; i < count; i++) total += round_up64(table[i].size, 16);  // 64-byte aligned arrays
    if (total > model->act_capacity) {
        free(model->act_memory);
        free(model->inputs);
        free(model->targets);
        free(model->pos);
        model->act_memory = (float*)aligned_alloc(64, (size_t)total * sizeof(float));
        model->inputs = (int*)malloc((size_t)N * sizeof(int));
        model->targets = (int*)malloc((size_t)N * sizeof(int));
        model->pos = (int*)malloc((size_t)N * sizeof(int));
        model->act_capacity = model->act_memory && model->inputs && model->targets && model->pos ? total : 0;
        if (!model->act_capacity) {
            snprintf(model->error, sizeof model->error,
                     "out of memory for the activations of B=%d T=%d (%.1f MiB)", B, T,
                     (double)total * 4 / (1 << 20));
            return 0;
        }
    }
    float* next = model->act_memory;
    for (int i = 0; i < count; i++) {
        *table[i].where = next;
        next += round_up64(table[i].size, 16);
    }
    return 1;
}

// Each pos in 0 .. min(t, maxT - 1)? Else 0 with err.
static int check_positions(const int* pos, int B, int T, int maxT, char* err, size_t errlen) {
    for (int64_t i = 0; pos && i < (int64_t)B * T; i++) {
        const int t = (int)(i % T);
        if (pos[i] < 0 || pos[i] > t || pos[i] >= maxT) {
            snprintf(err, errlen, "forward: pos[%lld] = %d outside [0, min(t=%d, maxT-1=%d)]", (long long)i,
                     pos[i], t, maxT - 1);
            return 0;
        }
    }
    return 1;
}

// Checks a batch's shape, token ids, positions. maxT_name: maxT in errors.
template <typename Model>
static int cpu_model_check_batch(Model* model, const int* inputs, const int* targets, const int* pos, int B,
                                 int T, int V, int maxT, const char* maxT_name) {
    model->has_targets = 0;
    model->mean_loss = -1.0f;
    if (B < 1 || T < 1 || T > maxT) {
        snprintf(model->error, sizeof model->error,
                 "forward: B=%d T=%d invalid (need B >= 1, 1 <= T <= %s=%d)", B, T, maxT_name, maxT);
        return 0;
    }
    const int64_t N = (int64_t)B * T;
    for (int64_t i = 0; i < N; i++) {
        if (inputs[i] < 0 || inputs[i] >= V || (targets && (targets[i] < -1 || targets[i] >= V))) {
            snprintf(model->error, sizeof model->error,
                     "forward: token id %d at position %lld outside [0, V=%d)",
                     inputs[i] < 0 || inputs[i] >= V ? inputs[i] : targets[i], (long long)i, V);
            return 0;
        }
    }
    return check_positions(pos, B, T, maxT, model->error, sizeof model->error);
}

// Copies the batch for backward; returns the kept pos, or NULL.
template <typename Model>
static const int* cpu_model_keep_batch(Model* model, const int* inputs, const int* targets, const int* pos,
                                       int B, int T) {
    const int64_t N = (int64_t)B * T;
    model->B = B;
    model->T = T;
    memcpy(model->inputs, inputs, (size_t)N * sizeof(int));
    if (targets) memcpy(model->targets, targets, (size_t)N * sizeof(int));
    model->has_pos = pos != NULL;
    if (pos) memcpy(model->pos, pos, (size_t)N * sizeof(int));
    return model->has_pos ? model->pos : NULL;
}

// Mean loss over the targets; backward may follow.
template <typename Model>
static void cpu_model_mean_loss(Model* model, const float* losses, const int* targets, int64_t N) {
    double sum = 0.0;
    int64_t count = 0;
    for (int64_t i = 0; i < N; i++) {
        sum += losses[i];  // 0 where not a target
        count += targets[i] >= 0;
    }
    model->num_targets = count;
    model->mean_loss = count ? (float)(sum / (double)count) : 0.0f;
    model->has_targets = 1;
}

// Backward needs a forward with targets; 0 with model->error otherwise.
template <typename Model>
static int cpu_model_has_targets(Model* model) {
    if (!model->has_targets)
        snprintf(model->error, sizeof model->error, "backward: the last forward pass had no targets");
    return model->has_targets;
}
