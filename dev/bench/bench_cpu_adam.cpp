// bench_cpu_adam.cpp — times the CPU optimizer kernels of cpu_adam.cpp on large arrays and prints params/s
// and effective memory bandwidth next to a plain parallel memcpy, so one can see how close AdamW gets to
// the machine's bandwidth (it should be memory-bound).
// It checks nothing (test/test_cpu_adam.cpp does) and is not run by `make test`.
// Its last line is `RESULT {json}` with the Gparam/s of each kernel (best of reps), read by
// dev/bench/gpu_window.sh.
//
// usage: build/bench_cpu_adam [n_params=67108864] [threads=0 (OpenMP default)] [reps=5]
//        build/bench_cpu_adam --disk DIR [n_params=67108864] [threads=0] [reps=3]
//        build/bench_cpu_adam --io DIR [GiB=4] [seconds=3]
// I/O mode (issue 42: measure the disk first, no fio needed): ssd_probe_rates at queue depths 4, 16 (the
// tier's) and 32: writes alone, reads alone, and reads of one file beside writes of another through one
// SsdIo, as the round and the gradient writer run; 64 MiB requests in 4 MiB chunks, O_DIRECT. Last line:
// RESULT {json} (GB/s), which gpu_window.sh's disk_rates check reads.
// Disk mode (issue 22's SSD tier, llmc/ssd.h): the AdamW round over state on disk in DIR (fp32 params, m, v
// read and written back with O_DIRECT, 24 bytes per param; bf16 gradients from RAM, bf16 copy to RAM, as with
// -sd), next to the in-RAM AdamW on the same n and the disk measured independently by fio (O_DIRECT
// sequential write, read, a 50/50 mix in one job, and a read and a write stream at once; 4 MiB blocks, 16 in
// flight) and by ssd_probe_bandwidth. Target: the round reaches 85% of min(fio's better mixed bandwidth / 24
// bytes, in-RAM rate). It needs about 24 * n bytes free in DIR (two generations of the state) plus fio's
// file, and removes them at the end. Bytes counted per param (reads + writes, not
// counting write-allocate reads):
//   adamw f32 grad : 4 param + 4 grad + 4 m + 4 v read, 4 param + 4 m + 4 v + 2 bf16 written = 30
//   adamw bf16 grad: the same with a 2-byte gradient = 28
//   memcpy 8 (4 read + 4 written), sumsq_f32 4, convert_f32_to_bf16 6
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>
#include <sys/statvfs.h>
#include <unistd.h>
#include "llmc/cpu_adam.h"
#include "llmc/crc32c.h"
#include "llmc/ssd.h"

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

static int disk_main(int argc, char** argv);

static int io_main(int argc, char** argv) {
    if (argc < 3 || (argc > 3 && atof(argv[3]) <= 0) || (argc > 4 && atof(argv[4]) <= 0)) {
        fprintf(stderr, "usage: %s --io DIR [GiB > 0] [seconds > 0]\n", argv[0]);
        return 1;
    }
    const char* dir = argv[2];
    const double gib = argc > 3 ? atof(argv[3]) : 4.0, seconds = argc > 4 ? atof(argv[4]) : 3.0;
    printf(
        "bench_cpu_adam --io %s: two files of up to %.1f GiB, %.1f s a phase, 64 MiB requests in 4 MiB "
        "chunks\n",
        dir, gib, seconds);
    printf("%-12s %12s %12s %26s\n", "queue depth", "write GB/s", "read GB/s", "both at once: read + write");
    std::string json = "RESULT {\"mode\": \"disk\"";
    const char* backend = "";
    int direct = 1;
    for (int qd : {4, 16, 32}) {
        SsdRates r;
        char err[1024];
        if (ssd_probe_rates(dir, seconds, (int64_t)(gib * 1073741824.0), qd, &r, err, sizeof err) != 0) {
            fprintf(stderr, "error: %s\n", err);
            return 1;
        }
        printf("%-12d %12.2f %12.2f %13.2f + %.2f = %.2f\n", qd, r.write_bps / 1e9, r.read_bps / 1e9,
               r.mixed_read_bps / 1e9, r.mixed_write_bps / 1e9, (r.mixed_read_bps + r.mixed_write_bps) / 1e9);
        char part[256];
        snprintf(part, sizeof part,
                 ", \"qd%d_write\": %.3f, \"qd%d_read\": %.3f, \"qd%d_mixed_read\": %.3f, "
                 "\"qd%d_mixed_write\": %.3f",
                 qd, r.write_bps / 1e9, qd, r.read_bps / 1e9, qd, r.mixed_read_bps / 1e9, qd,
                 r.mixed_write_bps / 1e9);
        json += part;
        backend = r.backend;
        direct = direct && r.direct;
    }
    printf("backend %s, O_DIRECT %s\n", backend, direct ? "yes" : "NO (buffered: the page cache's figures)");
    printf("%s, \"direct\": %d, \"backend\": \"%s\"}\n", json.c_str(), direct, backend);
    return 0;
}

