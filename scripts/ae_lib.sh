# Shared by scripts/caseN_extract.sh: option parsing and one table over the run logs.
# Sourced, not run.  The logs are read with grep/awk in the artifact's spirit: the facts come
# from the file name (log_{method}_l-{L}_h-{H}_bs-{B}_ws-{W}_{date}.{epoch}.txt) and from the
# Megatron lines (" > number of parameters ...", " iteration ... | elapsed time per iteration
# (ms): X |", "NumWorkers: ...;  SamplesPerSecond: Y").

RESULTS=results
OUTDIR=
WINDOW=
LAYERS=

ae_usage() {
    echo "usage: $0 [-r RESULTS_DIR] [-o OUT_DIR] $1" >&2
    echo "  writes OUT_DIR/$2 (OUT_DIR defaults to RESULTS_DIR)" >&2
    exit 2
}

# ae_options "EXTRA_USAGE" CSV_NAME "$@": -r, -o, and -w / -l where the case uses them.
ae_options() {
    local extra=$1 csv=$2
    shift 2
    local OPTIND opt
    while getopts "r:o:w:l:h" opt; do
        case $opt in
        r) RESULTS=$OPTARG ;;
        o) OUTDIR=$OPTARG ;;
        w) WINDOW=$OPTARG ;;
        l) LAYERS=$OPTARG ;;
        *) ae_usage "$extra" "$csv" ;;
        esac
    done
    shift $((OPTIND - 1))
    [ $# -eq 0 ] || ae_usage "$extra" "$csv"
    [ -d "$RESULTS" ] || { echo "$0: no results directory '$RESULTS'" >&2; exit 1; }
    OUTDIR=${OUTDIR:-$RESULTS}
    mkdir -p "$OUTDIR"
    CSV=$OUTDIR/$csv
}

# Write stdin to $CSV through a temporary file, so a failed extract leaves no half CSV.
ae_write_csv() {
    local tmp
    tmp=$(mktemp "$CSV.XXXXXX")
    if ! cat >"$tmp"; then rm -f "$tmp"; return 1; fi
    mv "$tmp" "$CSV"
    echo "$0: wrote $CSV ($(($(wc -l <"$CSV") - 1)) rows)"
}

# One row per finished run (a log with iteration lines and no OUT OF MEMORY / ERROR line),
# the newest run of each method, layers, hidden, batch and window:
#   method,layers,hidden,batch,window,parameters,iter_ms,samples_per_s,epoch
# iter_ms and samples_per_s are the last logged interval's, as printed.
ae_runs() {
    local dir=$1 f
    # Oldest first, so the newest of a key wins below; the epoch is in the name.
    for f in "$dir"/log_*.txt; do
        [ -e "$f" ] || continue
        awk -F'|' '
            FNR == 1 {
                n = split(FILENAME, p, "/"); base = p[n]
                split(base, q, "_")
                method = q[2]; L = substr(q[3], 3); H = substr(q[4], 3); B = substr(q[5], 4); W = substr(q[6], 4)
                ep = q[7]; sub(/^[^.]*\./, "", ep); sub(/\.txt$/, "", ep)
            }
            /^ > number of parameters/ { n = split($0, a, " "); params = a[n] }
            /^ iteration / { split($2, a, ":"); ms = a[2]; gsub(/ /, "", ms) }
            /^NumWorkers:/ { split($0, a, "SamplesPerSecond: "); sps = a[2] }
            /^OUT OF MEMORY|^ERROR:/ { bad = 1 }
            END { if (!bad && ms != "" && sps != "") printf "%s,%s,%s,%s,%s,%s,%s,%s,%s\n", method, L, H, B, W, params, ms, sps, ep }
        ' "$f"
    done | sort -t, -k9,9n | awk -F, '{ key = $1 FS $2 FS $3 FS $4 FS $5; row[key] = $0; if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
                                      END { for (i = 1; i <= n; i++) print row[order[i]] }'
}

# The newest find-max result of each method:
#   method,max_layers,parameters,parameters_b,next_layers,stopped_by,short_bytes,hidden,batch
ae_findmax() {
    local dir=$1 f
    for f in "$dir"/findmax_*.txt; do
        [ -e "$f" ] || continue
        awk -F' [|] ' '
            FNR == 1 {
                n = split(FILENAME, p, "/"); split(p[n], q, "_")
                H = substr(q[4], 3); B = substr(q[5], 4)
                ep = q[7]; sub(/^[^.]*\./, "", ep); sub(/\.txt$/, "", ep)
            }
            /^find-max result: / {
                sub(/^find-max result: method /, "", $1); sub(/^layers /, "", $2); sub(/^parameters /, "", $3)
                sub(/ B$/, "", $4); sub(/^next l/, "", $5); sub(/^stopped by /, "", $6)
                split($7, s, " ")
                printf "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", $1, $2, $3, $4, $5, $6, s[3], H, B, ep
            }' "$f"
    done | sort -t, -k10,10n | awk -F, '{ row[$1] = $1 FS $2 FS $3 FS $4 FS $5 FS $6 FS $7 FS $8 FS $9; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
                                        END { for (i = 1; i <= n; i++) print row[order[i]] }'
}

