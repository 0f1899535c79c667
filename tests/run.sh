#!/usr/bin/env bash
# The test suite: the cmocka programs, then the command-line, multi-rank and sweep tests.
# Ends with the line "N passed, F failed, K not run (why)" and exits non-zero if anything
# failed.  Only what needs hardware this machine lacks (a GPU) is "not run"; a part that
# cannot run for want of something `make deps` provides (MPICH) is a failure.
#   AEBENCH            the binary under test (default ./aebench): the shipped program, which the
#                      docs and fuzz-grammar suites and the fuzz campaign check (its --help, README
#                      and grammar hold no test engine)
#   AEBENCH_TEST       its test build (default TEST_BUILD/tests/aebench, make tests): the same
#                      program with the test-only engines (tests/engine_*.c) in its registry, which
#                      every other shell suite runs as AEBENCH (their engine loops take its
#                      --list-engines); the suites see the shipped one as AEBENCH_SHIPPED
#   AEBENCH_NOMPI      a build without MPI, for its refusals (default ./aebench-nompi)
#   TEST_BUILD         where the test programs are (default build)
#   TESTS_WITHOUT_MPI  why AEBENCH was built without MPI on purpose (make check-asan): then
#                      the multi-rank parts are "not run" with that reason, not failures
set -u
cd "$(dirname "$0")/.."
export AEBENCH=${AEBENCH:-./aebench}
export AEBENCH_NOMPI=${AEBENCH_NOMPI:-./aebench-nompi}
TEST_BUILD=${TEST_BUILD:-build}
export AEBENCH_SHIPPED=$AEBENCH
AEBENCH_TEST=${AEBENCH_TEST:-$TEST_BUILD/tests/aebench}
PASSED=0
FAILED=0
FAILURES=()
NOT_RUN=0
NOT_RUN_WHY=()

# not_run WHAT WHY: a part this machine cannot run (say why).
not_run() {
    NOT_RUN=$((NOT_RUN + 1))
    NOT_RUN_WHY+=("$1: $2")
    echo "not run: $1 ($2)"
}
# needs_mpi PART BIN: 0 when BIN runs ranks and an MPI launcher is on the PATH.  Otherwise
# the part is a failure (make deps provides both), or not run when TESTS_WITHOUT_MPI says the
# build is without MPI on purpose; 1.
needs_mpi() {
    local part=$1 bin=$2
    if "$bin" --version 2>/dev/null | grep -q "ranks: mpi" && command -v mpiexec >/dev/null; then
        return 0
    fi
    if [ -n "${TESTS_WITHOUT_MPI:-}" ]; then
        not_run "$part" "$TESTS_WITHOUT_MPI"
    else
        FAILED=$((FAILED + 1))
        FAILURES+=("$part (no MPI)")
        echo "FAIL $part: $bin was built without MPI or mpiexec is not on the PATH ($("$bin" --version 2>&1)); make test installs MPICH and rebuilds"
    fi
    return 1
}

# procs_in DIR PATTERN: the processes matching PATTERN (pgrep -f) whose working directory is DIR
# (how the fault tests find what a job they started still runs, and nothing of anyone else's).
procs_in() {
    local p
    for p in $(pgrep -f "$2"); do [ "$(readlink "/proc/$p/cwd" 2>/dev/null)" = "$1" ] && echo "$p"; done
}

# Every test program: the CPU ones, and test_cuda (the CUDA backend against the CPU
# reference) where there is a GPU.
PROGS=()
for src in tests/test_*.c; do
    prog=$(basename "$src" .c)
    if [ "$prog" != test_cuda ]; then
        PROGS+=("$prog")
    elif ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
        not_run test_cuda "no GPU on this machine"
    elif [ ! -x "$TEST_BUILD/tests/test_cuda" ]; then
        not_run test_cuda "a GPU, but this build has no CUDA backend (no nvcc found)"
    else
        PROGS+=("$prog")
    fi
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

# The shell suites run the test build (the test engines among the engines they loop over), but
# for those that check the shipped program (below).  Without it they run the shipped one, and
# that is a failure: the test engines went untested.
SUITES_BIN=$AEBENCH_SHIPPED
if [ -x "$AEBENCH_TEST" ]; then
    SUITES_BIN=$AEBENCH_TEST
else
    FAILED=$((FAILED + 1)); FAILURES+=("test build (no $AEBENCH_TEST)")
    echo "FAIL test build: $AEBENCH_TEST was not built (make tests builds it); the suites run $AEBENCH_SHIPPED"
