/* probe.h - measuring this machine's physical bounds: DRAM read bandwidth and the peak of
 * each arithmetic unit (f32 FMA, int8 and bf16 dot products, per instruction set).
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
/* The arithmetic units the kernels run on, each with its own peak. Operations count
 * 2 per multiply-add of one product (an f32 FMA lane, one u8*s8 or bf16 product), so
 * every unit's peak is in the same FLOP-like unit. */
typedef enum tl_probe_unit {
    TL_UNIT_FMA_AVX2 = 0,     /* f32 FMA, 256-bit */
    TL_UNIT_FMA_AVX512,       /* f32 FMA, 512-bit */
    TL_UNIT_INT8_AVX2,        /* u8*s8 dot products, maddubs + madd, 256-bit */
    TL_UNIT_INT8_AVXVNNI,     /* vpdpbusd, 256-bit */
    TL_UNIT_INT8_AVX512VNNI,  /* vpdpbusd, 512-bit */
    TL_UNIT_BF16_AVX512,      /* vdpbf16ps, 512-bit */
    TL_UNIT_COUNT
} tl_probe_unit;
const char *tl_probe_unit_name(tl_probe_unit u);
/* 1 when this build has the unit's loop and this CPU the instructions (and the
 * TIERLLM_ISA cap allows them). */
int tl_probe_unit_present(tl_probe_unit u);
/* Independent chains of the unit's instruction on every pool thread; the median
 * operations per second, 0 when the unit is not present. */
double tl_probe_unit_peak(tl_pool *pool, tl_probe_unit u, int reps);
/* The f32 FMA peak of the widest unit present (512-bit where this CPU has it). */
double tl_probe_fma_peak(tl_pool *pool, int reps);

/* x86 inner loops (kernels/x86*_probe.c): `iters` steps of 12 chains, a result to sink. */
float tl_probe_read_kernel(const float *p, size_t n);
float tl_probe_fma_kernel(size_t iters, float seed);
float tl__probe_int8_avx2_kernel(size_t iters, float seed);
float tl__probe_int8_vnni256_kernel(size_t iters, float seed);
float tl__probe_fma512_kernel(size_t iters, float seed);
float tl__probe_int8_512_kernel(size_t iters, float seed);
float tl__probe_bf16_512_kernel(size_t iters, float seed);

#endif
