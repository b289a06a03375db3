#!/bin/bash
# packaging.sh SOURCE_DIR BUILD_DIR — what the packages say about shoal
# agrees with shoal:
#   - the version is written once, in VERSION: the build (shoal.pc),
#     include/shoal.h, debian/changelog and the Lazarus package
#     pascal/lazshoalmm.lpk must all say the same;
#   - the manual pages cover what they document: shoal(3) every function of
#     include/shoal.h, every option, every SHOAL_* variable the library reads
#     and every statistics field; shoal(1) every flag of `shoal run`; and
#     both render without a warning from man (as lintian checks them).
set -u
source_dir=$1
build_dir=$2
failed=0
fail() {
  echo "FAIL $*"
  failed=1
}

version=$(head -n 1 "$source_dir/VERSION")
if [[ $version =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]]; then
  major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]} patch=${BASH_REMATCH[3]}
  echo "ok   VERSION: $version"
else
  fail "VERSION holds '$version', not MAJOR.MINOR.PATCH"
  exit 1
fi

pc_version=$(sed -n 's/^Version: //p' "$build_dir/shoal.pc")
[ "$pc_version" = "$version" ] || fail "the build's shoal.pc says $pc_version (reconfigure: cmake reads VERSION)"

header=$source_dir/include/shoal.h
header_version=$(for part in MAJOR MINOR PATCH; do
  sed -n "s/^#define SHOAL_VERSION_$part \\([0-9]*\\).*/\\1/p" "$header"
done | paste -sd.)
[ "$header_version" = "$version" ] ||
  fail "include/shoal.h says $header_version (SHOAL_VERSION_MAJOR/MINOR/PATCH), VERSION $version"

changelog_version=$(sed -n '1s/^shoal (\([^)]*\)).*/\1/p' "$source_dir/debian/changelog")
[ "$changelog_version" = "$version" ] ||
  fail "debian/changelog is at '$changelog_version', VERSION at $version: add a changelog entry"

# <Version Major=".." Minor=".." Release=".."/>: an attribute left out is 0.
lpk_line=$(grep -o '<Version Major[^>]*>\|<Version Minor[^>]*>\|<Version Release[^>]*>' \
  "$source_dir/pascal/lazshoalmm.lpk" | head -n 1)
lpk_part() { echo "$lpk_line" | sed -n "s/.*$1=\"\\([0-9]*\\)\".*/\\1/p"; }
lpk_version="$(lpk_part Major).$(lpk_part Minor).$(lpk_part Release)"
lpk_version=$(echo "$lpk_version" | sed 's/^\./0./; s/\.\./.0./; s/\.$/.0/')
[ "$lpk_version" = "$major.$minor.$patch" ] ||
  fail "pascal/lazshoalmm.lpk is version $lpk_version ($lpk_line), VERSION $version"
[ $failed -eq 0 ] && echo "ok   shoal.pc, shoal.h, debian/changelog and lazshoalmm.lpk are at $version"

# The manual pages against what they document.
man3=$source_dir/man/shoal.3
man1=$source_dir/man/shoal.1
# Roff writes '-' as '\-': compare with the escapes taken out.
plain3=$(sed 's/\\-/-/g' "$man3")
plain1=$(sed 's/\\-/-/g' "$man1")
missing=()
for name in $(sed -n 's/^SHOAL_API .*[ *]\(shoal_[a-z_]*\)(.*/\1/p' "$header"); do
  grep -q "\\b$name\\b" <<<"$plain3" || missing+=("$name")
done
for name in $(sed -n 's/^ *SHOAL_OPTION_\([A-Z_]*\),.*/\1/p' "$header" | grep -vx COUNT); do
  grep -q "SHOAL_OPTION_$name\\b" <<<"$plain3" || missing+=("SHOAL_OPTION_$name")
  grep -q "^\\.B SHOAL_$name\$" <<<"$plain3" || missing+=("SHOAL_$name (ENVIRONMENT)")
done
for name in $(sed -n 's/^ *X(\([a-z_]*\), .*/\1/p' "$header"); do
  grep -q "\\b$name\\b" <<<"$plain3" || missing+=("$name (statistics)")
done
# Every variable the shoal command's help names, SHOAL_LIBRARY (the
# command's own, in shoal(1)) aside.
for name in $(grep -o '^  SHOAL_[A-Z_]*' "$source_dir/tools/shoal" | sort -u); do
  [ "$name" = SHOAL_LIBRARY ] && continue
  grep -q "^\\.B $name\$" <<<"$plain3" || missing+=("$name (ENVIRONMENT)")
done
[ ${#missing[@]} -eq 0 ] && echo "ok   shoal(3) covers the API, options, variables and statistics" ||
  fail "shoal(3) does not document: ${missing[*]}"

missing=()
help_run=$(sed -n '/^help_run()/,/^}/p' "$source_dir/tools/shoal")
for flag in $(grep -o '^  --[a-z-]*' <<<"$help_run" | sort -u); do
  grep -q -- "$flag" <<<"$plain1" || missing+=("$flag")
done
grep -q 'SHOAL_LIBRARY' <<<"$plain1" || missing+=(SHOAL_LIBRARY)
[ ${#missing[@]} -eq 0 ] && echo "ok   shoal(1) covers every flag of shoal run" ||
  fail "shoal(1) does not document: ${missing[*]}"

if command -v man >/dev/null; then
  for page in "$man1" "$man3"; do
    warnings=$(LC_ALL=C.UTF-8 MANROFFSEQ='' MANWIDTH=80 man --warnings -E UTF-8 -l -Tutf8 -Z "$page" 2>&1 >/dev/null)
    [ -z "$warnings" ] && echo "ok   man renders $(basename "$page") without a warning" ||
      fail "man $(basename "$page"): $warnings"
  done
else
  echo "skipped: man is not installed, the pages are not rendered"
fi

[ $failed -eq 0 ] && echo "packaging: passed"
exit $failed
