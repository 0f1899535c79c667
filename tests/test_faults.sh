# A seeded fault campaign on the CPU backend, sourced by tests/run.sh (PASSED, FAILED,
# FAILURES): each trial starts a job (2 or 3 ranks under --ranks, a sweep, a --find-max), hits
# one of its processes — a rank, the supervisor, mpiexec, the sweep or --find-max parent — with
# KILL, STOP, TERM or INT at a moment drawn from the seed (a rank: also at an engine's own
# forward, backward or checkpoint point, --fail-at), and checks that
#   - the job ends (a hang is the watchdog's, --hang-timeout; the outer limit, 300 s, only catches
#     what no watchdog ended: a job that progresses slowly on a loaded machine is no hang) with
#     the exit code of the table (README);
#   - no process of it is left, and nothing in its TMPDIR or gemini store (a store or notes
#     directory a killed supervisor leaves must be named by the next start);
#   - a sweep resumed with --resume has each run ok exactly once;
#   - a gemini job that recovered ends with the final parameters of an uninterrupted run.
# A STOP of a parent (supervisor, mpiexec, sweep) is a pause: it is let go after 2 s and the
# job must end ok.  FAULT_SEED and FAULT_TRIALS choose the campaign (default: 40 trials).
# Ends with one line: trials, faults by kind, worst time to end, orphans, recoveries.

FT_WORK=$(mktemp -d "${TMPDIR:-/tmp}/aebench-faults.XXXXXX")
FT_BIN=$(realpath "$AEBENCH")
FT_SEED=${FAULT_SEED:-20261126}
FT_TRIALS=${FAULT_TRIALS:-40}
FT_HANG=5
FT_SHAPE=(--device cpu -l 2 -h 64 --heads 4 --seq 32 --vocab 512 --threads 1 -b 2 --lr 1e-3
          --lr-warmup-fraction 0.001 --lr-decay-iters 1000 --hang-timeout "$FT_HANG")
# (iterations: 3 ranks on 2 cores run 10-30 times slower than 2, MPI polling oversubscribed)
ft_iters() { [ "$1" -eq 2 ] && echo 600 || echo 40; }
# (gemini's group placement wants groups of --gemini-replicas 2: 3 ranks take the ring)
ft_place() { [ "$1" -eq 2 ] && echo group || echo ring; }

ft_pass() { PASSED=$((PASSED + 1)); echo "ok   $1"; }
ft_fail() { FAILED=$((FAILED + 1)); FAILURES+=("$1"); echo "FAIL $1: $2"; }

# The processes of a trial: every one whose working directory is the trial's.
ft_procs() { procs_in "$1" "$FT_BIN|mpiexec|hydra_pmi_proxy"; }
# The pid of the trial's process of a kind: rank R (PMI_RANK), the supervisor, mpiexec, the parent.
ft_find() { local dir=$1 what=$2 p
    for p in $(ft_procs "$dir"); do
        local cmd env
        cmd=$({ tr '\0' ' ' <"/proc/$p/cmdline"; } 2>/dev/null)
        env=$({ tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null)
        case $what in
            rank*) grep -qx "PMI_RANK=${what#rank}" <<<"$env" && { echo "$p"; return; } ;;
            mpiexec) [[ $cmd == *mpiexec* ]] && { echo "$p"; return; } ;;
            parent) [[ $cmd == "$FT_BIN"* ]] && [[ $cmd != *" --report-fd "* ]] && ! grep -q "^PMI_RANK=" <<<"$env" &&
                    { echo "$p"; return; } ;;
        esac
    done
}

# Uninterrupted gemini runs, one per world: what a recovered job must end with.
ft_gemini=(-m gemini --gemini-mode naive --log-interval 20)
for world in 2 3; do
    mkdir -p "$FT_WORK/ref$world/shm"
    (cd "$FT_WORK/ref$world" && timeout 300 "$FT_BIN" "${FT_SHAPE[@]}" "${ft_gemini[@]}" --iters "$(ft_iters "$world")" --ranks "$world" \
        --gemini-placement "$(ft_place "$world")" \
        --gemini-store shm --results results --save-params "$FT_WORK/ref$world.params" >out 2>err)
    [ -s "$FT_WORK/ref$world.params" ] || ft_fail "fault campaign reference at $world ranks" "$(tail -c 300 "$FT_WORK/ref$world/err")"
