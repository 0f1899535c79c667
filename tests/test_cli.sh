# Command-line tests, sourced by tests/run.sh (which keeps PASSED, FAILED, FAILURES).
# Each check runs aebench in a fresh directory and asserts exit code, messages and files.

WORK=$(mktemp -d "${TMPDIR:-/tmp}/aebench-cli.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
BIN=$(realpath "$AEBENCH")
# A tiny model that trains in well under a second per iteration on the CPU backend.
TINY=(--device cpu -l 2 -h 64 --heads 4 --seq 32 -b 2 --vocab 512 --threads 2)

pass() { PASSED=$((PASSED + 1)); echo "ok   $1"; }
failc() { FAILED=$((FAILED + 1)); FAILURES+=("$1"); echo "FAIL $1: $2"; }

# bad_input NAME PATTERN ARGS...: exit 2, one line on stderr matching PATTERN, no results.
bad_input() {
    local name=$1 pattern=$2
    shift 2
    local dir="$WORK/bad.$PASSED.$FAILED"
    mkdir -p "$dir"
    (cd "$dir" && "$BIN" --results "$dir/results" "$@" >"$dir/out" 2>"$dir/err")
    local rc=$?
    local lines
    lines=$(wc -l <"$dir/err")
    if [ "$rc" -ne 2 ]; then
        failc "$name" "exit $rc, want 2 ($(head -c 300 "$dir/err"))"
    elif [ "$lines" -ne 1 ]; then
        failc "$name" "stderr has $lines lines, want 1: $(head -c 300 "$dir/err")"
    elif ! grep -q -- "$pattern" "$dir/err"; then
        failc "$name" "stderr '$(cat "$dir/err")' does not match '$pattern'"
    elif [ -e "$dir/results" ]; then
        failc "$name" "results/ was written"
    else
        pass "$name"
    fi
}

# ---- bad input -------------------------------------------------------------------------
bad_input "unknown method" "unknown method 'foo'" -m foo
bad_input "unknown option" "unknown option '--bogus'" --bogus
bad_input "unknown short option" "unknown option '-z'" -z 3
bad_input "missing value" "needs a value" -l
bad_input "stray argument" "unexpected argument 'extra'" -m megatron-lm extra
bad_input "hidden not divisible by heads" "hidden size 100 is not divisible by the number of heads 16" -h 100
bad_input "zero layers" "layers: 0 is out of range: an integer from 1 to 1048576" -l 0
bad_input "negative batch" "batch: -4 is out of range: an integer from 1 to 1048576" -b -4
bad_input "non-numeric hidden" "hidden: 'big' is not a positive integer" -h big
bad_input "non-numeric iters" "iters: '5x' is not a positive integer" --iters 5x
# (issue 29: a vocabulary whose padding wrapped a signed int, and numbers beyond an int, were
# accepted or called "not a positive integer")
bad_input "vocab whose padding would wrap" "vocab: 2147483521 is out of range: an integer from 2 to 2147483520" --dry-run --vocab 2147483521
bad_input "vocab beyond an int" "vocab: 4000000000 is out of range: an integer from 2 to 2147483520" --vocab 4000000000
# (issue 47: the range said "from 1", and 1 was refused with another message)
bad_input "vocab of one token" "vocab: 1 is out of range: an integer from 2 to 2147483520" --vocab 1
# (the fuzz campaign: a billion iterations' records do not fit in host memory; that is out of
# memory, exit 3, said before the log is made — it was exit 1)
(cd "$WORK" && mkdir -p iters-oom && cd iters-oom && "$BIN" "${TINY[@]}" --iters 1000000000 --results r >out 2>err)
rc=$?
if [ "$rc" -eq 3 ] && [ "$(wc -l <"$WORK/iters-oom/err")" -eq 1 ] &&
    grep -q 'out of host memory: 1000000000 iteration records (--iters) need' "$WORK/iters-oom/err" &&
    [ -z "$(ls -A "$WORK/iters-oom/r" 2>/dev/null)" ]; then
    pass "--iters 1000000000: out of host memory for its records (exit 3, one line), no log or JSON"
else
    failc "--iters 1000000000" "exit $rc: $(head -c 300 "$WORK/iters-oom/err")"
fi
bad_input "layers beyond 64 bits" "layers: 99999999999999999999 is out of range: an integer from 1 to 1048576" -l 99999999999999999999
bad_input "threads beyond any host" "threads: 100000 is out of range: an integer from 0 to 1024 (CPU threads; 0: all cores)" --threads 100000
bad_input "--profile with --predict" "--profile times the steps a run trains: not with --predict" --profile --predict
# --hosts FILE (mpiexec's hostfile for --ranks N): read and checked before anything starts
HF="$WORK/hostfiles"
mkdir -p "$HF"
printf 'localhost:2\n' >"$HF/ok"
printf 'localhost:0\n' >"$HF/zero"
printf 'localhost slots=x\n' >"$HF/slots"
printf 'localhost other\n' >"$HF/two"
printf '# nothing\n\n' >"$HF/empty"
printf 'node-that-is-not-here.example:4\nlocalhost:4\n' >"$HF/remote"
printf 'bad/name:2\n' >"$HF/name"
ln -sf "$HF/ok" "$HF/link"
bad_input "--hosts without --ranks" "--hosts .* goes with --ranks N" --hosts "$HF/ok" --dry-run
bad_input "--hosts missing" "--hosts $HF/none: No such file" --ranks 2 --hosts "$HF/none" --dry-run
bad_input "--hosts through a link" "is a symbolic link" --ranks 2 --hosts "$HF/link" --dry-run
bad_input "--hosts with 0 slots" "line 1: the slots after ':' are not a count" --ranks 2 --hosts "$HF/zero" --dry-run
bad_input "--hosts with slots=x" "line 1: slots= is not a count" --ranks 2 --hosts "$HF/slots" --dry-run
bad_input "--hosts with two hosts on a line" "line 1: more than one host on the line" --ranks 2 --hosts "$HF/two" --dry-run
bad_input "--hosts listing nothing" "lists no machine" --ranks 2 --hosts "$HF/empty" --dry-run
bad_input "--hosts with a bad name" "line 1: not a host name" --ranks 2 --hosts "$HF/name" --dry-run
# (issue 47: a name too long was "not a host name")
printf '%s:2\n' "$(head -c 300 /dev/zero | tr '\0' a)" >"$HF/long"
bad_input "--hosts with a 300-character name" "line 1: the host name is longer than 253 characters, the most a DNS name has" \
    --ranks 2 --hosts "$HF/long" --dry-run
bad_input "--hosts whose first machine is another" "its first machine, node-that-is-not-here.example, is where mpiexec starts rank 0" \
    --ranks 2 --hosts "$HF/remote" --dry-run
# the largest vocabulary: an exact parameter count (no wrapped number), the plan in 64 bits
vmax=$("$BIN" --dry-run --vocab 2147483520 2>&1 | sed -n 's/.*B parameters (\([0-9]*\)).*/\1/p' | head -n 1)
vwant=$(python3 -c 'V, C, T, L = 2147483520, 2048, 1024, 16; print(V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C)')
if [ -n "$vmax" ] && [ "$vmax" = "$vwant" ]; then
    pass "the largest --vocab: --dry-run counts $vmax parameters, exactly (64-bit arithmetic)"
else
    failc "the largest --vocab" "dry run says '$vmax' parameters, want $vwant: $("$BIN" --dry-run --vocab 2147483520 2>&1 | head -c 300)"
fi
bad_input "bad window" "window: 'wide' is neither" -w wide
bad_input "window above layers" "window 8 is larger than the number of layers 2" -m stronghold "${TINY[@]}" -w 8
# (issue 29: an option the chosen engine does not use is refused, not a silent no-op or a label)
bad_input "window for an engine without one" "-w/--window 1: megatron-lm has no window of layers" -m megatron-lm "${TINY[@]}" -w 1
bad_input "clip-speculate for megatron-lm" "--clip-speculate: megatron-lm updates no layer before" -m megatron-lm "${TINY[@]}" --clip-speculate 2
bad_input "a gemini option for zero-offload" "--gemini-mode: zero-offload takes no checkpoints" -m zero-offload "${TINY[@]}" --gemini-mode naive
bad_input "fail-at beyond the run" "--fail-at 60: the run has only 50 iterations" -m l2l "${TINY[@]}" --fail-at 60 --iters 50
bad_input "bad placement" "placement: 'middle' is not bottom, spread or auto" --placement middle
bad_input "placement on an engine without a window" "l2l has no resident layers to place" "${TINY[@]}" -m l2l --placement spread
bad_input "bad device" "device: 'tpu' is not cpu or cuda" --device tpu
bad_input "bad dtype" "dtype: 'fp8' is not fp32 or bf16" --dtype fp8
bad_input "bf16 on an engine without it" "gemini does not implement --dtype bf16" "${TINY[@]}" -m gemini --dtype bf16
bad_input "bad memory limit" "gpu-mem-limit: 'lots' is not a size" --gpu-mem-limit lots
bad_input "zero memory limit" "cpu-mem-limit: '0' is not a size" --cpu-mem-limit 0
bad_input "bad offload target" "offload: 'tape' is not cpu or nvme" --offload tape
bad_input "nvme-dir without nvme" "--nvme-dir is only used with --offload nvme" --nvme-dir "$WORK"
bad_input "dpu on an engine without it" "megatron-lm has no delayed parameter update" "${TINY[@]}" -m megatron-lm --dpu
bad_input "nvme on an engine without a disk tier" "megatron-lm keeps nothing on disk" "${TINY[@]}" -m megatron-lm --offload nvme
# (issue 48: an engine's own option, declared in its file, refused by another engine naming the
# engine whose option it is, from the option tables)
bad_input "gemini's own option for megatron-lm" "^aebench: --gemini-every: megatron-lm takes no checkpoints (gemini's option)$" \
    "${TINY[@]}" -m megatron-lm --gemini-every 2
bad_input "megatron-lm's own option for l2l" "^aebench: l2l shards as its own system does (--zero-stage is megatron-lm's)$" \
    "${TINY[@]}" -m l2l --zero-stage 2
bad_input "a shared option for an engine that does not take it" \
    "^aebench: --clip-speculate: zero-offload updates no layer before the step's norm is known (l2l's, zero-infinity's and stronghold's option)$" \
    "${TINY[@]}" -m zero-offload --clip-speculate auto
# --help: each engine option after the engines that take it (the registry's answer)
if "$BIN" --help | grep -qE '^      --gemini-every K\|auto +gemini: an in-memory checkpoint' &&
    "$BIN" --help | grep -qE '^      --clip-speculate N\|auto +l2l, zero-infinity and stronghold: with clipping' &&
    "$BIN" --help | grep -qE '^  -w, --window W\|auto +stronghold: ' &&
    "$BIN" --help | grep -qE '^      --dpu +zero-offload: delayed parameter update'; then
    pass "--help: each engine option after the engines that take it"
else
    failc "--help's engine options" "$("$BIN" --help | grep -E -- '--(gemini-every|clip-speculate|window|dpu) ')"
fi
# The results' fingerprints (config.fingerprint) as the one option table gave them before the
# engines had tables of their own (recorded from that build): --resume finds results made then
fpdir="$WORK/fingerprints"
mkdir -p "$fpdir"
fp_of() { python3 -c 'import json,sys,glob; print(json.load(open(glob.glob(sys.argv[1] + "/*.json")[0]))["config"]["fingerprint"])' "$1" 2>/dev/null; }
(cd "$fpdir" && "$BIN" -m stronghold "${TINY[@]}" --iters 2 -w 1 --placement spread --clip-speculate 1 --results r1 >/dev/null 2>&1)
(cd "$fpdir" && "$BIN" -m gemini "${TINY[@]}" --iters 3 --gemini-mode naive --gemini-every 2 --gemini-ckpt-from 2 \
    --gemini-store "$fpdir" --results r2 >/dev/null 2>&1)
(cd "$fpdir" && "$BIN" -m zero-offload "${TINY[@]}" --iters 2 --dpu --results r3 >/dev/null 2>&1)
fps="$(fp_of "$fpdir/r1") $(fp_of "$fpdir/r2") $(fp_of "$fpdir/r3")"
if [ "$fps" = "da0d796ae46d4a9f d6c06e1f01f67417 5112d1503afc18f7" ]; then
    pass "the fingerprints of stronghold, gemini and zero-offload runs with their own options are those made before"
else
    failc "fingerprints as before" "got $fps, want da0d796ae46d4a9f d6c06e1f01f67417 5112d1503afc18f7"
fi
printf '{"offload": 3}' >"$WORK/offload.json"
bad_input "config offload wrong type" "offload: wrong type (want a string, got a number)" --config "$WORK/offload.json"
bad_input "unreadable config" "cannot read config $WORK/none.json" --config "$WORK/none.json"
printf '{"layers": 4,' >"$WORK/truncated.json"
bad_input "malformed config" "config $WORK/truncated.json: malformed JSON" --config "$WORK/truncated.json"
printf '{"layers": 2, "hidden": 64, "layers": 3}' >"$WORK/dup.json"
bad_input "config key given twice" "config $WORK/dup.json: key \"layers\" given twice" --config "$WORK/dup.json"
printf '{"defaults": {"heads": 4}, "runs": [{"method": "l2l", "seq": 32, "seq": 16}]}' >"$WORK/dup2.json"
bad_input "run-list key given twice" "config $WORK/dup2.json: key \"seq\" given twice" --config "$WORK/dup2.json"
bad_input "a directory as config" "config $WORK: not a regular file (a JSON file was expected)" --config "$WORK"
# (issue 29: what a run writes is checked before it trains, and what it reads is a regular file)
mkfifo "$WORK/fifo"
bad_input "save-params to a FIFO" "--save-params $WORK/fifo: not a regular file" "${TINY[@]}" --iters 1 --save-params "$WORK/fifo"
bad_input "save-params to a directory" "--save-params $WORK: not a regular file" "${TINY[@]}" --iters 1 --save-params "$WORK"
bad_input "save-params in a missing directory" "--save-params $WORK/none/p.bin: cannot write there: No such file or directory" "${TINY[@]}" --iters 1 --save-params "$WORK/none/p.bin"
bad_input "data from a FIFO (it used to hang)" "data file $WORK/fifo: not a regular file" "${TINY[@]}" --iters 1 --data "$WORK/fifo"
bad_input "nvme-dir where no file can be made" "--nvme-dir /proc: no file can be made there" -m zero-infinity --offload nvme --nvme-dir /proc "${TINY[@]}" --iters 1
touch "$WORK/plainfile"
bad_input "nvme-dir on a file" "--nvme-dir $WORK/plainfile: not a directory" -m zero-infinity --offload nvme --nvme-dir "$WORK/plainfile" "${TINY[@]}" --iters 1
printf '[1, 2]' >"$WORK/array.json"
bad_input "config not an object" "top level must be a JSON object" --config "$WORK/array.json"
printf '{"layerz": 4}' >"$WORK/unknown.json"
bad_input "config unknown key" "config $WORK/unknown.json: layerz: unknown key" --config "$WORK/unknown.json"
printf '{"layers": "4"}' >"$WORK/type.json"
bad_input "config number as a string" "layers: wrong type (want an integer, got a string)" --config "$WORK/type.json"
printf '{"layers": 0}' >"$WORK/zero.json"
bad_input "config non-positive value" "config $WORK/zero.json: layers: 0 is out of range: an integer from 1 to 1048576" --config "$WORK/zero.json"
printf '{"layers": [4]}' >"$WORK/type2.json"
bad_input "config wrong type" "layers: wrong type (want an integer, got an array)" --config "$WORK/type2.json"
printf '{"method": "zero-three"}' >"$WORK/method.json"
bad_input "config unknown method" "unknown method 'zero-three'" --config "$WORK/method.json"
printf '{"no-ckpt": 1}' >"$WORK/flag.json"
bad_input "config flag not boolean" "no-ckpt: wrong type (want true or false, got a number)" --config "$WORK/flag.json"
printf '{"hidden": 64, "heads": 5}' >"$WORK/heads.json"
bad_input "config hidden vs heads" "hidden size 64 is not divisible by the number of heads 5" --config "$WORK/heads.json"
# 100 uint16 tokens, all 1 but for 0x0300 = 768 (>= vocab 512) at position 70
LC_ALL=C awk 'BEGIN { for (i = 0; i < 100; i++) printf (i == 70 ? "%c%c" : "%c%c"), (i == 70 ? 0 : 1), (i == 70 ? 3 : 0) }' >"$WORK/badtok.bin"
bad_input "data token out of range" "token 768 at position 70 is not below the vocabulary size 512" "${TINY[@]}" --data "$WORK/badtok.bin"
printf '\x01\x00\x02\x00' >"$WORK/short.bin"
bad_input "data shorter than a batch" "holds 2 tokens, fewer than one batch needs (65" "${TINY[@]}" --data "$WORK/short.bin"
bad_input "missing data file" "cannot open data file" "${TINY[@]}" --data "$WORK/nothing.bin"
if ! nm "$BIN" 2>/dev/null | grep -q cublas; then
    bad_input "cuda without a CUDA build" "device cuda is not usable" --device cuda
fi

# ---- options taken without effect, refused (issue 47), on the command line and in configs ---
bad_input "-m all -w 1 (a window only stronghold has)" "-w/--window 1 with -m all: only stronghold has a window of layers" \
    -m all "${TINY[@]}" -w 1
printf '{"method": "all", "window": 1}' >"$WORK/allw.json"
bad_input "a config's method all with a window" "-w/--window 1 with -m all" --config "$WORK/allw.json" "${TINY[@]}"
bad_input "--fail-kind without --fail-at" "--fail-kind goes with --fail-at I" "${TINY[@]}" --fail-kind stop
bad_input "--fail-phase without --fail-at" "--fail-phase goes with --fail-at I" "${TINY[@]}" --fail-phase backward
bad_input "--fail-rank without --fail-at" "--fail-rank goes with --fail-at I" "${TINY[@]}" --fail-rank 1
# (--relaunch-of, the --ranks supervisor's account of a relaunched job: each field malformed in
# turn, the first one too, which the fuzz campaign found read through a null pointer)
for acct in "x 2 3 n" "-1 2 3 n" " 1 2 3 n" "1 x 3 n" "1 2 -3 n" "1 2 3" "1 2 3 a
b"; do
    bad_input "--relaunch-of '${acct//$'\n'/\\n}'" "is not a relaunch's account" "${TINY[@]}" --relaunch-of "$acct"
done
# (--job-notes, the --ranks supervisor's private directory for its ranks: not absolute, or there
# but not a private directory of ours: a neighbour's open one, a link to ours, a file)
mkdir -p "$WORK/notes-open" "$WORK/notes-ours"
chmod 0777 "$WORK/notes-open"
chmod 0700 "$WORK/notes-ours"
ln -sfn "$WORK/notes-ours" "$WORK/notes-link"
: >"$WORK/notes-file"
bad_input "--job-notes relative" "is not an absolute path" "${TINY[@]}" --job-notes notes-ours
for d in notes-open notes-link notes-file; do
    bad_input "--job-notes $d" "--job-notes $WORK/$d: .*not a \(private \)\?directory of" "${TINY[@]}" --job-notes "$WORK/$d"
done
# (two ranks: one given a neighbour's open directory refuses it and writes nothing there; given
# a private one of ours, each notes that it started, and the run's record says --ranks)
if command -v mpiexec >/dev/null; then
    mkdir -p "$WORK/notes-run"
    (cd "$WORK/notes-run" && timeout 300 mpiexec -n 2 "$BIN" "${TINY[@]}" --iters 1 --job-notes "$WORK/notes-open" \
        --results r >out 2>err)
    rc_open=$?
    (cd "$WORK/notes-run" && timeout 300 mpiexec -n 2 "$BIN" "${TINY[@]}" --iters 1 --job-notes "$WORK/notes-ours" \
        --results r >out2 2>err2)
    rc_ours=$?
    by=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["started_by"])' "$WORK"/notes-run/r/log_*.json 2>/dev/null)
    if [ "$rc_open" -eq 2 ] && [ -z "$(find "$WORK/notes-open" -mindepth 1)" ] && [ "$rc_ours" -eq 0 ] &&
        [ -e "$WORK/notes-ours/started" ] && [ "$by" = "--ranks" ]; then
        pass "--job-notes on 2 ranks: a neighbour's open directory refused, nothing written there; ours noted, started_by --ranks"
    else
        failc "--job-notes on 2 ranks" "open: exit $rc_open, left $(find "$WORK/notes-open" -mindepth 1); ours: exit $rc_ours, $(ls "$WORK/notes-ours"), started_by '$by'; $(head -c 300 "$WORK/notes-run/err2")"
    fi
