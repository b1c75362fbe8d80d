// Assistant: the Gemma 4 multi-token-prediction drafter. A small decoder that proposes the
// target model's next tokens from the target's last hidden state, reading the target's own KV
// cache instead of keeping one (docs/assistant.md has the sources of every fact used here).
//
// One step, per row (token, h, position p):
//   x = pre_projection([target embedding(token) · target embed scale ; h])
//   4 layers: input_norm → q_proj → q_norm → RoPE at p → attention (scale 1) over the target
//     cache of its last sliding layer (sliding layers, keys p − W < k < p) or of its last full
//     layer (full layers, keys k < p) → o_proj → post_mix_norm → residual → post_attn_norm →
//     GeGLU → post_ffn_norm → residual → × layer_scalar
//   final norm → logits = x · Eᵀ over the assistant's own (tied) embedding, no soft-cap;
//   next h = post_projection(final-normed x).
// Drafting repeats the step with the argmax token and the next h, at the same position p.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/error.hpp>
#include <gemma4/kernels/attention.hpp>
#include <gemma4/kernels/linear.hpp>
#include <gemma4/kernels/ops.hpp>
#include <gemma4/kernels/thread_pool.hpp>
#include <gemma4/layers/attention.hpp>
#include <gemma4/layers/observer.hpp>
#include <gemma4/layers/rms_norm.hpp>
#include <gemma4/layers/rope.hpp>
#include <gemma4/model/assistant_checkpoint.hpp>
#include <gemma4/kv/kv_cache.hpp>
#include <gemma4/model/model.hpp>
#include <gemma4/model/quantize.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// One row of an assistant step: the token fed in, and the position its query takes (the
/// position that token has, or will have, in the sequence: every step of a draft uses the same
/// one). The row attends to the cached keys of `seq` before `position`.
struct AssistantRow {
    SeqId seq;
    std::int32_t token;
    std::int64_t position;
};

/// Where a draft starts: the last sampled token (not yet in the target cache, which holds
/// positions [0, cache.length(seq))) and the target's final-normed hidden state at the cache's
/// last position, the one whose logits gave `token`.
template <class T>
struct AssistantSeed {
    SeqId seq;
    std::int32_t token;
    std::span<const T> hidden;
};

/// The target layers an assistant reads: the last sliding and the last full layer (-1: none).
struct AssistantSources {
    int sliding = -1, full = -1;
};

/// Checks that an assistant fits a target (widths, vocabulary, the K/V geometry and window of
/// the target layers it reads) and returns those layers. Errors name the assistant's field.
inline AssistantSources check_assistant_fits(const AssistantConfig& a, const Gemma4Config& target, const std::string& file = "config.json") {
    const Gemma4Config& c = a.text;
    auto fail = [&](const std::string& field, const std::string& what) { throw ConfigError(file + "." + field + ": " + what); };
    if (a.backbone_hidden_size != target.hidden_size)
        fail("backbone_hidden_size", std::to_string(a.backbone_hidden_size) + " differs from the target's hidden_size " +
                                         std::to_string(target.hidden_size));
    if (c.vocab_size != target.vocab_size)
        fail("text_config.vocab_size", std::to_string(c.vocab_size) + " differs from the target's vocab_size " + std::to_string(target.vocab_size));
    AssistantSources s;
    for (std::int64_t i = 0; i < target.num_hidden_layers; ++i)
        (target.layer_kind(i) == AttentionKind::Sliding ? s.sliding : s.full) = static_cast<int>(i);
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
        const LayerGeometry g = c.layer(i);
        const bool sliding = g.kind == AttentionKind::Sliding;
        const int source = sliding ? s.sliding : s.full;
        const std::string at = "text_config.layer_types[" + std::to_string(i) + "]";
        if (source < 0)
            fail(at, std::string(attention_kind_name(g.kind)) + " reads the target's last layer of that kind, and the target has none");
        const LayerGeometry tg = target.layer(source);
        if (g.num_kv_heads != tg.num_kv_heads || g.head_dim != tg.head_dim)
            fail(sliding ? "text_config.num_key_value_heads/head_dim" : "text_config.num_global_key_value_heads/global_head_dim",
                 "layer " + std::to_string(i) + " reads " + std::to_string(g.num_kv_heads) + " kv heads × " + std::to_string(g.head_dim) +
                     " from target layer " + std::to_string(source) + ", which caches " + std::to_string(tg.num_kv_heads) + " × " +
                     std::to_string(tg.head_dim));
        // The cached keys were rotated with the target's RoPE; a query rotated otherwise would
        // score them at the wrong relative positions.
        if (g.rope.rope_type != tg.rope.rope_type || g.rope.rope_theta != tg.rope.rope_theta || g.rope_pairs != tg.rope_pairs)
            fail(std::string("text_config.rope_parameters.") + std::string(attention_kind_name(g.kind)),
                 "differs from the RoPE of target layer " + std::to_string(source) + " (theta " + std::to_string(tg.rope.rope_theta) + ", " +
                     std::to_string(tg.rope_pairs) + " rotated pairs), whose cached keys it reads");
        if (g.num_heads % g.num_kv_heads != 0)
            fail("text_config.num_attention_heads", "must be a multiple of the kv heads read (" + std::to_string(g.num_kv_heads) + ")");
    }
    // The target's cache keeps only the keys its own window can reach.
    if (c.num_layers_of(AttentionKind::Sliding) > 0 && c.sliding_window > target.sliding_window)
        fail("text_config.sliding_window", std::to_string(c.sliding_window) + " exceeds the target's " + std::to_string(target.sliding_window) +
                                               ": the target cache does not keep the older keys");
    return s;
}

