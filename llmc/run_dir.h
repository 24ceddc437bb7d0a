// run_dir.h — the -o directory: one run at a time, durable renames, pruning.
// Not here: checkpoint contents (checkpoint.h).
#pragma once
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <set>
#include <string>
#include <vector>

// dir's parent: "." for a bare name, "/" for one under the root
static inline std::string parent_dir(const char* dir) {
    const std::string d = dir;
    const size_t end = d.find_last_not_of('/'), slash = d.find_last_of('/', end);
    return slash == std::string::npos ? "." : slash == 0 ? "/" : d.substr(0, slash);
}

// mkdir -p, mode 0755; 0 with err on failure.
static inline int make_dirs(const char* dir, char* err, size_t errlen) {
    char path[4096];
    // from path + 1: an empty path would overrun the terminator
    if (!dir[0]) {
        snprintf(err, errlen, "output dir path is empty");
        return 0;
    }
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        snprintf(err, errlen, "output dir path too long");
        return 0;
    }
    for (char* s = path + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            const char saved = *s;
            *s = '\0';
            if (mkdir(path, 0755) != 0 && errno != EEXIST) {
                snprintf(err, errlen, "cannot create directory %.160s: %.60s", path, strerror(errno));
                return 0;
            }
            *s = saved;
            if (saved == '\0') break;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "output path %.200s is not a directory", dir);
        return 0;
    }
    return 1;
}

// One run per directory: flock on DIR/LOCK until exit, if supported.
static inline int lock_output_dir(const char* dir, char* err, size_t errlen) {
    if (!make_dirs(dir, err, errlen)) return 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/LOCK", dir);
    const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create %.200s: %.60s", path, strerror(errno));
        return 0;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int busy = errno == EWOULDBLOCK;
        char pid[24] = "";
        const ssize_t n = busy ? pread(fd, pid, sizeof pid - 1, 0) : 0;
        close(fd);
        if (!busy) return 1;  // no flock here (ENOLCK, EINVAL)
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        snprintf(
            err, errlen,
            "%.200s is in use by another run (pid %s holds its LOCK): let it finish, or choose another -o",
            dir, pid[0] ? pid : "unknown");
        return 0;
    }
    char pid[24];
    const int len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) {}  // the pid only helps the message
    return 1;  // fd, and so the lock, held until exit
}

// Makes dir's renames, creations, removals durable; 0 with err.
static inline int fsync_dir(const char* dir, char* err, size_t errlen) {
    const int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open directory %.160s: %.60s", dir, strerror(errno));
        return 0;
    }
    const int ok = fsync(fd) == 0;
    if (!ok) snprintf(err, errlen, "cannot fsync directory %.160s: %.60s", dir, strerror(errno));
    close(fd);
    return ok;
}

// N of exactly <prefix>N<suffix>, N digits in 1..INT_MAX; else -1 ("DONE_2x").
static inline int64_t checkpoint_name_step(const char* name, const char* prefix, const char* suffix) {
    const size_t np = strlen(prefix);
    if (strncmp(name, prefix, np) != 0 || name[np] < '0' || name[np] > '9')
        return -1;  // strtoll skips spaces, signs
    char* end = NULL;
    errno = 0;
    const long long v = strtoll(name + np, &end, 10);
    if (errno == ERANGE || strcmp(end, suffix) != 0 || v < 1 || v > 2147483647) return -1;
    return v;
}

// Largest N < below in dir's <prefix>N<suffix>, or -1. INT64_MAX: newest.
static inline int64_t dir_latest_step(const char* dir, const char* prefix, const char* suffix,
                                      int64_t below) {
    DIR* d = opendir(dir);
    if (!d) return -1;
    int64_t best = -1;
    struct dirent* e;
    while ((e = readdir(d))) {
        const int64_t s = checkpoint_name_step(e->d_name, prefix, suffix);
        if (s > best && s < below) best = s;
    }
    closedir(d);
    return best;
}

