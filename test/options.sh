#!/usr/bin/env bash
# Options are one table: every option the library knows is in the README's
# table with the same default; values parse with suffixes; a bad value gets
# exactly one warning line naming it, and the default.
set -u
program=$1
readme=$2
fail=0
check() { if ! eval "$1"; then echo "FAIL: $2"; fail=1; fi; }

defaults=$(env -u SHOAL_PURGE_DELAY -u SHOAL_PURGE_LIMIT "$program")
check '[ -n "$defaults" ]' "the program printed no options"
while IFS='=' read -r name value; do
  row=$(grep -E "^\| \`SHOAL_${name}\` \|" "$readme")
  check '[ -n "$row" ]' "SHOAL_${name} is missing from the README's option table"
  shown=$(echo "$row" | awk -F'|' '{gsub(/ /, "", $3); print $3}')
  case "$shown" in
    *K) shown=$(( ${shown%K} << 10 ));; *M) shown=$(( ${shown%M} << 20 ));; *G) shown=$(( ${shown%G} << 30 ));;
  esac
  check '[ "$shown" = "$value" ]' "README gives SHOAL_${name} default '$shown', the library $value"
done <<< "$defaults"
rows=$(grep -cE '^\| `SHOAL_[A-Z_]+` \|' "$readme")
count=$(echo "$defaults" | wc -l)
check '[ "$rows" = "$count" ]' "README lists $rows options, the library has $count"

out=$(SHOAL_PURGE_LIMIT=16M SHOAL_PURGE_DELAY=250 SHOAL_VERBOSE=off "$program" 2>&1)
check 'echo "$out" | grep -qx "PURGE_LIMIT=16777216"' "16M did not parse: $out"
check 'echo "$out" | grep -qx "PURGE_DELAY=250"' "250 did not parse"
check 'echo "$out" | grep -qx "VERBOSE=0"' "off did not parse"

err=$(SHOAL_PURGE_DELAY=soon "$program" 2>&1 >/dev/null)
check '[ "$(echo "$err" | grep -c .)" = 1 ]' "expected one warning line, got: $err"
check 'echo "$err" | grep -q "^shoal: warning: SHOAL_PURGE_DELAY=soon"' "warning does not name the value: $err"
out=$(SHOAL_PURGE_DELAY=soon "$program" 2>/dev/null)
check 'echo "$out" | grep -qx "PURGE_DELAY=10"' "a bad value did not fall back to the default"

[ $fail = 0 ] && echo "options: all checks passed"
exit $fail
