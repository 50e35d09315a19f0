/* flash_layout.h - the flash layout (LLM in a Flash): each layer's matrices stored by
 * input channel, so a token whose matrix inputs are sparse (model/sparsity.h) reads only
 * the bytes of its non-zero channels.
 *
 * A row-major GGUF matrix W [out][in] keeps one input channel's weights `in` elements
 * apart; here channel c's weights for every output are one contiguous *run*, and the
 * matrices that share an input (a sparsity site) are bundled, so one read per channel
 * brings all of them. Per layer, four tensors replace the seven matrices (version 1):
 *   site      tensor (blk.N.)     GGUF ne = [run, channels]   run c
 *   ATTN_IN   attn_qkv.cols       [qd + 2 kvd, n_embd]        wq[:, c], wk[:, c], wv[:, c]
 *   ATTN_OUT  attn_output.cols    [n_embd, qd]                wo[:, c]
 *   FFN_IN    ffn_gate_up.cols    [2 f, n_embd]               w_gate[:, c], w_up[:, c]
 *                                 ([f, n_embd] for a ReLU FFN: w_up[:, c])
 *   FFN_MID   ffn_down.cols       [n_embd, f]                 w_down[:, c]
 * (qd = n_head * head_dim, kvd = n_head_kv * head_dim, f = n_ff). A ReLU FFN's file
 * (tierllm.ffn_activation "relu": the ReLU-fied Llama, or a gateless ReLU FFN) stores its
 * FFN by neuron instead, with a predictor of the active neurons (tierllm.neurons.rank set):
 *   NEURONS   ffn_neurons         [3 d, f] (gateless: [2 d, f])   run i: w_gate[i, :],
 *                                 w_up[i, :], w_down[:, i] (gateless: w_up[i, :], w_down[:, i])
 *   and ffn_pred_v [rank][d], ffn_pred_u [f][rank] (F16), ffn_pred_b [f] (F32): neuron i
 *   is predicted active at FFN input x when (U (V x))_i + b_i > 0 (model/ops_neurons.c).
 * One read brings all of a neuron's weights (the paper's row-column bundling). A run is quantized
 * along its length in the tensor's own type, so each part of a run must be a whole number
 * of that type's blocks. Everything else (embedding, norms, biases, output) is as in a
 * row-major file. The file says so with tierllm.layout = "flash" and
 * tierllm.layout.version; an engine that does not know the version refuses the file.
 */
#ifndef TL_MODEL_FLASH_LAYOUT_H
#define TL_MODEL_FLASH_LAYOUT_H

#include <stdint.h>
#include "tierllm.h"
#include "format/gguf.h"
#include "model/sparsity.h"

/* The layout versions this engine reads: 1, every matrix by input channel; 2, a ReLU FFN
 * by neuron with its predictor (the tierllm.neurons.* keys), which an engine of version 1
 * would not understand. */
#define TL_FLASH_LAYOUT_VERSION 2
#define TL_FLASH_LAYOUT_VERSION_NEURONS 2
#define TL_FLASH_MAX_PARTS 3
/* The IO queue depth a flash-layout file's reads get at least: its streamed sites are read
 * as many requests of a few KiB, which a disk serves faster the deeper its queue. */
#define TL_FLASH_MIN_QUEUE_DEPTH 32
/* A streamed site's product is taken in up to this many consecutive parts of its channel
 * list, each as soon as its runs have arrived (model/ops_runs.c), each a multiple of
 * TL_FLASH_PART_CHANNELS channels (the GEMM's panel depth, so a part of many rows fills
 * its panels): only the last part's compute waits alone, and each part costs a round of
 * the thread pool. Its reads are cut so that no request is much longer than 1 /
 * TL_FLASH_FETCH_PARTS of the tensor: a part does not wait for one read that also holds
 * the runs of all the parts after it. */
#define TL_FLASH_FETCH_PARTS 8
#define TL_FLASH_PART_CHANNELS 128

/* A product's channels as a calibration draws them: each of channels 0 .. rows - 1 kept
 * with probability p (independently, from *seed), ascending into chan; returns the count. */
size_t tl_flash_draw_channels(uint64_t rows, double p, uint64_t *seed, int32_t *chan);

/* Channels per part of a product over nc channels (the last part may be shorter). */
static inline size_t tl_flash_part_channels(size_t nc) {
    const size_t q = TL_FLASH_PART_CHANNELS, per = (nc + TL_FLASH_FETCH_PARTS - 1) /
                                                      TL_FLASH_FETCH_PARTS;
    return per <= q ? q : (per + q - 1) / q * q;
}

struct tl_llama_hparams;

/* The site's tensor name after "blk.N." */
const char *tl_flash_site_tensor(int site);

/* One matrix bundled into a site's runs: its row-major tensor name after "blk.N." and its
 * output rows (the part's length in each run). */
typedef struct tl_flash_part { const char *src; uint64_t len; } tl_flash_part;
/* The parts of `site`'s runs, in run order; returns their count. */
int tl_flash_site_parts(const struct tl_llama_hparams *hp, int site,
                        tl_flash_part parts[TL_FLASH_MAX_PARTS]);
/* Channels (runs) of a site: the width of its input. */
uint64_t tl_flash_site_channels(const struct tl_llama_hparams *hp, int site);
/* Elements per run: the sum of its parts' lengths. */
uint64_t tl_flash_site_run(const struct tl_llama_hparams *hp, int site);

/* A ReLU FFN's neuron runs (above): the parts of each run, in order; returns their count.
 * The activation's row (gate, or up without a gate) is always part 0 and down's column the
 * last part. */
int tl_flash_neuron_parts(const struct tl_llama_hparams *hp, tl_flash_part parts[TL_FLASH_MAX_PARTS]);
uint64_t tl_flash_neuron_run(const struct tl_llama_hparams *hp);

/* *is_flash = 1 when g is in the flash layout (of this engine's version; another version,
 * or a layout key of the wrong type or value, is an error naming `what`). */
tl_status tl_flash_layout_detect(const tl_gguf *g, int *is_flash, const char *what);

#endif
