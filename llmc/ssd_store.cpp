// ssd_store.cpp — the SSD tier's store: two generations of files, checksums, manifest, the AdamW round.
// Not here: the I/O itself (ssd_io.cpp). ssd.h says what and why.
#include "llmc/ssd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "llmc/cpu_adam.h"  // defines: convert_f32_to_bf16
#include "llmc/crc32c.h"    // defines: crc32c_update
#include "llmc/utils.h"     // defines: SizeText, progress_tick, ProgressTicker

static const double GiB = 1024.0 * 1024.0 * 1024.0;

// ============================================================================
// The state store

namespace {
enum { K_PARAMS, K_M, K_V, K_BF16, K_COUNT };
const char* const kKindFile[K_COUNT] = {"params.f32", "m.f32", "v.f32", "weights.bf16"};
const int kKindSize[K_COUNT] = {4, 4, 4, 2};
const char* const kWholeBf16 = "layers.bf16";  // whole_bf16_elems' scratch file

struct Slot {
    float *p, *m, *v;
    uint16_t *g, *b;
    int64_t piece = -1;
    bool grads_in_ram = false;  // this piece's gradients come from the round's grads(), not the grads file
    // Read ahead for the next round (prefetch_next_round): this piece's p, m, v of generation pre_gen.
    int pre_layer = -1, pre_gen = -1;
    int64_t pre_off = 0;
    SsdReq rd[5], wr[5];
    int nrd = 0, nwr = 0;
};
struct Piece {
    int layer;
    int64_t off, cnt;
    bool last;
};
}  // namespace

struct SsdStore {
    std::string dir, owner;
    SsdStoreConfig cfg;
    SsdIo* io = NULL;
    SsdFile files[2][K_COUNT];
    SsdFile grads;
    SsdFile whole;  // DIR/layers.bf16 (whole_bf16_elems), stride_whole bytes a layer
    int64_t stride_whole = 0;
    int64_t step[2] = {-1, -1};
    int wgen = 0;
    std::unique_ptr<std::atomic<uint8_t>[]> src;  // generation holding each layer's newest state
    int64_t piece = 0, stride4 = 0, stride2 = 0, bytes4 = 0, bytes2 = 0;
    std::vector<Slot> ring;
    void* ring_mem = NULL;
    bool failed = false;
    std::string fail_msg;
    // each generation's checksums, piece by piece (sum_index)
    // sums_ok[g]: every piece of g has one
    std::vector<uint32_t> sums[2][K_COUNT];
    bool sums_ok[2] = {false, false};
    uint32_t sums_crc[2] = {0, 0};  // CRC-32C of each generation's sums file, kept in the manifest
    int64_t pieces_per_layer = 0;
    std::vector<uint32_t> sub;  // scratch: one piece's sub-chunk checksums
};

static bool has_kind(const SsdStoreConfig* c, int k) { return k != K_BF16 || c->with_bf16; }

static int64_t piece_elems_of(const SsdStoreConfig* c) {
    int64_t p = c->piece_elems;
    if (p <= 0 || p >= c->layer_elems) return c->layer_elems;
    p = p / SSD_PIECE_ALIGN_ELEMS * SSD_PIECE_ALIGN_ELEMS;
    return p > 0 ? p : SSD_PIECE_ALIGN_ELEMS < c->layer_elems ? SSD_PIECE_ALIGN_ELEMS : c->layer_elems;
}

int64_t ssd_store_ring_bytes(const SsdStoreConfig* c) {
    const int64_t p = piece_elems_of(c);
    const int64_t per = 3 * ssd_round_up(p * 4, SSD_ALIGN) +
                        (c->grads_on_disk ? ssd_round_up(p * 2, SSD_ALIGN) : 0) +
                        (c->with_bf16 ? ssd_round_up(p * 2, SSD_ALIGN) : 0);
    return (int64_t)c->ring * per;
}

int64_t ssd_store_layer_pieces(const SsdStoreConfig* c) {
    const int64_t p = piece_elems_of(c);
    return p > 0 ? (c->layer_elems + p - 1) / p : 0;
}

int64_t ssd_store_disk_bytes(const SsdStoreConfig* c) {
    const int64_t L = c->num_layers, s4 = ssd_round_up(c->layer_elems * 4, SSD_ALIGN),
                  s2 = ssd_round_up(c->layer_elems * 2, SSD_ALIGN);
    return 2 * L * (3 * s4 + (c->with_bf16 ? s2 : 0)) + (c->grads_on_disk ? L * s2 : 0) +
           L * ssd_round_up(c->whole_bf16_elems * 2, SSD_ALIGN);
}

int64_t ssd_store_bf16_layer_bytes(const SsdStore* st) { return st->stride2; }
SsdIo* ssd_store_io(SsdStore* st) { return st->io; }
void ssd_store_steps(const SsdStore* st, int64_t steps[2]) {
    steps[0] = st->step[0];
    steps[1] = st->step[1];
}

static int check_config(const SsdStoreConfig* c, char* err, size_t errlen) {
    if (c->num_layers < 1 || c->layer_elems < 1 || c->ring < 3 || c->piece_elems < 0 ||
        c->layer_elems > ((int64_t)1 << 40)) {
        snprintf(err, errlen,
                 "bad SSD store shape: %d layers of %lld parameters, ring %d, piece %lld (need >= 1 layer, "
                 ">= 1 parameter, ring >= 3, piece >= 0)",
                 c->num_layers, (long long)c->layer_elems, c->ring, (long long)c->piece_elems);
        return -1;
    }
    return 0;
}

// ---- manifest (docs/ssd.md has its lines)

namespace {
struct Manifest {
    int version = 0;
    SsdStoreConfig shape;
    int64_t steps[2] = {-1, -1};
    std::string owner;                  // "" for none (and for version 1, which had no owner)
    bool has_sums[2] = {false, false};  // version 1: none
    uint32_t sums_crc[2] = {0, 0};
};
}  // namespace

static const char* owner_of(const SsdStoreConfig* c) { return c->owner ? c->owner : ""; }

static std::string manifest_text(const SsdStore* st) {
    char line[256];
    std::string t = "ssd_store 2\n";
    snprintf(line, sizeof line,
             "layers %d\nlayer_elems %lld\nwith_bf16 %d\ngrads_on_disk %d\npiece_elems %lld\n",
             st->cfg.num_layers, (long long)st->cfg.layer_elems, st->cfg.with_bf16 ? 1 : 0,
             st->cfg.grads_on_disk ? 1 : 0, (long long)st->piece);
    t += line;
    for (int g = 0; g < 2; g++) {
        snprintf(line, sizeof line, "step%d %lld\n", g, (long long)st->step[g]);
        t += line;
        if (st->step[g] >= 0 && st->sums_ok[g])
            snprintf(line, sizeof line, "sums%d %08x\n", g, st->sums_crc[g]);
        else snprintf(line, sizeof line, "sums%d none\n", g);
        t += line;
    }
    t += "owner " + (st->owner.empty() ? std::string("-") : st->owner) + "\n";
    snprintf(line, sizeof line, "crc32c %08x\n", crc32c_update(0, t.data(), t.size()));
    return t + line;
}

// tmp, fsync, rename, fsync the directory: durably the old file or the new
static int write_file_atomic(const std::string& dir, const std::string& path, const void* data, size_t n,
                             char* err, size_t errlen) {
    const std::string tmp = path + ".tmp";
    unlink(tmp.c_str());  // O_EXCL below: never write through whatever was there
    const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create %.600s: %s", tmp.c_str(), strerror(errno));
        return -1;
    }
    const ssize_t w = write(fd, data, n);
    const int why = w < 0 ? errno : 0;
    if (w != (ssize_t)n || fsync(fd) != 0) {
        snprintf(err, errlen, "cannot write %.600s: %s", tmp.c_str(),
                 w != (ssize_t)n ? (why ? strerror(why) : "short write (disk full?)") : strerror(errno));
        close(fd);
        return -1;
    }
    close(fd);
    if (rename(tmp.c_str(), path.c_str()) != 0) {
        snprintf(err, errlen, "cannot rename %.600s: %s", tmp.c_str(), strerror(errno));
        return -1;
    }
    const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0) {
        snprintf(err, errlen, "cannot fsync directory %.600s: %s", dir.c_str(), strerror(errno));
        if (dfd >= 0) close(dfd);
        return -1;
    }
    close(dfd);
    return 0;
}

