/* cli_pipe.c - joining an mpirun job as one pipeline stage (tools/cli_pipe.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tools/cli_pipe.h"
#include "tools/cli.h"
#include "base/status.h"

/* Layer counts per rank from "N0,N1,...": exactly `size` positive counts summing to L. */
static int parse_split(const char *s, int size, int32_t L, int32_t *count) {
    int n = 0;
    int64_t sum = 0;
    const char *c = s;
    while (*c) {
        char *end;
        long v = strtol(c, &end, 10);
        if (end == c || v < 1 || v > L || n == size) {
            fprintf(stderr, "error: --pipeline-layers %s: give %d positive layer counts, one "
                    "per rank, that add up to %d\n", s, size, (int)L);
            return 0;
        }
        count[n++] = (int32_t)v;
        sum += v;
        c = *end == ',' ? end + 1 : end; /* anything else fails the next strtol */
    }
    if (n != size || sum != L) {
        fprintf(stderr, "error: --pipeline-layers %s: give %d positive layer counts, one per "
                "rank, that add up to %d\n", s, size, (int)L);
        return 0;
    }
    return 1;
}

int cli_pipe_start(cli_pipe *p, const char *model_path, const char *split, tl_model_params *mp) {
    memset(p, 0, sizeof *p);
    tl_status st = tl_link_open(NULL, NULL, &p->link);
    if (st) return cli_fail(st);
    p->rank = tl_link_rank(p->link);
    p->size = tl_link_size(p->link);
    if (p->size == 1) { /* a pipeline of one: the process runs alone */
        tl_link_close(p->link);
        p->link = NULL;
        return 0;
    }
    /* the layer count, from the file's header (nothing is placed by an open) */
    tl_model_params probe = *mp;
    probe.layer_first = probe.layer_end = 0;
    probe.mem_budget = probe.mem_budget ? probe.mem_budget : (uint64_t)1 << 30;
    tl_model *m = NULL;
    st = tl_model_open(model_path, &probe, &m);
    tl_model_desc d;
    if (!st) tl_model_describe(m, &d);
    tl_model_close(m);
    if (st) return cli_pipe_end(p, NULL, st);
    const int32_t L = p->n_layer = d.n_layer;
    if (p->size > L) {
        st = tl_error_set(TL_ERR_INVALID, "a pipeline of %d ranks for a %d-layer model: at "
                          "most one rank per layer", p->size, (int)L);
        return cli_pipe_end(p, NULL, st);
    }
    int32_t *count = malloc((size_t)p->size * sizeof *count);
    if (!count) return cli_pipe_end(p, NULL, tl_error_set(TL_ERR_NOMEM, "out of memory"));
    int ok = 1;
    if (split) ok = parse_split(split, p->size, L, count);
    else
        for (int r = 0; r < p->size; r++)
            count[r] = (int32_t)(((int64_t)(r + 1) * L) / p->size - ((int64_t)r * L) / p->size);
    int32_t first = 0;
    for (int r = 0; r < p->rank; r++) first += count[r];
    mp->layer_first = first;
    mp->layer_end = first + count[p->rank];
    free(count);
    if (!ok) {
        tl_link_abort(p->link, 2);
        return 2;
    }
    return 0;
}

tl_status cli_pipe_attach(cli_pipe *p, tl_model *m, const tl_pipe_shape *shape) {
    p->rows = shape->max_rows;
    return p->link ? tl_pipe_open(m, p->link, shape) : TL_OK;
}

int cli_pipe_end(cli_pipe *p, tl_model *m, tl_status st) {
    if (!p->link) return st ? cli_fail(st) : 0;
    if (!st && p->rank == 0 && m && m->pipe) st = tl_pipe_finish(m->pipe);
    if (!st && m) st = tl_pipe_close(m);
    if (st) {
        const char *msg = tl_last_error();
        fprintf(stderr, "error: rank %d of %d: %s\n", p->rank, p->size,
                msg && *msg ? msg : tl_status_str(st));
        fflush(stderr);
        tl_link_abort(p->link, 1); /* ends every rank; returns only without MPI */
        return 1;
    }
    tl_link_close(p->link);
    p->link = NULL;
    return 0;
}

int cli_pipe_abort(cli_pipe *p, int code) {
    if (p->link) {
        fflush(stderr);
        tl_link_abort(p->link, code);
    }
    return code;
}
