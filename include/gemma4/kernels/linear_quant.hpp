// linear for Q8/Q4 weights held as panels of 16 rows (tensor/quant.hpp). The activations of a
// call are quantized once to int8 per block of the weights' size (kernels/quant_acts.hpp), so each
// block's dot product is exact in int32 and every output is y = Σ_b isum_b · (w_scale_b ·
// x_scale_b), summed over the blocks in order with one multiply-add per block. The kernels of
// every level perform exactly that float sequence, so an output does not depend on the thread
// count, on which other tokens share its pass, or on whether its token came alone (decode) or
// with others (prefill, batches); the vector kernels are bit-identical to one another:
//  * portable: plain loops over each row, correct on any x86-64 (and the only one for weights
//    held as rows);
//  * avx2 / avxvnni: 8 rows of a panel per 256-bit register (kernels/isa/quant_avx2-inl.hpp);
//  * avx512: vpdpbusd over all 16 rows of a panel (kernels/isa/avx512.hpp);
//  * amx: tile multiplies for groups of 8 or more tokens, avx512 for the rest (kernels/isa/amx.hpp).
// Which one runs follows the level kernels/cpu.hpp chose for the process.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/kernels/cpu.hpp>
#include <gemma4/kernels/isa/amx.hpp>
#include <gemma4/kernels/isa/avx2.hpp>
#include <gemma4/kernels/isa/avx512.hpp>
#include <gemma4/kernels/quant_acts.hpp>
#include <gemma4/kernels/rows.hpp>
#include <gemma4/kernels/thread_pool.hpp>
#include <gemma4/tensor/quant.hpp>
#include <gemma4/tensor/weight_view.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gemma4::inline GEMMA4_ABI::detail {

/// The integer dot product of weight block b (`block` codes, Q4 minus offset) with activation block b.
inline std::int32_t block_dot(DType type, std::int64_t block, const std::byte* codes, const std::int8_t* xq, std::int64_t b) {
    std::int32_t s = 0;
    const std::int8_t* x = xq + b * block;
    if (type == DType::Q8) {
        const auto* w = reinterpret_cast<const std::int8_t*>(codes) + b * block;
        for (std::int64_t i = 0; i < block; ++i) s += static_cast<std::int32_t>(w[i]) * x[i];
        return s;
    }
    // Q4, a 32-column unit at a time: unit k of a 128-group is the low (k < 2) or high nibbles of
    // bytes (k % 2)·32 … +32.
    for (std::int64_t u = b * block / quant::kUnit; u < (b + 1) * block / quant::kUnit; ++u, x += quant::kUnit) {
        const std::int64_t g = u / 4, k = u % 4;
        const auto* bytes = reinterpret_cast<const std::uint8_t*>(codes) + g * 64 + (k % 2) * 32;
        // Nibbles are unpacked four at a time in 32-bit words (quant::low_nibble / high_nibble of
        // four bytes at once): GCC 12 with AVX-512 miscompiles the vectorised per-byte form
        // (`byte >> 4` widened to int32 loses its mask).
        const unsigned shift = k >= 2 ? 4u : 0u;
        for (int j = 0; j < quant::kUnit / 4; ++j) {
            std::uint32_t v;
            std::memcpy(&v, bytes + 4 * j, 4);
            v = (v >> shift) & 0x0f0f0f0fu;
            for (int l = 0; l < 4; ++l)
                s += (static_cast<std::int32_t>((v >> (8 * l)) & 0xffu) - quant::kQ4Offset) * x[4 * j + l];
        }
    }
    return s;
}

/// Row n of a quantized view in the file layout (whatever its layout in memory), in buffers of
/// the calling thread that the next call overwrites.
struct FileRow {
    const std::byte* codes;
    const std::uint16_t* scales;
};
inline FileRow file_row(const WeightView& w, std::int64_t n) {
    thread_local std::vector<std::byte> codes;
    thread_local std::vector<std::uint16_t> scales;
    codes.resize(static_cast<std::size_t>(quant::row_bytes(w.dtype, w.cols())));
    scales.resize(static_cast<std::size_t>(quant::blocks_per_row(w.cols(), w.block)));
    w.quant_row(n, codes.data(), scales.data());
    return {codes.data(), scales.data()};
}

/// Portable path: y[t0.., n] for one row n (any layout).
inline void quant_row_portable(const WeightView& w, std::int64_t n, const QuantActs& a, std::int64_t t0, std::int64_t t1,
                               Rows<float> y) {
    const FileRow row = file_row(w, n);
    thread_local std::vector<float> ws;
    ws.resize(static_cast<std::size_t>(a.blocks));
    for (std::int64_t b = 0; b < a.blocks; ++b) ws[static_cast<std::size_t>(b)] = f16_to_float(row.scales[b]);
    for (std::int64_t t = t0; t < t1; ++t) {
        const std::int8_t* xq = a.q_row(t);
        const float* xs = a.scale_row(t);
        float acc = 0;
        for (std::int64_t b = 0; b < a.blocks; ++b)
            acc += static_cast<float>(block_dot(w.dtype, w.block, row.codes, xq, b)) * (ws[static_cast<std::size_t>(b)] * xs[b]);
        y.row(t)[n] = acc;
    }
}

