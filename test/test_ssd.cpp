// test_ssd.cpp — the SSD tier (ssd.h; its direct I/O layer: test_ssd_io.cpp): the state store's AdamW round
// against the in-RAM update bit for bit (several layers, steps, pieces that cut tensors, bf16 copy and
// gradients in RAM or on disk, a checkpoint and a resume in the middle), crashes (SIGKILL between two writes,
// in a child process) and disk errors (injected ENOSPC/EIO/short writes, a real file size limit, a real full
// filesystem where one can be mounted) leaving the last checkpoint intact, the capacity plan of the 100b
// preset, and the bandwidth probe. No timed assertions. Every test removes its files.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <sstream>
#include <fstream>
#include <poll.h>  // defines: poll (the FIFO test waits on its child)
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>  // defines: mmap, mincore
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>  // defines: waitpid
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>  // defines: std::ifstream, std::ofstream
#include <random>
#include <string>
#include <vector>

#include "llmc/cpu_adam.h"
#include "llmc/ssd.h"
#include "llmc/model_specs.h"  // parse_model_spec, gpt_layout: the 100b preset of the plan test

#include "ssd_test_common.h"  // defines: TempDir, pattern

// ============================================================================
// The store against the in-RAM update

// A layer of three tensors (a bias-like one without decay, a matrix, another without) whose sizes make the
// layer 70999 elements: not a multiple of 2048, so the last piece and the file regions have padding, and
// 16384-element pieces cut the tensors.
static const int kTensors = 3;
static const int64_t kSize[kTensors] = {1000, 50000, 19999};
static const int64_t kOffset[kTensors] = {0, 1000, 51000};
static const int kIsMatrix[kTensors] = {0, 1, 0};
static const int64_t kLayer = 70999;

static AdamWArgs step_args(int64_t t) {
    AdamWArgs a = {3e-4f * (1.0f + 0.1f * (float)t), 0.9f, 0.95f, 1e-8f, 0.1f, t % 2 ? 0.5f : 0.8f, t};
    return a;
}

static uint16_t grad_value(int step, int layer, int64_t i) {
    uint32_t h = (uint32_t)(step * 7919 + layer * 104729) ^ (uint32_t)i * 2654435761u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    if (h % 97 == 0) return 0;  // some exact zeros
    const float r = (float)(h >> 8) / 16777216.0f - 0.5f;
    return float_to_bf16(r * (h % 5 == 0 ? 1e-1f : 2e-3f));
}

// The in-RAM model: L layers, the way the trainer holds them today (one array per kind), updated tensor by
// tensor over whole layers (adamw.h's adamw_tensors_bf16grad).
struct RamModel {
    int L;
    std::vector<float> p, m, v;
    std::vector<uint16_t> b;
    explicit RamModel(int layers)
        : L(layers), p((size_t)(layers * kLayer)), m(p.size()), v(p.size()), b(p.size()) {
        std::mt19937 r(42);
        std::normal_distribution<float> nd(0.0f, 0.02f);
        for (size_t i = 0; i < p.size(); i++) {
            p[i] = nd(r);
            m[i] = nd(r) * 1e-2f;  // a resumed run's moments: not zero
            v[i] = fabsf(nd(r)) * 1e-4f;
            b[i] = float_to_bf16(p[i]);
        }
    }
    void step(int t, const std::vector<int>& layers) {
        const AdamWArgs a = step_args(t);
        std::vector<uint16_t> g((size_t)kLayer);
        for (int l : layers) {
            for (int64_t i = 0; i < kLayer; i++) g[(size_t)i] = grad_value(t, l, i);
            const int64_t o = (int64_t)l * kLayer;
            for (int k = 0; k < kTensors; k++) {
                AdamWArgs ak = a;
                if (!kIsMatrix[k]) ak.weight_decay = 0.0f;
                const int64_t q = o + kOffset[k];
                adamw_update_bf16grad(&p[(size_t)q], &g[(size_t)kOffset[k]], &m[(size_t)q], &v[(size_t)q],
                                      &b[(size_t)q], kSize[k], &ak);
            }
        }
    }
};

// What the trainer's optimizer thread would pass to ssd_store_round.
struct RoundCtx {
    SsdStore* st;
    const RamModel* want;  // the reference after this step: layer_done checks the bf16 copy against it
    int step;
    int grads_on_disk, with_bf16;
    int held = 0;                    // grads_on_disk: layers below this one have theirs in RAM (grads_in_ram)
    std::vector<uint16_t> grads;     // one layer's gradients in RAM
    std::vector<uint16_t> bf16_ram;  // the trainer's bf16 copy (without with_bf16)
    std::vector<int> done_order;
    int bf16_mismatch = 0;
};

static const uint16_t* ctx_grads(void* c, int layer) {
    RoundCtx* x = (RoundCtx*)c;
    if (x->grads_on_disk && layer >= x->held) return NULL;
    x->grads.resize((size_t)kLayer);
    for (int64_t i = 0; i < kLayer; i++) x->grads[(size_t)i] = grad_value(x->step, layer, i);
    return x->grads.data();
}
static int ctx_grads_in_ram(void* c, int layer) { return layer < ((RoundCtx*)c)->held; }
static void ctx_update(void* c, int layer, int64_t off, int64_t n, float* p, const uint16_t* g, float* m,
                       float* v, uint16_t* b) {
    const AdamWArgs a = step_args(((RoundCtx*)c)->step);
    adamw_tensors_window_bf16grad(kTensors, kOffset, kSize, kIsMatrix, off, n, p, g, m, v, b, &a);
}
static uint16_t* ctx_bf16_dst(void* c, int layer) {
    return ((RoundCtx*)c)->bf16_ram.data() + (int64_t)layer * kLayer;
}
static void ctx_layer_done(void* c, int layer) {
    RoundCtx* x = (RoundCtx*)c;
    x->done_order.push_back(layer);
    const uint16_t* want = x->want->b.data() + (int64_t)layer * kLayer;
    if (x->with_bf16) {  // the copy must be on disk by now: read it back as the trainer's forward pass would
        uint16_t* buf = (uint16_t*)ssd_alloc(ssd_store_bf16_layer_bytes(x->st));
        char err[1024];
        if (ssd_store_wait(x->st, ssd_store_read_bf16_async(x->st, layer, buf), err, sizeof err) != 0 ||
            memcmp(buf, want, (size_t)kLayer * 2) != 0)
            x->bf16_mismatch++;
        ssd_free(buf);
    } else if (memcmp(x->bf16_ram.data() + (int64_t)layer * kLayer, want, (size_t)kLayer * 2) != 0) {
        x->bf16_mismatch++;
    }
}

struct StoreCase {
    int fallback, with_bf16, grads_on_disk, ring;
    int64_t piece;
    int held =
        0;  // grads_on_disk: the first layers' gradients stay in RAM; the grads file holds garbage there
};

static SsdStoreConfig store_config(const StoreCase& c, int layers) {
    SsdStoreConfig s;
    memset(&s, 0, sizeof s);
    s.num_layers = layers;
    s.layer_elems = kLayer;
    s.with_bf16 = c.with_bf16;
    s.grads_on_disk = c.grads_on_disk;
    s.ring = c.ring;
    s.piece_elems = c.piece;
    s.io.force_fallback = c.fallback;
    s.io.quiet = 1;
    s.io.chunk_bytes = 64 << 10;  // small chunks: many requests per piece
    s.io.queue_depth = 8;
    return s;
}

// One step on the store: gradients to disk first when they live there, then the round.
static void store_step(SsdStore* st, const StoreCase& c, const RamModel& want, int t,
                       const std::vector<int>& layers, std::vector<uint16_t>* bf16_ram) {
    char err[1024] = "";
    if (c.grads_on_disk) {
        uint16_t* g = (uint16_t*)ssd_alloc(ssd_store_bf16_layer_bytes(st));
        for (int l : layers) {
            for (int64_t i = 0; i < kLayer; i++) g[i] = l < c.held ? (uint16_t)0x7f80 : grad_value(t, l, i);
            ASSERT_EQ(ssd_store_wait(st, ssd_store_write_grads_async(st, l, g), err, sizeof err), 0) << err;
        }
        ssd_free(g);
    }
    RoundCtx x;
    x.st = st;
    x.want = &want;
    x.step = t;
    x.grads_on_disk = c.grads_on_disk;
    x.with_bf16 = c.with_bf16;
    x.held = c.held;
    x.bf16_ram.swap(*bf16_ram);
    SsdRoundFns fns = {ctx_grads, ctx_update, ctx_bf16_dst, ctx_layer_done, &x, ctx_grads_in_ram};
    ASSERT_EQ(ssd_store_round(st, layers.data(), (int)layers.size(), &fns, err, sizeof err), 0) << err;
    x.bf16_ram.swap(*bf16_ram);
    EXPECT_EQ(x.done_order, layers) << "each layer reported once, in order";
    EXPECT_EQ(x.bf16_mismatch, 0) << "a layer reported done before its bf16 copy was complete and right";
}

