/* neuron_window.c - the neuron window's slots (neurons.h): lookup, and least-recently-used
 * replacement in one pass over a layer's slots. */
#include "model/neurons.h"

#include <string.h>

#define AGES 256 /* ages from 1 to AGES - 1 apart; older ones share the last bucket */

static uint64_t up64(uint64_t x) { return (x + 63) & ~(uint64_t)63; }

double tl_neuron_window_hit(const tl_neuron_info *ni, int32_t k, uint32_t slots, int32_t n_ff) {
    if (k <= 0 || ni->window_k <= 0) return 0;
    int32_t held = k < ni->window_k ? k : ni->window_k;
    while (held < ni->window_k && ni->window_mean[held] * (double)n_ff <= (double)slots) held++;
    return ni->window_hit[held - 1];
}

uint64_t tl_neuron_window_bytes(int32_t n_layer, uint32_t n_ff, uint32_t capacity,
                                size_t run_bytes) {
    const uint64_t L = (uint64_t)n_layer, C = capacity;
    return up64(L * C * run_bytes) + up64(L * n_ff * sizeof(int32_t)) +
           up64(L * C * sizeof(int32_t)) + up64(L * C * sizeof(uint32_t)) +
           up64(L * sizeof(uint32_t));
}

void tl_neuron_window_init(tl_neuron_window *w, void *block, int32_t n_layer, uint32_t n_ff,
                           uint32_t capacity, size_t run_bytes, int32_t k) {
    const uint64_t L = (uint64_t)n_layer, C = capacity;
    uint8_t *b = block;
    memset(w, 0, sizeof *w);
    w->n_layer = n_layer, w->k = k, w->capacity = capacity, w->n_ff = n_ff;
    w->run_bytes = run_bytes;
    w->slots = b;
    b += up64(L * C * run_bytes);
    w->slot_of = (int32_t *)(void *)b;
    b += up64(L * n_ff * sizeof(int32_t));
    w->neuron_of = (int32_t *)(void *)b;
    b += up64(L * C * sizeof(int32_t));
    w->last_used = (uint32_t *)(void *)b;
    b += up64(L * C * sizeof(uint32_t));
    w->step = (uint32_t *)(void *)b;
    memset(w->slot_of, 0xff, L * n_ff * sizeof(int32_t));
    memset(w->neuron_of, 0xff, L * C * sizeof(int32_t));
    memset(w->last_used, 0, L * C * sizeof(uint32_t));
    memset(w->step, 0, L * sizeof(uint32_t));
}

void tl_neuron_window_lookup(tl_neuron_window *w, int32_t l, const int32_t *chan, size_t n,
                             int32_t *slot, int32_t *miss, size_t *n_miss, int count) {
    int32_t *slot_of = w->slot_of + (size_t)l * w->n_ff;
    uint32_t *last = w->last_used + (size_t)l * w->capacity;
    const uint32_t now = ++w->step[l];
    size_t m = 0;
    for (size_t t = 0; t < n; t++) {
        const int32_t s = slot_of[chan[t]];
        slot[t] = s;
        if (s >= 0) last[s] = now;
        else miss[m++] = (int32_t)t;
    }
    if (count) {
        w->lookups += n;
        w->hits += n - m;
    }
    *n_miss = m;
}

void tl_neuron_window_fill(tl_neuron_window *w, int32_t l, const int32_t *chan, int32_t *slot,
                           const int32_t *miss, size_t n_miss, const uint8_t *base,
                           size_t src_run_bytes) {
    const uint32_t C = w->capacity, now = w->step[l];
    int32_t *slot_of = w->slot_of + (size_t)l * w->n_ff;
    int32_t *neuron_of = w->neuron_of + (size_t)l * C;
    uint32_t *last = w->last_used + (size_t)l * C;
    uint8_t *slots = tl_neuron_window_slots(w, l);
    /* the oldest slots not used now: count them by age, find the age from which on the
     * older ones are enough, take every older one and the youngest bucket's first */
    uint32_t count[AGES + 1] = {0};
    for (uint32_t s = 0; s < C; s++) {
        if (last[s] == now && neuron_of[s] >= 0) continue;
        const uint32_t age = neuron_of[s] < 0 ? AGES : now - last[s] < AGES ? now - last[s]
                                                                              : AGES - 1;
        count[age]++;
    }
    uint32_t from = AGES + 1, have = 0;
    while (from > 1 && have < n_miss) have += count[--from];
    uint32_t extra = (uint32_t)(have - (have >= n_miss ? n_miss : have)); /* spare at `from` */
    size_t t = 0;
    for (uint32_t s = 0; s < C && t < n_miss; s++) {
        if (last[s] == now && neuron_of[s] >= 0) continue;
        const uint32_t age = neuron_of[s] < 0 ? AGES : now - last[s] < AGES ? now - last[s]
                                                                              : AGES - 1;
        if (age < from) continue;
        if (age == from && extra) { /* this bucket has more than needed: skip its first */
            extra--;
            continue;
        }
        if (neuron_of[s] >= 0) slot_of[neuron_of[s]] = -1;
        const int32_t i = chan[miss[t]];
        neuron_of[s] = i;
        slot_of[i] = (int32_t)s;
        last[s] = now;
        slot[miss[t]] = (int32_t)s;
        memcpy(slots + (size_t)s * w->run_bytes, base + (size_t)i * src_run_bytes,
               src_run_bytes < w->run_bytes ? src_run_bytes : w->run_bytes);
        t++;
    }
}
