// stop_signal.h — Ctrl-C / SIGTERM without losing work.
// First signal: finish the step, save, exit 128 + signal. Second: exit now. During the set-up, before the
// first step: exit now, in one line (stop_signal_install_setup).
#pragma once
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal_received = 0;
// Several ranks of a node, which all get the signal (-pn's launcher forwards it): only the node's first says
// what it does, the others are quiet (the node's terminal showed the line once a rank).
static volatile sig_atomic_t stop_signal_quiet = 0;

static void stop_signal_handler(int sig) {
    const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    char msg[160] = "\n";
    if (stop_signal_received) {  // second: async-signal-safe calls only (write, _exit)
        strcat(msg, name);
        strcat(msg, " again: exiting now, without a checkpoint\n");
        if (!stop_signal_quiet && write(2, msg, strlen(msg)) < 0) {}
        _exit(128 + sig);
    }
    stop_signal_received = sig;
    strcat(msg, name);
    strcat(msg, ": finishing this step, then saving a checkpoint (with -o) and exiting; again to exit now\n");
    if (!stop_signal_quiet && write(2, msg, strlen(msg)) < 0) {}
}

// The set-up (a model's load, an SSD store's files: seconds to minutes) has nothing to finish or save, and
// what it writes survives a kill -9 as well (the tests): the signal ends the process at once, in one line. It
// died of the signal, silently, leaving its lock files (a hostile trial).
static void stop_signal_setup_handler(int sig) {
    const char* line = sig == SIGINT
                           ? "\nSIGINT during the set-up: exiting now (nothing trained or saved yet)\n"
                           : "\nSIGTERM during the set-up: exiting now (nothing trained or saved yet)\n";
    if (!stop_signal_quiet && write(2, line, strlen(line)) < 0) {}
    _exit(128 + sig);
}

// handler for SIGINT and SIGTERM. SA_RESTART: interrupted reads and writes resume.
static inline void on_stop_signals(void (*handler)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}
static inline void stop_signal_install(void) { on_stop_signals(stop_signal_handler); }
static inline void stop_signal_install_setup(void) { on_stop_signals(stop_signal_setup_handler); }

// The stop signal (SIGINT or SIGTERM), or 0.
static inline int stop_signal_pending(void) { return stop_signal_received; }
// For stop_if_signalled: one process, nothing to finish with others.
static inline void stop_end_alone(void) {}

// Between steps: on a stop signal, save() (with -o), exit 128 + signal. sig: the signal the ranks of a
// multi-GPU run agreed on (0: none, even where one arrived since: the next agreement takes it); -1: this
// process's own. end(), on every stop, saved or not, before the exit: several ranks and nodes finish together
// there (a node that closed its links while another still sends to it would look dead to that one).
template <typename Save, typename End>
static void stop_if_signalled(int steps_done, int first_step, int last_step, int64_t saved_step,
                              const char* dir, Save save, int sig, End end) {
    if (sig < 0) sig = stop_signal_pending();
    if (!sig) return;
    const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    if (!dir) {
        printf("stopped by %s after step %d (no -o: nothing saved)\n", name, steps_done);
    } else if (steps_done == first_step && saved_step < 0) {
        printf("stopped by %s before the first step: nothing to save\n", name);
    } else {
        if (saved_step != steps_done) save();
        if (steps_done >= last_step)  // during the last step's validation or sample: the run is complete
            printf(
                "stopped by %s after the run's last step, %d: its checkpoint is in %s, nothing is left to "
                "resume\n",
                name, steps_done, dir);
        else printf("stopped by %s after step %d: resume with -y 1 -o %s\n", name, steps_done, dir);
    }
    end();
    fflush(NULL);
    _exit(128 + sig);
}
