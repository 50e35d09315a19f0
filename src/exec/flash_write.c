/* flash_write.c - site tensors of the flash layout from a row-major GGUF (flash_write.h). */
#include "exec/flash_write.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/budget.h"
#include "base/status.h"
#include "format/file_src.h"
#include "kernels/kernels.h"
#include "exec/neuron_calib.h"
#include "model/flash_layout.h"
#include "model/llama.h"

#define GATHER 16 /* runs gathered at once */

/* What an output tensor is built of, besides a copy of an input tensor: a site of runs
 * (a ReLU FFN's neuron runs are site NEURONS), or a layer's predictor tensor. */
enum { NEURONS = TL_SITE_COUNT, PRED_V, PRED_U, PRED_B };

/* One output tensor: a copy of input tensor `src`, or `site` of layer `layer`. */
typedef struct out_tensor {
    int64_t src;                  /* input index, or -1 for a built one */
    int32_t layer;
    int site;
    tl_type type;                 /* a built tensor's type */
    int n_parts;
    int64_t part_src[TL_FLASH_MAX_PARTS];
    uint64_t part_len[TL_FLASH_MAX_PARTS];
    uint8_t part_rows[TL_FLASH_MAX_PARTS]; /* 1: run c holds the part's row c (a neuron's
                                               gate and up rows), 0: its column c */
    uint64_t channels, run, nbytes;
} out_tensor;

struct tl_flash_writer {
    const tl_gguf *in;
    const char *in_path;
    tl_file_src src;              /* the input, read with pread (format/file_src.h) */
    struct tl_budget *budget;
    const tl_neuron_predictors *np; /* a ReLU FFN stored by neuron: its predictors */
    out_tensor *t;
    size_t n_t;
    int64_t built;                /* the output index whose bytes are in `site` (-1: none) */
    uint8_t *site;
    uint64_t peak;
};

static int64_t find_tensor(const tl_gguf *g, const char *name) {
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[i].name, name)) return (int64_t)i;
    return -1;
}

static double bits_per_weight(tl_type t) {
    return 8.0 * (double)tl_type_row_bytes(t, tl_type_block_elems(t)) /
           (double)tl_type_block_elems(t);
}

/* Is input tensor i one of a layer's seven matrices (which the sites replace)? */
static int is_layer_matrix(const tl_gguf *g, uint64_t i, const tl_llama_hparams *hp) {
    int layer, len = 0;
    char rest[64];
    if (sscanf(g->tensors[i].name, "blk.%d.%63s%n", &layer, rest, &len) != 2) return 0;
    if (layer < 0 || layer >= hp->n_layer) return 0;
    for (int s = 0; s < TL_SITE_COUNT; s++) {
        tl_flash_part parts[TL_FLASH_MAX_PARTS];
        const int np = tl_flash_site_parts(hp, s, parts);
        for (int p = 0; p < np; p++)
            if (!strcmp(rest, parts[p].src)) return 1;
    }
    return 0;
}

