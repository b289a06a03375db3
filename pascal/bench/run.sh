#!/usr/bin/env bash
# run.sh OUTPUT.md [BUILD_DIR] — the seeds' experiments in Free Pascal under
# three memory managers: FPC's own heap, cmem (glibc malloc) and ShoalMM
# (libshoal.a from BUILD_DIR, default <repo>/build). Builds every
# pascal/bench/bench_*.pas three times into BUILD_DIR/pascal/bench/<manager>/,
# runs each 3 times (managers interleaved), and writes the medians as
# markdown tables to OUTPUT.md and, with gnuplot, a chart of each case's time
# over the fastest manager's to OUTPUT.png. Raw results:
# BUILD_DIR/pascal/bench/results.tsv.
#
# Environment: SHOAL_BENCH_RUNS (default 3), SHOAL_BENCH_SCALE (default 1:
# the sizes the seeds use; 0.1 for a quick look), FPC (default fpc),
# SHOAL_BENCH_BUILD=0 (run the programs already built in BUILD_DIR, say on a
# bigger machine without FPC that BUILD_DIR/pascal/bench was copied to).
#
# SHOAL_BENCH_TARGET=win64: the same programs as Win64 programs under Wine
# (BUILD_DIR is then the Win64 build, make windows; cmem is msvcrt's
# malloc; WINE and WINEPREFIX as for pascal/windows/run_tests.sh).
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 OUTPUT.md [BUILD_DIR]" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
output=$1
build=$(cd "${2:-$repo/build}" && pwd)
fpc=${FPC:-fpc}
runs=${SHOAL_BENCH_RUNS:-3}
managers=(default cmem shoal)
target=${SHOAL_BENCH_TARGET:-native}
target_options=()
exe=""
runner=()
library=libshoal.a
cmem_text="glibc malloc"
if [ "$target" = win64 ]; then
  fpc_version=$("$fpc" -iV)
  rtl=$("$repo/tools/fpc-win64-rtl" "$build/fpc")
  packages=/usr/share/fpcsrc/$fpc_version/packages
  target_options=(-Twin64 -Px86_64 -Fu"$rtl" -Fu"$packages/fcl-base/src" -Fu"$packages/rtl-generics/src"
                  -Fu"$packages/rtl-objpas/src/inc" -Fu"$packages/rtl-objpas/src/win"
                  -Fi"$packages/rtl-objpas/src/inc" -Fi"$packages/rtl-objpas/src/x86_64")
  exe=.exe
  runner=("${WINE:-/usr/lib/wine/wine64}")
  export WINEDEBUG=${WINEDEBUG:--all}
  library=libshoal_fpc.a
  cmem_text="msvcrt's malloc (the C runtime's heap)"
fi
# In the order of the report; each writes lines for one experiment.
benches=(bench_realloc bench_objects bench_parallel bench_floattostr bench_loader)

if [ "${SHOAL_BENCH_BUILD:-1}" != 0 ] && [ ! -e "$build/$library" ]; then
  echo "$0: $build/$library is missing; build it first:" >&2
  echo "  cmake -S $repo -B $build -DCMAKE_BUILD_TYPE=Release && cmake --build $build" >&2
  exit 1
fi

work="$build/pascal/bench"
mkdir -p "$work"
build_programs=${SHOAL_BENCH_BUILD:-1}
for manager in "${managers[@]}"; do
  if [ "$build_programs" = 0 ]; then
    for bench in "${benches[@]}"; do
      if [ ! -x "$work/$manager/$bench$exe" ]; then
        echo "$0: SHOAL_BENCH_BUILD=0, but $work/$manager/$bench$exe is not built" >&2
        exit 1
      fi
    done
    continue
  fi
  case $manager in
    default) define="" ;;
    cmem) define="-dMM_CMEM" ;;
    shoal) define="-dMM_SHOAL" ;;
  esac
  mkdir -p "$work/$manager/units"
  for bench in "${benches[@]}"; do
    # shellcheck disable=SC2086  # define is empty or one option
    if ! (cd "$work/$manager" && "$fpc" "${target_options[@]}" -O2 -vew $define -Fu"$here/.." -Fl"$build" \
          -FU"$work/$manager/units" -FE"$work/$manager" "$here/$bench.pas") \
          >"$work/$manager/$bench.build.log" 2>&1; then
      echo "$0: $bench does not build with $manager:" >&2
      tail -n 20 "$work/$manager/$bench.build.log" >&2
      exit 1
    fi
  done
done
if [ "$build_programs" != 0 ]; then
  # The shoal the programs hold, for a run elsewhere (SHOAL_BENCH_BUILD=0).
  git -C "$repo" describe --always --dirty 2>/dev/null >"$work/commit" || echo unknown >"$work/commit"
  echo "built ${#benches[@]} programs x ${#managers[@]} managers in $work"
fi

results="$work/results.tsv"
: >"$results"
load_before=$(cut -d' ' -f1 /proc/loadavg)
for run in $(seq 1 "$runs"); do
  for bench in "${benches[@]}"; do
    for manager in "${managers[@]}"; do
      start=$(date +%s.%N)
      if ! "${runner[@]}" "$work/$manager/$bench$exe" >"$work/$manager/$bench.out" 2>&1; then
        echo "$0: $bench failed under $manager:" >&2
        tail -n 20 "$work/$manager/$bench.out" >&2
        exit 1
      fi
      tr -d '\r' <"$work/$manager/$bench.out" |
        awk -F'\t' -v m="$manager" -v r="$run" '$1 == "RESULT" { print m "\t" $2 "\t" $3 "\t" r "\t" $4 }' \
          >>"$results"
      secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
      echo "run $run/$runs  $bench  $manager  ${secs} s"
    done
  done
done