static int write_manifest(SsdStore* st, char* err, size_t errlen) {
    const std::string text = manifest_text(st);
    return write_file_atomic(st->dir, st->dir + "/ssd_manifest", text.data(), text.size(), err, errlen);
}

// A small regular file, whole, up to max bytes. 1: absent, 0: read, -1: err.
static int read_small_file(const std::string& path, size_t max, std::string* out, char* err, size_t errlen) {
    const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return 1;
        snprintf(err, errlen, "cannot open %.600s: %s", path.c_str(), strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || (size_t)sb.st_size > max) {
        snprintf(err, errlen, "%.600s is not a regular file of at most %zu bytes", path.c_str(), max);
        close(fd);
        return -1;
    }
    out->resize((size_t)sb.st_size);
    const ssize_t n = read(fd, &(*out)[0], out->size());
    close(fd);
    if (n != (ssize_t)out->size()) {
        snprintf(err, errlen, "cannot read %.600s: %s", path.c_str(), n < 0 ? strerror(errno) : "short read");
        return -1;
    }
    return 0;
}

// 1: no manifest in dir; 0: read into m; -1: err set
static int read_manifest(const char* dir, Manifest* m, char* err, size_t errlen) {
    const std::string path = std::string(dir) + "/ssd_manifest";
    std::string t;
    const int rc = read_small_file(path, 1 << 16, &t, err, errlen);
    if (rc != 0) return rc;
    memset(&m->shape, 0, sizeof m->shape);
    int bf = 0, gr = 0;
    long long elems = 0, s0 = 0, s1 = 0, piece = 0;
    if (sscanf(t.c_str(), "ssd_store %d", &m->version) == 1 && m->version == 1) {
        // version 1 (before checksums and owners): the shape and the steps
        const int got = sscanf(t.c_str(),
                               "ssd_store 1\nlayers %d\nlayer_elems %lld\nwith_bf16 %d\ngrads_on_disk "
                               "%d\nstep0 %lld\nstep1 %lld",
                               &m->shape.num_layers, &elems, &bf, &gr, &s0, &s1);
        if (got != 6) m->version = -1;
    } else if (m->version == 2) {
        const size_t at = t.rfind("crc32c ");
        unsigned crc = 0;
        char sums[2][16] = {"", ""};
        if (at == std::string::npos || (at > 0 && t[at - 1] != '\n') ||
            sscanf(t.c_str() + at, "crc32c %8x", &crc) != 1) {
            m->version = -1;
        } else if (crc32c_update(0, t.data(), at) != crc) {
            snprintf(err, errlen, "%.600s is damaged (its checksum does not match its text)", path.c_str());
            return -1;
        } else if (sscanf(t.c_str(),
                          "ssd_store 2\nlayers %d\nlayer_elems %lld\nwith_bf16 %d\ngrads_on_disk %d\n"
                          "piece_elems %lld\nstep0 %lld\nsums0 %15s\nstep1 %lld\nsums1 %15s\n",
                          &m->shape.num_layers, &elems, &bf, &gr, &piece, &s0, sums[0], &s1, sums[1]) != 9) {
            m->version = -1;
        } else {
            const size_t o = t.find("\nowner ");
            const size_t e = o == std::string::npos ? o : t.find('\n', o + 7);
            if (e == std::string::npos) m->version = -1;
            else m->owner = t.substr(o + 7, e - o - 7);
            if (m->owner == "-") m->owner = "";
            for (int g = 0; g < 2 && m->version == 2; g++) {
                unsigned c = 0;
                if (strcmp(sums[g], "none") == 0) continue;
                if (sscanf(sums[g], "%8x", &c) != 1) m->version = -1;
                m->has_sums[g] = true;
                m->sums_crc[g] = c;
            }
        }
    }
    if (m->version < 1 || m->version > 2 || m->shape.num_layers < 1 || elems < 1 || s0 < -1 || s1 < -1 ||
        piece < 0) {
        snprintf(err, errlen, "%.600s is not a valid SSD store manifest (version 1 or 2)", path.c_str());
        return -1;
    }
    m->shape.layer_elems = elems;
    m->shape.with_bf16 = bf;
    m->shape.grads_on_disk = gr;
    m->shape.piece_elems = piece;
    m->steps[0] = s0;
    m->steps[1] = s1;
    return 0;
}

// Write a generation only once the manifest says it holds no checkpoint (invariant 1).
static int mark_writing(SsdStore* st, char* err, size_t errlen) {
    if (st->step[st->wgen] == -1) return 0;
    const int64_t old = st->step[st->wgen];
    st->step[st->wgen] = -1;
    st->sums_ok[st->wgen] = false;  // its checksums describe it again at its next checkpoint
    if (write_manifest(st, err, errlen) != 0) {
        st->step[st->wgen] = old;  // unknown whether the rename happened: refuse to go on either way
        st->failed = true;
        st->fail_msg = err;
        return -1;
    }
    return 0;
}

// ---- checksums: one per piece of each file, from the ring buffer as written

static const int64_t kSubChunk = (int64_t)1 << 20;  // bytes

static int64_t sum_index(const SsdStore* st, int layer, int64_t off) {
    return (int64_t)layer * st->pieces_per_layer + off / st->piece;
}
static void alloc_sums(SsdStore* st) {
    st->pieces_per_layer = (st->cfg.layer_elems + st->piece - 1) / st->piece;
    for (int g = 0; g < 2; g++)
        for (int k = 0; k < K_COUNT; k++)
            st->sums[g][k].assign(
                has_kind(&st->cfg, k) ? (size_t)(st->cfg.num_layers * st->pieces_per_layer) : 0, 0);
}

// CRC-32C of each masked array: over its 1 MiB sub-chunks' CRCs, in parallel.
static void piece_sums(SsdStore* st, const Slot* s, const Piece& pc, unsigned kinds, uint32_t out[K_COUNT]) {
    const char* src[K_COUNT] = {(const char*)s->p, (const char*)s->m, (const char*)s->v, (const char*)s->b};
    int64_t first[K_COUNT + 1], total = 0;
    for (int k = 0; k < K_COUNT; k++) {
        first[k] = total;
        if (kinds & (1u << k)) total += (pc.cnt * kKindSize[k] + kSubChunk - 1) / kSubChunk;
    }
    first[K_COUNT] = total;
    st->sub.resize((size_t)total);
    uint32_t* sub = st->sub.data();
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < total; j++) {
        int k = 0;
        while (j >= first[k + 1]) k++;
        const int64_t o = (j - first[k]) * kSubChunk, bytes = pc.cnt * kKindSize[k];
        sub[j] = crc32c_update(0, src[k] + o, (size_t)std::min(kSubChunk, bytes - o));
    }
    for (int k = 0; k < K_COUNT; k++)
        if (kinds & (1u << k))
            out[k] = crc32c_update(0, sub + first[k], (size_t)(first[k + 1] - first[k]) * 4);
}
// A piece written to generation g: its checksums become g's
static void record_sums(SsdStore* st, const Slot* s, const Piece& pc, int g) {
    uint32_t c[K_COUNT];
    const unsigned kinds =
        (1u << K_PARAMS) | (1u << K_M) | (1u << K_V) | (st->cfg.with_bf16 ? 1u << K_BF16 : 0u);
    piece_sums(st, s, pc, kinds, c);
    const int64_t i = sum_index(st, pc.layer, pc.off);
    for (int k = 0; k < K_COUNT; k++)
        if (kinds & (1u << k)) st->sums[g][k][(size_t)i] = c[k];
}

