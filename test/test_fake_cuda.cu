// test_fake_cuda.cu — the CUDA emulator's own suite (test/fake_cuda, build/emu_test_fake_cuda): each test
// plants a bug of one kind the emulator must catch as a GPU would, and asserts that it does:
//   deferral      — work runs when the host synchronizes with it: a result read before the sync is stale;
//   launch errors — bad grids and blocks, too much dynamic shared memory (cudaGetLastError, not sticky);
//   kernel faults — an out-of-bounds write, __trap(): sticky, every later call returns them (death tests: the
//                   fault ends the emulated context, so each runs in a child process);
//   pageable copy — cudaMemcpy from pageable memory may land after a kernel queued on a non-blocking stream;
//   subnormals    — kernels flush them to zero, as nvcc -ftz=true;
//   events        — cudaEventElapsedTime on an event never recorded, or not yet completed, is an error;
//   cp.async      — a copy's destination holds garbage until the thread's wait; copies left in flight at a
//                   block's end are a fault (emulator only: flash_attention.cuh's pipelines);
//   warp sums     — kernels.cuh's warp_sum / warp_max (one exchange of the lanes in the emulation) give the
//                   bits of the five __shfl_xor_sync steps they stand for.
// The real-GPU build (build/test_fake_cuda) runs the parts whose outcome a GPU guarantees (errors,
// subnormals, results after a sync) and skips what is only a possibility there (stale data, a first "not
// ready", faults). It tests the emulator, not the trainer: the trainer's kernels are tested in
// test_kernels.cu and test_gpu.cu.
#include "llmc/cuda_common.h"
#include "llmc/kernels.cuh"  // defines: warp_sum, warp_max (one exchange of the lanes in the emulation)
#include <gtest/gtest.h>
#include <vector>

#ifdef FAKE_CUDA_DEVICE
#define EMULATED                                  1
#define LAUNCH(kernel, grid, block, smem, stream) FAKE_LAUNCH(kernel, grid, block, smem, stream)
#else
#define EMULATED                                  0
#define LAUNCH(kernel, grid, block, smem, stream) kernel<<<grid, block, smem, stream>>>
#endif
// A GPU may or may not show these (a race is a possibility there, not a certainty): only the emulator is
// held to them.
#define EMULATOR_ONLY() \
    if (!EMULATED) GTEST_SKIP() << "checks the emulator: on a GPU this outcome is not guaranteed"

namespace {

__global__ void fill_kernel(float* out, float v, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = v;
}
__global__ void copy_kernel(float* out, const float* in, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
}
__global__ void mul_kernel(float* out, const float* a, const float* b, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] * b[i];
}
__global__ void out_of_bounds_kernel(float* out, int n) {  // the planted bug: one element past the end
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = 1.0f;
}
__global__ void trap_kernel(float* out) {
    if (threadIdx.x == 0) __trap();
    out[threadIdx.x] = 1.0f;
}
__global__ void noop_kernel(float* out) {}
// Each thread's warp sum and max of in, by the five shuffles and by kernels.cuh's warp_sum / warp_max, twice
// per thread with a __syncthreads between (exchanges back to back, the slots reused): out[8i .. 8i + 7].
__global__ void warp_reductions_kernel(float* out, double* out_d, const float* in) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int round = 0; round < 2; round++) {
        const float x = in[i] * (round ? -3.0f : 1.0f);
        float s = x, m = x;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
        double d = (double)x * 1e-3;
        for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffff, d, o);
        const float ws = warp_sum(x), wm = warp_max(x);
        const double wd = warp_sum((double)x * 1e-3);
        float* o = out + 8 * i + 4 * round;
        o[0] = s, o[1] = ws, o[2] = m, o[3] = wm;
        out_d[4 * i + 2 * round] = d, out_d[4 * i + 2 * round + 1] = wd;
        __syncthreads();
    }
}
#ifdef FAKE_CUDA_DEVICE
// A thread's cp.async of 4 floats into shared memory: read before its wait (out[2i]) and after (out[2i + 1]).
__global__ void cp_async_kernel(float* out, const float* in, int wait) {
    __shared__ __align__(16) float tile[32][4];
    const int i = threadIdx.x;
    fake_device::cp_async16(&tile[i][0], in + 4 * i);
    fake_device::cp_async_commit();
    out[2 * i] = tile[i][0];
    if (wait) fake_device::cp_async_wait(0);
    out[2 * i + 1] = tile[i][0];
}
#endif

