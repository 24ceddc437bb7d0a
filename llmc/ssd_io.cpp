// ssd_io.cpp — the SSD tier's direct I/O (io_uring, else pread/pwrite threads), its files, the disk probe.
// Not here: the store and its round (ssd_store.cpp). ssd.h says what and why.
#include "llmc/ssd.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "llmc/utils.h"  // defines: SizeText

void* ssd_alloc(int64_t bytes) {
    if (bytes <= 0) bytes = SSD_ALIGN;
    void* p = NULL;
    if (posix_memalign(&p, SSD_ALIGN, (size_t)ssd_round_up(bytes, SSD_ALIGN)) != 0) return NULL;
    memset(p, 0, (size_t)ssd_round_up(bytes, SSD_ALIGN));
    return p;
}
void ssd_free(void* p) { free(p); }

// the steady clock in seconds, as timeline_now(): the busy log lines up with the timeline
static double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static bool env_is_1(const char* name) {
    const char* e = getenv(name);
    return e && strcmp(e, "1") == 0;
}

// ============================================================================
// Asynchronous direct I/O

namespace {
struct Chunk {
    SsdReq req;
    int fd, write;
    char* buf;
    int64_t bytes, off;
    const char* path;
    bool logged = false;  // its request is in the busy log
    double t_done = 0.0;  // when its transfer completed (logged only)
    bool urgent = false;  // a read someone waits on now (ssd_io_submit_urgent): ahead of the other reads
};
struct ReqState {
    int64_t chunks_left = 0;
    bool done = false;
    std::string msg;      // first error, empty if none
    bool logged = false;  // submitted while the busy log was on
    int write = 0;
    double t_done = 0.0;  // its last chunk's completion (the latest of its chunks')
};
// One direction's busy intervals (ssd_io_log_busy): a ring of closed ones and the open one.
struct BusyLog {
    std::vector<SsdBusySpan> ring;  // SSD_BUSY_LOG entries once the log is on
    int64_t head = 0, count = 0;    // the oldest at head
    int inflight = 0;               // logged requests in flight
    SsdBusySpan open = {0.0, 0.0};  // while inflight > 0: its start, the latest completion so far
};
}  // namespace

struct SsdIo {
    std::mutex mu;
    std::condition_variable cv_done, cv_work;
    std::deque<Chunk*> pending[2];  // [write]: reads go first (next_chunk), each direction in order
    int64_t urgent_queued = 0;      // pending[0]'s first urgent_queued chunks are urgent reads
    bool held = false;              // test hook (ssd_io_hold): queue, start nothing
    int inflight_dir[2] = {0, 0};
    std::string order;  // the first chunks' directions as started, 'r' / 'w' (ssd_io_started_order)
    std::unordered_map<SsdReq, ReqState> reqs;
    SsdReq next_id = 1;
    int qd = 16;
    int64_t chunk = (int64_t)4 << 20;
    int inflight = 0;
    bool quit = false;
    bool uring = false;
    struct io_uring ring;
    std::thread reaper;
    std::vector<std::thread> workers;
    int64_t fault_after[2] = {-1, -1};
    int fault_err[2] = {0, 0}, fault_kill[2] = {0, 0};
    std::atomic<int64_t> bytes_read{0}, bytes_written{0};
    bool log_on = false;
    BusyLog busy[2];  // [write]
};

// ---- the busy log

// Under io->mu: a closed interval into the ring (merged into the newest one where they touch).
static void busy_push(BusyLog* b, SsdBusySpan s) {
    const int64_t cap = (int64_t)b->ring.size();
    if (b->count > 0) {
        SsdBusySpan& last = b->ring[(size_t)((b->head + b->count - 1) % cap)];
        if (s.t0 <= last.t1) {
            last.t1 = std::max(last.t1, s.t1);
            return;
        }
    }
    if (b->count == cap) {  // full: the oldest goes
        b->head = (b->head + 1) % cap;
        b->count--;
    }
    b->ring[(size_t)((b->head + b->count) % cap)] = s;
    b->count++;
}

// Under io->mu: a logged request starts (t: its submit time) or ends (its last chunk's completion).
static void busy_begin(SsdIo* io, int write, double t) {
    BusyLog* b = &io->busy[write];
    if (b->inflight++ == 0) b->open = {t, t};
}
static void busy_end(SsdIo* io, int write, double t) {
    BusyLog* b = &io->busy[write];
    b->open.t1 = std::max(b->open.t1, t);
    if (--b->inflight == 0) busy_push(b, b->open);
}

void ssd_io_log_busy(SsdIo* io, int on) {
    std::lock_guard<std::mutex> lock(io->mu);
    for (BusyLog& b : io->busy)
        if (on && b.ring.empty()) b.ring.resize(SSD_BUSY_LOG);
    io->log_on = on != 0;
}

