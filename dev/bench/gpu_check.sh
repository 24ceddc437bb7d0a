#!/usr/bin/env bash
# gpu_check.sh — the correctness check of the streaming trainer on a GPU, in three device calls, each under
# 8 minutes even when a step hangs: every step runs under its own `timeout` (they add up to under 8 minutes,
# the build included) and, as a second guard, none runs past BUDGET_S (450 s) from the call's start. Each call
# builds what it needs itself (`make -j16` of its targets only) and depends on nothing another call left.
#   call 1: build; the real GPU suites: build/test_kernels, then build/test_gpu in two shards
#   call 2: build; train_gpt: the default run (12 steps, checkpoints at 6 and 12), resume from step 6 (steps
#           7..12 must give the first run's losses), the same run with -R -1 and with -K -1, and the peak GPU
#           memory of L12 vs L24 at C1024
#   call 3: build; build/bench_attention (fused vs cuBLAS attention at the 1.3B/5B shapes, T 1024), then
#           compute-sanitizer: memcheck over the kernel suite (two shards) and over a tiny train_gpt run,
#           racecheck over the fused attention's tests
#   call 4: build; the SSD tier (issue 22) on the GPU: d12 for 6 steps in RAM, with -sd and with -sd -sw 1
#           (the same losses), then the step time of each at 1M tokens per step (L12 C1024, -Y 1: the disk
#           part below the GPU part on an NVMe drive) against the in-RAM one: the issue's target is 10%
# Full logs go to $OUT (default ./out), one per step (checkpoints to a scratch folder under $TMPDIR or /tmp,
# removed at the end); the LAST lines printed are a table: step, status (ok,
# FAIL rc=N, timeout, skipped: why), seconds, key figures. It checks; it changes no source.
#
# usage (repo root, on the device): OUT=dir bash dev/bench/gpu_check.sh 1|2|3|4
# env: BUDGET_S=450 (no step runs past it), BUILD=0 (use the binaries already built: dry runs)
set -u
cd "$(dirname "$0")/../.." || exit 1
CALL=${1:-}
case "$CALL" in 1|2|3|4) ;; *) echo "usage: OUT=dir bash dev/bench/gpu_check.sh 1|2|3|4" >&2; exit 2;; esac
OUT=${OUT:-./out}
mkdir -p "$OUT"
BUDGET_S=${BUDGET_S:-450}
BUILD=${BUILD:-1}
START=$SECONDS
# the training runs' checkpoints (~2 GB each for d12) go to a scratch folder, not to $OUT, which comes back
# from the device; their main.log is copied to $OUT at the end
RUN_DIR="${TMPDIR:-/tmp}/gpu_check_run.$$"
ROWS=()  # "step|status|seconds|figures", in order

say() { printf '[%4ds] %s\n' $((SECONDS - START)) "$*"; }

# step NAME TIMEOUT CMD...: runs CMD with stdout+stderr in $OUT/NAME.log, under min(TIMEOUT, what is left of
# the budget) (then SIGKILL 5 s later), and records its status. The log ends with `EXIT rc=N seconds=S`.
step() {
    local name=$1 t=$2; shift 2
    local log="$OUT/$name.log" left=$((BUDGET_S - (SECONDS - START)))
    [ "$left" -lt "$t" ] && t=$left
    if [ "$t" -lt 5 ]; then
        echo "SKIPPED: time budget spent (BUDGET_S=$BUDGET_S)" > "$log"
        ROWS+=("$name|skipped: time budget spent|0|"); say "skip $name: time budget spent"; return
    fi
    say "$name (timeout ${t}s, log $log)"
    local t0=$SECONDS rc
    { echo "CMD: $*"; timeout -k 5 "$t" "$@"; rc=$?; echo "EXIT rc=$rc seconds=$((SECONDS - t0))"; } > "$log" 2>&1
    local status="ok"
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then status="timeout"
    elif [ "$rc" != 0 ]; then status="FAIL rc=$rc"; fi
    local fig
    if [ "$status" = ok ]; then fig=$(figures "$name")
    else fig="$(grep -vE '^(CMD:|EXIT rc=)' "$log" | grep -v '^[[:space:]]*$' | tail -n1 | cut -c1-110)"; fi
    ROWS+=("$name|$status|$((SECONDS - t0))|$fig")
    say "  $status ($((SECONDS - t0)) s)"
}
# skip NAME WHY: a step that cannot run here, recorded at once
skip() { echo "SKIPPED: $2" > "$OUT/$1.log"; ROWS+=("$1|skipped: $2|0|"); say "skip $1: $2"; }

