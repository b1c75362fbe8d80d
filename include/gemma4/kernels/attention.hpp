// Attention over the KV cache (spec node attn.core), split into spans of keys so that long
// contexts use every thread and each cached K/V row is read once for all the query heads that
// share it (grouped-query attention).
//
// A span is a fixed range of absolute key positions ([i · kSpan, (i + 1) · kSpan)), so how the
// keys of a query are cut depends only on the query, never on the thread count or on the other
// tokens of the step; spans are merged in position order. Each span yields, per query head, the
// running maximum m, the sum l of exp(s − m) and acc = Σ exp(s − m) · v; the merge rescales them
// to the overall maximum (the usual online-softmax identity).
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/kernels/attention_rows.hpp>
#include <gemma4/kernels/cpu.hpp>
#include <gemma4/kernels/isa/avx2.hpp>
#include <gemma4/kernels/isa/avx512.hpp>
#include <gemma4/kernels/simd.hpp>
#include <gemma4/kernels/thread_pool.hpp>

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

namespace gemma4::inline GEMMA4_ABI::kernels {

/// Key positions per span: the unit of work and of the merge.
inline constexpr std::int64_t kAttnSpan = 2048;
/// Query heads per kv head that the score buffers are sized for at first use (more still work;
/// the buffer then grows once more).
inline constexpr std::int64_t kMaxGroup = 16;

namespace detail_attn {

/// Σ q[i] · codes[i] in T.
template <class T>
inline T dot_i8(const T* q, const std::int8_t* c, std::int64_t n) {
    T s = 0;
    for (std::int64_t i = 0; i < n; ++i) s += q[i] * static_cast<T>(c[i]);
    return s;
}

/// y[i] += a · codes[i]
template <class T>
inline void axpy_i8(T a, const std::int8_t* c, T* y, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) y[i] += a * static_cast<T>(c[i]);
}

template <class T>
inline T row_dot(const T* q, const T* k, std::int64_t d) { return gemma4::detail::dot(q, k, d); }
template <class T>
inline T row_dot(const T* q, Int8HeadRow k, std::int64_t d) { return static_cast<T>(k.scale) * dot_i8(q, k.codes, d); }
template <class T>
inline void row_axpy(T a, const T* v, T* y, std::int64_t d) { gemma4::detail::axpy(a, v, y, d); }
template <class T>
inline void row_axpy(T a, Int8HeadRow v, T* y, std::int64_t d) { axpy_i8(a * static_cast<T>(v.scale), v.codes, y, d); }

/// Elements [i0, i0 + B::size) of a cached row as a batch (int8 rows: code · scale).
template <class B, class T>
inline B row_batch(const T* r, std::int64_t i0) { return B::load_unaligned(r + i0); }
template <class B>
inline B row_batch(Int8HeadRow r, std::int64_t i0) {
    using T = typename B::value_type;
    alignas(64) T tmp[B::size];
    for (std::size_t i = 0; i < B::size; ++i) tmp[i] = static_cast<T>(r.codes[i0 + static_cast<std::int64_t>(i)]) * static_cast<T>(r.scale);
    return B::load_aligned(tmp);
}

/// The score pass of attend_span, register-blocked: 4 keys × 4 heads of dot products accumulate
/// in registers, so each loaded vector of K (int8 rows: converted and scaled once) or q serves
/// 4 products (one load per product otherwise, and the loads, not the FMAs, set the pace).
/// Missing keys or heads of a partial block repeat the first one; their products are dropped.
/// H heads per block: 4, or 2 for groups of 2 (the sliding layers). Needs d to be a multiple of
/// the batch size.
template <std::int64_t H, class T, class KeyAt>
void score_pass_blocked(const T* q, std::int64_t group, std::int64_t d, std::int64_t j0, std::int64_t j1, KeyAt key, T* scores) {
    using B = xsimd::batch<T>;
    constexpr auto S = static_cast<std::int64_t>(B::size);
    constexpr std::int64_t K = 4;  // keys per block
    const std::int64_t len = j1 - j0 + 1;
    for (std::int64_t j = j0; j <= j1; j += K) {
        const std::int64_t kb = std::min<std::int64_t>(K, j1 - j + 1);
        for (std::int64_t a = j + K; a < std::min(j + 2 * K, j1 + 1); ++a) row_prefetch(key(a), d);
        decltype(key(j)) kr[K];
        for (std::int64_t x = 0; x < K; ++x) kr[x] = key(j + (x < kb ? x : 0));
        for (std::int64_t h0 = 0; h0 < group; h0 += H) {
            const std::int64_t hb = std::min<std::int64_t>(H, group - h0);
            const T* qh[H];
            for (std::int64_t y = 0; y < H; ++y) qh[y] = q + (h0 + (y < hb ? y : 0)) * d;
            B acc[H][K];
            for (auto& r : acc)
                for (auto& c : r) c = B(T(0));
            for (std::int64_t i = 0; i < d; i += S) {
                B kv[K], qv[H];
                for (std::int64_t x = 0; x < K; ++x) kv[x] = row_batch<B>(kr[x], i);
                for (std::int64_t y = 0; y < H; ++y) qv[y] = B::load_unaligned(qh[y] + i);
                for (std::int64_t y = 0; y < H; ++y)
                    for (std::int64_t x = 0; x < K; ++x) acc[y][x] = xsimd::fma(qv[y], kv[x], acc[y][x]);
            }
            for (std::int64_t y = 0; y < hb; ++y)
                for (std::int64_t x = 0; x < kb; ++x) scores[(h0 + y) * len + (j - j0 + x)] = xsimd::hadd(acc[y][x]);
        }
    }
}

/// The value pass of attend_span, register-blocked: up to 4 heads × 4 batches of d stay in
/// registers across a block of keys (one pass per 4·S-wide slice of d and per 4 heads), so each
/// V element is loaded once per 4 heads instead of updating every head's accumulator in memory
/// per key. The keys go in blocks of kKeys rows that stay in L1/L2 through all the slices (a walk
/// over one slice of every key of a span evicted the rows before the next slice came: 2× slower
/// at the full layers' d = 512), and the accumulators go back to `part` between blocks, exactly
/// (a float stored and loaded again is unchanged). Needs d to be a multiple of 4·S.
template <class T, class ValueAt>
void value_pass_blocked(std::int64_t group, std::int64_t d, std::int64_t j0, std::int64_t j1, ValueAt value, const T* scores,
                        T* part) {
    using B = xsimd::batch<T>;
    constexpr auto S = static_cast<std::int64_t>(B::size);
    constexpr std::int64_t kKeys = 64;
    const std::int64_t len = j1 - j0 + 1;
    for (std::int64_t b0 = j0; b0 <= j1; b0 += kKeys) {
        const std::int64_t b1 = std::min(j1, b0 + kKeys - 1);
        for (std::int64_t a = b1 + 1; a <= std::min(j1, b1 + kKeys); ++a) row_prefetch(value(a), d);
        for (std::int64_t d0 = 0; d0 < d; d0 += 4 * S)
            for (std::int64_t h0 = 0; h0 < group; h0 += 4) {
                const std::int64_t hb = std::min<std::int64_t>(4, group - h0);
                B acc[4][4];
                for (std::int64_t hh = 0; hh < hb; ++hh)
                    for (int i = 0; i < 4; ++i) acc[hh][i] = B::load_unaligned(part + (h0 + hh) * (d + 2) + 2 + d0 + i * S);
                for (std::int64_t j = b0; j <= b1; ++j) {
                    const auto vr = value(j);
                    const B v0 = row_batch<B>(vr, d0), v1 = row_batch<B>(vr, d0 + S), v2 = row_batch<B>(vr, d0 + 2 * S),
                            v3 = row_batch<B>(vr, d0 + 3 * S);
                    for (std::int64_t hh = 0; hh < hb; ++hh) {
                        const B p(scores[(h0 + hh) * len + (j - j0)]);
                        acc[hh][0] = xsimd::fma(p, v0, acc[hh][0]);
                        acc[hh][1] = xsimd::fma(p, v1, acc[hh][1]);
                        acc[hh][2] = xsimd::fma(p, v2, acc[hh][2]);
                        acc[hh][3] = xsimd::fma(p, v3, acc[hh][3]);
                    }
                }
                for (std::int64_t hh = 0; hh < hb; ++hh)
                    for (int i = 0; i < 4; ++i) acc[hh][i].store_unaligned(part + (h0 + hh) * (d + 2) + 2 + d0 + i * S);
            }
    }
}

}  // namespace detail_attn

