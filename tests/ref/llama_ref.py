"""Reference Llama / Qwen2 forward pass in float64 NumPy, reading GGUF via gguf_np.

This is a test oracle for the C engine: it is written for clarity, not speed,
and processes the whole token sequence at once (full causal attention over
all positions), returning logits for every position.

Model families (general.architecture; hyperparameters under "<arch>.<key>", the same
key names for both; any other architecture is a ValueError), following llama.cpp:
  * "llama": RoPE over adjacent pairs (x[2i], x[2i+1]) (LLAMA_ROPE_TYPE_NORM).
  * "qwen2": NeoX RoPE over the halves (x[i], x[i + rope_dim/2]) (LLAMA_ROPE_TYPE_NEOX).
  Both, when present: attention biases blk.N.attn_{q,k,v,output}.bias, each added right
  after its matrix product (q = Wq x + bq before RoPE, ..., o = Wo a + bo; never rounded,
  and they do not change the rounding of x); "rope_freqs.weight" (Llama 3 frequency
  factors, ne [rope_dim/2]): theta_i = pos * base^(-2i/rope_dim) / rope_freqs[i]
  (ggml_rope_ext's freq_factors); "<arch>.attention.sliding_window" W: a query at
  position p attends to keys at p - W < t <= p (is_masked_swa, LLAMA_SWA_TYPE_STANDARD),
  in every layer; "<arch>.attention.key_length": head_dim (default n_embd / n_head).
  Without them, the plain causal Llama forward as before.
  * "opt" (OPT, as Hugging Face's OPTForCausalLM with do_layer_norm_before): no RoPE;
    x = token_embd[t] + position_embd[p] (position_embd row p holds position p: the
    checkpoint's two leading offset rows are dropped by the converter); LayerNorm
    (x - mean) / sqrt(var + eps) * w + b (eps: "opt.attention.layer_norm_epsilon") before
    attention, before the FFN and at the output; FFN = ffn_down(relu(ffn_up(x) + b_up))
    + b_down, no gate; attention with biases on q, k, v, output; n_head_kv = n_head.

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

Flash layout (tierllm.layout = "flash", tierllm.layout.version = 1; see FLASH_SITES and
flash_matrices()): each layer's seven matrices are rebuilt from its four site tensors
(runs by input channel) and never round their input, whatever their type: the engine's
column products use activations as given. The other tensors (token_embd, output, norms,
biases) are read and rounded as in a row-major file. Any other layout is refused.

Neuron bundles (a flash file of a ReLU FFN: tierllm.ffn_activation = "relu", or OPT; see
neuron_matrices()): a layer may hold blk.N.ffn_neurons (run i = w_gate[i, :] | w_up[i, :] |
w_down[:, i]; no gate part for OPT) in place of ffn_gate_up.cols and ffn_down.cols, and a
low-rank predictor blk.N.ffn_pred_v [rank][n_embd], ffn_pred_u [n_ff][rank], ffn_pred_b
[n_ff]. With LlamaRef(predictor=True) (the default when a file has one) such a layer computes
only the predicted neurons: s = (xn V^T) U^T + pb, and with n rows at once the neurons with
s > 0 in some row of the block (the union; neuron_union=False: each row its own), every row
at every neuron of that set; the others give h = 0 (and the FFN sites' sparsity thresholds
do not apply). The gate/up products round xn by the bundle's type as row-major ones would
(they are row-major rows); the down sum does not (as a column product).
predictor=False: the dense FFN, equal to the row-major model. neuron_stats() / --neuron-recall:
per layer the predicted and the truly active neurons and the output-mass recall.

Usage:
    /usr/bin/python3 tests/ref/llama_ref.py MODEL.gguf --tokens 1,403,407 --out logits.f32
        writes float32 little-endian [n_tokens, n_vocab], raw (no header)
    /usr/bin/python3 tests/ref/llama_ref.py MODEL.gguf --tokens 1 --greedy 40
        prints 40 greedily generated token ids (argmax), space separated
    /usr/bin/python3 tests/ref/llama_ref.py MODEL.gguf --tokens 1,2,3 --neuron-recall
        prints "neuron recall <layer> <recall> predicted <share> active <share>" per layer
        with a predictor and "neuron recall total <recall>" (flash file with neuron bundles)
    /usr/bin/python3 tests/ref/llama_ref.py --self-test [MODEL.gguf]
        checks both rounding schemes on hand-computed blocks, the RoPE pairings, frequency
        factors and window mask on hand-computed values, the flash layout and its neuron
        bundles with a predictor, and the architecture features end to end on a synthetic
        model (and on variants of MODEL.gguf when given)
"""

import argparse
import math
import os
import struct
import sys
import tempfile

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


# general.architecture -> RoPE pairing, as llama.cpp's llama_model_rope_type(): LLAMA is
# LLAMA_ROPE_TYPE_NORM (adjacent pairs), QWEN2 is LLAMA_ROPE_TYPE_NEOX (halves).
ARCH_ROPE = {"llama": "norm", "qwen2": "neox", "opt": None}   # opt: learned positions


def rope(x, positions, rope_dim, base, neox=False, freq_factors=None):
    """Rotary position embedding of x (T, n_heads, head_dim) at positions (T,), as ggml's
    ggml_rope_ext (freq_scale 1, no YaRN).  Pair i < rope_dim/2 turns by
        theta_i = pos * base^(-2i/rope_dim) / freq_factors[i]   (freq_factors: 1 if None)
    and is (x[2i], x[2i+1]) for "normal" RoPE (neox False: GGML_ROPE_TYPE_NORMAL) or
    (x[i], x[i + rope_dim/2]) for NeoX RoPE (GGML_ROPE_TYPE_NEOX).  A pair (a, b) becomes
    (a cos - b sin, a sin + b cos).  Elements at index >= rope_dim are left unchanged."""
    half = rope_dim // 2
    i = np.arange(half, dtype=np.float64)
    inv_freq = base ** (-2.0 * i / rope_dim)                           # (half,)
    theta = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]
    if freq_factors is not None:
        theta = theta / np.asarray(freq_factors, dtype=np.float64)[None, :]
    cos = np.cos(theta)[:, None, :]                                    # (T, 1, half)
    sin = np.sin(theta)[:, None, :]
    if neox:
        first, second = slice(0, half), slice(half, rope_dim)
    else:
        first, second = slice(0, rope_dim, 2), slice(1, rope_dim, 2)
    out = x.copy()
    x0 = x[:, :, first]
    x1 = x[:, :, second]
    out[:, :, first] = x0 * cos - x1 * sin
    out[:, :, second] = x0 * sin + x1 * cos
    return out


def attention_mask(positions, window=None):
    """Boolean (T, T) mask, True where query i must NOT attend to key j: causal (key
    position > query position) and, with a sliding window W, keys with
    pos_i - pos_j >= W (llama.cpp is_masked_swa, LLAMA_SWA_TYPE_STANDARD).  A query at
    position p thus sees exactly the key positions t with p - W < t <= p."""
    p = np.asarray(positions)
    diff = p[:, None] - p[None, :]                                     # query - key
    masked = diff < 0
    if window is not None:
        masked = masked | (diff >= window)
    return masked


