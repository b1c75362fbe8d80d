// The Q8/Q4 panel kernel at 256 bits, written once for two levels: kernels/isa/avx2.hpp includes
// this text in namespace avx2 (kAvxVnni = false: the int8 products by vpmaddubsw + vpmaddwd) and
// in namespace avxvnni (kAvxVnni = true: vpdpbusd on ymm), each inside its own target region.
// So there is no include guard.
//
// A panel interleaves its 16 rows in 4-byte words (tensor/quant.hpp), so one 32-byte half of a
// 64-byte word column holds 4 codes of 8 rows. Per block, each half is met by the broadcast
// activation words of up to 4 tokens; the exact int32 block sums then take the AVX-512 kernel's
// convert and FMA (acc = fma(float(isum), w_scale · x_scale, acc), blocks in order), so all the
// vector levels give bit-identical outputs.
//
// Exactness of the products: vpdpbusd and vpmaddubsw multiply unsigned by signed bytes.
//  * Q4: the nibble (code + 8, ≤ 15) is the unsigned operand; the block sum starts at −8·Σx.
//    vpmaddubsw's int16 pair sums stay ≤ 2 · 15 · 127, far from saturating.
//  * Q8 with VNNI: code + 128 (sign bit flipped), the sum starting at −128·Σx.
//  * Q8 without VNNI: 255 · 127 · 2 would saturate vpmaddubsw's int16, so the product is taken
//    as |w| · (x · sign(w)): both factors ≤ 127, pair sums ≤ 32,258; the sum starts at 0.

struct PanelAvx2 {
    static constexpr int P = static_cast<int>(quant::kPanelRows);
    static constexpr int kTokens = 4;  ///< tokens per pass: 2 halves × 4 accumulators + 4 block sums in 16 registers

    /// The offset that makes a weight code unsigned for this kernel (GroupActs).
    static constexpr int offset(DType t) { return t == DType::Q4 ? quant::kQ4Offset : kAvxVnni ? 128 : 0; }

    /// isum += the 4-code dot products of w (per int32 lane) with the broadcast activation word x.
    static __m256i dot(__m256i isum, __m256i w, __m256i w_abs, __m256i x, bool q4) {
        if constexpr (kAvxVnni) {
            (void)w_abs, (void)q4;
            return _mm256_dpbusd_avx_epi32(isum, w, x);
        } else {
            const __m256i ones = _mm256_set1_epi16(1);
            const __m256i pairs = q4 ? _mm256_maddubs_epi16(w, x) : _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(x, w));
            return _mm256_add_epi32(isum, _mm256_madd_epi16(pairs, ones));
        }
    }

    /// Word s of block b (Block elements, s < Block / 4), half h (rows 8h … 8h + 7), as the
    /// kernel's weight operand.
    template <bool Q4, int Block>
    static __m256i weight(const std::byte* panel, std::int64_t b, int s, int h) {
        const std::byte* base = panel + quant::block_codes_offset(Q4 ? DType::Q4 : DType::Q8, Block, b);
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + 64 * s + 32 * h));  // unit s / 8 at 512 · (s / 8)
        if constexpr (Q4) {
            // the low or high nibbles of the units' bytes
            return _mm256_and_si256(quant::unit_high(b * (Block / 32)) ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(0x0f));
        } else {
            return kAvxVnni ? _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80))) : v;
        }
    }

    /// Tokens i … i + N − 1 of a group of n (activations `act`, GroupActs) over one panel of
    /// Block-element blocks: y[t][0 … rows). Prefetches the panel's stream as `pf` says (none:
    /// already cached).
    template <bool Q4, int N, int Block>
    static void pass(const std::byte* panel, std::int64_t blocks, const std::int32_t* act, int n, int i, PanelPrefetch pf,
                     float* const y[N], int rows) {
        constexpr DType kType = Q4 ? DType::Q4 : DType::Q8;
        constexpr int U = Block / 32, W = Block / 4, R = W + 2;  // units and words per block, record words per token
        constexpr int S = N <= 2 ? U : 1;  // sums per token: one per unit when few tokens give few chains
        __m256 acc[2][N];
        for (auto& half : acc)
            for (auto& a : half) a = _mm256_setzero_ps();
        for (std::int64_t b = 0; b < blocks; ++b) {
            if (pf) prefetch_block<kType, Block>(panel, b, pf);
            const auto* scales = reinterpret_cast<const std::uint16_t*>(panel + quant::block_scales_offset(kType, Block, b));
            const std::int32_t* words = act + b * R * n + i;
            const auto* xs = reinterpret_cast<const float*>(words + W * n);
            const std::int32_t* start = words + (W + 1) * n;
#pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
                __m256i isum[N][S];
#pragma GCC unroll 4
                for (int t = 0; t < N; ++t)
#pragma GCC unroll 2
                    for (int k = 0; k < S; ++k) isum[t][k] = k == 0 ? _mm256_set1_epi32(start[t]) : _mm256_setzero_si256();
#pragma GCC unroll 16
                for (int s = 0; s < W; ++s) {
                    const __m256i w = weight<Q4, Block>(panel, b, s, h);
                    const __m256i w_abs = Q4 || kAvxVnni ? w : _mm256_abs_epi8(w);
#pragma GCC unroll 4
                    for (int t = 0; t < N; ++t) isum[t][s / 8 % S] = dot(isum[t][s / 8 % S], w, w_abs, _mm256_set1_epi32(words[s * n + t]), Q4);
                }
                const __m256 ws = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 8 * h)));