/// Partial attention of `group` query heads (q + h · d, h < group) over keys [j0, j1] of one kv
/// head: key(j) / value(j) give that head's row (const T* or Int8HeadRow). Writes, per head h at
/// part + h · (d + 2): m, l, acc[d]. `scores` is scratch of group · (j1 − j0 + 1). In float at
/// the avx2 and avx512 levels, the score and value passes are those of kernels/isa/.
template <class T, class KeyAt, class ValueAt>
void attend_span(const T* q, std::int64_t group, std::int64_t d, std::int64_t j0, std::int64_t j1, KeyAt key, ValueAt value,
                 T* scores, T* part, Isa isa = Isa::Baseline) {
    using B = xsimd::batch<T>;
    constexpr auto S = static_cast<std::int64_t>(B::size);
    const std::int64_t len = j1 - j0 + 1;
    constexpr std::int64_t ahead = 4;  // rows prefetched ahead
    // The level's kernels need d to be a multiple of their width (every Gemma head_dim is).
    if constexpr (!std::is_same_v<T, float>) isa = Isa::Baseline;
    if (isa >= Isa::Avx512 && d % detail::avx512::kLanes != 0) isa = Isa::Baseline;
    if (isa == Isa::Avx2 && d % detail::avx2::kLanes != 0) isa = Isa::Baseline;
    if constexpr (std::is_same_v<T, float>) {
        if (isa >= Isa::Avx512) {
            if (group == 2) detail::avx512::score_pass<2>(q, group, d, j0, j1, key, scores);
            else detail::avx512::score_pass<4>(q, group, d, j0, j1, key, scores);
        } else if (isa == Isa::Avx2) {
            if (group == 2) detail::avx2::score_pass<2>(q, group, d, j0, j1, key, scores);
            else detail::avx2::score_pass<4>(q, group, d, j0, j1, key, scores);
        }
    }
    if (isa == Isa::Baseline) {
        if (d % S == 0) {
            if (group == 2) detail_attn::score_pass_blocked<2>(q, group, d, j0, j1, key, scores);
            else detail_attn::score_pass_blocked<4>(q, group, d, j0, j1, key, scores);
        } else {
            for (std::int64_t j = j0; j <= j1; ++j) {  // each key row once for all heads of the group
                if (j + ahead <= j1) detail_attn::row_prefetch(key(j + ahead), d);
                const auto kr = key(j);
                for (std::int64_t h = 0; h < group; ++h) scores[h * len + (j - j0)] = detail_attn::row_dot(q + h * d, kr, d);
            }
        }
    }
    for (std::int64_t h = 0; h < group; ++h) {
        T* s = scores + h * len;
        T mx = s[0];
        for (std::int64_t i = 1; i < len; ++i) mx = s[i] > mx ? s[i] : mx;
        T sum = 0;
        std::int64_t i = 0;
        if constexpr (std::is_same_v<T, float>) {  // libm's scalar exp dominated long contexts
            const B vm(mx);
            B acc(0.0f);
            for (; i + S <= len; i += S) {
                const B e = xsimd::exp(B::load_unaligned(s + i) - vm);
                e.store_unaligned(s + i);
                acc += e;
            }
            sum = xsimd::hadd(acc);
        }
        for (; i < len; ++i) {
            s[i] = std::exp(s[i] - mx);
            sum += s[i];
        }
        T* ph = part + h * (d + 2);
        ph[0] = mx;
        ph[1] = sum;
        std::fill(ph + 2, ph + 2 + d, T(0));
    }
    // Blocked only for large groups (the full layers' 16 heads): with 2 heads per kv head the
    // per-key row walk streams V better than 4 passes over slices of it (measured).
    if constexpr (std::is_same_v<T, float>) {
        if (isa >= Isa::Avx512) {
            if (group >= 4 && d % (4 * detail::avx512::kLanes) == 0)
                return detail::avx512::value_pass_blocked(group, d, j0, j1, value, scores, part);
            return detail::avx512::value_pass_rows(group, d, j0, j1, value, scores, part);
        }
        if (isa == Isa::Avx2) {
            if (group >= 4 && d % (4 * detail::avx2::kLanes) == 0)
                return detail::avx2::value_pass_blocked(group, d, j0, j1, value, scores, part);
            return detail::avx2::value_pass_rows(group, d, j0, j1, value, scores, part);
        }
    }
    if (group >= 4 && d % (4 * S) == 0)
        return detail_attn::value_pass_blocked(group, d, j0, j1, value, scores, part);
    for (std::int64_t j = j0; j <= j1; ++j) {
        if (j + ahead <= j1) detail_attn::row_prefetch(value(j + ahead), d);
        const auto vr = value(j);
        for (std::int64_t h = 0; h < group; ++h) detail_attn::row_axpy(scores[h * len + (j - j0)], vr, part + h * (d + 2) + 2, d);
    }
}

