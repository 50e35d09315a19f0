/* pipeline.c - the stages of a pipeline: what rank 0 sends, what the others serve.
 *
 * A step message is one buffer: a header of int32 (op, micro-batch count, then per
 * micro-batch its rows, logit rows and sequences, then the rows' sequence ids and
 * positions, the logit rows and the sequence lists), padded to 64 bytes, then every row's
 * hidden state, micro-batch after micro-batch. The last rank answers with one message per
 * micro-batch that wants logits: its logit rows' vocabularies, in order. Messages between
 * two ranks arrive in the order sent (MPI's non-overtaking rule), which is what lets rank
 * 0 forward several steps before collecting.
 *
 * A rank > 0 computes in the buffer it received into and sends that same buffer on, so
 * its two buffers alternate between receiving and sending.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "exec/pipeline.h"
#include "base/clock.h"
#include "base/status.h"

enum { OP_STEP = 1, OP_END = 2 };
enum { TAG_STEP = 11, TAG_LOGITS = 12, TAG_PROBE = 15 }; /* link_mpi.c's own: 13, 14 */

struct tl_pipe {
    tl_model *m;
    tl_link *link;
    int rank, size;
    tl_pipe_shape shape;
    size_t hdr_bytes, msg_bytes, logit_bytes;
    uint8_t *buf[2];          /* step messages: sent (rank 0) or received and sent on */
    tl_link_req req[2];
    float *logits[2];         /* last rank: [max_logits][n_vocab], sent per micro-batch */
    tl_link_req *lreq[2];     /* [max_mb] each */
    uint64_t steps;           /* messages through this rank */
    int finished;             /* rank 0: the end went out */
    double t_open, wait_s;    /* when the pipe opened; seconds blocked on the other ranks */
    tl_pipe_link link_rate;   /* measured once (peer -1: not yet) */
};

/* A receive, its time counted as waiting. */
static tl_status recv_timed(tl_pipe *p, int peer, int tag, void *buf, size_t cap, size_t *got) {
    const double t0 = tl_now();
    tl_status st = tl_link_recv(p->link, peer, tag, buf, cap, got);
    p->wait_s += tl_now() - t0;
    return st;
}



static size_t hdr_ints(const tl_pipe_shape *s) {
    return 2 + 3 * (size_t)s->max_mb + 2 * (size_t)s->max_rows + (size_t)s->max_logits +
           (size_t)s->max_rows;
}

static size_t pad64(size_t x) { return (x + 63) & ~(size_t)63; }

static void sizes(const tl_model *m, const tl_pipe_shape *s, size_t *hdr, size_t *msg,
                  size_t *logit) {
    *hdr = pad64(hdr_ints(s) * sizeof(int32_t));
    *msg = *hdr + (size_t)s->max_rows * (size_t)m->lm.hp.n_embd * sizeof(float);
    *logit = (size_t)s->max_logits * (size_t)m->lm.hp.n_vocab * sizeof(float);
}

tl_status tl_pipe_open(tl_model *m, tl_link *l, const tl_pipe_shape *shape) {
    if (m->pipe) return tl_error_set(TL_ERR_INVALID, "the model already has a pipeline");
    if (shape->max_mb < 1 || shape->max_rows < 1 || shape->max_logits < 0)
        return tl_error_set(TL_ERR_INVALID, "pipeline: %d micro-batches, %d rows, %d logit rows",
                            (int)shape->max_mb, (int)shape->max_rows, (int)shape->max_logits);
    const int rank = tl_link_rank(l), size = tl_link_size(l);
    const int last = rank == size - 1;
    if ((rank == 0) != (m->lm.stage_first == 0) || last != (m->lm.stage_end == m->lm.hp.n_layer))
        return tl_error_set(TL_ERR_INVALID, "pipeline rank %d of %d holds layers %d..%d: the "
                            "first rank must start at layer 0 and the last end at %d", rank,
                            size, (int)m->lm.stage_first, (int)m->lm.stage_end - 1,
                            (int)m->lm.hp.n_layer);
    tl_pipe *p = calloc(1, sizeof *p);
    if (!p) return tl_error_set(TL_ERR_NOMEM, "out of memory");
    p->m = m;
    p->link = l;
    p->rank = rank;
    p->size = size;
    p->shape = *shape;
    p->t_open = tl_now();
    p->link_rate.peer = -1;
    sizes(m, shape, &p->hdr_bytes, &p->msg_bytes, &p->logit_bytes);
    tl_status st = TL_OK;
    for (int i = 0; i < 2 && !st; i++) {
        st = tl_budget_alloc(m->lm.budget, p->msg_bytes, 64, "pipeline messages",
                             (void **)&p->buf[i]);
        if (!st && last && size > 1) {
            st = tl_budget_alloc(m->lm.budget, p->logit_bytes ? p->logit_bytes : 64, 64,
                                 "pipeline logits", (void **)&p->logits[i]);
            if (!st && !(p->lreq[i] = calloc((size_t)shape->max_mb, sizeof *p->lreq[i])))
                st = tl_error_set(TL_ERR_NOMEM, "out of memory");
        }
    }
    m->pipe = p;
    if (st) tl_pipe_close(m);
    return st;
}