done

RANDOM=$FT_SEED
# (the engines drawn from: every one -m all runs, from the registry (tests/engine_list.sh), and
# gemini every third trial)
# shellcheck source=tests/engine_list.sh
source "$(dirname "${BASH_SOURCE[0]}")/engine_list.sh"
registry_engines "$FT_BIN" || ft_fail "the registry's engines (fault campaign)" "$REG_WHY"
ft_engines=("${REG_IN_ALL[@]}")
[ "${#ft_engines[@]}" -gt 0 ] || FT_TRIALS=0  # (no engine to draw: the failure above says why)
ft_victims=(rank rank supervisor mpiexec sweep findmax)
ft_signals=(KILL STOP TERM INT)
ft_phases=(forward backward checkpoint)
declare -A ft_kinds=()
ft_worst=0 ft_orphans=0 ft_recovered=0 ft_bad=0
for trial in $(seq "$FT_TRIALS"); do
    world=$((2 + RANDOM % 2))
    victim=${ft_victims[RANDOM % ${#ft_victims[@]}]}
    sig=${ft_signals[RANDOM % 4]}
    engine=${ft_engines[RANDOM % ${#ft_engines[@]}]}
    [ $((trial % 3)) -eq 0 ] && [[ $victim != sweep && $victim != findmax ]] && engine=gemini
    delay=$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.3 + 1.5 * r / 32768 }')
    # a rank: at a drawn moment, or (KILL, STOP) at an engine's own fault point
    inject=()
    if [ "$victim" = rank ] && [[ $sig == KILL || $sig == STOP ]] && [ $((RANDOM % 2)) -eq 0 ]; then
        phase=${ft_phases[RANDOM % 3]}
        [ "$engine" != gemini ] && [ "$phase" = checkpoint ] && phase=forward
        [[ $engine != gemini && $engine != megatron-lm ]] && [ "$phase" = backward ] && phase=forward
        at=$((2 + RANDOM % 30))
        inject=(--fail-at "$at" --fail-rank $((RANDOM % world)) --fail-phase "$phase"
                --fail-kind "$([ "$sig" = KILL ] && echo software || echo stop)")
        delay=""
    fi
    # (--find-max probes a few iterations of each size: it is over in a second or two)
    [ "$victim" = findmax ] && delay=$(awk -v d="$delay" 'BEGIN { printf "%.2f", d / 3 }')
    dir="$FT_WORK/t$trial"
    mkdir -p "$dir/tmp" "$dir/shm"
    case $victim in
        sweep) cmd=("$FT_BIN" "${FT_SHAPE[@]}" -m all --iters 120 --log-interval 60) ;;
        findmax) cmd=("$FT_BIN" "${FT_SHAPE[@]}" --find-max -m megatron-lm --iters 500 --log-interval 250 --gpu-mem-limit 128M) ;;
        *) if [ "$engine" = gemini ]; then
               cmd=("$FT_BIN" "${FT_SHAPE[@]}" "${ft_gemini[@]}" --iters "$(ft_iters "$world")" --ranks "$world"
                    --gemini-placement "$(ft_place "$world")" --gemini-store shm --save-params "$dir/params")
           else
               cmd=("$FT_BIN" "${FT_SHAPE[@]}" -m "$engine" --iters "$(ft_iters "$world")" --log-interval 20 --ranks "$world")
           fi ;;
    esac
    hit_at=""
    what="$victim $sig${inject:+ at ${inject[5]} of iteration ${inject[1]}} ($engine, $world ranks)"
    [[ $victim == sweep || $victim == findmax ]] && what="$victim $sig"
    start=$(date +%s.%N)
    (cd "$dir" && TMPDIR="$dir/tmp" exec timeout $((FT_HANG + 295)) "${cmd[@]}" "${inject[@]}" --results results >out 2>err) &
    job=$!
    pid="" notes=""
    if [ -n "$delay" ]; then
        sleep "$delay"
        case $victim in
            rank) pid=$(ft_find "$dir" "rank$((RANDOM % world))") ;;
            supervisor | sweep | findmax) pid=$(ft_find "$dir" parent) ;;
            mpiexec) pid=$(ft_find "$dir" mpiexec) ;;
        esac
        # (when it was hit, and whether it was there to be hit: a process gone in the meantime
        # was not, and the job must then end as if untouched)
        hit_at=$(date +%s.%N)
        # (a rank hit before the job's start-up was over — its ranks still in MPI's start-up,
        # none has noted "started" in the job's directory — ends by the start-up deadline,
        # exit 1, not as a rank lost: which it was is read from that directory after the hit)
        notes=""
        [ "$victim" = rank ] && [ -n "$pid" ] &&
            notes=$({ tr '\0' '\n' <"/proc/$pid/cmdline"; } 2>/dev/null | sed -n '/^--job-notes$/{n;p;q}')
        if [ -n "$pid" ]; then
            if [ "$sig" = STOP ] && [ "$victim" != rank ]; then
                kill -STOP "$pid" 2>/dev/null; sleep 2; kill -CONT "$pid" 2>/dev/null
            else
                kill -"$sig" "$pid" 2>/dev/null || pid=""
            fi
        fi
    fi
    early=no
    [ -n "$notes" ] && [ -n "$pid" ] && [ ! -e "$notes/started" ] && early=yes
    { wait "$job"; } 2>/dev/null
    rc=$?
    took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    # (a killed parent's children end on their own: give them a moment)
    for _ in $(seq 100); do [ -z "$(ft_procs "$dir")" ] && break; sleep 0.1; done
    left=$(ft_procs "$dir" | wc -l)
    ft_orphans=$((ft_orphans + left))
    ft_worst=$(awk -v a="$ft_worst" -v b="$took" 'BEGIN { print (b > a ? b : a) }')
    fault=yes
    [ -z "$delay" ] || [ -n "$pid" ] || fault=no
    ft_kinds["$victim $sig"]=$((${ft_kinds["$victim $sig"]:-0} + 1))
    # what the table says this ends with
    sigcode=$(( 128 + $(kill -l "$sig") ))
    # A hit that came after the job's record was final (rank 0's JSON says ok and was written
    # before the hit: the rank or launcher hit was on its way out) may legitimately end ok; one
    # before it may not.  Said by the JSON's own time, not by how fast the machine was.
    late=no
    if [ -n "$hit_at" ] && [ -n "$pid" ]; then
        for j in "$dir"/results/*.json; do
            [ -f "$j" ] || continue
            python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1])).get("status") != "ok")' "$j" 2>/dev/null &&
                awk -v a="$(date -r "$j" +%s.%N)" -v b="$hit_at" 'BEGIN { exit !(a <= b) }' && late=yes
        done
    fi
    bad=""
    if [ "$rc" -eq 124 ]; then
        bad="did not end within 300 s (its last lines: $(grep -o "iter *[0-9]*/[0-9]*" "$dir/out" | tail -n 1))"
    elif [ "$fault" = no ]; then
        [ "$rc" -eq 0 ] || bad="no process to hit, yet exit $rc"
    elif [ "$sig" = STOP ] && [ "$victim" != rank ]; then
        [ "$rc" -eq 0 ] || bad="paused 2 s, then exit $rc (want 0)"
    else
        case $victim in
            rank | mpiexec)
                if [ "$engine" = gemini ] && [ "$rc" -eq 0 ]; then
                    if cmp -s "$dir/params" "$FT_WORK/ref$world.params"; then ft_recovered=$((ft_recovered + 1))
                    else bad="recovered, but its final parameters differ from an uninterrupted run's"; fi
                elif [ "$engine" = gemini ] && [ "$rc" -eq 4 ]; then
                    grep -q "not relaunched\|relaunching job" "$dir/err" || bad="exit 4 without a relaunch or its reason"
                elif [ "$rc" -eq 0 ] && [ "$late" = yes ]; then
                    what="$what (after the job's record was final)"
                elif [ "$rc" -eq 1 ] && [ "$early" = yes ] && grep -q "no rank got past MPI's start-up" "$dir/err"; then
                    what="$what (before the job's start-up was over)"
                elif [ "$rc" -ne 4 ]; then
                    bad="exit $rc (want 4${late:+; the record final before the hit: $late})"
                elif ! grep -q "^aebench: --ranks $world: " "$dir/err"; then
                    bad="exit 4 without the supervisor's reason"
                fi ;;
            supervisor | sweep | findmax)
                # the killed process's own status is the signal's; TERM and INT are passed on
                [ "$rc" -eq "$sigcode" ] || bad="exit $rc (want $sigcode)" ;;
        esac
    fi
    [ "$left" -eq 0 ] || bad="$bad; $left processes left"
    # what it leaves: nothing, but what a killed supervisor could not remove, named at the next start
    leftover=$(ls -A "$dir/tmp" "$dir/shm" 2>/dev/null | grep -v ':$' | grep -v '^$')
    if [ -n "$leftover" ]; then
        if [ "$sig" = KILL ] && [[ $victim == supervisor || $victim == sweep ]]; then
            (cd "$dir" && TMPDIR="$dir/tmp" timeout 120 "$FT_BIN" "${FT_SHAPE[@]}" --iters 2 --ranks 2 -m gemini \
                --gemini-store shm --results again >again.out 2>again.err)
            for l in $(ls -A "$dir/tmp"); do
                grep -q "$l is a stale directory" "$dir/again.err" || bad="$bad; $l left and not named"
            done
            for l in $(ls -A "$dir/shm"); do
                grep -q "stale store of job" "$dir/again.out" || bad="$bad; store $l left and not named"
            done
        else
            bad="$bad; left: $(tr '\n' ' ' <<<"$leftover")"
        fi
    fi
    # a sweep hit: --resume finishes it, each run ok exactly once
    if [ "$victim" = sweep ] && [ "$fault" = yes ] && [ "$sig" != STOP ]; then
        (cd "$dir" && TMPDIR="$dir/tmp" timeout 300 "${cmd[@]}" --resume --results results >resume.out 2>resume.err)
        rrc=$?
        runs=$(python3 - "$dir/results" <<'PY'
import collections, glob, json, sys
ok = collections.Counter()
for f in glob.glob(sys.argv[1] + "/log_*.json"):
    try:
        d = json.load(open(f))
    except Exception:
        continue
    if d.get("status") == "ok":
        ok[d["method"]] += 1
print(" ".join(f"{k}:{v}" for k, v in sorted(ok.items())) if len(ok) == 5 and set(ok.values()) == {1} else f"bad {dict(ok)}")
PY
)
        [ "$rrc" -eq 0 ] && [[ $runs != bad* ]] || bad="$bad; --resume: exit $rrc, runs ok: $runs"
    fi
    if [ -n "$bad" ]; then
        ft_bad=$((ft_bad + 1))
        ft_fail "fault trial $trial: $what after ${delay:-its fault point} s" "${bad#; } ($(tail -c 300 "$dir/err" | tr '\n' ' '))"
    else
        echo "     trial $trial: $what${delay:+ after $delay s}: exit $rc in $took s${pid:+ (pid $pid)}"
        rm -rf "$dir"
    fi
done
kinds=$(for k in "${!ft_kinds[@]}"; do echo "$k ${ft_kinds[$k]}"; done | sort | awk '{printf "%s%s %s %s", sep, $1, $2, $3; sep=", "}')
summary="fault campaign (seed $FT_SEED): $FT_TRIALS trials ($kinds); worst time to end ${ft_worst} s (--hang-timeout $FT_HANG); orphans $ft_orphans; gemini recoveries bit for bit $ft_recovered; trials failed $ft_bad"
if [ "$ft_bad" -eq 0 ] && [ "$ft_orphans" -eq 0 ]; then
    ft_pass "$summary"
else
    echo "     $summary"
fi
rm -rf "$FT_WORK"
