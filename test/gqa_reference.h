// gqa_reference.h — the kernel suite's grouped-query and packed attention cases (test_kernels.cu): each
// case's inputs (a fused [q | k | v] row, random, rounded to bf16) and llama_cpu.h's results for them (y, the
// probabilities, dq, dk, dv, each row's log2-sum-exp), and the positions of packed rows. No checks here:
// the bounds are the tests'.
#pragma once
#include <math.h>
#include <algorithm>
#include <string>
#include <vector>
#include "gpu_test_common.h"  // defines: rand_bf16
#include "test_layouts.h"     // defines: columns, packed_positions
#include "llmc/llama_cpu.h"   // defines: gqa_attention_forward, gqa_attention_backward (GQA oracle)

struct GqaCase {
    int B, T, NH, NKV, hs, packed;
};
static const GqaCase kGqaCases[] = {
    {2, 37, 4, 4, 64, 1},   {2, 70, 4, 2, 64, 0},  {1, 130, 8, 1, 64, 1}, {1, 70, 4, 2, 128, 1},
    {1, 100, 8, 1, 128, 0}, {1, 1100, 2, 1, 32, 1}};  // past 32 x 32 query tiles: the dk/dv kernel's second
                                                      // word of tiles, and blocks whose first word is not 0
static const std::vector<int> kConversations = {70, 9, 23, 41};

// One case's inputs and llama_cpu.h's results.
struct GqaReference {
    int64_t N, QD, KVD, W;
    std::vector<float> qkv, dy, y, att, dq, dk, dv, lse;
    std::vector<int> pos;
    GqaReference(const GqaCase& c, uint64_t seed) {
        N = (int64_t)c.B * c.T, QD = (int64_t)c.NH * c.hs, KVD = (int64_t)c.NKV * c.hs, W = QD + 2 * KVD;
        qkv = rand_bf16(N * W, -1.5f, 1.5f, seed), dy = rand_bf16(N * QD, -1, 1, seed + 1);
        if (c.packed) pos = packed_positions(c.B, c.T, kConversations);
        const int* p = c.packed ? pos.data() : nullptr;
        const auto q = columns(qkv, N, W, 0, QD), k = columns(qkv, N, W, QD, KVD),
                   v = columns(qkv, N, W, QD + KVD, KVD);
        y.resize((size_t)(N * QD)), att.resize((size_t)c.B * c.NH * c.T * c.T), dq.resize((size_t)(N * QD));
        dk.resize((size_t)(N * KVD)), dv.resize((size_t)(N * KVD));
        std::vector<float> dscore((size_t)c.B * c.NKV * c.T);
        gqa_attention_forward(y.data(), att.data(), q.data(), k.data(), v.data(), c.B, c.T, c.NH, c.NKV, c.hs,
                              p);
        gqa_attention_backward(dq.data(), dk.data(), dv.data(), dscore.data(), dy.data(), q.data(), k.data(),
                               v.data(), att.data(), c.B, c.T, c.NH, c.NKV, c.hs, p);
        // lse: log2 of each row's sum of exp(score) over its visible keys, in double
        lse.resize((size_t)c.B * c.NH * c.T);
        for (int b = 0; b < c.B; b++)
            for (int h = 0; h < c.NH; h++)
                for (int t = 0; t < c.T; t++) {
                    const int lo = p ? t - p[b * c.T + t] : 0, g = h / (c.NH / c.NKV);
                    std::vector<double> sc;
                    double mx = -INFINITY, sum = 0.0;
                    for (int j = lo; j <= t; j++) {
                        double dot = 0.0;
                        for (int i = 0; i < c.hs; i++)
                            dot += (double)q[(size_t)((b * c.T + t) * QD + h * c.hs + i)] *
                                   k[(size_t)((b * c.T + j) * KVD + g * c.hs + i)];
                        sc.push_back(dot / sqrt((double)c.hs));
                        mx = std::max(mx, sc.back());
                    }
                    for (double s : sc) sum += exp(s - mx);
                    lse[((size_t)b * c.NH + h) * c.T + t] = (float)((mx + log(sum)) / log(2.0));
                }
    }
};
inline std::string gqa_name(const GqaCase& c) {
    char s[96];
    snprintf(s, sizeof s, "B=%d T=%d NH=%d NKV=%d hs=%d %s", c.B, c.T, c.NH, c.NKV, c.hs,
             c.packed ? "packed" : "plain");
    return s;
}
