// Which instruction-set level the kernels run at, decided once per process at run time.
//
// One build carries the kernels of every level (kernels/target.hpp compiles each with its own
// instruction set, whatever flags the program was built with), and the fastest level that the
// CPU and the OS support is chosen from cpuid and xgetbv. GEMMA4_ISA caps it (for tests, and for
// virtual machines that report features they do not run):
//
//   baseline  plain x86-64 (SSE2), the portable loops and xsimd at the build's own architecture
//   avx2      AVX2 + FMA + F16C; int8 dot products with AVX-VNNI where the CPU has it
//   avx512    AVX-512 F/BW/VL/VNNI
//   amx       AMX-INT8 tiles for passes of several tokens, AVX-512 VNNI for the rest
//
// GEMMA4_AVXVNNI=0 keeps the avx2 level's int8 products off AVX-VNNI (the kernel of AVX2 CPUs
// without it: Haswell to Ice Lake clients, Zen 2 to Zen 4), to measure or test that kernel on a
// CPU that has it.
//
// Asking for a level the CPU lacks is an error naming the missing features, never a SIGILL.
// AMX also needs the OS to grant the tile state (Linux: arch_prctl, once per process); when it
// refuses, the level falls back to avx512 and the report says why.
//
// xsimd 8.1's own detector is not used: it knows neither VNNI, AMX nor F16C, and does not check
// that the OS saves the AVX-512 registers (xgetbv).
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#define GEMMA4_DETAIL_X86_CPUID 1
#endif

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// Instruction-set levels of the kernels, in increasing order.
enum class Isa : std::uint8_t { Baseline, Avx2, Avx512, Amx };

constexpr std::string_view isa_name(Isa isa) {
    switch (isa) {
        case Isa::Baseline: return "baseline";
        case Isa::Avx2: return "avx2";
        case Isa::Avx512: return "avx512";
        case Isa::Amx: return "amx";
    }
    return "?";
}

constexpr std::optional<Isa> parse_isa(std::string_view s) {
    for (Isa isa : {Isa::Baseline, Isa::Avx2, Isa::Avx512, Isa::Amx})
        if (s == isa_name(isa)) return isa;
    return std::nullopt;
}

/// The features of this CPU (and its OS) that decide the level.
struct CpuFeatures {
    bool avx2 = false, fma = false, f16c = false, avx_vnni = false;
    bool avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false, avx512bf16 = false;
    bool amx_tile = false, amx_int8 = false;
    bool os_avx = false, os_avx512 = false, os_amx = false;  ///< the OS saves ymm / zmm / tile state (XCR0)
    bool amd = false;  ///< vendor "AuthenticAMD": selects tuning measured there (kernels/isa/prefetch.hpp)
};

/// What was chosen, and why.
struct IsaReport {
    CpuFeatures features;        ///< as the kernels use them (AVX-VNNI off with GEMMA4_AVXVNNI=0)
    Isa cpu = Isa::Baseline;     ///< the highest level this CPU and OS support
    Isa active = Isa::Baseline;  ///< what the kernels run: cpu, capped by GEMMA4_ISA
    std::string cap;             ///< the value of GEMMA4_ISA ("" when unset)
    std::string note;            ///< why a level was not taken (AMX refused by the OS), or ""
};

namespace detail {

inline CpuFeatures detect_cpu_features() {
    CpuFeatures f;
#ifdef GEMMA4_DETAIL_X86_CPUID
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(0, &a, &b, &c, &d)) f.amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "Auth" "enti" "cAMD"
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool osxsave = (c >> 27) & 1;
    f.fma = (c >> 12) & 1;
    f.f16c = (c >> 29) & 1;
    const bool avx = (c >> 28) & 1;
    std::uint64_t xcr0 = 0;
    if (osxsave) {
        unsigned lo = 0, hi = 0;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        xcr0 = (static_cast<std::uint64_t>(hi) << 32) | lo;
    }
    f.os_avx = avx && (xcr0 & 0x6) == 0x6;             // SSE and AVX state
    f.os_avx512 = f.os_avx && (xcr0 & 0xe0) == 0xe0;    // opmask, upper zmm, zmm16–31
    f.os_amx = f.os_avx512 && (xcr0 & 0x60000) == 0x60000;  // XTILECFG, XTILEDATA
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        f.avx2 = (b >> 5) & 1;
        f.avx512f = (b >> 16) & 1;
        f.avx512bw = (b >> 30) & 1;
        f.avx512vl = (b >> 31) & 1;
        f.avx512vnni = (c >> 11) & 1;
        f.amx_tile = (d >> 24) & 1;
        f.amx_int8 = (d >> 25) & 1;
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
        f.avx_vnni = (a >> 4) & 1;
        f.avx512bf16 = (a >> 5) & 1;
    }