bool have_device() {
    int n = 0;
    const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    cudaGetLastError();
    return ok;
}
#define REQUIRE_DEVICE() \
    if (!have_device()) GTEST_SKIP() << "no CUDA device"

float* device_floats(int n, float v) {
    float* d = nullptr;
    cudaCheck(cudaMalloc(&d, (size_t)n * 4));
    std::vector<float> h((size_t)n, v);
    cudaCheck(cudaMemcpy(d, h.data(), (size_t)n * 4, cudaMemcpyHostToDevice));
    cudaCheck(cudaDeviceSynchronize());
    return d;
}
std::vector<float> to_host(const float* d, int n) {
    std::vector<float> h((size_t)n);
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(h.data(), d, (size_t)n * 4, cudaMemcpyDeviceToHost));
    return h;
}
cudaStream_t non_blocking_stream() {
    cudaStream_t s;
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
}
const int kN = 1024;

// ---- 1. deferral ----

// Planted bug: the host reads a pinned buffer that an async copy fills, before synchronizing with the stream.
TEST(FakeCuda, HostReadBeforeStreamSyncIsStale) {
    REQUIRE_DEVICE();
    float* d = device_floats(kN, 0.0f);
    float* h = nullptr;
    cudaCheck(cudaMallocHost(&h, kN * 4));
    for (int i = 0; i < kN; i++) h[i] = -1.0f;
    cudaStream_t s = non_blocking_stream();
    LAUNCH(fill_kernel, kN / 256, 256, 0, s)(d, 7.0f, kN);
    cudaCheckLaunch();
    cudaCheck(cudaMemcpyAsync(h, d, kN * 4, cudaMemcpyDeviceToHost, s));
    if (EMULATED) {
        EXPECT_EQ(h[kN - 1], -1.0f) << "read before the sync: the kernel and the copy must not have run yet";
    }
    cudaCheck(cudaStreamSynchronize(s));
    EXPECT_EQ(h[0], 7.0f);
    EXPECT_EQ(h[kN - 1], 7.0f);
    cudaCheck(cudaStreamDestroy(s));
    cudaCheck(cudaFreeHost(h));
    cudaCheck(cudaFree(d));
}
// Planted bug: cudaMemcpy (legacy stream) reads a result of a kernel on a non-blocking stream, with no sync:
// the legacy stream does not wait for non-blocking streams.
TEST(FakeCuda, LegacyMemcpyDoesNotWaitForNonBlockingStream) {
    REQUIRE_DEVICE();
    EMULATOR_ONLY();
    float* d = device_floats(kN, 0.0f);
    cudaStream_t s = non_blocking_stream();
    LAUNCH(fill_kernel, kN / 256, 256, 0, s)(d, 7.0f, kN);
    cudaCheckLaunch();
    std::vector<float> h(kN, -1.0f);
    cudaCheck(cudaMemcpy(h.data(), d, kN * 4, cudaMemcpyDeviceToHost));  // no cudaStreamSynchronize(s) before
    EXPECT_EQ(h[0], 0.0f) << "the copy must see the buffer as it was before the kernel";
    EXPECT_EQ(to_host(d, kN)[0], 7.0f);  // after cudaDeviceSynchronize
    cudaCheck(cudaStreamDestroy(s));
    cudaCheck(cudaFree(d));
}
// An event synchronizes what was before it on its stream, and what that waited for, and nothing else.
TEST(FakeCuda, EventSynchronizeRunsOnlyWhatItCovers) {
    REQUIRE_DEVICE();
    float *a = device_floats(kN, 0.0f), *b = device_floats(kN, 0.0f), *h = nullptr;
    cudaCheck(cudaMallocHost(&h, 2 * kN * 4));
    for (int i = 0; i < 2 * kN; i++) h[i] = -1.0f;
    cudaStream_t s1 = non_blocking_stream(), s2 = non_blocking_stream();
    cudaEvent_t e;
    cudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    LAUNCH(fill_kernel, kN / 256, 256, 0, s1)(a, 1.0f, kN);
    cudaCheck(cudaMemcpyAsync(h, a, kN * 4, cudaMemcpyDeviceToHost, s1));
    cudaCheck(cudaEventRecord(e, s1));
    LAUNCH(fill_kernel, kN / 256, 256, 0, s2)(b, 2.0f, kN);
    cudaCheck(cudaMemcpyAsync(h + kN, b, kN * 4, cudaMemcpyDeviceToHost, s2));
    cudaCheckLaunch();
    cudaCheck(cudaEventSynchronize(e));
    EXPECT_EQ(h[kN - 1], 1.0f);
    if (EMULATED) {
        EXPECT_EQ(h[kN], -1.0f) << "s2's work is not covered by the event: it must not have run";
    }
    cudaCheck(cudaStreamSynchronize(s2));
    EXPECT_EQ(h[2 * kN - 1], 2.0f);
    cudaCheck(cudaEventDestroy(e));
    cudaCheck(cudaStreamDestroy(s1));
    cudaCheck(cudaStreamDestroy(s2));
    cudaCheck(cudaFreeHost(h));
    cudaCheck(cudaFree(a));
    cudaCheck(cudaFree(b));
}
// Planted bug: one cudaEventQuery's result taken for "done". The emulator answers "not ready" first; a
// polling loop ends, and once it reports completion the results are there.
TEST(FakeCuda, QueryReportsCompletionOnlyWhenDone) {
    REQUIRE_DEVICE();
    float* d = device_floats(kN, 0.0f);
    float* h = nullptr;
    cudaCheck(cudaMallocHost(&h, kN * 4));
    h[0] = -1.0f;
    cudaStream_t s = non_blocking_stream();
    cudaEvent_t e;
    cudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    LAUNCH(fill_kernel, kN / 256, 256, 0, s)(d, 3.0f, kN);
    cudaCheck(cudaMemcpyAsync(h, d, kN * 4, cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaEventRecord(e, s));
    cudaError_t q = cudaEventQuery(e);
    if (EMULATED) {
        EXPECT_EQ(q, cudaErrorNotReady);
        EXPECT_EQ(h[0], -1.0f);
    }
    while (q == cudaErrorNotReady) q = cudaEventQuery(e);
    EXPECT_EQ(q, cudaSuccess);
    EXPECT_EQ(h[0], 3.0f);
    LAUNCH(fill_kernel, kN / 256, 256, 0, s)(d, 4.0f, kN);
    cudaCheck(cudaMemcpyAsync(h, d, kN * 4, cudaMemcpyDeviceToHost, s));
    q = cudaStreamQuery(s);
    if (EMULATED) { EXPECT_EQ(q, cudaErrorNotReady); }
    while (q == cudaErrorNotReady) q = cudaStreamQuery(s);
    EXPECT_EQ(q, cudaSuccess);
    EXPECT_EQ(h[0], 4.0f);
    cudaCheck(cudaEventDestroy(e));
    cudaCheck(cudaStreamDestroy(s));
    cudaCheck(cudaFreeHost(h));
    cudaCheck(cudaFree(d));
}

// ---- 2. launch errors ----

// Planted bugs: a block of 1025 threads, a block.z of 65, a grid.y of 65536, an empty grid. Each is reported
// by cudaGetLastError (and cudaPeekAtLastError, which leaves it), is not sticky, and the kernel does not run.
TEST(FakeCuda, BadLaunchConfigurationIsReportedNotSticky) {
    REQUIRE_DEVICE();
    float* d = device_floats(kN, 0.0f);
    cudaCheck(cudaGetLastError());
    const dim3 bad_blocks[3] = {dim3(1025), dim3(1, 1, 65), dim3(512, 4)};
    for (const dim3& b : bad_blocks) {
        LAUNCH(fill_kernel, 1, b, 0, 0)(d, 5.0f, kN);
        EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidConfiguration);
        EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
        EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a launch configuration error is not sticky";
    }
    const dim3 bad_grids[2] = {dim3(1, 65536), dim3(0)};
    for (const dim3& g : bad_grids) {
        LAUNCH(fill_kernel, g, 256, 0, 0)(d, 5.0f, kN);
        EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
    }
    EXPECT_EQ(to_host(d, kN)[0], 0.0f) << "a refused launch must not run";
    LAUNCH(fill_kernel, kN / 256, 256, 0, 0)(d, 5.0f, kN);  // a good one still works
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    EXPECT_EQ(to_host(d, kN)[kN - 1], 5.0f);
    cudaCheck(cudaFree(d));
}
// Planted bug: 64 KB of dynamic shared memory without raising the kernel's limit (48 KB by default); then
// raised with cudaFuncSetAttribute it launches; a limit past the GPU's 227 KB is refused.
TEST(FakeCuda, DynamicSharedMemoryOverTheLimitIsReported) {
    REQUIRE_DEVICE();
    float* d = device_floats(kN, 0.0f);
    cudaCheck(cudaGetLastError());
    LAUNCH(noop_kernel, 1, 32, 64 * 1024, 0)(d);
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
    LAUNCH(noop_kernel, 1, 32, 48 * 1024, 0)(d);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    EXPECT_EQ(cudaFuncSetAttribute(noop_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024),
              cudaSuccess);
    LAUNCH(noop_kernel, 1, 32, 64 * 1024, 0)(d);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    EXPECT_NE(cudaFuncSetAttribute(noop_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024),
              cudaSuccess);
    cudaGetLastError();
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaFree(d));
}

