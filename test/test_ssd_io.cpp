// test_ssd_io.cpp — the SSD tier's direct I/O layer (llmc/ssd.h SsdIo) on both backends (io_uring,
// pread/pwrite threads): many chunks in flight, reads ahead of queued writes, urgent reads, bad requests as
// one error, the busy log, buffered files where O_DIRECT is refused. No timed assertions.
#include <fcntl.h>
#include <unistd.h>
#include <chrono>
#include <thread>
#include "llmc/ssd.h"
#include "ssd_test_common.h"  // defines: TempDir, pattern

// ============================================================================
// The I/O layer

class SsdIoTest : public ::testing::TestWithParam<int> {
};  // 0: io_uring (where the kernel has it), 1: fallback

static SsdIo* open_io(int fallback, int qd = 4, int64_t chunk = (int64_t)1 << 20) {
    SsdIoConfig c;
    memset(&c, 0, sizeof c);
    c.queue_depth = qd;
    c.chunk_bytes = chunk;
    c.force_fallback = fallback;
    c.quiet = 1;
    char err[1024] = "";
    SsdIo* io = ssd_io_open(&c, err, sizeof err);
    EXPECT_NE(io, nullptr) << err;
    return io;
}

TEST_P(SsdIoTest, ManyChunksInFlightRoundTrip) {
    TempDir d;
    SsdIo* io = open_io(GetParam());
    ASSERT_NE(io, nullptr);
    if (GetParam()) { EXPECT_STREQ(ssd_io_backend(io), "pread/pwrite threads"); }
    char err[1024] = "";
    SsdFile f;
    const int64_t bytes = ((int64_t)10 << 20) + 3 * 4096;  // 11 chunks, the last one short
    ASSERT_EQ(ssd_file_open(&f, (d.path + "/a").c_str(), 1, 2 * bytes, 1, err, sizeof err), 0) << err;
    const std::vector<uint8_t> want = pattern(bytes, 1);
    uint8_t* w = (uint8_t*)ssd_alloc(bytes);
    uint8_t* r = (uint8_t*)ssd_alloc(bytes);
    memcpy(w, want.data(), (size_t)bytes);
    // two writes in flight at once (one at offset 0, one behind it), then two reads
    const SsdReq a = ssd_io_submit(io, &f, 1, w, bytes, 0);
    const SsdReq b = ssd_io_submit(io, &f, 1, w, bytes, bytes);
    EXPECT_EQ(ssd_io_wait(io, b, err, sizeof err), 0) << err;
    EXPECT_EQ(ssd_io_wait(io, a, err, sizeof err), 0) << err;
    EXPECT_EQ(ssd_io_wait(io, a, err, sizeof err), -1);  // a request is waited for once
    for (int64_t base : {(int64_t)0, bytes}) {
        memset(r, 0, (size_t)bytes);
        const SsdReq q = ssd_io_submit(io, &f, 0, r, bytes, base);
        ASSERT_EQ(ssd_io_wait(io, q, err, sizeof err), 0) << err;
        EXPECT_EQ(memcmp(r, want.data(), (size_t)bytes), 0) << "at " << base;
    }
    int64_t rd = 0, wr = 0;
    ssd_io_counters(io, &rd, &wr);
    EXPECT_EQ(rd, 2 * bytes);
    EXPECT_EQ(wr, 2 * bytes);
    ssd_io_close(io);
    ssd_file_close(&f);
    ssd_free(w);
    ssd_free(r);
}

