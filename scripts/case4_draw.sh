#!/usr/bin/env bash
# Case 4's figure: plots/case4.gp over case4.csv (scripts/case4_extract.sh).
#   scripts/case4_draw.sh [CSV] [PNG]    defaults: results/case4.csv, plots/case4.png
set -euo pipefail
source "$(dirname "$0")/ae_lib.sh"
[ $# -le 2 ] || { echo "usage: $0 [CSV] [PNG]" >&2; exit 2; }
ae_draw 4 "$@"