// ---- kernel faults: sticky. Run in a child process (the emulated context, like a GPU's, is lost
// after one). ----

// The child's verdict: exit code 0 when every call after the fault returned `want`.
void expect_sticky_after(void (*plant)(float*), cudaError_t want) {
    float* d = device_floats(kN, 0.0f);
    plant(d);
    int bad = 0;
    if (cudaGetLastError() != cudaSuccess)
        bad |= 1;  // the launch itself was fine: the fault comes when it runs
    if (cudaDeviceSynchronize() != want) bad |= 2;
    if (cudaGetLastError() != want) bad |= 4;
    if (cudaGetLastError() != want) bad |= 8;  // sticky: not cleared by reading it
    void* p = nullptr;
    if (cudaMalloc(&p, 16) != want) bad |= 16;
    if (cudaMemset(d, 0, 16) != want) bad |= 32;
    exit(bad);
}
TEST(FakeCudaDeathTest, OutOfBoundsWriteIsAStickyIllegalAddress) {
    REQUIRE_DEVICE();
    EMULATOR_ONLY();
#ifdef __SANITIZE_ADDRESS__
    GTEST_SKIP() << "under AddressSanitizer (make sanitize) device buffers are malloc'd: ASan reports the "
                    "write itself";
#endif
    EXPECT_EXIT(expect_sticky_after(
                    [](float* d) {
                        LAUNCH(out_of_bounds_kernel, kN / 256 + 1, 256, 0, 0)
                        (d, kN);
                    },
                    cudaErrorIllegalAddress),
                testing::ExitedWithCode(0), "kernel fault");
}
TEST(FakeCudaDeathTest, TrapIsAStickyLaunchFailure) {
    REQUIRE_DEVICE();
    EMULATOR_ONLY();
    EXPECT_EXIT(expect_sticky_after(
                    [](float* d) {
                        LAUNCH(trap_kernel, 1, 32, 0, 0)
                        (d);
                    },
                    cudaErrorLaunchFailure),
                testing::ExitedWithCode(0), "__trap");
}

