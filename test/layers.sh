#!/usr/bin/env bash
# The layers call only downwards (src/README.md): tools/check-layers.py on
# this build's objects finds no include or call up a layer. And it would:
# a copy of two core files where page.c includes the diagnostics' header and
# calls the heap above it must fail the check, naming both breaches, and so
# must a core file that names the platform (only os/ may).
set -u
source_dir=$1
build_dir=$2
checker="$source_dir/tools/check-layers.py"
fail=0

objects=("$build_dir/CMakeFiles/shoal_objects.dir" "$build_dir/CMakeFiles/shoal_export_objects.dir")
if ! python3 "$checker" "$source_dir/src" "${objects[@]}"; then
  echo "FAIL: the library's own layers break the rule (above)"
  fail=1
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/src" "$scratch/obj/core"
cp -r "$source_dir/src/." "$scratch/src/"
{
  echo '#include "diag/diag.h"'
  echo 'void *page_reaches_up(void) { return heap_malloc_slow(&heap_empty, 16); }'
} >> "$scratch/src/core/page.c"
printf '#if defined(_WIN32)\n#endif\n' >> "$scratch/src/core/heap.c"
for file in page heap; do
  cc -std=c11 -D_GNU_SOURCE -I "$scratch/src" -I "$source_dir/include" -c \
    "$scratch/src/core/$file.c" -o "$scratch/obj/core/$file.c.o" || fail=1
done
out=$(python3 "$checker" "$scratch/src" "$scratch/obj" 2>&1)
status=$?
[ "$status" -eq 1 ] || { echo "FAIL: a breach passed the check (status $status): $out"; fail=1; }
echo "$out" | grep -q 'core/page.c:[0-9]*: includes diag/diag.h, a layer above core' ||
  { echo "FAIL: the include up a layer was not named: $out"; fail=1; }
echo "$out" | grep -q 'core/page.c uses heap_malloc_slow of core/heap.c, a layer above it' ||
  { echo "FAIL: the call up a layer was not named: $out"; fail=1; }
echo "$out" | grep -q 'core/heap.c:[0-9]*: names the platform (_WIN32); only os/ may' ||
  { echo "FAIL: the platform named above os/ was not caught: $out"; fail=1; }

[ "$fail" -eq 0 ] && echo "layers: the check passes on the library and fails on a breach"
exit "$fail"