fi
AEBENCH=$SUITES_BIN
echo "=== command line"
# shellcheck source=tests/test_cli.sh
source tests/test_cli.sh
echo "=== data parallel (mpirun)"
# shellcheck source=tests/test_dp.sh
source tests/test_dp.sh
echo "=== ranks (launch, options, faults)"
# shellcheck source=tests/test_ranks.sh
source tests/test_ranks.sh
echo "=== several machines (MPICH cliques)"
# shellcheck source=tests/test_machines.sh
source tests/test_machines.sh
echo "=== gemini"
# shellcheck source=tests/test_gemini.sh
source tests/test_gemini.sh
echo "=== calibrate and predict"
# shellcheck source=tests/test_predict.sh
source tests/test_predict.sh
echo "=== sweeps"
# shellcheck source=tests/test_sweep.sh
source tests/test_sweep.sh
echo "=== rerun (every result says how it was made; --rerun repeats it)"
# shellcheck source=tests/test_rerun.sh
source tests/test_rerun.sh
echo "=== interrupted runs (SIGINT, SIGTERM; a sweep's --resume after)"
# shellcheck source=tests/test_interrupt.sh
source tests/test_interrupt.sh
echo "=== search"
# shellcheck source=tests/test_search.sh
source tests/test_search.sh
echo "=== docs (the README's flag table against --help)"
# (the shipped program's --help: the README documents it, not the test engines' options)
AEBENCH=$AEBENCH_SHIPPED
# shellcheck source=tests/test_docs.sh
source tests/test_docs.sh
AEBENCH=$SUITES_BIN

echo "=== faults (a seeded campaign)"
if needs_mpi "fault campaign" "$AEBENCH"; then
    # shellcheck source=tests/test_faults.sh
    source tests/test_faults.sh
fi
echo "=== fuzz (a seeded campaign of inputs, under ASan and UBSan, each with its exact ending)"
# (from here on the shipped program: the grammar is its --help's, and the campaign's)
AEBENCH=$AEBENCH_SHIPPED
# shellcheck source=tests/test_fuzz_grammar.sh
source tests/test_fuzz_grammar.sh
# (the sanitizer build: make test and make check-asan make ./aebench-asan; the --ranks inputs
# run AEBENCH, which has MPI but where check-asan says it has not)
FUZZ_BIN=${AEBENCH_FUZZ:-./aebench-asan}
if [ -x "$FUZZ_BIN" ]; then
    fuzz_mpi=()
    if [ -n "${TESTS_WITHOUT_MPI:-}" ]; then fuzz_mpi=(--without-mpi "$TESTS_WITHOUT_MPI"); fi
    fuzz_out=$(python3 tests/fuzz.py "$FUZZ_BIN" --mpi-bin "$AEBENCH" "${fuzz_mpi[@]}" --inputs "${FUZZ_INPUTS:-3000}" \
        --seed "${FUZZ_SEED:-20261126}" 2>&1)
    fuzz_rc=$?
    printf '%s\n' "$fuzz_out" | grep -v '^fuzz campaign' | head -n 60
    fuzz_line=$(printf '%s\n' "$fuzz_out" | grep '^fuzz campaign' | tail -n 1)
    if [ "$fuzz_rc" -eq 0 ] && [ -n "$fuzz_line" ]; then
        PASSED=$((PASSED + 1)); echo "ok   $fuzz_line"
    else
        FAILED=$((FAILED + 1)); FAILURES+=("fuzz campaign"); echo "FAIL fuzz campaign: ${fuzz_line:-$(printf '%s' "$fuzz_out" | tail -c 400)}"
    fi
else
    FAILED=$((FAILED + 1)); FAILURES+=("fuzz campaign (no $FUZZ_BIN)")
    echo "FAIL fuzz campaign: $FUZZ_BIN was not built (make test builds it)"