// Every layer of the store equals the model, bit for bit.
static void expect_store_equals(SsdStore* st, const RamModel& want, int with_bf16, const char* when) {
    char err[1024] = "";
    std::vector<float> p((size_t)kLayer), m(p.size()), v(p.size());
    std::vector<uint16_t> b(p.size());
    for (int l = 0; l < want.L; l++) {
        ASSERT_EQ(ssd_store_read_layer(st, l, p.data(), m.data(), v.data(), with_bf16 ? b.data() : NULL, err,
                                       sizeof err),
                  0)
            << err;
        const size_t o = (size_t)l * kLayer, bytes = (size_t)kLayer * 4;
        EXPECT_EQ(memcmp(p.data(), &want.p[o], bytes), 0) << when << ": params of layer " << l;
        EXPECT_EQ(memcmp(m.data(), &want.m[o], bytes), 0) << when << ": m of layer " << l;
        EXPECT_EQ(memcmp(v.data(), &want.v[o], bytes), 0) << when << ": v of layer " << l;
        if (with_bf16) {
            EXPECT_EQ(memcmp(b.data(), &want.b[o], bytes / 2), 0) << when << ": bf16 of layer " << l;
        }
    }
}

class SsdStoreTest : public ::testing::TestWithParam<StoreCase> {};

// Four steps over five layers (the round skipping layer 0 in step 2, as with a GPU-resident layer), a
// checkpoint after step 2 (the rounds of steps 3 and 4 then read that generation and write the other), a
// checkpoint after step 4; then a resume from step 2 that redoes steps 3 and 4: every result equal to
// the in-RAM update.
TEST_P(SsdStoreTest, RoundIsBitForBitTheInRamUpdate) {
    const StoreCase c = GetParam();
    const int L = 5;
    TempDir d;
    char err[1024] = "";
    const SsdStoreConfig cfg = store_config(c, L);
    RamModel ram(L);
    std::vector<uint16_t> bf16_ram(ram.b);  // the trainer's pinned copy starts as bf16(initial weights)
    SsdStore* st = ssd_store_create(d.path.c_str(), &cfg, err, sizeof err);
    ASSERT_NE(st, nullptr) << err;
    for (int l = 0; l < L; l++)
        ASSERT_EQ(ssd_store_write_layer(st, l, &ram.p[(size_t)l * kLayer], &ram.m[(size_t)l * kLayer],
                                        &ram.v[(size_t)l * kLayer], err, sizeof err),
                  0)
            << err;
    expect_store_equals(st, ram, c.with_bf16, "initial");
    const std::vector<int> all = {0, 1, 2, 3, 4}, skip0 = {1, 2, 3, 4};
    RamModel at2(0);
    for (int t = 1; t <= 4; t++) {
        const std::vector<int>& layers = t == 2 ? skip0 : all;
        ram.step(t, layers);
        store_step(st, c, ram, t, layers, &bf16_ram);
        if (::testing::Test::HasFatalFailure()) {
            ssd_store_close(st);
            return;
        }
        if (!c.with_bf16) { EXPECT_EQ(bf16_ram, ram.b) << "step " << t; }
        if (t == 2) {
            ASSERT_EQ(ssd_store_checkpoint(st, 2, err, sizeof err), 0) << err;
            at2 = ram;
        }
    }
    expect_store_equals(st, ram, c.with_bf16, "after 4 steps");
    ASSERT_EQ(ssd_store_checkpoint(st, 4, err, sizeof err), 0) << err;
    int64_t steps[2];
    ssd_store_steps(st, steps);
    EXPECT_EQ(std::min(steps[0], steps[1]), 2);
    EXPECT_EQ(std::max(steps[0], steps[1]), 4);
    ssd_store_close(st);

    // reopen: step 3 is not there (one message naming what is), steps 4 and 2 are, intact
    EXPECT_EQ(ssd_store_open(d.path.c_str(), &cfg, 3, err, sizeof err), nullptr);
    EXPECT_NE(strstr(err, "steps 2 and 4"), nullptr) << err;
    st = ssd_store_open(d.path.c_str(), &cfg, 4, err, sizeof err);
    ASSERT_NE(st, nullptr) << err;
    expect_store_equals(st, ram, c.with_bf16, "reopened at 4");
    ssd_store_close(st);
    st = ssd_store_open(d.path.c_str(), &cfg, 2, err, sizeof err);
    ASSERT_NE(st, nullptr) << err;
    expect_store_equals(st, at2, c.with_bf16, "reopened at 2");
    // resume from 2: steps 3 and 4 again give the same bits; the generation of step 4 is given up on the way
    std::vector<uint16_t> bf16_resumed(at2.b);
    for (int t = 3; t <= 4; t++) {
        at2.step(t, all);
        store_step(st, c, at2, t, all, &bf16_resumed);
        if (::testing::Test::HasFatalFailure()) {
            ssd_store_close(st);
            return;
        }
    }
    expect_store_equals(st, ram, c.with_bf16, "resumed from 2, after 4");
    ssd_store_steps(st, steps);
    EXPECT_EQ(std::max(steps[0], steps[1]), 2)
        << "the generation of step 4 was written again: no longer a checkpoint";
    ssd_store_close(st);
    EXPECT_EQ(ssd_store_open(d.path.c_str(), &cfg, 4, err, sizeof err), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Layouts, SsdStoreTest,
                         ::testing::Values(StoreCase{0, 0, 0, 3, 16384}, StoreCase{0, 0, 0, 4, 16384},
                                           StoreCase{0, 1, 0, 4, 16384}, StoreCase{0, 0, 1, 4, 16384},
                                           StoreCase{0, 1, 1, 3, 16384}, StoreCase{0, 1, 1, 5, 0},
                                           StoreCase{1, 0, 0, 4, 16384}, StoreCase{1, 1, 1, 4, 16384},
                                           StoreCase{1, 0, 1, 3, 0},
                                           // the trainer's ring-held gradients (ssd_tier.h): the first 2
                                           // layers' from RAM, +inf in the file there (a read of it fails it)
                                           StoreCase{0, 0, 1, 4, 16384, 2}, StoreCase{1, 1, 1, 3, 0, 2}),
                         [](const ::testing::TestParamInfo<StoreCase>& i) {
                             const StoreCase& c = i.param;
                             return std::string(c.fallback ? "Fallback" : "IoUring") +
                                    (c.with_bf16 ? "_Bf16OnDisk" : "_Bf16InRam") +
                                    (c.grads_on_disk ? "_GradsOnDisk" : "_GradsInRam") + "_Ring" +
                                    std::to_string(c.ring) + (c.piece ? "_Pieces" : "_WholeLayers") +
                                    (c.held ? "_FirstHeldInRam" : "");
                         });

// Two checkpoints with no round between them (e.g. a step whose update was skipped): the second one copies
// every layer into the other generation, so both are complete checkpoints of the same state.
// A new store in dir holding ram's first `layers` layers (p, m, v), or NULL (the failure reported).
static SsdStore* store_with_layers(const std::string& dir, const SsdStoreConfig& cfg, const RamModel& ram,
                                   int layers) {
    char err[1024] = "";
    SsdStore* st = ssd_store_create(dir.c_str(), &cfg, err, sizeof err);
    EXPECT_NE(st, nullptr) << err;
    for (int l = 0; st && l < layers; l++)
        if (ssd_store_write_layer(st, l, &ram.p[(size_t)l * kLayer], &ram.m[(size_t)l * kLayer],
                                  &ram.v[(size_t)l * kLayer], err, sizeof err) != 0) {
            ADD_FAILURE() << err;
            ssd_store_close(st);
            return NULL;
        }
    return st;
}

TEST(SsdStore, CheckpointWithoutARoundCopiesTheState) {
    TempDir d;
    char err[1024] = "";
    const StoreCase c = {0, 1, 0, 3, 16384};
    const SsdStoreConfig cfg = store_config(c, 3);
    RamModel ram(3);
    std::vector<uint16_t> bf16(ram.b);
    SsdStore* st = store_with_layers(d.path, cfg, ram, 3);
    ASSERT_NE(st, nullptr);
    ram.step(1, {0, 1, 2});
    store_step(st, c, ram, 1, {0, 1, 2}, &bf16);
    ASSERT_EQ(ssd_store_checkpoint(st, 1, err, sizeof err), 0) << err;
    int64_t r0 = 0, w0 = 0, r1 = 0, w1 = 0;
    ssd_io_counters(ssd_store_io(st), &r0, &w0);
    ASSERT_EQ(ssd_store_checkpoint(st, 2, err, sizeof err), 0) << err;
    ssd_io_counters(ssd_store_io(st), &r1, &w1);
    EXPECT_GE(w1 - w0, 3 * kLayer * 14)
        << "every layer's params, m, v and bf16 copy written to the other generation";
    ssd_store_close(st);
    for (int64_t s : {1, 2}) {
        st = ssd_store_open(d.path.c_str(), &cfg, s, err, sizeof err);
        ASSERT_NE(st, nullptr) << err;
        expect_store_equals(st, ram, 1, s == 1 ? "checkpoint 1" : "checkpoint 2");
        ssd_store_close(st);
    }
}

// A file's size in bytes, or -1 if there is none.
static int64_t file_size_of(const std::string& path) {
    struct stat sb;
    return stat(path.c_str(), &sb) == 0 ? (int64_t)sb.st_size : -1;
}

// How many of path's pages are in the page cache (mincore of a read-only mapping), and of how many.
static std::pair<int64_t, int64_t> pages_cached(const std::string& path) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return {-1, -1};
    struct stat sb;
    fstat(fd, &sb);
    const int64_t page = sysconf(_SC_PAGESIZE), n = ((int64_t)sb.st_size + page - 1) / page;
    void* map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return {-1, -1};
    std::vector<unsigned char> in((size_t)n);
    int64_t cached = -1;
    if (mincore(map, (size_t)sb.st_size, in.data()) == 0) {
        cached = 0;
        for (unsigned char c : in) cached += c & 1;
    }
    munmap(map, (size_t)sb.st_size);
    return {cached, n};
}

