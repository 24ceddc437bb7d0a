// test/fake_cuda/cuda_runtime.h — a host-only stand-in for the CUDA runtime that stream.cu uses, for
// test/test_stream.cpp and (with fake_device.h) the emulated GPU suites: it MODELS the ordering CUDA
// guarantees. Every stream, and the host, carries a vector clock; an operation enqueued on a stream is
// ordered after the stream's previous operations and after everything the host did before enqueueing it;
// cudaEventRecord captures a stream's clock, cudaStreamWaitEvent joins it into another stream,
// cudaEventSynchronize / cudaStreamSynchronize / cudaDeviceSynchronize join it into the host's. Each host
// thread is an agent of its own; what orders them is declared where they hand over (FAKE_CUDA_HOST_RELEASE /
// _ACQUIRE around a mutex- protected hand-over, e.g. the trainer's CPU optimizer thread). Memory the test
// registers (fake_cuda_track) gets every access checked: two accesses of which one writes must be ordered by
// that model, or the pair is recorded as a race (fake_cuda_races). Kernels: test_stream.cpp declares what its
// stand-in kernels read and write (fake_cuda_kernel); in the emulated build, fake_device.h's launches and the
// cuBLAS emulation declare theirs (fake_cuda_device_op). Execution (emulated build, FAKE_CUDA_DEVICE): the
// work is also DEFERRED as on a GPU. A kernel, cuBLAS call, async copy or memset is queued on its stream and
// runs only when the host synchronizes with it (cudaStreamSynchronize, cudaEventSynchronize,
// cudaDeviceSynchronize, a query that reports completion, a cudaMemcpy that waits for the legacy stream),
// together with exactly what it depends on (its stream's earlier work, the events its stream waited for):
// host code that reads a result before synchronizing reads stale data here too. cudaMemcpy from pageable
// memory returns once the source is staged; the copy lands when the legacy stream runs, which the
// non-blocking streams do not wait for. FAKE_CUDA_DEFER=0 runs everything at once instead (the host-only
// tests always do). Errors: launch configuration errors (cudaGetLastError, not sticky), dynamic shared memory
// over the limit, and kernel faults (a device memory fault, __trap: sticky, every later call returns them),
// events that were never recorded or have not completed. Not modelled: timing (elapsed times are 0),
// concurrency between streams (the queued work runs on the synchronizing host thread).
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <array>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

typedef int cudaError_t;
#define cudaSuccess                    0
#define cudaErrorInvalidValue          1
#define cudaErrorMemoryAllocation      2
#define cudaErrorInvalidConfiguration  9
#define cudaErrorInvalidResourceHandle 400
#define cudaErrorNotReady              600
#define cudaErrorIllegalAddress        700
#define cudaErrorMisalignedAddress     716
#define cudaErrorLaunchFailure         719
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };
#define cudaHostAllocDefault           0u
#define cudaHostRegisterDefault        0u
#define cudaDeviceScheduleBlockingSync 4u
#define cudaStreamNonBlocking          1u
#define cudaEventDisableTiming         2u
#define cudaEventBlockingSync          1u

struct FakeStream;
namespace fake_cuda {
// agent 0: the first host thread (main); 1: the legacy stream; 2..7: streams; 8..11: other host threads
constexpr int kMaxAgents = 12, kFirstStream = 2, kEndStreams = 8, kFirstHostThread = 8;
typedef std::array<uint64_t, kMaxAgents> Clock;
inline void join(Clock& a, const Clock& b) {
    for (int i = 0; i < kMaxAgents; i++) a[i] = a[i] > b[i] ? a[i] : b[i];
}

struct Access {
    int agent = 0;
    uint64_t tick = 0;
    bool write = false;
    std::string what;
};
struct Region {
    const char* base;
    int64_t bytes;
    std::string name;
    std::vector<Access> since_write;
    bool has_write = false;
    Access last_write;
};

struct State {
    std::array<Clock, kMaxAgents> host{};  // each host thread's clock, by its agent
    Clock seen{};  // the highest tick of each agent anyone has seen (a reused agent starts above it)
    int next_agent = kFirstStream;
    int next_host_agent = kFirstHostThread;
    std::map<const void*, Clock> handovers;  // FAKE_CUDA_HOST_RELEASE's clocks, by the object handed over
    std::vector<Region> regions;
    std::vector<std::string> races;
    std::vector<::FakeStream*> streams;          // live streams, for cudaDeviceSynchronize
    std::map<void*, size_t> device_allocations;  // for cudaMemGetInfo
    size_t device_bytes = 0;
};
// One lock for all of the fake runtime: the trainer's optimizer thread calls it concurrently with
// the main one.
inline std::recursive_mutex& lock() {
    static std::recursive_mutex m;
    return m;
}
#define FAKE_CUDA_LOCKED std::lock_guard<std::recursive_mutex> fake_cuda_guard(fake_cuda::lock())
inline State& state() {
    static State s;
    return s;
}
}  // namespace fake_cuda

