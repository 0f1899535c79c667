# Sourced by tests/run.sh: the fuzz campaign's grammar (tests/fuzz.py GRAMMAR) covers every
# option `aebench --help` lists, and no option --help does not (issue 47: --graphs and the
# --search family had been left out, and nothing said so).  A new option fails this until
# the grammar says what its valid and bad values are.
grammar_out=$(python3 tests/fuzz.py "$AEBENCH" --drift-only 2>&1)
if [ $? -eq 0 ]; then
    PASSED=$((PASSED + 1)); echo "ok   $grammar_out"
else
    FAILED=$((FAILED + 1)); FAILURES+=("fuzz grammar"); echo "FAIL $grammar_out"
fi
