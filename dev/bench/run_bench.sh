#!/usr/bin/env bash
# run_bench.sh — the benchmark on the GPU device, in two calls, each under 8 minutes: our streaming trainer and
# the PyTorch peers (.carry/peers/gpt_baseline.py) on the same shapes and tokens per step, CPU AdamW (ours vs
# torch), the attention and layer micro-benchmarks; one markdown table (dev/bench/bench_table.py) printed last,
# also written to $OUT/table_CALL.md.
#   call A: 1.3B (L24 C2048), 8K and 32K tokens per step: ours streaming, -R -1 and -R/-K at 32K, the gpu_ckpt
#           peer at 32K (a target), CPU AdamW ours vs torch (a target), the attention and layer
#           micro-benchmarks; then, as the budget allows, the unfused run and the other 1.3B peers
#   call B: 5B (L24 C4096): ours streaming at 8K, the fsdp_offload peer at 8K (a target), ours -R -1 at 8K,
#           ours streaming and -R/-K at 32K (a target); then, as the budget allows, -R -1 at 32K and
#           fsdp_offload at 32K
# Each call builds what it needs itself (make -j16 of its targets) and depends on nothing the other left; each
# run has its own timeout (those of the runs before "as the budget allows" add up to under 8 minutes with the
# build and the SIGKILL grace), and none runs past BUDGET_S (450 s) from the call's start: what does not fit is
# `skipped`, never half-waited for. bench_table.py makes its table from one call's logs, or from both
# (`python3 dev/bench/bench_table.py outA outB`). It changes no source and checks no numerics (make test and
# dev/bench/gpu_check.sh do).
#
# usage (repo root, on the device): OUT=dir bash dev/bench/run_bench.sh A|B          (OUT defaults to ./out)
# env: PEERS=0 (no peers), ADAM=0 (no AdamW benches), TIMELINE=0 (our runs without -Y 1), SLOTS=N (our -S),
#      OURS_ARGS="..." (more flags for train_gpt), BUDGET_S=450 (no run goes past it),
#      ADAM_N=268435456 ADAM_THREADS=16 (AdamW bench size: 268M params = 1 GiB per fp32 array),
#      HOST_GIB=120 (our -M: the host memory train_gpt's fit check counts on; "" = MemAvailable. The device is a VM
#      whose RAM may grow as it is used, so MemAvailable at the start can be far below its 128 GiB),
#      GPU_GIB=79 (our -V: the GPU memory train_gpt may use. The targets are an H100 80GB's, so on a larger GPU
#      (an H200 may be lent) -R -1 / -K -1 place layers as on the H100; "" = all that is free)
set -u
cd "$(dirname "$0")/../.." || exit 1
CALL=${1:-}
case "$CALL" in A|B) ;; *) echo "usage: OUT=dir bash dev/bench/run_bench.sh A|B" >&2; exit 2;; esac
OUT=${OUT:-./out}
mkdir -p "$OUT"
PEERS=${PEERS:-1}
ADAM=${ADAM:-1}
TIMELINE=${TIMELINE:-1}
BUDGET_S=${BUDGET_S:-450}
ADAM_N=${ADAM_N:-268435456}
ADAM_THREADS=${ADAM_THREADS:-16}
PEER_PY=${PEER_PY:-.carry/peers/gpt_baseline.py}
HOST_GIB=${HOST_GIB-120}
GPU_GIB=${GPU_GIB-79}
START=$SECONDS

say() { printf '[%4ds] %s\n' $((SECONDS - START)) "$*"; }
table() { python3 dev/bench/bench_table.py "$OUT" > "$OUT/table_$CALL.md" 2> "$OUT/table_$CALL.err"; }

