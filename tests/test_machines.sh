# Several machines, emulated on this one (issue 32, part): MPICH splits the 4 ranks of one
# mpiexec into two "machines" of 2 when told to (MPIR_CVAR_NUM_CLIQUES=2, by block: ranks
# {0,1} and {2,3}), and MPI_Comm_split_type(SHARED), which aebench asks for the ranks that
# share a machine, follows it.  Sourced by tests/run.sh (PASSED, FAILED, FAILURES, needs_mpi):
# the plan and budgets are per machine (each rank half of its machine's --cpu-mem-limit, not a
# quarter as with the 4 ranks on one machine); megatron-lm is the same there as on one machine,
# and every ZeRO stage and offload engine equals ZeRO-0 bit for bit (the MPI path's reductions
# sum in rank order whatever the operation: runtime/collectives.c).

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
        for st in 2 3; do mc_run "z$st" 2 --zero-stage "$st" && mc_same "2 machines x 2 ranks: ZeRO-$st = ZeRO-0" z0 "z$st"; done
        for e in "l2l" "zero-offload" "zero-infinity" "stronghold -w 1" "stronghold -w 2"; do
            read -r -a ea <<<"$e"
            tag=$(tr -c 'a-z0-9' '_' <<<"$e")
            mc_run "$tag" 2 -m "${ea[@]}" && mc_same "2 machines x 2 ranks: $e = megatron-lm ZeRO-0" z0 "$tag"
        done
    fi
fi