// A queued operation (emulated build): what it does, and the positions of other streams it waits for first.
struct FakeOp {
    std::function<void()> run;
    std::vector<std::pair<FakeStream*, uint64_t>> waits;
};
// enqueued / done: operations queued on the stream so far / run so far (a position counts them).
struct FakeStream {
    int agent;
    fake_cuda::Clock clock{};
    bool blocking = false;  // created without cudaStreamNonBlocking: ordered with the legacy stream
    std::deque<FakeOp> queue;
    uint64_t enqueued = 0, done = 0;
    bool queried_pending = false;  // cudaStreamQuery said "not ready" once
};
// An event is a position of the stream it was last recorded on.
struct FakeEvent {
    bool recorded = false;
    fake_cuda::Clock clock{};
    unsigned flags = 0;
    FakeStream* stream = nullptr;
    uint64_t pos = 0;
    bool queried_pending = false;  // cudaEventQuery said "not ready" once
};
typedef FakeStream* cudaStream_t;
typedef FakeEvent* cudaEvent_t;

namespace fake_cuda {
// The agent performing an access and the clock it sees then.
inline void access(int agent, const Clock& view, const void* p, int64_t bytes, bool write,
                   const std::string& what) {
    State& s = state();
    const char* a = (const char*)p;
    for (Region& r : s.regions) {
        if (a + bytes <= r.base || r.base + r.bytes <= a) continue;
        auto ordered = [&](const Access& prev) {
            return prev.agent == agent || prev.tick <= view[prev.agent];
        };
        auto report = [&](const Access& prev) {
            s.races.push_back(r.name + ": " + (write ? "write" : "read") + " by " + what +
                              " not ordered after " + (prev.write ? "write" : "read") + " by " + prev.what);
        };
        if (r.has_write && !ordered(r.last_write)) report(r.last_write);
        Access now{agent, view[agent], write, what};
        if (write) {
            for (const Access& prev : r.since_write)
                if (!ordered(prev)) report(prev);
            r.since_write.clear();
            r.last_write = now;
            r.has_write = true;
        } else {
            r.since_write.push_back(now);
        }
    }
}
// The calling host thread's agent: the first thread to ask is 0, every later one gets one of its own (reused
// round-robin, its ticks starting above the last user's).
inline int host_agent() {
    thread_local int agent = -1;
    State& s = state();
    if (agent < 0) {
        static bool main_taken = false;
        if (!main_taken) {
            main_taken = true;
            agent = 0;
        } else {
            agent = s.next_host_agent++;
            if (s.next_host_agent >= kMaxAgents) s.next_host_agent = kFirstHostThread;
            s.host[agent] = Clock{};
            s.host[agent][agent] = s.seen[agent];
        }
    }
    return agent;
}
inline Clock& host_clock() { return state().host[host_agent()]; }
inline cudaStream_t legacy_stream();
// A new operation on stream s: after the calling host thread's past and the stream's own.
inline const Clock& enqueue(cudaStream_t s) {
    if (!s) s = legacy_stream();
    join(s->clock, host_clock());
    s->clock[s->agent]++;
    if (state().seen[s->agent] < s->clock[s->agent]) state().seen[s->agent] = s->clock[s->agent];
    return s->clock;
}
inline cudaStream_t
legacy_stream() {  // stream 0 (cudaMemcpy, cudaMemset, a NULL stream): agent 1, never reused
    static FakeStream* s = nullptr;
    if (!s) {
        s = new FakeStream();
        s->agent = 1;
    }
    return s;
}
}  // namespace fake_cuda