#ifdef FAKE_CUDA_DEVICE
TEST(FakeCuda, CpAsyncLandsAtItsWait) {
    float *in = device_floats(128, 2.0f), *out = device_floats(64, 0.0f);
    LAUNCH(cp_async_kernel, 1, 32, 0, 0)(out, in, 1);
    const std::vector<float> h = to_host(out, 64);
    for (int i = 0; i < 32; i++) {
        EXPECT_TRUE(std::isnan(h[2 * i])) << "thread " << i << " read its copy before the wait";
        EXPECT_EQ(h[2 * i + 1], 2.0f) << "thread " << i;
    }
    cudaCheck(cudaFree(in));
    cudaCheck(cudaFree(out));
}
TEST(FakeCudaDeathTest, CpAsyncInFlightAtTheBlocksEndIsAFault) {
    EXPECT_EXIT(expect_sticky_after(
                    [](float* d) {
                        LAUNCH(cp_async_kernel, 1, 32, 0, 0)
                        (d, d + 256, 0);
                    },
                    cudaErrorLaunchFailure),
                testing::ExitedWithCode(0), "in flight");
}
#endif

// ---- 3. pageable cudaMemcpy ----

// Planted bug: cudaMemcpy from a pageable std::vector, then a kernel on a non-blocking stream reads the
// buffer without a sync. cudaMemcpy returned once the source was staged; the copy lands with the legacy
// stream, which the non-blocking stream does not wait for: the kernel reads the old data. With a device sync
// after the copy, or from pinned memory (synchronous), it reads the new.
TEST(FakeCuda, PageableMemcpyMayLandAfterNonBlockingStreamWork) {
    REQUIRE_DEVICE();
    float *in = device_floats(kN, 0.0f), *out = device_floats(kN, -1.0f);
    cudaStream_t s = non_blocking_stream();
    std::vector<float> v(kN, 5.0f);
    if (EMULATED) {
        cudaCheck(cudaMemcpy(in, v.data(), kN * 4, cudaMemcpyHostToDevice));
        LAUNCH(copy_kernel, kN / 256, 256, 0, s)(out, in, kN);
        cudaCheck(cudaStreamSynchronize(s));
        EXPECT_EQ(to_host(out, kN)[0], 0.0f) << "the kernel must have read the buffer before the copy landed";
        EXPECT_EQ(to_host(in, kN)[0], 5.0f) << "the copy lands in the end";
    }
    v.assign(kN, 6.0f);
    cudaCheck(cudaMemcpy(in, v.data(), kN * 4, cudaMemcpyHostToDevice));
    cudaCheck(cudaDeviceSynchronize());  // the fix
    LAUNCH(copy_kernel, kN / 256, 256, 0, s)(out, in, kN);
    cudaCheck(cudaStreamSynchronize(s));
    EXPECT_EQ(to_host(out, kN)[0], 6.0f);
    float* pinned = nullptr;  // from pinned memory cudaMemcpy is synchronous
    cudaCheck(cudaMallocHost(&pinned, kN * 4));
    for (int i = 0; i < kN; i++) pinned[i] = 8.0f;
    cudaCheck(cudaMemcpy(in, pinned, kN * 4, cudaMemcpyHostToDevice));
    LAUNCH(copy_kernel, kN / 256, 256, 0, s)(out, in, kN);
    cudaCheck(cudaStreamSynchronize(s));
    EXPECT_EQ(to_host(out, kN)[0], 8.0f);
    cudaCheck(cudaFreeHost(pinned));
    cudaCheck(cudaStreamDestroy(s));
    cudaCheck(cudaFree(in));
    cudaCheck(cudaFree(out));
}

