# Case 2 (paper Fig. 7a): stronghold against each baseline at that baseline's largest size.
# Called by scripts/caseN_draw.sh with term (pngcairo or png), infile (CSV) and outfile.
set macros
set terminal @term size 900,540 font ",11"
set output outfile
set datafile separator ","
set grid ytics
set border 3
set tics nomirror
set title "Throughput at each baseline's largest model"
set ylabel "samples / s"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set yrange [0:*]
set offsets 0, 0, graph 0.08, 0
set key top left
# columns: baseline,layers,parameters_b,baseline_samples_per_s,stronghold_samples_per_s,speedup
plot infile every ::1 using 4:xticlabels(sprintf("%s (l%d)", strcol(1), $2)) title "baseline" lc rgb "#bbbbbb", \
     '' every ::1 using 5 title "stronghold" lc rgb "#4477aa"
