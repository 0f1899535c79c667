# Launching ranks, sourced by tests/run.sh (PASSED, FAILED, FAILURES): aebench --ranks N
# (which starts mpiexec itself and supervises the job), options that differ between ranks,
# sweeps under --ranks, and faults (a rank that dies ends the job, and the log says which).

RK_WORK=$(mktemp -d "${TMPDIR:-/tmp}/aebench-ranks.XXXXXX")
RK_BIN=$(realpath "$AEBENCH")
RK_MPI=$(command -v mpiexec || command -v mpirun)
RK_TINY=(--device cpu -l 2 -h 64 --heads 4 --seq 32 --vocab 512 --threads 1 -b 2 --iters 4 --log-interval 2)

rk_pass() { PASSED=$((PASSED + 1)); echo "ok   $1"; }
rk_fail() { FAILED=$((FAILED + 1)); FAILURES+=("$1"); echo "FAIL $1: $2"; }

# rk_in NAME CMD...: run CMD in $RK_WORK/NAME (its results go to results/ there); sets RK_RC.
rk_in() {
    local name=$1
    shift
    mkdir -p "$RK_WORK/$name"
    (cd "$RK_WORK/$name" && timeout 120 "$@" >out 2>err)
    RK_RC=$?
    RK_DIR="$RK_WORK/$name"
}

