#!/usr/bin/env bash
# Checks that every C++ file git tracks is formatted as .clang-format says, with clang-format 14
# (another version formats some constructs differently; $CLANG_FORMAT overrides).
#   scripts/check-format.sh          list the files that differ; exit 1 if any do
#   scripts/check-format.sh --fix    reformat them in place
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=${CLANG_FORMAT:-clang-format-14}
command -v "$fmt" >/dev/null || { echo "check-format: $fmt not found (scripts/install-deps.sh --lint)" >&2; exit 2; }
fix=0
case "${1:-}" in
  --fix) fix=1 ;;
  "") ;;
  *) echo "usage: scripts/check-format.sh [--fix]" >&2; exit 2 ;;
esac

# The project's C++ sources and headers (no third-party code is vendored; the .cpp.in templates
# are CMake input, not C++).
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.hpp' '*.cc')
if [ "$fix" = 1 ]; then
  "$fmt" -i --style=file "${files[@]}"
  echo "check-format: formatted ${#files[@]} files"
  exit 0
fi
differ=()
for f in "${files[@]}"; do
  "$fmt" --style=file --dry-run --Werror "$f" >/dev/null 2>&1 || differ+=("$f")
done
if [ "${#differ[@]}" -gt 0 ]; then
  echo "check-format: ${#differ[@]} of ${#files[@]} files differ from $fmt --style=file:"
  printf '  %s\n' "${differ[@]}"
  echo "fix them with: scripts/check-format.sh --fix   (or $fmt -i FILE...)"
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
