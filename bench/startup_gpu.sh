#!/usr/bin/env bash
# Start-up (issue 14, part 1) on one GPU, in one call: each run's setup phases (the log's
# "setup:" line, the JSON's "setup") and its wall time, with the code before the change
# (OLD_TREE: a `git archive` of the earlier commit, built in a copy) and today's, for the
# runs the issue names: stronghold l100 -w 15, zero-offload l48, l2l l32, megatron-lm l32
# (h2048 b4, 2 iterations each; the time to the first iteration is what a user waits for).
#   git archive -o .deps/old_tree.tar COMMIT    # here, before the call
#   bash bench/startup_gpu.sh "$OUT"            # on the device machine, .deps carried
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/deps_env.sh
bench_workdir startup
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null | sed 's/^/transparent huge pages: /'
t0=$(date +%s)
bench_cuda_build aebench
OLD_TREE=${OLD_TREE:-.deps/old_tree.tar}
old=$out/old_tree
bins=(new ./aebench)
if [ -f "$OLD_TREE" ]; then
    mkdir -p "$old" && tar -xf "$OLD_TREE" -C "$old"
    (cd "$old" && make -j16 CUDA=1 MPI=0 aebench >"$out/build_old.txt" 2>&1) || { tail -n 20 "$out/build_old.txt"; exit 1; }
    bins=(old "$old/aebench" new ./aebench)
fi
echo "builds: $(( $(date +%s) - t0 )) s"
runs=("stronghold -l 100 -w 15" "zero-offload -l 48" "l2l -l 32" "megatron-lm -l 32")
for ((i = 0; i < ${#bins[@]}; i += 2)); do
    v=${bins[i]} bin=${bins[i + 1]}
    for r in "${runs[@]}"; do
        read -r m rest <<<"$r"
        tag="${v}_${m}"
        SECONDS=0
        timeout 400 "$bin" --device cuda -m $m $rest -h 2048 -b 4 --iters 2 \
            --log-interval 1 --results "$out/res_$tag" >"$out/$tag.txt" 2>&1
        echo "$tag: exit $? in $SECONDS s: $(grep -h '^setup:' "$out"/res_"$tag"/*.txt | head -n 1)"
        echo "$SECONDS" >"$out/res_$tag/wall_s"
    done
done
python3 - "$out" <<'PY' | tee "$out/table.md"
import glob, json, os, sys
out = sys.argv[1]
print("| run | code | pinned GiB | pinned s | s per GiB | allocations s (host zeroed) | parameters s | the rest s | setup total s | run wall s (2 iterations) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for tag in sorted(glob.glob(os.path.join(out, "res_*"))):
    f = glob.glob(os.path.join(tag, "*.json"))
    if not f: continue
    d = json.load(open(f[0])); s = d.get("setup", {})
    gib = s.get("pinned_host_bytes", 0) / 2**30; sec = s.get("pinned_host_ms", 0) / 1e3
    code, run = os.path.basename(tag)[4:].split("_", 1)
    w = os.path.join(tag, "wall_s")
    wall = open(w).read().strip() if os.path.exists(w) else ""
    print(f"| {run} | {code} | {gib:.1f} | {sec:.2f} | {sec / gib if gib else 0:.3f} | {s.get('allocation_ms', 0) / 1e3:.2f} | "
          f"{s.get('init_ms', 0) / 1e3:.2f} | {s.get('rest_ms', 0) / 1e3:.2f} | {s.get('total_ms', 0) / 1e3:.1f} | {wall} |")
PY
