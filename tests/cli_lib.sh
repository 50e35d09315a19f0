# cli_lib.sh - sourced by the CLI tests: a temporary folder removed on exit ($tmp), a
# failure count ($fails) and the checks on a command's exit status.
fails=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expect_rc() { # expect_rc CODE DESCRIPTION CMD...: its exit status; output in $tmp/out, err
    local want=$1 what=$2; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
    [ "$rc" -eq "$want" ] || fail "$what: exit $rc, expected $want ($(head -c 300 "$tmp/err"))"
}
