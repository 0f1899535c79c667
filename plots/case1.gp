# Case 1 (paper Fig. 6a): the largest trainable model of every engine.
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
set title "Largest trainable model per engine (find-max)" . (clip ne "" ? "  [" . clip . "]" : "")
set ylabel "parameters (billions)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.7
set yrange [0:*]
set offsets 0, 0, graph 0.08, 0
set key top left
# The paper's published largest models (one V100 32 GB, 90 GB host; as the project's shared
# design doc ENGINES.md, outside this repository, records them), marked on each engine's bar
# where the run's shape is the paper's (h2048, b4).
paper(m) = m eq "megatron-lm" ? 1.717 : m eq "l2l" ? 4.033 : m eq "zero-offload" ? 2.522 : \
           m eq "zero-infinity" ? 2.522 : m eq "stronghold" ? 5.141 : NaN
# columns: method,max_layers,parameters,parameters_b,next_layers,stopped_by,short_bytes,hidden,batch
plot infile every ::1 using ($3/1e9):xticlabels(1) lc rgb "#4477aa" title "ours", \
     '' every ::1 using 0:($3/1e9):(sprintf("l%d", $2)) with labels offset 0,0.8 notitle, \
     '' every ::1 using 0:(($8 == 2048 && $9 == 4) ? paper(strcol(1)) : NaN) with points pt 9 ps 2 lc rgb "#ee6677" \
        title "paper (V100 32 GB, 90 GB host)"
