/* cmd_synth.c - `tierllm synth`: write a random-weight Llama GGUF of a given shape. */
#include <stdio.h>
#include <string.h>
#include "tools/cli.h"
#include "format/tensor_type.h"

static void usage(void) {
    printf("usage: tierllm synth [--preset NAME] [shape flags] [--type T] -o OUT.gguf\n"
           "  --preset NAME     stories260k | tinyllama-1.1b | llama2-7b (default stories260k)\n"
           "  --type T          f32 | f16 | bf16 | q8_0 | q4_0 (default f32)\n"
           "  --vocab N --embd N --ff N --layers N --heads N --kv-heads N --ctx N\n"
           "  --tied            no output.weight (classifier tied to the embedding)\n"
           "  --seed S          weight seed (default 1)\n");
}

static int parse_type(const char *s, int32_t *out) {
    static const struct { const char *n; int32_t t; } types[] = {
        {"f32", TL_TYPE_F32}, {"f16", TL_TYPE_F16}, {"bf16", TL_TYPE_BF16},
        {"q8_0", TL_TYPE_Q8_0}, {"q4_0", TL_TYPE_Q4_0}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcasecmp(s, types[i].n)) { *out = types[i].t; return 1; }
    fprintf(stderr, "error: --type expects f32, f16, bf16, q8_0 or q4_0, got '%s'\n", s);
    return 0;
}

int tl_cmd_synth(int argc, char **argv) {
    tl_synth_params p;
    tl_synth_preset("stories260k", &p);
    const char *out = NULL;
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
        else if (!strcmp(a, "--type")) { VAL(); if (!parse_type(v, &p.weight_type)) return 2; }
        else if (!strcmp(a, "--tied")) p.tied_output = 1;
        else if (!strcmp(a, "--seed")) { VAL(); if (!cli_u64(a, v, &p.seed)) return 2; }
        INT("--vocab", n_vocab) INT("--embd", n_embd) INT("--ff", n_ff)
        INT("--layers", n_layer) INT("--heads", n_head) INT("--kv-heads", n_head_kv)
        INT("--ctx", n_ctx)
        else {
            fprintf(stderr, "error: unknown option '%s' (see tierllm synth --help)\n", a);
            return 2;
        }
#undef INT
#undef VAL
    }
    if (!out) {
        fprintf(stderr, "error: -o OUT.gguf is required\n");
        return 2;
    }
    tl_status st = tl_synth_write(&p, out);
    if (st) return cli_fail(st);
    printf("wrote %s: %d layers, embd %d, ff %d, heads %d/%d, vocab %d, %s weights, "
           "%.1f MiB\n", out, p.n_layer, p.n_embd, p.n_ff, p.n_head, p.n_head_kv, p.n_vocab,
           tl_type_name((tl_type)p.weight_type), tl_synth_file_bytes(&p) / 1048576.0);
    return 0;
}
