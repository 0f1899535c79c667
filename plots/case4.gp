# Case 4 (paper Figs. 7a, 8b): stronghold's iteration time grows linearly with the layers.
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
set title "stronghold: iteration time against model depth" . (clip ne "" ? "  [" . clip . "]" : "")
set xlabel "layers"
set ylabel "time per iteration (ms)"
set yrange [0:*]
set offsets 0, 0, graph 0.08, 0
set key top left
# The paper's published line (one V100, -w 15: "about 2.6 s at l16 to 21 s at l92",
# the shared design doc ENGINES.md, not in this repository) on the right axis, in seconds.
set y2label "paper (V100) time per iteration (s)"
set y2tics nomirror
set y2range [0:*]
$paper << EOD
16,2.6
92,21
EOD
# columns: layers,parameters_b,iter_ms,samples_per_s,predicted_ms (empty: no machine file)
plot infile every ::1 using 1:3 with linespoints pt 7 lw 2 lc rgb "#4477aa" title "measured", \
     '' every ::1 using 1:5 with lines dt 2 lw 2 lc rgb "#ee6677" title "predicted (--predict)", \
     $paper using 1:2 axes x1y2 with linespoints dt 3 pt 9 ps 1.8 lc rgb "#555555" title "paper (V100, right axis)"
