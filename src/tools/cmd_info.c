/* cmd_info.c - `tierllm info`: architecture, shapes, tensor types and sizes of a GGUF
 * (or of a Hugging Face folder, as format/hf_folder.h describes it), and its tokenizer's
 * model and pre-tokenizer rules. Reads only the header (no weights),
 * so it works on any size of model. */
#include <stdio.h>
#include <string.h>
#include "tools/cli.h"
#include "format/gguf.h"
#include "format/hf_folder.h"
#include "model/llama.h"
#include "model/flash_layout.h"
#include "model/sparsity.h"
#include "text/pretokenize.h"

/* A string metadata value, or NULL. */
static const tl_gguf_str *str_key(const tl_gguf *g, const char *key) {
    const tl_gguf_kv *kv = tl_gguf_find(g, key);
    return kv && kv->type == TL_GGUF_STRING ? &kv->v.str : NULL;
}

/* The tokenizer line: its model, and for byte-level BPE the pre-tokenizer rules that
 * tokenizer.ggml.pre selects (or that the value is one tierllm does not know). */
static void print_tokenizer(const tl_gguf *g) {
    const tl_gguf_str *model = str_key(g, "tokenizer.ggml.model");
    const tl_gguf_str *pre = str_key(g, "tokenizer.ggml.pre");
    printf("tokenizer:     ");
    if (!model) {
        printf("(none)\n");
        return;
    }
    if (!strcmp(model->s, "llama")) {
        printf("llama (SentencePiece BPE)%s\n", pre ? ", tokenizer.ggml.pre ignored" : "");
        return;
    }
    if (strcmp(model->s, "gpt2") != 0) {
        printf("%s (not supported)\n", model->s);
        return;
    }
    tl__pretok rules;
    if (!pre || pre->len == 0)
        printf("gpt2 (byte-level BPE), no pre-tokenizer named: GPT-2 rules\n");
    else if (tl__pretok_from_name(pre->s, pre->len, &rules) == 0)
        printf("gpt2 (byte-level BPE), pre-tokenizer '%s': %s rules\n", pre->s,
               tl__pretok_name(rules));
    else
        printf("gpt2 (byte-level BPE), pre-tokenizer '%s': not supported\n", pre->s);
}

/* A converted file's activation-sparsity tables (model/sparsity.h), checked as the engine
 * loads them. */
static void print_sparsity(const tl_gguf *g, int32_t n_layer) {
    tl_sparsity sp;
    tl_status st = tl_sparsity_load(&sp, g, n_layer, "this file");
    if (st) printf("sparsity:      unusable: %s\n", tl_last_error());
    else if (sp.table)
        printf("sparsity:      thresholds for %d layers x %d matrix inputs at %d levels, "
               "calibrated on %u tokens; default %.2f\n", (int)n_layer, TL_SITE_COUNT,
               TL_SPARSITY_LEVELS, sp.calib_tokens, (double)sp.file_default);
    tl_sparsity_free(&sp);
}

/* The matrices' layout: rows (the GGUF default) or the flash layout's site tensors. */
static void print_layout(const tl_gguf *g, const tl_llama_hparams *hp) {
    int flash;
    if (tl_flash_layout_detect(g, &flash, "this file")) {
        printf("layout:        unusable: %s\n", tl_last_error());
        return;
    }
    if (!flash) {
        printf("layout:        rows (each matrix row-major, as GGUF stores it)\n");
        return;
    }
    uint32_t version = 1;
    tl_gguf_get_u32(g, "tierllm.layout.version", &version);
    printf("layout:        flash v%u: each layer's matrices by input channel, one run per "
           "channel, bundled by shared input%s\n", version,
           version == TL_FLASH_LAYOUT_VERSION_NEURONS ? "; the FFN by neuron" : "");
    const int by_neuron = tl_gguf_find(g, "tierllm.neurons.rank") != NULL;
    for (int s = 0; s < TL_SITE_COUNT && hp->n_layer > 0; s++) {
        char name[96];
        snprintf(name, sizeof name, "blk.0.%s", tl_flash_site_tensor(s));
        const tl_gguf_tensor *t = tl_gguf_find_tensor(g, name);
        if (by_neuron && (s == TL_SITE_FFN_IN || s == TL_SITE_FFN_MID)) continue;
        if (!t) {
            printf("  %-18s missing\n", name + 6);
            continue;
        }
        tl_flash_part parts[TL_FLASH_MAX_PARTS];
        const int np = tl_flash_site_parts(hp, s, parts);
        printf("  %-18s %s, %llu runs of %llu (", name + 6, tl_type_name(t->type),
               (unsigned long long)t->ne[1], (unsigned long long)t->ne[0]);
        for (int p = 0; p < np; p++)
            printf("%s%.*s", p ? " + " : "", (int)(strlen(parts[p].src) - 7), parts[p].src);
        printf("), %.1f KiB per run\n",
               tl_type_row_bytes(t->type, (size_t)t->ne[0]) / 1024.0);
    }
    if (!by_neuron || hp->n_layer <= 0) return;
    const tl_gguf_tensor *t = tl_gguf_find_tensor(g, "blk.0.ffn_neurons");
    uint32_t rank = 0;
    float recall = 0, active = 0, predicted = 0;
    if (!t || tl_gguf_get_u32(g, "tierllm.neurons.rank", &rank) ||
        tl_gguf_get_f32(g, "tierllm.neurons.recall", &recall) ||
        tl_gguf_get_f32(g, "tierllm.neurons.active", &active) ||
        tl_gguf_get_f32(g, "tierllm.neurons.predicted", &predicted)) {
        printf("  ffn_neurons        missing or incomplete predictor keys\n");
        return;
    }
    printf("  %-18s %s, %llu runs of %llu (%sup row + down column: one per neuron), %.1f KiB "
           "per run\n", "ffn_neurons", tl_type_name(t->type), (unsigned long long)t->ne[1],
           (unsigned long long)t->ne[0], hp->ffn_relu ? "" : "gate row + ",
           tl_type_row_bytes(t->type, (size_t)t->ne[0]) / 1024.0);
    printf("  ffn_pred_v/u/b     predictor of the active neurons, rank %u: on its calibration "
           "text %.2f%% of the neurons active, %.2f%% predicted, %.2f%% of their output mass "
           "recalled\n", rank, 100.0 * active, 100.0 * predicted, 100.0 * recall);
    uint64_t nh = 0;
    const void *hit = NULL;
    if (!tl_gguf_get_arr(g, "tierllm.neurons.window_hit", TL_GGUF_FLOAT32, &nh, &hit) && nh) {
        printf("  neuron window      hit rate of a window of k tokens:");
        for (uint64_t k = 0; k < nh; k++)
            if (k < 4 || k % 4 == 3) printf(" k=%llu %.1f%%", (unsigned long long)k + 1,
                                             100.0 * ((const float *)hit)[k]);
        printf("\n");
    }
}

