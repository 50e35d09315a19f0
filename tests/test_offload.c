/* test_offload.c - streaming weights from the model file under a memory budget.
 *
 * 1. Tokens are identical with and without a budget, at every prefetch depth, with and
 *    without overlap, with io_uring and with the pread pool, on stories260K and on a
 *    synthetic model several times larger than its budget.
 * 2. O_DIRECT reads leave none of the model's pages in the page cache (mincore), and
 *    the same check does see cached pages when --no-direct reads through the cache.
 * 3. Faults injected into weight reads (EIO, short reads, latency) give a clear error
 *    or the correct tokens, never a crash, hang or wrong tokens; an error sticks.
 * 4. A budget below the minimum is refused before running, naming the minimum.
 * 5. A converted copy of the weights (exec/panel_copy.h) is written once, leaves the model
 *    file as it was, holds the file's bytes with the panel tensors repacked, is reused by
 *    the next run, and gives the same tokens; a directory that cannot take it is an error
 *    that leaves the model reading its own file.
 * 6. The flash layout (`convert --layout flash`): a streamed file reads only part of its
 *    runs and gives the resident file's tokens; under the faults of 3 its selective reads
 *    end with the injected error at every point, or give the same tokens.
 * 7. A ReLU FFN stored by neuron streams through the neuron window with the resident
 *    tokens, and ends cleanly on IO faults in those reads.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/status.h"
#include "exec/convert.h"
#include "exec/engine.h"
#include "exec/panel_copy.h"
#include "kernels/kernels.h"
#include "model/placement.h"
#include "exec/residency.h"
#include "model/llama.h"
#include "testutil.h"
#include "tier/tier.h"

#define N_GEN 24

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* Greedy tokens after a fixed prompt; returns the status. `fault` (optional) wraps the
 * model's tier before the weights are placed; with copy_dir the weights are read from a
 * converted copy there (info: what tl_panel_copy_use did; its error is returned). */
static tl_status greedy_from(const char *path, tl_model_params mp, const tl_fault_spec *fault,
                             const char *copy_dir, tl_panel_copy_info *info, int32_t *out,
                             tl_run_stats *stats) {
    tl_model *m = NULL;
    tl_context *c = NULL;
    tl_status st = tl_model_open(path, &mp, &m);
    if (st) return st;
    if (copy_dir && (st = tl_panel_copy_use(m, copy_dir, info))) {
        tl_model_close(m);
        return st;
    }
    if (fault) {
        tl_tier *wrapped;
        st = tl_tier_fault_open(m->lm.tier, fault, &wrapped);
        if (st) { tl_model_close(m); return st; }
        m->lm.tier = wrapped;
    }
    tl_context_params cp = tl_context_default_params();
    cp.n_ctx = 96;
    cp.n_batch = 5;
    st = tl_context_open(m, &cp, &c);
    float *logits = malloc((size_t)m->lm.hp.n_vocab * sizeof *logits);
    int32_t prompt[9] = {1, 403, 407, 261, 378, 432, 383, 286, 261};
    if (!st) st = tl_decode(c, prompt, 9, logits);
    for (int i = 0; i < N_GEN && !st; i++) {
        int32_t t = argmax(logits, m->lm.hp.n_vocab);
        out[i] = t;
        st = tl_decode(c, &t, 1, logits);
    }
    if (!st && stats) tl_context_get_stats(c, stats);
    free(logits);
    tl_context_close(c);
    tl_model_close(m);
    return st;
}

static tl_status greedy(const char *path, tl_model_params mp, const tl_fault_spec *fault,
                        int32_t *out, tl_run_stats *stats) {
    return greedy_from(path, mp, fault, NULL, NULL, out, stats);
}

/* The smallest budget that runs this configuration (all weights streamed). */
static uint64_t minimum_budget(const char *path, const tl_model_params *mp) {
    tl_model *m;
    if (tl_model_open(path, mp, &m) != TL_OK) return 0;
    uint64_t b = tl_budget_used(m->lm.budget) + tl_context_budget_bytes(m, 96, 5) +
                 tl_weight_plan_minimum(&m->lm, mp->prefetch, mp->overlap);
    tl_model_close(m);
    return b;
}