static tl_status plan_site(tl_flash_writer *fw, const tl_llama_hparams *hp, int32_t l, int s,
                           out_tensor *o) {
    tl_flash_part parts[TL_FLASH_MAX_PARTS];
    memset(o, 0, sizeof *o);
    o->src = -1;
    o->layer = l;
    o->site = s;
    if (s == NEURONS) {
        o->n_parts = tl_flash_neuron_parts(hp, parts);
        o->channels = (uint64_t)hp->n_ff;
        for (int p = 0; p + 1 < o->n_parts; p++) o->part_rows[p] = 1;
    } else {
        o->n_parts = tl_flash_site_parts(hp, s, parts);
        o->channels = tl_flash_site_channels(hp, s);
    }
    double best_bits = 0;
    for (int p = 0; p < o->n_parts; p++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%d.%s", (int)l, parts[p].src);
        const int64_t i = find_tensor(fw->in, name);
        if (i < 0)
            return tl_error_set(TL_ERR_FORMAT, "%s: missing tensor '%s'", fw->in_path, name);
        const tl_gguf_tensor *t = &fw->in->tensors[i];
        const uint64_t ne0 = o->part_rows[p] ? parts[p].len : o->channels;
        const uint64_t ne1 = o->part_rows[p] ? o->channels : parts[p].len;
        if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
            return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s' is not [%llu, %llu]",
                                fw->in_path, name, (unsigned long long)ne0,
                                (unsigned long long)ne1);
        o->part_src[p] = i;
        o->part_len[p] = parts[p].len;
        o->run += parts[p].len;
        if (p == 0 || bits_per_weight(t->type) > best_bits) {
            best_bits = bits_per_weight(t->type);
            o->type = t->type;
        }
    }
    for (int p = 0; p < o->n_parts; p++) {
        const tl_type t = fw->in->tensors[o->part_src[p]].type;
        /* float parts of different types (F16 beside BF16) are exact only in F32 */
        if (t != o->type && tl_type_block_elems(t) == 1 && tl_type_block_elems(o->type) == 1)
            o->type = TL_TYPE_F32;
        if (o->part_len[p] % tl_type_block_elems(o->type)) o->type = TL_TYPE_F32;
    }
    o->nbytes = o->channels * tl_type_row_bytes(o->type, o->run);
    /* the parts in f32, the largest part's raw bytes, the site */
    uint64_t raw = 0, f32 = 0;
    for (int p = 0; p < o->n_parts; p++) {
        const uint64_t b = fw->in->tensors[o->part_src[p]].nbytes;
        if (b > raw) raw = b;
        f32 += o->part_len[p] * o->channels * sizeof(float);
    }
    /* build_site's allocations at once: the site, the runs, every part, one raw tensor,
     * each with the budget's 64 bytes of alignment */
    const uint64_t need = f32 + raw + o->nbytes + GATHER * o->run * sizeof(float) +
                          (3 + (uint64_t)o->n_parts) * 64;
    if (need > fw->peak) fw->peak = need;
    return TL_OK;
}

/* A predictor tensor of layer l. */
static void plan_pred(const tl_neuron_predictors *np, int32_t l, int kind, out_tensor *o) {
    memset(o, 0, sizeof *o);
    o->src = -1;
    o->layer = l;
    o->site = kind;
    o->type = kind == PRED_B ? TL_TYPE_F32 : TL_TYPE_F16;
    o->run = kind == PRED_V ? np->d : kind == PRED_U ? np->rank : np->f;
    o->channels = kind == PRED_V ? np->rank : kind == PRED_U ? np->f : 1;
    o->nbytes = o->channels * tl_type_row_bytes(o->type, o->run);
}

tl_status tl_flash_writer_open(const tl_gguf *in, const char *in_path,
                               const tl_llama_hparams *hp, const tl_neuron_predictors *np,
                               struct tl_budget *budget, tl_flash_writer **out) {
    *out = NULL;
    tl_flash_writer *fw = calloc(1, sizeof *fw);
    if (!fw) return tl_error_set(TL_ERR_NOMEM, "out of memory");
    fw->in = in;
    fw->in_path = in_path;
    fw->budget = budget;
    fw->built = -1;
    fw->src.fd = -1;
    fw->np = np;
    fw->t = calloc((size_t)in->n_tensors + 6 * (size_t)hp->n_layer, sizeof *fw->t);
    tl_status st = fw->t ? TL_OK : tl_error_set(TL_ERR_NOMEM, "out of memory");
    if (!st && np && (np->n_layer != hp->n_layer || np->d != (size_t)hp->n_embd ||
                      np->f != (size_t)hp->n_ff || !(hp->ffn_relu || hp->ffn_gate_relu)))
        st = tl_error_set(TL_ERR_INVALID, "neuron predictors of another shape, or for a "
                          "feed-forward without ReLU");
    for (uint64_t i = 0; !st && i < in->n_tensors; i++)
        if (!is_layer_matrix(in, i, hp)) fw->t[fw->n_t++] = (out_tensor){.src = (int64_t)i};
    for (int32_t l = 0; !st && l < hp->n_layer; l++) {
        for (int s = 0; !st && s < TL_SITE_COUNT; s++)
            if (!np || s == TL_SITE_ATTN_IN || s == TL_SITE_ATTN_OUT)
                st = plan_site(fw, hp, l, s, &fw->t[fw->n_t++]);
        if (!st && np) {
            st = plan_site(fw, hp, l, NEURONS, &fw->t[fw->n_t++]);
            for (int k = PRED_V; k <= PRED_B; k++) plan_pred(np, l, k, &fw->t[fw->n_t++]);
        }
    }
    uint64_t size;
    if (!st) st = tl_file_src_open(in_path, TL_ERR_FORMAT, &fw->src, &size);
    if (st) {
        tl_flash_writer_close(fw);
        return st;
    }
    *out = fw;
    return TL_OK;
}

