#!/usr/bin/env bash
# --calibrate's split layer (--tp T, a rank's share timed alone) on one GPU, beside 1/T of the
# whole layer (what --predict took before it was timed): h2048 heads16 s1024 at b 1, 2, 4, TF32
# and bf16, T = 2, 4, 8.
#   bash bench/tp_calibrate_gpu.sh "$OUT"
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/deps_env.sh
bench_begin tp-calibrate
bench_cuda_build aebench
echo "build: $(($(date +%s) - t0)) s"
for dt in fp32 bf16; do
    ./aebench --calibrate --device cuda -h 2048 --global-batch 4 --dtype $dt --results "$out/res" >>"$out/calibrate.txt" 2>&1 ||
        { tail -n 5 "$out/calibrate.txt"; exit 1; }
done
echo "calibrated: $(($(date +%s) - t0)) s"
python3 - "$out"/res/machine_*.json <<'PY' | tee "$out/table.md"
import json, sys
d = json.load(open(sys.argv[1]))
print("| dtype | b | T | split fwd ms | whole fwd / T | split bwd ms | whole bwd / T | split (fwd+bwd) x T / whole |")
print("|---|---|---|---|---|---|---|---|")
for e in sorted(d["compute"], key=lambda e: (e["dtype"], e["batch"])):
    for x in e.get("tp", []):
        t = x["t"]
        r = (x["layer_fwd_ms"] + x["layer_bwd_ms"]) * t / (e["layer_fwd_ms"] + e["layer_bwd_ms"])
        print(f"| {e['dtype']} | {e['batch']} | {t} | {x['layer_fwd_ms']:.3f} | {e['layer_fwd_ms'] / t:.3f} | "
              f"{x['layer_bwd_ms']:.3f} | {e['layer_bwd_ms'] / t:.3f} | {r:.2f} |")
PY
echo "total: $(($(date +%s) - t0)) s"
