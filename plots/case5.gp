# Case 5 (paper Fig. 9): a larger window hides transfers, until they are hidden.
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
set title "stronghold: iteration time against the window" . (clip ne "" ? "  [" . clip . "]" : "")
set xlabel "window (layers on the GPU)"
set ylabel "time per iteration (ms)"
set yrange [0:*]
set offsets 0, 0, graph 0.08, 0
set key top right
# The paper's published ends (one V100, l32: "about 7.9 s at window 2 to 6.2 s at 14,
# flattening", the shared design doc ENGINES.md, not in this repository) on the right axis,
# in seconds.
set y2label "paper (V100) time per iteration (s)"
set y2tics nomirror
set y2range [0:*]
$paper << EOD
2,7.9
14,6.2
EOD
# columns: window,iter_ms,samples_per_s,predicted_ms (empty: no machine file)
plot infile every ::1 using 1:2 with linespoints pt 7 lw 2 lc rgb "#4477aa" title "measured", \
     '' every ::1 using 1:4 with lines dt 2 lw 2 lc rgb "#ee6677" title "predicted (--predict)", \
     $paper using 1:2 axes x1y2 with points pt 9 ps 1.8 lc rgb "#555555" title "paper (V100, right axis)"