# shape of a config name: L C NH, and tokens per step
model_of() { case $1 in 1.3b-*) echo "24 2048 16";; 5b-*) echo "24 4096 32";; *) return 1;; esac; }
tokens_of() { case $1 in *-8k) echo 8192;; *-32k) echo 32768;; *) return 1;; esac; }
# -R / -K of the kept-activations run of a config: what the pure streaming run's last step suggested (its
# `tuning` line, -Y 1: one more resident layer per layer of CPU AdamW the forward pass waited for, the rest of
# the memory to kept activations), else an estimate. At 5B, 32K tokens the resident layers (3.6 GiB each) pay
# only until the CPU AdamW of the streamed ones fits in the forward pass, about 10 of 24 (~44 ms of AdamW vs
# ~26 ms of forward per layer), then the memory is better spent on kept activations (2.4 GB per layer, saving
# ~26 ms of recompute each). At 1.3B everything fits more or less: all resident layers, then kept ones.
keep_args_of() {
    local tried; tried=$(grep -o 'try -R [0-9]* -K [0-9]*' "$OUT/ours-$1.log" 2>/dev/null | tail -n1)
    if [ -n "$tried" ]; then echo "${tried#try }"; return; fi
    case $1 in 5b-32k) echo "-R 10 -K -1";; *) echo "-R -1 -K -1";; esac
}

# LIMIT=60 run NAME CMD...: runs CMD with its output in $OUT/NAME.log, under min(LIMIT, what is left of the budget)
# (SIGKILL 5 s after the limit); appends an `EXIT rc=..` line that bench_table.py reads. Skips (with a SKIPPED
# line) when under 20 s of budget is left.
RUNS=()  # this call's runs, in order, for the closing status table
run() {
    local name=$1; shift
    RUNS+=("$name")
    local log="$OUT/$name.log" left=$((BUDGET_S - (SECONDS - START)))
    local t=${LIMIT:-60}
    [ "$left" -lt "$t" ] && t=$left
    if [ "$t" -lt 20 ]; then
        say "skip $name: time budget spent"
        echo "SKIPPED: time budget spent (BUDGET_S=$BUDGET_S)" > "$log"; table; return
    fi
    say "run  $name (timeout ${t}s): $*"
    local t0=$SECONDS
    { echo "CMD: $*"; timeout -k 5 "$t" "$@"; echo "EXIT rc=$? wall_s=$((SECONDS - t0)) timeout_s=$t"; } > "$log" 2>&1
    local res; res=$(grep '^RESULT ' "$log" | tail -n1)
    if [ -n "$res" ]; then say "  ok   $name (${res:0:200})"
    else say "  FAIL $name: $(grep -v '^EXIT ' "$log" | grep -v '^\s*$' | tail -n1 | cut -c1-200) [$(tail -n1 "$log")]"; fi
    table
}

skip() { RUNS+=("$1"); echo "SKIPPED: $2" > "$OUT/$1.log"; say "skip $1: $2"; }

# ---- build (only this call's targets), device ----
case $CALL in
    A) TARGETS="train_gpt build/bench_cpu_adam build/bench_attention build/bench_layer"; BUILD_T=60;;  # ~20 s
    B) TARGETS="train_gpt"; BUILD_T=45;;  # ~15 s