#pragma GCC unroll 4
                for (int t = 0; t < N; ++t) {
                    __m256i sum = isum[t][0];
                    if constexpr (S > 1) sum = _mm256_add_epi32(sum, isum[t][1]);  // exact: the order of an int32 sum is free
                    acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(ws, _mm256_set1_ps(xs[t])), acc[h][t]);
                }
            }
        }
        for (int t = 0; t < N; ++t) store(y[t], acc[0][t], acc[1][t], rows);
    }

    /// pass<true, 1, Block> taken a 128-column group (4 units) at a time, as the AVX-512 level's
    /// pass_q4_one_token (why there): the group's bytes loaded once for both nibbles (units k
    /// and k + 2), four independent unit sums (a 64-element block adds its two), the float
    /// accumulation in block order (same bits).
    template <int Block>
    static void pass_q4_one_token(const std::byte* panel, std::int64_t blocks, const std::int32_t* act, PanelPrefetch pf, float* y, int rows) {
        constexpr int U = Block / 32, W = Block / 4, R = W + 2, B = static_cast<int>(quant::group_blocks(Block));
        const __m256i low4 = _mm256_set1_epi8(0x0f);
        // one token's record per block (GroupActs, n = 1): W words, the x scale, the start value;
        // word s of unit u of the group is word (u % U)·8 + s of its block
        const auto word = [&](std::int64_t b0, int u, int s) { return _mm256_set1_epi32(act[(b0 + u / U) * R + u % U * 8 + s]); };
        __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (std::int64_t b0 = 0; b0 < blocks; b0 += B) {  // blocks is a whole number of groups
            if (pf) {
#pragma GCC unroll 4
                for (int k = 0; k < B; ++k) prefetch_block<DType::Q4, Block>(panel, b0 + k, pf);
            }
            const std::byte* base = panel + quant::block_codes_offset(DType::Q4, Block, b0);
#pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
                __m256i isum[4];  // per unit; a block's start value in its first unit's sum
#pragma GCC unroll 4
                for (int u = 0; u < 4; ++u) isum[u] = u % U == 0 ? _mm256_set1_epi32(act[(b0 + u / U) * R + W + 1]) : _mm256_setzero_si256();
#pragma GCC unroll 2
                for (int k = 0; k < 2; ++k)  // units k (low nibbles) and k + 2 (high nibbles)
#pragma GCC unroll 8
                    for (int s = 0; s < 8; ++s) {
                        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + quant::kUnitBytes * k + 64 * s + 32 * h));
                        const __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
                        isum[k] = dot(isum[k], lo, lo, word(b0, k, s), true);
                        isum[k + 2] = dot(isum[k + 2], hi, hi, word(b0, k + 2, s), true);
                    }
