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
# The quantized block layouts are described in dequantize() below.
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q4_1, GGML_Q5_0, GGML_Q5_1, GGML_Q8_0 = 0, 1, 2, 3, 6, 7, 8
GGML_Q2_K, GGML_Q3_K, GGML_Q4_K, GGML_Q5_K, GGML_Q6_K = 10, 11, 12, 13, 14
GGML_BF16 = 30
QK_K = 256   # super-block size of the K-quants
GGML_TYPES = {
    GGML_F32: ("F32", 1, 4),
    GGML_F16: ("F16", 1, 2),
    GGML_Q4_0: ("Q4_0", 32, 2 + 16),                 # d, qs[16]
    GGML_Q4_1: ("Q4_1", 32, 2 + 2 + 16),             # d, m, qs[16]
    GGML_Q5_0: ("Q5_0", 32, 2 + 4 + 16),             # d, qh[4], qs[16]
    GGML_Q5_1: ("Q5_1", 32, 2 + 2 + 4 + 16),         # d, m, qh[4], qs[16]
    GGML_Q8_0: ("Q8_0", 32, 2 + 32),                 # d, qs[32]
    GGML_Q2_K: ("Q2_K", QK_K, 16 + 64 + 2 + 2),      # scales[16], qs[64], d, dmin
    GGML_Q3_K: ("Q3_K", QK_K, 32 + 64 + 12 + 2),     # hmask[32], qs[64], scales[12], d
    GGML_Q4_K: ("Q4_K", QK_K, 2 + 2 + 12 + 128),     # d, dmin, scales[12], qs[128]
    GGML_Q5_K: ("Q5_K", QK_K, 2 + 2 + 12 + 32 + 128),  # d, dmin, scales[12], qh[32], qs[128]
    GGML_Q6_K: ("Q6_K", QK_K, 128 + 64 + 16 + 2),    # ql[128], qh[64], scales[16] (int8), d
    GGML_BF16: ("BF16", 1, 2),
}
GGML_TYPE_BY_NAME = {v[0]: k for k, v in GGML_TYPES.items()}


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


def _blocks(raw, n_elements, ggml_type):
    """The tensor's bytes as a (n_blocks, bytes_per_block) uint8 array."""
    name, blk, bsize = GGML_TYPES[ggml_type]
    if n_elements % blk:
        raise GGUFError("%s: %d elements is not a whole number of %d-blocks" % (name, n_elements, blk))
    nb = n_elements // blk
    if len(raw) < nb * bsize:
        raise GGUFError("%s: %d bytes, %d needed" % (name, len(raw), nb * bsize))
    return np.frombuffer(raw, dtype=np.uint8, count=nb * bsize).reshape(nb, bsize)


def _f16(blocks, off):
    """fp16 at byte `off` of every block -> float32 column (nb, 1); exact."""
    return blocks[:, off:off + 2].copy().view("<f2").astype(np.float32)


def _f32(a):
    """Small integers -> float32 (exact), so that numpy keeps the arithmetic in float32."""
    return np.asarray(a).astype(np.float32)