// -sw 1 on several ranks (bf16_cached): the round writes the bf16 copy through the page cache, where the
// other ranks' reads of a layer it just wrote find it (ssd_tier.h), and the rest of the store keeps O_DIRECT;
// the same bits as ever, the resumed store's files too.
TEST(SsdStore, Bf16CopyWrittenThroughThePageCacheWhereAsked) {
    char err[1024] = "";
    const StoreCase c = {0, 1, 0, 3, 16384};
    for (int cached : {0, 1}) {
        TempDir d;
        SsdStoreConfig cfg = store_config(c, 3);
        cfg.bf16_cached = cached;
        RamModel ram(3);
        std::vector<uint16_t> bf16(ram.b);
        SsdStore* st = store_with_layers(d.path, cfg, ram, 3);
        ASSERT_NE(st, nullptr);
        for (int t = 1; t <= 2; t++) {
            ram.step(t, {0, 1, 2});
            store_step(st, c, ram, t, {0, 1, 2}, &bf16);
        }
        const std::string bf = d.path + "/gen0/weights.bf16", params = d.path + "/gen0/params.f32";
        const std::pair<int64_t, int64_t> b = pages_cached(bf), p = pages_cached(params);
        ASSERT_GT(b.second, 0) << bf;
        if (p.first > 0)
            GTEST_SKIP() << "this filesystem refuses O_DIRECT: every file goes through the cache";
        if (cached) EXPECT_EQ(b.first, b.second) << "every page of the round's bf16 copy in the page cache";
        else EXPECT_EQ(b.first, 0) << "O_DIRECT: the round's bf16 copy bypasses the page cache";
        ASSERT_EQ(ssd_store_checkpoint(st, 2, err, sizeof err), 0) << err;
        ssd_store_close(st);
        st = ssd_store_open(d.path.c_str(), &cfg, 2, err, sizeof err);
        ASSERT_NE(st, nullptr) << err;
        expect_store_equals(st, ram, 1, cached ? "cached, resumed" : "direct, resumed");
        ram.step(3, {0, 1, 2});
        store_step(st, c, ram, 3, {0, 1, 2}, &bf16);
        expect_store_equals(st, ram, 1, cached ? "cached, step 3" : "direct, step 3");
        ssd_store_close(st);
    }
}

// -sw 1 on several nodes (whole_bf16_elems): the store's layers.bf16 holds whole layers (longer than the
// store's part), written through the page cache and read back by ssd_bf16_files_open(whole = 1); a scratch
// file: kept by a resume with it, removed by one without it (a -sd run's), made again without a word.
TEST(SsdStore, WholeLayersFileOfSeveralNodes) {
    TempDir d;
    char err[1024] = "";
    const StoreCase c = {0, 0, 0, 3, 16384};
    SsdStoreConfig cfg = store_config(c, 3);
    cfg.whole_bf16_elems = 2 * kLayer + 5;  // a node's part is about half of a layer
    RamModel ram(3);
    SsdStore* st = store_with_layers(d.path, cfg, ram, 3);
    ASSERT_NE(st, nullptr);
    const int64_t n = cfg.whole_bf16_elems;
    std::vector<uint16_t> layers((size_t)(3 * n));
    for (size_t i = 0; i < layers.size(); i++) layers[i] = (uint16_t)(i * 2654435761u >> 7);
    for (int l = 0; l < 3; l++)
        ASSERT_EQ(ssd_store_write_whole_bf16(st, l, &layers[(size_t)(l * n)], err, sizeof err), 0) << err;
    EXPECT_NE(ssd_store_write_whole_bf16(st, 3, layers.data(), err, sizeof err), 0) << "no layer 3";
    ssd_io_set_fault(ssd_store_io(st), 1, 1, ENOSPC, 0);  // SSD_FAULT: the second write from here fails
    EXPECT_EQ(ssd_store_write_whole_bf16(st, 0, layers.data(), err, sizeof err), 0) << err;
    EXPECT_NE(ssd_store_write_whole_bf16(st, 0, layers.data(), err, sizeof err), 0);
    EXPECT_TRUE(strstr(err, "layers.bf16: No space left on device")) << err;
    ssd_io_set_fault(ssd_store_io(st), 1, -1, 0, 0);
    ASSERT_EQ(ssd_store_sync_whole(st, err, sizeof err), 0) << err;
    const std::string file = d.path + "/layers.bf16";
    const std::pair<int64_t, int64_t> cached = pages_cached(file);
    EXPECT_EQ(cached.first, cached.second) << "written through the page cache";
    SsdBf16Files* b = ssd_bf16_files_open(d.path.c_str(), 3, n, 1, err, sizeof err);
    ASSERT_NE(b, nullptr) << err;
    uint16_t* buf = (uint16_t*)ssd_alloc(ssd_round_up(n * 2, SSD_ALIGN));
    for (int l = 2; l >= 0; l--) {
        ASSERT_EQ(ssd_io_wait(ssd_bf16_files_io(b), ssd_bf16_files_read(b, 1, l, buf), err, sizeof err), 0)
            << err;
        EXPECT_EQ(memcmp(buf, &layers[(size_t)(l * n)], (size_t)n * 2), 0)
            << "layer " << l << ", any generation";
    }
    ssd_free(buf);
    ssd_bf16_files_close(b);
    ASSERT_EQ(ssd_store_checkpoint(st, 1, err, sizeof err), 0) << err;
    ssd_store_close(st);
    const int64_t size = file_size_of(file);
    st = ssd_store_open(d.path.c_str(), &cfg, 1, err, sizeof err);  // kept
    ASSERT_NE(st, nullptr) << err;
    ssd_store_close(st);
    EXPECT_EQ(file_size_of(file), size);
    cfg.whole_bf16_elems = 0;  // a resume without -sw 1: the store's state is the same, the scratch goes
    st = ssd_store_open(d.path.c_str(), &cfg, 1, err, sizeof err);
    ASSERT_NE(st, nullptr) << err;
    expect_store_equals(st, ram, 0, "without layers.bf16");
    ssd_store_close(st);
    EXPECT_EQ(file_size_of(file), -1) << "removed";
    cfg.whole_bf16_elems = n;
    st = ssd_store_open(d.path.c_str(), &cfg, 1, err, sizeof err);
    ASSERT_NE(st, nullptr) << err;
    ssd_store_close(st);
    EXPECT_EQ(file_size_of(file), size) << "made again at its size";
}

TEST(SsdStore, BadShapesAndMismatchedReopenAreRefused) {
    TempDir d;
    char err[1024] = "";
    SsdStoreConfig cfg = store_config(StoreCase{0, 0, 0, 3, 0}, 2);
    cfg.ring = 2;
    EXPECT_EQ(ssd_store_create(d.path.c_str(), &cfg, err, sizeof err), nullptr);
    EXPECT_NE(strstr(err, "ring >= 3"), nullptr) << err;
    cfg.ring = 3;
    EXPECT_EQ(ssd_store_open(d.path.c_str(), &cfg, -1, err, sizeof err), nullptr);
    EXPECT_NE(strstr(err, "no SSD store"), nullptr) << err;
    SsdStore* st = ssd_store_create(d.path.c_str(), &cfg, err, sizeof err);
    ASSERT_NE(st, nullptr) << err;
    ssd_store_close(st);
    EXPECT_EQ(ssd_store_open(d.path.c_str(), &cfg, -1, err, sizeof err), nullptr);  // never checkpointed
    EXPECT_NE(strstr(err, "no complete checkpoint"), nullptr) << err;
    SsdStoreConfig other = cfg;
    other.layer_elems = kLayer + 1;
    EXPECT_EQ(ssd_store_open(d.path.c_str(), &other, -1, err, sizeof err), nullptr);
    EXPECT_NE(strstr(err, "not 2 of 71000"), nullptr) << err;
    // a store far larger than the disk: refused at creation, with the numbers
    SsdStoreConfig huge = cfg;
    huge.num_layers = 1000;
    huge.layer_elems = (int64_t)1 << 38;
    EXPECT_EQ(ssd_store_create(d.path.c_str(), &huge, err, sizeof err), nullptr);
    EXPECT_NE(strstr(err, "not enough space"), nullptr) << err;
    EXPECT_NE(strstr(err, "GiB free"), nullptr) << err;
}

