"""Minimal, independent GGUF reader with NumPy dequantization.

Written from the GGUF specification (ggml docs/gguf.md) for use as a test
reference; it shares no code with the C engine.  Standard library + numpy only.

File layout (all little-endian):
    uint32 magic "GGUF", uint32 version,
    tensor_count, kv_count           (uint64 for v2/v3; uint32 for legacy v1)
    kv_count x  { string key, uint32 value_type, value }
    tensor_count x { string name, uint32 n_dims, n_dims x dim, uint32 type, uint64 offset }
    padding to `general.alignment` (default 32)
    tensor data (each tensor's offset is relative to the data section start)

Strings are a length (uint64; uint32 in v1) followed by UTF-8 bytes, no NUL.

Tensor shapes: GGUF ne[0] is the contiguous (fastest-varying) dimension, so a
tensor with ne = [k, m] becomes a numpy array of shape (m, k).
"""

import struct
import sys

import numpy as np

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# Metadata value types.
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, \
    T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64 = range(13)

_SCALAR_FMT = {
    T_UINT8: "<B", T_INT8: "<b", T_UINT16: "<H", T_INT16: "<h",
    T_UINT32: "<I", T_INT32: "<i", T_FLOAT32: "<f", T_BOOL: "<?",
    T_UINT64: "<Q", T_INT64: "<q", T_FLOAT64: "<d",
}
_SCALAR_NP = {
    T_UINT8: "<u1", T_INT8: "<i1", T_UINT16: "<u2", T_INT16: "<i2",
    T_UINT32: "<u4", T_INT32: "<i4", T_FLOAT32: "<f4", T_BOOL: "<u1",
    T_UINT64: "<u8", T_INT64: "<i8", T_FLOAT64: "<f8",
}

# Tensor (ggml) types supported here: name, block size (elements), bytes per block.
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0, GGML_BF16 = 0, 1, 2, 8, 30
GGML_TYPES = {
    GGML_F32: ("F32", 1, 4),
    GGML_F16: ("F16", 1, 2),
    GGML_Q4_0: ("Q4_0", 32, 2 + 16),
    GGML_Q8_0: ("Q8_0", 32, 2 + 32),
    GGML_BF16: ("BF16", 1, 2),
}


class GGUFError(Exception):
    pass


class _Reader:
    def __init__(self, buf, version):
        self.buf = buf
        self.pos = 0
        self.version = version

    def need(self, n):
        if self.pos + n > len(self.buf):
            raise GGUFError("truncated file at offset %d (need %d bytes)" % (self.pos, n))

    def unpack(self, fmt):
        size = struct.calcsize(fmt)
        self.need(size)
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return v

    def count(self):
        # Counts and string lengths are uint64 since v2, uint32 in v1.
        return self.unpack("<I" if self.version == 1 else "<Q")

    def string(self):
        n = self.count()
        self.need(n)
        s = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return s.decode("utf-8", errors="surrogateescape")

    def value(self, vtype):
        if vtype in _SCALAR_FMT:
            return self.unpack(_SCALAR_FMT[vtype])
        if vtype == T_STRING:
            return self.string()
        if vtype == T_ARRAY:
            etype = self.unpack("<I")
            n = self.count()
            if etype in _SCALAR_NP:
                dt = np.dtype(_SCALAR_NP[etype])
                self.need(n * dt.itemsize)
                arr = np.frombuffer(self.buf, dtype=dt, count=n, offset=self.pos).copy()
                self.pos += n * dt.itemsize
                return arr.astype(bool) if etype == T_BOOL else arr
            return [self.value(etype) for _ in range(n)]  # strings or nested arrays
        raise GGUFError("unknown metadata value type %d at offset %d" % (vtype, self.pos))


