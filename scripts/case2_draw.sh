#!/usr/bin/env bash
# Case 2's figure: plots/case2.gp over case2.csv (scripts/case2_extract.sh).
#   scripts/case2_draw.sh [CSV] [PNG]    defaults: results/case2.csv, plots/case2.png
set -euo pipefail
source "$(dirname "$0")/ae_lib.sh"
[ $# -le 2 ] || { echo "usage: $0 [CSV] [PNG]" >&2; exit 2; }
ae_draw 2 "$@"
