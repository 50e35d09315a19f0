/* test_out_file.c - output files written whole or not at all (base/out_file.h): a regular
 * file is replaced (its mode kept, no temporary left), an abort or a failed GGUF write
 * leaves the old file byte-identical, a symlink's target is replaced and the link stays a
 * link, a missing target is created, and every target that is not a regular file - a
 * character device this test creates, a directory, a FIFO, a socket, a symlink to one of
 * them - is refused with a message naming what it is and is left as it was; also by the
 * callers (tl_synth_write, tl_profile_save), and when the target turns into a FIFO
 * between open and commit. */
#include <errno.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>
#include "base/out_file.h"
#include "base/status.h"
#include "format/gguf.h"
#include "plan/profile.h"
#include "testutil.h"

static char dir[64];

static int has(const char *needle) { return strstr(tl_last_error(), needle) != NULL; }

static char *at(const char *name) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static int same_text(const char *path, const char *text) {
    char buf[256] = {0};
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    return n == strlen(text) && !memcmp(buf, text, n);
}

/* Entries of dir whose names hold ".tmp" (temporaries left behind). */
static int temporaries(void) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".tmp") != NULL;
    if (d) closedir(d);
    return n;
}

static tl_status write_text(const char *path, const char *text) {
    tl_out_file f;
    tl_status st = tl_out_file_open(&f, path);
    if (st) return st;
    if ((st = tl_out_file_write(&f, text, strlen(text)))) {
        tl_out_file_abort(&f);
        return st;
    }
    return tl_out_file_commit(&f);
}

static tl_status fill(void *user, size_t index, uint64_t offset, void *dst, size_t len) {
    (void)user; (void)index; (void)offset;
    memset(dst, 7, len);
    return TL_OK;
}

static tl_status fail_fill(void *user, size_t index, uint64_t offset, void *dst, size_t len) {
    (void)user; (void)index; (void)offset; (void)dst; (void)len;
    return tl_error_set(TL_ERR_IO, "fill failed");
}

/* The refusals of a target that is not a regular file, by every writer; `kind` is the
 * word the message must hold; the node must still be what it was (`mode` S_IFMT bits). */
