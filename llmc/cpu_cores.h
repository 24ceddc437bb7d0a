// cpu_cores.h — the cores this process may use, and libgomp's short spin.
#pragma once
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

// Cores cpu.max ("QUOTA PERIOD") allows, rounded up; -1: no limit or unreadable.
static inline int cgroup_quota_cores(const char* cpu_max) {
    long long quota = 0, period = 0;
    if (!cpu_max || sscanf(cpu_max, "%lld %lld", &quota, &period) != 2 || quota <= 0 || period <= 0)
        return -1;
    return (int)((quota + period - 1) / period);
}
// A rank's share of the node's cores: each core of its affinity mask (masks[me]) counted as 1 / the number of
// the node's n ranks whose masks hold it. Ranks that share one mask (children of one launcher) split it;
// ranks a launcher pinned apart (mpirun's binding, srun --cpu-bind, taskset) keep theirs whole; overlaps
// split what they share. At least 1.
static inline int cpu_share_of(const cpu_set_t* masks, int n, int me) {
    double share = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &masks[me])) continue;
        int holders = 0;
        for (int r = 0; r < n; r++) holders += CPU_ISSET(cpu, &masks[r]) != 0;
        share += 1.0 / holders;
    }
    return share >= 1 ? (int)(share + 1e-9) : 1;
}
// Affinity cores, capped by a cgroup quota (docker --cpus).
static inline int usable_cpu_cores(void) {
    cpu_set_t allowed;
    int cores = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed)
                                                                    : (int)sysconf(_SC_NPROCESSORS_ONLN);
    char text[64] = "";
    FILE* f = fopen("/sys/fs/cgroup/cpu.max", "r");  // cgroup v2
    if (f) {
        if (!fgets(text, sizeof text, f)) text[0] = '\0';
        fclose(f);
    } else {  // cgroup v1: two files
        long long quota = -1, period = -1;
        FILE* q = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r");
        FILE* pf = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r");
        if (q && pf && fscanf(q, "%lld", &quota) == 1 && fscanf(pf, "%lld", &period) == 1)
            snprintf(text, sizeof text, "%lld %lld", quota, period);
        if (q) fclose(q);
        if (pf) fclose(pf);
    }
    const int quota_cores = cgroup_quota_cores(text);
    if (quota_cores > 0 && quota_cores < cores) cores = quota_cores;
    return cores > 0 ? cores : 1;
}

// libgomp's idle threads spin and steal busy cores (a test ran 16x slower).
// main re-execs once with GOMP_SPINCOUNT=10000 unless it or OMP_WAIT_POLICY is set.
// First, OMP_NUM_THREADS: past OMP_MAX_THREADS libgomp's team start crashes or exhausts memory (100000: a
// segfault; 5000 threads took 4.9 GiB): refused in one line.
#define OMP_SHORT_SPINCOUNT "10000"
#define OMP_MAX_THREADS     4096
static inline void omp_short_spin_reexec(char** argv) {
    if (const char* t = getenv("OMP_NUM_THREADS")) {  // a list "4,2": its first level
        const long n = strtol(t, NULL, 10);
        if (n > OMP_MAX_THREADS) {
            fprintf(stderr, "error: OMP_NUM_THREADS=%.40s: at most %d threads (this machine has %d cores)\n",
                    t, OMP_MAX_THREADS, usable_cpu_cores());
            exit(1);
        }
    }
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || getenv("LLMC_OMP_REEXEC")) return;
    setenv("GOMP_SPINCOUNT", OMP_SHORT_SPINCOUNT, 1);
    setenv("LLMC_OMP_REEXEC", "1", 1);
    execv("/proc/self/exe", argv);
    unsetenv("GOMP_SPINCOUNT");  // exec failed: children keep the default too
}
