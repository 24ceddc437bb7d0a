// rank_launch.h — -pn G: this process starts G rank processes on this node, one per GPU, and watches them.
// It maps the node's NodeShared (collectives.h) before it forks, so every rank finds it. Each rank:
// its own process group (a terminal's Ctrl-C reaches the launcher, which passes it on once), killed when
// the launcher dies, stdout silent but rank 0's. A rank that fails stops the others: the launcher marks it
// in NodeShared, which every waiting rank checks, and kills what still runs after a grace period.
// Not here: what a rank does (train_gpt.cu), how ranks sum (collectives.h).
#pragma once
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <new>
#include <unistd.h>
#include "collectives.h"  // defines: Comm, NodeShared, MAX_RANKS
#include "utils.h"        // defines: die, die_rank

static pid_t launch_children[MAX_RANKS];
static int launch_count = 0;
static volatile sig_atomic_t launch_signal = 0;

// Ctrl-C / SIGTERM to the launcher: to every rank, once per signal (the ranks stop after a step together).
static void launch_forward_signal(int sig) {
    launch_signal = sig;
    for (int r = 0; r < launch_count; r++)
        if (launch_children[r] > 0) kill(launch_children[r], sig);
}

// The launcher's wait: returns the run's exit status once every rank has ended.
static int launch_wait(NodeShared* node, int G) {
    int status_of_run = 0, alive = G, failed = -1;
    double failed_at = 0;
    auto now = [] {
        timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return t.tv_sec + 1e-9 * t.tv_nsec;
    };
    while (alive > 0) {
        int status = 0;
        const pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0) {
            if (failed >= 0 && now() - failed_at > 30.0)  // a rank stuck in a collective: end it
                for (int r = 0; r < G; r++)
                    if (launch_children[r] > 0) kill(launch_children[r], SIGKILL);
            usleep(50000);
            continue;
        }
        int r = 0;
        while (r < G && launch_children[r] != pid) r++;
        if (r == G) continue;
        launch_children[r] = 0;
        alive--;
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        const bool stopped = launch_signal && (code == 130 || code == 143);  // a stop that was asked for
        if (code != 0 && !stopped && failed < 0) {
            failed = r;
            failed_at = now();
            status_of_run = WIFEXITED(status) ? code : 1;
            node->failed_code.store(code);
            node->failed_rank.store(r, std::memory_order_release);
            char how[96];
            if (WIFEXITED(status)) snprintf(how, sizeof how, "ended with exit status %d", code);
            else
                snprintf(how, sizeof how, "was killed by signal %d (%s)", WTERMSIG(status),
                         strsignal(WTERMSIG(status)));
            if (node->gate_open.load())  // before: rank 0's set-up error, said once by rank 0
                fprintf(stderr, "error: rank %d of %d %s: stopping the other ranks\n", r, G, how);
        } else if (code != 0 && status_of_run == 0) {
            status_of_run = code;
        }
    }
    return status_of_run;
}

// Starts G ranks. Returns in each rank with c->rank, c->world and c->node set; the launcher itself never
// returns (it exits with the run's status).
static void rank_launch(Comm* c, int G) {
    if (G < 2) return;
    if (G > MAX_RANKS) die("-pn %d: at most %d ranks on one node", G, MAX_RANKS);
    void* p = mmap(NULL, sizeof(NodeShared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) die("cannot map the ranks' shared control block");
    NodeShared* node = new (p) NodeShared();
    node->failed_rank.store(-1);
    fflush(NULL);
    const pid_t launcher = getpid();
    for (int r = 0; r < G; r++) {
        const pid_t pid = fork();
        if (pid < 0) die("-pn %d: cannot start rank %d: %s", G, r, strerror(errno));
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);  // the launcher gone: so is this rank
            if (getppid() != launcher) _exit(1);
            setpgid(0, 0);
            signal(SIGINT, SIG_DFL);
            signal(SIGTERM, SIG_DFL);
            if (r != 0 && !freopen("/dev/null", "w", stdout)) _exit(1);
            c->rank = r;
            c->world = G;
            c->node = node;
            if (r != 0) die_rank = r;  // rank 0's set-up errors are the run's (rank_gate_open)
            return;
        }
        launch_children[r] = pid;
        launch_count = r + 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = launch_forward_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    const int status = launch_wait(node, G);
    fflush(NULL);
    _exit(status);
}

// Bad flags or data are found by rank 0 alone, in one line: the other ranks wait here until its set-up passed
// (and end quietly if it failed).
static void rank_gate_wait(const Comm* c) {
    if (c->world == 1 || c->rank == 0) return;
    while (!c->node->gate_open.load(std::memory_order_acquire)) {
        if (c->node->failed_rank.load() == 0) _exit(1);
        usleep(1000);
    }
}
static void rank_gate_open(const Comm* c) {
    if (c->world == 1 || c->rank != 0) return;
    die_rank = 0;
    c->node->gate_open.store(1, std::memory_order_release);
}
