#!/usr/bin/env bash
# gemini on the four-GPU machine (nvidia-h200-x4; issue 17), in one call: l16 h2048, global
# batch 64 (4 micro-batches of 4 per rank, so that a step outlasts each rank's checkpoint
# copies, as in case 6), m = 2:
#  1. group and ring placement, modes none / naive / interleave: 6 warm-up steps, 10 without
#     checkpoints, 16 with (--gemini-ckpt-from 17); the losses of every run against none's,
#     bit for bit;
#  2. under --ranks 4 (interleave, group): a hardware failure of rank 1 (restored from its
#     group peer 0), of ranks 1 and 2 at once (different groups: each from its peer), and of
#     ranks 2 and 3 (both of one group: the persistent checkpoint, --ckpt-dir every 5); ring:
#     rank 1's machine lost; each recovered job's losses against none's, bit for bit, and its
#     time lost.
# On the device machine, from the repository root, with .deps carried:
#   bash bench/gemini4_gpu.sh "$OUT"
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/dp_env.sh
store=/dev/shm
free_gb=$(df -BG --output=avail "$store" 2>/dev/null | tail -n 1 | tr -dc 0-9)
[ "${free_gb:-0}" -lt 60 ] && store=/tmp
echo "store $store"
shape=(-m gemini -l 16 -h 2048 -b 4 --global-batch 64 --log-interval 1 --device cuda --gemini-store "$store")
g() { # tag limit args...
    local tag=$1 limit=$2
    shift 2
    SECONDS=0
    timeout "$limit" ./aebench "${shape[@]}" --ranks 4 --results "$out/res_$tag" "$@" >"$out/$tag.txt" 2>&1
    echo "$tag: exit $? in $SECONDS s ($(date -u +%H:%M:%S)) $(grep -h '^gemini: steps without\|recovered at' "$out"/res_"$tag"/*.txt 2>/dev/null | tail -n 1)"
}
for pl in group ring; do
    for mode in none naive interleave; do
        g "${pl}_$mode" 150 --iters 32 --gemini-ckpt-from 17 --gemini-placement "$pl" --gemini-mode "$mode"
    done
done
ck=$(mktemp -d /tmp/aebench-ckpt.XXXXXX)
g fail1 150 --iters 20 --fail-at 14 --fail-rank 1 --fail-kind hardware
g fail12 150 --iters 20 --fail-at 14 --fail-rank 1,2 --fail-kind hardware
g fail23 200 --iters 20 --fail-at 14 --fail-rank 2,3 --fail-kind hardware --ckpt-dir "$ck" --ckpt-every 5
g ring_fail1 150 --iters 20 --fail-at 14 --fail-rank 1 --fail-kind hardware --gemini-placement ring
rm -rf "$ck"
python3 - "$out" <<'PY' | tee "$out/table.md"
import glob, json, os, sys
out = sys.argv[1]
def runs(tag):
    return [json.load(open(f)) for f in sorted(glob.glob(os.path.join(out, f"res_{tag}", "log_*.json")))]
ref = {}
for r in runs("group_none"):
    ref = {i["iteration"]: i["loss"] for i in r["iterations"]}
print("| placement | mode | without ms | with ms | with / without | ckpt GB/rank | exposed ms | losses == none |")
print("|---|---|---|---|---|---|---|---|")
for pl in ("group", "ring"):
    for mode in ("none", "naive", "interleave"):
        r = runs(f"{pl}_{mode}")
        if not r:
            print(f"| {pl} | {mode} | failed | | | | | |"); continue
        g = r[-1]["gemini"]
        same = sum(1 for i in r[-1]["iterations"] if ref.get(i["iteration"]) == i["loss"])
        print(f"| {pl} | {mode} | {g.get('no_checkpoint_ms', 0):.1f} | {g.get('checkpoint_ms', 0):.1f} | "
              f"{g.get('slowdown', 0):.3f} | {g.get('checkpoint_size', 0) / 1e9:.2f} | {1e3 * g.get('exposed_time', 0):.1f} | "
              f"{same}/{len(r[-1]['iterations'])} |")
print()
print("| failure | restored | from | fetched GB | time lost s | losses after it == none |")
print("|---|---|---|---|---|---|")
for tag, what in (("fail1", "rank 1 (group)"), ("fail12", "ranks 1, 2 (two groups)"), ("fail23", "ranks 2, 3 (one group)"),
                  ("ring_fail1", "rank 1 (ring)")):
    rec = [r for r in runs(tag) if r.get("recovery")]
    if not rec:
        print(f"| {what} | not recovered | | | | |"); continue
    r = rec[-1]; v = r["recovery"]
    same = sum(1 for i in r["iterations"] if ref.get(i["iteration"]) == i["loss"])
    print(f"| {what} | {v['restored_iteration']} | {v['from']} | {v['fetched_bytes'] / 1e9:.2f} | "
          f"{v.get('time_lost_s', float('nan')):.1f} | {same}/{len(r['iterations'])} |")
PY
echo "total: $(( $(date +%s) - t0 )) s"
