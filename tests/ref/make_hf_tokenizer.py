"""Write a Hugging Face folder whose tokenizer.json is a GGUF's SentencePiece vocabulary
converted the way Hugging Face converts one (SentencePiece -> BPE with byte fallback).

Usage:
    /usr/bin/python3 tests/ref/make_hf_tokenizer.py VOCAB.gguf OUT_DIR
    /usr/bin/python3 tests/ref/make_hf_tokenizer.py --gpt2-files VOCAB.gguf OUT_DIR

--gpt2-files: for a byte-level BPE GGUF (GPT-2's), the two files GPT-2-style checkpoints
(OPT's) ship instead of tokenizer.json: vocab.json ({piece: id}, pieces in GPT-2's
byte-to-unicode alphabet, as the GGUF stores them) and merges.txt ("#version: 0.2", then
one "left right" merge per line, in rank order), with an OPTForCausalLM config.json.

For test_tokenizer: the folder's tokenizer must reproduce llama.cpp's test vectors for the
GGUF it came from. Written from the converter's rules, independent of the engine:
  - vocab: every piece by id; the control and unknown pieces also as added tokens;
  - merges: for each piece of two or more characters, every split into two pieces of the
    vocabulary, ordered by the joined piece's score, highest first (splits of one piece
    by the ids of their left, then right parts);
  - normalizer: Prepend U+2581 (when the GGUF adds a space prefix) and Replace " " by
    U+2581; byte_fallback true; no pre-tokenizer.
config.json and an empty model.safetensors make it a folder (no weights are needed to
build a tokenizer).
"""

import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_np import GGUFFile  # noqa: E402


def empty_weights(out):
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", 8) + b"{}      ")


def gpt2_files(path, out):
    g = GGUFFile(path)
    tokens = g.get("tokenizer.ggml.tokens")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(tokens)}, f, ensure_ascii=False)
    with open(os.path.join(out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for m in g.get("tokenizer.ggml.merges"):
            f.write(m + "\n")
    eos = g.get("tokenizer.ggml.eos_token_id", len(tokens) - 1)
    config = {"architectures": ["OPTForCausalLM"], "model_type": "opt", "hidden_size": 64,
              "ffn_dim": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
              "vocab_size": len(tokens), "word_embed_proj_dim": 64,
              "do_layer_norm_before": True, "activation_function": "relu",
              "bos_token_id": g.get("tokenizer.ggml.bos_token_id", eos), "eos_token_id": eos,
              "pad_token_id": eos, "max_position_embeddings": 2048}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f)
    empty_weights(out)


def main():
    if sys.argv[1] == "--gpt2-files":
        gpt2_files(sys.argv[2], sys.argv[3])
        return
    g = GGUFFile(sys.argv[1])
    out = sys.argv[2]
    tokens = g.get("tokenizer.ggml.tokens")
    scores = g.get("tokenizer.ggml.scores")
    types = g.get("tokenizer.ggml.token_type")
    prefix = bool(g.get("tokenizer.ggml.add_space_prefix", True))
    vocab = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    merges = []
    for piece, pid in vocab.items():
        if types[pid] != 1 or len(piece) < 2:
            continue
        local = [(piece[:k], piece[k:]) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda lr: (vocab[lr[0]], vocab[lr[1]]))
        merges.extend((l, r, scores[pid]) for l, r in local)
    merges.sort(key=lambda m: -m[2])  # stable: a piece's splits keep their order
    added = [{"id": i, "content": t, "special": True} for i, t in enumerate(tokens)
             if types[i] in (2, 3)]
    normalizers = ([{"type": "Prepend", "prepend": "\u2581"}] if prefix else []) + \
        [{"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]
    unk = next((tokens[i] for i in range(len(tokens)) if types[i] == 2), None)
    tok = {"version": "1.0", "added_tokens": added,
           "normalizer": {"type": "Sequence", "normalizers": normalizers},
           "pre_tokenizer": None,
           "model": {"type": "BPE", "unk_token": unk, "byte_fallback": True, "fuse_unk": True,
                     "vocab": vocab, "merges": ["%s %s" % (l, r) for l, r, _ in merges]}}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
              "vocab_size": len(tokens), "bos_token_id": g.get("tokenizer.ggml.bos_token_id", 1),
              "eos_token_id": g.get("tokenizer.ggml.eos_token_id", 2)}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f)
    empty_weights(out)


if __name__ == "__main__":
    main()
