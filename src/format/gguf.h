/* gguf.h - GGUF (v2, v3) reader and writer.
 *
 * The reader parses the header, the metadata key/value pairs and the tensor directory,
 * validating everything against the file size before it is used: counts, string and
 * array lengths, tensor shapes (no overflow), types, offsets and sizes. Tensor data is
 * not read here; the directory gives each tensor's absolute file offset and byte size.
 * v1 files are refused with a message. Metadata is copied into memory owned by the
 * tl_gguf object, so the source may be closed after parsing.
 */
#ifndef TL_FORMAT_GGUF_H
#define TL_FORMAT_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tierllm.h"
#include "format/tensor_type.h"

typedef enum tl_gguf_type {
    TL_GGUF_UINT8 = 0, TL_GGUF_INT8 = 1, TL_GGUF_UINT16 = 2, TL_GGUF_INT16 = 3,
    TL_GGUF_UINT32 = 4, TL_GGUF_INT32 = 5, TL_GGUF_FLOAT32 = 6, TL_GGUF_BOOL = 7,
    TL_GGUF_STRING = 8, TL_GGUF_ARRAY = 9, TL_GGUF_UINT64 = 10, TL_GGUF_INT64 = 11,
    TL_GGUF_FLOAT64 = 12
} tl_gguf_type;

typedef struct tl_gguf_str {
    uint64_t len;
    char *s; /* NUL-terminated copy (the string may itself contain NULs) */
} tl_gguf_str;

typedef struct tl_gguf_kv {
    char *key;
    tl_gguf_type type;
    union {
        uint64_t u; /* UINT8..UINT64, BOOL */
        int64_t i;  /* INT8..INT64 */
        double f;   /* FLOAT32, FLOAT64 */
        tl_gguf_str str;
        struct {
            tl_gguf_type type; /* element type (never ARRAY) */
            uint64_t n;
            void *data; /* n elements: packed little-endian scalars of the element
                           type as in the file, or tl_gguf_str[n] for strings */
        } arr;
    } v;
} tl_gguf_kv;

#define TL_GGUF_MAX_DIMS 4

typedef struct tl_gguf_tensor {
    char *name;
    tl_type type;
    uint32_t n_dims;
    uint64_t ne[TL_GGUF_MAX_DIMS]; /* ne[0] is the contiguous (row) dimension; unused = 1 */
    uint64_t n_elems;
    uint64_t offset; /* absolute offset of the data in the file */
    uint64_t nbytes;
} tl_gguf_tensor;

typedef struct tl_gguf {
    uint32_t version;
    uint64_t n_kv, n_tensors;
    tl_gguf_kv *kv;
    tl_gguf_tensor *tensors;
    uint32_t alignment;
    uint64_t data_offset; /* absolute start of the tensor data section */
    uint64_t file_size;
} tl_gguf;

/* A byte source: reads exactly `len` bytes at `offset` or returns an error. */
typedef tl_status (*tl_gguf_read_fn)(void *src, uint64_t offset, void *dst, size_t len);

/* Parses a GGUF held by a byte source of `file_size` bytes. `what` names the source in
 * error messages. */
tl_status tl_gguf_parse(tl_gguf_read_fn read, void *src, uint64_t file_size,
                        const char *what, tl_gguf **out);
/* Opens `path` read-only, parses it and closes it. */
tl_status tl_gguf_open(const char *path, tl_gguf **out);
void tl_gguf_free(tl_gguf *g);

/* Metadata look-ups. find returns NULL if the key is absent. The typed getters return
 * TL_ERR_FORMAT (naming the key) if the key is absent or of an incompatible type;
 * integer getters accept any integer type whose value fits. */
const tl_gguf_kv *tl_gguf_find(const tl_gguf *g, const char *key);
tl_status tl_gguf_get_u32(const tl_gguf *g, const char *key, uint32_t *out);
tl_status tl_gguf_get_i32(const tl_gguf *g, const char *key, int32_t *out);
tl_status tl_gguf_get_f32(const tl_gguf *g, const char *key, float *out);
tl_status tl_gguf_get_bool(const tl_gguf *g, const char *key, bool *out);
tl_status tl_gguf_get_str(const tl_gguf *g, const char *key, const tl_gguf_str **out);
/* Array of the given element type; for strings data is tl_gguf_str*. */
tl_status tl_gguf_get_arr(const tl_gguf *g, const char *key, tl_gguf_type elem_type,
                          uint64_t *n, const void **data);

const tl_gguf_tensor *tl_gguf_find_tensor(const tl_gguf *g, const char *name);
const char *tl_gguf_type_name(tl_gguf_type t);

/* ---- writer ---- */

typedef struct tl_gguf_writer tl_gguf_writer;

/* Fills `len` bytes of tensor `index`'s data starting at byte `offset` within it. */
typedef tl_status (*tl_gguf_fill_fn)(void *user, size_t index, uint64_t offset, void *dst,
                                     size_t len);

tl_status tl_gguf_writer_open(tl_gguf_writer **out);
void tl_gguf_writer_close(tl_gguf_writer *w);
tl_status tl_gguf_writer_set_u32(tl_gguf_writer *w, const char *key, uint32_t v);
tl_status tl_gguf_writer_set_i32(tl_gguf_writer *w, const char *key, int32_t v);
tl_status tl_gguf_writer_set_f32(tl_gguf_writer *w, const char *key, float v);
tl_status tl_gguf_writer_set_bool(tl_gguf_writer *w, const char *key, bool v);
tl_status tl_gguf_writer_set_str(tl_gguf_writer *w, const char *key, const char *v);
/* Array of scalars (elem_type not STRING/ARRAY); data is n packed elements. */
tl_status tl_gguf_writer_set_arr(tl_gguf_writer *w, const char *key, tl_gguf_type elem_type,
                                 const void *data, uint64_t n);
tl_status tl_gguf_writer_set_arr_str(tl_gguf_writer *w, const char *key,
                                     const char *const *strs, uint64_t n);
/* A key/value pair exactly as a parsed file holds it (any type; strings by their length). */
tl_status tl_gguf_writer_copy_kv(tl_gguf_writer *w, const tl_gguf_kv *kv);
/* Declares a tensor; its data is produced by the fill function at write time. */
tl_status tl_gguf_writer_add_tensor(tl_gguf_writer *w, const char *name, tl_type type,
                                    uint32_t n_dims, const uint64_t *ne);
/* Writes the file (version 3, alignment 32) to a temporary name beside `path` and
 * renames it into place (base/out_file.h), so a failure never leaves a partial file at
 * `path`; a target that exists and is not a regular file is refused (TL_ERR_INVALID). */
tl_status tl_gguf_writer_write(tl_gguf_writer *w, const char *path, tl_gguf_fill_fn fill,
                               void *user);
/* The metadata and tensor directory declared so far, through the reader (so they are
 * checked as a file's would be) into a tl_gguf, with no file: tensor offsets are those a
 * written file would have (absolute, with data_offset after the header); a caller
 * describing data that lives elsewhere sets them afterwards. `what` names it in
 * messages. */
tl_status tl_gguf_writer_parse(tl_gguf_writer *w, const char *what, tl_gguf **out);

#endif
