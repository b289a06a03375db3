#!/bin/bash
# Runs every case of the misuse program twice and checks shoal's reaction.
#
#   default (abort on error): the process dies of SIGABRT and stderr is
#     exactly one line: "shoal: <function>(): ..." naming the kind of misuse
#     and the bad address the case printed on stdout;
#   SHOAL_ABORT_ON_ERROR=0: the same line with " (ignored)" at its end, and
#     the program goes on and exits 0 (it checks itself that nothing changed).
#
# usage: misuse.sh <path to test_misuse> — or a command that runs it (Win64:
# test/wine-run.sh wine64 test_misuse.exe, where abort() is exit status 3,
# given as SHOAL_ABORT_STATUS)
set -u
misuse=("$@")
ulimit -c 0 # the aborts are expected; no core files
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failures=0

fail() {
  echo "FAIL $*"
  failures=$((failures + 1))
}

# check_case NAME FUNCTION KIND MODE
check_case() {
  local name=$1 function=$2 kind=$3 mode=$4 status expected_status
  if [ "$mode" = abort ]; then
    # The braces catch bash's own "Aborted" notice; the program's stderr is in err.
    { env -u SHOAL_ABORT_ON_ERROR "${misuse[@]}" "$name" >"$scratch/out" 2>"$scratch/err"; } 2>/dev/null
    status=$?
    expected_status=${SHOAL_ABORT_STATUS:-134} # 128 + SIGABRT
  else
    { SHOAL_ABORT_ON_ERROR=0 "${misuse[@]}" "$name" >"$scratch/out" 2>"$scratch/err"; } 2>/dev/null
    status=$?
    expected_status=0
  fi
  local label="$name ($mode)"
  if [ "$status" -ne "$expected_status" ]; then
    fail "$label: exit status $status, expected $expected_status"
    sed 's/^/  stdout: /' "$scratch/out"
    sed 's/^/  stderr: /' "$scratch/err"
    return
  fi
  local lines
  lines=$(wc -l <"$scratch/err")
  if [ "$lines" -ne 1 ]; then
    fail "$label: stderr has $lines lines, expected exactly one"
    sed 's/^/  stderr: /' "$scratch/err"
    return
  fi
  local message
  message=$(cat "$scratch/err")
  case "$message" in
  "shoal: $function(): "*) ;;
  *) fail "$label: message does not start with 'shoal: $function(): ': $message" ;;
  esac
  case "$message" in
  *"$kind"*) ;;
  *) fail "$label: message does not say '$kind': $message" ;;
  esac
  if [ "$mode" = ignore ]; then
    case "$message" in
    *" (ignored)") ;;
    *) fail "$label: message does not end with ' (ignored)': $message" ;;
    esac
  fi
  # The address in the message must be the bad pointer the case printed.
  local printed reported
  printed=$(sed -n 's/^address \(0x[0-9a-fA-F]*\)$/\1/p' "$scratch/out")
  reported=$(grep -o '0x[0-9a-fA-F]*' <<<"$message" | head -n 1)
  if [ -z "$printed" ] || [ -z "$reported" ]; then
    fail "$label: no address (printed '$printed', in message '$reported'): $message"
  elif [ "$(wc -l <<<"$printed")" -ne 1 ]; then
    fail "$label: the case printed more than one address:" $printed
  elif ((printed != reported)); then
    fail "$label: message names $reported, the bad pointer was $printed"
  fi
}

# name                function            kind
cases="
free-stack            free                not allocated by shoal
free-static           free                not allocated by shoal
free-inside           free                inside a block
free-inside-large     free                inside a block
double-free           free                double free
double-free-later     free                double free
realloc-inside        realloc             inside a block
usable-size-inside    malloc_usable_size  inside a block
free-past-blocks      free                was never allocated
free-past-blocks-remote free              was never allocated
free-never-handed-out free                double free
free-never-handed-out-remote free         double free
free-segment-start    free                not allocated by shoal
free-segment-header   free                not allocated by shoal
free-segment-header-remote free           not allocated by shoal
free-unused-slice     free                not allocated by shoal
free-unused-slice-remote free             not allocated by shoal
free-huge-tail        free                inside a block
free-huge-tail-remote free                inside a block
free-inside-remote    free                inside a block
free-inside-medium    free                inside a block
double-free-medium    free                double free
double-free-medium-remote free            double free
"
count=0
while read -r name function kind; do
  [ -n "$name" ] || continue
  for mode in abort ignore; do
    check_case "$name" "$function" "$kind" "$mode"
    count=$((count + 1))
  done
done <<<"$cases"

# Every case the program knows is covered above.
known=$("${misuse[@]}" | wc -l)
if [ "$known" -ne $((count / 2)) ]; then
  fail "the program has $known cases, this script checks $((count / 2))"
fi

echo "misuse: $((count - failures)) of $count case runs behaved"
[ "$failures" -eq 0 ]
