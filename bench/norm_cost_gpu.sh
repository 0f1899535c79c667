#!/usr/bin/env bash
# What waiting for the whole gradient norm costs (issue 50): with clipping, the update can start
# only once every block's gradient is in, so the optimizer phase (the norm's combine, the clip
# scale, AdamW of every block) is exposed after the backward.  megatron-lm l32 h2048 b4 bf16 on
# one GPU at 1 and 8 micro-batches, clip 1.0 and 0, with the optimizer phase's share of the step;
# and Megatron-Core's GPT at the same shapes (bench/mcore_gpu.py) beside them.
# Usage on the device machine, .deps carried: dest=DIR bash bench/norm_cost_gpu.sh
set -uo pipefail
dest=${dest:-${OUT:-bench/results/latest}}
source bench/deps_env.sh
bench_begin norm
bench_cuda_build aebench
shape=(-m megatron-lm -l 32 -h 2048 --heads 16 --seq 1024 -b 4 --dtype bf16 --device cuda --log-interval 10)
bench_run m1_clip --global-batch 4 --iters 40
bench_run m1_noclip --global-batch 4 --iters 40 --clip-grad 0
bench_run m8_clip --global-batch 32 --iters 12
for sel in full selective; do
    PYTHONPATH=$PWD/.deps/mcore timeout 600 python3 -m torch.distributed.run --standalone --nproc_per_node 1 \
        bench/mcore_gpu.py --tag "mc_m1_$sel" -l 32 -H 2048 --heads 16 --seq 1024 -b 4 --global-batch 4 \
        --recompute "$sel" --iters 20 --warmup 5 >"$out/mc_m1_$sel.txt" 2>&1
    grep '^{"anchor"' "$out/mc_m1_$sel.txt" | tail -n 1 | tee "$out/mc_m1_$sel.json"
done
bench_run m1_sel --global-batch 4 --iters 40 --recompute selective
python3 - "$out" <<'PY' | tee "$out/table.md"
import glob, json, os, statistics, sys
out = sys.argv[1]
print("| run | step ms (steady median) | optimizer ms (median) | optimizer share | samples/s |\n|---|---|---|---|---|")
for t in ("m1_clip", "m1_noclip", "m8_clip", "m1_sel"):
    f = sorted(glob.glob(os.path.join(out, "res_" + t, "*.json")))
    if not f:
        print(f"| {t} | failed | | | |")
        continue
    j = json.load(open(f[-1]))
    its = j["iterations"][j["summary"].get("steady_from_iteration", 4) - 1:]
    step = j["summary"].get("steady_median_ms") or statistics.median(i["ms"] for i in its)
    opt = statistics.median(i["optimizer_ms"] for i in its)
    print(f"| {t} | {step:.1f} | {opt:.2f} | {100 * opt / step:.1f}% | {j['summary']['samples_per_second']:.2f} |")
for t in ("mc_m1_full", "mc_m1_selective"):
    try:
        m = json.load(open(os.path.join(out, t + ".json")))
        print(f"| Megatron-Core {t[6:]} | {m['median_ms']:.1f} | | | {m['samples_per_s']:.2f} |")
    except (OSError, ValueError) as e:
        print(f"| {t} | failed: {e} | | | |")
PY