template <class T>
class Assistant {
public:
    using scalar_type = T;

    /// One decoder layer of the assistant and the target layer whose cache it reads.
    struct Layer {
        LayerGeometry geom;
        int source;
        RMSNorm<T> input_norm, q_norm, post_mix_norm, post_attn_norm, post_ffn_norm;
        WeightView q_proj, o_proj, gate_proj, up_proj, down_proj;
        std::vector<T> inv_freq;
        T layer_scalar;
    };

    Assistant(AssistantCheckpoint checkpoint, const Gemma4Config& target, ModelOptions options = {})
        : Assistant(std::move(checkpoint), target, std::make_unique<ThreadPool>(options.n_threads)) {}

    /// Loads an assistant checkpoint directory for a target of config `target`; re-encoding at
    /// load runs on the assistant's own pool of options.n_threads threads, unless `load` names a
    /// pool or a thread count of its own.
    static Assistant load(const std::filesystem::path& dir, const Gemma4Config& target, ModelOptions options = {}, LoadOptions load = {}) {
        // A mismatch is reported before any tensor is mapped or re-encoded.
        if (std::filesystem::is_directory(dir) && std::filesystem::exists(dir / "config.json"))
            check_assistant_fits(load_assistant_config(dir / "config.json"), target, (dir / "config.json").string());
        auto pool = std::make_unique<ThreadPool>(options.n_threads);
        if (!load.pool && load.n_threads == 0) load.pool = pool.get();
        AssistantCheckpoint ck = load_assistant_checkpoint(dir, load);
        return Assistant(std::move(ck), target, std::move(pool));
    }

    /// The same for the target model itself.
    template <class Target>
    static Assistant load(const std::filesystem::path& dir, const Target& target, ModelOptions options = {}, LoadOptions load = {}) {
        return Assistant::load(dir, target.config(), options, load);
    }

    const AssistantConfig& config() const { return ck_.config; }
    const AssistantWeights& weights() const { return ck_.weights; }
    const std::vector<Layer>& layers() const { return layers_; }
    /// The target layers read by the sliding and the full layers.
    AssistantSources sources() const { return sources_; }
    ThreadPool& pool() const { return *pool_; }

