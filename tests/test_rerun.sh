# --rerun and the provenance every result carries (issue 48: "every result says how it was
# made"; "aebench --rerun results/log_X.json runs exactly the run that JSON records"), sourced
# by tests/run.sh (PASSED, FAILED, FAILURES, needs_mpi); `bash tests/test_rerun.sh` runs it
# alone.  Every engine's CPU run is rerun and must repeat bit for bit (each iteration's loss and
# grad norm), and so must a sweep's run and a --ranks 2 job; a record whose build differs has
# the differences said; what is not a run record is refused (exit 2, one line, nothing written).

RR_ALONE=0
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    RR_ALONE=1
    cd "$(dirname "$0")/.." || exit 1
    PASSED=0 FAILED=0 FAILURES=()
fi
RR_WORK=$(mktemp -d "${TMPDIR:-/tmp}/aebench-rerun.XXXXXX")
RR_BIN=$(realpath "${AEBENCH:-./aebench}")
# A tiny model (a few milliseconds an iteration) for what is not the per-engine check.
RR_TINY=(--device cpu -l 2 -h 64 --heads 4 --seq 32 -b 2 --vocab 512 --threads 1 --seed 7)

rr_pass() { PASSED=$((PASSED + 1)); echo "ok   $1"; }
rr_fail() { FAILED=$((FAILED + 1)); FAILURES+=("$1"); echo "FAIL $1: $2"; }

# rr_in NAME CMD...: run CMD in $RR_WORK/NAME (out, err there); sets RR_RC and RR_DIR.
rr_in() {
    local name=$1
    shift
    RR_DIR="$RR_WORK/$name"
    mkdir -p "$RR_DIR"
    (cd "$RR_DIR" && timeout 300 "$@" >out 2>err)
    RR_RC=$?
}

# rr_json FILE: the one log_*.json in directory FILE (or FILE itself).
rr_json() {
    if [ -d "$1" ]; then find "$1" -maxdepth 1 -name 'log_*.json' | head -n 1; else echo "$1"; fi
}

# rr_same_steps A B: the JSON records A and B trained alike, bit for bit: as many iterations,
# each with the same loss and grad norm (the doubles' bits; the JSON writes each number so
# that it reads back to the same double).  Silent when so; else says how they differ.
rr_same_steps() {
    python3 - "$1" "$2" <<'PY'
import json, struct, sys
def steps(path):
    its = json.load(open(path))["iterations"]
    return [(struct.pack("<d", it["loss"]), struct.pack("<d", it["grad_norm"])) for it in its]
a, b = steps(sys.argv[1]), steps(sys.argv[2])
if not a:
    sys.exit("no iterations in " + sys.argv[1])
if a != b:
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    sys.exit("%d against %d iterations, the first differing: %d" % (len(a), len(b), first + 1))
PY
}

# rr_field FILE EXPR: a Python expression over the JSON d of FILE, printed ("" if it fails).
rr_field() {
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
try:
    print(eval(sys.argv[2]))
except Exception:
    print("")' "$1" "$2" 2>/dev/null
}

# rr_reruns RECORD RERUN [any-fingerprint]: RERUN's record (a file, or the one in a directory)
# is a rerun of RECORD's that repeats it (its steps, its fingerprint unless any-fingerprint,
# rerun_of naming it): silent when so, else why not.
rr_reruns() {
    local a b why
    a=$(rr_json "$1")
    b=$(rr_json "$2")
    if [ -z "$a" ] || [ -z "$b" ]; then echo "no JSON (record: ${a:-none}, rerun: ${b:-none})"; return; fi
    why=$(rr_same_steps "$a" "$b" 2>&1) || { echo "$why"; return; }
    [ -n "${3:-}" ] || [ "$(rr_field "$b" "d['config']['fingerprint']")" = "$(rr_field "$a" "d['config']['fingerprint']")" ] ||
        echo "fingerprint $(rr_field "$b" "d['config']['fingerprint']"), the record's $(rr_field "$a" "d['config']['fingerprint']")"
    [ "$(rr_field "$b" "d['rerun_of']['path']")" = "$(realpath "$a")" ] &&
        [ "$(rr_field "$b" "d['rerun_of']['fingerprint']")" = "$(rr_field "$a" "d['config']['fingerprint']")" ] ||
        echo "rerun_of $(rr_field "$b" "d.get('rerun_of')"), want $(realpath "$a")"
}