int ssd_io_busy_spans(SsdIo* io, int write, double t_from, SsdBusySpan* out, int cap) {
    if (cap < 1) return 0;
    std::vector<SsdBusySpan> v;
    {
        std::lock_guard<std::mutex> lock(io->mu);
        const BusyLog* b = &io->busy[write ? 1 : 0];
        for (int64_t i = 0; i < b->count; i++) {
            const SsdBusySpan& s = b->ring[(size_t)((b->head + i) % (int64_t)b->ring.size())];
            if (s.t1 > t_from) v.push_back(s);
        }
        if (b->inflight > 0) v.push_back({b->open.t0, std::max(b->open.t1, now_s())});
    }
    if (!v.empty()) v[0].t0 = std::max(v[0].t0, t_from);
    // too many: join the n - cap smallest gaps between neighbours (ties: the earlier gap)
    const size_t n = v.size();
    if (n > (size_t)cap) {
        std::vector<size_t> gaps(n - 1);
        for (size_t i = 0; i + 1 < n; i++) gaps[i] = i;
        auto gap = [&v](size_t i) { return v[i + 1].t0 - v[i].t1; };
        std::stable_sort(gaps.begin(), gaps.end(), [&](size_t a, size_t b) { return gap(a) < gap(b); });
        std::vector<char> join(n - 1, 0);
        for (size_t k = 0; k < n - (size_t)cap; k++) join[gaps[k]] = 1;
        std::vector<SsdBusySpan> w;
        for (size_t i = 0; i < n; i++) {
            if (i > 0 && join[i - 1]) w.back().t1 = v[i].t1;
            else w.push_back(v[i]);
        }
        v.swap(w);
    }
    for (size_t i = 0; i < v.size(); i++) out[i] = v[i];
    return (int)v.size();
}

static void chunk_message(const Chunk* c, int err, char* out, size_t outlen) {
    if (err)
        snprintf(out, outlen, "cannot %s %.600s at offset %lld (%lld bytes): %s", c->write ? "write" : "read",
                 c->path, (long long)c->off, (long long)c->bytes, strerror(err));
    else if (c->write)
        snprintf(out, outlen, "short write to %.600s at offset %lld: 0 of %lld bytes written (disk full?)",
                 c->path, (long long)c->off, (long long)c->bytes);
    else
        snprintf(out, outlen, "short read from %.600s at offset %lld: 0 of %lld bytes (the file ends early)",
                 c->path, (long long)c->off, (long long)c->bytes);
}

// Under io->mu. Completes chunk c (err < 0: -errno; err == 1: a zero-byte transfer; 0: ok) and frees it.
static void complete_chunk(SsdIo* io, Chunk* c, int err) {
    ReqState& r = io->reqs[c->req];
    if (err != 0 && r.msg.empty()) {
        char m[1024];
        chunk_message(c, err < 0 ? -err : 0, m, sizeof m);
        r.msg = m;
    }
    if (r.logged) r.t_done = std::max(r.t_done, c->t_done);
    if (--r.chunks_left == 0) {
        r.done = true;
        if (r.logged) busy_end(io, r.write, r.t_done);
        io->cv_done.notify_all();
    }
    delete c;
}

// Under io->mu, before a chunk starts: 0 when the test fault took it, else 1.
static int fault_check(SsdIo* io, Chunk* c) {
    const int k = c->write ? 1 : 0;
    if (io->fault_after[k] < 0) return 1;
    if (io->fault_after[k] > 0) {
        io->fault_after[k]--;
        return 1;
    }
    if (io->fault_kill[k]) kill(getpid(), SIGKILL);
    if (c->logged) c->t_done = now_s();
    complete_chunk(io, c, io->fault_err[k] ? -io->fault_err[k] : 1);
    return 0;
}

// Under io->mu: the result of one transfer of chunk c (res: bytes, or -errno).
static void transfer_result(SsdIo* io, Chunk* c, int64_t res) {
    if (res < 0) {
        complete_chunk(io, c, (int)res);
        return;
    }
    if (res == 0) {
        complete_chunk(io, c, 1);
        return;
    }
    (c->write ? io->bytes_written : io->bytes_read) += res;
    if (res < c->bytes) {  // a short transfer: the rest goes again, first
        c->buf += res;
        c->off += res;
        c->bytes -= res;
        io->pending[c->write].push_front(c);
        if (c->urgent) io->urgent_queued++;
        return;
    }
    complete_chunk(io, c, 0);
}

static bool nothing_pending(const SsdIo* io) { return io->pending[0].empty() && io->pending[1].empty(); }

