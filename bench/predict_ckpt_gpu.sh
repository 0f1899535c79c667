#!/usr/bin/env bash
# gemini's persistent checkpoint (--ckpt-dir) predicted and measured on N GPUs in one call
# (issue 16): calibrate (one rank, N ranks, the checkpoint directory on the machine's disk),
# then gemini none at case 6's shape with --ckpt-dir, every K iterations: the predicted mean
# iteration beside the measured mean, and each checkpoint's measured time.
#   RANKS=2 K=5 bash bench/predict_ckpt_gpu.sh "$OUT"
set -uo pipefail
dest=${1:-bench/results/latest}
source bench/dp_env.sh # (builds aebench with MPI and NCCL; sets $out)
ranks=${RANKS:-2}
K=${K:-5}
ck=$PWD/ckpt_probe # (the machine's disk: O_DIRECT needs a real file system)
mkdir -p "$ck"
shape=(--device cuda -h 2048 -b 4)
./aebench --calibrate "${shape[@]}" --results "$out/res" | tail -n 1
./aebench --calibrate -m gemini --ckpt-dir "$ck" "${shape[@]}" --results "$out/res" | tail -n 2
# (at N ranks also the checkpoint with every rank writing at once, which the prediction takes;
# ONE_RANK_CKPT=1: only one rank's rate, shared by the machine's ranks)
if [ -n "${ONE_RANK_CKPT:-}" ]; then
    ./aebench --calibrate --ranks "$ranks" "${shape[@]}" --results "$out/res" | tail -n 3
else
    ./aebench --calibrate --ranks "$ranks" -m gemini --ckpt-dir "$ck" "${shape[@]}" --results "$out/res" | tail -n 4
fi
g=(-m gemini -l 16 --global-batch 32 --ranks "$ranks" --gemini-mode none --ckpt-dir "$ck" --ckpt-every "$K")
./aebench --predict "${g[@]}" "${shape[@]}" --results "$out/res" | grep "^predict" | tee "$out/predict.txt"
timeout 240 ./aebench "${g[@]}" "${shape[@]}" --iters $((2 * K + 1)) --log-interval $((2 * K + 1)) --results "$out/runs" \
    >"$out/run.txt" 2>&1
echo "run exit $?"
python3 - "$out" <<'PY' | tee "$out/table.md"
import glob, json, re, sys
out = sys.argv[1]
p = re.search(r"([0-9.]+) ms/it", open(out + "/predict.txt").read())
j = json.load(open(sorted(glob.glob(out + "/runs/*.json"))[-1]))
its = j["iterations"][1:]  # (the first carries one-time costs; 2K left, checkpoints at K and 2K)
mean = sum(i["ms"] for i in its) / len(its)
ck = [i["checkpoint"]["ms"] for i in j["iterations"] if "checkpoint" in i]
print("| predicted mean ms/it | measured mean ms/it (iterations 2..) | error | checkpoints ms |")
print("|---|---|---|---|")
print("| %s | %.1f | %s | %s |" % (p.group(1) if p else "?", mean, "%+.1f%%" % ((float(p.group(1)) - mean) / mean * 100) if p else "",
                                   " ".join("%.0f" % x for x in ck)))
PY
cp "$out"/res/machine_*.json "$dest"/ 2>/dev/null
rm -rf "$ck"