# ---- every engine: a CPU run (the CPU preset), its log and JSON say how it was made, and
# --rerun of its JSON repeats it bit for bit ------------------------------------------------
mapfile -t RR_ENGINES < <("$RR_BIN" --list-engines)
[ "${#RR_ENGINES[@]}" -ge 1 ] || rr_fail "--list-engines" "listed no engine"
for e in "${RR_ENGINES[@]}"; do
    extra=()
    [ "$e" = gemini ] && extra=(--gemini-store "$RR_WORK")
    rr_in "$e" "$RR_BIN" -m "$e" --device cpu --iters 3 --threads 1 "${extra[@]}" --results first
    rec=$(rr_json "$RR_DIR/first")
    log=${rec%.json}.txt
    if [ "$RR_RC" -ne 0 ] || [ -z "$rec" ]; then
        rr_fail "$e: a CPU run to rerun" "exit $RR_RC: $(tail -n 3 "$RR_DIR/err")"
        continue
    fi
    # the log's header: the build, its configuration and the settings (those given here, in the
    # order given; no shape: the CPU preset is the defaults' on the CPU backend)
    want="settings: --method $e --device cpu --iters 3 --threads 1${extra[*]:+ ${extra[*]}} --results first"
    if grep -q "^build: commit [0-9a-f]\{40\}\(-dirty\)\? | MPI .* | NCCL .* | CUDA runtime .* | CPU " "$log" &&
        grep -q "^build config: CC=.* MPI=[01] CUDA=[01] " "$log" && grep -qxF "$want" "$log" &&
        [ "$(rr_field "$rec" "d['settings']['method'], d['settings']['iters'], 'layers' in d['settings']")" = "('$e', 3, False)" ] &&
        [ "$(rr_field "$rec" "d['started_by']")" = "the command line" ] &&
        [ -n "$(rr_field "$rec" "d['build']['commit'] and d['build']['config'] and d['build']['mpi']")" ]; then
        rr_pass "$e: the log's build, build config and settings lines; the JSON's build and settings"
    else
        rr_fail "$e: provenance" "$(grep -E '^(build|settings)' "$log"); want '$want'; JSON settings $(rr_field "$rec" "d.get('settings')")"
    fi
    (cd "$RR_DIR" && timeout 300 "$RR_BIN" --rerun "$rec" --results again >rerun.out 2>rerun.err)
    rc=$?
    why=$(rr_reruns "$RR_DIR/first" "$RR_DIR/again")
    if [ "$rc" -eq 0 ] && [ -z "$why" ] && [ "$(rr_field "$(rr_json "$RR_DIR/again")" "d['config']['cpu_preset']")" = True ] &&
        grep -q "^  the same build, commit, device, libraries and fingerprint$" "$RR_DIR/rerun.out"; then
        rr_pass "$e: --rerun repeats the run bit for bit (every loss and grad norm), rerun_of names the record"
    else
        rr_fail "$e: --rerun" "exit $rc: $why $(head -c 400 "$RR_DIR/rerun.err")"
    fi
done

# ---- a sweep's run: -m all writes one JSON per engine, each with the command line its child
# was started with; an option the sweep handed to every engine is left out where it did nothing
rr_in sweep "$RR_BIN" -m all "${RR_TINY[@]}" --iters 2 --clip-speculate 1 --results all
for e in megatron-lm l2l; do
    rec=$(find "$RR_DIR/all" -maxdepth 1 -name "log_${e}_*.json" | head -n 1)
    if [ "$RR_RC" -ne 0 ] || [ -z "$rec" ]; then
        rr_fail "-m all's $e run to rerun" "exit $RR_RC: $(tail -n 3 "$RR_DIR/err")"
        continue
    fi
    (cd "$RR_DIR" && timeout 300 "$RR_BIN" --rerun "$rec" --results "again-$e" >"rerun-$e.out" 2>"rerun-$e.err")
    rc=$?
    # (megatron-lm has no --clip-speculate: left out, said so, and its rerun's fingerprint is
    # without it; l2l's is rerun, and its fingerprint is the record's)
    if [ "$e" = megatron-lm ]; then
        why=$(rr_reruns "$rec" "$RR_DIR/again-$e" any-fingerprint)
        grep -q "^  left out: --clip-speculate 1 (not megatron-lm's options" "$RR_DIR/rerun-$e.out" || why="$why no 'left out' line"
    else
        why=$(rr_reruns "$rec" "$RR_DIR/again-$e")
    fi
    if [ "$rc" -eq 0 ] && [ -z "$why" ] && [ "$(rr_field "$rec" "d['started_by']")" = "a sweep" ] &&
        [ "$(rr_field "$rec" "d['settings']['method']")" = "$e" ]; then
        rr_pass "-m all's $e run: --rerun repeats it bit for bit"
    else
        rr_fail "-m all's $e run: --rerun" "exit $rc: $why $(head -c 400 "$RR_DIR/rerun-$e.err")"
    fi
done

# ---- a --ranks 2 job reruns as a --ranks 2 job; one of plain mpirun under the same mpirun ----
rr_mpi=1
if declare -F needs_mpi >/dev/null; then
    needs_mpi "rerun of a --ranks 2 job" "$RR_BIN" || rr_mpi=0