/* Same greedy tokens under every streaming configuration, each at `slack` bytes above
 * its minimum budget (so most weights stream). */
static void same_tokens_everywhere(const char *path, uint64_t slack, const char *what) {
    int32_t want[N_GEN], got[N_GEN];
    tl_model_params mp = tl_model_default_params();
    tl_run_stats rs;
    tl_status st = greedy(path, mp, NULL, want, &rs);
    CHECK_MSG(st == TL_OK, "%s unbudgeted: %s", what, tl_last_error());
    CHECK_MSG(rs.weights_streamed_bytes == 0, "%s: unbudgeted run streamed", what);
    for (int backend = 1; backend <= 2; backend++)
        for (int prefetch = 0; prefetch <= 4; prefetch++)
            for (int overlap = 0; overlap <= 1; overlap++) {
                if (!overlap && prefetch) continue;
                mp = tl_model_default_params();
                mp.io_backend = backend;
                mp.prefetch = prefetch;
                mp.overlap = overlap;
                mp.io_chunk_bytes = 64 << 10;
                uint64_t budget = minimum_budget(path, &mp) + slack;
                mp.mem_budget = budget;
                memset(got, 0, sizeof got);
                st = greedy(path, mp, NULL, got, &rs);
                CHECK_MSG(st == TL_OK, "%s budget %llu backend %d prefetch %d overlap %d: %s",
                          what, (unsigned long long)budget, backend, prefetch, overlap,
                          tl_last_error());
                if (st) continue;
                CHECK_MSG(!memcmp(want, got, sizeof want), "%s: tokens differ (backend %d, "
                          "prefetch %d, overlap %d)", what, backend, prefetch, overlap);
                CHECK_MSG(rs.weights_streamed_bytes > 0 && rs.bytes_read_disk > 0,
                          "%s: nothing streamed under the budget", what);
                CHECK(rs.budget_peak_bytes <= budget);
                CHECK(rs.io_uring == (backend == 2));
            }
}

/* Pages of `path` in the page cache. */
static long cached_pages(const char *path) {
    int fd = open(path, O_RDONLY);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) return -1;
    size_t len = (size_t)sb.st_size, page = (size_t)sysconf(_SC_PAGESIZE);
    void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return -1;
    size_t n = (len + page - 1) / page;
    unsigned char *vec = malloc(n);
    long cached = 0;
    if (vec && mincore(p, len, vec) == 0)
        for (size_t i = 0; i < n; i++) cached += vec[i] & 1;
    else
        cached = -1;
    free(vec);
    munmap(p, len);
    return cached;
}

static void evict(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}

static void page_cache(const char *path, uint64_t budget) {
    int32_t toks[N_GEN];
    evict(path);
    long before = cached_pages(path);
    CHECK_MSG(before == 0, "could not evict %s from the page cache (%ld pages)", path, before);
    tl_model_params mp = tl_model_default_params();
    mp.mem_budget = budget;
    CHECK_MSG(greedy(path, mp, NULL, toks, NULL) == TL_OK, "%s", tl_last_error());
    long after = cached_pages(path);
    CHECK_MSG(after == 0, "O_DIRECT run left %ld pages of the model cached", after);
    /* the check can fail: buffered reads do fill the cache */
    mp.direct_io = 0;
    CHECK(greedy(path, mp, NULL, toks, NULL) == TL_OK);
    long buffered = cached_pages(path);
    CHECK_MSG(buffered > 0, "buffered run cached no pages: the mincore check proves nothing");
    evict(path);
}

/* 3's faults on path run under mp: EIO at calls 1, 1 + step, ... up to 400 (while loading
 * or while streaming) ends each run with the injected error; reads cut to short_max bytes
 * and a slow disk (latency_s a read: stalls) give the tokens `want`. */