# ae_draw N [CSV] [PNG]: plots/caseN.gp over CSV (default results/caseN.csv) into PNG
# (default plots/caseN.png), with the pngcairo terminal, or png (libgd) where gnuplot has
# no cairo — said on stderr, since fonts and antialiasing then differ.
ae_draw() {
    local n=$1 root csv png term tmp
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    csv=${2:-results/case$n.csv}
    png=${3:-$root/plots/case$n.png}
    command -v gnuplot >/dev/null || { echo "$0: gnuplot is not installed (make deps installs gnuplot-nox)" >&2; exit 1; }
    [ -f "$csv" ] || { echo "$0: no $csv (run scripts/case${n}_extract.sh first)" >&2; exit 1; }
    # At least one data row with every column filled (but predicted_*: --predict's, empty
    # where no machine file models the run): gnuplot draws nothing from less.
    if ! awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) opt[i] = $i ~ /^predicted/; next }
                  { for (i = 1; i <= NF; i++) if ($i == "" && !opt[i]) next; ok = 1 } END { exit !ok }' "$csv"; then
        echo "$0: $csv has no complete row to draw" >&2
        exit 1
    fi
    if gnuplot -e "set terminal pngcairo" 2>/dev/null; then
        term=pngcairo
    else
        term=png
        echo "$0: gnuplot has no pngcairo terminal here; drawing with png instead" >&2
    fi
    # the clip of the runs beside the CSV (their JSON's config), said in the title: at the
    # artifact's --clip-grad 1.0 the offload engines run their clipped schedule
    local clip
    # (none there, as for a CSV written elsewhere: no clip in the title)
    clip=$( { grep -ho '"clip_grad":[[:space:]]*[0-9.eE+-]*' "$(dirname "$csv")"/log_*.json 2>/dev/null || true; } |
        sed 's/.*:[[:space:]]*//' | sort -u | paste -sd/ -)
    [ -n "$clip" ] && clip="clip-grad $clip"
    mkdir -p "$(dirname "$png")"
    tmp=$(mktemp "$png.XXXXXX")
    if ! gnuplot -e "term='$term'; infile='$csv'; outfile='$tmp'; clip='$clip'" "$root/plots/case$n.gp"; then
        rm -f "$tmp"
        echo "$0: gnuplot failed on $csv" >&2
        exit 1
    fi
    [ -s "$tmp" ] || { rm -f "$tmp"; echo "$0: gnuplot wrote an empty image" >&2; exit 1; }
    mv "$tmp" "$png"
    echo "$0: wrote $png"
}

# ae_predicted RESULTS_DIR JSON: the ms/iteration --predict gives for the run of JSON (its
# method, shape, window, dtype and math), from the machine file in RESULTS_DIR of the run's
# backend (AE_MACHINE: another one); empty when there is none or the engine does not model it.
ae_predicted() {
    local dir=$1 json=$2 root bin backend machine f
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    bin=${AEBENCH:-$root/aebench} # (the tests' binary where they name one: make check-asan's)
    [ -x "$bin" ] && [ -f "$json" ] || return 0
    backend=$(ae_json_str "$json" backend)
    machine=${AE_MACHINE:-}
    if [ -z "$machine" ]; then
        for f in "$dir"/machine_*.json; do
            [ -e "$f" ] || continue
            if grep -q "\"backend\":[[:space:]]*\"$backend\"" "$f"; then machine=$f; break; fi
        done
    fi
    [ -n "$machine" ] || return 0
    # (the window is stronghold's: aebench refuses -w for an engine without one)
    local win=()
    [ "$(ae_json_str "$json" method)" = stronghold ] && win=(-w "$(ae_json_str "$json" window)")
    "$bin" --predict -m "$(ae_json_str "$json" method)" -l "$(ae_json_num "$json" layers)" \
        -h "$(ae_json_num "$json" hidden)" --heads "$(ae_json_num "$json" heads)" --seq "$(ae_json_num "$json" seq)" \
        -b "$(ae_json_num "$json" batch)" --vocab "$(ae_json_num "$json" vocab)" "${win[@]}" \
        --dtype "$(ae_json_str "$json" dtype)" --math "$(ae_json_str "$json" math)" --device cpu \
        --machine "$machine" 2>/dev/null | awk '/^predict / && $3 ~ /^[0-9.]+$/ { print $3; exit }'
}
# The first string / integer value of KEY in a JSON file (the run JSON's flat config fields).
ae_json_str() { grep -o "\"$2\":[[:space:]]*\"[^\"]*\"" "$1" | head -n 1 | sed 's/.*"\([^"]*\)"$/\1/'; }
ae_json_num() { grep -o "\"$2\":[[:space:]]*[0-9]*" "$1" | head -n 1 | grep -o '[0-9]*$'; }

# ae_json RESULTS_DIR METHOD LAYERS HIDDEN BATCH WINDOW EPOCH: the JSON of that run.
ae_json() {
    local f
    for f in "$1"/log_"$2"_l-"$3"_h-"$4"_bs-"$5"_ws-"$6"_*."$7".json; do
        [ -e "$f" ] && { echo "$f"; return 0; }
    done
    return 0
}
