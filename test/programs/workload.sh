#!/bin/bash
# A bash workload for programs.sh: arrays, associative arrays, subshells,
# command substitution and string handling.
set -eu
declare -a numbers=()
for ((i = 0; i < 20000; i++)); do numbers+=($((i * 7 % 1000))); done
echo "count ${#numbers[@]}"
declare -A histogram=()
for n in "${numbers[@]}"; do histogram[$((n % 10))]=$((${histogram[$((n % 10))]:-0} + 1)); done
for key in $(printf '%s\n' "${!histogram[@]}" | sort -n); do printf '%s=%s ' "$key" "${histogram[$key]}"; done
echo
text=""
for ((i = 0; i < 3000; i++)); do text+="word$i "; done
echo "length ${#text}"
replaced=${text//word/w}
echo "replaced length ${#replaced}"
sum=0
for ((i = 0; i < 200; i++)); do
  value=$(echo "$((i * i))")
  sum=$((sum + value))
done
echo "subshell sum $sum"
( declare -a inner=("${numbers[@]:0:100}"); echo "inner ${#inner[@]} ${inner[99]}" )
result=$( (for ((i = 0; i < 100; i++)); do echo "$i"; done) | sort -rn | head -n 3 | tr '\n' ' ')
echo "pipeline $result"
mapfile -t lines < <(printf 'line %d\n' $(seq 1 5000))
echo "mapfile ${#lines[@]} ${lines[4999]}"
