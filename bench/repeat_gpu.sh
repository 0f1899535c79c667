#!/usr/bin/env bash
# Repeatable GPU runs (issue 14, part 4), in one go on the GPU machine:
#  1. build aebench and test_cuda with CUDA (and MPI/NCCL, as the data-parallel scripts do);
#     build the code before the change too (OLD_OPS: the previous kernels/cuda/cuda_ops.cu,
#     with the float-atomic embedding gradient) in a copy of the tree;
#  2. test_cuda: every op against the CPU (the encoder's backward bit for bit), every offload
#     engine's losses and final parameters equal to megatron-lm's on the GPU bit for bit, and
#     two identical runs equal in fp32, TF32 and bf16;
#  3. at the benchmark shape (h2048 b4 s1024, TF32, l16): megatron-lm twice, stronghold -w 4,
#     zero-offload, l2l and zero-infinity once, with the old and the new code: how many
#     iterations' losses differ bitwise from the first megatron-lm run's, and the largest
#     relative difference; then ms/iteration of megatron-lm old vs new (TF32 and bf16) and
#     the encoder backward's time from the per-op profiler.
# Usage on the device machine, .deps carried (with .deps/old/cuda_ops.cu):
#   bash bench/repeat_gpu.sh "$OUT"
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/dp_env.sh
make -j16 CUDA=1 MPI=1 NCCL_HOME="$nccl_home" build/tests/test_cuda >>"$out/build.txt" 2>&1 || { tail -n 40 "$out/build.txt"; exit 1; }

OLD_OPS=${OLD_OPS:-.deps/old/cuda_ops.cu}
old=$out/old_tree
if [ -f "$OLD_OPS" ]; then
    mkdir -p "$old"
    tar --exclude=./build --exclude=./build-asan --exclude=./results --exclude=./.git -cf - . | tar -xf - -C "$old"
    cp "$OLD_OPS" "$old/kernels/cuda/cuda_ops.cu"
    (cd "$old" && make -j16 CUDA=1 MPI=1 NCCL_HOME="$nccl_home" aebench >"$out/build_old.txt" 2>&1) || { tail -n 20 "$out/build_old.txt"; exit 1; }
fi
echo "builds: $(( $(date +%s) - t0 )) s"

echo "== test_cuda"
./build/tests/test_cuda >"$out/test_cuda.txt" 2>&1
echo "test_cuda exit $?"
grep -E "bitwise differing=[1-9]|vs megatron-lm on the GPU|^repeat |PASSED|FAILED|over" "$out/test_cuda.txt" | head -n 40
cp "$out/test_cuda.txt" "$dest/" 2>/dev/null

shape=(-l 16 -h 2048 -b 4 --iters 12 --log-interval 1)
one() { # tag binary args...
    local tag=$1 bin=$2
    shift 2
    timeout 300 "$bin" --device cuda --results "$out/res_$tag" "${shape[@]}" "$@" >"$out/$tag.txt" 2>&1
    echo "$tag: $(grep -E 'done:|ERROR|rror' "$out/$tag.txt" | head -n 1)"
}
for v in new old; do
    bin=./aebench
    [ "$v" = old ] && bin=$old/aebench
    [ -x "$bin" ] || continue
    one "${v}_meg_a" "$bin" -m megatron-lm
    one "${v}_meg_b" "$bin" -m megatron-lm
    one "${v}_sh4" "$bin" -m stronghold -w 4
    one "${v}_zo" "$bin" -m zero-offload
    one "${v}_l2l" "$bin" -m l2l
    one "${v}_zi" "$bin" -m zero-infinity
    one "${v}_meg_bf16" "$bin" -m megatron-lm --dtype bf16 --iters 20
    one "${v}_meg_fp32" "$bin" -m megatron-lm --math fp32 --iters 12
    # (AEBENCH_PROFILE_OPS: the old code's per-op profiler; today's aebench reads no such
    # variable, --profile replaced it)
    AEBENCH_PROFILE_OPS=1 one "${v}_prof" "$bin" -m megatron-lm --iters 3
done
python3 - "$out" <<'PY' | tee "$out/table.md"
import glob, json, os, sys
out = sys.argv[1]
def load(tag):
    f = glob.glob(os.path.join(out, "res_" + tag, "*.json"))
    return json.load(open(f[0])) if f else None
print("| code | run | iterations | losses differing from megatron-lm run a | max rel diff | median ms |")
print("|---|---|---|---|---|---|")
for v in ("old", "new"):
    a = load(v + "_meg_a")
    if not a: continue
    la = [i["loss"] for i in a["iterations"]]
    for tag in ("meg_a", "meg_b", "sh4", "zo", "l2l", "zi"):
        d = load(v + "_" + tag)
        if not d or d.get("status") != "ok":
            print(f"| {v} | {tag} | failed | | | |"); continue
        l = [i["loss"] for i in d["iterations"]]
        diff = sum(1 for x, y in zip(la, l) if x != y)
        rel = max(abs(x - y) / abs(x) for x, y in zip(la, l))
        print(f"| {v} | {tag} | {len(l)} | {diff} | {rel:.2e} | {d['summary']['median_ms']:.1f} |")
    for tag in ("meg_bf16", "meg_fp32"):
        d = load(v + "_" + tag)
        if d and d.get("status") == "ok":
            print(f"| {v} | {tag} | {len(d['iterations'])} | | | {d['summary']['median_ms']:.1f} |")
PY
for v in new old; do
    echo "== $v: encoder rows of the op profile"
    grep -iE "encoder|total" "$out/${v}_prof.txt" | head -n 6
done
echo "total: $(( $(date +%s) - t0 )) s"