int main(int argc, char** argv) {
    if (argc > 1 && strcmp(argv[1], "--disk") == 0) return disk_main(argc, argv);
    if (argc > 1 && strcmp(argv[1], "--io") == 0) return io_main(argc, argv);
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

// ----------------------------------------------------------------------------
// Disk mode

// One fio job on dir (O_DIRECT, libaio, 4 MiB blocks, 16 in flight, `seconds` long over a file of `bytes`):
// returns the read and write bandwidth in bytes/s (0 for a direction the job does not do); 0 if fio ran.
static int run_fio(const char* dir, const char* rw, int64_t bytes, int seconds, double* rd, double* wr) {
    char cmd[2048];
    // rw "concurrent": two jobs at once, one reading a file and one writing another (what the round does: it
    // reads pieces ahead while it writes the ones behind, to other files or regions), reported together
    if (strcmp(rw, "concurrent") == 0)
        snprintf(cmd, sizeof cmd,
                 "fio --directory='%s' --size=%lld --bs=4M --direct=1 --ioengine=libaio --iodepth=8 "
                 "--time_based --runtime=%d --group_reporting --output-format=terse --terse-version=3 "
                 "--name=r --rw=read "
                 "--filename=fio_bench_r.tmp --name=w --rw=write --filename=fio_bench_w.tmp 2>/dev/null",
                 dir, (long long)bytes / 2, seconds);
    else
        snprintf(cmd, sizeof cmd,
                 "fio --name=bench_cpu_adam --directory='%s' --filename=fio_bench.tmp --size=%lld --bs=4M "
                 "--direct=1 --ioengine=libaio --iodepth=16 --rw=%s --rwmixread=50 --time_based --runtime=%d "
                 "--output-format=terse --terse-version=3 2>/dev/null",
                 dir, (long long)bytes, rw, seconds);
    FILE* p = popen(cmd, "r");
    if (!p) return -1;
    char line[8192] = "";
    std::string out;
    while (fgets(line, sizeof line, p)) out += line;
    const int rc = pclose(p);
    if (rc != 0 || out.empty()) return -1;
    // terse v3: field 7 is the read bandwidth in KiB/s, field 48 the write bandwidth
    std::vector<std::string> f;
    size_t a = 0;
    for (size_t i = 0; i <= out.size(); i++)
        if (i == out.size() || out[i] == ';') {
            f.push_back(out.substr(a, i - a));
            a = i + 1;
        }
    if (f.size() < 49) return -1;
    *rd = atof(f[6].c_str()) * 1024.0;
    *wr = atof(f[47].c_str()) * 1024.0;
    return 0;
}

typedef struct {
    const uint16_t* grads;  // n bf16 gradients (RAM), laid out like the store's layers
    uint16_t* bf16;         // n bf16 weights out (RAM)
    int64_t layer_elems;
    AdamWArgs args;
} DiskCtx;
static const uint16_t* disk_grads(void* c, int layer) {
    DiskCtx* x = (DiskCtx*)c;
    return x->grads + (int64_t)layer * x->layer_elems;
}
static uint16_t* disk_bf16(void* c, int layer) {
    DiskCtx* x = (DiskCtx*)c;
    return x->bf16 + (int64_t)layer * x->layer_elems;
}
static void disk_update(void* c, int layer, int64_t off, int64_t n, float* p, const uint16_t* g, float* m,
                        float* v, uint16_t* b) {
    adamw_update_bf16grad(p, g, m, v, b, n, &((DiskCtx*)c)->args);
}

static int disk_main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s --disk DIR [n_params > 0] [threads >= 0] [reps > 0]\n", argv[0]);
        return 1;
    }
    const char* dir = argv[2];
    const int64_t n = argc > 3 ? atoll(argv[3]) : ((int64_t)1 << 26);
    const int threads = argc > 4 ? atoi(argv[4]) : 0;
    const int reps = argc > 5 ? atoi(argv[5]) : 3;
    const int layers = 8;
    if (n < layers * 4096 || threads < 0 || reps <= 0) {
        fprintf(stderr, "usage: %s --disk DIR [n_params >= %d] [threads >= 0] [reps > 0]\n", argv[0],
                layers * 4096);
        return 1;
    }
    if (threads > 0) omp_set_num_threads(threads);
    cpu_adam_set_threads(threads);
    const int64_t L = layers, ne = n / L, nn = ne * L;  // n rounded down to whole layers
    SsdStoreConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.num_layers = (int)L;
    cfg.layer_elems = ne;
    cfg.ring = 4;
    cfg.piece_elems = (int64_t)4 << 20;
    const int64_t fio_bytes = std::min((int64_t)2 << 30, nn * 12);
    struct statvfs sv;
    if (statvfs(dir, &sv) != 0) {
        fprintf(stderr, "error: cannot use %s: %s\n", dir, strerror(errno));
        return 1;
    }
    const double avail = (double)sv.f_bavail * (double)sv.f_frsize;
    const double need = (double)ssd_store_disk_bytes(&cfg) + (double)fio_bytes;
    if (need > avail * 0.5) {
        fprintf(
            stderr,
            "error: %s has %.1f GiB free; this run needs %.1f GiB and keeps half the disk free: lower n\n",
            dir, avail / 1073741824.0, need / 1073741824.0);
        return 1;
    }
    printf(
        "bench_cpu_adam --disk %s: n = %lld params in %lld layers (%.2f GB of fp32 state per generation), "
        "simd = %s, "
        "threads = %d, reps = %d\n",
        dir, (long long)nn, (long long)L, nn * 12.0 / 1e9, cpu_adam_simd_name(),
        threads > 0 ? threads : omp_get_max_threads(), reps);

    // the in-RAM AdamW on the same parameters (bf16 gradients, bf16 copy out: what the trainer runs)
    float* p = (float*)alloc64((size_t)nn * 4);
    float* m = (float*)alloc64((size_t)nn * 4);
    float* v = (float*)alloc64((size_t)nn * 4);
    uint16_t* gb = (uint16_t*)alloc64((size_t)nn * 2);
    uint16_t* out = (uint16_t*)alloc64((size_t)nn * 2);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < nn; i++) {
        const uint32_t h = (uint32_t)i * 2654435761u;
        const float r = (float)(h >> 8) / 16777216.0f - 0.5f;
        p[i] = 0.04f * r;
        gb[i] = float_to_bf16(2e-3f * r + 1e-5f);
        m[i] = 0.0f;
        v[i] = 0.0f;
        out[i] = 0;
    }
    AdamWArgs a = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 1};
    const Timing tram = time_it(reps, [&](int r) {
        a.t = 1 + r;
        adamw_update_bf16grad(p, gb, m, v, out, nn, &a);
    });
    const double ram_rate = nn / tram.best;
    report("adamw in RAM", tram, nn, 28);

    // the disk, measured by fio (independent of the SSD tier) and by llmc/ssd_io.cpp's probe
    double fw_r = 0, fw_w = 0, fr_r = 0, fr_w = 0, fm_r = 0, fm_w = 0, fc_r = 0, fc_w = 0;
    const bool have_fio = run_fio(dir, "write", fio_bytes, 4, &fw_r, &fw_w) == 0 &&
                          run_fio(dir, "read", fio_bytes, 4, &fr_r, &fr_w) == 0 &&
                          run_fio(dir, "rw", fio_bytes, 4, &fm_r, &fm_w) == 0 &&
                          run_fio(dir, "concurrent", fio_bytes, 4, &fc_r, &fc_w) == 0;
    for (const char* f : {"fio_bench.tmp", "fio_bench_r.tmp", "fio_bench_w.tmp"})
        unlink((std::string(dir) + "/" + f).c_str());
    if (have_fio)
        printf(
            "fio (O_DIRECT, 4 MiB x 16)   write %7.0f MB/s   read %7.0f MB/s   50/50 mix %7.0f MB/s (read "
            "%.0f + write %.0f)   "
            "read and write streams at once %7.0f MB/s (read %.0f + write %.0f)\n",
            fw_w / 1e6, fr_r / 1e6, (fm_r + fm_w) / 1e6, fm_r / 1e6, fm_w / 1e6, (fc_r + fc_w) / 1e6,
            fc_r / 1e6, fc_w / 1e6);
    else printf("fio not found or failed: the disk figure below comes from ssd_probe_bandwidth alone\n");
    double pr = 0, pw = 0;
    int direct = 0;
    char err[1024] = "";
    if (ssd_probe_bandwidth(dir, 4.0, (int64_t)1 << 30, &pr, &pw, &direct, err, sizeof err) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    printf("ssd_probe_bandwidth          write %7.0f MB/s   read %7.0f MB/s   (O_DIRECT %s)\n", pw / 1e6,
           pr / 1e6, direct ? "yes" : "NO");

    // the round over the state on disk
    SsdStore* st = ssd_store_create(dir, &cfg, err, sizeof err);
    if (!st) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    for (int l = 0; l < L; l++)
        if (ssd_store_write_layer(st, l, p + l * ne, m + l * ne, v + l * ne, err, sizeof err) != 0) {
            fprintf(stderr, "error: %s\n", err);
            ssd_store_close(st);
            return 1;
        }
    printf(
        "ssd store: backend %s, ring %d x %lld params (%.0f MiB of host RAM), chunks of 4 MiB, 16 in "
        "flight\n",
        ssd_io_backend(ssd_store_io(st)), cfg.ring, (long long)cfg.piece_elems,
        ssd_store_ring_bytes(&cfg) / 1048576.0);
    DiskCtx ctx = {gb, out, ne, a};
    SsdRoundFns fns = {disk_grads, disk_update, disk_bf16, NULL, &ctx, NULL};
    std::vector<int> order((size_t)L);
    for (int l = 0; l < L; l++) order[(size_t)l] = l;
    int failed = 0;
    int64_t r0 = 0, w0 = 0, r1 = 0, w1 = 0;
    ssd_io_counters(ssd_store_io(st), &r0, &w0);
    const Timing tdisk = time_it(reps, [&](int r) {
        ctx.args.t = 1 + r;
        if (!failed && ssd_store_round(st, order.data(), (int)L, &fns, err, sizeof err) != 0) failed = 1;
    });
    ssd_io_counters(ssd_store_io(st), &r1, &w1);
    const char* backend = ssd_io_backend(ssd_store_io(st));  // a string literal: outlives the store
    ssd_store_close(st);
    for (const char* f : {"gen0/params.f32", "gen0/m.f32", "gen0/v.f32", "gen1/params.f32", "gen1/m.f32",
                          "gen1/v.f32", "ssd_manifest"})
        unlink((std::string(dir) + "/" + f).c_str());
    rmdir((std::string(dir) + "/gen0").c_str());
    rmdir((std::string(dir) + "/gen1").c_str());
    if (failed) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    const double bpp =
        (double)(r1 - r0 + w1 - w0) / (reps + 1) / nn;  // disk bytes per param per round, measured
    // the disk's bandwidth for the round's bytes (half read, half written): the better of fio's two ways of
    // mixing them (the stricter bound), else the probe's read and write one after the other
    const double disk_mix = have_fio ? std::max(fm_r + fm_w, fc_r + fc_w) : 2.0 / (1.0 / pr + 1.0 / pw);
    const double disk_rate = disk_mix / 24.0;
    const double bound = std::min(disk_rate, ram_rate);
    const double disk_round_rate = nn / tdisk.best;
    printf("%-22s best %8.2f ms  mean %8.2f ms  %7.3f Gparam/s  %7.1f MB/s of disk (%.1f bytes/param)\n",
           "adamw over disk", tdisk.best * 1e3, tdisk.mean * 1e3, disk_round_rate / 1e9,
           disk_round_rate * bpp / 1e6, bpp);
    printf(
        "bound: min(disk %.3f Gparam/s = %s %.0f MB/s / 24 bytes, in RAM %.3f Gparam/s) = %.3f Gparam/s; the "
        "round "
        "reaches %.1f%% of it (target 85%%: %s)\n",
        disk_rate / 1e9, have_fio ? "fio read+write" : "probe", disk_mix / 1e6, ram_rate / 1e9, bound / 1e9,
        100.0 * disk_round_rate / bound, disk_round_rate >= 0.85 * bound ? "met" : "NOT met");
    printf(
        "RESULT {\"bench\": \"cpu_adam_disk\", \"n\": %lld, \"threads\": %d, \"reps\": %d, \"backend\": "
        "\"%s\", \"o_direct\": %s, "
        "\"adamw_ram_gparams\": %.4f, \"adamw_disk_gparams\": %.4f, \"disk_bytes_per_param\": %.2f, "
        "\"fio_write_MBs\": %.1f, \"fio_read_MBs\": %.1f, \"fio_mix_MBs\": %.1f, \"fio_concurrent_MBs\": "
        "%.1f, \"probe_write_MBs\": %.1f, "
        "\"probe_read_MBs\": %.1f, \"bound_gparams\": %.4f, \"fraction_of_bound\": %.4f, \"target_met\": "
        "%s}\n",
        (long long)nn, threads > 0 ? threads : omp_get_max_threads(), reps, backend,
        direct ? "true" : "false", ram_rate / 1e9, disk_round_rate / 1e9, bpp, fw_w / 1e6, fr_r / 1e6,
        (fm_r + fm_w) / 1e6, (fc_r + fc_w) / 1e6, pw / 1e6, pr / 1e6, bound / 1e9, disk_round_rate / bound,
        disk_round_rate >= 0.85 * bound ? "true" : "false");
    free(p);
    free(m);
    free(v);
    free(gb);
    free(out);
    return 0;
}
