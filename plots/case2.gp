# Case 2 (paper Fig. 7a): stronghold against each baseline at that baseline's largest size.
# Called by scripts/caseN_draw.sh with term (pngcairo or png), infile (CSV) and outfile.
set macros
set terminal @term size 900,540 font ",11"
set output outfile
# the clip the runs trained with (ae_draw reads it from their JSON), in the title
if (!exists("clip")) clip = ""
set datafile separator ","
set grid ytics
set border 3
set tics nomirror
set title "Throughput at each baseline's largest model" . (clip ne "" ? "  [" . clip . "]" : "")
set ylabel "samples / s"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set yrange [0:*]
set offsets 0, 0, graph 0.08, 0
set key top right
# The paper's published samples/s (one V100; the shared design doc ENGINES.md, not in this repository) at each baseline's
# largest size there (megatron-lm l32, l2l l78, zero-offload and zero-infinity l48), on the
# right axis (a V100 is an order of magnitude slower): marked over the bars they compare with.
set y2label "paper (V100) samples / s"
set y2tics nomirror
set y2range [0:*]
paper_base(m) = m eq "megatron-lm" ? 0.750 : m eq "l2l" ? 0.053 : m eq "zero-offload" ? 0.252 : \
                m eq "zero-infinity" ? 0.244 : NaN
paper_sh(m) = m eq "megatron-lm" ? 0.665 : m eq "l2l" ? 0.227 : m eq "zero-offload" ? 0.400 : \
              m eq "zero-infinity" ? 0.400 : NaN
# columns: baseline,layers,parameters_b,baseline_samples_per_s,stronghold_samples_per_s,speedup,
#          predicted_baseline_samples_per_s,predicted_stronghold_samples_per_s (empty: no machine file)
plot infile every ::1 using 4:xticlabels(sprintf("%s (l%d)", strcol(1), $2)) title "baseline" lc rgb "#bbbbbb", \
     '' every ::1 using 5 title "stronghold" lc rgb "#4477aa", \
     '' every ::1 using ($0 - 0.17):7 with points pt 6 ps 2 lw 2 lc rgb "#222222" title "predicted baseline (--predict)", \
     '' every ::1 using ($0 + 0.17):8 with points pt 6 ps 2 lw 2 lc rgb "#225588" title "predicted stronghold (--predict)", \
     '' every ::1 using ($0 - 0.17):(paper_base(strcol(1))) axes x1y2 with points pt 9 ps 1.8 lc rgb "#555555" \
        title "paper: baseline (V100, its largest)", \
     '' every ::1 using ($0 + 0.17):(paper_sh(strcol(1))) axes x1y2 with points pt 9 ps 1.8 lc rgb "#ee6677" \
        title "paper: stronghold (V100)"
