# The gemini engine on the CPU backend, sourced by tests/run.sh (PASSED, FAILED, FAILURES): it
# trains as megatron-lm ZeRO-3, checkpoints every iteration into a store on a memory file
# system, and a job that loses a rank is relaunched by --ranks and recovers from the store,
# going on exactly where a run without the failure would be.

GM_WORK=$(mktemp -d "${TMPDIR:-/tmp}/aebench-gemini.XXXXXX")
GM_BIN=$(realpath "$AEBENCH")
GM_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GM_MPI=$(command -v mpirun || command -v mpiexec)
GM_STORE="$GM_WORK/shm"
mkdir -p "$GM_STORE"
GM_SHAPE=(--device cpu -l 3 -h 64 --heads 4 --seq 32 --vocab 512 --threads 1 --lr 1e-3
          --lr-warmup-fraction 0.001 --lr-decay-iters 1000 --iters 8 --log-interval 2)

gm_pass() { PASSED=$((PASSED + 1)); echo "ok   $1"; }
gm_fail() { FAILED=$((FAILED + 1)); FAILURES+=("$1"); echo "FAIL $1: $2"; }

# gm_run NAME ARGS...: aebench in $GM_WORK/NAME (results there, final params NAME.params)
gm_run() {
    local name=$1
    shift
    mkdir -p "$GM_WORK/$name"
    (cd "$GM_WORK/$name" && timeout 300 "$GM_BIN" "${GM_SHAPE[@]}" --results results \
        --save-params "$GM_WORK/$name.params" "$@" >out 2>err)
    GM_RC=$?
}
# the losses of iterations FROM.. of a run's newest JSON (aebench writes JSON numbers exactly: report_json_text)
gm_losses() {
    python3 - "$1" "${2:-1}" <<'EOF'
import glob, json, os, sys
files = sorted(glob.glob(os.path.join(sys.argv[1], "results", "*.json")), key=os.path.getmtime)
its = json.load(open(files[-1]))["iterations"] if files else []
print(" ".join(repr(i["loss"]) for i in its if i["iteration"] >= int(sys.argv[2])))
EOF
}

# gm_recovered NAME BASE WHAT [PATTERN ...]: run NAME (just made) ended 0 with BASE's final
# parameters and every PATTERN in its stdout; passes WHAT, or fails naming what it printed
gm_recovered() {
    local name=$1 base=$2 what=$3 p ok=1
    shift 3
    [ "$GM_RC" = 0 ] && cmp -s "$GM_WORK/$base.params" "$GM_WORK/$name.params" || ok=0
    for p in "$@"; do grep -q -- "$p" "$GM_WORK/$name/out" || ok=0; done
    if [ $ok = 1 ]; then
        gm_pass "$what"
    else
        gm_fail "$what" "exit $GM_RC: $(grep -hE 'every|recovered|fetched' "$GM_WORK/$name/out" | head -n 3) $(tail -c 200 "$GM_WORK/$name/err")"
    fi
}
# gm_gemini_json NAME EXPR: the Python expression over the newest JSON's "gemini" (g) holds
gm_gemini_json() {
    python3 -c 'import glob, json, os, sys
f = sorted(glob.glob(sys.argv[1] + "/results/*.json"), key=os.path.getmtime)[-1]
g = json.load(open(f))["gemini"]
sys.exit(not eval(sys.argv[2]))' "$GM_WORK/$1" "$2"
}

# ---- case 6's recovery probabilities: the exact counts against enumeration of every failure set
if GM_C6=$(cd "$GM_ROOT" && make -s build/case6_recovery >/dev/null && ./build/case6_recovery --check) &&
    [[ "$GM_C6" == *"590 of 590"* ]]; then
    gm_pass "case6_recovery --check: group and ring counts = brute force for N <= 16, m <= 4, every k"
else
    gm_fail "case6_recovery --check" "$GM_C6"
fi

# ---- one rank (no MPI needed: make check-asan runs it too): its own copy only; a run killed
# at iteration 5 and recovered by hand goes on as if it had not been -------------------------
gm_run one1 --zero-stage 3
gm_run one2 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" --gemini-job one --fail-at 5
# (with a forged account of a failure in the environment: a record takes how the job before
# ended only from --relaunch-of, which --ranks passes on; by hand there is none)
AEBENCH_RECOVERY="forged" AEBENCH_RECOVERY_FAILED_AT=3 AEBENCH_RECOVERY_LOST_S=9 \
    gm_run one3 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" --gemini-job one --gemini-recover
