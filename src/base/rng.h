/* rng.h - the tree's random numbers, one implementation of each kind.
 *
 * SplitMix64 (Steele, Lea and Flood, 2014) is used three ways: tl_mix64 is its output
 * function, a good 64-bit mixer of any counter or key (synthetic weights hash their
 * position with it); tl_splitmix64 steps a 64-bit state through it (measurement data);
 * and it seeds xoshiro256** (Blackman and Vigna), the sampler's generator, whose 256-bit
 * state has no short cycles from any seed. Everything is deterministic: the same seed gives
 * the same numbers on every machine, which seeded generation and the tests rely on.
 */
#ifndef TL_BASE_RNG_H
#define TL_BASE_RNG_H

#include <stdint.h>

static inline uint64_t tl_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The next number of the SplitMix64 sequence whose state is *s. */
static inline uint64_t tl_splitmix64(uint64_t *s) {
    return tl_mix64(*s += 0x9E3779B97F4A7C15ull);
}

/* Uniform in [-1, 1) from the SplitMix64 state *s. */
static inline float tl_rand_sym(uint64_t *s) {
    return (float)((double)(tl_splitmix64(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* xoshiro256**: seeds the four words from `seed` through SplitMix64, then steps. */
static inline void tl_xoshiro_seed(uint64_t st[4], uint64_t seed) {
    for (int i = 0; i < 4; i++) st[i] = tl_splitmix64(&seed);
}

static inline uint64_t tl__rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t tl_xoshiro_next(uint64_t st[4]) {
    const uint64_t r = tl__rotl(st[1] * 5, 7) * 9, t = st[1] << 17;
    st[2] ^= st[0];
    st[3] ^= st[1];
    st[1] ^= st[2];
    st[0] ^= st[3];
    st[2] ^= t;
    st[3] = tl__rotl(st[3], 45);
    return r;
}

#endif
