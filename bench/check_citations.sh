#!/usr/bin/env bash
# Every bench/results path the repository cites exists: the README, docs/, the engines',
# kernels' and driver's comments, scripts/, the bench scripts and programs, the Makefile and
# tests/ name run folders (bench/results/DATE-MACHINE-WHAT[/...], or DATE-MACHINE-WHAT alone)
# and files in them; bench/results keeps only what they cite (bench/results/INDEX.md names the
# commit where the rest can still be read), so a citation must not outlive its folder.
# Also: nothing cites bench/batches, which is gone.
#   bench/check_citations.sh        from the repository root; exit 0, or 1 and one line per
#                                   missing path: "FILE:LINE: PATH"
# (bench/results/latest is the scripts' default output folder, made by a call: not a citation.)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
sources=(README.md Makefile docs engines kernels cmd scripts tests bench/*.sh bench/*.py bench/*.c bench/*.cu bench/*.cuh)
[ -f bench/README.md ] && sources+=(bench/README.md)
# a run folder's name, with what follows it up to a space, quote, bracket or backtick
run_re='(bench/results/)?20[0-9]{2}-[0-9]{2}-[0-9]{2}[a-z]?-[a-z0-9]+-[A-Za-z0-9._/+-]*'
missing=0
while IFS= read -r hit; do
    where=${hit%:*}      # FILE:LINE
    path=${hit##*:}
    path=${path#bench/results/}
    path=${path%%[.,;]}  # a sentence's full stop or comma after the path
    path=${path%/}
    if [ ! -e "bench/results/$path" ]; then
        echo "$where: bench/results/$path"
        missing=1
    fi
done < <(grep -rnoE --binary-files=without-match "$run_re" "${sources[@]}" 2>/dev/null)
while IFS= read -r hit; do
    echo "$hit (bench/batches is gone)"
    missing=1
done < <(grep -rnoE --binary-files=without-match --exclude=check_citations.sh 'bench/batches[A-Za-z0-9._/-]*' "${sources[@]}" 2>/dev/null)
exit $missing