/// out[0, d) = the softmax-weighted sum of `spans` partials of one head (m, l, acc[d], one span
/// every `stride` values), merged in order.
template <class T>
void merge_spans(const T* partial, std::int64_t spans, std::int64_t stride, std::int64_t d, T* out) {
    T mx = partial[0];
    for (std::int64_t i = 1; i < spans; ++i) mx = std::max(mx, partial[i * stride]);
    T l = 0;
    std::fill(out, out + d, T(0));
    for (std::int64_t i = 0; i < spans; ++i) {
        const T* p = partial + i * stride;
        const T f = spans == 1 ? T(1) : std::exp(p[0] - mx);
        l += f * p[1];
        gemma4::detail::axpy(f, p + 2, out, d);
    }
    const T inv = T(1) / l;
    for (std::int64_t i = 0; i < d; ++i) out[i] *= inv;
}

/// One query row of attend_cache: its sequence and the cached key positions [first, last] it
/// sees (first > last: none).
struct CachedQuery {
    std::int32_t seq;
    std::int64_t first, last;
};

/// Grouped-query attention of query rows over the cached K/V of one layer (spec node attn.core,
/// scale 1): row t's `heads` heads at q + t · q_stride (head h at + h · d) read kv head
/// h / (heads / kv_heads) of keys [first, last] of its sequence; the result of head h goes to
/// out + t · out_stride + h · d. Work items are (row, kv head, span of keys): every cached row
/// is read once for the query heads of its group, long contexts split over the pool's threads,
/// and the spans of a row are merged in position order, so the result does not depend on the
/// thread count or on the other rows. `cache` provides int8(), key/value(layer, seq, pos) → T*
/// and key_int8/value_int8(layer, seq, pos) → {codes, scales}. Every row must see a key.
/// The calling thread's score buffer for attend_span, sized at its first use for the longest
/// span of the widest head group a Gemma 4 layer has: which thread takes which span varies, and a
/// buffer grown span by span (or layer kind by layer kind) would allocate in whichever decode
/// step a thread first meets a larger one.
template <class T>
std::vector<T>& span_scores() {
    thread_local std::vector<T> scores(static_cast<std::size_t>(kMaxGroup * kAttnSpan));
    return scores;
}

