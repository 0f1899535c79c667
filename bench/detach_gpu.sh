#!/usr/bin/env bash
# A batch of bench steps that outlives one device call (10 minutes each): `start` runs the
# steps one after another in a new process session (setsid: the device machine keeps such a
# process when the call returns, until the machine goes back), `wait` waits for the batch up to
# a number of seconds and packs what is done so far into $OUT, so that back-to-back calls on the
# same warm machine collect one long batch (the runs in one batch share one machine: their
# timings compare).
#   bash bench/detach_gpu.sh start STEPFILE     # STEPFILE: one step per line, "NAME COMMAND..."
#   bash bench/detach_gpu.sh wait SECONDS "$OUT"
# Each step runs as `bash -c COMMAND` from the repository root with $dest=/tmp/aebench-batch/NAME
# (bench scripts take it as their first argument) and its output in NAME.txt; progress.txt says
# which step ran when and how it ended. A step's failure does not stop the ones after it.
# The machine goes back about 30 s after a call ends (status: idle_release_s), and the batch with
# it: issue the next `wait` at once, and read what came back while that call runs (a call
# made a minute late found a fresh machine and waited 540 s for nothing, 2026-11-27).
set -uo pipefail
batch=/tmp/aebench-batch
case "${1:-}" in
start)
    steps=${2:?a step file}
    [ -e "$batch" ] && { echo "a batch is already here ($batch)" >&2; exit 2; }
    mkdir -p "$batch"
    cp "$steps" "$batch/steps.txt"
    setsid bash -c '
        cd "$1" || exit 1
        while read -r name cmd; do
            case "$name" in ""|"#"*) continue ;; esac
            mkdir -p "$2/$name"
            echo "$(date -u +%T) start $name" >>"$2/progress.txt"
            SECONDS=0
            dest="$2/$name" bash -c "$cmd" >"$2/$name.txt" 2>&1 </dev/null
            rc=$?
            echo "$(date -u +%T) end $name exit $rc after ${SECONDS} s" >>"$2/progress.txt"
        done <"$2/steps.txt"
        echo "$(date -u +%T) batch done" >>"$2/progress.txt"
        touch "$2/DONE"' batch "$PWD" "$batch" </dev/null >/dev/null 2>&1 &
    echo "batch started: $(grep -cvE '^(#|$)' "$steps") steps"
    ;;
wait)
    secs=${2:?seconds} dst=${3:?an output folder}
    # no batch here: this call found a fresh machine (the one with the batch went back), and
    # waiting would only spend device time
    [ -e "$batch/steps.txt" ] || { echo "no batch on this machine: it is a fresh one (the batch's went back)" >&2; exit 3; }
    SECONDS=0
    while [ ! -e "$batch/DONE" ] && [ "$SECONDS" -lt "$secs" ]; do sleep 5; done
    cat "$batch/progress.txt" 2>/dev/null
    [ -e "$batch/DONE" ] || echo "(batch still running after ${SECONDS} s)"
    # the raw logs and JSON of every step so far; big binaries stay behind
    tar czf "$dst/batch.tgz" -C "$batch" --exclude='*.bin' --exclude='lt_probe' . 2>/dev/null
    ls -la "$dst"
    ;;
*)
    echo "usage: $0 start STEPFILE | wait SECONDS OUT" >&2
    exit 2
    ;;
esac
