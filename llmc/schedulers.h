// schedulers.h — learning rate (-l, -u, -q, -k), as llm.c's. Not here: clip (adamw.h).
#pragma once
#include <math.h>
#include "args.h"

// Linear warmup, then cosine, linear, wsd or no decay, to lr * final_lr_frac.
static inline float learning_rate_at(const TrainArgs* a, int step, int total_steps) {
    if (step < a->warmup_steps) return a->lr * (float)(step + 1) / (float)a->warmup_steps;
    const float min_lr = a->lr * a->final_lr_frac;
    int decay_start = a->warmup_steps;
    if (a->lr_schedule == LR_CONSTANT) return a->lr;
    // wsd (arXiv 2405.18392): the last 20% decays
    if (a->lr_schedule == LR_WSD) decay_start = (int)(0.8f * (float)total_steps);
    if (step < decay_start || total_steps <= decay_start) return a->lr;
    float ratio = (float)(step - decay_start) / (float)(total_steps - decay_start);
    if (ratio > 1.0f) ratio = 1.0f;
    float coeff;  // 1 at decay start, 0 at its end
    if (a->lr_schedule == LR_LINEAR) coeff = 1.0f - ratio;
    else if (a->lr_schedule == LR_WSD) coeff = 1.0f - sqrtf(ratio);
    else coeff = 0.5f * (1.0f + cosf(3.14159265358979f * ratio));
    return min_lr + coeff * (a->lr - min_lr);
}