# gtest: "N passed, M failed, K skipped" (counts from the summary lines), or what stopped it
gtest_counts() {
    local log=$1 p f s
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n1)
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n1)
    s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -n1)
    if [ -z "$p$f" ]; then echo "no gtest summary (last: $(grep '^\[ RUN' "$log" | tail -n1 | cut -c14-80))"; return; fi
    echo "${p:-0} passed, ${f:-0} failed, ${s:-0} skipped$(grep -q 'no CUDA device' "$log" && echo ' (no CUDA device)')"
}
# the tightest [margin] line of a log (gpu_test_common.h): "NN% of bound: test | what"
tightest_margin() {
    grep -h '^\[margin\]' "$@" 2>/dev/null | awk -F' [|] ' '{p = $5; sub(/% of bound.*/, "", p); print p "\t" $0}' |
        sort -g -r | head -n1 | awk -F'\t' '{split($2, f, / [|] /); sub(/^\[margin\] /, "", f[1]); printf "tightest margin %s%% of bound: %s | %s", $1, f[1], f[2]}'
}
loss_at() { grep -E "^step +$2/" "$1" 2>/dev/null | head -n1 | sed -n 's/.*| loss \([0-9.]*\).*/\1/p'; }

# key figures of a step, from its log
figures() {
    local log="$OUT/$1.log"
    case $1 in
        build*) grep -m1 -iE 'error|no rule' "$log" | cut -c1-120;;
        test_*|memcheck_kernels*|memcheck_attention*|racecheck*) echo "$(gtest_counts "$log")$(case $1 in test_*) t=$(tightest_margin "$log"); [ -n "$t" ] && echo "; $t";; esac)$(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | sed 's/^/; /')";;
        memcheck_train) echo "$(grep -m1 -E 'ERROR SUMMARY' "$log"); $(grep -E '^step' "$log" | tail -n1 | cut -c1-40)";;
        default) echo "step 1 loss $(loss_at "$log" 1), step 12 loss $(loss_at "$log" 12); $(grep -m1 '^GPU memory after' "$log" | cut -c1-110)";;
        resume)
            # the same state and batches; only the order of the GPU's atomics may differ, which AdamW amplifies
            # over the steps (test_gpu's expect_same_training: <= 2.5e-4 on later losses): 1e-3
            local diffs="" s a b worst=0 d
            for s in 7 8 9 10 11 12; do
                a=$(loss_at "$OUT/default.log" "$s"); b=$(loss_at "$log" "$s")
                d=$(awk -v a="$a" -v b="$b" 'BEGIN { if (a == "" || b == "") print "missing"; else printf "%.1e", (a > b ? a - b : b - a) / a }')
                diffs="$diffs $s:$d"
                worst=$(awk -v w="$worst" -v d="$d" 'BEGIN { print (d == "missing" || w == "missing") ? "missing" : (d + 0 > w + 0 ? d : w) }')
            done
            echo "$(awk -v w="$worst" 'BEGIN { print w == "missing" ? "MISSING steps" : (w + 0 <= 1e-3 ? "match" : "MISMATCH") }') (steps 7..12 loss rel diff vs default:$diffs; bound 1e-3)";;
        resident|kept)
            local a b; a=$(loss_at "$OUT/default.log" 12); b=$(loss_at "$log" 12)
            echo "$(grep -m1 -E "GPU-resident layers|kept activations" "$log" | tr -s ' |' ' ' | cut -c1-60); step 12 loss $b vs default $a; $(grep -m1 '^GPU memory after' "$log" | cut -c1-100)";;
        mem_L*) echo "plan $(grep -m1 -E '^\| GPU memory ' "$log" | sed 's/^| GPU memory *| *//; s/ *|$//' | cut -c1-60); peak_gpu_GiB $(grep '^RESULT' "$log" | grep -o '"peak_gpu_GiB": [0-9.]*' | cut -d' ' -f2); $(grep -m1 '^GPU memory after' "$log" | cut -c1-100)";;
        attention) grep -E 'fused vs cuBLAS path' "$log" | sed 's/^ *fused vs cuBLAS path: //' | tr '\n' ';' | cut -c1-120;;
        sd6|sw6)
            # the same state, batches and math, other storage: only the GPU atomics' order may differ (1e-3)
            local worst=0 s a b d
            for s in 1 2 3 4 5 6; do
                a=$(loss_at "$OUT/ram6.log" "$s"); b=$(loss_at "$log" "$s")
                d=$(awk -v a="$a" -v b="$b" 'BEGIN { if (a == "" || b == "") print "missing"; else printf "%.1e", (a > b ? a - b : b - a) / a }')
                worst=$(awk -v w="$worst" -v d="$d" 'BEGIN { print (d == "missing" || w == "missing") ? "missing" : (d + 0 > w + 0 ? d : w) }')
            done
            echo "$(awk -v w="$worst" 'BEGIN { print w == "missing" ? "MISSING steps" : (w + 0 <= 1e-3 ? "match" : "MISMATCH") }') (steps 1..6 loss max rel diff vs RAM $worst; bound 1e-3); $(grep -m1 '^disk ' "$log" | sed 's/; one step moves.*//' | cut -c1-90)";;
        ram6) echo "step 6 loss $(loss_at "$log" 6)";;
        time_*)
            local st ram tl
            st=$(grep '^RESULT' "$log" | grep -o '"step_s": [0-9.]*' | cut -d' ' -f2)
            ram=$(grep '^RESULT' "$OUT/time_ram.log" 2>/dev/null | grep -o '"step_s": [0-9.]*' | cut -d' ' -f2)
            tl=$(grep '^TIMELINE' "$log" | tail -n1 | grep -oE '"(compute_busy_s|adam_busy_s|fwd_wait_s|disk_read_busy_s|disk_write_busy_s)": [0-9.]*' | tr -d '"' | tr '\n' ' ')
            echo "step ${st:-?} s$( [ "$1" != time_ram ] && awk -v a="$st" -v b="$ram" 'BEGIN { if (a != "" && b != "") printf " = %.3f x RAM (target <= 1.10: %s)", a / b, a / b <= 1.10 ? "PASS" : "MISS" }'); $tl$(grep -m1 '^disk ' "$log" | grep -o '[0-9.]* s of disk time per step' | sed 's/^/; /')";;
    esac
}