size_t tl_pipe_header_bytes(const tl_pipe *p) { return p->hdr_bytes; }

int tl_pipe_size(const tl_pipe *p) { return p->size; }
int tl_pipe_rank(const tl_pipe *p) { return p->rank; }

void tl_pipe_get_stats(const tl_pipe *p, tl_pipe_stats *out) {
    out->wait_s = p->wait_s;
    out->since_s = tl_now() - p->t_open;
}

/* Least round trip of reps messages of n bytes with peer: this rank sends first (lead)
 * or answers. */
static tl_status round_trips(tl_pipe *p, int peer, int lead, size_t n, double *least) {
    *least = HUGE_VAL;
    tl_status st = TL_OK;
    for (int i = 0; i < TL_PIPE_LINK_REPS && !st; i++) {
        tl_link_req req = {0};
        size_t got = 0;
        const double t0 = tl_now();
        if (lead) {
            st = tl_link_isend(p->link, peer, TAG_PROBE, p->buf[0], n, &req);
            if (!st) st = tl_link_wait(p->link, &req);
            if (!st) st = tl_link_recv(p->link, peer, TAG_PROBE, p->buf[1], n, &got);
        } else {
            st = tl_link_recv(p->link, peer, TAG_PROBE, p->buf[1], n, &got);
            if (!st) st = tl_link_isend(p->link, peer, TAG_PROBE, p->buf[0], n, &req);
            if (!st) st = tl_link_wait(p->link, &req);
        }
        if (!st && got != n)
            st = tl_error_set(TL_ERR_IO, "link probe: rank %d sent %zu bytes where %zu were "
                              "due", peer, got, n);
        const double rt = tl_now() - t0;
        if (rt < *least) *least = rt;
    }
    return st;
}

tl_status tl_pipe_measure_link(tl_pipe *p, tl_pipe_link *out) {
    if (p->link_rate.peer >= 0 || p->size < 2) {
        *out = p->link_rate;
        return TL_OK;
    }
    enum { SMALL = 64 };
    const size_t big = p->msg_bytes < ((size_t)4 << 20) ? p->msg_bytes : (size_t)4 << 20;
    const int next = (p->rank + 1) % p->size, prev = (p->rank + p->size - 1) % p->size;
    tl_status st = TL_OK;
    tl_pipe_link got = {0, 0, -1};
    /* pair i is (i, i + 1 mod size); rank r is in pairs r - 1 (answering) and r (leading),
     * taken in pair order: rank 0 leads pair 0 first and answers the last pair last */
    for (int pass = 0; pass < 2 && !st; pass++) {
        const int lead = (p->rank == 0) == (pass == 0);
        const int peer = lead ? next : prev;
        double small_rt, big_rt;
        st = round_trips(p, peer, lead, SMALL, &small_rt);
        if (!st) st = round_trips(p, peer, lead, big, &big_rt);
        if (!st && lead) { /* the rate over the whole one-way time (its latency too): a
                            * difference of two noisy times could come out at or below 0 */
            got.latency_s = small_rt / 2;
            got.bps = (double)big / (big_rt / 2);
            got.peer = peer;
        }
    }
    if (st) return tl_error_wrap(st, "pipeline rank %d: timing the link", p->rank);
    p->link_rate = got; /* kept only once both passes are done */
    *out = got;
    return TL_OK;
}