/// Gives every thread of `pool` its attention buffers now (a model does at load), so that no
/// decode step is the first on some thread to need them.
template <class T>
void reserve_thread_buffers(ThreadPool& pool) {
    pool.parallel_for(pool.size(), [](std::int64_t, std::int64_t) { (void)span_scores<T>(); }, 1);
}

/// attend_cache's work list and partial results, kept by a caller that attends again and
/// again so that a step allocates nothing once they are large enough.
template <class T>
struct AttendScratch {
    struct Span {
        std::int64_t t, g, j0, j1;
    };
    std::vector<Span> spans;
    std::vector<std::int64_t> first;  ///< per (row, kv head): its first span
    std::vector<T> partial;           ///< per span: max, sum and the unnormalised output of each head of its group
};

template <class T, class Cache>
void attend_cache(const Cache& cache, std::int64_t layer, std::span<const CachedQuery> rows, const T* q, std::int64_t q_stride,
                  std::int64_t heads, std::int64_t kv_heads, std::int64_t d, T* out, std::int64_t out_stride, ThreadPool& pool,
                  AttendScratch<T>& scratch) {
    const auto n = static_cast<std::int64_t>(rows.size());
    const std::int64_t hkv = kv_heads, group = heads / hkv, part_size = group * (d + 2);
    using Span = typename AttendScratch<T>::Span;
    std::vector<Span>& spans = scratch.spans;
    std::vector<std::int64_t>& first = scratch.first;
    spans.clear();
    first.resize(static_cast<std::size_t>(n * hkv + 1));
    for (std::int64_t t = 0; t < n; ++t) {
        const std::int64_t lo = rows[static_cast<std::size_t>(t)].first, hi = rows[static_cast<std::size_t>(t)].last;
        for (std::int64_t g = 0; g < hkv; ++g) {
            first[static_cast<std::size_t>(t * hkv + g)] = static_cast<std::int64_t>(spans.size());
            for (std::int64_t j0 = lo; j0 <= hi;) {
                const std::int64_t j1 = std::min(hi, (j0 / kAttnSpan + 1) * kAttnSpan - 1);
                spans.push_back({t, g, j0, j1});
                j0 = j1 + 1;
            }
        }
    }
    first.back() = static_cast<std::int64_t>(spans.size());
    std::vector<T>& partial = scratch.partial;
    if (partial.size() < spans.size() * static_cast<std::size_t>(part_size)) partial.resize(spans.size() * static_cast<std::size_t>(part_size));
    const bool int8 = cache.int8();
    const Isa isa = active_isa();
    pool.parallel_chunks(static_cast<std::int64_t>(spans.size()), [&](std::int64_t begin, std::int64_t end) {
        std::vector<T>& scores = span_scores<T>();
        for (std::int64_t i = begin; i < end; ++i) {
            const Span& sp = spans[static_cast<std::size_t>(i)];
            const std::int32_t s = rows[static_cast<std::size_t>(sp.t)].seq;
            const std::int64_t g = sp.g;
            const std::size_t need = static_cast<std::size_t>(group * (sp.j1 - sp.j0 + 1));
            if (scores.size() < need) scores.resize(need);
            const T* qg = q + sp.t * q_stride + g * group * d;
            T* part = partial.data() + i * part_size;
            if (int8) {
                auto row = [&, g](auto r) { return Int8HeadRow{r.codes + g * d, r.scales[g]}; };
                attend_span(
                    qg, group, d, sp.j0, sp.j1, [&](std::int64_t j) { return row(cache.key_int8(layer, s, j)); },
                    [&](std::int64_t j) { return row(cache.value_int8(layer, s, j)); }, scores.data(), part, isa);
            } else {
                attend_span(
                    qg, group, d, sp.j0, sp.j1, [&](std::int64_t j) { return cache.key(layer, s, j) + g * d; },
                    [&](std::int64_t j) { return cache.value(layer, s, j) + g * d; }, scores.data(), part, isa);
            }
        }
    }, 1);
    for (std::int64_t t = 0; t < n; ++t)
        for (std::int64_t g = 0; g < hkv; ++g) {
            const std::int64_t f = first[static_cast<std::size_t>(t * hkv + g)], count = first[static_cast<std::size_t>(t * hkv + g + 1)] - f;
            for (std::int64_t h = 0; h < group; ++h)
                merge_spans(partial.data() + f * part_size + h * (d + 2), count, part_size, d, out + t * out_stride + (g * group + h) * d);
        }
}

/// The same with a scratch of its own (one-off callers, tests).
template <class T, class Cache>
void attend_cache(const Cache& cache, std::int64_t layer, std::span<const CachedQuery> rows, const T* q, std::int64_t q_stride,
                  std::int64_t heads, std::int64_t kv_heads, std::int64_t d, T* out, std::int64_t out_stride, ThreadPool& pool) {
    AttendScratch<T> scratch;
    attend_cache(cache, layer, rows, q, q_stride, heads, kv_heads, d, out, out_stride, pool, scratch);
}

}  // namespace gemma4::kernels
