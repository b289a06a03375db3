#!/bin/bash
# The checked-mode catalogue: runs every case of check_cases.c and
# check_cases_cxx.cpp and checks shoal's reaction.
#
# A fault case, under SHOAL_CHECK=1:
#   abort (the default): dies of SIGABRT (status 134), and stderr is exactly
#     one line "shoal: <kind>: <function>(<pointer>)<detail>; allocated at
#     <site>[; freed at <site>]; called at <site>" with the case's kind and
#     function, the pointer the case printed, the allocating function the
#     table names (or no "allocated at" for a pointer shoal never handed out)
#     and "freed at" exactly when the block was freed before;
#   SHOAL_ABORT_ON_ERROR=0: the same line ending in " (ignored)", and exit 0
#     (the case checks itself what the ignored call left); but a touch of an
#     inaccessible block (function read, write or access: the fault handler's
#     line) cannot be ignored: its line ends in " (a fault cannot be
#     ignored)" and the case still dies of SIGABRT.
# A legal case must exit 0 with nothing on stderr, with checked mode and
# without it.
# Then every fault case runs without SHOAL_CHECK: the table printed at the
# end says which kinds the default mode catches cheaply; double free and an
# invalid free of small blocks must be among them, and the README's table
# (section "Checked mode") must say what this run found.
#
# usage: check.sh <test_check_cases> <test_check_cases_cxx | -> [README.md]
#
# Win64 programs under Wine (test/windows.cmake): SHOAL_TEST_RUNNER is the
# command that runs them (test/wine-run.sh wine64), SHOAL_ABORT_STATUS
# abort()'s exit status (3), no C++ program (-: its cases are left out), no
# README; and call sites are "0xADDR (module+0xOFF)" (no symbol names on
# Windows), which the lines must show for the case program's module.
set -u
program_c=$1
program_cxx=$2
readme=${3:-}
read -r -a runner <<<"${SHOAL_TEST_RUNNER:-}"
abort_status=${SHOAL_ABORT_STATUS:-134}
module_sites=false
[ -n "${SHOAL_TEST_RUNNER:-}" ] && module_sites=true
ulimit -c 0 # the aborts are expected; no core files
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failures=0
runs=0

fail() {
  echo "FAIL $*"
  failures=$((failures + 1))
}

show_output() {
  sed 's/^/  stdout: /' "$scratch/out" | head -n 5
  sed 's/^/  stderr: /' "$scratch/err" | head -n 5
}

program_for() {
  case "$1" in
  cxx-*) echo "$program_cxx" ;;
  *) echo "$program_c" ;;
  esac
}

# run_case NAME ENV MODE: runs the case, sets $status. MODE is abort or
# checked (SHOAL_CHECK=1), ignore (and SHOAL_ABORT_ON_ERROR=0) or default.
# The braces catch bash's own "Aborted" notice; the program's stderr is in
# $scratch/err.
run_case() {
  local name=$1 environment=$2 mode=$3 program
  program=$(program_for "$name")
  local -a settings=(-u SHOAL_CHECK -u SHOAL_ABORT_ON_ERROR -u SHOAL_CHECK_QUARANTINE)
  [ "$environment" = - ] || settings+=("$environment")
  case "$mode" in
  abort | checked) settings+=(SHOAL_CHECK=1) ;;
  ignore) settings+=(SHOAL_CHECK=1 SHOAL_ABORT_ON_ERROR=0) ;;
  esac
  { env "${settings[@]}" "${runner[@]}" "$program" "$name" >"$scratch/out" 2>"$scratch/err"; } 2>/dev/null
  status=$?
  runs=$((runs + 1))
}

