// What this machine can do, measured in the same run as the bench: streaming read bandwidth,
// FP32 FMA peak, int8 multiply-add peak (the instruction the Q8/Q4 kernels use at the active
// level) and the AMX tile peak. Each probe runs at the level the kernels run at
// (gemma4::active_isa()), compiled for it whatever the program's flags, so that "fraction of
// peak" compares like with like.
#pragma once

#include <gemma4/kernels/cpu.hpp>
#include <gemma4/kernels/isa/amx.hpp>
#include <gemma4/kernels/target.hpp>
#include <gemma4/kernels/thread_pool.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

namespace gemma4::probes {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

namespace level {
// One probe body per level. V: a vector register type; load/add/reduce or fma/splat on it.

GEMMA4_TARGET_AVX512_BEGIN
// GCC 12 reports the reduce intrinsics' own `_mm512_undefined_*` operands (PR 105593), as in
// kernels/isa/avx512.hpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
struct Avx512 {
    static std::uint64_t sum(const std::uint64_t* p, std::int64_t a, std::int64_t b) {  // b − a vectors of 8
        __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
        std::int64_t i = a;
        for (; i + 4 <= b; i += 4) {
            s0 = _mm512_add_epi64(s0, _mm512_loadu_si512(p + (i + 0) * 8));
            s1 = _mm512_add_epi64(s1, _mm512_loadu_si512(p + (i + 1) * 8));
            s2 = _mm512_add_epi64(s2, _mm512_loadu_si512(p + (i + 2) * 8));
            s3 = _mm512_add_epi64(s3, _mm512_loadu_si512(p + (i + 3) * 8));
        }
        for (; i < b; ++i) s0 = _mm512_add_epi64(s0, _mm512_loadu_si512(p + i * 8));
        // Summed as unsigned words (_mm512_reduce_add_epi64 would add them as signed C integers).
        alignas(64) std::uint64_t t[8];
        _mm512_store_si512(t, _mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
        return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
    }
    static constexpr int kWords = 8;
    static float fma_chains(std::int64_t iters) {  // 12 chains × 16 lanes per iteration
        __m512 acc[12];
        for (int c = 0; c < 12; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c) * 1e-3f);
        const __m512 m = _mm512_set1_ps(0.999999f), k = _mm512_set1_ps(1e-7f);
        for (std::int64_t i = 0; i < iters; ++i)
            for (auto& a : acc) a = _mm512_fmadd_ps(a, m, k);
        __m512 s = acc[0];
        for (int c = 1; c < 12; ++c) s = _mm512_add_ps(s, acc[c]);
        return _mm512_reduce_add_ps(s);
    }
    static constexpr int kFloats = 16;
    static int int8_chains(std::int64_t iters) {  // 12 chains × 64 products per iteration
        __m512i acc[12];
        for (int c = 0; c < 12; ++c) acc[c] = _mm512_set1_epi32(c);
        const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
        for (std::int64_t i = 0; i < iters; ++i)
            for (auto& a : acc) a = _mm512_dpbusd_epi32(a, u, s);
        __m512i t = acc[0];
        for (int c = 1; c < 12; ++c) t = _mm512_add_epi32(t, acc[c]);
        // One lane keeps the work alive. (_mm512_reduce_add_epi32 sums the lanes as C ints, which
        // overflow after enough iterations: undefined behaviour that UBSan reports.)
        return _mm_cvtsi128_si32(_mm512_castsi512_si128(t));
    }
    static constexpr int kProducts = 64;
};
#pragma GCC diagnostic pop
GEMMA4_TARGET_END

GEMMA4_TARGET_AVX2_BEGIN
struct Avx2 {
    static std::uint64_t sum(const std::uint64_t* p, std::int64_t a, std::int64_t b) {  // vectors of 4
        __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
        std::int64_t i = a;
        for (; i + 4 <= b; i += 4) {
            s0 = _mm256_add_epi64(s0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + (i + 0) * 4)));
            s1 = _mm256_add_epi64(s1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + (i + 1) * 4)));
            s2 = _mm256_add_epi64(s2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + (i + 2) * 4)));
            s3 = _mm256_add_epi64(s3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + (i + 3) * 4)));
        }
        for (; i < b; ++i) s0 = _mm256_add_epi64(s0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i * 4)));
        alignas(32) std::uint64_t t[4];
        _mm256_store_si256(reinterpret_cast<__m256i*>(t), _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)));
        return t[0] + t[1] + t[2] + t[3];
    }
    static constexpr int kWords = 4;
    static float fma_chains(std::int64_t iters) {  // 12 chains × 8 lanes
        __m256 acc[12];
        for (int c = 0; c < 12; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c) * 1e-3f);
        const __m256 m = _mm256_set1_ps(0.999999f), k = _mm256_set1_ps(1e-7f);
        for (std::int64_t i = 0; i < iters; ++i)
            for (auto& a : acc) a = _mm256_fmadd_ps(a, m, k);
        alignas(32) float t[8];
        __m256 s = acc[0];
        for (int c = 1; c < 12; ++c) s = _mm256_add_ps(s, acc[c]);
        _mm256_store_ps(t, s);
        return t[0];
    }
    static constexpr int kFloats = 8;
    static int int8_chains(std::int64_t iters) {  // the AVX2 kernel's product: vpmaddubsw + vpmaddwd + add, 32 products
        __m256i acc[12];
        for (int c = 0; c < 12; ++c) acc[c] = _mm256_set1_epi32(c);
        const __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
        for (std::int64_t i = 0; i < iters; ++i)
            for (auto& a : acc) a = _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), ones));
        __m256i t = acc[0];
        for (int c = 1; c < 12; ++c) t = _mm256_add_epi32(t, acc[c]);
        return _mm256_extract_epi32(t, 0);
    }
    static constexpr int kProducts = 32;
};
GEMMA4_TARGET_END

