/* profile.h - the hardware profile: what this machine's disk, memory and kernels
 * achieve, measured once (`tierllm profile`) and saved as JSON under
 * the user's cache directory ($XDG_CACHE_HOME/tierllm or ~/.cache/tierllm). The cost
 * model (cost.h) reads every rate it uses from here; nothing in it is a constant fitted
 * by hand.
 *
 * A saved profile is re-used while the machine is the same: `machine` is a key made of
 * the CPU model name, the number of online CPUs, MemTotal and the thread count the
 * profile was measured with. A profile whose key differs is stale.
 *
 * Units: bytes per second, seconds, and for kernels "MACs per second" (one MAC = one
 * weight element times one row; a matrix-vector product of an R x C matrix is R*C MACs,
 * n rows are n*R*C MACs).
 */
#ifndef TL_PLAN_PROFILE_H
#define TL_PLAN_PROFILE_H

#include <stdint.h>
#include "tierllm.h"
#include "format/tensor_type.h"
#include "tier/tier.h"

enum {
    TL_PROF_N_CHUNK = 4,  /* disk grid: chunk sizes 64 KiB, 256 KiB, 1 MiB, 4 MiB */
    TL_PROF_N_DEPTH = 3,  /*            queue depths 1, 4, 16 */
    TL_PROF_N_TYPE = TL_N_TYPES, /* kernel types, in tl_type_table's order */
    TL_PROF_N_ROWS = 10,  /* rows per matmul: 1, 2, 4, ..., 512 */
    TL_PROF_N_KVBITS = 4, /* KV storage: 32, 16, 8, 4 bits */
    TL_PROF_GQA_GROUP = 4 /* query heads per kv head of the grouped attention figures */
};

#define TL_PROF_N_SPREAD 9 /* the disk calibration's samples at most */
#define TL_PROF_URGENT_BYTES ((uint64_t)32 << 10) /* the urgent read's size (a KV page) */
#define TL_PROF_DISK_FILE_BYTES ((uint64_t)256 << 20) /* the profile's scratch file */
extern const uint64_t tl_prof_chunks[TL_PROF_N_CHUNK];
extern const int32_t tl_prof_depths[TL_PROF_N_DEPTH];
extern const int32_t tl_prof_rows[TL_PROF_N_ROWS];
extern const int32_t tl_prof_kvbits[TL_PROF_N_KVBITS];