    /// One step over rows of one or more sequences: logits [rows, vocab] of the assistant's
    /// head, and next_state [rows, backbone] = post_projection of the final-normed rows (the h
    /// of the next draft step). `state` holds each row's h, [rows, backbone]. Reads the target's
    /// embedding and cache; writes nothing to the cache.
    template <class Target, class Obs = NoObserver>
    Logits<T> step(std::span<const AssistantRow> rows, std::span<const T> state, const Target& target, const KVCache<T>& cache,
                   std::vector<T>& next_state, Obs&& obs = {}) const {
        const Gemma4Config& c = ck_.config.text;
        const std::int64_t n = static_cast<std::int64_t>(rows.size()), B = ck_.config.backbone_hidden_size, H = c.hidden_size;
        check_step(rows, state, target.config(), cache);

        // embed: [target embedding(token) · target scale ; h]
        std::vector<T> xh(static_cast<std::size_t>(n * 2 * B));
        for (std::int64_t t = 0; t < n; ++t) {
            T* row = xh.data() + t * 2 * B;
            detail::load_row(target.weights().embed_tokens, rows[static_cast<std::size_t>(t)].token, row);
            const T scale = target.embed_scale();
            for (std::int64_t i = 0; i < B; ++i) row[i] *= scale;
            std::copy_n(state.data() + t * B, B, row + B);
        }
        tap(obs, -1, "embed", xh.data(), n, 2 * B, 2 * B);
        std::vector<T> x(static_cast<std::size_t>(n * H));
        linear<T>(ck_.weights.pre_projection, {xh.data(), 2 * B}, {x.data(), H}, n, *pool_);
        tap(obs, -1, "pre_projection", x.data(), n, H, H);

        for (std::size_t l = 0; l < layers_.size(); ++l) layer_forward(layers_[l], static_cast<int>(l), rows, cache, x.data(), obs);

        std::vector<T> h(static_cast<std::size_t>(n * H));
        final_norm_(x.data(), H, h.data(), H, n);
        tap(obs, -1, "final_norm", h.data(), n, H, H);

        // lm_head: the tied embedding, without soft-cap (the assistant's logits are used for
        // argmax and confidence only).
        Logits<T> out{n, c.vocab_size, std::vector<T>(static_cast<std::size_t>(n * c.vocab_size)), {}};
        linear<T>(ck_.weights.embed_tokens, {h.data(), H}, {out.values.data(), c.vocab_size}, n, *pool_);
        tap(obs, -1, "lm_head", out.values.data(), n, c.vocab_size, c.vocab_size);

        next_state.assign(static_cast<std::size_t>(n * B), T(0));
        linear<T>(ck_.weights.post_projection, {h.data(), H}, {next_state.data(), B}, n, *pool_);
        tap(obs, -1, "post_projection", next_state.data(), n, B, B);
        return out;
    }

    /// Greedy drafts for several sequences, all advanced by one step per draft position: each
    /// step feeds back its argmax token and its projected state at the seed's position
    /// (cache.length(seq), the position of the seed token). A sequence stops after max_tokens
    /// tokens, or at the first step whose top-1 softmax probability is below p_min (that step's
    /// token is not drafted). Returns the drafted ids per seed, in order.
    template <class Target>
    std::vector<std::vector<std::int32_t>> draft(std::span<const AssistantSeed<T>> seeds, const Target& target, const KVCache<T>& cache,
                                                 std::int64_t max_tokens, double p_min) const {
        const std::int64_t B = ck_.config.backbone_hidden_size;
        if (max_tokens < 0) throw InvalidArgument("draft: max_tokens must be >= 0, got " + std::to_string(max_tokens));
        if (!(p_min >= 0.0 && p_min <= 1.0)) throw InvalidArgument("draft: p_min must be in [0, 1], got " + std::to_string(p_min));
        std::vector<std::vector<std::int32_t>> out(seeds.size());
        std::vector<AssistantRow> rows;
        std::vector<std::size_t> owner;  // per row: its seed
        std::vector<T> state;
        for (std::size_t i = 0; i < seeds.size(); ++i) {
            const AssistantSeed<T>& s = seeds[i];
            if (static_cast<std::int64_t>(s.hidden.size()) != B)
                throw InvalidArgument("draft: seed " + std::to_string(i) + " has a hidden state of " + std::to_string(s.hidden.size()) +
                                      " values; the target's hidden size is " + std::to_string(B));
            if (!cache.contains(s.seq)) throw InvalidArgument("draft: sequence " + std::to_string(s.seq) + " is not in the cache");
            rows.push_back({s.seq, s.token, cache.length(s.seq)});
            owner.push_back(i);
            state.insert(state.end(), s.hidden.begin(), s.hidden.end());
        }
        std::vector<T> next;
        for (std::int64_t k = 0; k < max_tokens && !rows.empty(); ++k) {
            const Logits<T> logits = step(std::span<const AssistantRow>(rows), std::span<const T>(state), target, cache, next);
            std::vector<AssistantRow> kept_rows;
            std::vector<std::size_t> kept_owner;
            std::vector<T> kept_state;
            for (std::size_t r = 0; r < rows.size(); ++r) {
                const auto z = logits.row(static_cast<std::int64_t>(r));
                const auto best = static_cast<std::int32_t>(std::max_element(z.begin(), z.end()) - z.begin());
                if (p_min > 0.0 && top1_probability(z, best) < p_min) continue;
                out[owner[r]].push_back(best);
                kept_rows.push_back({rows[r].seq, best, rows[r].position});
                kept_owner.push_back(owner[r]);
                kept_state.insert(kept_state.end(), next.begin() + static_cast<std::ptrdiff_t>(r * B),
                                  next.begin() + static_cast<std::ptrdiff_t>((r + 1) * B));
            }
            rows = std::move(kept_rows);
            owner = std::move(kept_owner);
            state = std::move(kept_state);
        }
        return out;
    }

