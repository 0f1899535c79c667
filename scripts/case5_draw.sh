#!/usr/bin/env bash
# Case 5's figure: plots/case5.gp over case5.csv (scripts/case5_extract.sh).
#   scripts/case5_draw.sh [CSV] [PNG]    defaults: results/case5.csv, plots/case5.png
set -euo pipefail
source "$(dirname "$0")/ae_lib.sh"
[ $# -le 2 ] || { echo "usage: $0 [CSV] [PNG]" >&2; exit 2; }
ae_draw 5 "$@"