// --- what the test uses ---
// Registers memory whose accesses are checked; `name` appears in race reports.
inline void fake_cuda_track(const void* p, int64_t bytes, const std::string& name) {
    fake_cuda::Region r;
    r.base = (const char*)p;
    r.bytes = bytes;
    r.name = name;
    fake_cuda::state().regions.push_back(r);
}
// An array of buffers is not a buffer: tracking its address would check whatever host memory follows it (a
// test once tracked `bf16* w_chunk[2]` so, and saw races that came and went with the heap's layout).
template <class T>
void fake_cuda_track(T* const* p, int64_t bytes, const std::string& name) = delete;
// A stand-in kernel on stream s that reads and/or writes the given memory.
inline void fake_cuda_kernel(cudaStream_t s, const void* reads, int64_t read_bytes, const void* writes,
                             int64_t write_bytes, const std::string& what) {
    FAKE_CUDA_LOCKED;
    if (!s) s = fake_cuda::legacy_stream();
    const fake_cuda::Clock& c = fake_cuda::enqueue(s);
    if (reads) fake_cuda::access(s->agent, c, reads, read_bytes, false, what);
    if (writes) fake_cuda::access(s->agent, c, writes, write_bytes, true, what);
}
// The host reads or writes memory (e.g. the CPU optimizer).
inline void fake_cuda_host_access(const void* p, int64_t bytes, bool write, const std::string& what) {
    FAKE_CUDA_LOCKED;
    fake_cuda::State& s = fake_cuda::state();
    const int a = fake_cuda::host_agent();
    fake_cuda::Clock& c = s.host[a];
    c[a]++;
    if (s.seen[a] < c[a]) s.seen[a] = c[a];
    fake_cuda::access(a, c, p, bytes, write, what);
}
inline std::vector<std::string>& fake_cuda_races() { return fake_cuda::state().races; }
inline void fake_cuda_reset() { fake_cuda::state() = fake_cuda::State(); }
// Forgets the tracked regions and the races seen, and nothing else (allocations and clocks stay): for the
// emulated suites, which track one trainer's buffers at a time.
inline void fake_cuda_untrack_all() {
    FAKE_CUDA_LOCKED;
    fake_cuda::state().regions.clear();
    fake_cuda::state().races.clear();
    fake_cuda::state().handovers.clear();
}
// An emulated device operation (a kernel launch, a cuBLAS call) on stream s that reads or writes at each
// pointer. Its extent is not known from a pointer, so an access at p counts for the tracked region that holds
// p, all of it: a test tracks buffers at the granularity it wants checked (a weight slot, a layer's
// checkpoint).
struct FakeDeviceAccess {
    const void* p;
    bool write;
};
inline void fake_cuda_device_op(cudaStream_t s, const char* what, const FakeDeviceAccess* acc, int n) {
    FAKE_CUDA_LOCKED;
    if (fake_cuda::state().regions.empty()) return;  // nothing tracked: nothing to order (the common case)
    if (!s) s = fake_cuda::legacy_stream();
    const fake_cuda::Clock& c = fake_cuda::enqueue(s);
    const std::string w = std::string(what) + " on stream " + std::to_string(s->agent);
    for (int i = 0; i < n; i++)
        if (acc[i].p) fake_cuda::access(s->agent, c, acc[i].p, 1, acc[i].write, w);
}
// Host code the emulated build checks (cuda_common.h FAKE_CUDA_HOST_ACCESS): the CPU optimizer's reads of the
// pinned gradients and writes of the pinned bf16 weights, the host writing the bf16 copy at load.
#define FAKE_CUDA_HOST_ACCESS(p, bytes, write, what) \
    fake_cuda_host_access((p), (int64_t)(bytes), (write), (what))
// A hand-over between host threads through a mutex-protected object: the releasing thread calls RELEASE(obj)
// while it holds the mutex, after what it hands over; the acquiring thread calls ACQUIRE(obj) while it holds
// the mutex, having seen what it waited for. Everything the releaser did before is then ordered before what
// the acquirer does next (with a mutex, an acquire sees the latest release, which is what
// joining clocks models).
inline void fake_cuda_host_release(const void* obj) {
    FAKE_CUDA_LOCKED;
    fake_cuda::join(fake_cuda::state().handovers[obj], fake_cuda::host_clock());
}
inline void fake_cuda_host_acquire(const void* obj) {
    FAKE_CUDA_LOCKED;
    fake_cuda::join(fake_cuda::host_clock(), fake_cuda::state().handovers[obj]);
}
#define FAKE_CUDA_HOST_RELEASE(obj) fake_cuda_host_release(obj)
#define FAKE_CUDA_HOST_ACQUIRE(obj) fake_cuda_host_acquire(obj)

