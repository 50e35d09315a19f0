/* cmd_synth.c - `tierllm synth`: write a random-weight GGUF (Llama, Qwen2 or OPT) of a
 * given shape. */
#include <stdio.h>
#include <string.h>
#include "tools/cli.h"
#include "format/tensor_type.h"

static void usage(void) {
    printf("usage: tierllm synth [--preset NAME] [shape flags] [--type T] -o OUT.gguf\n"
           "  --preset NAME     stories260k | tinyllama-1.1b | llama2-7b (default stories260k)\n"
           "  --type T          f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | q2_k |\n"
           "                    q3_k | q4_k | q5_k | q6_k (every matrix), or a llama.cpp mix:\n"
           "                    q2_k_mix | q3_k_s | q3_k_m | q3_k_l | q4_k_s | q4_k_m | q5_k_s |\n"
           "                    q5_k_m | q6_k_mix (default f32)\n"
           "  --vocab N --embd N --ff N --layers N --heads N --kv-heads N --ctx N\n"
           "  --tied            no output.weight (classifier tied to the embedding)\n"
           "  --arch A          llama | qwen2 (q/k/v biases, NEOX RoPE) | opt (LayerNorm,\n"
           "                    learned positions, ReLU FFN, biases, tied; kv heads = heads\n"
           "                    unless given) (default llama)\n"
           "  --rope-freqs      write Llama 3's rope_freqs.weight (frequency divisors)\n"
           "  --swa N           sliding-window attention over the last N positions (Mistral)\n"
           "  --act relu|silu   the feed-forward's activation: relu makes a ReLU-fied Llama,\n"
           "                    relu(gate x + b) * up x, b set so --ffn-sparsity S of the\n"
           "                    neurons are zero on average, which ones depending on the\n"
           "                    input (default silu: SwiGLU)\n"
           "  --ffn-sparsity S  with --act relu: that share of zeros (default 0.95)\n"
           "  --gate-rank R     with --act relu: the gate's rows mix R directions per layer\n"
           "                    (95%% of their variance), so a layer's active neurons are\n"
           "                    predictable from a rank-R view of its input (default 32;\n"
           "                    0: independent rows)\n"
           "  --seed S          weight seed (default 1)\n");
}

/* A type name sets every matrix's type; a mix name sets the mix (weight_type unused). */
static int parse_type(const char *s, tl_synth_params *p) {
    static const struct { const char *n; int32_t t; } types[] = {
        {"f32", TL_TYPE_F32},   {"f16", TL_TYPE_F16},   {"bf16", TL_TYPE_BF16},
        {"q8_0", TL_TYPE_Q8_0}, {"q4_0", TL_TYPE_Q4_0}, {"q4_1", TL_TYPE_Q4_1},
        {"q5_0", TL_TYPE_Q5_0}, {"q5_1", TL_TYPE_Q5_1}, {"q2_k", TL_TYPE_Q2_K},
        {"q3_k", TL_TYPE_Q3_K}, {"q4_k", TL_TYPE_Q4_K}, {"q5_k", TL_TYPE_Q5_K},
        {"q6_k", TL_TYPE_Q6_K}};
    static const struct { const char *n; int32_t mix; } mixes[] = {
        {"q2_k_mix", TL_MIX_Q2_K}, {"q3_k_s", TL_MIX_Q3_K_S}, {"q3_k_m", TL_MIX_Q3_K_M},
        {"q3_k_l", TL_MIX_Q3_K_L}, {"q4_k_s", TL_MIX_Q4_K_S}, {"q4_k_m", TL_MIX_Q4_K_M},
        {"q5_k_s", TL_MIX_Q5_K_S}, {"q5_k_m", TL_MIX_Q5_K_M}, {"q6_k_mix", TL_MIX_Q6_K}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcasecmp(s, types[i].n)) { p->weight_type = types[i].t; p->mix = 0; return 1; }
    for (size_t i = 0; i < sizeof mixes / sizeof mixes[0]; i++)
        if (!strcasecmp(s, mixes[i].n)) { p->mix = mixes[i].mix; return 1; }
    fprintf(stderr, "error: --type expects a type (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
            "q5_1, q2_k, q3_k, q4_k, q5_k, q6_k) or a mix (q2_k_mix, q3_k_s, q3_k_m, q3_k_l, "
            "q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k_mix), got '%s'\n", s);
    return 0;
}

