// The float kernels of one instruction-set level: the bf16 linear, the score and value passes
// of attention, GeGLU's activation and the soft-cap. Written once, compiled once per level: each kernels/isa/<level>.hpp includes
// this text inside its own namespace and target region (so there is no include guard), after
// defining its vector layer:
//
//   V, kLanes                  a register of kLanes floats
//   vzero, vsplat, vload, vstore, vadd, vsub, vmul, vfma, vdiv, vabs, vsum
//   vmin, vmax                 where an operand is NaN, the second one (the instructions' rule)
//   vcopysign(mag, sign)       |mag| with the sign of `sign`
//   vselect_lt(a, b, x, y)     per lane a < b ? x : y (false for NaN)
//   vround(a)                  to the nearest whole number, ties to even
//   vpow2i(n)                  2^n for whole n in [−126, 127]
//   vload_i8(codes)            kLanes int8 codes as floats
//   vload_bf16(w, even, odd)   kLanes 4-byte words of bf16 pairs: the even and the odd elements
//   vhold(v)                   v, kept in a register for the several instructions that use it
//   kBf16Rows, kBf16Tokens     the register tile of the bf16 kernel
//
// Every output of these kernels is computed by the same sequence of operations whatever the
// tiling, the thread count or the other tokens of a call.

// ---- linear for bf16 weights ---------------------------------------------------------------
// A bf16 pair read as one u32 gives the odd element by masking and the even one by shifting, so
// the activations are stored once per call split the same way (per chunk of 2·kLanes: the
// kLanes even elements, then the kLanes odd ones) and the inner loop is two FMAs per u32 load.

/// x split into even/odd halves per 2·kLanes chunk over the first `main` columns.
inline void bf16_split(const float* x, std::int64_t main, float* out) {
    for (std::int64_t k = 0; k < main; k += 2 * kLanes)
        for (std::int64_t i = 0; i < kLanes; ++i) {
            out[k + i] = x[k + 2 * i];
            out[k + kLanes + i] = x[k + 2 * i + 1];
        }
}

/// y[t0 + t][n0 + r] for r < RR, t < TT: rows n0… of w against tokens t0… (xs: split, x: as given,
/// for the columns past `main`).
template <int RR, int TT>
inline void bf16_tile(const std::uint16_t* w, std::int64_t K, std::int64_t main, std::int64_t n0, const float* xs,
                      Rows<const float> x, std::int64_t t0, Rows<float> y) {
    V acc[RR][TT];
    for (auto& a : acc)
        for (auto& b : a) b = vzero();
    const std::uint16_t* wr[RR];
    for (int r = 0; r < RR; ++r) wr[r] = w + (n0 + r) * K;
    for (std::int64_t k = 0; k < main; k += 2 * kLanes) {
        V we[RR], wo[RR];
#pragma GCC unroll 4
        for (int r = 0; r < RR; ++r) vload_bf16(wr[r] + k, we[r], wo[r]);
#pragma GCC unroll 4
        for (int t = 0; t < TT; ++t) {
            const float* xt = xs + (t0 + t) * main + k;
            const V xe = vhold(vload(xt)), xo = vhold(vload(xt + kLanes));  // each serves RR rows
#pragma GCC unroll 4
            for (int r = 0; r < RR; ++r) {
                acc[r][t] = vfma(we[r], xe, acc[r][t]);
                acc[r][t] = vfma(wo[r], xo, acc[r][t]);
            }
        }
    }
    for (int r = 0; r < RR; ++r)
        for (int t = 0; t < TT; ++t) {
            float s = vsum(acc[r][t]);
            const float* xt = x.row(t0 + t);
            for (std::int64_t k = main; k < K; ++k) s += bf16_to_float(wr[r][k]) * xt[k];
            y.row(t0 + t)[n0 + r] = s;
        }
}