// --- the runtime API stream.cu and timeline.h call ---
inline const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorNotReady: return "device not ready";
        case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
        case cudaErrorMisalignedAddress: return "misaligned address";
        case cudaErrorLaunchFailure: return "unspecified launch failure";
        default: return "fake CUDA error";
    }
}
namespace fake_cuda {
// The sticky error (a kernel fault: from then on every call returns it, as CUDA's context is lost) and each
// host thread's last error (a launch configuration error: cudaGetLastError returns and clears it).
inline cudaError_t& sticky_error() {
    static cudaError_t e = cudaSuccess;
    return e;
}
inline cudaError_t& last_error() {
    static thread_local cudaError_t e = cudaSuccess;
    return e;
}
// A fault inside an emulated kernel (fake_device.h) jumps here: the launch being run sets it, on its thread.
inline sigjmp_buf*& kernel_fault_jump() {
    static thread_local sigjmp_buf* j = nullptr;
    return j;
}
inline void kernel_fault(cudaError_t e, const char* what) {
    fprintf(stderr, "fake_cuda: kernel fault: %s (%s); the error is sticky from now on\n", what,
            cudaGetErrorString(e));
    if (!sticky_error()) sticky_error() = e;
    if (kernel_fault_jump()) siglongjmp(*kernel_fault_jump(), 1);
    abort();  // not inside a kernel: nothing to unwind to
}
}  // namespace fake_cuda
#define FAKE_CUDA_RETURN_STICKY                                          \
    do {                                                                 \
        if (fake_cuda::sticky_error()) return fake_cuda::sticky_error(); \
    } while (0)
inline cudaError_t cudaGetLastError() {
    FAKE_CUDA_RETURN_STICKY;
    const cudaError_t e = fake_cuda::last_error();
    fake_cuda::last_error() = cudaSuccess;
    return e;
}
inline cudaError_t cudaPeekAtLastError() {
    FAKE_CUDA_RETURN_STICKY;
    return fake_cuda::last_error();
}
// Fresh device and pinned memory holds garbage on a GPU (cudaMalloc does not clear it): here it is 0xFF
// bytes, a NaN as float and as bf16, so a result that depends on memory nobody wrote shows up as NaN,
// not as zero.
inline void* fake_cuda_garbage_alloc(size_t bytes) {
    void* p = malloc(bytes ? bytes : 1);
    if (p) memset(p, 0xFF, bytes ? bytes : 1);
    return p;
}
// Pinned allocations are remembered: a copy from or to pageable memory behaves differently (cudaMemcpy*).
namespace fake_cuda {
inline std::map<const char*, size_t>& pinned() {
    static std::map<const char*, size_t> m;
    return m;
}
inline bool is_pinned(const void* p) {
    FAKE_CUDA_LOCKED;
    auto it = pinned().upper_bound((const char*)p);
    if (it == pinned().begin()) return false;
    --it;
    return (const char*)p < it->first + it->second;
}
}  // namespace fake_cuda
inline cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    *p = fake_cuda_garbage_alloc(bytes);
    if (!*p) return cudaErrorMemoryAllocation;
    fake_cuda::pinned()[(const char*)*p] = bytes ? bytes : 1;
    return cudaSuccess;
}

// Memory the caller allocated, pinned: copies from or to it behave as with cudaHostAlloc's.
inline cudaError_t cudaHostRegister(void* p, size_t bytes, unsigned) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    if (!p || bytes == 0) return cudaErrorInvalidValue;
    fake_cuda::pinned()[(const char*)p] = bytes;
    return cudaSuccess;
}
inline cudaError_t cudaHostUnregister(void* p) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    return fake_cuda::pinned().erase((const char*)p) == 1 ? cudaSuccess : cudaErrorInvalidValue;
}