// Under io->mu: the chunk to start next, or NULL. Reads first: a read is what someone waits on (the next
// layer's state, -sw 1's weights), a write is behind it (write-behind); among reads, the urgent ones
// (ssd_io_submit_urgent: waited on now) ahead of the read-ahead. While writes wait, reads take at most
// qd - 2 of the queue's places, so writes keep moving. Within a direction, the order of submission.
static Chunk* next_chunk(SsdIo* io) {
    const bool reads = !io->pending[0].empty(), writes = !io->pending[1].empty();
    const int k = reads && (!writes || io->inflight_dir[0] < std::max(1, io->qd - 2)) ? 0 : writes ? 1 : -1;
    if (k < 0) return NULL;
    Chunk* c = io->pending[k].front();
    io->pending[k].pop_front();
    if (k == 0 && io->urgent_queued > 0) io->urgent_queued--;
    return c;
}
static void started(SsdIo* io, Chunk* c) {
    io->inflight++;
    io->inflight_dir[c->write]++;
    if (io->order.size() < 4096) io->order += c->write ? 'w' : c->urgent ? 'u' : 'r';
}
static void finished(SsdIo* io, Chunk* c) {
    io->inflight--;
    io->inflight_dir[c->write]--;
}

// Under io->mu: start pending chunks while the ring has room.
static void uring_pump(SsdIo* io) {
    int queued = 0;
    while (!io->held && io->inflight < io->qd && !nothing_pending(io)) {
        Chunk* c = next_chunk(io);
        if (!fault_check(io, c)) continue;
        struct io_uring_sqe* sqe = io_uring_get_sqe(&io->ring);
        if (!sqe) {
            io->pending[c->write].push_front(c);
            if (c->urgent) io->urgent_queued++;
            break;
        }
        if (c->write) io_uring_prep_write(sqe, c->fd, c->buf, (unsigned)c->bytes, (uint64_t)c->off);
        else io_uring_prep_read(sqe, c->fd, c->buf, (unsigned)c->bytes, (uint64_t)c->off);
        io_uring_sqe_set_data(sqe, c);
        started(io, c);
        queued++;
    }
    if (queued == 0) return;
    for (int tries = 0;; tries++) {
        const int r = io_uring_submit(&io->ring);
        if (r >= 0) break;
        if ((r == -EINTR || r == -EAGAIN || r == -EBUSY) && tries < 1000) {
            usleep(100);
            continue;
        }
        fprintf(stderr, "ssd: io_uring_submit failed: %s\n",
                strerror(-r));  // the entries stay queued in the ring
        break;
    }
}

static void uring_reaper(SsdIo* io) {
    for (;;) {
        struct io_uring_cqe* cqe = NULL;
        const int r = io_uring_wait_cqe(&io->ring, &cqe);
        if (r == -EINTR || r == -EAGAIN) continue;
        if (r < 0) {
            fprintf(stderr, "ssd: io_uring_wait_cqe failed: %s\n", strerror(-r));
            usleep(1000);
            continue;
        }
        Chunk* c = (Chunk*)io_uring_cqe_get_data(cqe);
        const int res = cqe->res;
        io_uring_cqe_seen(&io->ring, cqe);
        // the busy log's completion time: when this thread reaps the entry
        if (c && c->logged) c->t_done = now_s();
        std::lock_guard<std::mutex> lock(io->mu);
        if (!c) {  // the wake-up NOP of ssd_io_close
            if (io->quit) return;
            continue;
        }
        finished(io, c);
        transfer_result(io, c, res);
        uring_pump(io);
    }
}

static void fallback_worker(SsdIo* io) {
    std::unique_lock<std::mutex> lock(io->mu);
    for (;;) {
        io->cv_work.wait(lock, [io] { return io->quit || (!io->held && !nothing_pending(io)); });
        if (nothing_pending(io)) return;  // quit
        Chunk* c = next_chunk(io);
        if (!fault_check(io, c)) continue;
        started(io, c);
        lock.unlock();
        int64_t res;
        for (;;) {
            const ssize_t n = c->write ? pwrite(c->fd, c->buf, (size_t)c->bytes, (off_t)c->off)
                                       : pread(c->fd, c->buf, (size_t)c->bytes, (off_t)c->off);
            if (n < 0 && errno == EINTR) continue;
            res = n < 0 ? -(int64_t)errno : (int64_t)n;
            break;
        }
        if (c->logged) c->t_done = now_s();  // the busy log's completion time: exact here
        lock.lock();
        finished(io, c);
        transfer_result(io, c, res);  // a short transfer goes back to the queue
        if (!nothing_pending(io)) io->cv_work.notify_one();
    }
}