static std::string sums_path(const std::string& dir, int g) {
    return dir + "/gen" + std::to_string(g) + "/sums.crc32c";
}
// gen g's checksums as a file: "ssdsums2", its shape, then each kind's u32s
static std::string sums_bytes(const SsdStore* st, int g) {
    std::string b = "ssdsums2";
    const uint32_t head[3] = {(uint32_t)st->cfg.num_layers, (uint32_t)st->pieces_per_layer,
                              st->cfg.with_bf16 ? 4u : 3u};
    b.append((const char*)head, sizeof head);
    for (int k = 0; k < K_COUNT; k++)
        if (has_kind(&st->cfg, k)) b.append((const char*)st->sums[g][k].data(), st->sums[g][k].size() * 4);
    return b;
}
static int write_sums(SsdStore* st, int g, char* err, size_t errlen) {
    const std::string b = sums_bytes(st, g);
    if (write_file_atomic(st->dir + "/gen" + std::to_string(g), sums_path(st->dir, g), b.data(), b.size(),
                          err, errlen) != 0)
        return -1;
    st->sums_crc[g] = crc32c_update(0, b.data(), b.size());
    st->sums_ok[g] = true;
    return 0;
}
// gen g's checksums from its file; its CRC-32C must match the manifest's
static int read_sums(SsdStore* st, int g, uint32_t want_crc, char* err, size_t errlen) {
    const std::string path = sums_path(st->dir, g);
    std::string b;
    const int rc = read_small_file(path, (size_t)1 << 34, &b, err, errlen);
    if (rc == 1) snprintf(err, errlen, "%.600s is missing", path.c_str());
    if (rc != 0) return -1;
    std::string want = sums_bytes(st, g);  // the size and header this store's shape gives
    if (b.size() != want.size() || b.compare(0, 20, want, 0, 20) != 0 ||
        crc32c_update(0, b.data(), b.size()) != want_crc) {
        snprintf(err, errlen, "%.600s is damaged or not this checkpoint's (its checksum or shape differs)",
                 path.c_str());
        return -1;
    }
    size_t at = 20;
    for (int k = 0; k < K_COUNT; k++)
        if (has_kind(&st->cfg, k)) {
            memcpy(st->sums[g][k].data(), b.data() + at, st->sums[g][k].size() * 4);
            at += st->sums[g][k].size() * 4;
        }
    st->sums_crc[g] = want_crc;
    st->sums_ok[g] = true;
    return 0;
}

// ---- construction

static std::string gen_path(const std::string& dir, int g, int k) {
    return dir + "/gen" + std::to_string(g) + "/" + kKindFile[k];
}

static int setup_ring(SsdStore* st, char* err, size_t errlen) {
    const SsdStoreConfig* c = &st->cfg;
    st->piece = piece_elems_of(c);
    st->stride4 = ssd_round_up(c->layer_elems * 4, SSD_ALIGN);
    st->stride2 = ssd_round_up(c->layer_elems * 2, SSD_ALIGN);
    st->bytes4 = ssd_round_up(st->piece * 4, SSD_ALIGN);
    st->bytes2 = ssd_round_up(st->piece * 2, SSD_ALIGN);
    const int64_t total = ssd_store_ring_bytes(c);
    st->ring_mem = ssd_alloc(total);
    if (!st->ring_mem) {
        snprintf(err, errlen, "out of memory: the SSD store's ring needs %.2f GiB of host RAM", total / GiB);
        return -1;
    }
    char* p = (char*)st->ring_mem;
    st->ring.resize((size_t)c->ring);
    for (Slot& s : st->ring) {
        s.p = (float*)p;
        p += st->bytes4;
        s.m = (float*)p;
        p += st->bytes4;
        s.v = (float*)p;
        p += st->bytes4;
        s.g = NULL;
        s.b = NULL;
        if (c->grads_on_disk) {
            s.g = (uint16_t*)p;
            p += st->bytes2;
        }
        if (c->with_bf16) {
            s.b = (uint16_t*)p;
            p += st->bytes2;
        }
    }
    st->src.reset(new std::atomic<uint8_t>[(size_t)c->num_layers]);
    alloc_sums(st);
    return 0;
}

void ssd_store_close(SsdStore* st) {
    if (!st) return;
    if (st->io) ssd_io_close(st->io);  // waits for anything in flight
    for (int g = 0; g < 2; g++)
        for (int k = 0; k < K_COUNT; k++) ssd_file_close(&st->files[g][k]);
    ssd_file_close(&st->grads);
    ssd_file_close(&st->whole);
    ssd_free(st->ring_mem);
    delete st;
}

static SsdStore* new_store(const char* dir, const SsdStoreConfig* cfg) {
    SsdStore* st = new SsdStore();
    st->dir = dir;
    st->cfg = *cfg;
    st->owner = owner_of(cfg);
    st->cfg.owner = NULL;  // st->owner holds it
    for (int g = 0; g < 2; g++)
        for (int k = 0; k < K_COUNT; k++) st->files[g][k].fd = -1;
    st->grads.fd = st->whole.fd = -1;
    st->stride_whole = ssd_round_up(cfg->whole_bf16_elems * 2, SSD_ALIGN);
    return st;
}