#endif
    return f;
}

/// The highest level the features allow, before asking the OS for AMX.
inline Isa level_of(const CpuFeatures& f) {
    const bool avx2 = f.os_avx && f.avx2 && f.fma && f.f16c;
    const bool avx512 = avx2 && f.os_avx512 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni;
    const bool amx = avx512 && f.os_amx && f.amx_tile && f.amx_int8;
    return amx ? Isa::Amx : avx512 ? Isa::Avx512 : avx2 ? Isa::Avx2 : Isa::Baseline;
}

/// The features a level needs that `f` lacks, named as in /proc/cpuinfo ("" when none).
inline std::string missing_features(const CpuFeatures& f, Isa level) {
    std::string m;
    auto need = [&](bool have, const char* name) {
        if (have) return;
        if (!m.empty()) m += ' ';
        m += name;  // appended, not `"" + std::string(name)`: that trips GCC 12's -Wrestrict at -O3
    };
    if (level >= Isa::Avx2) {
        need(f.os_avx, "avx(os)");
        need(f.avx2, "avx2");
        need(f.fma, "fma");
        need(f.f16c, "f16c");
    }
    if (level >= Isa::Avx512) {
        need(f.os_avx512, "avx512(os)");
        need(f.avx512f, "avx512f");
        need(f.avx512bw, "avx512bw");
        need(f.avx512vl, "avx512vl");
        need(f.avx512vnni, "avx512_vnni");
    }
    if (level >= Isa::Amx) {
        need(f.os_amx, "amx(os)");
        need(f.amx_tile, "amx_tile");
        need(f.amx_int8, "amx_int8");
    }
    return m;
}

/// Asks Linux for the AMX tile data state for this process; false when refused.
inline bool request_amx_permission() {
#if defined(GEMMA4_DETAIL_X86_CPUID) && defined(__linux__)
    constexpr long kRequestPermission = 0x1023;  // ARCH_REQ_XCOMP_PERM
    constexpr long kTileData = 18;               // XFEATURE_XTILEDATA
    return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
#else
    return false;
#endif
}

/// The report for features `f`, the value `cap` of GEMMA4_ISA and `avx_vnni` of GEMMA4_AVXVNNI
/// (nullptr: unset). `grant_amx` asks the OS for the tile state. Throws InvalidArgument for an
/// unknown value or a level the CPU lacks.
template <class GrantAmx>
IsaReport make_isa_report(const CpuFeatures& f, const char* cap, GrantAmx grant_amx, const char* avx_vnni = nullptr) {
    IsaReport r;
    r.features = f;
    if (avx_vnni && *avx_vnni) {
        const std::string v = avx_vnni;
        if (v != "0" && v != "1") throw InvalidArgument("GEMMA4_AVXVNNI: expected 0 or 1, got '" + v + "'");
        if (v == "0") r.features.avx_vnni = false;
    }
    r.cpu = level_of(f);
    r.active = r.cpu;
    if (cap && *cap) {
        r.cap = cap;
        const auto level = parse_isa(cap);
        if (!level)
            throw InvalidArgument("GEMMA4_ISA: unknown level '" + r.cap + "' (expected baseline, avx2, avx512 or amx)");
        if (*level > r.cpu)
            throw InvalidArgument("GEMMA4_ISA=" + r.cap + ": this CPU cannot run that level (missing: " +
                                  missing_features(f, *level) + ")");
        r.active = *level;
    }
    if (r.active == Isa::Amx && !grant_amx()) {
        r.active = Isa::Avx512;
        r.note = "the OS refused the AMX tile state (arch_prctl); running avx512";
    }
    return r;
}

}  // namespace detail

/// The features of this CPU, read once.
inline const CpuFeatures& cpu_features() {
    static const CpuFeatures f = detail::detect_cpu_features();
    return f;
}

/// The level chosen for this process and why, decided on the first call (GEMMA4_ISA is read
/// then). Throws InvalidArgument when GEMMA4_ISA is unknown or above what the CPU runs; every
/// later call throws the same.
inline const IsaReport& isa_report() {
    static const IsaReport r = detail::make_isa_report(
        cpu_features(), std::getenv("GEMMA4_ISA"), [] { return detail::request_amx_permission(); }, std::getenv("GEMMA4_AVXVNNI"));
    return r;
}

/// The level the kernels run at.
inline Isa active_isa() { return isa_report().active; }

}  // namespace GEMMA4_ABI
}  // namespace gemma4

#undef GEMMA4_DETAIL_X86_CPUID
