#!/usr/bin/env bash
# gemini where the network binds (issue 32, part 5), on the two-GPU machine in one call: NCCL
# on its socket transport (NET=sockets in bench/dp_env.sh: the two GPUs as two machines joined
# by a network), gemini's peer shards sent (--gemini-transport sendrecv, as between machines),
# l4 h2048 s1024, one micro-batch of 4 per rank (global batch 8), TF32:
#  1. none / naive / interleave, a checkpoint every iteration (24 iterations, checkpoints from
#     13): what one checkpoint per iteration costs where the training's own collectives keep
#     the network busy;
#  2. interleave --gemini-every auto (30 iterations): the interval it chooses from the idle
#     time and the transfer rate it measured, and the lost work per failure it reports;
#  3. the same auto run long enough for two whole intervals after its measuring steps: the
#     overhead per step a job checkpointing that often pays (target <= 1.02x of none);
#  4. case 6's CSVs and figure inputs for none, naive and the long auto run (extracted here,
#     drawn at home);
#  5. Open MPI with a hostfile (this machine as its one host, 2 slots): the documented launch
#     line, and what the ranks take for their machine.
# On the device machine, from the repository root, with .deps carried:
#   NET=sockets bash bench/gemini_net_gpu.sh "$OUT"
set -uo pipefail
dest=${1:-bench/results/latest}
NET=${NET:-sockets}
source bench/dp_env.sh
store=/dev/shm
model=(-m gemini -l 4 -h 2048 --heads 16 --seq 1024 -b 4 --global-batch 8 --log-interval 1
       --gemini-transport sendrecv --gemini-store "$store")
# EVERY_SHARE: the share of the step a checkpoint may expose under --gemini-every auto (default 0.01)
if [ -n "${EVERY_SHARE:-}" ]; then model+=(--gemini-every-share "$EVERY_SHARE"); fi

echo "== 1. every iteration: none, naive, interleave"
for m in none naive interleave; do
    SECONDS=0
    run "k1_$m" 2 "${model[@]}" --iters 24 --gemini-ckpt-from 13 --gemini-mode "$m"
    echo "   ($SECONDS s)"
done
echo "== 2. interleave --gemini-every auto"
SECONDS=0
run auto 2 "${model[@]}" --iters 30 --gemini-ckpt-from 13 --gemini-mode interleave --gemini-every auto
echo "   ($SECONDS s)"
grep -h "gemini-every auto:\|gemini interleave:\|a checkpoint every" "$out"/res_auto/*.txt | head -n 4
K=$(python3 -c 'import glob,json,sys; print(json.load(open(sorted(glob.glob(sys.argv[1] + "/res_auto/log_*.json"))[-1]))["gemini"]["every"])' "$out" 2>/dev/null)
K=${K:-0}
echo "auto chose every $K"
if [ "$K" -gt 0 ]; then
    # the same auto run, long enough for its measuring steps (at every iteration, from 13) and
    # then two whole intervals at the K it chooses: the overhead per step at that interval
    [ "$K" -gt 60 ] && { echo "(two intervals of $K would outlast this call: 60)"; K=60; }
    iters=$((12 + 4 + 2 * K + 2))
    echo "== 3. interleave --gemini-every auto over two intervals, $iters iterations"
    SECONDS=0
    run "auto_long" 2 "${model[@]}" --iters "$iters" --gemini-ckpt-from 13 --gemini-mode interleave --gemini-every auto
    echo "   ($SECONDS s)"
fi

echo "== 4. case 6's CSVs: none and naive every iteration, interleave at auto's interval"
mkdir -p "$out/case6net"
cp "$out"/res_k1_none/log_gemini_* "$out"/res_k1_naive/log_gemini_* "$out/case6net/" 2>/dev/null
cp "$out"/res_auto_long/log_gemini_* "$out/case6net/" 2>/dev/null || cp "$out"/res_k1_interleave/log_gemini_* "$out/case6net/"
bash scripts/case6_extract.sh -r "$out/case6net" && cp "$out"/case6net/case6*.csv "$dest/" && cat "$out/case6net/case6.csv"

echo "== 5. Open MPI with a hostfile"
printf 'localhost slots=2\n' >"$out/hosts"
SECONDS=0
timeout 120 mpirun --allow-run-as-root --bind-to none -hostfile "$out/hosts" -np 2 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH \
    ./aebench --device cuda -m megatron-lm --zero-stage 3 -l 2 -h 1024 --heads 8 --seq 512 -b 2 --iters 4 \
    --results "$out/res_hostfile" >"$out/hostfile.txt" 2>&1
echo "hostfile: exit $? in $SECONDS s"
grep -E "plan per|machine|done:" "$out/hostfile.txt" | head -n 5

python3 - "$out" <<'PY' | tee "$out/table.md"
import glob, json, os, sys
out = sys.argv[1]
def last(d):
    f = sorted(glob.glob(os.path.join(out, d, "log_gemini_*.json")))
    return json.load(open(f[-1])) if f else None
tags = ["k1_none", "k1_naive", "k1_interleave", "auto", "auto_long"]
print("| run | mode | every | steps without ms | with ms (per step, checkpoints every K) | x of without | paired: a checkpoint's ms, x at K | ckpt GB/rank | ckpt traffic ms | exposed ms | collectives' idle ms | expected iterations lost | losses == none |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
ref = last("res_k1_none")
ref_loss = {i["iteration"]: i["loss"] for i in ref["iterations"]} if ref else {}
for t in tags:
    r = last("res_" + t)
    if not r:
        print(f"| {t} | failed | | | | | | | | | | | |"); continue
    g = r["gemini"]
    same = sum(1 for i in r["iterations"] if ref_loss.get(i["iteration"]) == i["loss"])
    common = sum(1 for i in r["iterations"] if i["iteration"] in ref_loss)
    print(f"| {t} | {g['mode']} | {g['every']} ({g['every_asked']}) | {g.get('no_checkpoint_ms', 0):.1f} | "
          f"{g.get('checkpoint_ms', 0):.1f} ± {g.get('checkpoint_sd_ms', 0):.1f} ({g.get('checkpoint_steps', 0)} steps) | "
          f"{g.get('slowdown', 0):.3f} | " +
          (f"{g['paired']['extra_ms']:.1f} ({g['paired']['checkpoints']} {g['paired']['of']}), {g['paired']['overhead_at_every']:.4f} | " if "paired" in g else "- | ") +
          f"{g.get('checkpoint_size', 0) / 1e9:.2f} | {1e3 * g.get('checkpoint_time', 0):.0f} | "
          f"{1e3 * g.get('exposed_time', 0):.0f} | {1e3 * g.get('idle_time', 0):.0f} | "
          f"{'-' if g['expected_lost_iterations'] is None else '%.1f' % g['expected_lost_iterations']} | {same}/{common} |")
PY
for t in k1_none k1_interleave auto; do
    echo "-- $t: collectives and the step"
    grep -h "collectives (rank 0\|gemini interleave:\|gemini-every auto:" "$out"/res_$t/*.txt | tail -n 3
done
echo "total: $(( $(date +%s) - t0 )) s"
