#!/usr/bin/env bash
# run.sh — fuzzes every input parser of the trainers (dev/fuzz/fuzz_inputs.cpp) with libFuzzer under ASan +
# UBSan: builds build/fuzz/fuzz_inputs with clang, writes valid seed inputs, then runs each target for
# SECONDS_PER_TARGET seconds, two at a time, keeping the corpora in build/fuzz/corpus/<target> (a later run
# goes on from them). A crash, a leak, a timeout or a contradiction (fuzz_inputs.cpp's REQUIRE) leaves its input
# in build/fuzz/<target>-crash-* (-leak-, -timeout-, -oom-) and fails the run. Not part of `make test`: it finds bugs by time spent, not a fixed check.
#
# usage (repo root): bash dev/fuzz/run.sh [SECONDS_PER_TARGET, default 60] [target ...]     or: make fuzz
# replay one input:  FUZZ_TARGET=shard build/fuzz/fuzz_inputs build/fuzz/shard-crash-...
set -u
cd "$(dirname "$0")/../.." || exit 1
SECS=${1:-60}
shift || true
TARGETS=${*:-"model shard state tokenizer args spec bpe marker hf json manifest llama"}
CLANG=${CLANG:-clang++}
F=build/fuzz
mkdir -p $F
$CLANG -std=c++17 -O1 -g -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -Wall -Wno-unused-function dev/fuzz/fuzz_inputs.cpp llmc/ssd_io.cpp llmc/ssd_store.cpp cpu_adam.cpp -o $F/fuzz_inputs -luring -lpthread \
    || { echo "fuzz: build failed ($CLANG)"; exit 1; }
rm -rf $F/seeds && FUZZ_SEEDS=$F/seeds $F/fuzz_inputs || exit 1

fuzz_one() {  # target: runs it, prints one table row
    local t=$1 maxlen=4096 timeout=20 rss=4096
    [ "$t" = model ] && maxlen=72000  # the smallest legal model file is 35 KB (bf16)
    [ "$t" = hf ] && maxlen=72000     # the smallest GPT-2 safetensors file is 61 KB
    [ "$t" = llama ] && maxlen=20000  # the seed model file is 12 KB
    # json: each input is also parsed as ~1 MB arrays and objects; a reader that is not linear, or whose memory
    # is more than a small multiple of the text, fails these limits
    [ "$t" = json ] && { timeout=5; rss=1024; }
    mkdir -p $F/corpus/$t
    FUZZ_TARGET=$t $F/fuzz_inputs $F/corpus/$t $F/seeds/$t -max_total_time="$SECS" -max_len=$maxlen -timeout=$timeout \
        -rss_limit_mb=$rss -artifact_prefix=$F/$t- -print_final_stats=1 > $F/$t.log 2>&1
    local rc=$?
    local runs cov
    runs=$(grep -a -o 'stat::number_of_executed_units: *[0-9]*' $F/$t.log | grep -o '[0-9]*$')
    cov=$(grep -a -o 'cov: [0-9]*' $F/$t.log | tail -n1 | grep -o '[0-9]*')
    printf '| %-9s | %10s | %5s | %-40s |\n' "$t" "${runs:-?}" "${cov:-?}" \
        "$([ $rc = 0 ] && echo ok || echo "FAILED (rc $rc, see $F/$t.log)")"
    return $rc
}

echo "| target    |       runs |   cov | result                                   |"
echo "|-----------|------------|-------|------------------------------------------|"
status=0
set -- $TARGETS
while [ $# -gt 0 ]; do  # two at a time (a 2-core machine: one per core)
    fuzz_one "$1" > $F/row1 & p1=$!
    p2=
    if [ $# -gt 1 ]; then fuzz_one "$2" > $F/row2 & p2=$!; fi
    wait $p1 || status=1
    cat $F/row1
    if [ -n "$p2" ]; then wait $p2 || status=1; cat $F/row2; shift; fi
    shift
done
ls $F/*-crash-* $F/*-leak-* $F/*-timeout-* $F/*-oom-* 2>/dev/null && status=1
echo "fuzz: $([ $status = 0 ] && echo "no crash, no contradiction" || echo FAILED) (${SECS} s per target)"
exit $status