def _nibbles32(qs):
    """16 bytes per block -> the 32 4-bit values of a 32-block: element j is the low
    nibble of byte j and element j+16 the high nibble of byte j (j < 16)."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int32)


def _bits32(qh):
    """4 bytes per block, read as a little-endian uint32 -> its 32 bits, bit e for element e."""
    u = qh.copy().view("<u4").astype(np.uint32)                  # (nb, 1)
    return ((u >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int32)


def _scale_min_k4(sc):
    """The 8 6-bit scales and 8 6-bit mins of a Q4_K/Q5_K super-block from its 12 scale
    bytes sc[0..11] (ggml get_scale_min_k4).  Sub-block j < 4: scale = sc[j] & 63,
    min = sc[j+4] & 63.  Sub-block j >= 4: scale = (sc[j+4] & 15) | (sc[j-4] >> 6) << 4,
    min = (sc[j+4] >> 4) | (sc[j] >> 6) << 4; i.e. bytes 8..11 hold the low 4 bits of the
    scale (low nibble) and min (high nibble) of sub-blocks 4..7, and the top 2 bits of
    bytes 0..3 / 4..7 hold the high 2 bits of their scales / mins."""
    sc = sc.astype(np.int32)
    lo, mid, hi = sc[:, 0:4], sc[:, 4:8], sc[:, 8:12]
    scale = np.concatenate([lo & 63, (hi & 15) | ((lo >> 6) << 4)], axis=1)
    mins = np.concatenate([mid & 63, (hi >> 4) | ((mid >> 6) << 4)], axis=1)
    return scale, mins                                           # (nb, 8) each, 0..63


# Position e = 0..255 of a K-quant super-block, split as e = 128*h + 32*g + l
# (h: half, g: group of 32 within the half, l: 0..31).
_E = np.arange(QK_K)
_H, _G, _L = _E // 128, (_E % 128) // 32, _E % 32


def dequantize(raw, ggml_type, n_elements):
    """Dequantize a flat stream of n_elements to float32.

    Quantized blocks are treated as one contiguous stream over the whole tensor
    (not per row), which is also what makes rows whose length is not a multiple
    of the block size (e.g. ne0=172 Q8_0) decode correctly.

    Block layouts (byte offsets within a block; fp16 values little-endian IEEE half,
    converted exactly to float32; all arithmetic in float32 in ggml's order, from
    ggml-common.h / dequantize_row_* in ggml-quants.c):

      Q8_0 (34 B / 32):  d@0, int8 qs[32]@2.                     y = qs[j]*d
      Q4_0 (18 B / 32):  d@0, qs[16]@2; q(j) = low nibble of qs[j], q(j+16) = high
                         nibble of qs[j].                            y = (q-8)*d
      Q4_1 (20 B / 32):  d@0, m@2, qs[16]@4; nibbles as Q4_0.       y = q*d + m
      Q5_0 (22 B / 32):  d@0, qh@2 (uint32 LE), qs[16]@6; q(e) = nibble(e) | bit e
                         of qh << 4.                                 y = (q-16)*d
      Q5_1 (24 B / 32):  d@0, m@2, qh@4, qs[16]@8; q as Q5_0.       y = q*d + m

      The K-quants have 256-element super-blocks, e = 128h + 32g + l (l < 32):
      Q2_K (84 B):  scales[16]@0, qs[64]@16, d@80, dmin@82.  q(e) = (qs[32h+l] >> 2g) & 3;
                    sub-block s = e//16 (16 elements): sc = scales[s] & 15,
                    m = scales[s] >> 4.                     y = (d*sc)*q - (dmin*m)
      Q3_K (110 B): hmask[32]@0, qs[64]@32, scales[12]@96, d@108.  low 2 bits as Q2_K;
                    high bit: bit e//32 of hmask[e%32]; q = low2 - (hbit ? 0 : 4) in
                    -4..3.  Sub-block s = e//16 has a 6-bit scale: low 4 bits =
                    (scales[s%8] >> 4*(s//8)) & 15, high 2 bits =
                    (scales[8 + s%4] >> 2*(s//4)) & 3; sc = that - 32.  y = (d*sc)*q
      Q4_K (144 B): d@0, dmin@2, scales[12]@4, qs[128]@16.  Sub-block s = e//32: q(e) =
                    nibble s%2 (low first) of qs[32*(e//64) + e%32]; 6-bit sc, m of
                    sub-block s per _scale_min_k4.           y = (d*sc)*q - (dmin*m)
      Q5_K (176 B): d@0, dmin@2, scales[12]@4, qh[32]@16, qs[128]@48.  Low 4 bits as
                    Q4_K, + 16 * (bit s of qh[e%32]).        y = (d*sc)*q - (dmin*m)
      Q6_K (210 B): ql[128]@0, qh[64]@128, int8 scales[16]@192, d@208.  low 4 bits:
                    nibble g//2 of ql[64h + 32*(g%2) + l]; high 2 bits: (qh[32h + l]
                    >> 2g) & 3; q = that - 32 in -32..31; sc = scales[e//16] (signed).
                                                             y = (d*sc)*q

    Every product above is exact in float32: an fp16 has an 11-bit significand and the
    integer factors add at most 12 more (Q6_K: |sc| <= 128, |q| <= 32), within float32's
    24.  So the only rounding is the final + m / - dmin*m, and neither the order of the
    products nor FMA contraction changes the result."""
    if ggml_type == GGML_F32:
        return np.frombuffer(raw, dtype="<f4", count=n_elements).astype(np.float32)
    if ggml_type == GGML_F16:
        return np.frombuffer(raw, dtype="<f2", count=n_elements).astype(np.float32)
    if ggml_type == GGML_BF16:
        # bf16 is the top 16 bits of an IEEE float32.
        u16 = np.frombuffer(raw, dtype="<u2", count=n_elements).astype(np.uint32)
        return (u16 << 16).view(np.float32)
    if ggml_type not in GGML_TYPES:
        raise GGUFError("unsupported tensor type %d" % ggml_type)
    b = _blocks(raw, n_elements, ggml_type)
    if ggml_type == GGML_Q8_0:
        d = _f16(b, 0)                                              # (nb, 1)
        q = _f32(b[:, 2:34].copy().view(np.int8))                   # (nb, 32)
        return (d * q).reshape(-1)
    if ggml_type == GGML_Q4_0:
        d = _f16(b, 0)
        q = _f32(_nibbles32(b[:, 2:18]) - 8)
        return (d * q).reshape(-1)
    if ggml_type == GGML_Q4_1:
        d, m = _f16(b, 0), _f16(b, 2)
        q = _f32(_nibbles32(b[:, 4:20]))
        return (q * d + m).reshape(-1)
    if ggml_type == GGML_Q5_0:
        d = _f16(b, 0)
        q = _f32((_nibbles32(b[:, 6:22]) | (_bits32(b[:, 2:6]) << 4)) - 16)
        return (q * d).reshape(-1)
    if ggml_type == GGML_Q5_1:
        d, m = _f16(b, 0), _f16(b, 2)
        q = _f32(_nibbles32(b[:, 8:24]) | (_bits32(b[:, 4:8]) << 4))
        return (q * d + m).reshape(-1)
    if ggml_type == GGML_Q2_K:
        sc = b[:, 0:16].astype(np.int32)
        qs = b[:, 16:80].astype(np.int32)
        d, dmin = _f16(b, 80), _f16(b, 82)
        dl = d * _f32(sc & 15)                                      # (nb, 16) float32
        ml = dmin * _f32(sc >> 4)
        q = _f32((qs[:, 32 * _H + _L] >> (2 * _G)) & 3)             # (nb, 256)
        s = _E // 16
        return (dl[:, s] * q - ml[:, s]).reshape(-1)
    if ggml_type == GGML_Q3_K:
        hmask = b[:, 0:32].astype(np.int32)
        qs = b[:, 32:96].astype(np.int32)
        scb = b[:, 96:108].astype(np.int32)
        d = _f16(b, 108)
        j = np.arange(16)
        low4 = (scb[:, j % 8] >> (4 * (j // 8))) & 15
        high2 = (scb[:, 8 + j % 4] >> (2 * (j // 4))) & 3
        dl = d * _f32((low4 | (high2 << 4)) - 32)                   # (nb, 16)
        low2 = (qs[:, 32 * _H + _L] >> (2 * _G)) & 3
        hbit = (hmask[:, _L] >> (_E // 32)) & 1
        q = _f32(low2 - 4 * (1 - hbit))                             # -4..3
        return (dl[:, _E // 16] * q).reshape(-1)
    if ggml_type in (GGML_Q4_K, GGML_Q5_K):
        d, dmin = _f16(b, 0), _f16(b, 2)
        sc, mn = _scale_min_k4(b[:, 4:16])
        d1 = d * _f32(sc)                                           # (nb, 8) float32
        m1 = dmin * _f32(mn)
        s = _E // 32                                                # sub-block
        qoff = 16 if ggml_type == GGML_Q4_K else 48
        qs = b[:, qoff:qoff + 128].astype(np.int32)
        q = (qs[:, 32 * (_E // 64) + _L] >> (4 * (s % 2))) & 15
        if ggml_type == GGML_Q5_K:
            qh = b[:, 16:48].astype(np.int32)
            q = q + 16 * ((qh[:, _L] >> s) & 1)
        return (d1[:, s] * _f32(q) - m1[:, s]).reshape(-1)
    if ggml_type == GGML_Q6_K:
        ql = b[:, 0:128].astype(np.int32)
        qh = b[:, 128:192].astype(np.int32)
        sc = b[:, 192:208].copy().view(np.int8)
        d = _f16(b, 208)
        low4 = (ql[:, 64 * _H + 32 * (_G % 2) + _L] >> (4 * (_G // 2))) & 15
        high2 = (qh[:, 32 * _H + _L] >> (2 * _G)) & 3
        q = _f32((low4 | (high2 << 4)) - 32)
        ds = d * _f32(sc)                                           # (nb, 16)
        return (ds[:, _E // 16] * q).reshape(-1)
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
    """Check each dequantizer on hand-built blocks with known values.

    Two kinds of checks per quantized type:
      * literal blocks, bytes written out by hand, with the expected values worked out by
        hand in the comments;
      * blocks packed from chosen per-element quants and per-sub-block scales by a packer
        that follows ggml's quantize_row_*_ref bit packing (the inverse direction of the
        decoder, written separately), the expected value of every element computed
        exactly with fractions and rounded once to float32.  Random quants plus all-0 /
        all-max quants reach every nibble/bit position; the 6-bit packed scales are
        checked one sub-block at a time."""
    from fractions import Fraction

    f16 = lambda x: np.array([x], dtype="<f2").tobytes()

    # Exact expected values: (Fraction, sign bit) pairs, so that a zero result gets the
    # sign IEEE arithmetic gives it (e.g. 0 * negative d = -0.0; -0.0 - (+0.0) = -0.0).
    def P(*xs):
        """Product of fp16 values (given as floats) and ints, with its IEEE sign."""
        v, neg = Fraction(1), False
        for x in xs:
            if isinstance(x, float):
                x = float(np.float16(x))
                neg ^= bool(np.signbit(x))
            else:
                neg ^= int(x) < 0
            v *= Fraction(x)
        return v, neg

    def S(a, b, sub=False):
        """a + b (or a - b) of exact values; an exact zero sum is -0 only for -0 + -0."""
        (va, na), (vb, nb) = a, b
        if sub:
            vb, nb = -vb, not nb
        v = va + vb
        if v != 0:
            return v, v < 0
        return v, (va == 0 and vb == 0 and na and nb)

    def r32(p):
        """Exact value -> float32, rounded once (the float64 step must be exact)."""
        fr, neg = p
        f = float(fr)
        assert Fraction(f) == fr, "test value not exact in float64: %r" % (fr,)
        if f == 0:
            return np.float32(-0.0) if neg else np.float32(0.0)
        return np.float32(f)

    def check(name, raw, gtype, want):
        want = np.asarray(want, dtype=np.float32)
        got = dequantize(raw, gtype, len(want))
        assert got.dtype == np.float32 and got.shape == want.shape, (name, got.dtype, got.shape)
        bad = np.nonzero(got.view(np.uint32) != want.view(np.uint32))[0]
        assert len(bad) == 0, "%s: element %d: got %r, want %r (%d bad)" % (
            name, bad[0], got[bad[0]], want[bad[0]], len(bad))

    rng = np.random.default_rng(1234)

    # ---- F32 / F16 / BF16 / Q8_0 / Q4_0 ------------------------------------------
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

    # ---- Q4_1: d, m, qs[16]; y = q*d + m --------------------------------------------
    # literal: d = 0.5, m = -3; byte j = j | (15-j) << 4
    raw = f16(0.5) + f16(-3.0) + bytes(j | ((15 - j) << 4) for j in range(16))
    check("Q4_1 literal", raw, GGML_Q4_1,
          [0.5 * j - 3 for j in range(16)] + [0.5 * (15 - j) - 3 for j in range(16)])

    def pack_q4_1(d, m, q):        # q: 32 values 0..15
        return f16(d) + f16(m) + bytes(int(q[j]) | (int(q[j + 16]) << 4) for j in range(16))
    blocks, want = b"", []
    for d, m in ((0.1, 2048.0), (-0.25, 1000.5), (3.5, -0.0078125), (0.0999, -7.3)):
        for q in (rng.integers(0, 16, 32), np.full(32, 15), np.zeros(32, int)):
            blocks += pack_q4_1(d, m, q)
            want += [r32(S(P(int(qe), d), P(m))) for qe in q]
    check("Q4_1 packed", blocks, GGML_Q4_1, want)
    # d = fp16(0.1), m = 2048: q*d is exact but q*d + m rounds in float32
    assert dequantize(pack_q4_1(0.1, 2048.0, np.full(32, 7)), GGML_Q4_1, 32)[0] \
        == np.float32(2048.0 + 7 * float(np.float16(0.1)))

    # ---- Q5_0: d, qh (uint32 LE), qs[16]; y = (q-16)*d --------------------------------
    # literal: d = 1, qh bytes 01 00 00 80 (bits 0 and 31), every qs byte 0x21
    #   e=0: 1|16 -> 1;  e=1..15: 1 -> -15;  e=16..30: 2 -> -14;  e=31: 2|16 -> 2
    raw = f16(1.0) + bytes([0x01, 0x00, 0x00, 0x80]) + bytes([0x21] * 16)
    check("Q5_0 literal", raw, GGML_Q5_0, [1.0] + [-15.0] * 15 + [-14.0] * 15 + [2.0])

    def pack_q5(q):                 # -> qh (4 bytes), qs (16 bytes); q: 32 values 0..31
        qh = 0
        for e in range(32):
            qh |= (int(q[e]) >> 4) << e
        qs = bytes((int(q[j]) & 15) | ((int(q[j + 16]) & 15) << 4) for j in range(16))
        return struct.pack("<I", qh), qs
    blocks, want = b"", []
    for d in (-0.125, 0.0999, 7.0):
        for q in (rng.integers(0, 32, 32), np.full(32, 31), np.zeros(32, int),
                  (np.arange(32) * 7 + 3) % 32):
            qh, qs = pack_q5(q)
            blocks += f16(d) + qh + qs
            want += [r32(P(int(qe) - 16, d)) for qe in q]
    check("Q5_0 packed", blocks, GGML_Q5_0, want)

    # ---- Q5_1: d, m, qh, qs[16]; y = q*d + m ------------------------------------------
    # literal: d = 2, m = -1, qh bit 16 only, qs[0] = 0xF0, other bytes 0
    #   e=0: 0 -> -1;  e=16: 15|16 = 31 -> 61;  the rest 0 -> -1
    raw = f16(2.0) + f16(-1.0) + bytes([0, 0, 1, 0]) + bytes([0xF0] + [0] * 15)
    check("Q5_1 literal", raw, GGML_Q5_1, [-1.0] * 16 + [61.0] + [-1.0] * 15)
    blocks, want = b"", []
    for d, m in ((0.25, -2.5), (-0.0999, 1024.0), (0.001, -0.3)):
        for q in (rng.integers(0, 32, 32), np.full(32, 31), np.zeros(32, int)):
            qh, qs = pack_q5(q)
            blocks += f16(d) + f16(m) + qh + qs
            want += [r32(S(P(int(qe), d), P(m))) for qe in q]
    check("Q5_1 packed", blocks, GGML_Q5_1, want)

    # ---- K-quant packers (element e = 128h + 32g + l), from ggml's quantize_row_*_ref --
    def pack_2bit(L):              # 256 values 0..3 -> 64 bytes: byte 32h+l, bits 2g
        out = bytearray(64)
        for e in range(256):
            h, g, l = e // 128, (e % 128) // 32, e % 32
            out[32 * h + l] |= int(L[e]) << (2 * g)
        return bytes(out)

    def pack_k4_scales(sc, mn):    # 8 scales, 8 mins (0..63) -> 12 bytes
        out = bytearray(12)
        for j in range(8):
            ls, lm = int(sc[j]), int(mn[j])
            if j < 4:
                out[j] = ls
                out[j + 4] = lm
            else:
                out[j + 4] = (ls & 15) | ((lm & 15) << 4)
                out[j - 4] |= (ls >> 4) << 6
                out[j] |= (lm >> 4) << 6
        return bytes(out)

    def pack_4bit(L):              # 256 values, low 4 bits -> 128 bytes
        out = bytearray(128)
        for c in range(4):
            for l in range(32):
                out[32 * c + l] = (int(L[64 * c + l]) & 15) | ((int(L[64 * c + 32 + l]) & 15) << 4)
        return bytes(out)

    # ---- Q2_K: scales[16], qs[64], d, dmin; y = (d*sc)*q - (dmin*m) -------------------
    # literal: d = 0.5, dmin = -0.25; qs[0] = 0xE4 (e=0: 0, e=32: 1, e=64: 2, e=96: 3),
    # qs[37] = 0x80 (h=1, l=5, g=3: e=229, q=2); sub-block = e//16
    #   e=0   s0  0x21 sc 1 m 2:   0        + 0.5  = 0.5   (e=1..15 too, q=0)
    #   e=32  s2  0x03 sc 3 m 0:   1.5      - (-0) = 1.5
    #   e=64  s4  0xF1 sc 1 m 15:  1.0      + 3.75 = 4.75
    #   e=96  s6  0x5A sc 10 m 5:  15.0     + 1.25 = 16.25
    #   e=229 s14 0x4F sc 15 m 4:  15.0     + 1.0  = 16.0
    sc = bytearray(16)
    sc[0], sc[2], sc[4], sc[6], sc[14] = 0x21, 0x03, 0xF1, 0x5A, 0x4F
    qs = bytearray(64)
    qs[0], qs[37] = 0xE4, 0x80
    got = dequantize(bytes(sc) + bytes(qs) + f16(0.5) + f16(-0.25), GGML_Q2_K, 256)
    for e, w in ((0, 0.5), (1, 0.5), (15, 0.5), (32, 1.5), (64, 4.75), (96, 16.25), (229, 16.0)):
        assert got[e] == w, ("Q2_K literal", e, got[e], w)
    blocks, want = b"", []
    for d, dmin in ((0.5, -0.25), (-0.0999, 0.0312), (100.0, 0.0001)):
        for L in (rng.integers(0, 4, 256), np.full(256, 3), np.zeros(256, int)):
            s, m = rng.integers(0, 16, 16), rng.integers(0, 16, 16)
            blocks += bytes(int(s[j]) | (int(m[j]) << 4) for j in range(16)) + pack_2bit(L) \
                + f16(d) + f16(dmin)
            want += [r32(S(P(d, int(s[e // 16]), int(L[e])), P(dmin, int(m[e // 16])), True))
                     for e in range(256)]
    check("Q2_K packed", blocks, GGML_Q2_K, want)

    # ---- Q3_K: hmask[32], qs[64], scales[12], d; y = (d*sc)*q -------------------------
    # literal: d = 0.5; all scale bytes 0 except scales[6] = 0x70, scales[8] = 0x10,
    # scales[10] = 0xC0, so sc = 0 - 32 = -32 (dl = -16) everywhere but
    #   s14: low4 = scales[6] >> 4 = 7, high2 = (scales[8 + 14%4] >> 2*(14//4)) & 3
    #        = (0xC0 >> 6) & 3 = 3 -> 55 - 32 = 23 (dl = 11.5)
    #   s8:  low4 = scales[0] >> 4 = 0, high2 = (scales[8] >> 2*2) & 3 = 1 -> 16 - 32 = -16
    # hmask all 0xFF (q = low2) except hmask[0] = 0xFE (e=0 -> q-4), hmask[3] = 0x7F (e=227)
    # qs[35] = 0x40 (h=1, l=3, g=3: e=227 low2 = 1), qs[32] = 0x03 (e=128 low2 = 3)
    #   e=0:   -16 * (0-4) = 64;   e=1: -16 * 0 = -0.0
    #   e=227: 11.5 * (1-4) = -34.5;   e=128: -8 * 3 = -24
    hm = bytearray([0xFF] * 32)
    hm[0], hm[3] = 0xFE, 0x7F
    qs = bytearray(64)
    qs[35], qs[32] = 0x40, 0x03
    scb = bytearray(12)
    scb[6], scb[8], scb[10] = 0x70, 0x10, 0xC0
    got = dequantize(bytes(hm) + bytes(qs) + bytes(scb) + f16(0.5), GGML_Q3_K, 256)
    for e, w in ((0, 64.0), (227, -34.5), (128, -24.0), (129, -0.0), (255, -0.0)):
        assert got[e] == w, ("Q3_K literal", e, got[e], w)
    assert got[1].view(np.uint32) == np.float32(-0.0).view(np.uint32), got[1]   # -16 * 0

    def pack_q3_k(d, s, q):        # s: 16 scales -32..31, q: 256 quants -4..3
        L = np.asarray(q) + 4
        hmask = bytearray(32)
        for e in range(256):
            if L[e] > 3:
                hmask[e % 32] |= 1 << (e // 32)
        scb = bytearray(12)
        for j in range(16):
            l = int(s[j]) + 32
            if j < 8:
                scb[j] = l & 15
            else:
                scb[j - 8] |= (l & 15) << 4
            scb[j % 4 + 8] |= (l >> 4) << (2 * (j // 4))
        return bytes(hmask) + pack_2bit(L & 3) + bytes(scb) + f16(d)
    blocks, want = b"", []
    cases = [(0.5, np.arange(16) * 4 - 32, rng.integers(-4, 4, 256)),
             (-0.0999, rng.integers(-32, 32, 16), np.full(256, 3)),       # hbit set
             (0.0312, rng.integers(-32, 32, 16), np.full(256, -4)),       # hbit clear
             (7.0, np.full(16, 31), rng.integers(-4, 4, 256))]
    for t in range(16):            # one distinct scale per block, each sub-block in turn
        for v in (-29, 27):        # l = 3 (high2 0) / l = 59 (high2 3)
            s = np.ones(16, int)
            s[t] = v
            cases.append((0.25, s, rng.integers(-4, 4, 256)))
    for d, s, q in cases:
        blocks += pack_q3_k(d, s, q)
        want += [r32(P(d, int(s[e // 16]), int(q[e]))) for e in range(256)]
    check("Q3_K packed", blocks, GGML_Q3_K, want)

    # ---- Q4_K: d, dmin, scales[12], qs[128]; y = (d*sc)*q - (dmin*m) ------------------
    # literal scales bytes C5 01 00 00 47 00 00 80 9A 00 00 0B; d = 0.25, dmin = -0.5
    #   s0: sc = 0xC5 & 63 = 5,  m = 0x47 & 63 = 7
    #   s1: sc = 1, m = 0;   s3: sc = 0, m = 0x80 & 63 = 0
    #   s4: sc = 0xA | (0xC5 >> 6) << 4 = 58,  m = 0x9 | (0x47 >> 6) << 4 = 25
    #   s7: sc = 0xB | (0x00 >> 6) << 4 = 11,  m = 0x0 | (0x80 >> 6) << 4 = 32
    # qs[0] = 0x3F (e=0: 15, e=32: 3), qs[64] = 0x0E (e=128: 14), qs[127] = 0xD0 (e=255: 13)
    #   e=0: 0.25*5*15 + 3.5 = 22.25;  e=1: 0 + 3.5 = 3.5;  e=32: 0.75 - (-0) = 0.75
    #   e=128: 0.25*58*14 + 12.5 = 215.5;  e=255: 0.25*11*13 + 16 = 51.75
    k4sc = bytes([0xC5, 0x01, 0x00, 0x00, 0x47, 0x00, 0x00, 0x80, 0x9A, 0x00, 0x00, 0x0B])
    qs = bytearray(128)
    qs[0], qs[64], qs[127] = 0x3F, 0x0E, 0xD0
    got = dequantize(f16(0.25) + f16(-0.5) + k4sc + bytes(qs), GGML_Q4_K, 256)
    for e, w in ((0, 22.25), (1, 3.5), (32, 0.75), (128, 215.5), (255, 51.75), (96, 0.0)):
        assert got[e] == w, ("Q4_K literal", e, got[e], w)
    assert pack_k4_scales([5, 1, 0, 0, 58, 0, 0, 11], [7, 0, 0, 0, 25, 0, 0, 32]) == k4sc

    def k_cases():
        out = [(0.25, -0.5, [1, 17, 33, 63, 5, 21, 47, 62], [63, 2, 40, 19, 60, 16, 3, 49]),
               (-0.0999, 0.0312, list(rng.integers(0, 64, 8)), list(rng.integers(0, 64, 8))),
               (1000.0, 0.0001, list(rng.integers(0, 64, 8)), list(rng.integers(0, 64, 8)))]
        for t in range(8):         # each sub-block's scale/min alone: sub-blocks 0-3 and 4-7
            s, m = [1] * 8, [2] * 8
            s[t], m[t] = 45, 58    # 0b101101 / 0b111010: high 2 bits 2 / 3
            out.append((0.5, 0.125, s, m))
        return out
    blocks, want = b"", []
    for d, dmin, s, m in k_cases():
        for L in (rng.integers(0, 16, 256), np.full(256, 15)):
            blocks += f16(d) + f16(dmin) + pack_k4_scales(s, m) + pack_4bit(L)
            want += [r32(S(P(d, int(s[e // 32]), int(L[e])), P(dmin, int(m[e // 32])), True))
                     for e in range(256)]
    check("Q4_K packed", blocks, GGML_Q4_K, want)

    # ---- Q5_K: d, dmin, scales[12], qh[32], qs[128]; high bit: bit e//32 of qh[e%32] --
    # literal: Q4_K's literal block plus qh[0] = 0x11 (e=0 and e=128 +16), qh[31] = 0x80
    # (e=255 +16):  e=0: 0.25*5*31 + 3.5 = 42.25;  e=128: 0.25*58*30 + 12.5 = 447.5;
    # e=255: 0.25*11*29 + 16 = 95.75;  e=32: 0.75 (qh[0] bit 1 clear)
    qh = bytearray(32)
    qh[0], qh[31] = 0x11, 0x80
    got = dequantize(f16(0.25) + f16(-0.5) + k4sc + bytes(qh) + bytes(qs), GGML_Q5_K, 256)
    for e, w in ((0, 42.25), (128, 447.5), (255, 95.75), (32, 0.75), (1, 3.5)):
        assert got[e] == w, ("Q5_K literal", e, got[e], w)
    blocks, want = b"", []
    for d, dmin, s, m in k_cases():
        for L in (rng.integers(0, 32, 256), np.full(256, 31), np.full(256, 16)):
            qh = bytearray(32)
            for e in range(256):
                qh[e % 32] |= (int(L[e]) >> 4) << (e // 32)
            blocks += f16(d) + f16(dmin) + pack_k4_scales(s, m) + bytes(qh) + pack_4bit(L)
            want += [r32(S(P(d, int(s[e // 32]), int(L[e])), P(dmin, int(m[e // 32])), True))
                     for e in range(256)]
    check("Q5_K packed", blocks, GGML_Q5_K, want)

    # ---- Q6_K: ql[128], qh[64], int8 scales[16], d; y = (d*sc)*q ----------------------
    # literal: d = 0.5; scales s0 = -128, s1 = 127, s2 = -1, s15 = 3, others 1
    #   e=0:   ql[0] low 0, qh[0] bits 0-1 = 0 -> q = -32:  0.5*-128*-32 = 2048
    #   e=16:  ql[16] = 0x0F, qh[16] = 0x03 -> 63-32 = 31:  0.5*127*31 = 1968.5
    #   e=32:  ql[32] = 0x05, qh[0] bits 2-3 = 2 (qh[0] = 0x08) -> 37-32 = 5: -2.5
    #   e=64:  ql[0] high 0, qh[0] bits 4-5 = 0 -> -32, s4 = 1: -16
    #   e=255: ql[127] = 0xA0 (high 10), qh[63] = 0x40 (bits 6-7 = 1) -> 26-32 = -6: -9
    ql, qh = bytearray(128), bytearray(64)
    ql[16], ql[32], ql[127] = 0x0F, 0x05, 0xA0
    qh[16], qh[0], qh[63] = 0x03, 0x08, 0x40
    sc6 = np.ones(16, np.int8)
    sc6[0], sc6[1], sc6[2], sc6[15] = -128, 127, -1, 3
    got = dequantize(bytes(ql) + bytes(qh) + sc6.tobytes() + f16(0.5), GGML_Q6_K, 256)
    for e, w in ((0, 2048.0), (1, 2048.0), (16, 1968.5), (32, -2.5), (64, -16.0), (255, -9.0)):
        assert got[e] == w, ("Q6_K literal", e, got[e], w)

    def pack_q6_k(d, s, q):        # s: 16 int8 scales, q: 256 quants -32..31
        L = np.asarray(q) + 32
        ql, qh = bytearray(128), bytearray(64)
        for h in range(2):
            for l in range(32):
                e = 128 * h + l
                ql[64 * h + l] = (L[e] & 15) | ((L[e + 64] & 15) << 4)
                ql[64 * h + 32 + l] = (L[e + 32] & 15) | ((L[e + 96] & 15) << 4)
                qh[32 * h + l] = (L[e] >> 4) | ((L[e + 32] >> 4) << 2) \
                    | ((L[e + 64] >> 4) << 4) | ((L[e + 96] >> 4) << 6)
        return bytes(ql) + bytes(qh) + np.asarray(s, np.int8).tobytes() + f16(d)
    blocks, want = b"", []
    for d, s in ((0.5, [-128, 127, -1, 0, 1, -64, 63, 2, -2, 100, -100, 5, -5, 31, -31, 7]),
                 (-0.0999, rng.integers(-128, 128, 16)), (0.000123, rng.integers(-128, 128, 16))):
        for q in (rng.integers(-32, 32, 256), np.full(256, 31), np.full(256, -32)):
            blocks += pack_q6_k(d, s, q)
            want += [r32(P(d, int(s[e // 16]), int(q[e]))) for e in range(256)]
    check("Q6_K packed", blocks, GGML_Q6_K, want)

    # ---- the type table -------------------------------------------------------------
    sizes = {"Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24),
             "Q8_0": (32, 34), "Q2_K": (256, 84), "Q3_K": (256, 110), "Q4_K": (256, 144),
             "Q5_K": (256, 176), "Q6_K": (256, 210)}
    for name, (blk, bsize) in sizes.items():
        assert GGML_TYPES[GGML_TYPE_BY_NAME[name]][1:] == (blk, bsize), name
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
