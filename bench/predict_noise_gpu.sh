#!/usr/bin/env bash
# How far --predict can be trusted on one GPU machine, apart from the model: the host's rates
# calibrated CALS times (each a fresh measurement of the copies and the host Adam, the compute
# entries kept), and each run of RUNS trained PASSES times, interleaved, in one call.  Each
# run's prediction from each calibration against each pass's steady median, and the host Adam's
# rate in the run (its busy time over its parameters) against the calibrated one: how much of a
# prediction's error is the machine moving between calibration and run.
#   bash bench/predict_noise_gpu.sh "$OUT"     RUNS="engine options; ..." (each with its -b),
#                                               CALS (default 3), PASSES (default 2), ITERS (12)
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/deps_env.sh
bench_begin predict-noise
bench_cuda_build aebench
echo "build: $(($(date +%s) - t0)) s"
IFS=';' read -r -a runs <<<"${RUNS:-zero-offload -l 32 -b 4;zero-infinity -l 32 -b 4;l2l -l 32 -b 4;stronghold -l 32 -w 8 -b 4}"
cal=(--device cuda -h 2048 --global-batch 4)
shape=(--device cuda -h 2048)
./aebench --calibrate "${cal[@]}" --results "$out/res" >"$out/calibrate.txt" 2>&1 || { tail -n 5 "$out/calibrate.txt"; exit 1; }
# (bf16's entries only when a run is bf16)
if [[ "${runs[*]}" == *bf16* ]]; then
    ./aebench --calibrate "${cal[@]}" --dtype bf16 --results "$out/res" >>"$out/calibrate.txt" 2>&1 ||
        { tail -n 5 "$out/calibrate.txt"; exit 1; }
fi
machine=$(ls "$out"/res/machine_*.json | head -n 1)
mkdir -p "$out/cals"
cp "$machine" "$out/cals/cal1.json"
echo "calibrated: $(($(date +%s) - t0)) s"
: >"$out/measured.txt"
cal_no=1
for pass in $(seq 1 "${PASSES:-2}"); do
    for r in "${runs[@]}"; do
        read -r m rest <<<"$r"
        timeout 240 ./aebench -m $m "${shape[@]}" $rest --iters "${ITERS:-12}" --log-interval "${ITERS:-12}" \
            --results "$out/runs_$pass" >"$out/run.txt" 2>&1
        j=$(ls -t "$out"/runs_$pass/*.json 2>/dev/null | head -n 1)
        echo "$pass|$r|$j" >>"$out/measured.txt"
        echo "pass $pass: $r: $(grep -m1 'done:' "$out/run.txt" | cut -c1-80)"
    done
    # the host's rates again (the compute entries kept): a calibration after each pass
    while [ "$cal_no" -lt "${CALS:-3}" ] && [ "$cal_no" -le "$pass" ]; do
        python3 - "$machine" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d.pop("rates", None); json.dump(d, open(sys.argv[1], "w"))
PY
        ./aebench --calibrate "${cal[@]}" --results "$out/res" >>"$out/calibrate.txt" 2>&1 || { tail -n 5 "$out/calibrate.txt"; exit 1; }
        cal_no=$((cal_no + 1))
        cp "$machine" "$out/cals/cal$cal_no.json"
    done
done
# each run predicted with each calibration
: >"$out/predicted.txt"
for c in "$out"/cals/cal*.json; do
    for r in "${runs[@]}"; do
        read -r m rest <<<"$r"
        p=$(./aebench --predict -m $m "${shape[@]}" $rest --machine "$c" 2>&1 | grep -m1 "^predict " |
            grep -oE "[0-9.]+ ms/it" | grep -oE "^[0-9.]+")
        echo "$(basename "$c" .json)|$r|${p:-none}" >>"$out/predicted.txt"
    done
done
python3 - "$out" <<'PY' | tee "$out/table.md"
import collections, json, os, sys
out = sys.argv[1]
meas = collections.defaultdict(dict)   # run -> pass -> (steady ms, host adam ms/M)
for line in open(os.path.join(out, "measured.txt")):
    p, run, j = line.rstrip("\n").split("|")
    try:
        d = json.load(open(j))
        it = d["iterations"][-1]
        adam = it["busy_ms"]["host_adam"] / (it["host_adam_params"] / 1e6) if it.get("host_adam_params") else None
        meas[run][p] = (d["summary"]["steady_median_ms"], adam)
    except Exception:
        meas[run][p] = (None, None)
pred = collections.defaultdict(dict)
for line in open(os.path.join(out, "predicted.txt")):
    c, run, ms = line.rstrip("\n").split("|")
    pred[run][c] = float(ms) if ms != "none" else None
cals = sorted({c for r in pred.values() for c in r})
rates = {}
for c in cals:
    r = json.load(open(os.path.join(out, "cals", c + ".json")))["rates"]
    rates[c] = r
print("| calibration | host Adam alone ms/M | beside H2D | beside D2H | all three | H2D GB/s | H2D beside Adam |")
print("|---|---|---|---|---|---|---|")
for c in cals:
    r = rates[c]
    print(f"| {c} | {r['host_adam_ms_per_mparam']:.4f} | {r.get('host_adam_h2d_ms_per_mparam', 0):.4f} | "
          f"{r.get('host_adam_d2h_ms_per_mparam', 0):.4f} | {r['busy_host_adam_ms_per_mparam']:.4f} | "
          f"{r['h2d_gbs']:.1f} | {r.get('adam_h2d_gbs', 0):.1f} |")
passes = sorted({p for r in meas.values() for p in r})
print()
print("| run | " + " | ".join(f"pass {p} ms (host Adam ms/M)" for p in passes) + " | " +
      " | ".join(f"{c} predicted (error vs mean)" for c in cals) + " |")
print("|---|" + "---|" * (len(passes) + len(cals)))
errs = collections.defaultdict(list)
for run in meas:
    ms = [meas[run][p][0] for p in passes if meas[run].get(p, (None,))[0]]
    mean = sum(ms) / len(ms) if ms else None
    cells = []
    for p in passes:
        m, a = meas[run].get(p, (None, None))
        cells.append(f"{m:.1f} ({a:.4f})" if m and a else (f"{m:.1f}" if m else "failed"))
    for c in cals:
        pr = pred[run].get(c)
        if pr and mean:
            e = (pr - mean) / mean
            errs[c].append(abs(e))
            cells.append(f"{pr:.1f} ({100 * e:+.1f}%)")
        else:
            cells.append("none")
    print(f"| {run} | " + " | ".join(cells) + " |")
print()
for c in cals:
    if errs[c]:
        e = sorted(errs[c])
        print(f"{c}: median |error| {100 * e[len(e) // 2]:.1f}%, worst {100 * e[-1]:.1f}% over {len(e)} runs")
PY
echo "total: $(($(date +%s) - t0)) s"