# check_fault NAME KIND FUNCTION ALLOCATED_IN FREED ENV MODE
check_fault() {
  local name=$1 kind=$2 function=$3 allocated_in=$4 freed=$5 environment=$6 mode=$7
  local label="$name ($mode)" expected_status=$abort_status ending=""
  local trapped=false
  case "$function" in read | write | access) trapped=true ;; esac
  if [ "$mode" = ignore ]; then
    ending=" (ignored)"
    if $trapped; then ending=" (a fault cannot be ignored)"; else expected_status=0; fi
  fi
  run_case "$name" "$environment" "$mode"
  if [ "$status" -ne "$expected_status" ]; then
    fail "$label: exit status $status, expected $expected_status"
    show_output
    return
  fi
  local lines message
  lines=$(wc -l <"$scratch/err")
  message=$(head -n 1 "$scratch/err")
  if [ "$lines" -ne 1 ]; then
    fail "$label: stderr has $lines lines, expected exactly one"
    show_output
    return
  fi
  local head="shoal: $kind: $function("
  if [ "${message:0:${#head}}" != "$head" ]; then
    fail "$label: expected a line starting '$head', got: $message"
    return
  fi
  local printed reported
  printed=$(sed -n 's/^address \(0x[0-9a-fA-F]*\)$/\1/p' "$scratch/out")
  reported=$(sed -n 's/^shoal: [^:]*: [^(]*(\(0x[0-9a-f]*\)).*/\1/p' <<<"$message")
  if [ -z "$printed" ] || [ -z "$reported" ] || [ "$(wc -l <<<"$printed")" -ne 1 ] ||
    ((printed != reported)); then
    fail "$label: the line names '$reported', the case's pointer was '$printed': $message"
  fi
  local site="; allocated at $allocated_in+0x" module=""
  if $module_sites; then # no names: the address in the case program's module
    site="; allocated at 0x" module=" ($(basename "$program_c")+0x"
  fi
  if [ "$allocated_in" = - ]; then
    [[ "$message" != *"; allocated at "* ]] ||
      fail "$label: an allocation site for a pointer shoal never handed out: $message"
  elif $module_sites && [[ "$message" != *"$site"*"$module"* ]]; then
    fail "$label: the line does not say 'allocated at 0x... ($module...)': $message"
  elif ! $module_sites && [[ "$message" != *"; allocated at $allocated_in+0x"* &&
          "$message" != *"; allocated at $allocated_in ("*":"* ]]; then
    fail "$label: the line does not say 'allocated at $allocated_in+0x...' (or '$allocated_in (file:line)'): $message"
  fi
  if [ "$freed" = freed ]; then
    [[ "$message" == *"; freed at "?*"; called at "* ]] ||
      fail "$label: the line does not say where the block was freed: $message"
  else
    [[ "$message" != *"; freed at "* ]] || fail "$label: 'freed at' for a live block: $message"
  fi
  if $module_sites; then
    [[ "$message" =~ \;\ called\ at\ 0x[0-9a-f]+\ \([A-Za-z0-9_.]+\+0x[0-9a-f]+\) ]] ||
      fail "$label: the line does not name the calling module: $message"
  else
    # function+0xOFF (object), or with debug information function (file:line)
    [[ "$message" =~ \;\ called\ at\ [A-Za-z_][A-Za-z0-9_.]*(\+0x[0-9a-f]+|\ \([^:\ ]+:[0-9]+\))\  ]] ||
      fail "$label: the line does not name the calling function: $message"
  fi
  if [ -n "$ending" ]; then
    [[ "$message" == *"$ending" ]] || fail "$label: the line does not end in '$ending': $message"
  else
    [[ "$message" != *"ignored)"* ]] || fail "$label: '(...ignored)' although abort is on: $message"
  fi
}

# check_legal NAME ENV MODE
check_legal() {
  local name=$1 environment=$2 mode=$3
  run_case "$name" "$environment" "$mode"
  if [ "$status" -ne 0 ] || [ -s "$scratch/err" ]; then
    fail "$name ($mode): exit status $status, expected 0 and nothing on stderr"
    show_output
  fi
}

