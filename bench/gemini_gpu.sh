#!/usr/bin/env bash
# The gemini engine on the two-GPU machine (nvidia-h200-x2): the artifact's case 6, iteration
# time without a checkpoint, with one after every step (naive) and with one interleaved into
# the next step's idle collective time, beside megatron-lm ZeRO-3 in the same call; then a
# hardware failure of rank 1 under --ranks 2 (relaunch, a peer's copy, recovery), its time.
#
# On the device machine, from the repository root, with .deps carried:
#   bash bench/gemini_gpu.sh "$OUT"
# LAYERS (default 32), ITERS (default 16), STORE (default /dev/shm when it has room, else /tmp).
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/dp_env.sh
L=${LAYERS:-32}
IT=${ITERS:-16}
store=${STORE:-/dev/shm}
free_gb=$(df -BG --output=avail "$store" 2>/dev/null | tail -n 1 | tr -dc 0-9)
echo "store $store: ${free_gb:-?} GB free"
if [ -z "${STORE:-}" ] && [ "${free_gb:-0}" -lt 100 ]; then
    store=/tmp
    echo "(too small for two ranks' stores at l$L: using $store, $(df -BG --output=avail /tmp | tail -n 1) free)"
fi
big=(-l "$L" -h 2048 -b 4 --iters "$IT" --log-interval "$IT")

echo "== l$L h2048 b4 TF32, 2 ranks: megatron-lm ZeRO-3 and gemini none / naive / interleave"
run zero3 2 "${big[@]}" --zero-stage 3
for mode in none naive interleave; do
    run "gemini_$mode" 2 "${big[@]}" -m gemini --gemini-mode "$mode" --gemini-store "$store"
    grep -h "gemini interleave:\|gemini: job" "$out/gemini_$mode.txt" | head -n 2
done
python3 - "$out" <<'EOF'
import glob, json, statistics, sys
out = sys.argv[1]
def load(tag):
    f = glob.glob(f"{out}/res_{tag}/*.json")
    return json.load(open(f[0])) if f else None
ref = load("zero3")
print("| run | median ms/it | samples/s | vs ZeRO-3 | checkpoint GB/rank | ckpt ms | exposed ms | hidden ms |")
print("|---|---|---|---|---|---|---|---|")
for tag in ("zero3", "gemini_none", "gemini_naive", "gemini_interleave"):
    d = load(tag)
    if not d:
        print(f"| {tag} | failed | | | | | | |")
        continue
    s = d["summary"]
    its = [i for i in d["iterations"] if i["iteration"] > 4]  # past interleave's warm-up
    ck = [i["checkpoint"] for i in its if "checkpoint" in i]
    med = lambda k: statistics.median(c[k] for c in ck) if ck else 0
    gb = med("bytes") / 1e9
    ratio = s["median_ms"] / ref["summary"]["median_ms"] if ref else float("nan")
    print(f"| {tag} | {s['median_ms']:.1f} | {s['samples_per_second']:.2f} | {ratio:.3f} | {gb:.2f} | "
          f"{med('ms'):.1f} | {med('exposed_ms'):.1f} | {med('ms') - med('exposed_ms'):.1f} |")
EOF

echo "== hardware failure of rank 1 at iteration 10 (interleave), --ranks 2 relaunches and recovers"
SECONDS=0
timeout 500 ./aebench --device cuda "${big[@]}" --ranks 2 -m gemini --gemini-store "$store" \
    --fail-at 10 --fail-rank 1 --fail-kind hardware --results "$out/res_fail" >"$out/fail.txt" 2>&1
echo "exit $? in $SECONDS s"
grep -h "relaunching\|recovered\|fetched\|killed" "$out/fail.txt" | head -n 6
python3 - "$out" <<'EOF'
import glob, json, sys
out = sys.argv[1]
ref = {i["iteration"]: i["loss"] for i in json.load(open(glob.glob(f"{out}/res_zero3/*.json")[0]))["iterations"]}
for f in sorted(glob.glob(f"{out}/res_fail/*.json")):
    d = json.load(open(f))
    its = d.get("iterations", [])
    if not its or d["summary"].get("resumed_after") is None:
        continue
    worst = max(abs(i["loss"] - ref[i["iteration"]]) / abs(ref[i["iteration"]]) for i in its)
    print(f"recovered job: resumed after iteration {d['summary']['resumed_after']}, iterations "
          f"{its[0]['iteration']}-{its[-1]['iteration']}, largest relative loss difference to ZeRO-3 "
          f"without failure {worst:.3g}")
EOF
echo "total: $(( $(date +%s) - t0 )) s"