SsdIo* ssd_io_open(const SsdIoConfig* cfg, char* err, size_t errlen) {
    SsdIoConfig c = cfg ? *cfg : SsdIoConfig{};
    if (c.queue_depth < 0 || c.chunk_bytes < 0 || c.fallback_threads < 0 || c.chunk_bytes % SSD_ALIGN != 0 ||
        c.chunk_bytes > ((int64_t)1 << 30)) {
        snprintf(err, errlen,
                 "bad SSD I/O settings: queue depth %d, chunk %lld bytes (a multiple of 4096 up to 1 GiB)",
                 c.queue_depth, (long long)c.chunk_bytes);
        return NULL;
    }
    SsdIo* io = new SsdIo();
    io->qd = c.queue_depth > 0 ? c.queue_depth : 16;
    io->chunk = c.chunk_bytes > 0 ? c.chunk_bytes : ((int64_t)4 << 20);
    const bool force = c.force_fallback || env_is_1("SSD_IO_FALLBACK");
    if (!force) {
        const int r = io_uring_queue_init((unsigned)io->qd + 1, &io->ring, 0);  // + 1: room for the close NOP
        if (r == 0) {
            io->uring = true;
        } else if (!c.quiet) {
            fprintf(stderr, "warning: io_uring unavailable (%s): the SSD tier uses pread/pwrite threads\n",
                    strerror(-r));
        }
    }
    if (io->uring) {
        io->reaper = std::thread(uring_reaper, io);
    } else {
        const int t = c.fallback_threads > 0 ? c.fallback_threads
                                             : io->qd;  // as many transfers in flight as io_uring would have
        for (int i = 0; i < t; i++) io->workers.emplace_back(fallback_worker, io);
    }
    return io;
}

void ssd_io_close(SsdIo* io) {
    if (!io) return;
    {
        std::unique_lock<std::mutex> lock(io->mu);
        if (io->held) {  // a test's hold left on: what is queued still runs
            io->held = false;
            if (io->uring) uring_pump(io);
            else io->cv_work.notify_all();
        }
        io->cv_done.wait(lock, [io] { return io->inflight == 0 && nothing_pending(io); });
        io->quit = true;
        if (io->uring) {
            struct io_uring_sqe* sqe = io_uring_get_sqe(&io->ring);
            io_uring_prep_nop(sqe);
            io_uring_sqe_set_data(sqe, NULL);
            io_uring_submit(&io->ring);
        }
        io->cv_work.notify_all();
    }
    if (io->uring) {
        io->reaper.join();
        io_uring_queue_exit(&io->ring);
    }
    for (auto& t : io->workers) t.join();
    delete io;
}

const char* ssd_io_backend(const SsdIo* io) { return io->uring ? "io_uring" : "pread/pwrite threads"; }

SsdReq ssd_io_fail(SsdIo* io, const char* msg) {
    std::lock_guard<std::mutex> lock(io->mu);
    const SsdReq id = io->next_id++;
    ReqState& r = io->reqs[id];
    r.done = true;
    r.msg = msg;
    return id;
}

static SsdReq submit(SsdIo* io, const SsdFile* f, int write, void* buf, int64_t bytes, int64_t offset,
                     bool urgent) {
    char msg[1024];
    if (bytes <= 0 || offset < 0 || offset > f->size - bytes) {
        snprintf(msg, sizeof msg, "bad request on %.600s: %lld bytes at offset %lld of a %lld-byte file",
                 f->path, (long long)bytes, (long long)offset, (long long)f->size);
        return ssd_io_fail(io, msg);
    }
    if (f->direct &&
        (((uintptr_t)buf % SSD_ALIGN) != 0 || bytes % SSD_ALIGN != 0 || offset % SSD_ALIGN != 0)) {
        snprintf(msg, sizeof msg,
                 "bad request on %.600s: O_DIRECT needs 4096-aligned buffer, length and offset "
                 "(%lld bytes at offset %lld)",
                 f->path, (long long)bytes, (long long)offset);
        return ssd_io_fail(io, msg);
    }
    std::lock_guard<std::mutex> lock(io->mu);
    const SsdReq id = io->next_id++;
    ReqState& r = io->reqs[id];
    r.chunks_left = (bytes + io->chunk - 1) / io->chunk;
    if (io->log_on) {
        r.logged = true;
        r.write = write ? 1 : 0;
        busy_begin(io, r.write, now_s());
    }
    for (int64_t done = 0; done < bytes; done += io->chunk) {
        Chunk* c = new Chunk{id,
                             f->fd,
                             write ? 1 : 0,
                             (char*)buf + done,
                             bytes - done < io->chunk ? bytes - done : io->chunk,
                             offset + done,
                             f->path,
                             r.logged};
        c->urgent = urgent && !write;
        if (c->urgent)  // after the urgent reads queued before it, ahead of every other read
            io->pending[0].insert(io->pending[0].begin() +
                                      std::min<int64_t>(io->urgent_queued++, (int64_t)io->pending[0].size()),
                                  c);
        else io->pending[c->write].push_back(c);
    }
    if (io->uring) uring_pump(io);
    else io->cv_work.notify_all();
    return id;
}
SsdReq ssd_io_submit(SsdIo* io, const SsdFile* f, int write, void* buf, int64_t bytes, int64_t offset) {
    return submit(io, f, write, buf, bytes, offset, false);
}
SsdReq ssd_io_submit_urgent(SsdIo* io, const SsdFile* f, void* buf, int64_t bytes, int64_t offset) {
    return submit(io, f, 0, buf, bytes, offset, true);
}

