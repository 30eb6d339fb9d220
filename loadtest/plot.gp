# gnuplot script for run.sh: grouped bars, nginx vs sluice per scenario: req/s above, p99 below.
# Called as: gnuplot -e 'term="pngcairo size 1200,900"; out="plot.png"; data="plot.dat"' plot.gp
set terminal @term
set output out
set termoption noenhanced
set multiplot layout 2,1 title "sluice vs nginx reverse proxy (loopback, same worker count)"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set key top right
set grid ytics
set xtics rotate by -30 scale 0 font ",9"
set yrange [0:*]
set title "requests per second (higher is better)"
set ylabel "req/s"
plot data using 2:xtic(1) title "nginx" lc rgb "#4477aa", \
     ''   using 3 title "sluice" lc rgb "#ee6677"
set title "p99 latency (lower is better, log scale)"
set ylabel "ms"
set logscale y
set yrange [0.1:*]
plot data using 4:xtic(1) title "nginx" lc rgb "#4477aa", \
     ''   using 5 title "sluice" lc rgb "#ee6677"
unset multiplot
