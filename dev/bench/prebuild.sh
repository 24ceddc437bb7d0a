#!/usr/bin/env bash
# prebuild.sh — builds here, on the CPU machine, everything the GPU window runs, into .carry/ (git-ignored; the
# device tool sends it with the tree when a call names it: carry [".carry"]). The GPU machine then spends its
# minutes running, not compiling. It does not run anything on a GPU.
#   .carry/bin/       the binaries (dev/bench/build_carry.sh: sm_90 + PTX, x86-64-v3, .avx512 copies of the
#                     CPU-heavy ones; liburing and GoogleTest linked statically)
#   .carry/rebuild/   liburing and GoogleTest headers and static libraries, cudnn-frontend's headers and cuDNN's
#                     cudnn*.h (3.5 MB; the cuDNN attention path): a binary that will not load there is rebuilt
#                     from them (gpu_window.sh's probe), with no package installed
#   .carry/peers/     the PyTorch peers (shared/peers/gpt_baseline.py)
#   .carry/commit     the commit built (-dirty: with uncommitted changes); .carry/plan.txt: gpu_window.sh plan
# Then a check: each binary's shared libraries must be among those an Ubuntu 24.04 machine with the CUDA 13
# toolkit has (cuBLAS, cuBLASLt, libgomp, libstdc++ and libgcc_s, glibc), its glibc symbol versions at most
# 2.39 (Ubuntu 24.04's), and .carry within what the device takes beside the tree (64 MiB in all, 4 kept spare).
# The GPU binaries must have the cuDNN attention path built in
# and reference no cuDNN symbol (they dlopen it: the GPU machine's cuDNN is PyTorch's, found by the probe).
# Exit 1 on any failure.
#
# usage (repo root): bash dev/bench/prebuild.sh          (a few minutes on 2 cores)
#                    bash dev/bench/prebuild.sh check    (the check alone)
# env: CARRY (.carry), SHARED (../shared), JOBS
set -u
cd "$(dirname "$0")/../.." || exit 1
CARRY=${CARRY:-.carry}
SHARED=${SHARED:-../shared}
SYSLIB=/usr/lib/x86_64-linux-gnu
# The device takes 64 MiB with the tree (tracked files and untracked ones git does not ignore): .carry gets the
# rest, less 4 MiB kept for the tree's growth between this build and the window. Apparent sizes, in MiB.
apparent_mib() { du -cb "$@" 2> /dev/null | tail -n1 | awk '{ printf "%d", ($1 + 1048575) / 1048576 }'; }
TREE_MIB=10  # where git cannot list the tree: a guess
if files=$(git ls-files -co --exclude-standard 2> /dev/null) && [ -n "$files" ]; then
    TREE_MIB=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2> /dev/null | tail -n1 |
        awk '{ printf "%d", ($1 + 1048575) / 1048576 }')
fi
MAX_MIB=$((64 - TREE_MIB - 4))

check() {
    local f bad=0 libs extra glibc mib
    printf '%-24s %8s  %s\n' binary KiB "shared libraries"
    for f in "$CARRY"/bin/*; do
        [ -f "$f" ] && [ -x "$f" ] || continue
        libs=$(ldd "$f" 2> /dev/null | awk '{ print $1 }' | sed 's|.*/||' | sort -u | tr '\n' ' ')
        # the loader, glibc's parts, the C++ runtime, OpenMP, cuBLAS / cuBLASLt: nothing else may be needed
        extra=$(echo "$libs" | tr ' ' '\n' | grep -v '^$' | grep -vE '^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|lib(c|m|dl|rt|pthread)\.so\.[0-9]+|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libgomp\.so\.1|libcublas(Lt)?\.so\.13)$' | tr '\n' ' ')
        glibc=$(objdump -T "$f" 2> /dev/null | grep -o 'GLIBC_[0-9.]*' | sort -V | tail -n1)
        printf '%-24s %8s  %s\n' "$(basename "$f")" $(($(stat -c %s "$f") / 1024)) "$libs(newest $glibc)"
        if [ -n "$extra" ]; then echo "  FAIL: $(basename "$f") needs $extra"; bad=1; fi
        if nm -D --undefined-only "$f" 2> /dev/null | grep -qi cudnn; then
            echo "  FAIL: $(basename "$f") references cuDNN symbols: $(nm -D --undefined-only "$f" | grep -i cudnn | head -n3 | tr -s ' \n' ' ')"; bad=1
        fi
        case $(basename "$f") in
            train_gpt_cpu*|bench_cpu_adam*) ;;
            train_gpt*|test_*|bench_*) grep -q LLMC_CUDNN_LIB "$f" ||
                { echo "  FAIL: $(basename "$f") has no cuDNN attention path (cudnn-frontend's headers missing at build time)"; bad=1; };;
        esac
        if [ -n "$glibc" ] && [ "$(printf '%s\nGLIBC_2.39\n' "$glibc" | sort -V | tail -n1)" != GLIBC_2.39 ]; then
            echo "  FAIL: $(basename "$f") needs $glibc (Ubuntu 24.04 has 2.39)"; bad=1
        fi
    done
    mib=$(apparent_mib "$CARRY")
    echo "$CARRY: $mib MiB (limit $MAX_MIB: the device takes 64 MiB with the tree's $TREE_MIB, 4 kept spare)"
    [ "$mib" -le $MAX_MIB ] || { echo "FAIL: $CARRY is over $MAX_MIB MiB"; bad=1; }
    return $bad
}
[ "${1:-}" = check ] && { check; exit $?; }

