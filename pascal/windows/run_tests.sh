#!/usr/bin/env bash
# pascal/windows/run_tests.sh WIN_BUILD_DIR — every pascal/tests/*.pas built
# as a Win64 program (fpc -Twin64, FPC's win64 RTL from tools/fpc-win64-rtl,
# libshoal_fpc.a of WIN_BUILD_DIR linked in by ShoalMM) and run under Wine.
# Programs go to WIN_BUILD_DIR/pascal/. One line per test; exits 1 if any
# fails to build or run. The markers of run_tests.sh apply (fpc-options,
# run-env). WINE is wine64's path (default /usr/lib/wine/wine64); the
# caller sets WINEPREFIX (make test-windows makes one in the build folder).
#
# Beside them: a Win64 C program prints the size of shoal_stats_t and the
# option count as shoal.h lays them out for Win64, for test_active to
# compare with ShoalMM's records.
set -u

if [ $# -ne 1 ]; then
  echo "usage: $0 WIN_BUILD_DIR" >&2
  exit 2
fi
build=$(cd "$1" && pwd) || exit 2
here=$(cd "$(dirname "$0")/.." && pwd)
root=$(cd "$here/.." && pwd)
fpc=${FPC:-fpc}
wine=${WINE:-/usr/lib/wine/wine64}
export WINEDEBUG=${WINEDEBUG:--all}

if [ ! -e "$build/libshoal_fpc.a" ]; then
  echo "pascal (win64): $build/libshoal_fpc.a is missing; run make windows first" >&2
  exit 1
fi
rtl=$("$root/tools/fpc-win64-rtl" "$build/fpc") || exit 1
# Contnrs (test_threads) is FCL's, not the RTL's: compiled from its source.
fcl_base=/usr/share/fpcsrc/$("$fpc" -iV)/packages/fcl-base/src

marker() {  # marker NAME FILE: the text after "NAME:" on its line, if any
  sed -n "s/.*$1: *\\([^}]*\\).*/\\1/p" "$2" | head -n 1 | sed 's/ *$//'
}

out="$build/pascal"
mkdir -p "$out"
layout_env=()
probe="$out/layout_probe.exe"
if printf '%s\n' '#include <stdio.h>' '#include "shoal.h"' \
    'int main(void) { printf("SHOAL_C_STATS_SIZE=%u SHOAL_C_OPTION_COUNT=%d\n",' \
    '  (unsigned)sizeof(shoal_stats_t), (int)SHOAL_OPTION_COUNT); return 0; }' |
    clang --target=x86_64-w64-windows-gnu -x c -I"$root/include" -c -o "$out/layout_probe.o" - &&
    clang --target=x86_64-w64-windows-gnu -fuse-ld=lld "$out/layout_probe.o" -o "$probe" \
      -L"$(ls -d /usr/lib/gcc/x86_64-w64-mingw32/*-posix | head -n 1)"; then
  read -r -a layout_env <<<"$("$wine" "$probe" | tr -d '\r')"
fi
[ ${#layout_env[@]} -eq 2 ] || echo "pascal (win64): no layout probe; test_active skips its layout check" >&2

failures=0
count=0
start_all=$(date +%s.%N)
for source in "$here"/tests/*.pas; do
  name=$(basename "$source" .pas)
  options=$(marker fpc-options "$source")
  env_extra=$(marker run-env "$source")
  units="$out/units${options// /}"
  mkdir -p "$units"
  log="$out/$name.log"
  count=$((count + 1))
  # shellcheck disable=SC2086  # options is a word list
  if ! (cd "$out" && "$fpc" -Twin64 -Px86_64 -O2 -vew $options -Fu"$rtl" -Fu"$fcl_base" -Fu"$here" \
        -Fl"$build" -FU"$units" -FE"$out" "$source") >"$log.build" 2>&1; then
    echo "FAIL win64 $name: does not build (see $log.build)"
    tail -n 15 "$log.build" | sed 's/^/    /'
    failures=$((failures + 1))
    continue
  fi
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086  # env_extra is a list of NAME=VALUE words
  env "${layout_env[@]}" $env_extra timeout 120 "$wine" "$out/$name.exe" >"$log" 2>"$log.err"
  rc=$?
  t1=$(date +%s.%N)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  summary=$(tail -n 1 "$log" | tr -d '\r')
  if [ $rc -ne 0 ]; then
    echo "FAIL win64 $name: exit code $rc (${secs} s)"
    cat "$log.err" "$log" | tr -d '\r' | tail -n 15 | sed 's/^/    /'
    failures=$((failures + 1))
  elif [[ $name == test_keep_* ]] && ! grep -q '^ShoalMM: ' "$log.err"; then
    echo "FAIL win64 $name: no \"ShoalMM:\" line on stderr"
    failures=$((failures + 1))
  else
    echo "PASS win64 $name (${secs} s): $summary"
  fi
done
total=$(awk -v a="$start_all" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
if [ $failures -ne 0 ]; then
  echo "pascal (win64): $failures of $count failed (${total} s with builds)"
  exit 1
fi
echo "pascal (win64): all $count passed (${total} s with builds)"
