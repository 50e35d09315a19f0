/* hf_folder.h - a Hugging Face model folder (config.json, model.safetensors or a sharded
 * model.safetensors.index.json, tokenizer.json) described as a GGUF, so that everything
 * above reads it as it reads a GGUF file: the metadata keys a converter would write
 * (architecture, shapes, the tokenizer as tokenizer.ggml.*) and a tensor directory under
 * GGUF names whose offsets point into the safetensors files laid end to end at
 * TL_HF_SHARD_ALIGN-aligned offsets (tier/tier.h's concatenated tier reads them there).
 * Nothing is converted or copied: the weights stay in the user's files.
 *
 * Supported: LlamaForCausalLM, MistralForCausalLM (its sliding_window), Qwen2ForCausalLM,
 * OPTForCausalLM (pre-norm, as wide as its embedding: every size but 350m), with
 * F32/F16/BF16 tensors, and two kinds of tokenizer.json BPE model: byte-level (a
 * ByteLevel pre-tokenizer: GPT-2's rules, or Llama 3's / Qwen2's split regex) and
 * SentencePiece converted to BPE (byte fallback, spaces as U+2581: Llama 2, Mistral),
 * which becomes GGUF's "llama" tokenizer with scores from the merges' ranks; without
 * tokenizer.json, GPT-2's vocab.json and merges.txt (OPT's checkpoints). Llama 3.1's
 * rope_scaling becomes frequency divisors in metadata (tierllm.rope_freqs), as GGUF files
 * carry them in rope_freqs.weight. OPT's position table keeps two leading rows its
 * positions skip: the description's tensor starts after them.
 * Hugging Face keeps a Llama's q and k in rotate-half order where GGUF converters permute
 * the rows into adjacent pairs; the description says so (tierllm.rope_half_order) and the
 * forward pass rotates them as NEOX and stores them as pairs, so logits equal the GGUF's
 * bit for bit (Qwen2's GGUF keeps rotate-half order itself: nothing to say). Everything else is refused with a message naming what is not supported.
 */
#ifndef TL_FORMAT_HF_FOLDER_H
#define TL_FORMAT_HF_FOLDER_H

#include <stddef.h>
#include <stdint.h>
#include "tierllm.h"
#include "format/gguf.h"

/* Equal to tier/tier.h's TL_TIER_MAX_ALIGN (format/ cannot include tier/; llama_load.c,
 * which sees both, asserts it): every shard starts where an O_DIRECT read may. */
#define TL_HF_SHARD_ALIGN 4096u

typedef struct tl_hf_folder {
    tl_gguf *gguf;   /* the description; tensor offsets are in the concatenation */
    size_t n_files;
    char **files;    /* the safetensors files, full paths, in concatenation order */
    uint64_t *at;    /* where each file starts in the concatenation */
    uint64_t *sizes; /* each file's size when it was parsed */
} tl_hf_folder;

/* 1 when path is a directory. */
int tl_hf_is_folder(const char *path);
tl_status tl_hf_folder_open(const char *dir, tl_hf_folder **out);
void tl_hf_folder_free(tl_hf_folder *f);

#endif
