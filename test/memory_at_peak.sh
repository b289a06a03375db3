#!/usr/bin/env bash
# tools/memory-at-peak.sh on a program that holds known amounts
# (memory_at_peak.c): the walk at the peak finds them in their rows (the
# small class's row, the large blocks, the huge blocks; the blocks another
# thread freed, on their pages' lists; a freed large block's slices, by the
# class that gave them back), and the rows add up to the RSS the walk saw.
#   memory_at_peak.sh SOURCE_DIR PROGRAM LIBSHOAL.SO
set -u
source_dir=$1
program=$2
library=$3
fail=0
check() { if ! eval "$1"; then echo "FAIL: $2"; fail=1; fi; }
report=$(MEMORY_AT_PEAK_MS=5 MEMORY_AT_PEAK_CLASSES=1 SHOAL_PURGE_DELAY=60000 \
  bash "$source_dir/tools/memory-at-peak.sh" -l "$library" "$program" 2>&1)
status=$?
check '[ $status = 0 ]' "the probe or the program failed: $report"
field() { echo "$report" | sed -n "s/.*$1=\([0-9]*\).*/\1/p" | head -1; }
row() { echo "$report" | sed -n "s/^ *$1 *\([0-9]*\) KB.*/\1/p" | head -1; }
# rows_sum: the named rows' sum; each must be there.
sum_rows() {
  rows_sum=0
  local name value
  for name in "$@"; do
    value=$(row "$name")
    check '[ -n "$value" ]' "no row \"$name\": $report"
    rows_sum=$((rows_sum + ${value:-0}))
  done
}
small=$(field small_kb) block=$(field small_block) large=$(field large_kb) huge=$(field huge_kb)
remote=$(field remote_kb)
check '[ -n "$small" ] && [ -n "$block" ] && [ -n "$large" ] && [ -n "$huge" ] && [ -n "$remote" ]' \
  "the program did not say what it held: $report"
walked=$(echo "$report" | sed -n 's/.*walked at \([0-9]*\) KB.*/\1/p')
check '[ -n "$walked" ] && [ "$walked" -ge $((small + large + huge)) ]' \
  "the walk saw less than the program held ($small + $large + $huge KB): $report"
check '! echo "$report" | grep -q "missed the peak"' "the walk missed the peak: $report"

handed_out=$(row "of it, blocks handed out (remote frees too)")
check '[ -n "$handed_out" ] && [ "$handed_out" -ge "$small" ]' \
  "class pages hand out ${handed_out:-nothing}, less than the $small KB held: $report"
with_program=$(row "with the program (and in the depot)")
check '[ -n "$with_program" ] && [ "$with_program" -ge "$small" ]' \
  "blocks with the program: ${with_program:-none}, less than the $small KB held: $report"
pending=$(row "freed by others, on their pages' lists")
check '[ -n "$pending" ] && [ "$pending" -ge $((remote - 1)) ] && [ "$pending" -le "$remote" ]' \
  "the $remote KB another thread freed are not on their pages' lists: $report"
sum_rows "freed, in class caches" "freed by others, in their outboxes" \
  "freed by others, in owners' mailboxes"
parts=$((with_program + pending + rows_sum))
check '[ "$parts" -le "$handed_out" ] && [ "$parts" -ge $((handed_out - 5)) ]' \
  "the blocks handed out split into $parts KB, not $handed_out: $report"
class_row=$(echo "$report" | grep -E "^  class +[0-9]+ +$block B:")
class_resident=$(echo "$class_row" | sed -n 's/.* \([0-9]*\) KB resident.*/\1/p')
class_handed=$(echo "$class_row" | sed -n 's/.* \([0-9]*\) handed out.*/\1/p')
check '[ -n "$class_handed" ] && [ "$class_handed" -ge "$small" ] && [ "$class_resident" -ge "$small" ]' \
  "the $block-byte class's row does not hold the $small KB: ${class_row:-no row}"
large_count=$(echo "$report" | sed -n 's/^ *large blocks (\([0-9]*\)).*/\1/p')
large_resident=$(row "large blocks ([0-9]*)")
check '[ "${large_count:-0}" -ge 1 ] && [ "${large_resident:-0}" -ge "$large" ]' \
  "the large block's $large KB are not in its row: $report"
huge_resident=$(row "huge blocks")
check '[ "${huge_resident:-0}" -ge "$huge" ]' "the huge block's $huge KB are not in its row: $report"
# The free slices, by the class whose pages gave them back (resident OS
# pages: whole KB, so the two sums agree exactly).
sum_rows "free slices, freed since their heap's purge" "free slices, older" \
  "free slices, lazily purged"
free_slices=$rows_sum
by_class=$(echo "$report" | sed -n 's/.* \([0-9]*\)\( KB\)\{0,1\} in free slices it gave back$/\1/p' |
  awk '{ sum += $1 } END { print sum + 0 }')
check '[ "$by_class" = "$free_slices" ]' \
  "the free slices by class add up to $by_class KB, not $free_slices: $report"
freed_large=$(field freed_large_kb)
large_freed=$(echo "$report" | sed -n 's/^  large *: \([0-9]*\) KB in free slices.*/\1/p')
check '[ -n "$freed_large" ] && [ "${large_freed:-0}" -ge "$freed_large" ]' \
  "the freed large block's $freed_large KB are not the large blocks' free slices: $report"

# Each row is rounded down to a KB: nine rows may lose up to 9 KB in all.
sum_rows "class pages ([0-9]*)" "large blocks ([0-9]*)" \
  "free slices, freed since their heap's purge" "free slices, older" \
  "free slices, lazily purged" "segment headers" "huge blocks" \
  "the rest (code, stacks, heaps, other mappings)"
check '[ "$rows_sum" -le "$walked" ] && [ "$rows_sum" -ge $((walked - 9)) ]' \
  "the rows add up to $rows_sum KB, not the $walked KB walked: $report"
[ $fail = 0 ] && echo "memory_at_peak: the walk found what the program held, rows add up"
exit $fail
