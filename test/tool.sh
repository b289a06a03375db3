#!/bin/bash
# The shoal command (tools/shoal): `shoal run` really preloads libshoal and
# sets the environment each flag names, passes arguments and the exit status
# through; every flag and variable is in the help; a wrong flag or command is
# one line on stderr and exit status 2; the library is found beside a source
# checkout; `shoal bench` without one says so in one line.
#
# usage: SHOAL_LIBRARY=<libshoal.so> tool.sh <source dir> <shoal_probe>
set -euo pipefail
source_dir=$1
probe=$2
shoal=$source_dir/tools/shoal
: "${SHOAL_LIBRARY:?tool.sh needs SHOAL_LIBRARY set to the libshoal.so of the build}"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
unset SHOAL_STATS SHOAL_LEAKS SHOAL_LEAKS_FILE SHOAL_REPORT_FILE SHOAL_LEAKS_SAMPLE SHOAL_CHECK SHOAL_CHECK_QUARANTINE \
  SHOAL_CONTENTION SHOAL_VERBOSE SHOAL_ABORT_ON_ERROR LD_PRELOAD
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

# run_shoal ARGS...: runs the command; its stdout, stderr and status land in
# $scratch/out, $scratch/err and $status.
run_shoal() {
  status=0
  "$shoal" "$@" >"$scratch/out" 2>"$scratch/err" </dev/null || status=$?
}

# expect_usage_error DESCRIPTION ARGS...: exactly one line on stderr naming
# `shoal --help`, nothing on stdout, status 2.
expect_usage_error() {
  local what=$1
  shift
  run_shoal "$@"
  if [ "$status" -eq 2 ] && [ "$(wc -l <"$scratch/err")" -eq 1 ] && [ ! -s "$scratch/out" ] &&
    grep -q '^shoal: .*(see shoal --help)$' "$scratch/err"; then
    ok "$what: $(cat "$scratch/err")"
  else
    fail "$what: status $status (want 2), stderr:"
    sed 's/^/  /' "$scratch/err" "$scratch/out"
  fi
}

# shoal run really makes shoal the allocator, with and without `--`.
for separator in "--" ""; do
  run_shoal run ${separator:+"$separator"} "$probe"
  if [ "$status" -eq 0 ] && grep -q 'shoal in use: yes' "$scratch/out"; then
    ok "shoal run ${separator:+-- }shoal_probe: shoal is the allocator"
  else
    fail "shoal run ${separator:+-- }shoal_probe (status $status): $(cat "$scratch/out" "$scratch/err")"
  fi
done
if "$probe" >/dev/null 2>&1; then fail "shoal_probe claims shoal without shoal run"; fi

# Each flag sets its variable in the program's environment.
run_shoal run --stats --leaks --leaks-file "$scratch/leaks file" --check --contention=$scratch/contention \
  --verbose --option purge_delay=5 --option=HUGE-CACHE=1M --option SHOAL_LEAKS_SAMPLE=64 -- env
for expected in SHOAL_STATS=1 SHOAL_LEAKS=1 "SHOAL_LEAKS_FILE=$scratch/leaks file" SHOAL_CHECK=1 \
  "SHOAL_CONTENTION=$scratch/contention" SHOAL_VERBOSE=1 SHOAL_PURGE_DELAY=5 SHOAL_HUGE_CACHE=1M \
  SHOAL_LEAKS_SAMPLE=64; do
  if grep -qxF -- "$expected" "$scratch/out"; then
    ok "environment has $expected"
  else
    fail "environment lacks $expected (status $status): $(grep '^SHOAL_' "$scratch/out" | tr '\n' ' ')"
  fi
done
run_shoal run --stats=json --leaks=all --leaks-file=x --contention=y --trace=z -- env
for expected in SHOAL_STATS=json SHOAL_LEAKS=all SHOAL_LEAKS_FILE=x SHOAL_CONTENTION=y SHOAL_TRACE=z; do
  if grep -qxF "$expected" "$scratch/out"; then
    ok "environment has $expected"
  else
    fail "environment lacks $expected: $(grep '^SHOAL_' "$scratch/out" | tr '\n' ' ')"
  fi
done
run_shoal run --report "$scratch/report" --contention -- env
for expected in "SHOAL_REPORT_FILE=$scratch/report" SHOAL_CONTENTION=1; do
  if grep -qxF "$expected" "$scratch/out"; then
    ok "environment has $expected"
  else
    fail "environment lacks $expected: $(grep '^SHOAL_' "$scratch/out" | tr '\n' ' ')"
  fi
done
run_shoal run -- env
if grep -q '^SHOAL_\(STATS\|LEAKS\|CHECK\|CONTENTION\|VERBOSE\)' "$scratch/out"; then
  fail "shoal run without flags sets: $(grep '^SHOAL_' "$scratch/out" | tr '\n' ' ')"
