/* link_none.c - the link of a build without MPI: every entry point reports that pipeline
 * runs need an MPI build, so the single-process engine is unchanged. */
#include <string.h>
#include "dist/link.h"
#include "base/status.h"

int tl_link_available(void) { return 0; }

tl_status tl_link_open(int *argc, char ***argv, tl_link **out) {
    (void)argc, (void)argv;
    *out = NULL;
    return tl_error_set(TL_ERR_UNSUPPORTED, "this tierllm was built without MPI: install "
                        "libopenmpi-dev and rebuild to run a pipeline");
}

void tl_link_close(tl_link *l) { (void)l; }
int tl_link_rank(const tl_link *l) { (void)l; return 0; }
int tl_link_size(const tl_link *l) { (void)l; return 1; }
int tl_link_host_ranks(const tl_link *l) { (void)l; return 1; }

tl_status tl_link_isend(tl_link *l, int peer, int tag, const void *buf, size_t bytes,
                        tl_link_req *req) {
    (void)l, (void)peer, (void)tag, (void)buf, (void)bytes, (void)req;
    return tl_error_set(TL_ERR_UNSUPPORTED, "built without MPI");
}

tl_status tl_link_wait(tl_link *l, tl_link_req *req) {
    (void)l, (void)req;
    return TL_OK;
}

tl_status tl_link_recv(tl_link *l, int peer, int tag, void *buf, size_t cap, size_t *got) {
    (void)l, (void)peer, (void)tag, (void)buf, (void)cap;
    *got = 0;
    return tl_error_set(TL_ERR_UNSUPPORTED, "built without MPI");
}

tl_status tl_link_share(tl_link *l, void *buf, size_t n) {
    (void)l, (void)buf, (void)n;
    return TL_OK; /* one rank: it has its own bytes */
}

tl_status tl_link_gather(tl_link *l, const void *mine, size_t n, void *all) {
    (void)l;
    memcpy(all, mine, n);
    return TL_OK;
}

void tl_link_abort(tl_link *l, int code) { (void)l, (void)code; }