// The queue-order tests' set-up: one chunk of 1 MiB in flight, a file of 64 MiB + 2 MiB, a 64 MiB buffer
// (big, filled with 7s) and a 2 MiB one (small); all freed at the end.
struct OneChunkQueue {
    static constexpr int64_t kMiB = (int64_t)1 << 20, kBytes = 64 * kMiB;  // 64 chunks
    TempDir d;
    SsdIo* io = NULL;
    SsdFile f;
    uint8_t *big = NULL, *small = NULL;
    char err[1024] = "";
    explicit OneChunkQueue(int fallback) {
        f.fd = -1;
        io = open_io(fallback, 1);
        if (!io) return;
        if (ssd_file_open(&f, (d.path + "/a").c_str(), 1, kBytes + 2 * kMiB, 1, err, sizeof err) != 0) {
            ADD_FAILURE() << err;
            return;
        }
        big = (uint8_t*)ssd_alloc(kBytes);
        small = (uint8_t*)ssd_alloc(2 * kMiB);
        memset(big, 7, (size_t)kBytes);
    }
    bool ok() const { return io && f.fd >= 0; }
    ~OneChunkQueue() {
        if (io) ssd_io_close(io);  // waits for what is in flight first
        ssd_file_close(&f);
        ssd_free(big);
        ssd_free(small);
    }
};

// Reads go before queued writes (someone waits on a read; writes are write-behind): one chunk in flight, a
// write of 64 chunks, then a read: the read starts within the write's first chunks, not after all 64. In FIFO
// order it started 65th (and this failed).
TEST_P(SsdIoTest, ReadsOvertakeQueuedWrites) {
    OneChunkQueue q(GetParam());
    ASSERT_TRUE(q.ok());
    const SsdReq write = ssd_io_submit(q.io, &q.f, 1, q.big, q.kBytes, 0);
    const SsdReq read = ssd_io_submit(q.io, &q.f, 0, q.small, q.kMiB, q.kBytes);
    EXPECT_EQ(ssd_io_wait(q.io, read, q.err, sizeof q.err), 0) << q.err;
    EXPECT_EQ(ssd_io_wait(q.io, write, q.err, sizeof q.err), 0) << q.err;
    char order[4096];
    ASSERT_EQ(ssd_io_started_order(q.io, order, sizeof order), 65);
    const char* at = strchr(order, 'r');
    ASSERT_NE(at, nullptr);
    EXPECT_LT(at - order, 8) << "the read started as chunk " << at - order + 1 << " of 65: " << order;
}

// A read someone waits on now (ssd_io_submit_urgent: -sw 1's weights for the backward) starts ahead of the
// reads queued before it (the round's read-ahead, which -sb auto makes long), and urgent reads keep their own
// order.
TEST_P(SsdIoTest, UrgentReadsOvertakeQueuedReads) {
    OneChunkQueue q(GetParam());
    ASSERT_TRUE(q.ok());
    const int64_t bytes = q.kBytes, mib = q.kMiB;
    ssd_io_hold(q.io, 1);  // all three queued before any starts (a loaded machine's timing aside)
    const SsdReq readahead = ssd_io_submit(q.io, &q.f, 0, q.big, bytes, 0);
    const SsdReq first = ssd_io_submit_urgent(q.io, &q.f, q.small, mib, bytes);
    const SsdReq second = ssd_io_submit_urgent(q.io, &q.f, q.small + mib, mib, bytes + mib);
    ssd_io_hold(q.io, 0);
    EXPECT_EQ(ssd_io_wait(q.io, first, q.err, sizeof q.err), 0) << q.err;
    EXPECT_EQ(ssd_io_wait(q.io, second, q.err, sizeof q.err), 0) << q.err;
    EXPECT_EQ(ssd_io_wait(q.io, readahead, q.err, sizeof q.err), 0) << q.err;
    char order[4096];
    ASSERT_EQ(ssd_io_started_order(q.io, order, sizeof order), 66);
    const char* at = strchr(order, 'u');
    ASSERT_NE(at, nullptr) << order;
    EXPECT_EQ(at - order, 0) << "the urgent read started as chunk " << at - order + 1 << " of 66: " << order;
    EXPECT_EQ(at[1], 'u') << "the two urgent reads one after the other: " << order;
}