GEMMA4_TARGET_AVXVNNI_BEGIN
struct AvxVnni : Avx2 {
    static int int8_chains(std::int64_t iters) {  // vpdpbusd on ymm, 32 products
        __m256i acc[12];
        for (int c = 0; c < 12; ++c) acc[c] = _mm256_set1_epi32(c);
        const __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-2);
        for (std::int64_t i = 0; i < iters; ++i)
            for (auto& a : acc) a = _mm256_dpbusd_avx_epi32(a, u, s);
        __m256i t = acc[0];
        for (int c = 1; c < 12; ++c) t = _mm256_add_epi32(t, acc[c]);
        return _mm256_extract_epi32(t, 0);
    }
};
GEMMA4_TARGET_END

struct Baseline {  // SSE2, the x86-64 baseline
    static std::uint64_t sum(const std::uint64_t* p, std::int64_t a, std::int64_t b) {
        __m128i s0 = _mm_setzero_si128(), s1 = s0;
        for (std::int64_t i = a; i < b; ++i) {
            s0 = _mm_add_epi64(s0, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i * 2)));
            std::swap(s0, s1);
        }
        alignas(16) std::uint64_t t[2];
        _mm_store_si128(reinterpret_cast<__m128i*>(t), _mm_add_epi64(s0, s1));
        return t[0] + t[1];
    }
    static constexpr int kWords = 2;
    static float fma_chains(std::int64_t iters) {  // no FMA: a multiply and an add, 2 flops, 4 lanes
        __m128 acc[12];
        for (int c = 0; c < 12; ++c) acc[c] = _mm_set1_ps(static_cast<float>(c) * 1e-3f);
        const __m128 m = _mm_set1_ps(0.999999f), k = _mm_set1_ps(1e-7f);
        for (std::int64_t i = 0; i < iters; ++i)
            for (auto& a : acc) a = _mm_add_ps(_mm_mul_ps(a, m), k);
        return _mm_cvtss_f32(acc[0]);
    }
    static constexpr int kFloats = 4;
    static int int8_chains(std::int64_t iters) {  // the portable kernel: scalar multiply-adds, 1 product
        volatile int seed = 3;
        int acc[12];
        for (int c = 0; c < 12; ++c) acc[c] = c + seed;
        for (std::int64_t i = 0; i < iters; ++i)
            for (int c = 0; c < 12; ++c) acc[c] = acc[c] * 3 + c;
        return acc[0] + acc[11];
    }
    static constexpr int kProducts = 1;
};

}  // namespace level

