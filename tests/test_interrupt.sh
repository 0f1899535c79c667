# Interrupted runs (issue 47): a run, a sweep's child or a --ranks job stopped by SIGINT or
# SIGTERM ends by that signal with its record saying so (the log's last line "ERROR:
# interrupted (SIG...)", the JSON's status "interrupted"), and --resume runs such a run again
# leaving one record of it.  Sourced by tests/run.sh after test_sweep.sh (test_cli.sh's $WORK,
# $BIN, pass and failc).  No timings: each signal is sent once the run is seen where the test
# wants it (a line in its log, a child stopped), and the runs are too long to end first.

IT="$WORK/interrupt"
mkdir -p "$IT"
IT_TINY=(--device cpu -l 2 -h 64 --heads 4 --seq 32 -b 2 --vocab 512)

# it_start DIR CMD...: CMD in the background in DIR (stdout DIR/out, stderr DIR/err), with job
# control on: a script's background job would otherwise be started with SIGINT ignored.  And
# SIGINT set back to its default on the way (IT_DFL_INT, then exec: the same pid): a suite
# started with it ignored (`nohup make test &`) hands that on to every child, which aebench
# keeps as it should (a shell's background job), and a run sent SIGINT here then never ended.
# Its pid in IT_PID; the job (whose end writes CMD's exit status to DIR/rc) in IT_JOB.
IT_DFL_INT=(python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])')
it_start() {
    local d=$1
    shift
    rm -f "$d/pid" "$d/rc"
    { (cd "$d" && set -m && { "${IT_DFL_INT[@]}" "$@" >out 2>err & echo $! >pid; wait $!; echo $? >rc; }) & } 2>/dev/null
    IT_JOB=$!
    IT_PID=""
    for _ in $(seq 3000); do [ -s "$d/pid" ] && break; sleep 0.01; done
    IT_PID=$(cat "$d/pid" 2>/dev/null)
}
# it_wait_line GLOB REGEX: 0 once a file matching GLOB has a line matching REGEX (5 minutes at
# most: the runs here are long enough not to end first)
it_wait_line() {
    for _ in $(seq 3000); do
        # shellcheck disable=SC2086
        grep -Eqs "$2" $1 && return 0
        sleep 0.1
    done
    return 1
}
# it_json_status FILE: the JSON's "status" ("unreadable" when it does not parse)
it_json_status() {
    python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["status"])' "$1" 2>/dev/null || echo unreadable
}
# it_gone PID: 0 once the process PID is no more (5 minutes at most)
it_gone() {
    for _ in $(seq 3000); do [ -e "/proc/$1" ] || return 0; sleep 0.1; done
    return 1
}
# it_end: the job it_start began, once its process has ended (5 minutes at most after the
# signal it was sent; then killed, and its exit status says so: no wait without end)
it_end() {
    [ -z "$IT_PID" ] || it_gone "$IT_PID" || kill -KILL "$IT_PID" 2>/dev/null
    wait "$IT_JOB" 2>/dev/null
}

# ---- one run stopped by SIGTERM, and by SIGINT ----------------------------------------------
for it_sig in TERM INT; do
    d="$IT/run_$it_sig"
    mkdir -p "$d"
    want=$((128 + $(kill -l "$it_sig")))
    it_start "$d" "$BIN" "${IT_TINY[@]}" --threads 2 --iters 100000 --results r
    seen=no
    it_wait_line "$d/r/log_*.txt" '^ *iteration +[0-9]+/' && seen=yes
    [ -n "$IT_PID" ] && kill -"$it_sig" "$IT_PID" 2>/dev/null
    it_end
    rc=$(cat "$d/rc" 2>/dev/null)
    log=$(ls "$d"/r/log_*.txt 2>/dev/null)
    json=$(ls "$d"/r/log_*.json 2>/dev/null)
    if [ "$seen" = yes ] && [ "$rc" = "$want" ] && [ "$(wc -w <<<"$log")" -eq 1 ] && [ "$json" = "${log%.txt}.json" ] &&
        tail -n 1 "$log" | grep -Eq "^ERROR: interrupted \(SIG$it_sig\): the run was stopped at iteration [0-9]+ of 100000, after [0-9]+ completed$" &&
        [ "$(it_json_status "$json")" = interrupted ] &&
        [ "$(tail -n 1 "$d/err")" = "aebench: $(tail -n 1 "$log" | sed 's/^ERROR: //')" ]; then
        pass "a run stopped by SIG$it_sig: exit $want, the log ends with 'ERROR: interrupted (SIG$it_sig)', its JSON says interrupted"
    else
        failc "a run stopped by SIG$it_sig" "exit ${rc:-?} (want $want; an iteration line seen: $seen), log ends '$(tail -n 1 "$log" 2>/dev/null)', JSON status $(it_json_status "${json:-none}"); $(tail -c 300 "$d/err")"
    fi
done

