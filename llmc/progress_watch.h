// progress_watch.h — a run of several ranks in which no rank moves on for LLMC_PROGRESS_TIMEOUT seconds (600
// by default, NCCL's timeout in PyTorch; 0: no watch) ends: every rank exits, each node says why in one line.
// What it finds: a rank that hangs while its process lives and beats (a deadlock, a GPU that stopped, a
// collective that never completes), a cut network between two nodes (node 0's links are watched by net.h's
// heartbeats, which also carry whether a node moved on, so a slow part that one rank does alone, rank 0's
// checkpoint write, keeps every node's watch quiet). Progress is counted by utils.h's progress_tick: each
// layer the main thread takes up, each block of a checkpoint written or checked, each transfer between nodes.
// From the first step to the last collective; one rank: no watch. Not here: the heartbeats (llmc/net.h), a
// rank or node that ends (llmc/collectives.h, llmc/net.h).
#pragma once
#include <time.h>
#include <unistd.h>
#include <atomic>
#include <thread>
#include "collectives.h"  // defines: Comm, NodeShared (progress_here, progress_elsewhere), comm_sum_host
#include "utils.h"        // defines: die, die_rank, die_dying, die_said, progress_ticks, progress_tick

// LLMC_PROGRESS_TIMEOUT: seconds, 0 for no watch; 600 by default.
static inline double progress_timeout_seconds() {
    const char* t = getenv("LLMC_PROGRESS_TIMEOUT");
    if (!t || !*t) return 600.0;
    char* end = NULL;
    const double s = strtod(t, &end);
    if (*end || !(s >= 0) || s > 1e7) die("LLMC_PROGRESS_TIMEOUT=%.40s: seconds, 0 for no watch", t);
    return s;
}

// utils.h's die, without stdio: the main thread may hang inside it (a write to a stuck file system, a pipe
// nobody reads) and hold a stream's lock that fflush would wait for.
static inline void progress_watch_die(double timeout) {
    char line[512];
    int n = snprintf(line, sizeof line, "error: ");
    if (die_rank >= 0) n += snprintf(line + n, sizeof line - (size_t)n, "rank %d: ", die_rank);
    n +=
        snprintf(line + n, sizeof line - (size_t)n,
                 "no rank of the run moved on in %.0f s: a rank hangs (a deadlock, a GPU that stopped, a "
                 "collective that never ends) or the network between two nodes is cut; LLMC_PROGRESS_TIMEOUT "
                 "sets the wait\n",
                 timeout);
    die_dying.store(1);  // another thread's die from here on waits (utils.h)
    if (!(die_said && die_said->exchange(1))) (void)!write(2, line, (size_t)n);  // the node's first says it
    _exit(1);
}

struct ProgressWatch {
    std::thread thread;
    std::atomic<bool> stop{false};
};
static ProgressWatch progress_watch;

// From here each rank counts its progress into the node's count, and a thread of its own ends the rank when
// neither that count nor the other nodes' (heard by the node's leader) moved in the timeout.
static inline void progress_watch_start(Comm* c) {
    if (c->world == 1 || !c->node) return;
    const double timeout = progress_timeout_seconds();
    // counted and told the other nodes, also where this one does not watch
    progress_ticks.store(&c->node->progress_here, std::memory_order_release);
    progress_tick();
    // every rank is here: a fresh run's set-up (reading a 405B model on each node) takes each node its own
    // time
    double here = 0;
    comm_sum_host(c, &here, 1);
    if (timeout <= 0) return;
    NodeShared* node = c->node;
    progress_watch.thread = std::thread([node, timeout] {
        auto now = [] {
            timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            return ts.tv_sec + 1e-9 * ts.tv_nsec;
        };
        uint64_t seen = ~(uint64_t)0;
        double moved_at = now();
        while (!progress_watch.stop.load()) {
            usleep(250 * 1000);
            const uint64_t count = node->progress_here.load() + node->progress_elsewhere.load();
            if (count != seen) {
                seen = count;
                moved_at = now();
            } else if (now() - moved_at > timeout) {
                progress_watch_die(timeout);
            }
        }
    });
}

// The last collective is done: from here each rank ends at its own pace.
static inline void progress_watch_stop() {
    if (!progress_watch.thread.joinable()) return;
    progress_watch.stop.store(true);
    progress_watch.thread.join();
}
