"""Write a Hugging Face model folder holding the same weights as a GGUF file.

Usage:
    /usr/bin/python3 tests/ref/make_hf_folder.py MODEL.gguf OUT_DIR [--shards N]
        [--dtype f32|f16|bf16] [--misalign]

For the test that a folder and the GGUF it came from give the same logits (hf_cli.sh).
Written from the formats, independent of the engine: config.json (LlamaForCausalLM, or
Qwen2ForCausalLM for general.architecture "qwen2"; MistralForCausalLM with its
sliding_window when the GGUF has one; OPTForCausalLM for "opt"), model.safetensors (or N
shards and model.safetensors.index.json), and a byte-level BPE tokenizer.json whose
vocabulary is the GGUF's tokens (no merges: the test feeds token ids), or with
--gpt2-files the vocab.json and merges.txt OPT's checkpoints ship instead. A
rope_freqs.weight (synth's, Llama 3.1's divisors) becomes the config's rope_scaling.
OPT's names are Hugging Face's (model.decoder.*: fc1/fc2, out_proj, self_attn_layer_norm,
final_layer_norm), and its embed_positions has the two leading rows OPT's position offset
skips (filled with large values, so an engine that reads them gives other logits).

GGUF converters permute the rows of a Llama model's q and k projections so that RoPE
rotates adjacent pairs; Hugging Face keeps them in rotate-half order. The inverse
permutation is applied here for "llama" (Qwen2 GGUFs are not permuted), so the folder is
what the original checkpoint looked like. Weights are written in --dtype (synthesize the
GGUF in that type so the values are exact; for f16 and bf16, a tensor that is not exact
in it, such as an f32 bias, stays F32).
--misalign puts a 2-byte gap before the first tensor's data (a hostile layout for f32).
"""

import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_np import GGUFFile  # noqa: E402


def unpermute(w, n_head):
    """Inverse of the converters' permute: rows (n_head, half, 2) back to (n_head, 2, half)."""
    rows = w.shape[0]
    return (w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:])
             .swapaxes(1, 2).reshape(w.shape))


def to_bytes(a, dtype):
    a = np.ascontiguousarray(a, dtype=np.float32)
    if dtype == "f32":
        return "F32", a.astype("<f4").tobytes()
    # a vector not exact in the type (an f32 bias of the GGUF) stays F32; a matrix must be
    # exact (synthesize the GGUF in the folder's type)
    if dtype == "f16":
        h = a.astype("<f2")
        if np.array_equal(h.astype(np.float32), a):
            return "F16", h.tobytes()
        if a.ndim != 1:
            raise ValueError("a %s matrix is not exact in f16" % (a.shape,))
        return "F32", a.astype("<f4").tobytes()
    bits = a.view(np.uint32)  # bf16: the top half, where the values are exact in bf16
    if np.any(bits & 0xFFFF):
        if a.ndim != 1:
            raise ValueError("a %s matrix is not exact in bf16" % (a.shape,))
        return "F32", a.astype("<f4").tobytes()
    return "BF16", (bits >> 16).astype("<u2").tobytes()