// ============================================================================
// Crashes and disk errors: the last checkpoint stays intact

// The run the crash and error tests make: create, steps 1 and 2, checkpoint 2, then the caller's fault and
// step 3 (and a checkpoint 3 if step 3 survived).
static const StoreCase kCrashCase = {0, 1, 0, 3, 16384};
static void run_until_fault(const std::string& dir, int write, int64_t after, int err_no, int kill_it,
                            int step3_copy_only) {
    char err[1024] = "";
    const SsdStoreConfig cfg = store_config(kCrashCase, 4);
    RamModel ram(4);
    std::vector<uint16_t> bf16(ram.b);
    SsdStore* st = ssd_store_create(dir.c_str(), &cfg, err, sizeof err);
    if (!st) {
        fprintf(stderr, "%s\n", err);
        _exit(3);
    }
    for (int l = 0; l < 4; l++)
        ssd_store_write_layer(st, l, &ram.p[(size_t)l * kLayer], &ram.m[(size_t)l * kLayer],
                              &ram.v[(size_t)l * kLayer], err, sizeof err);
    const std::vector<int> all = {0, 1, 2, 3};
    for (int t = 1; t <= 2; t++) {
        ram.step(t, all);
        store_step(st, kCrashCase, ram, t, all, &bf16);
    }
    if (ssd_store_checkpoint(st, 2, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        _exit(3);
    }
    ssd_io_set_fault(ssd_store_io(st), write, after, err_no, kill_it);
    if (step3_copy_only) {
        // a second checkpoint without a round between: every layer is copied into the other generation
        if (ssd_store_checkpoint(st, 3, err, sizeof err) != 0) {
            fprintf(stderr, "%s\n", err);
            _exit(4);
        }
    } else {
        ram.step(3, all);
        RoundCtx x;
        x.st = st;
        x.want = &ram;
        x.step = 3;
        x.grads_on_disk = 0;
        x.with_bf16 = 1;
        SsdRoundFns fns = {ctx_grads, ctx_update, NULL, NULL, &x, NULL};
        if (ssd_store_round(st, all.data(), 4, &fns, err, sizeof err) != 0) {
            fprintf(stderr, "%s\n", err);
            _exit(4);
        }
        if (ssd_store_checkpoint(st, 3, err, sizeof err) != 0) {
            fprintf(stderr, "%s\n", err);
            _exit(4);
        }
    }
    ssd_store_close(st);
    _exit(0);
}

static void expect_checkpoint_2_intact(const std::string& dir) {
    char err[1024] = "";
    const SsdStoreConfig cfg = store_config(kCrashCase, 4);
    RamModel ram(4);
    for (int t = 1; t <= 2; t++) ram.step(t, {0, 1, 2, 3});
    SsdStore* st = ssd_store_open(dir.c_str(), &cfg, -1, err, sizeof err);  // the newest checkpoint
    ASSERT_NE(st, nullptr) << err;
    int64_t steps[2];
    ssd_store_steps(st, steps);
    EXPECT_EQ(std::max(steps[0], steps[1]), 2);
    EXPECT_EQ(std::min(steps[0], steps[1]), -1) << "the generation being written is not a checkpoint";
    expect_store_equals(st, ram, 1, "checkpoint 2 after the crash");
    ssd_store_close(st);
}

// SIGKILL between two writes of step 3's round (before the first, after one, in the middle, before the last
// of its 80 write chunks: 4 layers x 5 pieces x 4 files, each piece of a file one 64 KiB chunk), or of a
// checkpoint's layer copies (a checkpoint with no round since the last one): the reopened store holds
// checkpoint 2, bit for bit.
TEST(SsdStoreCrash, KillBetweenWritesKeepsTheLastCheckpoint) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    for (int64_t after : {0, 1, 40, 79}) {
        for (int copy_only : {0, 1}) {
            TempDir d(NULL, true);
            EXPECT_EXIT(run_until_fault(d.path, 1, after, 0, 1, copy_only),
                        ::testing::KilledBySignal(SIGKILL), "")
                << "kill after " << after << " write chunks"
                << (copy_only ? " of a checkpoint's copies" : " of a round");
            expect_checkpoint_2_intact(d.path);
        }
    }
}

// ENOSPC, EIO and a short write in the middle of step 3's round: one clear error, the store refuses to go on,
// and checkpoint 2 is intact on reopening. (The child reports the error on stderr and exits 4.)
TEST(SsdStoreErrors, DiskErrorMidRoundIsOneErrorAndKeepsTheCheckpoint) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    struct {
        int write, err_no;
        const char* msg;
    } cases[] = {
        {1, ENOSPC, "No space left on device"}, {1, 0, "short write"}, {0, EIO, "Input/output error"}};
    for (const auto& k : cases) {
        TempDir d(NULL, true);
        EXPECT_EXIT(run_until_fault(d.path, k.write, 40, k.err_no, 0, 0), ::testing::ExitedWithCode(4),
                    k.msg);
        expect_checkpoint_2_intact(d.path);
    }
}

// In-process: after an error the store refuses rounds and checkpoints with a message naming the first error.
TEST(SsdStoreErrors, FailedStoreRefusesToGoOn) {
    TempDir d;
    char err[1024] = "";
    const SsdStoreConfig cfg = store_config(StoreCase{1, 0, 0, 3, 16384}, 2);
    RamModel ram(2);
    std::vector<uint16_t> bf16(ram.b);
    SsdStore* st = store_with_layers(d.path, cfg, ram, 2);
    ASSERT_NE(st, nullptr);
    RoundCtx x;
    x.st = st;
    x.want = &ram;
    x.step = 1;
    x.grads_on_disk = 0;
    x.with_bf16 = 0;
    x.bf16_ram = bf16;
    SsdRoundFns fns = {ctx_grads, ctx_update, ctx_bf16_dst, NULL, &x, NULL};
    const int twice[2] = {1, 1}, layers[2] = {0, 1};
    EXPECT_EQ(ssd_store_round(st, twice, 2, &fns, err, sizeof err),
              -1);  // bad input: an error, the store goes on
    EXPECT_NE(strstr(err, "listed twice"), nullptr) << err;
    ssd_io_set_fault(ssd_store_io(st), 1, 5, ENOSPC, 0);
    EXPECT_EQ(ssd_store_round(st, layers, 2, &fns, err, sizeof err), -1);
    EXPECT_NE(strstr(err, "No space left on device"), nullptr) << err;
    EXPECT_EQ(strchr(err, '\n'), nullptr) << "one line";
    ssd_io_set_fault(ssd_store_io(st), 1, -1, 0, 0);
    EXPECT_EQ(ssd_store_round(st, layers, 2, &fns, err, sizeof err), -1);
    EXPECT_NE(strstr(err, "failed earlier"), nullptr) << err;
    EXPECT_EQ(ssd_store_checkpoint(st, 1, err, sizeof err), -1);
    EXPECT_NE(strstr(err, "No space left on device"), nullptr) << err;
    std::vector<float> p((size_t)kLayer);
    EXPECT_EQ(ssd_store_read_layer(st, 0, p.data(), NULL, NULL, NULL, err, sizeof err), -1)
        << "the state may be torn";
    ssd_store_close(st);
}

// A real refusal by the kernel, no fault injection: a file size limit (RLIMIT_FSIZE) below the store's files
// makes fallocate fail with EFBIG at creation: one error naming the file.
TEST(SsdStoreErrors, FileSizeLimitAtCreationIsOneError) {
    TempDir d;
    char err[1024] = "";
    const SsdStoreConfig cfg = store_config(StoreCase{0, 0, 0, 3, 0}, 4);
    struct rlimit old;
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
    struct rlimit lim = old;
    lim.rlim_cur = 64 << 10;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
    SsdStore* st = ssd_store_create(d.path.c_str(), &cfg, err, sizeof err);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    EXPECT_EQ(st, nullptr);
    if (st) ssd_store_close(st);
    EXPECT_NE(strstr(err, strerror(EFBIG)), nullptr) << err;
    EXPECT_NE(strstr(err, "params.f32"), nullptr) << err;
}

// A 16 MiB tmpfs at path while it lives, where this process may mount one (mount_errno 0).
struct SmallTmpfs {
    std::string path;
    int mount_errno = 0;
    explicit SmallTmpfs(const std::string& p) : path(p) {
        if (mount("tmpfs", p.c_str(), "tmpfs", 0, "size=16m") != 0) mount_errno = errno;
    }
    ~SmallTmpfs() {
        if (!mount_errno) umount2(path.c_str(), MNT_DETACH);
    }
};

