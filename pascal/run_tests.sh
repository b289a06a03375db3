#!/usr/bin/env bash
# run_tests.sh BUILD_DIR — build every pascal/tests/*.pas against the shoal
# library in BUILD_DIR and run it: first linked with libshoal.a (the
# default), then again with -dSHOAL_SHARED against libshoal.so. Programs go
# to BUILD_DIR/pascal/<static|shared>/. One line per test and mode; exits 1
# if any test fails to build or run.
#
# Markers a test may carry in its source:
#   fpc-options: ...   extra fpc options for that test (e.g. -gh)
#   run-env: A=B ...   environment for its run
# A test named test_keep_* must also print a "ShoalMM:" line on stderr.
set -u

if [ $# -ne 1 ]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
build=$(cd "$1" && pwd) || exit 2
here=$(cd "$(dirname "$0")" && pwd)
fpc=${FPC:-fpc}

if ! command -v "$fpc" >/dev/null 2>&1; then
  echo "pascal: fpc not found" >&2
  exit 1
fi
for lib in libshoal.a libshoal.so; do
  if [ ! -e "$build/$lib" ]; then
    echo "pascal: $build/$lib is missing; build the library first" >&2
    exit 1
  fi
done

marker() {  # marker NAME FILE: the text after "NAME:" on its line, if any
  sed -n "s/.*$1: *\\([^}]*\\).*/\\1/p" "$2" | head -n 1 | sed 's/ *$//'
}

# The C layout the unit mirrors: test_active compares TShoalStats and
# TShoalOption with these, so a change to shoal.h cannot go unnoticed.
layout_env=()
if command -v cc >/dev/null 2>&1; then
  probe="$build/pascal/layout_probe"
  mkdir -p "$build/pascal"
  if printf '%s\n' '#include <stdio.h>' '#include "shoal.h"' \
      'int main(void) { printf("SHOAL_C_STATS_SIZE=%zu SHOAL_C_OPTION_COUNT=%d\n",' \
      '  sizeof(shoal_stats_t), (int)SHOAL_OPTION_COUNT); return 0; }' |
      cc -x c -I"$here/../include" -o "$probe" - 2>/dev/null; then
    read -r -a layout_env <<<"$("$probe")"
  fi
fi

failures=0
count=0
start_all=$(date +%s.%N)
for mode in static shared; do
  out="$build/pascal/$mode"
  mkdir -p "$out"
  define=""
  run_env=()
  if [ "$mode" = shared ]; then
    define="-dSHOAL_SHARED"
    run_env=("LD_LIBRARY_PATH=$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  fi
  for source in "$here"/tests/*.pas; do
    name=$(basename "$source" .pas)
    options=$(marker fpc-options "$source")
    env_extra=$(marker run-env "$source")
    # Units compiled with other options (e.g. -gh) get a folder of their own.
    units="$out/units${options// /}"
    mkdir -p "$units"
    log="$out/$name.log"
    count=$((count + 1))
    # shellcheck disable=SC2086  # options and define are word lists
    if ! (cd "$out" && "$fpc" -O2 -vew $define $options -Fu"$here" -Fl"$build" \
          -FU"$units" -FE"$out" "$source") >"$log.build" 2>&1; then
      echo "FAIL $mode $name: does not build (see $log.build)"
      tail -n 15 "$log.build" | sed 's/^/    /'
      failures=$((failures + 1))
      continue
    fi
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086  # env_extra is a list of NAME=VALUE words
    env "${run_env[@]}" "${layout_env[@]}" $env_extra timeout 60 "$out/$name" >"$log" 2>"$log.err"
    rc=$?
    t1=$(date +%s.%N)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
    summary=$(tail -n 1 "$log")
    if [ $rc -ne 0 ]; then
      echo "FAIL $mode $name: exit code $rc (${secs} s)"
      cat "$log.err" "$log" | tail -n 15 | sed 's/^/    /'
      failures=$((failures + 1))
    elif [[ $name == test_keep_* ]] && ! grep -q '^ShoalMM: ' "$log.err"; then
      echo "FAIL $mode $name: no \"ShoalMM:\" line on stderr"
      failures=$((failures + 1))
    else
      echo "PASS $mode $name (${secs} s): $summary"
    fi
  done
done
total=$(awk -v a="$start_all" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
if [ $failures -ne 0 ]; then
  echo "pascal: $failures of $count failed (${total} s with builds)"
  exit 1
fi
echo "pascal: all $count passed (${total} s with builds)"
