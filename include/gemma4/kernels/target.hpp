// Compiling a stretch of code for one instruction-set level, whatever the program's -m flags:
//
//   GEMMA4_TARGET_AVX512_BEGIN
//   namespace gemma4::kernels::avx512 { ... }
//   GEMMA4_TARGET_END
//
// Every function defined in between (templates and lambdas included) carries the level's
// target attribute, so the intrinsics of that level inline into it; it runs only after
// kernels/cpu.hpp has found the level on the CPU. Code of each level lives in a namespace of
// its own, so an inline function never has two bodies for two sets of flags (the one-definition
// rule holds in programs whose translation units are built with different -march).
//
// Inside those regions, a loop of fixed small count over an array of vector registers carries
// `#pragma GCC unroll N`. Whether GCC 12 unrolls such a loop depends on the optimisation level
// (the library is compiled with its users' flags), and a rolled loop indexes its array, so the
// array lives on the stack: at -O2 the bf16 tiles ran at half speed and the Q8/Q4 pass stored
// and reloaded its 8 weight vectors every block; at -O3 attention's score and value passes kept
// their accumulators on the stack (docs/perf-log/, "Register loops unrolled"). A loop to a
// run-time bound below the fixed count is written as the fixed count with a guard.
#pragma once

#include <immintrin.h>

#define GEMMA4_DETAIL_ISA_AVX2 "avx,avx2,fma,f16c,bmi,bmi2,popcnt"
#define GEMMA4_DETAIL_ISA_AVXVNNI "avx,avx2,fma,f16c,bmi,bmi2,popcnt,avxvnni"
#define GEMMA4_DETAIL_ISA_AVX512 "avx,avx2,fma,f16c,bmi,bmi2,popcnt,avx512f,avx512bw,avx512vl,avx512dq,avx512cd,avx512vnni"
#define GEMMA4_DETAIL_ISA_AMX "avx,avx2,fma,f16c,bmi,bmi2,popcnt,avx512f,avx512bw,avx512vl,avx512dq,avx512cd,avx512vnni,amx-tile,amx-int8"

#if defined(__clang__)
#define GEMMA4_DETAIL_TARGET_BEGIN(isa) \
    _Pragma(GEMMA4_DETAIL_STR(clang attribute push(__attribute__((target(isa))), apply_to = function)))
#define GEMMA4_TARGET_END _Pragma("clang attribute pop")
#elif defined(__GNUC__)
#define GEMMA4_DETAIL_TARGET_BEGIN(isa) _Pragma("GCC push_options") _Pragma(GEMMA4_DETAIL_STR(GCC target(isa)))
#define GEMMA4_TARGET_END _Pragma("GCC pop_options")
#else
#error "gemma4 needs GCC or Clang (function target attributes)"
#endif
#define GEMMA4_DETAIL_STR(x) #x

/// AVX2 + FMA + F16C (Haswell, Zen 1 and later).
#define GEMMA4_TARGET_AVX2_BEGIN GEMMA4_DETAIL_TARGET_BEGIN(GEMMA4_DETAIL_ISA_AVX2)
/// AVX2 with AVX-VNNI (Alder Lake, Sapphire Rapids, Zen 5): vpdpbusd on ymm.
#define GEMMA4_TARGET_AVXVNNI_BEGIN GEMMA4_DETAIL_TARGET_BEGIN(GEMMA4_DETAIL_ISA_AVXVNNI)
/// AVX-512 F/BW/VL/DQ/CD + VNNI (Ice Lake, Sapphire Rapids, Zen 4 and later).
#define GEMMA4_TARGET_AVX512_BEGIN GEMMA4_DETAIL_TARGET_BEGIN(GEMMA4_DETAIL_ISA_AVX512)
/// AVX-512 VNNI + AMX tiles (Sapphire Rapids and later).
#define GEMMA4_TARGET_AMX_BEGIN GEMMA4_DETAIL_TARGET_BEGIN(GEMMA4_DETAIL_ISA_AMX)

// Compiling the quantized kernels once per program. Header-only by default: each translation
// unit that runs a model compiles the Q8/Q4 passes of every level, about 14 s of g++ -O2 apiece.
// A program of several such translation units can compile them once instead: define
// GEMMA4_SEPARATE_KERNELS in all of them, and GEMMA4_KERNELS_IMPLEMENTATION as well in exactly
// one, which includes <gemma4/gemma4.hpp> (or kernels/linear_quant.hpp). The others then see
// each level's entry point (its `panels`) declared only. All of them must be built with the same
// -m flags: the entry points live in the ABI namespace of those flags (abi.hpp), so a mismatch
// is an undefined symbol at link time. In CMake, gemma4_separate_kernels(target) does all this.
#if defined(GEMMA4_SEPARATE_KERNELS)
#define GEMMA4_KERNEL_ENTRY
#if defined(GEMMA4_KERNELS_IMPLEMENTATION)
#define GEMMA4_KERNEL_BODIES 1
#else
#define GEMMA4_KERNEL_BODIES 0
#endif
#else
#define GEMMA4_KERNEL_ENTRY inline
#define GEMMA4_KERNEL_BODIES 1
#endif
