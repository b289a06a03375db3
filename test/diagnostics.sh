#!/bin/bash
# The leak report and the contention log, on programs with known answers:
#   diagnostics.sh LEAKS_PROGRAM CONTENTION_PROGRAM
# diag_leaks leaks one 4096-byte block in make_cache and two 64-byte blocks
# in leak_node; what other threads and a thread-exit destructor freed must
# not appear. diag_contention frees other threads' blocks in consume_item.
set -euo pipefail
leaks_program=$1
contention_program=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect FILE REGEX WHAT
expect() {
  grep -Eq -- "$2" "$1" || { fail "$3: no line matching /$2/ in:"; cat "$1"; }
}
refuse() {
  ! grep -Eq -- "$2" "$1" || { fail "$3: unexpected /$2/ in:"; cat "$1"; }
}

# Every block tracked: exact counts, bytes and call sites.
for mode in all check; do
  if [ "$mode" = all ]; then env=(SHOAL_LEAKS=all); else env=(SHOAL_LEAKS=1 SHOAL_CHECK=1); fi
  env "${env[@]}" "$leaks_program" 2>"$work/err"
  expect "$work/err" '^shoal: leak report: 3 blocks \(4224 bytes\) still allocated at exit$' "$mode: summary"
  expect "$work/err" '^ +4096 +1  make_cache \(diag_leaks\.c:[0-9]+\) <- main \(diag_leaks\.c:[0-9]+\)$' "$mode: make_cache site"
  expect "$work/err" '^ +128 +2  leak_node \(diag_leaks\.c:[0-9]+\) <- main \(diag_leaks\.c:[0-9]+\)$' "$mode: leak_node site"
  expect "$work/err" '^ +4096 +1  4096$' "$mode: by size, 4096"
  expect "$work/err" '^ +128 +2  64$' "$mode: by size, 64"
  refuse "$work/err" 'allocate_for_other|free_for_other|^ +(200|300|3200) ' "$mode: freed blocks"
done

# The report reaches the stderr the program started with, even closed.
SHOAL_LEAKS=all "$leaks_program" close-stderr 2>"$work/err"
expect "$work/err" '^shoal: leak report: 3 blocks \(4224 bytes\) still allocated at exit$' "stderr closed: summary"

# To a file: the report there, one line on stderr.
SHOAL_LEAKS=all SHOAL_LEAKS_FILE="$work/leaks.txt" "$leaks_program" 2>"$work/err"
expect "$work/leaks.txt" '^shoal: leak report: 3 blocks \(4224 bytes\)' "file: summary"
expect "$work/leaks.txt" 'make_cache \(' "file: site"
expect "$work/err" "^shoal: leak report: 3 blocks, 4224 bytes; written to $work/leaks.txt\$" "file: stderr line"
[ "$(wc -l <"$work/err")" -eq 1 ] || fail "file: more than one line on stderr"

# Sampled (the default): exact totals by block size from the counters; with
# a sample per byte every site is found.
SHOAL_LEAKS=1 "$leaks_program" 2>"$work/err"
expect "$work/err" '^shoal: leak report: [0-9]+ blocks \([0-9]+ bytes of blocks\) still allocated at exit; call sites from sampled' "sampled: summary"
expect "$work/err" '^ +4096 +1  4096$' "sampled: by block size, 4096"
expect "$work/err" '^ +128 +2  64$' "sampled: by block size, 64"
SHOAL_LEAKS=1 SHOAL_LEAKS_SAMPLE=1 "$leaks_program" 2>"$work/err"
expect "$work/err" '^ +4096 +1  make_cache \(' "every byte sampled: make_cache site"
expect "$work/err" '^ +128 +2  leak_node \(' "every byte sampled: leak_node site"

# Nothing asked, nothing said.
"$leaks_program" 2>"$work/err"
[ ! -s "$work/err" ] || { fail "no diagnostics asked, yet:"; cat "$work/err"; }
SHOAL_LEAKS=maybe "$leaks_program" 2>"$work/err"
expect "$work/err" '^shoal: warning: SHOAL_LEAKS=maybe is not a valid value' "bad value warned"

# The contention log names the function freeing other threads' blocks.
SHOAL_CONTENTION="$work/contention.txt" "$contention_program" 2>"$work/err"
expect "$work/contention.txt" '^# shoal contention log: [0-9]+ events at [0-9]+ call sites' "log: header"
first=$(grep -v '^#' "$work/contention.txt" | head -1)
[[ "$first" =~ ^\ +[0-9]+\ +remote\ free\ +consume_item\ \(diag_contention\.c:[0-9]+\)$ ]] ||
  fail "log: most frequent is not the remote free in consume_item: '$first'"
expect "$work/contention.txt" 'slow path +produce_item \(diag_contention\.c:[0-9]+\)' "log: slow path in produce_item"
expect "$work/err" "^shoal: contention: [0-9]+ events at [0-9]+ call sites; log in $work/contention.txt\$" "stderr: summary"
expect "$work/err" '^shoal:   [0-9]+ remote frees at consume_item \(diag_contention\.c:[0-9]+\)' "stderr: top site"
[ "$(grep -c '^shoal:   ' "$work/err")" -le 3 ] || fail "stderr: more than three sites"

# The trace records every call, in order, with its thread.
SHOAL_TRACE="$work/trace.%p" "$contention_program" 2>"$work/err"
traces=("$work"/trace.*)
[ "${#traces[@]}" -eq 1 ] || fail "trace: expected one file per process, got ${traces[*]}"
python3 "$(dirname "$0")/trace_check.py" "${traces[0]}" >"$work/out" 2>&1 || { fail "trace:"; cat "$work/out"; }

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "diagnostics: leak report, contention log and trace as expected"
