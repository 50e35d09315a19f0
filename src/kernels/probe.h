/* probe.h - measuring this machine's physical bounds: DRAM read bandwidth and FMA peak.
 * Benchmarks report their speed as a ratio to these, measured in the same run; the
 * hardware profile (plan/) stores them. Both run on the caller's thread pool so the
 * thread count matches the engine's. */
#ifndef TL_KERNELS_PROBE_H
#define TL_KERNELS_PROBE_H

#include <stddef.h>
#include "base/threadpool.h"

/* The probe reads as fast as this machine allows, so a ratio to it is honest: memory
 * with the same huge-page advice as the engine's weights (on 4 KiB pages the probe reads
 * slower than the weights stream, and a ratio to it would overstate the engine), and two
 * streams per task (more memory-level parallelism than one).
 *
 * Streams `bytes` of freshly allocated memory (> last-level cache) `reps` times with all
 * pool threads; returns the median read bandwidth in bytes/s (0 on allocation failure). */
double tl_probe_read_bandwidth(tl_pool *pool, size_t bytes, int reps);
/* The same over the caller's buffer `p` of `bytes` (already faulted in), for benchmarks
 * that probe often between runs and must not disturb them with page faults and unmaps. */
double tl_probe_read_buffer(tl_pool *pool, const void *p, size_t bytes, int reps);
/* A probe buffer of `bytes`: 2 MiB-aligned, huge pages advised, faulted in (free()). */
void *tl_probe_buffer(size_t bytes);
/* Runs independent FMA chains on every pool thread; returns the median FLOP/s. */
double tl_probe_fma_peak(tl_pool *pool, int reps);

/* x86 inner loops (kernels/x86_probe.c). */
float tl_probe_read_kernel(const float *p, size_t n);
float tl_probe_fma_kernel(size_t iters, float seed);

#endif
