# Case 4 (paper Figs. 7a, 8b): stronghold's iteration time grows linearly with the layers.
# Called by scripts/caseN_draw.sh with term (pngcairo or png), infile (CSV) and outfile.
set macros
set terminal @term size 900,540 font ",11"
set output outfile
set datafile separator ","
set grid ytics
set border 3
set tics nomirror
set title "stronghold: iteration time against model depth"
set xlabel "layers"
set ylabel "time per iteration (ms)"
set yrange [0:*]
set offsets 0, 0, graph 0.08, 0
set key top left
# columns: layers,parameters_b,iter_ms,samples_per_s,predicted_ms (empty: no machine file)
plot infile every ::1 using 1:3 with linespoints pt 7 lw 2 lc rgb "#4477aa" title "measured", \
     '' every ::1 using 1:5 with lines dt 2 lw 2 lc rgb "#ee6677" title "predicted (--predict)"
