// test_cpu_adam.cpp — GoogleTest suite for cpu_adam.{h,cpp}: the bf16 conversion (scalar edge cases, an
// independent round-to-nearest-even check, vector == scalar bit for bit), AdamW against a double-precision
// reference over several steps, and the sum of squares against a long double sum.
// It does not time anything (dev/bench/bench_cpu_adam.cpp does) and only tests the SIMD path this build was
// compiled for (recompile with -mno-avx512f, or -mno-avx2 -mno-fma -mno-avx512f, to test the others).
#include <gtest/gtest.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <algorithm>
#include <random>
#include <string>
#include <vector>
#include "llmc/cpu_adam.h"
#if defined(__SSE__)
#include <xmmintrin.h>  // _mm_getcsr: the update must leave the caller's FP mode alone
#endif

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static bool bf16_is_nan(uint16_t h) { return (h & 0x7F80) == 0x7F80 && (h & 0x007F) != 0; }

// Restores the default thread count even when an assertion ends a test early.
struct ThreadsGuard {
    ~ThreadsGuard() { cpu_adam_set_threads(0); }
};

// ----------------------------------------------------------------------------
// bf16 conversion

struct Bf16Case {
    uint32_t in;
    uint16_t out;
    const char* what;
};
static const Bf16Case kEdges[] = {
    {0x3F800000u, 0x3F80, "1.0 exact"},
    {0x3F808000u, 0x3F80, "tie, even below: rounds down"},
    {0x3F818000u, 0x3F82, "tie, odd below: rounds up to even"},
    {0x3F808001u, 0x3F81, "just above the tie: up"},
    {0x3F807FFFu, 0x3F80, "just below the tie: down"},
    {0xBF808000u, 0xBF80, "negative tie, even"},
    {0xBF818000u, 0xBF82, "negative tie, odd"},
    {0xBF808001u, 0xBF81, "negative just above tie"},
    {0x3F80FFFFu, 0x3F81, "carry within the mantissa"},
    {0x3FFFFFFFu, 0x4000, "carry into the exponent"},
    {0x7F800000u, 0x7F80, "+Inf"},
    {0xFF800000u, 0xFF80, "-Inf"},
    {0x7F7FFFFFu, 0x7F80, "largest finite float -> +Inf"},
    {0xFF7FFFFFu, 0xFF80, "most negative finite float -> -Inf"},
    {0x7F7F7FFFu, 0x7F7F, "just below the tie with Inf: largest finite bf16"},
    {0x7F7F8000u, 0x7F80, "tie between max bf16 (odd) and Inf: Inf"},
    {0x00000000u, 0x0000, "+0"},
    {0x80000000u, 0x8000, "-0 keeps its sign"},
    {0x00000001u, 0x0000, "smallest subnormal -> +0"},
    {0x80000001u, 0x8000, "smallest negative subnormal -> -0"},
    {0x00008000u, 0x0000, "subnormal tie, even: 0"},
    {0x00018000u, 0x0002, "subnormal tie, odd: up"},
    {0x00008001u, 0x0001, "subnormal just above tie"},
    {0x007FFFFFu, 0x0080, "largest subnormal -> smallest normal"},
    {0x00800000u, 0x0080, "smallest normal"},
    {0x7FC00000u, 0x7FC0, "quiet NaN"},
    {0xFFC00000u, 0xFFC0, "negative quiet NaN"},
    {0x7F800001u, 0x7FC0, "signaling NaN, payload only in the low bits: NaN, not Inf"},
    {0xFF800001u, 0xFFC0, "negative signaling NaN, low payload"},
    {0x7FBF0000u, 0x7FFF, "signaling NaN, high payload: quieted"},
    {0x7FFFFFFFu, 0x7FFF, "all-ones NaN: no overflow into the sign"},
    {0xFFFFFFFFu, 0xFFFF, "negative all-ones NaN"},
    {0x7FC0FFFFu, 0x7FC0, "quiet NaN with low payload: not rounded up"},
};

TEST(Bf16, EdgeValuesScalar) {
    for (const Bf16Case& c : kEdges)
        EXPECT_EQ(float_to_bf16(float_of(c.in)), c.out) << std::hex << "0x" << c.in << ": " << c.what;
}

