# bench_lib.sh - sourced by the shell benches: the disk's rate in the same minutes, and the
# figures read back from `run --stats` output.
disk_gbps() { # disk_gbps FILE: GB/s of 2 GiB of O_DIRECT 1 MiB reads of FILE
    dd if="$1" of=/dev/null bs=1M count=2048 iflag=direct 2>&1 |
        sed -n 's/.*copied, \([0-9.]*\) s.*/\1/p' | awk '{printf "%.2f", 2048 * 1048576 / $1 / 1e9}'
}
decode_tps() { # decode_tps ERR: the decode tok/s `run` printed
    sed -n 's/.*decode: [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p' "$1"
}
token_mib() { # token_mib ERR: the median MiB read from disk per decoded token (--stats)
    grep '^\[stats\] token [1-9]' "$1" | sed -n 's/.*disk \([0-9.]*\) MiB.*/\1/p' | sort -n |
        awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}
