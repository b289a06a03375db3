#!/usr/bin/env bash
# bench/windows/purge.sh [WIN_BUILD_DIR] — purge_methods.c built for Win64
# and run under Wine (in WIN_BUILD_DIR/wine, default build-win/wine, the
# prefix make test-windows makes): the table of how MEM_RESET,
# DiscardVirtualMemory and decommit + commit give 64 MiB back and how fast
# it faults in again, as in bench/results/2026-11-25-windows.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../../build-win}" && pwd)
gcc_dir=$(ls -d /usr/lib/gcc/x86_64-w64-mingw32/*-posix | head -n 1)
clang --target=x86_64-w64-windows-gnu -O2 -Wall -Wextra -Werror -fuse-ld=lld -L"$gcc_dir" \
  "$here/purge_methods.c" -o "$build/purge_methods.exe"
WINEPREFIX=${WINEPREFIX:-$build/wine} WINEDEBUG=-all "${WINE:-/usr/lib/wine/wine64}" \
  "$build/purge_methods.exe" | tr -d '\r'
