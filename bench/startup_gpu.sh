#!/usr/bin/env bash
# Start-up (issue 14, part 1) on one GPU, in one call: each run's setup phases (the log's
# "setup:" line, the JSON's "setup") with pinned host memory registered untouched, as before
# (AEBENCH_PIN_TOUCH=0), and touched in parallel on huge pages first (the default), for the
# runs the issue names: stronghold l100 -w 15, zero-offload l48, l2l l32, megatron-lm l32
# (h2048 b4, 2 iterations each; the time to the first iteration is what a user waits for).
#   bash bench/startup_gpu.sh "$OUT"
set -uo pipefail
dest=${1:-bench/results/latest}
out=$(mktemp -d /tmp/aebench-startup.XXXXXX)
mkdir -p "$dest"
source bench/deps_env.sh
finish() {
    tar czf "$dest/bench.tgz" -C "$out" . 2>/dev/null
    cp "$out"/table.md "$dest"/ 2>/dev/null
}
trap finish EXIT
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null | sed 's/^/transparent huge pages: /'
t0=$(date +%s)
make -j16 CUDA=1 MPI=0 aebench >"$out/build.txt" 2>&1 || { tail -n 30 "$out/build.txt"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
runs=("stronghold -l 100 -w 15" "zero-offload -l 48" "l2l -l 32" "megatron-lm -l 32")
for touch in 0 1; do
    for r in "${runs[@]}"; do
        read -r m rest <<<"$r"
        tag="t${touch}_${m}"
        SECONDS=0
        AEBENCH_PIN_TOUCH=$touch timeout 400 ./aebench --device cuda -m $m $rest -h 2048 -b 4 --iters 2 \
            --log-interval 1 --results "$out/res_$tag" >"$out/$tag.txt" 2>&1
        echo "$tag: exit $? in $SECONDS s: $(grep -h '^setup:' "$out"/res_"$tag"/*.txt | head -n 1)"
    done
done
python3 - "$out" <<'PY' | tee "$out/table.md"
import glob, json, os, sys
out = sys.argv[1]
print("| run | pinning | pinned GiB | pinned s | s per GiB | setup total s |")
print("|---|---|---|---|---|---|")
for tag in sorted(glob.glob(os.path.join(out, "res_*"))):
    f = glob.glob(os.path.join(tag, "*.json"))
    if not f: continue
    d = json.load(open(f[0])); s = d.get("setup", {})
    gib = s.get("pinned_host_bytes", 0) / 2**30; sec = s.get("pinned_host_ms", 0) / 1e3
    name = os.path.basename(tag)[4:]
    print(f"| {name[3:]} | {'touched, huge pages' if name.startswith('t1') else 'untouched (before)'} | {gib:.1f} | "
          f"{sec:.1f} | {sec / gib if gib else 0:.3f} | {s.get('total_ms', 0) / 1e3:.1f} |")
PY
