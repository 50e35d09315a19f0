/* x86_probe_chains.h - twelve independent dependency chains in named registers, the shape
 * of every peak-probe inner loop (x86*_probe.c): enough chains to hide an instruction's
 * latency on two ports. CHAINS declares a0..a11 from init(k); STEP12 applies op to each;
 * SUM12 reduces them with add; PROBE_CHAINS is the three in order.
 */
#ifndef TL_KERNELS_X86_PROBE_CHAINS_H
#define TL_KERNELS_X86_PROBE_CHAINS_H

#define CHAINS(T, init) T a0 = init(0), a1 = init(1), a2 = init(2), a3 = init(3), a4 = init(4), \
    a5 = init(5), a6 = init(6), a7 = init(7), a8 = init(8), a9 = init(9), a10 = init(10),      \
    a11 = init(11)
#define STEP12(op) a0 = op(a0); a1 = op(a1); a2 = op(a2); a3 = op(a3); a4 = op(a4);        \
    a5 = op(a5); a6 = op(a6); a7 = op(a7); a8 = op(a8); a9 = op(a9); a10 = op(a10);           \
    a11 = op(a11)
#define SUM12(add) add(add(add(add(a0, a1), add(a2, a3)), add(add(a4, a5), add(a6, a7))), \
                       add(add(a8, a9), add(a10, a11)))
/* A probe kernel's body: the chains, `iters` steps, their sum into out (a T). */
#define PROBE_CHAINS(T, init, op, add, iters, out)                                        \
    do {                                                                                 \
        CHAINS(T, init);                                                                 \
        for (size_t i_ = 0; i_ < (iters); i_++) { STEP12(op); }                          \
        out = SUM12(add);                                                                \
    } while (0)

#endif