class LlamaConfig:
    def __init__(self, g):
        arch = g.get("general.architecture", "llama")
        if arch not in ARCH_ROPE:
            raise ValueError("unsupported architecture %r (supported: %s)"
                             % (arch, ", ".join(sorted(ARCH_ROPE))))

        def key(k, default=None):
            v = g.get("%s.%s" % (arch, k), default)
            if v is None:
                raise ValueError("missing metadata %s.%s" % (arch, k))
            return v

        self.arch = arch
        self.rope_type = ARCH_ROPE[arch]
        self.n_embd = int(key("embedding_length"))
        self.n_layer = int(key("block_count"))
        self.n_ff = int(key("feed_forward_length"))
        self.n_head = int(key("attention.head_count"))
        self.n_head_kv = int(key("attention.head_count_kv", self.n_head))
        self.layer_norm = arch == "opt"          # LayerNorm (with bias) and ReLU FFN
        # a ReLU-fied gated FFN: relu(gate x + b_gate) * up x in place of SwiGLU
        act = g.get("tierllm.ffn_activation", "silu")
        if act not in ("silu", "relu"):
            raise ValueError("tierllm.ffn_activation %r: silu or relu" % (act,))
        self.gate_relu = act == "relu"
        self.eps = float(key("attention.layer_norm_epsilon" if self.layer_norm
                             else "attention.layer_norm_rms_epsilon"))
        self.rope_base = float(key("rope.freq_base", 10000.0))
        self.head_dim = int(key("attention.key_length", self.n_embd // self.n_head))
        value_length = int(key("attention.value_length", self.head_dim))
        if value_length != self.head_dim:
            raise ValueError("%s.attention.value_length %d != key_length %d: not supported"
                             % (arch, value_length, self.head_dim))
        self.rope_dim = int(key("rope.dimension_count", self.head_dim))
        self.n_ctx = int(key("context_length"))
        if self.n_head_kv <= 0 or self.n_head % self.n_head_kv:
            raise ValueError("n_head %d not a multiple of n_head_kv %d"
                             % (self.n_head, self.n_head_kv))
        if self.rope_dim <= 0 or self.rope_dim % 2 or self.rope_dim > self.head_dim:
            raise ValueError("rope.dimension_count %d: must be even and in 2..head_dim %d"
                             % (self.rope_dim, self.head_dim))
        w = g.get("%s.attention.sliding_window" % arch)
        if w is not None and (not isinstance(w, int) or isinstance(w, bool) or w < 1):
            raise ValueError("%s.attention.sliding_window %r: must be an integer >= 1"
                             % (arch, w))
        self.sliding_window = w                  # None: plain causal attention

    def __repr__(self):
        return ("LlamaConfig(arch=%s, rope=%s, n_embd=%d, n_layer=%d, n_ff=%d, n_head=%d, "
                "n_head_kv=%d, head_dim=%d, rope_dim=%d, rope_base=%g, eps=%g, n_ctx=%d, "
                "sliding_window=%s)"
                % (self.arch, self.rope_type, self.n_embd, self.n_layer, self.n_ff,
                   self.n_head, self.n_head_kv, self.head_dim, self.rope_dim, self.rope_base,
                   self.eps, self.n_ctx, self.sliding_window))


# Optional attention biases: blk.N.<name>.bias, added right after the matrix product.
BIASES = ("attn_q", "attn_k", "attn_v", "attn_output")

# The flash layout (tierllm's src/model/flash_layout.h, written from its definition): per
# layer, four "site" tensors replace the seven row-major matrices. A site tensor has GGUF
# ne = [run, channels], i.e. it reads as an ordinary [channels][run] array whose row c (a
# "run", quantized along its length in the tensor's type) holds every output's weight for
# input channel c of the matrices that share that input, one after another:
#   blk.N.attn_qkv.cols     run c = wq[:, c], wk[:, c], wv[:, c]
#   blk.N.attn_output.cols  run c = wo[:, c]
#   blk.N.ffn_gate_up.cols  run c = w_gate[:, c], w_up[:, c]   (ReLU FFN, no gate: w_up[:, c])
#   blk.N.ffn_down.cols     run c = w_down[:, c]
# The engine's products with these ("column products", kernels.h) use the activations as
# given: a matrix from a site tensor never rounds its input, whatever the type.
FLASH_LAYOUT_VERSION = 1           # every matrix by input channel
FLASH_LAYOUT_VERSION_NEURONS = 2   # a ReLU FFN by neuron, with the tierllm.neurons.* keys
FLASH_SITES = (("attn_qkv.cols", ("attn_q", "attn_k", "attn_v")),
               ("attn_output.cols", ("attn_output",)),
               ("ffn_gate_up.cols", ("ffn_gate", "ffn_up")),
               ("ffn_down.cols", ("ffn_down",)))


def is_flash_layout(metadata):
    """True for a file in the flash layout (tierllm.layout = "flash", tierllm.layout.version
    1, or 2 with the neuron keys tierllm.neurons.*), False for a row-major one (no
    tierllm.layout key); any other layout or version, or a version that disagrees with the
    neuron keys, is a ValueError, as the engine refuses it."""
    layout = metadata.get("tierllm.layout")
    if layout is None:
        return False
    if layout != "flash":
        raise ValueError("tierllm.layout %r: the reference reads only \"flash\" (or no key: "
                         "row-major)" % (layout,))
    version = metadata.get("tierllm.layout.version")
    if version not in (FLASH_LAYOUT_VERSION, FLASH_LAYOUT_VERSION_NEURONS) or \
            isinstance(version, (bool, float)):
        raise ValueError("flash layout version %r: the reference reads versions %d and %d"
                         % (version, FLASH_LAYOUT_VERSION, FLASH_LAYOUT_VERSION_NEURONS))
    neurons = "tierllm.neurons.rank" in metadata
    if neurons != (version == FLASH_LAYOUT_VERSION_NEURONS):
        raise ValueError("flash layout version %d %s the neuron predictor keys"
                         % (version, "without" if not neurons else "with"))
    return True


def flash_matrices(cfg, site_tensor, sites=FLASH_SITES):
    """One layer's row-major matrices {name: [out][in] float32 array} rebuilt from its flash
    site tensors. site_tensor(name) returns the dequantized site tensor `name` ("attn_qkv.cols",
    ...) as [channels][run]. Each part of a run is one matrix's column, so the matrix is the
    transpose of its slice of the runs: wq = S[:, 0:qd].T, wk = S[:, qd:qd+kvd].T, ...
    sites: the (site, parts) pairs to rebuild (default all four; ATTN_SITES for a layer
    whose FFN is in neuron bundles)."""
    qd, kvd = cfg.n_head * cfg.head_dim, cfg.n_head_kv * cfg.head_dim
    out_len = {"attn_q": qd, "attn_k": kvd, "attn_v": kvd, "attn_output": cfg.n_embd,
               "ffn_gate": cfg.n_ff, "ffn_up": cfg.n_ff, "ffn_down": cfg.n_embd}
    in_len = {"attn_qkv.cols": cfg.n_embd, "attn_output.cols": qd,
              "ffn_gate_up.cols": cfg.n_embd, "ffn_down.cols": cfg.n_ff}
    mats = {}
    for site, parts in sites:
        if cfg.layer_norm:                                   # OPT's ReLU FFN has no gate
            parts = tuple(p for p in parts if p != "ffn_gate")
        S = site_tensor(site)
        want = (in_len[site], sum(out_len[p] for p in parts))
        if S.shape != want:
            raise ValueError("%s: shape %s ([channels][run]), expected %s"
                             % (site, S.shape, want))
        start = 0
        for p in parts:
            mats[p] = np.ascontiguousarray(S[:, start:start + out_len[p]].T)
            start += out_len[p]
    return mats


ATTN_SITES = FLASH_SITES[:2]

# Neuron bundles (tierllm issue 20 part 3): in a flash file of a ReLU FFN, a layer may have,
# in place of ffn_gate_up.cols and ffn_down.cols,
#   blk.N.ffn_neurons  ne = [run, n_ff]   run i = w_gate[i, :] | w_up[i, :] | w_down[:, i]
#                                         (run = 3 n_embd; OPT's ReLU FFN: w_up | w_down, 2 n_embd)
# each part a whole number of the type's blocks (quantized along the run), and a predictor
#   blk.N.ffn_pred_v   ne = [n_embd, rank]  (F16)  V, [rank][n_embd]
#   blk.N.ffn_pred_u   ne = [rank, n_ff]    (F16)  U, [n_ff][rank]
#   blk.N.ffn_pred_b   ne = [n_ff]          (F32)  pb
# t = xn V^T, s = t U^T + pb: neuron i is predicted active iff s_i > 0.
NEURON_TENSOR = "ffn_neurons"
PREDICTOR_TENSORS = ("ffn_pred_v", "ffn_pred_u", "ffn_pred_b")


def neuron_matrices(cfg, S):
    """A layer's FFN matrices {name: [out][in] array} from its dequantized neuron bundles S
    ([n_ff][run]): w_gate = S[:, 0:e], w_up = S[:, e:2e], w_down = S[:, 2e:3e].T (e = n_embd;
    without the gate part for OPT's ReLU FFN: w_up = S[:, 0:e], w_down = S[:, e:2e].T)."""
    parts = ("ffn_up", "ffn_down") if cfg.layer_norm else ("ffn_gate", "ffn_up", "ffn_down")
    e = cfg.n_embd
    want = (cfg.n_ff, len(parts) * e)
    if S.shape != want:
        raise ValueError("%s: shape %s ([n_ff][run]), expected %s" % (NEURON_TENSOR, S.shape, want))
    mats = {}
    for j, p in enumerate(parts):
        part = S[:, j * e:(j + 1) * e]
        mats[p] = np.ascontiguousarray(part.T if p == "ffn_down" else part)
    return mats


def neuron_rounding(tensor_info, n_embd):
    """The rounding of the gate/up dot products of a neuron-bundle tensor: the engine takes
    them with its row-major numerics, so by the bundle's type (None for F32/F16/BF16). Each
    part (n_embd long) must be a whole number of the type's blocks."""
    name, blk, _ = GGML_TYPES.get(tensor_info.type, ("?", 1, 0))
    if n_embd % blk:
        raise ValueError("%s of type %s: parts of %d are not whole %d-blocks"
                         % (NEURON_TENSOR, name, n_embd, blk))
    if name not in ROUNDING:
        return None
    rblk, fn = ROUNDING[name]
    return fn if n_embd % rblk == 0 else None


def union_blocks(T, block=None, single_from=None):
    """Row ranges [(a, b)) whose predicted neurons are merged: one block of all T rows
    (block None), or consecutive blocks of `block` rows (the engine's prompt batches, -b);
    rows from single_from on (tokens generated one at a time) each alone."""
    end = T if single_from is None else min(max(single_from, 0), T)
    B = end if block is None else int(block)
    out = [(a, min(a + B, end)) for a in range(0, end, max(B, 1))]
    return out + [(r, r + 1) for r in range(end, T)]


class LlamaRef:
    def __init__(self, path, dtype=np.float64, exact_activations=False, sparsity=0.0,
                 predictor=None, neuron_union=True, neuron_block=None):
        """predictor: in layers with neuron bundles and a predictor, compute only the
        predicted neurons (True; the default when the file has a predictor) or all (False:
        the dense FFN, as the row-major model). neuron_union: with several rows in one
        forward call, every row gets every neuron predicted for some row of its block (True,
        as the engine) or only its own (False). neuron_block: the block, in rows (the
        engine's prompt batch, -b); None: all rows of one forward call."""
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

        def optional(name):
            """A tensor that is only added or divided by (a bias, the RoPE frequency
            factors): dequantized exactly, never rounded; None when absent."""
            return g.tensor(name).astype(dtype) if name in g.tensors else None

        self.tok_embd = w("token_embd.weight")                  # (n_vocab, n_embd)
        self.n_vocab = self.tok_embd.shape[0]
        self.output_norm = w("output_norm.weight")               # (n_embd,)
        self.output_norm_b = optional("output_norm.bias")
        # OPT's learned positions, (n_ctx, n_embd); None for the RoPE families
        self.pos_embd = optional("position_embd.weight") if self.cfg.layer_norm else None
        if self.cfg.layer_norm and self.pos_embd is None:
            raise ValueError("opt: position_embd.weight missing")
        if "output.weight" in g.tensors:
            self.output = w("output.weight")                     # (n_vocab, n_embd)
        else:
            self.output = self.tok_embd                          # tied classifier
        # Llama 3 RoPE frequency factors (llama.cpp LLM_TENSOR_ROPE_FREQS), ne [rope_dim/2]
        self.rope_freqs = optional("rope_freqs.weight")
        self.flash = is_flash_layout(g.metadata)
        self.layers = []
        self.ffn_mid_zeros = self.ffn_mid_seen = 0   # exact zeros into ffn_down, counted
        for i in range(self.cfg.n_layer):
            p = "blk.%d." % i
            bundled = p + NEURON_TENSOR in g.tensors
            pred_names = [p + k for k in PREDICTOR_TENSORS]
            has_pred = [n in g.tensors for n in pred_names]
            if any(has_pred) and not (all(has_pred) and bundled):
                raise ValueError("blk.%d: a predictor needs all of %s and %s"
                                 % (i, ", ".join(PREDICTOR_TENSORS), NEURON_TENSOR))
            if bundled and not self.flash:
                raise ValueError("%s%s in a row-major file (neuron bundles are a flash-layout "
                                 "form)" % (p, NEURON_TENSOR))
            if bundled and not (self.cfg.layer_norm or self.cfg.gate_relu):
                raise ValueError("%s%s: neuron bundles need a ReLU FFN (tierllm.ffn_activation "
                                 "= \"relu\" or opt); this one is SwiGLU" % (p, NEURON_TENSOR))
            if bundled:
                for site in ("ffn_gate_up.cols", "ffn_down.cols"):
                    if p + site in g.tensors:
                        raise ValueError("blk.%d has both %s and %s" % (i, NEURON_TENSOR, site))
            if self.flash:        # from the site tensors: never rounded ...
                L = {}
                sites = ATTN_SITES if bundled else FLASH_SITES
                for k, a in flash_matrices(self.cfg, lambda site: g.tensor(p + site),
                                           sites).items():
                    L[k] = a.astype(dtype)
                    self.rounds[id(L[k])] = None
                if bundled:       # ... but the bundles' gate/up rows round as row-major ones
                    fn = neuron_rounding(g.tensors[p + NEURON_TENSOR], self.cfg.n_embd)
                    for k, a in neuron_matrices(self.cfg, g.tensor(p + NEURON_TENSOR)).items():
                        L[k] = a.astype(dtype)
                        self.rounds[id(L[k])] = None if k == "ffn_down" else fn
            else:
                mats = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_up", "ffn_down"]
                if not self.cfg.layer_norm:                      # OPT's FFN has no gate
                    mats.append("ffn_gate")
                L = {k: w(p + k + ".weight") for k in mats}
            L.update({k: w(p + k + ".weight") for k in ("attn_norm", "ffn_norm")})
            L.setdefault("ffn_gate", None)
            for k in BIASES + ("attn_norm", "ffn_norm", "ffn_up", "ffn_down", "ffn_gate"):
                L[k + ".bias"] = optional(p + k + ".bias")       # None when absent
            L["ffn_neurons"] = bundled
            # the predictor (V [rank][n_embd], U [n_ff][rank], pb [n_ff]): exact, never rounded
            L["ffn_pred"] = tuple(g.tensor(n).astype(dtype) for n in pred_names) \
                if all(has_pred) else None
            self.layers.append(L)
        self._check_shapes()
        self.thresholds = self._sparsity_thresholds(sparsity)
        self.has_predictor = any(L["ffn_pred"] is not None for L in self.layers)
        if predictor is None:
            predictor = self.has_predictor
        if predictor and not self.has_predictor:
            raise ValueError("predictor=True: the file has no %s" % PREDICTOR_TENSORS[0])
        self.predictor = bool(predictor)
        self.neuron_union = bool(neuron_union)
        if neuron_block is not None and int(neuron_block) < 1:
            raise ValueError("neuron_block %r: must be >= 1 (or None)" % (neuron_block,))
        self.neuron_block = neuron_block
        self._single_from = None    # greedy: rows from here on are generated one at a time
        self._collect = None        # neuron_stats(): per layer (layer, s, dense h, mask used)
        self.neuron_scores = {}     # the last forward's predictor scores, by layer

    # Activation sparsity (tierllm's model/sparsity.h, written from its definition): a
    # converted file carries, per layer and per matrix input (attn_in: wq/wk/wv, attn_out:
    # wo, ffn_in: gate/up, ffn_mid: down), the magnitudes below which 0, 1, ..., 100% of
    # the calibration inputs fell, and an allocation: each input's level for sparsity
    # S = 0, 0.05, ..., 1. At S, an input's level is the allocation interpolated linearly
    # (at most 0.99), its threshold the table at 100 x level, interpolated linearly, and
    # inputs of smaller magnitude are zeroed before the product.
    SITES = ("attn_in", "attn_out", "ffn_in", "ffn_mid")

    def _sparsity_thresholds(self, s):
        if s == 0:
            return None
        md = self.gguf.metadata
        if md.get("tierllm.sparse.version") != 1:
            raise ValueError("sparsity %g needs a file with tierllm.sparse version 1" % s)
        levels = int(md["tierllm.sparse.levels"])
        table = np.asarray(md["tierllm.sparse.thresholds"], dtype=np.float64).reshape(
            self.cfg.n_layer, len(self.SITES), levels)

        def interp(rows, x):                  # rows[..., k] at k = x, linearly
            i = min(int(x), rows.shape[-1] - 1)
            if i == rows.shape[-1] - 1:
                return rows[..., i]
            return rows[..., i] + (x - i) * (rows[..., i + 1] - rows[..., i])
        if "tierllm.sparse.alloc" in md:
            alloc = np.asarray(md["tierllm.sparse.alloc"], dtype=np.float64).reshape(
                -1, len(self.SITES))
            # as the engine: the float S widened to double, times the rows' step count
            site_level = np.minimum(
                interp(alloc.T, float(np.float32(s)) * (alloc.shape[0] - 1)), 0.99)
        else:                                 # no allocation: every input at S
            site_level = np.full(len(self.SITES), float(np.float32(s)))
        site_level = site_level.astype(np.float32).astype(np.float64)
        thr = np.zeros((self.cfg.n_layer, len(self.SITES)))
        for j in range(len(self.SITES)):
            if site_level[j] > 0:
                thr[:, j] = interp(table[:, j, :], site_level[j] * (levels - 1))
        return thr.astype(np.float32)

    def sparsify(self, x, layer, site):
        if self.thresholds is None:
            return x
        t = float(self.thresholds[layer, self.SITES.index(site)])
        return np.where(np.abs(x) < t, 0.0, x).astype(x.dtype)

    @property
    def rounds_any(self):
        """True if some matmul rounds its activations (a weight of a rounding type)."""
        return self.rounds_layers or self.rounds[id(self.output)] is not None

    @property
    def rounds_layers(self):
        """True if a layer's matmul rounds its activations. False for a flash-layout file
        (its layer matrices never round), where only the classifier may round."""
        mats = [L[k] for L in self.layers for k in (
            "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
            if L[k] is not None]
        return any(self.rounds[id(m)] is not None for m in mats)

    def classifier_tie_flips(self, tokens, tol):
        """Per position, the classifier's near-tie inputs as logit changes: a (k, n_vocab)
        array, row i = what rounding the i-th nearest such input the other way does to
        the logits. When the classifier's activation rounding is the only rounding (a
        file whose layers do not round), an engine whose final hidden state is within tol
        of ours (relative to a rounding block's amax) rounds differently only inputs within
        2*127*tol of a tie (|x|/d = k + 1/2: x/d moves by up to 127*tol with x and as much
        again with d), each one step d = amax/127 (both schemes) to the tie's other side:
        logit v moves by (q_alt - q) d W[v, j]. Empty (k = 0) when it does not round."""
        fn = self.rounds[id(self.output)]
        x = self.hidden(tokens)
        T = x.shape[0]
        if fn is None or self.exact_activations:
            return [np.zeros((0, self.n_vocab))] * T
        blk = QK if fn is round_activations else QK_K
        x = x.astype(np.float32).astype(np.float64)            # the engine's float32 state
        step = np.repeat(np.abs(x).reshape(T, -1, blk).max(axis=-1) / 127.0, blk, axis=1)
        step = np.where(step == 0, np.inf, step)                # all-zero block: no ties
        v = x / step                                            # x/d, signed
        q = np.rint(fn(x) / step)                               # our rounding's q
        lo = np.floor(v)
        dist = np.abs(v - lo - 0.5)                             # distance to the tie
        dist[np.abs(v) >= 127] = np.inf                         # the block's amax: q = +-127
        alt = np.where(q == lo, lo + 1, lo)                     # the tie's other side
        flips = []
        for r in range(T):
            j = np.flatnonzero(dist[r] <= 254.0 * tol)
            j = j[np.argsort(dist[r, j], kind="stable")]
            flips.append(((alt - q)[r, j] * step[r, j])[:, None] * self.output[:, j].T)
        return flips

    def mm(self, x, W):
        """x @ W.T, with x rounded to x' first by the scheme of W's type (if any)."""
        fn = self.rounds[id(W)]
        if fn is not None and not self.exact_activations:
            x = fn(x)
        return x @ W.T

    def linear(self, x, L, name):
        """W x (+ b when blk.N.<name>.bias exists): the bias is added after the product,
        so it does not change the rounding of x."""
        y = self.mm(x, L[name])
        b = L[name + ".bias"]
        return y if b is None else y + b

    def _check_shapes(self):
        c = self.cfg
        q = c.n_head * c.head_dim
        kv = c.n_head_kv * c.head_dim
        want = {"attn_norm": (c.n_embd,), "attn_q": (q, c.n_embd),
                "attn_k": (kv, c.n_embd), "attn_v": (kv, c.n_embd),
                "attn_output": (c.n_embd, q), "ffn_norm": (c.n_embd,),
                "ffn_gate": (c.n_ff, c.n_embd), "ffn_up": (c.n_ff, c.n_embd),
                "ffn_down": (c.n_embd, c.n_ff),
                "attn_q.bias": (q,), "attn_k.bias": (kv,), "attn_v.bias": (kv,),
                "attn_output.bias": (c.n_embd,), "attn_norm.bias": (c.n_embd,),
                "ffn_norm.bias": (c.n_embd,), "ffn_up.bias": (c.n_ff,),
                "ffn_down.bias": (c.n_embd,)}
        for i, L in enumerate(self.layers):
            for k, shape in want.items():
                if L[k] is not None and L[k].shape != shape:
                    raise ValueError("blk.%d.%s: shape %s, expected %s"
                                     % (i, k, L[k].shape, shape))
            if L["ffn_pred"] is not None:
                V, U, b = L["ffn_pred"]
                rank = V.shape[0]
                for name, a, shape in zip(PREDICTOR_TENSORS, (V, U, b),
                                          ((rank, c.n_embd), (c.n_ff, rank), (c.n_ff,))):
                    if a.shape != shape or rank == 0:
                        raise ValueError("blk.%d.%s: shape %s, expected %s (rank %d)"
                                         % (i, name, a.shape, shape, rank))
        if self.rope_freqs is not None and self.rope_freqs.shape != (c.rope_dim // 2,):
            raise ValueError("rope_freqs.weight: shape %s, expected (%d,) (rope_dim/2)"
                             % (self.rope_freqs.shape, c.rope_dim // 2))
        assert self.tok_embd.shape == (self.n_vocab, c.n_embd)
        assert self.output.shape == (self.n_vocab, c.n_embd)
        assert self.output_norm.shape == (c.n_embd,)
        if self.pos_embd is not None and self.pos_embd.shape != (c.n_ctx, c.n_embd):
            raise ValueError("position_embd.weight: shape %s, expected (%d, %d)"
                             % (self.pos_embd.shape, c.n_ctx, c.n_embd))

    # --- building blocks -------------------------------------------------

    def rmsnorm(self, x, w):
        # x: (T, n_embd)
        ms = np.mean(x * x, axis=-1, keepdims=True)
        return x * (1.0 / np.sqrt(ms + self.cfg.eps)) * w

    def layernorm(self, x, w, b):
        """OPT's LayerNorm over the last axis: biased variance, eps inside the root."""
        mean = np.mean(x, axis=-1, keepdims=True)
        var = np.mean((x - mean) ** 2, axis=-1, keepdims=True)
        y = (x - mean) / np.sqrt(var + self.cfg.eps) * w
        return y if b is None else y + b

    def norm(self, x, L, name):
        """The family's norm with blk.N.<name>.weight (and .bias when present)."""
        if self.cfg.layer_norm:
            return self.layernorm(x, L[name], L[name + ".bias"])
        y = self.rmsnorm(x, L[name])
        b = L[name + ".bias"]
        return y if b is None else y + b

    def rope(self, x, positions):
        """RoPE of the architecture (see rope()): adjacent pairs for llama, halves
        (NeoX) for qwen2; theta divided by rope_freqs.weight when present.
        x: (T, n_heads, head_dim); dims >= rope_dim are left unchanged."""
        c = self.cfg
        return rope(x, positions, c.rope_dim, c.rope_base, neox=(c.rope_type == "neox"),
                    freq_factors=self.rope_freqs)

    def attention(self, x, L, positions, layer=0):
        c = self.cfg
        T = x.shape[0]
        x = self.sparsify(x, layer, "attn_in")
        q = self.linear(x, L, "attn_q").reshape(T, c.n_head, c.head_dim)
        k = self.linear(x, L, "attn_k").reshape(T, c.n_head_kv, c.head_dim)
        v = self.linear(x, L, "attn_v").reshape(T, c.n_head_kv, c.head_dim)
        if c.rope_type is not None:                                    # not OPT
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
        masked = attention_mask(positions, c.sliding_window)           # causal (+ window)
        scores = np.where(masked[None, :, :], -np.inf, scores)
        scores = scores - scores.max(axis=-1, keepdims=True)
        p = np.exp(scores)
        p = p / p.sum(axis=-1, keepdims=True)
        out = (p @ v).transpose(1, 0, 2).reshape(T, c.n_head * c.head_dim)
        return self.linear(self.sparsify(out, layer, "attn_out"), L, "attn_output")

    def neuron_scores_of(self, xn, pred):
        """The predictor's scores s = (xn V^T) U^T + pb, (rows, n_ff)."""
        V, U, b = pred
        return (xn @ V.T) @ U.T + b

    def neuron_mask(self, s):
        """The neurons each row computes, (rows, n_ff) bool, from the scores s: per row
        s > 0 (neuron_union False), or the union of s > 0 over the rows of each block
        (union_blocks: all rows of the call, or neuron_block rows; greedy's generated rows
        alone)."""
        on = s > 0
        if not self.neuron_union:
            return on
        out = np.empty_like(on)
        for a, b in union_blocks(len(s), self.neuron_block, self._single_from):
            out[a:b] = on[a:b].any(axis=0)
        return out

    def ffn(self, x, L, layer=0):
        pred = L["ffn_pred"]
        use = pred is not None and self.predictor    # FFN selection by the predictor:
        if not use:                                  # the FFN sites' thresholds do not apply
            x = self.sparsify(x, layer, "ffn_in")
        if self.cfg.layer_norm:                                        # OPT: ReLU, biases
            h = np.maximum(self.linear(x, L, "ffn_up"), 0.0)
        else:
            g = self.linear(x, L, "ffn_gate")
            u = self.linear(x, L, "ffn_up")
            act = np.maximum(g, 0.0) if self.cfg.gate_relu else g / (1.0 + np.exp(-g))
            h = act * u
        mask = None
        if pred is not None and (use or self._collect is not None):
            s = self.neuron_scores_of(x, pred)
            if use:
                mask = self.neuron_mask(s)
                self.neuron_scores[layer] = s
            if self._collect is not None:
                self._collect.append((layer, s, h, mask))
        if mask is not None:                         # only the selected neurons: h = 0 else
            h = h.copy()
            h[~mask] = 0.0
        if not self.cfg.layer_norm:
            self.ffn_mid_zeros += int(np.count_nonzero(h == 0.0))
            self.ffn_mid_seen += h.size
        if not use:
            h = self.sparsify(h, layer, "ffn_mid")
        return self.linear(h, L, "ffn_down")

    def neuron_stats(self, tokens):
        """Per layer, for the rows of one forward over tokens (as configured: with the
        predictor unless predictor=False), None for a layer without a predictor, else a dict:
          scores     (rows, n_ff) the predictor's s
          predicted  (rows, n_ff) s > 0, each row its own
          active     (rows, n_ff) h != 0 in the dense FFN (every neuron, on this input)
          recall     sum of m_ri over active & predicted / sum over active, where
                     m_ri = |h_ri| * ||w_down[:, i]|| (the output mass; 1.0 if none active)
          predicted_share, active_share   the means of predicted and active
          applied    the mask the forward used (union over blocks), None when predictor=False
          recall_applied   the recall of `applied` (None when predictor=False)
        and the total recall over the layers: (list, total)."""
        self._collect = []
        try:
            self.hidden(tokens)
            rec = self._collect
        finally:
            self._collect = None
        if not rec:
            raise ValueError("no layer has a predictor (%s)" % ", ".join(PREDICTOR_TENSORS))
        out = [None] * self.cfg.n_layer
        hit_all = mass_all = 0.0
        for layer, s, h, applied in rec:
            wn = np.linalg.norm(np.asarray(self.layers[layer]["ffn_down"], np.float64), axis=0)
            mass = np.abs(np.asarray(h, np.float64)) * wn[None, :]
            active, predicted = h != 0, s > 0
            total = float(mass[active].sum())
            hit = float(mass[active & predicted].sum())

            def ratio(a):
                return a / total if total > 0 else 1.0
            out[layer] = {"scores": s, "predicted": predicted, "active": active,
                          "recall": ratio(hit), "predicted_share": float(predicted.mean()),
                          "active_share": float(active.mean()), "applied": applied,
                          "recall_applied": None if applied is None else
                          ratio(float(mass[active & applied].sum()))}
            hit_all += hit
            mass_all += total
        return out, (hit_all / mass_all if mass_all > 0 else 1.0)

    def near_zero_scores(self, eps=1e-3):
        """After a forward with the predictor: (n_near, n_decisive, n_total): the scores
        with |s| < eps, and how many of the neuron choices the forward made could turn on
        them: per block of union (per row without the union), the neurons whose largest
        score in it is within eps of 0 (an engine computing s in float32 from the same
        values could put such a neuron in or out of the set)."""
        near = decisive = total = 0
        for s in self.neuron_scores.values():
            near += int(np.count_nonzero(np.abs(s) < eps))
            total += s.size
            if not self.neuron_union:
                decisive += int(np.count_nonzero(np.abs(s) < eps))
                continue
            for a, b in union_blocks(len(s), self.neuron_block, self._single_from):
                decisive += int(np.count_nonzero(np.abs(s[a:b].max(axis=0)) < eps))
        return near, decisive, total

    # --- forward ---------------------------------------------------------

    def forward(self, tokens):
        """Logits (len(tokens), n_vocab) in self.dtype, positions 0..T-1."""
        return self.mm(self.hidden(tokens), self.output)

    def hidden(self, tokens):
        """The classifier's input (len(tokens), n_embd): the final norm's output."""
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 1 or len(tokens) == 0:
            raise ValueError("need a non-empty 1-D token list")
        if tokens.min() < 0 or tokens.max() >= self.n_vocab:
            raise ValueError("token id out of range [0, %d)" % self.n_vocab)
        positions = np.arange(len(tokens))
        self.neuron_scores = {}
        x = self.tok_embd[tokens]                                      # (T, n_embd)
        if self.pos_embd is not None:
            if len(tokens) > self.pos_embd.shape[0]:
                raise ValueError("%d tokens exceed the %d learned positions"
                                 % (len(tokens), self.pos_embd.shape[0]))
            x = x + self.pos_embd[positions]
        for i, L in enumerate(self.layers):
            x = x + self.attention(self.norm(x, L, "attn_norm"), L, positions, i)
            x = x + self.ffn(self.norm(x, L, "ffn_norm"), L, i)
        if self.cfg.layer_norm:
            x = self.layernorm(x, self.output_norm, self.output_norm_b)
        else:
            x = self.rmsnorm(x, self.output_norm)
            if self.output_norm_b is not None:
                x = x + self.output_norm_b
        return x

    def greedy(self, tokens, n):
        """n greedy (argmax) continuation ids; full recompute each step. With a predictor
        (union mode), as the engine generates: the prompt's rows share the union of their
        block(s), each generated row has its own predicted neurons."""
        toks = list(tokens)
        out = []
        self._single_from = len(toks)
        try:
            for _ in range(n):
                nxt = int(np.argmax(self.forward(toks)[-1]))
                out.append(nxt)
                toks.append(nxt)
        finally:
            self._single_from = None
        return out


# --- self-test of the architecture features (RoPE pairing, frequency factors, window,
# --- biases, qwen2), on hand-computed values and on small GGUF files written here --------

def _selftest_rope_mask():
    """RoPE pairings and frequency factors on a hand-computed example; the window mask."""
    cos, sin = math.cos, math.sin
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).reshape(1, 1, 6)  # head_dim 6, rope_dim 4
    # base 10000, rope_dim 4, pos 1: theta_0 = 1, theta_1 = 10000^(-2/4) = 0.01
    t0, t1 = 1.0, 0.01
    normal = [1 * cos(t0) - 2 * sin(t0), 1 * sin(t0) + 2 * cos(t0),     # pair (0, 1)
              3 * cos(t1) - 4 * sin(t1), 3 * sin(t1) + 4 * cos(t1), 5, 6]  # pair (2, 3)
    neox = [1 * cos(t0) - 3 * sin(t0), 2 * cos(t1) - 4 * sin(t1),       # pairs (0, 2)
            1 * sin(t0) + 3 * cos(t0), 2 * sin(t1) + 4 * cos(t1), 5, 6]  # and (1, 3)
    got_n = rope(x, [1], 4, 10000.0, neox=False)[0, 0]
    got_x = rope(x, [1], 4, 10000.0, neox=True)[0, 0]
    assert np.allclose(got_n, normal, rtol=0, atol=1e-14), (got_n, normal)
    assert np.allclose(got_x, neox, rtol=0, atol=1e-14), (got_x, neox)
    assert got_n[4] == 5 and got_n[5] == 6 and got_x[4] == 5 and got_x[5] == 6
    assert np.max(np.abs(got_n - got_x)) > 0.5              # the two pairings differ
    for neo in (False, True):                               # position 0: identity
        assert np.array_equal(rope(x, [0], 4, 10000.0, neox=neo), x)
    # frequency factors [2, 0.5] divide the angles: theta_0 = 1/2, theta_1 = 0.01/0.5 = 0.02
    t0, t1 = 0.5, 0.02
    normal = [1 * cos(t0) - 2 * sin(t0), 1 * sin(t0) + 2 * cos(t0),
              3 * cos(t1) - 4 * sin(t1), 3 * sin(t1) + 4 * cos(t1), 5, 6]
    neox = [1 * cos(t0) - 3 * sin(t0), 2 * cos(t1) - 4 * sin(t1),
            1 * sin(t0) + 3 * cos(t0), 2 * sin(t1) + 4 * cos(t1), 5, 6]
    ff = np.array([2.0, 0.5])
    got_n = rope(x, [1], 4, 10000.0, neox=False, freq_factors=ff)[0, 0]
    got_x = rope(x, [1], 4, 10000.0, neox=True, freq_factors=ff)[0, 0]
    assert np.allclose(got_n, normal, rtol=0, atol=1e-14), (got_n, normal)
    assert np.allclose(got_x, neox, rtol=0, atol=1e-14), (got_x, neox)
    # exact: factors 2 at position 2 == no factors at position 1 (powers of two);
    # factors of 1 == no factors, bit for bit
    rng = np.random.default_rng(1)
    y = rng.standard_normal((3, 4, 8))
    for neo in (False, True):
        a = rope(y, [2, 4, 6], 6, 500.0, neox=neo, freq_factors=np.full(3, 2.0))
        assert np.array_equal(a, rope(y, [1, 2, 3], 6, 500.0, neox=neo))
        a = rope(y, [0, 5, 9], 6, 500.0, neox=neo, freq_factors=np.ones(3))
        assert np.array_equal(a, rope(y, [0, 5, 9], 6, 500.0, neox=neo))
    # NeoX on x == normal RoPE on x with its first rope_dim elements reordered so that
    # element i and i + rope_dim/2 sit at 2i and 2i+1 (the conversion permutation)
    perm = _neox_to_adjacent(8, 6)
    a = rope(y, [0, 3, 7], 6, 500.0, neox=True)
    b = rope(y[:, :, perm], [0, 3, 7], 6, 500.0, neox=False)
    assert np.array_equal(a[:, :, perm], b)

    # sliding window W = 2 over 4 positions: query p sees keys p-1 and p
    m = attention_mask(np.arange(4), 2)
    sees = [[0], [0, 1], [1, 2], [2, 3]]
    assert all(sorted(np.flatnonzero(~m[p])) == sees[p] for p in range(4)), ~m
    assert np.array_equal(attention_mask(np.arange(4)), np.triu(np.ones((4, 4), bool), 1))
    assert np.array_equal(~attention_mask(np.arange(4), 1), np.eye(4, dtype=bool))
    for W in (4, 5, 2 ** 32 - 1):                         # W >= T: plain causal
        assert np.array_equal(attention_mask(np.arange(4), W), attention_mask(np.arange(4)))
    print("llama_ref rope/window self-test OK")


def _neox_to_adjacent(head_dim, rope_dim):
    """Index array p with p[2i] = i, p[2i+1] = i + rope_dim/2 (i < rope_dim/2) and
    p[j] = j for j >= rope_dim: y = x[p] puts NeoX pair i at adjacent slots 2i, 2i+1."""
    half = rope_dim // 2
    p = np.arange(head_dim)
    p[0:rope_dim:2] = np.arange(half)
    p[1:rope_dim:2] = np.arange(half) + half
    return p


def _quantize_q8_0(a):
    """Q8_0 blocks of a (consecutive 32 elements, rows a multiple of 32), as ggml's
    quantize_row_q8_0_ref: d = amax/127 (stored as fp16), q = round(x/d)."""
    b = np.asarray(a, np.float32).reshape(-1, QK)
    d = (np.abs(b).max(axis=1, keepdims=True) / 127).astype(np.float32)
    q = np.round(b / np.where(d == 0, 1, d)).clip(-127, 127).astype(np.int8)
    return np.concatenate([d.astype("<f2").view(np.uint8), q.view(np.uint8)], axis=1).tobytes()


def _write_gguf(path, kv, tensors, alignment=32):
    """Minimal GGUF v3 writer for the self-test. kv: list of (key, value type, value) with
    scalar or string values, or T_ARRAY and (element type, numbers); tensors: list of (name, numpy array) or (name, numpy array,
    type), written as F32 (default), F16 or Q8_0 with ne = reversed(shape)."""
    def gstr(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b
    tensors = [t if len(t) == 3 else (t[0], t[1], gguf_np.GGML_F32) for t in tensors]
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for k, vtype, v in kv:
        out += gstr(k) + struct.pack("<I", vtype)
        if vtype == gguf_np.T_ARRAY:                   # v = (element type, values): numbers
            etype, vals = v
            vals = np.asarray(vals, dtype=np.dtype(gguf_np._SCALAR_FMT[etype])).reshape(-1)
            out += struct.pack("<IQ", etype, len(vals)) + vals.tobytes()
        elif vtype == gguf_np.T_STRING:
            out += gstr(v)
        else:
            out += struct.pack(gguf_np._SCALAR_FMT[vtype], v)
    data, offsets = bytearray(), []
    for _, a, gtype in tensors:
        data += bytes(-len(data) % alignment)
        offsets.append(len(data))
        if gtype == gguf_np.GGML_Q8_0:
            data += _quantize_q8_0(a)
        elif gtype == gguf_np.GGML_F16:
            data += np.ascontiguousarray(a, dtype="<f2").tobytes()
        else:
            assert gtype == gguf_np.GGML_F32, gtype
            data += np.ascontiguousarray(a, dtype="<f4").tobytes()
    for (name, a, gtype), off in zip(tensors, offsets):
        ne = list(reversed(a.shape))
        out += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", gtype, off)
    out += bytes(-len(out) % alignment)
    with open(path, "wb") as f:
        f.write(bytes(out + data))


class _Spec:
    """A model as metadata + F32 tensors, to derive variants from and write as GGUF."""

    META_KEYS = ("tierllm.ffn_activation",)     # un-prefixed keys from_file carries

    def __init__(self, arch, kv, tensors, meta=None):
        self.arch = arch
        self.kv = dict(kv)              # key without the "<arch>." prefix -> (vtype, value)
        self.tensors = dict(tensors)    # name -> float32 array
        self.meta = dict(meta or {})    # whole key (e.g. "tierllm.ffn_activation") -> (vtype, value)

    def kv_list(self):
        """The metadata as _write_gguf's (key, type, value) list."""
        kv = [("general.architecture", gguf_np.T_STRING, self.arch)]
        kv += [(self.arch + "." + k, vt, v) for k, (vt, v) in self.kv.items()]
        return kv + [(k, vt, v) for k, (vt, v) in self.meta.items()]

    @classmethod
    def synthetic(cls, seed=0, n_embd=32, n_head=4, n_head_kv=2, head_dim=8, rope_dim=6,
                  n_ff=48, n_layer=2, n_vocab=40, tied=False):
        rng = np.random.default_rng(seed)
        U32, F32 = gguf_np.T_UINT32, gguf_np.T_FLOAT32
        kv = {"embedding_length": (U32, n_embd), "block_count": (U32, n_layer),
              "feed_forward_length": (U32, n_ff), "attention.head_count": (U32, n_head),
              "attention.head_count_kv": (U32, n_head_kv), "context_length": (U32, 256),
              "attention.layer_norm_rms_epsilon": (F32, 1e-5),
              "rope.freq_base": (F32, 1000.0), "rope.dimension_count": (U32, rope_dim),
              "attention.key_length": (U32, head_dim),
              "attention.value_length": (U32, head_dim)}

        def r(*shape, s=0.3):
            return (rng.standard_normal(shape) * s).astype(np.float32)
        q, k = n_head * head_dim, n_head_kv * head_dim
        t = {"token_embd.weight": r(n_vocab, n_embd, s=1.0),
             "output_norm.weight": 1 + r(n_embd, s=0.1)}
        if not tied:
            t["output.weight"] = r(n_vocab, n_embd)
        for i in range(n_layer):
            p = "blk.%d." % i
            t.update({p + "attn_norm.weight": 1 + r(n_embd, s=0.1),
                      p + "attn_q.weight": r(q, n_embd), p + "attn_k.weight": r(k, n_embd),
                      p + "attn_v.weight": r(k, n_embd), p + "attn_output.weight": r(n_embd, q),
                      p + "ffn_norm.weight": 1 + r(n_embd, s=0.1),
                      p + "ffn_gate.weight": r(n_ff, n_embd), p + "ffn_up.weight": r(n_ff, n_embd),
                      p + "ffn_down.weight": r(n_embd, n_ff)})
        return cls("llama", kv, t)

    @classmethod
    def from_file(cls, path):
        """The hyperparameters and every tensor (dequantized to F32) of a model file."""
        g = GGUFFile(path)
        arch = g.get("general.architecture", "llama")
        pre = arch + "."
        kv = {k[len(pre):]: (g.metadata_types[k], v) for k, v in g.metadata.items()
              if k.startswith(pre) and g.metadata_types[k] not in (gguf_np.T_ARRAY,)}
        meta = {k: (g.metadata_types[k], g.metadata[k]) for k in cls.META_KEYS
                if k in g.metadata}
        if not is_flash_layout(g.metadata):
            return cls(arch, kv, {n: g.tensor(n) for n in g.tensors}, meta)
        # as row-major: the site tensors and neuron bundles rebuilt, the predictor dropped
        drop = (".cols", "." + NEURON_TENSOR) + tuple("." + k for k in PREDICTOR_TENSORS)
        t = {n: g.tensor(n) for n in g.tensors if not n.endswith(drop)}
        cfg = LlamaConfig(g)
        for i in range(cfg.n_layer):
            p = "blk.%d." % i
            bundled = p + NEURON_TENSOR in g.tensors
            mats = flash_matrices(cfg, lambda site: g.tensor(p + site),
                                  ATTN_SITES if bundled else FLASH_SITES)
            if bundled:
                mats.update(neuron_matrices(cfg, g.tensor(p + NEURON_TENSOR)))
            for k, a in mats.items():
                t[p + k + ".weight"] = a
        return cls(arch, kv, t, meta)

    def copy(self, arch=None):
        return _Spec(arch or self.arch, self.kv, {n: a.copy() for n, a in self.tensors.items()},
                     self.meta)

    def u32(self, key):
        return int(self.kv[key][1])

    def write(self, path):
        _write_gguf(path, self.kv_list(), list(self.tensors.items()))
        return path


def _attention_loop(m, x, L, positions):
    """The attention block written as plain loops (one query, head and key at a time),
    independent of LlamaRef.attention's array code, to check it: biases added to the
    products before RoPE, pairing by architecture, factors, GQA h // group, window."""
    c = m.cfg
    T, hd, half = x.shape[0], c.head_dim, c.rope_dim // 2
    q = m.mm(x, L["attn_q"])
    k = m.mm(x, L["attn_k"])
    v = m.mm(x, L["attn_v"])
    for name, a in (("attn_q", q), ("attn_k", k), ("attn_v", v)):
        if L[name + ".bias"] is not None:
            a += L[name + ".bias"]

    def rotate(vec, pos):                                # one head's vector, in place
        for i in range(half):
            a, b = (i, i + half) if c.rope_type == "neox" else (2 * i, 2 * i + 1)
            theta = pos * c.rope_base ** (-2.0 * i / c.rope_dim)
            if m.rope_freqs is not None:
                theta /= float(m.rope_freqs[i])
            va, vb = vec[a], vec[b]
            vec[a] = va * math.cos(theta) - vb * math.sin(theta)
            vec[b] = va * math.sin(theta) + vb * math.cos(theta)
    for t in range(T):
        for h in range(c.n_head):
            rotate(q[t, h * hd:(h + 1) * hd], positions[t])
        for h in range(c.n_head_kv):
            rotate(k[t, h * hd:(h + 1) * hd], positions[t])
    out = np.zeros((T, c.n_head * hd))
    group = c.n_head // c.n_head_kv
    for t in range(T):
        for h in range(c.n_head):
            kh = h // group
            qv = q[t, h * hd:(h + 1) * hd]
            keys = [s for s in range(T) if positions[s] <= positions[t] and
                    (c.sliding_window is None or positions[t] - positions[s] < c.sliding_window)]
            sc = [float(np.dot(qv, k[s, kh * hd:(kh + 1) * hd])) / math.sqrt(hd) for s in keys]
            mx = max(sc)
            e = [math.exp(s - mx) for s in sc]
            for s, w in zip(keys, e):
                out[t, h * hd:(h + 1) * hd] += w / sum(e) * v[s, kh * hd:(kh + 1) * hd]
    o = m.mm(out, L["attn_output"])
    return o if L["attn_output.bias"] is None else o + L["attn_output.bias"]


def _rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def _selftest_models(base, tmp, tokens, label):
    """End-to-end checks on variants of the model `base` (a _Spec) written to GGUF in tmp:
    neutral extras are bit-identical to none; qwen2 (NeoX) on permuted q/k rows equals
    llama; bv equals bo = Wo bv; a k bias in the unrotated dims changes nothing; the
    array attention equals the loop version; the window's receptive field."""
    n = [0]

    def logits(spec, toks=tokens, **kw):
        n[0] += 1
        return LlamaRef(spec.write(os.path.join(tmp, "m%d.gguf" % n[0])), **kw).forward(toks)

    def ref_of(spec):
        n[0] += 1
        return LlamaRef(spec.write(os.path.join(tmp, "m%d.gguf" % n[0])))

    tokens = [t % base.tensors["token_embd.weight"].shape[0] for t in tokens]
    T = len(tokens)
    n_layer, n_embd = base.u32("block_count"), base.u32("embedding_length")
    n_head = base.u32("attention.head_count")
    n_kv = base.u32("attention.head_count_kv") if "attention.head_count_kv" in base.kv else n_head
    hd = base.u32("attention.key_length") if "attention.key_length" in base.kv else n_embd // n_head
    rd = base.u32("rope.dimension_count") if "rope.dimension_count" in base.kv else hd
    rng = np.random.default_rng(7)
    plain = logits(base)
    assert np.all(np.isfinite(plain))

    # 1. zero biases, rope_freqs of ones and a window >= T: bit-identical to none
    s = base.copy()
    for i in range(n_layer):
        for k, size in (("attn_q", n_head * hd), ("attn_k", n_kv * hd),
                        ("attn_v", n_kv * hd), ("attn_output", n_embd)):
            s.tensors["blk.%d.%s.bias" % (i, k)] = np.zeros(size, np.float32)
    s.tensors["rope_freqs.weight"] = np.ones(rd // 2, np.float32)
    for W in (T, 2 ** 32 - 1):
        s.kv["attention.sliding_window"] = (gguf_np.T_UINT32, W)
        assert np.array_equal(logits(s), plain), "neutral extras changed the logits"
    print("  %s: zero biases, unit rope_freqs, window >= T: bit-identical logits" % label)

    # 2. qwen2 = llama with NeoX: permuting the q/k rows (and biases) of each head from
    #    the adjacent to the half layout gives the same logits, with biases and factors
    s = base.copy(arch="llama")
    for i in range(n_layer):
        for k, size in (("attn_q", n_head * hd), ("attn_k", n_kv * hd),
                        ("attn_v", n_kv * hd), ("attn_output", n_embd)):
            s.tensors["blk.%d.%s.bias" % (i, k)] = \
                (rng.standard_normal(size) * 0.2).astype(np.float32)
    s.tensors["rope_freqs.weight"] = rng.uniform(0.5, 8.0, rd // 2).astype(np.float32)
    llama = logits(s)
    assert _rel(llama, plain) > 1e-3                    # the biases and factors matter
    q2 = s.copy(arch="qwen2")
    unperm = logits(q2)
    assert _rel(unperm, llama) > 1e-3, "qwen2 gave llama's logits without permutation"
    inv = np.argsort(_neox_to_adjacent(hd, rd))         # adjacent slot -> half slot
    for i in range(n_layer):
        for k, heads in (("attn_q", n_head), ("attn_k", n_kv)):
            rows = (np.arange(heads)[:, None] * hd + inv[None, :]).reshape(-1)
            for suf in (".weight", ".bias"):
                name = "blk.%d.%s%s" % (i, k, suf)
                q2.tensors[name] = s.tensors[name][rows]
    e = _rel(logits(q2), llama)
    assert e < 1e-12, e
    print("  %s: qwen2 (NeoX) on half-layout q/k rows == llama: rel %.1e; unpermuted %.2f"
          % (label, e, _rel(unperm, llama)))

    # 3. v bias b == output bias Wo b' (b' = b per query head: query head h uses kv head
    #    h // group, and each softmax row sums to 1); the o bias set in memory, in float64
    s = base.copy()
    group = n_head // n_kv
    for i in range(n_layer):
        s.tensors["blk.%d.attn_v.bias" % i] = \
            (rng.standard_normal(n_kv * hd) * 0.3).astype(np.float32)
    with_bv = logits(s)
    m = ref_of(base)
    for i, L in enumerate(m.layers):
        bv = s.tensors["blk.%d.attn_v.bias" % i].astype(np.float64)
        full = np.repeat(bv.reshape(n_kv, hd), group, axis=0).reshape(-1)
        L["attn_output.bias"] = L["attn_output"] @ full
    e = _rel(m.forward(tokens), with_bv)
    assert _rel(with_bv, plain) > 1e-3 and e < 1e-12, e
    # a k bias only in the unrotated dims (>= rope_dim) adds q.b to every key's score of
    # a query: softmax-invariant; in a rotated dim it is not
    if rd < hd:
        s = base.copy()
        for i in range(n_layer):
            b = np.zeros((n_kv, hd), np.float32)
            b[:, rd:] = rng.standard_normal((n_kv, hd - rd))
            s.tensors["blk.%d.attn_k.bias" % i] = b.reshape(-1)
        e1 = _rel(logits(s), plain)
        for i in range(n_layer):
            b = np.zeros((n_kv, hd), np.float32)
            b[:, 0] = 1.0
            s.tensors["blk.%d.attn_k.bias" % i] = b.reshape(-1)
        e2 = _rel(logits(s), plain)
        assert e1 < 1e-12 and e2 > 1e-4, (e1, e2)
    print("  %s: v bias == o bias Wo*bv (rel %.1e); k bias past rope_dim: %s"
          % (label, e, "no effect" if rd < hd else "skipped (rope_dim == head_dim)"))

    # 4. the array attention == the loop version, every feature on, both archs
    for arch, W in (("llama", 3), ("qwen2", 2), ("qwen2", None)):
        s = base.copy(arch=arch)
        for i in range(n_layer):
            for k, size in (("attn_q", n_head * hd), ("attn_k", n_kv * hd),
                            ("attn_v", n_kv * hd), ("attn_output", n_embd)):
                s.tensors["blk.%d.%s.bias" % (i, k)] = \
                    (rng.standard_normal(size) * 0.2).astype(np.float32)
        s.tensors["rope_freqs.weight"] = rng.uniform(0.5, 8.0, rd // 2).astype(np.float32)
        if W is not None:
            s.kv["attention.sliding_window"] = (gguf_np.T_UINT32, W)
        m = ref_of(s)
        x = m.rmsnorm(m.tok_embd[np.asarray(tokens)], m.layers[0]["attn_norm"])
        pos = np.arange(T)
        e = _rel(m.attention(x, m.layers[0], pos), _attention_loop(m, x, m.layers[0], pos))
        assert e < 1e-12, (arch, W, e)
    # a bias does not change the activation rounding: with attn_q rounding as Q8_0
    # (32-blocks), linear = round(x) Wq^T + bq
    L = m.layers[0]
    if n_embd % QK == 0:
        m.rounds[id(L["attn_q"])] = round_activations
        want = round_activations(x) @ L["attn_q"].T + L["attn_q.bias"]
        assert np.array_equal(m.linear(x, L, "attn_q"), want)
    print("  %s: attention == loop version (biases, factors, window, llama/qwen2); "
          "bias after the rounded product" % label)

    # 5. window W, n_layer layers: the row of position p depends on tokens
    #    p - n_layer*(W-1) .. p only (each layer reaches W-1 positions back)
    for W in (1, 2):
        s = base.copy()
        s.kv["attention.sliding_window"] = (gguf_np.T_UINT32, W)
        m = ref_of(s)
        reach = n_layer * (W - 1)
        p = T - 1
        toks = list(tokens)
        ref_row = m.forward(toks)[p]
        far = p - reach - 1                             # first token out of reach
        near = p - reach                                # last token within reach
        for j, changed in ((far, False), (near, True)):
            if j < 0:
                continue
            alt = list(toks)
            alt[j] = (toks[j] + 1) % m.n_vocab
            e = _rel(m.forward(alt)[p], ref_row)
            assert (e > 1e-6) if changed else (e < 1e-12), (W, j, changed, e)
    print("  %s: window receptive field = n_layer*(W-1) tokens back (W = 1, 2)" % label)


def resolve_ties(target, ref, flips, max_flips=12):
    """ref's rows with, per row, the subset of its flips (classifier_tie_flips: at most
    the first max_flips, the nearest ties) that brings it closest to target's row (max
    |difference|): the reference's logits under the rounding of the near-tie inputs
    that target's state had. Returns (those rows, the number of flips taken per row)."""
    out, taken = np.array(ref, dtype=np.float64), np.zeros(len(flips), dtype=int)
    for r, F in enumerate(flips):
        F = F[:max_flips]
        if len(F) == 0:
            continue
        pick = (np.arange(2 ** len(F))[:, None] >> np.arange(len(F))) & 1   # every subset
        cands = out[r] + pick @ F
        best = int(np.argmin(np.abs(cands - target[r]).max(axis=1)))
        out[r], taken[r] = cands[best], pick[best].sum()
    return out, taken


def _flash_file(spec, path, site_type=gguf_np.GGML_F32, output_type=gguf_np.GGML_F32,
                layout=("flash", FLASH_LAYOUT_VERSION), neurons=False, predictor=None):
    """Write spec (a row-major _Spec) in the flash layout, as `convert --layout flash`
    would: each layer's seven matrices replaced by its four site tensors (run c = the
    parts' column c, one after another), in site_type; output.weight in output_type.
    neurons: the FFN as neuron bundles (run i = w_gate[i, :] | w_up[i, :] | w_down[:, i],
    no gate for OPT) in site_type instead of its two sites; predictor: {layer: (V, U, pb)}
    written as ffn_pred_v, ffn_pred_u (F16) and ffn_pred_b (F32)."""
    kv = spec.kv_list()
    version = FLASH_LAYOUT_VERSION_NEURONS if predictor and layout[1] == FLASH_LAYOUT_VERSION \
        else layout[1]
    kv += [("tierllm.layout", gguf_np.T_STRING, layout[0]),
           ("tierllm.layout.version", gguf_np.T_UINT32, version)]
    if predictor:
        kv.append(("tierllm.neurons.rank", gguf_np.T_UINT32,
                   int(next(iter(predictor.values()))[0].shape[0])))
    parts = {k for _, ks in FLASH_SITES for k in ks}
    tensors = [(n, a, output_type if n == "output.weight" else gguf_np.GGML_F32)
               for n, a in spec.tensors.items()
               if not (n.startswith("blk.") and n.split(".")[2] in parts and n.endswith(".weight"))]
    for i in range(spec.u32("block_count")):
        p = "blk.%d." % i
        for site, ks in (ATTN_SITES if neurons else FLASH_SITES):
            runs = np.concatenate([spec.tensors[p + k + ".weight"].T for k in ks
                                   if p + k + ".weight" in spec.tensors], axis=1)
            tensors.append((p + site, runs, site_type))
        if neurons:
            ks = [k for k in ("ffn_gate", "ffn_up") if p + k + ".weight" in spec.tensors]
            runs = np.concatenate([spec.tensors[p + k + ".weight"] for k in ks]
                                  + [spec.tensors[p + "ffn_down.weight"].T], axis=1)
            tensors.append((p + NEURON_TENSOR, runs, site_type))
        if predictor and i in predictor:
            V, U, b = predictor[i]
            tensors += [(p + "ffn_pred_v", V, gguf_np.GGML_F16),
                        (p + "ffn_pred_u", U, gguf_np.GGML_F16),
                        (p + "ffn_pred_b", b, gguf_np.GGML_F32)]
    _write_gguf(path, kv, tensors)
    return path


def _selftest_flash(tmp):
    """The flash layout: the layout keys; matrices rebuilt from hand-made runs (llama and
    OPT); a synthetic model in both layouts gives the same logits bit for bit; Q8_0 site
    tensors are never rounded (== the row-major F32 model of their values); a classifier
    that rounds: perturbed hidden states give our logits with near ties resolved."""
    # layout keys
    assert not is_flash_layout({})
    assert is_flash_layout({"tierllm.layout": "flash", "tierllm.layout.version": 1})
    for md, words in (({"tierllm.layout": "rows"}, "reads only"),
                      ({"tierllm.layout": "Flash", "tierllm.layout.version": 1}, "reads only"),
                      ({"tierllm.layout": "flash"}, "version None"),
                      ({"tierllm.layout": "flash", "tierllm.layout.version": 3}, "version 3"),
                      ({"tierllm.layout": "flash", "tierllm.layout.version": 2}, "without"),
                      ({"tierllm.layout": "flash", "tierllm.layout.version": 1,
                        "tierllm.neurons.rank": 4}, "with"),
                      ({"tierllm.layout": "flash", "tierllm.layout.version": 1.0}, "version 1.0")):
        try:
            is_flash_layout(md)
            raise AssertionError("accepted %r" % md)
        except ValueError as e:
            assert words in str(e), (md, e)

    # hand-made runs: n_embd 2, one head of 2 (q, k, v 2 each), n_ff 3
    class Cfg:
        n_embd, n_head, n_head_kv, head_dim, n_ff, layer_norm = 2, 1, 1, 2, 3, False
    sites = {"attn_qkv.cols": np.arange(12.0).reshape(2, 6),     # row c: wq, wk, wv col c
             "attn_output.cols": np.arange(4.0).reshape(2, 2),
             "ffn_gate_up.cols": 100 + np.arange(12.0).reshape(2, 6),
             "ffn_down.cols": np.arange(6.0).reshape(3, 2)}
    m = flash_matrices(Cfg, sites.get)
    want = {"attn_q": [[0, 6], [1, 7]], "attn_k": [[2, 8], [3, 9]], "attn_v": [[4, 10], [5, 11]],
            "attn_output": [[0, 2], [1, 3]], "ffn_gate": [[100, 106], [101, 107], [102, 108]],
            "ffn_up": [[103, 109], [104, 110], [105, 111]], "ffn_down": [[0, 2, 4], [1, 3, 5]]}
    assert sorted(m) == sorted(want) and all(np.array_equal(m[k], want[k]) for k in want), m
    Cfg.layer_norm = True                                   # OPT: the FFN_IN runs are w_up's
    try:
        flash_matrices(Cfg, sites.get)
        raise AssertionError("OPT took gate+up runs")
    except ValueError as e:
        assert "ffn_gate_up.cols: shape (2, 6)" in str(e), e
    sites["ffn_gate_up.cols"] = 100 + np.arange(6.0).reshape(2, 3)
    m = flash_matrices(Cfg, sites.get)
    assert "ffn_gate" not in m and np.array_equal(m["ffn_up"], [[100, 103], [101, 104], [102, 105]])

    # a synthetic model in both layouts: the same matrices, the same logits bit for bit
    base = _Spec.synthetic()
    toks = [3, 17, 5, 39, 0, 22, 8, 8, 31, 12]
    rows = LlamaRef(base.write(os.path.join(tmp, "rows.gguf")))
    flash = LlamaRef(_flash_file(base, os.path.join(tmp, "flash.gguf")))
    assert flash.flash and not rows.flash
    for a, b in zip(rows.layers, flash.layers):
        assert all(np.array_equal(a[k], b[k]) for k in a if a[k] is not None)
    assert np.array_equal(rows.forward(toks), flash.forward(toks))
    for layout, words in ((("rows", 1), "reads only"), (("flash", 2), "version 2")):
        try:
            LlamaRef(_flash_file(base, os.path.join(tmp, "bad.gguf"), layout=layout))
            raise AssertionError("layout %r accepted" % (layout,))
        except ValueError as e:
            assert words in str(e), e

    # Q8_0 site tensors (runs of 64, 32, 96, 32: whole 32-blocks): the matrices are the
    # dequantized runs, never rounded: the logits of the row-major F32 model of those
    # values, bit for bit (_Spec.from_file rebuilds it); rounding them as row-major Q8_0
    # would change the logits
    path = _flash_file(base, os.path.join(tmp, "flash_q8.gguf"), gguf_np.GGML_Q8_0)
    q8 = LlamaRef(path)
    g = q8.gguf
    assert g.tensors["blk.1.attn_qkv.cols"].type == gguf_np.GGML_Q8_0
    assert np.array_equal(q8.layers[1]["attn_k"], g.tensor("blk.1.attn_qkv.cols")[:, 32:48].T)
    assert not q8.rounds_any and all(q8.rounds[id(L[k])] is None for L in q8.layers
                                     for k in L if k in ("attn_q", "ffn_gate", "ffn_down"))
    plain = LlamaRef(_Spec.from_file(path).write(os.path.join(tmp, "q8_rows_f32.gguf")))
    logits = q8.forward(toks)
    assert np.array_equal(plain.forward(toks), logits)
    for L in plain.layers:        # (ffn_down's rows of 48 would not round as Q8_0 either)
        for k in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up"):
            plain.rounds[id(L[k])] = round_activations
    e_round = _rel(plain.forward(toks), logits)
    assert e_round > 1e-5, e_round

    # a classifier that rounds (output Q8_0) after flash layers: only it rounds. Perturb
    # the hidden state by up to tol of each block's amax: the logits, against ours with
    # the near ties resolved their way, move by no more than the linear part (a step d
    # moved by at most tol amax/127, times |q| <= 127, times |W|), and some rows need it
    m = LlamaRef(_flash_file(base, os.path.join(tmp, "flash_out_q8.gguf"),
                             output_type=gguf_np.GGML_Q8_0))
    assert m.rounds_any and not m.rounds_layers
    tol = 1e-4
    x = m.hidden(toks)
    ref = m.mm(x, m.output)
    flips = m.classifier_tie_flips(toks, tol)
    assert all(len(F) == 0 for F in m.classifier_tie_flips(toks, 1e-9))
    assert any(len(F) > 0 for F in flips)
    amax = np.repeat(np.abs(x).reshape(len(toks), -1, QK).max(axis=-1), QK, axis=1)
    den = np.abs(ref).max(axis=1)
    lin = (tol * amax @ np.abs(m.output).T).max(axis=1) / den
    rng = np.random.default_rng(3)
    needed = 0
    for _ in range(50):
        y = m.mm(x + rng.uniform(-1, 1, x.shape) * tol * amax, m.output)
        best, taken = resolve_ties(y, ref, flips)
        rel = np.abs(y - best).max(axis=1) / den
        assert np.all(rel <= lin * (1 + 1e-9)), (rel, lin)
        needed += int(np.sum(np.abs(y - ref).max(axis=1) / den > lin))
    assert needed > 0
    # resolve_ties on an exact flip pattern: a row with its flips 0 and 2 taken
    wide = m.classifier_tie_flips(toks, 1e-2)
    r = next(i for i, F in enumerate(wide) if len(F) >= 3)
    y = ref.copy()
    y[r] += wide[r][0] + wide[r][2]
    best, taken = resolve_ties(y, ref, wide)
    assert np.allclose(best, y, rtol=0, atol=1e-12) and taken[r] == 2 and taken.sum() == 2
    # each flip is what moving its input just across its tie does to the logits (every
    # input but the amax is within 0.5 of a tie: with tol 1, all of them, nearest first)
    d = np.abs(x[r]).reshape(-1, QK).max(axis=1) / 127.0
    v = x[r] / np.repeat(d, QK)
    dist = np.abs(v - np.floor(v) - 0.5)
    every = m.classifier_tie_flips(toks, 1.0)[r]
    assert len(every) == x.shape[1] - len(d)
    order = np.argsort(np.where(np.abs(v) >= 127, np.inf, dist), kind="stable")
    for i, j in enumerate(order[:len(every)]):
        x2 = x.copy()                         # to the tie's other side, 1e-3 of a step past
        x2[r, j] = (np.floor(v[j]) + 0.5 + (1e-3 if v[j] < np.floor(v[j]) + 0.5 else -1e-3)) \
            * d[j // QK]
        assert np.allclose((m.mm(x2, m.output) - ref)[r], every[i], rtol=0, atol=1e-6 * den[r])
    print("llama_ref flash layout self-test OK (Q8_0 runs rounded as row-major would move "
          "the logits %.1e; %d/%d perturbed rows needed their near ties resolved)"
          % (e_round, needed, 50 * len(toks)))


def _opt_spec(seed=0, n_embd=32, n_head=4, n_ff=64, n_layer=2, n_vocab=40, n_ctx=16):
    """A small synthetic OPT (LayerNorms with biases, learned positions, ReLU FFN with
    biases, attention biases) as a _Spec."""
    rng = np.random.default_rng(seed)
    U32, F32 = gguf_np.T_UINT32, gguf_np.T_FLOAT32
    kv = {"embedding_length": (U32, n_embd), "block_count": (U32, n_layer),
          "feed_forward_length": (U32, n_ff), "attention.head_count": (U32, n_head),
          "context_length": (U32, n_ctx), "attention.layer_norm_epsilon": (F32, 1e-5)}

    def r(*shape, s=0.3):
        return (rng.standard_normal(shape) * s).astype(np.float32)
    t = {"token_embd.weight": r(n_vocab, n_embd, s=1.0), "position_embd.weight": r(n_ctx, n_embd),
         "output_norm.weight": 1 + r(n_embd, s=0.1), "output_norm.bias": r(n_embd, s=0.1),
         "output.weight": r(n_vocab, n_embd)}
    for i in range(n_layer):
        p = "blk.%d." % i
        for k, shape in (("attn_q", (n_embd, n_embd)), ("attn_k", (n_embd, n_embd)),
                         ("attn_v", (n_embd, n_embd)), ("attn_output", (n_embd, n_embd)),
                         ("ffn_up", (n_ff, n_embd)), ("ffn_down", (n_embd, n_ff))):
            t[p + k + ".weight"] = r(*shape)
            t[p + k + ".bias"] = r(shape[0], s=0.1)
        for k in ("attn_norm", "ffn_norm"):
            t[p + k + ".weight"] = 1 + r(n_embd, s=0.1)
            t[p + k + ".bias"] = r(n_embd, s=0.1)
    return _Spec("opt", kv, t)


def _forward_with_ffn(m, tokens, ffn):
    """m's logits with every layer's FFN replaced by ffn(layer, xn) -> y (the rest as
    LlamaRef.hidden, with m's own attention and norms)."""
    T = len(tokens)
    pos = np.arange(T)
    x = m.tok_embd[np.asarray(tokens)]
    if m.pos_embd is not None:
        x = x + m.pos_embd[pos]
    for i, L in enumerate(m.layers):
        x = x + m.attention(m.norm(x, L, "attn_norm"), L, pos, i)
        x = x + ffn(i, m.norm(x, L, "ffn_norm"))
    if m.cfg.layer_norm:
        x = m.layernorm(x, m.output_norm, m.output_norm_b)
    else:
        x = m.rmsnorm(x, m.output_norm)
    return m.mm(x, m.output)


def _masked_ffn_loop(spec, layer, xn, pred, select, rnd=None):
    """The FFN of spec's layer on rows xn written plainly, from spec's own (row-major)
    arrays and the predictor pred = (V, U, pb): s_ri = sum_j U[i, j] (V[j] . xn_r) + pb_i;
    select(s) gives each row's list of neurons; h_ri = relu(Wg[i] . xn'_r + bg_i) *
    (Wu[i] . xn'_r) (OPT: relu(Wu[i] . xn'_r + bu_i)), xn' = rnd(xn) (the gate/up rounding,
    if any); y_r = sum over its neurons, ascending, of h_ri Wd[:, i] (+ b_down). Also returns
    s and the dense h (every neuron)."""
    p = "blk.%d." % layer
    t = {k: (spec.tensors[p + k].astype(np.float64) if p + k in spec.tensors else None)
         for k in ("ffn_gate.weight", "ffn_gate.bias", "ffn_up.weight", "ffn_up.bias",
                   "ffn_down.weight", "ffn_down.bias")}
    V, U, pb = (np.asarray(a, np.float64) for a in pred)
    T, n_ff = xn.shape[0], U.shape[0]
    xr = xn if rnd is None else rnd(xn)
    s = np.zeros((T, n_ff))
    h = np.zeros((T, n_ff))
    for r in range(T):
        tv = [float(np.dot(V[j], xn[r])) for j in range(V.shape[0])]
        for i in range(n_ff):
            s[r, i] = sum(float(U[i, j]) * tv[j] for j in range(len(tv))) + float(pb[i])
            up = float(np.dot(t["ffn_up.weight"][i], xr[r]))
            if t["ffn_up.bias"] is not None:
                up += float(t["ffn_up.bias"][i])
            if t["ffn_gate.weight"] is None:
                h[r, i] = max(up, 0.0)
            else:
                gate = float(np.dot(t["ffn_gate.weight"][i], xr[r]))
                if t["ffn_gate.bias"] is not None:
                    gate += float(t["ffn_gate.bias"][i])
                h[r, i] = max(gate, 0.0) * up
    sel = select(s)
    y = np.zeros((T, xn.shape[1]))
    for r in range(T):
        for i in sorted(sel[r]):
            y[r] += h[r, i] * t["ffn_down.weight"][:, i]
        if t["ffn_down.bias"] is not None:
            y[r] += t["ffn_down.bias"]
    return y, s, h


def _select_rows(s):
    return [set(np.flatnonzero(s[r] > 0)) for r in range(len(s))]


def _select_union(block=None):
    def select(s):
        T = len(s)
        B = T if block is None else block
        out = []
        for a in range(0, T, B):
            u = set()
            for r in range(a, min(a + B, T)):
                u |= set(np.flatnonzero(s[r] > 0))
            out += [u] * (min(a + B, T) - a)
        return out
    return select


def _selftest_neurons(tmp):
    """Neuron bundles and the predictor: the bundles' parsing and rounding on hand-made
    values; a synthetic ReLU-gated Llama (and an OPT) written row-major and with neuron
    bundles + predictor: the dense FFN (predictor=False) == the row-major model; with the
    predictor == a plain-loop masked FFN (union over the call, over blocks, per row), and
    != dense; union == per row for one row; neuron_stats against the loop; an oracle
    predictor (V = Wg, U = I, pb = b_gate) has recall 1 and gives the dense logits; Q8_0
    bundles round gate/up as row-major Q8_0 and not down; the CLI's recall lines."""
    # hand-made bundles: n_embd 2, n_ff 3
    class Cfg:
        n_embd, n_ff, layer_norm = 2, 3, False
    S = np.arange(18.0).reshape(3, 6)              # run i: gate[i, :], up[i, :], down[:, i]
    m = neuron_matrices(Cfg, S)
    assert np.array_equal(m["ffn_gate"], [[0, 1], [6, 7], [12, 13]])
    assert np.array_equal(m["ffn_up"], [[2, 3], [8, 9], [14, 15]])
    assert np.array_equal(m["ffn_down"], [[4, 10, 16], [5, 11, 17]])
    try:
        neuron_matrices(Cfg, S[:, :4])
        raise AssertionError("a gated FFN took runs of 2 n_embd")
    except ValueError as e:
        assert "shape (3, 4)" in str(e), e
    Cfg.layer_norm = True                          # OPT: up | down
    m = neuron_matrices(Cfg, S[:, :4])
    assert sorted(m) == ["ffn_down", "ffn_up"]
    assert np.array_equal(m["ffn_up"], [[0, 1], [6, 7], [12, 13]])
    assert np.array_equal(m["ffn_down"], [[2, 8, 14], [3, 9, 15]])

    class TI:
        def __init__(self, name):
            self.type = gguf_np.GGML_TYPE_BY_NAME[name]
    assert neuron_rounding(TI("Q8_0"), 64) is round_activations
    assert neuron_rounding(TI("Q4_0"), 32) is round_activations
    assert neuron_rounding(TI("Q4_K"), 512) is round_activations_q8k
    assert neuron_rounding(TI("F32"), 48) is None and neuron_rounding(TI("F16"), 7) is None
    for name, e in (("Q8_0", 48), ("Q6_K", 64)):
        try:
            neuron_rounding(TI(name), e)
            raise AssertionError("%s parts of %d accepted" % (name, e))
        except ValueError as err:
            assert "not whole" in str(err), err
    assert union_blocks(5) == [(0, 5)]
    assert union_blocks(5, 2) == [(0, 2), (2, 4), (4, 5)]
    assert union_blocks(5, None, 3) == [(0, 3), (3, 4), (4, 5)]
    assert union_blocks(5, 2, 3) == [(0, 2), (2, 3), (3, 4), (4, 5)]
    assert union_blocks(3, 8) == [(0, 3)] and union_blocks(2, None, 0) == [(0, 1), (1, 2)]

    # a ReLU-gated Llama (n_ff 64, gate biases) and a predictor of rank 8 whose neurons are,
    # by i % 4: never predicted, always, or by the row (s ~ N(0, ~2)): about half per row
    rng = np.random.default_rng(11)
    base = _Spec.synthetic(seed=5, n_ff=64)
    base.meta["tierllm.ffn_activation"] = (gguf_np.T_STRING, "relu")
    n_layer, n_embd, n_ff, rank = 2, 32, 64, 8
    for i in range(n_layer):
        base.tensors["blk.%d.ffn_gate.bias" % i] = (rng.standard_normal(n_ff) * 0.2).astype(np.float32)

    def f16(a):
        return np.asarray(a, np.float32).astype(np.float16).astype(np.float32)

    def make_pred():
        pb = rng.standard_normal(n_ff).astype(np.float32) * 0.1
        pb[0::4], pb[1::4] = -20.0, 20.0
        return {i: (f16(rng.standard_normal((rank, n_embd)) * 0.3),
                    f16(rng.standard_normal((n_ff, rank)) * 0.3), pb) for i in range(n_layer)}
    pred = make_pred()
    toks = [3, 17, 5, 39, 0, 22, 8, 8, 31, 12]
    T = len(toks)
    rows = LlamaRef(base.write(os.path.join(tmp, "relu_rows.gguf")))
    path = _flash_file(base, os.path.join(tmp, "relu_neurons.gguf"), neurons=True, predictor=pred)
    g = GGUFFile(path)
    assert list(g.tensors["blk.1.ffn_neurons"].ne) == [3 * n_embd, n_ff]
    assert list(g.tensors["blk.1.ffn_pred_v"].ne) == [n_embd, rank]
    assert list(g.tensors["blk.1.ffn_pred_u"].ne) == [rank, n_ff]
    assert list(g.tensors["blk.1.ffn_pred_b"].ne) == [n_ff]
    assert "blk.1.ffn_gate_up.cols" not in g.tensors and "blk.1.ffn_down.cols" not in g.tensors

    dense = LlamaRef(path, predictor=False)
    assert dense.flash and dense.has_predictor and not dense.predictor and not dense.rounds_layers
    for a, b in zip(rows.layers, dense.layers):
        assert all(np.array_equal(a[k], b[k]) for k in
                   ("ffn_gate", "ffn_up", "ffn_down", "attn_q", "attn_output", "ffn_gate.bias"))
    want = rows.forward(toks)
    assert np.array_equal(dense.forward(toks), want), _rel(dense.forward(toks), want)

    union = LlamaRef(path)                                      # predictor on by default
    per_row = LlamaRef(path, neuron_union=False)
    assert union.predictor and union.neuron_union and not per_row.neuron_union
    lu, lr = union.forward(toks), per_row.forward(toks)
    e_dense, e_modes = _rel(lu, want), _rel(lu, lr)
    assert e_dense > 1e-2 and _rel(lr, want) > 1e-2 and e_modes > 1e-3, (e_dense, e_modes)
    errs = []
    for m, select in ((union, _select_union()), (per_row, _select_rows),
                      (LlamaRef(path, neuron_block=4), _select_union(4))):
        loop = _forward_with_ffn(m, toks, lambda i, xn: _masked_ffn_loop(
            base, i, xn, pred[i], select)[0])
        errs.append(_rel(m.forward(toks), loop))
        assert errs[-1] < 1e-12, errs
    assert np.array_equal(LlamaRef(path, neuron_block=1).forward(toks), lr)
    assert np.array_equal(LlamaRef(path, neuron_block=T).forward(toks), lu)
    for t in ([toks[0]], [toks[3]]):                            # one row: the same set
        assert np.array_equal(union.forward(t), per_row.forward(t))
    # greedy from one token: every row alone in both modes (as the engine generates)
    assert union.greedy(toks[:1], 4) == per_row.greedy(toks[:1], 4)
    assert union._single_from is None

    # neuron_stats against the loop, on the inputs of the predicted forward
    stats, total = union.neuron_stats(toks)
    xns = {}

    def grab(i, xn):
        xns[i] = xn
        return _masked_ffn_loop(base, i, xn, pred[i], _select_union())[0]
    _forward_with_ffn(union, toks, grab)
    hit_all = mass_all = 0.0
    for i, st in enumerate(stats):
        _, s, h = _masked_ffn_loop(base, i, xns[i], pred[i], _select_rows)
        assert np.allclose(st["scores"], s, rtol=0, atol=1e-12) and np.min(np.abs(s)) > 1e-9
        assert np.array_equal(st["predicted"], s > 0) and np.array_equal(st["active"], h != 0)
        wd = base.tensors["blk.%d.ffn_down.weight" % i].astype(np.float64)
        hit = mass = 0.0
        for r in range(T):
            for n in range(n_ff):
                if h[r, n] != 0:
                    w = abs(h[r, n]) * math.sqrt(float(np.sum(wd[:, n] ** 2)))
                    mass += w
                    hit += w if s[r, n] > 0 else 0.0
        assert abs(st["recall"] - hit / mass) < 1e-12, (st["recall"], hit / mass)
        assert 0.3 < st["predicted_share"] < 0.7 and 0.3 < st["active_share"] < 0.7, st
        assert st["recall"] < 0.9 and st["recall_applied"] > st["recall"]
        assert np.array_equal(st["applied"], np.repeat(st["predicted"].any(axis=0)[None], T, 0))
        assert not st["applied"][:, 0::4].any() and st["applied"][:, 1::4].all()
        hit_all, mass_all = hit_all + hit, mass_all + mass
    assert abs(total - hit_all / mass_all) < 1e-12
    st_dense, _ = dense.neuron_stats(toks)                     # dense inputs: no mask applied
    assert st_dense[0]["applied"] is None and st_dense[0]["recall_applied"] is None
    assert np.array_equal(st_dense[0]["predicted"], stats[0]["predicted"])   # same layer-0 input
    near, decisive, n_scores = union.near_zero_scores(1e-3)
    assert n_scores == n_layer * T * n_ff and near >= decisive
    assert union.near_zero_scores(10.0)[1] == n_layer * n_ff // 2   # the middle half (max s)

    # an oracle predictor: V = Wg (F16 values), U = I, pb = b_gate: s = g exactly, so every
    # active neuron is predicted (recall 1) and the logits are the dense ones, in both modes
    orc = base.copy()
    opred = {}
    for i in range(n_layer):
        p = "blk.%d." % i
        orc.tensors[p + "ffn_gate.weight"] = f16(orc.tensors[p + "ffn_gate.weight"])
        opred[i] = (orc.tensors[p + "ffn_gate.weight"], np.eye(n_ff, dtype=np.float32),
                    orc.tensors[p + "ffn_gate.bias"])
    opath = _flash_file(orc, os.path.join(tmp, "relu_oracle.gguf"), neurons=True, predictor=opred)
    o_dense = LlamaRef(opath, predictor=False).forward(toks)
    for kw in ({}, {"neuron_union": False}):
        om = LlamaRef(opath, **kw)
        assert np.array_equal(om.forward(toks), o_dense), kw
        ost, otot = om.neuron_stats(toks)
        assert otot == 1.0 and all(st["recall"] == 1.0 for st in ost)

    # Q8_0 bundles (parts of 32: one block each): the matrices are the dequantized parts;
    # gate/up round xn as row-major Q8_0 would, down does not, the predictor (F16) does not
    qpath = _flash_file(base, os.path.join(tmp, "relu_neurons_q8.gguf"), gguf_np.GGML_Q8_0,
                        neurons=True, predictor=pred)
    qd = LlamaRef(qpath, predictor=False)
    gq = qd.gguf
    assert gq.tensors["blk.0.ffn_neurons"].type == gguf_np.GGML_Q8_0
    assert np.array_equal(qd.layers[0]["ffn_down"], gq.tensor("blk.0.ffn_neurons")[:, 64:].T)
    assert qd.rounds_layers and all(
        qd.rounds[id(L[k])] is (round_activations if k in ("ffn_gate", "ffn_up") else None)
        for L in qd.layers for k in ("attn_q", "attn_output", "ffn_gate", "ffn_up", "ffn_down"))
    qspec = _Spec.from_file(qpath)
    assert sorted(qspec.tensors) == sorted(base.tensors) and qspec.meta == base.meta
    plain = LlamaRef(qspec.write(os.path.join(tmp, "relu_q8_rows_f32.gguf")))
    assert np.array_equal(LlamaRef(qpath, predictor=False, exact_activations=True).forward(toks),
                          plain.forward(toks))
    for L in plain.layers:
        plain.rounds[id(L["ffn_gate"])] = plain.rounds[id(L["ffn_up"])] = round_activations
    assert np.array_equal(qd.forward(toks), plain.forward(toks))
    qm = LlamaRef(qpath)
    q_s = {}

    def q_loop(i, xn):
        y, q_s[i], _ = _masked_ffn_loop(qspec, i, xn, pred[i], _select_union(),
                                        rnd=round_activations)
        return y
    loop = _forward_with_ffn(qm, toks, q_loop)
    e_q8 = _rel(qm.forward(toks), loop)
    assert e_q8 < 1e-12, e_q8
    for i, st in enumerate(qm.neuron_stats(toks)[0]):         # s from xn, never rounded
        assert np.allclose(st["scores"], q_s[i], rtol=0, atol=1e-12), i

    # activation sparsity (thresholds only at the FFN sites, 1.0 at S = 0.5): a layer with
    # the predictor ignores them (bit for bit); the dense FFN (predictor=False) applies them
    sp = base.copy()
    table = np.zeros((n_layer, len(LlamaRef.SITES), 2), np.float32)
    table[:, 2:, 1] = 2.0                                        # ffn_in, ffn_mid: 0 .. 2
    sp.meta.update({"tierllm.sparse.version": (gguf_np.T_UINT32, 1),
                    "tierllm.sparse.levels": (gguf_np.T_UINT32, 2),
                    "tierllm.sparse.thresholds": (gguf_np.T_ARRAY, (gguf_np.T_FLOAT32, table))})
    spath = _flash_file(sp, os.path.join(tmp, "relu_neurons_sparse.gguf"), neurons=True,
                        predictor=pred)
    assert np.array_equal(LlamaRef(spath, sparsity=0.5).thresholds[:, 2:], np.ones((2, 2)))
    assert np.array_equal(LlamaRef(spath, sparsity=0.5).forward(toks), lu)
    e_sp = _rel(LlamaRef(spath, sparsity=0.5, predictor=False).forward(toks), want)
    assert e_sp > 1e-3, e_sp

    # OPT (plain ReLU FFN with biases): dense == row-major; predicted == the loop
    opt = _opt_spec(seed=2)
    opt_pred = make_pred()
    orows = LlamaRef(opt.write(os.path.join(tmp, "opt_rows.gguf")))
    opath = _flash_file(opt, os.path.join(tmp, "opt_neurons.gguf"), neurons=True,
                        predictor=opt_pred)
    assert list(GGUFFile(opath).tensors["blk.0.ffn_neurons"].ne) == [2 * n_embd, n_ff]
    assert np.array_equal(LlamaRef(opath, predictor=False).forward(toks), orows.forward(toks))
    om = LlamaRef(opath)
    loop = _forward_with_ffn(om, toks, lambda i, xn: _masked_ffn_loop(
        opt, i, xn, opt_pred[i], _select_union())[0])
    e_opt = _rel(om.forward(toks), loop)
    assert e_opt < 1e-12 and _rel(om.forward(toks), orows.forward(toks)) > 1e-3, e_opt
    assert np.array_equal(om.forward(toks[:1]), LlamaRef(opath, neuron_union=False).forward(toks[:1]))

    # refused: bundles of a SwiGLU FFN, a partial predictor, predictor=True without one,
    # neuron_block 0, bundles in a row-major file
    swi = base.copy()
    del swi.meta["tierllm.ffn_activation"]
    cases = [(_flash_file(swi, os.path.join(tmp, "bad1.gguf"), neurons=True), {}, "SwiGLU"),
             (path, {"neuron_block": 0}, "neuron_block"),
             (_flash_file(base, os.path.join(tmp, "bad2.gguf"), neurons=True), {"predictor": True},
              "no ffn_pred_v")]
    part = base.copy()
    part.tensors["blk.0.ffn_pred_b"] = pred[0][2]
    cases.append((_flash_file(part, os.path.join(tmp, "bad3.gguf")), {}, "needs all of"))
    bun = base.copy()
    bun.tensors["blk.0.ffn_neurons"] = np.zeros((n_ff, 3 * n_embd), np.float32)
    cases.append((bun.write(os.path.join(tmp, "bad4.gguf")), {}, "row-major file"))
    for pth, kw, words in cases:
        try:
            LlamaRef(pth, **kw)
            raise AssertionError("accepted: %s %r" % (pth, kw))
        except ValueError as e:
            assert words in str(e), (words, e)
    assert LlamaRef(os.path.join(tmp, "bad2.gguf")).forward(toks[:2]).shape == (2, 40)

    # the CLI: one line per layer and the total, as neuron_stats
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main([path, "--tokens", ",".join(map(str, toks)), "--neuron-recall"]) == 0
    lines = buf.getvalue().splitlines()
    assert len(lines) == n_layer + 1, lines
    for i, line in enumerate(lines[:-1]):
        w = line.split()
        assert w[:3] == ["neuron", "recall", str(i)] and w[4] == "predicted" and w[6] == "active"
        assert abs(float(w[3]) - stats[i]["recall"]) < 1e-6
        assert abs(float(w[5]) - stats[i]["predicted_share"]) < 1e-6
        assert abs(float(w[7]) - stats[i]["active_share"]) < 1e-6
    assert lines[-1].split()[:3] == ["neuron", "recall", "total"]
    assert abs(float(lines[-1].split()[3]) - total) < 1e-6
    print("llama_ref neuron bundles self-test OK (predicted vs dense: rel %.2f, union vs per "
          "row: %.2f; loop checks %s; Q8_0 %.0e; OPT %.0e; recall %.3f, per layer %s)"
          % (e_dense, e_modes, " ".join("%.0e" % e for e in errs), e_q8, e_opt, total,
             " ".join("%.3f" % st["recall"] for st in stats)))


def self_test(model=None):
    """All checks of this file: rounding, RoPE/window on hand-computed values, and the
    end-to-end checks on a synthetic model (and, given a model file, on variants of it;
    a non-F32 model is dequantized to F32 for those)."""
    _selftest_rounding()
    _selftest_rope_mask()
    g = GGUFFile.__new__(GGUFFile)
    for arch, ok in (("llama", True), ("qwen2", True), ("gemma", False), ("qwen3", False)):
        g.metadata = {"general.architecture": arch}
        for k, v in (("embedding_length", 8), ("block_count", 1), ("feed_forward_length", 8),
                     ("attention.head_count", 2), ("attention.layer_norm_rms_epsilon", 1e-5),
                     ("context_length", 16)):
            g.metadata[arch + "." + k] = v
        try:
            c = LlamaConfig(g)
            assert ok and c.rope_type == ARCH_ROPE[arch] and c.sliding_window is None
        except ValueError as e:
            assert not ok and "unsupported architecture %r" % arch in str(e), e
        if ok:
            for bad in (0, -1, 2.0, True):
                g.metadata[arch + ".attention.sliding_window"] = bad
                try:
                    LlamaConfig(g)
                    raise AssertionError("sliding_window %r accepted" % (bad,))
                except ValueError:
                    pass
    with tempfile.TemporaryDirectory(prefix="llama_ref_st_") as tmp:
        _selftest_flash(tmp)
        _selftest_neurons(tmp)
        _selftest_models(_Spec.synthetic(), tmp, [3, 17, 5, 39, 0, 22, 8, 8, 31, 12],
                         "synthetic (embd 32, heads 4/2, head_dim 8, rope_dim 6)")
        if model is not None:
            _selftest_models(_Spec.from_file(model), tmp,
                             [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315],
                             os.path.basename(model))
    print("llama_ref self-test OK")


def parse_tokens(s):
    try:
        toks = [int(t) for t in s.replace(" ", ",").split(",") if t != ""]
    except ValueError:
        raise argparse.ArgumentTypeError("tokens must be comma-separated integers: %r" % s)
    if not toks:
        raise argparse.ArgumentTypeError("empty token list")
    return toks


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--self-test"] and len(args) <= 2:
        self_test(args[1] if len(args) == 2 else None)
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
    ap.add_argument("--no-predictor", action="store_true",
                    help="neuron bundles: compute every neuron (the dense FFN), not only the "
                         "predicted ones")
    ap.add_argument("--per-row-neurons", action="store_true",
                    help="neuron bundles: each row computes only its own predicted neurons "
                         "(default: the union over the rows of a block, as the engine)")
    ap.add_argument("--neuron-block", type=int, metavar="N",
                    help="neuron bundles: the union is over blocks of N rows (the engine's "
                         "-b); default all tokens at once")
    ap.add_argument("--neuron-recall", action="store_true",
                    help="print per layer with a predictor 'neuron recall <layer> <recall> "
                         "predicted <share> active <share>' (output-mass recall of the "
                         "predicted neurons, mean shares of n_ff) and 'neuron recall total "
                         "<recall>'; the layers' inputs are those of the forward with the "
                         "predictor (--no-predictor: of the dense model)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.out is None and args.greedy is None and not args.neuron_recall:
        ap.error("nothing to do: give --out, --greedy and/or --neuron-recall")

    m = LlamaRef(args.model, dtype=np.float32 if args.float32 else np.float64,
                 exact_activations=args.exact_activations,
                 predictor=False if args.no_predictor else None,
                 neuron_union=not args.per_row_neurons, neuron_block=args.neuron_block)
    if args.verbose:
        print(m.cfg, "n_vocab=%d" % m.n_vocab, "layout=%s" % ("flash" if m.flash else "rows"),
              file=sys.stderr)
        n_b = sum(bool(L["ffn_neurons"]) for L in m.layers)
        if n_b:
            print("neuron bundles in %d layers, a predictor in %d; FFN: %s" % (
                n_b, sum(L["ffn_pred"] is not None for L in m.layers),
                "dense" if not m.predictor else "predicted, " + (
                    "per row" if not m.neuron_union else "union over " + (
                        "all rows" if m.neuron_block is None else
                        "blocks of %d rows" % m.neuron_block))), file=sys.stderr)
    if args.out is not None:
        logits = m.forward(args.tokens)
        if not np.all(np.isfinite(logits)):
            print("llama_ref: non-finite logits", file=sys.stderr)
            return 1
        logits.astype("<f4").tofile(args.out)
        if m.ffn_mid_seen:   # the share of exact zeros into ffn_down (a ReLU FFN's sparsity)
            print("ffn_mid zeros %.4f" % (m.ffn_mid_zeros / m.ffn_mid_seen), file=sys.stderr)
    if args.neuron_recall:
        try:
            stats, total = m.neuron_stats(args.tokens)
        except ValueError as e:
            print("llama_ref: --neuron-recall: %s" % e, file=sys.stderr)
            return 1
        for i, st in enumerate(stats):
            if st is not None:
                print("neuron recall %d %.6f predicted %.6f active %.6f"
                      % (i, st["recall"], st["predicted_share"], st["active_share"]))
        print("neuron recall total %.6f" % total)
    if args.greedy is not None:
        print(" ".join(str(t) for t in m.greedy(args.tokens, args.greedy)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
