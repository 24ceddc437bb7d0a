// bench_cpu_adam.cpp — times the CPU optimizer kernels of cpu_adam.cpp on large arrays and prints params/s
// and effective memory bandwidth next to a plain parallel memcpy, so one can see how close AdamW gets to
// the machine's bandwidth (it should be memory-bound).
// It checks nothing (test/test_cpu_adam.cpp does) and is not run by `make test`.
// Its last line is `RESULT {json}` with the Gparam/s of each kernel (best of reps), for
// dev/bench/bench_table.py.
//
// usage: build/bench_cpu_adam [n_params=67108864] [threads=0 (OpenMP default)] [reps=5]
// Bytes counted per param (reads + writes, not counting write-allocate reads):
//   adamw f32 grad : 4 param + 4 grad + 4 m + 4 v read, 4 param + 4 m + 4 v + 2 bf16 written = 30
//   adamw bf16 grad: the same with a 2-byte gradient = 28
//   memcpy 8 (4 read + 4 written), sumsq_f32 4, convert_f32_to_bf16 6
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <chrono>
#include "cpu_adam.h"
#include "crc32c.h"

static double now_s(void) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static void* alloc64(size_t bytes) {
    void* p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "error: out of memory allocating %.2f GB\n", bytes / 1e9);
        exit(1);
    }
    return p;
}

typedef struct {
    double best, mean;
} Timing;

// One untimed warm-up call (page faults, frequency ramp), then reps timed calls.
template <typename F>
static Timing time_it(int reps, F f) {
    f(0);
    Timing t = {1e30, 0.0};
    for (int r = 1; r <= reps; r++) {
        const double t0 = now_s();
        f(r);
        const double dt = now_s() - t0;
        t.best = dt < t.best ? dt : t.best;
        t.mean += dt / reps;
    }
    return t;
}

// Prints one human-readable line and returns the Gparam/s of the best rep.
static double report(const char* name, Timing t, int64_t n, double bytes_per_param) {
    printf("%-22s best %8.2f ms  mean %8.2f ms  %7.3f Gparam/s  %7.1f GB/s\n", name, t.best * 1e3,
           t.mean * 1e3, n / t.best / 1e9, n * bytes_per_param / t.best / 1e9);
    return n / t.best / 1e9;
}

int main(int argc, char** argv) {
    const int64_t n = argc > 1 ? atoll(argv[1]) : ((int64_t)1 << 26);
    const int threads = argc > 2 ? atoi(argv[2]) : 0;
    const int reps = argc > 3 ? atoi(argv[3]) : 5;
    if (n <= 0 || threads < 0 || reps <= 0) {
        fprintf(stderr, "usage: %s [n_params > 0] [threads >= 0] [reps > 0]\n", argv[0]);
        return 1;
    }
    if (threads > 0) omp_set_num_threads(threads);
    cpu_adam_set_threads(threads);

    float* p = (float*)alloc64((size_t)n * 4);
    float* g = (float*)alloc64((size_t)n * 4);
    float* m = (float*)alloc64((size_t)n * 4);
    float* v = (float*)alloc64((size_t)n * 4);
    uint16_t* gb = (uint16_t*)alloc64((size_t)n * 2);
    uint16_t* out = (uint16_t*)alloc64((size_t)n * 2);
    // First touch in parallel so pages land near the threads that will use them (matters on NUMA boxes).
    // Values are GPT-like: weights ~0.02, gradients ~1e-3; nothing subnormal.
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const uint32_t h = (uint32_t)i * 2654435761u;
        const float r = (float)(h >> 8) / 16777216.0f - 0.5f;  // [-0.5, 0.5)
        p[i] = 0.04f * r;
        g[i] = 2e-3f * r + 1e-5f;
        gb[i] = float_to_bf16(g[i]);
        m[i] = 0.0f;
        v[i] = 0.0f;
        out[i] = 0;
    }

    printf("bench_cpu_adam: n = %lld params (%.2f GB of fp32 state), simd = %s, threads = %d%s, reps = %d\n",
           (long long)n, n * 16.0 / 1e9, cpu_adam_simd_name(), threads > 0 ? threads : omp_get_max_threads(),
           threads > 0 ? "" : " (OpenMP default)", reps);

    // Context: a parallel memcpy of one fp32 array (each thread copies a contiguous piece).
    const Timing tc = time_it(reps, [&](int) {
#pragma omp parallel
        {
            const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
            const int64_t lo = n * tid / nt, hi = n * (tid + 1) / nt;
            memcpy(m + lo, p + lo, (size_t)(hi - lo) * 4);
        }
    });
    const double g_memcpy = report("memcpy fp32", tc, n, 8);
    memset(m, 0, (size_t)n * 4);

    volatile double sink = 0.0;
    const double g_sumsq_f32 =
        report("sumsq_f32", time_it(reps, [&](int) { sink = sink + sumsq_f32(g, n); }), n, 4);
    const double g_sumsq_bf16 =
        report("sumsq_bf16", time_it(reps, [&](int) { sink = sink + sumsq_bf16(gb, n); }), n, 2);
    const double g_convert =
        report("convert_f32_to_bf16", time_it(reps, [&](int) { convert_f32_to_bf16(p, out, n); }), n, 6);

    AdamWArgs a = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 1};
    const double g_adam_f32 = report("adamw f32 grad",
                                     time_it(reps,
                                             [&](int r) {
                                                 a.t = 1 + r;
                                                 adamw_update_f32grad(p, g, m, v, out, n, &a);
                                             }),
                                     n, 30);
    const double g_adam_bf16 = report("adamw bf16 grad",
                                      time_it(reps,
                                              [&](int r) {
                                                  a.t = 1 + r;
                                                  adamw_update_bf16grad(p, gb, m, v, out, n, &a);
                                              }),
                                      n, 28);

    // The checkpoint checksum (crc32c.h) over the fp32 params, on ONE thread as a checkpoint save computes it
    // while writing: it must outrun the disk. Reported as GB/s of data (4 bytes per param).
    volatile uint32_t crc_sink = 0;
    const Timing tcrc = time_it(reps, [&](int) { crc_sink = crc_sink ^ crc32c_update(0, p, (size_t)n * 4); });
    printf("%-22s best %8.2f ms  mean %8.2f ms  %7.3f Gparam/s  %7.1f GB/s  (1 thread, %s)\n",
           "crc32c (checkpoints)", tcrc.best * 1e3, tcrc.mean * 1e3, n / tcrc.best / 1e9,
           n * 4.0 / tcrc.best / 1e9, crc32c_impl_name());

    // Machine-readable summary (Gparam/s, best of reps; the adamw kernels include the bf16 copy
    // of the params).
    printf(
        "RESULT {\"bench\": \"cpu_adam\", \"n\": %lld, \"threads\": %d, \"simd\": \"%s\", \"reps\": %d, "
        "\"memcpy_f32\": %.4f, \"sumsq_f32\": %.4f, \"sumsq_bf16\": %.4f, \"convert_f32_to_bf16\": %.4f, "
        "\"adamw_f32grad\": %.4f, \"adamw_bf16grad\": %.4f, \"memcpy_GBs\": %.2f, \"crc32c_GBs\": %.2f}\n",
        (long long)n, threads > 0 ? threads : omp_get_max_threads(), cpu_adam_simd_name(), reps, g_memcpy,
        g_sumsq_f32, g_sumsq_bf16, g_convert, g_adam_f32, g_adam_bf16, g_memcpy * 8.0,
        n * 4.0 / tcrc.best / 1e9);

    free(p);
    free(g);
    free(m);
    free(v);
    free(gb);
    free(out);
    return 0;
}