int ssd_io_wait(SsdIo* io, SsdReq r, char* err, size_t errlen) {
    std::unique_lock<std::mutex> lock(io->mu);
    auto it = io->reqs.find(r);
    if (it == io->reqs.end()) {
        snprintf(err, errlen, "internal error: SSD request %lld is unknown or was waited for already",
                 (long long)r);
        return -1;
    }
    ReqState* s = &it->second;  // pointers to elements stay valid when the map rehashes
    io->cv_done.wait(lock, [s] { return s->done; });
    const int rc = s->msg.empty() ? 0 : -1;
    if (rc) snprintf(err, errlen, "%s", s->msg.c_str());
    io->reqs.erase(r);
    return rc;
}

int ssd_io_started_order(SsdIo* io, char* out, int cap) {
    std::lock_guard<std::mutex> lock(io->mu);
    const int n = std::min<int>(cap - 1, (int)io->order.size());
    memcpy(out, io->order.data(), (size_t)n);
    out[n] = 0;
    return n;
}

int ssd_io_poll(SsdIo* io, SsdReq r) {
    std::lock_guard<std::mutex> lock(io->mu);
    auto it = io->reqs.find(r);
    return it == io->reqs.end() || it->second.done;
}

void ssd_io_hold(SsdIo* io, int hold) {
    std::lock_guard<std::mutex> lock(io->mu);
    io->held = hold != 0;
    if (io->held) return;
    if (io->uring) uring_pump(io);
    else io->cv_work.notify_all();
}

void ssd_io_set_fault(SsdIo* io, int write, int64_t after, int err, int kill_it) {
    std::lock_guard<std::mutex> lock(io->mu);
    const int k = write ? 1 : 0;
    io->fault_after[k] = after;
    io->fault_err[k] = err;
    io->fault_kill[k] = kill_it;
}

int ssd_io_fault_take(SsdIo* io, int write) {
    std::lock_guard<std::mutex> lock(io->mu);
    const int k = write ? 1 : 0;
    if (io->fault_after[k] < 0) return 0;
    if (io->fault_after[k] > 0) {
        io->fault_after[k]--;
        return 0;
    }
    if (io->fault_kill[k]) kill(getpid(), SIGKILL);
    return io->fault_err[k] ? io->fault_err[k] : -1;
}

void ssd_io_counters(const SsdIo* io, int64_t* bytes_read, int64_t* bytes_written) {
    if (bytes_read) *bytes_read = io->bytes_read.load();
    if (bytes_written) *bytes_written = io->bytes_written.load();
}

// ---- files

static std::atomic<int> g_warned_direct{0};

// An opened file that exists: a regular one, blocking, its size in f.
static int adopt_existing(SsdFile* f, const char* path, char* err, size_t errlen) {
    struct stat st;
    const bool stat_ok = fstat(f->fd, &st) == 0;
    const int fl = stat_ok && S_ISREG(st.st_mode) ? fcntl(f->fd, F_GETFL) : -1;
    // blocking again: io_uring would answer EAGAIN on an O_NONBLOCK file instead of waiting
    if (!stat_ok || !S_ISREG(st.st_mode) || fl == -1 || fcntl(f->fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        if (stat_ok && !S_ISREG(st.st_mode)) snprintf(err, errlen, "%.600s is not a regular file", path);
        else snprintf(err, errlen, "cannot stat %.600s: %s", path, strerror(errno));
        close(f->fd);
        f->fd = -1;
        return -1;
    }
    f->size = (int64_t)st.st_size;
    return 0;
}

// f empty, named path: 0, or -1 with err (a path too long).
static int name_file(SsdFile* f, const char* path, char* err, size_t errlen) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    if (strlen(path) >= sizeof f->path) {
        snprintf(err, errlen, "path too long: %.200s...", path);
        return -1;
    }
    snprintf(f->path, sizeof f->path, "%s", path);
    return 0;
}

