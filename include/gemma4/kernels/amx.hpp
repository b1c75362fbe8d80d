// Intel AMX (Advanced Matrix Extensions) for the Q8/Q4 linear: a tile matrix multiply of
// 16 tokens × 16 weight rows × 32 int8 codes per instruction (tdpbssd), eight times the int8
// products per instruction of AVX-512 VNNI, so that a batch of 16 sequences costs about what
// reading the weights costs.
//
// It exists when the build targets AMX-INT8 (-march=native on Sapphire Rapids or later) and the
// process is granted the tile state: Linux makes each process request it once
// (arch_prctl(ARCH_REQ_XCOMP_PERM)); without the grant, or with GEMMA4_AMX=0 in the environment,
// the VNNI kernel runs instead. Both compute the same exact int32 block sums and the same float
// sequence, so results do not depend on which one ran.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__) && defined(__AVX512VNNI__) && defined(__linux__) && defined(__x86_64__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define GEMMA4_HAVE_AMX 1
#endif

namespace gemma4::detail {

#ifdef GEMMA4_HAVE_AMX
inline constexpr bool kHaveAmxBuild = true;
#else
inline constexpr bool kHaveAmxBuild = false;
#endif

/// Whether this process may use AMX tiles: the build has them, GEMMA4_AMX is not "0", and the
/// kernel granted the tile data state (asked once, for the whole process).
inline bool amx_usable() {
#ifdef GEMMA4_HAVE_AMX
    static const bool usable = [] {
        if (const char* env = std::getenv("GEMMA4_AMX"); env && std::strcmp(env, "0") == 0) return false;
        constexpr long kRequestPermission = 0x1023;  // ARCH_REQ_XCOMP_PERM
        constexpr long kTileData = 18;               // XFEATURE_XTILEDATA
        return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
    }();
    return usable;
#else
    return false;
#endif
}

#ifdef GEMMA4_HAVE_AMX
/// The tiles of the Q8/Q4 kernel, configured per thread for the span of one call (TileScope):
/// 0–3 accumulators (two sets of two, 16 tokens × 16 int32), 4–5 activations (16 tokens × 32
/// codes), 6–7 weights (8 rows of 4 codes × 16 weight rows: one block of a panel as it lies in
/// memory).
struct AmxTiles {
    static constexpr int kAccumulators[] = {0, 1, 2, 3}, kActivations[] = {4, 5}, kWeights[] = {6, 7};

    struct alignas(64) Config {
        std::uint8_t palette = 1, start_row = 0;
        std::uint8_t reserved[14] = {};
        std::uint16_t colsb[16] = {};
        std::uint8_t rows[16] = {};
    };

    /// The kernel's configuration.
    static Config kernel_config() {
        Config c;
        for (int t : kAccumulators) c.rows[t] = 16, c.colsb[t] = 64;
        for (int t : kActivations) c.rows[t] = 16, c.colsb[t] = 32;
        for (int t : kWeights) c.rows[t] = 8, c.colsb[t] = 64;
        return c;
    }

    /// ldtilecfg for this thread, tilerelease when the scope ends (the OS then need not save the
    /// 8 KB of tile state on a context switch).
    struct TileScope {
        explicit TileScope(const Config& c = kernel_config()) {
            // Inline asm rather than _tile_loadconfig: GCC 12 does not see the intrinsic read its
            // operand and drops the stores that fill it.
            asm volatile("ldtilecfg %0" : : "m"(c));
        }
        ~TileScope() { _tile_release(); }
        TileScope(const TileScope&) = delete;
        TileScope& operator=(const TileScope&) = delete;
    };
};
#endif

}  // namespace gemma4::detail