# ---- a sweep stopped while a child runs; --resume then leaves one record per run -------------
# The first child is stopped (SIGSTOP) once its log exists, so that it cannot finish meanwhile;
# then the sweep gets SIGTERM (and passes it on: the child's parent-death signal), and the child
# is let go on to read it.  A child that got to its end before it was stopped (a legitimate
# ending on a machine busy enough to run 200 iterations before the next command) is tried again.
# (the engines -m all runs, from the registry: tests/engine_list.sh)
# shellcheck source=tests/engine_list.sh
source "$(dirname "${BASH_SOURCE[0]}")/engine_list.sh"
registry_engines "$BIN" || failc "the registry's engines (interrupted sweep)" "$REG_WHY"
IT_ENGINES=("${REG_IN_ALL[@]}")
IT_NE=${#IT_ENGINES[@]}
IT_SWEEP=("$BIN" -m all "${IT_TINY[@]}" --threads 1 --iters 200 --results r)
why=""
for trial in 1 2 3; do
    d="$IT/sweep_$trial"
    mkdir -p "$d"
    it_start "$d" "${IT_SWEEP[@]}"
    child=""
    for _ in $(seq 3000); do
        if ls "$d"/r/log_*.txt >/dev/null 2>&1; then child=$(pgrep -P "$IT_PID" | head -n 1); break; fi
        sleep 0.1
    done
    [ -n "$child" ] && kill -STOP "$child" 2>/dev/null
    for _ in $(seq 300); do [ "$(awk '{print $3}' "/proc/$child/stat" 2>/dev/null)" = T ] && break; sleep 0.05; done
    stopped_at=$(tail -n 1 "$d"/r/log_*.txt 2>/dev/null)
    kill -TERM "$IT_PID" 2>/dev/null
    it_end
    rc=$(cat "$d/rc" 2>/dev/null)
    kill -CONT "$child" 2>/dev/null
    it_gone "$child"
    log=$(ls "$d"/r/log_*.txt 2>/dev/null)
    json=$(ls "$d"/r/log_*.json 2>/dev/null)
    if [ -z "$child" ] || [ "$(wc -w <<<"$log")" -ne 1 ]; then
        why="$why trial $trial: no child seen (sweep exit ${rc:-?}, logs: $(wc -w <<<"$log"));"
        continue
    fi
    if grep -q '^memory peak' "$log"; then
        why="$why trial $trial: the child had ended its iterations before it was stopped;"
        continue
    fi
    break
done
if [ "$rc" = 143 ] && [ "$json" = "${log%.txt}.json" ] && [ "$(it_json_status "$json")" = interrupted ] &&
    tail -n 1 "$log" | grep -Eq '^ERROR: interrupted \(SIGTERM\): the run was stopped '; then
    pass "a sweep stopped by SIGTERM while a child runs: exit 143, the child's log ends with 'ERROR: interrupted (SIGTERM)', its JSON says interrupted"
else
    failc "a sweep stopped while a child runs" "sweep exit ${rc:-?}, child ${child:-none} (its log '$stopped_at' when stopped, now '$(tail -n 1 "$log" 2>/dev/null)'), JSON status $(it_json_status "${json:-none}");$why $(tail -c 300 "$d/err")"
fi
# (its fingerprint matches: the same sweep, --resume)
(cd "$d" && "${IT_SWEEP[@]}" --resume >resume.out 2>resume.err)
rc=$?
bad=""
for j in "$d"/r/log_*.json; do [ "$(it_json_status "$j")" = ok ] || bad="$bad ${j##*/}: $(it_json_status "$j");"; done
if [ "$rc" -eq 0 ] && [ "$(ls "$d"/r/log_*.json | wc -l)" -eq "$IT_NE" ] && [ "$(ls "$d"/r/log_*.txt | wc -l)" -eq "$IT_NE" ] &&
    [ -z "$bad" ] && [ -n "$json" ] && [ ! -e "$json" ] && [ ! -e "$log" ]; then
    pass "--resume after it: the interrupted run again, its earlier log and JSON removed: one JSON per run ($IT_NE), all ok"
else
    failc "--resume after an interrupted sweep" "exit $rc, $(ls "$d"/r/log_*.json 2>/dev/null | wc -l) JSON and $(ls "$d"/r/log_*.txt 2>/dev/null | wc -l) logs for $IT_NE runs; the interrupted one's JSON $([ -e "$json" ] && echo stays || echo gone);$bad $(tail -c 300 "$d/resume.err")"
fi

# ---- a --ranks job stopped by SIGINT ---------------------------------------------------------
if "$BIN" --version 2>/dev/null | grep -q "ranks: mpi" && command -v mpiexec >/dev/null; then
    d="$IT/ranks"
    mkdir -p "$d"
    it_start "$d" "$BIN" "${IT_TINY[@]}" --threads 1 --iters 100000 --ranks 2 --results r
    seen=no
    it_wait_line "$d/r/log_*.txt" '^ *iteration +[0-9]+/' && seen=yes
    [ -n "$IT_PID" ] && kill -INT "$IT_PID" 2>/dev/null
    it_end
    rc=$(cat "$d/rc" 2>/dev/null)
    log=$(ls "$d"/r/log_*.txt 2>/dev/null)
    json=$(ls "$d"/r/log_*.json 2>/dev/null)
    if [ "$seen" = yes ] && [ "$rc" = 130 ] && [ "$json" = "${log%.txt}.json" ] &&
        [ "$(it_json_status "$json")" = interrupted ] && tail -n 1 "$log" | grep -Eq '^ERROR: interrupted \(SIGINT\): ' &&
        [ "$(grep -c '^ERROR: ' "$log")" -eq 1 ]; then
        pass "a --ranks 2 job stopped by SIGINT: exit 130, one 'ERROR: interrupted (SIGINT)' line ends its log, its JSON says interrupted"
    else
        failc "a --ranks 2 job stopped by SIGINT" "exit ${rc:-?} (an iteration line seen: $seen), log ends '$(tail -n 1 "$log" 2>/dev/null)' ($(grep -c '^ERROR: ' "$log" 2>/dev/null) ERROR lines), JSON status $(it_json_status "${json:-none}"); $(tail -c 300 "$d/err")"
    fi
else
    needs_mpi "a --ranks job stopped by SIGINT" "$BIN"
fi