typedef struct tl_hw_profile {
    char machine[256];      /* key: "cpu=<model>;ncpu=<n>;mem=<MemTotal kB>;threads=<t>" */
    char disk_dir[512];     /* directory whose filesystem the disk figures describe */
    int32_t n_threads;      /* compute threads the kernel rates were measured with */
    double measured_unix;   /* when it was measured (seconds since the epoch) */
    double profile_seconds; /* how long measuring took */

    /* memory and compute bounds (kernels/probe.h) */
    double mem_read_bps;
    double fma_flops;

    /* O_DIRECT reads of a file on disk_dir's filesystem, [chunk][depth] */
    double disk_read_bps[TL_PROF_N_CHUNK][TL_PROF_N_DEPTH];
    double disk_write_bps;  /* O_DIRECT sequential writes, 1 MiB chunks, depth 4 */
    /* seconds for an urgent read of TL_PROF_URGENT_BYTES (a KV page) while the IO queue's
     * default chunks stream at its default depth and every core computes (mostly waiting
     * for the device to serve the chunks already in flight), and the seconds each further
     * page read with it adds (from batches of TL__PROF_URGENT_BATCH); lower quartiles of
     * the samples (profile_interference.c) */
    double disk_urgent_read_s, disk_urgent_page_s;

    /* tl_op_matmul through the thread pool: MACs/s by [type][rows] on matrices larger
     * than the last-level cache (cycled so each call streams its weights from DRAM) */
    double matmul_macs[TL_PROF_N_TYPE][TL_PROF_N_ROWS];
    /* and the fixed seconds of each call (thread dispatch, chunking, preparing X), from
     * a second, smaller matrix: a call of M MACs costs matmul_call_s + M / matmul_macs */
    double matmul_call_s[TL_PROF_N_TYPE][TL_PROF_N_ROWS];
    /* bytes/s of repacking a type's weights into 32-row panels over the pool (kernels.h;
     * streamed weights pay it on arrival, each pass); 0 where this CPU keeps the type in
     * the file's layout. The rates above are for the layout the engine computes in. */
    double repack_bps[TL_PROF_N_TYPE];

    /* attention: seconds per (row x visible position x query head x head_dim) with f32
     * KV, and seconds per K or V element decoded from a stored page, by KV bits (0 for
     * 32 bits; each kv head's job decodes its columns of a page, K and V, once a block) */
    double attn_s_per_mac;
    double attn_decode_s[TL_PROF_N_KVBITS];
    /* the same per-MAC seconds when TL_ATTN_BLOCK_MAX_ROWS rows of one sequence (a prompt
     * chunk) share each position's K and V reads (llama.h): lower, as the reads are
     * amortized over the block. The cost model splits a row's cost into a part every row
     * pays and a part the block shares, from these two points. */
    double attn_block_s_per_mac;
    /* the same two figures on a model whose query heads share each kv head in groups of
     * TL_PROF_GQA_GROUP: one kv head's job computes its whole group from one view of each
     * page, so the group shares the page's reads and the job's fixed work. The cost model
     * takes a group of g as c(g) = c(1) + (c(G) - c(1)) (1 - 1/g) / (1 - 1/G). */
    double attn_gqa_s_per_mac;
    double attn_gqa_block_s_per_mac;
    /* attention whose KV outgrows the caches: the figures above are measured with about
     * attn_cache_bytes of KV read per token, in the caches; a token of a deep model whose
     * attention reads attn_mem_bytes of KV pays attn_mem_s_per_byte more per byte read.
     * The cost model scales that extra linearly in the KV bytes a pass reads, from none at
     * attn_cache_bytes to all of it at attn_mem_bytes, flat beyond. */
    double attn_cache_bytes, attn_mem_bytes, attn_mem_s_per_byte;

    /* element-wise work of a layer (rmsnorm, rope, swiglu, residual adds), seconds per
     * element of one row (the cost model counts 4*n_embd + 3*n_ff elements per row) */
    double elementwise_s;
    /* storing KV: seconds per value stored (2 * kv_dim per row per layer) in each
     * format, appended to open pages and each full page stored, into memory never
     * touched before (tl_prof_kvbits) */
    double kv_store_s[TL_PROF_N_KVBITS];
    /* fixed cost of one forward pass per layer (thread-pool dispatches, bookkeeping) */
    double layer_fixed_s;
    /* compute time while the disk streams at full speed / compute time alone (>= 1):
     * DMA and interrupts take memory bandwidth and cycles from the kernels. Measured on
     * matrix products of 128 rows (compute-bound, as prefill's) and of 1 and 4 rows
     * (memory-bound, hit harder), on weights laid out as the engine keeps them:
     * io_slowdown_matvec applies to products of at most 4 rows; io_slowdown_attn to
     * attention (measured on a block of rows over K and V beyond the caches) */
    double io_compute_slowdown;
    double io_slowdown_matvec;
    double io_slowdown_attn;
    /* the rate the profile's own file streamed at while those were measured (0: not
     * known, the disk grid's figure at the engine's chunk and depth stands in) */
    double io_stream_bps;
    /* not saved, 0 in a loaded profile: set by the disk calibration (plan/calibrate.h)
     * when the token embedding is read from the model file (small reads, one per row),
     * the median seconds of one row's read, and of a full group of rows read together
     * (tl_weight_embd_read_rows, model/placement.h); 0 prices them from the disk grid */
    double embd_row_s, embd_group_s;
    /* not saved, 0 in a loaded profile: set by the disk calibration (plan/calibrate.h)
     * for a model whose streamed units pass through the ring: the seconds each streamed
     * unit's read takes beyond the ring's overlap when the cores compute while it is in
     * flight (the IO thread waiting for a core to retire and issue reads) */
    double ring_unit_delay_s;
    /* not saved, none in a loaded profile: set by the disk calibration, the rate of each
     * of its samples over their median (the stream's figures were scaled to the median):
     * the cost model prices a run as the mean of its times at these rates, since a pass
     * slower than the median costs more than a faster one saves */
    double disk_spread[TL_PROF_N_SPREAD];
    int32_t n_disk_spread;
    /* not saved, 0 in a loaded profile (taken as 1): set by the disk calibration, the
     * model file's stream rate over io_stream_bps (tl_plan_calibrate_disk).
     * What the IO takes from compute is taken per byte read (the IO thread, the
     * interrupts, the host's copy into memory), so io_compute_slowdown's excess over 1,
     * measured while the profile's own file streamed, grows by this factor (within
     * [1/4, 4]) beside a stream this much faster (tl_cost_pass_compute) */
    double io_rate_scale;
    /* not saved, 0 in a loaded profile: set by tl_plan_calibrate_products for a plan that
     * streams weights through the ring, the first layer's forward over many rows timed
     * while the model file streams, over the same alone (tl__calibrate_stream_slowdown):
     * where it is set, it is io_compute_slowdown for this model, and io_rate_scale's
     * extrapolation is not used */
    double io_slowdown_stream;
    double io_stream_cal_bps; /* the rate that stream read at (0: not measured) */
    /* not saved, 0 in a loaded profile: set with io_slowdown_stream, the seconds of that
     * forward lost per byte the stream read (tl__calibrate_stream_slowdown). Where it is
     * set, a pass that reads B bytes in I seconds slows its compute by 1 + it x B / I
     * (tl_cost_walk): the IO's copies and interrupts take the cores' time per byte, so a
     * pass's loss follows its own bytes, not the calibration's rate */
    double io_stream_s_per_byte;
    /* not saved, 0 in a loaded profile (taken as 1): set by tl_plan_calibrate_products,
     * a layer's forward over tl_prof_rows[k] rows measured against the cost model's price
     * of it, attention aside: the products, element-wise work, KV store and fixed cost of
     * a micro-batch of that many rows (over 4) are priced times this factor, a count
     * between the grid's points taking the lower point's */
    double layer_row_scale[TL_PROF_N_ROWS];
    /* not saved: the same from each row count's lowest round, not its median (what the
     * calibration kept before; for the benchmarks' comparison, unused by the cost model) */
    double layer_row_scale_lowest[TL_PROF_N_ROWS];
    /* not saved, 0 in a loaded profile (taken as 1): set by tl_plan_calibrate_attention,
     * the model's own attention over a long context in blocks, measured against the cost
     * model's price of it: both block figures (attn_block_s_per_mac and its grouped-query
     * twin) are priced times this factor */
    double attn_block_scale;
} tl_hw_profile;

