#!/usr/bin/env bash
# After a restructuring (issue 48: the engines' options, report and recovery moved into the
# engines, the environment's knobs removed), on one GPU in one go:
#  1. build aebench and test_cuda with CUDA, MPI and NCCL (bench/dp_env.sh), warnings listed;
#  2. test_cuda: every op against the CPU, every offload engine against megatron-lm on the GPU;
#  3. a small GPU run of every engine (-m all), then --rerun of megatron-lm's record: the
#     rerun's losses equal the record's (on the GPU: to the bit where runs repeat) and what it
#     says differs (nothing: the same machine, build and commit);
#  4. the log header's build and settings lines, as a GPU run writes them.
# Usage on the device machine, .deps carried: bash bench/test_cuda_gpu.sh "$OUT"
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/dp_env.sh
make -j16 CUDA=1 MPI=1 NCCL_HOME="$nccl_home" build/tests/test_cuda >>"$out/build.txt" 2>&1 || { tail -n 40 "$out/build.txt"; exit 1; }
echo "builds: $(( $(date +%s) - t0 )) s"

echo "== test_cuda"
./build/tests/test_cuda >"$out/test_cuda.txt" 2>&1
echo "test_cuda exit $?"
grep -E "PASSED|FAILED|^\[  (ERROR|FAILED)" "$out/test_cuda.txt" | head -n 30
cp "$out/test_cuda.txt" "$dest/" 2>/dev/null

echo "== -m all, small, on the GPU"
shape=(-l 4 -h 1024 --heads 16 --seq 512 -b 2 --iters 8 --log-interval 4)
timeout 300 ./aebench "${shape[@]}" -m all --results "$out/res_all" >"$out/all.txt" 2>&1
echo "-m all exit $?"
grep -E "done:|ERROR|OUT OF" "$out/all.txt" | head -n 12
rec=$(ls "$out"/res_all/log_megatron-lm_*.json | head -n 1)
echo "== --rerun $(basename "$rec")"
timeout 300 ./aebench --rerun "$rec" --results "$out/res_rerun" >"$out/rerun.txt" 2>&1
echo "rerun exit $?"
head -n 12 "$out/rerun.txt"
python3 - "$rec" "$out"/res_rerun/log_megatron-lm_*.json <<'PY' | tee "$out/rerun_compare.txt"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
la = [(i["loss"], i["grad_norm"]) for i in a["iterations"]]
lb = [(i["loss"], i["grad_norm"]) for i in b["iterations"]]
same = sum(x == y for x, y in zip(la, lb))
rel = max((abs(x[0] - y[0]) / abs(x[0]) for x, y in zip(la, lb)), default=0.0)
print(f"rerun on the GPU: {same}/{len(la)} iterations bitwise equal (loss, grad norm), largest relative loss difference {rel:.3g}")
PY
echo "== the log header's provenance"
grep -E "^(build|build config|settings)" "$out"/res_all/log_megatron-lm_*.txt | head -n 3
cp "$out"/rerun.txt "$out"/all.txt "$dest/" 2>/dev/null