# What the default mode (no SHOAL_CHECK) does with a fault case: "caught:
# <the line, pointer replaced by P>", "not caught", or how it ended instead.
default_outcome() {
  local name=$1 environment=$2
  run_case "$name" "$environment" default
  local message
  message=$(head -n 1 "$scratch/err" | sed 's/0x[0-9a-fA-F]*/P/g')
  if [ "$status" -eq "$abort_status" ] && [ "$(wc -l <"$scratch/err")" -eq 1 ] &&
    [[ "$message" == "shoal: "* ]]; then
    echo "caught: ${message#shoal: }"
  elif [ "$status" -eq 3 ] && [ ! -s "$scratch/err" ]; then
    echo "not caught"
  else
    echo "exit status $status: $message"
  fi
}

# The catalogue. Fields: case | kind | function | allocated in | freed | env
# ("freed": the line must say where the block was freed; env: one
# VARIABLE=VALUE for the case, or -). Legal cases have kind "legal".
catalogue="
double-free-small                 | double free            | free               | alloc_small       | freed | -
double-free-large                 | double free            | free               | alloc_large       | freed | -
double-free-huge                  | double free            | free               | alloc_huge        | freed | -
double-free-delayed               | double free            | free               | alloc_small       | freed | -
double-free-interleaved           | double free            | free               | alloc_small       | freed | -
double-free-after-quarantine      | double free            | free               | -                 | -     | SHOAL_CHECK_QUARANTINE=64K
realloc-zero-freed                | double free            | realloc            | alloc_small       | freed | -
cxx-double-delete                 | double free            | free               | alloc_new         | freed | -
free-stack                        | invalid pointer        | free               | -                 | -     | -
free-static                       | invalid pointer        | free               | -                 | -     | -
free-mmap                         | invalid pointer        | free               | -                 | -     | -
free-inside-small                 | pointer inside a block | free               | alloc_small       | -     | -
free-inside-large                 | pointer inside a block | free               | alloc_large       | -     | -
free-inside-huge                  | pointer inside a block | free               | alloc_huge        | -     | -
free-misaligned-small             | misaligned pointer     | free               | alloc_small       | -     | -
free-misaligned-large             | misaligned pointer     | free               | alloc_large       | -     | -
free-inside-large-freed           | pointer inside a block | free               | alloc_large       | freed | -
usable-size-inside                | pointer inside a block | malloc_usable_size | alloc_small       | -     | -
usable-size-misaligned            | misaligned pointer     | malloc_usable_size | alloc_small       | -     | -
usable-size-freed                 | use after free         | malloc_usable_size | alloc_small       | freed | -
usable-size-stack                 | invalid pointer        | malloc_usable_size | -                 | -     | -
realloc-inside                    | pointer inside a block | realloc            | alloc_small       | -     | -
realloc-inside-large              | pointer inside a block | realloc            | alloc_large       | -     | -
realloc-misaligned                | misaligned pointer     | realloc            | alloc_small       | -     | -
realloc-freed                     | use after free         | realloc            | alloc_small       | freed | -
realloc-freed-fits                | use after free         | realloc            | alloc_small       | freed | -
realloc-stack                     | invalid pointer        | realloc            | -                 | -     | -
overrun-small-free                | buffer overrun         | free               | alloc_small       | -     | -
overrun-large-free                | buffer overrun         | free               | alloc_large       | -     | -
overrun-huge-free                 | buffer overrun         | free               | alloc_huge        | -     | -
overrun-small-realloc             | buffer overrun         | realloc            | alloc_small       | -     | -
overrun-large-realloc             | buffer overrun         | realloc            | alloc_large       | -     | -
overrun-huge-realloc              | buffer overrun         | realloc            | alloc_huge        | -     | -
overrun-small-check-heap          | buffer overrun         | shoal_check_heap   | alloc_small       | -     | -
overrun-large-check-heap          | buffer overrun         | shoal_check_heap   | alloc_large       | -     | -
overrun-huge-check-heap           | buffer overrun         | shoal_check_heap   | alloc_huge        | -     | -
overrun-aligned64-free            | buffer overrun         | free               | alloc_aligned     | -     | -
overrun-aligned4096-free          | buffer overrun         | free               | alloc_aligned     | -     | -
overrun-aligned4096-check-heap    | buffer overrun         | shoal_check_heap   | alloc_aligned     | -     | -
underrun-small-free               | buffer underrun        | free               | alloc_small       | -     | -
underrun-large-free               | buffer underrun        | free               | alloc_large       | -     | -
underrun-huge-free                | buffer underrun        | free               | alloc_huge        | -     | -
underrun-small-realloc            | buffer underrun        | realloc            | alloc_small       | -     | -
underrun-small-check-heap         | buffer underrun        | shoal_check_heap   | alloc_small       | -     | -
underrun-aligned4096-free         | buffer underrun        | free               | alloc_aligned     | -     | -
write-after-free-small-quarantine | write after free       | free               | alloc_small       | freed | SHOAL_CHECK_QUARANTINE=64K
write-after-free-large-quarantine | use after free         | write              | alloc_large       | freed | SHOAL_CHECK_QUARANTINE=1M
write-after-free-small-check-heap | write after free       | shoal_check_heap   | alloc_small       | freed | -
write-after-free-large-check-heap | use after free         | write              | alloc_large       | freed | -
write-after-free-huge-check-heap  | use after free         | write              | alloc_huge        | freed | -
read-after-free-large             | use after free         | read               | alloc_large       | freed | -
write-after-free-large            | use after free         | write              | alloc_large       | freed | -
read-after-free-large-reused      | use after free         | read               | alloc_large       | freed | -
write-after-free-huge             | use after free         | write              | alloc_huge        | freed | -
read-malloc-zero                  | buffer overrun         | read               | alloc_zero        | -     | -
write-malloc-zero                 | buffer overrun         | write              | alloc_zero        | -     | -
read-after-free-malloc-zero       | use after free         | read               | alloc_zero        | freed | -
double-free-malloc-zero           | double free            | free               | alloc_zero        | freed | -
cxx-sized-delete-smaller          | wrong size             | sized free         | alloc_new         | -     | -
cxx-sized-delete-larger           | wrong size             | sized free         | alloc_new         | -     | -
cxx-sized-delete-array            | wrong size             | sized free         | alloc_new_array   | -     | -
cxx-sized-delete-aligned          | wrong size             | sized free         | alloc_new_aligned | -     | -
legal-calloc-overflow             | legal | | | | -
legal-calloc-zeroed               | legal | | | | -
legal-realloc-growth              | legal | | | | -
legal-realloc-shrink              | legal | | | | -
legal-realloc-edges               | legal | | | | -
legal-malloc-zero                 | legal | | | | -
legal-malloc-zero-realloc         | legal | | | | -
legal-reuse-after-collect         | legal | | | | -
legal-no-quarantine               | legal | | | | SHOAL_CHECK_QUARANTINE=0
legal-huge-sizes                  | legal | | | | -
legal-aligned                     | legal | | | | -
legal-usable-size                 | legal | | | | -
legal-check-heap                  | legal | | | | -
legal-quarantine-churn            | legal | | | | SHOAL_CHECK_QUARANTINE=64K
legal-threads                     | legal | | | | -
cxx-legal-forms                   | legal | | | | -
cxx-legal-containers              | legal | | | | -
"