elif ! "$RR_BIN" --version | grep -q "ranks: mpi" || ! command -v mpiexec >/dev/null; then
    rr_fail "rerun of a --ranks 2 job" "$RR_BIN has no MPI, or mpiexec is not on the PATH"
    rr_mpi=0
fi
if [ "$rr_mpi" -eq 1 ]; then
    rr_in ranks "$RR_BIN" -m gemini "${RR_TINY[@]}" --iters 4 --gemini-store "$RR_WORK" --ranks 2 --results first
    rec=$(rr_json "$RR_DIR/first")
    (cd "$RR_DIR" && timeout 300 "$RR_BIN" --rerun "$rec" --results again >rerun.out 2>rerun.err)
    rc=$?
    why=$(rr_reruns "$RR_DIR/first" "$RR_DIR/again")
    again=$(rr_json "$RR_DIR/again")
    if [ "$RR_RC" -eq 0 ] && [ "$rc" -eq 0 ] && [ -z "$why" ] && [ "$(rr_field "$again" "d['world']")" = 2 ] &&
        [ "$(rr_field "$rec" "d['settings']['ranks'], d['started_by']")" = "(2, '--ranks')" ] &&
        [ "$(rr_field "$again" "d['settings']['ranks'], 'gemini-job' in d['settings']")" = "(2, True)" ] &&
        grep -q -- "^aebench: rerunning: aebench .*--ranks 2" "$RR_DIR/rerun.out" &&
        ! grep -q -- "--gemini-job" "$RR_DIR/rerun.out"; then
        rr_pass "--ranks 2 gemini job: --rerun runs it as a --ranks 2 job (a job id of its own), bit for bit"
    else
        rr_fail "--ranks 2 job: --rerun" "exit $RR_RC then $rc: $why $(head -c 400 "$RR_DIR/rerun.err")"
    fi
    # (with a supervisor's notes directory and a rerun's record forged in the environment: a rank
    # learns both only from its command line, so the record names neither and nothing is noted)
    mkdir -p "$RR_WORK/forged-notes"
    chmod 0700 "$RR_WORK/forged-notes"
    AEBENCH_JOB_NOTES="$RR_WORK/forged-notes" AEBENCH_RERUN_OF="0123456789abcdef $RR_WORK/forged.json" \
        rr_in mpirun mpiexec -n 2 "$RR_BIN" "${RR_TINY[@]}" --iters 3 --results first
    rec=$(rr_json "$RR_DIR/first")
    if [ "$RR_RC" -eq 0 ] && [ "$(rr_field "$rec" "d['started_by'], 'rerun_of' in d")" = "('mpirun', False)" ] &&
        [ -z "$(ls -A "$RR_WORK/forged-notes")" ]; then
        rr_pass "mpirun -n 2 under a forged AEBENCH_JOB_NOTES and AEBENCH_RERUN_OF: started by mpirun, no rerun_of, no notes"
    else
        rr_fail "forged environment" "exit $RR_RC: $(rr_field "$rec" "d.get('started_by'), d.get('rerun_of')"); notes: $(ls -A "$RR_WORK/forged-notes")"
    fi
    (cd "$RR_DIR" && timeout 60 "$RR_BIN" --rerun "$rec" --results alone >alone.out 2>alone.err)
    rc=$?
    (cd "$RR_DIR" && timeout 300 mpiexec -n 2 "$RR_BIN" --rerun "$rec" --results again >rerun.out 2>rerun.err)
    rc2=$?
    why=$(rr_reruns "$RR_DIR/first" "$RR_DIR/again")
    if [ "$RR_RC" -eq 0 ] && [ "$(rr_field "$rec" "d['started_by']")" = mpirun ] && [ "$rc" -eq 2 ] &&
        [ "$(wc -l <"$RR_DIR/alone.err")" -eq 1 ] && grep -q "started by mpirun: rerun it the same way (mpirun -n 2 " "$RR_DIR/alone.err" &&
        [ ! -e "$RR_DIR/alone" ] && [ "$rc2" -eq 0 ] && [ -z "$why" ] &&
        [ "$(grep -c '^aebench: rerun of ' "$RR_DIR/rerun.out")" -eq 1 ]; then
        rr_pass "a job of mpirun -n 2: --rerun alone asks for the same mpirun (exit 2, nothing written); under it, bit for bit"
    else
        rr_fail "mpirun job: --rerun" "exit $RR_RC, alone $rc ($(head -c 300 "$RR_DIR/alone.err")), under mpirun $rc2: $why"
    fi
fi

