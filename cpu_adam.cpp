// cpu_adam.cpp — AdamW's CPU form, sum of squares, fp32 -> bf16: large host arrays, one pass each.
// Not here: the math (adamw.h), clipping, lr (schedulers.h). Why each trick: docs/cpu_notes.md.

// An update is memory-bound (~30 bytes, ~15 flops a parameter): one fused pass.

// Every path runs adamw_element's IEEE ops in its order: bit-identical results.
#include "llmc/cpu_adam.h"

#include <math.h>
#include <atomic>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
// GCC 12's false "'__Y' may be used uninitialized" in its AVX-512 headers (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
#if defined(__SSE__)
#include <xmmintrin.h>  // _mm_getcsr / _mm_setcsr
#endif

#if defined(__AVX512F__)
#define CPU_ADAM_VEC 16
#elif defined(__AVX2__) && defined(__FMA__)
#define CPU_ADAM_VEC 8
#else
#define CPU_ADAM_VEC 1
#endif

// Below this, the calling thread alone: waking a team costs more (a few microseconds).
#define PARALLEL_MIN ((int64_t)1 << 15)
// Fewest elements per thread.
#define MIN_PER_THREAD ((int64_t)8192)
// Chunks of 64 elements: no two threads write one cache line.
#define CHUNK_ALIGN ((int64_t)64)

static std::atomic<int> g_threads{0};

void cpu_adam_set_threads(int n) { g_threads.store(n > 0 ? n : 0, std::memory_order_relaxed); }
int cpu_adam_threads(void) {
    const int t = g_threads.load(std::memory_order_relaxed);
#ifdef _OPENMP
    return t > 0 ? t : omp_get_max_threads();
#else
    return t > 0 ? t : 1;
#endif
}

const char* cpu_adam_simd_name(void) {
#if CPU_ADAM_VEC == 16
    return "avx512";
#elif CPU_ADAM_VEC == 8
    return "avx2";
#else
    return "scalar";
#endif
}

// ----------------------------------------------------------------------------
// Splitting a range over threads

static int team_size(int64_t n) {
    if (n < PARALLEL_MIN) return 1;
#ifdef _OPENMP
    int t = g_threads.load(std::memory_order_relaxed);
    if (t <= 0) t = omp_get_max_threads();
    const int64_t cap = n / MIN_PER_THREAD;
    if (t > cap) t = (int)cap;
    return t > 1 ? t : 1;
#else
    return 1;
#endif
}

// body(tid, lo, hi) on contiguous chunks covering [0, n), one per thread; tid < team_size(n).
template <typename Body>
static void for_chunks(int64_t n, Body body) {
    const int t = team_size(n);
    if (t <= 1) {
        if (n > 0) body(0, (int64_t)0, n);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(t)
    {
        // the team may be smaller than asked: split by its real size
        const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
        const int64_t chunk = ((n + nt - 1) / nt + CHUNK_ALIGN - 1) / CHUNK_ALIGN * CHUNK_ALIGN;
        const int64_t lo = tid * chunk < n ? tid * chunk : n;
        const int64_t hi = lo + chunk < n ? lo + chunk : n;
        if (lo < hi) body((int)tid, lo, hi);
    }
#endif
}

// ----------------------------------------------------------------------------
// Scalar building blocks (the tail of every SIMD loop, and the whole loop without SIMD)

static inline float load_grad1(const float* g, int64_t i) { return g[i]; }
static inline float load_grad1(const uint16_t* g, int64_t i) { return bf16_to_float(g[i]); }

// ----------------------------------------------------------------------------
// SIMD building blocks. bf16 rounding by float_to_bf16's integer trick (vcvtneps2bf16 flushes subnormals).

#if CPU_ADAM_VEC == 16
static inline __m512 load_grad16(const float* g) { return _mm512_loadu_ps(g); }
static inline __m512 load_grad16(const uint16_t* g) {
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)g));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
}
static inline __m256i bf16x16(__m512 x) {
    const __m512i b = _mm512_castps_si512(x);
    const __m512i hi = _mm512_srli_epi32(b, 16);
    const __m512i bias =
        _mm512_add_epi32(_mm512_and_si512(hi, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7FFF));
    const __m512i rne = _mm512_srli_epi32(_mm512_add_epi32(b, bias), 16);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7FFFFFFF)),
                                                  _mm512_set1_epi32(0x7F800000));
    const __m512i r = _mm512_mask_mov_epi32(rne, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);  // lanes < 2^16: truncation packs
}
#elif CPU_ADAM_VEC == 8
static inline __m256 load_grad8(const float* g) { return _mm256_loadu_ps(g); }
static inline __m256 load_grad8(const uint16_t* g) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)g));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}
static inline __m128i bf16x8(__m256 x) {
    const __m256i b = _mm256_castps_si256(x);
    const __m256i hi = _mm256_srli_epi32(b, 16);
    const __m256i bias =
        _mm256_add_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(1)), _mm256_set1_epi32(0x7FFF));
    const __m256i rne = _mm256_srli_epi32(_mm256_add_epi32(b, bias), 16);
    const __m256i nan =
        _mm256_cmpgt_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
    const __m256i r = _mm256_blendv_epi8(rne, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
    // lanes in [0, 2^16): packus's saturation never applies
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}
#endif