else
    failc "--job-notes on 2 ranks" "no mpiexec on the PATH (make deps installs MPICH)"
fi
# (--report-fd, a sweep's pipe to the run it starts: stdio, or nothing open; and a report pipe
# forged in the environment makes no run a sweep's child, which would take an option its
# engine does not use)
bad_input "--report-fd 1" "out of range" "${TINY[@]}" --report-fd 1
bad_input "--report-fd 4000 (not open)" "--report-fd 4000: not a pipe open for writing" "${TINY[@]}" --report-fd 4000
# (a pipe's read end, which the run inherits: not one to write to)
exec {cli_pipe_r}< <(true)
bad_input "--report-fd on a pipe's read end" "not a pipe open for writing" "${TINY[@]}" --report-fd "$cli_pipe_r"
exec {cli_pipe_r}<&-
AEBENCH_REPORT_FD=1 bad_input "-w 2 for megatron-lm under a forged AEBENCH_REPORT_FD" "window" -m megatron-lm "${TINY[@]}" -w 2
# (--rerun-of, the record --rerun runs again: 16 hex digits, one space, an absolute path)
for src in "0123456789abcdef" "0123456789abcdef rel.json" "0123456789abcde /a.json" "0123456789ABCDEF /a.json" \
    "0123456789abcdef  /a.json" "0123456789abcdef /a
