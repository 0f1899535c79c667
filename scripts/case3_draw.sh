#!/usr/bin/env bash
# Case 3's figure: plots/case3.gp over case3.csv (scripts/case3_extract.sh).
#   scripts/case3_draw.sh [CSV] [PNG]    defaults: results/case3.csv, plots/case3.png
set -euo pipefail
source "$(dirname "$0")/ae_lib.sh"
[ $# -le 2 ] || { echo "usage: $0 [CSV] [PNG]" >&2; exit 2; }
ae_draw 3 "$@"
