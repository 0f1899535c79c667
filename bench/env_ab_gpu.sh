#!/usr/bin/env bash
# An A/B of one environment switch on one GPU, in one call: test_cuda (every kernel and engine
# against the CPU), then megatron-lm l32 h2048 heads16 s1024 b4 in bf16 and TF32 with the
# switch at each value (REPS times, the values interleaved, then once each profiled), and a
# table: each run's step time and SM clock (the JSON's gpu_clock: a variant that draws less
# power may run at a higher one), the loss at the last step (the same at every value: the
# switch changes no result), and the profiled device time of the op families the switch moves.
#   AB_VAR=AEBENCH_NORMS AB_VALUES="overlap after" AB_OPS="norm_squared" bash bench/env_ab_gpu.sh "$OUT"
# AB_OPS: columns, each a family or families joined by "+" (summed); AB_NAME: the work folder's
# name; PARTS (default "test step"), REPS (2), DTYPES ("bf16 tf32").
set -uo pipefail
dest=${1:-bench/results/latest}
parts=" ${PARTS:-test step} "
var=${AB_VAR:?the environment variable to switch}
values=(${AB_VALUES:?its values, the first the default})
source bench/deps_env.sh
bench_begin "${AB_NAME:-ab}"
bench_cuda_build
[[ $parts == *" test "* ]] && bench_test_cuda
if [[ $parts == *" step "* ]]; then
    shape=(--device cuda -l 32 -h 2048 --heads 16 --seq 1024 -b 4 --iters 6 --log-interval 6)
    for dt in ${DTYPES:-bf16 tf32}; do
        args=(--math tf32)
        [ "$dt" = bf16 ] && args=(--dtype bf16)
        for rep in $(seq "${REPS:-2}"); do
            for v in "${values[@]}"; do
                (export "$var=$v"; bench_run "megatron_${dt}_${v}_$rep" -m megatron-lm "${args[@]}")
            done
        done
        for v in "${values[@]}"; do
            (export "$var=$v"; bench_run "megatron_${dt}_${v}_profile" -m megatron-lm "${args[@]}" --profile)
        done
    done
    python3 - "$out" "$var" "${AB_OPS:-}" "${values[@]}" <<'PY' | tee "$out/table.md"
import sys
out, var, ops, values = sys.argv[1], sys.argv[2], [o for o in sys.argv[3].split(",") if o], sys.argv[4:]
sys.path.insert(0, "bench")
from bench_json import clock_of, load_run
print(f"| dtype | {var} | step ms (each run) | SM clock (each run) | loss at the last step | profiled step ms |" + "".join(f" profiled: {o} ms |" for o in ops))
print("|---|---|---|---|---|---|" + "---|" * len(ops))
for dt in ("bf16", "tf32"):
    for v in values:
        runs = [load_run(out, f"megatron_{dt}_{v}_{r}") for r in range(1, 10)]
        runs = [r for r in runs if r]
        ms = ", ".join(f"{r['summary']['median_ms']:.1f}" for r in runs)
        clocks = ", ".join(clock_of(r) for r in runs)
        loss = runs[0]["iterations"][-1]["loss"] if runs and runs[0].get("iterations") else float("nan")
        p = load_run(out, f"megatron_{dt}_{v}_profile")
        fam = {o["op"]: o["ms_per_step"] for o in p["profile"]["ops"]} if p and "profile" in p else {}
        step = p["summary"]["median_ms"] if p else float("nan")
        cols = "".join(f" {sum(fam.get(f, 0) for f in o.split('+')):.3f} |" for o in ops)
        print(f"| {dt} | {v} | {ms} | {clocks} | {loss:.6f} | {step:.1f} |{cols}")
PY
    echo "steps: $(($(date +%s) - t0)) s"
fi
