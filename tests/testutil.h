/* testutil.h - tiny assertion helpers shared by the C tests. A failed check prints
 * file:line and the expression, counts the failure, and the test exits 1 at the end. */
#ifndef TL_TESTUTIL_H
#define TL_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

extern int tl_test_failures;

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);     \
            tl_test_failures++;                                                          \
        }                                                                                \
    } while (0)

#define CHECK_MSG(cond, ...)                                                             \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);     \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
            tl_test_failures++;                                                          \
        }                                                                                \
    } while (0)

/* Path of a file in ../shared/models; the test fails (never skips) if it is missing. */
const char *tl_test_model(const char *name);
/* A text file of under 64 KiB as a NUL-terminated string (free it), or NULL. */
char *tl_test_read_text(const char *path);
/* A growable byte buffer (files built byte by byte); put exits on out-of-memory. */
typedef struct tl_test_buf { uint8_t *p; size_t len, cap; } tl_test_buf;
void tl_test_buf_put(tl_test_buf *b, const void *d, size_t n);
/* Story openings in stories260K's vocabulary, short to long (batch and scheduler tests). */
#define TL_TEST_N_STORY_PROMPTS 11
extern const char *const tl_test_story_prompts[TL_TEST_N_STORY_PROMPTS];
/* Planner tests: a profile of round numbers (1 GB/s disk at every chunk and depth, 1e9
 * MACs/s for every type and row count, ...), and every disk read rate set to bps. */
struct tl_hw_profile;
void tl_test_round_profile(struct tl_hw_profile *p);
void tl_test_profile_set_disk(struct tl_hw_profile *p, double bps);
/* Prints a summary line and returns the process exit code. */
int tl_test_finish(const char *name);

#endif