/// Rows [n0, n1) of bf16 w against tokens [t0, t1).
inline void bf16_rows(const std::uint16_t* w, std::int64_t K, std::int64_t main, std::int64_t n0, std::int64_t n1, const float* xs,
                      Rows<const float> x, std::int64_t t0, std::int64_t t1, Rows<float> y) {
    std::int64_t n = n0;
    for (; n + kBf16Rows <= n1; n += kBf16Rows) {
        std::int64_t t = t0;
        for (; t + kBf16Tokens <= t1; t += kBf16Tokens) bf16_tile<kBf16Rows, kBf16Tokens>(w, K, main, n, xs, x, t, y);
        for (; t < t1; ++t) bf16_tile<kBf16Rows, 1>(w, K, main, n, xs, x, t, y);
    }
    for (; n < n1; ++n) {
        std::int64_t t = t0;
        for (; t + kBf16Tokens <= t1; t += kBf16Tokens) bf16_tile<1, kBf16Tokens>(w, K, main, n, xs, x, t, y);
        for (; t < t1; ++t) bf16_tile<1, 1>(w, K, main, n, xs, x, t, y);
    }
}

// ---- attention over cached rows (kernels/attention.hpp) ------------------------------------
// A cached row is `const float*` or an int8 row with its scale (kernels::Int8HeadRow).

/// Elements [i0, i0 + kLanes) of a cached row (int8 rows: code · scale).
inline V row_vec(const float* r, std::int64_t i0) { return vload(r + i0); }
inline V row_vec(kernels::Int8HeadRow r, std::int64_t i0) { return vmul(vload_i8(r.codes + i0), vsplat(r.scale)); }

/// The score pass, register-blocked: 4 keys × H heads of dot products accumulate in registers,
/// so each loaded vector of K (int8 rows: converted and scaled once) or q serves several
/// products. Missing keys or heads of a partial block repeat the first one; their products are
/// dropped. H: 4, or 2 for groups of 2 (the sliding layers). d is a multiple of kLanes.
template <std::int64_t H, class KeyAt>
void score_pass(const float* q, std::int64_t group, std::int64_t d, std::int64_t j0, std::int64_t j1, KeyAt key, float* scores) {
    constexpr std::int64_t K = 4;  // keys per block
    const std::int64_t len = j1 - j0 + 1;
    for (std::int64_t j = j0; j <= j1; j += K) {
        const std::int64_t kb = std::min<std::int64_t>(K, j1 - j + 1);
        for (std::int64_t a = j + K; a < std::min(j + 2 * K, j1 + 1); ++a) kernels::detail_attn::row_prefetch(key(a), d);
        decltype(key(j)) kr[K];
#pragma GCC unroll 4
        for (std::int64_t x = 0; x < K; ++x) kr[x] = key(j + (x < kb ? x : 0));
        for (std::int64_t h0 = 0; h0 < group; h0 += H) {
            const std::int64_t hb = std::min<std::int64_t>(H, group - h0);
            const float* qh[H];
#pragma GCC unroll 4
            for (std::int64_t y = 0; y < H; ++y) qh[y] = q + (h0 + (y < hb ? y : 0)) * d;
            V acc[H][K];
            for (auto& r : acc)
                for (auto& c : r) c = vzero();
            for (std::int64_t i = 0; i < d; i += kLanes) {
                V kv[K], qv[H];
#pragma GCC unroll 4
                for (std::int64_t x = 0; x < K; ++x) kv[x] = vhold(row_vec(kr[x], i));  // each serves H heads
#pragma GCC unroll 4
                for (std::int64_t y = 0; y < H; ++y) qv[y] = vhold(vload(qh[y] + i));  // each serves K keys
#pragma GCC unroll 4
                for (std::int64_t y = 0; y < H; ++y)
#pragma GCC unroll 4
                    for (std::int64_t x = 0; x < K; ++x) acc[y][x] = vfma(qv[y], kv[x], acc[y][x]);
            }
#pragma GCC unroll 4
            for (std::int64_t y = 0; y < H; ++y)
#pragma GCC unroll 4
                for (std::int64_t x = 0; x < K; ++x)
                    if (y < hb && x < kb) scores[(h0 + y) * len + (j - j0 + x)] = vsum(acc[y][x]);
        }
    }
}