fi
# the coverage-guided targets of the file parsers (make fuzz-targets: clang's libFuzzer), each
# for FUZZ_TARGET_S seconds from a seed corpus: the case configs, a machine file just measured,
# real checkpoint files (a tiny gemini run's --ckpt-dir, both versions and the half file that
# --ckpt-every 2 leaves at first) and a real store (a gemini run killed at its third iteration
# leaves it), token files for --data, a hostfile of each MPI
if [ -z "${SKIP_FUZZ_TARGETS:-}" ]; then
    ft_corpus=$(mktemp -d "${TMPDIR:-/tmp}/aebench-fuzz-corpus.XXXXXX")
    ft_runs=$(mktemp -d "${TMPDIR:-/tmp}/aebench-fuzz-seeds.XXXXXX")
    mkdir -p "$ft_corpus/config" "$ft_corpus/machine" "$ft_corpus/ckpt" "$ft_corpus/store" "$ft_corpus/data" \
        "$ft_corpus/hosts"
    cp configs/*.json configs/small/*.json "$ft_corpus/config/" 2>/dev/null
    printf 'node1:8\nnode2:8 # a comment\n' >"$ft_corpus/hosts/mpich"
    printf 'node1 slots=8 max_slots=8\nnode2 slots=4\n\nnode1 slots=2\n' >"$ft_corpus/hosts/openmpi"
    ft_tiny=(--device cpu -l 1 -h 32 --heads 2 --seq 8 --vocab 64 -b 1 --threads 1)
    "$AEBENCH" --calibrate "${ft_tiny[@]}" --results "$ft_corpus/machine" >/dev/null 2>&1
    mkdir -p "$ft_runs/shm" "$ft_runs/disk1" "$ft_runs/disk2"
    ft_bin=$(realpath "$AEBENCH")
    (cd "$ft_runs" && "$ft_bin" "${ft_tiny[@]}" -m gemini --gemini-mode naive --gemini-store shm --iters 3 \
        --ckpt-dir disk1 --ckpt-every 1 --results r1 &&
        "$ft_bin" "${ft_tiny[@]}" -m gemini --gemini-mode naive --gemini-store shm --iters 3 \
            --ckpt-dir disk2 --ckpt-every 2 --results r2) >/dev/null 2>&1
    # (killed at 3 by its own --fail-at: the shell's notice of it hidden with its output)
    { (cd "$ft_runs" && "$ft_bin" "${ft_tiny[@]}" -m gemini --gemini-mode naive --gemini-store shm --iters 5 \
        --gemini-job seed --fail-at 3 --results r3) >/dev/null 2>&1; } 2>/dev/null
    ft_i=0
    for f in "$ft_runs"/disk*/aebench-ckpt-*/rank-*.ckpt; do
        [ -f "$f" ] && cp "$f" "$ft_corpus/ckpt/seed-$((ft_i += 1))"
    done
    for f in "$ft_runs"/shm/aebench-gemini-*-seed/rank-*.ckpt; do
        [ -f "$f" ] && cp "$f" "$ft_corpus/store/seed-$((ft_i += 1))"
    done
    python3 -c 'import struct, sys
d = sys.argv[1]
open(d + "/tokens", "wb").write(struct.pack("<64H", *[(7 * i) % 512 for i in range(64)]))
open(d + "/short", "wb").write(struct.pack("<5H", 1, 2, 3, 4, 5))
open(d + "/big-id", "wb").write(struct.pack("<20H", *([3] * 19 + [600])))' "$ft_corpus/data"
    rm -rf "$ft_runs"
    # (no seed where a run made none: the target then starts empty, and its line says so)
    for t in ckpt store; do
        if [ -z "$(ls -A "$ft_corpus/$t")" ]; then
            FAILED=$((FAILED + 1)); FAILURES+=("fuzz target $t seeds")
            echo "FAIL fuzz target $t: no seed file was made (the gemini runs that make them failed)"
        fi
    done
    for t in config machine ckpt store data hosts; do
        if [ ! -x "build-fuzz/fuzz_$t" ]; then
            FAILED=$((FAILED + 1)); FAILURES+=("fuzz target $t (not built)")
            echo "FAIL fuzz target $t: build-fuzz/fuzz_$t was not built (make fuzz-targets needs clang, which make deps installs)"
            continue
        fi
        ft_seeds=$(ls "$ft_corpus/$t" | wc -l)
        ft_out=$(TMPDIR="$ft_corpus" "build-fuzz/fuzz_$t" -max_total_time="${FUZZ_TARGET_S:-10}" -timeout=20 -artifact_prefix=build-fuzz/ \
            -rss_limit_mb=2048 "$ft_corpus/$t" 2>&1)
        ft_rc=$?
        ft_done=$(printf '%s\n' "$ft_out" | grep -o 'Done [0-9]* runs' | tail -n 1)
        ft_cov=$(printf '%s\n' "$ft_out" | grep -o 'cov: [0-9]*' | tail -n 1)
        if [ "$ft_rc" -eq 0 ] && [ -n "$ft_done" ]; then
            PASSED=$((PASSED + 1)); echo "ok   fuzz target $t (libFuzzer, ASan/UBSan): $ft_done in ${FUZZ_TARGET_S:-10} s, ${ft_cov:-cov: ?} from $ft_seeds seed inputs, no crash"
        else
            FAILED=$((FAILED + 1)); FAILURES+=("fuzz target $t")
            echo "FAIL fuzz target $t: exit $ft_rc: $(printf '%s\n' "$ft_out" | grep -E 'ERROR|SUMMARY|runtime error' | head -n 3)"
        fi
    done
    rm -rf "$ft_corpus"
fi

echo
if [ "${#FAILURES[@]}" -gt 0 ]; then printf 'failed: %s\n' "${FAILURES[@]}"; fi
why=""
if [ "$NOT_RUN" -gt 0 ]; then
    why=" ($(printf '%s; ' "${NOT_RUN_WHY[@]}" | sed 's/; $//'))"
fi
echo "$PASSED passed, $FAILED failed, $NOT_RUN not run$why"
[ "$FAILED" -eq 0 ]
