# serve_lib.sh - sourced by the serve tests that run one server.
# serve_start LOG ARGS...: starts `$bin serve ARGS --port 0` in the background with its
# stderr in LOG; sets $pid and $port (read from the startup line), or returns 1.
serve_start() {
    local log=$1; shift
    "$bin" serve "$@" --port 0 2>"$log" &
    pid=$!
    port=
    for _ in $(seq 1 100); do
        port=$(sed -n 's|.*listening on http://[^ ]*:\([0-9]*\) .*|\1|p' "$log")
        [ -n "$port" ] && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
