/* cache_dir.h - where tierllm keeps what it measures or derives once and reuses (the
 * hardware profile, converted weight copies): "$XDG_CACHE_HOME/tierllm", else
 * "$HOME/.cache/tierllm"; and where it writes what does not outlive a run (spill files,
 * scratch files): the user's directory, else "$TMPDIR", else "/tmp". */
#ifndef TL_BASE_CACHE_DIR_H
#define TL_BASE_CACHE_DIR_H

#include <stddef.h>
#include "base/status.h"

/* The cache directory's path (not created). TL_ERR_INVALID when neither variable is set
 * or the path does not fit in cap. */
tl_status tl_cache_dir(char *out, size_t cap);
/* The directory for files that do not outlive a run: `chosen` when set and not empty,
 * else $TMPDIR when set and not empty, else "/tmp". */
const char *tl_scratch_dir(const char *chosen);
/* mkdir -p of `dir`; directories it creates get mode 0700. */
tl_status tl_make_dirs(const char *dir);

#endif