int ssd_file_open(SsdFile* f, const char* path, int create, int64_t size, int quiet, char* err,
                  size_t errlen) {
    if (name_file(f, path, err, errlen) != 0) return -1;
    // O_NOFOLLOW: a symlink is never followed (create: O_EXCL too).
    // open: O_NONBLOCK, so a FIFO cannot hang it.
    const int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT | O_EXCL : O_NONBLOCK);
    const bool want_direct = !env_is_1("SSD_NO_DIRECT");
    int fd = -1;
    if (create && unlink(path) != 0 && errno != ENOENT) {  // (an immutable file: EPERM, not O_EXCL's EEXIST)
        snprintf(err, errlen, "cannot remove %.600s to make it again: %s", path, strerror(errno));
        return -1;
    }
    if (want_direct) {
        fd = open(path, flags | O_DIRECT, 0644);
        if (fd >= 0) f->direct = 1;
        else if (errno != EINVAL) {
            snprintf(err, errlen, "cannot open %.600s: %s", path, strerror(errno));
            return -1;
        }
    }
    if (fd < 0) {
        if (create) unlink(path);  // a filesystem may create the file, then refuse O_DIRECT
        fd = open(path, flags, 0644);
        if (fd < 0) {
            snprintf(err, errlen, "cannot open %.600s: %s", path, strerror(errno));
            return -1;
        }
        if (want_direct && !quiet && g_warned_direct.fetch_add(1) == 0)
            fprintf(stderr,
                    "warning: the filesystem of %s refuses O_DIRECT: the SSD tier uses buffered I/O (page "
                    "cache)\n",
                    path);
    }
    f->fd = fd;
    if (create) {
        if (size > 0) {
            int r = fallocate(fd, 0, 0, (off_t)size) == 0 ? 0 : errno;
            if (r == EOPNOTSUPP || r == ENOSYS) r = ftruncate(fd, (off_t)size) == 0 ? 0 : errno;
            if (r != 0) {
                struct statvfs sv;
                const double avail =
                    fstatvfs(fd, &sv) == 0 ? (double)sv.f_bavail * (double)sv.f_frsize : -1.0;
                if (r == ENOSPC)
                    snprintf(err, errlen,
                             "not enough space for %.600s: it needs %s, the filesystem has %s free", path,
                             SizeText((double)size).s, SizeText(avail).s);
                else
                    snprintf(err, errlen, "cannot allocate %s for %.600s: %s", SizeText((double)size).s, path,
                             strerror(r));
                close(fd);
                unlink(path);
                f->fd = -1;
                return -1;
            }
        }
        f->size = size;
        return 0;
    }
    return adopt_existing(f, path, err, errlen);
}

int ssd_file_open_cached(SsdFile* f, const char* path, char* err, size_t errlen) {
    if (name_file(f, path, err, errlen) != 0) return -1;
    f->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (f->fd < 0) {
        snprintf(err, errlen, "cannot open %.600s: %s", path, strerror(errno));
        return -1;
    }
    return adopt_existing(f, path, err, errlen);
}

int ssd_file_buffered(SsdFile* f, char* err, size_t errlen) {
    const int flags = fcntl(f->fd, F_GETFL);
    if (flags < 0 || fcntl(f->fd, F_SETFL, flags & ~O_DIRECT) != 0) {
        snprintf(err, errlen, "cannot turn O_DIRECT off on %.600s: %s", f->path, strerror(errno));
        return -1;
    }
    f->direct = 0;
    return 0;
}

void ssd_file_close(SsdFile* f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
}

int ssd_file_sync(SsdFile* f, char* err, size_t errlen) {
    if (fsync(f->fd) != 0) {
        snprintf(err, errlen, "cannot fsync %.600s: %s", f->path, strerror(errno));
        return -1;
    }
    return 0;
}

// ============================================================================
// Bandwidth probe

// A probe's data: xorshift bytes, incompressible (some devices compress zeros).
static void fill_incompressible(char* p, int64_t bytes) {
    uint64_t x = 88172645463325252ull;
    for (int64_t i = 0; i < bytes / 8; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i * 8, &x, 8);
    }
}