// On a GPU, host code that dereferences a device pointer crashes. In the emulated build (FAKE_CUDA_DEVICE)
// each device buffer is its own mapping, readable and writable only while the emulated GPU works (a kernel,
// a cuBLAS call, a copy or a memset: FAKE_CUDA_DEVICE_ACCESS) and PROT_NONE otherwise, so such host code
// crashes here too. A buffer ends less than 256 bytes (cudaMalloc's alignment) before a guard page that is
// never mapped readable: running off its end faults as well. Under AddressSanitizer (make sanitize) buffers
// stay malloc'd, which it checks byte by byte.
#if defined(FAKE_CUDA_DEVICE) && !defined(__SANITIZE_ADDRESS__)
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>
namespace fake_cuda {
struct DeviceMapping {
    char* map;
    size_t data_pages;
};  // data_pages bytes of data, then one guard page
inline std::map<void*, DeviceMapping>& device_mappings() {
    static std::map<void*, DeviceMapping> m;
    return m;
}
inline int& device_access_depth() {
    static int d = 0;
    return d;
}
inline size_t page_bytes() {
    static const size_t b = (size_t)sysconf(_SC_PAGESIZE);
    return b;
}
inline void protect_device(const DeviceMapping& m, int prot) {
    if (mprotect(m.map, m.data_pages, prot) != 0) {
        perror("fake_cuda: mprotect");
        abort();
    }
}
// A fault inside a device mapping gets a sentence instead of a bare "Segmentation fault".
inline void device_fault(int sig, siginfo_t* info, void*) {
    const char* a = (const char*)info->si_addr;
    if (kernel_fault_jump()) {  // an emulated kernel faulted: on a GPU, an illegal address error (sticky)
        char what[96];
        snprintf(what, sizeof what, "memory fault at %p", info->si_addr);
        kernel_fault(cudaErrorIllegalAddress, what);
    }
    for (auto& m : device_mappings())
        if (a >= m.second.map && a < m.second.map + m.second.data_pages + page_bytes()) {
            fprintf(stderr, "fake_cuda: %s at %p: %s\n", "memory fault", info->si_addr,
                    a >= m.second.map + m.second.data_pages
                        ? "past the end of a device buffer"
                        : "device memory touched outside a kernel, cuBLAS call or copy (host code "
                          "dereferencing a device pointer?)");
            break;
        }
    signal(sig, SIG_DFL);  // then die of the signal as before
    raise(sig);
}
inline void* device_alloc(size_t bytes) {
    static const bool handler = [] {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = device_fault;
        sa.sa_flags = SA_SIGINFO;
        return sigaction(SIGSEGV, &sa, NULL) == 0;
    }();
    (void)handler;
    const size_t page = page_bytes(), data = (bytes + page - 1) / page * page + (bytes == 0 ? page : 0);
    void* map = mmap(NULL, data + page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) return NULL;
    const DeviceMapping m{(char*)map, data};
    char* p = m.map + data - (bytes + 255) / 256 * 256;
    protect_device(m, PROT_READ | PROT_WRITE);
    memset(p, 0xFF, bytes);  // garbage, as fake_cuda_garbage_alloc
    if (device_access_depth() == 0) protect_device(m, PROT_NONE);
    device_mappings()[p] = m;
    return p;
}
inline void device_free(void* p) {
    auto it = device_mappings().find(p);
    if (it == device_mappings().end()) return;
    munmap(it->second.map, it->second.data_pages + page_bytes());
    device_mappings().erase(it);
}
struct DeviceAccess {
    DeviceAccess() {
        FAKE_CUDA_LOCKED;
        if (device_access_depth()++ == 0)
            for (auto& m : device_mappings()) protect_device(m.second, PROT_READ | PROT_WRITE);
    }
    ~DeviceAccess() {
        FAKE_CUDA_LOCKED;
        if (--device_access_depth() == 0)
            for (auto& m : device_mappings()) protect_device(m.second, PROT_NONE);
    }
};
}  // namespace fake_cuda
#define FAKE_CUDA_DEVICE_ACCESS       fake_cuda::DeviceAccess fake_cuda_device_access
#define FAKE_CUDA_DEVICE_ALLOC(bytes) fake_cuda::device_alloc(bytes)
#define FAKE_CUDA_DEVICE_FREE(p)      fake_cuda::device_free(p)
#else
#define FAKE_CUDA_DEVICE_ACCESS       (void)0
#define FAKE_CUDA_DEVICE_ALLOC(bytes) fake_cuda_garbage_alloc(bytes)
#define FAKE_CUDA_DEVICE_FREE(p)      free(p)
#endif

