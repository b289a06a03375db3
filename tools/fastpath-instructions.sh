#!/usr/bin/env bash
# Instructions per malloc+free pair of SIZE bytes (default 64) under each
# allocator present, counted by callgrind: the difference between 2M and 1M
# pairs, divided by 1M, so start-up cancels out. The loop's own ~9
# instructions are included. Needs valgrind.
#   tools/fastpath-instructions.sh [SIZE] [path/to/libshoal.so]
set -eu
size=${1:-64}
shoal=${2:-$(dirname "$0")/../build/libshoal.so}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -fno-builtin "$(dirname "$0")/fastpath.c" -o "$work/fastpath"
lib=/usr/lib/x86_64-linux-gnu
count() { # preload iterations keep
  env ${1:+LD_PRELOAD=$1} valgrind --tool=callgrind --callgrind-out-file="$work/out" \
    "$work/fastpath" "$2" "$size" "$3" 2>&1 | awk '/Collected/ {print $4}'
}
printf '%-10s %14s %14s\n' allocator 'page kept' 'page emptied'
for entry in "shoal:$shoal" "mimalloc:$lib/libmimalloc.so.2" "jemalloc:$lib/libjemalloc.so.2" \
             "tcmalloc:$lib/libtcmalloc_minimal.so.4" "glibc:"; do
  name=${entry%%:*} path=${entry#*:}
  [ -z "$path" ] || [ -f "$path" ] || continue
  row=$name
  for keep in 1 0; do
    a=$(count "$path" 1000000 $keep) b=$(count "$path" 2000000 $keep)
    row="$row $(( (b - a) / 1000000 ))"
  done
  printf '%-10s %14s %14s\n' $row
done
