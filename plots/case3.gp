# Case 3 (paper Fig. 8a): every engine at the baseline's largest size.
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
set title "Throughput of every engine at the same model size" . (clip ne "" ? "  [" . clip . "]" : "")
set ylabel "samples / s"
set style data histograms
set style fill solid 0.85 border -1
set boxwidth 0.7
set yrange [0:*]
set offsets 0, 0, graph 0.08, 0
set key top right
# The paper's published samples/s (one V100, every engine at l32, its megatron-lm's largest;
# the shared design doc ENGINES.md, not in this repository) on the right axis.
set y2label "paper (V100, l32) samples / s"
set y2tics nomirror
set y2range [0:*]
paper(m) = m eq "megatron-lm" ? 0.750 : m eq "l2l" ? 0.173 : m eq "zero-offload" ? 0.371 : \
           m eq "zero-infinity" ? 0.359 : m eq "stronghold" ? 0.665 : NaN
# columns: method,layers,window,parameters_b,iter_ms,samples_per_s
plot infile every ::1 using 6:xticlabels(sprintf("%s (l%d)", strcol(1), $2)) lc rgb "#4477aa" title "ours", \
     '' every ::1 using 0:(paper(strcol(1))) axes x1y2 with points pt 9 ps 2 lc rgb "#ee6677" title "paper (V100, l32)"