// ----------------------------------------------------------------------------
// AdamW

// The bf16 copy uses streaming stores: only the GPU's DMA reads it, so it skips the cache.
// They need an aligned destination and an sfence before the copy is signalled.
template <typename G>
static void adam_range(float* __restrict p, const G* __restrict g, float* __restrict m, float* __restrict v,
                       uint16_t* __restrict out, int64_t lo, int64_t hi, const AdamWConstants* c) {
    int64_t i = lo;
#if CPU_ADAM_VEC > 1
    const uintptr_t out_align = CPU_ADAM_VEC * sizeof(uint16_t) - 1;  // 32 (AVX-512) or 16 (AVX2) bytes
    for (; out && i < hi && ((uintptr_t)(out + i) & out_align) != 0; i++) {
        p[i] = adamw_element(p[i], load_grad1(g, i), m + i, v + i, *c);
        out[i] = float_to_bf16(p[i]);
    }
#endif
#if CPU_ADAM_VEC == 16
    const __m512 b1 = _mm512_set1_ps(c->b1), b2 = _mm512_set1_ps(c->b2), omb1 = _mm512_set1_ps(c->omb1),
                 omb2 = _mm512_set1_ps(c->omb2), ibc1 = _mm512_set1_ps(c->ibc1),
                 irs2 = _mm512_set1_ps(c->irs2), eps = _mm512_set1_ps(c->eps),
                 neg_lr = _mm512_set1_ps(c->neg_lr), wd = _mm512_set1_ps(c->wd),
                 scale = _mm512_set1_ps(c->scale);
    for (; i + 16 <= hi; i += 16) {
        const __m512 gr = _mm512_mul_ps(load_grad16(g + i), scale);
        const __m512 mm = _mm512_fmadd_ps(b1, _mm512_loadu_ps(m + i), _mm512_mul_ps(omb1, gr));
        const __m512 vv =
            _mm512_fmadd_ps(b2, _mm512_loadu_ps(v + i), _mm512_mul_ps(_mm512_mul_ps(omb2, gr), gr));
        const __m512 denom = _mm512_fmadd_ps(_mm512_sqrt_ps(vv), irs2, eps);
        const __m512 upd = _mm512_div_ps(_mm512_mul_ps(mm, ibc1), denom);
        const __m512 pp = _mm512_loadu_ps(p + i);
        const __m512 np = _mm512_fmadd_ps(neg_lr, _mm512_fmadd_ps(wd, pp, upd), pp);
        _mm512_storeu_ps(m + i, mm);
        _mm512_storeu_ps(v + i, vv);
        _mm512_storeu_ps(p + i, np);
        if (out) _mm256_stream_si256((__m256i*)(out + i), bf16x16(np));
    }
    if (out) _mm_sfence();
#elif CPU_ADAM_VEC == 8
    const __m256 b1 = _mm256_set1_ps(c->b1), b2 = _mm256_set1_ps(c->b2), omb1 = _mm256_set1_ps(c->omb1),
                 omb2 = _mm256_set1_ps(c->omb2), ibc1 = _mm256_set1_ps(c->ibc1),
                 irs2 = _mm256_set1_ps(c->irs2), eps = _mm256_set1_ps(c->eps),
                 neg_lr = _mm256_set1_ps(c->neg_lr), wd = _mm256_set1_ps(c->wd),
                 scale = _mm256_set1_ps(c->scale);
    for (; i + 8 <= hi; i += 8) {
        const __m256 gr = _mm256_mul_ps(load_grad8(g + i), scale);
        const __m256 mm = _mm256_fmadd_ps(b1, _mm256_loadu_ps(m + i), _mm256_mul_ps(omb1, gr));
        const __m256 vv =
            _mm256_fmadd_ps(b2, _mm256_loadu_ps(v + i), _mm256_mul_ps(_mm256_mul_ps(omb2, gr), gr));
        const __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(vv), irs2, eps);
        const __m256 upd = _mm256_div_ps(_mm256_mul_ps(mm, ibc1), denom);
        const __m256 pp = _mm256_loadu_ps(p + i);
        const __m256 np = _mm256_fmadd_ps(neg_lr, _mm256_fmadd_ps(wd, pp, upd), pp);
        _mm256_storeu_ps(m + i, mm);
        _mm256_storeu_ps(v + i, vv);
        _mm256_storeu_ps(p + i, np);
        if (out) _mm_stream_si128((__m128i*)(out + i), bf16x8(np));
    }
    if (out) _mm_sfence();
