#!/usr/bin/env bash
# run.sh BUILD_DIR — the reports a ShoalMM program gets (reports.pas, built
# with -gl against BUILD_DIR/libshoal.a): the leak report that
# ReportMemoryLeaksOnShutdown asks for, with what each leaked block holds;
# the contention report by memory function; a double free in checked mode.
# Each goes to <program>_shoal_report.txt beside the executable, its first
# lines to stderr.
set -u
if [ $# -ne 1 ]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
build=$(cd "$1" && pwd) || exit 2
here=$(cd "$(dirname "$0")" && pwd)
fpc=${FPC:-fpc}
out="$build/pascal/reports"
mkdir -p "$out/units"
program="$out/reports"
report="${program}_shoal_report.txt"
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
expect() { # expect FILE REGEX WHAT
  grep -Eq -- "$2" "$1" || { fail "$3: no line matching /$2/ in $1:"; sed 's/^/    /' "$1"; }
}

if ! "$fpc" -O2 -gl -vew -Fu"$here/../.." -Fl"$build" -FU"$out/units" -FE"$out" \
    "$here/reports.pas" >"$out/build.log" 2>&1; then
  fail "reports.pas does not build:"
  tail -n 15 "$out/build.log"
  exit 1
fi
unset SHOAL_REPORT_FILE SHOAL_LEAKS_FILE SHOAL_LEAKS SHOAL_CHECK SHOAL_CONTENTION

# Leaks: ReportMemoryLeaksOnShutdown := True, nothing in the environment.
rm -f "$report"
"$program" leaks 2>"$out/err" || fail "leaks: exit status $?"
[ -f "$report" ] || { fail "leaks: no $report"; touch "$report"; }
expect "$report" '^shoal: leak report: 13 blocks \([0-9]+ bytes\) still allocated at exit' "leaks: headline"
expect "$report" '^  1 - 16 bytes: TFoo x 2$' "leaks: the two TFoo objects"
for kind in 'TBar x 1' 'UnicodeString x 5' 'AnsiString x 3' 'dynamic array x 1' 'other x 1'; do
  expect "$report" "^  [0-9]+ - [0-9]+ bytes: .*$kind" "leaks: $kind"
done
# Each group of leaks under the program's own line, by name and line.
line() { grep -n "{ line: $1 }" "$here/reports.pas" | cut -d: -f1; }
at() { echo "$1 (reports.pas:$(line "$2"))"; }           # as printed
at_re() { echo "$1 \\(reports\\.pas:$(line "$2")\\)"; } # as a regular expression
expect "$report" "^ +260 +5  $(at_re LeakStrings wide) <- $(at_re main main-strings)\$" "leaks: the UnicodeStrings' line"
expect "$report" "^ +[0-9]+ +3  $(at_re LeakStrings narrow) <- $(at_re main main-strings)\$" "leaks: the AnsiStrings' line"
expect "$report" "^ +16 +1  $(at_re LeakObjects foo-1) <- $(at_re main main-objects)\$" "leaks: the first TFoo's line"
expect "$report" "^ +16 +1  $(at_re LeakObjects foo-2) <- $(at_re main main-objects)\$" "leaks: the second TFoo's line"
expect "$report" "^ +[0-9]+ +1  $(at_re LeakObjects bar) <- $(at_re main main-objects)\$" "leaks: TBar's line"
expect "$report" "^ +56 +1  $(at_re LeakArray array) <- $(at_re main main-array)\$" "leaks: SetLength's line"
expect "$report" "^ +100 +1  $(at_re LeakRaw raw) <- $(at_re main main-raw)\$" "leaks: GetMem's line"
expect "$out/err" "^shoal: leak report: 13 blocks \\([0-9]+ bytes\\) still allocated at exit; the report is in $report\$" "leaks: stderr headline"
lines=$(wc -l <"$out/err")
[ "$lines" -ge 2 ] && [ "$lines" -le 4 ] || fail "leaks: $lines lines on stderr, not the headline and up to three stacks"

# No switch, no leak report (the program leaks as much).
rm -f "$report"
SHOAL_CONTENTION=0 "$program" leaks-quietly 2>"$out/err"
[ ! -e "$report" ] || fail "a report file appeared without a report"

# SHOAL_REPORT_FILE wins over ShoalMM's default; empty means stderr alone.
SHOAL_REPORT_FILE="$out/elsewhere.txt" "$program" leaks 2>"$out/err"
expect "$out/elsewhere.txt" 'TFoo x 2' "SHOAL_REPORT_FILE: the report there"
[ ! -e "$report" ] || fail "SHOAL_REPORT_FILE: the default file was written too"
SHOAL_REPORT_FILE= "$program" leaks 2>"$out/err"
expect "$out/err" '^  1 - 16 bytes: TFoo x 2$' "SHOAL_REPORT_FILE empty: the report on stderr"
[ ! -e "$report" ] || fail "SHOAL_REPORT_FILE empty: a file was written"

# Contention: the consumer's FreeMem of the producer's blocks comes first.
rm -f "$report"
SHOAL_CONTENTION=1 "$program" contention 2>"$out/err" || fail "contention: exit status $?"
first=$(grep -Ev '^shoal:|^ +count' "$report" | head -n 1)
[[ "$first" =~ ^\ +1000[0-9]\ +remote\ free\ +FreeMem\  ]] || fail "contention: first line is not ~10000 remote frees in FreeMem: '$first'"
[[ "$first" == *" $(at TConsumer.Execute consumer-free) <- "* ]] || fail "contention: the FreeMem's line is not named: '$first'"
expect "$report" "^ +[0-9]+ +slow path +GetMem +$(at_re Contend producer-get) <- main " "contention: GetMem's slow paths, by line"
expect "$out/err" '^shoal:   1000[0-9] remote frees in FreeMem at ' "contention: top line on stderr"

# Checked mode: a double free names FreeMem and three stacks, and aborts.
rm -f "$report"
SHOAL_CHECK=1 "$program" double-free 2>"$out/err"
status=$?
[ "$status" -eq 134 ] || fail "double free: exit status $status, not 134 (abort)"
main_twice=$(at_re main main-twice)
line="^shoal: double free: FreeMem\\(0x[0-9a-f]+\\): the 40-byte block was already freed; allocated at $(at_re FreeTwice twice-get) <- $main_twice; freed at $(at_re FreeTwice twice-first) <- $main_twice; called at $(at_re FreeTwice twice-second) <- $main_twice\$"
expect "$report" "$line" "double free: in the report"
expect "$out/err" "$line" "double free: on stderr"

if [ "$failures" -ne 0 ]; then
  echo "pascal reports: $failures failure(s)"
  exit 1
fi
echo "pascal reports: leak, contention and double-free reports as expected"
