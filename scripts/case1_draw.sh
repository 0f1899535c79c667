#!/usr/bin/env bash
# Case 1's figure: plots/case1.gp over case1.csv (scripts/case1_extract.sh).
#   scripts/case1_draw.sh [CSV] [PNG]    defaults: results/case1.csv, plots/case1.png
set -euo pipefail
source "$(dirname "$0")/ae_lib.sh"
[ $# -le 2 ] || { echo "usage: $0 [CSV] [PNG]" >&2; exit 2; }
ae_draw 1 "$@"
