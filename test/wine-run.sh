#!/usr/bin/env bash
# wine-run.sh WINE PROGRAM ARGS... — a Win64 test program under Wine, seen
# by the scripts as a Linux one would be: its stdout and stderr with the C
# runtime's CRLF line ends made LF, and its exit status. The environment
# (WINEPREFIX, made once by `make test-windows`; WINEDEBUG=-all) comes from
# the caller; SHOAL_* variables reach the program as they are.
set -u
wine=$1
shift
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$wine" "$@" >"$scratch/out" 2>"$scratch/err"
status=$?
# On a loaded machine Wine now and then ends a program with status 1 and
# no output at all (CI, misuse_pool's double-free-later; not reproduced in
# 1,200 runs here under load). A test program that fails says why on
# stderr before anything else can go wrong, so this is Wine's: run it once
# more, and say so in wine-retries.log beside the prefix, which `make
# test-windows` prints.
if [ "$status" -eq 1 ] && [ ! -s "$scratch/out" ] && [ ! -s "$scratch/err" ]; then
  echo "wine-run: $* ended with status 1 and no output; run again" \
    >>"${WINEPREFIX:-.}/../wine-retries.log"
  "$wine" "$@" >"$scratch/out" 2>"$scratch/err"
  status=$?
fi
tr -d '\r' <"$scratch/out"
tr -d '\r' <"$scratch/err" >&2
exit "$status"
