// The inline namespace every gemma4 declaration lives in, named after the instruction sets the
// including translation unit is compiled for (nlohmann/json names its ABI namespace the same
// way). The library is header-only, so its inline functions are compiled once per translation
// unit, and code from plain loops and from xsimd (at the build's own architecture) changes with
// -march. Without distinct names, the linker would keep one body of each such function for the
// whole program, and a part built for a baseline CPU could end up running another part's
// AVX-512 code. With them, translation units built with different flags each keep their own
// code, and passing gemma4 objects between them fails at link time instead of at run time.
// The kernels that the process picks at run time (kernels/cpu.hpp) are the same in each.
#pragma once

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512CD__)
#define GEMMA4_DETAIL_ABI_VEC avx512bw
#elif defined(__AVX512F__)
#define GEMMA4_DETAIL_ABI_VEC avx512f
#elif defined(__AVX2__) && defined(__FMA__)
#define GEMMA4_DETAIL_ABI_VEC avx2fma
#elif defined(__AVX2__)
#define GEMMA4_DETAIL_ABI_VEC avx2
#elif defined(__AVX__)
#define GEMMA4_DETAIL_ABI_VEC avx
#elif defined(__SSE4_2__)
#define GEMMA4_DETAIL_ABI_VEC sse42
#elif defined(__SSSE3__)
#define GEMMA4_DETAIL_ABI_VEC ssse3
#else
#define GEMMA4_DETAIL_ABI_VEC base
#endif

#if defined(__AMX_INT8__)
#define GEMMA4_DETAIL_ABI_INT8 _amx
#elif defined(__AVX512VNNI__) || defined(__AVXVNNI__)
#define GEMMA4_DETAIL_ABI_INT8 _vnni
#else
#define GEMMA4_DETAIL_ABI_INT8
#endif

#define GEMMA4_DETAIL_ABI_CAT3(a, b, c) a##b##c
#define GEMMA4_DETAIL_ABI_NAME(a, b, c) GEMMA4_DETAIL_ABI_CAT3(a, b, c)
/// e.g. arch_base (plain x86-64), arch_avx2fma, arch_avx512bw_vnni
#define GEMMA4_ABI GEMMA4_DETAIL_ABI_NAME(arch_, GEMMA4_DETAIL_ABI_VEC, GEMMA4_DETAIL_ABI_INT8)

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// The name of the inline namespace of this translation unit ("arch_avx2fma", …).
constexpr const char* abi_name() {
#define GEMMA4_DETAIL_ABI_STR2(x) #x
#define GEMMA4_DETAIL_ABI_STR(x) GEMMA4_DETAIL_ABI_STR2(x)
    return GEMMA4_DETAIL_ABI_STR(GEMMA4_ABI);
#undef GEMMA4_DETAIL_ABI_STR
#undef GEMMA4_DETAIL_ABI_STR2
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