/// Calls f(Level{}) for the struct of the active level.
template <class F>
auto at_active_level(F&& f) {
    switch (active_isa()) {
        case Isa::Amx:
        case Isa::Avx512: return f(level::Avx512{});
        case Isa::Avx2: return isa_report().features.avx_vnni ? f(level::AvxVnni{}) : f(level::Avx2{});
        case Isa::Baseline: break;
    }
    return f(level::Baseline{});
}

/// Streaming read bandwidth: multi-threaded passes of summing a buffer far larger than the
/// caches. The buffer is written once, at construction, and is page-aligned, as the weights are
/// (model/owned_buffers.hpp, mmap): a vector load that straddles two cache lines reads at about
/// two thirds of the speed on some CPUs (a 2-thread AMD Zen 5 streams 55 GB/s aligned, 35 GB/s
/// misaligned), and would make the probe understate what the kernels can reach.
class ReadProbe {
public:
    ReadProbe(ThreadPool& pool, std::size_t bytes)
        : pool_(pool), words_(bytes / 64 * 8),  // whole 64-byte lines
          buf_(static_cast<std::uint64_t*>(::operator new[](words_ * sizeof(std::uint64_t), std::align_val_t{4096}))) {
        pool.parallel_for(static_cast<std::int64_t>(words_), [&](std::int64_t a, std::int64_t b) {
            for (std::int64_t i = a; i < b; ++i) buf_[static_cast<std::size_t>(i)] = static_cast<std::uint64_t>(i);
        }, 1 << 20);
    }

    std::size_t bytes() const { return words_ * 8; }

    /// Seconds of one pass over the buffer.
    double pass_seconds() {
        return at_active_level([&](auto L) {
            using Level = decltype(L);
            const auto vectors = static_cast<std::int64_t>(words_ / Level::kWords);
            const auto t0 = Clock::now();
            pool_.parallel_for(vectors, [&](std::int64_t a, std::int64_t b) {
                sink_.fetch_add(Level::sum(buf_.get(), a, b), std::memory_order_relaxed);
            }, 1 << 16);
            return seconds_since(t0);
        });
    }

    /// Bytes/s of the fastest of `passes` passes.
    double best(int passes) {
        double best_s = pass_seconds();
        for (int i = 1; i < passes; ++i) best_s = std::min(best_s, pass_seconds());
        return static_cast<double>(bytes()) / best_s;
    }

private:
    struct PageFree {
        void operator()(std::uint64_t* p) const { ::operator delete[](p, std::align_val_t{4096}); }
    };
    ThreadPool& pool_;
    std::size_t words_;
    std::unique_ptr<std::uint64_t[], PageFree> buf_;
    std::atomic<std::uint64_t> sink_{0};  // keeps the sums live; one add per chunk, from any thread
};

/// Best of five passes of a ReadProbe over `bytes`, bytes/s.
inline double read_bandwidth(ThreadPool& pool, std::size_t bytes) { return ReadProbe(pool, bytes).best(5); }

