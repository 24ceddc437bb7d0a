#!/usr/bin/env bash
# run_tests.sh — runs each GoogleTest binary given as an argument (optionally prefixed by VAR=value settings, or
# followed by gtest flags), RUN_TESTS_JOBS at a time (default: one per core), then prints each one's summary,
# with each failure's message, in the order given, sums the results and ends with the line
# `tests: N passed, M failed` (skipped tests, e.g. GPU suites without a GPU, and the slowest tests are reported
# above it). A binary that crashes or fails to start counts as one failure, so a broken suite can never look
# green. The suites use their own scratch directories, so they run side by side; none has a tight time limit.
jobs_max=${RUN_TESTS_JOBS:-$(nproc 2> /dev/null || echo 1)}
[ "$jobs_max" -ge 1 ] 2> /dev/null || jobs_max=1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/run_tests.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
i=0
for t in "$@"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
    # eval: an entry may set the environment, e.g. "FAKE_SCHED=1 build/emu_test_kernels"
    (eval "$t" > "$tmp/$i.out" 2>&1; echo $? > "$tmp/$i.rc") &
    i=$((i + 1))
done
wait
passed=0; failed=0; skipped=0; i=0
for t in "$@"; do
    echo "=== $t"
    out="$tmp/$i.out"; rc=$(cat "$tmp/$i.rc" 2> /dev/null || echo 1)
    # the summary lines, and each failure with the 6 lines after it (gtest's message: what was expected, seen)
    awk '/^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|SKIPPED \]|error/ { print; next }
         /Failure/ { print; after = 6; next }
         after > 0 { print "    " substr($0, 1, 600); after-- }' "$out" | head -80
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$out" | tail -n1)
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$out" | tail -n1)
    s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$out" | tail -n1)
    p=${p:-0}; f=${f:-0}; s=${s:-0}
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then echo "!!! $t exited with status $rc"; f=1; fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    i=$((i + 1))
done
# the slowest tests (wall time beside the other suites): where to look when make test grows
echo "slowest tests (seconds, run beside other suites):"
i=0
for t in "$@"; do
    b=$t
    while [ "${b%%[ =]*}" != "${b%% *}" ]; do b=${b#* }; done  # the binary, past any VAR=value
    sed -n 's/^\[       OK \] \([^ ]*\) (\([0-9]*\) ms)$/\2 \1/p' "$tmp/$i.out" | sed "s|\$| (${b%% *})|"
    i=$((i + 1))
done | sort -rn | head -n "${RUN_TESTS_SLOWEST:-8}" | awk '{ printf "  %7.1f %s %s\n", $1 / 1000, $2, $3 }'
echo "skipped: $skipped (GPU suites skip when no CUDA device is present)"
echo "tests: $passed passed, $failed failed"
[ $failed -eq 0 ]
