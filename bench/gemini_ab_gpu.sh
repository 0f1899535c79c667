#!/usr/bin/env bash
# What slows the forward of an interleaved gemini step (l16 h2048, global batch 32, 2 GPUs):
# one run per variant, 30 iterations (checkpoints from 15), the step's forward and backward
# with and without checkpoints.  A variant is "tag;VAR=value VAR=value;extra aebench args":
# the libraries' environment (CUDA_DEVICE_MAX_CONNECTIONS: the driver's hardware work queues;
# NCCL_* variables; aebench itself reads none that change a run: docs/environment.md) and
# arguments (--gemini-replicas 1: the own copy alone, no peer traffic; --gemini-transport
# read|sendrecv: the peers' chunks read by copy engines or sent by NCCL kernels).  (The NCCL
# thread blocks of the checkpoint's communicator and the share of each idle span the plan
# fills were environment switches here until issue 48: 4 and 90%, as the A/Bs cited in
# engines/gemini.c chose.)
#   bash bench/gemini_ab_gpu.sh "$OUT"      VARIANTS=$'tag;ENV;args\n...' to choose, TEST_CUDA=pattern
# (bench/results/2026-11-24-h200x2-gemini/ab: the first version's CTAs x fill table.)
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/dp_env.sh
# TEST_CUDA=pattern: first build/tests/test_cuda, the tests matching pattern (needs cmocka in .deps)
if [ -n "${TEST_CUDA:-}" ]; then
    make -j16 CUDA=1 MPI=1 NCCL_HOME="$nccl_home" build/tests/test_cuda >>"$out/build.txt" 2>&1 &&
        AEBENCH_CUDA_TESTS=$TEST_CUDA ./build/tests/test_cuda >"$out/test_cuda.txt" 2>&1
    echo "test_cuda exit $?: $(grep -E '^\[  (PASSED|FAILED)|differ' "$out/test_cuda.txt" | tr '\n' ' ')"
    cp "$out/test_cuda.txt" "$dest/" 2>/dev/null
fi
# ITERS, FROM: the job's iterations and the first checkpointed one (default 30, 15)
iters=${ITERS:-30} from=${FROM:-15}
shape=(-m gemini -l 16 -h 2048 -b 4 --global-batch 32 --iters "$iters" --gemini-ckpt-from "$from" --log-interval 1 --ranks 2 --device cuda)
default_variants='none;;--gemini-mode none
read;;--gemini-transport read
sendrecv;;--gemini-transport sendrecv
naive;;--gemini-mode naive
own_only;;--gemini-replicas 1'
echo "| variant | environment | arguments | without ms | with ms | slowdown | forward ms (without / with) | backward ms (without / with) | exposed ms | late ms |" | tee "$out/table.md"
echo "|---|---|---|---|---|---|---|---|---|---|" | tee -a "$out/table.md"
while IFS=';' read -r tag envs args; do
    [ -z "$tag" ] && continue
    read -r -a env_a <<<"$envs"
    read -r -a args_a <<<"$args"
    SECONDS=0
    env ${env_a[@]+"${env_a[@]}"} timeout 200 ./aebench "${shape[@]}" ${args_a[@]+"${args_a[@]}"} \
        --results "$out/$tag" >"$out/$tag.txt" 2>&1 </dev/null
    echo "$tag: exit $? in $SECONDS s" >&2
    python3 - "$out/$tag" "$tag" "$envs" "$args" "$from" <<'PY' | tee -a "$out/table.md"
import glob, json, statistics, sys
f = glob.glob(sys.argv[1] + "/*.json")
tag, envs, args, first = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
if not f:
    print(f"| {tag} | {envs} | {args} | failed | | | | | | |"); sys.exit()
d = json.load(open(f[0])); g = d.get("gemini", {})
its = [i for i in d["iterations"] if i["iteration"] > 3]
wo = [i for i in its if i.get("phase") == "no_checkpoint"]
wi = [i for i in its if i.get("phase") == "checkpoint"] or wo
m = lambda xs, k: statistics.median(i[k] for i in xs) if xs else float("nan")
ex = statistics.median(i.get("checkpoint", {}).get("exposed_ms", 0) for i in wi)
late = [i for i in its if i["iteration"] >= first]
print(f"| {tag} | {envs} | {args} | {m(wo, 'ms'):.1f} | {m(wi, 'ms'):.1f} | {m(wi, 'ms') / m(wo, 'ms'):.3f} | "
      f"{m(wo, 'forward_ms'):.1f} / {m(wi, 'forward_ms'):.1f} | {m(wo, 'backward_ms'):.1f} / {m(wi, 'backward_ms'):.1f} | {ex:.1f} | "
      f"{m(late, 'ms'):.1f} |")
PY
done <<<"${VARIANTS:-$default_variants}"
echo "total: $(( $(date +%s) - t0 )) s"