if [ "$GM_RC" -eq 0 ] && grep -q "recovered at iteration 4 " "$GM_WORK/one3/out" &&
    ! grep -q "forged" "$GM_WORK/one3/out" "$GM_WORK"/one3/results/*.json &&
    python3 -c 'import glob, json, sys; r = json.load(open(sys.argv[1]))["recovery"]
sys.exit(0 if r["restored_iteration"] == 4 and not {"previous_job", "failed_at_iteration", "previous_job_seconds"} & set(r) else 1)' \
        "$(ls "$GM_WORK"/one3/results/*.json | tail -1)" &&
    cmp -s "$GM_WORK/one1.params" "$GM_WORK/one3.params" &&
    [ "$(gm_losses "$GM_WORK/one3" 5)" = "$(gm_losses "$GM_WORK/one1" 5)" ] && [ -z "$(ls -A "$GM_STORE")" ]; then
    gm_pass "gemini on one rank: killed at iteration 5, recovered by hand from its own copy, = no failure (a failure forged in the environment not recorded)"
else
    gm_fail "gemini on one rank" "exit $GM_RC: $(tail -c 300 "$GM_WORK/one3/err")"
fi
rm -rf "${GM_STORE:?}"/*

# ---- a recovery past --iters (issue 47): the store of job "past" is at iteration 6 (killed at
# 7); recovering it with --iters 4 would train nothing and save iteration 6's parameters as
# 4's, and delete the store.  Refused before anything is written: exit 2, one line naming the
# iteration and --iters, no results directory, no parameters, the store kept, and recoverable
# afterwards (= no failure).  At --iters 6 (its last checkpoint is its last iteration) there is
# nothing left to train: done, said so, never "FAILED: " without a reason ---------------------
gm_run past1 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" --gemini-job past --fail-at 7
gm_run past2 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" --gemini-job past --gemini-recover --iters 4
if [ "$GM_RC" -eq 2 ] && [ "$(wc -l <"$GM_WORK/past2/err")" -eq 1 ] &&
    grep -q "^aebench: --gemini-recover: job past would recover iteration 6 (its newest whole checkpoint), past --iters 4; nothing was written and the store is kept" "$GM_WORK/past2/err" &&
    [ ! -e "$GM_WORK/past2/results" ] && [ ! -e "$GM_WORK/past2.params" ] && [ ! -s "$GM_WORK/past2/out" ] &&
    [ -s "$GM_STORE/aebench-gemini-$(id -u)-past/rank-0.ckpt" ]; then
    gm_run past3 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" --gemini-job past --gemini-recover
    if [ "$GM_RC" -eq 0 ] && grep -q "recovered at iteration 6 " "$GM_WORK/past3/out" &&
        cmp -s "$GM_WORK/one1.params" "$GM_WORK/past3.params" && [ -z "$(ls -A "$GM_STORE")" ]; then
        gm_pass "gemini --gemini-recover past --iters: refused (exit 2, one line, nothing written, store kept), then recovered = no failure"
    else
        gm_fail "gemini recovery after a refused one" "exit $GM_RC: $(tail -c 300 "$GM_WORK/past3/err")"
    fi
else
    gm_fail "gemini --gemini-recover past --iters" "exit $GM_RC: $(cat "$GM_WORK/past2/err") | out: $(tail -n 2 "$GM_WORK/past2/out") | results: $(ls "$GM_WORK/past2" | tr '\n' ' ') | store: $(ls -A "$GM_STORE")"
fi
gm_run past4 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" --gemini-job pastend --fail-at 7
gm_run past5 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" --gemini-job pastend --gemini-recover --iters 6
if [ "$GM_RC" -eq 0 ] && grep -q "^  done: nothing left to train: iterations 1-6 were trained by the job this one recovers" "$GM_WORK/past5/out" &&
    ! grep -q "FAILED" "$GM_WORK/past5/out" && [ -s "$GM_WORK/past5.params" ] &&
    python3 -c 'import glob, json, sys; j = json.load(open(glob.glob(sys.argv[1] + "/results/*.json")[0])); sys.exit(not (j["status"] == "ok" and j["recovery"]["restored_iteration"] == 6))' "$GM_WORK/past5"; then
    gm_pass "gemini --gemini-recover at --iters: nothing left to train, said so (exit 0, JSON ok, parameters saved)"
else
    gm_fail "gemini --gemini-recover at --iters" "exit $GM_RC: $(tail -n 3 "$GM_WORK/past5/out") $(tail -c 300 "$GM_WORK/past5/err")"
fi
rm -rf "${GM_STORE:?}"/*

# ---- --ckpt-dir on a full disk (issue 47; a 2 MiB tmpfs: root mounts one, as CI runs): the
# persistent checkpoints that cannot fit are refused before training (exit 2, one line, nothing
# made there or in the results); where the disk fills after that check (another process took
# the room: a preloaded pwrite that fills the file system just before the checkpoint's data is
# written), "disk full writing FILE" (exit 1, in the log and JSON), and what the run made there
# goes (its partial file, lock file and directory), never what it did not make -------------
gm_full="$GM_WORK/full"
mkdir -p "$gm_full"
if ! gm_mount_err=$(mount -t tmpfs -o size=2M tmpfs "$gm_full" 2>&1); then
    gm_fail "gemini --ckpt-dir on a full disk" "cannot mount a 2 MiB tmpfs on $gm_full (the test needs root): $gm_mount_err"
else
    # (the umount rides on whatever EXIT trap the suites before set, which is put back after)
    gm_prev_exit=$(trap -p EXIT)
    gm_prev_cmd=""
    if [ -n "$gm_prev_exit" ]; then eval "gm_prev_args=($gm_prev_exit)" && gm_prev_cmd=${gm_prev_args[2]}; fi
    trap "umount '$gm_full' 2>/dev/null; $gm_prev_cmd" EXIT
    gm_run full1 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" --ckpt-dir "$gm_full" --ckpt-every 2 --iters 4
    if [ "$GM_RC" -eq 2 ] && [ "$(wc -l <"$GM_WORK/full1/err")" -eq 1 ] &&
        grep -q "^aebench: --ckpt-dir $gm_full: the persistent checkpoints do not fit: they need 4.24 MiB (two versions of the shard of each of this machine's 1 rank), 2.00 MiB free$" "$GM_WORK/full1/err" &&
        [ -z "$(ls -A "$gm_full")" ] && [ ! -e "$GM_WORK/full1/results" ] && [ -z "$(ls -A "$GM_STORE")" ]; then
        gm_pass "gemini --ckpt-dir on a 2 MiB disk: refused before training (exit 2, one line: needs 4.24 MiB, 2.00 MiB free), nothing made"
    else
        gm_fail "gemini --ckpt-dir on a full disk, up front" "exit $GM_RC: $(cat "$GM_WORK/full1/err") | on it: $(find "$gm_full" | tr '\n' ' ')"
    fi
    # (the disk filled after the check: 16 MiB, then the hook takes all of it at the first write
    # of a checkpoint's data; a file there before the run stays)
    umount "$gm_full" && mount -t tmpfs -o size=16M tmpfs "$gm_full" && echo "not the run's" >"$gm_full/theirs" &&
        mkdir -m 700 "$gm_full/aebench-ckpt-$(id -u)-other" && echo x >"$gm_full/aebench-ckpt-$(id -u)-other/rank-0.ckpt"
    cat >"$GM_WORK/fill.c" <<'C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* Before the first write of a checkpoint's data (more than its header page) to a rank-*.ckpt
 * file, AEBENCH_TEST_FILL (a file on the same disk) takes every free byte. */
