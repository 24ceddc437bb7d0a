// test_stream.cpp — stream.cu's ordering protocol, checked on the CPU (it runs in CI, no GPU needed).
// stream.cu is compiled against test/fake_cuda, a model of CUDA's ordering rules (vector clocks per stream
// and for the host: see fake_cuda/cuda_runtime.h). A driver that calls stream.cu the way gpt_step does —
// forward pass, backward pass with gradient hand-off, the end-of-step sync, a CPU optimizer that updates
// the streamed layers in order and may lag behind the next forward pass, validation passes in between,
// skipped updates — runs over every small shape (layers, weight slots, GPU-resident layers) with random
// optimizer progress, and checks:
//   - no race: every pair of accesses to a weight slot, a gradient staging buffer, a layer's pinned bf16
//     weights or its pinned gradients, one of them a write, is ordered by events / syncs / stream order;
//   - the data: the weights a layer's kernels read are that layer's, of the latest optimizer step, and the
//     gradients the optimizer reads are that layer's, of the latest backward pass (the fake copies really
//     copy; weights and gradients carry a (layer, version) stamp);
//   - the bookkeeping: each pass copies or reuses each of its layers exactly once and leaves no slot pinned.
// The same with a HostReader (-sw 1): the streamed layers' weights are on a stand-in disk and the stream
// reads them into its pinned read buffers; a read writes its buffer when it starts (for the race check) and
// delivers the data the disk held then, at completion, which comes at random for a poll.
// Not checked here: the kernels and what they compute (test_kernels.cu, test_gpu.cu), timing, and the
// optimizer thread's own locking (train_gpt.cu): the optimizer is modelled as running in program order.
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <vector>
#include "stream.cu"

namespace {

const int64_t kStride = 96;  // elements of one layer block
const int64_t kEmbed = 40;   // elements of the embedding block (in front of layer 0 in the host array)

uint16_t stamp(int layer, int version) { return (uint16_t)(layer * 1000 + version + 1); }

struct Driver {
    WeightStream ws;
    int L, S, R;
    std::mt19937 rng;
    std::vector<int> version;  // the optimizer step whose weights each layer's host bf16 copy holds
    bool round_active = false;
    int rounds = 0;           // optimizer rounds submitted: a pass after round r must read version r
    int backward_passes = 0;  // gradients are stamped with the backward pass that made them
    int round_grads = 0;      // ... and the round in progress must read those of this backward pass
    int done_upto = 0;        // layers R..done_upto-1 are updated in the current round
    std::vector<std::string> errors;
    bool on_disk;  // a HostReader: the streamed layers' weights are read from the stand-in disk
    struct Read {
        uint16_t* dst;
        uint16_t value;
        bool done;
    };
    std::vector<Read> reads;  // by id - 1
    // HostReader.lend (ssd_tier.h's handoff): the optimizer also writes a layer's new weights into a free
    // handoff buffer (or one whose copy has run), and the pass takes the layer from there, once.
    enum { H_FREE, H_FILLED, H_LENT, H_COPYING };
    std::vector<std::vector<uint16_t>> handoff;
    std::vector<int> handoff_layer, handoff_state;
    std::vector<cudaEvent_t> handoff_copied;
    int64_t handed = 0;  // layers the optimizer handed over

    Driver(int L_, int S_, int R_, uint32_t seed, int read_buffers = 0, int handoffs = 0)
        : L(L_), S(S_), R(R_), rng(seed), version(L_, 0), on_disk(read_buffers > 0) {
        HostReader reader = {
            &Driver::read_start, &Driver::read_done, this, read_buffers, kStride * 2, R, NULL, NULL};
        if (handoffs > 0) {
            reader.lend = &Driver::lend;
            reader.lent_copied = &Driver::lent_copied;
        }
        for (int b = 0; b < handoffs; b++) {
            handoff.emplace_back(kStride);
            handoff_layer.push_back(-1);
            handoff_state.push_back(H_FREE);
            handoff_copied.push_back(NULL);
            cudaCheck(cudaEventCreate(&handoff_copied.back()));
            fake_cuda_track(handoff.back().data(), kStride * 2, "handoff buffer " + std::to_string(b));
        }
        stream_init(&ws, L, kStride, kEmbed, S, &Driver::ready, this, true, on_disk ? &reader : NULL);
        for (int l = 0; l < L; l++) write_stamp(l);
        for (int s = 0; s < S; s++)
            fake_cuda_track(ws.slots + s * kStride, kStride * 2, "weight slot " + std::to_string(s));
        for (int k = 0; k < 2; k++)
            fake_cuda_track(ws.grad_staging[k], kStride * 2, "gradient staging " + std::to_string(k));
        for (int b = 0; b < read_buffers; b++)
            fake_cuda_track(ws.reads.buf[b], kStride * 2, "read buffer " + std::to_string(b));
        for (int l = 0; l < L; l++) {
            if (!on_disk || l < R)
                fake_cuda_track(host_weights(l), kStride * 2,
                                "pinned bf16 weights of layer " + std::to_string(l));
            fake_cuda_track(ws.grads_host_bf16 + l * kStride, kStride * 2,
                            "pinned grads of layer " + std::to_string(l));
        }
    }
    ~Driver() {
        stream_free(&ws);
        for (cudaEvent_t e : handoff_copied) cudaCheck(cudaEventDestroy(e));
        for (const Read& r : reads)
            if (!r.done) errors.push_back("a read was never completed");
    }