/// The fraction of bandwidth that decode steps reached at their own moment: for each step g, its
/// rate (step_bytes / step_s[g]) over the rate of the faster of the probe passes just before and
/// just after it (pass_s[g − 1], pass_s[g]: one pass follows each step); the median over the
/// steps. The host's bandwidth can double and halve again within a run, so a step is paired with
/// the probe of its own moment, and with the faster of two passes because a single pass at times
/// reads slower than the steps around it. 0 without steps.
inline double median_local_fraction(const std::vector<double>& step_s, const std::vector<double>& pass_s, double step_bytes,
                                    double probe_bytes) {
    std::vector<double> f;
    for (std::size_t g = 0; g < step_s.size() && g < pass_s.size(); ++g) {
        const double probe_s = g == 0 ? pass_s[0] : std::min(pass_s[g - 1], pass_s[g]);
        f.push_back((step_bytes / step_s[g]) / (probe_bytes / probe_s));
    }
    if (f.empty()) return 0.0;
    std::sort(f.begin(), f.end());
    const std::size_t n = f.size();
    return n % 2 ? f[n / 2] : (f[n / 2 - 1] + f[n / 2]) / 2;
}

/// FP32 multiply-add throughput on all threads (2 flops per multiply-add).
inline double fma_peak(ThreadPool& pool) {
    return at_active_level([&](auto L) {
        using Level = decltype(L);
        const std::int64_t iters = 400'000'000 / Level::kFloats;
        std::vector<float> sink(pool.size());
        const auto t0 = Clock::now();
        pool.parallel_for(pool.size(), [&](std::int64_t a, std::int64_t b) {
            for (std::int64_t task = a; task < b; ++task) sink[static_cast<std::size_t>(task)] = Level::fma_chains(iters);
        });
        return 2.0 * 12 * Level::kFloats * static_cast<double>(iters) * pool.size() / seconds_since(t0);
    });
}

/// int8 multiply-add throughput of the Q8/Q4 kernels' instruction on all threads (2 ops per product).
inline double int8_peak(ThreadPool& pool) {
    return at_active_level([&](auto L) {
        using Level = decltype(L);
        const std::int64_t iters = Level::kProducts == 1 ? 100'000'000 : 20'000'000;
        std::vector<int> sink(pool.size());
        const auto t0 = Clock::now();
        pool.parallel_for(pool.size(), [&](std::int64_t a, std::int64_t b) {
            for (std::int64_t task = a; task < b; ++task) sink[static_cast<std::size_t>(task)] = Level::int8_chains(iters);
        });
        return 2.0 * 12 * Level::kProducts * static_cast<double>(iters) * pool.size() / seconds_since(t0);
    });
}

GEMMA4_TARGET_AMX_BEGIN
namespace level {
inline double amx_peak(ThreadPool& pool) {
    constexpr std::int64_t kIters = 2'000'000;
    const auto t0 = Clock::now();
    pool.parallel_for(pool.size(), [&](std::int64_t a, std::int64_t b) {
        for (std::int64_t task = a; task < b; ++task) {
            detail::amx::AmxTiles::Config full;
            for (int t = 0; t < 8; ++t) full.rows[t] = 16, full.colsb[t] = 64;
            const detail::amx::AmxTiles::TileScope tiles(full);  // tiles start zeroed
            for (std::int64_t i = 0; i < kIters; ++i) {  // four independent accumulators
                _tile_dpbssd(0, 4, 6);
                _tile_dpbssd(1, 4, 7);
                _tile_dpbssd(2, 5, 6);
                _tile_dpbssd(3, 5, 7);
            }
        }
    });
    return 2.0 * 16 * 16 * 64 * 4 * static_cast<double>(kIters) * pool.size() / seconds_since(t0);
}
}  // namespace level
GEMMA4_TARGET_END

/// int8 multiply-add throughput of AMX tiles (tdpbssd on full 16 × 64 tiles, 2 ops per product)
/// on all threads; 0 below the amx level.
inline double amx_int8_peak(ThreadPool& pool) { return active_isa() == Isa::Amx ? level::amx_peak(pool) : 0; }

}  // namespace gemma4::probes