// ---- 4. subnormals ----

// 1e-20 * 1e-20 = 1e-40 is subnormal in fp32: flushed to 0 (FTZ); a subnormal input times 1 reads as 0 (DAZ).
// The host, without FTZ, gets non-zero for both.
TEST(FakeCuda, KernelsFlushSubnormalsToZero) {
    REQUIRE_DEVICE();
    volatile float tiny = 1e-20f, sub = 1e-40f, one = 1.0f;
    ASSERT_NE(tiny * tiny, 0.0f) << "the host itself flushes subnormals: this test cannot tell";
    ASSERT_NE(sub * one, 0.0f);
    const std::vector<float> a = {tiny, sub, 2.0f}, b = {tiny, one, 3.0f};
    float *da = device_floats(3, 0.0f), *db = device_floats(3, 0.0f), *dc = device_floats(3, -1.0f);
    cudaCheck(cudaMemcpy(da, a.data(), 12, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(db, b.data(), 12, cudaMemcpyHostToDevice));
    cudaCheck(cudaDeviceSynchronize());
    LAUNCH(mul_kernel, 1, 32, 0, 0)(dc, da, db, 3);
    cudaCheckLaunch();
    const std::vector<float> c = to_host(dc, 3);
    EXPECT_EQ(c[0], 0.0f) << "a subnormal result must be flushed to zero";
    EXPECT_EQ(c[1], 0.0f) << "a subnormal input must read as zero";
    EXPECT_EQ(c[2], 6.0f);
    ASSERT_NE(tiny * tiny, 0.0f) << "the host's mode must be restored after the kernel";
    cudaCheck(cudaFree(da));
    cudaCheck(cudaFree(db));
    cudaCheck(cudaFree(dc));
}

// Every lane's warp sum (float, double) and max through warp_sum / warp_max against the shuffles, bit for
// bit: the emulation's one exchange must compute each lane's result by the same tree in the same order
// (values of many magnitudes: another order of the sums changes the low bits). 4 blocks of 256 threads.
TEST(FakeCuda, WarpReductionsAreTheShufflesBits) {
    REQUIRE_DEVICE();
    const int n = 1024;
    std::vector<float> h((size_t)n);
    uint64_t seed = 12345;
    for (float& x : h) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x = ldexpf((float)((seed >> 40) & 0xffff) / 65536.0f - 0.5f, (int)((seed >> 20) % 24) - 12);
    }
    float* in = device_floats(n, 0.0f);
    cudaCheck(cudaMemcpy(in, h.data(), (size_t)n * 4, cudaMemcpyHostToDevice));
    float* out = device_floats(8 * n, -1.0f);
    double* out_d = nullptr;
    cudaCheck(cudaMalloc(&out_d, (size_t)n * 4 * sizeof(double)));
    LAUNCH(warp_reductions_kernel, n / 256, 256, 0, 0)(out, out_d, in);
    cudaCheckLaunch();
    const std::vector<float> r = to_host(out, 8 * n);
    std::vector<double> rd((size_t)n * 4);
    cudaCheck(cudaMemcpy(rd.data(), out_d, rd.size() * sizeof(double), cudaMemcpyDeviceToHost));
    int differ = 0, order_matters = 0;
    for (int i = 0; i < n; i++)
        for (int round = 0; round < 2; round++) {
            const float* o = &r[(size_t)(8 * i + 4 * round)];
            const double* d = &rd[(size_t)(4 * i + 2 * round)];
            differ +=
                memcmp(&o[0], &o[1], 4) != 0 || memcmp(&o[2], &o[3], 4) != 0 || memcmp(&d[0], &d[1], 8) != 0;
            float seq = 0.0f;  // the warp's values summed in lane order: another order than the shuffles'
            for (int l = i & ~31; l < (i & ~31) + 32; l++) seq += h[(size_t)l] * (round ? -3.0f : 1.0f);
            order_matters += seq != o[0];
        }
    EXPECT_EQ(differ, 0) << "threads whose warp_sum / warp_max differ from the shuffles'";
    EXPECT_GT(order_matters, 0) << "the values do not tell summation orders apart: this test cannot fail";
    cudaCheck(cudaFree(in));
    cudaCheck(cudaFree(out));
    cudaCheck(cudaFree(out_d));
}