/// The most matrices one linear_quant call shares an input among (attn.qkv_proj has three).
inline constexpr std::size_t kMaxQuantTargets = 8;

/// The Q8/Q4 kernels. linear_quant runs the one of the process's level; tests name them to
/// compare them.
enum class QuantKernel : std::uint8_t { Portable, Avx2, AvxVnni, Avx512, Amx };

constexpr std::string_view quant_kernel_name(QuantKernel k) {
    switch (k) {
        case QuantKernel::Portable: return "portable";
        case QuantKernel::Avx2: return "avx2";
        case QuantKernel::AvxVnni: return "avx-vnni";
        case QuantKernel::Avx512: return "avx512-vnni";
        case QuantKernel::Amx: return "amx-int8";
    }
    return "?";
}

/// The kernel of a level on a CPU with features f.
inline QuantKernel quant_kernel_for(Isa isa, const CpuFeatures& f) {
    switch (isa) {
        case Isa::Amx: return QuantKernel::Amx;
        case Isa::Avx512: return QuantKernel::Avx512;
        case Isa::Avx2: return f.avx_vnni ? QuantKernel::AvxVnni : QuantKernel::Avx2;
        case Isa::Baseline: break;
    }
    return QuantKernel::Portable;
}

/// Whether kernel k may run in this process: its level is at most the active one (the cap
/// holds for tests too).
inline bool quant_kernel_runs(QuantKernel k) {
    const Isa active = active_isa();
    switch (k) {
        case QuantKernel::Portable: return true;
        case QuantKernel::Avx2: return active >= Isa::Avx2;
        case QuantKernel::AvxVnni: return active >= Isa::Avx2 && isa_report().features.avx_vnni;
        case QuantKernel::Avx512: return active >= Isa::Avx512;
        case QuantKernel::Amx: return active >= Isa::Amx;
    }
    return false;
}

/// The bytes of panels a one-token chunk of linear_quant holds at least.
inline constexpr std::int64_t kStreamChunkBytes = std::int64_t{2} << 20;

/// One Q8/Q4 matrix of a linear_quant call and where its outputs go.
struct QuantTarget {
    const WeightView* w;
    Rows<float> y;
};

