#!/usr/bin/env python3
"""write_profile.py FILE - a hardware profile of plausible round numbers, in the format
`tierllm profile` writes, for CLI tests that plan without measuring (plan_cli, serve_cli)."""
import json, sys
rows = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
p = {"tierllm_profile_version": 16, "machine": "test", "disk_dir": "/tmp", "n_threads": 2,
     "measured_unix": 0, "profile_seconds": 1, "mem_read_bps": 2e10, "fma_flops": 1e11,
     "chunks": [65536, 262144, 1048576, 4194304], "depths": [1, 4, 16],
     "disk_read_bps": [[5e8, 8e8, 1e9]] * 4, "disk_write_bps": 5e8, "disk_urgent_read_s": 2e-3, "disk_urgent_page_s": 1e-4,
     "types": [0, 1, 30, 8, 2, 3, 6, 7, 10, 11, 12, 13, 14], "rows": rows,
     "matmul_macs": [[1e9 * min(r, 16) for r in rows]] * 13,
     "matmul_call_s": [[1e-5] * 10] * 13, "repack_bps": [0, 0, 0, 3e10, 3e10] + [0] * 8,
     "attn_s_per_mac": 1e-9, "attn_block_s_per_mac": 5e-10, "attn_gqa_s_per_mac": 8e-10, "attn_gqa_block_s_per_mac": 4e-10, "attn_cache_bytes": 8e6, "attn_mem_bytes": 2.5e8, "attn_mem_s_per_byte": 2e-11, "kv_bits": [32, 16, 8, 4], "attn_decode_s": [0, 1e-9, 1e-9, 1e-9],
     "elementwise_s": 1e-9, "kv_store_s": [1e-9] * 4,
     "layer_fixed_s": 1e-5, "io_compute_slowdown": 1.1,
     "io_slowdown_matvec": 1.2, "io_slowdown_attn": 1.05, "io_stream_bps": 1e9}
json.dump(p, open(sys.argv[1], "w"))
