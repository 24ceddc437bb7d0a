// wheel_libs.h — where Python wheels keep NVIDIA's shared libraries (PyTorch's nvidia/cudnn, nvidia/nccl):
// the site-packages of /usr/local, /usr, conda, a virtualenv and ~/.local. For dlopen's candidates (cuDNN in
// cudnn_att.cpp, NCCL in collectives.h). Not here: loading them, or the loader's own search.
#pragma once
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <vector>

// Every existing PREFIX/python3*/*-packages/nvidia/<tail>, e.g. tail "nccl/lib/libnccl.so.2".
static inline std::vector<std::string> wheel_libraries(const char* tail) {
    std::vector<std::string> prefixes = {"/usr/local/lib", "/usr/lib", "/opt/conda/lib"}, found;
    for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX", "HOME"}) {
        const char* v = getenv(var);
        if (v && *v) prefixes.push_back(std::string(v) + (strcmp(var, "HOME") ? "/lib" : "/.local/lib"));
    }
    for (const std::string& p : prefixes) {
        glob_t g;
        if (glob((p + "/python3*/*-packages/nvidia/" + tail).c_str(), 0, NULL, &g) == 0)
            for (size_t i = 0; i < g.gl_pathc; i++) found.push_back(g.gl_pathv[i]);
        globfree(&g);
    }
    return found;
}
