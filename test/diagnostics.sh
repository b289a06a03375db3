#!/bin/bash
# The leak report and the contention log, on programs with known answers:
#   diagnostics.sh LEAKS_PROGRAM CONTENTION_PROGRAM
# diag_leaks leaks one 4096-byte block in make_cache and two 64-byte blocks
# in leak_node; what other threads and a thread-exit destructor freed must
# not appear. diag_contention frees other threads' blocks in consume_item.
set -euo pipefail
leaks_program=$1
contention_program=$2
report_api_program=$3
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
  # leak_node is called from two lines of main: two call stacks
  [ "$(grep -cE '^ +64 +1  leak_node \(diag_leaks\.c:[0-9]+\) <- main \(diag_leaks\.c:[0-9]+\)$' "$work/err")" -eq 2 ] ||
    fail "$mode: leak_node's two call stacks"
  expect "$work/err" '^ +4096 +1  4096$' "$mode: by size, 4096"
  expect "$work/err" '^ +128 +2  64$' "$mode: by size, 64"
  refuse "$work/err" 'allocate_for_other|free_for_other|^ +(200|300|3200) ' "$mode: freed blocks"
done

# The report reaches the stderr the program started with, even closed.
SHOAL_LEAKS=all "$leaks_program" close-stderr 2>"$work/err"
expect "$work/err" '^shoal: leak report: 3 blocks \(4224 bytes\) still allocated at exit$' "stderr closed: summary"

# To a file: the report there; on stderr its first line and the three
# largest call stacks. SHOAL_LEAKS_FILE is the older name of SHOAL_REPORT_FILE.
for variable in SHOAL_REPORT_FILE SHOAL_LEAKS_FILE; do
  rm -f "$work/leaks.txt"
  env SHOAL_LEAKS=all "$variable=$work/leaks.txt" "$leaks_program" 2>"$work/err"
  expect "$work/leaks.txt" '^shoal: leak report: 3 blocks \(4224 bytes\)' "$variable: summary"
  expect "$work/leaks.txt" '^ +4096 +1  make_cache \(' "$variable: site"
  expect "$work/leaks.txt" '^ +128 +2  64$' "$variable: by size"
  expect "$work/err" "^shoal: leak report: 3 blocks \\(4224 bytes\\) still allocated at exit; the report is in $work/leaks.txt\$" "$variable: stderr line"
  expect "$work/err" '^shoal:   4096 bytes in 1 block at make_cache \(diag_leaks\.c:[0-9]+\)' "$variable: stderr, largest"
  [ "$(wc -l <"$work/err")" -eq 4 ] || fail "$variable: not four lines on stderr"
done
# auto: <program>_shoal_report.txt beside the executable
auto_report="${leaks_program}_shoal_report.txt"
rm -f "$auto_report"
SHOAL_LEAKS=all SHOAL_REPORT_FILE=auto "$leaks_program" 2>"$work/err"
expect "$auto_report" '^ +4096 +1  make_cache \(' "auto: the report beside the executable"
expect "$work/err" "; the report is in $auto_report\$" "auto: stderr names it"
rm -f "$auto_report"
# a file that cannot be written: said once, the report goes to stderr
SHOAL_LEAKS=all SHOAL_REPORT_FILE="$work/no/such/dir/r.txt" "$leaks_program" 2>"$work/err"
expect "$work/err" "^shoal: cannot write $work/no/such/dir/r.txt: No such file or directory; reports go to stderr\$" "unwritable: said why"
expect "$work/err" '^ +4096 +1  make_cache \(' "unwritable: report on stderr"

# Sampled (the default): exact totals by block size from the counters; with
# a sample per byte every site is found.
SHOAL_LEAKS=1 "$leaks_program" 2>"$work/err"
expect "$work/err" '^shoal: leak report: [0-9]+ blocks \([0-9]+ bytes of blocks\) still allocated at exit; call stacks from sampled' "sampled: summary"
expect "$work/err" '^ +4096 +1  4096$' "sampled: by block size, 4096"
expect "$work/err" '^ +128 +2  64$' "sampled: by block size, 64"
SHOAL_LEAKS=1 SHOAL_LEAKS_SAMPLE=1 "$leaks_program" 2>"$work/err"
expect "$work/err" '^ +4096 +1  make_cache \(' "every byte sampled: make_cache site"
expect "$work/err" '^ +64 +1  leak_node \(' "every byte sampled: leak_node site"

# Nothing asked, nothing said.
"$leaks_program" 2>"$work/err"
[ ! -s "$work/err" ] || { fail "no diagnostics asked, yet:"; cat "$work/err"; }
SHOAL_LEAKS=maybe "$leaks_program" 2>"$work/err"
expect "$work/err" '^shoal: warning: SHOAL_LEAKS=maybe is not a valid value' "bad value warned"

# The contention log: by call stack and memory function, most frequent
# first; SHOAL_CONTENTION=path is the older form of SHOAL_CONTENTION=1 with
# SHOAL_REPORT_FILE=path.
SHOAL_CONTENTION="$work/contention.txt" "$contention_program" 2>"$work/err"
expect "$work/contention.txt" '^shoal: contention: [0-9]+ events at [0-9]+ call stacks, most frequent first' "log: header"
first=$(grep -v '^shoal:' "$work/contention.txt" | sed -n 2p)
[[ "$first" =~ ^\ +[0-9]+\ +remote\ free\ +free\ +consume_item\ \(diag_contention\.c:[0-9]+\)\ \<-\ consumer\ \( ]] ||
  fail "log: most frequent is not the remote free in consume_item <- consumer: '$first'"
expect "$work/contention.txt" 'slow path +malloc +produce_item \(diag_contention\.c:[0-9]+\) <- producer \(' "log: slow path in produce_item"
expect "$work/err" "^shoal: contention: [0-9]+ events at [0-9]+ call stacks, most frequent first; the report is in $work/contention.txt\$" "stderr: summary"
expect "$work/err" '^shoal:   [0-9]+ remote frees in free at consume_item \(diag_contention\.c:[0-9]+\)' "stderr: top site"
[ "$(grep -c '^shoal:   ' "$work/err")" -le 3 ] || fail "stderr: more than three sites"
SHOAL_CONTENTION=1 "$contention_program" 2>"$work/err"
expect "$work/err" '^ +[0-9]+ +remote free +free +consume_item \(' "stderr only: the whole log"

# The C API: the report switched on from main, to a file the program names,
# with its namer; blocks allocated before the switch are not tracked.
rm -f "$work/api.txt"
"$report_api_program" "$work/api.txt" 2>"$work/err" || { fail "report api: exit status"; cat "$work/err"; }
expect "$work/api.txt" '^shoal: leak report: 4 blocks \(548 bytes\) still allocated at exit' "report api: headline"
expect "$work/api.txt" '^  1 - 16 bytes: node_t x 3$' "report api: the namer's name"
expect "$work/api.txt" '^  [0-9]+ - [0-9]+ bytes: other x 1$' "report api: the unnamed block"
expect "$work/api.txt" '^ +48 +3  leak_nodes \(diag_report_api\.c:[0-9]+\) <- main \(diag_report_api\.c:[0-9]+\)$' "report api: call stack"
refuse "$work/api.txt" '^ +48 +1 ' "report api: the block from before the switch"
rm -f "$work/api.txt"
"$report_api_program" "$work/api.txt" off 2>"$work/err" || fail "report api off: exit status"
[ ! -e "$work/api.txt" ] || { fail "report api off: a report was written"; cat "$work/api.txt"; }

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