/* The machine key of this machine for `n_threads` compute threads. */
void tl_profile_machine_key(int32_t n_threads, char *out, size_t cap);

/* Where profiles are kept: "$XDG_CACHE_HOME/tierllm/profile-t<threads>.json" or
 * "$HOME/.cache/tierllm/profile-t<threads>.json". TL_ERR_INVALID if neither variable is
 * set. */
tl_status tl_profile_default_path(int32_t n_threads, char *out, size_t cap);

/* Measures everything: `n_threads` compute threads
 * (<= 0: all cores); the disk figures use a temporary file in disk_dir (deleted before
 * returning; TL_ERR_NOSPACE/TL_ERR_IO with a message if it cannot be written; NULL:
 * the default path's directory, created, else ".").
 * The memory it allocates at once stays within `mem_limit` bytes (0: no limit; the
 * memory probe's buffer shrinks to fit); a limit under tl_profile_measure_bytes is
 * refused with TL_ERR_NOMEM before anything is measured.
 * `progress` (may be NULL) gets one line per stage. */
tl_status tl_profile_measure(int32_t n_threads, const char *disk_dir, uint64_t mem_limit,
                             void (*progress)(void *user, const char *line), void *user,
                             tl_hw_profile *out);
/* The least memory limit a measurement with `n_threads` (<= 0: all cores) works in: its
 * largest stage, beyond the process's own code and stacks. */
uint64_t tl_profile_measure_bytes(int32_t n_threads);

/* JSON round trip. Save writes through base/out_file.h (a temporary file renamed into
 * place, creating the directory); a target that exists and is not a regular file is
 * refused with TL_ERR_INVALID. Load fails with TL_ERR_FORMAT naming the field for a
 * malformed or incomplete file, and never crashes on hostile input. */
tl_status tl_profile_save(const tl_hw_profile *p, const char *path);
/* What save checks before writing, to ask before a long measurement: creates the
 * directory and checks the target (tl_out_check_target). */
tl_status tl_profile_check_path(const char *path);
tl_status tl_profile_load(const char *path, tl_hw_profile *out);

