/* test_hooks.h - fault and kill points for the CLI tests, compiled only into the test
 * build of the CLI (tierllm-test, TL_TEST_HOOKS); the shipped tierllm has none of this
 * and the library reads no test switch. Like SQLite's SQLITE_TEST, the hooks live beside
 * the code they break but only exist in the build that tests it. Each is driven by an
 * environment variable that only tierllm-test reads:
 *   TIERLLM_TEST_KILL=before:N   SIGKILL just before the Nth result line is written
 *   TIERLLM_TEST_KILL=midline:N  write the first half of the Nth result line, then SIGKILL
 *   TIERLLM_TEST_OUTPUT_FAULT=enospc:N  the Nth result line's write stops half way with
 *                                ENOSPC (a disk that fills in the middle of a line)
 *   TIERLLM_TEST_SPILL_FAULT=enospc:N | eio:N   the Nth write to the KV spill file fails
 *   TIERLLM_TEST_SIGNAL=int:N | term:N   SIGINT (SIGTERM) at the first step boundary after
 *                                N tokens were generated (a stop at a known point)
 */
#ifndef TL_TOOLS_TEST_HOOKS_H
#define TL_TOOLS_TEST_HOOKS_H

#include <stddef.h>
#include "tier/tier.h"

/* Called with each result line before it is written to fd. Returns 0, or an errno the
 * write must fail with after *written bytes of the line went to fd. */
int tl_test_hook_result_line(int fd, const char *line, size_t len, size_t *written);
/* Fills *f and returns 1 when a spill fault is asked for. */
int tl_test_hook_spill_fault(tl_fault_spec *f);
/* Called at each step boundary of a batch run, before it checks for a stop signal. */
void tl_test_hook_progress(unsigned long long generated_tokens);

#endif