void tl_flash_writer_close(tl_flash_writer *fw) {
    if (!fw) return;
    tl_file_src_close(&fw->src);
    tl_budget_free(fw->budget, fw->site);
    free(fw->t);
    free(fw);
}

uint64_t tl_flash_writer_peak_bytes(const tl_flash_writer *fw) { return fw->peak; }

uint64_t tl_flash_writer_tensor_bytes(const tl_flash_writer *fw) {
    uint64_t b = 0;
    for (size_t i = 0; i < fw->n_t; i++)
        b += fw->t[i].src >= 0 ? fw->in->tensors[fw->t[i].src].nbytes : fw->t[i].nbytes;
    return b;
}

tl_status tl_flash_writer_declare(tl_flash_writer *fw, tl_gguf_writer *w) {
    tl_status st = tl_gguf_writer_set_str(w, "tierllm.layout", "flash");
    if (!st) st = tl_gguf_writer_set_u32(w, "tierllm.layout.version",
                                         fw->np ? TL_FLASH_LAYOUT_VERSION_NEURONS : 1);
    if (fw->np) { /* model/neurons.h */
        const tl_neuron_info *ni = &fw->np->info;
        if (!st) st = tl_gguf_writer_set_u32(w, "tierllm.neurons.rank", (uint32_t)ni->rank);
        if (!st) st = tl_gguf_writer_set_f32(w, "tierllm.neurons.recall", ni->recall);
        if (!st) st = tl_gguf_writer_set_f32(w, "tierllm.neurons.active", ni->active);
        if (!st) st = tl_gguf_writer_set_f32(w, "tierllm.neurons.predicted", ni->predicted);
        if (!st) st = tl_gguf_writer_set_arr(w, "tierllm.neurons.window_hit", TL_GGUF_FLOAT32,
                                             ni->window_hit, (uint64_t)ni->window_k);
        if (!st) st = tl_gguf_writer_set_arr(w, "tierllm.neurons.window_union", TL_GGUF_FLOAT32,
                                             ni->window_union, (uint64_t)ni->window_k);
        if (!st) st = tl_gguf_writer_set_arr(w, "tierllm.neurons.window_mean", TL_GGUF_FLOAT32,
                                             ni->window_mean, (uint64_t)ni->window_k);
    }
    for (size_t i = 0; !st && i < fw->n_t; i++) {
        const out_tensor *o = &fw->t[i];
        if (o->src >= 0) {
            const tl_gguf_tensor *t = &fw->in->tensors[o->src];
            st = tl_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne);
        } else {
            static const char *const built[] = {"ffn_neurons", "ffn_pred_v", "ffn_pred_u",
                                                "ffn_pred_b"};
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s", (int)o->layer,
                     o->site < TL_SITE_COUNT ? tl_flash_site_tensor(o->site)
                                             : built[o->site - NEURONS]);
            const uint64_t ne[2] = {o->run, o->channels};
            st = tl_gguf_writer_add_tensor(w, name, o->type, o->site == PRED_B ? 1 : 2, ne);
        }
    }
    return st;
}

static tl_status read_at(tl_flash_writer *fw, uint64_t at, void *dst, size_t len,
                         const char *name) {
    tl_status st = tl_file_src_read(&fw->src, at, dst, len);
    return st ? tl_error_wrap(st, "reading tensor '%s'", name) : TL_OK;
}

/* A layer's predictor tensor (its values already F16-exact) into fw->site. */
static tl_status build_pred(tl_flash_writer *fw, const out_tensor *o) {
    const tl_neuron_predictors *np = fw->np;
    const size_t l = (size_t)o->layer;
    const float *src = o->site == PRED_V ? np->V + l * np->rank * np->d
                       : o->site == PRED_U ? np->U + l * np->f * np->rank : np->pb + l * np->f;
    tl_status st = tl_budget_alloc(fw->budget, (size_t)o->nbytes, 64, "neuron predictor",
                                   (void **)&fw->site);
    if (st) return st;
    tl_quant_row(o->type, src, fw->site, (size_t)(o->run * o->channels));
    return TL_OK;
}

