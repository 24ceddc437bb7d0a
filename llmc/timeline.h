// timeline.h — optional per-step timeline (-Y 1): compute, copies, AdamW, disk, per layer.
// Off (NULL Timeline*): every function returns at once.
#pragma once
#include <chrono>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_common.h"

enum { TRACK_COMPUTE, TRACK_H2D, TRACK_D2H, TRACK_ADAM, TRACK_DISK_READ, TRACK_DISK_WRITE, NUM_TRACKS };
static const char* const track_names[NUM_TRACKS] = {"compute stream",     "h2d stream (weights)",
                                                    "d2h stream (grads)", "cpu adamw thread",
                                                    "disk reads",         "disk writes"};
#define TIMELINE_DISK_SPANS 256  // -sd: spans per disk track and step; ssd_io_busy_spans joins extras

typedef struct {
    int track, layer;        // layer -1: embeddings / head
    const char* what;        // static string: "fwd", "bwd", "weights", "grads", "adamw", ...
    cudaEvent_t begin, end;  // GPU spans
    double t0, t1;           // seconds since origin; set for host spans and by summarize
    int on_host;             // 1: measured on the host clock, the events are unused
} TimelineSpan;

typedef struct Timeline {
    TimelineSpan* spans;
    int cap, n;
    cudaEvent_t origin;  // recorded on the compute stream at step start. The GPU is idle then:
                         // the last step's summary waited for all its spans
    double origin_host;  // host clock at that moment
} Timeline;

typedef struct {
    double step_s;              // origin to the end of the last span
    double busy_s[NUM_TRACKS];  // sum of span lengths per track (a track's spans never overlap)
    double gpu_idle_s;          // step_s minus the compute stream's busy time
    // idle time of the compute stream, forward and backward
    double fwd_busy_s, fwd_wait_s, bwd_wait_s;
    int fwd_layers, adam_layers;  // "fwd" compute spans and "adamw" host spans counted
} TimelineSummary;

static inline double timeline_now(void) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static inline void timeline_init(Timeline* tl, int cap) {
    tl->spans = (TimelineSpan*)calloc((size_t)cap, sizeof(TimelineSpan));
    if (!tl->spans) { die("out of host memory for the timeline"); }
    tl->cap = cap;
    tl->n = 0;
    for (int i = 0; i < cap; i++) {
        cudaCheck(cudaEventCreate(&tl->spans[i].begin));
        cudaCheck(cudaEventCreate(&tl->spans[i].end));
    }
    cudaCheck(cudaEventCreate(&tl->origin));
}

static inline void timeline_free(Timeline* tl) {
    for (int i = 0; i < tl->cap; i++) {
        cudaCheck(cudaEventDestroy(tl->spans[i].begin));
        cudaCheck(cudaEventDestroy(tl->spans[i].end));
    }
    cudaCheck(cudaEventDestroy(tl->origin));
    free(tl->spans);
}

static inline void timeline_start_step(Timeline* tl, cudaStream_t compute) {
    if (!tl) return;
    tl->n = 0;
    tl->origin_host = timeline_now();
    cudaCheck(cudaEventRecord(tl->origin, compute));
}

// Opens a GPU span on stream s; its index for timeline_end, -1 if off or full.
static inline int timeline_begin(Timeline* tl, int track, const char* what, int layer, cudaStream_t s) {
    if (!tl || tl->n >= tl->cap) return -1;
    TimelineSpan* sp = &tl->spans[tl->n];
    sp->track = track;
    sp->layer = layer;
    sp->what = what;
    sp->on_host = 0;
    cudaCheck(cudaEventRecord(sp->begin, s));
    return tl->n++;
}
static inline void timeline_end(Timeline* tl, int index, cudaStream_t s) {
    if (!tl || index < 0) return;
    cudaCheck(cudaEventRecord(tl->spans[index].end, s));
}