// A really full filesystem: a 16 MiB tmpfs where this process may mount one (root, or a user namespace
// allowing it; skipped otherwise). The store's files are allocated at creation, so the round's writes cannot
// run out of space; what can is the manifest of the next checkpoint once something else has filled the disk:
// that checkpoint fails with one error, and the previous one stays the store's checkpoint.
TEST(SsdStoreErrors, FullFilesystemAtCheckpointKeepsThePreviousOne) {
    TempDir d;
    const std::string mnt = d.path + "/mnt";
    ASSERT_EQ(mkdir(mnt.c_str(), 0755), 0);
    SmallTmpfs fs(mnt);
    if (fs.mount_errno)
        GTEST_SKIP() << "cannot mount a small tmpfs here (" << strerror(fs.mount_errno) << ")";
    char err[1024] = "";
    const SsdStoreConfig cfg = store_config(StoreCase{0, 0, 0, 3, 16384}, 4);  // 4 x 70999 x 12 x 2 = 6.5 MiB
    RamModel ram(4);
    std::vector<uint16_t> bf16(ram.b);
    const std::string dir = mnt + "/sd";
    SsdStore* st = ssd_store_create(dir.c_str(), &cfg, err, sizeof err);
    ASSERT_NE(st, nullptr) << err;
    for (int l = 0; l < 4; l++)
        ASSERT_EQ(ssd_store_write_layer(st, l, &ram.p[(size_t)l * kLayer], &ram.m[(size_t)l * kLayer],
                                        &ram.v[(size_t)l * kLayer], err, sizeof err),
                  0);
    const StoreCase c = {0, 0, 0, 3, 16384};
    ram.step(1, {0, 1, 2, 3});
    store_step(st, c, ram, 1, {0, 1, 2, 3}, &bf16);
    ASSERT_EQ(ssd_store_checkpoint(st, 1, err, sizeof err), 0) << err;
    // fill the filesystem to the last byte
    FILE* f = fopen((mnt + "/filler").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::vector<char> junk(1 << 16, 'x');
    while (fwrite(junk.data(), 1, junk.size(), f) == junk.size()) {}
    fclose(f);
    {
        FILE* g = fopen((mnt + "/filler2").c_str(), "w");  // the last partial block
        if (g) {
            while (fputc('x', g) != EOF && fflush(g) == 0) {}
            fclose(g);
        }
    }
    const RamModel at1 = ram;
    ram.step(2, {0, 1, 2, 3});
    store_step(st, c, ram, 2, {0, 1, 2, 3}, &bf16);  // preallocated: works on a full disk
    EXPECT_EQ(ssd_store_checkpoint(st, 2, err, sizeof err), -1);
    EXPECT_NE(strstr(err, strerror(ENOSPC)), nullptr) << err;
    ssd_store_close(st);
    st = ssd_store_open(dir.c_str(), &cfg, -1, err, sizeof err);
    ASSERT_NE(st, nullptr) << err;
    int64_t steps[2];
    ssd_store_steps(st, steps);
    EXPECT_EQ(std::max(steps[0], steps[1]), 1);
    expect_store_equals(st, at1, 0, "checkpoint 1 after the full disk");
    ssd_store_close(st);
}

// ============================================================================
// Checksums and owners (issue 33): damage is found at resume and named; a store belongs to one run

// Two checkpoints (steps 2 and 4) of a 4-layer store, closed: the tests then damage its files.
static SsdStoreConfig checkpointed_store(const std::string& dir, const char* owner, RamModel* ram) {
    char err[1024] = "";
    SsdStoreConfig cfg = store_config(kCrashCase, 4);
    cfg.owner = owner;
    std::vector<uint16_t> bf16(ram->b);
    SsdStore* st = ssd_store_create(dir.c_str(), &cfg, err, sizeof err);
    EXPECT_NE(st, nullptr) << err;
    if (!st) return cfg;
    for (int l = 0; l < 4; l++)
        ssd_store_write_layer(st, l, &ram->p[(size_t)l * kLayer], &ram->m[(size_t)l * kLayer],
                              &ram->v[(size_t)l * kLayer], err, sizeof err);
    const std::vector<int> all = {0, 1, 2, 3};
    for (int t = 1; t <= 4; t++) {
        ram->step(t, all);
        store_step(st, kCrashCase, *ram, t, all, &bf16);
        if (t % 2 == 0) { EXPECT_EQ(ssd_store_checkpoint(st, t, err, sizeof err), 0) << err; }
    }
    ssd_store_close(st);
    return cfg;
}
// Overwrites `bytes` bytes at `offset` of a file with `value`.
static void damage(const std::string& path, int64_t offset, int bytes, unsigned char value) {
    const int fd = open(path.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0) << path;
    std::vector<unsigned char> b((size_t)bytes, value);
    ASSERT_EQ(pwrite(fd, b.data(), b.size(), offset), (ssize_t)b.size());
    close(fd);
}
static std::string manifest_of(const std::string& dir) {
    std::ifstream f(dir + "/ssd_manifest");
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}
// the generation holding step 4 (the newest)
static int gen_of_step4(const std::string& dir) {
    return manifest_of(dir).find("step0 4\n") != std::string::npos ? 0 : 1;
}

TEST(SsdStoreChecksums, DamageInAnyFileIsFoundAtResumeAndTheIntactCheckpointNamed) {
    for (const char* file : {"params.f32", "m.f32", "v.f32", "weights.bf16"}) {
        TempDir d;
        RamModel ram(4);
        const SsdStoreConfig cfg = checkpointed_store(d.path, "/runs/a", &ram);
        const int g = gen_of_step4(d.path);
        const std::string path = d.path + "/gen" + std::to_string(g) + "/" + file;
        const int64_t size = strcmp(file, "weights.bf16") == 0 ? 2 : 4;
        const int64_t stride = (kLayer * size + 4095) / 4096 * 4096;
        damage(path, stride + 4096 + 8, 4, 0x3f);  // in layer 1's first piece
        char err[2048] = "";
        EXPECT_EQ(ssd_store_open(d.path.c_str(), &cfg, 4, err, sizeof err), nullptr) << file;
        EXPECT_NE(strstr(err, (path + " is damaged: layer 1, elements 0..16383 read back").c_str()), nullptr)
            << err;
        EXPECT_NE(
            strstr(err, "the state of step 4 is unusable, the store's other checkpoint, step 2, is intact"),
            nullptr)
            << err;
        SsdStore* st = ssd_store_open(d.path.c_str(), &cfg, 2, err, sizeof err);  // the fallback
        ASSERT_NE(st, nullptr) << err;
        ssd_store_close(st);
    }
}

TEST(SsdStoreChecksums, DamageInBothGenerationsLeavesNoFallback) {
    TempDir d;
    RamModel ram(4);
    const SsdStoreConfig cfg = checkpointed_store(d.path, "", &ram);
    for (int g = 0; g < 2; g++) damage(d.path + "/gen" + std::to_string(g) + "/v.f32", 16384, 16384, 0);
    char err[2048] = "";
    EXPECT_EQ(ssd_store_open(d.path.c_str(), &cfg, -1, err, sizeof err), nullptr);
    EXPECT_NE(strstr(err, "is damaged: layer 0, elements"), nullptr) << err;
    EXPECT_NE(strstr(err, "the store holds no other intact checkpoint"), nullptr) << err;
}

// A file of the newest checkpoint cut short (a hostile trial truncated it mid-run): as damage found by the
// checksums, the resume is refused naming the intact older checkpoint, which then resumes; both cut: none.
TEST(SsdStoreChecksums, AShortFileOfTheNewestCheckpointNamesTheIntactOne) {
    TempDir d;
    RamModel ram(4);
    const SsdStoreConfig cfg = checkpointed_store(d.path, "", &ram);
    const int g = gen_of_step4(d.path);
    ASSERT_EQ(truncate((d.path + "/gen" + std::to_string(g) + "/weights.bf16").c_str(), 0), 0);
    char err[2048] = "";
    EXPECT_EQ(ssd_store_open(d.path.c_str(), &cfg, -1, err, sizeof err), nullptr);
    EXPECT_NE(strstr(err, "weights.bf16 has 0 bytes, the store's shape needs"), nullptr) << err;
    EXPECT_NE(strstr(err, "the state of step 4 is unusable, the store's other checkpoint, step 2, is intact"),
              nullptr)
        << err;
    SsdStore* st = ssd_store_open(d.path.c_str(), &cfg, 2, err, sizeof err);  // the fallback
    ASSERT_NE(st, nullptr) << err;
    ssd_store_close(st);
    TempDir d2;
    RamModel ram2(4);
    checkpointed_store(d2.path, "", &ram2);
    for (int k = 0; k < 2; k++)
        ASSERT_EQ(truncate((d2.path + "/gen" + std::to_string(k) + "/weights.bf16").c_str(), 0), 0);
    EXPECT_EQ(ssd_store_open(d2.path.c_str(), &cfg, -1, err, sizeof err), nullptr);
    EXPECT_NE(strstr(err, "the state of step 4 is unusable and the store holds no other intact checkpoint"),
              nullptr)
        << err;
}

// A store file removed during the run (a hostile trial: both weights.bf16 files, the run went on through its
// descriptors and said its checkpoints were saved, which no resume could open): the checkpoint fails, naming
// the file and, where it held the last checkpoint, that it is gone.
TEST(SsdStoreErrors, AFileRemovedDuringTheRunFailsTheCheckpoint) {
    enum { REMOVE_WRITTEN, REMOVE_CHECKPOINTS, CUT_CHECKPOINTS };
    for (const int how : {REMOVE_WRITTEN, REMOVE_CHECKPOINTS, CUT_CHECKPOINTS}) {
        SCOPED_TRACE(how);
        TempDir d;
        char err[2048] = "";
        const SsdStoreConfig cfg = store_config(kCrashCase, 3);
        RamModel ram(3);
        SsdStore* st = store_with_layers(d.path, cfg, ram, 3);
        ASSERT_NE(st, nullptr);
        ASSERT_EQ(ssd_store_checkpoint(st, 1, err, sizeof err), 0) << err;
        const int held = manifest_of(d.path).find("step0 1\n") != std::string::npos ? 0 : 1;
        const int g = how == REMOVE_WRITTEN ? 1 - held : held;  // the rounds write the other generation
        const std::string path = d.path + "/gen" + std::to_string(g) + "/m.f32";
        ASSERT_EQ(how == CUT_CHECKPOINTS ? truncate(path.c_str(), 4096) : unlink(path.c_str()), 0);
        EXPECT_NE(ssd_store_checkpoint(st, 2, err, sizeof err), 0);
        EXPECT_NE(strstr(err, (path + " was removed, replaced, cut short or grown during the run").c_str()),
                  nullptr)
            << err;
        EXPECT_EQ(strstr(err, "the store's checkpoint of step 1 is gone with it") != nullptr,
                  how != REMOVE_WRITTEN)
            << err;
        ssd_store_close(st);
    }
}

TEST(SsdStoreChecksums, AnEditedManifestOrSumsFileIsRefused) {
    TempDir d;
    RamModel ram(4);
    const SsdStoreConfig cfg = checkpointed_store(d.path, "", &ram);
    const std::string m = manifest_of(d.path), path = d.path + "/ssd_manifest";
    char err[2048] = "";
    // the generations' labels swapped: step 2 <-> step 4
    std::string swapped = m;
    const size_t a = swapped.find("step0 "), b = swapped.find("step1 ");
    std::swap(swapped[a + 6], swapped[b + 6]);
    std::ofstream(path) << swapped;
    EXPECT_EQ(ssd_store_open(d.path.c_str(), &cfg, 4, err, sizeof err), nullptr);
    EXPECT_NE(strstr(err, "ssd_manifest is damaged (its checksum does not match its text)"), nullptr) << err;
    std::ofstream(path) << m;
    // a generation's sums file replaced by the other's
    const int g = gen_of_step4(d.path);
    ASSERT_EQ(system(("cp " + d.path + "/gen" + std::to_string(1 - g) + "/sums.crc32c " + d.path + "/gen" +
                      std::to_string(g) + "/sums.crc32c")
                         .c_str()),
              0);
    EXPECT_EQ(ssd_store_open(d.path.c_str(), &cfg, 4, err, sizeof err), nullptr);
    EXPECT_NE(strstr(err, "sums.crc32c is damaged or not this checkpoint's"), nullptr) << err;
    EXPECT_NE(strstr(err, "step 2, is intact"), nullptr) << err;
    // a FIFO as the manifest: one error, no hang
    unlink(path.c_str());
    ASSERT_EQ(mkfifo(path.c_str(), 0644), 0);
    EXPECT_EQ(ssd_store_open(d.path.c_str(), &cfg, 4, err, sizeof err), nullptr);
    EXPECT_NE(strstr(err, "ssd_manifest is not a regular file"), nullptr) << err;
}

// What a resume does not read cannot refuse it (a hostile trial: a truncated file of the older checkpoint,
// or the gradients' scratch file gone, refused a resume of the intact newer one): those files are made again,
// the older checkpoint said gone, and the resume reads step 4 as the owner's does.
TEST(SsdStoreOwner, TheOlderCheckpointsFilesAndTheScratchDoNotBlockAResume) {
    TempDir d, runs;
    const std::string a = runs.path + "/a";
    mkdir(a.c_str(), 0755);
    RamModel ram(4);
    SsdStoreConfig cfg = checkpointed_store(d.path, a.c_str(), &ram);
    const std::string m = manifest_of(d.path);
    const int newest = m.find("step0 4\n") != std::string::npos ? 0 : 1, older = 1 - newest;
    ASSERT_NE(m.find("step" + std::to_string(newest) + " 4\n"), std::string::npos) << m;
    ASSERT_EQ(truncate((d.path + "/gen" + std::to_string(older) + "/v.f32").c_str(), 4096), 0);
    unlink((d.path + "/grads.bf16").c_str());
    char err[2048] = "";
    RamModel want(4);
    for (int t = 1; t <= 4; t++) want.step(t, {0, 1, 2, 3});
    SsdStore* st = ssd_store_open(d.path.c_str(), &cfg, -1, err, sizeof err);
    ASSERT_NE(st, nullptr) << err;
    expect_store_equals(st, want, 1, "the resume of step 4");
    ssd_store_close(st);
    // the newer checkpoint's own file damaged: refused, named
    ASSERT_EQ(truncate((d.path + "/gen" + std::to_string(newest) + "/m.f32").c_str(), 4096), 0);
    EXPECT_EQ(ssd_store_open(d.path.c_str(), &cfg, -1, err, sizeof err), nullptr);
    EXPECT_NE(strstr(err, "m.f32 has 4096 bytes"), nullptr) << err;
}

TEST(SsdStoreOwner, AnotherRunsStoreIsNeitherReplacedNorResumed) {
    TempDir d, runs;  // the owners' run directories exist: a gone one's store follows its run (below)
    const std::string a = runs.path + "/a", b = runs.path + "/b";
    mkdir(a.c_str(), 0755);
    mkdir(b.c_str(), 0755);
    RamModel ram(4);
    SsdStoreConfig cfg = checkpointed_store(d.path, a.c_str(), &ram);
    const std::string before = manifest_of(d.path);
    char err[2048] = "";
    SsdStoreConfig other = cfg;
    for (const char* owner : {b.c_str(), ""}) {
        other.owner = owner;
        EXPECT_EQ(ssd_store_create(d.path.c_str(), &other, err, sizeof err), nullptr) << owner;
        EXPECT_NE(
            strstr(err, ("holds the SSD store of the run in " + a + " with a checkpoint; it is left as it is")
                            .c_str()),
            nullptr)
            << err;
        EXPECT_EQ(ssd_store_open(d.path.c_str(), &other, -1, err, sizeof err), nullptr);
        EXPECT_NE(strstr(err, ("belongs to the run in " + a + ", not to").c_str()), nullptr) << err;
    }
    EXPECT_EQ(manifest_of(d.path), before) << "the store is untouched";
    RamModel want(4);
    for (int t = 1; t <= 4; t++) want.step(t, {0, 1, 2, 3});
    SsdStore* st = ssd_store_open(d.path.c_str(), &cfg, 4, err, sizeof err);  // its owner resumes it
    ASSERT_NE(st, nullptr) << err;
    expect_store_equals(st, want, 1, "the owner's resume");
    ssd_store_close(st);
    // the owner's directory moved (a hostile trial: the store refused the moved run, and its manifest's
    // checksum let nobody mend it): the run in its new place resumes it; a run without -o still may not
    const std::string moved = runs.path + "/a_moved";
    ASSERT_EQ(rename(a.c_str(), moved.c_str()), 0);
    other.owner = "";
    EXPECT_EQ(ssd_store_open(d.path.c_str(), &other, -1, err, sizeof err), nullptr);
    other.owner = moved.c_str();
    st = ssd_store_open(d.path.c_str(), &other, 4, err, sizeof err);
    ASSERT_NE(st, nullptr) << err;
    expect_store_equals(st, want, 1, "the moved run's resume");
    ssd_store_close(st);
    // a store without an owner (a run without -o, which never checkpoints) may be replaced by any run
    TempDir e;
    RamModel r2(4);
    checkpointed_store(e.path, NULL, &r2);
    st = ssd_store_create(e.path.c_str(), &cfg, err, sizeof err);
    EXPECT_NE(st, nullptr) << err;
    ssd_store_close(st);
    // nor is another run's store without a checkpoint (a run that ended before its first save left it:
    // a walkthrough's next run was told to choose another -sd): b replaces what a created
    TempDir f;
    SsdStoreConfig fresh = cfg;
    fresh.owner = a.c_str();
    st = ssd_store_create(f.path.c_str(), &fresh, err, sizeof err);
    ASSERT_NE(st, nullptr) << err;
    ssd_store_close(st);
    fresh.owner = b.c_str();
    st = ssd_store_create(f.path.c_str(), &fresh, err, sizeof err);
    EXPECT_NE(st, nullptr) << err;
    ssd_store_close(st);
    EXPECT_NE(manifest_of(f.path).find(b), std::string::npos) << "b's store now";
}

TEST(SsdStoreOwner, OneRunAtATimeHoldsTheDirectory) {
    TempDir d;
    char err[1024] = "";
    const int fd = ssd_lock_dir(d.path.c_str(), err, sizeof err);
    ASSERT_GE(fd, 0) << err;
    const pid_t child = fork();  // flock is per open file: another process is refused
    if (child == 0) {
        char e[1024];
        const std::string want = "is in use by another run (pid " + std::to_string(getppid()) + ")";
        const int fd2 = ssd_lock_dir(d.path.c_str(), e, sizeof e);
        _exit(fd2 < 0 && strstr(e, want.c_str()) ? 0 : 1);
    }
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "a second process is refused, naming the pid";
    close(fd);
    const int fd3 = ssd_lock_dir(d.path.c_str(), err, sizeof err);  // released with the first
    EXPECT_GE(fd3, 0) << err;
    close(fd3);
}

// ============================================================================
// The plan and the probe

static SsdPlanInput plan_input(const GPTConfig& c, int with_bf16) {
    const ParamLayout p = gpt_layout(&c);
    SsdPlanInput in;
    memset(&in, 0, sizeof in);
    in.streamed_layers = c.num_layers;
    in.layer_elems = p.layer_stride;
    in.resident_elems = p.embed_count;
    in.with_bf16 = with_bf16;
    in.grads_on_disk = 1;
    in.ring = 4;
    in.piece_elems = (int64_t)1 << 26;  // 64 Mi parameters per piece: 0.9 GiB of ring per slot
    in.bf16_buffers = 6;                // GPU slots + the layers read ahead
    in.grad_buffers = 3;
    in.held_grads = 3;
    in.other_host_bytes = (int64_t)8 * 1024 * 4 * 2;  // B*T tokens and targets (B 8, T 1024)
    return in;
}

static void print_plan(const char* name, const SsdPlan& p) {
    const double G = 1024.0 * 1024.0 * 1024.0;
    printf(
        "  %-16s host %7.2f GiB (resident %.2f, bf16 weights %.2f, grads %.2f, ring %.2f)  disk %8.1f GiB  "
        "per step: read %7.1f GiB, write %7.1f GiB\n",
        name, p.host_bytes / G, p.host_resident / G, p.host_bf16 / G, p.host_grads / G, p.host_ring / G,
        p.disk_bytes / G, p.read_per_step / G, p.write_per_step / G);
}

// Issue 22's capacity target on paper: the 100b preset at B 8, T 1024 fits 256 GiB of host RAM with the state
// on disk (-sd) and 64 GiB with the bf16 weights there too (-sd -sw 1).
TEST(SsdPlan, HundredBillionFitsTheWorkstation) {
    GPTConfig c;
    char err[256] = "";
    ASSERT_EQ(parse_model_spec("100b", &c, err, sizeof err), 1) << err;
    const ParamLayout p = gpt_layout(&c);
    const double G = 1024.0 * 1024.0 * 1024.0;
    printf("  100b: %d layers of %lld parameters, %lld in all (embeddings %lld)\n", c.num_layers,
           (long long)p.layer_stride, (long long)p.total, (long long)p.embed_count);
    const SsdPlanInput sd_in = plan_input(c, 0), sw_in = plan_input(c, 1);
    const SsdPlan sd = ssd_plan(&sd_in);
    const SsdPlan sw = ssd_plan(&sw_in);
    SsdPlanInput ram_in = plan_input(c, 0);
    ram_in.grads_on_disk = 0;
    const SsdPlan grads_in_ram = ssd_plan(&ram_in);
    print_plan("-sd", sd);
    print_plan("-sd -sw 1", sw);
    print_plan("-sd, grads in RAM", grads_in_ram);
    printf("  in RAM today: %.2f GiB (16 bytes per parameter)\n", p.total * 16.0 / G);
    EXPECT_LE(sd.host_bytes, (int64_t)256 << 30);
    EXPECT_LE(sw.host_bytes, (int64_t)64 << 30);
    EXPECT_GT(grads_in_ram.host_bytes, (int64_t)256 << 30) << "the gradients must go to disk for 256 GiB";
    // the parts add up, and the formulas are the ones ssd.h states
    const int64_t L = c.num_layers, s4 = ssd_round_up(p.layer_stride * 4, 4096),
                  s2 = ssd_round_up(p.layer_stride * 2, 4096);
    EXPECT_EQ(sd.host_bytes, sd.host_resident + sd.host_bf16 + sd.host_grads + sd.host_ring +
                                 plan_input(c, 0).other_host_bytes);
    EXPECT_EQ(sd.host_bf16, L * p.layer_stride * 2);
    EXPECT_EQ(sw.host_bf16, 6 * s2);
    EXPECT_EQ(sd.disk_bytes, 2 * L * 3 * s4 + L * s2);
    EXPECT_EQ(sw.disk_bytes, 2 * L * (3 * s4 + s2) + L * s2);
    EXPECT_EQ(sd.read_per_step, L * (3 * s4 + s2));
    EXPECT_EQ(sd.write_per_step, L * (3 * s4 + s2));
    EXPECT_EQ(sw.read_per_step, L * (3 * s4 + 2 * s2));  // the gradients, the backward's bf16 weights
    EXPECT_EQ(sw.write_per_step, L * (3 * s4 + 2 * s2));
    // the store's own accounting agrees with the plan
    SsdStoreConfig sc;
    memset(&sc, 0, sizeof sc);
    sc.num_layers = (int)L;
    sc.layer_elems = p.layer_stride;
    sc.with_bf16 = 1;
    sc.grads_on_disk = 1;
    sc.ring = 4;
    sc.piece_elems = (int64_t)1 << 26;
    EXPECT_EQ(ssd_store_disk_bytes(&sc), sw.disk_bytes);
    EXPECT_EQ(ssd_store_ring_bytes(&sc), sw.host_ring);
}

// The disk work a round waits for in the next forward (-P 1's "the round's" row). Its reads: a step's less
// the p, m, v of the first ring - 1 pieces (read ahead during the backward: prefetch_next_round), the
// gradients the round takes from the staging buffers (the backward's last held_grads layers), and -sw 1's
// bf16 weights (read by the backward). Its writes (p, m, v; -sw 1's bf16 weights too): those of every piece
// but the last `ring` (a ring entry is read into again once its piece is written). Whole small layers: the
// read-ahead spans 3 layers; 100b's layers of 1.02 G parameters: 16 pieces, the last short, and the
// read-ahead 3 of the first layer's; a layer of 1.5 pieces: its 2 pieces, then 1 of the next. A ring of every
// piece + 1 (-sb) reads the whole round ahead and waits for no write.
TEST(SsdPlan, RoundDiskWorkLeavesOutWhatTheBackwardDid) {
    GPTConfig c;
    char err[256] = "";
    ASSERT_EQ(parse_model_spec("100b", &c, err, sizeof err), 1) << err;
    const int64_t big = gpt_layout(&c).layer_stride, piece = (int64_t)1 << 26, last = big - 15 * piece;
    ASSERT_TRUE(last > 0 && last < piece);
    for (int sw = 0; sw <= 1; sw++) {
        SCOPED_TRACE("sw " + std::to_string(sw));
        SsdPlanInput in = plan_input(c, sw);
        const int64_t L = in.streamed_layers, s4 = ssd_round_up(big * 4, 4096),
                      s2 = ssd_round_up(big * 2, 4096);
        // all writes, less the last 4 pieces' (last4, last2: their fp32 and bf16 sizes)
        auto writes = [&](int64_t w4, int64_t w2, int64_t last4, int64_t last2) {
            return L * (3 * w4 + sw * w2) - (3 * last4 + sw * last2);
        };
        SsdPlan p = ssd_plan(&in);
        EXPECT_EQ(p.round_reads, L * (3 * s4 + s2) - 3 * 3 * piece * 4 - 3 * s2) << "100b";
        EXPECT_EQ(p.round_writes, writes(s4, s2, 3 * piece * 4 + ssd_round_up(last * 4, 4096),
                                         3 * piece * 2 + ssd_round_up(last * 2, 4096)))
            << "100b: 3 whole pieces and the short one";
        in.layer_elems = 12 * 1024 * 1024 + 100;  // d12's layer (C 1024) and a little: one piece a layer
        const int64_t n4 = ssd_round_up(in.layer_elems * 4, 4096),
                      n2 = ssd_round_up(in.layer_elems * 2, 4096);
        p = ssd_plan(&in);
        EXPECT_EQ(p.round_reads, L * (3 * n4 + n2) - 3 * 3 * n4 - 3 * n2) << "d12";
        EXPECT_EQ(p.round_writes, writes(n4, n2, 4 * n4, 4 * n2)) << "d12";
        in.ring = (int)L + 1;  // -sb: the whole round in the ring
        p = ssd_plan(&in);
        EXPECT_EQ(p.round_reads, (L - 3) * n2) << "d12, a ring of every piece: its gradients alone";
        EXPECT_EQ(p.round_writes, 0) << "d12, a ring of every piece";
        in.ring = 4;
        in.streamed_layers = 2;  // fewer layers than the ring and the held gradients: nothing to wait for
        EXPECT_EQ(ssd_plan(&in).round_reads, 0) << "2 layers";
        EXPECT_EQ(ssd_plan(&in).round_writes, 0) << "2 layers";
        in.streamed_layers = L;
        in.layer_elems = piece + piece / 2;  // pieces of 64 Mi and 32 Mi, 64 Mi of the next layer
        const int64_t l4 = ssd_round_up(in.layer_elems * 4, 4096),
                      l2 = ssd_round_up(in.layer_elems * 2, 4096);
        p = ssd_plan(&in);
        EXPECT_EQ(p.round_reads, L * (3 * l4 + l2) - 3 * (2 * piece + piece / 2) * 4 - 3 * l2)
            << "1.5 pieces a layer";
        EXPECT_EQ(p.round_writes, writes(l4, l2, 3 * piece * 4, 3 * piece * 2)) << "1.5 pieces a layer";
        in.grads_on_disk = 0;  // the gradients in RAM: none read, none held
        EXPECT_EQ(ssd_plan(&in).round_reads, L * 3 * l4 - 3 * (2 * piece + piece / 2) * 4) << "grads in RAM";
    }
}

TEST(SsdProbe, MeasuresBothDirections) {
    TempDir d;
    double r = 0, w = 0;
    int direct = -1;
    char err[1024] = "";
    ASSERT_EQ(ssd_probe_bandwidth(d.path.c_str(), 0.5, (int64_t)128 << 20, &r, &w, &direct, err, sizeof err),
              0)
        << err;
    printf("  %s: read %.0f MB/s, write %.0f MB/s, O_DIRECT %s\n", d.path.c_str(), r / 1e6, w / 1e6,
           direct ? "yes" : "no");
    EXPECT_GT(r, 0.0);
    EXPECT_GT(w, 0.0);
    EXPECT_TRUE(fs::is_empty(d.path)) << "the probe removes its file";
}

// Issue 42's measurement: writes alone, reads alone, and both at once through one SsdIo, at a queue depth;
// the files removed after. A directory that is not there: one message.
TEST(SsdProbe, RatesAloneAndAtOnce) {
    TempDir d;
    SsdRates r;
    char err[1024] = "";
    ASSERT_EQ(ssd_probe_rates(d.path.c_str(), 0.2, (int64_t)32 << 20, 8, &r, err, sizeof err), 0) << err;
    printf("  write %.0f MB/s, read %.0f MB/s, at once read %.0f + write %.0f MB/s (%s, O_DIRECT %s)\n",
           r.write_bps / 1e6, r.read_bps / 1e6, r.mixed_read_bps / 1e6, r.mixed_write_bps / 1e6, r.backend,
           r.direct ? "yes" : "no");
    EXPECT_GT(r.write_bps, 0.0);
    EXPECT_GT(r.read_bps, 0.0);
    EXPECT_GT(r.mixed_read_bps, 0.0);
    EXPECT_GT(r.mixed_write_bps, 0.0);
    ASSERT_NE(r.backend, nullptr);
    EXPECT_TRUE(fs::is_empty(d.path)) << "the probe removes its files";
    EXPECT_EQ(ssd_probe_rates((d.path + "/none").c_str(), 0.1, (int64_t)32 << 20, 8, &r, err, sizeof err),
              -1);
    EXPECT_TRUE(std::string(err).find("cannot measure the disk of") != std::string::npos) << err;
}

// A file's bytes, or "" if it cannot be read.
static std::string file_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// What the store and the probe create is theirs: a symlink at the name (to a file of someone else's) is
// removed, never followed. The probe and the manifest's .tmp truncated the link's target before.
TEST(SsdProbe, SymlinksAtItsFileNamesAreNotFollowed) {
    TempDir d, other;
    const std::string victim = other.path + "/victim";
    std::ofstream(victim) << "precious";
    const std::string probe =
        d.path + "/ssd_probe." + std::to_string((long)getpid()) + ".tmp";  // this process's
    ASSERT_EQ(symlink(victim.c_str(), probe.c_str()), 0);
    double r = 0, w = 0;
    int direct = -1;
    char err[1024] = "";
    EXPECT_EQ(ssd_probe_bandwidth(d.path.c_str(), 0.1, (int64_t)8 << 20, &r, &w, &direct, err, sizeof err), 0)
        << err;
    EXPECT_TRUE(file_text(victim) == "precious")
        << "the target now has " << file_text(victim).size() << " bytes";
    EXPECT_TRUE(fs::is_empty(d.path)) << "the probe removes its file (the symlink went first)";

    ASSERT_EQ(symlink(victim.c_str(), (d.path + "/ssd_manifest.tmp").c_str()), 0);
    SsdStoreConfig cfg = store_config(StoreCase{0, 0, 0, 3, 0}, 2);
    SsdStore* st = ssd_store_create(d.path.c_str(), &cfg, err, sizeof err);
    ASSERT_NE(st, nullptr) << err;
    ssd_store_close(st);
    EXPECT_TRUE(file_text(victim) == "precious")
        << "the target now has " << file_text(victim).size() << " bytes";
}

// A FIFO as the manifest (or as a state file) is refused in one line; reading the manifest blocked forever.
// The open runs in a child process, so that a hang fails the test after 20 s instead of hanging it.
TEST(SsdStore, FifoInsteadOfAFileIsRefusedNotAHang) {
    TempDir d;
    ASSERT_EQ(mkfifo((d.path + "/ssd_manifest").c_str(), 0644), 0);
    SsdStoreConfig cfg = store_config(StoreCase{0, 0, 0, 3, 0}, 2);
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        char err[1024] = "";
        SsdStore* st = ssd_store_open(d.path.c_str(), &cfg, -1, err, sizeof err);
        const std::string msg = std::string(st ? "opened" : "refused") + ": " + err;
        _exit(write(fds[1], msg.data(), msg.size()) == (ssize_t)msg.size() ? 0 : 1);
    }
    close(fds[1]);
    struct pollfd p = {fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, 20000);
    char msg[1100] = "";
    const ssize_t got = ready > 0 ? read(fds[0], msg, sizeof msg - 1) : -1;
    close(fds[0]);
    if (ready <= 0) kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    ASSERT_GT(got, 0) << "ssd_store_open hung on a FIFO manifest";
    EXPECT_NE(strstr(msg, "refused: "), nullptr) << msg;
    EXPECT_NE(strstr(msg, "is not a regular file"), nullptr) << msg;
    EXPECT_EQ(strchr(msg, '\n'), nullptr) << msg;

    SsdFile f;  // a state file: refused too (O_NONBLOCK: no open of a FIFO waits for a writer)
    const std::string fifo = d.path + "/params.f32";
    ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
    char err[1024] = "";
    EXPECT_EQ(ssd_file_open(&f, fifo.c_str(), 0, 0, 1, err, sizeof err), -1);
    EXPECT_NE(strstr(err, "is not a regular file"), nullptr) << err;
}

// A small disk's sizes are printed in MiB: "needs 0.02 GiB, has 0.02 GiB free" said nothing. A 16 MiB tmpfs
// where this process may mount one (skipped otherwise).
TEST(SsdStoreErrors, SmallSizesInMessagesAreReadable) {
    TempDir d;
    const std::string mnt = d.path + "/mnt";
    ASSERT_EQ(mkdir(mnt.c_str(), 0755), 0);
    SmallTmpfs fs(mnt);
    if (fs.mount_errno)
        GTEST_SKIP() << "cannot mount a small tmpfs here (" << strerror(fs.mount_errno) << ")";
    char err[1024] = "";
    const SsdStoreConfig cfg = store_config(StoreCase{0, 0, 0, 3, 16384}, 12);  // about 19.5 MiB of state
    EXPECT_EQ(ssd_store_create((mnt + "/sd").c_str(), &cfg, err, sizeof err), nullptr);
    EXPECT_NE(strstr(err, "not enough space"), nullptr) << err;
    EXPECT_NE(strstr(err, " MiB (two generations"), nullptr) << err;
    EXPECT_NE(strstr(err, " MiB free"), nullptr) << err;
    EXPECT_EQ(strstr(err, "0.0"), nullptr) << err;
}
