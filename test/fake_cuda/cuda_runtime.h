// test/fake_cuda/cuda_runtime.h — a host-only stand-in for the CUDA runtime that stream.cu uses, for
// test/test_stream.cpp and (with fake_device.h) the emulated GPU suites: it MODELS the ordering CUDA guarantees. Every stream,
// and the host, carries a vector clock; an operation enqueued on a stream is ordered after the stream's
// previous operations and after everything the host did before enqueueing it; cudaEventRecord captures a
// stream's clock, cudaStreamWaitEvent joins it into another stream, cudaEventSynchronize /
// cudaStreamSynchronize / cudaDeviceSynchronize join it into the host's. Each host thread is an agent of its
// own; what orders them is declared where they hand over (FAKE_CUDA_HOST_RELEASE / _ACQUIRE around a mutex-
// protected hand-over, e.g. the trainer's CPU optimizer thread). Memory the test registers
// (fake_cuda_track) gets every access checked: two accesses of which one writes must be ordered by that
// model, or the pair is recorded as a race (fake_cuda_races).
// Kernels: test_stream.cpp declares what its stand-in kernels read and write (fake_cuda_kernel); in the emulated
// build, fake_device.h's launches and the cuBLAS emulation declare theirs (fake_cuda_device_op). Not modelled:
// timing, errors.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <array>
#include <map>
#include <mutex>
#include <string>
#include <vector>

typedef int cudaError_t;
#define cudaSuccess 0
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };
#define cudaHostAllocDefault 0u
#define cudaStreamNonBlocking 1u
#define cudaEventDisableTiming 2u
#define cudaEventBlockingSync 1u

struct FakeStream;
namespace fake_cuda {
// agent 0: the first host thread (main); 1: the legacy stream; 2..7: streams; 8..11: other host threads
constexpr int kMaxAgents = 12, kFirstStream = 2, kEndStreams = 8, kFirstHostThread = 8;
typedef std::array<uint64_t, kMaxAgents> Clock;
inline void join(Clock& a, const Clock& b) { for (int i = 0; i < kMaxAgents; i++) a[i] = a[i] > b[i] ? a[i] : b[i]; }

struct Access { int agent = 0; uint64_t tick = 0; bool write = false; std::string what; };
struct Region { const char* base; int64_t bytes; std::string name; std::vector<Access> since_write; bool has_write = false; Access last_write; };

struct State {
    std::array<Clock, kMaxAgents> host{};  // each host thread's clock, by its agent
    Clock seen{};                 // the highest tick of each agent anyone has seen (a reused agent starts above it)
    int next_agent = kFirstStream;
    int next_host_agent = kFirstHostThread;
    std::map<const void*, Clock> handovers;  // FAKE_CUDA_HOST_RELEASE's clocks, by the object handed over
    std::vector<Region> regions;
    std::vector<std::string> races;
    std::vector<::FakeStream*> streams;   // live streams, for cudaDeviceSynchronize
    std::map<void*, size_t> device_allocations;  // for cudaMemGetInfo
    size_t device_bytes = 0;
};
// One lock for all of the fake runtime: the trainer's optimizer thread calls it concurrently with the main one.
inline std::recursive_mutex& lock() { static std::recursive_mutex m; return m; }
#define FAKE_CUDA_LOCKED std::lock_guard<std::recursive_mutex> fake_cuda_guard(fake_cuda::lock())
inline State& state() { static State s; return s; }
}  // namespace fake_cuda

struct FakeStream { int agent; fake_cuda::Clock clock{}; };
struct FakeEvent { bool recorded = false; fake_cuda::Clock clock{}; };
typedef FakeStream* cudaStream_t;
typedef FakeEvent* cudaEvent_t;