# ---- a record made by another build, on another device: what differs is said first ----------
rr_in differ "$RR_BIN" "${RR_TINY[@]}" --iters 2 --results first
rec=$(rr_json "$RR_DIR/first")
python3 - "$rec" "$RR_DIR/edited.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["build"]["commit"] = "0123456789abcdef0123456789abcdef01234567"
d["build"]["config"] = d["build"]["config"].replace(" LDFLAGS=", " -DOTHER_BUILD LDFLAGS=")
d["build"]["mpi"] = "Some MPI 9.9"
d["device"] = "NVIDIA H200 (sm_90, 132 SMs)"
d["aebench_version"] = "0.0.1"
d["config"]["fingerprint"] = "0000000000000000"
json.dump(d, open(sys.argv[2], "w"))
PY
(cd "$RR_DIR" && timeout 300 "$RR_BIN" --rerun edited.json --results again >rerun.out 2>rerun.err)
rc=$?
missing=""
for line in "^  differs: aebench version: the record's 0.0.1 | here " \
    "^  differs: commit: the record's 0123456789abcdef0123456789abcdef01234567 | here " \
    "^  differs: build config: the record's has -DOTHER_BUILD | here (nothing else)$" \
    "^  differs: device: the record's NVIDIA H200 (sm_90, 132 SMs) | here cpu$" \
    "^  differs: MPI: the record's Some MPI 9.9 | here " \
    "^  differs: fingerprint: the record's 0000000000000000 | its settings here [0-9a-f]\{16\}: the defaults changed"; do
    grep -q "$line" "$RR_DIR/rerun.out" || missing="$missing [$line]"
done
if [ "$rc" -eq 0 ] && [ -z "$missing" ] && [ "$(grep -c '^  differs: ' "$RR_DIR/rerun.out")" -eq 6 ] &&
    [ -z "$(rr_same_steps "$rec" "$(rr_json "$RR_DIR/again")" 2>&1)" ]; then
    rr_pass "a record of another commit, build, MPI, device, version and fingerprint: each difference said, then rerun"
else
    rr_fail "differences" "exit $rc, missing:$missing; $(cat "$RR_DIR/rerun.out" | head -n 12)"
fi

# ---- what is not a run record, or options beside --rerun: refused, one line, exit 2, nothing
# written ----------------------------------------------------------------------------------
good=$(rr_json "$RR_WORK/differ/first")
mkdir -p "$RR_WORK/bad"
echo "not json" >"$RR_WORK/bad/text.json"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); del d["settings"]; json.dump(d, open(sys.argv[2], "w"))' \
    "$good" "$RR_WORK/bad/nosettings.json"
echo '{"status": "ok"}' >"$RR_WORK/bad/other.json"
ln -s "$good" "$RR_WORK/bad/link.json"
head -c 1100000 /dev/zero | tr '\0' ' ' >"$RR_WORK/bad/huge.json"
# rr_refused NAME PATTERN ARGS...: exit 2, one line on stderr matching PATTERN, no results/
rr_refused() {
    local name=$1 pattern=$2
    shift 2
    rr_in "refused.$PASSED.$FAILED" "$RR_BIN" "$@" --results results
    if [ "$RR_RC" -eq 2 ] && [ "$(wc -l <"$RR_DIR/err")" -eq 1 ] && grep -q -- "$pattern" "$RR_DIR/err" &&
        [ ! -e "$RR_DIR/results" ] && [ ! -s "$RR_DIR/out" ]; then
        rr_pass "$name"
    else
        rr_fail "$name" "exit $RR_RC, want 2 and one line matching '$pattern': $(head -c 300 "$RR_DIR/err")"
    fi
}
rr_refused "--rerun of a file that is not JSON" "not a JSON object" --rerun "$RR_WORK/bad/text.json"
rr_refused "--rerun of a record without settings" "the record holds no settings" --rerun "$RR_WORK/bad/nosettings.json"
rr_refused "--rerun of a JSON that is no run record" "not an aebench run record" --rerun "$RR_WORK/bad/other.json"
rr_refused "--rerun of a symbolic link" "a symbolic link (not followed" --rerun "$RR_WORK/bad/link.json"
rr_refused "--rerun of a directory" "not a regular file" --rerun "$RR_WORK/bad"
rr_refused "--rerun of a file too large for a record" "more than a run record has" --rerun "$RR_WORK/bad/huge.json"
rr_refused "--rerun of a missing file" "No such file" --rerun "$RR_WORK/bad/none.json"
rr_refused "--rerun with an option that changes the run" "-l cannot be given beside it" --rerun "$good" -l 3
rr_refused "--rerun with --seed" "--seed cannot be given beside it" --seed 3 --rerun "$good"

rm -rf "$RR_WORK"
if [ "$RR_ALONE" -eq 1 ]; then
    echo "$PASSED passed, $FAILED failed${FAILURES:+: ${FAILURES[*]}}"
    [ "$FAILED" -eq 0 ]
fi