b"; do
    bad_input "--rerun-of '${src//$'\n'/\\n}'" "is not a record" "${TINY[@]}" --rerun-of "$src"
done
printf '{"fail-kind": "hardware"}' >"$WORK/failkind.json"
bad_input "a config's fail-kind without fail-at" "--fail-kind goes with --fail-at I" --config "$WORK/failkind.json" "${TINY[@]}"
bad_input "--machine missing on a training run" "machine file $WORK/none.json: No such file or directory" \
    "${TINY[@]}" --iters 1 --machine "$WORK/none.json"
bad_input "-m all --machine missing" "machine file $WORK/none.json: No such file or directory" \
    -m all "${TINY[@]}" --iters 1 --machine "$WORK/none.json"
bad_input "--gemini-every beyond --iters" "--gemini-every 60: the run has only 50 iterations (--iters)" \
    -m gemini "${TINY[@]}" --iters 50 --gemini-every 60
# (--find-max's probes train 2 iterations: they are not given the run's iteration options, which
# fit its --iters; they were exempted by an environment variable before)
mkdir -p "$WORK/fm-every/shm"
(cd "$WORK/fm-every" && timeout 300 "$BIN" --find-max -m gemini --device cpu -h 32 --heads 2 --seq 8 --vocab 64 -b 1 \
    --threads 1 --iters 20 --gemini-every 10 --gemini-store shm --gpu-mem-limit 16M --cpu-mem-limit 64M \
    --results r >out 2>err)
rc=$?
if [ "$rc" -eq 0 ] && grep -q "find-max: largest l[0-9]" "$WORK/fm-every/out"; then
    pass "--find-max with --gemini-every beyond its probes' 2 iterations: the probes train, the largest found"
else
    failc "--find-max with --gemini-every 10" "exit $rc: $(tail -n 2 "$WORK/fm-every/out") $(head -c 300 "$WORK/fm-every/err")"
fi
bad_input "--gemini-ckpt-from beyond --iters" "--gemini-ckpt-from 6: the run has only 5 iterations (--iters)" \
    -m gemini "${TINY[@]}" --iters 5 --gemini-ckpt-from 6
printf '{"runs": [{"method": "gemini", "iters": 5, "gemini-every": "9"}]}' >"$WORK/every.json"
bad_input "a run list's gemini-every beyond its iters" "runs\[0\]: --gemini-every 9: the run has only 5 iterations" \
    --config "$WORK/every.json" "${TINY[@]}"
bad_input "--ckpt-every without --ckpt-dir" "--ckpt-every 3 goes with --ckpt-dir DIR" -m gemini "${TINY[@]}" --ckpt-every 3
bad_input "--recompute full --no-ckpt" "--recompute full and --no-ckpt contradict each other" "${TINY[@]}" --recompute full --no-ckpt
bad_input "--no-ckpt --recompute selective" "--recompute selective and --no-ckpt contradict each other" \
    "${TINY[@]}" --no-ckpt --recompute selective
printf '{"recompute": "full", "no-ckpt": true}' >"$WORK/recompute.json"
bad_input "a config's recompute full and no-ckpt" "config $WORK/recompute.json: --recompute full and --no-ckpt contradict" \
    --config "$WORK/recompute.json" "${TINY[@]}"
# (a config's value, overridden on the command line, is no clash)
printf '{"recompute": "full"}' >"$WORK/recompute2.json"
out=$(cd "$WORK" && "$BIN" --config "$WORK/recompute2.json" "${TINY[@]}" --no-ckpt --dry-run 2>&1)
if [ $? -eq 0 ] && grep -q "recompute none" <<<"$out"; then
    pass "a config's --recompute full overridden by --no-ckpt on the command line: recompute none"
else
    failc "config recompute overridden by --no-ckpt" "$(tail -c 300 <<<"$out")"
fi
# (issue 47: a limit under a second was taken, and the messages then said "0 s", which is never)
bad_input "--hang-timeout below a second" "--hang-timeout: 0.5 s is below 1 s, the least the watchdogs keep" \
    "${TINY[@]}" --hang-timeout 0.5
# (issue 47: a 200 MB config was read whole, 562 MB of memory; a sparse file costs nothing here)
truncate -s 200M "$WORK/huge.json"
bad_input "a 200 MB config" "config $WORK/huge.json: 209715200 bytes, above the limit of 1048576 (1 MiB) for a config" \
    --config "$WORK/huge.json"
rm -f "$WORK/huge.json"

# exact_ending NAME RC PATTERN DIR CMD...: CMD run in DIR exits RC with one line on stderr
# matching PATTERN (stdout and stderr kept in DIR.out, DIR.err)
exact_ending() {
    local name=$1 want=$2 pattern=$3 dir=$4
    shift 4
    (cd "$dir" && "$@" >"$dir.out" 2>"$dir.err")
    local rc=$?
    if [ "$rc" -ne "$want" ]; then
        failc "$name" "exit $rc, want $want ($(head -c 300 "$dir.err"))"
    elif [ "$(wc -l <"$dir.err")" -ne 1 ]; then
        failc "$name" "stderr has $(wc -l <"$dir.err") lines, want 1: $(head -c 400 "$dir.err")"
    elif ! grep -q -- "$pattern" "$dir.err"; then
        failc "$name" "stderr '$(cat "$dir.err")' does not match '$pattern'"
    else
        return 0
    fi
    return 1
}

# ---- a results directory that cannot be written: bad input to -m all as to one run (issue 47)
RO="$WORK/ro"
mkdir -p "$RO/mnt" "$RO/one" "$RO/all"
if ! mount -t tmpfs -o ro,size=1M tmpfs "$RO/mnt" 2>"$RO/mount.err"; then
    failc "a read-only results directory" "cannot mount a read-only tmpfs: $(cat "$RO/mount.err")"
else
    if exact_ending "a read-only results directory (one run)" 2 "no file can be made there: Read-only file system" \
        "$RO/one" "$BIN" "${TINY[@]}" --iters 1 --results "$RO/mnt" &&
        exact_ending "a read-only results directory (-m all)" 2 "no file can be made there: Read-only file system" \
            "$RO/all" "$BIN" -m all "${TINY[@]}" --iters 1 --results "$RO/mnt"; then
        pass "a read-only results directory: exit 2 and one line, for one run and for -m all alike"
    fi
    umount "$RO/mnt"
fi

# ---- --threads beyond this user's process limit (ulimit -u): libgomp aborted and left the log
# without its JSON (issue 47); now refused before anything is written.  Not as root: root is not
# held to RLIMIT_NPROC.  Nor as nobody, but as a user id of this suite's own, which owns no other
# process: the limit counts every process and thread of the user on the machine, and a second
# suite beside this one (or anything else of nobody's) would otherwise use it up.  The run
# that must fit gets a second id: the threads of the one refused just before may not all be
# reaped yet, and they count against its id for a moment on a loaded machine.
TH_UID=$((2000000000 + 2 * $$))
# (a directory of its own that nobody can reach: $WORK is its creator's alone)
TH=$(mktemp -d "${TMPDIR:-/tmp}/aebench-threads.XXXXXX")
mkdir -p "$TH/big" "$TH/small"
chmod 755 "$TH"
chmod 777 "$TH/big" "$TH/small"
if ! setpriv --reuid=$TH_UID --regid=$TH_UID --clear-groups true 2>"$TH/setpriv.err"; then
    failc "--threads under ulimit -u" "cannot run as user $TH_UID: $(cat "$TH/setpriv.err")"