/// y_i[t, n] = Σ_k x[t, k] · w_i[n, k] for Q8/Q4 matrices w_i of one dtype, block size and column
/// count and float x: x is quantized once, and the matrices' panels (or rows) form one parallel region.
/// `kernel` must be one that quant_kernel_runs.
inline void linear_quant(std::span<const QuantTarget> targets, Rows<const float> x, std::int64_t tokens, ThreadPool& pool,
                         QuantKernel kernel = quant_kernel_for(active_isa(), isa_report().features)) {
    if (targets.empty() || targets.size() > kMaxQuantTargets)
        throw InvalidArgument("linear_quant: " + std::to_string(targets.size()) + " matrices in one call, not 1 to " +
                              std::to_string(kMaxQuantTargets));
    const WeightView& w0 = *targets.front().w;
    const std::int64_t K = w0.cols();
    for (const QuantTarget& t : targets)
        if (t.w->dtype != w0.dtype || t.w->block != w0.block || t.w->cols() != K)
            throw InvalidArgument("linear_quant: '" + t.w->name + "' does not share the dtype, block size and columns of '" + w0.name + "'");
    if (!quant::valid_block(w0.block))
        throw InvalidArgument("linear_quant: '" + w0.name + "' has blocks of " + std::to_string(w0.block) + " elements, not 32 or 64");
    thread_local QuantActs acts;
    QuantActs& a = acts;  // the caller's, also in the lambdas below
    shape_activations(tokens, K, w0.block, a);
    // The activations are prepared by all threads when there are several tokens.
    auto prepare = [&](auto&& per_tokens) {
        if (tokens == 1) per_tokens(0, 1);
        else pool.parallel_for(tokens, [&](std::int64_t t0, std::int64_t t1) { per_tokens(t0, t1); });
    };
    // The matrices' units (panels or rows) as one index space: matrix i owns [first[i], first[i + 1]).
    // `grain_of(total units)` gives the fewest units a chunk holds.
    auto run = [&](auto units_of, auto grain_of, auto&& body) {
        std::array<std::int64_t, kMaxQuantTargets + 1> first{};  // no allocation in a decode step
        for (std::size_t i = 0; i < targets.size(); ++i) first[i + 1] = first[i] + units_of(*targets[i].w);
        const std::int64_t total = first[targets.size()];
        pool.parallel_chunks(
            total,
            [&](std::int64_t u0, std::int64_t u1) {
                for (std::size_t i = 0; i < targets.size(); ++i) {
                    const std::int64_t lo = std::max(u0, first[i]), hi = std::min(u1, first[i + 1]);
                    if (lo < hi) body(targets[i], lo - first[i], hi - first[i]);
                }
            },
            // chunks claimed by whichever thread is free: a fixed split makes the slower thread
            // (another process on its core) set the pace of every matrix
            std::max<std::int64_t>(grain_of(total), total / (16 * pool.size())));
    };
    const bool panels = std::all_of(targets.begin(), targets.end(), [](const QuantTarget& t) { return t.w->layout == WeightView::Layout::Panels; });
    if (kernel != QuantKernel::Portable && panels) {
        const bool amx = kernel == QuantKernel::Amx && tokens >= amx::kMinTokens;
        // The first token of the groups that a vector pass takes: all (no AMX), or those of a
        // last group too small for tiles. Tokens before it go through AMX tiles.
        const std::int64_t vnni_from = !amx ? 0 : tokens % kGroupTokens >= amx::kMinTokens ? tokens : tokens / kGroupTokens * kGroupTokens;
        if (kernel == QuantKernel::Amx && !amx) kernel = QuantKernel::Avx512;
        const DType dtype = w0.dtype;
        const int offset = kernel == QuantKernel::Avx2      ? avx2::PanelAvx2::offset(dtype)
                           : kernel == QuantKernel::AvxVnni ? avxvnni::PanelAvx2::offset(dtype)
                                                            : avx512::PanelVnni::offset(dtype);
        thread_local GroupActs groups;
        thread_local amx::PanelAmx::TileActs amx_tiles;
        // the caller's: lambdas on other threads see their own thread_locals
        GroupActs& ga = groups;
        amx::PanelAmx::TileActs& tiles = amx_tiles;
        shape_group_acts(a, ga);
        if (amx) tiles.resize(amx::PanelAmx::tile_bytes(a));
        prepare([&](std::int64_t t0, std::int64_t t1) {
            if (kernel == QuantKernel::Avx2 || kernel == QuantKernel::AvxVnni) quantize_activations(x, t0, t1, a, avx2::quantize_row);
            else quantize_activations(x, t0, t1, a, avx512::quantize_row);
            if (t0 < vnni_from) amx::PanelAmx::group_tiles(a, t0, std::min(t1, vnni_from), tiles);
        });
        // The vector passes' records, by blocks: each thread writes its own lines.
        if (vnni_from < tokens) {
            if (tokens == 1) group_acts(a, offset, vnni_from, 0, a.blocks, ga);
            else pool.parallel_for(a.blocks, [&](std::int64_t b0, std::int64_t b1) { group_acts(a, offset, vnni_from, b0, b1, ga); });
        }
        // One token reads each chunk of panels as one stream, which the hardware prefetchers
        // pick up anew: on a 2-thread AMD Zen 4 in its faster memory state, chunks of 1 MiB
        // streamed 2–4 % slower than chunks of 2 MiB (docs/perf-log/). The chunk stays
        // small enough that every thread gets one.
        const auto grain = [&](std::int64_t panels_total) -> std::int64_t {
            if (tokens > 1) return 1;
            const std::int64_t per_thread = std::max<std::int64_t>(1, panels_total / pool.size());
            return std::clamp<std::int64_t>(kStreamChunkBytes / quant::panel_bytes(dtype, w0.block, K), 1, per_thread);
        };
        run([](const WeightView& w) { return quant::panel_count(w.rows()); }, grain,
            [&](const QuantTarget& t, std::int64_t p0, std::int64_t p1) {
                switch (kernel) {
                    case QuantKernel::Amx: return amx::panels(*t.w, a, ga, tiles, vnni_from, p0, p1, t.y);
                    case QuantKernel::Avx512: return avx512::panels(*t.w, a, ga, p0, p1, t.y);
                    case QuantKernel::AvxVnni: return avxvnni::panels(*t.w, a, ga, p0, p1, t.y);
                    default: return avx2::panels(*t.w, a, ga, p0, p1, t.y);
                }
            });
        return;
    }
    prepare([&](std::int64_t t0, std::int64_t t1) { quantize_activations(x, t0, t1, a); });
    const std::int64_t tb = token_block(a.padded + 8 * a.blocks, 4);
    run([](const WeightView& w) { return w.rows(); }, [](std::int64_t) -> std::int64_t { return 16; }, [&](const QuantTarget& t, std::int64_t n0, std::int64_t n1) {
        for (std::int64_t tb0 = 0; tb0 < tokens; tb0 += tb) {
            const std::int64_t tb1 = std::min(tokens, tb0 + tb);
            for (std::int64_t n = n0; n < n1; ++n) quant_row_portable(*t.w, n, a, tb0, tb1, t.y);
        }
    });
}

/// y[t, n] = Σ_k x[t, k] · w[n, k] for Q8/Q4 w and float x.
inline void linear_quant(const WeightView& w, Rows<const float> x, Rows<float> y, std::int64_t tokens, ThreadPool& pool,
                         QuantKernel kernel = quant_kernel_for(active_isa(), isa_report().features)) {
    const QuantTarget target{&w, y};
    linear_quant(std::span<const QuantTarget>(&target, 1), x, tokens, pool, kernel);
}

}  // namespace gemma4::detail
