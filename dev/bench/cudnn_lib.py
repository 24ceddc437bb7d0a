# cudnn_lib.py — which libcudnn.so.9 the GPU window's binaries should dlopen (gpu_window.sh's probe), and its
# version. First PyTorch's own (the library its cuDNN SDPA backend runs, read from this process's memory map
# after `import torch`: issue 40 compares our cuDNN path with torch's on the same library), then the Python
# wheels' (nvidia/*/lib), then the paths given as arguments (the loader's, the CUDA toolkit's). Prints one line,
# "PATH<TAB>VERSION<TAB>SOURCE" (VERSION as cudnnGetVersion: 91900 is 9.19.0), and exits 0; nothing and exit 1
# if none loads. It runs nothing on the GPU.
#
# usage: python3 dev/bench/cudnn_lib.py [CANDIDATE_PATH...]
#        python3 dev/bench/cudnn_lib.py --only PATH     (PATH's version alone: LLMC_CUDNN_LIB set by hand)
import ctypes
import glob
import os
import sys


def version_of(path):
    try:
        lib = ctypes.CDLL(path)
        lib.cudnnGetVersion.restype = ctypes.c_size_t
        return int(lib.cudnnGetVersion())
    except (OSError, AttributeError):
        return 0


def candidates():
    found = []
    if sys.argv[1:2] == ["--only"]:
        return [(f, 0, "LLMC_CUDNN_LIB") for f in sys.argv[2:] if os.path.isfile(f)]
    try:
        import torch

        v = torch.backends.cudnn.version() or 0
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split()
                if len(parts) >= 6 and os.path.basename(parts[5]).startswith("libcudnn.so"):
                    found.append((parts[5], v, "torch %s" % torch.__version__))
                    break
    except Exception as e:  # no torch, or one without cuDNN: the other places
        print("cudnn_lib: torch: %s" % e, file=sys.stderr)
    try:
        import nvidia

        for p in nvidia.__path__:
            found += [(f, 0, "wheel") for f in sorted(glob.glob(os.path.join(p, "*", "lib", "libcudnn.so.9")))]
    except Exception as e:
        print("cudnn_lib: nvidia wheels: %s" % e, file=sys.stderr)
    found += [(f, 0, "loader/toolkit") for f in sys.argv[1:] if os.path.isfile(f)]
    return found


def main():
    for path, v, source in candidates():
        v = v or version_of(path)
        if v >= 90000:
            print("%s\t%d\t%s" % (path, v, source))
            return 0
        print("cudnn_lib: %s: version %d, not cuDNN 9" % (path, v), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