elif exact_ending "--threads 1024 under ulimit -u 80" 2 "--threads 1024: only [0-9]* more threads can start under this user's process limit (ulimit -u 80)" \
    "$TH/big" setpriv --reuid=$TH_UID --regid=$TH_UID --clear-groups bash -c 'ulimit -u 80 && exec "$@"' - \
    "$BIN" "${TINY[@]}" --threads 1024 --iters 2 --results "$TH/big/res"; then
    if [ -e "$TH/big/res" ]; then
        failc "--threads 1024 under ulimit -u 80" "results written: $(ls "$TH/big/res")"
    elif ! (cd "$TH/small" && setpriv --reuid=$((TH_UID + 1)) --regid=$((TH_UID + 1)) --clear-groups bash -c 'ulimit -u 80 && exec "$@"' - \
        "$BIN" "${TINY[@]}" --threads 2 --iters 2 --results "$TH/small/res" >"$TH/small.out" 2>&1); then
        failc "--threads 2 under ulimit -u 80" "$(tail -c 300 "$TH/small.out")"
    else
        pass "--threads 1024 under ulimit -u 80 (as a user of its own): exit 2, one line naming --threads and the limit, nothing written; --threads 2 under it runs"
    fi
fi
rm -rf "$TH"

# ---- dry run: instant, exact, writes nothing -------------------------------------------
out=$(cd "$WORK" && timeout 10 "$BIN" -m megatron-lm -l 100 -h 2048 --dry-run 2>&1)
if [ $? -eq 0 ] && grep -q "model parallel rank (0, 0): 5140951040$" <<<"$out" &&
    grep -q "5.141 B parameters" <<<"$out" && [ ! -e "$WORK/results" ]; then
    pass "dry run l100 h2048"
else
    failc "dry run l100 h2048" "$out"
fi
out=$(cd "$WORK" && "$BIN" -m baseline -l 32 -h 2048 --dry-run 2>&1)
# 16 P for params, grads, m, v = 27,465,416,704 bytes; the plan adds activations on top.
gpu=$(sed -n 's/.*plan: GPU .* (\([0-9]*\) bytes) | host.*/\1/p' <<<"$out")
if grep -q ": 1716588544$" <<<"$out" && [ -n "$gpu" ] && [ "$gpu" -gt 27465416704 ] &&
    [ "$gpu" -lt 40000000000 ]; then
    pass "dry run l32 h2048 (alias baseline), plan above 16 P"
else
    failc "dry run l32 h2048" "$out"
fi

# ---- a real run: log and JSON ----------------------------------------------------------
RUN="$WORK/run"
mkdir -p "$RUN"
(cd "$RUN" && "$BIN" -m megatron-lm "${TINY[@]}" --iters 20 --log-interval 10 >"$RUN/out" 2>"$RUN/err")
rc=$?
log=$(ls "$RUN"/results/log_megatron-lm_l-2_h-64_bs-2_ws-auto_*.txt 2>/dev/null | head -n 1)
json=${log%.txt}.json
if [ $rc -eq 0 ] && [ -f "$log" ] && [ -f "$json" ] && grep -q '"status":[[:space:]]*"ok"' "$json" &&
    [[ $(basename "$log") =~ ^log_megatron-lm_l-2_h-64_bs-2_ws-auto_[0-9]{4}-[0-9]{2}-[0-9]{2}\.[0-9]+\.txt$ ]]; then
    pass "run writes log and JSON named as the artifact's"
else
    failc "run writes log and JSON" "exit $rc; $(cat "$RUN/err"); files: $(ls "$RUN"/results 2>&1)"
fi
n_iter=$(grep -c '"iteration":' "$json" 2>/dev/null)
n_lines=$(grep -c '^ iteration ' "$log" 2>/dev/null)
if [ "$n_iter" = 20 ] && [ "$n_lines" = 2 ] && grep -q '^time (ms) | e2e-time: ' "$log" &&
    [ "$(grep -c '^\[Rank 0\] (after 10 iterations) memory (MB) | allocated: ' "$log")" = 1 ]; then
    pass "log has the artifact's lines at each interval, JSON every iteration"
else
    failc "log lines" "json iterations $n_iter, log iteration lines $n_lines"
fi

# where the set-up went (issue 14's phases): a line in the log, an object in the JSON
if grep -q '^setup: pinned host .* in [0-9.]* s | GPU .* and host .* allocated in [0-9.]* s | parameters initialised in [0-9.]* s | the rest [0-9.]* s | total [0-9.]* s$' "$log" &&
    python3 -c 'import json, sys; s = json.load(open(sys.argv[1]))["setup"]
parts = s["pinned_host_ms"] + s["allocation_ms"] + s["init_ms"] + s["rest_ms"]
sys.exit(not (s["total_ms"] > 0 and s["init_ms"] > 0 and s["host_bytes"] > 0 and abs(parts - s["total_ms"]) < 1e-6 * s["total_ms"] + 1e-3))' "$json"; then
    pass "setup phases: log line and JSON (parameters timed, the phases add up to the total)"
else
    failc "setup phases" "$(grep '^setup' "$log")"
fi

# --profile: every op of every step timed through a wrapping backend (kernels/profile.h): the
# same losses bit for bit as without it; the op counts and model FLOPs per step as the
# schedule has them (attention: one forward per layer, a second with checkpointing's recompute,
# one backward; 4 B T^2 C and 8 B T^2 C FLOPs), copies counted in bytes (stronghold's
# streamed layer), each stream's ops and gaps (megatron-lm: one stream; stronghold: its copy
# streams too), the table on stdout and in the log; no timing asserted
P="$WORK/profile"
mkdir -p "$P"
prc=""
for v in "megatron-lm" "megatron-lm --no-ckpt" "stronghold -w 1"; do
    read -r -a va <<<"$v"
    tag=$(tr -c 'a-z0-9' '_' <<<"$v")
    (cd "$P" && "$BIN" -m "${va[@]}" "${TINY[@]}" -l 3 --iters 4 --profile --results "p_$tag" >"p_$tag.out" 2>&1)
    prc="$prc$?"
    (cd "$P" && "$BIN" -m "${va[@]}" "${TINY[@]}" -l 3 --iters 4 --results "n_$tag" >"n_$tag.out" 2>&1)
    prc="$prc$?"
done
check=$(python3 - "$P" <<'EOF'
import glob, json, sys
bad = []
# (no engine recomputes its last layer, whose forward's activations are still there at its
# backward; megatron-lm takes its gradient norms on a second stream, the gradients'; stronghold
# runs its copies on streams of their own)
for tag, ckpt, streamed in (("megatron_lm_", True, False), ("megatron_lm___no_ckpt_", False, False), ("stronghold__w_1_", True, True)):
    p = json.load(open(glob.glob(f"{sys.argv[1]}/p_{tag}/*.json")[0]))
    n = json.load(open(glob.glob(f"{sys.argv[1]}/n_{tag}/*.json")[0]))
    if [i["loss"] for i in p["iterations"]] != [i["loss"] for i in n["iterations"]]: bad.append(f"{tag}: losses differ")
    if "profile" in n: bad.append(f"{tag}: a profile without --profile")
    c, pr = p["config"], p.get("profile", {})
    L, B, T, C = c["layers"], c["batch"], c["seq"], c["hidden"]
    ops = {o["op"]: o for o in pr.get("ops", [])}
    if pr.get("steps") != 3 or pr.get("untimed_ops") != 0: bad.append(f"{tag}: steps {pr.get('steps')}, untimed {pr.get('untimed_ops')}")
    af, ab = ops.get("attention_forward"), ops.get("attention_backward")
    want_f = 2 * L - 1 if ckpt else L
    if not af or not ab or af["calls_per_step"] != want_f or ab["calls_per_step"] != L:
        bad.append(f"{tag}: attention calls {af and af['calls_per_step']} / {ab and ab['calls_per_step']}, want {want_f} / {L}")
    elif af["flops_per_step"] != want_f * 4 * B * T * T * C or ab["flops_per_step"] != L * 8 * B * T * T * C:
        bad.append(f"{tag}: attention FLOPs")
    if any(o["ms_per_step"] < 0 for o in ops.values()): bad.append(f"{tag}: a negative time")
    if streamed and not (ops.get("copy_h2d", {}).get("bytes_per_step", 0) > 0): bad.append(f"{tag}: no copies in")
    # each stream's ops add up to every op counted; a stream's ops never overlap (in order):
    # its busy time fits its span, the rest being its gaps
    st = pr.get("streams", [])
    if not st or abs(sum(x["ops_per_step"] for x in st) - sum(o["calls_per_step"] for o in ops.values())) > 1e-9:
        bad.append(f"{tag}: streams' ops {[x['ops_per_step'] for x in st]}")
    if any(x["gaps_ms_per_step"] < -0.01 for x in st): bad.append(f"{tag}: a stream busier than its span")
    if (len(st) > 2) != streamed or len(st) < 2: bad.append(f"{tag}: {len(st)} streams")
print("ok" if not bad else "; ".join(bad))
EOF
)
if [ "$prc" = "000000" ] && [ "$check" = ok ] && grep -qE '^    attention_forward +5\.0 ' "$P/p_megatron_lm_.out" &&
    grep -q "^profile op | attention_backward | calls/step: 3.0 |" "$P"/p_megatron_lm_/log_*.txt; then
    pass "--profile: the same losses as without it; each op family's calls and model FLOPs per step as the schedule has them (recompute counted), copies in bytes; the table on stdout, in the log and JSON"