static void fill_once(int fd, size_t n)
{
    static int done;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    const ssize_t k = readlink(link, path, sizeof path - 1);
    const char *to = getenv("AEBENCH_TEST_FILL");
    if (done || k < 0 || n <= 4096 || !to) return;
    path[k] = '\0';
    if (!strstr(path, "/aebench-ckpt-") || !strstr(path, ".ckpt")) return;
    done = 1;
    const int f = open(to, O_WRONLY | O_CREAT | O_EXCL, 0600);
    static char zeros[65536];
    while (f >= 0 && write(f, zeros, sizeof zeros) > 0) {}
    if (f >= 0) close(f);
}
ssize_t pwrite(int fd, const void *buf, size_t n, off_t at)
{
    fill_once(fd, n);
    ssize_t (*real)(int, const void *, size_t, off_t) = (ssize_t (*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    return real(fd, buf, n, at);
}
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t at)
{
    fill_once(fd, n);
    ssize_t (*real)(int, const void *, size_t, off_t) = (ssize_t (*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite64");
    return real(fd, buf, n, at);
}
C
    if cc -shared -fPIC -O1 -o "$GM_WORK/fill.so" "$GM_WORK/fill.c" -ldl; then
        AEBENCH_TEST_FILL="$gm_full/filler" LD_PRELOAD="$GM_WORK/fill.so" \
            gm_run full2 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" --ckpt-dir "$gm_full" --ckpt-every 2 \
            --iters 4 --gemini-job full
        gm_left=$(cd "$gm_full" && find . | sort | tr '\n' ' ')
        if [ "$GM_RC" -eq 1 ] && [ -s "$gm_full/filler" ] &&
            grep -q "^aebench: gemini: iteration 2: --ckpt-dir: disk full writing $gm_full/aebench-ckpt-$(id -u)-full/rank-0.ckpt$" "$GM_WORK/full2/err" &&
            grep -q "^ERROR: gemini: iteration 2: --ckpt-dir: disk full writing $gm_full/aebench-ckpt-$(id -u)-full/rank-0.ckpt" "$GM_WORK"/full2/results/*.txt &&
            python3 -c 'import glob, json, sys; j = json.load(open(glob.glob(sys.argv[1] + "/results/*.json")[0])); sys.exit(not (j["status"] == "error" and "disk full writing " in j["message"]))' "$GM_WORK/full2" &&
            [ "$gm_left" = ". ./aebench-ckpt-$(id -u)-other ./aebench-ckpt-$(id -u)-other/rank-0.ckpt ./filler ./theirs " ]; then
            gm_pass "gemini --ckpt-dir filled after its check: disk full writing FILE (exit 1, log, JSON); its partial file, lock and directory removed, nothing else"
        else
            gm_fail "gemini --ckpt-dir filled mid-run" "exit $GM_RC: $(tail -c 400 "$GM_WORK/full2/err") | left: $gm_left"
        fi
    else
        gm_fail "gemini --ckpt-dir filled mid-run" "cannot build the test's preload (cc)"
    fi
    umount "$gm_full"
    if [ -n "$gm_prev_exit" ]; then eval "$gm_prev_exit"; else trap - EXIT; fi
fi
rm -rf "${GM_STORE:?}"/*

# ---- --recompute selective and none under gemini (megatron-lm ZeRO-3 beneath it): the same
# parameters and losses as full, each killed at iteration 5 and recovered by hand ---------------
gm_rc_ok=""
for m in selective none; do
    gm_run "rc_${m}1" -m gemini --recompute "$m" --gemini-mode naive --gemini-store "$GM_STORE" --gemini-job "rc$m" --fail-at 5
    gm_run "rc_${m}2" -m gemini --recompute "$m" --gemini-mode naive --gemini-store "$GM_STORE" --gemini-job "rc$m" --gemini-recover
    [ "$GM_RC" -eq 0 ] && cmp -s "$GM_WORK/one1.params" "$GM_WORK/rc_${m}2.params" &&
        [ "$(gm_losses "$GM_WORK/rc_${m}2" 5)" = "$(gm_losses "$GM_WORK/one1" 5)" ] &&
        grep -q '"recompute":[[:space:]]*"'"$m"'"' "$GM_WORK/rc_${m}2"/results/*.json && gm_rc_ok="$gm_rc_ok $m"
done
if [ "$gm_rc_ok" = " selective none" ]; then
    gm_pass "gemini --recompute selective and none: killed at iteration 5, recovered, = ZeRO-3 under full bit for bit"
else
    gm_fail "gemini --recompute" "passed:$gm_rc_ok; exit $GM_RC: $(tail -c 300 "$GM_WORK/rc_none2/err")"
fi
rm -rf "${GM_STORE:?}"/*

# ---- one rank, its store lost and the newest persistent version damaged on disk: the
# recovery reads only the version the headers name, finds its checksums wrong, and takes the
# one before (iteration 4 of --ckpt-every 2), = no failure -----------------------------------
mkdir -p "$GM_WORK/onedisk"
gm_run oned1 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" --gemini-job oned \
    --ckpt-dir "$GM_WORK/onedisk" --ckpt-every 2 --fail-at 7
rm -f "$GM_STORE"/aebench-gemini-*-oned/rank-*.ckpt
gm_ckfile=$(ls "$GM_WORK"/onedisk/aebench-ckpt-*-oned/rank-0.ckpt 2>/dev/null | head -n 1)
gm_damaged=no
if [ -n "$gm_ckfile" ]; then
    # version 1 (iteration 6) starts half way: its header page, then its data; a word of data
    python3 - "$gm_ckfile" <<'PY' && gm_damaged=yes
import os, sys
f = sys.argv[1]
at = os.path.getsize(f) // 2 + 4096 + 1000
with open(f, "r+b") as h:
    h.seek(at); b = h.read(1); h.seek(at); h.write(bytes([b[0] ^ 0x40]))
PY
fi
gm_run oned2 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" --gemini-job oned \
    --ckpt-dir "$GM_WORK/onedisk" --ckpt-every 2 --gemini-recover
if [ "$gm_damaged" = yes ] && [ "$GM_RC" -eq 0 ] &&
    grep -q "recovered at iteration 4 (Adam step 4) from its persistent checkpoint" "$GM_WORK/oned2/out" &&
    cmp -s "$GM_WORK/one1.params" "$GM_WORK/oned2.params" &&
    [ "$(gm_losses "$GM_WORK/oned2" 5)" = "$(gm_losses "$GM_WORK/one1" 5)" ]; then
    gm_pass "gemini on one rank: store lost, newest persistent version damaged: iteration 4's restored, = no failure"
else
    gm_fail "gemini damaged persistent version" "damaged: $gm_damaged, exit $GM_RC: $(grep recovered "$GM_WORK/oned2/out") $(tail -c 300 "$GM_WORK/oned2/err")"
fi
rm -rf "${GM_STORE:?}"/* "$GM_WORK/onedisk"

if needs_mpi "gemini on 2 ranks" "$GM_BIN"; then
    # ---- training: the same bits as megatron-lm ZeRO-3, a checkpoint every iteration --------
    gm_run zero3 --ranks 2 --zero-stage 3
    gm_run naive --ranks 2 -m gemini --gemini-mode naive --gemini-store "$GM_STORE"
    if [ "$GM_RC" -eq 0 ] && cmp -s "$GM_WORK/zero3.params" "$GM_WORK/naive.params" &&
        [ "$(gm_losses "$GM_WORK/zero3")" = "$(gm_losses "$GM_WORK/naive")" ] &&
        grep -q '"checkpoint"' "$GM_WORK"/naive/results/*.json &&
        grep -q "checkpoint (rank 0, last iteration) | GB: " "$GM_WORK"/naive/results/*.txt &&
        grep -q "memory peak | GPU: \(.*\) (plan \1) | host: \(.*\) (plan \2)" "$GM_WORK"/naive/results/*.txt &&
        grep -q "checksums ride on the optimizer .*: equal to a pass on every rank" "$GM_WORK"/naive/results/*.txt &&
        [ -z "$(ls -A "$GM_STORE")" ]; then
        gm_pass "gemini naive = megatron-lm ZeRO-3 bit for bit; checkpoint logged, its checksums summed by the optimizer (= a pass); peaks = plan; store removed at the end"
    else
        gm_fail "gemini naive" "exit $GM_RC: $(tail -c 300 "$GM_WORK/naive/err") / store: $(ls -A "$GM_STORE")"
    fi

    # ---- interleave: the same bits; after 3 naive warm-up steps, each checkpoint is sent
    # during the next step, in the idle spans measured between its collectives -------------
    gm_run inter --ranks 2 -m gemini --gemini-mode interleave --gemini-store "$GM_STORE"
    if [ "$GM_RC" -eq 0 ] && cmp -s "$GM_WORK/zero3.params" "$GM_WORK/inter.params" &&
        grep -q "gemini interleave: .* ms of the step's collectives idle" "$GM_WORK/inter/out" &&
        grep -q "the peers' chunks are read by the keeping rank's copy engines (MPI one-sided)" "$GM_WORK/inter/out" &&
        [ "$(grep -c '"checkpoint":' "$GM_WORK"/inter/results/*.json)" -eq 8 ]; then
        gm_pass "gemini interleave (auto: the peers' chunks read, MPI one-sided) = megatron-lm ZeRO-3 bit for bit; idle spans measured, chunks planned"
    else
        gm_fail "gemini interleave" "exit $GM_RC: $(tail -c 300 "$GM_WORK/inter/err")"
    fi
    # the same with the chunks sent (the transport between machines): the same bits, and a
    # hardware failure restored from the copy the peer received so
    gm_run intersend --ranks 2 -m gemini --gemini-mode interleave --gemini-transport sendrecv \
        --gemini-store "$GM_STORE" --fail-at 7 --fail-rank 0 --fail-kind hardware
    if [ "$GM_RC" -eq 0 ] && cmp -s "$GM_WORK/zero3.params" "$GM_WORK/intersend.params" &&
        ! grep -q "chunks are read" "$GM_WORK/intersend/out" &&
        grep -q "rank 0's shard of iteration [45] fetched from rank 1's copy" "$GM_WORK/intersend/out" &&
        [ "$(gm_losses "$GM_WORK/intersend" 6)" = "$(gm_losses "$GM_WORK/zero3" 6)" ]; then
        gm_pass "gemini interleave --gemini-transport sendrecv, rank 0's machine lost at iteration 7: its shard fetched from rank 1's copy, = no failure"
    else
        gm_fail "gemini interleave sendrecv" "exit $GM_RC: $(grep -h 'fetched\|recovered' "$GM_WORK/intersend/out") $(tail -c 300 "$GM_WORK/intersend/err")"
    fi
    # killed at iteration 7: the checkpoint of 6 was in flight (incomplete), so 5 is restored
    # (or 4, when 5's checksums, which trail its copies on their own stream, were not done)
    gm_run interfail --ranks 2 -m gemini --gemini-mode interleave --gemini-store "$GM_STORE" \
        --fail-at 7 --fail-rank 1 --fail-kind hardware
    if [ "$GM_RC" -eq 0 ] && cmp -s "$GM_WORK/zero3.params" "$GM_WORK/interfail.params" &&
        grep -q "recovered at iteration [45] " "$GM_WORK/interfail/out" &&
        [ "$(gm_losses "$GM_WORK/interfail" 6)" = "$(gm_losses "$GM_WORK/zero3" 6)" ]; then
        gm_pass "gemini interleave, rank 1's machine lost at iteration 7: $(grep -o 'recovered at iteration [0-9]*' "$GM_WORK/interfail/out") (6's copy was in flight), = no failure"
    else
        gm_fail "gemini interleave recovery" "exit $GM_RC: $(grep recovered "$GM_WORK/interfail/out") $(tail -c 300 "$GM_WORK/interfail/err")"
    fi
    # the recovered job's account of the time the failure cost: from the failure to being back
    # at iteration 6 (where the failed job was), as relaunch + setup and restore + redo
    tl=$(python3 - "$GM_WORK/interfail" <<'EOF'
import glob, json, os, sys
files = sorted(glob.glob(os.path.join(sys.argv[1], "results", "*.json")), key=os.path.getmtime)
r = json.load(open(files[-1])).get("recovery", {})
need = ("time_lost_s", "relaunch_s", "setup_s", "redo_s", "back_at_iteration")
if any(k not in r for k in need):
    sys.exit(f"missing: {[k for k in need if k not in r]}")
parts = r["relaunch_s"] + r["setup_s"] + r["redo_s"]
ok = (r["back_at_iteration"] == 6 and r["failed_at_iteration"] == 7 and min(r["relaunch_s"], r["setup_s"], r["redo_s"]) >= 0
      and abs(parts - r["time_lost_s"]) < 1e-6 and 0 < r["time_lost_s"] < 120 and r["setup_s"] >= r["ms"] / 1e3)
print("ok %.2f" % r["time_lost_s"] if ok else f"bad: {r}")
EOF
)
    if [[ "$tl" == ok* ]] && grep -q "^recovery: back at iteration 6 .* after the failure | relaunch" "$GM_WORK"/interfail/results/*.txt; then
        gm_pass "the recovered job's time lost: ${tl#ok } s = relaunch + setup and restore + redo, back at iteration 6 (log, JSON)"
    else
        gm_fail "time lost" "$tl"
    fi

    # ---- a rank killed at iteration 5: --ranks relaunches the job, which recovers ------------
    # (from iteration 4, or 3 when a peer was killed before it had marked its copy of 4
    # complete: the dying rank may be a step ahead of the others)
    for kind in software hardware; do
        for placement in group ring; do
            tag="$kind-$placement"
            gm_run "$tag" --ranks 2 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" \
                --gemini-placement "$placement" --fail-at 5 --fail-rank 1 --fail-kind "$kind"
            rec=$(grep -h "recovered at iteration" "$GM_WORK/$tag/out" | head -1)
            if [ "$GM_RC" -eq 0 ] && grep -q "relaunching job" "$GM_WORK/$tag/err" &&
                [ -n "$rec" ] && cmp -s "$GM_WORK/zero3.params" "$GM_WORK/$tag.params" &&
                [ "$(gm_losses "$GM_WORK/$tag" 5)" = "$(gm_losses "$GM_WORK/zero3" 5)" ] &&
                { [ "$kind" = software ] || grep -q "rank 1's shard of iteration [34] fetched from rank 0's copy" "$GM_WORK/$tag/out"; } &&
                python3 - "$GM_WORK/$tag" "$kind" <<'PYEOF' &&
import glob, json, os, sys
files = sorted(glob.glob(os.path.join(sys.argv[1], "results", "*.json")), key=os.path.getmtime)
r = json.load(open(files[-1]))["recovery"]
ok = (r["restored_iteration"] in (3, 4) and r["from"] == "memory" and r["failed_at_iteration"] == 5 and
      r["iterations_redone"] == 4 - r["restored_iteration"] and "killed itself" in r["previous_job"] and
      (r["fetched_bytes"] > 0) == (sys.argv[2] == "hardware"))
sys.exit(0 if ok else 1)
PYEOF
                [ -z "$(ls -A "$GM_STORE")" ]; then
                gm_pass "gemini, $kind failure of rank 1 at iteration 5 ($placement): relaunched, recovered, iterations 5-8 and final params = no failure"
            else
                gm_fail "gemini $tag recovery" "exit $GM_RC; $rec; $(tail -c 300 "$GM_WORK/$tag/err")"
            fi
        done
    done

    # ---- killed in the middle of iteration 5's checkpoint: that version is incomplete (never
    # marked complete), so iteration 4's is restored; and in iteration 5's backward -----------
    for phase in checkpoint backward; do
        gm_run "phase-$phase" --ranks 2 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" \
            --fail-at 5 --fail-rank 1 --fail-phase "$phase" --fail-kind hardware
        if [ "$GM_RC" -eq 0 ] && grep -q "rank 1 killed itself (SIGKILL) in the $phase of iteration 5" "$GM_WORK/phase-$phase/err" &&
            grep -q "recovered at iteration 4 " "$GM_WORK/phase-$phase/out" &&
            cmp -s "$GM_WORK/zero3.params" "$GM_WORK/phase-$phase.params"; then
            gm_pass "gemini, rank 1 lost in the $phase of iteration 5: iteration 4 restored, = no failure"
        else
            gm_fail "gemini --fail-phase $phase" "exit $GM_RC: $(tail -c 300 "$GM_WORK/phase-$phase/err")"
        fi
    done

    # ---- three ranks, ring of 2: rank 2's copy lives on rank 0 ------------------------------
    gm_run zero3n3 --ranks 3 --zero-stage 3 -b 2
    gm_run ring3 --ranks 3 -b 2 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" --gemini-placement ring \
        --fail-at 4 --fail-rank 2 --fail-kind hardware
    # (three ranks do not divide the blocks: the last rank's shards end in padding, whose
    # terms the optimizer's checksums start from; those checksums equal a pass on every rank)
    if [ "$GM_RC" -eq 0 ] && cmp -s "$GM_WORK/zero3n3.params" "$GM_WORK/ring3.params" &&
        grep -q "rank 2's shard of iteration [23] fetched from rank 0's copy" "$GM_WORK/ring3/out" &&
        grep -q "checksums ride on the optimizer .*: equal to a pass on every rank at the first checkpoint" "$GM_WORK/ring3/out"; then
        gm_pass "gemini on 3 ranks, ring: rank 2's machine lost at iteration 4, its shard fetched from rank 0 (the checksums summed by the optimizer, padding and all, = a pass); = no failure"
    else
        gm_fail "gemini ring of 3" "exit $GM_RC: $(tail -c 300 "$GM_WORK/ring3/err")"
    fi

    # ---- the same ring, ranks 1 and 2 lose their machines at once: rank 1's shard was on both
    # (its own and rank 2's copy), rank 0 holds only its own and rank 2's: nothing to recover,
    # so not relaunched (a relaunch would only be refused by its ranks), exit 4, said once ----
    gm_run ring3both --ranks 3 -b 2 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" --gemini-placement ring \
        --fail-at 4 --fail-rank 1,2 --fail-kind hardware
    if [ "$GM_RC" -eq 4 ] &&
        grep -q "not relaunched: no checkpoint holds every rank's shard (the newest, of iteration 3, lacks rank 1's, and none before it holds them all: every copy of it was on a lost machine)" "$GM_WORK/ring3both/err" &&
        ! grep -q "relaunching job\|refused to start" "$GM_WORK/ring3both/err" && [ -z "$(ls -A "$GM_STORE")" ]; then
        gm_pass "gemini on 3 ranks, ring: ranks 1 and 2 lost (every copy of rank 1's shard): not relaunched, named, exit 4, store removed"
    else
        gm_fail "gemini ring of 3, both holders lost" "exit $GM_RC: $(tail -c 400 "$GM_WORK/ring3both/err")"
    fi

    # ---- the same under --hosts (this machine only): the supervisor cannot read the other
    # machines' stores, so it relaunches on what its own holds; the ranks refuse (nothing to
    # restore), and the job ends with the code of the loss it was relaunched for, 4 -----------
    printf 'localhost:3\n' >"$GM_WORK/hosts3"
    gm_run ring3hosts --ranks 3 --hosts "$GM_WORK/hosts3" -b 2 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" \
        --gemini-placement ring --fail-at 4 --fail-rank 1,2 --fail-kind hardware
    if [ "$GM_RC" -eq 4 ] && grep -q "relaunching job" "$GM_WORK/ring3hosts/err" &&
        grep -q "no checkpoint version that every rank's shard has" "$GM_WORK/ring3hosts/err" &&
        grep -q "not relaunched: its ranks refused to start" "$GM_WORK/ring3hosts/err" && [ -z "$(ls -A "$GM_STORE")" ]; then
        gm_pass "gemini on 3 ranks of --hosts, both holders of a shard lost: relaunched on the local store's word, refused by its ranks (named), exit 4 (the loss's), store removed"
    else
        gm_fail "gemini ring of 3 under --hosts, both holders lost" "exit $GM_RC: $(tail -c 400 "$GM_WORK/ring3hosts/err")"
    fi

    # ---- the same ring, rank 2 killed in the middle of the job's first checkpoint: its peers'
    # shards of iteration 1 may be whole and its own nowhere (no relaunch, exit 4, said), or its
    # copy went through (recovered = no failure); never a relaunch its ranks refuse ------------
    gm_run ring3first --ranks 3 -b 2 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" --gemini-placement ring \
        --fail-at 1 --fail-phase checkpoint --fail-rank 2
    if { { [ "$GM_RC" -eq 4 ] && grep -q "not relaunched: no checkpoint holds every rank's shard (the newest, of iteration 1, lacks rank [0-2]'s" "$GM_WORK/ring3first/err"; } ||
        { [ "$GM_RC" -eq 0 ] && cmp -s "$GM_WORK/zero3n3.params" "$GM_WORK/ring3first.params"; }; } &&
        ! grep -q "refused to start" "$GM_WORK/ring3first/err" && [ -z "$(ls -A "$GM_STORE")" ]; then
        gm_pass "gemini on 3 ranks, ring: rank 2 lost within the first checkpoint: $([ "$GM_RC" -eq 0 ] && echo "recovered, = no failure" || echo "not relaunched (its shard nowhere whole), exit 4")"
    else
        gm_fail "gemini ring of 3, lost within the first checkpoint" "exit $GM_RC: $(tail -c 400 "$GM_WORK/ring3first/err")"
    fi

    # ---- four ranks in groups of two ({0,1}, {2,3}): ranks 1 and 2 lose their machines at once
    # (each group keeps a copy of each of its shards); then both of group {2,3}: only the
    # persistent checkpoint has their shards ------------------------------------------------
    gm_run zero3n4 --ranks 4 --zero-stage 3 -b 1
    gm_run four --ranks 4 -b 1 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" \
        --fail-at 5 --fail-rank 1,2 --fail-kind hardware
    if [ "$GM_RC" -eq 0 ] && cmp -s "$GM_WORK/zero3n4.params" "$GM_WORK/four.params" &&
        grep -q "rank 1's shard of iteration [34] fetched from rank 0's copy" "$GM_WORK/four/out" &&
        grep -q "rank 2's shard of iteration [34] fetched from rank 3's copy" "$GM_WORK/four/out"; then
        gm_pass "gemini on 4 ranks, groups of 2: ranks 1 and 2 lost at once, each restored from its group peer, = no failure"
    else
        gm_fail "gemini 4 ranks, two groups" "exit $GM_RC: $(grep -h fetched "$GM_WORK/four/out") $(tail -c 300 "$GM_WORK/four/err")"
    fi
    mkdir -p "$GM_WORK/disk4"
    gm_run fourgroup --ranks 4 -b 1 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" \
        --ckpt-dir "$GM_WORK/disk4" --ckpt-every 2 --fail-at 6 --fail-rank 2,3 --fail-kind hardware
    if [ "$GM_RC" -eq 0 ] && cmp -s "$GM_WORK/zero3n4.params" "$GM_WORK/fourgroup.params" &&
        grep -q "recovered at iteration 4 (Adam step 4) from its persistent checkpoint" "$GM_WORK/fourgroup/out"; then
        gm_pass "gemini on 4 ranks: both ranks of group {2,3} lost: the persistent checkpoint of iteration 4 restored, = no failure"
    else
        gm_fail "gemini 4 ranks, a whole group" "exit $GM_RC: $(grep -h recovered "$GM_WORK/fourgroup/out") $(tail -c 300 "$GM_WORK/fourgroup/err")"
    fi

    # ---- a rank that hangs (stopped at iteration 5): its peer's watchdog ends the job, --ranks
    # relaunches it, and it recovers from the stopped rank's copies as from a killed one's --------
    gm_run hang --ranks 2 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" --fail-at 5 --fail-rank 1 \
        --fail-kind stop --hang-timeout 5
    if [ "$GM_RC" -eq 0 ] && grep -q "rank 1 (pid [0-9]* on [^ ]*) stopped" "$GM_WORK/hang/err" &&
        grep -Eq "rank 0 on .*; busy with (MPI_[A-Za-z_]*|all-reduce \(MPI_Alltoall, MPI_Allgather\)|reduce-scatter \(MPI_Alltoall\)) #[0-9]* \([0-9.]* MB\) of the [a-z]* group, issued" "$GM_WORK/hang/err" &&
        grep -q "relaunching job" "$GM_WORK/hang/err" && cmp -s "$GM_WORK/zero3.params" "$GM_WORK/hang.params" &&
        [ "$(gm_losses "$GM_WORK/hang" 5)" = "$(gm_losses "$GM_WORK/zero3" 5)" ]; then
        gm_pass "gemini, rank 1 hung at iteration 5: detected by its peer's watchdog, relaunched, $(grep -o 'recovered at iteration [0-9]*' "$GM_WORK/hang/out" | head -n 1), iterations 5-8 and final params = no failure"
    else
        gm_fail "gemini hung rank" "exit $GM_RC: $(tail -c 400 "$GM_WORK/hang/err")"
    fi

    # ---- a rank lost before the job's first checkpoint (--gemini-ckpt-from 6, killed at 3):
    # not relaunched (nothing to recover from), exit 4, said once -----------------------------
    gm_run early --ranks 2 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" --gemini-ckpt-from 6 \
        --fail-at 3 --fail-rank 1
    if [ "$GM_RC" -eq 4 ] && grep -q "not relaunched: it ended before its first complete checkpoint" "$GM_WORK/early/err" &&
        ! grep -q "relaunching job" "$GM_WORK/early/err" && [ "$(ls "$GM_WORK"/early/results/*.json | wc -l)" -eq 1 ] &&
        [ -z "$(ls -A "$GM_STORE")" ]; then
        gm_pass "gemini: a rank lost before the first checkpoint: not relaunched (nothing to recover), exit 4, one log and JSON, store removed"
    else
        gm_fail "gemini lost before its first checkpoint" "exit $GM_RC: $(tail -c 400 "$GM_WORK/early/err") / store: $(ls -A "$GM_STORE")"
    fi

    # ---- every holder of a shard lost: nothing to recover, said, exit 1 ----------------------
    mkdir -p "$GM_WORK/lostrun"
    (cd "$GM_WORK/lostrun" && timeout 120 "$GM_MPI" -np 2 "$GM_BIN" "${GM_SHAPE[@]}" -m gemini \
        --gemini-mode naive --gemini-store "$GM_STORE" --gemini-job lostjob --fail-at 4 --fail-rank 0 --results results >out 2>err)
    rm -f "$GM_STORE"/aebench-gemini-*-lostjob/rank-*.ckpt
    (cd "$GM_WORK/lostrun" && timeout 120 "$GM_MPI" -np 2 "$GM_BIN" "${GM_SHAPE[@]}" -m gemini \
        --gemini-store "$GM_STORE" --gemini-job lostjob --gemini-recover --results results2 >out2 2>err2)
    rc=$?
    if [ "$rc" -eq 1 ] && grep -q "no checkpoint version that every rank's shard has" "$GM_WORK/lostrun/err2"; then
        gm_pass "gemini: every copy lost: the recovery says so and exits 1"
    else
        gm_fail "gemini every copy lost" "exit $rc: $(tail -c 300 "$GM_WORK/lostrun/err2")"
    fi
    rm -rf "$GM_STORE"/aebench-gemini-*-lostjob

    # ---- a store a killed job left is named, with the command that removes it ---------------
    stale="$GM_STORE/aebench-gemini-$(id -u)-s999999999-1"
    mkdir -m 700 -p "$stale"
    gm_run stale -m gemini --gemini-store "$GM_STORE" --iters 2
    if [ "$GM_RC" -eq 0 ] && grep -q "stale store of job s999999999-1 .*remove it with: rm -rf $stale" "$GM_WORK/stale/out" &&
        grep -q "stale store of job s999999999-1" "$GM_WORK"/stale/results/*.json; then
        gm_pass "gemini names a stale store (log, JSON) and the command that removes it"
    else
        gm_fail "gemini stale store" "exit $GM_RC: $(grep -i stale "$GM_WORK/stale/out")"
    fi
    rm -rf "$stale"

    # ---- every in-memory copy lost, but a persistent checkpoint (--ckpt-dir, every 2) ----------
    mkdir -p "$GM_WORK/persist" "$GM_WORK/disk"
    (cd "$GM_WORK/persist" && timeout 120 "$GM_MPI" -np 2 "$GM_BIN" "${GM_SHAPE[@]}" -m gemini \
        --gemini-store "$GM_STORE" --gemini-job pjob --ckpt-dir "$GM_WORK/disk" --ckpt-every 2 \
        --fail-at 7 --fail-rank 1 --results results >out 2>err)
    rm -f "$GM_STORE"/aebench-gemini-*-pjob/rank-*.ckpt
    (cd "$GM_WORK/persist" && timeout 120 "$GM_MPI" -np 2 "$GM_BIN" "${GM_SHAPE[@]}" -m gemini \
        --gemini-store "$GM_STORE" --gemini-job pjob --ckpt-dir "$GM_WORK/disk" --ckpt-every 2 \
        --gemini-recover --results results2 --save-params "$GM_WORK/persist.params" >out2 2>err2)
    rc=$?
    # (iteration 6's checkpoint is written in the background while iteration 7 runs: on a busy
    # machine it may not be complete when rank 1 dies there, and then 4's is the newest valid)
    if [ "$rc" -eq 0 ] && grep -qE "recovered at iteration (6 \(Adam step 6\)|4 \(Adam step 4\)) from its persistent checkpoint" "$GM_WORK/persist/out2" &&
        cmp -s "$GM_WORK/zero3.params" "$GM_WORK/persist.params" &&
        [ "$(ls "$GM_WORK"/disk/aebench-ckpt-*-pjob/*.ckpt | wc -l)" -eq 2 ]; then
        gm_pass "gemini: every in-memory copy lost: the newest persistent checkpoint ($(grep -oE 'recovered at iteration [0-9]+' "$GM_WORK/persist/out2" | head -n 1)) restored, = no failure"
    else
        gm_fail "gemini persistent fallback" "exit $rc: $(grep recovered "$GM_WORK/persist/out2") $(tail -c 300 "$GM_WORK/persist/err2")"
    fi
    rm -rf "$GM_STORE"/aebench-gemini-*-pjob

    # ---- a store directory that is not private (planted open to others): the ranks refuse it;
    # the JSON's message and the supervisor's line say that, not "invalid configuration"; it
    # is not relaunched, and the directory (not the job's own) is left as it was -------------
    mkdir -p -m 700 "$GM_WORK/planted" && mkdir -m 755 "$GM_WORK/planted/aebench-gemini-0-planted"
    gm_run planted --ranks 2 -m gemini --gemini-mode naive --gemini-store "$GM_WORK/planted" --gemini-job planted
    if [ "$GM_RC" -eq 1 ] &&
        grep -q "rank 0 ended the job: gemini: initialisation failed: .*/aebench-gemini-$(id -u)-planted: not a private directory of this user (owner .*, mode 0755" "$GM_WORK/planted/err" &&
        ! grep -q "relaunching job" "$GM_WORK/planted/err" &&
        python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); sys.exit(not (d["status"] == "error" and "not a private directory of this user" in d["message"]))' "$GM_WORK"/planted/results/*.json &&
        [ -d "$GM_WORK/planted/aebench-gemini-0-planted" ]; then
        gm_pass "gemini: a store directory open to others: refused, the JSON and the supervisor say why, exit 1, not relaunched, left as found"
    else
        gm_fail "gemini, a planted store directory" "exit $GM_RC: $(tail -c 400 "$GM_WORK/planted/err") / $(cat "$GM_WORK"/planted/results/*.json 2>/dev/null | head -c 300)"
    fi

    # ---- --ckpt-dir in a shared directory: another user's planted directory (open to all) with
    # a link to a file of ours where rank 0's checkpoint would go: refused, named, nothing
    # written through the link, the planted directory left as it was ---------------------------
    mkdir -p "$GM_WORK/shared" && chmod 1777 "$GM_WORK/shared"
    printf 'root-only\n' >"$GM_WORK/rootfile" && chmod 600 "$GM_WORK/rootfile"
    mkdir -m 777 "$GM_WORK/shared/aebench-ckpt-$(id -u)-pj"
    ln -s "$GM_WORK/rootfile" "$GM_WORK/shared/aebench-ckpt-$(id -u)-pj/rank-0.ckpt"
    gm_run plantedckpt --ranks 2 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" --gemini-job pj \
        --ckpt-dir "$GM_WORK/shared" --ckpt-every 2
    if [ "$GM_RC" -eq 1 ] && [ "$(cat "$GM_WORK/rootfile")" = root-only ] &&
        grep -q "rank 0 ended the job: gemini: initialisation failed: --ckpt-dir: .*aebench-ckpt-$(id -u)-pj: not a private directory of this user (owner .*, mode 0777" "$GM_WORK/plantedckpt/err" &&
        [ -L "$GM_WORK/shared/aebench-ckpt-$(id -u)-pj/rank-0.ckpt" ] && [ -z "$(ls -A "$GM_STORE")" ]; then
        gm_pass "gemini --ckpt-dir: a planted directory open to all, a link in it: refused and named (owner, mode), the linked file untouched, nothing removed"
    else
        gm_fail "gemini, a planted --ckpt-dir" "exit $GM_RC: $(tail -c 400 "$GM_WORK/plantedckpt/err") / rootfile: $(cat "$GM_WORK/rootfile")"
    fi

    # ---- a second job with the same --gemini-job while the first runs: refused at once with
    # the holder's pid, the first's store untouched; the first, told to stop then, removes it
    # (3000 iterations: it outlives the second's start even on a loaded machine, and is stopped
    # as soon as the second has been refused) -----------------------------------------------
    mkdir -p "$GM_WORK/lockA"
    (cd "$GM_WORK/lockA" && exec timeout 300 "$GM_BIN" "${GM_SHAPE[@]}" --iters 3000 --log-interval 1000 --results results \
        --ranks 2 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" --gemini-job same >out 2>err) &
    lock_job=$!
    for _ in $(seq 1200); do [ -e "$GM_STORE/aebench-gemini-$(id -u)-same/rank-1.lock" ] && break; sleep 0.1; done
    gm_run lockB --ranks 2 -m gemini --gemini-mode naive --gemini-store "$GM_STORE" --gemini-job same
    lockA_alive=0
    kill -0 "$lock_job" 2>/dev/null && lockA_alive=1
    kill -TERM "$lock_job" 2>/dev/null
    wait "$lock_job"
    lock_rc=$?
    if [ "$GM_RC" -eq 1 ] && grep -q "is in use by another job (pid [0-9]* holds rank-[01].lock)" "$GM_WORK/lockB/err" &&
        [ "$lockA_alive" = 1 ] && ! grep -q "relaunching job" "$GM_WORK/lockB/err" &&
        [ -z "$(ls -A "$GM_STORE")" ]; then
        gm_pass "gemini: a second job on a store in use: refused at once, naming the holder's pid, not relaunched; the first, stopped then (exit $lock_rc), leaves no store"
    else
        gm_fail "gemini store lock" "second: exit $GM_RC: $(tail -c 300 "$GM_WORK/lockB/err") / first alive: $lockA_alive, exit $lock_rc: $(tail -c 300 "$GM_WORK/lockA/err") / store: $(ls -A "$GM_STORE")"
    fi

    # ---- a job told to stop (SIGTERM to the supervisor) is not relaunched; its store goes -----
    mkdir -p "$GM_WORK/stop"
    (cd "$GM_WORK/stop" && exec "$GM_BIN" "${GM_SHAPE[@]}" --iters 100000 --log-interval 1000 -m gemini \
        --ranks 2 --gemini-store "$GM_STORE" --results results >out 2>err) &
    stop_pid=$!
    for _ in $(seq 50); do ls "$GM_STORE"/aebench-gemini-* >/dev/null 2>&1 && break; sleep 0.2; done
    sleep 1
    kill -TERM "$stop_pid"
    wait "$stop_pid"
    rc=$?
    if [ "$rc" -eq 143 ] && grep -q "interrupted (SIGTERM): the job was stopped" "$GM_WORK/stop/err" &&
        ! grep -q "relaunching" "$GM_WORK/stop/err" && [ -z "$(ls -A "$GM_STORE")" ] &&
        grep -q "^ERROR: interrupted (SIGTERM)" "$GM_WORK"/stop/results/*.txt; then
        gm_pass "gemini: a job told to stop exits 143, says so in its log, is not relaunched, its store removed"
    else
        gm_fail "gemini stop" "exit $rc: $(tail -c 300 "$GM_WORK/stop/err") / store: $(ls -A "$GM_STORE")"
    fi

    # ---- bad input: exit 2, one line, nothing written ---------------------------------------
    gm_bad() {
        local what=$1 pattern=$2
        shift 2
        local dir="$GM_WORK/bad.$PASSED.$FAILED"
        mkdir -p "$dir"
        (cd "$dir" && timeout 60 "$GM_BIN" "${GM_SHAPE[@]}" -m gemini --results results "$@" >out 2>err)
        local rc=$?
        if [ "$rc" -ne 2 ]; then gm_fail "$what" "exit $rc: $(head -c 300 "$dir/err")"
        elif ! grep -q -- "$pattern" "$dir/err"; then gm_fail "$what" "stderr: $(head -c 300 "$dir/err")"
        elif [ -e "$dir/results" ]; then gm_fail "$what" "results/ was written"
        else gm_pass "$what"
        fi
    }
    gm_bad "gemini: more replicas than ranks" "--gemini-replicas 3: must be between 1 and the ranks (2)" \
        --ranks 2 --gemini-replicas 3 --gemini-store "$GM_STORE"
    gm_bad "gemini: groups that do not divide the ranks" "3 ranks do not make groups of 2" \
        --ranks 3 -b 2 --gemini-store "$GM_STORE"
    gm_bad "gemini: a store directory that is not there" "--gemini-store $GM_WORK/none: No such file or directory" \
        --gemini-store "$GM_WORK/none"
    gm_bad "gemini: a mode that is not one" "'often' is not none, naive or interleave" --gemini-mode often
    gm_bad "gemini: a transport that is not one" "'rdma' is not auto, sendrecv or read" --gemini-transport rdma
    gm_bad "gemini: a fault kind that is not one" "'disk' is not software, hardware or stop" --fail-kind disk
    gm_bad "gemini: a fault phase that is not one" "'optimizer' is not forward, backward or checkpoint" \
        --fail-at 2 --fail-phase optimizer
    gm_bad "a checkpoint fault for an engine without checkpoints" "--fail-phase checkpoint: l2l takes no checkpoint" \
        -m l2l --fail-at 2 --fail-phase checkpoint
    gm_bad "gemini: a persistent checkpoint directory that is not there" "--ckpt-dir $GM_WORK/nodisk: No such file or directory" \
        --ckpt-dir "$GM_WORK/nodisk" --gemini-store "$GM_STORE"
    gm_bad "a rank list that is not one" "'1,x' is not a rank or a list of ranks" --fail-at 2 --fail-rank 1,x
    gm_bad "gemini: a job id with a slash" "is not a job id" --gemini-job a/b --gemini-store "$GM_STORE"
    gm_bad "gemini: an interval that is not one" "'0' is neither an interval" --gemini-every 0
    gm_bad "gemini: --gemini-every auto without interleave" "--gemini-every auto chooses the interval" \
        --gemini-every auto --gemini-mode naive --gemini-store "$GM_STORE"

    # ---- --gemini-every: a checkpoint every 2 iterations (1, 3, 5, 7), rank 1 lost at the
    # start of 5: the newest is 3 (not 4), recovered = no failure ---------------------------------
    gm_run every2 --ranks 2 -m gemini --gemini-mode naive --gemini-every 2 --gemini-store "$GM_STORE" \
        --fail-at 5 --fail-rank 1 --fail-kind hardware
    gm_gemini_json every2 'g["every"] == 2 and g["every_asked"] == "fixed" and g["expected_lost_iterations"] == 1.0' ||
        GM_RC="json: every, every_asked, expected_lost_iterations"
    gm_recovered every2 zero3 "gemini --gemini-every 2: rank 1 lost at iteration 5, iteration 3 restored (4 was not checkpointed), = no failure" \
        "a checkpoint every 2 iterations (a failure loses about 1.0)" "recovered at iteration 3 "
    # interleave every 2 iterations: its warm-up checkpoints 1, 3, 5 naively, then 7 goes
    # during 8; rank 0 lost at the start of 9: 7 is the newest whole one
    gm_run zero3x10 --ranks 2 --zero-stage 3 --iters 10
    gm_run everyi2 --ranks 2 -m gemini --gemini-every 2 --iters 10 --gemini-store "$GM_STORE" \
        --fail-at 9 --fail-rank 0 --fail-kind hardware
    gm_recovered everyi2 zero3x10 "gemini interleave --gemini-every 2: rank 0 lost at iteration 9, iteration 7 (sent during 8) restored, = no failure" \
        "recovered at iteration 7 " "a checkpoint every 2 iterations (a failure loses about 2.0)"
    # auto, where a checkpoint cannot hide (the plan told to fill nothing of the idle spans:
    # all of it before the optimizer): interleave's warm-up (iterations 1-3) measures, the
    # interval K >= 2 follows, checkpoints at 3 + K, 3 + 2K, ...; rank 0 lost at 12 recovers
    # the newest complete one (interleave: one step after its iteration) = no failure
    gm_run zero3x14 --ranks 2 --zero-stage 3 --iters 14
    # (--gemini-fill 0.001: the plan fills 0.1% of each idle span; and a checkpoint allowed
    # 0.01% of the step, --gemini-every-share 0.0001: what it exposes here, ~1% of a 10 ms
    # step, must then be spread, whatever this machine's speed)
    gm_run everyauto --ranks 2 -m gemini --gemini-every auto --iters 14 --gemini-fill 0.001 --gemini-every-share 0.0001 \
        --gemini-store "$GM_STORE" --fail-at 12 --fail-rank 0 --fail-kind hardware
    k=$(grep -m 1 -oE "a checkpoint every [0-9]+ iteration" "$GM_WORK/everyauto/out" | grep -oE "[0-9]+")
    r=$(grep -m 1 -oE "recovered at iteration [0-9]+" "$GM_WORK/everyauto/out" | grep -oE "[0-9]+$")
    want=""
    [ -n "$k" ] && want=$(python3 -c "import sys; k = int(sys.argv[1]); print(max(3 + j * k for j in range(99) if 3 + j * k <= 12 - 2))" "$k")
    if [ "$GM_RC" -eq 0 ] && [ -n "$k" ] && [ "$k" -ge 2 ] && [ "$r" = "$want" ] && cmp -s "$GM_WORK/zero3x14.params" "$GM_WORK/everyauto.params" &&
        grep -q "gemini --gemini-every auto: a checkpoint exposes .* a failure then loses about" "$GM_WORK/everyauto/out" &&
        gm_gemini_json everyauto 'g["every"] >= 2 and g["every_asked"] == "auto" and g["expected_lost_iterations"] == g["every"] / 2 + 1'; then
        gm_pass "gemini --gemini-every auto: every $k iterations where a checkpoint cannot hide; rank 0 lost at 12, iteration $r restored, = no failure"
    else
        gm_fail "gemini --gemini-every auto" "K ${k:-?}, recovered ${r:-?} (want ${want:-?}): $(grep -hE 'every|recovered' "$GM_WORK/everyauto/out" | head -n 3)"
    fi

    # ---- case 6: the artifact's comparison in one job per mode, its extraction and figures ----
    c6="$GM_WORK/case6"
    mkdir -p "$c6"
    (cd "$c6" && timeout 300 "$GM_BIN" --config "$GM_ROOT/configs/small/case6.json" --iters 20 --gemini-ckpt-from 11 \
        --gemini-store "$GM_STORE" --results "$c6/res" >out 2>err)
    GM_RC=$?
    c6_check=fail
    if [ "$GM_RC" -eq 0 ] && (cd "$GM_ROOT" && bash scripts/case6_extract.sh -r "$c6/res" >/dev/null); then
        c6_check=$(python3 - "$c6/res" <<'EOF'
import csv, glob, json, os, sys
res = sys.argv[1]
runs = {}
for f in glob.glob(os.path.join(res, "log_gemini_*.json")):
    d = json.load(open(f))
    runs[d["gemini"]["mode"]] = d
if sorted(runs) != ["interleave", "naive", "none"]:
    sys.exit(f"modes {sorted(runs)}")
rows = {r["mode"]: r for r in csv.DictReader(open(os.path.join(res, "case6.csv")))}
steps = list(csv.DictReader(open(os.path.join(res, "case6_steps.csv"))))
for mode, d in runs.items():
    g = d["gemini"]
    if g["checkpoint_from"] != 11 or g["warmup_steps"] != 5 or len(g["step_times"]) != 20:
        sys.exit(f"{mode}: {g['checkpoint_from']} {g['warmup_steps']} {len(g['step_times'])}")
    phases = [i["phase"] for i in d["iterations"]]
    mine = [s["phase"] for s in steps if s["mode"] == mode]
    if mode != "none" and mine != phases:
        sys.exit(f"{mode}: steps CSV phases {mine} vs JSON {phases}")
    times = [float(s["iter_ms"]) for s in steps if s["mode"] == mode]
    if len(times) != 20 or any(abs(a - 1e3 * b) > 0.051 for a, b in zip(times, g["step_times"])):
        sys.exit(f"{mode}: step times {times} vs JSON {g['step_times']}")
    if mode != "none":
        r = rows[mode]
        if abs(float(r["no_ckpt_ms"]) - g["no_checkpoint_ms"]) > 0.06 or abs(float(r["ckpt_ms"]) - g["checkpoint_ms"]) > 0.06:
            sys.exit(f"{mode}: CSV {r['no_ckpt_ms']} {r['ckpt_ms']} vs JSON {g['no_checkpoint_ms']} {g['checkpoint_ms']}")
        if phases[:5] != ["warmup"] * 5 or phases[5:10] != ["no_checkpoint"] * 5 or "no_checkpoint" in phases[10:]:
            sys.exit(f"{mode}: phases {phases}")
        if not float(r["ckpt_gb"]) > 0 or not g["checkpoint_size"] > 0:
            sys.exit(f"{mode}: no checkpoint bytes")
if not float(rows["naive"]["exposed_ms"]) > 0 or not runs["interleave"]["gemini"]["idle_time"] > 0:
    sys.exit("naive exposed nothing, or interleave measured no idle time")
# the checkpoints change no loss: every mode's losses equal none's
ref = [i["loss"] for i in runs["none"]["iterations"]]
for mode in ("naive", "interleave"):
    if [i["loss"] for i in runs[mode]["iterations"]] != ref:
        sys.exit(f"{mode}: losses differ from none's")
print("ok")
EOF
)
    fi
    if [ "$c6_check" = ok ]; then
        gm_pass "configs/small/case6.json: none/naive/interleave, 5 warm-up + 5 without + 10 with; case6_extract's CSVs = the JSON; losses = none's"
    else
        gm_fail "case 6" "exit $GM_RC: $c6_check $(tail -c 300 "$c6/err")"
    fi
    if (cd "$GM_ROOT" && bash scripts/case6_draw.sh "$c6/res/case6.csv" "$c6/case6.png" >/dev/null 2>&1) &&
        [ "$(head -c 4 "$c6/case6.png" | od -An -tx1 | tr -d ' ')" = 89504e47 ] &&
        [ "$(head -c 4 "$c6/case6_recovery.png" | od -An -tx1 | tr -d ' ')" = 89504e47 ]; then
        gm_pass "case6_draw: the iteration-time / idle-time figure and the recovery-probability figure"
    else
        gm_fail "case6_draw" "$(cd "$GM_ROOT" && bash scripts/case6_draw.sh "$c6/res/case6.csv" "$c6/case6.png" 2>&1 | tail -n 2)"
    fi
    # ---- case 6 at an interval: the steps between checkpoints are the interval's ------------
    # (naive every 3 from iteration 7: checkpoints at 7, 10, 13, 16; the "with" mean is every
    # step from 7 on, the checkpoint sizes the medians of the four that took one)
    (cd "$c6" && timeout 300 "$GM_BIN" -m gemini --ranks 2 --device cpu --threads 1 -l 3 -h 64 --heads 4 --seq 32 --vocab 512 \
        --log-interval 1 --gemini-mode naive --gemini-every 3 --iters 16 --gemini-ckpt-from 7 --gemini-store "$GM_STORE" \
        --results "$c6/every3" >out3 2>err3)
    GM_RC=$?
    e3_check=fail
    if [ "$GM_RC" -eq 0 ] && (cd "$GM_ROOT" && bash scripts/case6_extract.sh -r "$c6/every3" >/dev/null); then
        e3_check=$(python3 - "$c6/every3" <<'EOF'
import csv, glob, json, os, sys
res = sys.argv[1]
d = json.load(open(glob.glob(os.path.join(res, "log_gemini_*.json"))[0]))
g, its = d["gemini"], d["iterations"]
phases = [i["phase"] for i in its]
took = [i["iteration"] for i in its if "checkpoint" in i]
if phases[6:] != ["checkpoint"] * 10 or took != [7, 10, 13, 16]:
    sys.exit(f"phases {phases}, checkpoints at {took}")
with_ms = sum(i["ms"] for i in its[6:]) / 10
if g["checkpoint_steps"] != 10 or abs(g["checkpoint_ms"] - with_ms) > 1e-6 * with_ms or g["every"] != 3:
    sys.exit(f"JSON {g['checkpoint_steps']} steps, {g['checkpoint_ms']} ms (want {with_ms}), every {g['every']}")
if g["checkpoint_size"] != its[6]["checkpoint"]["bytes"]:
    sys.exit(f"checkpoint size {g['checkpoint_size']}")
r = {x["mode"]: x for x in csv.DictReader(open(os.path.join(res, "case6.csv")))}["naive"]
if r["every"] != "3" or float(r["lost_iterations"]) != g["expected_lost_iterations"] or abs(float(r["ckpt_ms"]) - with_ms) > 0.06:
    sys.exit(f"CSV {r}")
# the paired cost: each checkpoint's step and the next (not a checkpoint) less twice the median of
# the clean steps (past the warm-up, neither they nor the step before them checkpointed) within 4
# of them; the overhead at every 3 against the clean steps' median
import statistics
ck = {i["iteration"]: "checkpoint" in i for i in its}
ms = {i["iteration"]: i["ms"] for i in its}
clean = lambda t: t > g["warmup_steps"] and not ck[t] and (t == 1 or not ck[t - 1])
extras = []
for t in took:
    win = [t] + ([t + 1] if t + 1 in ck and not ck[t + 1] else [])
    near = [ms[u] for u in range(t - 4, win[-1] + 5) if u in ck and u not in win and clean(u)]
    extras.append(sum(ms[u] for u in win) - len(win) * statistics.median(near))
base = statistics.median(ms[t] for t in ms if clean(t))
p, want = g.get("paired", {}), statistics.mean(extras)
if p.get("checkpoints") != 4 or p.get("of") != "steady" or abs(p.get("extra_ms", 1e9) - want) > 1e-6 * max(1, abs(want)) or \
   abs(p.get("overhead_at_every", 0) - (1 + want / (3 * base))) > 1e-9 or abs(float(r["paired_x"]) - p["overhead_at_every"]) > 6e-5:
    sys.exit(f"paired {p}, want extra {want} over {base}; CSV {r['paired_x']}")
print("ok")
EOF
)
    fi
    if [ "$e3_check" = ok ] && grep -q "^gemini: a checkpoint every 3 iterations (fixed) | iterations a failure loses, expected: 1.5" \
        "$c6"/every3/log_gemini_*.txt &&
        grep -q "^gemini: a checkpoint adds .* ms to its step and the next, paired with the clean steps beside it (4 steady checkpoints; .* | at one every 3: " \
            "$c6"/every3/log_gemini_*.txt; then
        gm_pass "case 6 with --gemini-every 3: the steps between checkpoints share the interval's cost (JSON, CSV), the interval and the expected loss in the log and CSV; each checkpoint's cost paired with the clean steps beside it (JSON, log, CSV)"
    else
        gm_fail "case 6 with --gemini-every 3" "exit $GM_RC: $e3_check $(tail -c 300 "$c6/err3")"
    fi
fi
rm -rf "$GM_WORK"