// A GPU span as a scope: opens at its declaration, closes at its block's end.
struct ScopedSpan {
    Timeline* tl;
    int index;
    cudaStream_t s;
    ScopedSpan(Timeline* tl, int track, const char* what, int layer, cudaStream_t s)
        : tl(tl), index(timeline_begin(tl, track, what, layer, s)), s(s) {}
    ~ScopedSpan() { timeline_end(tl, index, s); }
};

// A span on the host clock (timeline_now); only its part after the origin counts.
static inline void timeline_host_span(Timeline* tl, int track, const char* what, int layer, double t0,
                                      double t1) {
    if (!tl || tl->n >= tl->cap) return;
    TimelineSpan* sp = &tl->spans[tl->n++];
    sp->track = track;
    sp->layer = layer;
    sp->what = what;
    sp->t0 = fmax(t0 - tl->origin_host, 0.0);
    sp->t1 = fmax(t1 - tl->origin_host, 0.0);
    sp->on_host = 1;
}

// Waits for every recorded event, then sums the spans up.
static inline TimelineSummary timeline_summarize(Timeline* tl) {
    TimelineSummary s = {};
    double fwd_end = 0.0, bwd_begin = INFINITY, bwd_end = 0.0, bwd_busy = 0.0;
    bool origin_done = false;
    for (int i = 0; i < tl->n; i++) {
        TimelineSpan* sp = &tl->spans[i];
        if (!sp->on_host) {
            float a = 0.0f, b = 0.0f;
            // the origin too, once: cudaEventElapsedTime needs both events complete
            if (!origin_done) {
                cudaCheck(cudaEventSynchronize(tl->origin));
                origin_done = true;
            }
            cudaCheck(cudaEventSynchronize(sp->end));
            cudaCheck(cudaEventElapsedTime(&a, tl->origin, sp->begin));
            cudaCheck(cudaEventElapsedTime(&b, tl->origin, sp->end));
            sp->t0 = a * 1e-3;
            sp->t1 = b * 1e-3;
        }
        s.busy_s[sp->track] += sp->t1 - sp->t0;
        if (sp->t1 > s.step_s) s.step_s = sp->t1;
        if (sp->track == TRACK_COMPUTE && strcmp(sp->what, "fwd") == 0) {
            s.fwd_busy_s += sp->t1 - sp->t0;
            fwd_end = fmax(fwd_end, sp->t1);
            s.fwd_layers++;
        } else if (sp->track == TRACK_COMPUTE && strcmp(sp->what, "bwd") == 0) {
            bwd_busy += sp->t1 - sp->t0;
            bwd_begin = fmin(bwd_begin, sp->t0);
            bwd_end = fmax(bwd_end, sp->t1);
        } else if (sp->track == TRACK_ADAM && strcmp(sp->what, "adamw") == 0) {
            s.adam_layers++;
        }
    }
    s.gpu_idle_s = s.step_s - s.busy_s[TRACK_COMPUTE];
    s.fwd_wait_s = fwd_end - s.fwd_busy_s;
    s.bwd_wait_s = bwd_end > bwd_begin ? bwd_end - bwd_begin - bwd_busy : 0.0;
    return s;
}

// Chrome trace ("traceEvents", complete events in microseconds), a row per track. 0 on failure.
static inline int timeline_write_chrome_trace(const Timeline* tl, const char* path) {
    FILE* f = fopen(path, "w");
    if (!f) return 0;
    fprintf(f, "{\"traceEvents\":[\n");
    for (int t = 0; t < NUM_TRACKS; t++)
        fprintf(f,
                "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":\"%s\"}},\n",
                t, track_names[t]);
    for (int i = 0; i < tl->n; i++) {
        const TimelineSpan* sp = &tl->spans[i];
        fprintf(f, "{\"name\":\"%s L%d\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}%s\n",
                sp->what, sp->layer, sp->track, sp->t0 * 1e6, (sp->t1 - sp->t0) * 1e6,
                i + 1 < tl->n ? "," : "");
    }
    fprintf(f, "]}\n");
    return fclose(f) == 0;
}