int ssd_probe_bandwidth(const char* dir, double seconds, int64_t max_bytes, double* read_bps,
                        double* write_bps, int* direct, char* err, size_t errlen) {
    int64_t size = max_bytes > 0 ? max_bytes : ((int64_t)1 << 30);
    // 64 MiB requests; a small probe (tests) uses a quarter of it
    const int64_t block =
        size >= ((int64_t)256 << 20) ? (int64_t)64 << 20 : std::max<int64_t>(size / 4 >> 20, 1) << 20;
    struct statvfs sv;
    if (statvfs(dir, &sv) != 0) {
        snprintf(err, errlen, "cannot measure the disk of %.600s: %s", dir, strerror(errno));
        return -1;
    }
    const int64_t avail = (int64_t)sv.f_bavail * (int64_t)sv.f_frsize;
    if (size > avail / 4) size = avail / 4;
    size = size / block * block;
    if (size < block) {
        snprintf(err, errlen, "cannot measure the disk of %.600s: %s free, the probe needs 4 x %s", dir,
                 SizeText((double)avail).s, SizeText((double)block).s);
        return -1;
    }
    // a name of this process's (a plan's probe beside a run's), gone from DIR once open: nothing is left
    // behind, even by a probe that is killed
    const std::string path = std::string(dir) + "/ssd_probe." + std::to_string((long)getpid()) + ".tmp";
    SsdFile f;
    if (ssd_file_open(&f, path.c_str(), 1, size, 0, err, errlen) != 0) return -1;
    unlink(path.c_str());
    SsdIoConfig ioc;
    memset(&ioc, 0, sizeof ioc);
    ioc.queue_depth = 16;
    SsdIo* io = ssd_io_open(&ioc, err, errlen);
    char* buf[2] = {(char*)ssd_alloc(block), (char*)ssd_alloc(block)};
    int rc = 0;
    if (!io || !buf[0] || !buf[1]) {
        if (io) snprintf(err, errlen, "out of memory for the disk probe");
        rc = -1;
    } else {
        fill_incompressible(buf[0], block);
        memcpy(buf[1], buf[0], (size_t)block);
        for (int write = 1; write >= 0 && rc == 0; write--) {
            // two blocks in flight; at least one pass over the file (the read pass then reads written data)
            const double t0 = now_s();
            int64_t moved = 0, off = 0;
            SsdReq inflight[2] = {0, 0};
            for (int64_t k = 0;; k++) {
                const int b = (int)(k & 1);
                if (inflight[b] && ssd_io_wait(io, inflight[b], err, errlen) != 0) {
                    rc = -1;
                    inflight[b] = 0;
                    break;
                }
                inflight[b] = 0;
                if ((moved >= size && now_s() - t0 >= seconds / 2) || moved >= size * 64) break;
                inflight[b] = ssd_io_submit(io, &f, write, buf[b], block, off);
                moved += block;
                off = (off + block) % size;
            }
            for (int b = 0; b < 2; b++) {
                char e2[256];
                if (inflight[b] && ssd_io_wait(io, inflight[b], e2, sizeof e2) != 0 && rc == 0) {
                    rc = -1;
                    snprintf(err, errlen, "%s", e2);
                }
            }
            if (rc == 0 && write && ssd_file_sync(&f, err, errlen) != 0) rc = -1;
            const double dt = now_s() - t0;
            if (write) *write_bps = moved / dt;
            else *read_bps = moved / dt;
        }
    }
    *direct = f.direct;
    if (io) ssd_io_close(io);
    ssd_free(buf[0]);
    ssd_free(buf[1]);
    ssd_file_close(&f);
    unlink(path.c_str());
    return rc;
}

// ---- ssd_probe_rates (ssd.h)

namespace {
// A stream of `block` requests over a file, two in flight, wrapping around: one phase's reads or writes.
struct ProbeStream {
    const SsdFile* f = NULL;
    int write = 0;
    char* buf[2] = {NULL, NULL};
    SsdReq req[2] = {0, 0};
    int64_t block = 0, size = 0, off = 0, moved = 0;
    bool on = false;
};
// Waits for slot b's request (if any), then issues the next. -1 on an I/O error.
int probe_step(SsdIo* io, ProbeStream* p, int b, bool issue, char* err, size_t errlen) {
    if (p->req[b]) {
        const int rc = ssd_io_wait(io, p->req[b], err, errlen);
        p->req[b] = 0;
        if (rc != 0) return -1;
        p->moved += p->block;
    }
    if (!issue) return 0;
    p->req[b] = ssd_io_submit(io, p->f, p->write, p->buf[b], p->block, p->off);
    p->off = (p->off + p->block) % p->size;
    return 0;
}
// Runs the streams together for about `seconds` (at least one block each), each at its own pace (a slot is
// refilled as soon as its request completes); bytes/s of each into bps.
int probe_phase(SsdIo* io, ProbeStream* const* s, int n, double seconds, double* bps, char* err,
                size_t errlen) {
    const double t0 = now_s();
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        for (int b = 0; b < 2 && rc == 0; b++) rc = probe_step(io, s[i], b, true, err, errlen);
    while (rc == 0 && now_s() - t0 < seconds) {
        bool moved = false;
        for (int i = 0; i < n && rc == 0; i++)
            for (int b = 0; b < 2 && rc == 0; b++)
                if (s[i]->req[b] && ssd_io_poll(io, s[i]->req[b])) {
                    rc = probe_step(io, s[i], b, true, err, errlen);
                    moved = true;
                }
        if (!moved) usleep(100);
    }
    for (int i = 0; i < n; i++)  // drain what is left, errors included
        for (int b = 0; b < 2; b++) {
            char e2[256];
            if (probe_step(io, s[i], b, false, e2, sizeof e2) != 0 && rc == 0) {
                rc = -1;
                snprintf(err, errlen, "%s", e2);
            }
        }
    const double dt = now_s() - t0;
    for (int i = 0; i < n; i++) bps[i] = s[i]->moved / dt;
    return rc;
}
}  // namespace

