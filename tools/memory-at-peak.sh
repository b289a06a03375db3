#!/usr/bin/env bash
# Where a program's resident memory sits at its RSS peak under shoal: class
# pages (resident, carved, handed out: held by the program, or freed and on
# their way back), large blocks, free slices waiting
# for their purge, headers, huge blocks, the rest (tools/memory-at-peak.c
# says how it reads them). The probe is built against this tree's headers:
# watch a library built from the same tree.
#   tools/memory-at-peak.sh [-l path/to/libshoal.so] PROGRAM [ARGUMENT...]
#   tools/memory-at-peak.sh build/bench/larson full 64 sized
# MEMORY_AT_PEAK_CLASSES=1 adds a row per class (with the free slices its
# pages gave back, still resident), MEMORY_AT_PEAK_HEAPS=N the
# N heaps holding most, MEMORY_AT_PEAK_MS the sampling period (20).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
library=$root/build/libshoal.so
if [ "${1:-}" = -l ]; then
  library=$2
  shift 2
fi
[ $# -ge 1 ] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ -f "$library" ] || { echo "memory-at-peak: no $library (run make)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -std=c11 -Wall -Wextra -Werror -shared -fPIC -pthread -I"$root/include" -I"$root/src" \
  "$root/tools/memory-at-peak.c" -o "$work/memory-at-peak.so"
LD_PRELOAD="$library $work/memory-at-peak.so" "$@"