TEST(Bf16, NanStaysQuietNanWithSign) {
    std::mt19937 rng(1);
    for (int k = 0; k < 200000; k++) {
        uint32_t mant = rng() & 0x007FFFFFu;
        if (mant == 0) mant = 1;
        if (k < 23) mant = 1u << k;  // every single-bit payload
        const uint32_t sign = (k & 1) ? 0x80000000u : 0u;
        const uint32_t u = sign | 0x7F800000u | mant;
        const uint16_t h = float_to_bf16(float_of(u));
        ASSERT_TRUE(bf16_is_nan(h)) << std::hex << u << " -> " << h;
        ASSERT_TRUE(h & 0x0040) << "quiet bit, " << std::hex << u;
        ASSERT_EQ(h & 0x8000, sign >> 16) << "sign, " << std::hex << u;
        ASSERT_TRUE(isnan(bf16_to_float(h)));
    }
}

// Every bf16 value survives bf16 -> float -> bf16 (signaling NaNs come back quieted).
TEST(Bf16, RoundTripAllValues) {
    for (uint32_t h = 0; h < 65536; h++) {
        const uint16_t expect = bf16_is_nan((uint16_t)h) ? (uint16_t)(h | 0x40) : (uint16_t)h;
        ASSERT_EQ(float_to_bf16(bf16_to_float((uint16_t)h)), expect) << std::hex << h;
    }
}

// An independent definition of RNE: of the two bf16 neighbours of |x| (truncation, and one bf16 ulp above,
// where one ulp above the largest finite bf16 is 2^128 = overflow to Inf), take the nearer; on a tie,
// the one with an even last bit. Compared in double, which holds every float and the midpoint exactly.
static uint16_t bf16_rne_by_distance(float x) {
    const uint32_t u = bits_of(x);
    const uint32_t sign = u & 0x80000000u, mag = u & 0x7FFFFFFFu;
    const uint32_t lo = mag & 0xFFFF0000u;
    const double dx = (double)float_of(mag), dlo = (double)float_of(lo);
    const double dhi = (lo == 0x7F7F0000u) ? ldexp(1.0, 128) : (double)float_of(lo + 0x10000u);
    uint32_t pick;
    if (dx - dlo < dhi - dx) pick = lo;
    else if (dx - dlo > dhi - dx) pick = lo + 0x10000u;
    else pick = ((lo >> 16) & 1) ? lo + 0x10000u : lo;
    return (uint16_t)((sign | pick) >> 16);
}

TEST(Bf16, MatchesRoundToNearestEvenByDistance) {
    std::mt19937 rng(2);
    int checked = 0;
    for (int k = 0; k < 2000000; k++) {
        uint32_t u = rng();
        if (k % 4 == 1) u = (u & 0xFFFF0000u) | 0x8000u;  // many exact ties
        if (k % 4 == 2) u &= 0x807FFFFFu;                 // many subnormals
        if ((u & 0x7F800000u) == 0x7F800000u) continue;   // Inf/NaN: covered above
        ASSERT_EQ(float_to_bf16(float_of(u)), bf16_rne_by_distance(float_of(u))) << std::hex << u;
        checked++;
    }
    EXPECT_GT(checked, 1900000);
}

// Vector conversion == scalar conversion, with the edge values placed inside the SIMD body (start,
// middle, straddling a 16-element block), at a thread chunk boundary region, and in the scalar tail.
static void check_convert_edges(int64_t n) {
    std::mt19937 rng(3);
    std::vector<float> in((size_t)n);
    for (auto& f : in) f = float_of(rng());
    const int64_t ne = (int64_t)(sizeof kEdges / sizeof kEdges[0]);
    const int64_t starts[] = {0, ne + 5, n / 2 - 7, n / 2 + ne + 3, n - ne};  // 5 disjoint copies
    for (int64_t s : starts)
        for (int64_t e = 0; e < ne; e++) in[(size_t)(s + e)] = float_of(kEdges[e].in);
    std::vector<uint16_t> out((size_t)n, 0xABCD);
    convert_f32_to_bf16(in.data(), out.data(), n);
    for (int64_t i = 0; i < n; i++)
        ASSERT_EQ(out[(size_t)i], float_to_bf16(in[(size_t)i]))
            << "n=" << n << " i=" << i << std::hex << " in=" << bits_of(in[(size_t)i]);
    for (int64_t s : starts)
        for (int64_t e = 0; e < ne; e++)
            ASSERT_EQ(out[(size_t)(s + e)], kEdges[e].out) << kEdges[e].what << " at " << s + e;
}

