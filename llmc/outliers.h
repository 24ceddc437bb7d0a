// outliers.h — loss and grad norm checks before the update.
// Diverged: stop. Outlier: skip the update.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include "args.h"
#include "utils.h"

// 1 with why: non-finite, loss > 10 ln(V), norm > 1e10.
static inline int training_diverged(double loss, double norm, int V, char* why, size_t len) {
    const double loss_cap = 10.0 * log((double)V), norm_cap = 1e10;
    if (!isfinite(loss) || !isfinite(norm)) snprintf(why, len, "not finite");
    else if (loss > loss_cap) snprintf(why, len, "loss above %.1f = 10 x ln(V)", loss_cap);
    else if (norm > norm_cap) snprintf(why, len, "grad norm above %.0e", norm_cap);
    else return 0;
    return 1;
}

// Dies. saved_step: last checkpoint, -1: none.
static inline void die_diverged(int step, double loss, double norm, const char* why, int64_t saved_step) {
    char last[96] = "";
    if (saved_step >= 0)
        snprintf(last, sizeof last, "; the last checkpoint in -o is of step %lld", (long long)saved_step);
    die("training diverged at step %d (loss %g, grad norm %g: %s); no update was applied%s", step, loss, norm,
        why, last);
}

// ----------------------------------------------------------------------------
// -sl / -sg: skip steps far above the window's loss or norm.

typedef struct {
    double values[OUTLIER_WINDOW];
    int count, next;
} OutlierWindow;

// x's z-score (NaN until the window fills); x joins it.
static inline double outlier_z(OutlierWindow* w, double x) {
    double z = NAN;
    if (w->count == OUTLIER_WINDOW) {
        double mean = 0.0, var = 0.0;
        for (int i = 0; i < OUTLIER_WINDOW; i++) mean += w->values[i];
        mean /= OUTLIER_WINDOW;
        for (int i = 0; i < OUTLIER_WINDOW; i++) var += (w->values[i] - mean) * (w->values[i] - mean);
        const double sd = sqrt(var / OUTLIER_WINDOW);
        z = sd > 0.0 ? (x - mean) / sd : (x > mean ? INFINITY : 0.0);
    }
    w->values[w->next] = x;
    w->next = (w->next + 1) % OUTLIER_WINDOW;
    if (w->count < OUTLIER_WINDOW) w->count++;
    return z;
}

// 1 with why: -sl or -sg says skip.
static inline int outlier_skip(const TrainArgs* a, OutlierWindow* losses, OutlierWindow* norms, double loss,
                               double norm, char* why, size_t whylen) {
    const double zl = outlier_z(losses, loss), zg = outlier_z(norms, norm);
    why[0] = '\0';
    if (a->skip_loss_z > 0.0f && zl > a->skip_loss_z)
        snprintf(why, whylen, "loss z-score %.2f > %g", zl, a->skip_loss_z);
    else if (a->skip_grad_z > 0.0f && zg > a->skip_grad_z)
        snprintf(why, whylen, "grad norm z-score %.2f > %g", zg, a->skip_grad_z);
    return why[0] != '\0';
}
