#!/usr/bin/env bash
# layers_check.sh - scripts/check_layers.py passes on the tree and fails on each kind of
# break it exists to catch, each planted in a copy of the tree: a lower layer including a
# higher one, a sibling including a sibling, a relative include, and a folder missing from
# docs/ARCHITECTURE.md's layer table.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
check="$root/scripts/check_layers.py"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { if eval "$1"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $2"; fi; }
fresh() { rm -rf "$tmp/t"; mkdir -p "$tmp/t"; cp -r "$root/src" "$root/docs" "$tmp/t/"; }

python3 "$check" "$root" >"$tmp/out"; rc=$?
ok '[ $rc -eq 0 ]' "the tree itself: $(cat "$tmp/out")"

plant() { # name, file, line to append, expected message fragment
    fresh
    printf '%s\n' "$3" >> "$tmp/t/src/$2"
    python3 "$check" "$tmp/t" >"$tmp/out"; rc=$?
    want=$4
    ok '[ $rc -eq 1 ] && grep -q -- "$want" "$tmp/out"' "$1: exit $rc, $(cat "$tmp/out")"
}
plant "model includes exec" model/llama_load.c '#include "exec/engine.h"' \
    "src/model/llama_load.c:.*model/ includes exec/engine.h, a layer above"
plant "format includes kernels" format/gguf.h '#include "kernels/kernels.h"' \
    "format/ includes kernels/kernels.h, a layer above"
plant "kv includes text (siblings)" kv/kv_cache.c '#include "text/sampler.h"' \
    "kv/ includes text/sampler.h, a layer beside"
plant "relative include" exec/engine.c '#include "../base/status.h"' \
    'include "../base/status.h" is not a project header named by its folder'
plant "bare include" exec/engine.c '#include "engine.h"' \
    'include "engine.h" is not a project header named by its folder'
plant "missing header" exec/engine.c '#include "base/nothing.h"' 'does not exist'

fresh
mkdir "$tmp/t/src/unlisted"; echo '#include "base/status.h"' > "$tmp/t/src/unlisted/x.c"
python3 "$check" "$tmp/t" >"$tmp/out"; rc=$?
ok '[ $rc -eq 1 ] && grep -q "src/unlisted/ is not in" "$tmp/out"' "unlisted folder: exit $rc"

fresh
sed -i 's/^kv text$/kv/' "$tmp/t/docs/ARCHITECTURE.md"
python3 "$check" "$tmp/t" >"$tmp/out"; rc=$?
ok '[ $rc -eq 1 ] && grep -q "src/text/ is not in" "$tmp/out"' "folder dropped from the table: exit $rc"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
