#!/bin/bash
# package.sh DEB_DIR — the Debian packages of `make deb` on this machine:
# installed over an older shoal (an upgrade), used (a C program built with
# pkg-config and one with find_package, `shoal run` on python3, the manual
# pages), then purged; every file that `dpkg -L` listed must be gone again,
# or be what was there before (shared folders such as /usr/lib/<triplet>).
#
# The older shoal is made here from the new packages: version VERSION~old
# and one file more (in libshoal-dev), which the upgrade must take away.
#
# Installs packages, so it runs as root (make deb-test, or CI), and refuses
# to run where a shoal package is already installed: it purges what it
# installs, also when a check fails, and must not take anyone's own.
set -u
deb_dir=${1:?usage: package.sh DEB_DIR}
here=$(cd "$(dirname "$0")" && pwd)
packages=(libshoal0 libshoal-dev shoal)
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
die() {
  echo "package: $*" >&2
  exit 1
}

[ "$(id -u)" -eq 0 ] || die "installs packages: run as root (sudo make deb-test)"
for tool in dpkg dpkg-deb pkg-config cc cmake python3; do
  command -v "$tool" >/dev/null || die "needs $tool (tools/deps deb installs it)"
done
for package in "${packages[@]}"; do
  if dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed"; then
    die "$package is already installed here; remove it first (apt-get purge ${packages[*]})"
  fi
done
debs=()
for package in "${packages[@]}"; do
  deb=$(ls "$deb_dir/${package}_"*.deb 2>/dev/null | head -n 1)
  [ -n "$deb" ] || die "no ${package}_*.deb in $deb_dir: run make deb first"
  debs+=("$deb")
done
version=$(dpkg-deb -f "${debs[0]}" Version)
old_version="$version~old"

scratch=$(mktemp -d)
cleanup() {
  dpkg --purge "${packages[@]}" >/dev/null 2>&1
  rm -rf "$scratch"
}
trap cleanup EXIT
export DEBIAN_FRONTEND=noninteractive

# Every path the packages hold, and whether it is here before they are.
for deb in "${debs[@]}"; do
  dpkg-deb --fsys-tarfile "$deb" | tar -t | sed -e 's|^\./|/|' -e 's|/$||' | grep -v '^/\?$'
done | sort -u >"$scratch/paths"
while read -r path; do
  [ -e "$path" ] || [ -L "$path" ] && echo "$path"
done <"$scratch/paths" >"$scratch/before"

# The older shoal.
libdir=$(dpkg-deb -c "${debs[0]}" | sed -n 's|.*\./\(usr/lib/[^/]*\)/libshoal\.so\.[0-9][0-9.]*$|\1|p' | head -n 1)
[ -n "$libdir" ] || die "no libshoal.so.N in ${debs[0]}"
old_only=/$libdir/cmake/shoal/shoalOldOnly.cmake
old_debs=()
for deb in "${debs[@]}"; do
  package=$(dpkg-deb -f "$deb" Package)
  tree=$scratch/old/$package
  mkdir -p "$scratch/old"
  dpkg-deb -R "$deb" "$tree" || die "dpkg-deb -R $deb"
  sed -i -e "s/^Version: .*/Version: $old_version/" -e "s/(= $version)/(= $old_version)/g" \
    "$tree/DEBIAN/control"
  if [ "$package" = libshoal-dev ]; then
    echo "# shipped by the older shoal only" >"$tree$old_only"
  fi
  dpkg-deb --root-owner-group -b "$tree" "$scratch/${package}_old.deb" >/dev/null ||
    die "dpkg-deb -b $tree"
  old_debs+=("$scratch/${package}_old.deb")
done

if dpkg -i "${old_debs[@]}" >"$scratch/log" 2>&1; then
  ok "older shoal $old_version installed"
else
  cat "$scratch/log"
  die "the older shoal does not install"
fi
[ -e "$old_only" ] || fail "the older shoal has no $old_only"

# The upgrade.
if dpkg -i "${debs[@]}" >"$scratch/log" 2>&1; then
  ok "upgraded to $version"
else
  cat "$scratch/log"
  fail "dpkg -i over $old_version"
fi
for package in "${packages[@]}"; do
  installed=$(dpkg-query -W -f='${Version} ${Status}' "$package" 2>/dev/null)
  [ "$installed" = "$version install ok installed" ] || fail "$package after the upgrade: $installed"
done
audit=$(dpkg --audit 2>&1)
[ -z "$audit" ] && ok "dpkg --audit: nothing half-installed" || fail "dpkg --audit: $audit"
[ ! -e "$old_only" ] && ok "upgrade took away $old_only" || fail "$old_only still there after the upgrade"
for package in "${packages[@]}"; do dpkg -L "$package"; done | grep -vx "/\." | sort -u >"$scratch/listed"