/* The profile a run should use: `path` if given (an error if it cannot be loaded),
 * else the default path's profile if its machine key matches this machine; otherwise
 * measures one within `mem_limit` (0: no limit; progress says so) and saves it at the
 * default path (a failure to save is not an error). A limit too small to measure in is
 * refused before measuring (TL_ERR_NOMEM; the message says how much it needs and to run
 * `tierllm profile` first). *measured is set to 1 when it measured. */
tl_status tl_profile_obtain(const char *path, int32_t n_threads, const char *disk_dir,
                            uint64_t mem_limit,
                            void (*progress)(void *user, const char *line), void *user,
                            tl_hw_profile *out, int *measured);

/* A scratch file (no name: it cannot outlive the process) of `bytes` written with
 * O_DIRECT in dir from buf, `step` bytes (buf's size) at a time, then synced to the
 * device; *out the open file, or NULL with the error returned. */
tl_status tl_profile_write_scratch(const char *dir, uint64_t bytes, const uint8_t *buf,
                                   uint64_t step, tl_tier **out);

/* The disk of this minute: reads a 256 MiB scratch file in `dir` (written first, with no
 * name, so nothing is left behind) in `chunk`-byte requests at random chunk-aligned
 * offsets (as KV pages lie in a spill file), `depth` in flight, for about a second, and
 * scales the profile's whole read grid so that its rate at (chunk, depth) is the one just
 * measured (*bps, may be NULL). A virtual disk's rate drifts by the minute; a prediction
 * compared with a measurement should use the disk of the same run. */
tl_status tl_profile_reanchor_disk(tl_hw_profile *p, const char *dir, uint64_t chunk,
                                   int32_t depth, double *bps);
/* The measuring half of it, for any caller: writes file_bytes (rounded down to chunks) of
 * buf, chunk x depth bytes a write, to a scratch file in dir (no name: nothing outlives the
 * call) and syncs it, then times `chunk`-byte reads at random chunk-aligned offsets, `depth` in
 * flight, for about `seconds`, into buf: *bps, the rate. buf holds chunk x depth bytes,
 * aligned to TL_TIER_MAX_ALIGN (O_DIRECT); chunk a multiple of it, depth 1-64 and
 * file_bytes at least one chunk, else TL_ERR_INVALID. */
tl_status tl_profile_time_dir_reads(const char *dir, uint64_t file_bytes, uint64_t chunk,
                                    int32_t depth, uint8_t *buf, double seconds, double *bps);

/* Scales the profile's read grid so that its rate at (chunk, depth) is bps (a rate
 * measured now: tl_profile_reanchor_disk, or tl_kv_time_disk_reads on a spill file). */
tl_status tl_profile_set_read_bps(tl_hw_profile *p, uint64_t chunk, int32_t depth, double bps);

/* Multiplies the read grid's rates by f: those of requests of at least `chunk` bytes (the
 * engine's stream, which a calibration on the model file measures) when `streams`, else
 * those of smaller requests (KV pages, which a calibration of page reads measures). */
void tl_profile_scale_reads(tl_hw_profile *p, uint64_t chunk, int streams, double f);

/* Lookups used by the cost model (pure functions of the profile):
 * read bandwidth for requests of `chunk` bytes at `depth` in flight (log-linear
 * interpolation over the grid, clamped at its edges); the matmul rate of a type at n
 * rows (log-linear in n, clamped; types not in the table use F32's). */
double tl_profile_read_bps(const tl_hw_profile *p, uint64_t chunk, int32_t depth);
double tl_profile_matmul_macs(const tl_hw_profile *p, int32_t type, double rows);
double tl_profile_matmul_call_s(const tl_hw_profile *p, int32_t type, double rows);

/* Corrections by a measured / predicted time ratio (re-planning): every disk read figure
 * (a ratio of 2: reads took twice as long), or every compute figure (product rates and
 * per-call costs, attention, elementwise and fixed costs). */
void tl_profile_scale_disk(tl_hw_profile *p, double time_ratio);
void tl_profile_scale_compute(tl_hw_profile *p, double time_ratio);

/* Internal, shared by profile.c and the measurement (profile_*.c): the thread count n_threads
 * stands for (<= 0: online CPUs); the default disk directory (the default profile's
 * directory, created, else "."); one progress line (progress may be NULL). */
int32_t tl__profile_threads(int32_t n_threads);
void tl__profile_default_dir(int32_t n_threads, char *out, size_t cap);
void tl__profile_say(void (*progress)(void *user, const char *line), void *user,
                     const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