int tl_cmd_synth(int argc, char **argv) {
    tl_synth_params p;
    tl_synth_preset("stories260k", &p);
    const char *out = NULL;
    int kv_heads_given = 0, act_relu = 0, gate_rank_given = 0;
    float ffn_sparsity = 0;
    /* the preset is applied first wherever it appears, then shape flags override it */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--preset") && i + 1 < argc) {
            tl_status st = tl_synth_preset(argv[i + 1], &p);
            if (st) return cli_fail(st);
        }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
#define VAL() if (!(v = cli_value(argc, argv, &i))) return 2
#define INT(flag, field) else if (!strcmp(a, flag)) { VAL(); \
        if (!cli_int(a, v, 1, 1 << 24, &p.field)) return 2; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (!strcmp(a, "--preset")) { VAL(); }
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) { VAL(); out = v; }
        else if (!strcmp(a, "--type")) { VAL(); if (!parse_type(v, &p)) return 2; }
        else if (!strcmp(a, "--tied")) p.tied_output = 1;
        else if (!strcmp(a, "--rope-freqs")) p.rope_freqs = 1;
        else if (!strcmp(a, "--arch")) {
            VAL();
            if (!strcmp(v, "llama")) p.family = TL_SYNTH_LLAMA;
            else if (!strcmp(v, "qwen2")) p.family = TL_SYNTH_QWEN2;
            else if (!strcmp(v, "opt")) p.family = TL_SYNTH_OPT;
            else {
                fprintf(stderr, "error: --arch expects llama, qwen2 or opt, got '%s'\n", v);
                return 2;
            }
        }
        else if (!strcmp(a, "--act")) {
            VAL();
            if (!strcmp(v, "relu")) act_relu = 1;
            else if (!strcmp(v, "silu")) act_relu = 0;
            else {
                fprintf(stderr, "error: --act expects relu or silu, got '%s'\n", v);
                return 2;
            }
        }
        else if (!strcmp(a, "--ffn-sparsity")) {
            VAL();
            if (!cli_sparsity(a, v, &ffn_sparsity)) return 2;
            if (!(ffn_sparsity > 0)) {
                fprintf(stderr, "error: --ffn-sparsity expects a share in (0, 1)\n");
                return 2;
            }
        }
        INT("--swa", n_swa)
        else if (!strcmp(a, "--seed")) { VAL(); if (!cli_u64(a, v, &p.seed)) return 2; }
        INT("--vocab", n_vocab) INT("--embd", n_embd) INT("--ff", n_ff)
        INT("--layers", n_layer) INT("--heads", n_head)
        else if (!strcmp(a, "--kv-heads")) {
            VAL();
            if (!cli_int(a, v, 1, 1 << 24, &p.n_head_kv)) return 2;
            kv_heads_given = 1;
        }
        INT("--ctx", n_ctx)
        else if (!strcmp(a, "--gate-rank")) {
            VAL();
            if (!cli_int(a, v, 0, 256, &p.gate_rank)) return 2;
            gate_rank_given = 1;
        }
        else {
            fprintf(stderr, "error: unknown option '%s' (see tierllm synth --help)\n", a);
            return 2;
        }
#undef INT
#undef VAL
    }
    if (p.family == TL_SYNTH_OPT && !kv_heads_given) p.n_head_kv = p.n_head;
    if (ffn_sparsity > 0 && !act_relu) {
        fprintf(stderr, "error: --ffn-sparsity needs --act relu\n");
        return 2;
    }
    if (gate_rank_given && !act_relu) {
        fprintf(stderr, "error: --gate-rank needs --act relu\n");
        return 2;
    }
    if (act_relu) p.relu_sparsity = ffn_sparsity > 0 ? ffn_sparsity : 0.95f;
    if (act_relu && !gate_rank_given) p.gate_rank = 32;
    if (!out) {
        fprintf(stderr, "error: -o OUT.gguf is required\n");
        return 2;
    }
    tl_status st = tl_synth_write(&p, out);
    if (st) return cli_fail(st);
    printf("wrote %s: %d layers, embd %d, ff %d, heads %d/%d, vocab %d, %s weights, "
           "%.1f MiB\n", out, p.n_layer, p.n_embd, p.n_ff, p.n_head, p.n_head_kv, p.n_vocab,
           p.mix ? tl_synth_mix_name(p.mix) : tl_type_name((tl_type)p.weight_type),
           tl_synth_file_bytes(&p) / 1048576.0);
    return 0;
}