// Creates at full size, or opens and checks, the store's files; -1 with err. resume (>= 0, opening): the
// generation a resume reads; the other one's files and the gradients' scratch file, missing or of another
// size, are made again at full size (its checkpoint then gone: said once) rather than refuse the resume.
static int open_files(SsdStore* st, int create, char* err, size_t errlen, int resume = -1) {
    const SsdStoreConfig* cfg = &st->cfg;
    st->io = ssd_io_open(&cfg->io, err, errlen);
    if (!st->io) return -1;
    bool remade = false;
    auto open_one = [&](SsdFile* f, const std::string& path, int64_t size, bool remake) {
        int r = ssd_file_open(f, path.c_str(), create, size, cfg->io.quiet, err, errlen);
        if (r == 0 && f->size != size) {
            snprintf(err, errlen, "%.600s has %lld bytes, the store's shape needs %lld", f->path,
                     (long long)f->size, (long long)size);
            r = -1;
        }
        if (r == 0 || create || !remake) return r;
        if (!cfg->io.quiet) fprintf(stderr, "warning: %s: made again\n", err);
        ssd_file_close(f);
        remade = true;
        return ssd_file_open(f, path.c_str(), 1, size, cfg->io.quiet, err, errlen);
    };
    for (int g = 0; g < 2; g++)
        for (int k = 0; k < K_COUNT; k++) {
            if (!has_kind(cfg, k)) continue;
            SsdFile* f = &st->files[g][k];
            const int64_t size = cfg->num_layers * (kKindSize[k] == 4 ? st->stride4 : st->stride2);
            const bool remake = resume >= 0 && g != resume;
            remade = false;
            if (open_one(f, gen_path(st->dir, g, k), size, remake) != 0) return -1;
            if (k == K_BF16 && cfg->bf16_cached && f->direct && ssd_file_buffered(f, err, errlen) != 0)
                return -1;
            if (remade && st->step[g] >= 0) {
                if (!cfg->io.quiet)
                    fprintf(stderr,
                            "warning: the SSD store's older checkpoint (step %lld) is gone; the resume "
                            "reads step %lld\n",
                            (long long)st->step[g], (long long)st->step[resume]);
                st->step[g] = -1;
            }
        }
    if (cfg->grads_on_disk &&
        open_one(&st->grads, st->dir + "/grads.bf16", cfg->num_layers * st->stride2, resume >= 0) != 0)
        return -1;
    // layers.bf16, a scratch file: made (again) at its size without a word; a store opened without -sw 1
    // (several nodes) removes one an earlier run left (the whole model's bf16 weights)
    const std::string whole = st->dir + "/" + kWholeBf16;
    if (cfg->whole_bf16_elems <= 0) {
        if (!create) unlink(whole.c_str());
        return 0;
    }
    const int64_t size = cfg->num_layers * st->stride_whole;
    struct stat sb;
    const bool keep = !create && lstat(whole.c_str(), &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size == size;
    if (ssd_file_open(&st->whole, whole.c_str(), !keep, size, cfg->io.quiet, err, errlen) != 0) return -1;
    return st->whole.direct ? ssd_file_buffered(&st->whole, err, errlen) : 0;
}

static int verify_generation(SsdStore* st, int g, char* err, size_t errlen);  // below, with the pieces
static void drop_prefetch(SsdStore* st);                                      // below, with the round

static std::string owner_text(const std::string& o) {
    return o.empty() ? "a run without -o" : "the run in " + o;
}

// gen0, gen1, their files, the manifest, grads.bf16 and layers.bf16 must be the store's own: a symbolic link
// there would have the store delete or overwrite files elsewhere (lstat: the link itself, not its target).
// false with err.
static bool store_paths_own(const char* dir, char* err, size_t errlen) {
    std::vector<std::pair<std::string, bool>> paths;  // path, a directory
    for (const char* name : {"gen0", "gen1", "ssd_manifest", "grads.bf16", kWholeBf16})
        paths.push_back({std::string(dir) + "/" + name, strncmp(name, "gen", 3) == 0});
    for (int g = 0; g < 2; g++) {
        for (int k = 0; k < K_COUNT; k++) paths.push_back({gen_path(dir, g, k), false});
        paths.push_back({sums_path(dir, g), false});
    }
    for (const auto& [path, want_dir] : paths) {
        struct stat sb;
        if (lstat(path.c_str(), &sb) == 0 && (S_ISLNK(sb.st_mode) || want_dir != S_ISDIR(sb.st_mode))) {
            snprintf(err, errlen,
                     "%.600s is a %s, not the SSD store's own %s: the store does not write through it; "
                     "remove it or give this run another -sd directory",
                     path.c_str(), S_ISLNK(sb.st_mode) ? "symbolic link" : "file of another kind",
                     want_dir ? "directory" : "file");
            return false;
        }
    }
    return true;
}

int64_t ssd_store_held_bytes(const char* dir) {
    int64_t n = 0;
    struct stat s;
    auto add = [&](const std::string& path) {
        if (lstat(path.c_str(), &s) == 0 && S_ISREG(s.st_mode)) n += (int64_t)s.st_blocks * 512;
    };
    for (int g = 0; g < 2; g++) {
        for (int k = 0; k < K_COUNT; k++) add(gen_path(dir, g, k));
        add(sums_path(dir, g));
    }
    add(std::string(dir) + "/grads.bf16");
    add(std::string(dir) + "/" + kWholeBf16);
    return n;
}

SsdStore* ssd_store_create(const char* dir, const SsdStoreConfig* cfg, char* err, size_t errlen) {
    if (check_config(cfg, err, errlen) != 0) return NULL;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create %.600s: %s", dir, strerror(errno));
        return NULL;
    }
    // Another run's store is replaced only if it holds no checkpoint (a run that ended before its first
    // save, e.g. on its data, leaves nothing to resume); the lock (ssd_lock_dir) keeps out live runs.
    Manifest old;
    char why[1024];
    const int found = read_manifest(dir, &old, why, sizeof why);
    if (found < 0) {
        snprintf(err, errlen,
                 "%.600s; this run will not replace what it cannot read: give it another -sd directory", why);
        return NULL;
    }
    const bool checkpointed = old.steps[0] >= 0 || old.steps[1] >= 0;  // a run without -o saves none
    if (found == 0 && old.owner != owner_of(cfg) && checkpointed &&
        (!old.owner.empty() || old.version == 1)) {
        snprintf(err, errlen,
                 "%.600s holds the SSD store of %.600s with a checkpoint; it is left as it is: give this run "
                 "another -sd directory",
                 dir,
                 old.version == 1 ? "an earlier version's run (no owner recorded)"
                                  : owner_text(old.owner).c_str());
        return NULL;
    }
    if (!store_paths_own(dir, err, errlen)) return NULL;
    SsdStore* st = new_store(dir, cfg);
    // An older store here is replaced: its manifest first, then its files.
    unlink((st->dir + "/ssd_manifest").c_str());
    for (int g = 0; g < 2; g++) {
        for (int k = 0; k < K_COUNT; k++) unlink(gen_path(st->dir, g, k).c_str());
        unlink(sums_path(st->dir, g).c_str());
        const std::string gd = st->dir + "/gen" + std::to_string(g);
        if (mkdir(gd.c_str(), 0755) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "cannot create %.600s: %s", gd.c_str(), strerror(errno));
            ssd_store_close(st);
            return NULL;
        }
    }
    unlink((st->dir + "/grads.bf16").c_str());
    unlink((st->dir + "/" + kWholeBf16).c_str());
    struct statvfs sv;
    const int64_t need = ssd_store_disk_bytes(cfg);
    if (statvfs(dir, &sv) == 0 && (double)sv.f_bavail * (double)sv.f_frsize < (double)need) {
        snprintf(err, errlen,
                 "not enough space in %.600s for the SSD store: it needs %s (two generations of the "
                 "state%s%s), the filesystem has %s free",
                 dir, SizeText((double)need).s, cfg->grads_on_disk ? " and the gradients" : "",
                 cfg->whole_bf16_elems > 0 ? " and the layers' bf16 weights whole" : "",
                 SizeText((double)sv.f_bavail * (double)sv.f_frsize).s);
        ssd_store_close(st);
        return NULL;
    }
    if (setup_ring(st, err, errlen) != 0 || write_manifest(st, err, errlen) != 0) {
        ssd_store_close(st);
        return NULL;
    }
    if (open_files(st, 1, err, errlen) != 0) {
        ssd_store_close(st);
        return NULL;
    }
    st->wgen = 0;
    for (int l = 0; l < cfg->num_layers; l++) st->src[l] = 0;
    return st;
}

// A resume's checkpoint (step) is damaged: err says so, and whether the other checkpoint (-1: none) is
// intact.
static void say_unusable(char* err, size_t errlen, int64_t step, int64_t other) {
    const size_t len = strlen(err);
    if (other >= 0)
        snprintf(err + len, errlen - len,
                 "; the state of step %lld is unusable, the store's other checkpoint, step %lld, is intact",
                 (long long)step, (long long)other);
    else
        snprintf(err + len, errlen - len,
                 "; the state of step %lld is unusable and the store holds no other intact checkpoint",
                 (long long)step);
}
// Is generation o's checkpoint intact (its files of the right size, their checksums)? Reads, writes nothing.
static bool other_generation_intact(const char* dir, const SsdStoreConfig* use, const Manifest& m, int o) {
    if (m.steps[o] < 0 || !m.has_sums[o]) return false;
    SsdStoreConfig one = *use;
    one.ring = 3;  // the check reads a piece at a time
    one.io.quiet = 1;
    use = &one;
    SsdStore* st = new_store(dir, use);
    char e[2048];
    bool ok = setup_ring(st, e, sizeof e) == 0 && (st->io = ssd_io_open(&use->io, e, sizeof e)) != NULL;
    for (int k = 0; ok && k < K_COUNT; k++) {
        if (!has_kind(use, k)) continue;
        SsdFile* f = &st->files[o][k];
        const int64_t size = use->num_layers * (kKindSize[k] == 4 ? st->stride4 : st->stride2);
        ok = ssd_file_open(f, gen_path(dir, o, k).c_str(), 0, size, 1, e, sizeof e) == 0 && f->size == size;
    }
    ok =
        ok && read_sums(st, o, m.sums_crc[o], e, sizeof e) == 0 && verify_generation(st, o, e, sizeof e) == 0;
    ssd_store_close(st);
    return ok;
}