/// The value pass for groups of 4 or more heads, register-blocked: up to 4 heads × 4 vectors of
/// d stay in registers across a block of keys (one pass per 4·kLanes-wide slice of d and per 4
/// heads). The keys go in blocks of kKeys rows that stay in L1/L2 through all the slices, and the
/// accumulators go back to `part` between blocks, exactly. d is a multiple of 4·kLanes.
template <class ValueAt>
void value_pass_blocked(std::int64_t group, std::int64_t d, std::int64_t j0, std::int64_t j1, ValueAt value, const float* scores,
                        float* part) {
    constexpr std::int64_t kKeys = 64;
    const std::int64_t len = j1 - j0 + 1;
    for (std::int64_t b0 = j0; b0 <= j1; b0 += kKeys) {
        const std::int64_t b1 = std::min(j1, b0 + kKeys - 1);
        for (std::int64_t a = b1 + 1; a <= std::min(j1, b1 + kKeys); ++a) kernels::detail_attn::row_prefetch(value(a), d);
        for (std::int64_t d0 = 0; d0 < d; d0 += 4 * kLanes)
            for (std::int64_t h0 = 0; h0 < group; h0 += 4) {
                const std::int64_t hb = std::min<std::int64_t>(4, group - h0);
                // The head loops run to 4 with a guard rather than to hb: fully unrolled, the 16
                // accumulators then stay in registers.
                V acc[4][4];
#pragma GCC unroll 4
                for (std::int64_t hh = 0; hh < 4; ++hh)
#pragma GCC unroll 4
                    for (int i = 0; i < 4; ++i) acc[hh][i] = hh < hb ? vload(part + (h0 + hh) * (d + 2) + 2 + d0 + i * kLanes) : vzero();
                for (std::int64_t j = b0; j <= b1; ++j) {
                    const auto vr = value(j);
                    const V v0 = row_vec(vr, d0), v1 = row_vec(vr, d0 + kLanes), v2 = row_vec(vr, d0 + 2 * kLanes),
                            v3 = row_vec(vr, d0 + 3 * kLanes);
#pragma GCC unroll 4
                    for (std::int64_t hh = 0; hh < 4; ++hh) {
                        if (hh >= hb) break;
                        const V p = vsplat(scores[(h0 + hh) * len + (j - j0)]);
                        acc[hh][0] = vfma(p, v0, acc[hh][0]);
                        acc[hh][1] = vfma(p, v1, acc[hh][1]);
                        acc[hh][2] = vfma(p, v2, acc[hh][2]);
                        acc[hh][3] = vfma(p, v3, acc[hh][3]);
                    }
                }
#pragma GCC unroll 4
                for (std::int64_t hh = 0; hh < 4; ++hh)
                    if (hh < hb)
#pragma GCC unroll 4
                        for (int i = 0; i < 4; ++i) vstore(part + (h0 + hh) * (d + 2) + 2 + d0 + i * kLanes, acc[hh][i]);
            }
    }
}

/// The value pass for small groups: each key's row once, added to every head's accumulator in
/// memory (with 2 heads per kv head this streams V better than passes over slices of it).
/// d is a multiple of kLanes.
template <class ValueAt>
void value_pass_rows(std::int64_t group, std::int64_t d, std::int64_t j0, std::int64_t j1, ValueAt value, const float* scores,
                     float* part) {
    constexpr std::int64_t ahead = 4;  // rows prefetched ahead
    const std::int64_t len = j1 - j0 + 1;
    for (std::int64_t j = j0; j <= j1; ++j) {
        if (j + ahead <= j1) kernels::detail_attn::row_prefetch(value(j + ahead), d);
        const auto vr = value(j);
        for (std::int64_t h = 0; h < group; ++h) {
            const V p = vsplat(scores[h * len + (j - j0)]);
            float* acc = part + h * (d + 2) + 2;
            for (std::int64_t i = 0; i < d; i += kLanes) vstore(acc + i, vfma(p, row_vec(vr, i), vload(acc + i)));
        }
    }
}

