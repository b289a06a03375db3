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
tr -d '\r' <"$scratch/out"
tr -d '\r' <"$scratch/err" >&2
exit "$status"
