#!/bin/bash
# Installs shoal from the build tree into a scratch prefix (what
# `make install PREFIX=...` does), then builds a program against the
# installed copy twice: with `pkg-config --cflags --libs shoal` and with a
# CMake project using find_package(shoal) and shoal::shoal. Both programs
# must run from the installed library and allocate from shoal.
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

[ "$failed" -eq 0 ] && echo "install: passed"
exit "$failed"
