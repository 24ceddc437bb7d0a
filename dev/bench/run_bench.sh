#!/usr/bin/env bash
# run_bench.sh — the one-call benchmark on the GPU device: builds train_gpt and bench_cpu_adam, runs our
# streaming trainer and the PyTorch peers (.carry/peers/gpt_baseline.py) on the same shapes and tokens per
# step, times CPU AdamW (ours vs torch), and prints one markdown table (dev/bench/bench_table.py), also
# written to $OUT/table.md. Every run has a timeout and the whole script a time budget; what does not fit
# is skipped, never half-waited for. It changes no source and checks no numerics (make test does).
#
# usage (repo root): OUT=dir bash dev/bench/run_bench.sh          (OUT defaults to ./out)
# env: CONFIGS="1.3b-8k 1.3b-32k 5b-8k 5b-32k" (subset), PEERS=0 (no peers), ADAM=0 (no AdamW benches),
#      RESIDENT_CONFIGS="5b-8k 1.3b-32k 5b-32k" (configs also run with -R -1: layers kept on the GPU where
#      memory allows, logs ours_res-CFG.log; "" = none),
#      KEEP_CONFIGS="1.3b-32k 5b-32k" (configs also run with GPU-resident layers AND kept activations, -K -1:
#      the backward pass of those layers skips its recompute; flags from keep_args_of below, logs
#      ours_keep-CFG.log; "" = none),
#      UNFUSED_CONFIGS="1.3b-32k" (configs also run with -F 0 -G 0: the cuBLAS + softmax attention and the
#      bias / GELU passes as separate kernels, logs ours_unfused-CFG.log: what the fusions gain; "" = none),
#      TIMELINE=0 (our runs without -Y 1), SLOTS=N (our -S), OURS_ARGS="..." (more flags for train_gpt),
#      BUDGET_S=540 (no run starts after this many seconds; each is cut at it), RUN_TIMEOUT_S=240 (per run),
#      ADAM_N=268435456 ADAM_THREADS=16 (AdamW bench size: 268M params = 1 GiB per fp32 array),
#      HOST_GIB=120 (our -M: the host memory train_gpt's fit check counts on; "" = MemAvailable. The device is a VM
#      whose RAM may grow as it is used, so MemAvailable at the start can be far below its 128 GiB),
#      GPU_GIB=79 (our -V: the GPU memory train_gpt may use. The targets are an H100 80GB's, so on a larger GPU
#      (an H200 may be lent) -R -1 / -K -1 place layers as on the H100; "" = all that is free)
set -u
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-./out}
mkdir -p "$OUT"
CONFIGS=${CONFIGS:-"1.3b-8k 1.3b-32k 5b-8k 5b-32k"}
RESIDENT_CONFIGS=${RESIDENT_CONFIGS-"5b-8k 1.3b-32k 5b-32k"}
KEEP_CONFIGS=${KEEP_CONFIGS-"1.3b-32k 5b-32k"}
UNFUSED_CONFIGS=${UNFUSED_CONFIGS-"1.3b-32k"}
PEERS=${PEERS:-1}
ADAM=${ADAM:-1}
TIMELINE=${TIMELINE:-1}
BUDGET_S=${BUDGET_S:-540}
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-240}
ADAM_N=${ADAM_N:-268435456}
ADAM_THREADS=${ADAM_THREADS:-16}
PEER_PY=${PEER_PY:-.carry/peers/gpt_baseline.py}
HOST_GIB=${HOST_GIB-120}
GPU_GIB=${GPU_GIB-79}
START=$SECONDS

say() { printf '[%4ds] %s\n' $((SECONDS - START)) "$*"; }
table() { python3 dev/bench/bench_table.py "$OUT" > "$OUT/table.md" 2> "$OUT/table.err"; }

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
wanted() { case " $CONFIGS " in *" $1 "*) return 0;; *) return 1;; esac; }

# run NAME CMD...: runs CMD with its output in $OUT/NAME.log, under min(RUN_TIMEOUT_S, what is left of the
# budget); appends an `EXIT rc=..` line that bench_table.py reads. Skips (with a SKIPPED line) when under
# 20 s of budget is left.
run() {
    local name=$1; shift
    local log="$OUT/$name.log" left=$((BUDGET_S - (SECONDS - START)))
    local t=$RUN_TIMEOUT_S
    [ "$left" -lt "$t" ] && t=$left
    if [ "$t" -lt 20 ]; then
        say "skip $name: time budget spent"
        echo "SKIPPED: time budget spent (BUDGET_S=$BUDGET_S)" > "$log"; table; return
    fi
    say "run  $name (timeout ${t}s): $*"
    local t0=$SECONDS
    { echo "CMD: $*"; timeout -k 10 "$t" "$@"; echo "EXIT rc=$? wall_s=$((SECONDS - t0)) timeout_s=$t"; } > "$log" 2>&1
    local res; res=$(grep '^RESULT ' "$log" | tail -n1)
    if [ -n "$res" ]; then say "  ok   $name (${res:0:200})"
    else say "  FAIL $name: $(grep -v '^EXIT ' "$log" | grep -v '^\s*$' | tail -n1 | cut -c1-200) [$(tail -n1 "$log")]"; fi
    table
}