// ---- GeGLU's activation (kernels/ops.hpp) --------------------------------------------------

/// e^x for x clamped to [−87, 88]: x = n·ln 2 + r with |r| ≤ ln 2 / 2 (ln 2 in two parts, the
/// first with few enough bits that n times it is exact), e^r by its Taylor series to r^7 (the
/// truncation is below 6e-9 relative, under float's 6e-8), times 2^n. NaN stays NaN (x is the
/// second operand of the clamp).
inline V vexp(V x) {
    x = vmin(vsplat(88.0f), vmax(vsplat(-87.0f), x));
    const V n = vround(vmul(x, vsplat(1.44269504088896341f)));  // log2 e
    V r = vfma(n, vsplat(-0.693359375f), x);                    // ln 2 = 0.693359375 − 2.12194440e-4
    r = vfma(n, vsplat(2.12194440e-4f), r);
    V p = vfma(vsplat(1.0f / 5040), r, vsplat(1.0f / 720));  // Horner, from r^7 down
    p = vfma(p, r, vsplat(1.0f / 120));
    p = vfma(p, r, vsplat(1.0f / 24));
    p = vfma(p, r, vsplat(1.0f / 6));
    p = vfma(p, r, vsplat(0.5f));
    p = vfma(p, r, vsplat(1.0f));
    p = vfma(p, r, vsplat(1.0f));
    return vmul(p, vpow2i(n));
}

/// y[i] = gelu_tanh(gate[i]) · up[i] for the whole vectors of [0, n); returns how many were done.
/// 0.5 (1 + tanh u) = 1 / (1 + e^(−2u)), so gelu_tanh(g) = g / (1 + e^(−2u)) with
/// u = √(2/π) (g + 0.044715 g³): no 1 + tanh to cancel where tanh u → −1.
inline std::int64_t gelu_mul(const float* gate, const float* up, std::int64_t n, float* y) {
    const V minus_2k = vsplat(-2.0f * 0.79788456080286535588f), c = vsplat(0.044715f), one = vsplat(1.0f);
    std::int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
        const V g = vload(gate + i);
        const V minus_2u = vmul(minus_2k, vfma(vmul(c, g), vmul(g, g), g));
        vstore(y + i, vdiv(vmul(g, vload(up + i)), vadd(one, vexp(minus_2u))));
    }
    return i;
}

// ---- lmHead's soft-cap (kernels/ops.hpp) ---------------------------------------------------

/// z[i] ← cap · tanh(z[i] / cap) for the whole vectors of [0, n); returns how many were done.
/// tanh is odd: it is taken at a = |u| and given u's sign. Below a = 0.625, a + a³ P(a²) with
/// Cephes' minimax P of degree 4 (tanhf's; no cancellation near 0); above, 1 − 2 / (1 + e^(2a)),
/// where 2 / (1 + e^(2a)) < 0.45 cancels nothing. ±∞ gives ±cap, NaN stays NaN.
inline std::int64_t softcap(float* z, std::int64_t n, float cap) {
    const V inv = vsplat(1.0f / cap), vcap = vsplat(cap), one = vsplat(1.0f), two = vsplat(2.0f), near_end = vsplat(0.625f);
    std::int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
        const V u = vmul(vload(z + i), inv), a = vabs(u), a2 = vmul(a, a);
        V p = vfma(vsplat(-5.70498872745e-3f), a2, vsplat(2.06390887954e-2f));
        p = vfma(p, a2, vsplat(-5.37397155531e-2f));
        p = vfma(p, a2, vsplat(1.33314422036e-1f));
        p = vfma(p, a2, vsplat(-3.33332819422e-1f));
        const V near = vfma(vmul(p, a2), a, a);
        const V far = vsub(one, vdiv(two, vadd(one, vexp(vadd(a, a)))));
        vstore(z + i, vmul(vcap, vcopysign(vselect_lt(a, near_end, near, far), u)));
    }
    return i;
}