namespace fake_cuda {
// The agent performing an access and the clock it sees then.
inline void access(int agent, const Clock& view, const void* p, int64_t bytes, bool write, const std::string& what) {
    State& s = state();
    const char* a = (const char*)p;
    for (Region& r : s.regions) {
        if (a + bytes <= r.base || r.base + r.bytes <= a) continue;
        auto ordered = [&](const Access& prev) { return prev.agent == agent || prev.tick <= view[prev.agent]; };
        auto report = [&](const Access& prev) {
            s.races.push_back(r.name + ": " + (write ? "write" : "read") + " by " + what + " not ordered after " +
                              (prev.write ? "write" : "read") + " by " + prev.what);
        };
        if (r.has_write && !ordered(r.last_write)) report(r.last_write);
        Access now{agent, view[agent], write, what};
        if (write) {
            for (const Access& prev : r.since_write) if (!ordered(prev)) report(prev);
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
        if (!main_taken) { main_taken = true; agent = 0; }
        else {
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
inline cudaStream_t legacy_stream() {  // stream 0 (cudaMemcpy, cudaMemset, a NULL stream): agent 1, never reused
    static FakeStream* s = nullptr;
    if (!s) { s = new FakeStream(); s->agent = 1; }
    return s;
}
}  // namespace fake_cuda

// --- what the test uses ---
// Registers memory whose accesses are checked; `name` appears in race reports.
inline void fake_cuda_track(const void* p, int64_t bytes, const std::string& name) {
    fake_cuda::Region r;
    r.base = (const char*)p; r.bytes = bytes; r.name = name;
    fake_cuda::state().regions.push_back(r);
}
// A stand-in kernel on stream s that reads and/or writes the given memory.
inline void fake_cuda_kernel(cudaStream_t s, const void* reads, int64_t read_bytes, const void* writes, int64_t write_bytes,
                             const std::string& what) {
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
// An emulated device operation (a kernel launch, a cuBLAS call) on stream s that reads or writes at each pointer.
// Its extent is not known from a pointer, so an access at p counts for the tracked region that holds p, all of
// it: a test tracks buffers at the granularity it wants checked (a weight slot, a layer's checkpoint).
struct FakeDeviceAccess { const void* p; bool write; };
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
#define FAKE_CUDA_HOST_ACCESS(p, bytes, write, what) fake_cuda_host_access((p), (int64_t)(bytes), (write), (what))
// A hand-over between host threads through a mutex-protected object: the releasing thread calls RELEASE(obj)
// while it holds the mutex, after what it hands over; the acquiring thread calls ACQUIRE(obj) while it holds
// the mutex, having seen what it waited for. Everything the releaser did before is then ordered before what the
// acquirer does next (with a mutex, an acquire sees the latest release, which is what joining clocks models).
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
inline const char* cudaGetErrorString(cudaError_t) { return "fake"; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
// Fresh device and pinned memory holds garbage on a GPU (cudaMalloc does not clear it): here it is 0xFF bytes,
// a NaN as float and as bf16, so a result that depends on memory nobody wrote shows up as NaN, not as zero.
inline void* fake_cuda_garbage_alloc(size_t bytes) {
    void* p = malloc(bytes ? bytes : 1);
    if (p) memset(p, 0xFF, bytes ? bytes : 1);
    return p;
}
inline cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) { *p = fake_cuda_garbage_alloc(bytes); return *p ? cudaSuccess : 2; }

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
struct DeviceMapping { char* map; size_t data_pages; };  // data_pages bytes of data, then one guard page
inline std::map<void*, DeviceMapping>& device_mappings() { static std::map<void*, DeviceMapping> m; return m; }
inline int& device_access_depth() { static int d = 0; return d; }
inline size_t page_bytes() { static const size_t b = (size_t)sysconf(_SC_PAGESIZE); return b; }
inline void protect_device(const DeviceMapping& m, int prot) {
    if (mprotect(m.map, m.data_pages, prot) != 0) { perror("fake_cuda: mprotect"); abort(); }
}
// A fault inside a device mapping gets a sentence instead of a bare "Segmentation fault".
inline void device_fault(int sig, siginfo_t* info, void*) {
    const char* a = (const char*)info->si_addr;
    for (auto& m : device_mappings())
        if (a >= m.second.map && a < m.second.map + m.second.data_pages + page_bytes()) {
            fprintf(stderr, "fake_cuda: %s at %p: %s\n", "memory fault", info->si_addr,
                    a >= m.second.map + m.second.data_pages
                        ? "past the end of a device buffer"
                        : "device memory touched outside a kernel, cuBLAS call or copy (host code dereferencing a device pointer?)");
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
#define FAKE_CUDA_DEVICE_ACCESS fake_cuda::DeviceAccess fake_cuda_device_access
#define FAKE_CUDA_DEVICE_ALLOC(bytes) fake_cuda::device_alloc(bytes)
#define FAKE_CUDA_DEVICE_FREE(p) fake_cuda::device_free(p)
#else
#define FAKE_CUDA_DEVICE_ACCESS (void)0
#define FAKE_CUDA_DEVICE_ALLOC(bytes) fake_cuda_garbage_alloc(bytes)
#define FAKE_CUDA_DEVICE_FREE(p) free(p)
#endif

inline cudaError_t cudaMalloc(void** p, size_t bytes) {
    FAKE_CUDA_LOCKED;
    *p = FAKE_CUDA_DEVICE_ALLOC(bytes);
    if (!*p) return 2;
    fake_cuda::state().device_allocations[*p] = bytes;
    fake_cuda::state().device_bytes += bytes;
    return cudaSuccess;
}
inline cudaError_t cudaFree(void* p) {
    FAKE_CUDA_LOCKED;
    auto& a = fake_cuda::state().device_allocations;
    auto it = a.find(p);
    if (it == a.end()) return cudaSuccess;  // cudaFree(NULL), as CUDA's
    fake_cuda::state().device_bytes -= it->second;
    a.erase(it);
    FAKE_CUDA_DEVICE_FREE(p);
    return cudaSuccess;
}
inline cudaError_t cudaFreeHost(void* p) { free(p); return cudaSuccess; }
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
    FAKE_CUDA_LOCKED;
    fake_cuda::State& st = fake_cuda::state();
#ifdef FAKE_CUDA_DEVICE
    // the emulated GPU suites create streams by the dozen and check no races: agents are reused
    if (st.next_agent >= fake_cuda::kEndStreams) st.next_agent = fake_cuda::kFirstStream;
#endif
    if (st.next_agent >= fake_cuda::kEndStreams) return 3;
    *s = new FakeStream();
    (*s)->agent = st.next_agent++;
    (*s)->clock[(*s)->agent] = st.seen[(*s)->agent];  // a reused agent's ticks start where its last stream's ended
    st.streams.push_back(*s);
    return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    FAKE_CUDA_LOCKED;
    auto& v = fake_cuda::state().streams;
    for (size_t i = 0; i < v.size(); i++)
        if (v[i] == s) { v.erase(v.begin() + (long)i); break; }
    delete s;
    return cudaSuccess;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { *e = new FakeEvent(); return cudaSuccess; }
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = new FakeEvent(); return cudaSuccess; }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    FAKE_CUDA_LOCKED;
    e->clock = fake_cuda::enqueue(s);
    e->recorded = true;
    return cudaSuccess;
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
    FAKE_CUDA_LOCKED;
    if (!s) s = fake_cuda::legacy_stream();
    if (e->recorded) fake_cuda::join(s->clock, e->clock);  // waiting on a never-recorded event is a no-op
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    FAKE_CUDA_LOCKED;
    if (e->recorded) fake_cuda::join(fake_cuda::host_clock(), e->clock);
    return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    FAKE_CUDA_LOCKED;
    if (!s) s = fake_cuda::legacy_stream();
    fake_cuda::join(fake_cuda::host_clock(), s->clock);
    return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {  // the host waits for every stream
    FAKE_CUDA_LOCKED;
    for (FakeStream* s : fake_cuda::state().streams) fake_cuda::join(fake_cuda::host_clock(), s->clock);
    fake_cuda::join(fake_cuda::host_clock(), fake_cuda::legacy_stream()->clock);
    return cudaSuccess;
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) { *ms = 0.0f; return cudaSuccess; }
// Copies at once (so a test can see WHICH data a copy would deliver; WHEN it may run is the clocks' business).
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t s) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_DEVICE_ACCESS;
    if (!s) s = fake_cuda::legacy_stream();
    const fake_cuda::Clock& c = fake_cuda::enqueue(s);
    const std::string what = "a copy on stream " + std::to_string(s->agent);
    fake_cuda::access(s->agent, c, src, (int64_t)bytes, false, what);
    fake_cuda::access(s->agent, c, dst, (int64_t)bytes, true, what);
    memcpy(dst, src, bytes);
    return cudaSuccess;
}

// --- the rest of the runtime the GPU suites use, for the emulated build (fake_device.h runs the kernels) ---
#ifdef FAKE_CUDA_DEVICE
#include "fake_device.h"
typedef struct { char name[256]; size_t totalGlobalMem; int major, minor; } cudaDeviceProp;
#define FAKE_CUDA_DEVICE_BYTES ((size_t)8 << 30)
inline cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "fake CUDA device (CPU emulation)");
    p->totalGlobalMem = FAKE_CUDA_DEVICE_BYTES;
    p->major = 9;
    return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total_b) {
    FAKE_CUDA_LOCKED;
    *total_b = FAKE_CUDA_DEVICE_BYTES;
    *free_b = FAKE_CUDA_DEVICE_BYTES - fake_cuda::state().device_bytes;
    return cudaSuccess;
}
inline cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaHostAlloc(p, bytes, 0); }
template <typename T> cudaError_t cudaMallocHost(T** p, size_t bytes) { return cudaHostAlloc((void**)p, bytes, 0); }  // as cuda_runtime.h
template <typename T> cudaError_t cudaMalloc(T** p, size_t bytes) { return cudaMalloc((void**)p, bytes); }
// cudaMemcpy and cudaMemset run on the legacy stream and return when done. The trainer's streams are
// non-blocking (stream.cu), so the legacy stream does NOT wait for their work: only events order them.
inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    FAKE_CUDA_LOCKED;
    cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
    return cudaStreamSynchronize(nullptr);
}
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t bytes, cudaStream_t s) {
    FAKE_CUDA_LOCKED;
    FAKE_CUDA_DEVICE_ACCESS;
    if (!s) s = fake_cuda::legacy_stream();
    const fake_cuda::Clock& c = fake_cuda::enqueue(s);
    fake_cuda::access(s->agent, c, p, (int64_t)bytes, true, "a memset on stream " + std::to_string(s->agent));
    memset(p, v, bytes);
    return cudaSuccess;
}
inline cudaError_t cudaMemset(void* p, int v, size_t bytes) {
    FAKE_CUDA_LOCKED;
    cudaMemsetAsync(p, v, bytes, nullptr);
    return cudaStreamSynchronize(nullptr);
}
#endif
