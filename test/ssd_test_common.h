// ssd_test_common.h — what test_ssd.cpp and test_ssd_io.cpp share: a temporary directory removed with
// everything in it, and a byte pattern.
#pragma once
#include <gtest/gtest.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace fs = std::filesystem;

// A directory under $TMPDIR (else /tmp), removed with everything in it at the end of the test. A death test's
// child (re-executed from the start, threadsafe style) finds its parent's directory in SSD_TEST_DIR instead.
struct TempDir {
    std::string path;
    bool owner = true;
    explicit TempDir(const char* base = NULL, bool share_with_child = false) {
        const char* inherited = share_with_child ? getenv("SSD_TEST_DIR") : NULL;
        if (inherited) {
            path = inherited;
            owner = false;
            return;
        }
        const char* t = base ? base : getenv("TMPDIR");
        std::string tmpl = std::string(t && *t ? t : "/tmp") + "/test_ssd_XXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back(0);
        if (!mkdtemp(buf.data())) {
            ADD_FAILURE() << "mkdtemp " << tmpl << ": " << strerror(errno);
            return;
        }
        path = buf.data();
        if (share_with_child) setenv("SSD_TEST_DIR", path.c_str(), 1);
    }
    ~TempDir() {
        if (!owner || path.empty()) return;
        std::error_code ec;
        fs::remove_all(path, ec);
        unsetenv("SSD_TEST_DIR");
    }
};

static inline std::vector<uint8_t> pattern(int64_t n, uint32_t seed) {
    std::vector<uint8_t> v((size_t)n);
    std::mt19937 r(seed);
    for (auto& b : v) b = (uint8_t)r();
    return v;
}