TEST(Bf16, VectorMatchesScalarOnEdgesSingleThread) { check_convert_edges(4096 + 13); }
TEST(Bf16, VectorMatchesScalarOnEdgesParallel) { check_convert_edges((1 << 17) + 13); }

TEST(Bf16, VectorMatchesScalarOnRandomBits) {
    std::mt19937 rng(4);
    for (int64_t n : {(int64_t)1, (int64_t)15, (int64_t)17, (int64_t)1000, (int64_t)(1 << 20) + 7}) {
        std::vector<float> in((size_t)n);
        for (auto& f : in) f = float_of(rng());
        std::vector<uint16_t> out((size_t)n);
        convert_f32_to_bf16(in.data(), out.data(), n);
        for (int64_t i = 0; i < n; i++)
            ASSERT_EQ(out[(size_t)i], float_to_bf16(in[(size_t)i]))
                << "n=" << n << " i=" << i << std::hex << " in=" << bits_of(in[(size_t)i]);
    }
}

TEST(Bf16, ConvertDoesNotWritePastN) {
    std::vector<float> in(40, 1.5f);
    std::vector<uint16_t> out(40, 0xABCD);
    convert_f32_to_bf16(in.data(), out.data(), 23);
    for (int i = 0; i < 40; i++) EXPECT_EQ(out[(size_t)i], i < 23 ? 0x3FC0 : 0xABCD) << i;
    convert_f32_to_bf16(in.data(), out.data(), 0);  // n = 0 is a no-op
}

// ----------------------------------------------------------------------------
// AdamW against a double-precision reference

// A gradient mix that exercises every regime: ordinary values over four decades, exact zeros (update 0),
// values near eps (1e-9: sqrt(vhat) and eps are comparable) and a few large ones.
static float random_grad(std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const uint32_t r = rng() % 100;
    if (r < 3) return 0.0f;
    if (r < 6) return 1e-9f * u(rng);
    if (r < 8) return 30.0f * u(rng);
    return u(rng) * powf(10.0f, -4.0f * (float)(rng() % 1000) / 1000.0f);
}

struct Ref {
    std::vector<double> p, m, v;
};

// PyTorch AdamW / llm.c, every operation in double, from the same float inputs.
static void ref_step(Ref& r, const std::vector<double>& grad, const AdamWArgs& a) {
    const double b1 = a.beta1, b2 = a.beta2, lr = a.lr, eps = a.eps, wd = a.weight_decay;
    const double bc1 = 1.0 - pow(b1, (double)a.t), bc2 = 1.0 - pow(b2, (double)a.t);
    for (size_t i = 0; i < r.p.size(); i++) {
        const double g = grad[i] * (double)a.grad_scale;
        r.m[i] = b1 * r.m[i] + (1.0 - b1) * g;
        r.v[i] = b2 * r.v[i] + (1.0 - b2) * g * g;
        const double mhat = r.m[i] / bc1, vhat = r.v[i] / bc2;
        r.p[i] -= lr * (mhat / (sqrt(vhat) + eps) + wd * r.p[i]);
    }
}

struct AdamCase {
    int64_t n;
    bool bf16_grad;
    float weight_decay;
    float grad_scale;
};

class AdamVsReference : public ::testing::TestWithParam<AdamCase> {};

