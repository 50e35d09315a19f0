#!/usr/bin/env bash
# test.sh - builds tierllm and runs every test (ctest). With --sanitize, builds a
# separate ASan+UBSan tree (build-asan) and runs the suite there.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
dir=build; flags=(-DCMAKE_BUILD_TYPE=Release)
if [ "${1:-}" = "--sanitize" ]; then
    dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DTL_SANITIZE=ON)
fi
cmake -S . -B "$dir" "${flags[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
cd "$dir" && ctest --output-on-failure -j"$(nproc)"
