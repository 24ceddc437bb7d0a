// test/fake_cuda/fake_device.h — runs CUDA kernels on the CPU, for test/test_kernels.cpp's emulated build
// (make test): the device-side names kernels.cuh uses (__global__, threadIdx, __shared__, __syncthreads,
// __shfl_xor_sync, atomicAdd, the _rn intrinsics; mma.sync m16n8k16 and ldmatrix for flash_attention.cuh) and
// a launcher. A block's threads are fibers on the thread that runs the launch, so __syncthreads, warp
// shuffles and mma.sync have their CUDA meaning (kernels.cuh's warp_sum / warp_max take one exchange of the
// lanes, warp_reduce: the five shuffles' bits); a kernel whose first thread finishes without any of them
// runs its other threads as plain calls (fast). A launch is checked when it is made (a bad grid or block, too
// much dynamic shared memory: cudaGetLastError's error, and the kernel does not run), then queued on its
// stream and run when the host synchronizes with it (cuda_runtime.h). A fault while it runs (a device memory
// fault, a misaligned vector access, __trap) ends it and makes the error sticky. Kernels run with subnormals
// flushed to zero (FTZ and DAZ set while they run), as nvcc -ftz=true builds them. Fibers switch stacks with
// __builtin_setjmp/longjmp (_setjmp/_longjmp under ASan), so this is built with _FORTIFY_SOURCE off
// (Makefile). Math is the host's IEEE math (no --use_fast_math approximations): results can differ from a
// GPU's in the last bits, never in meaning. Not emulated: timing, concurrency between streams (their ORDER is
// modelled: cuda_runtime.h), memory spaces, 3D grids and blocks (refused). Dynamic shared memory: a kernel
// takes it through fake_device::dynamic_shared() (flash_attention.cuh's FA_DYNAMIC_SHARED), the launch's
// bytes, fresh (0xFF) for each block as __shared__ arrays are.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <setjmp.h>
#include <string.h>
#include <ucontext.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif
#include <map>
#include <memory>
#include <tuple>
#include <type_traits>
#include <vector>

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct int2 {
    int x, y;
};
inline int2 make_int2(int x, int y) { return int2{x, y}; }

