#!/bin/sh
# static-globals.sh NM EXPORTS_OBJECT OUT — the names libshoal.a keeps
# global on Windows: the standard ones exports.c defines, the API, and the
# defaults of weak references (COFF resolves a weak reference the program
# leaves undefined to its .weak.*.default symbol, which must stay global).
# objcopy --wildcard --keep-global-symbols reads the list.
set -e
"$1" -g --defined-only "$2" | awk 'NF == 3 && $3 !~ /^shoal_/ && $3 !~ /^\.weak\./ {print $3}' >"$3"
printf '%s\n' 'shoal_*' '.weak.*' >>"$3"