/* Waits for every send from buffer i: until the next rank has taken the step (it takes
 * the next one only when it has finished the last), so the time counts as waiting. */
static tl_status settle(tl_pipe *p, int i) {
    const double t0 = tl_now();
    tl_status st = tl_link_wait(p->link, &p->req[i]);
    for (int32_t k = 0; p->lreq[i] && k < p->shape.max_mb; k++) {
        tl_status s2 = tl_link_wait(p->link, &p->lreq[i][k]);
        if (!st) st = s2;
    }
    p->wait_s += tl_now() - t0;
    return st;
}

tl_status tl_pipe_close(tl_model *m) {
    tl_pipe *p = m ? m->pipe : NULL;
    if (!p) return TL_OK;
    tl_status st = TL_OK;
    for (int i = 0; i < 2; i++) {
        tl_status s2 = settle(p, i);
        if (!st) st = s2;
        tl_budget_free(m->lm.budget, p->buf[i]);
        tl_budget_free(m->lm.budget, p->logits[i]);
        free(p->lreq[i]);
    }
    free(p);
    m->pipe = NULL;
    return st;
}

/* Packs the step's header and hidden states into buffer b; returns the message size. */
static size_t pack(const tl_pipe *p, uint8_t *b, const tl_microbatch *mb, int32_t n_mb) {
    int32_t *h = (int32_t *)(void *)b, n = 0;
    h[n++] = OP_STEP;
    h[n++] = n_mb;
    for (int32_t k = 0; k < n_mb; k++) {
        h[n++] = mb[k].n_rows;
        h[n++] = mb[k].n_logits;
        h[n++] = mb[k].n_seqs;
    }
    const size_t d = (size_t)p->m->lm.hp.n_embd;
    float *x = (float *)(void *)(b + p->hdr_bytes);
    for (int32_t k = 0; k < n_mb; k++) {
        memcpy(h + n, mb[k].rows.seq, (size_t)mb[k].n_rows * sizeof *h), n += mb[k].n_rows;
        memcpy(h + n, mb[k].rows.pos, (size_t)mb[k].n_rows * sizeof *h), n += mb[k].n_rows;
        memcpy(h + n, mb[k].logit_rows, (size_t)mb[k].n_logits * sizeof *h), n += mb[k].n_logits;
        memcpy(h + n, mb[k].seqs, (size_t)mb[k].n_seqs * sizeof *h), n += mb[k].n_seqs;
        if (x != mb[k].x) memcpy(x, mb[k].x, (size_t)mb[k].n_rows * d * sizeof *x);
        x += (size_t)mb[k].n_rows * d;
    }
    return (size_t)((uint8_t *)x - b);
}

static tl_status check_shape(const tl_pipe *p, const tl_microbatch *mb, int32_t n_mb) {
    int64_t rows = 0, logits = 0;
    for (int32_t k = 0; k < n_mb; k++) rows += mb[k].n_rows, logits += mb[k].n_logits;
    if (n_mb < 1 || n_mb > p->shape.max_mb || rows > p->shape.max_rows ||
        logits > p->shape.max_logits)
        return tl_error_set(TL_ERR_INVALID, "pipeline step of %d micro-batches, %lld rows and "
                            "%lld logit rows; the pipe was opened for %d, %d and %d", (int)n_mb,
                            (long long)rows, (long long)logits, (int)p->shape.max_mb,
                            (int)p->shape.max_rows, (int)p->shape.max_logits);
    return TL_OK;
}

tl_status tl_pipe_forward(tl_pipe *p, const tl_microbatch *mb, int32_t n_mb) {
    tl_status st = check_shape(p, mb, n_mb);
    if (st) return st;
    const int i = (int)(p->steps % 2);
    if ((st = settle(p, i))) return st;
    const size_t bytes = pack(p, p->buf[i], mb, n_mb);
    st = tl_link_isend(p->link, p->rank + 1, TAG_STEP, p->buf[i], bytes, &p->req[i]);
    if (!st) p->steps++;
    return st;
}

