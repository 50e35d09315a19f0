#!/usr/bin/env bash
# outputs_cli.sh TIERLLM MODELS_DIR - the output files of synth, profile and logits
# (base/out_file.h): -o a character device (a /dev/null twin this test creates; the tests
# run as root), a directory or a FIFO is refused with a message and left as it was; an
# existing regular file is replaced whole (a new inode, its mode kept, no temporary left
# beside it); a logits run that fails - a bad token id, or a write cut short by the file
# size limit - leaves the old file byte-identical. The profile is never measured here: its
# target is checked before measuring (replacing a regular file is in test_out_file.c).
set -u
bin=$1; models=$2
m=$models/stories260K.gguf
fails=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tl_outputs_cli.XXXXXX"); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
export XDG_CACHE_HOME=$tmp/cache # a profile measured by mistake stays in here

mknod "$tmp/dev" c 1 3 || fail "mknod (the tests run as root)"
mkdir "$tmp/dir"
mkfifo "$tmp/fifo"

# refused CMD... : exit 1, "error: ... is <what>, not a regular file", the node unchanged
refused() {
    local what=$1; shift
    timeout 20 "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
    [ "$rc" -eq 1 ] || fail "$* : exit $rc, expected 1 ($(head -c 300 "$tmp/err"))"
    grep -q "^error: .*is $what, not a regular file" "$tmp/err" ||
        fail "$* : no message saying it is $what: $(head -c 300 "$tmp/err")"
}
nodes_intact() {
    [ -c "$tmp/dev" ] || fail "$1: the device node is no longer a character device"
    [ -d "$tmp/dir" ] && [ -z "$(ls -A "$tmp/dir")" ] || fail "$1: the directory changed"
    [ -p "$tmp/fifo" ] || fail "$1: the FIFO is no longer a FIFO"
    [ -z "$(ls -A "$tmp" | grep -v '^\(dev\|dir\|fifo\|cache\|out\|err\|work\)$')" ] ||
        fail "$1: files left behind: $(ls -A "$tmp")"
}
for target in dev:"a character device" dir:"a directory" fifo:"a FIFO"; do
    name=${target%%:*}; what=${target#*:}
    refused "$what" "$bin" synth --preset stories260k -o "$tmp/$name"
    refused "$what" "$bin" profile -o "$tmp/$name"
    refused "$what" "$bin" logits -m "$m" --tokens 1,403,407 -o "$tmp/$name"
done
nodes_intact "refusals"

# an existing regular file is replaced: new content, a regular file with the old mode, a
# new inode (renamed over, never truncated in place), nothing else in its directory
mkdir "$tmp/work"
replaced() { # replaced FILE DESCRIPTION
    [ -f "$1" ] || fail "$2: not a regular file"
    cmp -s "$1" "$tmp/work/old" && fail "$2: content unchanged"
    [ "$(stat -c %a "$1")" = 600 ] || fail "$2: mode $(stat -c %a "$1"), was 600"
    [ "$(stat -c %i "$1")" != "$ino" ] || fail "$2: rewritten in place (same inode)"
    [ "$(ls -A "$tmp/work" | sort)" = "$(printf '%s\n' old "$(basename "$1")" | sort)" ] ||
        fail "$2: other files in the directory: $(ls -A "$tmp/work")"
}
prepare() { # an old file of 10 bytes, mode 600, and a copy to compare with
    printf 'old output' >"$tmp/work/$1"
    chmod 600 "$tmp/work/$1"
    cp "$tmp/work/$1" "$tmp/work/old"
    ino=$(stat -c %i "$tmp/work/$1")
}
prepare s.gguf
"$bin" synth --preset stories260k -o "$tmp/work/s.gguf" >/dev/null 2>"$tmp/err" ||
    fail "synth over a file: $(cat "$tmp/err")"
replaced "$tmp/work/s.gguf" "synth over a file"
rm -f "$tmp/work/s.gguf"
prepare l.f32
"$bin" logits -m "$m" --tokens 1,403,407 -o "$tmp/work/l.f32" >/dev/null 2>"$tmp/err" ||
    fail "logits over a file: $(cat "$tmp/err")"
replaced "$tmp/work/l.f32" "logits over a file"
[ "$(stat -c %s "$tmp/work/l.f32")" -eq $((3 * 512 * 4)) ] || fail "logits: wrong size"

# a logits run that fails leaves the old file byte-identical: a bad token id (before any
# writing), and a write that fails half way (the file size limit: 4 KiB of 6 KiB)
prepare l.f32
"$bin" logits -m "$m" --tokens 1,99999 -o "$tmp/work/l.f32" >/dev/null 2>"$tmp/err"
rc=$?
[ "$rc" -eq 1 ] && grep -q "^error: " "$tmp/err" || fail "bad token: exit $rc: $(cat "$tmp/err")"
cmp -s "$tmp/work/l.f32" "$tmp/work/old" || fail "bad token: the old file changed"
(trap '' XFSZ; ulimit -f 4; exec "$bin" logits -m "$m" --tokens 1,403,407 -o "$tmp/work/l.f32") \
    >/dev/null 2>"$tmp/err"
rc=$?
[ "$rc" -eq 1 ] && grep -q "^error: .*l.f32" "$tmp/err" ||
    fail "write cut short: exit $rc: $(cat "$tmp/err")"
cmp -s "$tmp/work/l.f32" "$tmp/work/old" || fail "write cut short: the old file changed"
[ "$(ls -A "$tmp/work")" = "$(printf 'l.f32\nold')" ] ||
    fail "write cut short: files left behind: $(ls -A "$tmp/work")"
nodes_intact "the end"

echo "$((fails == 0 ? 1 : 0)) passed, $fails failed"
[ "$fails" -eq 0 ]
