// utils.h — die, config table rows, size and time text, peak memory, fopen_regular, the progress count
// (progress_tick, ProgressTicker: llmc/progress_watch.h).
// No flags, no model.
#pragma once
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <atomic>
#include <thread>

// GiB, MiB or bytes for a message (never "0.00 GiB").
struct SizeText {
    char s[48];
    explicit SizeText(double bytes) {
        const double GiB = 1073741824.0, MiB = 1048576.0;
        if (bytes >= GiB) snprintf(s, sizeof s, "%.2f GiB", bytes / GiB);
        else if (bytes >= MiB) snprintf(s, sizeof s, "%.2f MiB", bytes / MiB);
        else snprintf(s, sizeof s, "%.0f bytes", bytes);
    }
};

// A multi-GPU run's rank (collectives.h), named in its error lines; -1: one rank.
inline int die_rank = -1;
// Several ranks: the node's flag "a rank said why the run ends" (NodeShared.said). The first rank to die says
// it; a rank that dies after it ends quietly (its line would repeat or follow from the first).
inline std::atomic<int>* die_said = nullptr;

// A run of several ranks: the node's count of steps forward (NodeShared.progress_here), which
// llmc/progress_watch.h watches. progress_tick: the main thread passed a layer, a rank wrote or checked a
// block of a checkpoint, bytes moved between nodes. Null (one rank, or before progress_watch_start): nothing
// counts.
inline std::atomic<std::atomic<uint64_t>*> progress_ticks{nullptr};
static inline void progress_tick() {
    if (std::atomic<uint64_t>* p = progress_ticks.load(std::memory_order_acquire))
        p->fetch_add(1, std::memory_order_relaxed);
}
// While it lives, a tick every 0.2 s: around a long local step that cannot tick as it goes (an fsync, a
// rotation of the whole state). Nothing where nothing counts. Not around anything that waits on another rank
// or node: a hang there must stay visible. (A process stuck in an fsync on a hung file system cannot be ended
// anyway: it waits in the kernel.)
struct ProgressTicker {
    std::atomic<bool> done{false};
    std::thread thread;
    ProgressTicker() {
        if (progress_ticks.load())
            thread = std::thread([this] {
                while (!done.load()) progress_tick(), usleep(200 * 1000);
            });
    }
    ~ProgressTicker() {
        done.store(true);
        if (thread.joinable()) thread.join();
    }
};

// One "error: ..." line (control bytes as \xNN), exit 1. All failures end here. A second thread that dies
// meanwhile (NCCL's watch beside the main thread) waits for the first's line and exit.
inline std::atomic<int> die_dying{0};  // one for the program (inline: not one per translation unit)
static inline void die(const char* fmt, ...) {
    if (die_dying.exchange(1))
        for (;;) pause();
    char msg[8192], line[8192 * 4 + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int n = snprintf(line, sizeof line, "error: ");
    if (die_rank >= 0) n += snprintf(line + n, sizeof line - n, "rank %d: ", die_rank);
    for (const unsigned char* c = (const unsigned char*)msg; *c; c++) {
        if (*c < 0x20 || *c == 0x7f) n += snprintf(line + n, sizeof line - n, "\\x%02x", *c);
        else line[n++] = (char)*c;
    }
    line[n++] = '\n';
    fflush(stdout);
    if (die_said && die_said->exchange(1)) {  // another rank of the node said why first
        fflush(NULL);
        _exit(1);
    }
    fwrite(line, 1, (size_t)n, stderr);  // one write: several ranks' lines do not interleave
    // _exit: exit() tears down CUDA under the optimizer thread
    fflush(NULL);
    _exit(1);
}

// A "| key | value |" config table row, and its rule.
static inline void table_row(const char* key, const char* fmt, ...) {
    char value[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof value, fmt, ap);
    va_end(ap);
    printf("| %-22s | %-56s |\n", key, value);
}
static inline void table_rule(void) {
    printf("+------------------------+----------------------------------------------------------+\n");
}

// Duration text: "850ms", "12.3s", "4m05s", "2h07m".
static inline void format_duration(double s, char* buf, size_t len) {
    if (s < 1.0) snprintf(buf, len, "%.0fms", s * 1e3);
    else if (s < 60.0) snprintf(buf, len, "%.1fs", s);
    else if (s < 3600.0) snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

// " | 4m05s, eta 12m30s": elapsed since step one, rest at mean pace.
static inline void progress_text(double elapsed, int steps_done, int first_step, int total_steps, char* buf,
                                 size_t len) {
    char e[32], r[32];
    format_duration(elapsed, e, sizeof e);
    const int done = steps_done - first_step;
    format_duration(done > 0 ? elapsed / done * (total_steps - steps_done) : 0.0, r, sizeof r);
    snprintf(buf, len, " | %.20s, eta %.20s", e, r);
}

// Regular files only: a FIFO could block forever. NULL with err.
static inline FILE* fopen_regular(const char* path, const char* what, struct stat* st, char* err,
                                  size_t errlen) {
    if (stat(path, st) != 0) {
        snprintf(err, errlen, "cannot open %s%.400s: %.60s", what, path, strerror(errno));
        return NULL;
    }
    if (!S_ISREG(st->st_mode)) {
        snprintf(err, errlen, "%s%.400s is not a regular file", what, path);
        return NULL;
    }
    FILE* f = fopen(path, "rb");
    if (!f) snprintf(err, errlen, "cannot open %s%.400s: %.60s", what, path, strerror(errno));
    return f;
}

// Peak resident bytes so far.
static inline int64_t peak_rss_bytes(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (int64_t)ru.ru_maxrss * 1024 : -1;
}
