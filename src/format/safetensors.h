/* safetensors.h - reader for Hugging Face safetensors files.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of UTF-8 JSON, then the data
 * region. The JSON is an object mapping each tensor name to {"dtype", "shape",
 * "data_offsets": [begin, end]} (offsets relative to the data region, which starts at
 * 8 + N), plus an optional "__metadata__" object of strings, which is checked and
 * otherwise ignored.
 *
 * Nothing from the file is trusted: the header length is checked against the file size
 * (and a 100 MB cap) before it is read, the JSON is parsed strictly (base/json.h: valid
 * UTF-8, no duplicate keys, no trailing text), and every tensor's dtype, shape (0 to 4
 * dimensions, no overflow), byte range (inside the data region, matching the shape) and
 * name (unique, 1 to 512 bytes) is checked; tensors may leave gaps but never overlap.
 * Malformed files give TL_ERR_FORMAT, known dtypes other than F32/F16/BF16 give
 * TL_ERR_UNSUPPORTED, a failing byte source gives its own status (TL_ERR_IO for a file);
 * each message names the file and the tensor. Tensor data is not read here. Everything
 * kept is copied into memory owned by the tl_st_file, so the source may be closed.
 */
#ifndef TL_FORMAT_SAFETENSORS_H
#define TL_FORMAT_SAFETENSORS_H

#include <stdint.h>
#include "tierllm.h"
#include "format/gguf.h" /* tl_gguf_read_fn, the byte source both readers share */

#define TL_ST_MAX_DIMS 4
#define TL_ST_MAX_HEADER (100u * 1000u * 1000u) /* bytes of JSON header accepted */
#define TL_ST_MAX_TENSORS 1000000u
#define TL_ST_MAX_NAME 512u /* bytes of a tensor name */

typedef enum { TL_ST_F32, TL_ST_F16, TL_ST_BF16 } tl_st_dtype; /* the dtypes tierllm computes with */

typedef struct tl_st_tensor {
    char *name;
    tl_st_dtype dtype;
    uint32_t n_dims;   /* 0..4; 0 is a scalar of one element */
    uint64_t shape[4]; /* as in the file: shape[0] is the outermost (slowest) dim; entries
                          past n_dims are 0 */
    uint64_t n_elems;  /* product of the shape (may be 0) */
    uint64_t offset;   /* absolute byte offset of the data in the file */
    uint64_t nbytes;   /* n_elems * the dtype's size; offset + nbytes <= file_size */
} tl_st_tensor;

typedef struct tl_st_file {
    uint64_t n_tensors;
    tl_st_tensor *tensors; /* in file order of their data (sorted by offset, then name) */
    uint64_t data_offset;  /* 8 + header length */
    uint64_t file_size;
} tl_st_file;

/* Parses a safetensors file held by a byte source of `file_size` bytes; `what` names it
 * in error messages. On error *out is NULL and the message says why. */
tl_status tl_st_parse(tl_gguf_read_fn read, void *src, uint64_t file_size, const char *what,
                      tl_st_file **out);
/* Opens `path` read-only (a regular file; TL_ERR_IO otherwise), parses it and closes it. */
tl_status tl_st_open(const char *path, tl_st_file **out);
void tl_st_free(tl_st_file *f);
/* The tensor named `name`, or NULL. Linear in the number of tensors. */
const tl_st_tensor *tl_st_find(const tl_st_file *f, const char *name);
/* "F32", "F16" or "BF16"; the size in bytes of one element (4 or 2). */
const char *tl_st_dtype_name(tl_st_dtype t);
uint32_t tl_st_dtype_size(tl_st_dtype t);

#endif
