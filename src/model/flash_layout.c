/* flash_layout.c - the flash layout's tensors and parts (flash_layout.h). */
#include "model/flash_layout.h"

#include <string.h>
#include "base/rng.h"
#include "base/status.h"
#include "model/llama.h"

static const char *const site_tensors[TL_SITE_COUNT] = {"attn_qkv.cols", "attn_output.cols",
                                                         "ffn_gate_up.cols", "ffn_down.cols"};

const char *tl_flash_site_tensor(int site) {
    return site >= 0 && site < TL_SITE_COUNT ? site_tensors[site] : "?";
}

int tl_flash_site_parts(const tl_llama_hparams *hp, int site,
                        tl_flash_part parts[TL_FLASH_MAX_PARTS]) {
    const uint64_t d = (uint64_t)hp->n_embd, f = (uint64_t)hp->n_ff;
    const uint64_t qd = (uint64_t)hp->n_head * (uint64_t)hp->head_dim;
    const uint64_t kvd = (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim;
    int n = 0;
    switch (site) {
    case TL_SITE_ATTN_IN:
        parts[n++] = (tl_flash_part){"attn_q.weight", qd};
        parts[n++] = (tl_flash_part){"attn_k.weight", kvd};
        parts[n++] = (tl_flash_part){"attn_v.weight", kvd};
        break;
    case TL_SITE_ATTN_OUT: parts[n++] = (tl_flash_part){"attn_output.weight", d}; break;
    case TL_SITE_FFN_IN:
        if (!hp->ffn_relu) parts[n++] = (tl_flash_part){"ffn_gate.weight", f};
        parts[n++] = (tl_flash_part){"ffn_up.weight", f};
        break;
    case TL_SITE_FFN_MID: parts[n++] = (tl_flash_part){"ffn_down.weight", d}; break;
    default: break;
    }
    return n;
}

int tl_flash_neuron_parts(const tl_llama_hparams *hp, tl_flash_part parts[TL_FLASH_MAX_PARTS]) {
    const uint64_t d = (uint64_t)hp->n_embd;
    int n = 0;
    if (!hp->ffn_relu) parts[n++] = (tl_flash_part){"ffn_gate.weight", d};
    parts[n++] = (tl_flash_part){"ffn_up.weight", d};
    parts[n++] = (tl_flash_part){"ffn_down.weight", d};
    return n;
}

uint64_t tl_flash_neuron_run(const tl_llama_hparams *hp) {
    return (uint64_t)(hp->ffn_relu ? 2 : 3) * (uint64_t)hp->n_embd;
}

uint64_t tl_flash_site_channels(const tl_llama_hparams *hp, int site) {
    switch (site) {
    case TL_SITE_ATTN_IN: case TL_SITE_FFN_IN: return (uint64_t)hp->n_embd;
    case TL_SITE_ATTN_OUT: return (uint64_t)hp->n_head * (uint64_t)hp->head_dim;
    case TL_SITE_FFN_MID: return (uint64_t)hp->n_ff;
    default: return 0;
    }
}

uint64_t tl_flash_site_run(const tl_llama_hparams *hp, int site) {
    tl_flash_part parts[TL_FLASH_MAX_PARTS];
    const int n = tl_flash_site_parts(hp, site, parts);
    uint64_t run = 0;
    for (int i = 0; i < n; i++) run += parts[i].len;
    return run;
}

tl_status tl_flash_layout_detect(const tl_gguf *g, int *is_flash, const char *what) {
    *is_flash = 0;
    const tl_gguf_kv *kv = tl_gguf_find(g, "tierllm.layout");
    if (!kv) return TL_OK;
    if (kv->type != TL_GGUF_STRING || kv->v.str.len != 5 || memcmp(kv->v.str.s, "flash", 5))
        return tl_error_set(TL_ERR_FORMAT, "%s: tierllm.layout is not \"flash\", the one "
                            "layout this engine reads besides the row-major default", what);
    const tl_gguf_kv *ver = tl_gguf_find(g, "tierllm.layout.version");
    if (!ver || ver->type != TL_GGUF_UINT32)
        return tl_error_set(TL_ERR_FORMAT, "%s: tierllm.layout.version is missing or not a "
                            "uint32", what);
    if (ver->v.u < 1 || ver->v.u > TL_FLASH_LAYOUT_VERSION)
        return tl_error_set(TL_ERR_UNSUPPORTED, "%s: flash layout version %llu; this engine "
                            "reads versions 1 to %d", what, (unsigned long long)ver->v.u,
                            TL_FLASH_LAYOUT_VERSION);
    /* the neuron keys come with version 2, and version 2 with them */
    const int neurons = tl_gguf_find(g, "tierllm.neurons.rank") != NULL;
    if ((ver->v.u == TL_FLASH_LAYOUT_VERSION_NEURONS) != neurons)
        return tl_error_set(TL_ERR_FORMAT, "%s: flash layout version %llu %s the neuron "
                            "predictor keys (tierllm.neurons.*)", what,
                            (unsigned long long)ver->v.u,
                            ver->v.u == TL_FLASH_LAYOUT_VERSION_NEURONS ? "without" : "with");
    *is_flash = 1;
    return TL_OK;
}

size_t tl_flash_draw_channels(uint64_t rows, double p, uint64_t *seed, int32_t *chan) {
    size_t nc = 0;
    for (uint64_t c = 0; c < rows; c++)
        if ((double)(tl_splitmix64(seed) >> 11) * 0x1p-53 < p) chan[nc++] = (int32_t)c;
    return nc;
}
