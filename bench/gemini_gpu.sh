#!/usr/bin/env bash
# The gemini engine on the two-GPU machine (nvidia-h200-x2), in one call:
#  1. case 6 (configs/case6.json): l16 h2048, global batch 32 — 4 micro-batches of 4 per rank,
#     chosen so that one step (~4 x 140 ms) outlasts the checkpoint's own device-to-host
#     copies (2 shards x 3 arrays x P/2 floats ~ 10.9 GB per rank, ~0.25 s at the PCIe rate
#     measured here); 8 warm-up steps, 10 without checkpoints, 22 with; modes none, naive,
#     interleave; then scripts/case6_extract.sh (the CSVs come back, figures are drawn at home);
#  2. the losses: interleave and naive against none, every iteration bit for bit (a checkpoint
#     must not change the training);
#  3. recovery under --ranks 2 (interleave, checkpoints from the first iteration): a hardware
#     failure of rank 1 and a software failure of rank 0 at iteration 14, each recovered job's
#     losses against the run without failure (case 6's none) bit for bit, its time lost, bytes
#     fetched and where the restore's time went on each rank;
#  4. the disk: the same state written to a persistent checkpoint (--ckpt-dir, O_DIRECT) every
#     5 iterations, its time and GB/s; and both ranks lost (falls back to it).
# On the device machine, from the repository root, with .deps carried:
#   bash bench/gemini_gpu.sh "$OUT"
# STORE (default /dev/shm when it has room for both ranks' stores, else /tmp); ONLY_RECOVERY=1:
# the hardware failure and both ranks lost alone (no case 6, software failure or disk run),
# against a run without failure made for them.
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/dp_env.sh
store=${STORE:-/dev/shm}
free_gb=$(df -BG --output=avail "$store" 2>/dev/null | tail -n 1 | tr -dc 0-9)
echo "store $store: ${free_gb:-?} GB free"
if [ -z "${STORE:-}" ] && [ "${free_gb:-0}" -lt 60 ]; then
    store=/tmp
    echo "(too small for two ranks' stores: using $store, $(df -BG --output=avail /tmp | tail -n 1) free)"
fi

if [ "${ONLY_RECOVERY:-0}" != 1 ]; then
echo "== case 6: configs/case6.json"
SECONDS=0
timeout 240 ./aebench --config configs/case6.json --device cuda --gemini-store "$store" --results "$out/case6" >"$out/case6.txt" 2>&1
echo "case 6 exit $? in $SECONDS s"
grep -h "^gemini: steps without\|gemini interleave:\|each checkpoint copies" "$out"/case6/log_gemini_*.txt
bash scripts/case6_extract.sh -r "$out/case6" && cp "$out"/case6/case6*.csv "$dest/"
cat "$out/case6/case6.csv"
fi

