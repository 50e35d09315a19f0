"""Reference Llama forward pass in float64 NumPy, reading GGUF via gguf_np.

This is a test oracle for the C engine: it is written for clarity, not speed,
and processes the whole token sequence at once (full causal attention over
all positions), returning logits for every position.

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
from gguf_np import GGUFFile  # noqa: E402


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
    def __init__(self, path, dtype=np.float64):
        self.gguf = GGUFFile(path)
        self.cfg = LlamaConfig(self.gguf)
        self.dtype = dtype
        g = self.gguf

        def w(name):
            return g.tensor(name).astype(dtype)

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
        q = (x @ L["attn_q"].T).reshape(T, c.n_head, c.head_dim)
        k = (x @ L["attn_k"].T).reshape(T, c.n_head_kv, c.head_dim)
        v = (x @ L["attn_v"].T).reshape(T, c.n_head_kv, c.head_dim)
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
        return out @ L["attn_output"].T

    def ffn(self, x, L):
        g = x @ L["ffn_gate"].T
        u = x @ L["ffn_up"].T
        silu = g / (1.0 + np.exp(-g))
        return (silu * u) @ L["ffn_down"].T

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
        return x @ self.output.T

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
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.out is None and args.greedy is None:
        ap.error("nothing to do: give --out and/or --greedy")

    m = LlamaRef(args.model, dtype=np.float32 if args.float32 else np.float64)
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