load_after=$(cut -d' ' -f1 /proc/loadavg)
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
cores=$(nproc)
fpc_version=$("$fpc" -iV 2>/dev/null || echo "(not on this machine)")
commit=$(cat "$work/commit" 2>/dev/null || echo unknown)

{
  if [ "$target" = win64 ]; then
    echo "# ShoalMM benchmarks: the seeds' experiments as Win64 programs under Wine"
    echo
    echo "**Wine is not Windows.** Wine runs the programs' own code as it is, but memory,"
    echo "threads and waiting go through Wine to Linux: these figures compare the managers"
    echo "side by side on this machine, and say nothing of their times on Windows."
    echo
    echo "$(date -u +%Y-%m-%d), $cpu, $cores cores, FPC $fpc_version (-Twin64), $(${runner[0]} --version 2>/dev/null || echo Wine), shoal $commit."
  else
    echo "# ShoalMM benchmarks: the seeds' experiments in Free Pascal"
    echo
    echo "$(date -u +%Y-%m-%d), $cpu, $cores cores, FPC $fpc_version, shoal $commit."
  fi
  echo "Median of $runs runs, milliseconds on a microsecond clock read inside each program"
  echo "(lower is better). **FPC heap**: the RTL's default manager; **cmem**: $cmem_text"
  echo "through FPC's cmem unit; **ShoalMM**: this unit with $library. Load average"
  echo "$load_before before the runs, $load_after after (other work on the machine shows as noise)."
  if [ "${SHOAL_BENCH_SCALE:-1}" != 1 ]; then
    echo "Sizes scaled by SHOAL_BENCH_SCALE=$SHOAL_BENCH_SCALE (the titles give the full sizes)."
  fi
  awk -F'\t' '
    function title(e) {
      if (e == "realloc") return "1. Appending one character 10 million times, one thread (seed 003)"
      if (e == "objects") return "2. Small objects, records and generic tree nodes with a string, one thread (seed 003)"
      if (e == "parallel") return "3. ParallelAllocations: 64 tasks that allocate objects and lists, serial and on N threads; speed-up over serial in parentheses (seed 003)"
      if (e == "floattostr") return "4. FloatToStr and string building, one fixed job split over N threads: wall time, and the CPU time of all threads (ideally the one-thread figure) (seed 002)"
      if (e == "loader") return "5. Loader: 200,000 records deserialised into objects with strings, while background threads allocate; the loader'"'"'s wall time and its thread'"'"'s CPU time (seed 004)"
      return e
    }
    function median(list,   n, v, i, j, t) {
      n = split(list, v, " ")
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
      return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    {
      e = $2; c = $3
      if (!(e in seen_e)) { seen_e[e] = 1; experiments[++ne] = e }
      if (!((e, c) in seen_c)) { seen_c[e, c] = 1; cases[e, ++nc[e]] = c }
      times[$1, e, c] = times[$1, e, c] " " $5
    }
    END {
      split("default cmem shoal", mm, " ")
      for (k = 1; k <= ne; k++) {
        e = experiments[k]
        printf "\n## %s\n\n| case | FPC heap | cmem | ShoalMM |\n|---|---:|---:|---:|\n", title(e)
        for (i = 1; i <= nc[e]; i++) {
          c = cases[e, i]
          printf "| %s |", c
          for (m = 1; m <= 3; m++) {
            v = median(times[mm[m], e, c])
            if (e == "parallel" && c != "serial") {
              s = median(times[mm[m], e, "serial"])
              printf " %.1f (%.2fx) |", v, (v > 0 ? s / v : 0)
            } else
              printf " %.1f |", v
          }
          printf "\n"
        }
      }
    }' "$results"
} >"$output"
echo "wrote $output"

# The chart, as the C suite draws it: each case's median time under each
# manager over the best of the three (1 = the fastest), on a log scale. The
# CPU-time rows are left out; ParallelAllocations shows its parallel rows.
chart="${output%.md}.png"
if command -v gnuplot >/dev/null; then
  data="$work/relative.tsv"
  awk -F'\t' '
    function median(list,   n, v, i, j, t) {
      n = split(list, v, " ")
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
      return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    $3 ~ /CPU time/ { next }
    {
      key = $2 ": " $3
      if (!(key in seen)) { seen[key] = 1; keys[++n] = key }
      times[$1, key] = times[$1, key] " " $5
    }
    END {
      for (k = 1; k <= n; k++) {
        key = keys[k]; best = 0
        for (m = 1; m <= 3; m++) {
          manager = m == 1 ? "default" : m == 2 ? "cmem" : "shoal"
          v[m] = median(times[manager, key])
          if (v[m] > 0 && (best == 0 || v[m] < best)) best = v[m]
        }
        if (best == 0) continue
        label = key; gsub(/"/, "", label)
        printf "\"%s\"\t%.3f\t%.3f\t%.3f\n", label, v[1] / best, v[2] / best, v[3] / best
      }
    }' "$results" >"$data"
  gnuplot <<GNUPLOT
set terminal pngcairo size 1400,700 font ",9"
set output "$chart"
set title "ShoalMM: the seeds' experiments, time relative to the fastest of the three (lower is better)"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set yrange [0.8:*]
set ytics (1, 1.25, 1.5, 2, 3, 5, 10, 20)
set grid ytics
set xtics rotate by -45 noenhanced
set key top left
set rmargin 16
set bmargin 14
plot "$data" using 2:xtic(1) title "FPC heap", "" using 3 title "cmem", "" using 4 title "ShoalMM"
GNUPLOT
  echo "" >>"$output"
  echo "Chart: [\`$(basename "$chart")\`]($(basename "$chart")), each case's time over the fastest of the three." >>"$output"
  echo "wrote $chart"
fi