# no GPU: every GPU step says so at once (the table still prints)
GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n1)
say "call $CALL; GPU: ${GPU:-none found (nvidia-smi)}; logs in $OUT"
echo "gpu: ${GPU:-none}" > "$OUT/device_$CALL.txt"
gpu_step() {  # gpu_step NAME TIMEOUT CMD...: step, unless there is no GPU or a binary of ours in CMD did not build
    if [ -z "$GPU" ]; then skip "$1" "no GPU (nvidia-smi found none)"; return; fi
    local a
    for a in "${@:3}"; do
        case $a in build/*|./train_gpt) [ -x "$a" ] || { skip "$1" "$a not built (see build$CALL.log)"; return; };; esac
    done
    step "$@"
}
build() {  # build TIMEOUT TARGET...
    local t=$1; shift
    if [ "$BUILD" = 0 ]; then skip "build$CALL" "BUILD=0: the binaries already here"; return; fi
    step "build$CALL" "$t" make -j16 "$@"
}

# Times: the estimates are for an H100 machine with 16 cores, from the sizes (nothing here has run on a GPU
# yet); each timeout is ~2-3x its estimate. A whole call must stay under 8 min (480 s): the timeouts of each
# call, plus 5 s of SIGKILL grace per step, add up to less.
if [ "$CALL" = 1 ]; then
    # ~25 s: two nvcc compiles in parallel (each ~12 s on a 2-core build machine)
    build 90 build/test_kernels build/test_gpu                                        # 90
    # ~30 s: ~40 tests of small shapes, one CUDA context, a cuBLAS handle per GPT built
    gpu_step test_kernels 110 build/test_kernels                                      # 110
    # ~60 s: ~25 GPTs built (pinned host memory, cuBLAS handles), L <= 5, C 128, a few steps each
    gpu_step test_gpu 150 build/test_gpu --gtest_filter='-*GpuMemoryGrowsWithDepthOnlyByCheckpoints:*WeightCopiesOverlapCompute'
    # ~20 s: C 512 models at 4K tokens and a 100M-parameter one at T 1024 (the two that measure)
    gpu_step test_gpu_measured 80 build/test_gpu --gtest_filter='*GpuMemoryGrowsWithDepthOnlyByCheckpoints:*WeightCopiesOverlapCompute'
    # sum 430 + 4 x 5 = 450 s
elif [ "$CALL" = 2 ]; then
    build 60 train_gpt                                                                # ~15 s; 60
    rm -rf "$RUN_DIR"
    # d12 (124M) at 8K tokens: ~5 s start, 12 steps ~3 s, 3 val passes, 2 x 16 sampled tokens, 2 checkpoints of
    # ~2 GB (model + AdamW state) ~10 s: ~25 s
    gpu_step default 80 ./train_gpt -x 12 -v 6 -g 16 -n 6 -o "$RUN_DIR"               # 80
    # loads the step-6 checkpoint (~3 s), 6 steps, a checkpoint: ~15 s
    rm -f "$RUN_DIR/DONE_00000012"
    gpu_step resume 50 ./train_gpt -x 12 -v 0 -g 0 -n 0 -o "$RUN_DIR" -y 1            # 50
    gpu_step resident 40 ./train_gpt -x 12 -v 0 -g 0 -R -1                             # ~12 s; 40
    gpu_step kept 40 ./train_gpt -x 12 -v 0 -g 0 -K -1                                 # ~12 s; 40
    # 3 steps of 16K tokens, L12 (~150M) and L24 (~300M parameters, ~5 GB of host state): ~15 / ~20 s
    gpu_step mem_L12 50 ./train_gpt -e L12:C1024:NH16 -b 8 -t 1024 -d 16384 -B 2 -W 1  # 50
    gpu_step mem_L24 60 ./train_gpt -e L24:C1024:NH16 -b 8 -t 1024 -d 16384 -B 2 -W 1  # 60
    # sum 380 + 7 x 5 = 415 s
elif [ "$CALL" = 3 ]; then
    build 90 build/test_kernels build/bench_attention train_gpt                     # ~25 s; 90
    # fused vs cuBLAS at B 8, T 1024, C 2048 / 4096: agreement, then 13 timed runs of each pass: ~15 s
    gpu_step attention 50 build/bench_attention                                       # 50
    # compute-sanitizer: memcheck (out-of-bounds and misaligned device accesses, CUDA API errors) runs kernels
    # ~10-100x slower and instruments every module cuBLAS loads; racecheck (shared-memory hazards between a
    # block's threads) is slower still, so only the fused attention, whose kernels share tiles, at small T.
    # The emulation checks both its own way (guard pages, reversed warp schedules); this is the hardware's word.
    SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
    if [ -z "$SAN" ] && [ -n "$GPU" ]; then
        for s in memcheck_kernels memcheck_attention memcheck_train racecheck_attention; do skip "$s" "compute-sanitizer not found"; done
    else
        ATT='*Attention*:*Flash*:*Softmax*:*Layer*:*Mma*:*Ldmatrix*'
        # the element-wise, LayerNorm, loss, AdamW and GEMM tests: ~60 s under memcheck
        gpu_step memcheck_kernels 90 "$SAN" --tool memcheck --error-exitcode 1 build/test_kernels \
            --gtest_filter="-$ATT:*CublasLtFusesAtTheTrainersShapes"                  # 90
        # attention (both paths), one whole layer: ~60 s
        gpu_step memcheck_attention 90 "$SAN" --tool memcheck --error-exitcode 1 build/test_kernels \
            --gtest_filter="$ATT"                                                     # 90
        # the trainer itself, 2 layers of C 128 at B 2, T 64: streaming, checkpoints, AdamW hand-offs: ~30 s
        rm -rf "$RUN_DIR"
        gpu_step memcheck_train 50 "$SAN" --tool memcheck --error-exitcode 1 ./train_gpt -e L2:C128:NH4 -b 2 -t 64 \
            -x 3 -v 2 -m 1 -g 4 -n 3 -o "$RUN_DIR"                               # 50
        gpu_step racecheck_attention 60 "$SAN" --tool racecheck --error-exitcode 1 build/test_kernels \
            --gtest_filter='*Flash*:*Mma*:*Ldmatrix*'                                 # 60
    fi
    # sum 430 + 6 x 5 = 460 s
elif [ "$CALL" = 4 ]; then
    build 60 train_gpt                                                                # ~15 s; 60
    SD="$RUN_DIR/sd"  # the SSD tier's files: on the machine's own disk ($TMPDIR), ~3 GB for d12, ~6 GB below
    mkdir -p "$RUN_DIR"
    # d12 at 8K tokens, 6 steps: ~15 s; with -sd the store is created (85 M streamed parameters, ~2.3 GB) and
    # the drive probed (3 s); each step's round moves ~4 GB: a few s at NVMe speed
    gpu_step ram6 35 ./train_gpt -x 6 -v 0 -g 0 -n 0                                  # 35
    gpu_step sd6 50 ./train_gpt -x 6 -v 0 -g 0 -n 0 -sd "$SD"                         # 50
    gpu_step sw6 50 ./train_gpt -x 6 -v 0 -g 0 -n 0 -sd "$SD" -sw 1                   # 50
    # L12 C1024 (~200 M parameters) at 1M tokens per step (64 micro-batches of 16 x 1024): ~1.2e18 FLOP, ~4 s
    # a step at 300 TFLOP/s; the disk part (~10 GB each way with -sd) is below that from ~3 GB/s on
    TIME_ARGS="-e L12:C1024:NH16 -b 16 -t 1024 -d 1048576 -B 2 -W 1 -Y 1"
    gpu_step time_ram 70 ./train_gpt $TIME_ARGS                                      # 70
    gpu_step time_sd 80 ./train_gpt $TIME_ARGS -sd "$SD"                              # 80
    gpu_step time_sw 80 ./train_gpt $TIME_ARGS -sd "$SD" -sw 1                        # 80
    # sum 425 + 7 x 5 = 460 s
fi

[ -f "$RUN_DIR/main.log" ] && cp "$RUN_DIR/main.log" "$OUT/main_$CALL.log"
rm -rf "$RUN_DIR"

# the tightest bounds of the GPU suites (call 1), from their [margin] lines
if [ "$CALL" = 1 ] && grep -qh '^\[margin\]' "$OUT"/test_*.log 2>/dev/null; then
    echo
    echo "tightest 12 of $(grep -h '^\[margin\]' "$OUT"/test_*.log | wc -l) margins (measured / bound):"
    grep -h '^\[margin\]' "$OUT"/test_*.log | awk -F' [|] ' '{p = $5; sub(/% of bound.*/, "", p); print p "\t" $0}' |
        sort -g -r | head -n 12 | cut -f2
fi
say "done (budget ${BUDGET_S}s)"
echo
echo "| step | status | s | key figures |"
echo "|---|---|---:|---|"
for r in "${ROWS[@]}"; do
    IFS='|' read -r n st sec fig <<< "$r"
    echo "| $n | $st | $sec | ${fig//|/\\|} |"
done
