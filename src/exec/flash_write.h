/* flash_write.h - writing a model's matrices in the flash layout (model/flash_layout.h),
 * for `tierllm convert --layout flash`.
 *
 * The output's tensors are the input's, in its order, less each layer's seven matrices,
 * then each layer's site tensors: four, or for a ReLU FFN written by neuron (with the
 * predictors of exec/neuron_calib.h) the two attention sites, the neuron runs and the
 * three predictor tensors. A site tensor is built whole in memory when the
 * GGUF writer first asks for its bytes: each part's matrix is read from the input and
 * dequantized (as one stream of blocks, so rows that split blocks are fine), and every
 * run gathered and quantized along its length. The site's type is its parts' type (the
 * one of most bits per weight when they differ; F32 for float types that differ, or
 * where a part's length is not a whole number of that type's blocks). Re-quantizing along the new axis is exact for
 * F32/F16/BF16 and lossy for the quantized types. Its memory (the parts in f32, their
 * raw bytes, the site's bytes) comes from the budget given.
 */
#ifndef TL_EXEC_FLASH_WRITE_H
#define TL_EXEC_FLASH_WRITE_H

#include "tierllm.h"
#include "format/gguf.h"

struct tl_budget;
struct tl_llama_hparams;
struct tl_neuron_predictors;
typedef struct tl_flash_writer tl_flash_writer;

/* in: the input GGUF, parsed, and its path (read with pread, never written). np: for a
 * ReLU FFN, its neuron predictors (exec/neuron_calib.h): the FFN is then written by
 * neuron with them (model/flash_layout.h); NULL: by input channel. */
tl_status tl_flash_writer_open(const tl_gguf *in, const char *in_path,
                               const struct tl_llama_hparams *hp,
                               const struct tl_neuron_predictors *np, struct tl_budget *budget,
                               tl_flash_writer **out);
void tl_flash_writer_close(tl_flash_writer *fw);
/* Declares the output's tensors to w (after its keys) and sets the layout keys. */
tl_status tl_flash_writer_declare(tl_flash_writer *fw, tl_gguf_writer *w);
/* The GGUF writer's fill function (user = the tl_flash_writer). */
tl_status tl_flash_writer_fill(void *user, size_t index, uint64_t offset, void *dst, size_t len);
/* Bytes of the budget the largest site needs while it is built. */
uint64_t tl_flash_writer_peak_bytes(const tl_flash_writer *fw);
/* Bytes of the output's tensor data (copied and built). */
uint64_t tl_flash_writer_tensor_bytes(const tl_flash_writer *fw);

#endif
