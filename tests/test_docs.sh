# Sourced by tests/run.sh: README.md's flag table names every option `aebench --help` lists,
# and no option --help does not (issue 48: an option is declared once, in cmd/options.h or an
# engine's option table, and --help comes from those; the README's table is written by hand,
# so a new option, or one renamed or removed, fails this until the README says so).  Options
# are read from the first cell of each row of the table under "| flag | meaning | default |"
# (a row may name several: "`--lr X`, `--min-lr X`").
docs_help=$("$AEBENCH" --help 2>&1 | grep -oE '^ +(-[A-Za-z], )?--[a-z0-9][a-z0-9-]*' | sed 's/.*--//' | sort -u)
docs_readme=$(awk '/^\| flag \| meaning \| default \|$/ { table = 1; next }
                   table && !/^\|/ { exit }
                   table && !/^\|---/ { row = substr($0, 3); print substr(row, 1, index(row, " | ")) }' README.md |
              grep -oE -- '--[a-z0-9][a-z0-9-]*' | sed 's/^--//' | sort -u)
docs_missing=$(comm -23 <(printf '%s\n' "$docs_help") <(printf '%s\n' "$docs_readme") | sed 's/^/--/' | paste -sd' ')
docs_stale=$(comm -13 <(printf '%s\n' "$docs_help") <(printf '%s\n' "$docs_readme") | sed 's/^/--/' | paste -sd' ')
if [ "$(printf '%s\n' "$docs_help" | grep -c .)" -lt 10 ]; then
    FAILED=$((FAILED + 1)); FAILURES+=("README flag table")
    echo "FAIL README flag table: aebench --help listed $(printf '%s\n' "$docs_help" | grep -c .) options"
elif [ -n "$docs_missing" ] || [ -n "$docs_stale" ]; then
    FAILED=$((FAILED + 1)); FAILURES+=("README flag table")
    echo "FAIL README flag table: misses ${docs_missing:-nothing}; names options --help does not list: ${docs_stale:-none}"
else
    PASSED=$((PASSED + 1))
    echo "ok   README's flag table names the $(printf '%s\n' "$docs_help" | grep -c .) options aebench --help lists, and no other"
fi
# Every bench/results path the README, docs, code comments and scripts cite exists (issue 48:
# bench/results keeps only what is cited; bench/check_citations.sh names any citation left
# pointing at a file that went, one FILE:LINE: PATH line each).
if docs_cites=$(bash bench/check_citations.sh 2>&1); then
    PASSED=$((PASSED + 1))
    echo "ok   every bench/results path the README, docs and code cite exists"
else
    FAILED=$((FAILED + 1)); FAILURES+=("bench/results citations")
    echo "FAIL bench/results citations: $(printf '%s\n' "$docs_cites" | head -n 5 | paste -sd' ')"
fi
# Every environment variable the program reads (getenv in cmd/, engines/ and kernels/) is in
# docs/environment.md's table of what aebench reads, which says who sets it and why it changes no
# result (issue 48: no hidden knobs; a new switch read from the environment fails this until it
# is an option, or that page says why it is not one).  A name the code reads through a macro or
# a variable would slip past a search for getenv("NAME") (AEBENCH_RERUN_OF did): such a call is
# refused anywhere but comm.c, whose launcher table's names are checked as the others.
docs_env_src=(cmd engines kernels)
docs_env_read=$( {
    grep -rhoE --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' \
        'getenv\("[A-Za-z_][A-Za-z0-9_]*"\)' "${docs_env_src[@]}" | sed -E 's/^(secure_)?getenv\("(.*)"\)$/\2/'
    grep -oE '\{"[A-Z0-9_]+", "[A-Z0-9_]+"\}' engines/runtime/comm.c | grep -oE '[A-Z0-9_]+'
} | sort -u)
docs_env_indirect=$(grep -rnE --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' \
                        'getenv *\( *[^" )]' "${docs_env_src[@]}" | grep -v '^engines/runtime/comm\.c:')
docs_env_table=$(awk '/^## What aebench reads/ { on = 1; next } /^## / { on = 0 } on' docs/environment.md)
docs_env_missing=$(for v in $docs_env_read; do grep -qF "\`$v\`" <<<"$docs_env_table" || printf '%s ' "$v"; done)
if [ "$(printf '%s\n' "$docs_env_read" | grep -c .)" -lt 6 ]; then
    FAILED=$((FAILED + 1)); FAILURES+=("environment variables documented")
    echo "FAIL environment variables documented: found only $(printf '%s\n' "$docs_env_read" | grep -c .) names read (the pattern broke?)"
elif [ -n "$docs_env_indirect" ]; then
    FAILED=$((FAILED + 1)); FAILURES+=("environment variables documented")
    echo "FAIL environment variables documented: read by a name not written at the call: $(printf '%s\n' "$docs_env_indirect" | head -n 3 | paste -sd' ')"
elif [ -n "$docs_env_missing" ]; then
    FAILED=$((FAILED + 1)); FAILURES+=("environment variables documented")
    echo "FAIL environment variables documented: docs/environment.md does not list ${docs_env_missing% }"
else
    PASSED=$((PASSED + 1))
    echo "ok   the $(printf '%s\n' "$docs_env_read" | grep -c .) environment variables aebench reads are in docs/environment.md, each read by its name"
fi