else
  ok "no flag, no diagnostics variable"
fi
# The library reads what the flag sets: SHOAL_VERBOSE=1 makes it talk.
run_shoal run --verbose true
if [ "$status" -eq 0 ] && grep -q '^shoal: ' "$scratch/err"; then
  ok "--verbose: the library reports on stderr"
else
  fail "--verbose: the library says nothing (status $status)"
fi

# Every option of src/core/options.c, and each one the brief names, is accepted.
options=$(sed -n 's/.*{"\([A-Z_]*\)", .*/\1/p' "$source_dir/src/core/options.c")
[ -n "$options" ] || fail "no option names found in src/core/options.c"
for name in $(printf '%s\n' "$options" LEAKS_SAMPLE CHECK_QUARANTINE | sort -u); do
  run_shoal run --option "${name,,}=7" -- sh -c "echo \"\$SHOAL_$name\""
  if [ "$status" -eq 0 ] && [ "$(cat "$scratch/out")" = 7 ]; then
    ok "--option ${name,,}=7 sets SHOAL_$name"
  else
    fail "--option ${name,,}=7 (status $status): $(cat "$scratch/out" "$scratch/err")"
  fi
done

# LD_PRELOAD: libshoal first, what was there kept after it.
library_path="$(cd "$(dirname "$SHOAL_LIBRARY")" && pwd -P)/$(basename "$SHOAL_LIBRARY")"
status=0
# shellcheck disable=SC2016 # expanded by the program's shell
output=$(LD_PRELOAD=/nonexistent/libother.so "$shoal" run sh -c 'echo "$LD_PRELOAD"' 2>/dev/null) || status=$?
if [ "$status" -eq 0 ] && [ "$output" = "$library_path:/nonexistent/libother.so" ]; then
  ok "LD_PRELOAD prepended: $output"
else
  fail "LD_PRELOAD is '$output' (status $status), want $library_path:/nonexistent/libother.so"
fi

# Arguments and exit status pass through untouched.
# shellcheck disable=SC2016 # not to be expanded
run_shoal run -- printf '%s|' 'a b' '' -x '$HOME' '*'
# shellcheck disable=SC2016 # not to be expanded
if [ "$(cat "$scratch/out")" = 'a b||-x|$HOME|*|' ]; then
  ok "arguments pass through unchanged"
else
  fail "arguments changed: $(cat "$scratch/out")"
fi
for code in 0 1 7 42; do
  run_shoal run sh -c "exit $code"
  if [ "$status" -eq "$code" ]; then
    ok "exit status $code passes through"
  else
    fail "exit status $status, the program's was $code"
  fi
done
# In a command substitution, so that bash's "Terminated" notice goes nowhere.
# shellcheck disable=SC2016 # expanded by the program's shell
status=$({ "$shoal" run sh -c 'kill -TERM $$' || echo $?; } 2>/dev/null)
if [ "$status" -eq 143 ]; then
  ok "death by SIGTERM passes through (143)"
else
  fail "SIGTERM: status $status, want 143"
fi
# A program exec cannot run (main is a function of tools/shoal, not a
# program): one line and the status a shell gives.
touch "$scratch/not-executable"
for case in "127 no-such-program-here" "127 main" "127 $scratch/no-such-file" \
  "126 $scratch/not-executable" "126 $scratch"; do
  run_shoal run "${case#* }"
  if [ "$status" -eq "${case%% *}" ] && [ "$(wc -l <"$scratch/err")" -eq 1 ]; then
    ok "cannot run: $status, $(cat "$scratch/err")"
  else
    fail "cannot run ${case#* }: status $status (want ${case%% *}), stderr: $(cat "$scratch/err")"
  fi
done

# Help: every command, flag and variable.
run_shoal --help
cp "$scratch/out" "$scratch/help"
[ "$status" -eq 0 ] || fail "shoal --help: status $status"
run_shoal run --help
cp "$scratch/out" "$scratch/help-run"
[ "$status" -eq 0 ] || fail "shoal run --help: status $status"
for word in run bench version help --stats '--stats[=json]' '--leaks[=all]' --report SHOAL_REPORT_FILE --leaks-file --check '--contention[=FILE]' --trace SHOAL_TRACE \
  --verbose --option --help SHOAL_STATS SHOAL_LEAKS SHOAL_LEAKS_FILE SHOAL_LEAKS_SAMPLE SHOAL_CHECK \
  SHOAL_CHECK_QUARANTINE SHOAL_CONTENTION SHOAL_PURGE_DELAY SHOAL_PURGE_LIMIT SHOAL_HUGE_CACHE \
  SHOAL_ABORT_ON_ERROR SHOAL_VERBOSE SHOAL_REALLOC_GROWTH SHOAL_HUGE_PAGES SHOAL_MEDIUM_POOL SHOAL_LIBRARY; do
  grep -qF -- "$word" "$scratch/help" || fail "shoal --help does not mention $word"
