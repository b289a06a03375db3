#!/bin/bash
# Call stacks in the leak report name the program's own frames, with files
# and lines, however the program was built:
#   stacks.sh DIR_OF_C_PROGRAMS SOURCE_DIR [FPC BUILD_DIR]
# The C program test/stacks/stacks.c is built with unwind tables
# (test_stacks_tables), with frame pointers and no tables (_fp), with
# neither (_frameless), without debug information (_nodebug); the C++ one
# with exceptions (test_stacks_cxx). With FPC and BUILD_DIR (its
# libshoal.a), the Pascal program stacks_pas.pas is built with -gl and
# ShoalMM. Each frame's line number is read from the source's LINE: marks.
set -euo pipefail
programs=$1
sources=$2/test/stacks
fpc=${3:-}
build=${4:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# line FILE NAME: the number of the line marked LINE:NAME.
line() {
  local number
  number=$(grep -nE "LINE:$2( |$)" "$sources/$1" | cut -d: -f1)
  [ -n "$number" ] || { echo "no LINE:$2 in $1" >&2; exit 2; }
  echo "$number"
}

quote() { # a fixed string as an extended regex
  printf '%s' "$1" | sed 's/[][\.*^$+?(){}|/]/\\&/g'
}

# expect FILE TEXT WHAT: a line of FILE contains TEXT exactly.
expect() {
  grep -Fq -- "$2" "$1" || { fail "$3: no line containing '$2' in:"; cat "$1"; }
}
expect_re() {
  grep -Eq -- "$2" "$1" || { fail "$3: no line matching /$2/ in:"; cat "$1"; }
}
refuse() {
  ! grep -Eq -- "$2" "$1" || { fail "$3: unexpected /$2/ in:"; cat "$1"; }
}

c=stacks.c
make_table="make_table (stacks.c:$(line $c make_table))"
build_index="build_index (stacks.c:$(line $c build_index))"
load_names="load_names (stacks.c:$(line $c load_names))"
main_build="main (stacks.c:$(line $c main_build_index))"
main_load="main (stacks.c:$(line $c main_load_names))"

# With debug information, every way of building gives the same frames.
# Past unwind tables the walk reads x86-64 code: elsewhere, tables only.
variants=tables
[ "$(uname -m)" = x86_64 ] && variants="tables fp frameless"
for variant in $variants; do
  program=$programs/test_stacks_$variant
  SHOAL_LEAKS=all "$program" 2>"$work/err"
  expect "$work/err" "  $make_table <- $build_index <- $main_build" "$variant: make_table's stack"
  expect_re "$work/err" "  $(quote "$load_names <- $main_load")\$" "$variant: load_names's stack"
  refuse "$work/err" '^shoal: call stacks:' "$variant: a note, yet nothing is missing"

  # A frame pointer that is garbage (small, unmapped and misaligned, below
  # the stack pointer, pointing at itself): no crash, the callers found.
  [ "$(uname -m)" = x86_64 ] || continue # the planted frame pointers are x86-64 code
  for kind in 1 2 3 4; do
    status=0
    SHOAL_LEAKS=all "$program" corrupt-fp $kind 2>"$work/err" || status=$?
    [ $status -eq 0 ] || { fail "$variant: corrupt frame pointer $kind: exit status $status"; cat "$work/err"; }
    expect_re "$work/err" "  corrupt_frame_pointer_malloc\+0x[0-9a-f]+ \(test_stacks_$variant\) <- $(quote "through_corrupt_frame (stacks.c:$(line $c through_corrupt_frame)) <- main (stacks.c:$(line $c main_corrupt))")\$" \
      "$variant: corrupt frame pointer $kind"
  done

  # malloc in a signal handler: the handler's line first, no crash. (Below
  # the handler, a walk without tables stops in the C library's raise.)
  SHOAL_LEAKS=all "$program" signal 2>"$work/err"
  expect_re "$work/err" "^ +40 +1  $(quote "on_signal (stacks.c:$(line $c on_signal))")( <- |\$)" "$variant: signal handler"
  if [ "$variant" = tables ]; then # the unwinder goes on through the kernel's signal frame
    expect_re "$work/err" "^ +40 +1  $(quote "on_signal (stacks.c:$(line $c on_signal)) <- <signal handler called> <- ").* <- $(quote "main (stacks.c:$(line $c main_raise))")\$" "$variant: signal handler's callers"
  fi
done

# Diagnostics off, libdw is not mapped; on, not before the report.
"$programs/test_stacks_tables" maps 2>"$work/err" || fail "no diagnostics: libdw mapped"
SHOAL_LEAKS=all "$programs/test_stacks_tables" maps 2>"$work/err" || fail "leaks on: libdw mapped before the report"
expect "$work/err" "$make_table" "leaks on, maps: still named by line"

# No /proc (neither /proc/self/maps nor /proc/self/exe): the same frames,
# from the start-up stack end and the path exec was given. Needs a mount
# namespace of its own; where none can be made, said and skipped.
if unshare -m true 2>/dev/null; then
  for variant in $variants; do
    unshare -m sh -c 'mount -t tmpfs none /proc && exec env SHOAL_LEAKS=all "$0"' \
      "$programs/test_stacks_$variant" 2>"$work/err" || fail "$variant without /proc: exit status"
    expect "$work/err" "  $make_table <- $build_index <- $main_build" "$variant without /proc"
  done
else
  echo "stacks: no mount namespace here (unshare -m): the run without /proc is skipped"
fi

# No debug information: function+offset (object), and one line saying why.
SHOAL_LEAKS=all "$programs/test_stacks_nodebug" 2>"$work/err"
expect_re "$work/err" '  make_table\+0x[0-9a-f]+ \(test_stacks_nodebug\) <- build_index\+0x[0-9a-f]+ \(test_stacks_nodebug\) <- main\+0x[0-9a-f]+ \(test_stacks_nodebug\)$' "no debug information: function+offset"
expect "$work/err" "shoal: call stacks: frames without debug information in test_stacks_nodebug (build with -g; Free Pascal: -gl)" "no debug information: the note"
[ "$(grep -c '^shoal: call stacks:' "$work/err")" -eq 1 ] || fail "no debug information: not one note line"

# Stripped: addresses in the object, and why.
strip -o "$work/stripped" "$programs/test_stacks_tables"
SHOAL_LEAKS=all "$work/stripped" 2>"$work/err"
expect_re "$work/err" '^ +4096 +1  0x[0-9a-f]+ \(stripped\+0x[0-9a-f]+\) <- ' "stripped: addresses"
expect_re "$work/err" '^shoal: call stacks: .*no symbol table in stripped \(stripped\)' "stripped: the note"

# No libdw: names from the symbol tables, and why.
mkdir "$work/nolibdw"
: >"$work/nolibdw/libdw.so.1"
SHOAL_LEAKS=all LD_LIBRARY_PATH="$work/nolibdw${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  "$programs/test_stacks_tables" 2>"$work/err"
expect_re "$work/err" '  make_table\+0x[0-9a-f]+ \(test_stacks_tables\) <- build_index\+0x[0-9a-f]+ \(test_stacks_tables\) <- main\+' "no libdw: function+offset"
expect "$work/err" "shoal: call stacks: no files or lines: libdw.so.1 could not be loaded (Debian: libdw1)" "no libdw: the note"

# C++ with exceptions: demangled names.
x=stacks_cxx.cpp
SHOAL_LEAKS=all "$programs/test_stacks_cxx" 2>"$work/err"
expect "$work/err" "  shapes::Pool::grow(unsigned long) (stacks_cxx.cpp:$(line $x pool_grow)) <- main (stacks_cxx.cpp:$(line $x main_grow))" "C++: Pool::grow"
expect "$work/err" "  shapes::Node* shapes::make_one<shapes::Node>() (stacks_cxx.cpp:$(line $x make_one)) <- main (stacks_cxx.cpp:$(line $x main_make_one))" "C++: make_one"
expect "$work/err" "  shapes::Pool::reserve(unsigned long) (stacks_cxx.cpp:$(line $x pool_reserve)) <- main (stacks_cxx.cpp:$(line $x main_catch))" "C++: in a catch block"

# Free Pascal with -gl and ShoalMM: the program's line that allocated first,
# past ShoalMM and the RTL; names in the program's spelling.
if [ -n "$fpc" ] && [ -n "$build" ] && [ "$(uname -m)" = x86_64 ]; then
  mkdir "$work/pascal"
  if ! "$fpc" -O2 -gl -Fu"$2/pascal" -Fl"$build" -FU"$work/pascal" -FE"$work/pascal" \
      "$sources/stacks_pas.pas" >"$work/fpc.log" 2>&1; then
    fail "pascal: does not build"
    cat "$work/fpc.log"
  else
    p=stacks_pas.pas
    at() { echo "$1 ($p:$(line $p "$2"))"; }
    main_execute=$(at main main_execute)
    execute_label="$(at TSpeedTest.Execute execute_label) <- $main_execute"
    label="$(at TSpeedTest.Label_ label_create) <- $execute_label"
    SHOAL_LEAKS=all SHOAL_REPORT_FILE= "$work/pascal/stacks_pas" 2>"$work/err"
    expect "$work/err" "  $(at TSpeedTest.Execute execute_getmem) <- $main_execute" "pascal: GetMem"
    expect "$work/err" "  $(at TSpeedTest.Execute execute_new) <- $main_execute" "pascal: New"
    expect "$work/err" "  $(at TSpeedTest.Execute execute_leaf) <- $main_execute" "pascal: TObject.Create"
    expect "$work/err" "  $(at TSpeedTest.Execute execute_stringlist) <- $main_execute" "pascal: TStringList.Create"
    expect "$work/err" "  $(at TNode.Create node_name) <- $label" "pascal: string concatenation"
    expect "$work/err" "  $(at TNode.Create node_values) <- $label" "pascal: SetLength"
    expect "$work/err" "  $(at main main_create)" "pascal: the main program"
    refuse "$work/err" 'ShoalGetMem|SHOALMM|fpc_|SYSTEM' "pascal: ShoalMM's or the RTL's frames"
  fi
  # Without -gl fpc strips the program: no names, no made-up callers, and why.
  mkdir "$work/stripped-pascal"
  if "$fpc" -O2 -Fu"$2/pascal" -Fl"$build" -FU"$work/stripped-pascal" -FE"$work/stripped-pascal" \
      "$sources/stacks_pas.pas" >"$work/fpc.log" 2>&1; then
    SHOAL_LEAKS=all SHOAL_REPORT_FILE= "$work/stripped-pascal/stacks_pas" 2>"$work/err"
    expect_re "$work/err" '^ +1279 +8  0x[0-9a-f]+ \(stacks_pas\+0x[0-9a-f]+\)$' "pascal without -gl: one frame"
    expect "$work/err" "shoal: call stacks: no symbol table in stacks_pas (stripped)" "pascal without -gl: the note"
  else
    fail "pascal without -gl: does not build"
    cat "$work/fpc.log"
  fi
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "stacks: every frame named as expected"
