#!/usr/bin/env bash
# stronghold with clipping on (issue 14, part 2) on one GPU, in one call: at l32 -w 15 and at
# l64 under the V100 budgets (--gpu-mem-limit 32G --cpu-mem-limit 90G), h2048 b4 TF32:
#   clip 0                    no clipping: the host Adam under the backward (the target)
#   clip C, --clip-speculate 0   clipping on, every host Adam after the norm (before)
#   clip C, speculate auto       clipping on, updated ahead of the norm (today's default)
#   clip 1.0, speculate auto     the default clip, which binds in every step of this data:
#                                the first step is redone, then each step waits for the norm
# and l2l and zero-infinity at l32 (clip 0, waiting, ahead).
# C is a clip that does not bind here (norms stay below it: the log's grad norms say so), as
# in most steps of a real training after its first ones.  Each run beside its roofline bound
# (bench/stronghold_summary.py, with bandwidths measured in the same call).
#   bash bench/clip_gpu.sh "$OUT"
set -uo pipefail
out=${1:-bench/results/latest}
mkdir -p "$out"
source bench/deps_env.sh
machine_info | tee "$out/device.txt"
targets="aebench"
grep -q "^bench-tools:" Makefile && targets="$targets bench-tools"
make -j16 CUDA=1 MPI=0 $targets >"$out/build.txt" 2>&1 || { tail -n 40 "$out/build.txt"; exit 1; }
[ -x build/bench/host_adam ] && ./build/bench/host_adam --gib 4 >"$out/bandwidth.txt" 2>&1
res="$out/results"
C=${CLIP:-50}
run() { # name, then aebench arguments (-m stronghold unless given)
    local name=$1; shift
    local m=(-m stronghold)
    [ "${1:-}" = -m ] && m=()
    ./aebench --device cuda "${m[@]}" -h 2048 -b 4 --results "$res" "$@" >"$out/run_$name.txt" 2>&1
    echo "-- $name (exit $?): $(grep -hE 'done:|clip-speculate: [0-9]+ steps|OUT OF|FAILED' "$out/run_$name.txt" | tr '\n' ' ' | cut -c1-300)"
}
v100=(-l 64 --gpu-mem-limit 32G --cpu-mem-limit 90G --iters 8 --log-interval 1)
l32=(-l 32 -w 15 --iters 10 --log-interval 1)
run l32_noclip "${l32[@]}" --clip-grad 0
run l32_wait "${l32[@]}" --clip-grad "$C" --clip-speculate 0
run l32_ahead "${l32[@]}" --clip-grad "$C"
run l32_clip1 "${l32[@]}" --clip-grad 1.0
if [ -z "${SKIP_L64:-}" ]; then # (SKIP_L64=1: not these, to save device time)
    run l64_noclip "${v100[@]}" --clip-grad 0
    run l64_wait "${v100[@]}" --clip-grad "$C" --clip-speculate 0
    run l64_ahead "${v100[@]}" --clip-grad "$C"
    run l64_clip1 "${v100[@]}" --clip-grad 1.0
fi
for e in l2l zero-infinity; do
    run "${e}_noclip" -m $e -l 32 --iters 8 --log-interval 1 --clip-grad 0
    run "${e}_wait" -m $e -l 32 --iters 8 --log-interval 1 --clip-grad "$C" --clip-speculate 0
    run "${e}_ahead" -m $e -l 32 --iters 8 --log-interval 1 --clip-grad "$C"
done
echo "grad norms (l32, clip 0): $(grep -ho 'grad norm: [0-9.]*' "$out/run_l32_noclip.txt" "$res"/log_stronghold_l-32*.txt 2>/dev/null | awk '{print $3}' | sort -g | sed -n '1p;$p' | tr '\n' ' ')"
python3 bench/stronghold_summary.py "$out" | tee "$out/table.md"
