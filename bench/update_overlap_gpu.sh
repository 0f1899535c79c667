#!/usr/bin/env bash
# The update under the backward (issue 50), as commit f9a5c94 had it: with --clip-grad 0
# megatron-lm queued each block's AdamW on the gradient stream as soon as its gradient (and
# norm) was in, beside the backward of the blocks below; with clipping it waits for the whole
# norm.  Measured there and taken out (it hid nothing; the figures:
# bench/results/2026-11-29e-h200-update-overlap/NOTES.md); run at that commit to repeat it (at
# later ones the third run is the second).  One GPU, l32 h2048 b4 bf16, one
# and eight micro-batches, two interleaved rounds: clip 1.0 (graphs on), --clip-grad 0 --graphs
# on (the update after the backward, replayed), --clip-grad 0 (auto: the update under the
# backward, so no graphs), and clip 1.0 --graphs off (what the graphs alone give).
# Usage on the device machine, .deps carried: dest=DIR bash bench/update_overlap_gpu.sh
set -uo pipefail
dest=${dest:-${OUT:-bench/results/latest}}
source bench/deps_env.sh
out=$(mktemp -d /tmp/aebench-upd.XXXXXX)
mkdir -p "$dest"
trap 'tar czf "$dest/bench.tgz" -C "$out" . 2>/dev/null; cp "$out"/table.md "$dest"/ 2>/dev/null' EXIT
machine_info | tee "$out/device.txt"
make -j16 CUDA=1 MPI=0 aebench >"$out/build.txt" 2>&1 || { tail -n 30 "$out/build.txt"; exit 1; }
shape=(-m megatron-lm -l 32 -h 2048 --heads 16 --seq 1024 -b 4 --dtype bf16 --device cuda --log-interval 10)
for round in 1 2; do
    for gb in 4 32; do
        its=$([ "$gb" = 4 ] && echo 40 || echo 12)
        bench_run "r${round}_gb${gb}_clip" --global-batch "$gb" --iters "$its"
        bench_run "r${round}_gb${gb}_noclip_graphs" --global-batch "$gb" --iters "$its" --clip-grad 0 --graphs on
        bench_run "r${round}_gb${gb}_noclip_early" --global-batch "$gb" --iters "$its" --clip-grad 0
        bench_run "r${round}_gb${gb}_clip_nographs" --global-batch "$gb" --iters "$its" --graphs off
    done
done
python3 - "$out" <<'PY' | tee "$out/table.md"
import glob, json, os, statistics, sys
out = sys.argv[1]
print("| global batch | run | step ms (steady median, rounds 1 / 2) | optimizer ms | graphs |\n|---|---|---|---|---|")
for gb in (4, 32):
    for v in ("clip", "noclip_graphs", "noclip_early", "clip_nographs"):
        steps, opts, notes = [], [], ""
        for r in (1, 2):
            f = sorted(glob.glob(os.path.join(out, f"res_r{r}_gb{gb}_{v}", "*.json")))
            if not f:
                steps.append(float("nan")); continue
            j = json.load(open(f[-1]))
            its = j["iterations"][j["summary"].get("steady_from_iteration", 4) - 1:]
            steps.append(j["summary"].get("steady_median_ms") or statistics.median(i["ms"] for i in its))
            opts.append(statistics.median(i["optimizer_ms"] for i in its))
            notes = "; ".join(n for n in j.get("engine_notes", []) if n.startswith("graphs"))
        print(f"| {gb} | {v} | {steps[0]:.1f} / {steps[1]:.1f} | {statistics.median(opts) if opts else float('nan'):.2f} | {notes} |")
PY