else
    failc "--profile" "exits $prc: $check $(grep -m2 -E 'profile|rror' "$P/p_megatron_lm_.out")"
fi

# bench/step_floor.py on that profile: each GEMM at a probe table's best time on the run's shapes
# (here a made-up table for TINY's shapes: qkv 1 ms, proj 2, fc 3, fcproj 4 forward, x10 backward
# dinp, x100 dW, the logits 0.5 each way): with checkpointing L x (2 x 10 + 110 x 10) + 1.5 ms;
# a table of other shapes is refused
fl="$WORK/floor"
mkdir -p "$fl"
{
    echo "| math | product | m n k | heuristic #0 ms | best ms (rank) | gain |"
    C=64 N=64 V=512
    for d in fwd dinp dw; do
        f=1; [ $d = dinp ] && f=10; [ $d = dw ] && f=100
        echo "| tf32 | $d qkv | $((3 * C)) $N $C | 9 | $((1 * f)) (#0 of 1) | 0% |"
        echo "| tf32 | $d proj | $C $N $C | 9 | $((2 * f)) (#0 of 1) | 0% |"
        echo "| tf32 | $d fc | $((4 * C)) $N $C | 9 | $((3 * f)) (#0 of 1) | 0% |"
        echo "| tf32 | $d fcproj | $C $N $((4 * C)) | 9 | $((4 * f)) (#0 of 1) | 0% |"
        echo "| tf32 | $d logits x4 | $V $N $C | 9 | 0.5 (#0 of 1) | 0% |"
    done
} >"$fl/probe.txt"
sed 's/| 192 64 64 |/| 192 64 128 |/' "$fl/probe.txt" >"$fl/other.txt"
floor=$(python3 bench/step_floor.py "$P"/p_megatron_lm_/log_*.json "$fl/probe.txt" 2>&1 | grep -m1 "^| layer and head GEMMs")
python3 bench/step_floor.py "$P"/p_megatron_lm_/log_*.json "$fl/other.txt" >"$fl/other.out" 2>&1
orc=$?
if [[ "$floor" == "| layer and head GEMMs | "*" | $(python3 -c 'print(f"{3 * (2 * 10 + 110 * 10) + 1.5:.1f}")') | "* ]] && [ "$orc" -ne 0 ] &&
    grep -q "probed other shapes than the run's: fwd qkv (192, 64, 128)" "$fl/other.out"; then
    pass "bench/step_floor.py: each GEMM at the probe's best time on the run's shapes (forward twice with checkpointing); a probe of other shapes refused"
else
    failc "bench/step_floor.py" "'$floor'; other shapes: exit $orc $(cat "$fl/other.out")"
fi
# AdamW's floor: bytes over --hbm-gbs, never above AdamW's measured time (a rate of 1 GB/s
# would put it far above)
adam=$(python3 bench/step_floor.py "$P"/p_megatron_lm_/log_*.json "$fl/probe.txt" --hbm-gbs 1 2>&1 | grep -m1 "^| adamw ")
if [[ "$adam" =~ ^\|\ adamw\ \|\ ([0-9.]+)\ \|\ ([0-9.]+)\ \|.*at\ the\ given\ 1\ GB/s ]] &&
    [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ]; then
    pass "bench/step_floor.py --hbm-gbs: AdamW's floor at the given rate, never above its measured time"
else
    failc "bench/step_floor.py --hbm-gbs" "'$adam'"
fi

# bench/dp_floor.py on the committed two-H200 runs: a floor for each of the 8 (model, math,
# stage) rows, none above what was measured and none more than 10% below it (a formula that
# over- or under-counted a term would cross one of the two), and ZeRO-3's floor above ZeRO-0's
# scaling where the update is sharded (l32 bf16: 1.834x and 1.916x, NOTES.md)
dpf=$(python3 bench/dp_floor.py bench/results/2026-11-29i-h200x2-dp-scaling 2>&1)
if python3 - "$dpf" <<'EOF2'
import re, sys
rows = [l for l in sys.argv[1].splitlines() if re.match(r"\| l\d+ h2048", l)]
over = [float(re.search(r"\| ([+-][0-9.]+)% \|", l)[1]) for l in rows]
cells = [[c.strip() for c in l.split("|")] for l in rows]
x = {(c[1], c[2]): float(re.search(r"\(([0-9.]+)x\)", c[4])[1]) for c in cells}
sys.exit(not (len(rows) == 8 and all(0 <= o <= 10 for o in over)
              and x[("l32 h2048, bf16", "3")] > x[("l32 h2048, bf16", "0")]))
EOF2
then
    pass "bench/dp_floor.py: 8 floors from the committed runs, each 0-10% under the measured step"
else
    failc "bench/dp_floor.py" "$(head -c 600 <<<"$dpf")"
fi

# --recompute full|selective|none (every engine bit for bit: test_recompute): the same losses
# here through the JSON; the mode on stdout, in the log's first line and the JSON (--no-ckpt is
# none); the profile as each mode's schedule has it: selective recomputes the attention (2L
# forwards, as full) but no GEMM (as none: 4L layer GEMMs, full 7L) and runs its GELU as an
# op of its own (L, and L more in the recompute; the others' GELU rides on the fc GEMM)
# --graphs (megatron-lm on one GPU: test_cuda checks the same bits on and off): refused where
# it cannot be, before anything is written
bad_input "--graphs of an unknown mode" "--graphs: 'maybe' is not auto, on or off" --graphs maybe
bad_input "--graphs on on the cpu backend" "--graphs on: CUDA graphs need --device cuda" "${TINY[@]}" --graphs on
bad_input "--graphs on for an engine without graphs" "--graphs on: l2l has no CUDA graphs" -m l2l "${TINY[@]}" --graphs on
bad_input "--graphs on with --profile" "--graphs on: --profile times each op" "${TINY[@]}" --graphs on --profile
bad_input "--graphs on at ZeRO-2 (the stage's reason before the device's)" "--graphs on: ZeRO stages 0-1 only" "${TINY[@]}" --graphs on --zero-stage 2
GR="$WORK/graphs"
mkdir -p "$GR"
if (cd "$GR" && "$BIN" -m megatron-lm "${TINY[@]}" --iters 2 --graphs off --results r >out 2>&1) &&
    python3 -c 'import glob, json, sys; d = json.load(open(glob.glob(sys.argv[1] + "/r/log_*.json")[0])); sys.exit(d["config"]["graphs"] != "off" or any("graphs" in n for n in d.get("engine_notes", [])))' "$GR"; then
    pass "--graphs off: the JSON's config says so; the cpu backend's run notes nothing about graphs"
else
    failc "--graphs off" "$(tail -n 3 "$GR/out")"
fi
bad_input "--recompute of an unknown mode" "--recompute: 'partial' is not full, selective or none" --recompute partial
RC="$WORK/recompute"
mkdir -p "$RC"
rrc=""
for m in full selective none; do
    (cd "$RC" && "$BIN" -m megatron-lm "${TINY[@]}" -l 3 --iters 4 --recompute "$m" --profile --results "r_$m" >"$m.out" 2>&1)
    rrc="$rrc$?"
done
(cd "$RC" && "$BIN" -m megatron-lm "${TINY[@]}" -l 3 --iters 4 --no-ckpt --results r_noc >noc.out 2>&1)
rrc="$rrc$?"
check=$(python3 - "$RC" <<'EOF'
import glob, json, sys
bad, losses, extra = [], {}, {}
L = 3
for m in ("full", "selective", "none", "noc"):
    d = json.load(open(glob.glob(f"{sys.argv[1]}/r_{m}/*.json")[0]))
    losses[m] = tuple(i["loss"] for i in d["iterations"])
    want = "none" if m == "noc" else m
    if d["config"].get("recompute") != want or d["config"].get("ckpt") != (want != "none"):
        bad.append(f"{m}: config says {d['config'].get('recompute')}, ckpt {d['config'].get('ckpt')}")
    if m == "noc": continue
    ops = {o["op"]: o["calls_per_step"] for o in d["profile"]["ops"]}
    gemms = ops.get("matmul_forward", 0) + ops.get("matmul_gelu_forward", 0)
    # (full recomputes every layer but the last, whose activations are still there: its
    # forward's three GEMMs (not the output projection) and the attention; selective the
    # attention and the GELU)
    want_att, want_gemm, want_gelu = {"full": (2 * L - 1, 7 * L - 3, 0), "selective": (2 * L - 1, 4 * L, 2 * L - 1),
                                      "none": (L, 4 * L, 0)}[m]
    if ops.get("attention_forward") != want_att or ops.get("gelu_forward", 0) != want_gelu:
        bad.append(f"{m}: attention forwards {ops.get('attention_forward')} (want {want_att}), GELU ops {ops.get('gelu_forward', 0)} (want {want_gelu})")
    # (the head's GEMMs are the same in every mode: what is left over must agree)
    extra[m] = gemms - want_gemm
if len(set(losses.values())) != 1: bad.append(f"losses differ: {losses}")
if len(set(extra.values())) != 1: bad.append(f"layer GEMMs per step not 7L - 3 / 4L / 4L: {extra}")
print("ok" if not bad else "; ".join(bad))
EOF
)
if [ "$rrc" = "0000" ] && [ "$check" = ok ] && grep -q "| recompute selective" "$RC/selective.out" &&
    grep -q "^aebench .*, recompute selective, data synthetic" "$RC"/r_selective/log_*.txt &&
    grep -q "^aebench .*, recompute none, data synthetic" "$RC"/r_noc/log_*.txt; then
    pass "--recompute full, selective, none, --no-ckpt: the same losses; the mode on stdout, in the log and JSON; the profile's attention, GEMM and GELU counts as each schedule has them"
