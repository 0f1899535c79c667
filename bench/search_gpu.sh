#!/usr/bin/env bash
# aebench --search on one GPU (issue 31), proved by training: calibrate the machine at h2048
# heads16 s1024 TF32 at every micro-batch of a global batch of 4 (b 1, 2, 4), then for each
# model searched (a line of MODELS: a name, then its options) the search's top configurations
# and as many random feasible ones trained (--verify K, ITERS iterations each), predicted
# against measured, Kendall's tau, and the search's pick against the best that trained; and
# --largest against each engine's --predict --find-max (the plan bound --find-max starts
# from) under the same budgets.
#   bash bench/search_gpu.sh "$OUT" [MODEL ...]   VERIFY (default 5), ITERS (default 6)
# RANKS=N (the N-GPU machines): built with MPI and NCCL (bench/dp_env.sh), a global batch of
# 4 per rank, the collectives calibrated at N ranks, every search and run on N ranks.
# A MODEL is "name options", e.g. "l32 -l 32" or "v100x2 -l 80 --gpu-mem-limit 32G
# --cpu-mem-limit 90G".  The machine file is kept in /tmp/aebench-search (a later call on the
# same warm machine calibrates nothing again) and comes back with the summary.
# (SHAPE and BUILD_CMD override the shape's options and the build: a trial of the script on
# the CPU backend, SHAPE="--device cpu -h 64 --heads 4 --seq 32 --vocab 512" BUILD_CMD=make.)
set -uo pipefail
dest=${1:-bench/results/latest}
shift || true
models=("$@")
[ ${#models[@]} -gt 0 ] || models=("l32 -l 32")
work=/tmp/aebench-search
ranks=${RANKS:-1}
mkdir -p "$work" "$dest"
if [ "$ranks" -gt 1 ]; then
    source bench/dp_env.sh # (builds aebench with MPI and NCCL into a fresh $out, sets $t0)
    work=$out
else
    source bench/deps_env.sh
fi
finish() {
    cp "$work"/summary.md "$work"/res/machine_*.json "$dest"/ 2>/dev/null
    tar czf "$dest/bench.tgz" -C "$work" --exclude='*.bin' . 2>/dev/null
}
trap finish EXIT
machine_info | tee -a "$work/device.txt"
if [ "$ranks" -le 1 ]; then
    t0=$(date +%s)
    ${BUILD_CMD:-make -j16 CUDA=1 MPI=0 aebench} >"$work/build.txt" 2>&1 || { tail -n 30 "$work/build.txt"; exit 1; }
    echo "build: $(($(date +%s) - t0)) s"
fi
# (N ranks: a global batch of 4 per rank, so the micro-batches are 1, 2, 4 there too)
read -r -a shape <<<"${SHAPE:---device cuda -h 2048} --global-batch $((4 * ranks))"
# A machine calibrated by an earlier call on the same (still warm) machine is not calibrated
# again: its file is kept in $cal_cache, one per ranks and shape (a file calibrated at h2048
# predicts nothing at h4096).
cal_cache=/tmp/aebench-search-cal-$ranks-$(printf '%s' "${shape[*]} ${models[0]}" | md5sum | cut -c1-12)
mkdir -p "$work/res"
if ls "$cal_cache"/machine_*.json >/dev/null 2>&1; then
    cp "$cal_cache"/machine_*.json "$work/res"/
    echo "calibration: reused $(ls "$cal_cache"/machine_*.json)" | tee -a "$work/calibrate.txt"
    skip_cal=1
else
    skip_cal=0
fi
# The host Adam is timed swept over the shard of the model --calibrate is given (its -l): the
# first model's layers, not the default 16 (until 2026-11-30f this passed none, and the l48
# calls swept 1,678 M parameters a rank where the runs' shard was 4,938 M).
cal_layers=()
read -r _ first_opts <<<"${models[0]}"
read -r -a fo <<<"$first_opts"
for ((i = 0; i + 1 < ${#fo[@]}; i++)); do
    case "${fo[$i]}" in -l | --layers) cal_layers=(-l "${fo[$((i + 1))]}") ;; esac
done
# (one call: --calibrate measures every micro-batch of the global batch, b 1, 2, 4)
[ "$skip_cal" = 1 ] || ./aebench --calibrate "${shape[@]}" "${cal_layers[@]}" --results "$work/res" >>"$work/calibrate.txt" 2>&1 ||
    { tail -n 5 "$work/calibrate.txt"; exit 1; }
if [ "$ranks" -gt 1 ] && [ "$skip_cal" = 0 ]; then
    # the collectives at that world, and each rank's rates with every rank at work
    ./aebench --calibrate --ranks "$ranks" "${shape[@]}" "${cal_layers[@]}" --results "$work/res" >>"$work/calibrate.txt" 2>&1 ||
        { tail -n 5 "$work/calibrate.txt"; exit 1; }
fi
[ "$ranks" -gt 1 ] && shape+=(--ranks "$ranks")
mkdir -p "$cal_cache" && cp "$work"/res/machine_*.json "$cal_cache"/
echo "calibrated: $(($(date +%s) - t0)) s"
for model in "${models[@]}"; do
    read -r name opts <<<"$model"
    read -r -a o <<<"$opts"
    echo "== $name: ${opts}"
    # --largest at this model's budgets, beside each engine's --predict --find-max there
    lopts=()
    for ((i = 0; i < ${#o[@]}; i++)); do
        case "${o[$i]}" in -l | --layers) i=$((i + 1)) ;; *) lopts+=("${o[$i]}") ;; esac
    done
    if [ -z "${SKIP_LARGEST:-}" ]; then # (SKIP_LARGEST=1: the search and its verification alone)
    ./aebench --search --largest "${shape[@]}" "${lopts[@]}" --results "$work/res" --top 3 >"$work/$name.largest.txt" 2>&1
    grep -E "^search: (the largest|largest)" "$work/$name.largest.txt"
    for e in megatron-lm l2l zero-offload zero-infinity stronghold; do
        ./aebench --predict --find-max -m $e "${shape[@]}" -b 4 "${lopts[@]}" --results "$work/res" 2>&1 | grep "^find-max" 
    done >"$work/$name.findmax.txt"
    cat "$work/$name.findmax.txt"
    # the same question with every knob at --find-max's (its defaults, -b 4): the same answer
    for e in "megatron-lm" "l2l --clip-speculate auto" "zero-offload" "zero-infinity --offload cpu --clip-speculate auto" \
        "stronghold -w auto --placement auto --offload cpu --clip-speculate auto"; do
        ./aebench --search --largest -m $e "${shape[@]}" -b 4 "${lopts[@]}" --results "$work/res" --top 1 2>&1 |
            grep -oE "^search: the largest -l each engine's plan fits in the budgets: .*" | sed 's/.*budgets: /search -b 4: /'
    done | tee "$work/$name.largest_b4.txt"
    fi
    # LARGEST_TRAIN="OPTIONS": --largest again with those options fixed (e.g. "--offload cpu",
    # where the disk tier is not calibrated), and its pick trained 3 iterations: the size it
    # answers trains, with the peak memory against the plan.
    if [ -n "${LARGEST_TRAIN:-}" ]; then
        read -r -a lt <<<"$LARGEST_TRAIN"
        ./aebench --search --largest "${shape[@]}" "${lopts[@]}" "${lt[@]}" --results "$work/res" --top 1 \
            >"$work/$name.largest_train.txt" 2>&1
        grep -E "^search: (the largest|largest)" "$work/$name.largest_train.txt"
        cmd=$(grep -E "^ +1 +[0-9]" "$work/$name.largest_train.txt" | grep -oE "aebench .*" | head -n 1)
        if [ -n "$cmd" ]; then
            read -r -a c <<<"${cmd#aebench }"
            echo "largest pick: $cmd" | tee -a "$work/$name.largest_train.txt"
            SECONDS=0
            timeout "${LARGEST_TIMEOUT:-240}" ./aebench "${c[@]}" --iters 3 --log-interval 1 >>"$work/$name.largest_train.txt" 2>&1
            echo "largest pick trained: exit $? in ${SECONDS} s" | tee -a "$work/$name.largest_train.txt"
            grep -E "^ *(plan:|stronghold plan|done:|setup|ERROR)|iter +3/|OUT OF|out of" "$work/$name.largest_train.txt" | cut -c1-240
        fi
    fi
    SECONDS=0
    # SEARCH_DEADLINE (seconds since the epoch): the search stops there, whatever the
    # calibration took, and leaves the tables below their time; else SEARCH_TIMEOUT seconds
    search_s=${SEARCH_TIMEOUT:-520}
    [ -n "${SEARCH_DEADLINE:-}" ] && search_s=$((SEARCH_DEADLINE - $(date +%s)))
    [ "$search_s" -gt 30 ] || { echo "== $name: no time left for the search (${search_s} s)"; continue; }
    timeout "$search_s" ./aebench --search "${shape[@]}" "${o[@]}" --results "$work/res" --iters "${ITERS:-6}" \
        --log-interval "${ITERS:-6}" --verify "${VERIFY:-5}" --top "${VERIFY:-5}" >"$work/$name.search.txt" 2>&1
    echo "exit $? in ${SECONDS} s"
    grep -vE "^verify [0-9]+/" "$work/$name.search.txt" | cut -c1-260
    # cut short by the call's time (no JSON written): the table of what trained, from the runs'
    # logs, each predicted again by this tree (bench/verify_from_logs.py)
    if ! grep -q "^search: wrote " "$work/$name.search.txt" && grep -q "^verify 1/" "$work/$name.search.txt"; then
        python3 bench/verify_from_logs.py "$work/$name.search.txt" "$work/res" "$(ls "$work"/res/machine_*.json | head -n 1)" \
            "$work/$name.trained.json" >"$work/$name.verify_from_logs.md" 2>&1
        tail -n 1 "$work/$name.verify_from_logs.md"
        cp "$work/$name.verify_from_logs.md" "$work/$name.trained.json" "$dest"/ 2>/dev/null
    fi
done
# every trained run's busy times, predicted against measured (bench/busy_from_logs.py): which
# resource a configuration's error comes from
if ls "$work"/res/machine_*.json >/dev/null 2>&1; then
    python3 bench/busy_from_logs.py "$(ls "$work"/res/machine_*.json | head -n 1)" "$work/res" >"$work/busy.md" 2>&1
    tail -n 1 "$work/busy.md"
    cp "$work/busy.md" "$dest"/ 2>/dev/null
fi
# the summary: each model's verify table from its JSON
python3 - "$work" "${models[@]}" >"$work/summary.md" <<'PY'
import glob, json, os, sys
work, models = sys.argv[1], sys.argv[2:]
print("| model | options | considered | predicted | pick | pick measured ms | best measured ms (rank) | pick lost | tau | trained |"
      " errors (within 10%) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for m in models:
    name, _, opts = m.partition(" ")
    txt = open(os.path.join(work, name + ".search.txt")).read()
    # (a search stopped midway: the record it rewrote after each run, "search: writing PATH (...)")
    path = [l.split()[-1] for l in txt.splitlines() if l.startswith("search: wrote ")] or \
           [l.split()[2] for l in txt.splitlines() if l.startswith("search: writing ")]
    if not path:
        print(f"| {name} | {opts} | no result |"); continue
    d = json.load(open(path[-1]))
    c, v, s = d["counts"], d.get("verify", []), d.get("verify_summary", {})
    ok = [x for x in v if x.get("measured_ms")]
    best = min(ok, key=lambda x: x["measured_ms"]) if ok else None
    pick = d["configs"][0]["command"].split(" -m ")[1] if d["configs"] else "-"
    pm = next((x["measured_ms"] for x in v if x["rank"] == 1 and x.get("measured_ms")), None)
    f1 = lambda x: f"{x:.1f}" if isinstance(x, (int, float)) else str(x)
    errs = [(x["predicted_ms"] / x["measured_ms"] - 1) * 100 for x in ok]
    err = f"{min(errs):+.1f}% to {max(errs):+.1f}% ({sum(abs(e) <= 10 for e in errs)} of {len(errs)})" if errs else "-"
    print(f"| {name} | {opts} | {c['considered']} | {c['predicted']} | -m {pick} | {f1(pm) if pm else '-'} | "
          f"{f1(best['measured_ms']) if best else '-'} (#{best['rank'] if best else '-'}) | "
          f"{s.get('pick_loss_pct', float('nan')):.1f}% | {s.get('kendall_tau', float('nan')):.2f} | {len(ok)}/{len(v)}"
          f"{'' if s.get('complete', True) else ' (stopped)'} | {err} |")
    for x in v:
        cfg = d["configs"][x["rank"] - 1]
        why = x.get("picked", "random" if x["random"] else "top")  # (older JSON: random only)
        print(f"|  | #{x['rank']}{'' if why == 'top' else f' ({why})'} | | | {cfg['command'].split(' -m ')[1]} | "
              f"predicted {cfg['ms']:.1f} | {f1(x.get('measured_ms', x['status']))} | | | | |")
PY
cat "$work/summary.md"
echo "total: $(($(date +%s) - t0)) s"