tl_status tl_pipe_collect(tl_pipe *p, tl_microbatch *mb, int32_t n_mb) {
    const size_t vocab = (size_t)p->m->lm.hp.n_vocab;
    for (int32_t k = 0; k < n_mb; k++) {
        if (mb[k].n_logits == 0) continue;
        const size_t want = (size_t)mb[k].n_logits * vocab * sizeof(float);
        size_t got = 0;
        tl_status st = recv_timed(p, p->size - 1, TAG_LOGITS, mb[k].logits, want, &got);
        if (st) return tl_error_wrap(st, "pipeline logits");
        if (got != want)
            return tl_error_set(TL_ERR_IO, "pipeline: rank %d sent %zu bytes of logits where "
                                "%zu were due", p->size - 1, got, want);
    }
    return TL_OK;
}

tl_status tl_pipe_finish(tl_pipe *p) {
    if (p->finished) return TL_OK;
    const int i = (int)(p->steps % 2);
    tl_status st = settle(p, i);
    if (st) return st;
    int32_t *h = (int32_t *)(void *)p->buf[i];
    h[0] = OP_END;
    h[1] = 0;
    st = tl_link_isend(p->link, p->rank + 1, TAG_STEP, p->buf[i], 2 * sizeof *h, &p->req[i]);
    if (!st) p->steps++, p->finished = 1;
    return st;
}

/* The local sequence for rank 0's sequence id d whose run in this step starts at position
 * pos: opened on first sight, started afresh at position 0. */
static tl_status map_seq(tl_kv *kv, int32_t *map, int32_t max_seqs, int32_t d, int32_t pos,
                         int32_t *local) {
    if (d < 0 || d >= max_seqs)
        return tl_error_set(TL_ERR_INVALID, "pipeline: sequence %d is outside 0..%d", (int)d,
                            (int)max_seqs - 1);
    tl_status st;
    if (map[d] >= 0 && pos == 0 && tl_kv_seq_len(kv, map[d]) > 0) {
        tl_kv_seq_close(kv, map[d]);
        map[d] = -1;
    }
    if (map[d] < 0 && (st = tl_kv_seq_open(kv, &map[d]))) return st;
    if (tl_kv_seq_len(kv, map[d]) != pos)
        return tl_error_set(TL_ERR_INVALID, "pipeline out of step: sequence %d is at position "
                            "%d here but the step starts it at %d", (int)d,
                            (int)tl_kv_seq_len(kv, map[d]), (int)pos);
    *local = map[d];
    return TL_OK;
}

/* Parses a received step into micro-batches over the buffer, mapping sequences. Their
 * seq arrays are rewritten in place to this rank's ids. */