for f in "$SYSLIB/liburing.a" "$SYSLIB/libgtest.a" "$SYSLIB/libgtest_main.a" /usr/include/liburing.h /usr/include/gtest/gtest.h; do
    [ -f "$f" ] || { echo "prebuild: $f missing (apt-get install liburing-dev libgtest-dev)"; exit 1; }
done
rm -rf "$CARRY/bin" "$CARRY/rebuild"
mkdir -p "$CARRY/rebuild/include" "$CARRY/rebuild/lib" "$CARRY/peers" || exit 1
cp -r /usr/include/liburing.h /usr/include/liburing /usr/include/gtest "$CARRY/rebuild/include/"
cp "$SYSLIB/liburing.a" "$SYSLIB/libgtest.a" "$SYSLIB/libgtest_main.a" "$CARRY/rebuild/lib/"
# cudnn-frontend's headers (the Makefile installs them into .deps from PyPI; so does this, the same way) and
# cuDNN's own cudnn*.h, which they include: the GPU machine's rebuild compiles llmc/cudnn_att.cpp from these
FE=.deps/cudnn_frontend/include
FE_VERSION=$(sed -n 's/^CUDNN_FE_VERSION := *//p' Makefile)
[ -f "$FE/cudnn_frontend.h" ] || python3 -m pip install -q --no-deps --disable-pip-version-check --timeout 30 \
    --target .deps/cudnn_frontend "nvidia-cudnn-frontend==$FE_VERSION" > /dev/null 2>&1
[ -f "$FE/cudnn_frontend.h" ] || { echo "prebuild: cudnn-frontend's headers not in $FE (pip install --no-deps --target .deps/cudnn_frontend nvidia-cudnn-frontend==$FE_VERSION)"; exit 1; }
cp -r "$FE"/. "$CARRY/rebuild/include/"
NVCC_BIN=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
for d in "$(dirname "$NVCC_BIN")/../include" /usr/local/cuda/include /usr/include /usr/include/x86_64-linux-gnu; do
    [ -f "$d/cudnn.h" ] && { cp "$d"/cudnn*.h "$CARRY/rebuild/include/"; break; }
done
[ -f "$CARRY/rebuild/include/cudnn.h" ] || { echo "prebuild: cuDNN's cudnn.h not found (the CUDA toolkit's include folder, /usr/include)"; exit 1; }
if [ -f "$SHARED/peers/gpt_baseline.py" ]; then cp "$SHARED/peers/gpt_baseline.py" "$CARRY/peers/"
else echo "prebuild: $SHARED/peers/gpt_baseline.py not found: the peer checks will be skipped"; fi
# the commit the binaries are built from (a dirty tree is marked: its results belong to no commit)
c=$(git rev-parse --short=12 HEAD 2> /dev/null || echo unknown)
[ -n "$(git status --porcelain --untracked-files=no 2> /dev/null)" ] && c="$c-dirty"
echo "$c" > "$CARRY/commit"
t0=$SECONDS
REBUILD_DIR="$CARRY/rebuild" bash dev/bench/build_carry.sh "$CARRY/bin" || exit 1
rm -rf "$CARRY/bin/obj"
echo "built in $((SECONDS - t0)) s from $c"
# Over the limit (the cuDNN path added ~1.9 MiB to each GPU binary, 39 MiB in all at b9719ca): the binaries'
# symbol tables go (~0.9 MiB each; compute-sanitizer's host frames then show addresses, not names)
if [ "$(apparent_mib "$CARRY")" -gt $MAX_MIB ]; then
    strip --strip-all "$CARRY"/bin/* && echo "prebuild: $CARRY was over $MAX_MIB MiB: symbol tables stripped ($(apparent_mib "$CARRY") MiB now)"
fi
bash dev/bench/gpu_window.sh plan --ids > "$CARRY/plan.txt" || exit 1
echo "the window's plan ($CARRY/plan.txt): $(tr '\n' ' ' < "$CARRY/plan.txt")"
check || exit 1
echo "prebuild: ok; send it with carry [\".carry\"]: run 'bash dev/bench/gpu_window.sh 1' (timeout_s 450), then 2 (180)"