// Tolerances (float state vs the double reference after each of steps t = 1..5):
//   params: |p - ref| <= 1e-5 * |ref| + 1e-5 * lr * t. The relative part covers the float rounding of p
//           itself; the absolute part covers params near zero, where the only error is float rounding of
//           the update (~1e-7 relative per step, each step moving p by at most ~lr). Both are far below
//           lr, the size of one step, so a wrong formula (bias correction, decay, sign) cannot pass.
//   m:      |m - ref| <= 1e-5 * |ref| + 1e-6 * max|g| (m can cancel to ~0 when g changes sign).
//   v:      |v - ref| <= 1e-5 * |ref| (a sum of squares: no cancellation).
//   bf16 copy: EXACTLY float_to_bf16 of the fp32 result.
TEST_P(AdamVsReference, FiveSteps) {
    const AdamCase c = GetParam();
    const size_t n = (size_t)c.n;
    std::mt19937 rng(1234 + (uint32_t)c.n);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> p(n), m(n, 0.0f), v(n, 0.0f), gf(n);
    std::vector<uint16_t> gb(n), out(n);
    Ref r;
    r.p.resize(n);
    r.m.assign(n, 0.0);
    r.v.assign(n, 0.0);
    for (size_t i = 0; i < n; i++) {
        p[i] = (i % 10 == 0) ? 1e-4f * u(rng) : u(rng);  // some params near zero
        r.p[i] = p[i];
    }
    std::vector<double> gd(n);
    AdamWArgs a = {1e-3f, 0.9f, 0.95f, 1e-8f, c.weight_decay, c.grad_scale, 0};
    for (int64_t t = 1; t <= 5; t++) {
        a.t = t;
        double gmax = 0.0;
        for (size_t i = 0; i < n; i++) {
            gf[i] = random_grad(rng);
            gb[i] = float_to_bf16(gf[i]);
            gd[i] = c.bf16_grad ? (double)bf16_to_float(gb[i]) : (double)gf[i];
            gmax = fmax(gmax, fabs(gd[i] * c.grad_scale));
        }
        if (c.bf16_grad) adamw_update_bf16grad(p.data(), gb.data(), m.data(), v.data(), out.data(), c.n, &a);
        else adamw_update_f32grad(p.data(), gf.data(), m.data(), v.data(), out.data(), c.n, &a);
        ref_step(r, gd, a);
        for (size_t i = 0; i < n; i++) {
            ASSERT_NEAR(p[i], r.p[i], 1e-5 * fabs(r.p[i]) + 1e-5 * a.lr * (double)t)
                << "param i=" << i << " t=" << t;
            ASSERT_NEAR(m[i], r.m[i], 1e-5 * fabs(r.m[i]) + 1e-6 * gmax) << "m i=" << i << " t=" << t;
            ASSERT_NEAR(v[i], r.v[i], 1e-5 * fabs(r.v[i])) << "v i=" << i << " t=" << t;
            ASSERT_EQ(out[i], float_to_bf16(p[i])) << "bf16 copy i=" << i << " t=" << t;
        }
    }
}

static std::vector<AdamCase> adam_cases() {
    std::vector<AdamCase> cases;
    // Not multiples of the vector width; 40001 and 1000003 are above the parallel threshold (1 << 15).
    for (int64_t n : {(int64_t)1, (int64_t)7, (int64_t)15, (int64_t)17, (int64_t)40001, (int64_t)1000003})
        for (int bf : {0, 1})
            for (float wd : {0.0f, 0.1f})
                for (float gs : {1.0f, 0.37f}) cases.push_back({n, bf != 0, wd, gs});
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, AdamVsReference, ::testing::ValuesIn(adam_cases()),
                         [](const ::testing::TestParamInfo<AdamCase>& info) {
                             const AdamCase& c = info.param;
                             return std::string("n") + std::to_string(c.n) +
                                    (c.bf16_grad ? "_bf16grad" : "_f32grad") +
                                    (c.weight_decay != 0.0f ? "_wd" : "_nowd") +
                                    (c.grad_scale != 1.0f ? "_scaled" : "_unscaled");
                         });

// Hand-checkable first step: with m = v = 0 and t = 1, mhat = g and sqrt(vhat) = |g|, so each param moves
// by lr * g / (|g| + eps) ~= lr * sign(g) (minus lr * wd * p); a zero gradient moves it by decay only.
TEST(AdamW, FirstStepMovesByLrTimesSign) {
    const float lr = 0.01f, wd = 0.1f;
    float p[5] = {0.5f, 0.5f, -2.0f, 3.0f, 1.0f};
    const float g[5] = {1.0f, -0.001f, 250.0f, 0.0f, -1e-3f};
    float m[5] = {0}, v[5] = {0};
    uint16_t out[5];
    AdamWArgs a = {lr, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 1};
    adamw_update_f32grad(p, g, m, v, out, 4, &a);  // p[4] is outside n: must stay untouched
    EXPECT_NEAR(p[0], 0.5f - lr, 1e-6);
    EXPECT_NEAR(p[1], 0.5f + lr, 1e-6);
    EXPECT_NEAR(p[2], -2.0f - lr, 1e-6);
    EXPECT_EQ(p[3], 3.0f) << "zero gradient, no decay: exactly unchanged";
    EXPECT_EQ(p[4], 1.0f);
    EXPECT_EQ(m[3], 0.0f);
    EXPECT_EQ(v[3], 0.0f);
    // Decay only: zero gradient, decay 0.1 -> p * (1 - lr * wd)
    float q = 3.0f, qm = 0.0f, qv = 0.0f;
    const float zero = 0.0f;
    a.weight_decay = wd;
    adamw_update_f32grad(&q, &zero, &qm, &qv, NULL, 1, &a);
    EXPECT_NEAR(q, 3.0f * (1.0f - lr * wd), 1e-6);
}

