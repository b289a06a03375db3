#!/bin/bash
# A git workload for programs.sh: init, add, commit, log, diff in a fresh
# repository with fixed identities and dates, so the output is repeatable.
set -eu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export GIT_AUTHOR_NAME=Tester GIT_AUTHOR_EMAIL=tester@example.invalid
export GIT_COMMITTER_NAME=Tester GIT_COMMITTER_EMAIL=tester@example.invalid
export GIT_AUTHOR_DATE="2020-01-01T00:00:00Z" GIT_COMMITTER_DATE="2020-01-01T00:00:00Z"
export GIT_CONFIG_NOSYSTEM=1 HOME="$work"
git init -q -b main repo
cd repo
for i in $(seq 1 200); do printf 'line %d of file %d\n' $(seq 1 50) "$i" >"file$i.txt"; done
git add .
git commit -q -m "first commit"
for i in $(seq 1 200 | awk 'NR % 7 == 0'); do echo "changed $i" >>"file$i.txt"; done
git rm -q file3.txt
git commit -q -am "second commit"
git log --format='%H %an %s'
git diff --stat HEAD~1 HEAD | tail -n 1
git diff HEAD~1 HEAD -- file14.txt
git gc -q
git count-objects -v | grep -E '^(count|in-pack)'
git fsck --no-progress 2>&1 | wc -l