// --- deferred execution (see the top of this file) ---
namespace fake_cuda {
inline bool deferring() {
#ifdef FAKE_CUDA_DEVICE
    static const bool on = !getenv("FAKE_CUDA_DEFER") || atoi(getenv("FAKE_CUDA_DEFER")) != 0;
    return on;
#else
    return false;  // the host-only tests (test_stream, test_matmul) read results at once: nothing runs later
#endif
}
// Runs stream s's queued operations up to position pos, each after what it waits for. Every wait points to an
// earlier-queued operation, so the recursion ends. A fault makes the error sticky and the later
// work is dropped.
inline void run_upto(FakeStream* s, uint64_t pos) {
    if (s->done >= pos) return;
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_DEVICE_ACCESS;
    while (s->done < pos) {
        FakeOp op = std::move(s->queue.front());
        s->queue.pop_front();
        for (auto& w : op.waits) run_upto(w.first, w.second);
        s->done++;
        if (op.run && !sticky_error()) op.run();
    }
}
inline void run_all() {
    FAKE_CUDA_LOCKED;
    for (FakeStream* s : state().streams) run_upto(s, s->enqueued);
    run_upto(legacy_stream(), legacy_stream()->enqueued);
}
// Queues an operation on stream s (NULL: the legacy stream), or runs it at once when not deferring. A
// blocking stream's work waits for the legacy stream's, and the legacy stream's for every blocking stream's.
inline void submit(cudaStream_t s, std::function<void()> run, FakeStream* wait_stream = nullptr,
                   uint64_t wait_pos = 0) {
    FAKE_CUDA_LOCKED;
    if (!s) s = legacy_stream();
    if (!deferring()) {
        FAKE_CUDA_DEVICE_ACCESS;
        s->enqueued++;
        s->done++;
        if (run && !sticky_error()) run();
        return;
    }
    FakeOp op;
    op.run = std::move(run);
    if (wait_stream) op.waits.push_back({wait_stream, wait_pos});
    if (s == legacy_stream()) {
        for (FakeStream* b : state().streams)
            if (b->blocking) op.waits.push_back({b, b->enqueued});
    } else if (s->blocking) {
        op.waits.push_back({legacy_stream(), legacy_stream()->enqueued});
    }
    s->queue.push_back(std::move(op));
    s->enqueued++;
    s->queried_pending = false;
}
inline void run_stream(cudaStream_t s) {
    if (!s) s = legacy_stream();
    run_upto(s, s->enqueued);
}
inline bool event_done(cudaEvent_t e) { return !e->recorded || e->stream->done >= e->pos; }
}  // namespace fake_cuda

inline cudaError_t cudaMalloc(void** p, size_t bytes) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    *p = FAKE_CUDA_DEVICE_ALLOC(bytes);
    if (!*p) return cudaErrorMemoryAllocation;
    fake_cuda::state().device_allocations[*p] = bytes;
    fake_cuda::state().device_bytes += bytes;
    return cudaSuccess;
}
// cudaFree and cudaFreeHost wait for the whole device first, as CUDA's do.
inline cudaError_t cudaFree(void* p) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    fake_cuda::run_all();
    auto& a = fake_cuda::state().device_allocations;
    auto it = a.find(p);
    if (it == a.end()) return fake_cuda::sticky_error();  // cudaFree(NULL), as CUDA's
    fake_cuda::state().device_bytes -= it->second;
    a.erase(it);
    FAKE_CUDA_DEVICE_FREE(p);
    return fake_cuda::sticky_error();
}
inline cudaError_t cudaFreeHost(void* p) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    fake_cuda::run_all();
    fake_cuda::pinned().erase((const char*)p);
    free(p);
    return fake_cuda::sticky_error();
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    fake_cuda::State& st = fake_cuda::state();
#ifdef FAKE_CUDA_DEVICE
    // the emulated GPU suites create streams by the dozen and check no races: agents are reused
    if (st.next_agent >= fake_cuda::kEndStreams) st.next_agent = fake_cuda::kFirstStream;
#endif
    if (st.next_agent >= fake_cuda::kEndStreams) return 3;
    *s = new FakeStream();
    (*s)->agent = st.next_agent++;
    (*s)->blocking = (flags & cudaStreamNonBlocking) == 0;
    (*s)->clock[(*s)->agent] =
        st.seen[(*s)->agent];  // a reused agent's ticks start where its last stream's ended
    st.streams.push_back(*s);
    return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
