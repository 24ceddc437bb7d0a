// logger.h — DIR/main.log in llm.c's format: "s:STEP trl:LOSS ...", "s:STEP tel:LOSS", "s:STEP eval:ACC".
#pragma once
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "run_dir.h"

typedef struct {
    FILE* f;   // NULL: no log
    int lost;  // a write failed: warned once, not retried
    char path[4200];
} TrainLogger;

// Opens DIR/main.log; dir NULL: no log. resume_step < 0: afresh.
static inline int logger_open(TrainLogger* lg, const char* dir, int64_t resume_step, char* err,
                              size_t errlen) {
    lg->f = NULL;
    lg->lost = 0;
    lg->path[0] = '\0';
    if (!dir) return 1;
    if (!make_dirs(dir, err, errlen)) return 0;
    char tmp[4300];
    char* path = lg->path;
    snprintf(path, sizeof lg->path, "%s/main.log", dir);
    if (resume_step >= 0) {  // keep lines before resume_step, and its trl: no step twice (tel, eval: again)
        FILE* in = fopen(path, "r");
        if (in) {
            snprintf(tmp, sizeof tmp, "%s.tmp", path);
            FILE* out = fopen(tmp, "w");
            if (!out) {
                fclose(in);
                snprintf(err, errlen, "cannot write %.160s: %.60s", tmp, strerror(errno));
                return 0;
            }
            char line[512], kind[8] = "";
            long long step;
            while (fgets(line, sizeof line, in)) {
                if (sscanf(line, "s:%lld %7[a-z]", &step, kind) != 2) continue;
                const bool redone = strcmp(kind, "tel") == 0 || strcmp(kind, "eval") == 0;  // at resume_step
                if (redone ? step < resume_step : step <= resume_step) fputs(line, out);
            }
            fclose(in);
            // fsync before rename: a crash leaves one whole log
            const int synced = fflush(out) == 0 && fsync(fileno(out)) == 0;
            if (fclose(out) != 0 || !synced || rename(tmp, path) != 0) {
                snprintf(err, errlen, "cannot rewrite %.160s: %.60s", path, strerror(errno));
                return 0;
            }
            if (!fsync_dir(dir, err, errlen)) return 0;
        }
    }
    lg->f = fopen(path, resume_step >= 0 ? "a" : "w");
    if (!lg->f) {
        snprintf(err, errlen, "cannot open log file %.160s: %.60s", path, strerror(errno));
        return 0;
    }
    return 1;
}
// Flushed. A failed write warns once; the run goes on.
static inline void logger_line(TrainLogger* lg, int step, const char* kind, float loss, const char* more) {
    if (!lg->f || lg->lost) return;
    errno = 0;
    if (fprintf(lg->f, "s:%d %s:%.6f%s\n", step, kind, loss, more) < 0 || fflush(lg->f) != 0) {
        lg->lost = 1;
        fprintf(
            stderr,
            "warning: cannot write %.200s (%s): its lines from step %d on are missing (stdout has them)\n",
            lg->path, errno ? strerror(errno) : "short write", step);
    }
}
static inline void logger_train(TrainLogger* lg, int step, float loss, float lr, float norm) {
    char more[64];
    snprintf(more, sizeof more, " lr:%.4e norm:%.4f", lr, norm);
    logger_line(lg, step, "trl", loss, more);
}
static inline void logger_val(TrainLogger* lg, int step, float loss) {
    logger_line(lg, step, "tel", loss, "");
}
// -h: the multiple-choice accuracy (llm.c's "eval" lines)
static inline void logger_eval(TrainLogger* lg, int step, float accuracy) {
    logger_line(lg, step, "eval", accuracy, "");
}
static inline void logger_close(TrainLogger* lg) {
    if (lg->f) fclose(lg->f);
    lg->f = NULL;
}