skip() { echo "SKIPPED: $2" > "$OUT/$1.log"; say "skip $1: $2"; }

# ---- (a) build, (b) device ----
say "build: make -j16 train_gpt build/bench_cpu_adam build/bench_attention build/bench_layer (log: $OUT/build.log)"
make -j16 -k train_gpt build/bench_cpu_adam build/bench_attention build/bench_layer > "$OUT/build.log" 2>&1 || say "build FAILED: $(grep -m1 -i error "$OUT/build.log")"
{
    echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -n1)"
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "cpu: $(nproc) cores, $(free -g | awk '/^Mem:/{print $2}') GiB RAM ($(awk '/^MemAvailable:/{printf "%.1f", $2 / 1048576}' /proc/meminfo) GiB available at the start; train_gpt -M ${HOST_GIB:-none} -V ${GPU_GIB:-none})"
    echo "torch: $(python3 -c 'import torch; print(torch.__version__)' 2>&1 | tail -n1)"
} > "$OUT/device.txt"
cat "$OUT/device.txt"
rm -f "$OUT"/attention.log "$OUT"/attention_sdpa.log "$OUT"/layer.log "$OUT"/layer_unfused.log "$OUT"/ours-*.log "$OUT"/ours_res-*.log "$OUT"/ours_keep-*.log "$OUT"/ours_unfused-*.log "$OUT"/gpu_ckpt-*.log "$OUT"/fsdp_offload-*.log "$OUT"/cpu_adam.log "$OUT"/torch_adam.log

# ---- (c) our trainer on every config (the product), then the two peers the targets need, then our
# runs with GPU-resident layers (-R -1) and kept activations, then (d) AdamW, then the attention and layer
# micro-benchmarks, the unfused run and the other peers ----
ours() {  # ours NAME CFG [flags...]: one run of train_gpt in benchmark mode on config CFG
    local name=$1 cfg=$2; shift 2
    read -r L C NH <<< "$(model_of "$cfg")"
    if [ ! -x ./train_gpt ]; then skip "$name" "train_gpt did not build (see build.log)"; return; fi
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

for cfg in 5b-32k 5b-8k 1.3b-32k 1.3b-8k; do
    wanted "$cfg" && ours "ours-$cfg" "$cfg"
done
for pc in gpu_ckpt:1.3b-32k fsdp_offload:5b-8k; do
    wanted "${pc#*:}" && peer "${pc%%:*}" "${pc#*:}"
done
for cfg in $RESIDENT_CONFIGS; do
    wanted "$cfg" && ours "ours_res-$cfg" "$cfg" -R -1
done
for cfg in $KEEP_CONFIGS; do
    # shellcheck disable=SC2046
    wanted "$cfg" && ours "ours_keep-$cfg" "$cfg" $(keep_args_of "$cfg")
done
# (d) AdamW (~15 s): a target of its own, so before the micro-benchmarks that only explain
if [ "$ADAM" = 1 ]; then
    if [ -x build/bench_cpu_adam ]; then run cpu_adam build/bench_cpu_adam "$ADAM_N" "$ADAM_THREADS" 5
    else skip cpu_adam "build/bench_cpu_adam did not build"; fi
    run torch_adam python3 dev/bench/bench_torch_adam.py "$ADAM_N" "$ADAM_THREADS" 5
fi

# the two attention paths alone at the 1.3B and 5B shapes: agreement at T = 1024 and their speed (~20 s)
if [ -x build/bench_attention ]; then run attention build/bench_attention
else skip attention "build/bench_attention did not build (see build.log)"; fi
# PyTorch's fused attention (SDPA) at the same shapes: what the peers' attention costs (~10 s)
if [ "$PEERS" = 1 ]; then run attention_sdpa python3 dev/bench/bench_sdpa.py; else skip attention_sdpa "PEERS=$PEERS"; fi
# one layer stage by stage at the same shapes, fused and unfused (~30 s): which stage a layer's time goes to
if [ -x build/bench_layer ]; then run layer build/bench_layer; run layer_unfused build/bench_layer -F 0 -G 0
else skip layer "build/bench_layer did not build (see build.log)"; fi

for cfg in $UNFUSED_CONFIGS; do
    wanted "$cfg" && ours "ours_unfused-$cfg" "$cfg" -F 0 -G 0
done

# the other peers, the slowest last
for pc in gpu_ckpt:1.3b-8k fsdp_offload:1.3b-8k fsdp_offload:1.3b-32k fsdp_offload:5b-32k; do
    wanted "${pc#*:}" && peer "${pc%%:*}" "${pc#*:}"
done

# ---- (e) the table ----
table
say "done; table also in $OUT/table.md"
echo
cat "$OUT/table.md"
[ -s "$OUT/table.err" ] && { echo "bench_table.py errors:"; cat "$OUT/table.err"; }
exit 0