SsdStore* ssd_store_open(const char* dir, const SsdStoreConfig* cfg, int64_t step, char* err, size_t errlen) {
    if (check_config(cfg, err, errlen) != 0) return NULL;
    if (!store_paths_own(dir, err, errlen)) return NULL;  // a resume writes into them too
    Manifest m;
    const int found = read_manifest(dir, &m, err, errlen);
    if (found == 1)
        snprintf(err, errlen, "no SSD store in %.600s: %.600s/ssd_manifest does not exist", dir, dir);
    if (found != 0) return NULL;
    const SsdStoreConfig& shape = m.shape;
    // where the gradients wait is no part of a checkpoint (train_gpt: one GPU writes them to disk, the ranks
    // of a node keep them in RAM), so either resumes the other's store: a grads file is made where none was
    if (shape.num_layers != cfg->num_layers || shape.layer_elems != cfg->layer_elems ||
        !shape.with_bf16 != !cfg->with_bf16) {
        snprintf(
            err, errlen,
            "the SSD store in %.600s holds %d layers of %lld parameters (bf16 copy %s), not %d of %lld (bf16 "
            "copy %s)",
            dir, shape.num_layers, (long long)shape.layer_elems, shape.with_bf16 ? "on disk" : "in RAM",
            cfg->num_layers, (long long)cfg->layer_elems, cfg->with_bf16 ? "on disk" : "in RAM");
        return NULL;
    }
    struct stat owner_st;  // a run directory moved (renamed): its store follows it, said once
    const bool owner_gone = !m.owner.empty() && *owner_of(cfg) && stat(m.owner.c_str(), &owner_st) != 0;
    if (m.version == 2 && m.owner != owner_of(cfg) && !owner_gone) {
        snprintf(err, errlen, "the SSD store in %.600s belongs to %.600s, not to %.600s", dir,
                 owner_text(m.owner).c_str(), owner_text(owner_of(cfg)).c_str());
        return NULL;
    }
    if (m.version == 2 && owner_gone && !cfg->io.quiet)
        fprintf(
            stderr,
            "warning: the SSD store in %s belonged to the run in %s, which is gone (moved?): the run in %s "
            "resumes it\n",
            dir, m.owner.c_str(), owner_of(cfg));
    const int64_t* steps = m.steps;
    int g = -1;
    if (step < 0) g = steps[0] < 0 && steps[1] < 0 ? -1 : steps[0] >= steps[1] ? 0 : 1;
    else g = steps[0] == step ? 0 : steps[1] == step ? 1 : -1;
    if (g < 0) {
        char have[96];
        if (steps[0] < 0 && steps[1] < 0) snprintf(have, sizeof have, "no complete checkpoint");
        else if (steps[0] < 0 || steps[1] < 0)
            snprintf(have, sizeof have, "the state of step %lld only",
                     (long long)(steps[0] < 0 ? steps[1] : steps[0]));
        else
            snprintf(have, sizeof have, "the state of steps %lld and %lld", (long long)steps[0],
                     (long long)steps[1]);
        if (step < 0) snprintf(err, errlen, "the SSD store in %.600s holds %s", dir, have);
        else
            snprintf(err, errlen, "the SSD store in %.600s holds %s, not of step %lld", dir, have,
                     (long long)step);
        return NULL;
    }
    SsdStoreConfig use = *cfg;
    if (m.version == 2)
        use.piece_elems = shape.piece_elems;  // the checksums are per piece of the writer's size
    // the gradients' scratch file by this run's mode, not the manifest's (which a run that ended before its
    // first checkpoint did not rewrite): made where missing (the store of several ranks, on one GPU), removed
    // where unused (one GPU's store, on several ranks)
    const std::string grads = std::string(dir) + "/grads.bf16";
    struct stat grads_st;
    if (cfg->grads_on_disk && lstat(grads.c_str(), &grads_st) != 0) {
        SsdFile f;
        if (ssd_file_open(&f, grads.c_str(), 1,
                          cfg->num_layers * ssd_round_up(cfg->layer_elems * 2, SSD_ALIGN), 1, err,
                          errlen) != 0)
            return NULL;
        ssd_file_close(&f);
    }
    if (!cfg->grads_on_disk) unlink(grads.c_str());
    SsdStore* st = new_store(dir, &use);
    st->step[0] = steps[0];
    st->step[1] = steps[1];
    if (setup_ring(st, err, errlen) != 0 || open_files(st, 0, err, errlen, g) != 0) {
        ssd_store_close(st);
        // a file of the checkpoint's generation missing or of another size: damaged, as a failed checksum
        // (not a file it may not open: that says why, and the checkpoint may well be intact)
        if (strstr(err, (std::string(dir) + "/gen" + std::to_string(g) + "/").c_str()) &&
            (strstr(err, "the store's shape needs") || strstr(err, strerror(ENOENT))))
            say_unusable(err, errlen, steps[g],
                         other_generation_intact(dir, &use, m, 1 - g) ? steps[1 - g] : -1);
        return NULL;
    }
    // the checkpoint's generation, checked once; if damaged, is the other intact?
    if (!m.has_sums[g]) {
        if (!use.io.quiet)
            fprintf(stderr,
                    "warning: the SSD store in %s has no checksums for step %lld (made before version 2): "
                    "not verified\n",
                    dir, (long long)steps[g]);
    } else if (read_sums(st, g, m.sums_crc[g], err, errlen) != 0 ||
               verify_generation(st, g, err, errlen) != 0) {
        const int o = 1 - g;
        char e2[2048];
        const bool other_ok = steps[o] >= 0 && m.has_sums[o] &&
                              read_sums(st, o, m.sums_crc[o], e2, sizeof e2) == 0 &&
                              verify_generation(st, o, e2, sizeof e2) == 0;
        say_unusable(err, errlen, steps[g], other_ok ? steps[o] : -1);
        ssd_store_close(st);
        return NULL;
    }
    st->wgen = 1 - g;
    for (int l = 0; l < cfg->num_layers; l++) st->src[l] = (uint8_t)g;
    return st;
}

int ssd_lock_dir(const char* dir, char* err, size_t errlen) {
    const std::string path = std::string(dir) + "/ssd_lock";
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(err, errlen, "cannot lock %.600s: %s", path.c_str(),
                 fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0) close(fd);
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char pid[32] = "";
        const ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
        snprintf(err, errlen, "%.600s is in use by another run (pid %s)", dir, pid[0] ? pid : "unknown");
        close(fd);
        return -1;
    }
    char pid[32];
    const int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {}  // the pid is for the message only
    return fd;
}

// ---- pieces and their transfers

static void pieces_of_layer(const SsdStore* st, int layer, std::vector<Piece>* out) {
    const int64_t n = st->cfg.layer_elems;
    for (int64_t off = 0; off < n; off += st->piece) {
        const int64_t cnt = n - off < st->piece ? n - off : st->piece;
        out->push_back(Piece{layer, off, cnt, off + cnt == n});
    }
}

static int64_t off4(const SsdStore* st, int layer, int64_t e) { return (int64_t)layer * st->stride4 + e * 4; }
static int64_t off2(const SsdStore* st, int layer, int64_t e) { return (int64_t)layer * st->stride2 + e * 2; }

// Reads piece pc of generation g (kinds: a mask of 1 << K_*) into ring entry s.
static void issue_read(SsdStore* st, Slot* s, const Piece& pc, int g, unsigned kinds, bool grads) {
    const int64_t len4 = ssd_round_up(pc.cnt * 4, SSD_ALIGN), len2 = ssd_round_up(pc.cnt * 2, SSD_ALIGN);
    float* dst4[3] = {s->p, s->m, s->v};
    for (int k = 0; k < 3; k++)
        if (kinds & (1u << k))
            s->rd[s->nrd++] =
                ssd_io_submit(st->io, &st->files[g][k], 0, dst4[k], len4, off4(st, pc.layer, pc.off));
    if (kinds & (1u << K_BF16))
        s->rd[s->nrd++] =
            ssd_io_submit(st->io, &st->files[g][K_BF16], 0, s->b, len2, off2(st, pc.layer, pc.off));
    if (grads) s->rd[s->nrd++] = ssd_io_submit(st->io, &st->grads, 0, s->g, len2, off2(st, pc.layer, pc.off));
}

static void issue_write(SsdStore* st, Slot* s, const Piece& pc, int g, unsigned kinds) {
    const int64_t len4 = ssd_round_up(pc.cnt * 4, SSD_ALIGN), len2 = ssd_round_up(pc.cnt * 2, SSD_ALIGN);
    float* src4[3] = {s->p, s->m, s->v};
    for (int k = 0; k < 3; k++)
        if (kinds & (1u << k))
            s->wr[s->nwr++] =
                ssd_io_submit(st->io, &st->files[g][k], 1, src4[k], len4, off4(st, pc.layer, pc.off));
    if (kinds & (1u << K_BF16))
        s->wr[s->nwr++] =
            ssd_io_submit(st->io, &st->files[g][K_BF16], 1, s->b, len2, off2(st, pc.layer, pc.off));
}

// Waits for all of ring entry s's requests; -1 with the first error.
static int wait_all(SsdStore* st, SsdReq* reqs, int* n, char* err, size_t errlen) {
    int rc = 0;
    char e[1024];
    for (int i = 0; i < *n; i++)
        if (ssd_io_wait(st->io, reqs[i], e, sizeof e) != 0 && rc == 0) {
            rc = -1;
            snprintf(err, errlen, "%s", e);
        }
    *n = 0;
    return rc;
}

static int fail_store(SsdStore* st, const char* msg) {
    st->failed = true;
    st->fail_msg = msg;
    return -1;
}

static int refuse_if_failed(const SsdStore* st, char* err, size_t errlen) {
    if (!st->failed) return 0;
    snprintf(err, errlen, "the SSD store in %.400s failed earlier (%.500s); its last checkpoint is intact",
             st->dir.c_str(), st->fail_msg.c_str());
    return -1;
}

static unsigned state_kinds(const SsdStore* st) {
    return (1u << K_PARAMS) | (1u << K_M) | (1u << K_V) | (st->cfg.with_bf16 ? 1u << K_BF16 : 0u);
}