int tl_cmd_info(int argc, char **argv) {
    const char *path = NULL;
    int tensors = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) {
            if (!(path = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(argv[i], "--tensors")) {
            tensors = 1;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: tierllm info -m MODEL.gguf [--tensors]\n");
            return 0;
        } else {
            fprintf(stderr, "error: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "error: -m MODEL is required\n");
        return 2;
    }
    tl_gguf *g;
    tl_status st;
    const int folder = tl_hf_is_folder(path);
    if (folder) { /* a Hugging Face folder, described as a GGUF */
        tl_hf_folder *f;
        if ((st = tl_hf_folder_open(path, &f))) return cli_fail(st);
        g = f->gguf;
        f->gguf = NULL;
        tl_hf_folder_free(f);
    } else if ((st = tl_gguf_open(path, &g))) {
        return cli_fail(st);
    }
    tl_llama_hparams hp;
    st = tl_llama_read_hparams(g, &hp);
    if (st) {
        tl_gguf_free(g);
        return cli_fail(st);
    }
    const tl_gguf_str *name = str_key(g, "general.name");
    uint64_t bytes[64] = {0}, elems = 0, total = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        bytes[g->tensors[i].type & 63] += g->tensors[i].nbytes;
        elems += g->tensors[i].n_elems;
        total += g->tensors[i].nbytes;
    }
    const tl_gguf_tensor *emb = tl_gguf_find_tensor(g, "token_embd.weight");
    if (folder)
        printf("file:          %s (Hugging Face folder, %llu tensors used)\n", path,
               (unsigned long long)g->n_tensors);
    else
        printf("file:          %s (GGUF v%u, %llu tensors, %llu metadata keys)\n", path,
               g->version, (unsigned long long)g->n_tensors, (unsigned long long)g->n_kv);
    printf("name:          %s\n", name ? name->s : "(none)");
    printf("architecture:  %s (family: %s%s)\n", hp.arch,
           !strcmp(hp.arch, "qwen2") ? "Qwen2" : !strcmp(hp.arch, "opt") ? "OPT" : "Llama",
           hp.n_swa > 0 ? ", sliding-window attention" : "");
    printf("vocabulary:    %llu\n", emb ? (unsigned long long)emb->ne[1] : 0ull);
    printf("embedding:     %d\nfeed-forward:  %d%s\nlayers:        %d\n", hp.n_embd, hp.n_ff,
           hp.ffn_gate_relu ? " (ReLU-fied: relu(gate) * up)" : "", hp.n_layer);
    if (hp.pos_learned)
        printf("heads:         %d (kv %d, head dim %d, learned positions, LayerNorm, ReLU FFN)\n",
               hp.n_head, hp.n_head_kv, hp.head_dim);
    else
        printf("heads:         %d (kv %d, head dim %d, rope dims %d, base %g)\n", hp.n_head,
               hp.n_head_kv, hp.head_dim, hp.rope_dim, hp.rope_base);
    printf("context:       %d\n", hp.n_ctx_train);
    printf("parameters:    %.3f M\n", elems / 1e6);
    printf("weights:       %.2f MiB", total / 1048576.0);
    for (int t = 0; t < 64; t++)
        if (bytes[t]) printf("  %s %.2f MiB", tl_type_name((tl_type)t), bytes[t] / 1048576.0);
    printf("\n");
    print_tokenizer(g);
    print_sparsity(g, hp.n_layer);
    print_layout(g, &hp);
    if (tensors)
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const tl_gguf_tensor *t = &g->tensors[i];
            printf("  %-28s %-5s [%llu, %llu, %llu, %llu] %llu bytes\n", t->name,
                   tl_type_name(t->type), (unsigned long long)t->ne[0],
                   (unsigned long long)t->ne[1], (unsigned long long)t->ne[2],
                   (unsigned long long)t->ne[3], (unsigned long long)t->nbytes);
        }
    tl_gguf_free(g);
    return 0;
}
