#!/usr/bin/env bash
# run.sh — the Lazarus package as a Lazarus user meets it: lazbuild builds
# shoal_lazarus.lpi, a project whose only setting for shoal is its
# requirement of LazShoalMM (pascal/lazshoalmm.lpk, which builds libshoal.a
# with make). The program must run with ShoalMM as its memory manager and
# carry shoal inside it (no libshoal.so to ship), and the build must leave
# the source tree as it was: everything goes to build/lazarus/.
#
# lazbuild keeps its settings in build/lazarus/config rather than in
# ~/.lazarus. Debian: lcl-utils-2.2 and lazarus-src-2.2 (tools/deps lazarus).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=$root/build/lazarus
lazbuild=${LAZBUILD:-lazbuild}
passed=0
failed=0

ok() {
  echo "ok   $*"
  passed=$((passed + 1))
}
fail() {
  echo "FAIL $*"
  failed=$((failed + 1))
}

command -v "$lazbuild" >/dev/null ||
  { echo "lazarus: lazbuild not found (Debian: lcl-utils-2.2; tools/deps lazarus installs it)" >&2; exit 1; }
mkdir -p "$out"
tree_before=$(cd "$root" && git status --porcelain --untracked-files=all -- pascal 2>/dev/null)

if "$lazbuild" --pcp="$out/config" "$here/shoal_lazarus.lpi" >"$out/lazbuild.log" 2>&1; then
  ok "lazbuild shoal_lazarus.lpi (log: $out/lazbuild.log)"
else
  tail -n 30 "$out/lazbuild.log"
  fail "lazbuild shoal_lazarus.lpi (log: $out/lazbuild.log)"
fi
program=$out/shoal_lazarus
if [ -x "$program" ]; then
  if output=$("$program" 2>&1); then
    ok "$output"
  else
    fail "shoal_lazarus (status $?): $output"
  fi
  if ldd "$program" | grep -q libshoal; then
    fail "shoal_lazarus loads libshoal.so: libshoal.a was not linked in"
  else
    ok "shoal_lazarus carries shoal inside (no libshoal.so loaded)"
  fi
else
  fail "lazbuild made no $program"
fi
tree_after=$(cd "$root" && git status --porcelain --untracked-files=all -- pascal 2>/dev/null)
if [ "$tree_before" = "$tree_after" ]; then
  ok "the source tree is as it was"
else
  fail "lazbuild changed the source tree: $(diff <(echo "$tree_before") <(echo "$tree_after") | grep '^[<>]' | tr '\n' ' ')"
fi

echo "lazarus: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
