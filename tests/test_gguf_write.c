/* test_gguf_write.c - the GGUF writer round-trips through the reader: every metadata
 * type, string arrays, tensors of every type with their data; a failed write leaves no
 * file at the destination; synth models load and describe their shape. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "format/gguf.h"
#include "kernels/kernels.h"
#include "testutil.h"

static tl_status fill(void *user, size_t index, uint64_t offset, void *dst, size_t len) {
    (void)user;
    uint8_t *d = dst;
    for (size_t i = 0; i < len; i++) d[i] = (uint8_t)(index * 31 + offset + i);
    return TL_OK;
}

static tl_status fail_fill(void *user, size_t index, uint64_t offset, void *dst, size_t len) {
    (void)user; (void)index; (void)offset; (void)dst; (void)len;
    return TL_ERR_IO;
}

int main(void) {
    char dir[] = "/tmp/tl_gguf_write_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/t.gguf", dir);

    tl_gguf_writer *w;
    CHECK(tl_gguf_writer_open(&w) == TL_OK);
    CHECK(tl_gguf_writer_set_u32(w, "a.u32", 4000000000u) == TL_OK);
    CHECK(tl_gguf_writer_set_i32(w, "a.i32", -7) == TL_OK);
    CHECK(tl_gguf_writer_set_f32(w, "a.f32", 1.5f) == TL_OK);
    CHECK(tl_gguf_writer_set_bool(w, "a.bool", true) == TL_OK);
    CHECK(tl_gguf_writer_set_str(w, "a.str", "h\xc3\xa9llo") == TL_OK);
    int32_t ints[3] = {1, -2, 3};
    CHECK(tl_gguf_writer_set_arr(w, "a.arr", TL_GGUF_INT32, ints, 3) == TL_OK);
    const char *strs[] = {"x", "", "zz"};
    CHECK(tl_gguf_writer_set_arr_str(w, "a.strs", strs, 3) == TL_OK);
    const tl_type types[] = {TL_TYPE_F32, TL_TYPE_F16, TL_TYPE_BF16, TL_TYPE_Q8_0, TL_TYPE_Q4_0};
    for (int i = 0; i < 5; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%d", i);
        uint64_t ne[2] = {64, (uint64_t)(3 + i)};
        CHECK(tl_gguf_writer_add_tensor(w, name, types[i], 2, ne) == TL_OK);
    }
    uint64_t bad_ne[1] = {33};
    CHECK(tl_gguf_writer_add_tensor(w, "bad", TL_TYPE_Q8_0, 1, bad_ne) == TL_ERR_INVALID);
    CHECK(tl_gguf_writer_write(w, path, fill, NULL) == TL_OK);

    tl_gguf *g;
    CHECK(tl_gguf_open(path, &g) == TL_OK);
    uint32_t u;
    int32_t i32;
    float f;
    bool b;
    const tl_gguf_str *s;
    CHECK(tl_gguf_get_u32(g, "a.u32", &u) == TL_OK && u == 4000000000u);
    CHECK(tl_gguf_get_i32(g, "a.i32", &i32) == TL_OK && i32 == -7);
    CHECK(tl_gguf_get_i32(g, "a.u32", &i32) == TL_ERR_FORMAT); /* does not fit */
    CHECK(tl_gguf_get_f32(g, "a.f32", &f) == TL_OK && f == 1.5f);
    CHECK(tl_gguf_get_bool(g, "a.bool", &b) == TL_OK && b);
    CHECK(tl_gguf_get_str(g, "a.str", &s) == TL_OK && !strcmp(s->s, "h\xc3\xa9llo"));
    CHECK(tl_gguf_get_str(g, "a.u32", &s) == TL_ERR_FORMAT);
    CHECK(tl_gguf_get_u32(g, "missing", &u) == TL_ERR_FORMAT);
    uint64_t n;
    const void *data;
    CHECK(tl_gguf_get_arr(g, "a.arr", TL_GGUF_INT32, &n, &data) == TL_OK && n == 3 &&
          !memcmp(data, ints, sizeof ints));
    CHECK(tl_gguf_get_arr(g, "a.strs", TL_GGUF_STRING, &n, &data) == TL_OK && n == 3);
    const tl_gguf_str *ss = data;
    CHECK(!strcmp(ss[0].s, "x") && ss[1].len == 0 && !strcmp(ss[2].s, "zz"));
    CHECK(g->n_tensors == 5);
    FILE *fp = fopen(path, "rb");
    for (int i = 0; i < 5 && fp; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%d", i);
        const tl_gguf_tensor *t = tl_gguf_find_tensor(g, name);
        CHECK(t && t->type == types[i] && t->ne[0] == 64 && t->ne[1] == (uint64_t)(3 + i));
        if (!t) continue;
        CHECK(t->offset % 32 == 0 && t->nbytes == tl_type_row_bytes(types[i], 64) * (3 + i));
        uint8_t buf[4096];
        CHECK(fseek(fp, (long)t->offset, SEEK_SET) == 0);
        CHECK(fread(buf, 1, t->nbytes, fp) == t->nbytes);
        int ok = 1;
        for (size_t k = 0; k < t->nbytes; k++) ok &= buf[k] == (uint8_t)(i * 31 + k);
        CHECK_MSG(ok, "tensor %s data differs", name);
    }
    if (fp) fclose(fp);
    tl_gguf_free(g);

    /* a failing fill leaves the previous file untouched and no temporary behind */
    CHECK(tl_gguf_writer_write(w, path, fail_fill, NULL) == TL_ERR_IO);
    CHECK(tl_gguf_open(path, &g) == TL_OK);
    tl_gguf_free(g);
    DIR *dh = opendir(dir);
    int entries = 0;
    for (struct dirent *e; dh && (e = readdir(dh));)
        entries += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (dh) closedir(dh);
    CHECK(entries == 1); /* t.gguf alone */
    tl_gguf_writer_close(w);

    /* synth output loads as a model with the requested shape */
    tl_synth_params sp;
    CHECK(tl_synth_preset("stories260k", &sp) == TL_OK);
    sp.n_ff = 192;
    sp.weight_type = TL_TYPE_Q4_0;
    sp.tied_output = 1;
    snprintf(path, sizeof path, "%s/synth.gguf", dir);
    CHECK(tl_synth_write(&sp, path) == TL_OK);
    tl_model *m;
    CHECK(tl_model_open(path, NULL, &m) == TL_OK);
    tl_model_desc d;
    tl_model_describe(m, &d);
    CHECK(d.n_vocab == 512 && d.n_embd == 64 && d.n_ff == 192 && d.n_layer == 5 &&
          d.n_head == 8 && d.n_head_kv == 4);
    int32_t ids[64];
    size_t nid;
    CHECK(tl_tokenize(m, "hello there!", 12, 1, ids, 64, &nid) == TL_OK && nid >= 2);
    tl_model_close(m);
    CHECK(tl_synth_preset("nope", &sp) == TL_ERR_INVALID);
    unlink(path);
    snprintf(path, sizeof path, "%s/t.gguf", dir);
    unlink(path);
    rmdir(dir);
    return tl_test_finish("test_gguf_write");
}
