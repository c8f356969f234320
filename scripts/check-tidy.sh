#!/usr/bin/env bash
# Runs clang-tidy with the checks in .clang-tidy over the project's own .cpp files (those git
# tracks that BUILD/compile_commands.json compiles), JOBS at a time, and fails on any finding:
# a check's warning, a clang warning of the build's -Wall -Wextra -Wshadow, or an error.
#   scripts/check-tidy.sh [BUILD] [FILE...]   BUILD defaults to build; FILEs default to all
# clang-tidy 16 (scripts/install-deps.sh --lint; $CLANG_TIDY overrides): clang 14 cannot parse
# C++23's x[a, b] and clang 15 a lambda that captures a structured binding (kernels/), and a
# different version would find different things.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
if [ $# -gt 0 ]; then shift; fi
jobs=${JOBS:-2}
tidy=${CLANG_TIDY:-clang-tidy-16}
command -v "$tidy" >/dev/null || { echo "check-tidy: $tidy not found (scripts/install-deps.sh --lint)" >&2; exit 2; }
db=$build/compile_commands.json
[ -f "$db" ] || { echo "check-tidy: no $db (configure with cmake -S . -B $build first)" >&2; exit 2; }

if [ $# -gt 0 ]; then
  files=("$@")
else
  # Tracked sources that the build compiles (a file compiled into two targets is checked once;
  # generated sources in BUILD and tests/must_not_compile are not in the list).
  mapfile -t files < <(comm -12 <(git ls-files '*.cpp' | sort) \
    <(python3 -c 'import json, os, sys
for e in json.load(open(sys.argv[1])):
    print(os.path.relpath(os.path.join(e["directory"], e["file"])))' "$db" | sort -u))
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
start=$SECONDS
# The database holds g++'s command lines: clang spells C++23 c++2b (before clang 17) and does not
# know some g++ warnings; -Wno-error so that a PARHELION_WERROR build reports warnings as such.
printf '%s\n' "${files[@]}" | xargs -P "$jobs" -I{} sh -c \
  '"$0" -p "$1" --quiet --extra-arg=-std=c++2b --extra-arg=-Wno-unknown-warning-option \
     --extra-arg=-Wno-error "$2" > "$3/$(echo "$2" | tr / _).log" 2>&1 || true' \
  "$tidy" "$build" {} "$out"

# A header's finding is reported by every file that includes it: each once.
findings=$(cat "$out"/*.log | grep -E '^[^ ].*:[0-9]+:[0-9]+: (warning|error):' | sed "s|^$PWD/||" | sort -u || true)
if [ -n "$findings" ]; then
  for log in "$out"/*.log; do
    if grep -qE ': (warning|error):' "$log"; then
      grep -vE '^[0-9]+ (warning|error)s? (and [0-9]+ errors? )?generated\.$' "$log" || true
    fi
  done
  echo
  echo "check-tidy: $(echo "$findings" | wc -l) finding(s) in ${#files[@]} files ($((SECONDS - start)) s):"
  echo "$findings"
  exit 1
fi
echo "check-tidy: ${#files[@]} files clean ($((SECONDS - start)) s)"
