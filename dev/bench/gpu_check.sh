#!/usr/bin/env bash
# gpu_check.sh — the one device call that verifies the streaming trainer (issue: train_gpt.cu + stream.cu):
# builds for the device's GPU, runs every test suite (the GPU suites run for real there), compares the fused
# and the cuBLAS attention at the benchmark's shapes (build/bench_attention), trains the default
# model for a few steps on the shipped data, checks that resume continues a run and that -R -1 (every layer
# GPU-resident) and -K -1 (every layer's activations kept) train the same, runs compute-sanitizer's memcheck
# and racecheck over the kernel tests where installed, and prints the peak-GPU
# figures of L and 2L layers of one width. Logs go to $OUT (default ./out); a short table is printed last.
# It measures speed only in passing (dev/bench/run_bench.sh is the benchmark) and changes no source.
#
# usage (repo root, on the device): OUT=dir bash dev/bench/gpu_check.sh
set -u
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-./out}
mkdir -p "$OUT"
START=$SECONDS
say() { printf '[%4ds] %s\n' $((SECONDS - START)) "$*"; }

say "build (log: $OUT/build.log)"
make -j16 all build/bench_attention > "$OUT/build.log" 2>&1 || { say "build FAILED"; grep -m5 -i error "$OUT/build.log"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"

# the GPU suites on the real GPU first (the point of this call); the CPU suites and the CPU-emulated GPU
# suites of `make test` run in CI and need no device time
say "GPU suites: build/test_gpu, build/test_kernels (log: $OUT/test.log)"
timeout 300 ./test/run_tests.sh build/test_kernels build/test_gpu > "$OUT/test.log" 2>&1
grep -E '^\[  FAILED|^\[  SKIPPED|rel-L2|loss cpu|GPU bytes|overlapped|^tests:' "$OUT/test.log" | head -80

say "fused vs cuBLAS attention at the 1.3B/5B shapes, T = 1024 (log: $OUT/attention.log)"
timeout 120 ./build/bench_attention > "$OUT/attention.log" 2>&1
grep -vE '^RESULT' "$OUT/attention.log" | head -12

say "default run, 12 steps (log: $OUT/default.log)"
rm -rf "$OUT/run"
timeout 180 ./train_gpt -x 12 -v 6 -g 16 -n 6 -o "$OUT/run" > "$OUT/default.log" 2>&1
echo "exit $?" >> "$OUT/default.log"
sed -n '1,20p' "$OUT/default.log"; grep -E '^step|^val|exit' "$OUT/default.log" | tail -8

say "resume from step 6 to 12 (log: $OUT/resume.log): the step 7..12 losses must match the first run's"
rm -f "$OUT/run/DONE_00000012"
timeout 120 ./train_gpt -x 12 -v 0 -g 0 -n 0 -o "$OUT/run" -y 1 > "$OUT/resume.log" 2>&1
echo "exit $?" >> "$OUT/resume.log"
grep -E '^resumed|^step|exit' "$OUT/resume.log" | tail -8

say "the default run again with every layer GPU-resident (-R -1; log: $OUT/resident.log): losses must track the first run's"
timeout 120 ./train_gpt -x 12 -v 0 -g 0 -R -1 > "$OUT/resident.log" 2>&1
echo "exit $?" >> "$OUT/resident.log"
grep -E 'GPU-resident|^step|exit' "$OUT/resident.log" | tail -4

say "the default run again with every layer's activations kept (-K -1; log: $OUT/kept.log): losses must track the first run's"
timeout 120 ./train_gpt -x 12 -v 0 -g 0 -K -1 > "$OUT/kept.log" 2>&1
echo "exit $?" >> "$OUT/kept.log"
grep -E 'kept activations|^step|exit' "$OUT/kept.log" | tail -4

say "peak GPU memory, L=12 vs L=24 at C=1024 (logs: $OUT/mem_*.log)"
for L in 12 24; do
    timeout 120 ./train_gpt -e "L$L:C1024:NH16" -b 8 -t 1024 -d 16384 -B 2 -W 1 > "$OUT/mem_$L.log" 2>&1
done

# compute-sanitizer, where the toolkit has it: memcheck (out-of-bounds and misaligned device accesses, CUDA
# API errors) over the kernel suite, racecheck (shared-memory hazards between threads) over the tensor-core
# attention kernels. The emulation checks both in its own way (guard pages, reversed warp schedules); this is
# the hardware's word. Each is capped so that the rest of the call keeps its time.
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$SANITIZER" ]; then
    say "compute-sanitizer memcheck on build/test_kernels (log: $OUT/memcheck.log)"
    timeout 150 "$SANITIZER" --tool memcheck --error-exitcode 1 build/test_kernels > "$OUT/memcheck.log" 2>&1
    echo "exit $?" >> "$OUT/memcheck.log"
    say "compute-sanitizer racecheck on the fused attention tests (log: $OUT/racecheck.log)"
    timeout 100 "$SANITIZER" --tool racecheck --error-exitcode 1 build/test_kernels \
        --gtest_filter='Kernels.Flash*:Kernels.Mma*:Kernels.Ldmatrix*' > "$OUT/racecheck.log" 2>&1
    echo "exit $?" >> "$OUT/racecheck.log"
    grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|^exit' "$OUT/memcheck.log" "$OUT/racecheck.log"
else
    say "compute-sanitizer not found: memcheck / racecheck skipped"
    echo "compute-sanitizer not installed" > "$OUT/memcheck.log"; cp "$OUT/memcheck.log" "$OUT/racecheck.log"
fi

echo
echo "| check | result |"
echo "|---|---|"
echo "| tests | $(grep -E '^tests:' "$OUT/test.log" | tail -n1) |"
echo "| attention, fused vs cuBLAS | $(grep -E 'fused vs cuBLAS path' "$OUT/attention.log" | tr -s ' ' | tr '\n' ';') |"
echo "| default run | $(grep -E '^step' "$OUT/default.log" | head -n1 | cut -c1-60) ... $(grep -E '^step' "$OUT/default.log" | tail -n1 | cut -c1-90) |"
echo "| resume | $(grep -E '^step' "$OUT/resume.log" | tail -n1 | cut -c1-60) vs $(grep -E '^step +12/' "$OUT/default.log" | cut -c1-60) |"
echo "| -R -1 | $(grep -E 'GPU-resident' "$OUT/resident.log" | cut -c1-60) ; $(grep -E '^step +12/' "$OUT/resident.log" | cut -c1-60) |"
echo "| -K -1 | $(grep -E 'kept activations' "$OUT/kept.log" | cut -c1-60) ; $(grep -E '^step +12/' "$OUT/kept.log" | cut -c1-60) |"
for L in 12 24; do
    echo "| L$L C1024 16K tok | $(grep -E 'GPU memory' "$OUT/mem_$L.log" | cut -c1-90) ; $(grep -E '^RESULT' "$OUT/mem_$L.log" | grep -o '"tok_per_s": [0-9.]*') |"
done
echo "| memcheck (test_kernels) | $(grep -hE 'ERROR SUMMARY|not installed|^exit' "$OUT/memcheck.log" | tr '\n' ' ') |"
echo "| racecheck (fused attention) | $(grep -hE 'RACECHECK SUMMARY|ERROR SUMMARY|not installed|^exit' "$OUT/racecheck.log" | tr '\n' ' ') |"
say "done"