else
    failc "--recompute" "exits $rrc: $check $(grep -m2 -i 'rror' "$RC/selective.out")"
fi

# the setup line on stdout too; the clip and the bounds (engines/step_bound.h) beside the measured time:
# each iteration's roofline the largest busy time, its schedule's bound: stronghold's clipped
# schedule max(roofline, compute + the host Adam the forward's quarter of the compute does not
# cover); l2l's one slot adds its copies in (but the 1/(2L) under the head), of which the
# forward's half also covers the Adam; the summary their medians over the iterations after the
# first and the clipped steps counted; with --clip-grad 0 stronghold only the roofline
# (nothing waits for a norm), l2l its one slot
B="$WORK/bound"
mkdir -p "$B"
(cd "$B" && "$BIN" -m stronghold -w 1 "${TINY[@]}" --iters 6 --results r1 >clip.out 2>&1)
rc1=$?
(cd "$B" && "$BIN" -m stronghold -w 1 "${TINY[@]}" --iters 6 --clip-grad 0 --results r2 >noclip.out 2>&1)
rc2=$?
(cd "$B" && "$BIN" -m l2l "${TINY[@]}" --iters 6 --results r3 >l2l_clip.out 2>&1)
rc3=$?
(cd "$B" && "$BIN" -m l2l "${TINY[@]}" --iters 6 --clip-grad 0 --results r4 >l2l_noclip.out 2>&1)
rc4=$?
check=$(python3 - "$B" <<'EOF'
import glob, json, statistics, sys
bad = []
for sub, eng, clipped in (("r1", "stronghold", True), ("r2", "stronghold", False), ("r3", "l2l", True), ("r4", "l2l", False)):
    js = glob.glob(f"{sys.argv[1]}/{sub}/log_{eng}_*.json")
    if len(js) != 1: print(f"{sub}: {js}"); sys.exit()
    d = json.load(open(js[0]))
    its, s, L = d["iterations"], d["summary"], d["config"]["layers"]
    roofs, bounds = [], []
    for it in its:
        b = it["busy_ms"]
        roof = max(b["compute"], b["h2d"], b["d2h"], b["host_adam"], b["disk"], it.get("collectives_busy_ms", 0))
        copies = b["h2d"] * (1 - 1 / (2 * L)) if eng == "l2l" else 0
        sched = b["compute"] + copies + (max(0.0, b["host_adam"] - b["compute"] / 4 - copies / 2) if clipped else 0)
        sched = max(roof, sched) if clipped or eng == "l2l" else roof
        if abs(it["roofline_ms"] - roof) > 1e-9: bad.append(f"{sub} it {it['iteration']} roofline")
        if abs(it["schedule_bound_ms"] - sched) > 1e-9: bad.append(f"{sub} it {it['iteration']} schedule bound")
        if clipped and abs(it["clipped_bound_ms"] - sched) > 1e-9: bad.append(f"{sub} it {it['iteration']} clipped bound")
        if not clipped and "clipped_bound_ms" in it: bad.append(f"{sub}: a clipped bound without clipping")
        roofs.append(roof); bounds.append(sched)
    if abs(s["roofline_ms"] - statistics.median(roofs[1:])) > 1e-9: bad.append(f"{sub} median roofline")
    want = statistics.median(bounds[1:])
    if clipped and abs(s["clipped_bound_ms"] - want) > 1e-9: bad.append(f"{sub} median clipped bound")
    if abs(s["schedule_bound_ms"] - want) > 1e-9: bad.append(f"{sub} median schedule bound")
    is_ = "clipped schedule" if clipped else "one slot" if eng == "l2l" else "roofline"
    if s["schedule_bound_is"] != is_: bad.append(f"{sub} schedule_bound_is {s['schedule_bound_is']}")
    if abs(s["ms_over_bound"] - s["median_ms"] / want) > 1e-9: bad.append(f"{sub} ms_over_bound")
    n = sum(1 for it in its if it["grad_norm"] > s["clip_grad"] > 0 and not it["skipped"])
    if s["clipped_steps"] != n or (clipped and n == 0): bad.append(f"{sub} clipped steps {s['clipped_steps']} vs {n}")
    if clipped:
        # --clip-speculate's steps: counted from the iterations; a redone step went ahead and clipped
        ahead = sum(1 for it in its if it["ahead_blocks"] > 0)
        redone = [it for it in its if it["ahead_redone"]]
        if s["steps_updated_ahead"] != ahead or s["steps_redone"] != len(redone): bad.append(f"{sub} speculation counts")
        if any(it["ahead_blocks"] == 0 or it["grad_norm"] <= s["clip_grad"] for it in redone): bad.append(f"{sub} redone")
    elif "steps_updated_ahead" in s: bad.append(f"{sub}: speculation without clipping")
print("ok" if not bad else "; ".join(bad))
EOF
)
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ] && [ $rc4 -eq 0 ] && [ "$check" = ok ] &&
    grep -q '^  setup: pinned host ' "$B/clip.out" &&
    grep -qE '^  clip-grad 1: [1-9][0-9]* of 6 steps clipped; [0-9]+ updated ahead of the norm, [0-9]+ of them redone$' "$B/clip.out" &&
    grep -qE '^  bound: [0-9.]+ ms/it \(the clipped schedule: the host Adam waits for the norm; roofline [0-9.]+\) \| measured [0-9.]+x of it$' "$B/clip.out" &&
    grep -qE '^  bound: [0-9.]+ ms/it \(roofline: ' "$B/noclip.out" && ! grep -q 'clip-grad' "$B/noclip.out" &&
    grep -qE '^  bound: [0-9.]+ ms/it \(the clipped schedule: .*, one slot: .*roofline [0-9.]+\) \| measured [0-9.]+x of it$' "$B/l2l_clip.out" &&
    grep -qE '^  bound: [0-9.]+ ms/it \(one slot: each layer.s copy in, then its compute; roofline ' "$B/l2l_noclip.out" &&
    grep -qE '^bound \(ms, last iteration\) \| roofline: [0-9.]+ \| clipped schedule: [0-9.]+ \| measured: ' "$B"/r1/log_*.txt &&
    grep -qE '^bound \(ms, last iteration\) \| roofline: [0-9.]+ \| one slot: [0-9.]+ \| measured: ' "$B"/r4/log_*.txt; then
    pass "the setup line on stdout; the clip (steps clipped) and each step's roofline and schedule bound (stronghold's clipped schedule, l2l's one slot with and without clipping) in log, JSON and stdout, recomputed from the busy times"
else
    failc "bounds and clip" "exit $rc1/$rc2/$rc3/$rc4: $check; $(grep -E 'bound|clip-grad|setup' "$B/clip.out" "$B/l2l_clip.out" | head -n 6)"
fi

# with 8 micro-batches a step's busy times count every one of them: each offload engine has
# room for all its spans (a step that ran out of room would report none rather than a part,
# and its bound would be a quarter of the truth: l155 -b 1 of a global batch 4 was "4.15x its
# bound" on the H100)
# (every offloading engine, from the registry: tests/engine_list.sh; stronghold with -w 2)
# shellcheck source=tests/engine_list.sh
source "$(dirname "${BASH_SOURCE[0]}")/engine_list.sh"
registry_engines "$BIN" || failc "the registry's engines (micro-batch busy times)" "$REG_WHY"
bad=""
for e in "${REG_OFFLOAD[@]}"; do
    ea=("$e")
    [ "$e" = stronghold ] && ea+=(-w 2)
    rm -rf "$B/mb"
    (cd "$B" && "$BIN" -m "${ea[@]}" "${TINY[@]}" -l 6 -b 1 --global-batch 8 --iters 2 --results mb >mb.out 2>&1) || bad="$bad ${ea[0]}: exit $?;"
    python3 -c 'import glob, json, sys
d = json.load(open(glob.glob(sys.argv[1] + "/mb/*.json")[0]))
sys.exit(not (d["micro_batches"] == 8 and all("busy_ms" in it and it["busy_ms"]["compute"] > 0 for it in d["iterations"])))' "$B" ||
        bad="$bad ${ea[0]}: no busy times;"
done
if [ -z "$bad" ]; then
    pass "8 micro-batches: every offload engine reports each step's busy times (room for every span)"
else
    failc "busy times with micro-batches" "$bad"
fi

# the notice before a long set-up (stdout, from the plan): over the threshold, and not under it
# (in subshells: this file is sourced, and a `cd -` below must come back where it was)
N="$WORK/notice"
mkdir -p "$N"
(cd "$N" && "$BIN" -m l2l "${TINY[@]}" --iters 1 --setup-notice 0 --results r1 >with.out 2>&1)
(cd "$N" && "$BIN" -m l2l "${TINY[@]}" --iters 1 --results r2 >without.out 2>&1)
if grep -q '^  setting up: .* of GPU memory, .* of host memory (zeroed by every core), 0.000 B parameters to initialise ...$' "$N/with.out" &&
    ! grep -q 'setting up:' "$N/without.out"; then
    pass "a set-up over the threshold is announced on stdout before it starts, one under it is not"
else
    failc "set-up notice" "$(grep 'setting up' "$N/with.out" "$N/without.out")"
fi

# The artifact's extract scripts split these lines with awk and take fields by number, over
# a results/ with many logs (grep then prefixes each line with its file's path).
# (the artifact's case scripts find baselines by the window in their names, ws-15: a run list
# gives megatron-lm one, as configs/case2.json's "-m all" with window 15 does; on the command
# line -w is refused for it)
cat >"$WORK/ws.json" <<'EOF2'
{"defaults": {"device": "cpu", "layers": 2, "hidden": 64, "heads": 4, "seq": 32, "batch": 2, "vocab": 512,
              "threads": 2, "method": "megatron-lm"},
 "runs": [{"window": 2, "iters": 20, "log-interval": 10}, {"window": 1, "iters": 1}]}