// The bf16 output pointer may be NULL: the fp32 results are the same bits as with it.
TEST(AdamW, NullBf16OutputGivesSameResult) {
    const int64_t n = 50000;
    std::mt19937 rng(5);
    std::vector<float> p(n), m(n), v(n), g(n);
    for (int64_t i = 0; i < n; i++) {
        p[i] = random_grad(rng);
        m[i] = 0.01f * random_grad(rng);
        v[i] = 1e-4f * fabsf(random_grad(rng));
        g[i] = random_grad(rng);
    }
    std::vector<float> p2 = p, m2 = m, v2 = v;
    std::vector<uint16_t> out(n);
    const AdamWArgs a = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 7};
    adamw_update_f32grad(p.data(), g.data(), m.data(), v.data(), out.data(), n, &a);
    adamw_update_f32grad(p2.data(), g.data(), m2.data(), v2.data(), NULL, n, &a);
    EXPECT_EQ(0, memcmp(p.data(), p2.data(), n * 4));
    EXPECT_EQ(0, memcmp(m.data(), m2.data(), n * 4));
    EXPECT_EQ(0, memcmp(v.data(), v2.data(), n * 4));
}

// The SIMD body and the scalar tail do the same IEEE operations: updating the array at once, one element
// per call (scalar path only), with 1 or 3 threads, and in two calls split at element 7 (the second starts
// off the streaming stores' alignment: scalar until aligned) must all give the same bits.
TEST(AdamW, ResultIndependentOfPositionAndThreads) {
    ThreadsGuard guard;
    const int64_t n = 1000003;
    std::mt19937 rng(6);
    std::vector<float> p0(n), g(n);
    std::vector<uint16_t> gb(n);
    for (int64_t i = 0; i < n; i++) {
        p0[i] = random_grad(rng);
        g[i] = random_grad(rng);
        gb[i] = float_to_bf16(g[i]);
    }
    for (int bf : {0, 1}) {
        std::vector<float> pr[5], mr[5], vr[5];
        std::vector<uint16_t> outr[5];
        for (int variant = 0; variant < 5; variant++) {
            std::vector<float>& p = pr[variant] = p0;
            std::vector<float>& m = mr[variant] = std::vector<float>(n, 0.0f);
            std::vector<float>& v = vr[variant] = std::vector<float>(n, 0.0f);
            std::vector<uint16_t>& out = outr[variant] = std::vector<uint16_t>(n);
            cpu_adam_set_threads(variant == 1 ? 1 : variant == 2 ? 3 : 0);
            for (int64_t t = 1; t <= 3; t++) {
                const AdamWArgs a = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.8f, t};
                if (variant == 3) {  // one element per call
                    for (int64_t i = 0; i < n; i++) {
                        if (bf) adamw_update_bf16grad(&p[i], &gb[i], &m[i], &v[i], &out[i], 1, &a);
                        else adamw_update_f32grad(&p[i], &g[i], &m[i], &v[i], &out[i], 1, &a);
                    }
                } else if (variant == 4) {  // [0, 7) and [7, n)
                    for (int64_t lo : {(int64_t)0, (int64_t)7}) {
                        const int64_t len = lo == 0 ? 7 : n - 7;
                        if (bf) adamw_update_bf16grad(&p[lo], &gb[lo], &m[lo], &v[lo], &out[lo], len, &a);
                        else adamw_update_f32grad(&p[lo], &g[lo], &m[lo], &v[lo], &out[lo], len, &a);
                    }
                } else if (bf) {
                    adamw_update_bf16grad(p.data(), gb.data(), m.data(), v.data(), out.data(), n, &a);
                } else {
                    adamw_update_f32grad(p.data(), g.data(), m.data(), v.data(), out.data(), n, &a);
                }
            }
        }
        for (int variant = 1; variant < 5; variant++) {
            EXPECT_EQ(0, memcmp(pr[0].data(), pr[variant].data(), n * 4))
                << "params, variant " << variant << " bf16grad=" << bf;
            EXPECT_EQ(0, memcmp(mr[0].data(), mr[variant].data(), n * 4)) << "m, variant " << variant;
            EXPECT_EQ(0, memcmp(vr[0].data(), vr[variant].data(), n * 4)) << "v, variant " << variant;
            EXPECT_EQ(0, memcmp(outr[0].data(), outr[variant].data(), n * 2))
                << "bf16 copy, variant " << variant;
        }
    }
}

