#!/usr/bin/env bash
# build_carry.sh — compiles every binary the GPU window runs, with plain compiler commands (no make: the GPU
# machine may lack it), into one folder. Runs here (dev/bench/prebuild.sh) and, if a carried binary will not
# load there, on the GPU machine (gpu_window.sh's rebuild path) from the headers and static libraries that
# prebuild.sh put in .carry/rebuild. It does not check or run anything.
#
# usage (repo root): bash dev/bench/build_carry.sh OUTDIR [NAME...]   (no NAME: all of them)
# names: train_gpt train_gpt.avx512 train_gpt_cpu train_gpt_cpu.avx512 test_kernels test_gpu
#        test_gpu_llama test_llama_kernels bench_attention bench_layer bench_cpu_adam bench_cpu_adam.avx512
# env: JOBS (parallel compiles; default nproc), REBUILD_DIR (headers and .a files; default .carry/rebuild,
#      else the system's), NVCC, CXX
# cuDNN's attention path (llmc/cudnn_att.cpp, -DENABLE_CUDNN) is built where cudnn-frontend's headers are: in
# REBUILD_DIR/include (prebuild.sh copies them there, with cuDNN's own cudnn*.h) or .deps/cudnn_frontend/include
# (the Makefile's). cuDNN itself is dlopen'ed at run time: no binary links against it. Without the headers the
# binaries build without the path (they say so at start) and this script says so here.
set -u
cd "$(dirname "$0")/../.." || exit 1
OUTDIR=${1:?usage: bash dev/bench/build_carry.sh OUTDIR [NAME...]}
shift
NAMES=("$@")
[ ${#NAMES[@]} -eq 0 ] && NAMES=(train_gpt train_gpt.avx512 train_gpt_cpu train_gpt_cpu.avx512 test_kernels
    test_gpu test_gpu_llama test_llama_kernels bench_attention bench_layer bench_cpu_adam bench_cpu_adam.avx512)
JOBS=${JOBS:-$(nproc)}
CXX=${CXX:-g++}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
REBUILD_DIR=${REBUILD_DIR:-.carry/rebuild}
OBJ="$OUTDIR/obj"
mkdir -p "$OUTDIR" "$OBJ" || exit 1

# Static liburing and GoogleTest: from REBUILD_DIR where prebuild.sh put them, else the system's.
INC=(-I.)
if [ -f "$REBUILD_DIR/include/liburing.h" ]; then INC+=(-I"$REBUILD_DIR/include"); LIBDIR="$REBUILD_DIR/lib"
else LIBDIR=/usr/lib/x86_64-linux-gnu; fi
URING="$LIBDIR/liburing.a"
GTEST=("$LIBDIR/libgtest.a" "$LIBDIR/libgtest_main.a")
# cudnn-frontend's headers: the rebuild kit's, else the Makefile's .deps
if [ -f "$REBUILD_DIR/include/cudnn_frontend.h" ]; then FE_INC=$REBUILD_DIR/include
elif [ -f .deps/cudnn_frontend/include/cudnn_frontend.h ]; then FE_INC=.deps/cudnn_frontend/include
else FE_INC=""; fi
# and cuDNN's own cudnn.h, which the frontend includes: the kit's, else the CUDA toolkit's or the system's
if [ -n "$FE_INC" ]; then
    CUDNN_H=""
    for f in "$FE_INC/cudnn.h" "$(dirname "$NVCC")/../include/cudnn.h" /usr/local/cuda/include/cudnn.h \
        /usr/include/cudnn.h /usr/include/x86_64-linux-gnu/cudnn.h; do [ -f "$f" ] && { CUDNN_H=$f; break; }; done
    [ -n "$CUDNN_H" ] || { echo "build_carry: cudnn-frontend's headers are in $FE_INC but no cudnn.h was found"; FE_INC=""; }
fi

# The Makefile's flags, with a fixed CPU level instead of -march=native: x86-64-v3 (AVX2, FMA) everywhere,
# x86-64-v4 (AVX-512) for the .avx512 copies of the CPU-heavy programs (cpu_adam.cpp picks its SIMD width at
# compile time). sm_90 machine code plus compute_90 PTX, so a newer GPU can JIT it.
WARN=(-Wall -Wextra -Wno-unused-parameter -Wno-unused-function)
CXXF=(-O3 -fopenmp -std=c++17 "${WARN[@]}")
GENCODE=(-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90)
NVF=(-O3 -std=c++17 "${GENCODE[@]}" --use_fast_math -ftz=true -Wno-deprecated-gpu-targets
    -Xcompiler -fopenmp,-march=x86-64-v3,-Wall,-Wno-unused-function)
CUDA_LIBS=(-lcublas -lcublasLt -lgomp -lm -lpthread -ldl)
CUDNN_O=()
if [ -n "$FE_INC" ]; then
    NVF+=(-DENABLE_CUDNN)
    CUDNN_O=("$OBJ/cudnn_att.o")
    echo "build_carry: cuDNN attention path on (cudnn-frontend's headers: $FE_INC)"
else
    echo "build_carry: cudnn-frontend's headers not found (REBUILD_DIR/include, .deps/cudnn_frontend/include): building without the cuDNN attention path"
fi

FAILED=0
# job CMD...: runs CMD in the background (at most JOBS at once); its output goes to OBJ/<n>.log
NJOB=0
ssd_object() {  # the SSD tier's two sources as one object, as the Makefile's ssd.o
    "$CXX" "${CXXF[@]}" -march=x86-64-v3 "${INC[@]}" -c llmc/ssd_io.cpp -o "$OBJ/ssd_io.o" &&
        "$CXX" "${CXXF[@]}" -march=x86-64-v3 "${INC[@]}" -c llmc/ssd_store.cpp -o "$OBJ/ssd_store.o" &&
        ld -r "$OBJ/ssd_io.o" "$OBJ/ssd_store.o" -o "$OBJ/ssd.o"
}
job() {
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    NJOB=$((NJOB + 1))
    { echo "+ $*"; "$@"; } > "$OBJ/job$NJOB.log" 2>&1 || { echo "FAILED: $*" >> "$OBJ/job$NJOB.log"; exit 1; } &
}
# finish: waits for every job; prints the failures' logs; FAILED=1 if any
finish() {
    local p
    for p in $(jobs -rp); do wait "$p" || FAILED=1; done
    wait
    if grep -l '^FAILED: ' "$OBJ"/job*.log > /dev/null 2>&1; then
        FAILED=1
        grep -h -B30 '^FAILED: ' "$OBJ"/job*.log | tail -n 60
    fi
}
want() { local n; for n in "${NAMES[@]}"; do [ "$n" = "$1" ] && return 0; done; return 1; }
want_any() { local n; for n in "$@"; do want "$n" && return 0; done; return 1; }
rm -f "$OBJ"/job*.log

# the objects first: CPU AdamW at both levels, the SSD tier, the stream, the trainer itself
want_any train_gpt train_gpt_cpu test_kernels test_gpu test_gpu_llama test_llama_kernels bench_attention bench_layer bench_cpu_adam &&
    job "$CXX" "${CXXF[@]}" -march=x86-64-v3 "${INC[@]}" -c cpu_adam.cpp -o "$OBJ/cpu_adam.o"
want_any train_gpt.avx512 train_gpt_cpu.avx512 bench_cpu_adam.avx512 &&
    job "$CXX" "${CXXF[@]}" -march=x86-64-v4 "${INC[@]}" -c cpu_adam.cpp -o "$OBJ/cpu_adam_v4.o"
want_any train_gpt train_gpt.avx512 test_kernels test_gpu test_gpu_llama test_llama_kernels bench_attention bench_layer \
    bench_cpu_adam bench_cpu_adam.avx512 && job ssd_object
want_any train_gpt train_gpt.avx512 test_kernels test_gpu test_gpu_llama test_llama_kernels bench_attention bench_layer &&
    job "$NVCC" "${NVF[@]}" "${INC[@]}" -c stream.cu -o "$OBJ/stream.o"
# cuDNN's SDPA through cudnn-frontend: one host-only translation unit, as the Makefile's build/cudnn_att.o
[ -n "$FE_INC" ] && want_any train_gpt train_gpt.avx512 test_kernels test_gpu test_gpu_llama test_llama_kernels \
    bench_attention bench_layer && job "$NVCC" -O2 -std=c++17 -x c++ -DENABLE_CUDNN -DNV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING \
    -I"$FE_INC" -Xcompiler -march=x86-64-v3,-Wall,-Wno-unused-function -c llmc/cudnn_att.cpp -o "$OBJ/cudnn_att.o"
want_any train_gpt train_gpt.avx512 && job "$NVCC" "${NVF[@]}" "${INC[@]}" -c train_gpt.cu -o "$OBJ/train_gpt.o"
# programs that need no object: the test and bench sources include train_gpt.cu themselves
nv_prog() {  # nv_prog NAME SOURCE [extra libs...]: a CUDA program linked with stream.o, cpu_adam.o, ssd.o
    local name=$1 src=$2; shift 2
    want "$name" && job "$NVCC" "${NVF[@]}" "${INC[@]}" -c "$src" -o "$OBJ/$name.o"
}
nv_prog test_kernels test/test_kernels.cu
nv_prog test_gpu test/test_gpu.cu
nv_prog test_gpu_llama test/test_gpu_llama.cu
nv_prog test_llama_kernels test/test_llama_kernels.cu
nv_prog bench_attention dev/bench/bench_attention.cu
nv_prog bench_layer dev/bench/bench_layer.cu
want train_gpt_cpu &&
    job "$CXX" "${CXXF[@]}" -march=x86-64-v3 "${INC[@]}" -c train_gpt_cpu.cpp -o "$OBJ/train_gpt_cpu.o"
want train_gpt_cpu.avx512 &&
    job "$CXX" "${CXXF[@]}" -march=x86-64-v4 "${INC[@]}" -c train_gpt_cpu.cpp -o "$OBJ/train_gpt_cpu_v4.o"
want_any bench_cpu_adam bench_cpu_adam.avx512 &&
    job "$CXX" "${CXXF[@]}" -march=x86-64-v3 "${INC[@]}" -c dev/bench/bench_cpu_adam.cpp -o "$OBJ/bench_cpu_adam.o"
finish
[ "$FAILED" = 0 ] || { echo "build_carry: compiling failed (logs in $OBJ)"; exit 1; }

# the links (the AVX-512 copies differ only in cpu_adam's object)
COMMON=("$OBJ/stream.o" "$OBJ/ssd.o" "${CUDNN_O[@]}")
want train_gpt && job "$NVCC" "${NVF[@]}" "$OBJ/train_gpt.o" "${COMMON[@]}" "$OBJ/cpu_adam.o" \
    -o "$OUTDIR/train_gpt" "${CUDA_LIBS[@]}" "$URING"
want train_gpt.avx512 && job "$NVCC" "${NVF[@]}" "$OBJ/train_gpt.o" "${COMMON[@]}" "$OBJ/cpu_adam_v4.o" \
    -o "$OUTDIR/train_gpt.avx512" "${CUDA_LIBS[@]}" "$URING"
for n in test_kernels test_gpu test_gpu_llama test_llama_kernels; do
    want $n && job "$NVCC" "${NVF[@]}" "$OBJ/$n.o" "${COMMON[@]}" "$OBJ/cpu_adam.o" -o "$OUTDIR/$n" \
        "${GTEST[@]}" "${CUDA_LIBS[@]}" "$URING"
done
for n in bench_attention bench_layer; do
    want $n && job "$NVCC" "${NVF[@]}" "$OBJ/$n.o" "${COMMON[@]}" "$OBJ/cpu_adam.o" -o "$OUTDIR/$n" \
        "${CUDA_LIBS[@]}" "$URING"
done
want train_gpt_cpu && job "$CXX" "${CXXF[@]}" "$OBJ/train_gpt_cpu.o" "$OBJ/cpu_adam.o" -o "$OUTDIR/train_gpt_cpu" -lm -lpthread
want train_gpt_cpu.avx512 && job "$CXX" "${CXXF[@]}" "$OBJ/train_gpt_cpu_v4.o" "$OBJ/cpu_adam_v4.o" \
    -o "$OUTDIR/train_gpt_cpu.avx512" -lm -lpthread
want bench_cpu_adam && job "$CXX" "${CXXF[@]}" "$OBJ/bench_cpu_adam.o" "$OBJ/cpu_adam.o" "$OBJ/ssd.o" \
    -o "$OUTDIR/bench_cpu_adam" "$URING" -lm -lpthread
want bench_cpu_adam.avx512 && job "$CXX" "${CXXF[@]}" "$OBJ/bench_cpu_adam.o" "$OBJ/cpu_adam_v4.o" "$OBJ/ssd.o" \
    -o "$OUTDIR/bench_cpu_adam.avx512" "$URING" -lm -lpthread
finish
[ "$FAILED" = 0 ] || { echo "build_carry: linking failed (logs in $OBJ)"; exit 1; }
echo "build_carry: built ${NAMES[*]} in $OUTDIR"