/* Builds output tensor `index` (a site, or a predictor tensor) into fw->site. */
static tl_status build_site(tl_flash_writer *fw, size_t index) {
    const out_tensor *o = &fw->t[index];
    tl_budget_free(fw->budget, fw->site);
    fw->site = NULL;
    fw->built = -1;
    if (o->site > NEURONS) {
        tl_status st = build_pred(fw, o);
        if (!st) fw->built = (int64_t)index;
        return st;
    }
    float *parts[TL_FLASH_MAX_PARTS] = {0};
    void *raw = NULL;
    float *run = NULL;
    tl_status st = tl_budget_alloc(fw->budget, (size_t)o->nbytes, 64, "flash site tensor",
                                   (void **)&fw->site);
    if (!st) st = tl_budget_alloc(fw->budget, GATHER * (size_t)o->run * sizeof(float), 64,
                                  "flash runs", (void **)&run);
    for (int p = 0; p < o->n_parts && !st; p++) {
        const tl_gguf_tensor *t = &fw->in->tensors[o->part_src[p]];
        const size_t elems = (size_t)(o->part_len[p] * o->channels);
        st = tl_budget_alloc(fw->budget, elems * sizeof(float), 64, "flash part",
                             (void **)&parts[p]);
        if (!st) st = tl_budget_alloc(fw->budget, (size_t)t->nbytes, 64, "flash part bytes", &raw);
        if (!st) st = read_at(fw, t->offset, raw, (size_t)t->nbytes, t->name);
        if (!st) tl_dequant_row(t->type, raw, parts[p], elems); /* one stream of blocks */
        tl_budget_free(fw->budget, raw);
        raw = NULL;
    }
    const size_t run_bytes = tl_type_row_bytes(o->type, (size_t)o->run);
    /* GATHER runs at a time: each row of a part gives them a cache line's worth */
    for (uint64_t c0 = 0; c0 < o->channels && !st; c0 += GATHER) {
        const uint64_t g = o->channels - c0 < GATHER ? o->channels - c0 : GATHER;
        size_t at = 0;
        for (int p = 0; p < o->n_parts; p++) {
            if (o->part_rows[p]) { /* rows c0.. of part p, whole */
                for (uint64_t k = 0; k < g; k++)
                    memcpy(run + k * o->run + at, parts[p] + (c0 + k) * o->part_len[p],
                           (size_t)o->part_len[p] * sizeof(float));
                at += (size_t)o->part_len[p];
                continue;
            }
            for (uint64_t r = 0; r < o->part_len[p]; r++, at++) { /* columns c0.. of part p */
                const float *src = parts[p] + r * o->channels + c0;
                for (uint64_t k = 0; k < g; k++) run[k * o->run + at] = src[k];
            }
        }
        for (uint64_t k = 0; k < g; k++)
            tl_quant_row(o->type, run + k * o->run, fw->site + (c0 + k) * run_bytes,
                         (size_t)o->run);
    }
    for (int p = 0; p < o->n_parts; p++) tl_budget_free(fw->budget, parts[p]);
    tl_budget_free(fw->budget, run);
    if (st) return st;
    fw->built = (int64_t)index;
    return TL_OK;
}

tl_status tl_flash_writer_fill(void *user, size_t index, uint64_t offset, void *dst, size_t len) {
    tl_flash_writer *fw = user;
    if (index >= fw->n_t) return tl_error_set(TL_ERR_INVALID, "flash writer: tensor %zu", index);
    const out_tensor *o = &fw->t[index];
    if (o->src >= 0) {
        const tl_gguf_tensor *t = &fw->in->tensors[o->src];
        return read_at(fw, t->offset + offset, dst, len, t->name);
    }
    if (fw->built != (int64_t)index) {
        tl_status st = build_site(fw, index);
        if (st) return st;
    }
    memcpy(dst, fw->site + offset, len);
    return TL_OK;
}