    uint16_t* host_weights(int l) { return ws.weights_host_bf16 + kEmbed + l * kStride; }
    void write_stamp(int l) {  // on disk: version[l] is what the disk holds
        if (on_disk && l >= R) return;
        for (int64_t i = 0; i < kStride; i++) host_weights(l)[i] = stamp(l, version[l]);
    }
    // HostReader: the read writes dst now (what the race check sees) and gets the disk's data of now.
    static int64_t read_start(void* ctx, int l, uint16_t* dst) {
        Driver* d = (Driver*)ctx;
        if (l < d->R) d->errors.push_back("a read of GPU-resident layer " + std::to_string(l));
        fake_cuda_host_access(dst, kStride * 2, true, "a disk read of layer " + std::to_string(l));
        d->reads.push_back({dst, stamp(l, d->version[l]), false});
        return (int64_t)d->reads.size();
    }
    static int read_done(void* ctx, int64_t req, int wait) {
        Driver* d = (Driver*)ctx;
        Read& r = d->reads[(size_t)(req - 1)];
        if (r.done) d->errors.push_back("a read completed twice");
        if (!wait && d->rng() % 2 == 0) return 0;
        for (int64_t i = 0; i < kStride; i++) r.dst[i] = r.value;
        r.done = true;
        return 1;
    }

    // The CPU optimizer's work on layer l: wait for its gradients, read them, write the new bf16 weights.
    void optimizer_layer(int l) {
        stream_wait_grads_on_host(&ws, l);
        const uint16_t* grads = ws.grads_host_bf16 + l * kStride;
        fake_cuda_host_access(grads, kStride * 2, false,
                              "the optimizer (grads of layer " + std::to_string(l) + ")");
        if (grads[0] != stamp(l, round_grads) || grads[kStride - 1] != stamp(l, round_grads))
            errors.push_back("the optimizer read stale or foreign gradients of layer " + std::to_string(l));
        version[l]++;
        if (!on_disk)
            fake_cuda_host_access(host_weights(l), kStride * 2, true,
                                  "the optimizer (weights of layer " + std::to_string(l) + ")");
        write_stamp(l);
        for (size_t b = 0; b < handoff.size(); b++) {  // ssd_tier.h handoff_claim: never waits
            if (handoff_state[b] == H_COPYING) {
                const cudaError_t e = cudaEventQuery(handoff_copied[b]);
                if (e == cudaErrorNotReady) continue;
                cudaCheck(e);
            } else if (handoff_state[b] != H_FREE) continue;
            fake_cuda_host_access(handoff[b].data(), kStride * 2, true,
                                  "the optimizer (handing layer " + std::to_string(l) + " over)");
            for (int64_t i = 0; i < kStride; i++) handoff[b][(size_t)i] = stamp(l, version[l]);
            handoff_state[b] = H_FILLED;
            handoff_layer[b] = l;
            handed++;
            break;
        }
        done_upto = l + 1;
    }
    // HostReader.lend: the optimizer moves on as in ready(); then the layer is in a handoff buffer or not.
    static int lend(void* ctx, int l, int wait, const uint16_t** buf) {
        Driver* d = (Driver*)ctx;
        if (d->round_active && l >= d->done_upto) {
            if (!wait && d->rng() % 3 == 0 && d->done_upto < d->L) d->optimizer_layer(d->done_upto);
            if (!wait && l >= d->done_upto) return 0;
            while (d->done_upto <= l) d->optimizer_layer(d->done_upto);
        }
        for (size_t b = 0; b < d->handoff.size(); b++)
            if (d->handoff_layer[b] == l && d->handoff_state[b] == H_FILLED) {
                if (!buf) return 1;
                d->handoff_state[b] = H_LENT;
                *buf = d->handoff[b].data();
                return 1;
            }
        return -1;
    }
    static void lent_copied(void* ctx, int l, cudaStream_t stream) {
        Driver* d = (Driver*)ctx;
        for (size_t b = 0; b < d->handoff.size(); b++)
            if (d->handoff_layer[b] == l && d->handoff_state[b] == H_LENT) {
                cudaCheck(cudaEventRecord(d->handoff_copied[b], stream));
                d->handoff_state[b] = H_COPYING;
                d->handoff_layer[b] = -1;
                return;
            }
        d->errors.push_back("lent_copied for layer " + std::to_string(l) + ", which was not lent");
    }
    // HostReadyFn: the optimizer moves on by itself now and then (wait = 0), or until layer l (wait = 1).
    static int ready(void* ctx, int l, int wait) {
        Driver* d = (Driver*)ctx;
        if (l < d->R) d->errors.push_back("host_ready asked for GPU-resident layer " + std::to_string(l));
        if (!d->round_active || l < d->done_upto) return 1;
        if (!wait) {
            if (d->rng() % 3 == 0 && d->done_upto < d->L) d->optimizer_layer(d->done_upto);
            return l < d->done_upto;
        }
        while (d->done_upto <= l) d->optimizer_layer(d->done_upto);
        return 1;
    }
    void finish_round() {
        if (round_active)
            while (done_upto < L) optimizer_layer(done_upto);
        round_active = false;
    }