// Reads a piece of generation g, checked against its checksum; -1 with err.
static int check_piece(SsdStore* st, const Slot* s, const Piece& pc, int g, char* err, size_t errlen) {
    if (!st->sums_ok[g]) return 0;
    uint32_t c[K_COUNT];
    piece_sums(st, s, pc, state_kinds(st), c);
    const int64_t i = sum_index(st, pc.layer, pc.off);
    for (int k = 0; k < K_COUNT; k++) {
        if (!has_kind(&st->cfg, k) || c[k] == st->sums[g][k][(size_t)i]) continue;
        snprintf(
            err, errlen,
            "%.600s is damaged: layer %d, elements %lld..%lld read back with checksum %08x, written with "
            "%08x",
            st->files[g][k].path, pc.layer, (long long)pc.off, (long long)(pc.off + pc.cnt - 1), c[k],
            st->sums[g][k][(size_t)i]);
        return -1;
    }
    return 0;
}

// Reads all of generation g (two pieces in flight), checking every piece.
static int verify_generation(SsdStore* st, int g, char* err, size_t errlen) {
    drop_prefetch(st);
    std::vector<Piece> pcs;
    for (int l = 0; l < st->cfg.num_layers; l++) pieces_of_layer(st, l, &pcs);
    const size_t n = pcs.size();
    if (n > 0) issue_read(st, &st->ring[0], pcs[0], g, state_kinds(st), false);
    for (size_t i = 0; i < n; i++) {
        Slot* s = &st->ring[i % 2];
        if (i + 1 < n) issue_read(st, &st->ring[(i + 1) % 2], pcs[i + 1], g, state_kinds(st), false);
        int rc = wait_all(st, s->rd, &s->nrd, err, errlen);
        if (rc == 0) rc = check_piece(st, s, pcs[i], g, err, errlen);
        if (rc != 0) {
            char ignore[1024];
            Slot* o = &st->ring[(i + 1) % 2];
            wait_all(st, o->rd, &o->nrd, ignore, sizeof ignore);
            return -1;
        }
    }
    return 0;
}

// ---- whole-layer transfers

int ssd_store_write_layer(SsdStore* st, int layer, const float* params, const float* m, const float* v,
                          char* err, size_t errlen) {
    if (refuse_if_failed(st, err, errlen)) return -1;
    if (layer < 0 || layer >= st->cfg.num_layers || !params) {
        snprintf(err, errlen, "ssd_store_write_layer: bad layer %d or missing params", layer);
        return -1;
    }
    if (mark_writing(st, err, errlen) != 0) return -1;
    drop_prefetch(st);  // it may rewrite a prefetched layer
    std::vector<Piece> pcs;
    pieces_of_layer(st, layer, &pcs);
    Slot* s = &st->ring[0];
    for (const Piece& pc : pcs) {
        memset(s->p, 0, (size_t)st->bytes4);
        memset(s->m, 0, (size_t)st->bytes4);
        memset(s->v, 0, (size_t)st->bytes4);
        memcpy(s->p, params + pc.off, (size_t)pc.cnt * 4);
        if (m) memcpy(s->m, m + pc.off, (size_t)pc.cnt * 4);  // NULL: zeros (a fresh state)
        if (v) memcpy(s->v, v + pc.off, (size_t)pc.cnt * 4);
        if (st->cfg.with_bf16) {
            memset(s->b, 0, (size_t)st->bytes2);
            convert_f32_to_bf16(params + pc.off, s->b, pc.cnt);
        }
        record_sums(st, s, pc, st->wgen);
        issue_write(st, s, pc, st->wgen, state_kinds(st));
        if (wait_all(st, s->wr, &s->nwr, err, errlen) != 0) return fail_store(st, err);
    }
    st->src[layer] = (uint8_t)st->wgen;
    return 0;
}

int ssd_store_read_layer(SsdStore* st, int layer, float* params, float* m, float* v, uint16_t* bf16,
                         char* err, size_t errlen) {
    if (refuse_if_failed(st, err, errlen)) return -1;  // the newest state may be torn
    if (layer < 0 || layer >= st->cfg.num_layers || (bf16 && !st->cfg.with_bf16)) {
        snprintf(err, errlen,
                 "ssd_store_read_layer: bad layer %d, or a bf16 copy asked of a store without one", layer);
        return -1;
    }
    const unsigned kinds = (params ? 1u << K_PARAMS : 0u) | (m ? 1u << K_M : 0u) | (v ? 1u << K_V : 0u) |
                           (bf16 ? 1u << K_BF16 : 0u);
    std::vector<Piece> pcs;
    pieces_of_layer(st, layer, &pcs);
    Slot* s = &st->ring.back();  // the entry prefetch_next_round leaves free
    for (const Piece& pc : pcs) {
        issue_read(st, s, pc, st->src[layer], kinds, false);
        if (wait_all(st, s->rd, &s->nrd, err, errlen) != 0) return -1;
        if (params) memcpy(params + pc.off, s->p, (size_t)pc.cnt * 4);
        if (m) memcpy(m + pc.off, s->m, (size_t)pc.cnt * 4);
        if (v) memcpy(v + pc.off, s->v, (size_t)pc.cnt * 4);
        if (bf16) memcpy(bf16 + pc.off, s->b, (size_t)pc.cnt * 2);
    }
    return 0;
}

SsdReq ssd_store_read_bf16_async(SsdStore* st, int layer, uint16_t* dst) {
    if (!st->cfg.with_bf16 || layer < 0 || layer >= st->cfg.num_layers)
        return ssd_io_fail(st->io, "ssd_store_read_bf16_async: the store has no bf16 copy, or no such layer");
    // the backward waits for it: ahead of the round's read-ahead (a larger -sb queues more of it)
    return ssd_io_submit_urgent(st->io, &st->files[st->src[layer]][K_BF16], dst, st->stride2,
                                off2(st, layer, 0));
}

int ssd_store_layer_gen(const SsdStore* st, int layer) { return st->src[layer]; }

struct SsdBf16Files {
    SsdIo* io = nullptr;
    SsdFile f[2];
    int layers = 0;
    int64_t stride2 = 0;
    bool whole = false;  // DIR/layers.bf16 in f[0]
};

SsdBf16Files* ssd_bf16_files_open(const char* dir, int num_layers, int64_t layer_elems, int whole, char* err,
                                  size_t errlen) {
    SsdBf16Files* b = new SsdBf16Files();
    b->layers = num_layers;
    b->stride2 = ssd_round_up(layer_elems * 2, SSD_ALIGN);
    b->whole = whole != 0;
    for (SsdFile& f : b->f) f.fd = -1;
    SsdIoConfig ioc;
    memset(&ioc, 0, sizeof ioc);
    ioc.quiet = 1;
    for (int g = 0; g < (whole ? 1 : 2); g++)
        if (ssd_file_open_cached(
                &b->f[g], (whole ? std::string(dir) + "/" + kWholeBf16 : gen_path(dir, g, K_BF16)).c_str(),
                err, errlen) != 0) {
            ssd_bf16_files_close(b);
            return NULL;
        } else if (b->f[g].size < num_layers * b->stride2) {
            snprintf(err, errlen, "%.600s holds %lld bytes, not the %lld of %d layers' bf16 weights",
                     b->f[g].path, (long long)b->f[g].size, (long long)(num_layers * b->stride2), num_layers);
            ssd_bf16_files_close(b);
            return NULL;
        }
    if (!(b->io = ssd_io_open(&ioc, err, errlen))) {
        ssd_bf16_files_close(b);
        return NULL;
    }
    return b;
}

void ssd_bf16_files_close(SsdBf16Files* b) {
    if (!b) return;
    if (b->io) ssd_io_close(b->io);  // waits for anything in flight
    for (SsdFile& f : b->f) ssd_file_close(&f);
    delete b;
}

SsdIo* ssd_bf16_files_io(SsdBf16Files* b) { return b->io; }

SsdReq ssd_bf16_files_read(SsdBf16Files* b, int gen, int layer, uint16_t* dst) {
    if (gen < 0 || gen > 1 || layer < 0 || layer >= b->layers)
        return ssd_io_fail(b->io, "ssd_bf16_files_read: no such generation or layer");
    return ssd_io_submit(b->io, &b->f[b->whole ? 0 : gen], 0, dst, b->stride2, (int64_t)layer * b->stride2);
}

SsdReq ssd_store_write_grads_async(SsdStore* st, int layer, const uint16_t* src) {
    if (!st->cfg.grads_on_disk || layer < 0 || layer >= st->cfg.num_layers)
        return ssd_io_fail(st->io,
                           "ssd_store_write_grads_async: the store keeps no gradients, or no such layer");
    return ssd_io_submit(st->io, &st->grads, 1, (void*)src, st->stride2, off2(st, layer, 0));
}