// A checkpoint's files: <prefix><step, 8 digits><suffix> in -o.
typedef struct {
    const char* prefix;
    const char* suffix;
} CheckpointFile;

// Files of checkpoints without their marker (files[0]): a save a stop cut short before its marker, an -nk
// removal cut short after it, or a marker removed by hand to resume an older checkpoint. No run reads them.
// Those of steps below remove_below go (-nk after a save: every step below it is superseded; the caller holds
// -o's lock); the rest stay, and note says so. Our names only (8 digits).
static inline void unfinished_checkpoints(const char* dir, const CheckpointFile* files, int n_files,
                                          int64_t remove_below, bool note) {
    DIR* d = opendir(dir);
    if (!d) return;
    std::vector<std::string> gone;
    std::set<int64_t> removed_steps, kept_steps;
    struct dirent* e;
    while ((e = readdir(d)))
        for (int i = 1; i < n_files; i++) {
            const int64_t s = checkpoint_name_step(e->d_name, files[i].prefix, files[i].suffix);
            char ours[64], marker[4200];
            snprintf(ours, sizeof ours, "%s%08lld%s", files[i].prefix, (long long)s, files[i].suffix);
            snprintf(marker, sizeof marker, "%s/%s%08lld%s", dir, files[0].prefix, (long long)s,
                     files[0].suffix);
            if (s < 0 || strcmp(ours, e->d_name) != 0 || access(marker, F_OK) == 0 || errno != ENOENT)
                continue;
            if (s < remove_below) gone.push_back(std::string(dir) + "/" + e->d_name), removed_steps.insert(s);
            else kept_steps.insert(s);
        }
    closedir(d);
    auto list = [](const std::set<int64_t>& steps) {
        std::string t;
        for (int64_t s : steps) t += (t.empty() ? "" : ", ") + std::to_string(s);
        return t;
    };
    int removed = 0;
    for (const std::string& path : gone) removed += unlink(path.c_str()) == 0;
    if (removed)
        printf("removed %d file%s of unfinished checkpoints in %s (step%s %s: no DONE marker)\n", removed,
               removed > 1 ? "s" : "", dir, removed_steps.size() > 1 ? "s" : "", list(removed_steps).c_str());
    if (note && !kept_steps.empty())
        printf(
            "note: %s holds checkpoint files without a DONE marker (step%s %s: a save or an -nk removal that "
            "a stop cut short, or a DONE removed by hand); no run reads them, and with -nk each goes at the "
            "first save past its step\n",
            dir, kept_steps.size() > 1 ? "s" : "", list(kept_steps).c_str());
}

// -nk / -nm: removes all but the `keep` newest checkpoints (multiples of major_every stay).
static inline int prune_checkpoints(const char* dir, int64_t newest, int keep, int major_every,
                                    const CheckpointFile* files, int n_files, char* err, size_t errlen) {
    if (keep <= 0) return 1;
    int rank = 0;
    for (int64_t s = dir_latest_step(dir, files[0].prefix, files[0].suffix, newest + 1); s >= 0;
         s = dir_latest_step(dir, files[0].prefix, files[0].suffix, s)) {
        if (++rank <= keep || (major_every > 0 && s % major_every == 0)) continue;
        for (int i = 0; i < n_files; i++) {
            char path[4200];  // -o is at most 4000 characters (train_args_check)
            snprintf(path, sizeof path, "%s/%s%08lld%s", dir, files[i].prefix, (long long)s, files[i].suffix);
            const int removed = unlink(path) == 0;
            if (!removed && errno != ENOENT) {
                snprintf(err, errlen, "-nk: cannot remove %.300s: %.60s", path, strerror(errno));
                return 0;
            }
            if (i == 0 && !removed) break;  // a marker named otherwise (fewer digits): not ours
            if (i == 0 && !fsync_dir(dir, err, errlen)) return 0;
            if (i == n_files - 1) printf("removed checkpoint step %lld (-nk %d)\n", (long long)s, keep);
        }
    }
    return 1;
}
