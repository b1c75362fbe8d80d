// StepScratch: the working buffers of one forward step (the residual stream, each block's
// intermediates, the attention's work list), kept by a caller that steps again and again (a
// Session, the Engine) so that a step after the first of its size allocates nothing. Its size
// is a function of the configuration and the step's token count alone (step_scratch_layout), a
// constexpr computation for a compile-time Gemma4Config; reserve() allocates it once.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/kernels/attention.hpp>
#include <gemma4/kv/kv_cache.hpp>
#include <gemma4/layers/rope.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// The tokens of one forward step, in order; several sequences may be mixed.
struct StepTokens {
    std::vector<SeqId> seq;         ///< per token: its sequence
    std::vector<std::int64_t> pos;  ///< per token: its position in that sequence
    /// Per token: the last key position it may see. Empty: causal (pos). Later than pos for the
    /// soft tokens of one image, which see each other in both directions (decision 9).
    std::vector<std::int64_t> last_key;
    /// Whether those bidirectional blocks apply to full-attention layers too (the reference
    /// implementation's default path) or to sliding layers only (the documented intent).
    bool blocks_on_full_layers = false;
    std::int64_t size() const { return static_cast<std::int64_t>(pos.size()); }
    void clear() {
        seq.clear();
        pos.clear();
        last_key.clear();
        blocks_on_full_layers = false;
    }
};

/// Values of T each buffer of a step of `tokens` ids holds at most.
struct StepScratchLayout {
    std::int64_t stream = 0;   ///< x, normed, mixed: [tokens, H] each
    std::int64_t qkv = 0;      ///< q | k | v rows of the widest attention kind
    std::int64_t heads = 0;    ///< attn.core's output, [tokens, q_dim]
    std::int64_t gate_up = 0;  ///< [tokens, 2 I]
    std::int64_t act = 0;      ///< [tokens, I]
    constexpr std::int64_t values() const { return 3 * stream + qkv + heads + gate_up + act; }
};

constexpr StepScratchLayout step_scratch_layout(const Gemma4Config& c, std::int64_t tokens) {
    std::int64_t qkv = 0, heads = 0;
    for (const AttentionKind kind : {AttentionKind::Sliding, AttentionKind::Full}) {
        if (c.num_layers_of(kind) == 0) continue;
        const LayerGeometry g = c.geometry(kind);
        qkv = std::max(qkv, g.q_dim() + 2 * g.kv_dim());
        heads = std::max(heads, g.q_dim());
    }
    return {tokens * c.hidden_size, tokens * qkv, tokens * heads, tokens * 2 * c.intermediate_size, tokens * c.intermediate_size};
}

template <class T>
struct StepScratch {
    StepTokens tokens;
    StepRope<T> rope;
    std::vector<T> x;       ///< the residual stream
    std::vector<T> normed;  ///< a block's normed input
    std::vector<T> mixed;   ///< a block's output before its residual add
    std::vector<T> qkv, heads, gate_up, act;
    std::vector<kernels::CachedQuery> queries;
    kernels::AttendScratch<T> attend;
    std::vector<std::int64_t> logit_rows;  ///< the step's rows that get logits
    std::vector<SeqId> seen;               ///< the step's sequences, to refuse one that appears twice

    StepScratch() = default;
    StepScratch(const Gemma4Config& c, std::int64_t tokens) { reserve(c, tokens); }

    /// Allocates the buffers for steps of up to `n` tokens now rather than at the first such step.
    void reserve(const Gemma4Config& c, std::int64_t n) {
        const StepScratchLayout l = step_scratch_layout(c, n);
        const auto un = static_cast<std::size_t>(n);
        for (std::vector<T>* b : {&x, &normed, &mixed}) size_at_least(*b, l.stream);
        size_at_least(qkv, l.qkv);
        size_at_least(heads, l.heads);
        size_at_least(gate_up, l.gate_up);
        size_at_least(act, l.act);
        queries.reserve(un);
        tokens.seq.reserve(un);
        tokens.pos.reserve(un);
        logit_rows.reserve(un);
        seen.reserve(un);
        rope.reserve(c, n);
    }

    /// The first `n` values of `buffer`, grown (once) when the step is the largest yet. The
    /// values are left as the last step wrote them: every user overwrites what it reads.
    static T* values(std::vector<T>& buffer, std::int64_t n) {
        size_at_least(buffer, n);
        return buffer.data();
    }

private:
    static void size_at_least(std::vector<T>& buffer, std::int64_t n) {
        if (static_cast<std::int64_t>(buffer.size()) < n) buffer.resize(static_cast<std::size_t>(n));
    }
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