#pragma GCC unroll 4
                for (int k = 0; k < B; ++k) {
                    const std::int64_t b = b0 + k;
                    __m256i sum = isum[k * U];
                    if constexpr (U > 1) sum = _mm256_add_epi32(sum, isum[k * U + 1]);
                    const auto* scales = reinterpret_cast<const std::uint16_t*>(panel + quant::block_scales_offset(DType::Q4, Block, b));
                    const __m256 ws = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 8 * h)));
                    const float xs = std::bit_cast<float>(act[b * R + W]);
                    acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(ws, _mm256_set1_ps(xs)), acc[h]);
                }
            }
        }
        store(y, acc[0], acc[1], rows);
    }

    /// The 16 rows' outputs (the first `rows` of them) to y.
    static void store(float* y, __m256 lo, __m256 hi, int rows) {
        if (rows == P) {
            _mm256_storeu_ps(y, lo);
            _mm256_storeu_ps(y + 8, hi);
        } else {
            alignas(32) float tmp[P];
            _mm256_store_ps(tmp, lo);
            _mm256_store_ps(tmp + 8, hi);
            std::memcpy(y, tmp, static_cast<std::size_t>(rows) * sizeof(float));
        }
    }

    template <bool Q4, int Block>
    static void dispatch(int count, const std::byte* panel, std::int64_t blocks, const std::int32_t* act, int n, int i,
                         PanelPrefetch pf, float* const* y, int rows) {
        switch (count) {
            case 1:
                if (Q4 && n == 1) return pass_q4_one_token<Block>(panel, blocks, act, pf, y[0], rows);
                return pass<Q4, 1, Block>(panel, blocks, act, n, i, pf, y, rows);
            case 2: return pass<Q4, 2, Block>(panel, blocks, act, n, i, pf, y, rows);
            case 3: return pass<Q4, 3, Block>(panel, blocks, act, n, i, pf, y, rows);
            default: return pass<Q4, 4, Block>(panel, blocks, act, n, i, pf, y, rows);
        }
    }

    /// dispatch for the block size `block` of the weights.
    template <bool Q4>
    static void dispatch(std::int64_t block, int count, const std::byte* panel, std::int64_t blocks, const std::int32_t* act, int n,
                         int i, PanelPrefetch pf, float* const* y, int rows) {
        if (block == 64) dispatch<Q4, 64>(count, panel, blocks, act, n, i, pf, y, rows);
        else dispatch<Q4, 32>(count, panel, blocks, act, n, i, pf, y, rows);
    }
};

/// Panels [p0, p1) of w for all tokens of `a` (their activations in `ga`, with offset() above).
#if GEMMA4_KERNEL_BODIES
GEMMA4_KERNEL_ENTRY void panels(const WeightView& w, const QuantActs& a, const GroupActs& ga, std::int64_t p0, std::int64_t p1, Rows<float> y) {
    constexpr int P = PanelAvx2::P;
    constexpr auto G = kGroupTokens;
    const bool q4 = w.dtype == DType::Q4;
    const PanelPrefetch plan = panel_prefetch(w.dtype, a.tokens);
    float* yt[PanelAvx2::kTokens];
    for (std::int64_t p = p0; p < p1; ++p) {
        const std::int64_t n0 = p * P;
        const int rows = static_cast<int>(std::min<std::int64_t>(P, w.rows() - n0));
        for (std::int64_t g0 = 0; g0 < a.tokens; g0 += G) {
            const int n = static_cast<int>(std::min<std::int64_t>(G, a.tokens - g0));
            for (int i = 0; i < n; i += PanelAvx2::kTokens) {
                const int count = std::min(PanelAvx2::kTokens, n - i);
                for (int t = 0; t < count; ++t) yt[t] = y.row(g0 + i + t) + n0;
                const PanelPrefetch pf = g0 == 0 && i == 0 ? plan : PanelPrefetch{};
                if (q4) PanelAvx2::dispatch<true>(w.block, count, w.panel(p), a.blocks, ga.group(g0), n, i, pf, yt, rows);
                else PanelAvx2::dispatch<false>(w.block, count, w.panel(p), a.blocks, ga.group(g0), n, i, pf, yt, rows);
            }
        }
    }
}
#else
GEMMA4_KERNEL_ENTRY void panels(const WeightView& w, const QuantActs& a, const GroupActs& ga, std::int64_t p0, std::int64_t p1, Rows<float> y);
#endif