// Subnormal moments (a rarely updated row whose v decayed for thousands of steps) are flushed to zero
// during the update instead of taking the slow path; the caller's floating-point mode is left as it was.
TEST(AdamW, SubnormalStateIsFlushedAndFpModeRestored) {
    const int64_t n = 70001;  // parallel path (worker threads) and a scalar tail
    std::vector<float> p(n, 0.25f), g(n, 0.0f), m(n, 1e-39f), v(n, 1e-40f);
    std::vector<uint16_t> out(n);
    const AdamWArgs a = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 3000};
#if defined(__SSE__)
    const unsigned csr_before = _mm_getcsr();
#endif
    adamw_update_f32grad(p.data(), g.data(), m.data(), v.data(), out.data(), n, &a);
#if defined(__SSE__)
    EXPECT_EQ(_mm_getcsr(), csr_before);
#endif
    for (int64_t i = 0; i < n; i++) {
        ASSERT_EQ(m[i], 0.0f) << i;
        ASSERT_EQ(v[i], 0.0f) << i;
        ASSERT_EQ(p[i], 0.25f) << i;  // zero update: m = 0 -> mhat / (0 + eps) = 0, no decay
        ASSERT_EQ(out[i], float_to_bf16(0.25f)) << i;
    }
    // Back in the caller, subnormal results exist again (FTZ is off in this thread, as before the call).
    volatile float tiny = 1e-30f;
    EXPECT_GT(tiny * 1e-10f, 0.0f);
}

TEST(AdamW, ZeroLengthIsANoOp) {
    float p = 1.0f, m = 2.0f, v = 3.0f, g = 4.0f;
    uint16_t gb = 0x3F80, out = 0xABCD;
    const AdamWArgs a = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1};
    adamw_update_f32grad(&p, &g, &m, &v, &out, 0, &a);
    adamw_update_bf16grad(&p, &gb, &m, &v, &out, 0, &a);
    EXPECT_EQ(p, 1.0f);
    EXPECT_EQ(m, 2.0f);
    EXPECT_EQ(v, 3.0f);
    EXPECT_EQ(out, 0xABCD);
}

// ----------------------------------------------------------------------------
// Sum of squares

// Tolerance: relative 1e-12. Every x*x is exact in double, so the error is only that of ~n double
// additions of positive terms (at most ~n * 1.1e-16 relative, and far less with blocked sums).
TEST(SumSq, MatchesLongDoubleReference) {
    ThreadsGuard guard;
    std::mt19937 rng(7);
    for (int64_t n :
         {(int64_t)0, (int64_t)1, (int64_t)7, (int64_t)15, (int64_t)17, (int64_t)40001, (int64_t)1000003}) {
        std::vector<float> x((size_t)n);
        std::vector<uint16_t> xb((size_t)n);
        long double rf = 0.0L, rb = 0.0L;
        for (int64_t i = 0; i < n; i++) {
            x[(size_t)i] = random_grad(rng);
            xb[(size_t)i] = float_to_bf16(x[(size_t)i]);
            rf += (long double)x[(size_t)i] * x[(size_t)i];
            const long double b = bf16_to_float(xb[(size_t)i]);
            rb += b * b;
        }
        for (int threads : {0, 1, 3}) {
            cpu_adam_set_threads(threads);
            const double sf = sumsq_f32(x.data(), n), sb = sumsq_bf16(xb.data(), n);
            EXPECT_NEAR(sf, (double)rf, 1e-12 * (double)rf) << "f32 n=" << n << " threads=" << threads;
            EXPECT_NEAR(sb, (double)rb, 1e-12 * (double)rb) << "bf16 n=" << n << " threads=" << threads;
            EXPECT_EQ(sf, sumsq_f32(x.data(), n)) << "repeatable, n=" << n;
            EXPECT_EQ(sb, sumsq_bf16(xb.data(), n)) << "repeatable, n=" << n;
        }
        if (n == 0) {
            EXPECT_EQ(sumsq_f32(x.data(), 0), 0.0);
            EXPECT_EQ(sumsq_bf16(xb.data(), 0), 0.0);
        }
    }
}

