#!/usr/bin/env python3
"""make_seeds.py OUT_DIR MAX_BYTES GGUF... - small seed inputs for fuzz_gguf.

For each GGUF: a metadata-only copy (no tensors) with every array cut short enough that
the file fits in MAX_BYTES, once as version 3 and once as version 2. Files that already
fit are copied whole; files this script cannot parse (v1) give their first MAX_BYTES. Model files are never committed; seeds are made at fuzz time.
"""
import os
import struct
import sys

SCALAR = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: 'B', 10: 'Q', 11: 'q',
          12: 'd'}


class Reader:
    def __init__(self, data):
        self.d, self.p = data, 0

    def take(self, n):
        b = self.d[self.p:self.p + n]
        if len(b) != n:
            raise ValueError('truncated')
        self.p += n
        return b

    def u32(self):
        return struct.unpack('<I', self.take(4))[0]

    def u64(self):
        return struct.unpack('<Q', self.take(8))[0]

    def string(self):
        return self.take(self.u64())


def read_value(r, t):
    if t == 8:
        return r.string()
    if t == 9:
        et, n = r.u32(), r.u64()
        return (et, [read_value(r, et) for _ in range(n)])
    return r.take(struct.calcsize('<' + SCALAR[t]))


def write_value(t, v, limit):
    if t == 8:
        return struct.pack('<Q', len(v)) + v
    if t == 9:
        et, items = v
        items = items[:limit]
        return struct.pack('<IQ', et, len(items)) + b''.join(
            write_value(et, x, limit) for x in items)
    return v


def metadata_only(path, version, limit):
    with open(path, 'rb') as f:
        data = f.read(64 << 20)
    r = Reader(data)
    if r.take(4) != b'GGUF':
        return None
    r.u32()
    r.u64()
    n_kv = r.u64()
    kvs = []
    for _ in range(n_kv):
        key = r.string()
        t = r.u32()
        kvs.append((key, t, read_value(r, t)))
    out = struct.pack('<4sIQQ', b'GGUF', version, 0, len(kvs))
    for key, t, v in kvs:
        out += struct.pack('<Q', len(key)) + key + struct.pack('<I', t) + write_value(t, v, limit)
    return out


def main():
    out_dir, max_bytes, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    os.makedirs(out_dir, exist_ok=True)
    for path in paths:
        base = os.path.basename(path)
        if os.path.getsize(path) <= max_bytes:
            with open(path, 'rb') as f, open(os.path.join(out_dir, base), 'wb') as o:
                o.write(f.read())
            continue
        for version in (3, 2):
            limit, seed = 4096, None
            try:
                while limit >= 1:
                    seed = metadata_only(path, version, limit)
                    if seed is None or len(seed) <= max_bytes:
                        break
                    limit //= 2
            except (ValueError, KeyError):
                seed = None  # not a parseable v2/v3 file (a v1 fixture): keep its head
                with open(path, 'rb') as f, open(os.path.join(out_dir, base + '.head'),
                                                 'wb') as o:
                    o.write(f.read(max_bytes))
                break
            if seed is not None and len(seed) <= max_bytes:
                name = '%s.meta-v%d-%d' % (base, version, limit)
                with open(os.path.join(out_dir, name), 'wb') as o:
                    o.write(seed)


if __name__ == '__main__':
    main()
