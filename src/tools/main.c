/* main.c - `tierllm <command>`: dispatch to the subcommands. */
#include <stdio.h>
#include <string.h>
#include "tools/cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tierllm <command> [options]\n"
            "commands:\n"
            "  run     generate text:   tierllm run -m MODEL.gguf -p PROMPT -n N [--temp T]\n"
            "  batch   many prompts:    tierllm batch -m MODEL -i in.jsonl -o out.jsonl\n"
            "  info    describe a model: tierllm info -m MODEL.gguf\n"
            "  synth   write a random-weight GGUF: tierllm synth --preset NAME -o OUT\n"
            "  logits  dump logits:     tierllm logits -m MODEL --tokens 1,2,3 -o OUT.f32\n"
            "  plan    choose a policy:  tierllm plan -m MODEL --mem-budget 2G --prompt-len 128 ...\n"
            "  profile measure this machine (disk, memory, kernels): tierllm profile\n"
            "  serve   OpenAI-compatible HTTP server: tierllm serve -m MODEL [--port N]\n"
            "  convert add activation-sparsity thresholds: tierllm convert -m IN -o OUT --calib T\n"
            "  perplexity of a text:    tierllm perplexity -m MODEL -f TEXT [--sparsity S]\n"
            "run 'tierllm <command> --help' for its options\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run")) return tl_cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "info")) return tl_cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "synth")) return tl_cmd_synth(argc - 1, argv + 1);
    if (!strcmp(cmd, "logits")) return tl_cmd_logits(argc - 1, argv + 1);
    if (!strcmp(cmd, "batch")) return tl_cmd_batch(argc - 1, argv + 1);
    if (!strcmp(cmd, "profile")) return tl_cmd_profile(argc - 1, argv + 1);
    if (!strcmp(cmd, "plan")) return tl_cmd_plan(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return tl_cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "convert")) return tl_cmd_convert(argc - 1, argv + 1);
    if (!strcmp(cmd, "perplexity")) return tl_cmd_perplexity(argc - 1, argv + 1);
    fprintf(stderr, "error: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
