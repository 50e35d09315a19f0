/* link_mpi.c - the pipeline link over MPI point-to-point messages.
 *
 * Messages are MPI_BYTE, at most INT_MAX bytes each. Receives are MPI_Irecv polled with
 * MPI_Test, first spinning briefly and then sleeping 50 us between polls, so that a peer
 * that died or hangs turns into TL_ERR_IO after the timeout (Open MPI 4.1 has no fault-
 * tolerant MPI; mpirun itself ends the job when a process dies). Polling also keeps this
 * rank's own sends progressing while it waits.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <mpi.h>
#include "dist/link.h"
#include "base/clock.h"
#include "base/status.h"

struct tl_link {
    int rank, size, host_ranks;
    double timeout_s;
};

_Static_assert(sizeof(MPI_Request) <= sizeof(((tl_link_req *)0)->handle),
               "an MPI request fits in tl_link_req");

int tl_link_available(void) { return 1; }

tl_status tl_link_open(int *argc, char ***argv, tl_link **out) {
    *out = NULL;
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return tl_error_set(TL_ERR_IO, "MPI_Init_thread failed");
    tl_link *l = calloc(1, sizeof *l);
    if (!l) return tl_error_set(TL_ERR_NOMEM, "out of memory");
    MPI_Comm_rank(MPI_COMM_WORLD, &l->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &l->size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    l->timeout_s = 600;
    MPI_Comm host;
    l->host_ranks = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host) ==
        MPI_SUCCESS) {
        MPI_Comm_size(host, &l->host_ranks);
        MPI_Comm_free(&host);
    }
    *out = l;
    return TL_OK;
}

void tl_link_close(tl_link *l) {
    if (!l) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
    free(l);
}

int tl_link_rank(const tl_link *l) { return l->rank; }
int tl_link_size(const tl_link *l) { return l->size; }
int tl_link_host_ranks(const tl_link *l) { return l->host_ranks; }

static tl_status mpi_error(int rc, const char *what, int peer) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
    msg[len] = 0;
    return tl_error_set(TL_ERR_IO, "%s rank %d: %s", what, peer, len ? msg : "MPI error");
}

tl_status tl_link_isend(tl_link *l, int peer, int tag, const void *buf, size_t bytes,
                        tl_link_req *req) {
    (void)l;
    if (bytes > INT_MAX)
        return tl_error_set(TL_ERR_INVALID, "a pipeline message of %zu bytes is over the "
                            "limit of %d", bytes, INT_MAX);
    MPI_Request *r = (MPI_Request *)(void *)req->handle;
    int rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD, r);
    if (rc != MPI_SUCCESS) return mpi_error(rc, "sending to", peer);
    req->active = 1;
    req->peer = peer;
    return TL_OK;
}

/* Polls r until it completes or the link's timeout passes. */
static tl_status poll(tl_link *l, MPI_Request *r, MPI_Status *status, const char *what,
                      int peer) {
    const double t0 = tl_now();
    for (long i = 0;; i++) {
        int done = 0;
        int rc = MPI_Test(r, &done, status);
        if (rc != MPI_SUCCESS) return mpi_error(rc, what, peer);
        if (done) return TL_OK;
        if (i < 2000) continue;
        if (tl_now() - t0 > l->timeout_s) {
            MPI_Cancel(r);
            MPI_Request_free(r);
            return tl_error_set(TL_ERR_IO, "%s rank %d: nothing for %.0f s; that rank has "
                                "stopped or hangs", what, peer, l->timeout_s);
        }
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
}

tl_status tl_link_wait(tl_link *l, tl_link_req *req) {
    if (!req->active) return TL_OK;
    req->active = 0;
    return poll(l, (MPI_Request *)(void *)req->handle, MPI_STATUS_IGNORE, "sending to",
                req->peer);
}

tl_status tl_link_recv(tl_link *l, int peer, int tag, void *buf, size_t cap, size_t *got) {
    *got = 0;
    MPI_Request r;
    MPI_Status status;
    int rc = MPI_Irecv(buf, cap > INT_MAX ? INT_MAX : (int)cap, MPI_BYTE, peer, tag,
                       MPI_COMM_WORLD, &r);
    if (rc != MPI_SUCCESS) return mpi_error(rc, "receiving from", peer);
    tl_status st = poll(l, &r, &status, "receiving from", peer);
    if (st) return st;
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    *got = (size_t)count;
    return TL_OK;
}

enum { TAG_SHARE = 13, TAG_GATHER = 14 }; /* apart from exec/pipeline.c's step tags */

tl_status tl_link_share(tl_link *l, void *buf, size_t n) {
    if (l->rank > 0) {
        size_t got = 0;
        tl_status st = tl_link_recv(l, 0, TAG_SHARE, buf, n, &got);
        if (!st && got != n)
            st = tl_error_set(TL_ERR_IO, "rank 0 shared %zu bytes where %zu were due", got, n);
        return st;
    }
    tl_status st = TL_OK;
    for (int r = 1; r < l->size && !st; r++) {
        tl_link_req req = {0};
        st = tl_link_isend(l, r, TAG_SHARE, buf, n, &req);
        if (!st) st = tl_link_wait(l, &req);
    }
    return st;
}

tl_status tl_link_gather(tl_link *l, const void *mine, size_t n, void *all) {
    if (l->rank > 0) {
        tl_link_req req = {0};
        tl_status st = tl_link_isend(l, 0, TAG_GATHER, mine, n, &req);
        if (!st) st = tl_link_wait(l, &req);
        return st;
    }
    memcpy(all, mine, n);
    for (int r = 1; r < l->size; r++) {
        size_t got = 0;
        tl_status st = tl_link_recv(l, r, TAG_GATHER, (char *)all + (size_t)r * n, n, &got);
        if (!st && got != n)
            st = tl_error_set(TL_ERR_IO, "rank %d sent %zu bytes where %zu were due", r, got, n);
        if (st) return st;
    }
    return TL_OK;
}

void tl_link_abort(tl_link *l, int code) {
    (void)l;
    MPI_Abort(MPI_COMM_WORLD, code);
}