static tl_status unpack(tl_pipe *p, uint8_t *b, size_t got, tl_kv *kv, int32_t *map,
                        int32_t max_seqs, tl_microbatch *mb, int32_t *n_mb, int32_t *logit_rows) {
    int32_t *h = (int32_t *)(void *)b;
    const size_t d = (size_t)p->m->lm.hp.n_embd, cap = hdr_ints(&p->shape);
    *n_mb = h[1];
    if (*n_mb < 1 || *n_mb > p->shape.max_mb)
        return tl_error_set(TL_ERR_INVALID, "pipeline: a step of %d micro-batches", (int)*n_mb);
    size_t n = 2 + 3 * (size_t)*n_mb, rows = 0;
    *logit_rows = 0;
    for (int32_t k = 0; k < *n_mb; k++) {
        const int32_t r = h[2 + 3 * k], nl = h[3 + 3 * k], ns = h[4 + 3 * k];
        if (r < 0 || nl < 0 || ns < 0 || nl > r || ns > r || rows + (size_t)r > (size_t)p->shape.max_rows ||
            *logit_rows + nl > p->shape.max_logits || n + 3 * (size_t)r + (size_t)nl > cap)
            return tl_error_set(TL_ERR_INVALID, "pipeline: a malformed step header");
        mb[k] = (tl_microbatch){r, NULL, {r, h + n, h + n + r},
                                (float *)(void *)(b + p->hdr_bytes) + rows * d,
                                h + n + 2 * r, nl, NULL, h + n + 2 * r + nl, ns};
        for (int32_t j = 0; j < nl; j++)
            if (mb[k].logit_rows[j] < 0 || mb[k].logit_rows[j] >= r)
                return tl_error_set(TL_ERR_INVALID, "pipeline: a logit row outside its rows");
        n += 2 * (size_t)r + (size_t)nl + (size_t)ns;
        rows += (size_t)r;
        *logit_rows += nl;
    }
    if (got != p->hdr_bytes + rows * d * sizeof(float))
        return tl_error_set(TL_ERR_INVALID, "pipeline: a step of %zu bytes where %zu were due",
                            got, p->hdr_bytes + rows * d * sizeof(float));
    for (int32_t k = 0; k < *n_mb; k++) {
        int32_t *seq = (int32_t *)mb[k].rows.seq, *seqs = (int32_t *)mb[k].seqs;
        for (int32_t i = 0, e; i < mb[k].n_rows; i = e) {
            e = tl_llama_rows_run_end(&mb[k].rows, i);
            int32_t local = -1;
            tl_status st = map_seq(kv, map, max_seqs, seq[i], mb[k].rows.pos[i], &local);
            if (st) return st;
            for (int32_t j = i; j < e; j++) seq[j] = local;
        }
        for (int32_t j = 0; j < mb[k].n_seqs; j++) {
            if (seqs[j] < 0 || seqs[j] >= max_seqs || map[seqs[j]] < 0)
                return tl_error_set(TL_ERR_INVALID, "pipeline: sequence %d has no rows in its "
                                    "micro-batch", (int)seqs[j]);
            seqs[j] = map[seqs[j]];
        }
    }
    return TL_OK;
}

tl_status tl_pipe_work(tl_pipe *p, tl_llama_scratch *s, tl_kv *kv, int32_t max_seqs) {
    const int last = p->rank == p->size - 1;
    const size_t vocab = (size_t)p->m->lm.hp.n_vocab;
    tl_microbatch *mb = calloc((size_t)p->shape.max_mb, sizeof *mb);
    int32_t *map = malloc((size_t)max_seqs * sizeof *map);
    tl_status st = mb && map ? TL_OK : tl_error_set(TL_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; map && i < max_seqs; i++) map[i] = -1;
    while (!st) {
        const int i = (int)(p->steps % 2);
        if ((st = settle(p, i))) break;
        size_t got = 0;
        if ((st = recv_timed(p, p->rank - 1, TAG_STEP, p->buf[i], p->msg_bytes, &got))) break;
        const int32_t op = got >= 2 * sizeof(int32_t) ? ((int32_t *)(void *)p->buf[i])[0] : 0;
        if (op == OP_END) {
            if (!last) st = tl_link_isend(p->link, p->rank + 1, TAG_STEP, p->buf[i], got, &p->req[i]);
            p->steps++;
            break;
        }
        if (op != OP_STEP) {
            st = tl_error_set(TL_ERR_INVALID, "pipeline: unknown message %d from rank %d",
                              (int)op, p->rank - 1);
            break;
        }
        int32_t n_mb, n_logits;
        if ((st = unpack(p, p->buf[i], got, kv, map, max_seqs, mb, &n_mb, &n_logits))) break;
        for (int32_t k = 0, at = 0; last && k < n_mb; k++) {
            mb[k].logits = p->logits[i] + (size_t)at * vocab;
            at += mb[k].n_logits;
        }
        if ((st = tl_engine_step(p->m, s, kv, mb, n_mb))) break;
        if (!last) {
            st = tl_link_isend(p->link, p->rank + 1, TAG_STEP, p->buf[i], got, &p->req[i]);
        } else {
            for (int32_t k = 0; k < n_mb && !st; k++)
                if (mb[k].n_logits)
                    st = tl_link_isend(p->link, 0, TAG_LOGITS, mb[k].logits,
                                       (size_t)mb[k].n_logits * vocab * sizeof(float),
                                       &p->lreq[i][k]);
        }
        p->steps++;
    }
    free(mb);
    free(map);
    return st;
}
