#!/usr/bin/env bash
# The diagnostics of a Win64 program under Wine (test/windows.cmake), on
# test/diag_leaks.c, whose leaks are known: one 4096-byte block from
# make_cache, two 64-byte ones from leak_node; the blocks freed by another
# thread or by a thread-exit destructor must not be reported. The C
# runtime's start-up and winpthreads also keep blocks of shoal's to the end
# (argv, thread records); the report names them too, so this checks the
# program's rows, not the totals.
#   leaks:  each leak's row names an address in the function that allocated
#           it, and its module and offset (the function from nm)
#   stats:  SHOAL_STATS=json at exit, with the leaked blocks live
#
# usage: windows-diagnostics.sh NM RUNNER... PROGRAM
set -u
nm=$1
shift
program=${*: -1}
run=("$@")
module=$(basename "$program")
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failures=0
fail() {
  echo "FAIL $*"
  failures=$((failures + 1))
}

# "START END": the addresses of a function and of the symbol after it.
function_range() {
  local start end
  read -r start end < <("$nm" -n "$program" |
    awk -v name="$1" 'found { print start, $1; exit } $3 == name { start = $1; found = 1 }')
  [ -n "${start:-}" ] && [ -n "${end:-}" ] && echo "$((16#$start)) $((16#$end))"
}

# expect_row SIZE BLOCKS FUNCTION: a row "bytes blocks 0xADDR (module+0xOFF)"
# for SIZE x BLOCKS whose address lies in FUNCTION.
expect_row() {
  local bytes=$(($1 * $2)) blocks=$2 function=$3 row address range start end
  row=$(awk -v b="$bytes" -v n="$blocks" '$1 == b && $2 == n && $3 ~ /^0x/' "$scratch/err" | head -n 1)
  if [ -z "$row" ]; then
    fail "leaks: no row of $blocks block(s), $bytes bytes"
    return
  fi
  address=$(awk '{print $3}' <<<"$row")
  range=$(function_range "$function")
  read -r start end <<<"$range"
  if [[ "$row" != *"($module+0x"*")" ]]; then
    fail "leaks: '$row' does not name $module and an offset"
  elif [ -z "$range" ]; then
    fail "leaks: $function has no symbol in $module"
  elif ((address <= start || address > end)); then
    fail "leaks: '$row' is not in $function [$start, $end)"
  fi
}

SHOAL_LEAKS=all "${run[@]}" >"$scratch/out" 2>"$scratch/err" || fail "leaks: exit status $?"
grep -q '^shoal: leak report: [0-9]* blocks ([0-9]* bytes) still allocated at exit$' "$scratch/err" ||
  fail "leaks: no summary line: $(head -n 1 "$scratch/err")"
expect_row 4096 1 make_cache
expect_row 64 2 leak_node
if awk '$3 == 200 || $3 == 300' "$scratch/err" | grep -q .; then
  fail "leaks: blocks of 200 or 300 bytes (freed by another thread or a destructor) reported"
fi

SHOAL_STATS=json "${run[@]}" >"$scratch/out" 2>"$scratch/err" || fail "stats: exit status $?"
live=$(sed -n 's/^ *"live_blocks": \([0-9]*\),$/\1/p' "$scratch/err")
[ -n "$live" ] && [ "$live" -ge 3 ] || fail "stats: no live_blocks >= 3 in the JSON at exit"

[ "$failures" -eq 0 ] && echo "windows-diagnostics: leak sites and statistics at exit as expected"
exit "$failures"