namespace fake_device {
// A switch saves where this context is in `from` and jumps to `to`. __builtin_setjmp saves the frame, the
// stack pointer and the resume address (the compiler spills the rest): cheaper than _longjmp, which also
// unwinds cleanup handlers. Under ASan, _setjmp/_longjmp, which ASan intercepts to track the stacks.
#if defined(__SANITIZE_ADDRESS__)
typedef jmp_buf fiber_buf;
#define FIBER_SAVE(buf) _setjmp(buf)
#define FIBER_JUMP(buf) _longjmp(buf, 1)
#else
typedef void* fiber_buf[5];
[[gnu::noinline]] inline void jump_to(void** to) { __builtin_longjmp(to, 1); }
#define FIBER_SAVE(buf) __builtin_setjmp(buf)
#define FIBER_JUMP(buf) fake_device::jump_to(buf)
#endif
#define FIBER_SWITCH(from, to) \
    if (!FIBER_SAVE(from)) FIBER_JUMP(to)
typedef std::decay_t<fiber_buf> fiber_ptr;  // where a switch jumps to
// A pool of fibers (one per thread of a block, created once, reused by every block of every launch). The
// first entry into a fiber goes through ucontext; every later switch is FIBER_SWITCH (no signal mask, no
// unwinding), so a barrier costs one cheap switch per thread in the round-robin schedule (each thread hands
// over to the next, next_after) and two in the warp-at-a-time ones (through the scheduler).
struct alignas(64) Fiber {  // what every switch touches first, in two cache lines
    dim3 tid;
    int warp, lane;
    bool done;
    bool at_syncthreads;  // parked at __syncthreads of generation wait_gen
    uint64_t wait_gen;
    fiber_buf jb;
    ucontext_t ctx;  // the first entry only
};
struct Warp {
    int live = 0, arrived = 0;
    uint64_t gen = 0;
    double xchg[2][32];  // shuffles: the slots of barrier generation gen % 2 (see warp_exchange)
    uint32_t mma_a[32][4], mma_b[32][2];
    const uint16_t* ldm_row[32];
    bool ldm_trans[32];
};
struct State {
    dim3 grid, block, block_idx;
    void (*body)(void*) = nullptr;  // runs one thread of the current kernel
    void* args = nullptr;
    std::vector<Fiber*> pool;
    std::vector<Fiber*> live;  // round-robin order: the block's threads not done yet
    std::vector<Warp> warps;
    int block_live = 0, block_arrived = 0;
    uint64_t block_gen = 0;
    uint64_t progress = 0;  // barrier arrivals and thread exits: a pass without any is a deadlock
    Fiber* cur = nullptr;
    // A round-robin pass (FAKE_SCHED 0) in progress: a fiber that stops hands over to the next thread of the
    // pass itself (live[pass_i]), keeping itself in live[0, pass_k) unless done; the last returns to sched.
    bool chain = false;
    size_t pass_i = 0, pass_k = 0;
    bool used_barrier = false;  // the current launch's threads met __syncthreads or a shuffle
    bool direct = false;        // threads run as plain calls: a barrier is then a fatal error
    fiber_buf sched;
    dim3 direct_tid;
    uint64_t block_serial = 0;  // one per block run: shared_fresh's "new block"
    std::map<const void*, uint64_t>
        shared_block_serial;  // per __shared__ array: the block that last cleared it
    struct alignas(16) Bytes16 {
        unsigned char b[16];
    };
    std::vector<Bytes16> dynamic;  // the launch's dynamic shared memory
    size_t dynamic_bytes = 0;
    struct CpAsync {  // a cp.async copy in flight: 16 bytes, in the thread's commit group `group`
        void* dst;
        const void* src;
        uint64_t group;
    };
    std::vector<std::vector<CpAsync>> cp_async;  // per thread of the block (linear index)
    std::vector<uint64_t> cp_committed;          // per thread: its commit groups so far
    bool cp_async_any = false;                   // a copy was queued in this block
};
[[gnu::always_inline]] inline State& st() {
    static State s;
    return s;
}
const size_t kStack = 128 * 1024;

inline dim3 thread_idx() {
    State& s = st();
    return s.direct ? s.direct_tid : s.cur->tid;
}
// Where the current fiber f goes when it stops (at a barrier, or idle after its thread): within a round-robin
// pass, straight to the pass's next thread (one switch, not two through the scheduler); else, and after the
// pass's last thread, back to the scheduler.
inline fiber_ptr next_after(Fiber* f) {
    State& s = st();
    if (!s.chain) return s.sched;
    if (!f->done) s.live[s.pass_k++] = f;
    if (++s.pass_i == s.live.size()) return s.sched;
    s.cur = s.live[s.pass_i];
    return s.cur->jb;
}
inline void yield() {
    State& s = st();
    Fiber* f = s.cur;
    FIBER_SWITCH(f->jb, next_after(f));
}
inline void no_barrier_in_direct_mode(const char* what) {
    if (st().direct) {
        fprintf(stderr, "fake_device: %s in a kernel whose first thread used none: not emulated\n", what);
        abort();
    }
}
// A vector access (4, 8 or 16 bytes in one instruction) at an address that is not a multiple of its size
// faults on a GPU ("misaligned address"); on the CPU it would just work, so the emulated helpers that stand
// for such accesses call this first.
inline void require_aligned(const void* p, size_t bytes, const char* what) {
    if (((uintptr_t)p % bytes) != 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s of %zu bytes at %p, not %zu-byte aligned", what, bytes, p, bytes);
        fake_cuda::kernel_fault(cudaErrorMisalignedAddress, msg);
    }
}
inline void syncthreads() {
    State& s = st();
    no_barrier_in_direct_mode("__syncthreads");
    s.used_barrier = true;
    s.progress++;
    const uint64_t gen = s.block_gen;
    if (++s.block_arrived == s.block_live) {
        s.block_arrived = 0;
        s.block_gen++;
        return;
    }
    s.cur->at_syncthreads = true;
    s.cur->wait_gen = gen;
    while (s.block_gen == gen) yield();
    s.cur->at_syncthreads = false;
}
inline void warp_barrier() {
    State& s = st();
    Warp& w = s.warps[(size_t)s.cur->warp];
    s.progress++;
    const uint64_t gen = w.gen;
    if (++w.arrived == w.live) {
        w.arrived = 0;
        w.gen++;
        return;
    }
    while (w.gen == gen) yield();
}
// The lanes' values, handed in at one warp barrier. The slots alternate with the barrier's generation: every
// lane writes at the same generation g (it has passed the g barriers before), reads after barrier g + 1, and
// the slots of g's parity are written again only at generation g + 2, after every lane has reached barrier
// g + 2 and so has read them. One barrier per exchange, not two.
template <typename T>
inline const double* warp_exchange(T x, const char* what) {
    State& s = st();
    no_barrier_in_direct_mode(what);
    s.used_barrier = true;
    Warp& w = s.warps[(size_t)s.cur->warp];
    if (w.live != 32) {  // a partial warp or an exited lane: the value read would be undefined on a GPU
        fprintf(stderr, "fake_device: %s in a warp of %d live lanes: not emulated\n", what, w.live);
        abort();
    }
    double* slots = w.xchg[w.gen & 1];
    slots[s.cur->lane] = (double)x;  // exact for float and double (DAZ aside)
    warp_barrier();
    return slots;
}
template <typename T>
inline T shfl_xor(T x, int o) {
    return (T)warp_exchange(x, "__shfl_xor_sync")[st().cur->lane ^ o];
}
// kernels.cuh's warp_sum / warp_max: x = op(x, __shfl_xor_sync(x, o)) for o = 16, 8, 4, 2, 1, in one
// exchange: each lane then computes its own result from the 32 values by the same tree of the same
// operations, the same bits as the five shuffles with one barrier instead of five. After the step of offset
// o, lane k holds op(k's value, (k ^ o)'s value) of the step before; a[m] is lane (lane ^ m)'s value: the
// steps need 16, 8, 4, 2, then 1 of them.
template <typename T, typename Op>
inline T warp_reduce(T x, Op op) {
    const double* v = warp_exchange(x, "__shfl_xor_sync");
    const int lane = st().cur->lane;
    T a[16];
    for (int m = 0; m < 16; m++) a[m] = op((T)v[lane ^ m], (T)v[lane ^ m ^ 16]);
    for (int half = 8; half > 0; half >>= 1)
        for (int m = 0; m < half; m++) a[m] = op(a[m], a[m ^ half]);
    return a[0];
}
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, warp-collective: every lane hands in its A and B
// registers, then computes its own C elements from all of them, by the fragment table of the PTX ISA that
// flash_attention.cuh restates (g = lane / 4, t = lane % 4; pairs packed low element first):
//   A[r][k] is in lane (r % 8) * 4 + (k % 8) / 2, register (r >= 8) + 2 * (k >= 8), half k % 2
//   B[k][n] is in lane n * 4 + (k % 8) / 2, register (k >= 8), half k % 2
//   C[g][2t + j] is c[j], C[g + 8][2t + j] is c[2 + j]
// Products of bf16 values are exact in fp32; the sum over k is in k order (the GPU's order is unspecified).
inline float bf16_half(uint32_t reg, int half) {
    const uint32_t u = half ? (reg & 0xffff0000u) : (reg << 16);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline void mma_bf16_16816(float c[4], const uint32_t a[4], const uint32_t b[2]) {
    State& s = st();
    no_barrier_in_direct_mode("mma.sync");
    s.used_barrier = true;
    Warp& w = s.warps[(size_t)s.cur->warp];
    if (w.live != 32) {  // mma.sync needs the whole warp
        fprintf(stderr, "fake_device: mma.sync in a warp of %d live lanes: not emulated\n", w.live);
        abort();
    }
    const int lane = s.cur->lane, g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; i++) w.mma_a[lane][i] = a[i];
    for (int i = 0; i < 2; i++) w.mma_b[lane][i] = b[i];
    warp_barrier();
    float out[4];
    for (int j = 0; j < 4; j++) {
        const int r = g + (j >= 2 ? 8 : 0), n = 2 * t + (j % 2);
        float sum = 0.0f;
        for (int k = 0; k < 16; k++) {
            const float x = bf16_half(w.mma_a[(r % 8) * 4 + (k % 8) / 2][(r >= 8) + 2 * (k >= 8)], k % 2);
            const float y = bf16_half(w.mma_b[n * 4 + (k % 8) / 2][k >= 8], k % 2);
            sum += x * y;
        }
        out[j] = c[j] + sum;
    }
    warp_barrier();  // everyone has read before the registers are handed in again
    for (int j = 0; j < 4; j++) c[j] = out[j];
}
// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16, warp-collective: lanes 8i .. 8i+7 hand in the addresses
// of matrix i's rows (16-byte aligned, 8 bf16 each); lane l (g = l / 4, t = l % 4) gets in r[i] matrix i's
// [g][2t], [g][2t+1] (plain) or [2t][g], [2t+1][g] (.trans), low element first: the PTX ISA's table,
// which flash_attention.cuh restates.
inline void ldmatrix_x4(uint32_t r[4], const void* row, bool transpose) {
    State& s = st();
    no_barrier_in_direct_mode("ldmatrix");
    s.used_barrier = true;
    Warp& w = s.warps[(size_t)s.cur->warp];
    if (w.live != 32 || ((uintptr_t)row & 15) != 0) {
        fprintf(stderr,
                "fake_device: ldmatrix in a warp of %d live lanes or from a row not 16-byte aligned\n",
                w.live);
        abort();
    }
    const int lane = s.cur->lane, g = lane / 4, t = lane % 4;
    w.ldm_row[lane] = (const uint16_t*)row;
    w.ldm_trans[lane] = transpose;
    warp_barrier();
    for (int l = 0; l < 32; l++)
        if (w.ldm_trans[l] != transpose) {
            fprintf(stderr, "fake_device: ldmatrix with and without .trans in one warp\n");
            abort();
        }
    for (int i = 0; i < 4; i++) {
        const uint16_t* const* m = &w.ldm_row[8 * i];  // matrix i's 8 rows
        const uint16_t lo = transpose ? m[2 * t][g] : m[g][2 * t];
        const uint16_t hi = transpose ? m[2 * t + 1][g] : m[g][2 * t + 1];
        r[i] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
    warp_barrier();  // everyone has read before the addresses are handed in again
}
// A fiber's whole life: wait for a thread to run, run it, leave the barriers, repeat.
inline void fiber_main(unsigned lo, unsigned hi) {
    Fiber* f = (Fiber*)(((uintptr_t)hi << 32) | lo);
    State& s = st();
    for (;;) {
        // idle until the scheduler (or the pass's previous thread) hands it a thread
        FIBER_SWITCH(f->jb, next_after(f));
        s.body(s.args);
        f->done = true;
        s.progress++;
        // an exited thread no longer counts at the barriers: release them if it was the last one missing
        s.block_live--;
        if (s.block_live > 0 && s.block_arrived == s.block_live) {
            s.block_arrived = 0;
            s.block_gen++;
        }
        Warp& w = s.warps[(size_t)f->warp];
        w.live--;
        if (w.live > 0 && w.arrived == w.live) {
            w.arrived = 0;
            w.gen++;
        }
    }
}
inline void grow_pool(size_t n) {
    State& s = st();
    while (s.pool.size() < n) {
        Fiber* f = new Fiber();
        getcontext(&f->ctx);
        // Stacks 128 KiB apart would map their hot tops onto the same cache sets: each starts at its own
        // offset within 8 KiB (a multiple of 64 bytes).
        const size_t color = (s.pool.size() * 9 % 128) * 64;
        f->ctx.uc_stack.ss_sp = (char*)malloc(kStack + 8192) + color;
        f->ctx.uc_stack.ss_size = kStack;
        f->ctx.uc_link = NULL;  // fiber_main never returns
        const uintptr_t p = (uintptr_t)f;
        makecontext(&f->ctx, (void (*)())fiber_main, 2, (unsigned)(p & 0xffffffffu), (unsigned)(p >> 32));
        ucontext_t here;
        if (!FIBER_SAVE(s.sched)) swapcontext(&here, &f->ctx);  // runs to its first idle point, jumps back
        s.pool.push_back(f);
    }
}
inline void resume(Fiber* f) {
    State& s = st();
    s.cur = f;
    FIBER_SWITCH(s.sched, f->jb);
}
// A block's shared memory starts as garbage on a GPU; here each __shared__ array of the trainer's kernels
// starts every block as 0xFF bytes (a NaN as float and as bf16), so a kernel that reads a shared element its
// block never wrote (a padding row of a tile, say) computes NaN instead of quietly reusing the previous
// block's values. The emulated sources call this right after each __shared__ declaration (FAKE_SHARED_FRESH,
// added by test/fake_cuda/emu_rewrite.sh); the first thread of a block to get there clears the array.
inline void shared_fresh(void* p, size_t bytes) {
    State& s = st();
    uint64_t& serial = s.shared_block_serial[p];
    if (serial == s.block_serial) return;
    serial = s.block_serial;
    memset(p, 0xFF, bytes);
}
// The launch's dynamic shared memory (extern __shared__ on a GPU), fresh for each block.
inline unsigned char* dynamic_shared() {
    State& s = st();
    unsigned char* p = s.dynamic_bytes ? s.dynamic[0].b : nullptr;
    if (p) shared_fresh(p, s.dynamic_bytes);
    return p;
}
// cp.async (flash_attention.cuh): a copy lands at any time between its issue and the thread's wait. Here its
// destination turns to 0xFF bytes at the issue (as if it had landed with other data: a warp still reading
// that buffer sees NaN) and takes the real bytes at the wait (a read before the wait and its barrier sees
// NaN): a missing barrier or wait fails the kernel tests. A block that ends with copies in flight is a fault,
// stricter than a GPU.
inline size_t linear_tid() {
    State& s = st();
    const dim3 t = thread_idx();
    const size_t i = (size_t)t.y * s.block.x + t.x;
    if (s.cp_async.size() <= i) s.cp_async.resize(i + 1), s.cp_committed.resize(i + 1, 0);
    return i;
}
inline void cp_async16(void* dst, const void* src) {
    require_aligned(dst, 16, "cp.async store");
    require_aligned(src, 16, "cp.async load");
    State& s = st();
    const size_t i = linear_tid();
    memset(dst, 0xFF, 16);
    s.cp_async[i].push_back({dst, src, s.cp_committed[i]});
    s.cp_async_any = true;
}
inline void cp_async_commit() { st().cp_committed[linear_tid()]++; }
inline void cp_async_wait(int n) {  // the groups but the newest n land (an uncommitted copy does not)
    State& s = st();
    const size_t i = linear_tid();
    std::vector<State::CpAsync>& q = s.cp_async[i];
    size_t k = 0;
    for (const State::CpAsync& c : q)
        if (c.group + (uint64_t)n < s.cp_committed[i]) memcpy(c.dst, c.src, 16);
        else q[k++] = c;
    q.resize(k);
}
inline void cp_async_block_end() {  // before the next block, and at the launch's end
    State& s = st();
    if (!s.cp_async_any) return;
    for (const std::vector<State::CpAsync>& q : s.cp_async)
        if (!q.empty())
            fake_cuda::kernel_fault(cudaErrorLaunchFailure, "cp.async copies in flight at a block's end");
    for (uint64_t& c : s.cp_committed) c = 0;
    s.cp_async_any = false;
}
// Runs one block on the fibers. probe: fiber 0 alone first; if it finishes without a barrier, returns false
// (the caller runs the other threads as plain calls). Else runs the whole block and returns true.
inline bool run_block(bool probe) {
    State& s = st();
    cp_async_block_end();
    s.block_serial++;
    const int n = (int)(s.block.x * s.block.y);
    grow_pool((size_t)n);
    s.warps.assign((size_t)((n + 31) / 32), Warp());
    s.block_live = n;
    s.block_arrived = 0;
    for (int i = 0; i < n; i++) {
        Fiber* f = s.pool[(size_t)i];
        f->tid = dim3((unsigned)i % s.block.x, (unsigned)i / s.block.x, 0);
        f->warp = i / 32;
        f->lane = i % 32;
        f->done = false;
        f->at_syncthreads = false;
        s.warps[(size_t)f->warp].live++;
    }
    resume(s.pool[0]);
    if (probe && s.pool[0]->done && !s.used_barrier) return false;
    // The order threads advance in. 0: round robin, every thread one barrier step at a time. 1 and 2: one
    // warp runs as far as it can (until done or parked at __syncthreads) before the next, in warp order or in
    // reverse: a missing __syncthreads between shared-memory writes and reads of different warps shows there
    // (a fast warp overwrites what a slow one has not read yet), as it can on a GPU. FAKE_SCHED picks it.
    static const int mode = getenv("FAKE_SCHED") ? atoi(getenv("FAKE_SCHED")) : 0;
    const int nw = (n + 31) / 32;
    if (mode == 0) s.live.assign(s.pool.begin(), s.pool.begin() + n);
    for (bool pending = true; pending;) {
        pending = false;
        const uint64_t before = s.progress;
        if (mode == 0) {  // the threads not done, in index order; done ones leave the list
            size_t k = 0;
            for (Fiber* f : s.live)
                if (!f->done) s.live[k++] = f;
            s.live.resize(k);
            if (k == 0) break;
            pending = true;
            s.chain = true;  // each thread hands over to the next (next_after); the last one comes back here
            s.pass_i = s.pass_k = 0;
            resume(s.live[0]);
            s.chain = false;
            s.live.resize(s.pass_k);
        } else {
            for (int wi = 0; wi < nw; wi++) {
                const int w = mode == 1 ? wi : nw - 1 - wi;
                for (bool moved = true; moved;) {
                    moved = false;
                    for (int l = 0; l < 32 && w * 32 + l < n; l++) {
                        Fiber* f = s.pool[(size_t)(w * 32 + l)];
                        if (f->done) continue;
                        pending = true;
                        if (f->at_syncthreads && s.block_gen == f->wait_gen)
                            continue;  // parked: other warps first
                        const uint64_t p = s.progress;
                        resume(f);
                        moved = moved || s.progress != p;
                    }
                }
            }
        }
        if (pending && s.progress == before) {
            fprintf(stderr, "fake_device: deadlock: threads wait at barriers the others never reach\n");
            abort();
        }
    }
    return true;
}
// A launch's configuration, as CUDA checks it: cudaErrorInvalidConfiguration for a bad grid or block,
// cudaErrorInvalidValue for more dynamic shared memory than the kernel may have (cudaFuncSetAttribute).
inline cudaError_t check_launch(dim3 grid, dim3 block, size_t smem, int smem_limit) {
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0 ||
        (uint64_t)block.x * block.y * block.z > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
        grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
        return cudaErrorInvalidConfiguration;
    if (smem > (size_t)smem_limit) return cudaErrorInvalidValue;
    return cudaSuccess;
}
// Kernel code runs with FTZ (flush results) and DAZ (inputs as zero) set in MXCSR, as the GPU's -ftz=true.
struct FlushSubnormals {
#if defined(__x86_64__) || defined(__i386__)
    unsigned saved;
    FlushSubnormals() : saved(_mm_getcsr()) { _mm_setcsr(saved | 0x8040u); }
    ~FlushSubnormals() { _mm_setcsr(saved); }
#endif
};
// A launch: every block, one after the other. A fault (fake_cuda::kernel_fault, also from the SIGSEGV
// handler) jumps back here: the fibers are abandoned mid-kernel (a fresh pool serves any later launch) and
// the kernel ends.
inline void launch(dim3 grid, dim3 block, void (*body)(void*), void* args, size_t dynamic_bytes = 0) {
    State& s = st();
    s.dynamic_bytes = dynamic_bytes;  // its own allocation of that size: ASan builds catch a read past it
    s.dynamic = std::vector<State::Bytes16>((dynamic_bytes + 15) / 16);
    if (grid.z != 1 || block.z != 1) {
        fprintf(stderr, "fake_device: 3D grid or block: not emulated\n");
        abort();
    }
    FlushSubnormals ftz;
    sigjmp_buf fault;
    sigjmp_buf* outer = fake_cuda::kernel_fault_jump();
    if (sigsetjmp(fault, 1)) {
        fake_cuda::kernel_fault_jump() = outer;
        s.pool.clear();  // leaked: their stacks hold the faulted kernel's frames
        s.direct = false;
        s.chain = false;
        s.cur = nullptr;
        s.cp_async.clear();  // the faulted block's copies in flight
        s.cp_committed.clear();
        s.cp_async_any = false;
        return;
    }
    fake_cuda::kernel_fault_jump() = &fault;
    s.grid = grid;
    s.block = block;
    s.body = body;
    s.args = args;
    s.used_barrier = false;
    bool direct = false;
    const unsigned n = block.x * block.y;
    for (unsigned by = 0; by < grid.y; by++)
        for (unsigned bx = 0; bx < grid.x; bx++) {
            s.block_idx = dim3(bx, by, 0);
            if (!direct) {
                if (run_block(bx == 0 && by == 0)) continue;
                direct =
                    true;  // the first thread met no barrier: the others of this block run as plain calls
                s.direct = true;
                for (unsigned i = 1; i < n; i++) {
                    s.direct_tid = dim3(i % block.x, i / block.x, 0);
                    body(args);
                }
                continue;
            }
            cp_async_block_end();
            s.block_serial++;
            for (unsigned i = 0; i < n; i++) {
                s.direct_tid = dim3(i % block.x, i / block.x, 0);
                body(args);
            }
        }
    cp_async_block_end();
    s.direct = false;
    fake_cuda::kernel_fault_jump() = outer;
}
}  // namespace fake_device

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n)         __attribute__((aligned(n)))
#define __shared__           static
#define FAKE_SHARED_FRESH(a) fake_device::shared_fresh((void*)(a), sizeof(a))
#define threadIdx            (fake_device::thread_idx())
#define blockIdx             (fake_device::st().block_idx)
#define blockDim             (fake_device::st().block)
#define gridDim              (fake_device::st().grid)
inline void __syncthreads() { fake_device::syncthreads(); }
inline void __trap() { fake_cuda::kernel_fault(cudaErrorLaunchFailure, "__trap()"); }
inline float __shfl_xor_sync(unsigned, float x, int o) { return fake_device::shfl_xor(x, o); }
inline double __shfl_xor_sync(unsigned, double x, int o) { return fake_device::shfl_xor(x, o); }
// Atomic additions land here in program order, so every run adds the same sums the same way; on a GPU they
// land in whatever order the blocks reach them, and two runs of the same training differ in the last bits of
// those sums. FAKE_ATOMIC_JITTER=P stands in for that: P percent of the additions to a non-zero accumulator
// (a fixed pseudo-random choice, different for each addition of a process) land one ulp above or below their
// exact sum, so the tests that compare two runs can be checked against what they will meet on a GPU (make
// test runs them with P = 4).
namespace fake_device {
inline int atomic_jitter() {  // -1, 0 or +1 ulp
    static const int percent = getenv("FAKE_ATOMIC_JITTER") ? atoi(getenv("FAKE_ATOMIC_JITTER")) : 0;
    if (percent <= 0) return 0;
    static uint64_t s = 0x9E3779B97F4A7C15ull;
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    const uint64_t r = s * 0x2545F4914F6CDD1Dull;
    return (int)(r % 100) >= percent ? 0 : (r >> 63) ? 1 : -1;
}
}  // namespace fake_device
inline float atomicAdd(float* p, float v) {
    const float old = *p;
    const int j = old != 0.0f ? fake_device::atomic_jitter() : 0;
    *p = j ? nextafterf(old + v, j * INFINITY) : old + v;
    return old;
}
inline double atomicAdd(double* p, double v) {
    const double old = *p;
    const int j = old != 0.0 ? fake_device::atomic_jitter() : 0;
    *p = j ? nextafter(old + v, j * INFINITY) : old + v;
    return old;
}
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float rsqrtf(float a) { return 1.0f / sqrtf(a); }
template <typename A, typename B>
inline typename std::common_type<A, B>::type min(A a, B b) {
    return a < b ? a : b;
}
template <typename A, typename B>
inline typename std::common_type<A, B>::type max(A a, B b) {
    return a < b ? b : a;
}

