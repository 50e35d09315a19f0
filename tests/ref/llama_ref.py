"""Reference Llama forward pass in float64 NumPy, reading GGUF via gguf_np.

This is a test oracle for the C engine: it is written for clarity, not speed,
and processes the whole token sequence at once (full causal attention over
all positions), returning logits for every position.

Activation rounding (the engine's numeric contract, src/kernels/kernels.h): a
matmul whose weight the engine keeps as Q8_0 or Q4_0 (rows a whole number of
32-blocks; other quantized matrices are dequantized to f32 at load) first rounds
its input rows blockwise: per 32 elements, in float32, d = amax/127,
q = roundf(x/d) (half away from zero; 0 if d == 0), x' = d*q. The product is
then taken in float64. --exact-activations turns this off (the plain float64
forward pass).

Usage:
    /usr/bin/python3 tests/ref/llama_ref.py MODEL.gguf --tokens 1,403,407 --out logits.f32
        writes float32 little-endian [n_tokens, n_vocab], raw (no header)
    /usr/bin/python3 tests/ref/llama_ref.py MODEL.gguf --tokens 1 --greedy 40
        prints 40 greedily generated token ids (argmax), space separated
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_np import GGUFFile, GGML_Q4_0, GGML_Q8_0  # noqa: E402

QK = 32


def round_activations(x):
    """x' of the engine's contract for rows of x (last axis a multiple of 32),
    computed exactly as the C code does: float32 scale and division, C roundf."""
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
        self.rounds = {}    # id(weight array) -> activations rounded (Q8_0/Q4_0 in engine)

        def w(name):
            a = g.tensor(name).astype(dtype)
            t = g.tensors[name]
            self.rounds[id(a)] = (t.type in (GGML_Q8_0, GGML_Q4_0) and t.ne[0] % QK == 0)
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
        """True if some matmul rounds its activations (a Q8_0/Q4_0 weight)."""
        mats = [self.output] + [L[k] for L in self.layers for k in (
            "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")]
        return any(self.rounds[id(m)] for m in mats)

    def mm(self, x, W):
        """x @ W.T, with x rounded to x' first when the engine's W is Q8_0/Q4_0."""
        if self.rounds[id(W)] and not self.exact_activations:
            x = round_activations(x)
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
                    help="do not round activations for Q8_0/Q4_0 matmuls (plain float64)")
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
