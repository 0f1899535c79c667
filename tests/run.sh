#!/usr/bin/env bash
# The test suite: the cmocka programs, then the command-line and sweep tests.  Ends with the line
# "N passed, N failed" and exits non-zero if anything failed.
#   AEBENCH     the binary under test (default ./aebench)
#   TEST_BUILD  where the test programs are (default build)
set -u
cd "$(dirname "$0")/.."
export AEBENCH=${AEBENCH:-./aebench}
TEST_BUILD=${TEST_BUILD:-build}
PASSED=0
FAILED=0
FAILURES=()

# Every CPU test program (tests/test_*.c but the GPU-only test_cuda).
PROGS=()
for src in tests/test_*.c; do
    prog=$(basename "$src" .c)
    [ "$prog" = test_cuda ] || PROGS+=("$prog")
done
for prog in "${PROGS[@]}"; do
    echo "=== $prog"
    out=$("$TEST_BUILD/tests/$prog" 2>&1)
    rc=$?
    printf '%s\n' "$out"
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' <<<"$out" | tail -n 1)
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' <<<"$out" | tail -n 1)
    PASSED=$((PASSED + ${p:-0}))
    FAILED=$((FAILED + ${f:-0}))
    if [ "$rc" -ne 0 ] && [ -z "$f" ]; then
        # crashed before cmocka could summarise
        FAILED=$((FAILED + 1))
        FAILURES+=("$prog (exit $rc)")
    elif [ -n "$f" ] && [ "$f" -gt 0 ]; then
        FAILURES+=("$prog ($f failed)")
    fi
done

echo "=== command line"
# shellcheck source=tests/test_cli.sh
source tests/test_cli.sh
echo "=== data parallel (mpirun)"
# shellcheck source=tests/test_dp.sh
source tests/test_dp.sh
echo "=== ranks (launch, options, faults)"
# shellcheck source=tests/test_ranks.sh
source tests/test_ranks.sh
echo "=== gemini"
# shellcheck source=tests/test_gemini.sh
source tests/test_gemini.sh
echo "=== calibrate and predict"
# shellcheck source=tests/test_predict.sh
source tests/test_predict.sh
echo "=== sweeps"
# shellcheck source=tests/test_sweep.sh
source tests/test_sweep.sh

echo
if [ "${#FAILURES[@]}" -gt 0 ]; then printf 'failed: %s\n' "${FAILURES[@]}"; fi
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
