#!/bin/bash
# Real programs under LD_PRELOAD=libshoal.so must behave as without it: the
# same stdout and the same exit status (python3, perl, git, bash, sqlite3, a
# multi-threaded C++ program, gcc). First it proves that shoal really is the
# allocator under LD_PRELOAD. A program that is not installed is skipped
# with a line saying so (.ci/run installs them all).
#
# usage: programs.sh <libshoal.so> <shoal_probe> <mt_cxx> <programs dir>
set -u
library=$1
probe=$2
mt_cxx=$3
programs=$4
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
unset SHOAL_ABORT_ON_ERROR SHOAL_VERBOSE
passed=0
failed=0
skipped=0

fail() {
  echo "FAIL $*"
  failed=$((failed + 1))
}

# compare NAME COMMAND...: runs COMMAND plainly and under LD_PRELOAD; stdout
# and exit status must match.
compare() {
  local name=$1 plain_status shoal_status
  shift
  "$@" >"$scratch/plain.out" 2>"$scratch/plain.err" </dev/null
  plain_status=$?
  LD_PRELOAD=$library "$@" >"$scratch/shoal.out" 2>"$scratch/shoal.err" </dev/null
  shoal_status=$?
  if [ "$plain_status" -ne "$shoal_status" ]; then
    fail "$name: exit status $shoal_status under shoal, $plain_status without"
    tail -n 20 "$scratch/shoal.err" | sed 's/^/  stderr under shoal: /'
  elif ! cmp -s "$scratch/plain.out" "$scratch/shoal.out"; then
    fail "$name: stdout differs under shoal"
    diff "$scratch/plain.out" "$scratch/shoal.out" | head -n 20 | sed 's/^/  /'
    tail -n 5 "$scratch/shoal.err" | sed 's/^/  stderr under shoal: /'
  elif [ ! -s "$scratch/plain.out" ] && [ "$plain_status" -ne 0 ]; then
    fail "$name: fails without shoal too (status $plain_status), nothing was compared"
    tail -n 5 "$scratch/plain.err" | sed 's/^/  stderr: /'
  else
    echo "ok   $name ($(wc -l <"$scratch/plain.out") lines, status $plain_status)"
    passed=$((passed + 1))
  fi
}

# status_zero NAME COMMAND...: for output with timings in it (test runners),
# only the exit status is compared, and it must be 0 both ways.
status_zero() {
  local name=$1
  shift
  if ! "$@" >"$scratch/plain.out" 2>&1 </dev/null; then
    fail "$name: fails without shoal"
    tail -n 10 "$scratch/plain.out" | sed 's/^/  /'
  elif ! LD_PRELOAD=$library "$@" >"$scratch/shoal.out" 2>&1 </dev/null; then
    fail "$name: fails under shoal"
    tail -n 20 "$scratch/shoal.out" | sed 's/^/  /'
  else
    echo "ok   $name (exit status 0 both ways)"
    passed=$((passed + 1))
  fi
}

have() {
  if command -v "$1" >/dev/null 2>&1; then return 0; fi
  echo "skipped: $1 not installed"
  skipped=$((skipped + 1))
  return 1
}

# Shoal is really in use under LD_PRELOAD, and not without it.
if LD_PRELOAD=$library "$probe" >"$scratch/probe" 2>&1 && grep -q 'shoal in use: yes' "$scratch/probe"; then
  echo "ok   probe: shoal is the allocator under LD_PRELOAD"
  passed=$((passed + 1))
else
  fail "probe: shoal is not in use under LD_PRELOAD: $(cat "$scratch/probe")"
fi
if "$probe" >/dev/null 2>&1; then fail "probe: claims shoal without LD_PRELOAD"; fi

if have python3; then
  # The interpreter itself, not a version manager's wrapper script in front
  # of it (pyenv's shims cost a second a run).
  python=$(python3 -c 'import sys; print(sys.executable)')
  # Inside Python too: the process's malloc is shoal's.
  owned=$(LD_PRELOAD=$library "$python" -c '
import ctypes
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.shoal_owns.argtypes = [ctypes.c_void_p]
block = libc.malloc(100)
print(bool(libc.shoal_owns(block)))' 2>&1)
  if [ "$owned" = True ]; then
    echo "ok   python3 allocates from shoal"
    passed=$((passed + 1))
  else
    fail "python3 under LD_PRELOAD does not allocate from shoal: $owned"
  fi
  compare "python3 workload.py" "$python" "$programs/workload.py"
  status_zero "python3 -m unittest test_workload" \
    "$python" -m unittest discover -s "$programs" -p 'test_workload.py' -q
  stdlib_tests=""
  for module in test_collections test_re; do
    "$python" -c "import test.$module" >/dev/null 2>&1 && stdlib_tests="$stdlib_tests $module"
  done
  if [ -n "$stdlib_tests" ]; then
    # shellcheck disable=SC2086 # one word per module
    status_zero "python3 -m test$stdlib_tests" "$python" -m test -q $stdlib_tests
  else
    echo "skipped: python3's own test suite is not installed"
    skipped=$((skipped + 1))
  fi
fi
if have perl; then compare "perl workload.pl" perl "$programs/workload.pl"; fi
if have git; then compare "git init/add/commit/log/diff/gc" bash "$programs/git_workload.sh"; fi
if have bash; then compare "bash workload.sh" bash "$programs/workload.sh"; fi
if have sqlite3; then compare "sqlite3 workload.sql" sqlite3 :memory: ".read $programs/workload.sql"; fi
compare "mt_cxx (4 threads, cross-thread handoff)" "$mt_cxx"
if have gcc; then compare "gcc compiles and runs hello.c" bash "$programs/gcc_workload.sh"; fi

echo "programs: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
