"""Check the engine's dequantization against gguf_np.py, bit for bit.

Usage:
    /usr/bin/python3 tests/ref/check_dequant.py FILE.gguf TYPE [TYPE...]
    /usr/bin/python3 tests/ref/check_dequant.py --self-test

FILE.gguf holds, for every TYPE name given (a ggml type name as in gguf_np.GGML_TYPES,
e.g. Q4_K), two tensors:
    "<TYPE>.q"    a tensor of that type
    "<TYPE>.f32"  an F32 tensor of the same shape (same ne), holding the engine's
                  dequantization of "<TYPE>.q"
The script dequantizes "<TYPE>.q" with gguf_np (written from the format description,
independently of the engine) and requires the same float32 bits everywhere: the values
are compared as uint32, so -0.0 against +0.0 is a mismatch too. (The engine never writes
NaN, and a NaN only ever matches the identical NaN bits.)

Output: one line per TYPE,
    "TYPE: N elements bit-identical OK"
or  "TYPE: FAIL: ..." (missing tensor, wrong type, wrong shape, or K of N elements
differ, followed by the first mismatches: flat index, block, expected, got).
Exit status 0 when every TYPE is OK, 1 on any failure, 2 on a usage error.

--self-test writes small GGUF files (with a minimal GGUF writer below) and checks that
correct files pass and that a flipped bit, a signed zero, a missing tensor, a wrong type
or shape are each caught; it also runs gguf_np's own dequantizer self-test.
"""

import contextlib
import io
import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_np  # noqa: E402
from gguf_np import GGML_F32, GGML_TYPES, GGML_TYPE_BY_NAME, GGUFError, GGUFFile  # noqa: E402

MAX_SHOWN = 8   # mismatches printed per type


def check_type(g, tname):
    """(ok, [lines]) for one TYPE name in the parsed GGUF file g."""
    if tname not in GGML_TYPE_BY_NAME:
        return False, ["%s: FAIL: unknown type name (known: %s)"
                       % (tname, " ".join(sorted(GGML_TYPE_BY_NAME)))]
    want_type = GGML_TYPE_BY_NAME[tname]
    qname, fname = tname + ".q", tname + ".f32"
    for name in (qname, fname):
        if name not in g.tensors:
            return False, ["%s: FAIL: missing tensor %r" % (tname, name)]
    tq, tf = g.tensors[qname], g.tensors[fname]
    if tq.type != want_type:
        return False, ["%s: FAIL: tensor %r has type %s, expected %s"
                       % (tname, qname, GGML_TYPES.get(tq.type, ("type %d" % tq.type,))[0], tname)]
    if tf.type != GGML_F32:
        return False, ["%s: FAIL: tensor %r has type %s, expected F32"
                       % (tname, fname, GGML_TYPES.get(tf.type, ("type %d" % tf.type,))[0])]
    if tq.ne != tf.ne:
        return False, ["%s: FAIL: shape mismatch: %r ne=%s, %r ne=%s"
                       % (tname, qname, list(tq.ne), fname, list(tf.ne))]
    try:
        want = g.tensor(qname).reshape(-1)
        got = g.tensor(fname).reshape(-1)
    except (GGUFError, ValueError) as e:
        return False, ["%s: FAIL: cannot read tensors: %s" % (tname, e)]
    n = want.size
    bad = np.nonzero(want.view(np.uint32) != got.view(np.uint32))[0]
    if len(bad) == 0:
        return True, ["%s: %d elements bit-identical OK" % (tname, n)]
    blk = GGML_TYPES[want_type][1]
    lines = ["%s: FAIL: %d of %d elements differ (first %d shown)"
             % (tname, len(bad), n, min(len(bad), MAX_SHOWN))]
    for i in bad[:MAX_SHOWN]:
        lines.append("  index %d (block %d, element %d): expected %r (0x%08x), got %r (0x%08x)"
                     % (i, i // blk, i % blk, float(want[i]), int(want.view(np.uint32)[i]),
                        float(got[i]), int(got.view(np.uint32)[i])))
    return False, lines


def run(path, type_names):
    """Check every TYPE in the file; print the lines; return the exit status."""
    try:
        g = GGUFFile(path)
    except (GGUFError, OSError) as e:
        print("%s: FAIL: cannot read: %s" % (path, e))
        return 1
    status = 0
    for tname in type_names:
        ok, lines = check_type(g, tname)
        for line in lines:
            print(line)
        if not ok:
            status = 1
    return status


# --- self-test -----------------------------------------------------------------------

def write_gguf(path, tensors, alignment=32):
    """Minimal GGUF v3 writer: tensors is a list of (name, ne, ggml_type, raw bytes).
    One metadata key (general.alignment, uint32); each tensor's data aligned."""
    def gstr(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 1))
    out += gstr("general.alignment") + struct.pack("<II", gguf_np.T_UINT32, alignment)
    data, offsets = bytearray(), []
    for _, _, _, raw in tensors:
        data += bytes(-len(data) % alignment)
        offsets.append(len(data))
        data += raw
    for (name, ne, gtype, _), off in zip(tensors, offsets):
        out += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", gtype, off)
    out += bytes(-len(out) % alignment)
    with open(path, "wb") as f:
        f.write(bytes(out + data))


