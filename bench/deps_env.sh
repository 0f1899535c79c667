# Sourced by the GPU bench scripts on the device machine, from the repository root: unpack the
# carried .deps/*.deb (cJSON, cmocka: the machine has no registry) into .deps/root and point
# the compiler, linker and loader at them.
mkdir -p .deps/root
# (test_cuda needs cmocka: a batch whose .deps lacked it lost its first step, 2026-11-27)
ls .deps/libcmocka-dev_*.deb >/dev/null 2>&1 ||
    echo "deps_env: .deps has no libcmocka-dev: test_cuda will not build (here: ../shared/tools/device-deps.sh libcmocka0 libcmocka-dev)" >&2
for f in .deps/*.deb; do dpkg -x "$f" .deps/root; done
export CPATH=$PWD/.deps/root/usr/include
export LIBRARY_PATH=$PWD/.deps/root/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$PWD/.deps/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}

# The machine a call ran on (GPU, CPU, host memory, the time), for the results' device.txt.
machine_info() {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    lscpu | grep -E "Model name|^CPU\(s\)"
    free -g | head -2
    date -u +%Y-%m-%dT%H:%MZ
}

# bench_run TAG ARGS...: ./aebench with the script's ${shape[@]} and ARGS, its results in
# $out/res_TAG and its output in $out/TAG.txt; prints the run's done line (or its error).
bench_run() {
    local tag=$1
    shift
    timeout 300 ./aebench "${shape[@]}" "$@" --results "$out/res_$tag" >"$out/$tag.txt" 2>&1
    echo "$tag: $(grep -E 'done:|ERROR|OUT OF' "$out/$tag.txt" | head -n 1)"
}

# bench_workdir NAME: the call's work folder ($out, /tmp/aebench-NAME.*) and $dest made; when
# the script exits, the folder packed into $dest/bench.tgz (the raw logs and JSON: not for
# git) and its table.md copied beside it.  Expects $dest.
bench_workdir() {
    out=$(mktemp -d "/tmp/aebench-$1.XXXXXX")
    mkdir -p "$dest"
    trap 'tar czf "$dest/bench.tgz" -C "$out" --exclude="*.bin" . 2>/dev/null; cp "$out"/table.md "$dest"/ 2>/dev/null' EXIT
}

# bench_begin NAME: bench_workdir NAME, the machine into $out/device.txt (and on stdout), and
# $t0, the call's start, for the scripts' "N s" lines.
bench_begin() {
    bench_workdir "$1"
    machine_info | tee "$out/device.txt"
    t0=$(date +%s)
}

# bench_cuda_build [TARGETS...]: the targets (default aebench and test_cuda) built with the
# CUDA backend (the output in $out/build.txt; on failure its tail, and the script ends).
bench_cuda_build() {
    [ $# -gt 0 ] || set -- aebench build/tests/test_cuda
    make -j16 CUDA=1 MPI=0 "$@" >"$out/build.txt" 2>&1 || { tail -n 30 "$out/build.txt"; exit 1; }
}

# bench_test_cuda: test_cuda (every kernel and engine against the CPU backend), its verdict
# and failure lines, and its output copied into $dest.
bench_test_cuda() {
    timeout 420 ./build/tests/test_cuda >"$out/test_cuda.txt" 2>&1
    echo "test_cuda exit $? at $(($(date +%s) - t0)) s"
    # the verdicts and each failure's place first (2026-11-27e: twenty "differing=0" lines hid
    # the one failed test)
    grep -E '^\[ +(PASSED|FAILED|ERROR|LINE) ' "$out/test_cuda.txt" | head -n 20
    cp "$out/test_cuda.txt" "$dest/"
}