class TensorInfo:
    def __init__(self, name, ne, ggml_type, offset):
        self.name = name
        self.ne = tuple(ne)            # GGUF order: ne[0] fastest
        self.type = ggml_type
        self.offset = offset           # relative to data section start

    @property
    def n_elements(self):
        n = 1
        for d in self.ne:
            n *= d
        return n

    @property
    def shape(self):
        """numpy (row-major) shape: reversed ne."""
        return tuple(reversed(self.ne))

    @property
    def nbytes(self):
        _, blk, bsize = GGML_TYPES[self.type]
        if self.n_elements % blk:
            raise GGUFError("%s: %d elements not a multiple of block size %d"
                            % (self.name, self.n_elements, blk))
        return self.n_elements // blk * bsize

    def __repr__(self):
        tname = GGML_TYPES.get(self.type, ("type%d" % self.type,))[0]
        return "TensorInfo(%s, ne=%s, %s, off=%d)" % (self.name, list(self.ne), tname, self.offset)


class GGUFFile:
    """Parsed GGUF file: .version, .metadata (dict), .tensors (dict name -> TensorInfo),
    .data_offset (absolute start of the tensor data section)."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        self.path = path
        buf = self.buf
        if len(buf) < 8 or buf[:4] != GGUF_MAGIC:
            raise GGUFError("%s: not a GGUF file (bad magic)" % path)
        (self.version,) = struct.unpack_from("<I", buf, 4)
        if self.version not in (1, 2, 3):
            raise GGUFError("%s: unsupported GGUF version %d" % (path, self.version))
        r = _Reader(buf, self.version)
        r.pos = 8
        n_tensors = r.count()
        n_kv = r.count()

        self.metadata = {}
        self.metadata_types = {}
        for _ in range(n_kv):
            key = r.string()
            vtype = r.unpack("<I")
            self.metadata[key] = r.value(vtype)
            self.metadata_types[key] = vtype

        self.tensors = {}
        for _ in range(n_tensors):
            name = r.string()
            n_dims = r.unpack("<I")
            ne = [r.count() for _ in range(n_dims)]
            ttype = r.unpack("<I")
            offset = r.unpack("<Q")
            if name in self.tensors:
                raise GGUFError("duplicate tensor name %r" % name)
            self.tensors[name] = TensorInfo(name, ne, ttype, offset)

        self.alignment = int(self.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        if self.alignment <= 0:
            raise GGUFError("bad general.alignment %d" % self.alignment)
        self.data_offset = (r.pos + self.alignment - 1) // self.alignment * self.alignment

        for t in self.tensors.values():
            if t.type not in GGML_TYPES:
                continue  # only an error if somebody asks for it
            end = self.data_offset + t.offset + t.nbytes
            if end > len(buf):
                raise GGUFError("%s: tensor data past end of file (%d > %d)"
                                % (t.name, end, len(buf)))

    def get(self, key, default=None):
        return self.metadata.get(key, default)

    def tensor_bytes(self, name):
        t = self.tensors[name]
        start = self.data_offset + t.offset
        return self.buf[start:start + t.nbytes]

    def tensor(self, name, dtype=np.float32):
        """Dequantize tensor `name` to a numpy array of shape reversed(ne)."""
        t = self.tensors[name]
        if t.type not in GGML_TYPES:
            raise GGUFError("%s: unsupported tensor type %d" % (name, t.type))
        flat = dequantize(self.tensor_bytes(name), t.type, t.n_elements)
        return flat.reshape(t.shape).astype(dtype, copy=False)


def dequantize(raw, ggml_type, n_elements):
    """Dequantize a flat stream of n_elements to float32.

    Quantized blocks are treated as one contiguous stream over the whole tensor
    (not per row), which is also what makes rows whose length is not a multiple
    of the block size (e.g. ne0=172 Q8_0) decode correctly."""
    if ggml_type == GGML_F32:
        return np.frombuffer(raw, dtype="<f4", count=n_elements).astype(np.float32)
    if ggml_type == GGML_F16:
        return np.frombuffer(raw, dtype="<f2", count=n_elements).astype(np.float32)
    if ggml_type == GGML_BF16:
        # bf16 is the top 16 bits of an IEEE float32.
        u16 = np.frombuffer(raw, dtype="<u2", count=n_elements).astype(np.uint32)
        return (u16 << 16).view(np.float32)
    if ggml_type == GGML_Q8_0:
        nb = n_elements // 32
        blocks = np.frombuffer(raw, dtype=np.uint8, count=nb * 34).reshape(nb, 34)
        d = blocks[:, 0:2].copy().view("<f2").astype(np.float32)       # (nb, 1)
        q = blocks[:, 2:34].copy().view(np.int8).astype(np.float32)    # (nb, 32)
        return (d * q).reshape(-1)
    if ggml_type == GGML_Q4_0:
        nb = n_elements // 32
        blocks = np.frombuffer(raw, dtype=np.uint8, count=nb * 18).reshape(nb, 18)
        d = blocks[:, 0:2].copy().view("<f2").astype(np.float32)       # (nb, 1)
        qs = blocks[:, 2:18]
        lo = (qs & 0x0F).astype(np.int32) - 8   # elements 0..15
        hi = (qs >> 4).astype(np.int32) - 8     # elements 16..31
        q = np.concatenate([lo, hi], axis=1).astype(np.float32)
        return (d * q).reshape(-1)
    raise GGUFError("unsupported tensor type %d" % ggml_type)


def _summary(path):
    g = GGUFFile(path)
    print("%s: GGUF v%d, %d kv, %d tensors, alignment %d, data at %d"
          % (path, g.version, len(g.metadata), len(g.tensors), g.alignment, g.data_offset))
    for k, v in g.metadata.items():
        if isinstance(v, (list, np.ndarray)) and len(v) > 8:
            v = "[%d items: %s ...]" % (len(v), ", ".join(repr(x) for x in list(v[:4])))
        print("  %s = %r" % (k, v))
    for t in g.tensors.values():
        print("  ", t)


def _selftest():
    """Check each dequantizer on hand-built blocks with known values."""
    f16 = lambda x: np.array([x], dtype="<f2").tobytes()
    # Q8_0: d = 0.25, q = -16..15  ->  value 0.25 * q
    q = np.arange(-16, 16, dtype=np.int8)
    got = dequantize(f16(0.25) + q.tobytes(), GGML_Q8_0, 32)
    assert np.array_equal(got, 0.25 * q.astype(np.float32)), got
    # Q4_0: d = 0.5; byte j holds element j (low nibble) and element j+16 (high).
    lo = np.arange(16, dtype=np.uint8)          # element j      -> nibble j
    hi = 15 - np.arange(16, dtype=np.uint8)     # element j + 16 -> nibble 15 - j
    got = dequantize(f16(0.5) + (lo | (hi << 4)).astype(np.uint8).tobytes(), GGML_Q4_0, 32)
    want = 0.5 * (np.concatenate([lo, hi]).astype(np.float32) - 8)
    assert np.array_equal(got, want), got
    # Two Q4_0 blocks in sequence, with different scales.
    two = f16(1.0) + bytes([0x88] * 16) + f16(-2.0) + bytes([0x9F] * 16)
    got = dequantize(two, GGML_Q4_0, 64)
    want = np.concatenate([np.zeros(32), np.full(16, -2.0 * 7), np.full(16, -2.0 * 1)])
    assert np.array_equal(got, want.astype(np.float32)), got
    # BF16: upper half of float32.
    got = dequantize(np.array([0x3F80, 0xC000, 0x4049, 0x0000], "<u2").tobytes(), GGML_BF16, 4)
    assert np.array_equal(got, np.array([1.0, -2.0, 3.140625, 0.0], np.float32)), got
    # F16 / F32 round trip.
    v = np.array([1.5, -0.125, 65504.0], np.float32)
    assert np.array_equal(dequantize(v.astype("<f2").tobytes(), GGML_F16, 3), v)
    assert np.array_equal(dequantize(v.astype("<f4").tobytes(), GGML_F32, 3), v)
    print("gguf_np selftest OK")


if __name__ == "__main__":
    if sys.argv[1:] == ["--selftest"]:
        _selftest()
    elif not sys.argv[1:]:
        print("usage: gguf_np.py FILE.gguf ... | --selftest", file=sys.stderr)
        sys.exit(2)
    else:
        for p in sys.argv[1:]:
            _summary(p)