#endif
    for (; i < hi; i++) {
        p[i] = adamw_element(p[i], load_grad1(g, i), m + i, v + i, *c);
        if (out) out[i] = float_to_bf16(p[i]);
    }
}

// FTZ and DAZ during the update: subnormal v is slow (1.7x on Zen 4) and far below eps.
// The thread's setting is restored after; the GPU flushes too.
#if defined(__SSE__)
static inline unsigned flush_subnormals_begin(void) {
    const unsigned old = _mm_getcsr();
    _mm_setcsr(old | 0x8040u);  // bit 15: flush-to-zero, bit 6: denormals-are-zero
    return old;
}
static inline void flush_subnormals_end(unsigned old) { _mm_setcsr(old); }
#else
static inline unsigned flush_subnormals_begin(void) { return 0; }
static inline void flush_subnormals_end(unsigned) {}
#endif

template <typename G>
static void adam_any(float* params, const G* grads, float* m, float* v, uint16_t* out, int64_t n,
                     const AdamWArgs* a) {
    const AdamWConstants c = adamw_constants(a);
    for_chunks(n, [&](int, int64_t lo, int64_t hi) {
        const unsigned csr = flush_subnormals_begin();
        adam_range(params, grads, m, v, out, lo, hi, &c);
        flush_subnormals_end(csr);
    });
}

void adamw_update_f32grad(float* params, const float* grads, float* m, float* v, uint16_t* params_bf16_out,
                          int64_t n, const AdamWArgs* a) {
    adam_any(params, grads, m, v, params_bf16_out, n, a);
}

void adamw_update_bf16grad(float* params, const uint16_t* grads, float* m, float* v,
                           uint16_t* params_bf16_out, int64_t n, const AdamWArgs* a) {
    adam_any(params, grads, m, v, params_bf16_out, n, a);
}

template <typename Grad>
static void adamw_tensors_window(int count, const int64_t* offset, const int64_t* size, const int* is_matrix,
                                 int64_t lo, int64_t n, float* params, const Grad* grads, float* m, float* v,
                                 uint16_t* bf16_out, const AdamWArgs* args) {
    const int64_t hi = lo + n;
    for (int i = 0; i < count; i++) {
        const int64_t a = offset[i] > lo ? offset[i] : lo;
        const int64_t b = offset[i] + size[i] < hi ? offset[i] + size[i] : hi;
        if (a >= b) continue;
        AdamWArgs t = *args;
        if (!is_matrix[i]) t.weight_decay = 0.0f;
        const int64_t o = a - lo;
        adamw_update(params + o, grads + o, m + o, v + o, bf16_out ? bf16_out + o : NULL, b - a, &t);
    }
}
void adamw_tensors_window_bf16grad(int count, const int64_t* offset, const int64_t* size,
                                   const int* is_matrix, int64_t lo, int64_t n, float* params,
                                   const uint16_t* grads, float* m, float* v, uint16_t* bf16_out,
                                   const AdamWArgs* args) {
    adamw_tensors_window(count, offset, size, is_matrix, lo, n, params, grads, m, v, bf16_out, args);
}
void adamw_tensors_window_f32grad(int count, const int64_t* offset, const int64_t* size, const int* is_matrix,
                                  int64_t lo, int64_t n, float* params, const float* grads, float* m,
                                  float* v, uint16_t* bf16_out, const AdamWArgs* args) {
    adamw_tensors_window(count, offset, size, is_matrix, lo, n, params, grads, m, v, bf16_out, args);
}

