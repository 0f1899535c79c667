#!/usr/bin/env bash
# Case 6's figures: plots/case6.gp over case6.csv and case6_steps.csv (iteration time per
# mode; idle vs checkpoint time per iteration), and plots/case6_recovery.gp over
# case6_recovery.csv (scripts/case6_extract.sh writes all three).
#   scripts/case6_draw.sh [CSV] [PNG]    defaults: results/case6.csv, plots/case6.png; the
#   recovery figure goes beside PNG as case6_recovery.png, from case6_recovery.csv beside CSV
set -euo pipefail
source "$(dirname "$0")/ae_lib.sh"
[ $# -le 2 ] || { echo "usage: $0 [CSV] [PNG]" >&2; exit 2; }
csv=${1:-results/case6.csv}
png=${2:-$(cd "$(dirname "$0")/.." && pwd)/plots/case6.png}
[ -f "${csv%.csv}_steps.csv" ] || { echo "$0: no ${csv%.csv}_steps.csv (run scripts/case6_extract.sh first)" >&2; exit 1; }
(ae_draw 6 "$csv" "$png")
ae_draw 6_recovery "$(dirname "$csv")/case6_recovery.csv" "$(dirname "$png")/case6_recovery.png"
