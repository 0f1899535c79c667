#!/usr/bin/env bash
# Does a fresh GPU machine's host get faster in its first minutes (issue 49: on two H200s the
# host Adam trained 11-18% faster than its calibration at the call's start said, where another
# machine's trained at it)?  On one GPU, twice in a row: calibrate the copy and host Adam rates
# (l32 h2048 bf16, micro-batch 4; the second time the compute entries kept, the rates measured
# again), then train zero-offload --dpu and l2l (host-bound: the copies and the host Adam set
# their steps).  Prints each calibration's rates with their repetitions (samples_ms: a trend
# within them is the machine settling) and each run's busy times against both files'
# predictions (bench/busy_from_logs.py).  On nvidia-h200 (about 4 minutes), .deps carried:
#   bash bench/warmup_rates_gpu.sh "$OUT"
# (a trial on the CPU backend: SHAPE="--device cpu -h 64 --heads 4 --seq 32 --vocab 512 -l 4" BUILD_CMD=true)
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/deps_env.sh
bench_begin warmup
if [ -n "${BUILD_CMD:-}" ]; then $BUILD_CMD >"$out/build.txt" 2>&1 || exit 1; else bench_cuda_build aebench; fi
echo "build: $(($(date +%s) - t0)) s"
read -r -a shape <<<"${SHAPE:---device cuda -h 2048 --dtype bf16 -l 32} --global-batch 4"
mkdir -p "$out/cal"
for round in 1 2; do
    if [ "$round" = 2 ]; then # (the rates dropped from the file: measured again, the compute kept)
        python3 - "$out"/cal/machine_*.json <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
d.pop("rates")
json.dump(d, open(sys.argv[1], "w"), indent=1)
EOF
    fi
    timeout 300 ./aebench --calibrate "${shape[@]}" -b 4 --results "$out/cal" >"$out/cal$round.txt" 2>&1 ||
        { tail -n 5 "$out/cal$round.txt"; exit 1; }
    cp "$out"/cal/machine_*.json "$out/machine$round.json"
    echo "calibrated ($round) at $(($(date +%s) - t0)) s"
    bench_run "zo$round" -b 4 -m zero-offload --dpu --recompute none --iters 16 --log-interval 16
    bench_run "l2l$round" -b 4 -m l2l --recompute none --iters 8 --log-interval 8
done
python3 - "$out" <<'EOF' | tee "$out/table.md"
import json, statistics, sys
out = sys.argv[1]
print("| rate | calibration 1 | calibration 2 | calibration 1's repetitions (ms) | calibration 2's |")
print("|---|---|---|---|---|")
r = [json.load(open(f"{out}/machine{i}.json"))["rates"] for i in (1, 2)]
for k, s in (("h2d_gbs", "h2d"), ("d2h_gbs", "d2h"), ("host_adam_bf16_ms_per_mparam", "host_adam_bf16"),
             ("host_adam_ms_per_mparam", "host_adam"), ("adam_h2d_gbs", "beside_h2d_h2d"),
             ("host_adam_h2d_ms_per_mparam", "beside_h2d_host_adam"), ("host_adam_under_compute", "host_adam_beside_compute")):
    reps = [" ".join(f"{x:.2f}" for x in q["samples_ms"][s][0]) for q in r]
    print(f"| {k} | {r[0][k]:.4g} | {r[1][k]:.4g} | {reps[0]} | {reps[1]} |")
EOF
for i in 1 2; do
    echo "== predicted from calibration $i" | tee -a "$out/table.md"
    python3 bench/busy_from_logs.py "$out/machine$i.json" "$out"/res_zo1 "$out"/res_l2l1 "$out"/res_zo2 "$out"/res_l2l2 2>&1 |
        tee -a "$out/table.md"
done
cp "$out"/machine1.json "$out"/machine2.json "$out"/cal1.txt "$out"/cal2.txt "$dest"/
echo "total: $(($(date +%s) - t0)) s"