static void fault_runs(const char *path, tl_model_params mp, const int32_t *want, int step,
                       size_t short_max, double latency_s, const char *what) {
    int32_t got[N_GEN];
    for (int call = 1; call <= 400; call += step) {
        tl_fault_spec f = {0};
        f.fail_call = (uint64_t)call;
        f.fail_errno = EIO;
        tl_error_clear();
        tl_status st = greedy(path, mp, &f, got, NULL);
        CHECK_MSG(st == TL_ERR_IO && strstr(tl_last_error(), "injected"),
                  "%s, EIO at call %d: status %d, '%s'", what, call, st, tl_last_error());
    }
    tl_fault_spec f = {0};
    f.short_max = short_max;
    memset(got, 0, sizeof got);
    CHECK_MSG(greedy(path, mp, &f, got, NULL) == TL_OK, "%s, short reads: %s", what,
              tl_last_error());
    CHECK_MSG(!memcmp(want, got, sizeof got), "%s: short reads changed the tokens", what);
    f = (tl_fault_spec){0};
    f.latency_s = latency_s;
    memset(got, 0, sizeof got);
    tl_run_stats rs;
    CHECK(greedy(path, mp, &f, got, &rs) == TL_OK);
    CHECK_MSG(!memcmp(want, got, sizeof got), "%s: latency changed the tokens", what);
    CHECK(rs.stall_s > 0);
}

static void faults(const char *path, uint64_t budget) {
    int32_t want[N_GEN];
    tl_model_params mp = tl_model_default_params();
    CHECK(greedy(path, mp, NULL, want, NULL) == TL_OK);
    mp.mem_budget = budget;
    mp.io_chunk_bytes = 16 << 10;
    fault_runs(path, mp, want, 37, 4096 /* a page per read */, 0.0005, "streamed");
}

/* path converted to the flash layout at fpath, at sparsity `sparsity` on every matrix
 * input (a ReLU FFN: by neuron, with its predictor). */