// Work still queued on a destroyed stream runs now (on a GPU it completes later; nothing can wait for it
// here). The stream itself is kept: events recorded on it still name its positions.
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    fake_cuda::run_stream(s);
    auto& v = fake_cuda::state().streams;
    for (size_t i = 0; i < v.size(); i++)
        if (v[i] == s) {
            v.erase(v.begin() + (long)i);
            break;
        }
    return fake_cuda::sticky_error();
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
    FAKE_CUDA_RETURN_STICKY;
    *e = new FakeEvent();
    (*e)->flags = flags;
    return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
    FAKE_CUDA_RETURN_STICKY;
    delete e;
    return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    if (!s) s = fake_cuda::legacy_stream();
    e->clock = fake_cuda::enqueue(s);
    e->recorded = true;
    e->stream = s;
    e->pos = s->enqueued;
    e->queried_pending = false;
    return cudaSuccess;
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    if (!s) s = fake_cuda::legacy_stream();
    if (!e->recorded) return cudaSuccess;  // waiting on a never-recorded event is a no-op
    fake_cuda::join(s->clock, e->clock);
    if (fake_cuda::deferring() && !fake_cuda::event_done(e)) fake_cuda::submit(s, nullptr, e->stream, e->pos);
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    if (!e->recorded) return cudaSuccess;
    fake_cuda::run_upto(e->stream, e->pos);
    fake_cuda::join(fake_cuda::host_clock(), e->clock);
    return fake_cuda::sticky_error();
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    if (!s) s = fake_cuda::legacy_stream();
    fake_cuda::run_stream(s);
    fake_cuda::join(fake_cuda::host_clock(), s->clock);
    return fake_cuda::sticky_error();
}
inline cudaError_t cudaDeviceSynchronize() {  // the host waits for every stream
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    fake_cuda::run_all();
    for (FakeStream* s : fake_cuda::state().streams) fake_cuda::join(fake_cuda::host_clock(), s->clock);
    fake_cuda::join(fake_cuda::host_clock(), fake_cuda::legacy_stream()->clock);
    return fake_cuda::sticky_error();
}
// Queries: work that is still queued is "not ready" to the first query after it was queued; the next query
// runs it and reports completion (a synchronization, as when a GPU has finished meanwhile). A polling loop
// ends; code that takes one query's cudaSuccess for granted without checking it sees
// cudaErrorNotReady here first.
inline cudaError_t cudaEventQuery(cudaEvent_t e) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    if (!fake_cuda::event_done(e) && !e->queried_pending) {
        e->queried_pending = true;
        return cudaErrorNotReady;
    }
    return cudaEventSynchronize(e);
}
inline cudaError_t cudaStreamQuery(cudaStream_t s) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    if (!s) s = fake_cuda::legacy_stream();
    if (s->done < s->enqueued && !s->queried_pending) {
        s->queried_pending = true;
        return cudaErrorNotReady;
    }
    s->queried_pending = false;
    return cudaStreamSynchronize(s);
}
// As CUDA: an event never recorded, or created with cudaEventDisableTiming, is an invalid handle here; one
// whose work has not completed is not ready. The time itself is not modelled (0 ms).
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    if (!a || !b || !a->recorded || !b->recorded || ((a->flags | b->flags) & cudaEventDisableTiming))
        return cudaErrorInvalidResourceHandle;
    if (!fake_cuda::event_done(a) || !fake_cuda::event_done(b)) return cudaErrorNotReady;
    *ms = 0.0f;
    return cudaSuccess;
}
// An async copy runs when its stream does. From pageable memory the source is staged (copied) at the call, as
// CUDA does; from pinned memory it is read when the copy runs. To pageable memory CUDA returns only once the
// copy is done: the stream runs up to it here.
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                                   cudaStream_t s) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    if (!s) s = fake_cuda::legacy_stream();
    const fake_cuda::Clock& c = fake_cuda::enqueue(s);
    const std::string what = "a copy on stream " + std::to_string(s->agent);
    fake_cuda::access(s->agent, c, src, (int64_t)bytes, false, what);
    fake_cuda::access(s->agent, c, dst, (int64_t)bytes, true, what);
    if (fake_cuda::deferring() && kind == cudaMemcpyHostToDevice && !fake_cuda::is_pinned(src)) {
        auto staged = std::make_shared<std::vector<char>>((const char*)src, (const char*)src + bytes);
        fake_cuda::submit(s, [dst, staged] { memcpy(dst, staged->data(), staged->size()); });
    } else {
        fake_cuda::submit(s, [dst, src, bytes] { memcpy(dst, src, bytes); });
    }
    if (kind == cudaMemcpyDeviceToHost && !fake_cuda::is_pinned(dst)) fake_cuda::run_stream(s);
    return fake_cuda::sticky_error();
}

