// hf_cases.h — a check script's cases from transformers, made once per test run (test_llama_cpu,
// test_packed). Without torch and transformers the tests that need them skip, or fail under HF_REQUIRED=1.
// Not here: reading the cases (each test's read_expected).
#pragma once
#include <gtest/gtest.h>
#include <ftw.h>     // defines: nftw, FTW_DEPTH, FTW_PHYS
#include <stdlib.h>  // defines: mkdtemp, system, getenv
#include <string.h>  // defines: strcmp
#include <unistd.h>  // defines: access
#include <string>

// The Python that has torch and transformers: $HF_PYTHON, else .venv-hf, else python3.
static inline std::string hf_python() {
    if (const char* p = getenv("HF_PYTHON")) return p;
    if (access(".venv-hf/bin/python", X_OK) == 0) return ".venv-hf/bin/python";
    return "python3";
}

struct HfCases {
    std::string dir;     // the script's output; empty when it could not run
    std::string reason;  // why not
    bool python_missing = false;
};

// Runs `script` into /tmp/<name>_XXXXXX, with its log there.
static inline HfCases hf_cases_run(const char* script, const char* name) {
    HfCases c;
    const std::string py = hf_python();
    if (system((py + " -c 'import torch, transformers, safetensors' >/dev/null 2>&1").c_str()) != 0) {
        c.python_missing = true;
        c.reason = py + " lacks torch, transformers or safetensors: .ci/run installs them in .venv-hf";
        return c;
    }
    std::string tmpl = std::string("/tmp/") + name + "_XXXXXX";
    const std::string dir = mkdtemp(&tmpl[0]) ? tmpl : std::string();
    const std::string cmd = py + " " + script + " " + dir + " > " + dir + "/log.txt 2>&1";
    if (dir.empty() || system(cmd.c_str()) != 0) {
        c.reason = std::string(script) + " failed (" + cmd + ")";
        return c;
    }
    c.dir = dir;
    return c;
}

static inline int hf_cases_rm_entry(const char* path, const struct stat*, int, struct FTW*) {
    return remove(path);
}
static inline void hf_cases_remove(const HfCases& c) {
    if (!c.dir.empty()) nftw(c.dir.c_str(), hf_cases_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

// Skips (or fails under HF_REQUIRED=1) when transformers is missing; fails when the script failed.
#define NEED_HF_CASES(cases)                                                             \
    do {                                                                                 \
        const HfCases& c_ = (cases);                                                     \
        if (c_.python_missing) {                                                         \
            const char* req = getenv("HF_REQUIRED");                                     \
            if (req && strcmp(req, "1") == 0) FAIL() << c_.reason << " (HF_REQUIRED=1)"; \
            GTEST_SKIP() << c_.reason;                                                   \
        }                                                                                \
        ASSERT_FALSE(c_.dir.empty()) << c_.reason;                                       \
    } while (0)