TEST_P(SsdIoTest, BadRequestsAreOneErrorNotACrash) {
    TempDir d;
    SsdIo* io = open_io(GetParam());
    ASSERT_NE(io, nullptr);
    char err[1024] = "";
    SsdFile f;
    ASSERT_EQ(ssd_file_open(&f, (d.path + "/a").c_str(), 1, 1 << 20, 1, err, sizeof err), 0) << err;
    uint8_t* buf = (uint8_t*)ssd_alloc(2 << 20);
    // beyond the end of the file
    EXPECT_EQ(ssd_io_wait(io, ssd_io_submit(io, &f, 0, buf, 8192, (1 << 20) - 4096), err, sizeof err), -1);
    EXPECT_NE(strstr(err, "bad request"), nullptr) << err;
    EXPECT_EQ(ssd_io_wait(io, ssd_io_submit(io, &f, 1, buf, 0, 0), err, sizeof err), -1);
    if (f.direct) {  // unaligned buffer / length / offset on an O_DIRECT file
        EXPECT_EQ(ssd_io_wait(io, ssd_io_submit(io, &f, 1, buf + 512, 4096, 0), err, sizeof err), -1);
        EXPECT_NE(strstr(err, "4096-aligned"), nullptr) << err;
        EXPECT_EQ(ssd_io_wait(io, ssd_io_submit(io, &f, 1, buf, 1000, 0), err, sizeof err), -1);
        EXPECT_EQ(ssd_io_wait(io, ssd_io_submit(io, &f, 1, buf, 4096, 100), err, sizeof err), -1);
    }
    // injected errors name the file and the errno; the fault is sticky until removed
    ssd_io_set_fault(io, 1, 1, ENOSPC,
                     0);  // the second 1 MiB chunk of a 2 MiB write fails: the request fails
    SsdFile big;
    ASSERT_EQ(ssd_file_open(&big, (d.path + "/c").c_str(), 1, 2 << 20, 1, err, sizeof err), 0) << err;
    EXPECT_EQ(ssd_io_wait(io, ssd_io_submit(io, &big, 1, buf, 2 << 20, 0), err, sizeof err), -1);
    EXPECT_NE(strstr(err, "offset 1048576"), nullptr) << err;
    ssd_file_close(&big);
    ssd_io_set_fault(io, 1, 0, ENOSPC, 0);
    EXPECT_EQ(ssd_io_wait(io, ssd_io_submit(io, &f, 1, buf, 4096, 0), err, sizeof err), -1);
    EXPECT_NE(strstr(err, strerror(ENOSPC)), nullptr) << err;
    EXPECT_NE(strstr(err, f.path), nullptr) << err;
    EXPECT_EQ(ssd_io_wait(io, ssd_io_submit(io, &f, 1, buf, 4096, 0), err, sizeof err), -1);
    ssd_io_set_fault(io, 1, 0, 0, 0);
    EXPECT_EQ(ssd_io_wait(io, ssd_io_submit(io, &f, 1, buf, 4096, 0), err, sizeof err), -1);
    EXPECT_NE(strstr(err, "short write"), nullptr) << err;
    ssd_io_set_fault(io, 1, -1, 0, 0);
    EXPECT_EQ(ssd_io_wait(io, ssd_io_submit(io, &f, 1, buf, 4096, 0), err, sizeof err), 0) << err;
    ssd_io_set_fault(io, 0, 0, EIO, 0);
    EXPECT_EQ(ssd_io_wait(io, ssd_io_submit(io, &f, 0, buf, 4096, 0), err, sizeof err), -1);
    EXPECT_NE(strstr(err, strerror(EIO)), nullptr) << err;
    ssd_io_set_fault(io, 0, -1, 0, 0);
    // a file that ends early: a short read, not garbage
    SsdFile g;
    ASSERT_EQ(ssd_file_open(&g, (d.path + "/b").c_str(), 1, 1 << 20, 1, err, sizeof err), 0) << err;
    ASSERT_EQ(ftruncate(g.fd, 8192), 0);
    EXPECT_EQ(ssd_io_wait(io, ssd_io_submit(io, &g, 0, buf, 1 << 20, 0), err, sizeof err), -1);
    EXPECT_NE(strstr(err, "short read"), nullptr) << err;
    ssd_io_close(io);
    ssd_file_close(&f);
    ssd_file_close(&g);
    ssd_free(buf);
}