int ssd_probe_rates(const char* dir, double seconds, int64_t max_bytes, int queue_depth, SsdRates* out,
                    char* err, size_t errlen) {
    memset(out, 0, sizeof *out);
    struct statvfs sv;
    if (statvfs(dir, &sv) != 0) {
        snprintf(err, errlen, "cannot measure the disk of %.600s: %s", dir, strerror(errno));
        return -1;
    }
    const int64_t avail = (int64_t)sv.f_bavail * (int64_t)sv.f_frsize;
    int64_t size = std::min<int64_t>(max_bytes > 0 ? max_bytes : (int64_t)4 << 30, avail / 8);
    // 64 MiB requests (a piece: the round's); a small probe (tests) a quarter of its file
    const int64_t block =
        size >= ((int64_t)256 << 20) ? (int64_t)64 << 20 : std::max<int64_t>(size / 4 >> 20, 1) << 20;
    size = size / block * block;
    if (size < 2 * block) {
        snprintf(err, errlen, "cannot measure the disk of %.600s: %s free, the probe needs 16 x %s", dir,
                 SizeText((double)avail).s, SizeText((double)block).s);
        return -1;
    }
    const std::string rpath = std::string(dir) + "/ssd_rates_r.tmp",
                      wpath = std::string(dir) + "/ssd_rates_w.tmp";
    SsdFile fr, fw;
    memset(&fr, 0, sizeof fr);
    memset(&fw, 0, sizeof fw);
    fr.fd = fw.fd = -1;
    SsdIoConfig ioc;
    memset(&ioc, 0, sizeof ioc);
    ioc.queue_depth = queue_depth;
    SsdIo* io = NULL;
    char* bufs[4] = {NULL, NULL, NULL, NULL};
    int rc = 0;
    if (ssd_file_open(&fr, rpath.c_str(), 1, size, 0, err, errlen) != 0 ||
        ssd_file_open(&fw, wpath.c_str(), 1, size, 1, err, errlen) != 0 ||
        !(io = ssd_io_open(&ioc, err, errlen)))
        rc = -1;
    for (int i = 0; i < 4 && rc == 0; i++)
        if (!(bufs[i] = (char*)ssd_alloc(block))) {
            snprintf(err, errlen, "out of memory for the disk probe");
            rc = -1;
        }
    if (rc == 0) {
        fill_incompressible(bufs[0], block);
        for (int i = 1; i < 4; i++) memcpy(bufs[i], bufs[0], (size_t)block);
        out->direct = fr.direct && fw.direct;
        out->backend = ssd_io_backend(io);
        // the read file written whole first (it is what the read phases read), then each phase
        ProbeStream pre, rd, wr;
        for (ProbeStream* p : {&pre, &rd, &wr}) p->block = block, p->size = size;
        pre.f = &fr, pre.write = 1, pre.buf[0] = bufs[0], pre.buf[1] = bufs[1];
        wr.f = &fw, wr.write = 1, wr.buf[0] = bufs[0], wr.buf[1] = bufs[1];
        rd.f = &fr, rd.write = 0, rd.buf[0] = bufs[2], rd.buf[1] = bufs[3];
        double bps[2] = {0, 0};
        ProbeStream* one[1] = {&pre};
        for (int64_t k = 0; rc == 0 && k < size / block; k += 2)
            for (int b = 0; b < 2 && rc == 0; b++)
                rc = probe_step(io, &pre, b, k + b < size / block, err, errlen);
        for (int b = 0; b < 2 && rc == 0; b++) rc = probe_step(io, &pre, b, false, err, errlen);
        if (rc == 0) rc = ssd_file_sync(&fr, err, errlen);
        one[0] = &wr;
        if (rc == 0) rc = probe_phase(io, one, 1, seconds, bps, err, errlen);
        if (rc == 0) rc = ssd_file_sync(&fw, err, errlen);
        out->write_bps = bps[0];
        one[0] = &rd;
        if (rc == 0) rc = probe_phase(io, one, 1, seconds, bps, err, errlen);
        out->read_bps = bps[0];
        rd.moved = wr.moved = 0;
        ProbeStream* both[2] = {&rd, &wr};
        if (rc == 0) rc = probe_phase(io, both, 2, seconds, bps, err, errlen);
        if (rc == 0) rc = ssd_file_sync(&fw, err, errlen);
        out->mixed_read_bps = bps[0];
        out->mixed_write_bps = bps[1];
    }
    if (io) ssd_io_close(io);
    for (char* b : bufs) ssd_free(b);
    if (fr.fd >= 0) ssd_file_close(&fr);
    if (fw.fd >= 0) ssd_file_close(&fw);
    unlink(rpath.c_str());
    unlink(wpath.c_str());
    return rc;
}