    /// softmax(z)[best] for best = argmax z, in double.
    static double top1_probability(std::span<const T> z, std::int32_t best) {
        const double m = static_cast<double>(z[static_cast<std::size_t>(best)]);
        double sum = 0;
        for (const T v : z) sum += std::exp(static_cast<double>(v) - m);
        return 1.0 / sum;
    }

private:
    void check_step(std::span<const AssistantRow> rows, std::span<const T> state, const Gemma4Config& target, const KVCache<T>& cache) const {
        const Gemma4Config& c = ck_.config.text;
        const std::int64_t B = ck_.config.backbone_hidden_size;
        if (rows.empty()) throw InvalidArgument("assistant step: no rows");
        if (target.hidden_size != B || target.vocab_size != c.vocab_size)
            throw InvalidArgument("assistant step: the target (hidden_size " + std::to_string(target.hidden_size) + ", vocab_size " +
                                  std::to_string(target.vocab_size) + ") is not the one this assistant was loaded for");
        if (static_cast<std::int64_t>(state.size()) != static_cast<std::int64_t>(rows.size()) * B)
            throw InvalidArgument("assistant step: state holds " + std::to_string(state.size()) + " values; " + std::to_string(rows.size()) +
                                  " rows of the target's hidden size " + std::to_string(B) + " need " +
                                  std::to_string(static_cast<std::int64_t>(rows.size()) * B));
        const bool has_sliding = c.num_layers_of(AttentionKind::Sliding) > 0;
        for (std::size_t r = 0; r < rows.size(); ++r) {
            const AssistantRow& row = rows[r];
            const std::string at = "assistant step: row " + std::to_string(r) + ": ";
            if (row.token < 0 || row.token >= c.vocab_size)
                throw InvalidArgument(at + "token id " + std::to_string(row.token) + " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
            if (!cache.contains(row.seq)) throw InvalidArgument(at + "sequence " + std::to_string(row.seq) + " is not in the cache");
            const std::int64_t length = cache.length(row.seq);
            if (row.position < 1 || row.position > length)
                throw InvalidArgument(at + "position " + std::to_string(row.position) + " of sequence " + std::to_string(row.seq) +
                                      " must be in [1, " + std::to_string(length) + "] (the query reads the cached keys before it)");
            if (has_sliding) {
                const std::int64_t lo = first_sliding_key(row.position);
                const std::int64_t held = cache.held_slots(AttentionKind::Sliding, length).first * KVCache<T>::kPageSize;
                if (lo < held)
                    throw InvalidArgument(at + "position " + std::to_string(row.position) + " needs sliding keys from " + std::to_string(lo) +
                                          "; the cache of sequence " + std::to_string(row.seq) + " (length " + std::to_string(length) +
                                          ") holds them from " + std::to_string(held) + " on");
            }
        }
    }

    /// The window of a query at position p: keys p − W < k ≤ p − 1 (decision 3's window, anchored
    /// at the query's own position, which is not in the cache).
    std::int64_t first_sliding_key(std::int64_t p) const { return std::max<std::int64_t>(0, p - ck_.config.text.sliding_window + 1); }

    template <class Obs>
    void layer_forward(const Layer& ly, int l, std::span<const AssistantRow> rows, const KVCache<T>& cache, T* x, Obs& obs) const {
        const std::int64_t n = static_cast<std::int64_t>(rows.size()), H = ck_.config.text.hidden_size, I = ly.gate_proj.rows();
        const std::int64_t d = ly.geom.head_dim, qd = ly.geom.q_dim(), heads = ly.geom.num_heads;
        std::vector<T> a(static_cast<std::size_t>(n * H)), h(static_cast<std::size_t>(n * H));
        ly.input_norm(x, H, a.data(), H, n);
        tap(obs, l, "input_norm", a.data(), n, H, H);

        // attn.q_proj → attn.q_norm (per head, one shared weight) → attn.rope at each row's position
        std::vector<T> q(static_cast<std::size_t>(n * qd));
        linear<T>(ly.q_proj, {a.data(), H}, {q.data(), qd}, n, *pool_);
        tap(obs, l, "attn.q_proj", q.data(), n, qd, qd);
        ly.q_norm.per_head(q.data(), qd, n, heads);
        tap(obs, l, "attn.q_norm", q.data(), n, qd, qd);
        std::vector<std::int64_t> positions(static_cast<std::size_t>(n));
        for (std::int64_t t = 0; t < n; ++t) positions[static_cast<std::size_t>(t)] = rows[static_cast<std::size_t>(t)].position;
        RopeTable<T>(ly.inv_freq, positions).apply(q.data(), qd, heads);
        tap(obs, l, "attn.rope", q.data(), n, qd, qd);

        // attn.core — over the target's cache of layer `source`, keys before the row's position
        std::vector<kernels::CachedQuery> queries(static_cast<std::size_t>(n));
        for (std::int64_t t = 0; t < n; ++t) {
            const AssistantRow& r = rows[static_cast<std::size_t>(t)];
            queries[static_cast<std::size_t>(t)] = {r.seq, ly.geom.kind == AttentionKind::Sliding ? first_sliding_key(r.position) : 0, r.position - 1};
        }
        std::vector<T> o(static_cast<std::size_t>(n * qd));
        kernels::attend_cache<T>(cache, ly.source, queries, q.data(), qd, heads, ly.geom.num_kv_heads, d, o.data(), qd, *pool_);
        tap(obs, l, "attn.core", o.data(), n, qd, qd);
        linear<T>(ly.o_proj, {o.data(), qd}, {h.data(), H}, n, *pool_);
        tap(obs, l, "attn.o_proj", h.data(), n, H, H);

        ly.post_mix_norm(h.data(), H, h.data(), H, n);
        tap(obs, l, "post_mix_norm", h.data(), n, H, H);
        kernels::residual_add(x, h.data(), n * H);
        tap(obs, l, "attn_residual", x, n, H, H);
        ly.post_attn_norm(x, H, a.data(), H, n);
        tap(obs, l, "post_attn_norm", a.data(), n, H, H);

        // mlp.gate_up → mlp.act → mlp.down (GeGLU, as the target's)
        std::vector<T> gate_up(static_cast<std::size_t>(n * 2 * I)), act(static_cast<std::size_t>(n * I));
        const LinearOut<T> gate_up_proj[] = {{&ly.gate_proj, {gate_up.data(), 2 * I}}, {&ly.up_proj, {gate_up.data() + I, 2 * I}}};
        linear<T>(std::span<const LinearOut<T>>(gate_up_proj), {a.data(), H}, n, *pool_);
        tap(obs, l, "mlp.gate_up", gate_up.data(), n, 2 * I, 2 * I);
        kernels::gelu_mul_rows(gate_up.data(), n, I, act.data(), *pool_);
        tap(obs, l, "mlp.act", act.data(), n, I, I);
        linear<T>(ly.down_proj, {act.data(), I}, {h.data(), H}, n, *pool_);
        tap(obs, l, "mlp.down", h.data(), n, H, H);

        ly.post_ffn_norm(h.data(), H, h.data(), H, n);
        tap(obs, l, "post_ffn_norm", h.data(), n, H, H);
        kernels::scaled_residual_add(x, h.data(), ly.layer_scalar, n * H);
        tap(obs, l, "mlp_residual", x, n, H, H);
    }

    Assistant(AssistantCheckpoint checkpoint, const Gemma4Config& target, std::unique_ptr<ThreadPool> pool)
        : ck_(std::move(checkpoint)), pool_(std::move(pool)) {
        sources_ = check_assistant_fits(ck_.config, target, (ck_.directory.empty() ? std::string("config.json") : (ck_.directory / "config.json").string()));
        const Gemma4Config& c = ck_.config.text;
        matrices_to_panels(assistant_matrices(ck_.weights), ck_.weights.storage, *pool_);
        for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
            const LayerWeights& w = ck_.weights.layers[static_cast<std::size_t>(i)];
            const LayerGeometry g = c.layer(i);
            layers_.push_back(Layer{g,
                                    g.kind == AttentionKind::Sliding ? sources_.sliding : sources_.full,
                                    RMSNorm<T>(w.input_layernorm, c.rms_norm_eps),
                                    RMSNorm<T>(w.q_norm, c.rms_norm_eps),
                                    RMSNorm<T>(w.post_attention_layernorm, c.rms_norm_eps),
                                    RMSNorm<T>(w.pre_feedforward_layernorm, c.rms_norm_eps),
                                    RMSNorm<T>(w.post_feedforward_layernorm, c.rms_norm_eps),
                                    w.q_proj,
                                    w.o_proj,
                                    w.gate_proj,
                                    w.up_proj,
                                    w.down_proj,
                                    rope_inverse_frequencies<T>(g),
                                    w.layer_scalar.template at<T>(0)});
        }
        final_norm_ = RMSNorm<T>(ck_.weights.norm, c.rms_norm_eps);
    }

    AssistantCheckpoint ck_;
    std::unique_ptr<ThreadPool> pool_;
    AssistantSources sources_;
    std::vector<Layer> layers_;
    RMSNorm<T> final_norm_;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