// Not through the store's queue: a copy into the page cache (the file is buffered), not behind the round's
// writes; the kernel's write-back starts at once (sync_file_range), ssd_store_sync_whole waits for it.
int ssd_store_write_whole_bf16(SsdStore* st, int layer, const uint16_t* src, char* err, size_t errlen) {
    if (st->cfg.whole_bf16_elems <= 0 || layer < 0 || layer >= st->cfg.num_layers) {
        snprintf(err, errlen, "ssd_store_write_whole_bf16: the store keeps no whole layers, or no layer %d",
                 layer);
        return -1;
    }
    const int64_t bytes = st->cfg.whole_bf16_elems * 2, at = (int64_t)layer * st->stride_whole;
    if (const int fault = ssd_io_fault_take(st->io, 1)) {  // SSD_FAULT (tests): as a transfer failing here
        snprintf(err, errlen, "cannot write %.600s: %s", st->whole.path,
                 fault > 0 ? strerror(fault) : "no space");
        return -1;
    }
    for (int64_t done = 0; done < bytes;) {
        const ssize_t w =
            pwrite(st->whole.fd, (const char*)src + done, (size_t)(bytes - done), (off_t)(at + done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            snprintf(err, errlen, "cannot write %.600s: %s", st->whole.path,
                     w < 0 ? strerror(errno) : "no space");
            return -1;
        }
        done += w;
    }
    sync_file_range(st->whole.fd, (off_t)at, (off_t)bytes, SYNC_FILE_RANGE_WRITE);  // a hint: errors below
    return 0;
}

int ssd_store_sync_whole(SsdStore* st, char* err, size_t errlen) {
    return st->whole.fd >= 0 ? ssd_file_sync(&st->whole, err, errlen) : 0;
}

int ssd_store_wait(SsdStore* st, SsdReq r, char* err, size_t errlen) {
    return ssd_io_wait(st->io, r, err, errlen);
}

// ---- the round

// The next round's first pieces (pcs[0 .. ring-2], what its read-ahead starts with) into ring entries 0 ..
// ring-2, p, m, v only: a round's reads move from the next forward pass, where the forward waits for them,
// to the time between rounds (the backward pass), where the disk is idle. Issued once this round's writes
// are all done; the round takes a piece only if its layer's generation is still the one read.
static void prefetch_next_round(SsdStore* st, const std::vector<Piece>& pcs) {
    const int64_t n = std::min<int64_t>((int64_t)pcs.size(), (int64_t)st->ring.size() - 1);
    for (int64_t j = 0; j < n; j++) {
        Slot* s = &st->ring[(size_t)j];
        const Piece& pc = pcs[(size_t)j];
        issue_read(st, s, pc, st->src[pc.layer], (1u << K_PARAMS) | (1u << K_M) | (1u << K_V), false);
        s->pre_layer = pc.layer;
        s->pre_off = pc.off;
        s->pre_gen = st->src[pc.layer];
    }
}
// Before another use of the ring (a whole-layer transfer, a checkpoint's copy): prefetched reads end, unused.
static void drop_prefetch(SsdStore* st) {
    char ignore[1024];
    for (Slot& s : st->ring)
        if (s.pre_layer >= 0) {
            wait_all(st, s.rd, &s.nrd, ignore, sizeof ignore);  // a failed prefetch is read again when needed
            s.pre_layer = -1;
        }
}

int ssd_store_round(SsdStore* st, const int* layers, int n, const SsdRoundFns* fns, char* err,
                    size_t errlen) {
    if (refuse_if_failed(st, err, errlen)) return -1;
    const SsdStoreConfig* c = &st->cfg;
    if (!fns || !fns->update || (!c->grads_on_disk && !fns->grads)) {
        snprintf(err, errlen,
                 "ssd_store_round: no update function, or no gradients function with the gradients in RAM");
        return -1;
    }
    std::vector<Piece> pcs;
    std::vector<char> seen((size_t)c->num_layers, 0);
    for (int i = 0; i < n; i++) {
        if (layers[i] < 0 || layers[i] >= c->num_layers || seen[(size_t)layers[i]]) {
            snprintf(err, errlen, "ssd_store_round: layer %d is not in the store (0..%d) or listed twice",
                     layers[i], c->num_layers - 1);
            return -1;
        }
        seen[(size_t)layers[i]] = 1;
        pieces_of_layer(st, layers[i], &pcs);
    }
    if (pcs.empty()) return 0;
    if (mark_writing(st, err, errlen) != 0) return -1;
    const int64_t P = (int64_t)pcs.size(), R = c->ring, w = st->wgen;
    int64_t next_read = 0;  // the first pieces may be read already (prefetch_next_round)
    for (int64_t j = 0; j < std::min<int64_t>(P, R - 1); j++) {
        Slot* s = &st->ring[(size_t)j];
        const Piece& pc = pcs[(size_t)j];
        if (next_read != j || s->pre_layer != pc.layer || s->pre_off != pc.off ||
            s->pre_gen != st->src[pc.layer])
            break;
        s->piece = j;
        s->pre_layer = -1;
        s->grads_in_ram = c->grads_on_disk && fns->grads_in_ram && fns->grads_in_ram(fns->ctx, pc.layer);
        issue_read(st, s, pc, st->src[pc.layer], 0u, c->grads_on_disk && !s->grads_in_ram);  // the gradients
        next_read = j + 1;
    }
    drop_prefetch(st);  // what the round does not take
    for (int64_t j = next_read; j < R; j++) {
        Slot& s = st->ring[(size_t)j];
        s.piece = -1;
        s.nrd = s.nwr = 0;
    }
    std::deque<std::pair<int, int64_t>>
        done_q;  // with_bf16: layers whose last piece's writes are not yet waited
    int64_t retired = -1;
    const uint16_t* gram = NULL;
    uint16_t* bdst = NULL;
    int rc = 0;

    // Waits in piece order for the writes of pieces up to j; reports completed layers.
    auto retire_upto = [&](int64_t j) -> int {
        for (int64_t k = retired + 1; k <= j; k++) {
            Slot* s = &st->ring[(size_t)(k % R)];
            if (wait_all(st, s->wr, &s->nwr, err, errlen) != 0) return -1;
            retired = k;
            while (!done_q.empty() && done_q.front().second <= retired) {
                if (fns->layer_done) fns->layer_done(fns->ctx, done_q.front().first);
                done_q.pop_front();
            }
        }
        return 0;
    };

    for (int64_t i = 0; i < P && rc == 0; i++) {
        // read ring - 2 pieces ahead; reuse an entry once its last piece's writes are done
        while (rc == 0 && next_read < P && next_read <= i + R - 2) {
            Slot* s = &st->ring[(size_t)(next_read % R)];
            if (s->piece >= 0 && (rc = retire_upto(s->piece)) != 0) break;
            s->piece = next_read;
            const Piece& pr = pcs[(size_t)next_read];
            s->grads_in_ram = c->grads_on_disk && fns->grads_in_ram && fns->grads_in_ram(fns->ctx, pr.layer);
            issue_read(st, s, pr, st->src[pr.layer], (1u << K_PARAMS) | (1u << K_M) | (1u << K_V),
                       c->grads_on_disk && !s->grads_in_ram);
            next_read++;
        }
        if (rc != 0) break;
        Slot* s = &st->ring[(size_t)(i % R)];
        if ((rc = wait_all(st, s->rd, &s->nrd, err, errlen)) != 0) break;
        const Piece& pc = pcs[(size_t)i];
        if (pc.off == 0) {
            gram = fns->grads ? fns->grads(fns->ctx, pc.layer) : NULL;
            if ((!c->grads_on_disk || s->grads_in_ram) && !gram) {
                snprintf(err, errlen, "ssd_store_round: no gradients for layer %d", pc.layer);
                rc = -1;
                break;
            }
            bdst = c->with_bf16 ? NULL : fns->bf16_dst ? fns->bf16_dst(fns->ctx, pc.layer) : NULL;
        }
        const uint16_t* g = c->grads_on_disk && !s->grads_in_ram ? s->g : gram + pc.off;
        uint16_t* bo = c->with_bf16 ? s->b : bdst ? bdst + pc.off : NULL;
        fns->update(fns->ctx, pc.layer, pc.off, pc.cnt, s->p, g, s->m, s->v, bo);
        record_sums(st, s, pc, (int)w);
        issue_write(st, s, pc, (int)w, state_kinds(st));
        if (pc.last) {
            st->src[pc.layer] = (uint8_t)w;
            if (!c->with_bf16) {
                if (fns->layer_done) fns->layer_done(fns->ctx, pc.layer);
            } else {
                done_q.emplace_back(pc.layer, i);
            }
        }
        // report finished layers early: retire the oldest fully written pieces
        while (retired + 1 < i) {
            Slot* o = &st->ring[(size_t)((retired + 1) % R)];
            bool all = true;
            for (int q = 0; q < o->nwr && all; q++) all = ssd_io_poll(st->io, o->wr[q]) != 0;
            if (!all || (rc = retire_upto(retired + 1)) != 0) break;
        }
    }
    if (rc == 0) rc = retire_upto(P - 1);
    if (rc == 0) prefetch_next_round(st, pcs);  // every write is done: the next round's reads may start
    // bf16_cached: the round's bf16 writes went to the page cache; the kernel's write-back of them fails
    // here, in one line, not in a later read of older bytes
    if (rc == 0 && c->bf16_cached) rc = ssd_file_sync(&st->files[w][K_BF16], err, errlen);
    if (rc != 0) {
        char ignore[1024];
        for (Slot& s : st->ring) {  // nothing may stay in flight into buffers we own
            wait_all(st, s.rd, &s.nrd, ignore, sizeof ignore);
            wait_all(st, s.wr, &s.nwr, ignore, sizeof ignore);
        }
        return fail_store(st, err);
    }
    return 0;
}

// ---- checkpoints

// Every file of both generations is still the one the store opened, at its size: a file removed (or replaced)
// during the run keeps taking writes through its descriptor, and the checkpoint would be one no resume opens.
static int files_still_there(SsdStore* st, char* err, size_t errlen) {
    for (int g = 0; g < 2; g++)
        for (int k = 0; k < K_COUNT; k++) {
            const SsdFile* f = &st->files[g][k];
            if (!has_kind(&st->cfg, k) || f->fd < 0) continue;
            struct stat open_st, path_st;
            if (fstat(f->fd, &open_st) == 0 && lstat(f->path, &path_st) == 0 && open_st.st_nlink > 0 &&
                open_st.st_ino == path_st.st_ino && open_st.st_dev == path_st.st_dev &&
                open_st.st_size == f->size)
                continue;
            // the newest checkpoint's generation (the rounds write the other one): that checkpoint is gone
            const int64_t held = g != st->wgen ? st->step[g] : -1;
            snprintf(err, errlen, "%.600s was removed, replaced, cut short or grown during the run%s",
                     f->path, held >= 0 ? "; the store's checkpoint of step " : "");
            if (held >= 0) {
                const size_t n = strlen(err);
                snprintf(err + n, errlen - n, "%lld is gone with it", (long long)held);
            }
            return -1;
        }
    return 0;
}

int ssd_store_checkpoint(SsdStore* st, int64_t step, char* err, size_t errlen) {
    if (refuse_if_failed(st, err, errlen)) return -1;
    if (files_still_there(st, err, errlen) != 0) return fail_store(st, err);
    if (step < 0) {
        snprintf(err, errlen, "ssd_store_checkpoint: step %lld < 0", (long long)step);
        return -1;
    }
    const int w = st->wgen;
    // A layer not updated since the last checkpoint is copied from the other generation.
    for (int l = 0; l < st->cfg.num_layers; l++) {
        if (st->src[l] == w) continue;
        if (mark_writing(st, err, errlen) != 0) return -1;
        drop_prefetch(st);  // the copy uses the ring, and changes the layer's generation
        std::vector<Piece> pcs;
        pieces_of_layer(st, l, &pcs);
        Slot* s = &st->ring[0];
        for (const Piece& pc : pcs) {
            issue_read(st, s, pc, st->src[l], state_kinds(st), false);
            if (wait_all(st, s->rd, &s->nrd, err, errlen) != 0) return fail_store(st, err);
            if (check_piece(st, s, pc, st->src[l], err, errlen) != 0) return fail_store(st, err);
            record_sums(st, s, pc, w);
            issue_write(st, s, pc, w, state_kinds(st));
            if (wait_all(st, s->wr, &s->nwr, err, errlen) != 0) return fail_store(st, err);
            progress_tick();  // several ranks wait meanwhile: a copied piece is progress (progress_watch.h)
        }
        st->src[l] = (uint8_t)w;
    }
    {
        ProgressTicker ticker;  // the syncs: one call each, however many bytes the cache still holds
        for (int k = 0; k < K_COUNT; k++)
            if (has_kind(&st->cfg, k) && ssd_file_sync(&st->files[w][k], err, errlen) != 0)
                return fail_store(st, err);
    }
    if (write_sums(st, w, err, errlen) != 0) return fail_store(st, err);
    st->step[w] = step;
    if (write_manifest(st, err, errlen) != 0) {
        st->step[w] = -1;
        st->sums_ok[w] = false;
        return fail_store(st, err);
    }
    st->wgen = 1 - w;  // the checkpoint's generation is read, never written, until the next checkpoint
    return 0;
}

// ============================================================================
// Capacity plan

SsdPlan ssd_plan(const SsdPlanInput* in) {
    SsdPlan p;
    memset(&p, 0, sizeof p);
    const int64_t L = in->streamed_layers, n = in->layer_elems;
    const int64_t s4 = ssd_round_up(n * 4, SSD_ALIGN), s2 = ssd_round_up(n * 2, SSD_ALIGN);
    p.host_resident = in->resident_elems * 14;
    const int64_t sw = ssd_round_up(in->whole_bf16_elems * 2, SSD_ALIGN);  // several nodes, -sw 1: a layer
    p.host_bf16 = in->with_bf16 ? (int64_t)in->bf16_buffers * s2
                  : sw          ? (int64_t)in->bf16_buffers * sw
                                : L * n * 2;
    p.host_grads = in->grads_on_disk ? (int64_t)in->grad_buffers * s2 : L * n * 2;
    SsdStoreConfig c;
    memset(&c, 0, sizeof c);
    c.num_layers = (int)L;
    c.layer_elems = n;
    c.with_bf16 = in->with_bf16;
    c.whole_bf16_elems = in->whole_bf16_elems;
    c.grads_on_disk = in->grads_on_disk;
    c.ring = in->ring;
    c.piece_elems = in->piece_elems;
    p.host_ring = n > 0 ? ssd_store_ring_bytes(&c) : 0;
    p.host_bytes = p.host_resident + p.host_bf16 + p.host_grads + p.host_ring + in->other_host_bytes;
    p.disk_bytes = ssd_store_disk_bytes(&c);
    // -sw 1: the backward pass reads the bf16 weights; the forward takes them from the round (handoff), or
    // on several ranks from the page cache the round wrote them through (bf16_cached)
    // several nodes: the whole layers' file, written through the page cache as the round goes (the kernel
    // writes it back) and read back in the backward pass
    p.read_per_step = L * (3 * s4 + (in->grads_on_disk ? s2 : 0) + (in->with_bf16 ? s2 : 0) + sw);
    p.write_per_step = L * (3 * s4 + (in->with_bf16 ? s2 : 0) + (in->grads_on_disk ? s2 : 0) + sw);
    // prefetch_next_round: the round's first ring - 1 pieces, in layer order (each layer's last piece may be
    // short); their p, m, v in whole 4 KiB blocks, as read
    // and the writes (p, m, v, -sw 1's bf16) of pieces 0 .. P - ring - 1 of the round's P
    const int64_t piece = piece_elems_of(&c), pieces = L * ssd_store_layer_pieces(&c);
    const int64_t waited = std::max<int64_t>(0, pieces - in->ring);
    int64_t ahead = 0, written = 0, k = 0;
    for (int64_t l = 0; l < L; l++)
        for (int64_t off = 0; off < n; off += piece, k++) {
            const int64_t cnt = std::min(piece, n - off), f4 = 3 * ssd_round_up(cnt * 4, SSD_ALIGN);
            if (k < (int64_t)in->ring - 1) ahead += f4;
            if (k < waited) written += f4 + (in->with_bf16 ? ssd_round_up(cnt * 2, SSD_ALIGN) : 0);
        }
    const int64_t held = in->grads_on_disk ? std::min<int64_t>(in->held_grads, L) : 0;
    p.round_reads = L * (3 * s4 + (in->grads_on_disk ? s2 : 0)) - ahead - held * s2;
    p.round_writes = written;
    return p;
}
