#!/usr/bin/env bash
# test.sh - checks the include graph against docs/ARCHITECTURE.md, then builds tierllm
# and runs every test (ctest). With --sanitize, builds a
# separate ASan+UBSan tree (build-asan) and runs the suite there. With --tsan, builds a
# ThreadSanitizer tree (build-tsan) and runs the tests that exercise threads: the pool,
# the threaded matrix products, the IO queue (both backends: the pread pool always, and
# io_uring where the kernel allows; TSan sees no kernel-side writes, only ours), the tier
# under concurrent callers, the forward pass (golden), the paged KV cache, streaming
# weights (offload), batch, replan, the scheduler and the server core. Any report fails
# its test (halt_on_error). The planner's property test and the CLI tests are left out:
# under TSan they take minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
python3 scripts/check_layers.py # includes follow docs/ARCHITECTURE.md's layers
dir=build; flags=(-DCMAKE_BUILD_TYPE=Release); only=(); run=()
if [ "${1:-}" = "--sanitize" ]; then
    dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DTL_SANITIZE=ON)
elif [ "${1:-}" = "--tsan" ]; then
    dir=build-tsan; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DTL_TSAN=ON)
    only=(-R '^test_(threadpool|ops|aio|tier|golden|kv|offload|batch|replan|sched|serve)$')
    # GCC 12's TSan runtime needs the address-space layout it was built for; with more
    # mmap randomization than it expects (vm.mmap_rnd_bits above 28) it stops with
    # "unexpected memory mapping". Running with ASLR off (setarch -R) avoids that, where
    # the container allows it; with the default 28 bits it runs either way.
    if setarch "$(uname -m)" -R true 2>/dev/null; then run=(setarch "$(uname -m)" -R); fi
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
fi
cmake -S . -B "$dir" "${flags[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
cd "$dir" && "${run[@]}" ctest --output-on-failure -j"$(nproc)" "${only[@]}"
