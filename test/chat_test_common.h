// chat_test_common.h — chat shards written by the tests themselves (dataloader.h's format), so each row's
// targets are known: test_sft_trainer.cpp, test_multi_gpu.cpp. Not here: any test.
#pragma once
#include <gtest/gtest.h>
#include <stdio.h>
#include <string>
#include <vector>
#include "dataloader.h"  // defines: CHAT_TARGET, CHAT_START, CHAT_PAD, CHAT_H_*

namespace {

// One token of a row: its id and flags (CHAT_TARGET, CHAT_START, CHAT_PAD).
struct Tok {
    int id, flags;
};

// A row of T tokens: conversations of `lens` tokens (ids from `seed`), the last `targets[i]` of conversation
// i flagged as targets, then padding.
static std::vector<Tok> row(int T, std::vector<int> lens, std::vector<int> targets, int seed) {
    std::vector<Tok> r;
    for (size_t c = 0; c < lens.size(); c++)
        for (int j = 0; j < lens[c]; j++) {
            const int flags =
                (j == 0 ? CHAT_START : 0) | (j >= lens[c] - targets[c] && j > 0 ? CHAT_TARGET : 0);
            r.push_back({(seed * 7919 + (int)r.size() * 104729) % 50000 + 1, flags});
        }
    while ((int)r.size() < T)
        r.push_back({0, CHAT_PAD | (r.empty() || !(r.back().flags & CHAT_PAD) ? CHAT_START : 0)});
    return r;
}

// A chat shard (dataloader.h's format) of these rows, at path.
static std::string write_chat_shard(const std::string& path, const std::vector<std::vector<Tok>>& rows, int T,
                                    int vocab = 50257) {
    int32_t h[256] = {0};
    int64_t targets = 0, pads = 0, starts = 0;
    for (const auto& r : rows)
        for (const Tok& t : r) {
            targets += (t.flags & CHAT_TARGET) != 0;
            pads += (t.flags & CHAT_PAD) != 0;
            starts += (t.flags & CHAT_START) && !(t.flags & CHAT_PAD);
        }
    h[CHAT_H_MAGIC] = DATALOADER_CHAT_MAGIC;
    h[CHAT_H_VERSION] = DATALOADER_CHAT_VERSION;
    h[CHAT_H_TOKEN_BYTES] = 2;
    h[CHAT_H_T] = T;
    h[CHAT_H_ROWS] = (int32_t)rows.size();
    h[CHAT_H_VOCAB] = vocab;
    h[CHAT_H_CONVS] = h[CHAT_H_SEGMENTS] = (int32_t)starts;
    h[CHAT_H_TARGETS] = (int32_t)targets;
    h[CHAT_H_PADS] = (int32_t)pads;
    FILE* f = fopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    fwrite(h, sizeof h, 1, f);
    for (const auto& r : rows)
        for (const Tok& t : r) {
            const uint16_t id = (uint16_t)t.id;
            fwrite(&id, 2, 1, f);
        }
    for (const auto& r : rows)
        for (const Tok& t : r) {
            const uint8_t fl = (uint8_t)t.flags;
            fwrite(&fl, 1, 1, f);
        }
    fclose(f);
    return path;
}

}  // namespace