    // A layer's kernels: they read its weights, which must be that layer's, of the latest version.
    void use_layer(int l, const char* pass) {
        const bf16* w = stream_wait_layer(&ws, l);
        const uint16_t* raw = (const uint16_t*)w;
        const int want =
            rounds;  // not version[l]: a copy taken before the optimizer got to l would match that
        if (raw[0] != stamp(l, want) || raw[kStride - 1] != stamp(l, want))
            errors.push_back(std::string(pass) + ": layer " + std::to_string(l) +
                             " read stale or foreign weights");
        fake_cuda_kernel(ws.compute, w, kStride * 2, NULL, 0,
                         std::string(pass) + " kernels of layer " + std::to_string(l));
    }
    void check_pass(int64_t copies0, int64_t reuses0, int n, const char* pass) {
        if (ws.layer_copies - copies0 + ws.layer_reuses - reuses0 != n)
            errors.push_back(std::string(pass) + ": copies + reuses != layers of the pass");
        for (int s = 0; s < S; s++)
            if (ws.slot_in_use[s]) errors.push_back(std::string(pass) + ": a slot stays in use");
    }
    std::vector<int> order(bool backward) {
        std::vector<int> o;
        for (int i = R; i < L; i++) o.push_back(backward ? L - 1 - (i - R) : i);
        return o;
    }
    void forward(const char* pass) {
        const std::vector<int> o = order(false);
        const int64_t c0 = ws.layer_copies, r0 = ws.layer_reuses;
        stream_begin_pass(&ws, o.data(), (int)o.size());
        for (int l = R; l < L; l++) {
            use_layer(l, pass);
            stream_release_layer(&ws, l);
        }
        check_pass(c0, r0, (int)o.size(), pass);
    }
    void step(bool skip_update) {
        forward("forward");
        const std::vector<int> o = order(true);
        const int64_t c0 = ws.layer_copies, r0 = ws.layer_reuses;
        stream_begin_pass(&ws, o.data(), (int)o.size());
        for (int l = L - 1; l >= R; l--) {
            use_layer(l, "backward");
            stream_release_layer(&ws, l);
            bf16* staging = stream_grad_staging(&ws);
            fake_cuda_kernel(ws.compute, NULL, 0, staging, kStride * 2,
                             "the gradient kernel of layer " + std::to_string(l));
            for (int64_t i = 0; i < kStride; i++) ((uint16_t*)staging)[i] = stamp(l, backward_passes + 1);
            stream_send_layer_grads(&ws, l);
        }
        check_pass(c0, r0, (int)o.size(), "backward");
        backward_passes++;
        cudaCheck(cudaStreamSynchronize(ws.compute));  // gpt_step's one sync: loss and norm
        if (skip_update) return;  // -sl / -sg outlier (or non-finite): no update, slots stay valid
        finish_round();           // optimizer_submit waits for the last round first
        stream_invalidate(&ws);
        for (size_t b = 0; b < handoff.size(); b++)  // ssd_tier_submit: what no pass took is stale
            if (handoff_state[b] == H_FILLED) {
                handoff_state[b] = H_FREE;
                handoff_layer[b] = -1;
            }
        round_active = true;
        rounds++;
        round_grads = backward_passes;
        done_upto = R;
    }
};

// Returns the layers copied from handoff buffers (handoffs > 0).
int64_t run_case(int L, int S, int R, uint32_t seed, int read_buffers = 0, int handoffs = 0) {
    fake_cuda_reset();
    std::vector<std::string> errors;
    int64_t lent = 0;
    {
        Driver d(L, S, R, seed, read_buffers, handoffs);
        for (int s = 0; s < 5; s++) {
            if (d.rng() % 3 == 0)
                d.forward("validation");  // a forward-only pass, as validation and sampling do
            d.step(d.rng() % 6 == 0);
        }
        lent = d.ws.reads.lent;
        if (lent > d.handed) d.errors.push_back("more layers lent than handed over");
        errors = d.errors;
    }
    const std::string where = "L=" + std::to_string(L) + " slots=" + std::to_string(S) +
                              " resident=" + std::to_string(R) + " seed=" + std::to_string(seed) +
                              " read buffers=" + std::to_string(read_buffers) +
                              " handoff buffers=" + std::to_string(handoffs);
    EXPECT_TRUE(errors.empty()) << where << ": " << errors[0];
    EXPECT_TRUE(fake_cuda_races().empty())
        << where << ": " << fake_cuda_races()[0] << " (" << fake_cuda_races().size() << " races)";
    return lent;
}

TEST(StreamProtocol, NoRacesAndFreshWeightsOverEverySmallShape) {
    int cases = 0;
    for (int L = 1; L <= 6; L++)
        for (int S = 2; S <= MAX_SLOTS; S++)
            for (int R = 0; R <= L; R++)
                for (uint32_t seed = 1; seed <= 4; seed++) {
                    run_case(L, S, R, seed);
                    if (HasFailure()) return;
                    cases++;
                }
    printf(
        "%d cases, 5 steps each, no race, every layer read its latest weights, the optimizer its latest "
        "gradients\n",
        cases);
}

// -sw 1: the same protocol with the streamed layers' weights read from disk into 1..4 pinned read buffers.
TEST(StreamProtocol, ReadBuffersNoRacesAndFreshWeights) {
    int cases = 0;
    for (int B = 1; B <= 4; B++)
        for (int L = 1; L <= 6; L++)
            for (int S = 2; S <= 5; S++)
                for (int R = 0; R <= L; R++)
                    for (uint32_t seed = 1; seed <= 3; seed++) {
                        run_case(L, S, R, seed, B);
                        if (HasFailure()) return;
                        cases++;
                    }
    printf("%d cases with read buffers: no race, every layer read its latest weights from disk\n", cases);
}

// -sw 1 with the round's handoff buffers (ssd_tier.h sw_lend): passes take layers from 1..2 buffers the
// optimizer fills as it goes, the rest from disk; no race between the optimizer refilling a buffer and the
// copy from it, every layer its latest weights, and the handoff is taken.
TEST(StreamProtocol, HandoffBuffersNoRacesAndFreshWeights) {
    int cases = 0;
    int64_t lent = 0;
    for (int H = 1; H <= 2; H++)
        for (int B = 1; B <= 3; B++)
            for (int L = 1; L <= 6; L++)
                for (int S = 2; S <= 4; S++)
                    for (int R = 0; R <= L; R++)
                        for (uint32_t seed = 1; seed <= 3; seed++) {
                            lent += run_case(L, S, R, seed, B, H);
                            if (HasFailure()) return;
                            cases++;
                        }
    EXPECT_GT(lent, cases);  // most cases take several layers from a handoff buffer
    printf("%d cases with handoff buffers: no race, fresh weights, %lld layers taken from a handoff buffer\n",
           cases, (long long)lent);
}

// The checker itself: a protocol with one ordering removed must be caught. Here the host rewrites a layer's
// pinned weights while the copy that reads them may still be in flight (no sync before the update).
TEST(StreamProtocol, TheCheckerCatchesAMissingOrdering) {
    fake_cuda_reset();
    Driver d(3, 2, 0, 7);
    d.forward("forward");
    // the optimizer updates layer 2 without the end-of-step sync that orders it after the copies
    d.round_active = true;
    d.done_upto = 2;
    fake_cuda_host_access(d.host_weights(2), kStride * 2, true, "an unsynchronized optimizer");
    EXPECT_FALSE(fake_cuda_races().empty());
    if (!fake_cuda_races().empty()) printf("caught: %s\n", fake_cuda_races()[0].c_str());
}

}  // namespace
