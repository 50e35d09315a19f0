/* model_handle.c - opening and closing the public model handle (tierllm.h). */
#include <stdlib.h>
#include "exec/model_handle.h"
#include "exec/pipeline.h"
#include "base/status.h"
#include "exec/residency.h"

tl_status tl_model_open(const char *path, const tl_model_params *params, tl_model **out) {
    *out = NULL;
    tl_error_clear();
    tl_model *m = calloc(1, sizeof *m);
    if (!m) return tl_error_set(TL_ERR_NOMEM, "out of memory");
    tl_status st = tl_llama_open(path, params, &m->lm);
    if (st) {
        free(m);
        return st;
    }
    *out = m;
    return TL_OK;
}

void tl_model_close(tl_model *m) {
    if (!m) return;
    tl_pipe_close(m);           /* its buffers are in the budget */
    tl_residency_close(m->res); /* before the IO queue it reads through */
    tl_llama_close(&m->lm);
    free(m);
}

tl_status tl_model_set_sparsity(tl_model *m, float sparsity) {
    return tl_sparsity_set_level(&m->lm.sparse,
                                 sparsity < 0 ? m->lm.sparse.file_default : sparsity);
}

void tl_model_sparsity_stats(tl_model *m, int reset, double *zeroed, double *seen) {
    *zeroed = m->lm.sparse.zeroed;
    *seen = m->lm.sparse.seen;
    if (reset) m->lm.sparse.zeroed = m->lm.sparse.seen = 0;
}

tl_status tl_model_describe(const tl_model *m, tl_model_desc *d) {
    tl_llama_describe(&m->lm, d);
    return TL_OK;
}
