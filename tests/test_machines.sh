# Several machines, emulated on this one (issue 32, part): MPICH splits the 4 ranks of one
# mpiexec into two "machines" of 2 when told to (MPIR_CVAR_NUM_CLIQUES=2, by block: ranks
# {0,1} and {2,3}), and MPI_Comm_split_type(SHARED), which aebench asks for the ranks that
# share a machine, follows it.  Sourced by tests/run.sh (PASSED, FAILED, FAILURES, needs_mpi):
# the plan and budgets are per machine (each rank half of its machine's --cpu-mem-limit, not a
# quarter as with the 4 ranks on one machine); megatron-lm is the same there as on one machine,
# and every ZeRO stage and offload engine equals ZeRO-0 bit for bit (the MPI path's reductions
# sum in rank order whatever the operation: runtime/collectives.c).  gemini places each shard's
# copy on the other machine and sends it there; with a store per machine (--gemini-store
# DIR/m%m) a whole machine lost, or a rank of each, recovers bit for bit; and `mpiexec -f
# HOSTFILE` launches the same job.

# (after test_dp.sh, whose dp_run and dp_same it uses: the runs land in $DP_WORK/machines_*)
MC_BIN=$(realpath "$AEBENCH")
MC_ARGS=(-b 2 --iters 6 --log-interval 3 --cpu-mem-limit 1G)

# mc_run NAME CLIQUES ARGS...: 4 ranks under mpiexec as CLIQUES machines (dp_run's machines_NAME)
mc_run() {
    local name=$1 cliques=$2
    shift 2
    local -a DP_ENV=(MPIR_CVAR_NUM_CLIQUES="$cliques" MPIR_CVAR_CLIQUES_BY_BLOCK=1)
    dp_run "machines_$name" 4 "${MC_ARGS[@]}" "$@"
}
mc_same() { dp_same "$1" "machines_$2" "machines_$3"; }
# mc_json NAME EXPR: a Python expression over the run's JSON `d`
mc_json() { python3 -c 'import glob, json, sys; d = json.load(open(glob.glob(sys.argv[1] + "/results/*.json")[0])); print(eval(sys.argv[2]))' "$DP_WORK/machines_$1" "$2" 2>/dev/null; }

