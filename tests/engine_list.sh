# The engines as the registry has them (engines/registry.c), for the shell suites that loop
# over engines or count them (issue 48: an engine added to the registry is in every
# cross-engine test without a test naming it).  Sourced by those suites (tests/run.sh sources
# them from the repository's root).
#
#   registry_engines BIN   sets
#     REG_ENGINES   every engine -m takes, in the registry's order (BIN --list-engines)
#     REG_IN_ALL    those -m all runs (--help's methods above "all": engine_in_all)
#     REG_OFFLOAD   REG_IN_ALL but the baseline megatron-lm: the engines -m all compares
#                   with it (the offloading engines)
#   and returns 0; or 1 with REG_WHY saying what is wrong: --list-engines failed or printed
#   fewer than REG_MIN_ENGINES names, or -m all's are fewer than REG_MIN_IN_ALL, not among
#   them in their order, or without megatron-lm.  The floors are the engines there are now, so
#   that a loop over a list that came back empty or short fails rather than checking nothing;
#   a new engine only raises the counts.  The caller records the failure with its own fail
#   function (its loops would otherwise pass over nothing).

REG_MIN_ENGINES=6
REG_MIN_IN_ALL=5

registry_engines() {
    local bin=$1 out rc e n
    REG_ENGINES=() REG_IN_ALL=() REG_OFFLOAD=() REG_WHY=""
    out=$("$bin" --list-engines 2>&1)
    rc=$?
    [ "$rc" -eq 0 ] && mapfile -t REG_ENGINES <<<"$out"
    mapfile -t REG_IN_ALL < <("$bin" --help 2>/dev/null |
        awk '/^methods:/ {m = 1; next} m && /^  all / {exit} m && NF {print $1}')
    for e in "${REG_IN_ALL[@]}"; do [ "$e" = megatron-lm ] || REG_OFFLOAD+=("$e"); done
    if [ "$rc" -ne 0 ]; then
        REG_WHY="$bin --list-engines: exit $rc: $(head -c 200 <<<"$out")"
    elif [ "${#REG_ENGINES[@]}" -lt "$REG_MIN_ENGINES" ] || printf '%s\n' "${REG_ENGINES[@]}" | grep -qvx '[a-z0-9-]*[a-z0-9]'; then
        REG_WHY="$bin --list-engines printed ${#REG_ENGINES[@]} names, want at least $REG_MIN_ENGINES: '${REG_ENGINES[*]}'"
    elif [ "${#REG_IN_ALL[@]}" -lt "$REG_MIN_IN_ALL" ] || [ "${#REG_OFFLOAD[@]}" -ne $((${#REG_IN_ALL[@]} - 1)) ]; then
        REG_WHY="-m all runs '${REG_IN_ALL[*]}' (--help's methods above all): want at least $REG_MIN_IN_ALL, megatron-lm among them"
    else
        # (-m all's in the registry's order: each one later in --list-engines than the one before)
        n=0
        for e in "${REG_IN_ALL[@]}"; do
            while [ "$n" -lt "${#REG_ENGINES[@]}" ] && [ "${REG_ENGINES[n]}" != "$e" ]; do n=$((n + 1)); done
            [ "$n" -lt "${#REG_ENGINES[@]}" ] || { REG_WHY="-m all's '${REG_IN_ALL[*]}' are not --list-engines' '${REG_ENGINES[*]}' in its order"; break; }
            n=$((n + 1))
        done
    fi
    [ -z "$REG_WHY" ]
}