// --- the rest of the runtime the GPU suites use, for the emulated build (fake_device.h runs the kernels) ---
#ifdef FAKE_CUDA_DEVICE
typedef struct {
    char bytes[16];
} cudaUUID_t;
typedef struct {
    char name[256];
    cudaUUID_t uuid;  // zero: the emulated GPU has none (comm_ranks_on_my_gpu takes the PCI bus id)
    size_t totalGlobalMem;
    int major, minor;
} cudaDeviceProp;
#define FAKE_CUDA_DEVICE_BYTES ((size_t)8 << 30)
inline cudaError_t cudaGetDeviceCount(int* n) {
    *n = 1;
    return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int) {
    FAKE_CUDA_RETURN_STICKY;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetPCIBusId(char* bus, int len, int) {  // the one emulated GPU
    FAKE_CUDA_RETURN_STICKY;
    snprintf(bus, (size_t)len, "0000:00:00.0");
    return cudaSuccess;
}
// The host's way of waiting for the device (cudaDeviceScheduleBlockingSync: sleep, not spin): recorded only.
inline unsigned& fake_cuda_device_flags() {
    static unsigned flags = 0;
    return flags;
}
inline cudaError_t cudaSetDeviceFlags(unsigned flags) {
    FAKE_CUDA_RETURN_STICKY;
    fake_cuda_device_flags() = flags;
    return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* d) {
    *d = 0;
    return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "fake CUDA device (CPU emulation)");
    p->totalGlobalMem = FAKE_CUDA_DEVICE_BYTES;
    p->major = 9;
    return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total_b) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    *total_b = FAKE_CUDA_DEVICE_BYTES;
    *free_b = FAKE_CUDA_DEVICE_BYTES - fake_cuda::state().device_bytes;
    return cudaSuccess;
}
inline cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaHostAlloc(p, bytes, 0); }
template <typename T>
cudaError_t cudaMallocHost(T** p, size_t bytes) {
    return cudaHostAlloc((void**)p, bytes, 0);
}  // as cuda_runtime.h
template <typename T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
    return cudaMalloc((void**)p, bytes);
}
// cudaMemcpy runs on the legacy stream. The trainer's streams are non-blocking (stream.cu), so the legacy
// stream does NOT wait for their work: only events order them. As CUDA (API synchronization behavior): from
// pageable host memory, the legacy stream's earlier work is waited for, the source staged, and the call
// returns before the copy lands (it lands when the legacy stream runs: a kernel queued on a non-blocking
// stream meanwhile may read the old data); from pinned memory, and to the host, it returns when the
// copy is done.
inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    const bool staged = kind == cudaMemcpyHostToDevice && !fake_cuda::is_pinned(src);
    if (staged) fake_cuda::run_stream(nullptr);
    cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
    if (staged && fake_cuda::deferring())
        return fake_cuda::sticky_error();  // the host is not ordered after the copy
    return cudaStreamSynchronize(nullptr);
}
// Memsets run when their stream does; cudaMemset (legacy stream) of device memory returns before it is done,
// as CUDA's does.
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t bytes, cudaStream_t s) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    if (!s) s = fake_cuda::legacy_stream();
    const fake_cuda::Clock& c = fake_cuda::enqueue(s);
    fake_cuda::access(s->agent, c, p, (int64_t)bytes, true, "a memset on stream " + std::to_string(s->agent));
    fake_cuda::submit(s, [p, v, bytes] { memset(p, v, bytes); });
    return cudaSuccess;
}
inline cudaError_t cudaMemset(void* p, int v, size_t bytes) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    cudaMemsetAsync(p, v, bytes, nullptr);
    if (fake_cuda::deferring()) return cudaSuccess;
    return cudaStreamSynchronize(nullptr);
}
// Dynamic shared memory: 48 KB per block unless raised here, up to 227 KB (sm_90).
namespace fake_cuda {
inline std::map<const void*, int>& max_dynamic_smem() {
    static std::map<const void*, int> m;
    return m;
}
constexpr int kDefaultDynamicSmem = 48 * 1024, kMaxDynamicSmem = 227 * 1024;
inline int dynamic_smem_limit(const void* kernel) {
    FAKE_CUDA_LOCKED;
    auto it = max_dynamic_smem().find(kernel);
    return it == max_dynamic_smem().end() ? kDefaultDynamicSmem : it->second;
}
}  // namespace fake_cuda
template <typename K>
cudaError_t cudaFuncSetAttribute(K* kernel, cudaFuncAttribute attr, int value) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_RETURN_STICKY;
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
        value > fake_cuda::kMaxDynamicSmem)
        return cudaErrorInvalidValue;
    fake_cuda::max_dynamic_smem()[(const void*)kernel] = value;
    return cudaSuccess;
}
// A kernel's attributes: none emulated (on a GPU the call also loads a lazily loaded kernel).
typedef struct {
    int maxThreadsPerBlock;
} cudaFuncAttributes;
inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* kernel) {
    FAKE_CUDA_RETURN_STICKY;
    if (!kernel) return cudaErrorInvalidValue;
    attr->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}
#include "fake_device.h"  // the kernels and their launcher
#endif