if needs_mpi "ranks (launch, options, faults)" "$RK_BIN"; then
    # ---- --ranks 2 starts the job itself ---------------------------------------------------
    rk_in launch "$RK_BIN" "${RK_TINY[@]}" --ranks 2 --results results
    if [ "$RK_RC" -eq 0 ] && grep -q '"world":[[:space:]]*2' "$RK_DIR"/results/*.json &&
        [ "$(grep -c '^\[Rank [01]\]' "$RK_DIR"/results/*.txt)" -eq 2 ] &&
        grep -q '"per_rank"' "$RK_DIR"/results/*.json; then
        rk_pass "--ranks 2: one job of two ranks (JSON world 2, a [Rank r] memory line each)"
    else
        rk_fail "--ranks 2" "exit $RK_RC: $(tail -c 300 "$RK_DIR/err")"
    fi

    # ---- no mpiexec --------------------------------------------------------------------------
    rk_in nompi env PATH=/nonexistent "$RK_BIN" "${RK_TINY[@]}" --ranks 2 --results results
    if [ "$RK_RC" -eq 2 ] && grep -q "needs mpiexec on the PATH" "$RK_DIR/err" && [ ! -e "$RK_DIR/results" ]; then
        rk_pass "--ranks without mpiexec: exit 2, says so, writes nothing"
    else
        rk_fail "--ranks without mpiexec" "exit $RK_RC: $(cat "$RK_DIR/err")"
    fi

    # ---- ranks given different options stop before anything is written ---------------------
    rk_in mismatch "$RK_MPI" -n 1 "$RK_BIN" "${RK_TINY[@]}" --results results : \
        -n 1 "$RK_BIN" "${RK_TINY[@]}" -l 3 --results results
    if [ "$RK_RC" -eq 2 ] && grep -q "rank 1 was given a different --layers than rank 0" "$RK_DIR/err" &&
        [ ! -e "$RK_DIR/results" ]; then
        rk_pass "ranks with different options: exit 2 naming --layers, nothing written"
    else
        rk_fail "ranks with different options" "exit $RK_RC: $(cat "$RK_DIR/err")"
    fi
    # (an engine's own option, declared in its file, is compared as the driver's are)
    rk_in mismatch-own "$RK_MPI" -n 1 "$RK_BIN" "${RK_TINY[@]}" -m zero-offload --results results : \
        -n 1 "$RK_BIN" "${RK_TINY[@]}" -m zero-offload --dpu --results results
    if [ "$RK_RC" -eq 2 ] && grep -q "rank 1 was given a different --dpu than rank 0" "$RK_DIR/err" &&
        [ ! -e "$RK_DIR/results" ]; then
        rk_pass "ranks with different engine options: exit 2 naming zero-offload's --dpu, nothing written"
    else
        rk_fail "ranks with different engine options" "exit $RK_RC: $(cat "$RK_DIR/err")"
    fi
    rk_in worldmismatch "$RK_MPI" -n 2 "$RK_BIN" "${RK_TINY[@]}" --ranks 3 --results results
    if [ "$RK_RC" -eq 2 ] && grep -q -- "--ranks 3, but mpirun started 2 ranks" "$RK_DIR/err"; then
        rk_pass "--ranks under mpirun of another size: exit 2"
    else
        rk_fail "--ranks under mpirun of another size" "exit $RK_RC: $(cat "$RK_DIR/err")"
    fi

    # ---- a refusal is said before anything starts ---------------------------------------------
    # (a refusal that depends on the world size: 6 is a multiple of 2 but not of 2 x 2)
    # An mpiexec that only leaves a mark stands in for the real one: it must not be started.
    mkdir -p "$RK_WORK/fakempi"
    printf '#!/bin/sh\ntouch "%s/fakempi/started"\nexit 1\n' "$RK_WORK" >"$RK_WORK/fakempi/mpiexec"
    chmod +x "$RK_WORK/fakempi/mpiexec"
    rk_in refuse env PATH="$RK_WORK/fakempi:$PATH" "$RK_BIN" "${RK_TINY[@]}" -b 2 --global-batch 6 \
        --ranks 2 --results results
    if [ "$RK_RC" -eq 2 ] && grep -q "global-batch 6 is not a multiple of batch x ranks = 2 x 2" "$RK_DIR/err" &&
        [ ! -e "$RK_DIR/results" ] && [ ! -e "$RK_WORK/fakempi/started" ]; then
        rk_pass "--ranks 2 with options the ranks would refuse: exit 2 before mpiexec"
    else
        rk_fail "--ranks refusal" "exit $RK_RC: $(cat "$RK_DIR/err")"
    fi

    # ---- sweeps run each child under mpiexec ---------------------------------------------------
    rk_in sweep "$RK_BIN" "${RK_TINY[@]}" -m all --ranks 2 --iters 2 --results results
    ok=1
    # (every engine -m all runs, from the registry: tests/engine_list.sh)
    # shellcheck source=tests/engine_list.sh
    source "$(dirname "${BASH_SOURCE[0]}")/engine_list.sh"
    registry_engines "$RK_BIN" || rk_fail "the registry's engines (-m all --ranks 2)" "$REG_WHY"
    for m in "${REG_IN_ALL[@]}"; do
        grep -q '"world":[[:space:]]*2' "$RK_DIR"/results/log_"$m"_*.json 2>/dev/null || ok=0
    done
    if [ "$ok" = 1 ] && [ "$RK_RC" -eq 0 ]; then
        rk_pass "-m all --ranks 2: every engine ran on 2 ranks"
    else
        rk_fail "-m all --ranks 2" "exit $RK_RC: $(grep -v '^ ' "$RK_DIR/out" | tail -n 8 | tr '\n' '|')"
    fi

    # (--cpu-mem-limit is the machine's: each rank of each probe must get half of it, 1 GiB)
    rk_in findmax "$RK_BIN" "${RK_TINY[@]}" --find-max -m megatron-lm --ranks 2 --gpu-mem-limit 6M \
        --cpu-mem-limit 2G --results results
    probes=$(ls "$RK_DIR"/results/probes/*.json 2>/dev/null | wc -l)
    two=$(grep -l '"world":[[:space:]]*2' "$RK_DIR"/results/probes/*.json 2>/dev/null | wc -l)
    halves=$(grep -A1 '"host":' "$RK_DIR"/results/probes/*.json 2>/dev/null | grep -c '"limit_bytes":[[:space:]]*1073741824')
    if [ "$RK_RC" -eq 0 ] && grep -q "find-max: largest l" "$RK_DIR/out" && [ "$probes" -ge 1 ] &&
        [ "$two" -eq "$probes" ] && [ "$halves" -eq "$probes" ]; then
        rk_pass "--find-max --ranks 2: every training probe ran on 2 ranks ($probes), each rank with half the host"
    else
        rk_fail "--find-max --ranks 2" "exit $RK_RC, $two of $probes probes on 2 ranks, $halves with 1 GiB of host: $(tail -c 300 "$RK_DIR/err")"
    fi

    # the bound is the plan of one rank of the job: ZeRO-3 shards the model state, DDP does not
    fm_bound() { # ranks stage -> the layer count the plan bound gives
        "$RK_BIN" "${RK_TINY[@]}" --find-max --dry-run -m megatron-lm --zero-stage "$2" --gpu-mem-limit 6M \
            --ranks "$1" --results "$RK_WORK/fmb" 2>/dev/null | sed -n 's/.*the plan fits up to l\([0-9]*\).*/\1/p'
    }
    z31=$(fm_bound 1 3) z32=$(fm_bound 2 3) z01=$(fm_bound 1 0) z02=$(fm_bound 2 0)
    if [ -n "$z31" ] && [ -n "$z32" ] && [ "$z32" -gt "$z31" ] && [ "$z02" = "$z01" ]; then
        rk_pass "--find-max --ranks 2 bounds by one rank's plan: ZeRO-3 l$z31 -> l$z32, DDP l$z01 -> l$z02"
    else
        rk_fail "--find-max --ranks 2 plan bound" "ZeRO-3 '$z31' -> '$z32', DDP '$z01' -> '$z02'"
    fi

    # ---- faults --------------------------------------------------------------------------------
    # (timeout 120 in rk_in: a job that did not end is exit 124, a failure)
    rk_in fault "$RK_BIN" "${RK_TINY[@]}" --iters 8 --ranks 2 --fail-at 3 --fail-rank 1 --results results
    if [ "$RK_RC" -ne 0 ] && [ "$RK_RC" -ne 124 ] &&
        grep -q "^ERROR: rank 1 killed itself (SIGKILL) at the start of iteration 3" "$RK_DIR"/results/*.txt &&
        grep -q '"status":[[:space:]]*"error"' "$RK_DIR"/results/*.json &&
        grep -q '"message":[[:space:]]*"rank 1 killed itself' "$RK_DIR"/results/*.json; then
        rk_pass "a rank killed at iteration 3 ends the job (exit $RK_RC); log and JSON name rank 1"
    else
        rk_fail "rank killed" "exit $RK_RC: $(tail -c 300 "$RK_DIR/err")"
    fi
    # ---- a hung rank: its peers' watchdogs end the job (exit 4), naming it -------------------
    # (TMPDIR of the job's own: what it leaves there is seen; the processes are found by their
    # working directory: none may be left)
    rk_left() { procs_in "$1" "$RK_BIN" | wc -l; }
    # rk_gone DIR TMP: nothing of the job left -- no process in DIR, TMP empty -- within 10 s of
    # its launcher's return (a plain mpiexec kills the other ranks after an abort without
    # waiting for them to be gone: CI once saw this check fail at once and pass when its message
    # was written); else says what was left, in RK_LEFT, and fails
    rk_gone() {
        local i
        for i in $(seq 100); do
            RK_LEFT="$(ls -A "$2") $(rk_left "$1") processes"
            [ -z "$(ls -A "$2")" ] && [ "$(rk_left "$1")" -eq 0 ] && return 0
            sleep 0.1
        done
        return 1
    }
    rk_rank_pid() { local p; for p in $(procs_in "$1" "$RK_BIN"); do
        { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -qx "PMI_RANK=$2" && { echo "$p"; return; }
    done; }
    mkdir -p "$RK_WORK/tmp_hang" "$RK_WORK/tmp_hangmpi"
    rk_in hang env TMPDIR="$RK_WORK/tmp_hang" "$RK_BIN" "${RK_TINY[@]}" --iters 8 --ranks 2 --fail-at 3 --fail-rank 1 \
        --fail-kind stop --hang-timeout 5 --results results
    RK_LEFT="not checked (an earlier condition failed)"
    if [ "$RK_RC" -eq 4 ] && grep -q "rank 1 (pid [0-9]* on [^ ]*) stopped: its heartbeat is [0-9]* s old" "$RK_DIR/err" &&
        grep -q "rank 0 on .*; busy with all-reduce (MPI_Alltoall, MPI_Allgather) #[0-9]* ([0-9.]* MB) of the gradients group, issued [0-9]* s ago, in the call" "$RK_DIR/err" &&
        [ "$(grep -c '^ERROR: rank 0 on .*: no progress for [0-9]* s (--hang-timeout 5 s)' "$RK_DIR"/results/*.txt)" -eq 1 ] &&
        python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); sys.exit(not (d["status"] == "error" and "rank 1" in d["message"] and len(d["iterations"]) == 2))' "$RK_DIR"/results/*.json &&
        rk_gone "$RK_DIR" "$RK_WORK/tmp_hang"; then
        rk_pass "a rank stopped at iteration 3 (--ranks 2): its peer's watchdog ends the job in --hang-timeout, exit 4, naming the all-reduce it is stuck in; log, JSON (2 iterations kept) name rank 1; nothing left"
    else
        rk_fail "a hung rank under --ranks" "exit $RK_RC: $(tail -c 400 "$RK_DIR/err") / left after 10 s: $RK_LEFT"
    fi
    rk_in hangmpi env TMPDIR="$RK_WORK/tmp_hangmpi" "$RK_MPI" -n 2 "$RK_BIN" "${RK_TINY[@]}" --iters 8 --fail-at 3 --fail-rank 0 \
        --fail-kind stop --hang-timeout 5 --results results
    RK_LEFT="not checked (an earlier condition failed)"
    if [ "$RK_RC" -eq 4 ] && grep -q "rank 1 on .*: no progress .*; rank 0 (pid [0-9]* on [^ ]*) stopped" "$RK_DIR/err" &&
        rk_gone "$RK_DIR" "$RK_WORK/tmp_hangmpi"; then
        rk_pass "rank 0 stopped under plain mpiexec: rank 1's watchdog names it and ends the job, exit 4; its heartbeat directory removed"
    else
        rk_fail "a hung rank 0 under mpiexec" "exit $RK_RC: $(tail -c 400 "$RK_DIR/err") / left after 10 s: $RK_LEFT"
    fi
    # a rank paused (SIGSTOP) for 3 s, well under --hang-timeout 10, then let go: no alarm; and a
    # rank killed from outside (kill -9): exit 4, the supervisor names it from its heartbeat; and
    # the same kill where the peer ends first (as UCX's abort did once in CI, seeing the victim's
    # memory gone while the victim's exit was not yet done; here rank 1 stopped, SIGABRT to rank
    # 0, then SIGKILL to rank 1): the rank killed is named, not the one that aborted
    for what in pause kill abortfirst; do
        mkdir -p "$RK_WORK/$what"
        # (1500 iterations: long enough that the pause falls inside the run on a fast machine;
        # the limit is far above their time because under a load of 20 on 2 cores, several
        # helpers' builds beside two test suites, they took over 300 s and the run was cut)
        (cd "$RK_WORK/$what" && ulimit -c 0 && timeout 1200 "$RK_BIN" "${RK_TINY[@]}" --iters 1500 --log-interval 500 --ranks 2 \
            --hang-timeout 10 --results results >out 2>err) &
        job=$!
        victim=""
        for _ in $(seq 600); do victim=$(rk_rank_pid "$RK_WORK/$what" 1); [ -n "$victim" ] && break; sleep 0.1; done
        sleep 1
        if [ "$what" = pause ]; then
            kill -STOP "$victim"; sleep 3; kill -CONT "$victim"
        elif [ "$what" = abortfirst ]; then
            # (rank 1 stopped first, so that it cannot see rank 0 gone and abort itself: its
            # end is the SIGKILL, ours or mpiexec's)
            peer=$(rk_rank_pid "$RK_WORK/$what" 0)
            kill -STOP "$victim"; kill -ABRT "$peer"; sleep 0.05; kill -KILL "$victim" 2>/dev/null
        else
            kill -KILL "$victim"
        fi
        wait "$job"
        rc=$?
        if [ "$what" = pause ] && [ -n "$victim" ] && [ "$rc" -eq 0 ] && grep -q '"status":[[:space:]]*"ok"' "$RK_WORK/pause"/results/*.json &&
            python3 -c 'import json, sys; w = json.load(open(sys.argv[1]))["watchdog"]; sys.exit(not (2.5 <= w["closest_idle_s"] < 10 and w["closest_limit_s"] == 10))' "$RK_WORK/pause"/results/*.json &&
            grep -q "^watchdog | limit at the end: 10 s (fixed) | closest call: [0-9.]* s idle of 10 s" "$RK_WORK/pause"/results/*.txt; then
            rk_pass "a rank paused for 3 s (under --hang-timeout 10) and let go: no alarm, the job ends ok; its peer's closest call (about 3 s idle of 10) in the log and JSON"
        elif [ "$what" = kill ] && [ -n "$victim" ] && [ "$rc" -eq 4 ] &&
            { grep -q "rank 1 (pid $victim on [^ ]*) was lost in the .* of iteration [0-9]* (its last heartbeat" "$RK_WORK/kill/err" ||
              grep -q "rank 0 (pid [0-9]* on [^ ]*) was lost in the .* (its last heartbeat) (rank 1 ended in the same instant: it may be the one lost)" "$RK_WORK/kill/err"; } &&
            [ "$(rk_left "$RK_WORK/kill")" -eq 0 ]; then
            # (which rank: the first to exit, from the supervisor's pidfds of the ranks; their
            # heartbeats, beaten every 250 ms, could not tell it from the one mpiexec ended next.
            # On a loaded machine both may have ended before the supervisor woke: then the line
            # says so, naming both)
            rk_pass "rank 1 killed from outside: exit 4, rank 1 named (pid, host, phase, iteration): the first rank to exit"
        elif [ "$what" = abortfirst ] && [ -n "$victim" ] && [ "$rc" -eq 4 ] &&
            grep -q "rank 1 (pid $victim on [^ ]*) was lost in the .* of iteration [0-9]* (its last heartbeat)" "$RK_WORK/$what/err" &&
            ! grep -q "rank 0 (pid [0-9]* on [^ ]*) was lost" "$RK_WORK/$what/err" && [ "$(rk_left "$RK_WORK/$what")" -eq 0 ]; then
            rk_pass "rank 0 aborted 50 ms before rank 1 was killed: rank 1 named (killed by a signal; an abort is a peer's reaction)"
        else
            rk_fail "rank 1 $what from outside" "exit $rc (victim ${victim:-not found}): $(tail -c 400 "$RK_WORK/$what/err")"
        fi
    done
    # ---- a log or JSON replaced by a link in a results directory another user can write ------
    # (issue 47: the supervisor appended its ERROR line through a symbolic link planted in the
    # log's place, and read the JSON through one.)  The results directory is the other user's
    # (nobody); once rank 0 has written its log and JSON, both ranks are stopped, that user
    # replaces them by links to files outside (a symbolic link, or root's hard link: a file
    # with two links), then rank 1 is killed: the supervisor must write through neither, say so,
    # and end with exit 4.
    for how in symlink hardlink; do
        d="$RK_WORK/planted_$how"
        mkdir -p "$d/results"
        chmod 755 "$RK_WORK" "$d"
        chown 65534:65534 "$d/results"
        printf 'root only\n' >"$d/secret.txt"
        printf '{"status": "running", "secret": "root only"}\n' >"$d/secret.json"
        chmod 600 "$d/secret.txt" "$d/secret.json"
        (cd "$d" && ulimit -c 0 && timeout 300 "$RK_BIN" "${RK_TINY[@]}" --iters 3000 --log-interval 2 --ranks 2 \
            --results results >out 2>err) &
        job=$!
        r0="" r1=""
        for _ in $(seq 600); do
            r0=$(rk_rank_pid "$d" 0) r1=$(rk_rank_pid "$d" 1)
            [ -n "$r0" ] && [ -n "$r1" ] && ls "$d"/results/*.json >/dev/null 2>&1 && break
            sleep 0.1
        done
        kill -STOP "$r0" "$r1" 2>/dev/null
        log=$(ls "$d"/results/*.txt 2>/dev/null | head -n 1) json=$(ls "$d"/results/*.json 2>/dev/null | head -n 1)
        if [ "$how" = symlink ]; then
            setpriv --reuid=65534 --regid=65534 --clear-groups ln -sfn "$d/secret.txt" "$log"
            setpriv --reuid=65534 --regid=65534 --clear-groups ln -sfn "$d/secret.json" "$json"
        else
            ln -f "$d/secret.txt" "$log"
            ln -f "$d/secret.json" "$json"
        fi
        kill -KILL "$r1" 2>/dev/null; sleep 0.2; kill -KILL "$r0" 2>/dev/null
        wait "$job"
        rc=$?
        if [ -n "$r1" ] && [ -n "$log" ] && [ "$rc" -eq 4 ] && [ "$(cat "$d/secret.txt")" = "root only" ] &&
            [ "$(cat "$d/secret.json")" = '{"status": "running", "secret": "root only"}' ] &&
            grep -q "^aebench: results/${log##*/} was replaced since rank 0 wrote it (.*): not written$" "$d/err" &&
            ! grep -q "root only" "$d"/results/*.json && grep -q '"status":[[:space:]]*"error"' "$json"; then
            rk_pass "the log and JSON replaced by $how""s to files outside while the job ran: exit 4, neither written through, the log's replacement said"
        else
            rk_fail "the log and JSON replaced by $how""s" "exit $rc (ranks ${r0:-?} ${r1:-?}, log ${log:-none}): secret.txt '$(cat "$d/secret.txt")', secret.json '$(cat "$d/secret.json")'; $(tail -c 400 "$d/err")"
        fi
    done

    # ---- a rank interrupted in its first moments is a rank lost, never bad input ------------
    # (issue 47: MPICH's mpiexec exits with its ranks' statuses ORed, so a rank's SIGINT read as
    # exit 2, the code of a refused configuration.)  SIGINT to rank 1 as soon as it is seen.
    bad=""
    for trial in 1 2 3; do
        d="$RK_WORK/early_int_$trial"
        mkdir -p "$d"
        (cd "$d" && timeout 120 "$RK_BIN" "${RK_TINY[@]}" --iters 2000 --ranks 2 --results results >out 2>err) &
        job=$!
        victim=""
        for _ in $(seq 3000); do victim=$(rk_rank_pid "$d" 1); [ -n "$victim" ] && break; sleep 0.01; done
        kill -INT "$victim" 2>/dev/null
        wait "$job"
        rc=$?
        # (the line names SIGINT; or, when rank 1 was lost before MPI's start-up and Hydra failed
        # itself — exit 255, or killed by SIGPIPE — before any status of it was known, it says so)
        if [ -z "$victim" ] || [ "$rc" -ne 4 ] ||
            ! grep -Eq "^aebench: --ranks 2: (.*SIGINT|mpiexec exit 255: it failed itself|the job \(mpiexec\) was killed by SIGPIPE$)" "$d/err"; then
            bad="$bad trial $trial: exit $rc (rank 1 ${victim:-not found}): $(grep '^aebench: --ranks' "$d/err" | tail -c 300);"
        fi
    done
    if [ -z "$bad" ]; then
        rk_pass "SIGINT to rank 1 as it starts (3 trials): exit 4, the supervisor's line names SIGINT (never exit 2)"
    else
        rk_fail "SIGINT to a rank as it starts" "$bad"
    fi

    # ---- TMPDIR, where the job's private directory goes, missing -------------------------------
    rk_in tmpdir env TMPDIR="$RK_WORK/no-such-dir" "$RK_BIN" "${RK_TINY[@]}" --ranks 2 --results results
    if [ "$RK_RC" -eq 2 ] && [ "$(wc -l <"$RK_DIR/err")" -eq 1 ] &&
        grep -q "^aebench: --ranks: the job's private directory goes in $RK_WORK/no-such-dir (TMPDIR), which does not exist$" "$RK_DIR/err" &&
        [ ! -e "$RK_DIR/results" ]; then
        rk_pass "--ranks 2 with TMPDIR naming a missing directory: exit 2, one line naming it and TMPDIR, nothing written"
    else
        rk_fail "--ranks 2 with TMPDIR missing" "exit $RK_RC: $(cat "$RK_DIR/err"); results: $(ls "$RK_DIR/results" 2>&1 | head -2)"
    fi

    # ---- a configuration the ranks refuse leaves nothing: not even the results directory -----
    # (the supervisor checks that the results directory can be made, but leaves making it to
    # rank 0: the fuzz campaign found an empty directory left by a refused --data)
    rk_in data-refused bash -c 'printf abc >odd.bin && exec "$@"' _ "$RK_BIN" "${RK_TINY[@]}" --ranks 2 --data odd.bin \
        --results results/deeper
    if [ "$RK_RC" -eq 2 ] && [ "$(wc -l <"$RK_DIR/err")" -eq 1 ] && grep -q 'odd size (3 bytes)' "$RK_DIR/err" &&
        [ ! -e "$RK_DIR/results" ]; then
        rk_pass "--ranks 2 with a --data file the ranks refuse: exit 2, one line, no results directory made"
    else
        rk_fail "--ranks 2 with a refused --data" "exit $RK_RC: $(head -c 300 "$RK_DIR/err"); results: $(ls -R "$RK_DIR/results" 2>&1 | head -3)"
    fi

    rk_in oom "$RK_BIN" "${RK_TINY[@]}" --ranks 2 --gpu-mem-limit 1M --results results
    if [ "$RK_RC" -eq 3 ] && grep -q '"status":[[:space:]]*"oom"' "$RK_DIR"/results/*.json; then
        rk_pass "out of memory on 2 ranks: reported (exit 3), no rank left waiting"
    else
        rk_fail "out of memory on 2 ranks" "exit $RK_RC: $(tail -c 300 "$RK_DIR/err")"
    fi
fi

# ---- what a build cannot honour it refuses ---------------------------------------------------
# A build without MPI (make test builds aebench-nompi beside aebench; make check-asan's is one)
# asked for ranks — by --ranks, or started by a launcher as one of several — says so in one
# line and exits 2 before it writes anything: otherwise each process would train alone.
rk_refused() { # WHAT PATTERN LINES (the lines stderr must have): RK_RC, RK_DIR from rk_in
    if [ "$RK_RC" -eq 2 ] && [ "$(wc -l <"$RK_DIR/err")" -eq "$3" ] && { [ "$3" -eq 0 ] || grep -q -- "$2" "$RK_DIR/err"; } &&
        [ ! -s "$RK_DIR/out" ] && [ ! -e "$RK_DIR/results" ]; then
        rk_pass "$1"
    else
        rk_fail "$1" "exit $RK_RC, $(wc -l <"$RK_DIR/err") lines: $(head -c 300 "$RK_DIR/err"); results/: $(ls "$RK_DIR/results" 2>&1 | head -3)"
    fi
}
RK_NOMPI=$AEBENCH_NOMPI
"$RK_BIN" --version | grep -q "built without MPI" && RK_NOMPI=$RK_BIN
if ! "$RK_NOMPI" --version 2>/dev/null | grep -q "built without MPI"; then
    rk_fail "refusals of a build without MPI" "no such build at $RK_NOMPI (make test builds aebench-nompi)"
else
    RK_NOMPI=$(realpath "$RK_NOMPI")
    rk_in nompi_ranks "$RK_NOMPI" "${RK_TINY[@]}" --ranks 2 --results results
    rk_refused "a build without MPI refuses --ranks 2 (one line, exit 2, nothing written)" "--ranks 2 needs MPI" 1
    rk_in nompi_mpich env PMI_SIZE=3 PMI_RANK=0 "$RK_NOMPI" "${RK_TINY[@]}" --results results
    rk_refused "a build without MPI started as rank 0 of 3 by MPICH's or Intel MPI's mpiexec (PMI_SIZE) refuses" \
        "started as one of 3 ranks, but this aebench was built without MPI" 1
    rk_in nompi_ompi1 env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 "$RK_NOMPI" "${RK_TINY[@]}" --results results
    rk_refused "... and as rank 1 of 2 under Open MPI's mpirun: exit 2, silently (rank 0 says it)" "" 0
    if [ -n "$RK_MPI" ]; then
        rk_in nompi_launched "$RK_MPI" -np 2 "$RK_NOMPI" "${RK_TINY[@]}" --results results
        rk_refused "mpiexec -np 2 of a build without MPI: one line for the job, exit 2, no results" \
            "started as one of 2 ranks, but this aebench was built without MPI" 1
    fi
    # (--dry-run and --predict only say what N ranks would take: allowed)
    rk_in nompi_dry "$RK_NOMPI" "${RK_TINY[@]}" --ranks 2 --dry-run
    if [ "$RK_RC" -eq 0 ] && grep -q "^plan: " "$RK_DIR/out"; then
        rk_pass "a build without MPI still plans --ranks 2 --dry-run"
    else
        rk_fail "--ranks 2 --dry-run without MPI" "exit $RK_RC: $(tail -c 300 "$RK_DIR/err")"
    fi
fi
# An MPI build started by another MPI's launcher is a world of one in every process: refused.
if "$RK_BIN" --version | grep -q "ranks: mpi"; then
    rk_in foreign env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 "$RK_BIN" "${RK_TINY[@]}" --results results
    rk_refused "an MPI build under another MPI's launcher (Open MPI's environment, MPICH's library) refuses" \
        "the launcher is not of the MPI aebench was built with" 1
fi
rm -rf "$RK_WORK"