// Infinities and NaNs in the gradient must show up in the norm, not vanish in the SIMD sum.
TEST(SumSq, PropagatesNonFinite) {
    std::vector<float> x(100000, 0.5f);
    x[77777] = INFINITY;
    EXPECT_TRUE(isinf(sumsq_f32(x.data(), (int64_t)x.size())));
    x[77777] = NAN;
    EXPECT_TRUE(isnan(sumsq_f32(x.data(), (int64_t)x.size())));
    std::vector<uint16_t> xb(100000, 0x3F00);
    xb[5] = 0x7FC0;
    EXPECT_TRUE(isnan(sumsq_bf16(xb.data(), (int64_t)xb.size())));
}

TEST(CpuAdam, ReportsSimdPath) {
    const std::string s = cpu_adam_simd_name();
    EXPECT_TRUE(s == "avx512" || s == "avx2" || s == "scalar") << s;
    printf("cpu_adam SIMD path: %s\n", s.c_str());
}

// adamw_tensors_window_bf16grad (the SSD tier updates a layer piece by piece as it streams from disk): any
// split of a block into windows, cutting tensors anywhere, gives the bits of the whole block updated tensor
// by tensor, each tensor with its own weight decay.
TEST(AdamW, WindowsOfABlockGiveTheWholeBlockUpdate) {
    const int count = 4;
    const int64_t size[count] = {777, 40000, 3, 35001};
    const int is_matrix[count] = {0, 1, 0, 1};
    int64_t offset[count], n = 0;
    for (int i = 0; i < count; i++) {
        offset[i] = n;
        n += size[i];
    }
    std::mt19937 r(7);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    std::vector<float> p0((size_t)n), m0((size_t)n), v0((size_t)n);
    std::vector<uint16_t> g((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        p0[(size_t)i] = nd(r);
        m0[(size_t)i] = nd(r) * 1e-2f;
        v0[(size_t)i] = fabsf(nd(r)) * 1e-4f;
        g[(size_t)i] = float_to_bf16(nd(r) * 0.1f);
    }
    const AdamWArgs a = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 5};
    // the reference: whole tensors, matrices decayed
    std::vector<float> p = p0, m = m0, v = v0;
    std::vector<uint16_t> b((size_t)n);
    for (int i = 0; i < count; i++) {
        AdamWArgs t = a;
        if (!is_matrix[i]) t.weight_decay = 0.0f;
        const size_t o = (size_t)offset[i];
        adamw_update_bf16grad(&p[o], &g[o], &m[o], &v[o], &b[o], size[i], &t);
    }
    for (int64_t w : {(int64_t)1, (int64_t)2048, (int64_t)16384, (int64_t)33333, n}) {
        std::vector<float> pw = p0, mw = m0, vw = v0;
        std::vector<uint16_t> bw((size_t)n);
        for (int64_t lo = 0; lo < n; lo += (w == 1 ? 1 + lo % 5000 : w)) {  // w = 1: ragged windows
            const int64_t len = std::min(w == 1 ? 1 + lo % 5000 : w, n - lo);
            adamw_tensors_window_bf16grad(count, offset, size, is_matrix, lo, len, &pw[(size_t)lo],
                                          &g[(size_t)lo], &mw[(size_t)lo], &vw[(size_t)lo], &bw[(size_t)lo],
                                          &a);
        }
        EXPECT_EQ(memcmp(pw.data(), p.data(), (size_t)n * 4), 0) << "windows of " << w;
        EXPECT_EQ(memcmp(mw.data(), m.data(), (size_t)n * 4), 0) << "windows of " << w;
        EXPECT_EQ(memcmp(vw.data(), v.data(), (size_t)n * 4), 0) << "windows of " << w;
        EXPECT_EQ(bw, b) << "windows of " << w;
    }
}