fail() { # tag iters timeout extra-args...
    local tag=$1 iters=$2 limit=$3
    shift 3
    SECONDS=0
    timeout "$limit" ./aebench --device cuda -m gemini -l 16 -h 2048 -b 4 --global-batch 32 --iters "$iters" \
        --log-interval 1 --gemini-ckpt-from 1 --ranks 2 --gemini-store "$store" --results "$out/res_$tag" "$@" \
        >"$out/$tag.txt" 2>&1
    echo "$tag: exit $? in $SECONDS s ($(date -u +%H:%M:%S))"
    grep -h "relaunching\|recovered at\|recovery on rank\|^recovery:\|persistent" "$out/$tag.txt" \
        "$out"/res_"$tag"/*.txt 2>/dev/null | sort -u | head -n 8
}
# ONLY_RECOVERY=1 has no case 6 to compare with: the run without failure is made here
if [ "${ONLY_RECOVERY:-0}" = 1 ]; then
    echo "== the run without failure (none mode, 18 iterations)"
    fail ref 18 150 --gemini-mode none
fi
echo "== recovery (failure at iteration 14 of 18)"
fail hw 18 150 --fail-at 14 --fail-rank 1 --fail-kind hardware
[ "${ONLY_RECOVERY:-0}" = 1 ] || fail sw 18 150 --fail-at 14 --fail-rank 0 --fail-kind software
echo "== the disk: a persistent checkpoint every 5 iterations (none mode), and both ranks lost"
# (outside $out: the checkpoint files must not go into bench.tgz)
ckroot=$(mktemp -d /tmp/aebench-ckpt.XXXXXX)
mkdir -p "$ckroot/disk" "$ckroot/both"
df -h "$ckroot" | tail -n 1
[ "${ONLY_RECOVERY:-0}" = 1 ] || fail disk 10 150 --gemini-mode none --ckpt-dir "$ckroot/disk" --ckpt-every 5
fail both 14 150 --ckpt-dir "$ckroot/both" --ckpt-every 5 --fail-at 12 --fail-rank 0,1 --fail-kind hardware
rm -rf "$ckroot"

python3 - "$out" <<'PY' | tee "$out/table.md"
import glob, json, os, statistics, sys
out = sys.argv[1]
def runs(d):
    return [json.load(open(f)) for f in sorted(glob.glob(os.path.join(out, d, "log_*.json")))]
case6 = {r["gemini"]["mode"]: r for r in runs("case6") if "gemini" in r}
ref = case6.get("none") or next(iter(runs("res_ref")), None)
ref_loss = {i["iteration"]: i["loss"] for i in ref["iterations"]} if ref else {}
if case6:
    print("| mode | without ckpt ms | with ckpt ms | slowdown | ckpt GB/rank | ckpt ms | exposed ms | idle ms | losses == none |")
    print("|---|---|---|---|---|---|---|---|---|")
for mode in ("none", "naive", "interleave") if case6 else ():
    r = case6.get(mode)
    if not r:
        print(f"| {mode} | failed | | | | | | | |"); continue
    g = r["gemini"]
    same = sum(1 for i in r["iterations"] if ref_loss.get(i["iteration"]) == i["loss"])
    print(f"| {mode} | {g.get('no_checkpoint_ms', 0):.1f} ± {g.get('no_checkpoint_sd_ms', 0):.1f} | "
          f"{g.get('checkpoint_ms', 0):.1f} ± {g.get('checkpoint_sd_ms', 0):.1f} | {g.get('slowdown', 0):.3f} | "
          f"{g.get('checkpoint_size', 0) / 1e9:.2f} | {1e3 * g.get('checkpoint_time', 0):.1f} | "
          f"{1e3 * g.get('exposed_time', 0):.1f} | {1e3 * g.get('idle_time', 0):.1f} | {same}/{len(r['iterations'])} |")
print()
print("| failure | restored | from | fetched GB | restore s | time lost s | relaunch s | setup s | redo s | recovered losses == no failure |")
print("|---|---|---|---|---|---|---|---|---|---|")
for tag in ("hw", "sw", "both"):
    rec = [r for r in runs(f"res_{tag}") if r.get("recovery")]
    if not rec:
        print(f"| {tag} | none | | | | | | | | |"); continue
    r = rec[-1]; v = r["recovery"]
    its = r["iterations"]
    same = sum(1 for i in its if ref_loss.get(i["iteration"]) == i["loss"])
    print(f"| {tag} | {v['restored_iteration']} | {v['from']} | {v['fetched_bytes'] / 1e9:.2f} | {v['ms'] / 1e3:.2f} | "
          f"{v.get('time_lost_s', float('nan')):.1f} | {v.get('relaunch_s', float('nan')):.1f} | "
          f"{v.get('setup_s', float('nan')):.1f} | {v.get('redo_s', float('nan')):.1f} | {same}/{len(its)} |")
d = runs("res_disk")
if d:
    w = [i["checkpoint"] for i in d[-1]["iterations"] if "checkpoint" in i and i["checkpoint"]["bytes"] > 0]
    if w:
        ms = statistics.median(c["ms"] for c in w); gb = statistics.median(c["bytes"] for c in w) / 1e9
        print(f"\npersistent checkpoint (O_DIRECT, per rank, both ranks at once): {gb:.2f} GB in {ms:.0f} ms "
              f"= {gb / ms * 1e3:.2f} GB/s, {len(w)} writes")
PY
echo "total: $(( $(date +%s) - t0 )) s"
