#!/usr/bin/env bash
# run_tests.sh — runs each GoogleTest binary given as an argument (optionally prefixed by VAR=value settings), sums the results and ends with the
# line `tests: N passed, M failed` (skipped tests, e.g. GPU suites without a GPU, are reported above it).
# A binary that crashes or fails to start counts as one failure, so a broken suite can never look green.
passed=0; failed=0; skipped=0
for t in "$@"; do
  echo "=== $t"
  out=$(eval "$t" 2>&1); rc=$?  # eval: an entry may set the environment, e.g. "FAKE_SCHED=1 build/emu_test_kernels"
  echo "$out" | grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|^\[  FAILED  \] [A-Za-z]|SKIPPED \]|Failure|error' | head -60
  p=$(echo "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -n1)
  f=$(echo "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -n1)
  s=$(echo "$out" | sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' | tail -n1)
  p=${p:-0}; f=${f:-0}; s=${s:-0}
  if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then echo "!!! $t exited with status $rc"; f=1; fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
done
echo "skipped: $skipped (GPU suites skip when no CUDA device is present)"
echo "tests: $passed passed, $failed failed"
[ $failed -eq 0 ]