trim() {
  local text=$1
  text=${text#"${text%%[![:space:]]*}"}
  echo "${text%"${text##*[![:space:]]}"}"
}

declare -A outcome # fault case -> default-mode outcome
faults=()
legal_count=0
listed=""
while IFS='|' read -r name kind function allocated_in freed environment; do
  name=$(trim "$name")
  [ -n "$name" ] || continue
  kind=$(trim "$kind") function=$(trim "$function") allocated_in=$(trim "$allocated_in")
  freed=$(trim "$freed") environment=$(trim "$environment")
  [[ "$name" == cxx-* && "$program_cxx" == - ]] && continue
  listed+="$name "
  if [ "$kind" = legal ]; then
    check_legal "$name" "$environment" checked
    check_legal "$name" "$environment" default
    legal_count=$((legal_count + 1))
    continue
  fi
  check_fault "$name" "$kind" "$function" "$allocated_in" "$freed" "$environment" abort
  check_fault "$name" "$kind" "$function" "$allocated_in" "$freed" "$environment" ignore
  outcome[$name]=$(default_outcome "$name" "$environment")
  faults+=("$name")
done <<<"$catalogue"

# Every case the programs know is in the catalogue, and only those.
programs=("$program_c")
[ "$program_cxx" = - ] || programs+=("$program_cxx")
for program in "${programs[@]}"; do
  while read -r name _; do
    [[ " $listed" == *" $name "* ]] || fail "case $name of $(basename "$program") is not in check.sh"
  done < <("${runner[@]}" "$program")
done
known=$(for program in "${programs[@]}"; do "${runner[@]}" "$program"; done | wc -l)
[ "$known" -eq $((${#faults[@]} + legal_count)) ] ||
  fail "the programs have $known cases, check.sh lists $((${#faults[@]} + legal_count))"

# ---- the default mode ----
echo "Without SHOAL_CHECK (P: the pointer):"
printf '| %-33s | %s |\n' "case" "default mode"
printf '|%s|%s|\n' "$(printf -- '-%.0s' {1..35})" "$(printf -- '-%.0s' {1..40})"
for name in "${faults[@]}"; do printf '| %-33s | %s |\n' "$name" "${outcome[$name]}"; done

# What glibc catches, shoal must catch too, with misuse.sh's messages.
expect_default() {
  local name=$1 message=$2
  [ "${outcome[$name]}" = "caught: $message" ] ||
    fail "$name without SHOAL_CHECK: expected 'caught: $message', got '${outcome[$name]}'"
}
expect_default double-free-small "free(): double free of P"
expect_default double-free-delayed "free(): double free of P"
expect_default double-free-interleaved "free(): double free of P"
expect_default free-stack "free(): P was not allocated by shoal"
expect_default free-inside-small "free(): P points inside a block"

# The README's table: a row "| <misuse> | `case` `case` ... | caught: `text` ... |"
# (each case caught, its line containing text) or "| ... | not caught |"
# must agree with every case it names.
if [ -n "$readme" ]; then
  section=$(sed -n '/^### Checked mode/,/^##/p' "$readme")
  rows=0
  while IFS= read -r row; do
    claim=$(awk -F'|' '{print $4}' <<<"$row")
    claim=$(trim "$claim")
    # shellcheck disable=SC2016 # the backticks are text
    for name in $(grep -o '`[a-z0-9-]*`' <<<"$(awk -F'|' '{print $3}' <<<"$row")" | tr -d '`'); do
      rows=$((rows + 1))
      found=${outcome[$name]:-}
      if [ -z "$found" ]; then
        fail "README names case '$name', which check.sh does not run"
      elif [[ "$claim" == "not caught"* ]]; then
        [ "$found" = "not caught" ] || fail "README says $name is not caught by default: $found"
      elif [[ "$claim" == "caught"* ]]; then
        # shellcheck disable=SC2016
        text=$(sed -n 's/^[^`]*`\([^`]*\)`.*/\1/p' <<<"$claim")
        [[ "$found" == caught:*"$text"* ]] ||
          fail "README says $name is caught by default ('$text'): $found"
      else
        fail "README row for $name says neither 'caught' nor 'not caught': $claim"
      fi
    done
  done < <(grep -E '^\| [^|]+ \| `[a-z]' <<<"$section")
  [ "$rows" -gt 0 ] || fail "no default-mode table in README.md's section 'Checked mode'"
  for name in "${faults[@]}"; do
    grep -q "\`$name\`" <<<"$section" || fail "README's default-mode table lacks case $name"
  done
fi

echo "check: $failures failures in $runs runs (${#faults[@]} fault cases, $legal_count legal)"
[ "$failures" -eq 0 ]
