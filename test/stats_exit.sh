#!/usr/bin/env bash
# SHOAL_STATS prints the statistics at exit: a table for 1, JSON for json,
# nothing for 0 or unset, one warning line for a bad value. The program
# (stats_exit.c) keeps 37 blocks of 3000 bytes, one large and one huge block
# at exit, so the report must show exactly those live in their rows, beyond
# what the program saw live there before (before_small=...).
#   stats_exit.sh PROGRAM                  program linked to shoal
#   stats_exit.sh PROGRAM LIBSHOAL.SO      unlinked program, shoal preloaded
set -u
program=$1
library=${2:-}
fail=0
check() { if ! eval "$1"; then echo "FAIL: $2"; fail=1; fi; }
run() {  # run VALUE: the program under SHOAL_STATS=VALUE; stdout to $out, stderr to $err
  if [ -n "$library" ]; then
    out=$(env SHOAL_STATS="$1" LD_PRELOAD="$library" "$program" 2>"$tmp/err")
  else
    out=$(env SHOAL_STATS="$1" "$program" 2>"$tmp/err")
  fi
  status=$?
  err=$(cat "$tmp/err")
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The table: every figure of the list, then the class rows that held blocks.
run 1
check '[ $status = 0 ]' "the program failed under SHOAL_STATS=1: $err"
block_size=$(echo "$out" | sed -n 's/.*kept_block_size=\([0-9]*\).*/\1/p')
check '[ -n "$block_size" ]' "the program did not say what it keeps: $out"
shoal_malloc=$(echo "$out" | sed -n 's/.*malloc_is_shoal=\([01]\).*/\1/p')
figure() { echo "$out" | sed -n "s/.*$1=\([0-9]*\).*/\1/p"; }
small=$(( $(figure before_small) + 37 )) large=$(( $(figure before_large) + 1 ))
huge=$(( $(figure before_huge) + 1 ))
check 'echo "$err" | head -n 1 | grep -q "^shoal: statistics of process [0-9]* at exit$"' \
  "the table does not start with its title: $(echo "$err" | head -n 1)"
for figure in live_blocks live_bytes os_reserved_bytes os_committed_bytes \
              os_peak_committed_bytes segments pages remote_frees purges slow_paths \
              allocated_blocks freed_blocks counters_enabled; do
  check 'echo "$err" | grep -qE "^  $figure +[0-9]+ "' "the table has no row for $figure"
done
check 'echo "$err" | grep -qE "^  size class +block_size +allocated +freed +live$"' \
  "the table has no class header"
enabled=$(echo "$err" | awk '$1 == "counters_enabled" { print $2 }')
# The live rows count what the program keeps only where malloc is shoal's:
# a sanitizer runtime (TSan, ASan) keeps malloc and shoal sees none of it.
[ "$shoal_malloc" = 1 ] || enabled="no: malloc is not shoal's here"
if [ "$enabled" = 1 ]; then
  # Class rows: label, block size, allocated, freed, live.
  row=$(echo "$err" | awk -v size="$block_size" '$1 ~ /^[0-9]+$/ && $2 == size')
  check '[ -n "$row" ]' "no class row with block size $block_size"
  check '[ "$(echo "$row" | awk "{ print \$5 }")" = $small ]' \
    "the ${block_size}-byte row is not $small live: $row"
  check 'echo "$err" | grep -qE "^ +large +0 +[0-9]+ +[0-9]+ +$large$"' "the large row is not $large live"
  check 'echo "$err" | grep -qE "^ +huge +0 +[0-9]+ +[0-9]+ +$huge$"' "the huge row is not $huge live"
  remote=$(echo "$err" | awk '$1 == "remote_frees" { print $2 }')
  check '[ "${remote:-0}" -ge 500 ]' "remote_frees is ${remote:-missing}, 500 blocks were freed by another thread"
else
  echo "stats_exit: live rows not checked (counters_enabled: $enabled)"
fi
table_figures=$(echo "$err" | awk '/^  size class/ { exit } NR > 1 { print $1 }')

# JSON: parses, has every figure of the table, and the same live rows.
run json
check '[ $status = 0 ]' "the program failed under SHOAL_STATS=json: $err"
echo "$err" >"$tmp/json"
class_count=$(sed -n 's/^#define SHOAL_STATS_SIZE_CLASSES \([0-9]*\).*/\1/p' "$(dirname "$0")/../include/shoal.h")
python3 - "$tmp/json" "$block_size" "$table_figures" "$enabled" $small $large $huge "$class_count" <<'PYTHON' || fail=1
import json, sys
path, block_size, table_figures = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
counts_kept_blocks = sys.argv[4] == "1"
small, large, huge = (int(n) for n in sys.argv[5:8])
class_count = int(sys.argv[8])
try:
    stats = json.load(open(path))
except ValueError as error:
    print(f"FAIL: SHOAL_STATS=json is not JSON ({error}):\n{open(path).read()[:2000]}")
    sys.exit(1)
problems = []
missing = [name for name in table_figures if name not in stats]
if missing or not table_figures:
    problems.append(f"figures of the table missing from the JSON: {missing or 'all'}")
rows = stats["classes"] + [stats["large"], stats["huge"]]
if len(stats["classes"]) != class_count:
    problems.append(f"{len(stats['classes'])} classes, expected {class_count} (SHOAL_STATS_SIZE_CLASSES)")
for row in rows:
    if row["allocated"] - row["freed"] != row["live"]:
        problems.append(f"allocated - freed != live in {row}")
if stats["allocated_blocks"] - stats["freed_blocks"] != stats["live_blocks"]:
    problems.append("allocated_blocks - freed_blocks != live_blocks")
if sum(row["live"] for row in rows) != stats["live_blocks"]:
    problems.append("the rows' live blocks do not add up to live_blocks")
if stats["counters_enabled"] == 1 and counts_kept_blocks:
    kept = [row for row in stats["classes"] if row["block_size"] == block_size]
    if len(kept) != 1 or kept[0]["live"] != small:
        problems.append(f"the {block_size}-byte class should have {small} live blocks: {kept}")
    if stats["large"]["live"] != large or stats["huge"]["live"] != huge:
        problems.append(f"large {stats['large']}, huge {stats['huge']}: expected {large} and "
                        f"{huge} live")
    if stats["live_bytes"] < 37 * block_size + 300000 + (5 << 20):
        problems.append(f"live_bytes {stats['live_bytes']} is less than what the program keeps")
    if stats["remote_frees"] < 500:
        problems.append(f"remote_frees {stats['remote_frees']} < 500")
elif stats["counters_enabled"] == 0 and stats["live_blocks"] != 0:
    problems.append("counters compiled out, yet live_blocks is not 0")
if counts_kept_blocks and stats["os_committed_bytes"] == 0:
    problems.append("os_committed_bytes is 0 while blocks are live")
if stats["os_peak_committed_bytes"] < stats["os_committed_bytes"]:
    problems.append("the peak of committed bytes is below the committed bytes")
for problem in problems:
    print("FAIL: " + problem)
sys.exit(1 if problems else 0)
PYTHON

# Off, unset, or not understood: no report; a bad value gets one warning line.
for value in 0 off ""; do
  run "$value"
  check '[ $status = 0 ] && [ -z "$err" ]' "SHOAL_STATS='$value' printed: $err"
done
run sometimes
check '[ $status = 0 ]' "the program failed under SHOAL_STATS=sometimes"
check '[ "$(echo "$err" | grep -c .)" = 1 ]' "expected one warning line, got: $err"
check 'echo "$err" | grep -q "^shoal: warning: SHOAL_STATS=sometimes is not a valid value"' \
  "the warning does not name the value: $err"

[ $fail = 0 ] && echo "stats_exit${library:+ (preloaded)}: all checks passed"
exit $fail
