#!/usr/bin/env bash
# Interleaved A/B timing of one bench case under several builds of an
# allocator (or several allocators): run k of every library comes before
# run k+1 of any, so a slow minute of the machine hits all alike; prints
# the median, min and max of the workload's time_s and peak_rss_kb.
#   tools/ab-time.sh RUNS "WORKLOAD SIZE [THREADS]" LIB...
#   tools/ab-time.sh 7 "larson quick 2" /tmp/old/libshoal.so build/libshoal.so
# The workloads are those `make bench` builds into build/bench (run
# `python3 bench/run.py --tiny` once to build them). A library "-" runs
# the workload without a preload (glibc).
set -eu
[ $# -ge 3 ] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
runs=$1 case=$2
shift 2
bench_dir=${SHOAL_BENCH_BUILD_DIR:-$(dirname "$0")/../build/bench}
read -r workload arguments <<<"$case"
program=$bench_dir/$workload
[ -x "$program" ] || { echo "ab-time: no $program (python3 bench/run.py --tiny builds it)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for run in $(seq "$runs"); do
  index=0
  for library in "$@"; do
    preload=$library
    [ "$library" = - ] && preload=
    # shellcheck disable=SC2086 # the case's arguments are words
    LD_PRELOAD=$preload "$program" $arguments >"$work/out" 2>/dev/null || {
      echo "ab-time: $library: $case failed (run $run)" >&2
      exit 1
    }
    sed -n 's/.*time_s=\([0-9.]*\).*/\1/p' "$work/out" >>"$work/time.$index"
    sed -n 's/.*peak_rss_kb=\([0-9]*\).*/\1/p' "$work/out" >>"$work/rss.$index"
    index=$((index + 1))
  done
done
summary() { # file: median min max
  sort -g "$1" | awk '{ v[NR] = $1 } END { printf "%s (%s..%s)", v[int((NR + 1) / 2)], v[1], v[NR] }'
}
index=0
for library in "$@"; do
  printf '%-40s time_s %-28s peak_rss_kb %s\n' "$library" "$(summary "$work/time.$index")" \
    "$(summary "$work/rss.$index")"
  index=$((index + 1))
done