// ---- 5. event timing ----

// Planted bugs: the elapsed time of an event never recorded, of one created without timing, of one whose work
// has not completed.
TEST(FakeCuda, ElapsedTimeNeedsRecordedCompletedTimingEvents) {
    REQUIRE_DEVICE();
    cudaEvent_t a, b, untimed;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    cudaCheck(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
    float ms = -1.0f;
    EXPECT_EQ(cudaEventElapsedTime(&ms, a, b), cudaErrorInvalidResourceHandle) << "never recorded";
    cudaGetLastError();
    float* d = device_floats(kN, 0.0f);
    cudaStream_t s = non_blocking_stream();
    cudaCheck(cudaEventRecord(a, s));
    LAUNCH(fill_kernel, kN / 256, 256, 0, s)(d, 1.0f, kN);
    cudaCheck(cudaEventRecord(b, s));
    cudaCheck(cudaEventRecord(untimed, s));
    const cudaError_t early = cudaEventElapsedTime(&ms, a, b);
    if (EMULATED) { EXPECT_EQ(early, cudaErrorNotReady) << "b's work has not completed"; }
    cudaGetLastError();
    cudaCheck(cudaStreamSynchronize(s));
    EXPECT_EQ(cudaEventElapsedTime(&ms, a, b), cudaSuccess);
    EXPECT_GE(ms, 0.0f);
    EXPECT_EQ(cudaEventElapsedTime(&ms, a, untimed), cudaErrorInvalidResourceHandle)
        << "created without timing";
    cudaGetLastError();
    cudaCheck(cudaEventDestroy(a));
    cudaCheck(cudaEventDestroy(b));
    cudaCheck(cudaEventDestroy(untimed));
    cudaCheck(cudaStreamDestroy(s));
    cudaCheck(cudaFree(d));
}

}  // namespace