# A C program built with pkg-config, and a CMake project with find_package.
flags=$(pkg-config --cflags --libs shoal 2>&1) || fail "pkg-config shoal: $flags"
# shellcheck disable=SC2086  # flags are words
if cc -o "$scratch/use_pkgconfig" "$here/install/use_shoal.c" $flags 2>"$scratch/log"; then
  output=$("$scratch/use_pkgconfig") && ok "pkg-config build ($flags): $output" ||
    fail "pkg-config build runs but not on shoal: $output"
  # /lib may be a link to /usr/lib: compare the files, not the names.
  loaded=$(ldd "$scratch/use_pkgconfig" | awk '$1 == "libshoal.so.0" { print $3 }')
  [ -n "$loaded" ] && [ "$(readlink -f "$loaded")" = "$(readlink -f "/$libdir/libshoal.so.0")" ] ||
    fail "pkg-config build loads '$loaded', not /$libdir/libshoal.so.0"
else
  cat "$scratch/log"
  fail "cc use_shoal.c $flags"
fi
if cmake -S "$here/install" -B "$scratch/cmake" -DCMAKE_BUILD_TYPE=Release >"$scratch/log" 2>&1 &&
  cmake --build "$scratch/cmake" >>"$scratch/log" 2>&1; then
  output=$("$scratch/cmake/use_shoal") && ok "find_package(shoal) build: $output" ||
    fail "find_package(shoal) build runs but not on shoal: $output"
else
  tail -n 20 "$scratch/log"
  fail "find_package(shoal) build"
fi

# shoal run: python3 under the installed library, and its statistics.
output=$(shoal run --stats -- python3 -c 'print(sum(len(str(i)) for i in range(100000)))' 2>"$scratch/err")
if [ "$output" = 488890 ] && grep -q "^shoal: statistics of process" "$scratch/err"; then
  ok "shoal run --stats -- python3: $output, statistics at exit"
else
  fail "shoal run -- python3: '$output', $(head -n 3 "$scratch/err")"
fi
# shellcheck disable=SC2016  # expanded by the program's shell
preload=$(shoal run sh -c 'echo "$LD_PRELOAD"')
[ "$preload" = "/$libdir/libshoal.so" ] && ok "shoal run preloads $preload" ||
  fail "shoal run preloads '$preload', not /$libdir/libshoal.so"
for page in /usr/share/man/man1/shoal.1.gz /usr/share/man/man3/shoal.3.gz; do
  grep -qx "$page" "$scratch/paths" || fail "no $page in the packages"
done
# A system may keep manual pages out (dpkg path-exclude, as slim images do).
if command -v man >/dev/null && [ -e /usr/share/man/man1/shoal.1.gz ]; then
  man -w shoal >/dev/null 2>&1 && man -w 3 shoal >/dev/null 2>&1 && ok "man shoal, man 3 shoal" ||
    fail "man does not find shoal(1) and shoal(3)"
else
  echo "skipped: man, or the manual pages on disk (dpkg path-exclude?)"
fi

# Without libshoal-dev, the command takes the runtime library by its soname.
dpkg --purge libshoal-dev >"$scratch/log" 2>&1 || fail "dpkg --purge libshoal-dev: $(cat "$scratch/log")"
# shellcheck disable=SC2016
preload=$(shoal run sh -c 'echo "$LD_PRELOAD"')
[ "$preload" = "/$libdir/libshoal.so.0" ] && ok "without libshoal-dev, shoal run preloads $preload" ||
  fail "without libshoal-dev, shoal run preloads '$preload', not /$libdir/libshoal.so.0"

# Purge: nothing the packages listed may stay, but what was there before.
if dpkg --purge shoal libshoal0 >"$scratch/log" 2>&1; then
  ok "purged"
else
  cat "$scratch/log"
  fail "dpkg --purge"
fi
for package in "${packages[@]}"; do
  dpkg -L "$package" >/dev/null 2>&1 && fail "dpkg -L $package still lists files after the purge"
done
while read -r path; do
  [ -e "$path" ] || [ -L "$path" ] && echo "$path"
done <"$scratch/listed" >"$scratch/after"
left=$(comm -23 "$scratch/after" "$scratch/before")
[ -z "$left" ] && ok "nothing left of $(wc -l <"$scratch/listed") paths dpkg -L listed" ||
  fail "left behind after the purge: $(echo "$left" | tr '\n' ' ')"
ldconfig -p | grep -q libshoal && fail "ldconfig still knows libshoal"

echo "package: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