EOF2
(cd "$RUN" && "$BIN" --config "$WORK/ws.json" >/dev/null 2>&1)
cd "$RUN" || exit 1
c1=$(grep -R 'total parameters' ./results/*.txt | awk -v FS='[/,_: ]' '{print $4, ",", $18, $19, ",", $20, ",", $21}' | uniq)
want_b=$(awk '/model parallel rank/ {printf "%.3f", $NF / 1e9}' "$log")
[ "$c1" = "megatron-lm , total parameters , $want_b , B" ] && pass "case1 awk fields" ||
    failc "case1 awk fields" "got '$c1'"
c2=$(grep -R 'SamplesPerSec' ./results/*ws-2*.txt ./results/*ws-1*.txt | awk -v FS='[/,_: ]' '{print $5, $6, $4, $20, $22}' | sort | head -n 1)
if [[ $c2 =~ ^l-2\ h-64\ megatron-lm\ SamplesPerSecond\ [0-9]+\.[0-9]+$ ]]; then
    pass "case2/3 awk fields (SamplesPerSecond)"
else
    failc "case2/3 awk fields" "got '$c2'"
fi
c3=$(grep -R 'total parameters' ./results/*.txt | awk -v FS='[/,_: =]' '{print $5, $6, $4, $20, $21}' | uniq)
[ "$c3" = "l-2 h-64 megatron-lm $want_b B" ] && pass "case2 awk fields (parameters)" ||
    failc "case2 awk fields (parameters)" "got '$c3'"
c4=$(grep -R 'elapsed time per iteration' ./results/*.txt | awk -v FS='[/,_:|]' '{print $5, $6, $8, $4, $12, $13}' | grep ws-2 | head -n 1)
if [[ $c4 =~ ^l-2\ h-64\ ws-2\ megatron-lm\ \ elapsed\ time\ per\ iteration\ \(ms\)\ \ [0-9]+\.[0-9]\ $ ]]; then
    pass "case4/5 awk fields (elapsed time)"
else
    failc "case4/5 awk fields" "got '$c4'"
fi
# The interval's loss in the log is the mean of the JSON's per-iteration losses.
log_loss=$(awk -F'|' '/^ iteration +10\// {sub(/ *lm loss: /, "", $5); sub(/ +$/, "", $5); print $5}' "$log")
json_loss=$(grep -o '"loss":[[:space:]]*[-0-9.e+]*' "$json" | head -n 10 | awk -F: '{s += $2} END {printf "%.6E", s / NR}')
[ "$log_loss" = "$json_loss" ] && pass "log loss = mean of JSON losses" ||
    failc "log loss = mean of JSON losses" "log $log_loss json $json_loss"
cd - >/dev/null || exit 1

# ---- config file, overridden by flags --------------------------------------------------
printf '{"layers": 3, "hidden": 64, "heads": 4, "seq": 32, "batch": 2, "vocab": 512, "iters": 2, "device": "cpu", "no-ckpt": true, "lr": 0.001}\n' >"$WORK/cfg.json"
(cd "$WORK" && "$BIN" --config "$WORK/cfg.json" -l 2 --results "$WORK/cfgres" >/dev/null 2>&1)
rc=$?
cj=$(ls "$WORK"/cfgres/log_megatron-lm_l-2_h-64_bs-2_*.json 2>/dev/null | head -n 1)
if [ $rc -eq 0 ] && [ -f "$cj" ] && grep -q '"ckpt":[[:space:]]*false' "$cj" && grep -q '"iters":[[:space:]]*2,' "$cj"; then
    pass "config applied, command line overrides it"
else
    failc "config applied" "exit $rc, json '$cj'"
fi

# ---- out of memory: reported, not a crash ----------------------------------------------
(cd "$WORK" && "$BIN" "${TINY[@]}" --iters 2 --gpu-mem-limit 1M --results "$WORK/oom" >"$WORK/oom.out" 2>&1)
rc=$?
oj=$(ls "$WORK"/oom/*.json 2>/dev/null | head -n 1)
if [ $rc -eq 3 ] && [ -f "$oj" ] && grep -q '"status":[[:space:]]*"oom"' "$oj" &&
    grep -q '^OUT OF MEMORY: out of GPU memory' "${oj%.json}.txt" && grep -q 'OUT OF MEMORY' "$WORK/oom.out"; then
    pass "GPU budget too small: exit 3, log line, JSON status oom"
else
    failc "GPU OOM report" "exit $rc: $(cat "$WORK/oom.out")"
fi
(cd "$WORK" && "$BIN" "${TINY[@]}" --iters 2 --cpu-mem-limit 1K --results "$WORK/hostoom" >"$WORK/hostoom.out" 2>&1)
rc=$?
if [ $rc -eq 3 ] && grep -q 'out of host memory' "$WORK"/hostoom/*.txt 2>/dev/null; then
    pass "host budget too small: exit 3, out of host memory"
else
    failc "host OOM report" "exit $rc: $(cat "$WORK/hostoom.out")"
fi

# ---- the disk tier: --offload nvme ------------------------------------------------------
mkdir -p "$WORK/nvme"
(cd "$WORK" && "$BIN" -m zero-infinity "${TINY[@]}" --iters 2 --offload nvme --nvme-dir "$WORK/nvme" \
    --results "$WORK/nvmeres" >"$WORK/nvme.out" 2>&1)
rc=$?
nl=$(ls "$WORK"/nvmeres/log_zero-infinity_*.txt 2>/dev/null | head -n 1)
peak=$(grep '^memory peak' "$nl" 2>/dev/null)
# the disk peak equals the plan (and is not zero), and the swap directory is gone
if [ $rc -eq 0 ] && [[ $peak =~ disk:\ ([0-9.]+\ [KMG]iB)\ \(plan\ ([0-9.]+\ [KMG]iB)\) ]] &&
    [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] && [ -z "$(ls -A "$WORK/nvme")" ] &&
    grep -q '"offload":[[:space:]]*"nvme"' "${nl%.txt}.json"; then
    pass "--offload nvme: disk peak = plan in the log, nothing left in --nvme-dir"
else
    failc "--offload nvme run" "exit $rc; peak line '$peak'; left: $(ls -A "$WORK/nvme"); $(tail -n 3 "$WORK/nvme.out")"
fi
# (a missing --nvme-dir is bad input now, found before anything is written: issue 29)
bad_input "missing --nvme-dir" "--nvme-dir $WORK/no/such/dir: No such file or directory" -m zero-infinity "${TINY[@]}" --iters 2 --offload nvme --nvme-dir "$WORK/no/such/dir"
(cd "$WORK" && "$BIN" -m all --dpu "${TINY[@]}" --iters 2 --results "$WORK/alldpu" >"$WORK/alldpu.out" 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q 'leaving out megatron-lm: megatron-lm has no delayed parameter update' "$WORK/alldpu.out" &&
    [ "$(ls "$WORK"/alldpu/log_*.json | wc -l)" = 1 ] && ls "$WORK"/alldpu/log_zero-offload_*.json >/dev/null 2>&1; then
    pass "-m all --dpu runs only the engine that has it, and says so for the others"
else
    failc "-m all --dpu" "exit $rc: $(tail -n 5 "$WORK/alldpu.out")"
fi

# ---- the CPU preset and -m all ---------------------------------------------------------
(cd "$WORK" && "$BIN" -m all --device cpu --iters 3 --results "$WORK/all" >"$WORK/all.out" 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "CPU preset" "$WORK/all.out" &&
    [ -n "$(ls "$WORK"/all/log_megatron-lm_l-4_h-128_bs-4_ws-auto_*.txt 2>/dev/null)" ]; then
    pass "-m all with no shape uses the CPU preset"
else
    failc "-m all CPU preset" "exit $rc: $(tail -n 5 "$WORK/all.out")"
fi

# ---- --data: a token file ----------------------------------------------------------------
awk 'BEGIN { for (i = 0; i < 4000; i++) { t = (i * 7) % 500; printf "%c%c", t % 256, int(t / 256) } }' \
    LC_ALL=C >"$WORK/tokens.bin"
(cd "$WORK" && LC_ALL=C "$BIN" "${TINY[@]}" --iters 2 --data "$WORK/tokens.bin" --results "$WORK/data" >/dev/null 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q '"data":[[:space:]]*"'"$WORK/tokens.bin"'"' "$WORK"/data/*.json 2>/dev/null; then
    pass "--data trains on a uint16 token file"
else
    failc "--data" "exit $rc"
fi

# ---- help and version -------------------------------------------------------------------
if "$BIN" --help | grep -q -- "--gpu-mem-limit SIZE" && "$BIN" --version | grep -q '^aebench '; then
    pass "--help lists the options, --version prints"
else
    failc "--help/--version" "missing text"
fi

# --list-engines (issue 48: tests take the engine list from the registry): the names -m takes,
# one a line, exit 0, nothing on stderr and nothing written; the same set as the engines the
# refusal of an unknown -m names and --help's methods (those -m all runs and the others),
# without the alias and without all;
# each of them a method a dry run takes.
mkdir -p "$WORK/list-engines"
(cd "$WORK/list-engines" && "$BIN" --list-engines >out 2>err)
rc=$?
listed=$(sort "$WORK/list-engines/out")
known=$("$BIN" -m no-such-engine 2>&1 | sed -n "s/.*(known: \(.*\), all)$/\1/p" | tr -d ' ' | tr ',' '\n' | sort)
helped=$("$BIN" --help | awk '/^methods:/ {m = 1; next} m && !NF {exit} m && $1 != "all" {print $1}' | sort)
not_dry=""
while read -r e; do
    [ -n "$e" ] || continue
    (cd "$WORK" && "$BIN" "${TINY[@]}" -m "$e" --dry-run --results "$WORK/list-engines-dry" >/dev/null 2>&1) ||
        not_dry="$not_dry $e"
done <<<"$listed"
if [ $rc -eq 0 ] && [ ! -s "$WORK/list-engines/err" ] && [ -n "$listed" ] && [ "$listed" = "$known" ] &&
    [ "$listed" = "$helped" ] && ! grep -qxE 'baseline|all' <<<"$listed" && [ -z "$not_dry" ] &&
    [ "$(ls "$WORK/list-engines")" = "$(printf 'err\nout')" ]; then
    pass "--list-engines: the $(wc -l <<<"$listed") engines -m takes (those its refusal and --help name), each a dry run's method; nothing written"
else
    failc "--list-engines" "exit $rc, listed '$(paste -sd' ' <<<"$listed")', -m's refusal knows '$(paste -sd' ' <<<"$known")', --help '$(paste -sd' ' <<<"$helped")', not a dry run's method:${not_dry:- none}; stderr $(head -c 200 "$WORK/list-engines/err"); $(ls "$WORK/list-engines")"
fi

# The test-only engines (tests/engine_*.c, named test-*) are in the test build's registry alone:
# the shipped program (AEBENCH_SHIPPED, as tests/run.sh sets it; else ./aebench) lists none of
# them, and every engine it lists is the test build's too, in the same order before them.
shipped_bin=$(realpath "${AEBENCH_SHIPPED:-./aebench}")
shipped_list=$("$shipped_bin" --list-engines 2>&1)
shipped_rc=$?
test_list=$("$BIN" --list-engines 2>&1)
test_extra=$(tail -n +"$(($(wc -l <<<"$shipped_list") + 1))" <<<"$test_list")
if [ $shipped_rc -eq 0 ] && ! grep -q '^test-' <<<"$shipped_list" &&
    [ "$(head -n "$(wc -l <<<"$shipped_list")" <<<"$test_list")" = "$shipped_list" ] &&
    { [ -z "$test_extra" ] || ! grep -qv '^test-' <<<"$test_extra"; }; then
    pass "the shipped program lists no test engine ($(wc -l <<<"$shipped_list") engines); this build adds:$(paste -sd' ' <<<"$test_extra" | sed 's/^./ &/;s/^$/ none/')"
else
    failc "test engines" "the shipped $shipped_bin (exit $shipped_rc) lists '$(paste -sd' ' <<<"$shipped_list")', the test build $BIN '$(paste -sd' ' <<<"$test_list")'"
fi

# test-twin (tests/engine_twin.c, issue 48: a new engine is its file and one registry line), in
# the test build only: its option --twin-report-every is refused for megatron-lm naming test-twin
# as its owner; with it, a run lists every 2nd iteration's loss in its log section and in the
# JSON's "twin", and its losses are megatron-lm's bit for bit.
if grep -qx test-twin <<<"$test_list"; then
    tw_tiny=("${TINY[@]}" --iters 4)
    tw_refused=$(cd "$WORK" && "$BIN" "${tw_tiny[@]}" -m megatron-lm --twin-report-every 2 --results "$WORK/tw-refused" 2>&1)
    tw_refused_rc=$?
    (cd "$WORK" && "$BIN" "${tw_tiny[@]}" -m test-twin --twin-report-every 2 --results "$WORK/tw-twin" >/dev/null 2>&1 &&
        "$BIN" "${tw_tiny[@]}" -m megatron-lm --results "$WORK/tw-base" >/dev/null 2>&1)
    tw_rc=$?
    tw_check=$(python3 - "$WORK/tw-twin" "$WORK/tw-base" <<'PY' 2>&1
import glob, json, sys
twin = json.load(open(glob.glob(sys.argv[1] + "/*.json")[0]))
base = json.load(open(glob.glob(sys.argv[2] + "/*.json")[0]))
tl, bl = [i["loss"] for i in twin["iterations"]], [i["loss"] for i in base["iterations"]]
assert len(tl) == 4 and tl == bl, f"losses {tl} against megatron-lm's {bl}"
t = twin.get("twin")
assert t and t["report_every"] == 2 and t["iterations"] == 4, f"twin {t}"
assert [(x["iteration"], x["loss"]) for x in t["losses"]] == [(2, tl[1]), (4, tl[3])], f"twin {t}"
assert "twin" not in base, "megatron-lm's record has a twin section"
log = open(glob.glob(sys.argv[1] + "/*.txt")[0]).read().splitlines()
lines = [l for l in log if l.startswith("test-twin: iteration ")]
assert lines == [f"test-twin: iteration 2 loss {tl[1]:.6f}", f"test-twin: iteration 4 loss {tl[3]:.6f}"], lines
print("ok")
PY
)
    if [ $tw_refused_rc -eq 2 ] && grep -q "^aebench: --twin-report-every: megatron-lm .*(test-twin's option)$" <<<"$tw_refused" &&
        [ ! -e "$WORK/tw-refused" ] && [ $tw_rc -eq 0 ] && [ "$tw_check" = ok ]; then
        pass "test-twin: --twin-report-every refused for megatron-lm as test-twin's; its log lines and JSON \"twin\" list every 2nd loss; its losses are megatron-lm's bit for bit"
    else
        failc "test-twin" "refusal (exit $tw_refused_rc): $(head -c 200 <<<"$tw_refused"); runs exit $tw_rc; $(tail -c 400 <<<"$tw_check")"
    fi
elif [ "$BIN" != "$shipped_bin" ]; then
    failc "test-twin" "the test build $BIN does not list test-twin: '$(paste -sd' ' <<<"$test_list")'"
fi

# ---- a record that cannot be written (a full disk; here the file-size limit, EFBIG): the run
# ends at once, naming the file, instead of training on with a broken log (issue 29) --------
# (the build without MPI: MPI's own start-up files would hit the limit first)
NOMPI=$(realpath "${AEBENCH_NOMPI:-./aebench-nompi}" 2>/dev/null)
if [ -x "$NOMPI" ]; then
    mkdir -p "$WORK/full"
    (cd "$WORK/full" && trap '' XFSZ && ulimit -f 8 && "$NOMPI" "${TINY[@]}" --iters 5000 --log-interval 1 \
        --results res >out 2>err)
    rc=$?
    fj=$(ls "$WORK"/full/res/*.json 2>/dev/null | head -n 1)
    if [ $rc -eq 1 ] && grep -q "aebench: File too large writing res/log_.*\.txt" "$WORK/full/err" &&
        python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); sys.exit(not (d["status"] == "error" and "writing" in d["message"] and len(d["iterations"]) < 100))' "$fj"; then
        pass "a log that cannot be written: the run ends at once (exit 1), naming the file; the JSON says so"
    else
        failc "a log that cannot be written" "exit $rc: $(tail -c 300 "$WORK/full/err")"
    fi
else
    failc "a log that cannot be written" "no build without MPI at ${AEBENCH_NOMPI:-./aebench-nompi} (make test builds it)"
fi

# ---- a full disk (issue 47): 0 and 4 KiB free in the results directory: exit 1, one line
# "disk full writing FILE", and no record at all (no empty log, no half JSON), and stdout names
# no file that is not there ------------------------------------------------------------------
DF="$WORK/diskfull"
mkdir -p "$DF"
for free_k in 0 4; do
    d="$DF/k$free_k"
    mkdir -p "$d/mnt" "$d/run"
    if ! mount -t tmpfs -o size=16K tmpfs "$d/mnt" 2>"$d/mount.err"; then
        failc "a full disk ($free_k KiB free)" "cannot mount a 16 KiB tmpfs: $(cat "$d/mount.err")"
        continue
    fi
    dd if=/dev/zero of="$d/mnt/fill" bs=1k count=$((16 - free_k)) 2>/dev/null
    if exact_ending "a full disk ($free_k KiB free)" 1 "^aebench: disk full writing $d/mnt/log_megatron-lm_.*\.\(txt\|json\)$" \
        "$d/run" "$BIN" "${TINY[@]}" --iters 3 --results "$d/mnt"; then
        left=$(ls -A "$d/mnt" | grep -v '^fill$')
        named=$(grep -o "$d/mnt/[^ ]*" "$d/run.out" | while read -r f; do [ -e "$f" ] || echo "$f"; done)
        if [ -n "$left" ]; then
            failc "a full disk ($free_k KiB free)" "left behind: $left"
        elif [ -n "$named" ]; then
            failc "a full disk ($free_k KiB free)" "stdout names files that are not there: $named"
        else
            pass "a full disk ($free_k KiB free): exit 1, 'disk full writing FILE', no log or JSON left, stdout names none"
        fi
    fi
    umount "$d/mnt"
done
# -m all on a full disk: said once, before any run starts (each would fail in turn); the sweep's
# lock file stays, as after every sweep
d="$DF/all"
mkdir -p "$d/mnt" "$d/run"
if ! mount -t tmpfs -o size=16K tmpfs "$d/mnt" 2>"$d/mount.err"; then
    failc "-m all on a full disk" "cannot mount a 16 KiB tmpfs: $(cat "$d/mount.err")"
else
    dd if=/dev/zero of="$d/mnt/fill" bs=1k count=16 2>/dev/null
    if exact_ending "-m all on a full disk" 1 "^aebench: disk full writing $d/mnt/.aebench-sweep.lock$" \
        "$d/run" "$BIN" -m all "${TINY[@]}" --iters 2 --results "$d/mnt"; then
        left=$(ls -A "$d/mnt" | grep -v '^fill$' | grep -v '^.aebench-sweep.lock$')
        if [ -n "$left" ] || grep -q '^\[1/' "$d/run.out"; then
            failc "-m all on a full disk" "a run started, or left: $left"
        else
            pass "-m all on a full disk: exit 1, one line 'disk full writing' its lock, no run started, nothing left"
        fi
    fi
    umount "$d/mnt"
fi
