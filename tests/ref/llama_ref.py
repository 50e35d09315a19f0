"""Reference Llama forward pass in float64 NumPy, reading GGUF via gguf_np.

This is a test oracle for the C engine: it is written for clarity, not speed,
and processes the whole token sequence at once (full causal attention over
all positions), returning logits for every position.

Activation rounding (the engine's numeric contract, src/kernels/kernels.h): a matmul
whose weight the engine keeps quantized first rounds its input rows blockwise, in
float32, by a scheme chosen by the weight tensor's type:
  * Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (rows a whole number of 32-blocks; other such
    matrices, e.g. ne0 = 172, are dequantized to f32 at load and not rounded): per 32
    elements, d = amax/127, q = roundf(x/d) (half away from zero; 0 if d == 0),
    x' = d*q.  See round_activations().
  * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (rows a whole number of 256-blocks), llama.cpp's
    Q8_K: per 256 elements, mx = the x of largest magnitude (the first one on a tie);
    all-zero block -> x' = 0; else iscale = -127/mx, q = min(127, rint(iscale*x))
    (half to even), d = 1/iscale, x' = d*q.  See round_activations_q8k().
The product is then taken in float64. The token embedding is only looked up, never
rounded (a classifier tied to it rounds by the embedding's type). F32/F16/BF16
weights are not rounded. --exact-activations turns all rounding off (the plain
float64 forward pass).

Usage:
    /usr/bin/python3 tests/ref/llama_ref.py MODEL.gguf --tokens 1,403,407 --out logits.f32
        writes float32 little-endian [n_tokens, n_vocab], raw (no header)
    /usr/bin/python3 tests/ref/llama_ref.py MODEL.gguf --tokens 1 --greedy 40
        prints 40 greedily generated token ids (argmax), space separated
    /usr/bin/python3 tests/ref/llama_ref.py --self-test
        checks both rounding schemes on hand-computed blocks
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_np  # noqa: E402
from gguf_np import GGUFFile, GGML_TYPES  # noqa: E402

QK = 32       # block of the Q8_0-style rounding
QK_K = 256    # block of the Q8_K-style rounding


def round_activations(x):
    """x' of the engine's 32-block contract (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 weights) for
    rows of x (last axis a multiple of 32), computed exactly as the C code does:
    float32 d = amax/127 and x/d, C roundf (halves away from zero), x' = d*q in float32."""
    x32 = np.asarray(x, dtype=np.float32)
    blocks = x32.reshape(x32.shape[:-1] + (x32.shape[-1] // QK, QK))
    d = (np.abs(blocks).max(axis=-1, keepdims=True) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = (blocks / np.where(d == 0, np.float32(1), d)).astype(np.float32)
    v = v.astype(np.float64)                     # |v|+0.5 is exact in float64
    q = np.sign(v) * np.floor(np.abs(v) + 0.5)   # roundf: halves away from zero
    q = np.where(d == 0, 0.0, q).astype(np.float32)
    xr = (d * q).astype(np.float32)              # d*q rounded to float32, as in C
    return xr.reshape(x32.shape).astype(np.asarray(x).dtype)


def round_activations_q8k(x):
    """x' of the engine's 256-block contract (Q2_K..Q6_K weights; llama.cpp's
    quantize_row_q8_K followed by dequantize_row_q8_K) for rows of x (last axis a
    multiple of 256), all in float32: per block, mx = the element of largest |x| (the
    first on a tie); amax == 0 -> x' = 0; else iscale = -127/mx, q = min(127,
    rint(iscale*x)) (rint: half to even, like ggml's nearest_int), d = 1/iscale,
    x' = d*q."""
    x32 = np.asarray(x, dtype=np.float32)
    blocks = x32.reshape(x32.shape[:-1] + (x32.shape[-1] // QK_K, QK_K))
    a = np.abs(blocks)
    first = np.argmax(a, axis=-1)[..., None]                  # argmax: first maximum
    mx = np.take_along_axis(blocks, first, axis=-1)           # signed, (..., nb, 1)
    zero = np.take_along_axis(a, first, axis=-1) == 0
    iscale = (np.float32(-127.0) / np.where(zero, np.float32(1), mx)).astype(np.float32)
    v = (iscale * blocks).astype(np.float32)                  # float32 product
    q = np.minimum(np.float32(127), np.rint(v)).astype(np.float32)   # half to even
    d = (np.float32(1.0) / iscale).astype(np.float32)
    xr = np.where(zero, np.float32(0), (d * q).astype(np.float32))
    return xr.reshape(x32.shape).astype(np.asarray(x).dtype)


# Weight type name -> (rounding block, rounding function) of the engine's contract.
ROUNDING = {name: (QK, round_activations) for name in ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")}
ROUNDING.update({name: (QK_K, round_activations_q8k)
                 for name in ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")})


def rounding_for(tensor_info):
    """The rounding function the engine applies to the input of a matmul with this
    weight, or None: chosen by the weight's type, when its rows (ne[0]) are a whole
    number of that scheme's blocks (always so for the K-quants of a valid file)."""
    name = GGML_TYPES.get(tensor_info.type, ("?",))[0]
    if name not in ROUNDING:
        return None
    blk, fn = ROUNDING[name]
    return fn if tensor_info.ne[0] % blk == 0 else None


def _selftest_rounding():
    """Hand-computed cases for both rounding contracts."""
    f32 = np.float32
    # 32-blocks, amax 127 -> d = 1, q = roundf(x): halves away from zero
    x = np.zeros(32, np.float32)
    x[:8] = [127, 0.5, 1.5, 2.5, -0.5, -2.5, 0.49, -126.6]
    assert list(round_activations(x)[:8]) == [127, 1, 2, 3, -1, -3, 0, -127]
    # amax 2.54 -> d = f32(2.54)/127, a second block of the same row is independent
    x = np.zeros((1, 64), np.float32)
    x[0, 0], x[0, 1], x[0, 40] = 2.54, 1.0, -3.0
    xr = round_activations(x)
    d = f32(2.54) / f32(127)
    assert xr[0, 0] == f32(d * f32(127)) and xr[0, 1] == f32(d * f32(np.floor(f32(1.0) / d + 0.5)))
    assert xr[0, 40] == -3.0 and np.count_nonzero(xr) == 3
    assert np.all(round_activations(np.zeros((2, 64))) == 0)

    # 256-blocks: mx = -127 -> iscale = 1, d = 1, q = rint(x): halves to even
    x = np.zeros(256, np.float32)
    x[:9] = [-127, 0.5, 1.5, 2.5, -2.5, 3.5, -0.5, 127, 0.49]
    xr = round_activations_q8k(x)
    assert list(xr[:9]) == [-127, 0, 2, 2, -2, 4, 0, 127, 0], xr[:9]
    assert np.all(xr[9:] == 0)
    # mx = 8 (positive) -> iscale = -15.875, d = 1/-15.875 rounded to f32
    x = np.zeros(256, np.float32)
    x[100], x[101], x[102] = 8.0, -8.0, 1.0
    xr = round_activations_q8k(x)
    iscale = f32(-127.0) / f32(8.0)
    assert iscale == -15.875
    d = f32(1.0) / iscale
    assert xr[100] == f32(d * f32(-127)) and xr[101] == f32(d * f32(127))
    assert xr[102] == f32(d * f32(-16))           # rint(-15.875) = -16
    assert np.count_nonzero(xr) == 3
    # float32 d, then a float32 d*q: for mx = 11, x'(mx) = 10.999999 (0x412fffff), not 11
    # (a float64 d or product would give 11.0)
    x = np.zeros(256, np.float32)
    x[0], x[1] = 11.0, 7.0
    xr = round_activations_q8k(x)
    assert xr[0].view(np.uint32) == 0x412FFFFF, (xr[0], hex(int(xr[0].view(np.uint32))))
    d = f32(1.0) / (f32(-127.0) / f32(11.0))
    assert xr[1] == f32(d * f32(np.rint(f32(f32(-127.0) / f32(11.0)) * f32(7.0))))
    # an all-zero block (also -0.0) next to a non-zero one; rows blocked independently
    x = np.zeros((2, 512), np.float32)
    x[0, 255] = -0.0
    x[0, 300] = 5.0
    x[1, 7] = -1e-30
    xr = round_activations_q8k(x)
    assert np.all(xr[0, :256] == 0) and np.count_nonzero(xr) == 2
    assert xr[0, 300] == f32(f32(1.0) / f32(f32(-127.0) / f32(5.0)) * f32(-127))
    assert xr[1, 7] == f32(f32(1.0) / f32(f32(-127.0) / f32(-1e-30)) * f32(-127))  # q(mx) = -127
    assert round_activations_q8k(x.astype(np.float64)).dtype == np.float64

    # selection by weight type and row length
    class TI:
        def __init__(self, name, ne0):
            self.type, self.ne = gguf_np.GGML_TYPE_BY_NAME[name], (ne0, 4)
    for name in ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"):
        assert rounding_for(TI(name, 64)) is round_activations
        assert rounding_for(TI(name, 172)) is None
    for name in ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"):
        assert rounding_for(TI(name, 512)) is round_activations_q8k
    for name in ("F32", "F16", "BF16"):
        assert rounding_for(TI(name, 256)) is None
    print("llama_ref rounding self-test OK")


class LlamaConfig:
    def __init__(self, g):
        arch = g.get("general.architecture", "llama")
        if arch != "llama":
            raise ValueError("unsupported architecture %r (only 'llama')" % arch)

        def key(k, default=None):
            v = g.get("%s.%s" % (arch, k), default)
            if v is None:
                raise ValueError("missing metadata %s.%s" % (arch, k))
            return v

        self.arch = arch
        self.n_embd = int(key("embedding_length"))
        self.n_layer = int(key("block_count"))
        self.n_ff = int(key("feed_forward_length"))
        self.n_head = int(key("attention.head_count"))
        self.n_head_kv = int(key("attention.head_count_kv", self.n_head))
        self.eps = float(key("attention.layer_norm_rms_epsilon"))
        self.rope_base = float(key("rope.freq_base", 10000.0))
        self.head_dim = self.n_embd // self.n_head
        self.rope_dim = int(key("rope.dimension_count", self.head_dim))
        self.n_ctx = int(key("context_length"))
        if self.n_head % self.n_head_kv:
            raise ValueError("n_head %d not a multiple of n_head_kv %d"
                             % (self.n_head, self.n_head_kv))

    def __repr__(self):
        return ("LlamaConfig(n_embd=%d, n_layer=%d, n_ff=%d, n_head=%d, n_head_kv=%d, "
                "head_dim=%d, rope_dim=%d, rope_base=%g, eps=%g, n_ctx=%d)"
                % (self.n_embd, self.n_layer, self.n_ff, self.n_head, self.n_head_kv,
                   self.head_dim, self.rope_dim, self.rope_base, self.eps, self.n_ctx))


class LlamaRef:
    def __init__(self, path, dtype=np.float64, exact_activations=False):
        self.gguf = GGUFFile(path)
        self.cfg = LlamaConfig(self.gguf)
        self.dtype = dtype
        self.exact_activations = exact_activations
        g = self.gguf
        self.rounds = {}    # id(weight array) -> rounding function of its matmuls, or None

        def w(name):
            a = g.tensor(name).astype(dtype)
            self.rounds[id(a)] = rounding_for(g.tensors[name])
            return a

        self.tok_embd = w("token_embd.weight")                  # (n_vocab, n_embd)
        self.n_vocab = self.tok_embd.shape[0]
        self.output_norm = w("output_norm.weight")               # (n_embd,)
        if "output.weight" in g.tensors:
            self.output = w("output.weight")                     # (n_vocab, n_embd)
        else:
            self.output = self.tok_embd                          # tied classifier
        self.layers = []
        for i in range(self.cfg.n_layer):
            p = "blk.%d." % i
            self.layers.append({k: w(p + k + ".weight") for k in (
                "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")})
        self._check_shapes()

    @property
    def rounds_any(self):
        """True if some matmul rounds its activations (a weight of a rounding type)."""
        mats = [self.output] + [L[k] for L in self.layers for k in (
            "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")]
        return any(self.rounds[id(m)] is not None for m in mats)

    def mm(self, x, W):
        """x @ W.T, with x rounded to x' first by the scheme of W's type (if any)."""
        fn = self.rounds[id(W)]
        if fn is not None and not self.exact_activations:
            x = fn(x)
        return x @ W.T

    def _check_shapes(self):
        c = self.cfg
        kv = c.n_head_kv * c.head_dim
        want = {"attn_norm": (c.n_embd,), "attn_q": (c.n_embd, c.n_embd),
                "attn_k": (kv, c.n_embd), "attn_v": (kv, c.n_embd),
                "attn_output": (c.n_embd, c.n_embd), "ffn_norm": (c.n_embd,),
                "ffn_gate": (c.n_ff, c.n_embd), "ffn_up": (c.n_ff, c.n_embd),
                "ffn_down": (c.n_embd, c.n_ff)}
        for i, L in enumerate(self.layers):
            for k, shape in want.items():
                if L[k].shape != shape:
                    raise ValueError("blk.%d.%s: shape %s, expected %s"
                                     % (i, k, L[k].shape, shape))
        assert self.tok_embd.shape == (self.n_vocab, c.n_embd)
        assert self.output.shape == (self.n_vocab, c.n_embd)
        assert self.output_norm.shape == (c.n_embd,)

    # --- building blocks -------------------------------------------------

    def rmsnorm(self, x, w):
        # x: (T, n_embd)
        ms = np.mean(x * x, axis=-1, keepdims=True)
        return x * (1.0 / np.sqrt(ms + self.cfg.eps)) * w

    def rope(self, x, positions):
        """llama.cpp "normal" RoPE: rotate adjacent pairs (x[2i], x[2i+1]) of
        each head by angle pos * base^(-2i/rope_dim), for i < rope_dim/2.
        x: (T, n_heads, head_dim); dims >= rope_dim are left unchanged."""
        c = self.cfg
        half = c.rope_dim // 2
        i = np.arange(half, dtype=np.float64)
        inv_freq = c.rope_base ** (-2.0 * i / c.rope_dim)              # (half,)
        theta = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]
        cos = np.cos(theta)[:, None, :]                                # (T, 1, half)
        sin = np.sin(theta)[:, None, :]
        out = x.copy()
        x0 = x[:, :, 0:c.rope_dim:2]
        x1 = x[:, :, 1:c.rope_dim:2]
        out[:, :, 0:c.rope_dim:2] = x0 * cos - x1 * sin
        out[:, :, 1:c.rope_dim:2] = x0 * sin + x1 * cos
        return out

    def attention(self, x, L, positions):
        c = self.cfg
        T = x.shape[0]
        q = (self.mm(x, L["attn_q"])).reshape(T, c.n_head, c.head_dim)
        k = (self.mm(x, L["attn_k"])).reshape(T, c.n_head_kv, c.head_dim)
        v = (self.mm(x, L["attn_v"])).reshape(T, c.n_head_kv, c.head_dim)
        q = self.rope(q, positions)
        k = self.rope(k, positions)

        # Grouped-query attention: query head h uses kv head h // group.
        group = c.n_head // c.n_head_kv
        k = np.repeat(k, group, axis=1)                                # (T, n_head, hd)
        v = np.repeat(v, group, axis=1)

        q = q.transpose(1, 0, 2)                                       # (H, T, hd)
        k = k.transpose(1, 0, 2)
        v = v.transpose(1, 0, 2)
        scores = (q @ k.transpose(0, 2, 1)) / np.sqrt(c.head_dim)      # (H, T, T)
        causal = np.triu(np.ones((T, T), dtype=bool), k=1)             # j > i masked
        scores = np.where(causal[None, :, :], -np.inf, scores)
        scores = scores - scores.max(axis=-1, keepdims=True)
        p = np.exp(scores)
        p = p / p.sum(axis=-1, keepdims=True)
        out = (p @ v).transpose(1, 0, 2).reshape(T, c.n_embd)          # (T, n_embd)
        return self.mm(out, L["attn_output"])

    def ffn(self, x, L):
        g = self.mm(x, L["ffn_gate"])
        u = self.mm(x, L["ffn_up"])
        silu = g / (1.0 + np.exp(-g))
        return self.mm(silu * u, L["ffn_down"])

    # --- forward ---------------------------------------------------------

    def forward(self, tokens):
        """Logits (len(tokens), n_vocab) in self.dtype, positions 0..T-1."""
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 1 or len(tokens) == 0:
            raise ValueError("need a non-empty 1-D token list")
        if tokens.min() < 0 or tokens.max() >= self.n_vocab:
            raise ValueError("token id out of range [0, %d)" % self.n_vocab)
        positions = np.arange(len(tokens))
        x = self.tok_embd[tokens]                                      # (T, n_embd)
        for L in self.layers:
            x = x + self.attention(self.rmsnorm(x, L["attn_norm"]), L, positions)
            x = x + self.ffn(self.rmsnorm(x, L["ffn_norm"]), L)
        x = self.rmsnorm(x, self.output_norm)
        return self.mm(x, self.output)

    def greedy(self, tokens, n):
        """n greedy (argmax) continuation ids; full recompute each step."""
        toks = list(tokens)
        out = []
        for _ in range(n):
            nxt = int(np.argmax(self.forward(toks)[-1]))
            out.append(nxt)
            toks.append(nxt)
        return out


def parse_tokens(s):
    try:
        toks = [int(t) for t in s.replace(" ", ",").split(",") if t != ""]
    except ValueError:
        raise argparse.ArgumentTypeError("tokens must be comma-separated integers: %r" % s)
    if not toks:
        raise argparse.ArgumentTypeError("empty token list")
    return toks


def main(argv=None):
    if (sys.argv[1:] if argv is None else argv) == ["--self-test"]:
        _selftest_rounding()
        return 0
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="GGUF model file")
    ap.add_argument("--tokens", type=parse_tokens, required=True,
                    help="comma-separated token ids, e.g. 1,403,407")
    ap.add_argument("--out", help="write float32 LE logits [n_tokens, n_vocab] here")
    ap.add_argument("--greedy", type=int, metavar="N",
                    help="print N greedy-generated token ids")
    ap.add_argument("--float32", action="store_true",
                    help="compute in float32 instead of float64")
    ap.add_argument("--exact-activations", action="store_true",
                    help="do not round the activations of quantized matmuls (plain float64)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.out is None and args.greedy is None:
        ap.error("nothing to do: give --out and/or --greedy")

    m = LlamaRef(args.model, dtype=np.float32 if args.float32 else np.float64,
                 exact_activations=args.exact_activations)
    if args.verbose:
        print(m.cfg, "n_vocab=%d" % m.n_vocab, file=sys.stderr)
    if args.out is not None:
        logits = m.forward(args.tokens)
        if not np.all(np.isfinite(logits)):
            print("llama_ref: non-finite logits", file=sys.stderr)
            return 1
        logits.astype("<f4").tofile(args.out)
    if args.greedy is not None:
        print(" ".join(str(t) for t in m.greedy(args.tokens, args.greedy)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
