/* ops_runs.c - products with flash-layout site tensors (model/flash_layout.h), threaded
 * over the model's pool.
 *
 * The channels needed are those non-zero in some row (batched rows read the union of
 * their channels); a resident tensor is multiplied where it lies. A streamed one has those
 * runs read (m->fetch_runs, exec/) and is multiplied in up to TL_FLASH_FETCH_PARTS
 * consecutive stretches of the channel list, each as soon as its runs have arrived while
 * the later ones are still read: every output's chain goes on from stretch to stretch
 * (tl_colmat_fast_add), so the bits are those of one product over all channels, and only
 * the last stretch's compute waits alone (plan/cost.c prices it so). The outputs of each
 * part (the matrices side by side in a run) are cut into block-aligned pieces, a few per
 * thread but none narrower than MIN_PIECE; every output is one sum over the same channels
 * in ascending order, so a result does not depend on the threads or on who computed which
 * piece.
 */
#include "model/ops.h"

#include <stdint.h>
#include "base/status.h"
#include "kernels/kernels.h"
#include "model/flash_layout.h"

#define PIECES_PER_THREAD 4
#define MAX_PIECES 256
/* Outputs of the smallest piece: each run is read in slices of the piece's width, and
 * slices much narrower than this read markedly slower. */
#define MIN_PIECE 1024

typedef struct runs_job {
    const tl_weight *w;
    const uint8_t *base;
    const int32_t *chan;
    size_t nc;
    const float *X;
    size_t ldx, n;
    float *const *Ys;
    const size_t *lens;  /* each part's outputs */
    size_t piece_part[MAX_PIECES], piece_o0[MAX_PIECES], piece_o1[MAX_PIECES];
    size_t part_off[TL_MATMUL_MULTI_MAX]; /* a part's first output in the run */
    float *scratch;
    size_t scratch_floats;
    int reference, add;
} runs_job;

/* A piece [o0, o1) of part p, in the part's own coordinates: the runs seen from the part's
 * first block (a part is whole blocks), so outputs land at Ys[p][o]. */
static void runs_task(void *arg, int task, int thread) {
    const runs_job *j = arg;
    const size_t p = j->piece_part[task], off = j->part_off[p];
    const size_t o0 = j->piece_o0[task] - off, o1 = j->piece_o1[task] - off;
    const uint8_t *W = j->base + tl_type_row_bytes(j->w->type, off);
    float *scratch = j->scratch + (size_t)thread * j->scratch_floats;
    if (j->reference)
        tl_colmat_ref(j->w->type, W, j->w->cols, j->chan, j->nc, o0, o1, j->X, j->ldx,
                      j->n, j->Ys[p], j->lens[p]);
    else if (j->add)
        tl_colmat_fast_add(j->w->type, W, j->w->cols, j->chan, j->nc, o0, o1, j->X, j->ldx,
                           j->n, j->Ys[p], j->lens[p], scratch);
    else
        tl_colmat_fast(j->w->type, W, j->w->cols, j->chan, j->nc, o0, o1, j->X, j->ldx,
                       j->n, j->Ys[p], j->lens[p], scratch);
}

tl_status tl_op_runs_product(tl_llama *m, const tl_weight *w, const float *X, size_t n,
                             float *const *Ys, const size_t *lens, size_t nparts, int32_t *chan,
                             float *scratch, size_t scratch_floats) {
    const size_t channels = w->rows;
    size_t nc = 0;
    for (size_t c = 0; c < channels; c++) {
        size_t r = 0;
        while (r < n && X[r * channels + c] == 0.0f) r++;
        if (r < n) chan[nc++] = (int32_t)c;
    }
    const uint8_t *base = w->data;
    if (base) {
        tl_op_runs_multiply(m, w, base, 0, chan, nc, X, channels, n, Ys, lens, nparts, scratch,
                            scratch_floats, 0);
        return TL_OK;
    }
    if (!m->fetch_runs)
        return tl_error_set(TL_ERR_INVALID, "%s is neither in memory nor readable by runs",
                            w->name);
    tl_status st = m->fetch_runs(m->fetch_user, w, chan, nc, &base);
    if (st) return st;
    const size_t stretch = m->use_reference ? nc : tl_flash_part_channels(nc);
    size_t c0 = 0;
    do {
        const size_t c1 = nc - c0 > stretch ? c0 + stretch : nc;
        if ((st = m->fetch_wait(m->fetch_user, c1))) return st; /* waited out on error */
        tl_op_runs_multiply(m, w, base, 0, chan + c0, c1 - c0, X, channels, n, Ys, lens,
                            nparts, scratch, scratch_floats, c0 > 0);
        c0 = c1;
    } while (c0 < nc);
    return m->fetch_wait(m->fetch_user, SIZE_MAX);
}

void tl_op_runs_multiply(tl_llama *m, const tl_weight *w, const uint8_t *base, size_t first,
                         const int32_t *chan, size_t nc, const float *X, size_t ldx, size_t n,
                         float *const *Ys, const size_t *lens, size_t nparts, float *scratch,
                         size_t scratch_floats, int add) {
    runs_job j = {.w = w, .base = base, .X = X, .ldx = ldx, .n = n, .Ys = Ys, .lens = lens,
                  .scratch = scratch, .scratch_floats = scratch_floats,
                  .reference = m->use_reference, .add = add};
    const size_t threads = (size_t)tl_pool_threads(m->pool);
    const size_t block = tl_type_block_elems(w->type);
    size_t total = first, tasks = 0;
    for (size_t p = 0; p < nparts; p++) j.part_off[p] = total, total += lens[p];
    total -= first;
    size_t want = threads * PIECES_PER_THREAD;
    if (want > MAX_PIECES - nparts) want = MAX_PIECES - nparts;
    size_t piece = (total / want + block - 1) / block * block;
    if (piece < MIN_PIECE) piece = MIN_PIECE; /* a multiple of every block size */
    for (size_t p = 0; p < nparts; p++)
        for (size_t o = j.part_off[p]; o < j.part_off[p] + lens[p]; o += piece) {
            const size_t end = o + piece < j.part_off[p] + lens[p] ? o + piece
                                                                   : j.part_off[p] + lens[p];
            if (tasks == MAX_PIECES) break; /* unreachable: pieces are sized to fit */
            j.piece_part[tasks] = p, j.piece_o0[tasks] = o, j.piece_o1[tasks] = end;
            tasks++;
        }
    j.chan = chan;
    j.nc = nc;
    tl_pool_run(m->pool, (int)tasks, runs_task, &j);
}