def write_safetensors(path, tensors, dtype, misalign=False):
    header, blobs, off = {}, [], 2 if misalign else 0
    if misalign:
        blobs.append(b"\0\0")
    for name, a in tensors:
        code, raw = to_bytes(a, dtype)
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    ap.add_argument("--misalign", action="store_true")
    ap.add_argument("--gpt2-files", action="store_true")
    a = ap.parse_args(argv)
    g = GGUFFile(a.gguf)
    arch = g.get("general.architecture")
    key = lambda k, d=None: g.get("%s.%s" % (arch, k), d)
    n_layer, n_head = key("block_count"), key("attention.head_count")
    n_head_kv = key("attention.head_count_kv", n_head)
    swa = key("attention.sliding_window")
    names = {"token_embd.weight": "model.embed_tokens.weight",
             "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
    per_layer = {"attn_norm.weight": "input_layernorm.weight",
                 "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
                 "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
                 "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
                 "attn_v.bias": "self_attn.v_proj.bias",
                 "ffn_norm.weight": "post_attention_layernorm.weight",
                 "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
                 "ffn_down.weight": "mlp.down_proj.weight"}
    if arch == "opt":
        names = {"token_embd.weight": "model.decoder.embed_tokens.weight",
                 "position_embd.weight": "model.decoder.embed_positions.weight",
                 "output_norm.weight": "model.decoder.final_layer_norm.weight",
                 "output_norm.bias": "model.decoder.final_layer_norm.bias"}
        per_layer = {}
        for gg, hf in (("attn_norm", "self_attn_layer_norm"), ("attn_q", "self_attn.q_proj"),
                       ("attn_k", "self_attn.k_proj"), ("attn_v", "self_attn.v_proj"),
                       ("attn_output", "self_attn.out_proj"), ("ffn_norm", "final_layer_norm"),
                       ("ffn_up", "fc1"), ("ffn_down", "fc2")):
            for kind in ("weight", "bias"):
                per_layer["%s.%s" % (gg, kind)] = "%s.%s" % (hf, kind)
    layer_prefix = "model.decoder.layers" if arch == "opt" else "model.layers"
    tensors = []
    for name in g.tensors:
        if name == "rope_freqs.weight":  # Hugging Face computes it from rope_scaling
            continue
        if name in names:
            hf = names[name]
        else:
            parts = name.split(".", 2)
            if parts[0] != "blk" or parts[2] not in per_layer:
                raise ValueError("no Hugging Face name for %s" % name)
            hf = "%s.%s.%s" % (layer_prefix, parts[1], per_layer[parts[2]])
        w = g.tensor(name)
        if name == "position_embd.weight":  # OPT's offset: positions start at row 2
            w = np.concatenate([np.full((2, w.shape[1]), 7.0, np.float32), w])
        if arch == "llama" and name.endswith(("attn_q.weight", "attn_q.bias")):
            w = unpermute(w, n_head)
        if arch == "llama" and name.endswith(("attn_k.weight", "attn_k.bias")):
            w = unpermute(w, n_head_kv)
        tensors.append((hf, w))
    os.makedirs(a.out, exist_ok=True)
    if a.shards == 1:
        write_safetensors(os.path.join(a.out, "model.safetensors"), tensors, a.dtype, a.misalign)
    else:
        per = (len(tensors) + a.shards - 1) // a.shards
        weight_map = {}
        for s in range(a.shards):
            fname = "model-%05d-of-%05d.safetensors" % (s + 1, a.shards)
            part = tensors[s * per:(s + 1) * per]
            write_safetensors(os.path.join(a.out, fname), part, a.dtype, a.misalign and s == 0)
            weight_map.update({n: fname for n, _ in part})
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f)
    emb = g.tensors["token_embd.weight"]
    if arch == "opt":
        config = {"architectures": ["OPTForCausalLM"], "model_type": "opt",
                  "hidden_size": key("embedding_length"), "ffn_dim": key("feed_forward_length"),
                  "num_hidden_layers": n_layer, "num_attention_heads": n_head,
                  "max_position_embeddings": key("context_length"), "vocab_size": emb.ne[1],
                  "word_embed_proj_dim": key("embedding_length"), "do_layer_norm_before": True,
                  "activation_function": "relu", "enable_bias": True,
                  "layer_norm_elementwise_affine": True, "bos_token_id": 2, "eos_token_id": 2,
                  "pad_token_id": 1}
    else:
        config = llama_config(g, arch, key, n_layer, n_head, n_head_kv, swa, emb)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    tokens = g.get("tokenizer.ggml.tokens")
    if a.gpt2_files:  # the vocabulary's pieces as they are, no merges: ids are fed
        with open(os.path.join(a.out, "vocab.json"), "w", encoding="utf-8") as f:
            json.dump({t: i for i, t in enumerate(tokens)}, f, ensure_ascii=False)
        with open(os.path.join(a.out, "merges.txt"), "w") as f:
            f.write("#version: 0.2\n")
        return
    write_tokenizer_json(a.out, tokens)


def llama_config(g, arch, key, n_layer, n_head, n_head_kv, swa, emb):
    cls = {"llama": "MistralForCausalLM" if swa else "LlamaForCausalLM",
           "qwen2": "Qwen2ForCausalLM"}[arch]
    return {"architectures": [cls], "hidden_size": key("embedding_length"),
            "intermediate_size": key("feed_forward_length"), "num_hidden_layers": n_layer,
            "num_attention_heads": n_head, "num_key_value_heads": n_head_kv,
            "rms_norm_eps": key("attention.layer_norm_rms_epsilon"),
            "rope_theta": key("rope.freq_base", 10000.0),
            "max_position_embeddings": key("context_length"), "vocab_size": emb.ne[1],
            "bos_token_id": g.get("tokenizer.ggml.bos_token_id", 1),
            "eos_token_id": g.get("tokenizer.ggml.eos_token_id", 2),
            "tie_word_embeddings": "output.weight" not in g.tensors,
            # synth's rope_freqs are Llama 3.1's divisors for these parameters
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
            if "rope_freqs.weight" in g.tensors else None,
            "sliding_window": swa, "use_sliding_window": bool(swa)}


def write_tokenizer_json(out, tokens):
    vocab = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    added = [{"id": i, "content": t, "special": True} for i, t in enumerate(tokens)
             if vocab[t] != i or i < 3]
    for d in added:
        vocab.pop(d["content"], None) if vocab.get(d["content"]) == d["id"] else None
    tok = {"version": "1.0", "added_tokens": added,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
           "model": {"type": "BPE", "vocab": vocab, "merges": []}}
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tok, f)


if __name__ == "__main__":
    main()