# byte offsets of the fp16 fields in each block (kept finite in the random test blocks)
_FP16_FIELDS = {"Q4_0": [0], "Q8_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2],
                "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}


def random_blocks(rng, tname, nb):
    """nb random blocks of type tname, with finite fp16 scales (subnormals included)."""
    _, _, bsize = GGML_TYPES[GGML_TYPE_BY_NAME[tname]]
    raw = rng.integers(0, 256, (nb, bsize), dtype=np.uint8)
    for off in _FP16_FIELDS[tname]:
        h = rng.integers(0, 0x10000, nb).astype(np.uint16)
        h = np.where(((h >> 10) & 31) == 31, h & 0x83FF, h).astype("<u2")   # no inf/NaN
        raw[:, off:off + 2] = h.view(np.uint8).reshape(nb, 2)
    return raw.tobytes()


def self_test():
    with contextlib.redirect_stdout(io.StringIO()):
        gguf_np._selftest()
    rng = np.random.default_rng(5)
    names = sorted(_FP16_FIELDS)

    def good_tensors(tname, ne):
        gtype = GGML_TYPE_BY_NAME[tname]
        n = int(np.prod(ne))
        raw = random_blocks(rng, tname, n // GGML_TYPES[gtype][1])
        f32 = gguf_np.dequantize(raw, gtype, n).astype("<f4")
        return [(tname + ".q", ne, gtype, raw), (tname + ".f32", ne, GGML_F32, f32.tobytes())]

    def check(tensors, types, want_status, want_text=()):
        with tempfile.TemporaryDirectory(prefix="check_dequant_") as tmp:
            path = os.path.join(tmp, "t.gguf")
            write_gguf(path, tensors)
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                status = run(path, types)
        text = buf.getvalue()
        assert status == want_status, (status, want_status, text)
        for w in want_text:
            assert w in text, (w, text)
        return text

    # every type, 2-D tensors of 3 rows x 2 blocks: OK
    tensors, shapes = [], {}
    for tname in names:
        blk = GGML_TYPES[GGML_TYPE_BY_NAME[tname]][1]
        shapes[tname] = [2 * blk, 3]
        tensors += good_tensors(tname, shapes[tname])
    text = check(tensors, names, 0)
    for tname in names:
        assert "%s: %d elements bit-identical OK" % (tname, 6 * GGML_TYPES[GGML_TYPE_BY_NAME[tname]][1]) \
            in text, text

    # one flipped low mantissa bit in Q4_K's element 300 (block 1): caught, located
    t = [list(x) for x in good_tensors("Q4_K", [512, 2])]
    f = np.frombuffer(t[1][3], "<u4").copy()
    f[300] ^= 1
    t[1][3] = f.tobytes()
    check([tuple(x) for x in t], ["Q4_K"], 1,
          ["Q4_K: FAIL: 1 of 1024 elements differ", "index 300 (block 1, element 44)"])

    # -0.0 where +0.0 is expected (and the other way round) is a mismatch
    qs = bytes(16)                                              # Q4_1: q = 0 everywhere
    for d, m, engine in ((1.0, 0.0, -0.0), (-1.0, -0.0, 0.0)):  # want +0.0 / -0.0
        raw = np.array([d, m], "<f2").tobytes() + qs
        want = gguf_np.dequantize(raw, GGML_TYPE_BY_NAME["Q4_1"], 32)
        assert np.all(want == 0) and np.signbit(want[0]) != np.signbit(engine), want[0]
        f32 = np.full(32, engine, "<f4").tobytes()
        check([("Q4_1.q", [32], GGML_TYPE_BY_NAME["Q4_1"], raw), ("Q4_1.f32", [32], GGML_F32, f32)],
              ["Q4_1"], 1, ["Q4_1: FAIL: 32 of 32 elements differ"])

    # several types, one bad: exit 1, the good ones still reported OK
    t = good_tensors("Q6_K", [256]) + good_tensors("Q2_K", [256])
    f = np.frombuffer(t[3][3], "<f4").copy()
    f[7] = f[7] * 2 + 1
    t[3] = t[3][:3] + (f.tobytes(),)
    check(t, ["Q6_K", "Q2_K"], 1, ["Q6_K: 256 elements bit-identical OK", "Q2_K: FAIL:",
                                   "index 7 (block 0, element 7)"])

    t = good_tensors("Q5_K", [256, 2])
    check(t[:1], ["Q5_K"], 1, ["Q5_K: FAIL: missing tensor 'Q5_K.f32'"])       # no .f32
    check(t[1:], ["Q5_K"], 1, ["Q5_K: FAIL: missing tensor 'Q5_K.q'"])         # no .q
    check(t, ["Q3_K"], 1, ["Q3_K: FAIL: missing tensor"])                      # other type
    # .q of the wrong type (a Q4_K block stream stored under the name Q5_K.q)
    q4 = good_tensors("Q4_K", [256, 2])
    check([("Q5_K.q",) + q4[0][1:], t[1]], ["Q5_K"], 1,
          ["Q5_K: FAIL: tensor 'Q5_K.q' has type Q4_K, expected Q5_K"])
    # .f32 not F32 (an F16 tensor of the right shape)
    check([t[0], ("Q5_K.f32", [256, 2], GGML_TYPE_BY_NAME["F16"], t[1][3][:1024])], ["Q5_K"], 1,
          ["tensor 'Q5_K.f32' has type F16, expected F32"])
    # shapes differ (same element count, transposed)
    check([t[0], ("Q5_K.f32", [2, 256], GGML_F32, t[1][3])], ["Q5_K"], 1,
          ["Q5_K: FAIL: shape mismatch"])
    check(t, ["Q9_9"], 1, ["Q9_9: FAIL: unknown type name"])

    # the command line
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["only-a-file.gguf"]) == 2
        assert main([]) == 2
    print("check_dequant self-test OK")
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--self-test"]:
        return self_test()
    if len(argv) < 2 or argv[0].startswith("-"):
        print("usage: check_dequant.py FILE.gguf TYPE [TYPE...] | --self-test", file=sys.stderr)
        return 2
    return run(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main())