done
for word in '--stats[=json]' '--leaks[=all]' --report --leaks-file --check '--contention[=FILE]' --trace --verbose --option --help \
  PURGE_DELAY PURGE_LIMIT HUGE_CACHE ABORT_ON_ERROR VERBOSE REALLOC_GROWTH LEAKS_SAMPLE CHECK_QUARANTINE \
  HUGE_PAGES MEDIUM_POOL; do
  grep -qF -- "$word" "$scratch/help-run" || fail "shoal run --help does not mention $word"
done
for name in $options; do
  grep -qF -- "SHOAL_$name" "$scratch/help" || fail "shoal --help does not mention SHOAL_$name (src/core/options.c)"
  grep -qw -- "$name" "$scratch/help-run" || fail "shoal run --help does not mention $name (src/core/options.c)"
done
ok "shoal --help and shoal run --help mention every flag and variable"
for args in "help" "-h" "help run" "help bench" "help version" "help help" "bench --help" "version --help" \
  "help --help" "run -h"; do
  # shellcheck disable=SC2086 # words
  run_shoal $args
  if [ "$status" -eq 0 ] && [ -s "$scratch/out" ] && [ ! -s "$scratch/err" ]; then
    ok "shoal $args: $(head -n 1 "$scratch/out")"
  else
    fail "shoal $args: status $status or no text"
  fi
done
run_shoal version
if [ "$status" -eq 0 ] && head -n 1 "$scratch/out" | grep -qx 'shoal [0-9]*\.[0-9]*\.[0-9]*' &&
  grep -qF "$library_path" "$scratch/out"; then
  ok "version: $(tr '\n' ' ' <"$scratch/out")"
else
  fail "version (status $status): $(cat "$scratch/out" "$scratch/err")"
fi

# Wrong input: one line, status 2.
expect_usage_error "unknown run flag" run --foo true
expect_usage_error "unknown run flag after others" run --stats --bar -- true
expect_usage_error "program after run missing" run
expect_usage_error "program after run -- missing" run --check --
expect_usage_error "unknown command" frobnicate
expect_usage_error "unknown top-level flag" --frobnicate
expect_usage_error "no command"
expect_usage_error "unknown option name" run --option NO_SUCH_OPTION=1 true
expect_usage_error "--option without =" run --option PURGE_DELAY true
expect_usage_error "--stats with a bad value" run --stats=xml true
expect_usage_error "--leaks with a bad value" run --leaks=some true
expect_usage_error "--leaks-file without its value" run --leaks-file
expect_usage_error "--contention with an empty value" run --contention= true
expect_usage_error "help for an unknown command" help frobnicate
expect_usage_error "version with an argument" version now

# Found beside a source checkout: <checkout>/tools/shoal uses
# <checkout>/build/libshoal.so when SHOAL_LIBRARY is unset; without it, or
# without bench/, one line and status 1.
# expect_one_line DESCRIPTION STATUS PATTERN COMMAND...: COMMAND ends with
# STATUS and prints one line (stdout and stderr) matching PATTERN.
expect_one_line() {
  local what=$1 want=$2 pattern=$3
  shift 3
  status=0
  "$@" >"$scratch/out" 2>&1 </dev/null || status=$?
  if [ "$status" -eq "$want" ] && [ "$(wc -l <"$scratch/out")" -eq 1 ] && grep -q -- "$pattern" "$scratch/out"; then
    ok "$what: $(cat "$scratch/out")"
  else
    fail "$what: status $status (want $want), output:"
    sed 's/^/  /' "$scratch/out"
  fi
}
mkdir -p "$scratch/checkout/tools" "$scratch/checkout/build"
cp "$shoal" "$scratch/checkout/tools/shoal"
expect_one_line "checkout without build/libshoal.so" 1 'libshoal.so' \
  env -u SHOAL_LIBRARY "$scratch/checkout/tools/shoal" run "$probe"
ln -s "$library_path" "$scratch/checkout/build/libshoal.so"
expect_one_line "checkout/build/libshoal.so found without SHOAL_LIBRARY" 0 'shoal in use: yes' \
  env -u SHOAL_LIBRARY "$scratch/checkout/tools/shoal" run "$probe"
expect_one_line "SHOAL_LIBRARY pointing nowhere" 1 'missing.so' \
  env SHOAL_LIBRARY="$scratch/missing.so" "$shoal" run true
expect_one_line "bench without a source tree" 1 'source checkout' "$scratch/checkout/tools/shoal" bench --tiny

echo "tool: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
