#!/usr/bin/env bash
# Pinned copies' rate against the host region they sweep (bench/copy_region.cu), on one GPU,
# then on two GPUs at once (each its own region; the two-GPU machine), into $dest/copy_region.md.
#   dest=DIR bash bench/copy_region_gpu.sh      (from the repository root, on the GPU machine)
set -uo pipefail
dest=${dest:-${OUT:-bench/results/latest}}
mkdir -p "$dest" build
gcc -O2 -fopenmp -Ikernels -c kernels/host_pages.c -o build/host_pages_cr.o &&
    nvcc -O2 -arch=sm_90 -Ikernels -Ibench -Xcompiler -fopenmp -o build/copy_region bench/copy_region.cu \
        build/host_pages_cr.o -lgomp || exit 1
{
    nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1
    grep -E "MemTotal|Hugepagesize" /proc/meminfo
    cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null
    echo "## one GPU, 256 MiB chunks"
    ./build/copy_region 0 256 ${ONE_GB:-0.25 4 40 160}
    echo "## one GPU, 1 GiB chunks"
    ./build/copy_region 0 1024 1 160
    gpus=$(nvidia-smi -L | grep -c '^GPU')
    if [ "$gpus" -ge 2 ]; then
        echo "## two GPUs at once, each its own region, 256 MiB chunks"
        ./build/copy_region 0 256 ${TWO_GB:-0.25 80} >"$dest/two_0.md" &
        ./build/copy_region 1 256 ${TWO_GB:-0.25 80} >"$dest/two_1.md"
        wait
        cat "$dest/two_0.md"; tail -n +3 "$dest/two_1.md"
    fi
} 2>&1 | tee "$dest/copy_region.md"