// timeline.h's clock (timeline_now), which the busy log uses
static double steady_now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The busy log (the timeline's disk tracks): nothing while off; on, the union of the requests in flight per
// direction (two overlapping writes are one interval, writes after a pause another), cut at t_from, the
// closest neighbours joined beyond cap, and a ring that keeps the newest SSD_BUSY_LOG intervals.
TEST_P(SsdIoTest, BusyLogIsTheUnionOfRequestsInFlight) {
    TempDir d;
    SsdIo* io = open_io(GetParam(), 4, 4096);  // 4 KiB chunks: a request of several chunks
    ASSERT_NE(io, nullptr);
    char err[1024] = "";
    SsdFile f;
    const int64_t bytes = 256 << 10;  // 64 chunks: the first write is still in flight when the second comes
    ASSERT_EQ(ssd_file_open(&f, (d.path + "/a").c_str(), 1, 4 * bytes, 1, err, sizeof err), 0) << err;
    uint8_t* buf = (uint8_t*)ssd_alloc(2 * bytes);
    SsdBusySpan s[8];
    auto write_and_read = [&]() {  // two writes in flight at once, then one read
        const SsdReq a = ssd_io_submit(io, &f, 1, buf, bytes, 0);
        const SsdReq b = ssd_io_submit(io, &f, 1, buf + bytes, bytes, bytes);
        ASSERT_EQ(ssd_io_wait(io, a, err, sizeof err), 0) << err;
        ASSERT_EQ(ssd_io_wait(io, b, err, sizeof err), 0) << err;
        ASSERT_EQ(ssd_io_wait(io, ssd_io_submit(io, &f, 0, buf, 2 * bytes, 0), err, sizeof err), 0) << err;
    };
    const double t_start = steady_now();
    write_and_read();  // the log is off
    EXPECT_EQ(ssd_io_busy_spans(io, 1, 0.0, s, 8), 0);
    EXPECT_EQ(ssd_io_busy_spans(io, 0, 0.0, s, 8), 0);

    ssd_io_log_busy(io, 1);
    const double t0 = steady_now();
    write_and_read();
    const double t1 = steady_now();
    usleep(30000);
    const double t2 = steady_now();
    ASSERT_EQ(ssd_io_wait(io, ssd_io_submit(io, &f, 1, buf, bytes, 2 * bytes), err, sizeof err), 0) << err;
    const double t3 = steady_now();
    // writes: [t0, t1] then [t2, t3], one interval each; the read between them on its own track
    ASSERT_EQ(ssd_io_busy_spans(io, 1, t_start, s, 8), 2);
    EXPECT_GE(s[0].t0, t0);
    EXPECT_LT(s[0].t0, s[0].t1);
    EXPECT_LE(s[0].t1, t1);
    EXPECT_GE(s[1].t0, t2);
    EXPECT_LE(s[1].t1, t3);
    SsdBusySpan rd[8];
    ASSERT_EQ(ssd_io_busy_spans(io, 0, t_start, rd, 8), 1);
    EXPECT_GE(rd[0].t0, s[0].t1);  // the read was submitted after both writes completed
    EXPECT_LE(rd[0].t1, t1);
    // t_from: inside the first interval it cuts it; after it, only the second is left
    const double mid = (s[0].t0 + s[0].t1) / 2;
    SsdBusySpan c[8];
    ASSERT_EQ(ssd_io_busy_spans(io, 1, mid, c, 8), 2);
    EXPECT_EQ(c[0].t0, mid);
    EXPECT_EQ(c[0].t1, s[0].t1);
    ASSERT_EQ(ssd_io_busy_spans(io, 1, (t1 + t2) / 2, c, 8), 1);
    EXPECT_EQ(c[0].t0, s[1].t0);
    // more intervals than cap: the closest neighbours are joined (a 5 ms gap before a 30 ms one)
    usleep(5000);
    ASSERT_EQ(ssd_io_wait(io, ssd_io_submit(io, &f, 1, buf, bytes, 0), err, sizeof err), 0) << err;
    ASSERT_EQ(ssd_io_busy_spans(io, 1, t_start, c, 8), 3);
    ASSERT_EQ(ssd_io_busy_spans(io, 1, t_start, s, 2), 2);
    EXPECT_EQ(s[0].t0, c[0].t0);
    EXPECT_EQ(s[0].t1, c[0].t1);
    EXPECT_EQ(s[1].t0, c[1].t0);
    EXPECT_EQ(s[1].t1, c[2].t1);
    ASSERT_EQ(ssd_io_busy_spans(io, 1, t_start, s, 1), 1);
    EXPECT_EQ(s[0].t0, c[0].t0);
    EXPECT_EQ(s[0].t1, c[2].t1);

    // bounded: of SSD_BUSY_LOG + 10 writes one after the other (an interval each), the newest SSD_BUSY_LOG
    std::vector<double> submitted;
    for (int i = 0; i < SSD_BUSY_LOG + 10; i++) {
        submitted.push_back(steady_now());
        ASSERT_EQ(ssd_io_wait(io, ssd_io_submit(io, &f, 1, buf, 4096, 0), err, sizeof err), 0) << err;
    }
    std::vector<SsdBusySpan> all(2 * SSD_BUSY_LOG);
    ASSERT_EQ(ssd_io_busy_spans(io, 1, t_start, all.data(), (int)all.size()), SSD_BUSY_LOG);
    EXPECT_GE(all[0].t0, submitted[10]);
    for (int i = 1; i < SSD_BUSY_LOG; i++) ASSERT_GT(all[(size_t)i].t0, all[(size_t)i - 1].t1) << i;
    // off again: nothing more is logged
    ssd_io_log_busy(io, 0);
    const double t_off = steady_now();
    write_and_read();
    EXPECT_EQ(ssd_io_busy_spans(io, 1, t_off, s, 8), 0);
    EXPECT_EQ(ssd_io_busy_spans(io, 0, t_off, s, 8), 0);
    ssd_io_close(io);
    ssd_file_close(&f);
    ssd_free(buf);
}

INSTANTIATE_TEST_SUITE_P(Backends, SsdIoTest, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& i) {
                             return std::string(i.param ? "Fallback" : "IoUring");
                         });