// ----------------------------------------------------------------------------
// Sum of squares, in double accumulators (x*x of a float is exact in double).

template <typename G>
static double sumsq_range(const G* __restrict x, int64_t lo, int64_t hi) {
    int64_t i = lo;
    double s = 0.0;
#if CPU_ADAM_VEC == 16
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    for (; i + 16 <= hi; i += 16) {
        const __m512 f = load_grad16(x + i);
        const __m512d d0 = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
        const __m512d d1 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)));
        a0 = _mm512_fmadd_pd(d0, d0, a0);
        a1 = _mm512_fmadd_pd(d1, d1, a1);
    }
    s = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
#elif CPU_ADAM_VEC == 8
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd(), a2 = _mm256_setzero_pd(),
            a3 = _mm256_setzero_pd();
    for (; i + 16 <= hi; i += 16) {
        const __m256 f0 = load_grad8(x + i), f1 = load_grad8(x + i + 8);
        const __m256d d0 = _mm256_cvtps_pd(_mm256_castps256_ps128(f0)),
                      d1 = _mm256_cvtps_pd(_mm256_extractf128_ps(f0, 1));
        const __m256d d2 = _mm256_cvtps_pd(_mm256_castps256_ps128(f1)),
                      d3 = _mm256_cvtps_pd(_mm256_extractf128_ps(f1, 1));
        a0 = _mm256_fmadd_pd(d0, d0, a0);
        a1 = _mm256_fmadd_pd(d1, d1, a1);
        a2 = _mm256_fmadd_pd(d2, d2, a2);
        a3 = _mm256_fmadd_pd(d3, d3, a3);
    }
    double lanes[4];
    _mm256_storeu_pd(lanes, _mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3)));
    s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
#endif
    for (; i < hi; i++) {
        const double d = (double)load_grad1(x, i);
        s += d * d;
    }
    return s;
}

// Per-thread slots added in thread order: unlike an OpenMP reduction, the same result every call.
template <typename G>
static double sumsq_any(const G* x, int64_t n) {
    std::vector<double> partial((size_t)team_size(n), 0.0);
    for_chunks(n, [&](int tid, int64_t lo, int64_t hi) { partial[(size_t)tid] = sumsq_range(x, lo, hi); });
    double s = 0.0;
    for (double d : partial) s += d;
    return s;
}

double sumsq_f32(const float* x, int64_t n) { return sumsq_any(x, n); }
double sumsq_bf16(const uint16_t* x, int64_t n) { return sumsq_any(x, n); }

// ----------------------------------------------------------------------------
// fp32 -> bf16

static void convert_range(const float* __restrict in, uint16_t* __restrict out, int64_t lo, int64_t hi) {
    int64_t i = lo;
#if CPU_ADAM_VEC == 16
    for (; i + 16 <= hi; i += 16) _mm256_storeu_si256((__m256i*)(out + i), bf16x16(_mm512_loadu_ps(in + i)));
#elif CPU_ADAM_VEC == 8
    for (; i + 8 <= hi; i += 8) _mm_storeu_si128((__m128i*)(out + i), bf16x8(_mm256_loadu_ps(in + i)));
#endif
    for (; i < hi; i++) out[i] = float_to_bf16(in[i]);
}

void convert_f32_to_bf16(const float* in, uint16_t* out, int64_t n) {
    for_chunks(n, [&](int, int64_t lo, int64_t hi) { convert_range(in, out, lo, hi); });
}

void copy_bf16(const uint16_t* in, uint16_t* out, int64_t n) {
    for_chunks(n, [&](int, int64_t lo, int64_t hi) { memcpy(out + lo, in + lo, (size_t)(hi - lo) * 2); });
}
