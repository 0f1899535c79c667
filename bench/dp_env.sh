# Sourced by the data-parallel bench scripts (bench/dp_gpu.sh, bench/dp_findmax_gpu.sh) on the
# two-GPU machine: unpack .deps, find NCCL, build aebench with CUDA, Open MPI and NCCL, and
# define run TAG NP ARGS... (one aebench run, NP > 1 under mpirun, into $out/res_TAG, its
# output in $out/TAG.txt).  Expects $dest (where the results go); sets $out, $t0, $nccl_home,
# MPI and WRAP (RANK_GPU=1: each rank sees only its own GPU).
out=$(mktemp -d /tmp/aebench-dp.XXXXXX)
mkdir -p "$dest"
source bench/deps_env.sh
export NCCL_NVLS_ENABLE=0
finish() {
    tar czf "$dest/bench.tgz" -C "$out" . 2>/dev/null
    cp "$out"/table.md "$out"/build_env.txt "$dest"/ 2>/dev/null
}
trap finish EXIT

{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    nvidia-smi topo -m 2>/dev/null | head -n 4
    date -u +%Y-%m-%dT%H:%MZ
    mpirun --version 2>&1 | head -n 1
} | tee "$out/build_env.txt"

# NCCL: the system's or the toolkit's (found by the compiler as they are), else PyTorch's
# wheel (NCCL_HOME, with a libnccl.so link for the linker).
nccl_home=""
if [ ! -e /usr/include/nccl.h ] && [ ! -e /usr/local/cuda/include/nccl.h ]; then
    wheel=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null)
    if [ -n "$wheel" ] && [ -e "$wheel/include/nccl.h" ]; then
        mkdir -p "$out/nccl/lib"
        ln -sf "$(ls "$wheel"/lib/libnccl.so* | head -n 1)" "$out/nccl/lib/libnccl.so"
        ln -sf "$wheel/include" "$out/nccl/include"
        nccl_home=$out/nccl
        export LD_LIBRARY_PATH=$wheel/lib:$LD_LIBRARY_PATH
    fi
fi
echo "nccl: ${nccl_home:-system} $(ls /usr/lib/x86_64-linux-gnu/libnccl.so* /usr/local/cuda/lib64/libnccl.so* 2>/dev/null | head -n 2 | tr '\n' ' ')" | tee -a "$out/build_env.txt"

t0=$(date +%s)
make -j16 CUDA=1 MPI=1 NCCL_HOME="$nccl_home" aebench >"$out/build.txt" 2>&1 || { tail -n 40 "$out/build.txt"; exit 1; }
grep -E "warning" "$out/build.txt" | head -n 20
echo "build: $(( $(date +%s) - t0 )) s"

MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH)
# NET=sockets: NCCL between the GPUs as between two machines joined by a network (no P2P over
# NVLink or PCIe, no shared memory: its socket transport), for aebench's ranks and PyTorch's
if [ "${NET:-}" = sockets ]; then
    export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
    MPI+=(-x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE)
    echo "NCCL: sockets (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1)" | tee -a "$out/build_env.txt"
fi
# aebench picks its GPU by local rank; RANK_GPU=1 hides the others from each rank instead.
if [ "${RANK_GPU:-0}" = 1 ]; then
    printf '#!/bin/sh\nCUDA_VISIBLE_DEVICES=${OMPI_COMM_WORLD_LOCAL_RANK:-0} exec "$@"\n' >"$out/rank_gpu.sh"
    chmod +x "$out/rank_gpu.sh"
    WRAP=("$out/rank_gpu.sh")
else
    WRAP=()
fi
run() { # tag np args...
    local tag=$1 np=$2
    shift 2
    local launch=()
    [ "$np" -gt 1 ] && launch=("${MPI[@]}" -np "$np" "${WRAP[@]}")
    timeout 400 "${launch[@]}" ./aebench --device cuda --results "$out/res_$tag" "$@" >"$out/$tag.txt" 2>&1
    echo "$tag: $(grep -E 'done:|ERROR|rror|OUT OF' "$out/$tag.txt" | head -n 2)"
}