TEST(SsdIo, BufferedFileWhereODirectIsRefused) {
    // SSD_NO_DIRECT=1 opens files as a filesystem that refuses O_DIRECT would (tmpfs before Linux 6.6): the
    // requests need no alignment then and still work. /dev/shm (tmpfs) where it exists, else $TMPDIR.
    TempDir d(access("/dev/shm", W_OK) == 0 ? "/dev/shm" : NULL);
    setenv("SSD_NO_DIRECT", "1", 1);
    char err[1024] = "";
    SsdFile f;
    const int rc = ssd_file_open(&f, (d.path + "/a").c_str(), 1, 1 << 20, 1, err, sizeof err);
    unsetenv("SSD_NO_DIRECT");
    ASSERT_EQ(rc, 0) << err;
    EXPECT_EQ(f.direct, 0);
    SsdIo* io = open_io(1);
    std::vector<uint8_t> want = pattern(10000, 3), got(10000);
    EXPECT_EQ(ssd_io_wait(io, ssd_io_submit(io, &f, 1, want.data(), 10000, 123), err, sizeof err), 0) << err;
    EXPECT_EQ(ssd_io_wait(io, ssd_io_submit(io, &f, 0, got.data(), 10000, 123), err, sizeof err), 0) << err;
    EXPECT_EQ(want, got);
    ssd_io_close(io);
    ssd_file_close(&f);
}
