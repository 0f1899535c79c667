# Case 6 (the Gemini paper's Figure 9): the probability that every machine's checkpoint can
# be fetched from CPU memory when k of N machines fail at once, with m copies of each shard,
# group placement (gemini's default) against ring; exact counts (build/case6_recovery), with
# the paper's union-bound formula for m = 2, k = 3 as points.
# Called by scripts/case6_draw.sh with term (pngcairo or png), infile (case6_recovery.csv)
# and outfile.
set macros
set terminal @term size 900,540 font ",11"
set output outfile
set datafile separator ","
set grid
set border 3
set tics nomirror
set title "Recovery from CPU memory when k of N machines fail"
set xlabel "machines (N)"
set ylabel "probability that every shard survives"
set yrange [0:1.02]
set key bottom right
# columns: N,group_m2_k2,group_m2_k3,ring_m2_k2,ring_m2_k3,group_m3_k3,group_m3_k4,ring_m3_k3,ring_m3_k4,paper_group_m2_k3,paper_ring_m2_k3
plot infile every ::1 using 1:2 with lines lw 3 lc rgb "#4477aa" title "group, m=2, k=2", \
     '' every ::1 using 1:3 with lines lw 3 lc rgb "#4477aa" dt 2 title "group, m=2, k=3", \
     '' every ::1 using 1:4 with lines lw 3 lc rgb "#ee6677" title "ring, m=2, k=2", \
     '' every ::1 using 1:5 with lines lw 3 lc rgb "#ee6677" dt 2 title "ring, m=2, k=3", \
     '' every ::1 using 1:6 with lines lw 2 lc rgb "#228833" title "group, m=3, k=3", \
     '' every ::1 using 1:8 with lines lw 2 lc rgb "#ccbb44" title "ring, m=3, k=3", \
     '' every ::1 using 1:10 with points pt 6 ps 1.2 lc rgb "#4477aa" title "paper's formula, group, m=2, k=3", \
     '' every ::1 using 1:11 with points pt 4 ps 1.2 lc rgb "#ee6677" title "paper's formula, ring, m=2, k=3"