if needs_mpi "2 machines x 2 ranks (MPICH cliques)" "$MC_BIN"; then
    if ! mpiexec --version 2>&1 | grep -qi "hydra"; then
        dp_fail "2 machines x 2 ranks" "mpiexec is not MPICH's (Hydra): its cliques emulate the machines (make deps installs MPICH)"
    elif mc_run z0 2 --zero-stage 0; then
        # the split: per machine 2 ranks, each rank half of the machine's --cpu-mem-limit
        per=$(mc_json z0 'd["plan"]["per_machine"]["ranks"], d["memory"]["host"]["limit_bytes"]')
        one=""
        mc_run one 1 --zero-stage 0 && one=$(mc_json one 'd["plan"]["per_machine"]["ranks"], d["memory"]["host"]["limit_bytes"]')
        if [ "$per" = "(2, 536870912)" ] && [ "$one" = "(4, 268435456)" ] && grep -q "plan per machine (2 ranks)" "$DP_WORK/machines_z0/out"; then
            dp_pass "2 machines x 2 ranks: the plan per machine is 2 ranks' and each rank has half its machine's --cpu-mem-limit (4 ranks on one machine: a quarter)"
        else
            dp_fail "2 machines x 2 ranks: per machine" "cliques: ${per:-?}, one machine: ${one:-?} (want (2, 536870912) and (4, 268435456))"
        fi
        mc_same "2 machines x 2 ranks = 1 machine x 4 ranks (megatron-lm)" z0 one
        mc_run z1 2 --zero-stage 1 && mc_same "2 machines x 2 ranks: ZeRO-1 = ZeRO-0" z0 z1
        # a pipeline across the machines (--pp 2: stage 0 on the first, stage 1 on the second,
        # 2 pipelines side by side), as DDP on 2 ranks with the same global batch
        mc_run pp2 2 --pp 2 --global-batch 8 && dp_run machines_ddp2 2 "${MC_ARGS[@]}" --global-batch 8 &&
            grep -q "plan per machine (2 ranks)" "$DP_WORK/machines_pp2/out" &&
            mc_same "2 machines x 2 ranks: --pp 2 across the machines = DDP on 2 ranks" ddp2 pp2
        for st in 2 3; do mc_run "z$st" 2 --zero-stage "$st" && mc_same "2 machines x 2 ranks: ZeRO-$st = ZeRO-0" z0 "z$st"; done
        # tensor parallelism within each machine (ranks {0,1} and {2,3}: --tp 2's groups), data
        # parallel across them, within the summation bound of one rank (test_dp.sh); --tp 4
        # would span the machines and is refused
        if mc_run tp2 2 --tp 2 --global-batch 8 && dp_run machines_tp1 1 "${MC_ARGS[@]}" --global-batch 8; then
            if out=$(tp_bound_check machines_tp1 machines_tp2) && grep -q "plan per machine (2 ranks)" "$DP_WORK/machines_tp2/out"; then
                dp_pass "2 machines x 2 ranks: --tp 2 in each machine, 2 copies across them, within the bound of one rank ($out)"
            else
                dp_fail "2 machines x 2 ranks: --tp 2" "${out:-the plan is not per machine}"
            fi
        fi
        # ZeRO-3 over the 2 copies (one on each machine) of --tp 2: with one micro-batch a rank,
        # their DDP's sums and norms (test_dp.sh), bit for bit
        mc_run tp2m1 2 --tp 2 --global-batch 4 && mc_run tp2m1z3 2 --tp 2 --global-batch 4 --zero-stage 3 &&
            mc_same "2 machines x 2 ranks: --tp 2 in each machine, ZeRO-3 over the copies across them = their DDP" tp2m1 tp2m1z3
        mkdir -p "$DP_WORK/machines_tp4"
        if (cd "$DP_WORK/machines_tp4" && env MPIR_CVAR_NUM_CLIQUES=2 MPIR_CVAR_CLIQUES_BY_BLOCK=1 timeout 120 "$MPIRUN" -np 4 \
            "$MC_BIN" "${DP_SHAPE[@]}" "${MC_ARGS[@]}" --tp 4 --results "$DP_WORK/machines_tp4/results" >out 2>err); then
            dp_fail "2 machines x 2 ranks: --tp 4 across the machines" "it ran"
        elif grep -q "aebench: --tp 4: 2 ranks on a machine, not a whole number of tensor-parallel groups" "$DP_WORK/machines_tp4/err" &&
            [ ! -e "$DP_WORK/machines_tp4/results" ]; then
            dp_pass "2 machines x 2 ranks: --tp 4 (a group across the machines) refused with one line"
        else
            dp_fail "2 machines x 2 ranks: --tp 4 across the machines" "$(head -c 300 "$DP_WORK/machines_tp4/err")"
        fi
        # (every offloading engine, from the registry: tests/engine_list.sh; stronghold with -w 1
        # and -w 2)
        # shellcheck source=tests/engine_list.sh
        source "$(dirname "${BASH_SOURCE[0]}")/engine_list.sh"
        registry_engines "$MC_BIN" || dp_fail "the registry's engines (2 machines x 2 ranks)" "$REG_WHY"
        mc_offload=()
        for e in "${REG_OFFLOAD[@]}"; do
            if [ "$e" = stronghold ]; then mc_offload+=("stronghold -w 1" "stronghold -w 2"); else mc_offload+=("$e"); fi
        done
        for e in "${mc_offload[@]}"; do
            read -r -a ea <<<"$e"
            tag=$(tr -c 'a-z0-9' '_' <<<"$e")
            mc_run "$tag" 2 -m "${ea[@]}" && mc_same "2 machines x 2 ranks: $e = megatron-lm ZeRO-0" z0 "$tag"
        done

        # ---- gemini by machine: a store per machine (--gemini-store DIR/m%m), each shard's
        # copy on the other machine, sent (not read) between them; a whole machine lost (both
        # its ranks killed, their copies deleted) and two ranks of different machines lost at
        # once, each recovered by --ranks from the other machine's copies = ZeRO-3 bit for bit
        MC_STORE="$DP_WORK/machines_store"
        mkdir -p "$MC_STORE/m0" "$MC_STORE/m1"
        # mc_gemini NAME ARGS...: --ranks 4 (the supervisor relaunches) as 2 machines
        mc_gemini() {
            local name=$1
            shift
            local -a DP_ENV=(MPIR_CVAR_NUM_CLIQUES=2 MPIR_CVAR_CLIQUES_BY_BLOCK=1)
            dp_run "machines_$name" 1 "${MC_ARGS[@]}" --ranks 4 -m gemini --gemini-mode naive \
                --gemini-store "$MC_STORE/m%m" "$@"
        }
        if mc_gemini gmach --fail-at 4 --fail-rank 2,3 --fail-kind hardware; then
            o="$DP_WORK/machines_gmach/out"
            if grep -q "gemini --gemini-placement group by machine (2 machines of 2 ranks): every shard's 1 peer copy on other machines (rank 0's on rank 2, machine 1)" "$o" &&
                grep -q "the peers' chunks are sent (NCCL / MPI send-recv): the ranks are on 2 machines" "$o" &&
                grep -q "rank 2's shard of iteration 3 fetched from rank 0's copy" "$o" &&
                grep -q "rank 3's shard of iteration 3 fetched from rank 1's copy" "$o" &&
                [ -z "$(ls -A "$MC_STORE/m0" "$MC_STORE/m1" 2>/dev/null | grep -v ':$' | grep -v '^$')" ]; then
                mc_same "gemini, 2 machines: machine 1 lost (ranks 2, 3 and their copies) at iteration 4, restored from machine 0's copies = ZeRO-3" z3 gmach
            else
                dp_fail "gemini, a machine lost" "$(grep -hE 'placement|sent|fetched' "$o" | head -n 4) stores: $(ls -R "$MC_STORE" | tr '\n' ' ')"
            fi
        fi
        # (the ring's job on the machines of a hostfile instead: two names of this host, which
        # Hydra makes two machines; the supervisor relaunches it there)
        printf 'localhost:2  # rank 0 here\n127.0.0.1 slots=2\n' >"$DP_WORK/machines_hosts2"
        if dp_run machines_gring 1 "${MC_ARGS[@]}" --ranks 4 --hosts "$DP_WORK/machines_hosts2" -m gemini --gemini-mode naive \
            --gemini-store "$MC_STORE/m%m" --gemini-placement ring --fail-at 4 --fail-rank 1,2 --fail-kind hardware; then
            o="$DP_WORK/machines_gring/out"
            if grep -q "ring by machine (2 machines of 2 ranks)" "$o" &&
                grep -q "rank 1's shard of iteration 3 fetched from rank 3's copy" "$o" &&
                grep -q "rank 2's shard of iteration 3 fetched from rank 0's copy" "$o"; then
                mc_same "gemini ring, 2 machines of --hosts: ranks 1 and 2 (one on each) lost at once, relaunched there, each from the other machine = ZeRO-3" z3 gring
            else
                dp_fail "gemini ring, two machines' ranks lost" "$(grep -hE 'placement|fetched' "$o" | head -n 4)"
            fi
        fi
        # each machine's store holds its own ranks' files: a job killed (no --ranks to clean up)
        # leaves rank 0 and 1's in m0, 2 and 3's in m1
        mc_job="machines-files-$$"
        (cd "$DP_WORK" && env MPIR_CVAR_NUM_CLIQUES=2 MPIR_CVAR_CLIQUES_BY_BLOCK=1 timeout 120 "$MPIRUN" -np 4 "$DP_BIN" \
            "${DP_SHAPE[@]}" "${MC_ARGS[@]}" -m gemini --gemini-mode naive --gemini-store "$MC_STORE/m%m" \
            --gemini-job "$mc_job" --results "$DP_WORK/machines_files" --fail-at 3 --fail-rank 0 >/dev/null 2>&1)
        f0=$(cd "$MC_STORE/m0" && ls -- */rank-*.ckpt 2>/dev/null | sed 's|.*/||' | tr '\n' ' ')
        f1=$(cd "$MC_STORE/m1" && ls -- */rank-*.ckpt 2>/dev/null | sed 's|.*/||' | tr '\n' ' ')
        if [ "$f0" = "rank-0.ckpt rank-1.ckpt " ] && [ "$f1" = "rank-2.ckpt rank-3.ckpt " ]; then
            dp_pass "gemini --gemini-store DIR/m%m: each machine's ranks keep their copies in their machine's store"
        else
            dp_fail "gemini store per machine" "m0: ${f0:-none}; m1: ${f1:-none}"
        fi
        rm -rf "${MC_STORE:?}"/m0/* "${MC_STORE:?}"/m1/*
        # reading a peer's memory cannot cross machines: refused, naming why
        (cd "$DP_WORK" && env MPIR_CVAR_NUM_CLIQUES=2 MPIR_CVAR_CLIQUES_BY_BLOCK=1 timeout 120 "$MPIRUN" -np 4 "$DP_BIN" \
            "${DP_SHAPE[@]}" "${MC_ARGS[@]}" -m gemini --gemini-mode naive --gemini-store "$MC_STORE/m%m" \
            --gemini-transport read --results "$DP_WORK/machines_read" >"$DP_WORK/machines_read.out" 2>&1)
        rc=$?
        if [ $rc -eq 2 ] && grep -q "gemini-transport read: the ranks are on 2 machines" "$DP_WORK/machines_read.out" &&
            [ ! -e "$DP_WORK/machines_read" ]; then
            dp_pass "gemini --gemini-transport read across 2 machines: refused (exit 2) before anything is written, saying why"
        else
            dp_fail "gemini read across machines" "exit $rc: $(tail -n 2 "$DP_WORK/machines_read.out")"
        fi
        rm -rf "${MC_STORE:?}"/m0/* "${MC_STORE:?}"/m1/*

        # ---- launched from a hostfile, as on real machines (docs/many-gpus.md): MPICH's
        # `mpiexec -f HOSTFILE`, here two entries of this host with 2 slots each and the cliques
        # splitting them: the same plan per machine and the same bits as above
        printf 'localhost:2\nlocalhost:2\n' >"$DP_WORK/machines_hosts"
        mkdir -p "$DP_WORK/machines_hf"
        (cd "$DP_WORK/machines_hf" && env MPIR_CVAR_NUM_CLIQUES=2 MPIR_CVAR_CLIQUES_BY_BLOCK=1 timeout 120 \
            "$MPIRUN" -f "$DP_WORK/machines_hosts" -np 4 "$DP_BIN" "${DP_SHAPE[@]}" "${MC_ARGS[@]}" --zero-stage 0 \
            --results "$DP_WORK/machines_hf/results" --save-params "$DP_WORK/machines_hf.params" >out 2>err)
        rc=$?
        if [ $rc -eq 0 ] && grep -q "plan per machine (2 ranks)" "$DP_WORK/machines_hf/out"; then
            mc_same "mpiexec -f HOSTFILE -np 4 (2 machines of 2): plan per machine, = the same ranks under mpiexec -np 4" z0 hf
        else
            dp_fail "mpiexec -f HOSTFILE" "exit $rc: $(tail -n 2 "$DP_WORK/machines_hf/err")"
        fi

        # ---- --ranks 4 --hosts FILE: the supervisor starts mpiexec on the file's machines (two
        # names of this host, which Hydra makes two machines of 2 without the cliques), and
        # plans as the ranks will: the same bits; --find-max's budgets per rank are half a
        # machine's, and it finds the size that fits there (one machine of 4: a quarter)
        if dp_run machines_sup 1 "${MC_ARGS[@]}" --zero-stage 0 --ranks 4 --hosts "$DP_WORK/machines_hosts2" &&
            grep -q "plan per machine (2 ranks)" "$DP_WORK/machines_sup/out"; then
            mc_same "--ranks 4 --hosts FILE (2 machines of 2): the supervisor starts them there, = mpiexec -np 4" z0 sup
        else
            dp_fail "--ranks 4 --hosts FILE" "$(grep -m1 'plan per machine' "$DP_WORK/machines_sup/out")"
        fi
        fmh=() fm1=()
        for v in hosts one; do
            hv=()
            [ "$v" = hosts ] && hv=(--hosts "$DP_WORK/machines_hosts2")
            mkdir -p "$DP_WORK/machines_fm_$v"
            (cd "$DP_WORK/machines_fm_$v" && timeout 600 "$DP_BIN" "${DP_SHAPE[@]}" -m l2l -b 2 --iters 2 --find-max --ranks 4 \
                "${hv[@]}" --cpu-mem-limit 6M --results res >out 2>err)
            rc=$?
            b=$(grep -oE "budgets: GPU [^,]+, host [0-9.]+ [KMG]iB" "$DP_WORK/machines_fm_$v/out" | grep -oE "host [0-9.]+ [KMG]iB")
            l=$(grep -oE "find-max result: method l2l \| layers [0-9]+" "$DP_WORK/machines_fm_$v/out" | grep -oE "[0-9]+$")
            if [ "$v" = hosts ]; then fmh=("$rc" "$b" "$l"); else fm1=("$rc" "$b" "$l"); fi
        done
        found=$(ls "$DP_WORK"/machines_fm_hosts/res/probes/log_l2l_l-"${fmh[2]:-0}"_*.txt 2>/dev/null | head -n 1)
        if [ "${fmh[0]}" = 0 ] && [ "${fm1[0]}" = 0 ] && [ "${fmh[1]}" = "host 3.00 MiB" ] && [ "${fm1[1]}" = "host 1.50 MiB" ] &&
            [ "${fmh[2]:-0}" -gt "${fm1[2]:-0}" ] && [ -n "$found" ] && grep -q "memory plan per machine (2 ranks)" "$found"; then
            dp_pass "--find-max --ranks 4 --hosts FILE: each rank half a machine's --cpu-mem-limit (one machine: a quarter), l${fmh[2]} found against l${fm1[2]}, and trained on 2 machines of 2"
        else
            dp_fail "--find-max --ranks 4 --hosts FILE" "hosts: ${fmh[*]}; one machine: ${fm1[*]}; found log: ${found:-none}"
        fi
        # a machine of --hosts that is not there: its ranks never come, the others wait in
        # MPI_Init for them (and Hydra waits too), so the supervisor's start-up deadline
        # (--hang-timeout, here 5 s) ends the job, naming the hostfile; nothing is left running
        printf 'localhost:2\nno-such-host.invalid:2\n' >"$DP_WORK/machines_hosts_gone"
        mkdir -p "$DP_WORK/machines_gone"
        SECONDS=0
        (cd "$DP_WORK/machines_gone" && timeout 90 "$DP_BIN" "${DP_SHAPE[@]}" -b 2 --iters 2 --ranks 4 --hang-timeout 5 \
            --hosts "$DP_WORK/machines_hosts_gone" --results "$DP_WORK/machines_gone/res" >out 2>err)
        rc=$? took=$SECONDS
        sleep 1
        left=$(pgrep -f "$DP_WORK/machines_gone/res" | wc -l)
        if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$took" -lt 40 ] && [ "$left" = 0 ] &&
            grep -qE "aebench: --ranks 4: (no rank got past MPI's start-up within 5 s .*--hosts .*machines_hosts_gone may be unreachable|.*mpiexec exit)" \
                "$DP_WORK/machines_gone/err"; then
            dp_pass "--hosts with a machine that is not there: the job ends in $took s (exit $rc), saying why, nothing left running"
        else
            dp_fail "--hosts with a machine that is not there" "exit $rc in $took s, $left processes left: $(grep 'aebench:' "$DP_WORK/machines_gone/err" | tail -n 1)"
        fi
        # --search's budgets likewise (a machine file of this shape; what it predicts at 4
        # ranks does not matter here: its budgets are in the JSON whatever it finds)
        sr="$DP_WORK/machines_search"
        mkdir -p "$sr"
        (cd "$sr" && timeout 300 "$DP_BIN" --calibrate "${DP_SHAPE[@]}" -b 2 --results res >cal.out 2>&1)
        sb=""
        for v in hosts one; do
            hv=()
            [ "$v" = hosts ] && hv=(--hosts "$DP_WORK/machines_hosts2")
            (cd "$sr" && "$DP_BIN" --search "${DP_SHAPE[@]}" -b 2 --ranks 4 "${hv[@]}" --cpu-mem-limit 8M --results res >"s_$v.out" 2>&1)
            j=$(awk '/^search: wrote / {print $3}' "$sr/s_$v.out" | tail -n 1)
            sb="$sb $(cd "$sr" && python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["search"]["budgets"]["host_bytes"])' "${j:-none}" 2>/dev/null)"
        done
        if [ "$sb" = " 4194304 2097152" ]; then
            dp_pass "--search --ranks 4 --hosts FILE: each rank's host budget half a machine's --cpu-mem-limit (one machine: a quarter)"
        else
            dp_fail "--search --ranks 4 --hosts FILE" "host budgets (hosts, one machine):$sb, want 4194304 2097152; $(tail -n 1 "$sr/s_hosts.out")"
        fi
    fi
fi
