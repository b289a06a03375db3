#!/bin/bash
# Installs shoal from the build tree into a scratch prefix (what
# `make install PREFIX=...` does), then builds a program against the
# installed copy twice: with `pkg-config --cflags --libs shoal` and with a
# CMake project using find_package(shoal) and shoal::shoal. Both programs
# must run from the installed library and allocate from shoal. The installed
# `shoal` command must preload the installed library, from a moved prefix too.
#
# usage: install.sh <build dir> <dir of the consumer project>
set -u
build=$1
consumer=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
prefix=$scratch/prefix
failed=0

fail() {
  echo "FAIL $*"
  failed=1
}

if ! cmake --install "$build" --prefix "$prefix" >"$scratch/install.log" 2>&1; then
  cat "$scratch/install.log"
  echo "FAIL cmake --install"
  exit 1
fi
libdir=$(dirname "$(find "$prefix" -name 'libshoal.so' | head -n 1)")
for file in include/shoal.h "${libdir#"$prefix"/}/libshoal.a" "${libdir#"$prefix"/}/pkgconfig/shoal.pc" \
  "${libdir#"$prefix"/}/cmake/shoal/shoalConfig.cmake"; do
  [ -e "$prefix/$file" ] || fail "not installed: $file"
done

# pkg-config
if command -v pkg-config >/dev/null; then
  flags=$(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs shoal)
  # shellcheck disable=SC2086 # flags are words
  if cc -o "$scratch/use_pkgconfig" "$consumer/use_shoal.c" $flags 2>"$scratch/cc.log"; then
    if output=$(LD_LIBRARY_PATH=$libdir "$scratch/use_pkgconfig"); then
      echo "ok   pkg-config build: $output"
    else
      fail "pkg-config build runs but is not on shoal: $output"
    fi
    # It must really load the installed copy, not one from the build tree.
    LD_LIBRARY_PATH=$libdir ldd "$scratch/use_pkgconfig" | grep -q "$libdir/libshoal.so" ||
      fail "pkg-config build does not load $libdir/libshoal.so"
  else
    cat "$scratch/cc.log"
    fail "pkg-config build (flags: $flags)"
  fi
else
  echo "skipped: pkg-config not installed"
fi

# find_package(shoal) + shoal::shoal
if cmake -S "$consumer" -B "$scratch/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$scratch/configure.log" 2>&1 &&
  cmake --build "$scratch/consumer" >"$scratch/build.log" 2>&1; then
  if output=$(LD_LIBRARY_PATH=$libdir "$scratch/consumer/use_shoal"); then
    echo "ok   find_package build: $output"
  else
    fail "find_package build runs but is not on shoal: $output"
  fi
else
  cat "$scratch/configure.log" "$scratch/build.log" 2>/dev/null | tail -n 30
  fail "find_package(shoal) build"
fi

# The shoal command: installed in bin/, it preloads the installed library
# (found relative to itself, so a moved prefix works too) and runs programs.
check_shoal_command() {
  local root=$1 shoal=$1/bin/shoal preload want
  want="$(cd "$root/${libdir#"$prefix"/}" && pwd -P)/libshoal.so"
  if [ ! -x "$shoal" ]; then
    fail "not installed: bin/shoal"
    return
  fi
  if env -u SHOAL_LIBRARY -u LD_PRELOAD "$shoal" run -- true; then
    echo "ok   $shoal run -- true"
  else
    fail "$shoal run -- true: status $?"
  fi
  # shellcheck disable=SC2016 # expanded by the program's shell
  preload=$(env -u SHOAL_LIBRARY -u LD_PRELOAD "$shoal" run sh -c 'echo "$LD_PRELOAD"')
  if [ "$preload" = "$want" ]; then
    echo "ok   $shoal preloads $preload"
  else
    fail "$shoal preloads '$preload', not $want"
  fi
}
check_shoal_command "$prefix"
cp -a "$prefix" "$scratch/moved"
check_shoal_command "$scratch/moved"
if output=$(env -u SHOAL_LIBRARY "$prefix/bin/shoal" bench 2>&1); then
  fail "installed shoal bench runs without a source checkout"
elif [ "$(echo "$output" | wc -l)" -eq 1 ]; then
  echo "ok   installed shoal bench: $output"
else
  fail "installed shoal bench says more than one line: $output"
fi

[ "$failed" -eq 0 ] && echo "install: passed"
exit "$failed"