static void convert_flash(const char *path, const char *fpath, float sparsity) {
    static const char *const words[] = {"the", "little", "dog", "ran", "to", "a", "big",
                                        "red", "ball", "and", "sang", "happy"};
    char text[3072]; /* some 600 words: the 512 tokens convert needs, and little more */
    size_t len = 0;
    for (int i = 0; len + 16 < sizeof text; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%s ", words[(i * 7 + i / 5) % 12]);
    tl_convert_params cv = tl_convert_default_params();
    cv.in_path = path;
    cv.out_path = fpath;
    cv.calib_text = text;
    cv.calib_len = len;
    cv.sparsity = sparsity;
    cv.uniform = 1;
    cv.flash_layout = 1;
    cv.n_ctx = 128;
    tl_convert_report rep;
    CHECK_MSG(tl_convert(&cv, &rep) == TL_OK, "convert --layout flash: %s", tl_last_error());
}

/* 6: path converted to the flash layout in dir, at sparsity 0.5 on every matrix input. */
static void flash_faults(const char *path, const char *dir) {
    char fpath[256];
    snprintf(fpath, sizeof fpath, "%s/flash.gguf", dir);
    convert_flash(path, fpath, 0.5f);
    int32_t want[N_GEN], got[N_GEN];
    tl_model_params mp = tl_model_default_params();
    CHECK_MSG(greedy(fpath, mp, NULL, want, NULL) == TL_OK, "flash resident: %s", tl_last_error());
    mp.mem_budget = minimum_budget(fpath, &mp) + (256 << 10);
    mp.flash_gap_bytes = 0;
    tl_run_stats rs;
    memset(got, 0, sizeof got);
    CHECK_MSG(greedy(fpath, mp, NULL, got, &rs) == TL_OK, "flash streamed: %s", tl_last_error());
    CHECK_MSG(!memcmp(want, got, sizeof want), "streamed flash tokens differ from resident");
    CHECK_MSG(rs.flash_bytes_read > 0 && rs.flash_bytes_needed <= rs.flash_bytes_read &&
                  rs.flash_bytes_read < rs.flash_bytes_dense,
              "flash reads: needed %llu, read %llu, dense %llu",
              (unsigned long long)rs.flash_bytes_needed,
              (unsigned long long)rs.flash_bytes_read, (unsigned long long)rs.flash_bytes_dense);
    fault_runs(fpath, mp, want, 133, 512 /* a block per read */, 0.0002, "flash");
    unlink(fpath);
}

/* 7: a ReLU FFN stored by neuron (model/neurons.h) streams its predicted neurons' runs
 * through the neuron window with the resident tokens, and ends cleanly on IO faults in
 * those reads. */
static void neuron_faults(const char *dir) {
    char path[256], fpath[256];
    snprintf(path, sizeof path, "%s/relu.gguf", dir);
    snprintf(fpath, sizeof fpath, "%s/relu_flash.gguf", dir);
    tl_synth_params sp = {.n_vocab = 1000, .n_embd = 128, .n_ff = 384, .n_layer = 8, .n_head = 4,
        .n_head_kv = 2, .n_ctx = 256, .weight_type = 8 /* Q8_0 */, .rope_base = 10000.0f,
        .seed = 7, .relu_sparsity = 0.9f, .gate_rank = 16};
    CHECK(tl_synth_write(&sp, path) == TL_OK);
    convert_flash(path, fpath, 0.0f);
    int32_t want[N_GEN], got[N_GEN];
    tl_model_params mp = tl_model_default_params();
    CHECK_MSG(greedy(fpath, mp, NULL, want, NULL) == TL_OK, "neurons resident: %s",
              tl_last_error());
    mp.flash_gap_bytes = 0;
    /* a window of 2 tokens (no window: tests/neuron_cli.sh, and the flash file above) */
    mp.neuron_window = 2;
    mp.mem_budget = minimum_budget(fpath, &mp) + (512u << 10);
    tl_run_stats rs;
    memset(got, 0, sizeof got);
    CHECK_MSG(greedy(fpath, mp, NULL, got, &rs) == TL_OK, "neurons streamed: %s",
              tl_last_error());
    CHECK_MSG(!memcmp(want, got, sizeof want), "streamed neurons change the tokens");
    CHECK_MSG(rs.flash_bytes_read > 0 && rs.neurons_used < rs.neurons_total &&
                  rs.neuron_window_k == 2 && rs.neuron_window_hits > 0,
              "read %llu, neurons %llu of %llu, window k %d hits %llu",
              (unsigned long long)rs.flash_bytes_read, (unsigned long long)rs.neurons_used,
              (unsigned long long)rs.neurons_total, (int)rs.neuron_window_k,
              (unsigned long long)rs.neuron_window_hits);
    fault_runs(fpath, mp, want, 199, 512 /* a block per read */, 0.0002, "neurons");
    unlink(fpath);
    unlink(path);
}

static uint8_t *slurp(const char *path, size_t *n) {
    int fd = open(path, O_RDONLY);
    struct stat sb;
    uint8_t *b = NULL;
    if (fd >= 0 && fstat(fd, &sb) == 0 && (b = malloc((size_t)sb.st_size + 1))) {
        *n = (size_t)sb.st_size;
        for (size_t done = 0; done < *n;) {
            ssize_t r = read(fd, b + done, *n - done);
            if (r <= 0) { free(b); b = NULL; break; }
            done += (size_t)r;
        }
    }
    if (fd >= 0) close(fd);
    return b;
}

/* tied: the classifier is the embedding, which the copy keeps in rows: streamed, it is
 * still repacked on arrival */
static void panel_copy(const char *path, uint64_t budget, const char *dir, int tied) {
    int32_t want[N_GEN], got[N_GEN];
    size_t n_model = 0, n_copy = 0;
    uint8_t *model = slurp(path, &n_model);
    CHECK(model != NULL);
    tl_model_params mp = tl_model_default_params();
    CHECK(greedy(path, mp, NULL, want, NULL) == TL_OK);
    mp.mem_budget = budget;
    char copies[512];
    snprintf(copies, sizeof copies, "%s/cache", dir);
    tl_panel_copy_info info;
    tl_run_stats rs;
    memset(got, 0, sizeof got);
    tl_status st = greedy_from(path, mp, NULL, copies, &info, got, &rs);
    CHECK_MSG(st == TL_OK, "run from a converted copy: %s", tl_last_error());
    CHECK_MSG(!memcmp(want, got, sizeof want), "the converted copy changed the tokens");
    int wanted = tl_panels_wanted(TL_TYPE_Q8_0, 256);
    CHECK_MSG(info.used == wanted && info.created == wanted, "copy used %d created %d, panels wanted %d",
              info.used, info.created, wanted);
    if (!wanted) {
        fprintf(stderr, "  (no panels on this CPU: the converted copy is not tested)\n");
        free(model);
        return;
    }
    CHECK_MSG((rs.weights_repacked_bytes > 0) == tied && rs.weights_streamed_bytes > 0,
              "with the copy %llu bytes were repacked on arrival (tied %d)",
              (unsigned long long)rs.weights_repacked_bytes, tied);
    /* the copy: the file's bytes, the panel tensors repacked; the model file untouched */
    size_t n_again = 0;
    uint8_t *again = slurp(path, &n_again), *copy = slurp(info.path, &n_copy);
    CHECK(again && n_again == n_model && !memcmp(again, model, n_model));
    CHECK(copy && n_copy == n_model);
    tl_model *m;
    CHECK(tl_model_open(path, &mp, &m) == TL_OK);
    static tl_weight *all[4096];
    size_t n_all = tl_llama_weights(&m->lm, all, 4096), repacked = 0;
    CHECK(n_all <= 4096);
    for (size_t i = 0; copy && i < n_all; i++) {
        const tl_weight *w = all[i];
        uint8_t *orig = model + w->file_offset, *in_copy = copy + w->file_offset;
        if (w != &m->lm.tok_embd && tl_weight_wants_panels(&m->lm, w)) {
            uint8_t *rows = malloc(w->file_bytes);
            tl_panels_unpack_ref(w->type, in_copy, w->rows, w->cols, rows);
            CHECK_MSG(!memcmp(rows, orig, w->file_bytes), "%s: copy is not the repacked tensor", w->name);
            CHECK_MSG(memcmp(in_copy, orig, w->file_bytes) != 0, "%s: not repacked", w->name);
            free(rows);
            repacked++;
        } else {
            CHECK_MSG(!memcmp(in_copy, orig, w->file_bytes), "%s: changed in the copy", w->name);
        }
        memset(orig, 0, w->file_bytes), memset(in_copy, 0, w->file_bytes);
    }
    CHECK(repacked > 0);
    CHECK_MSG(copy && !memcmp(copy, model, n_model), "bytes outside the tensors differ");
    tl_model_close(m);
    /* written once: the next run reuses it */
    st = greedy_from(path, mp, NULL, copies, &info, got, NULL);
    CHECK(st == TL_OK && info.used && !info.created && !memcmp(want, got, sizeof want));
    unlink(info.path);
    rmdir(copies);
    if (tied) {
        free(model), free(again), free(copy);
        return;
    }
    /* a directory that cannot be made: an error, and the model still runs on its file */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/sub", path); /* below a regular file */
    tl_error_clear();
    st = greedy_from(path, mp, NULL, bad, &info, got, NULL);
    CHECK_MSG(st == TL_ERR_IO && !info.used, "copy below a file: status %d '%s'", st, tl_last_error());
    memset(got, 0, sizeof got);
    CHECK(greedy(path, mp, NULL, got, NULL) == TL_OK && !memcmp(want, got, sizeof want));
    free(model), free(again), free(copy);
}

/* Looked up a row at a time, a token embedding keeps the file's rows (panels would spread a
 * row's quants over the cache lines of its 32-row panel) unless it is also the classifier,
 * computed with in panels where this CPU wants them. */
static void embedding_layout(const char *path, int tied) {
    tl_model_params mp = tl_model_default_params();
    tl_model *m;
    tl_context *c = NULL;
    CHECK(tl_model_open(path, &mp, &m) == TL_OK);
    tl_context_params cp = tl_context_default_params();
    cp.n_ctx = 96;
    CHECK(tl_context_open(m, &cp, &c) == TL_OK); /* places the weights */
    const int wanted = tl_panels_wanted(m->lm.tok_embd.type, (size_t)m->lm.tok_embd.rows);
    CHECK_MSG(m->lm.tok_embd.data && m->lm.tok_embd.panels == (tied && wanted),
              "the token embedding is in panels: %d (tied %d, panels wanted %d)",
              m->lm.tok_embd.panels, tied, wanted);
    tl_context_close(c);
    tl_model_close(m);
}

int main(void) {
    const char *stories = tl_test_model("stories260K.gguf");
    /* stories260K needs ~2.9 MiB of KV + activations at n_ctx 96 .. weights 1.1 MiB */
    same_tokens_everywhere(stories, 4096, "stories260K");
    /* Q8_0 v2 with an ffn_down converted to f32 at load (resident) beside streamed parts */
    same_tokens_everywhere(tl_test_model("tinyllamas-stories-260k-q8_0.gguf"), 4096,
                           "stories260K Q8_0");

    char dir[] = "tl_offload_XXXXXX"; /* in the build tree: a real disk, not tmpfs */
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/synth.gguf", dir);
    tl_synth_params sp = {.n_vocab = 1000, .n_embd = 192, .n_ff = 512, .n_layer = 32, .n_head = 8,
        .n_head_kv = 2, .n_ctx = 256, .weight_type = 8 /* Q8_0 */, .rope_base = 10000.0f,
        .seed = 3};
    CHECK(tl_synth_write(&sp, path) == TL_OK);
    struct stat sb;
    CHECK(stat(path, &sb) == 0);
    same_tokens_everywhere(path, 512 << 10, "synthetic Q8_0");
    tl_model_params dflt = tl_model_default_params();
    uint64_t budget = minimum_budget(path, &dflt) + (256 << 10);
    printf("synthetic model %.1f MiB streamed under a %.1f MiB budget\n",
           sb.st_size / 1048576.0, budget / 1048576.0);
    CHECK((uint64_t)sb.st_size > 3 * budget);
    page_cache(path, budget);
    faults(path, budget);
    flash_faults(path, dir);
    neuron_faults(dir);
    panel_copy(path, budget, dir, 0);
    /* a tied classifier streamed from a converted copy (its bytes stay rows there) */
    char tied_path[256];
    snprintf(tied_path, sizeof tied_path, "%s/tied.gguf", dir);
    tl_synth_params tp = {.n_vocab = 1024, .n_embd = 192, .n_ff = 512, .n_layer = 4, .n_head = 8,
        .n_head_kv = 2, .n_ctx = 256, .weight_type = 8 /* Q8_0 */, .tied_output = 1,
        .rope_base = 10000.0f, .seed = 5};
    CHECK(tl_synth_write(&tp, tied_path) == TL_OK);
    uint64_t tied_budget = minimum_budget(tied_path, &dflt) + (64 << 10);
    panel_copy(tied_path, tied_budget, dir, 1);
    embedding_layout(tied_path, 1);
    tp.tied_output = 0; /* the same shapes, a classifier of its own */
    CHECK(tl_synth_write(&tp, tied_path) == TL_OK);
    embedding_layout(tied_path, 0);
    unlink(tied_path);

    /* a budget below the minimum is refused up front, with the minimum in the message */
    tl_model_params mp = tl_model_default_params();
    mp.mem_budget = 1u << 20;
    tl_model *m;
    tl_context *c;
    CHECK(tl_model_open(path, &mp, &m) == TL_OK);
    tl_error_clear();
    CHECK(tl_context_open(m, NULL, &c) == TL_ERR_NOMEM);
    CHECK_MSG(strstr(tl_last_error(), "minimum is"), "got '%s'", tl_last_error());
    tl_model_close(m);
    unlink(path);
    rmdir(dir);
    return tl_test_finish("test_offload");
}