esac
say "call $CALL; build: make -j16 $TARGETS (log: $OUT/build_$CALL.log)"
# shellcheck disable=SC2086
timeout -k 5 $BUILD_T make -j16 -k $TARGETS > "$OUT/build_$CALL.log" 2>&1
BUILD_RC=$? BUILD_S=$SECONDS
[ $BUILD_RC = 0 ] || say "build FAILED or timed out (rc $BUILD_RC, limit ${BUILD_T} s): $(grep -m1 -i error "$OUT/build_$CALL.log")"
{
    GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n1)
    echo "gpu: ${GPU:-none (nvidia-smi found no GPU)}"
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC') (call $CALL)"
    echo "cpu: $(nproc) cores, $(free -g | awk '/^Mem:/{print $2}') GiB RAM ($(awk '/^MemAvailable:/{printf "%.1f", $2 / 1048576}' /proc/meminfo) GiB available at the start; train_gpt -M ${HOST_GIB:-none} -V ${GPU_GIB:-none})"
    echo "torch: $(python3 -c 'import torch; print(torch.__version__)' 2>&1 | tail -n1)"
} > "$OUT/device_$CALL.txt"
cat "$OUT/device_$CALL.txt"
case $CALL in
    A) rm -f "$OUT"/attention.log "$OUT"/attention_sdpa.log "$OUT"/layer.log "$OUT"/layer_unfused.log "$OUT"/cpu_adam.log "$OUT"/torch_adam.log "$OUT"/*-1.3b-*.log;;
    B) rm -f "$OUT"/*-5b-*.log;;
esac

# ---- the runs, in order of importance ----
ours() {  # ours NAME CFG [flags...]: one run of train_gpt in benchmark mode on config CFG
    local name=$1 cfg=$2; shift 2
    read -r L C NH <<< "$(model_of "$cfg")"
    if [ ! -x ./train_gpt ]; then skip "$name" "train_gpt did not build (see build_$CALL.log)"; return; fi
    local extra=()
    [ -n "${SLOTS:-}" ] && extra+=(-S "$SLOTS")
    [ -n "$HOST_GIB" ] && extra+=(-M "$HOST_GIB")
    [ -n "$GPU_GIB" ] && extra+=(-V "$GPU_GIB")
    [ "$TIMELINE" = 1 ] && extra+=(-Y 1 -o "$OUT/trace-$name")  # -o: DIR/trace.json, a Chrome trace of the last step
    # shellcheck disable=SC2206
    extra+=(${OURS_ARGS:-})
    run "$name" ./train_gpt -e "L$L:C$C:NH$NH" -t 1024 -b 8 -d "$(tokens_of "$cfg")" -B 6 -W 2 "$@" "${extra[@]}"
}
port=29511
peer() {  # peer MODE CFG: one PyTorch peer run
    local mode=$1 cfg=$2
    if [ "$PEERS" != 1 ]; then skip "$mode-$cfg" "PEERS=$PEERS"; return; fi
    if [ ! -f "$PEER_PY" ]; then skip "$mode-$cfg" "$PEER_PY not found (carry .carry)"; return; fi
    read -r L C NH <<< "$(model_of "$cfg")"
    port=$((port + 1))  # a fresh rendezvous port per run, in case a killed run left one in use
    MASTER_PORT=$port run "$mode-$cfg" python3 "$PEER_PY" "$mode" "$L" "$C" "$NH" $(($(tokens_of "$cfg") / 1024)) 1024
}


# Times below: estimates for the H100 machine (16 cores, 128 GiB) from the sizes, nothing here has run on a GPU
# yet; each timeout is ~2-3x its estimate. Ours: start-up (init, pinning the bf16 weights and gradients) plus
# 8 steps (-W 2 -B 6). A 1.3B run: ~21 GiB of host state, ~5 s of start-up, steps of ~0.3 s (8K, CPU AdamW) to
# ~0.9 s (32K): ~15-20 s.
if [ "$CALL" = A ]; then
    # build: 60 (above)
    LIMIT=50 ours ours-1.3b-32k 1.3b-32k                     # 50
    LIMIT=60 peer gpu_ckpt 1.3b-32k                          # 60: torch import + 6 steps of ~0.7 s: ~20 s
    LIMIT=50 ours ours_res-1.3b-32k 1.3b-32k -R -1           # 50
    # shellcheck disable=SC2046
    LIMIT=50 ours ours_keep-1.3b-32k 1.3b-32k $(keep_args_of 1.3b-32k)  # 50
    if [ "$ADAM" = 1 ]; then                             # AdamW, 1 GiB per fp32 array, best of 5: ~10 / ~15 s
        if [ -x build/bench_cpu_adam ]; then LIMIT=25 run cpu_adam build/bench_cpu_adam "$ADAM_N" "$ADAM_THREADS" 5
        else skip cpu_adam "build/bench_cpu_adam did not build"; fi  # 25
        LIMIT=40 run torch_adam python3 dev/bench/bench_torch_adam.py "$ADAM_N" "$ADAM_THREADS" 5  # 40
    fi
    LIMIT=35 ours ours-1.3b-8k 1.3b-8k                       # 35
    # the two attention paths alone at the 1.3B and 5B shapes: agreement at T = 1024 and their speed (~10 s)
    if [ -x build/bench_attention ]; then LIMIT=25 run attention build/bench_attention
    else skip attention "build/bench_attention did not build (see build_A.log)"; fi  # 25
    # one layer stage by stage at the same shapes (~10 s): which stage a layer's time goes to
    if [ -x build/bench_layer ]; then LIMIT=25 run layer build/bench_layer
    else skip layer "build/bench_layer did not build (see build_A.log)"; fi  # 25
    # these add up to 60 + 360 + 10 x 5 (SIGKILL grace) = 470 s at worst
    # as the budget allows
    if [ "$PEERS" = 1 ]; then LIMIT=30 run attention_sdpa python3 dev/bench/bench_sdpa.py; else skip attention_sdpa "PEERS=$PEERS"; fi
    [ -x build/bench_layer ] && LIMIT=30 run layer_unfused build/bench_layer -F 0 -G 0
    LIMIT=50 ours ours_unfused-1.3b-32k 1.3b-32k -F 0 -G 0
    LIMIT=50 peer gpu_ckpt 1.3b-8k
    LIMIT=60 peer fsdp_offload 1.3b-8k                       # 6 steps of ~2.4 s + start-up
    LIMIT=60 peer fsdp_offload 1.3b-32k
fi

# A 5B run: ~80 GiB of host state (fp32 weights, m, v; pinned bf16 weights and gradients), ~15 s of start-up,
# steps of ~1.2 s (8K: the CPU AdamW of 5B parameters) to ~3.3 s (32K: ~1 PFLOP with the recompute): ~30-45 s.
if [ "$CALL" = B ]; then
    # build: 45 (above)
    LIMIT=60 ours ours-5b-8k 5b-8k                           # 60
    LIMIT=130 peer fsdp_offload 5b-8k                        # 130: 6 steps of ~8.4 s + ~30-40 s start-up: ~90 s
    LIMIT=60 ours ours_res-5b-8k 5b-8k -R -1                 # 60
    LIMIT=65 ours ours-5b-32k 5b-32k                         # 65
    # shellcheck disable=SC2046
    LIMIT=65 ours ours_keep-5b-32k 5b-32k $(keep_args_of 5b-32k)  # 65
    # these add up to 45 + 380 + 6 x 5 (SIGKILL grace) = 455 s at worst
    # as the budget allows
    LIMIT=75 ours ours_res-5b-32k 5b-32k -R -1
    LIMIT=150 peer fsdp_offload 5b-32k
fi

# ---- the report, then (the last lines) each run's status ----
table
say "done (budget ${BUDGET_S}s); report also in $OUT/table_$CALL.md"
echo
cat "$OUT/table_$CALL.md"
[ -s "$OUT/table_$CALL.err" ] && { echo "bench_table.py errors:"; cat "$OUT/table_$CALL.err"; }
echo
echo "| run (call $CALL) | status | s | key figures |"
echo "|---|---|---:|---|"
case $BUILD_RC in 0) st=ok;; 124|137) st=timeout;; *) st="FAIL rc=$BUILD_RC";; esac
echo "| build | $st | $BUILD_S | $(grep -m1 -iE '(^|[^a-z])error' "$OUT/build_$CALL.log" | cut -c1-100) |"
for name in "${RUNS[@]}"; do
    log="$OUT/$name.log"
    exit_line=$(grep '^EXIT rc=' "$log" 2>/dev/null | tail -n1)
    rc=$(echo "$exit_line" | sed -n 's/^EXIT rc=\([0-9]*\).*/\1/p'); wall=$(echo "$exit_line" | sed -n 's/.*wall_s=\([0-9]*\).*/\1/p')
    lim=$(echo "$exit_line" | sed -n 's/.*timeout_s=\([0-9]*\).*/\1/p')
    res=$(grep '^RESULT ' "$log" 2>/dev/null | tail -n1)
    if grep -q '^SKIPPED:' "$log" 2>/dev/null; then st="skipped: $(sed -n 's/^SKIPPED: //p' "$log" | head -n1)"; fig=""; wall=0
    elif [ "$rc" = 124 ] || { [ "$rc" = 137 ] && [ "${wall:-0}" -ge "${lim:-0}" ]; }; then st="timeout"; fig=""
    elif [ "$rc" = 0 ] && [ -n "$res" ]; then st="ok"; fig=$(echo "$res" | grep -oE '"(tok_per_s|model_TFLOPs|peak_gpu_GiB|adamw_f32grad|adamw_plus_cast|fwd_ms)": [0-9.]+' | head -n3 | tr '\n' ' ')
    else st="FAIL rc=${rc:-?}"; fig=$(grep -vE '^(CMD:|EXIT rc=)' "$log" | grep -v '^[[:space:]]*$' | tail -n1 | cut -c1-100); fi
    echo "| $name | $st | ${wall:--} | ${fig//|/\\|} |"
done
exit 0
