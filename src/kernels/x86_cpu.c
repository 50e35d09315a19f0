/* x86_cpu.c - what the x86 kernels ask of the CPU at run time, each read once with
 * cpuid and cached (cpuid traps to the hypervisor in a VM): the matvec prefetch distance
 * (by vendor) and which integer dot-product sets (AVX-VNNI, AVX-512 VNNI) may be used, up
 * to the cap the environment may set (TIERLLM_ISA).
 */
#include <cpuid.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/x86_matmul.h"
#include "kernels/x86_simd.h"

/* The matvec prefetch distance (x86_simd.h says why it differs by vendor): 3072 bytes on
 * Intel cores, 8192 elsewhere. CPUID leaf 0's vendor string, cached. */
size_t tl__prefetch_distance(void) {
    static _Atomic size_t cached = 0; /* a CPU property: racing first calls agree */
    size_t v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v == 0) {
        unsigned a = 0, b = 0, c = 0, d = 0;
        int intel = __get_cpuid(0, &a, &b, &c, &d) && b == 0x756e6547u /* "Genu" */ &&
                    d == 0x49656e69u /* "ineI" */ && c == 0x6c65746eu /* "ntel" */;
        v = intel ? 3072 : 8192;
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
}

tl__isa tl__cpu_isa_cap(void) {
    static _Atomic int cached = -1; /* the environment is read once: racing calls agree */
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv("TIERLLM_ISA");
        v = TL_ISA_AVX512VNNI;
        if (e && !strcmp(e, "avx2")) v = TL_ISA_AVX2;
        else if (e && !strcmp(e, "avxvnni")) v = TL_ISA_AVXVNNI;
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return (tl__isa)v;
}

/* AVX-VNNI is used when the compiler could build it and this CPU has it: CPUID leaf 7
 * sub-leaf 1, EAX bit 4 (read with cpuid.h: clang 14's __builtin_cpu_supports does not
 * know "avxvnni"). Cached: cpuid traps to the hypervisor in a VM. */
int tl__cpu_has_avxvnni(void) {
#ifdef TL_HAVE_AVXVNNI
    static _Atomic int cached = -1; /* a CPU property: racing first calls agree */
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        unsigned a = 0, b = 0, c = 0, d = 0;
        v = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1u);
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v && tl__cpu_isa_cap() >= TL_ISA_AVXVNNI;
#else
    return 0;
#endif
}

/* AVX-512 VNNI: CPUID leaf 7 sub-leaf 0, EBX bits 16 (F) and 30 (BW), ECX bit 11 (VNNI);
 * and the OS must save the opmask and 512-bit register state: OSXSAVE (leaf 1 ECX bit 27)
 * and XCR0 bits 1, 2, 5, 6, 7. Cached. */
int tl__cpu_has_avx512vnni(void) {
#ifdef TL_HAVE_AVX512VNNI
    static _Atomic int cached = -1; /* a CPU property: racing first calls agree */
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        unsigned a = 0, b = 0, c = 0, d = 0;
        v = __get_cpuid(1, &a, &b, &c, &d) && (c >> 27 & 1u);
        if (v) {
            unsigned lo, hi;
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            v = (lo & 0xe6u) == 0xe6u;
        }
        v = v && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b >> 16 & 1u) && (b >> 30 & 1u) &&
            (c >> 11 & 1u);
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v && tl__cpu_isa_cap() >= TL_ISA_AVX512VNNI;
#else
    return 0;
#endif
}
