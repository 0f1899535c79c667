# Case 6 (the Gemini artifact's Figures 7 and 8): gemini's iteration time without and with
# checkpoints (every iteration, or the interval --gemini-every set or chose), per mode; and, per iteration of the interleave run, the idle
# time of the training's collectives against the time the checkpoint's traffic took and the
# part of it the training waited for.
# Called by scripts/case6_draw.sh with term (pngcairo or png), infile (case6.csv) and outfile;
# the steps are read from case6_steps.csv beside infile.
set macros
stepsfile = infile[1:strlen(infile) - 4] . "_steps.csv"
set terminal @term size 1200,520 font ",11"
set output outfile
# the clip the runs trained with (ae_draw reads it from their JSON), in the title
if (!exists("clip")) clip = ""
set datafile separator ","
set multiplot layout 1,2
set grid ytics
set border 3
set tics nomirror
# columns: mode,no_ckpt_ms,no_ckpt_sd,ckpt_ms,ckpt_sd,slowdown,ckpt_gb,ckpt_time_ms,exposed_ms,idle_ms,
# every,lost_iterations,paired_x (the label: the slowdown, the interval, the iterations a failure
# loses and, where the checkpoints could be paired with the steps beside them, the overhead so)
set title "Iteration time (Fig. 7): steps without, then with checkpoints" . (clip ne "" ? "  [" . clip . "]" : "")
set ylabel "time per iteration (ms)"
set style data histograms
set style histogram errorbars gap 1 lw 1
set style fill solid 0.85 border -1
set yrange [0:*]
set offsets 0, 0, graph 0.2, 0
set key below
plot infile every ::1 using 2:3:xticlabels(strcol(1)) title "without checkpoints" lc rgb "#4477aa", \
     '' every ::1 using 4:5 title "with (from --gemini-ckpt-from on)" lc rgb "#ee6677", \
     '' every ::1 using ($0 + 0.1):($4 + $5):(strcol(1) eq "none" ? sprintf("%.3fx", $6) : \
        sprintf("%.3fx\nevery %d it.\nloses ~%.1f", $6, $11, $12) . ($13 > 0 ? sprintf("\npaired %.3fx", $13) : "")) \
        with labels offset 0,2 notitle
# columns: mode,iteration,phase,iter_ms,ckpt_gb,ckpt_ms,exposed_ms,idle_ms
set title "interleave, per iteration (Fig. 8): idle time vs checkpoint time" . (clip ne "" ? "  [" . clip . "]" : "")
set style data linespoints
set xlabel "iteration"
set ylabel "ms"
set key inside top left
set yrange [0:*]
unset offsets
plot stepsfile every ::1 using ((strcol(1) eq "interleave" && strcol(6) ne "") ? $2 : NaN):8 title "collectives' idle time (measured)" lc rgb "#228833" pt 7 lw 2, \
     '' every ::1 using ((strcol(1) eq "interleave" && strcol(6) ne "") ? $2 : NaN):6 title "checkpoint traffic time" lc rgb "#4477aa" pt 5 lw 2, \
     '' every ::1 using ((strcol(1) eq "interleave" && strcol(6) ne "") ? $2 : NaN):7 title "of it, exposed (the step waited)" lc rgb "#ee6677" pt 9 lw 2, \
     '' every ::1 using ((strcol(1) eq "interleave") ? $2 : NaN):4 title "iteration time" lc rgb "#777777" pt 1 lw 1 dt 2
unset multiplot
