/* model_handle.h - the public model handle: a loaded model and where its weights live.
 *
 * The model layer describes the weights (model/llama.h); the placement of those weights
 * in memory (the residency, exec/residency.h) is made by the first context or batch run
 * and shared by every later one, so the handle that users hold pairs the two. It is
 * defined here, above both, so the model layer never sees an exec object.
 */
#ifndef TL_EXEC_MODEL_HANDLE_H
#define TL_EXEC_MODEL_HANDLE_H

#include <stdint.h>
#include "tierllm.h"
#include "model/llama.h"

struct tl_residency;
struct tl_pipe;

struct tl_model {
    tl_llama lm;                /* file, tokenizer, weight directory, budget, pool, IO */
    struct tl_residency *res;   /* the placed weights; NULL until the first placement */
    uint64_t used_before_place; /* budget bytes in use when the weights were placed */
    struct tl_pipe *pipe;       /* this model is one stage of a pipeline (exec/pipeline.h);
                                   NULL: it runs alone */
};

#endif