static void refused(const char *path, const char *kind, mode_t mode) {
    struct stat sb;
    CHECK_MSG(tl_out_check_target(path) == TL_ERR_INVALID && has(kind) && has(path),
              "%s: '%s'", path, tl_last_error());
    tl_out_file f;
    CHECK(tl_out_file_open(&f, path) == TL_ERR_INVALID && has(kind));
    tl_out_file_abort(&f); /* nothing to release: a no-op */
    tl_synth_params sp;
    CHECK(tl_synth_preset("stories260k", &sp) == TL_OK);
    CHECK_MSG(tl_synth_write(&sp, path) == TL_ERR_INVALID && has(kind), "synth %s: %s", path,
              tl_last_error());
    tl_hw_profile p;
    memset(&p, 0, sizeof p);
    CHECK_MSG(tl_profile_save(&p, path) == TL_ERR_INVALID && has(kind), "profile %s: %s",
              path, tl_last_error());
    CHECK_MSG(lstat(path, &sb) == 0 && (sb.st_mode & S_IFMT) == mode, "%s changed", path);
    CHECK(temporaries() == 0);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/tl_out_file_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    struct stat sb;

    /* a missing target is created (0644 less the umask); an existing one replaced with
     * its mode kept */
    mode_t um = umask(022);
    CHECK(write_text(at("a"), "first") == TL_OK && same_text(at("a"), "first"));
    CHECK(stat(at("a"), &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 0777) == 0644);
    CHECK(chmod(at("a"), 0640) == 0);
    ino_t old_ino = sb.st_ino;
    CHECK(write_text(at("a"), "second, longer") == TL_OK && same_text(at("a"), "second, longer"));
    CHECK(stat(at("a"), &sb) == 0 && (sb.st_mode & 0777) == 0640);
    CHECK(sb.st_ino != old_ino); /* renamed over, not rewritten in place */
    CHECK(temporaries() == 0);
    umask(um);

    /* abort: the old file is untouched, the temporary gone; so after a failed GGUF write */
    tl_out_file f;
    CHECK(tl_out_file_open(&f, at("a")) == TL_OK);
    CHECK(tl_out_file_write(&f, "partial", 7) == TL_OK);
    CHECK(temporaries() == 1);
    tl_out_file_abort(&f);
    tl_out_file_abort(&f); /* twice is harmless */
    CHECK(same_text(at("a"), "second, longer") && temporaries() == 0);
    tl_gguf_writer *w;
    CHECK(tl_gguf_writer_open(&w) == TL_OK);
    CHECK(tl_gguf_writer_set_u32(w, "a.u32", 1) == TL_OK);
    uint64_t ne[1] = {64};
    CHECK(tl_gguf_writer_add_tensor(w, "t", TL_TYPE_F32, 1, ne) == TL_OK);
    CHECK(tl_gguf_writer_write(w, at("a"), fail_fill, NULL) == TL_ERR_IO);
    CHECK(same_text(at("a"), "second, longer") && temporaries() == 0);
    CHECK(tl_gguf_writer_write(w, at("a"), fill, NULL) == TL_OK && temporaries() == 0);
    tl_gguf_writer_close(w);
    tl_gguf *g;
    CHECK(tl_gguf_open(at("a"), &g) == TL_OK);
    tl_gguf_free(g);

    /* a symlink: the file it points to is replaced, the link stays a link; a dangling
     * one creates its target */
    put(at("real"), "old");
    CHECK(symlink("real", at("link")) == 0);
    CHECK(write_text(at("link"), "new") == TL_OK);
    CHECK(lstat(at("link"), &sb) == 0 && S_ISLNK(sb.st_mode));
    CHECK(same_text(at("real"), "new") && temporaries() == 0);
    CHECK(symlink("later", at("dangling")) == 0);
    CHECK(write_text(at("dangling"), "made") == TL_OK && same_text(at("later"), "made"));
    CHECK(lstat(at("dangling"), &sb) == 0 && S_ISLNK(sb.st_mode));
    CHECK(symlink("loop2", at("loop1")) == 0 && symlink("loop1", at("loop2")) == 0);
    CHECK(tl_out_check_target(at("loop1")) == TL_ERR_IO);

    /* a missing directory is an error, not created */
    CHECK(tl_out_check_target(at("nodir/x")) == TL_ERR_IO && has("nodir"));
    CHECK(write_text(at("nodir/x"), "x") == TL_ERR_IO);

    /* what is not a regular file is refused and left as it was */
    if (mknod(at("dev"), S_IFCHR | 0666, makedev(1, 3)) == 0) { /* a /dev/null twin */
        refused(at("dev"), "character device", S_IFCHR);
        CHECK(symlink("dev", at("devlink")) == 0);
        refused(at("devlink"), "character device", S_IFLNK);
        CHECK(stat(at("dev"), &sb) == 0 && S_ISCHR(sb.st_mode));
    } else {
        printf("note: mknod: %s (not root?): the device case is not run\n", strerror(errno));
    }
    CHECK(mkdir(at("d"), 0755) == 0);
    refused(at("d"), "directory", S_IFDIR);
    CHECK(mkfifo(at("fifo"), 0644) == 0);
    refused(at("fifo"), "FIFO", S_IFIFO);
    int sock = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", at("sock"));
    CHECK(sock >= 0 && bind(sock, (struct sockaddr *)&sa, sizeof sa) == 0);
    refused(at("sock"), "socket", S_IFSOCK);
    if (sock >= 0) close(sock);

    /* the target is checked again at commit: one that became a FIFO meanwhile is refused
     * and the temporary removed */
    CHECK(tl_out_file_open(&f, at("late")) == TL_OK);
    CHECK(tl_out_file_write(&f, "x", 1) == TL_OK);
    CHECK(mkfifo(at("late"), 0644) == 0);
    CHECK(tl_out_file_commit(&f) == TL_ERR_INVALID && has("FIFO"));
    CHECK(lstat(at("late"), &sb) == 0 && S_ISFIFO(sb.st_mode) && temporaries() == 0);

    const char *names[] = {"a", "s", "real", "link", "later", "dangling", "loop1", "loop2",
                           "dev", "devlink", "fifo", "sock", "late"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unlink(at(names[i]));
    rmdir(at("d"));
    CHECK(rmdir(dir) == 0);
    return tl_test_finish("test_out_file");
}
