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
expect_err() { # expect_err DESCRIPTION WORDS CMD...: exit 1 and the message has WORDS
    local what=$1 words=$2; shift 2
    expect_rc 1 "$what" "$@"
    grep -q -- "$words" "$tmp/err" || fail "$what: message lacks '$words': $(head -c 300 "$tmp/err")"
}
need_profile() { # need_profile TIERLLM: a script whose runs plan at small budgets needs this
    # machine's saved profile; measure it once, under a lock, when no earlier test has (or
    # the saved one is of a version this build does not read)
    local dir=${XDG_CACHE_HOME:-$HOME/.cache}/tierllm
    mkdir -p "$dir" || return 1
    local saved="$dir/profile-t$(getconf _NPROCESSORS_ONLN).json"
    (
        flock 9
        "$1" profile --show "$saved" >/dev/null 2>&1 || "$1" profile >/dev/null 2>&1
    ) 9>"$dir/.tests-profile.lock" || fail "could not measure this machine's profile"
}
