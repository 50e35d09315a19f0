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

/* A CPU property read once with `read` and cached in *cache (-1: not yet read): cpuid
 * traps to the hypervisor in a VM. Racing first calls agree, so relaxed order is enough. */
static int cached(_Atomic int *cache, int (*read)(void)) {
    int v = atomic_load_explicit(cache, memory_order_relaxed);
    if (v < 0) {
        v = read();
        atomic_store_explicit(cache, v, memory_order_relaxed);
    }
    return v;
}

/* The matvec prefetch distance (x86_simd.h says why it differs by vendor): 3072 bytes on
 * Intel cores, 8192 elsewhere, by CPUID leaf 0's vendor string. */
static int read_prefetch_distance(void) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    int intel = __get_cpuid(0, &a, &b, &c, &d) && b == 0x756e6547u /* "Genu" */ &&
                d == 0x49656e69u /* "ineI" */ && c == 0x6c65746eu /* "ntel" */;
    return intel ? 3072 : 8192;
}

size_t tl__prefetch_distance(void) {
    static _Atomic int cache = -1;
    return (size_t)cached(&cache, read_prefetch_distance);
}

static int read_isa_cap(void) {
    const char *e = getenv("TIERLLM_ISA");
    if (e && !strcmp(e, "avx2")) return TL_ISA_AVX2;
    if (e && !strcmp(e, "avxvnni")) return TL_ISA_AVXVNNI;
    return TL_ISA_AVX512VNNI;
}

tl__isa tl__cpu_isa_cap(void) {
    static _Atomic int cache = -1;
    return (tl__isa)cached(&cache, read_isa_cap);
}

/* CPUID leaf 7 sub-leaf 1, EAX bit `bit` (read with cpuid.h: clang 14's
 * __builtin_cpu_supports does not know "avxvnni"). */
static int leaf7_1_eax(int bit) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> bit & 1u);
}
static int read_avxvnni(void) { return leaf7_1_eax(4); }
static int read_avx512bf16(void) { return leaf7_1_eax(5); }

/* AVX-512 F, BW and VNNI: CPUID leaf 7 sub-leaf 0, EBX bits 16 and 30, ECX bit 11; and the
 * OS must save the opmask and 512-bit register state: OSXSAVE (leaf 1 ECX bit 27) and XCR0
 * bits 1, 2, 5, 6, 7. */
static int read_avx512vnni(void) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1u)) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0xe6u) != 0xe6u) return 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b >> 16 & 1u) && (b >> 30 & 1u) &&
           (c >> 11 & 1u);
}

/* Each set is used when the compiler could build its kernels, this CPU has it and the
 * cap allows it. */
int tl__cpu_has_avxvnni(void) {
#ifdef TL_HAVE_AVXVNNI
    static _Atomic int cache = -1;
    return cached(&cache, read_avxvnni) && tl__cpu_isa_cap() >= TL_ISA_AVXVNNI;
#else
    return 0;
#endif
}

int tl__cpu_has_avx512vnni(void) {
#ifdef TL_HAVE_AVX512VNNI
    static _Atomic int cache = -1;
    return cached(&cache, read_avx512vnni) && tl__cpu_isa_cap() >= TL_ISA_AVX512VNNI;
#else
    return 0;
#endif
}

tl__isa tl__cpu_widest_isa(void) {
    return tl__cpu_has_avx512vnni() ? TL_ISA_AVX512VNNI
           : tl__cpu_has_avxvnni()  ? TL_ISA_AVXVNNI
                                    : TL_ISA_AVX2;
}

int tl__cpu_has_avx512bf16(void) {
#ifdef TL_HAVE_AVX512VNNI
    static _Atomic int cache = -1;
    return cached(&cache, read_avx512bf16) && tl__cpu_has_avx512vnni();
#else
    return 0;
#endif
}