// kernel<<<grid, block, smem, stream>>>(...) is rewritten (Makefile, sed) to
// FAKE_LAUNCH(kernel, grid, block, smem, stream)(args...). The launch is checked (a bad one sets the thread's
// last error and runs nothing), is an operation on its stream for cuda_runtime.h's ordering model (a kernel
// reads through its const pointer parameters and writes through the others, which is how every kernel of the
// trainer declares them), and is queued there with a copy of its arguments.
namespace fake_device {
template <typename T>
inline void note_access(std::vector<FakeDeviceAccess>&, const T&) {}
template <typename T>
inline void note_access(std::vector<FakeDeviceAccess>& v, T* p) {
    v.push_back({(const void*)p, !std::is_const<T>::value});
}
}  // namespace fake_device
template <typename... P>
struct FakeLaunch {
    void (*kernel)(P...);
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    const char* name;
    template <typename... A>
    void operator()(A&&... a) {
        FAKE_CUDA_LOCKED;
        const cudaError_t e =
            fake_device::check_launch(grid, block, smem, fake_cuda::dynamic_smem_limit((const void*)kernel));
        if (e != cudaSuccess) {
            fake_cuda::last_error() = e;
            return;
        }
        struct Args {
            void (*k)(P...);
            std::tuple<P...> t;
        };
        auto args = std::make_shared<Args>(Args{kernel, std::tuple<P...>((P)a...)});
        std::vector<FakeDeviceAccess> accesses;
        std::apply([&](const P&... x) { (fake_device::note_access(accesses, x), ...); }, args->t);
        fake_cuda_device_op(stream, name, accesses.data(), (int)accesses.size());
        const dim3 g = grid, b = block;
        const size_t dynamic_bytes = smem;
        fake_cuda::submit(stream, [g, b, args, dynamic_bytes] {
            fake_device::launch(
                g, b,
                [](void* p) {
                    Args* x = (Args*)p;
                    std::apply(x->k, x->t);
                },
                args.get(), dynamic_bytes);
        });
    }
};
template <typename... P>
FakeLaunch<P...> fake_launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                             const char* name) {
    return FakeLaunch<P...>{k, grid, block, smem, s, name};
}
#define FAKE_LAUNCH(kernel, grid, block, smem, stream) \
    fake_launch(kernel, dim3(grid), dim3(block), (size_t)(smem), (stream), #kernel)
