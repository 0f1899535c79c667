#!/usr/bin/env bash
# The GPU memory NCCL takes outside the arena (engine_comm_group_bytes' reserve), on
# nvidia-h200-x2: stronghold -w auto at l48 h4096 bf16 on two ranks (the configuration whose
# window once filled the arena and failed its first all-gather) trained 4 iterations, with
# nvidia-smi sampling each GPU's used memory; printed beside the arena's peak and the plan.
#   bash bench/comm_reserve_gpu.sh "$OUT"       (from the repository root, .deps carried)
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/dp_env.sh # (builds; defines out, run)
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 200 >"$out/smi.csv" &
smi=$!
sleep 1
run w125 2 --device cuda -h 4096 --heads 32 --dtype bf16 --global-batch 8 -l 48 -m stronghold -b 2 \
    --offload cpu --clip-speculate auto --recompute none -w auto --placement spread --iters 4 --log-interval 1
kill $smi
grep -E "plan|-w auto|setup|FAILED|failed|done:" "$out/w125.txt" | cut -c1-300
python3 - "$out" <<'PY' | tee "$out/table.md"
import glob, json, sys
out = sys.argv[1]
used = {}
for line in open(f"{out}/smi.csv"):
    try:
        i, mib = (int(x) for x in line.split(","))
    except ValueError:
        continue
    used[i] = max(used.get(i, 0), mib)
f = glob.glob(f"{out}/res_w125/*.json")
d = json.load(open(f[0])) if f else {}
ranks = d.get("memory", {}).get("per_rank", [])
print("| rank | nvidia-smi used, max (MiB) | arena peak (MiB) | plan (MiB) | used - arena peak (MiB) |")
print("|---|---|---|---|---|")
for r in ranks:
    u, pk, pl = used.get(r["rank"], 0), r["gpu_peak_bytes"] / 2**20, r["gpu_planned_bytes"] / 2**20
    print(f"| {r['rank']} | {u} | {pk:.0f} | {pl:.0f} | {u - pk:.0f} |")
if not ranks:
    print(f"| - | {sorted(used.items())} | no per-rank peaks (the run failed?) | | |")
PY
cp "$out/table.md" "$dest/comm_reserve_table.md"
