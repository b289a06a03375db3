#!/bin/bash
# gcc compiles hello.c (its driver, cc1, as and ld all run under whatever
# LD_PRELOAD is in effect), then the program runs.
set -eu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -Wall -o "$work/hello" "$(dirname "$0")/hello.c"
"$work/hello"
