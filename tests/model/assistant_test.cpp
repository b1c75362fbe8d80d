// The assistant (drafter): its step against plain loops written here (matmul, RMSNorm, RoPE,
// softmax attention over the K/V read from the target's cache), float against double, int8 KV
// caches, drafts against chained steps, loading in every format, and every load-time check.
#include <catch2/catch.hpp>

#include <gemma4/model/assistant.hpp>
#include <gemma4/model/model.hpp>
#include <gemma4/model/random_checkpoint.hpp>
#include <gemma4/model/save_checkpoint.hpp>

#include "support/message_matcher.hpp"
#include "support/temp_dir.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace gemma4;

namespace assistant_test {

std::vector<std::int32_t> prompt(std::int64_t n, std::uint32_t seed) {
    std::vector<std::int32_t> ids;
    std::uint32_t s = seed;
    for (std::int64_t i = 0; i < n; ++i) {
        s = s * 1664525u + 1013904223u;
        const auto id = static_cast<std::int32_t>((s >> 8) % 290u);  // below the tiny config's placeholder ids
        ids.push_back(id);
    }
    return ids;
}

template <class T>
std::vector<T> random_state(std::int64_t n, std::uint64_t seed) {
    detail::SplitMix64 rng{seed};
    std::vector<T> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = static_cast<T>(rng.symmetric());
    return v;
}

/// max |a − b| / max |b|
template <class A, class B>
double rel_diff(const A& a, const B& b) {
    REQUIRE(a.size() == b.size());
    double num = 0, den = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        num = std::max(num, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
        den = std::max(den, std::abs(static_cast<double>(b[i])));
    }
    return num / den;
}

/// Key or value row j (kv_dim values) of a target layer, as the cache holds it.
using KVRow = std::function<std::vector<double>(int layer, SeqId s, std::int64_t j, bool value)>;

template <class T>
KVRow cache_rows(const KVCache<T>& cache, const Gemma4Config& target) {
    return [&cache, &target](int layer, SeqId s, std::int64_t j, bool value) {
        const LayerGeometry g = target.layer(layer);
        std::vector<double> r(static_cast<std::size_t>(g.kv_dim()));
        if (cache.int8()) {
            const KVInt8Row row = value ? cache.value_int8(layer, s, j) : cache.key_int8(layer, s, j);
            for (std::int64_t i = 0; i < g.kv_dim(); ++i)
                r[static_cast<std::size_t>(i)] = static_cast<double>(row.codes[i]) * static_cast<double>(row.scales[i / g.head_dim]);
        } else {
            const T* row = value ? cache.value(layer, s, j) : cache.key(layer, s, j);
            for (std::int64_t i = 0; i < g.kv_dim(); ++i) r[static_cast<std::size_t>(i)] = static_cast<double>(row[i]);
        }
        return r;
    };
}

/// The assistant step written out as plain loops in double, from the checkpoint tensors.
struct Reference {
    const AssistantConfig& a;
    const AssistantWeights& w;
    const Gemma4Config& target;
    const WeightView& target_embed;
    double target_scale;

    static std::vector<double> vec(const WeightView& v) { return v.to_vector<double>(); }
    static std::vector<double> matvec(const WeightView& m, const std::vector<double>& x) {
        const std::vector<double> W = vec(m);
        const std::int64_t rows = m.shape[0], cols = m.shape[1];
        REQUIRE(static_cast<std::int64_t>(x.size()) == cols);
        std::vector<double> y(static_cast<std::size_t>(rows), 0.0);
        for (std::int64_t r = 0; r < rows; ++r) {
            double s = 0;
            for (std::int64_t c = 0; c < cols; ++c) s += W[static_cast<std::size_t>(r * cols + c)] * x[static_cast<std::size_t>(c)];
            y[static_cast<std::size_t>(r)] = s;
        }
        return y;
    }
    std::vector<double> rmsnorm(const std::vector<double>& x, std::size_t off, std::size_t n, const WeightView& weight) const {
        const std::vector<double> g = vec(weight);
        double ms = 0;
        for (std::size_t i = 0; i < n; ++i) ms += x[off + i] * x[off + i];
        ms /= static_cast<double>(n);
        std::vector<double> y(n);
        for (std::size_t i = 0; i < n; ++i) y[i] = x[off + i] / std::sqrt(ms + a.text.rms_norm_eps) * g[i];
        return y;
    }

    /// logits and next state of one row
    std::pair<std::vector<double>, std::vector<double>> run(std::int32_t token, const std::vector<double>& h, std::int64_t p, SeqId seq,
                                                            const KVRow& kv) const {
        const Gemma4Config& c = a.text;
        const std::int64_t B = a.backbone_hidden_size, H = c.hidden_size;
        std::vector<double> in(static_cast<std::size_t>(2 * B));
        const std::vector<double> E = vec(target_embed);
        for (std::int64_t i = 0; i < B; ++i) in[static_cast<std::size_t>(i)] = E[static_cast<std::size_t>(token * B + i)] * target_scale;
        for (std::int64_t i = 0; i < B; ++i) in[static_cast<std::size_t>(B + i)] = h[static_cast<std::size_t>(i)];
        std::vector<double> x = matvec(w.pre_projection, in);

        int last_sliding = -1, last_full = -1;
        for (std::int64_t i = 0; i < target.num_hidden_layers; ++i)
            (target.layer_kind(i) == AttentionKind::Sliding ? last_sliding : last_full) = static_cast<int>(i);

        for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
            const LayerWeights& lw = w.layers[static_cast<std::size_t>(l)];
            const bool sliding = c.layer_kind(l) == AttentionKind::Sliding;
            const std::int64_t d = sliding ? c.head_dim : c.global_head_dim;
            const std::int64_t kvh = sliding ? c.num_key_value_heads : c.num_global_key_value_heads;
            const std::int64_t heads = c.num_attention_heads;
            const RopeParameters rp = sliding ? c.rope_sliding : c.rope_full;
            const std::int64_t pairs = rp.rope_type == RopeType::Default ? d / 2 : static_cast<std::int64_t>(rp.partial_rotary_factor * d / 2);
            const int src = sliding ? last_sliding : last_full;

            const std::vector<double> a0 = rmsnorm(x, 0, static_cast<std::size_t>(H), lw.input_layernorm);
            std::vector<double> q = matvec(lw.q_proj, a0);
            for (std::int64_t hh = 0; hh < heads; ++hh) {
                const std::vector<double> qn = rmsnorm(q, static_cast<std::size_t>(hh * d), static_cast<std::size_t>(d), lw.q_norm);
                for (std::int64_t i = 0; i < d; ++i) q[static_cast<std::size_t>(hh * d + i)] = qn[static_cast<std::size_t>(i)];
                for (std::int64_t i = 0; i < pairs; ++i) {  // rotate-half: pair (i, i + d/2)
                    const double f = std::pow(rp.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
                    const double cs = std::cos(static_cast<double>(p) * f), sn = std::sin(static_cast<double>(p) * f);
                    double& u = q[static_cast<std::size_t>(hh * d + i)];
                    double& v = q[static_cast<std::size_t>(hh * d + i + d / 2)];
                    const double u0 = u, v0 = v;
                    u = u0 * cs - v0 * sn;
                    v = v0 * cs + u0 * sn;
                }
            }
            const std::int64_t lo = sliding ? std::max<std::int64_t>(0, p - c.sliding_window + 1) : 0;
            std::vector<double> o(static_cast<std::size_t>(heads * d), 0.0);
            for (std::int64_t hh = 0; hh < heads; ++hh) {
                const std::int64_t g = hh / (heads / kvh);
                std::vector<double> s;
                for (std::int64_t j = lo; j < p; ++j) {
                    const std::vector<double> k = kv(src, seq, j, false);
                    double dot = 0;
                    for (std::int64_t i = 0; i < d; ++i) dot += q[static_cast<std::size_t>(hh * d + i)] * k[static_cast<std::size_t>(g * d + i)];
                    s.push_back(dot);  // scale 1
                }
                const double mx = *std::max_element(s.begin(), s.end());
                double sum = 0;
                for (double& e : s) sum += (e = std::exp(e - mx));
                for (std::int64_t j = lo; j < p; ++j) {
                    const std::vector<double> v = kv(src, seq, j, true);
                    for (std::int64_t i = 0; i < d; ++i)
                        o[static_cast<std::size_t>(hh * d + i)] += s[static_cast<std::size_t>(j - lo)] / sum * v[static_cast<std::size_t>(g * d + i)];
                }
            }
            std::vector<double> att = matvec(lw.o_proj, o);
            att = rmsnorm(att, 0, att.size(), lw.post_attention_layernorm);
            for (std::int64_t i = 0; i < H; ++i) x[static_cast<std::size_t>(i)] += att[static_cast<std::size_t>(i)];
            const std::vector<double> a1 = rmsnorm(x, 0, static_cast<std::size_t>(H), lw.pre_feedforward_layernorm);
            const std::vector<double> gate = matvec(lw.gate_proj, a1), up = matvec(lw.up_proj, a1);
            std::vector<double> act(gate.size());
            for (std::size_t i = 0; i < gate.size(); ++i) {
                const double z = gate[i];
                act[i] = 0.5 * z * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (z + 0.044715 * z * z * z))) * up[i];
            }
            std::vector<double> m = matvec(lw.down_proj, act);
            m = rmsnorm(m, 0, m.size(), lw.post_feedforward_layernorm);
            const double scalar = vec(lw.layer_scalar)[0];
            for (std::int64_t i = 0; i < H; ++i) x[static_cast<std::size_t>(i)] = scalar * (x[static_cast<std::size_t>(i)] + m[static_cast<std::size_t>(i)]);
        }
        const std::vector<double> hn = rmsnorm(x, 0, static_cast<std::size_t>(H), w.norm);
        return {matvec(w.embed_tokens, hn), matvec(w.post_projection, hn)};
    }
};

/// A target checkpoint (tiny_config, window 8) and an assistant for it, written once per name.
struct Fixture {
    std::filesystem::path target_dir, assistant_dir;
    explicit Fixture(const std::string& name, DType dtype = DType::F32, int shards = 1) {
        target_dir = test::temp_dir("assistant_" + name + "_target");
        assistant_dir = test::temp_dir("assistant_" + name);
        write_random_checkpoint(target_dir, tiny_config(), {.seed = 71, .dtype = dtype, .text_only_layout = true});
        write_random_assistant_checkpoint(assistant_dir, assistant_config_for(tiny_config()), {.seed = 72, .dtype = dtype, .shards = shards});
    }
};

/// Two sequences in the target cache: 5 positions (inside the window) and 40 (past it: the
/// sliding layers' first pages are released).
template <class T>
std::pair<SeqId, SeqId> fill(const Model<T>& target, KVCache<T>& cache) {
    const SeqId a = cache.add_sequence(), b = cache.add_sequence();
    const auto pa = prompt(5, 1), pb = prompt(40, 2);
    const SequenceChunk chunks[] = {{a, pa}, {b, pb}};
    target.forward(std::span<const SequenceChunk>(chunks), cache, LogitsMode::Last);
    return {a, b};
}

/// The rows every step test uses: both sequences at their next position, sequence b again with
/// another token and state, and at an earlier position that its window still covers.
std::vector<AssistantRow> rows_of(SeqId a, SeqId b) { return {{a, 17, 5}, {b, 250, 40}, {b, 3, 40}, {b, 99, 39}}; }


TEST_CASE("assistant step in double matches plain loops over the target cache", "[assistant]") {
    const Fixture f("ref");
    const auto target = Model<double>::load(f.target_dir);
    const auto assistant = Assistant<double>::load(f.assistant_dir, target);
    CHECK(assistant.sources().sliding == 4);
    CHECK(assistant.sources().full == 5);
    for (const KVDtype kv : {KVDtype::Float, KVDtype::Int8}) {
        KVCache<double> cache = target.make_cache({.kv_dtype = kv});
        const auto [a, b] = fill(target, cache);
        const auto rows = rows_of(a, b);
        const std::int64_t B = target.config().hidden_size;
        const auto state = random_state<double>(static_cast<std::int64_t>(rows.size()) * B, 5);
        std::vector<double> next;
        const Logits<double> logits = assistant.step(std::span<const AssistantRow>(rows), std::span<const double>(state), target, cache, next);
        REQUIRE(logits.rows == 4);
        REQUIRE(logits.vocab == target.config().vocab_size);
        REQUIRE(static_cast<std::int64_t>(next.size()) == 4 * B);

        const Reference ref{assistant.config(), assistant.weights(), target.config(), target.weights().embed_tokens,
                            static_cast<double>(target.embed_scale())};
        const KVRow kvrow = cache_rows(cache, target.config());
        for (std::size_t r = 0; r < rows.size(); ++r) {
            const std::vector<double> h(state.begin() + static_cast<std::ptrdiff_t>(r * B), state.begin() + static_cast<std::ptrdiff_t>((r + 1) * B));
            const auto [want_logits, want_next] = ref.run(rows[r].token, h, rows[r].position, rows[r].seq, kvrow);
            const auto got = logits.row(static_cast<std::int64_t>(r));
            CHECK(rel_diff(std::vector<double>(got.begin(), got.end()), want_logits) < 1e-12);
            const std::vector<double> got_next(next.begin() + static_cast<std::ptrdiff_t>(r * B), next.begin() + static_cast<std::ptrdiff_t>((r + 1) * B));
            CHECK(rel_diff(got_next, want_next) < 1e-12);
        }
        // The comparison is sensitive to the window's edge: one more key (position 40 − W, still
        // cached) changes the result.
        AssistantConfig wider = assistant.config();
        wider.text.sliding_window += 1;
        const Reference off_by_one{wider, assistant.weights(), target.config(), target.weights().embed_tokens, ref.target_scale};
        const std::vector<double> h1(state.begin() + B, state.begin() + 2 * B);
        CHECK(rel_diff(off_by_one.run(rows[1].token, h1, 40, b, kvrow).first, ref.run(rows[1].token, h1, 40, b, kvrow).first) > 1e-9);
    }
}

TEST_CASE("assistant step taps every node", "[assistant]") {
    const Fixture f("taps");
    const auto target = Model<double>::load(f.target_dir);
    const auto assistant = Assistant<double>::load(f.assistant_dir, target);
    KVCache<double> cache = target.make_cache();
    const auto [a, b] = fill(target, cache);
    const auto rows = rows_of(a, b);
    const auto state = random_state<double>(4 * target.config().hidden_size, 6);
    std::map<std::string, std::pair<std::int64_t, std::int64_t>> seen;
    std::vector<double> next;
    const auto logits = assistant.step(std::span<const AssistantRow>(rows), std::span<const double>(state), target, cache, next,
                                       [&](const TapView<double>& v) { seen[v.full_name()] = {v.rows, v.cols}; });
    for (const char* node : {"embed", "pre_projection", "final_norm", "lm_head", "post_projection"}) CHECK(seen.count(node) == 1);
    for (int l = 0; l < 4; ++l)
        for (const char* node : {"input_norm", "attn.q_proj", "attn.q_norm", "attn.rope", "attn.core", "attn.o_proj", "post_mix_norm",
                                 "attn_residual", "post_attn_norm", "mlp.gate_up", "mlp.act", "mlp.down", "post_ffn_norm", "mlp_residual"})
            CHECK(seen.count("layers." + std::to_string(l) + "." + node) == 1);
    CHECK(seen["lm_head"] == std::make_pair(std::int64_t{4}, target.config().vocab_size));
    CHECK(seen["post_projection"] == std::make_pair(std::int64_t{4}, target.config().hidden_size));
    CHECK(seen["layers.3.attn.core"].second == 4 * 32);  // the full layer: 4 heads of 32
    CHECK(logits.values.size() == 4u * 512u);
}

TEST_CASE("assistant step in float agrees with double, with float and int8 KV caches", "[assistant]") {
    const Fixture f("float");
    const auto td = Model<double>::load(f.target_dir);
    const auto tf = Model<float>::load(f.target_dir);
    const auto ad = Assistant<double>::load(f.assistant_dir, td);
    const auto af = Assistant<float>::load(f.assistant_dir, tf);
    const std::int64_t B = td.config().hidden_size;
    const auto sd = random_state<double>(4 * B, 7);
    const std::vector<float> sf(sd.begin(), sd.end());
    for (const KVDtype kv : {KVDtype::Float, KVDtype::Int8}) {
        KVCache<double> cd = td.make_cache({.kv_dtype = kv});
        KVCache<float> cf = tf.make_cache({.kv_dtype = kv});
        const auto [a, b] = fill(td, cd);
        fill(tf, cf);
        const auto rows = rows_of(a, b);
        std::vector<double> nd;
        std::vector<float> nf;
        const auto ld = ad.step(std::span<const AssistantRow>(rows), std::span<const double>(sd), td, cd, nd);
        const auto lf = af.step(std::span<const AssistantRow>(rows), std::span<const float>(sf), tf, cf, nf);
        CHECK(rel_diff(lf.values, ld.values) < 1e-4);
        CHECK(rel_diff(nf, nd) < 1e-4);
    }
    // the int8 cache is really read: its step differs from the float cache's (its exactness
    // against the cached codes is checked in double above)
    KVCache<float> exact = tf.make_cache(), coarse = tf.make_cache({.kv_dtype = KVDtype::Int8});
    const auto [a, b] = fill(tf, exact);
    fill(tf, coarse);
    const auto rows = rows_of(a, b);
    std::vector<float> n1, n2;
    const auto l1 = af.step(std::span<const AssistantRow>(rows), std::span<const float>(sf), tf, exact, n1);
    const auto l2 = af.step(std::span<const AssistantRow>(rows), std::span<const float>(sf), tf, coarse, n2);
    CHECK(rel_diff(l2.values, l1.values) > 0);
}

TEST_CASE("assistant step: a row's result does not depend on the other rows or the thread count", "[assistant]") {
    const Fixture f("invariance", DType::BF16);
    const auto target = Model<float>::load(f.target_dir);
    const auto one = Assistant<float>::load(f.assistant_dir, target, ModelOptions{1});
    const auto three = Assistant<float>::load(f.assistant_dir, target, ModelOptions{3});
    for (const KVDtype kv : {KVDtype::Float, KVDtype::Int8}) {
        KVCache<float> cache = target.make_cache({.kv_dtype = kv});
        const auto [a, b] = fill(target, cache);
        const auto rows = rows_of(a, b);
        const std::int64_t B = target.config().hidden_size;
        const auto state = random_state<float>(4 * B, 10);
        std::vector<float> next_all, next_three;
        const auto all = one.step(std::span<const AssistantRow>(rows), std::span<const float>(state), target, cache, next_all);
        CHECK(three.step(std::span<const AssistantRow>(rows), std::span<const float>(state), target, cache, next_three).values == all.values);
        CHECK(next_three == next_all);
        for (std::size_t r = 0; r < rows.size(); ++r) {
            std::vector<float> next;
            const auto alone = one.step(std::span<const AssistantRow>(&rows[r], 1), std::span<const float>(state).subspan(r * B, B), target, cache, next);
            const auto z = all.row(static_cast<std::int64_t>(r));
            CHECK(alone.values == std::vector<float>(z.begin(), z.end()));
            CHECK(next == std::vector<float>(next_all.begin() + static_cast<std::ptrdiff_t>(r * B), next_all.begin() + static_cast<std::ptrdiff_t>((r + 1) * B)));
        }
    }
}

TEST_CASE("assistant draft is the argmax chain of steps at a fixed position, and p_min stops it", "[assistant]") {
    const Fixture f("draft");
    const auto target = Model<double>::load(f.target_dir);
    const auto assistant = Assistant<double>::load(f.assistant_dir, target);
    KVCache<double> cache = target.make_cache();
    const SeqId a = cache.add_sequence(), b = cache.add_sequence();
    const auto pa = prompt(6, 3), pb = prompt(30, 4);
    const SequenceChunk chunks[] = {{a, pa}, {b, pb}};
    // h: the target's final-normed rows of the last positions, taken from its final_norm tap
    std::vector<double> hidden;
    const auto logits = target.forward(std::span<const SequenceChunk>(chunks), cache, LogitsMode::Last, [&](const TapView<double>& v) {
        if (v.node == "final_norm") hidden.assign(v.data, v.data + v.rows * v.stride);
    });
    const std::int64_t B = target.config().hidden_size;
    REQUIRE(static_cast<std::int64_t>(hidden.size()) == 2 * B);
    auto argmax = [](std::span<const double> z) { return static_cast<std::int32_t>(std::max_element(z.begin(), z.end()) - z.begin()); };
    const AssistantSeed<double> seeds[] = {{a, argmax(logits.row(0)), {hidden.data(), static_cast<std::size_t>(B)}},
                                           {b, argmax(logits.row(1)), {hidden.data() + B, static_cast<std::size_t>(B)}}};

    // the chain written out: one sequence at a time, position = cache length throughout
    std::vector<std::vector<std::int32_t>> chain(2);
    std::vector<std::vector<double>> confidence(2);
    for (std::size_t s = 0; s < 2; ++s) {
        AssistantRow row{seeds[s].seq, seeds[s].token, cache.length(seeds[s].seq)};
        std::vector<double> h(seeds[s].hidden.begin(), seeds[s].hidden.end()), next;
        for (int k = 0; k < 5; ++k) {
            const auto z = assistant.step(std::span<const AssistantRow>(&row, 1), std::span<const double>(h), target, cache, next);
            const std::int32_t id = argmax(z.row(0));
            chain[s].push_back(id);
            confidence[s].push_back(Assistant<double>::top1_probability(z.row(0), id));
            row.token = id;
            h = next;
        }
    }
    const auto drafts = assistant.draft(std::span<const AssistantSeed<double>>(seeds), target, cache, 5, 0.0);
    REQUIRE(drafts.size() == 2);
    CHECK(drafts[0] == chain[0]);
    CHECK(drafts[1] == chain[1]);
    CHECK(assistant.draft(std::span<const AssistantSeed<double>>(seeds), target, cache, 2, 0.0)[1] ==
          std::vector<std::int32_t>(chain[1].begin(), chain[1].begin() + 2));
    CHECK(assistant.draft(std::span<const AssistantSeed<double>>(seeds), target, cache, 0, 0.0)[0].empty());

    // p_min just above the third step's confidence of sequence a: a stops at the first step
    // below it (at most the third); b is cut by its own confidences alone
    const double p_min = std::nextafter(confidence[0][2], 2.0);
    auto expected = [&](std::size_t s) {
        std::vector<std::int32_t> e;
        for (std::size_t k = 0; k < chain[s].size() && confidence[s][k] >= p_min; ++k) e.push_back(chain[s][k]);
        return e;
    };
    const auto cut = assistant.draft(std::span<const AssistantSeed<double>>(seeds), target, cache, 5, p_min);
    CHECK(cut[0] == expected(0));
    CHECK(cut[0].size() <= 2);
    CHECK(cut[1] == expected(1));
    const auto none = assistant.draft(std::span<const AssistantSeed<double>>(seeds), target, cache, 5, 1.0);
    CHECK(none[0].empty());
    CHECK(none[1].empty());
}

TEST_CASE("assistant loads bf16, f32 and sharded checkpoints, and re-encodes them as int8 or int4", "[assistant]") {
    const Fixture f32("load_f32", DType::F32), sharded("load_sharded", DType::F32, 3), bf16("load_bf16", DType::BF16);
    const auto target = Model<float>::load(f32.target_dir);
    KVCache<float> cache = target.make_cache();
    const auto [a, b] = fill(target, cache);
    const auto rows = rows_of(a, b);
    const auto state = random_state<float>(4 * target.config().hidden_size, 8);
    auto run = [&](const Assistant<float>& as) {
        std::vector<float> next;
        return as.step(std::span<const AssistantRow>(rows), std::span<const float>(state), target, cache, next).values;
    };
    const auto plain = Assistant<float>::load(f32.assistant_dir, target);
    const auto base = run(plain);
    CHECK(run(Assistant<float>::load(sharded.assistant_dir, target)) == base);
    CHECK(plain.weights().pre_projection.dtype == DType::F32);

    const auto as_bf16 = Assistant<float>::load(bf16.assistant_dir, target);
    CHECK(as_bf16.weights().layers[0].q_proj.dtype == DType::BF16);
    CHECK(rel_diff(run(as_bf16), base) < 0.05);  // the same random values, rounded to bf16

    const auto target_d = Model<double>::load(f32.target_dir);
    KVCache<double> cache_d = target_d.make_cache();
    fill(target_d, cache_d);
    const auto state_d = random_state<double>(4 * target.config().hidden_size, 8);
    const std::int64_t B = target.config().hidden_size;
    for (const WeightFormat format : {WeightFormat::Int8, WeightFormat::Int4}) {
        INFO("format " << (format == WeightFormat::Int8 ? "int8" : "int4"));
        const auto q = Assistant<float>::load(f32.assistant_dir, target, {}, {.format = format});
        const DType want = format == WeightFormat::Int8 ? DType::Q8 : DType::Q4;
        CHECK(q.weights().embed_tokens.dtype == want);
        CHECK(q.weights().pre_projection.dtype == want);
        CHECK(q.weights().post_projection.dtype == want);
        CHECK(q.weights().layers[3].down_proj.dtype == want);
        CHECK(q.weights().layers[0].q_norm.dtype == DType::F32);  // norms stay as stored
        const auto q_logits = run(q);
        const double d = rel_diff(q_logits, base);
        CHECK(d > 0);
        if (format == WeightFormat::Int8) CHECK(d < 0.2);

        // saved in the quantized checkpoint format, it loads by mapping and computes the same
        const auto saved = test::temp_dir(std::string("assistant_saved_") + (format == WeightFormat::Int8 ? "int8" : "int4"));
        save_assistant_checkpoint(load_assistant_checkpoint(f32.assistant_dir, {.format = format}), saved);
        const auto mapped = Assistant<float>::load(saved, target);
        CHECK(mapped.weights().pre_projection.dtype == want);
        CHECK(mapped.weights().layers[1].gate_proj.dtype == want);
        CHECK(run(mapped) == q_logits);

        // the re-encoded weights are what the step computes with: the double step on them equals
        // the plain loops over their dequantized values
        const auto qd = Assistant<double>::load(f32.assistant_dir, target_d, {}, {.format = format});
        std::vector<double> next;
        const auto got = qd.step(std::span<const AssistantRow>(rows), std::span<const double>(state_d), target_d, cache_d, next);
        const Reference ref{qd.config(), qd.weights(), target_d.config(), target_d.weights().embed_tokens,
                            static_cast<double>(target_d.embed_scale())};
        for (std::size_t r = 0; r < rows.size(); ++r) {
            const std::vector<double> h(state_d.begin() + static_cast<std::ptrdiff_t>(r * B), state_d.begin() + static_cast<std::ptrdiff_t>((r + 1) * B));
            const auto want_row = ref.run(rows[r].token, h, rows[r].position, rows[r].seq, cache_rows(cache_d, target_d.config())).first;
            const auto z = got.row(static_cast<std::int64_t>(r));
            CHECK(rel_diff(std::vector<double>(z.begin(), z.end()), want_row) < 1e-12);
        }
    }
}

void edit_config(const std::filesystem::path& dir, const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j;
    std::ifstream(dir / "config.json") >> j;
    edit(j);
    std::ofstream(dir / "config.json") << j.dump(2);
}

/// An assistant checkpoint of `a` in `name`, loaded against a target of config `target`.
void load_against(const std::string& name, const AssistantConfig& a, const Gemma4Config& target,
                  const std::function<void(const std::filesystem::path&)>& edit = {}) {
    const auto dir = test::temp_dir("assistant_bad_" + name);
    write_random_assistant_checkpoint(dir, a, {.seed = 9, .dtype = DType::BF16});
    if (edit) edit(dir);
    Assistant<float>::load(dir, target);
}

TEST_CASE("assistant load rejects a mismatched or unsupported checkpoint, naming the field", "[assistant][errors]") {
    using gemma4::test::Has;
    const Gemma4Config target = tiny_config();
    const AssistantConfig good = assistant_config_for(target);
    REQUIRE_NOTHROW(load_against("good", good, target));

    AssistantConfig a = good;
    a.backbone_hidden_size = 48;
    CHECK_THROWS_MATCHES(load_against("backbone", a, target), ConfigError, Has("backbone_hidden_size: 48 differs from the target's hidden_size 64"));
    // checked before the tensors are opened
    CHECK_THROWS_MATCHES(load_against("backbone_first", a, target, [](const auto& d) { std::filesystem::remove(d / "model.safetensors"); }),
                         ConfigError, Has("backbone_hidden_size"));
    a = good;
    a.text.vocab_size = 400;
    CHECK_THROWS_MATCHES(load_against("vocab", a, target), ConfigError, Has("text_config.vocab_size: 400 differs"));
    a = good;
    a.text.num_key_value_heads = 1;
    CHECK_THROWS_MATCHES(load_against("kv_heads", a, target), ConfigError, Has("num_key_value_heads"));
    a = good;
    a.text.global_head_dim = 16;
    CHECK_THROWS_MATCHES(load_against("global_head_dim", a, target), ConfigError, Has("global_head_dim"));
    a = good;
    a.text.rope_full.rope_theta = 10000.0;
    CHECK_THROWS_MATCHES(load_against("rope", a, target), ConfigError, Has("text_config.rope_parameters.full_attention: differs from the RoPE of target layer 5"));
    a = good;
    a.text.rope_sliding.rope_type = RopeType::Proportional;
    a.text.rope_sliding.partial_rotary_factor = 0.5;
    CHECK_THROWS_MATCHES(load_against("rope_sliding", a, target), ConfigError, Has("text_config.rope_parameters.sliding_attention"));
    a = good;
    a.text.sliding_window = target.sliding_window + 1;
    CHECK_THROWS_MATCHES(load_against("window", a, target), ConfigError, Has("text_config.sliding_window"));

    Gemma4Config sliding_only = target;
    sliding_only.layer_types = Gemma4Config::default_layer_types(0);
    CHECK_THROWS_MATCHES(load_against("no_full", good, sliding_only), ConfigError,
                         Has("text_config.layer_types[3]: full_attention reads the target's last layer of that kind, and the target has none"));
    Gemma4Config full_only = target;
    for (std::int64_t i = 0; i < full_only.num_hidden_layers; ++i) full_only.layer_types[static_cast<std::size_t>(i)] = AttentionKind::Full;
    CHECK_THROWS_MATCHES(load_against("no_sliding", good, full_only), ConfigError, Has("text_config.layer_types[0]: sliding_attention"));

    CHECK_THROWS_MATCHES(load_against("ordered", good, target, [](const auto& d) { edit_config(d, [](auto& j) { j["use_ordered_embeddings"] = true; }); }),
                         ConfigError, Has("use_ordered_embeddings: the centroid-masked head (ordered embeddings) is not supported"));
    CHECK_THROWS_MATCHES(load_against("no_backbone", good, target, [](const auto& d) { edit_config(d, [](auto& j) { j.erase("backbone_hidden_size"); }); }),
                         ConfigError, Has("backbone_hidden_size: missing"));
    CHECK_THROWS_MATCHES(
        load_against("shared", good, target, [](const auto& d) { edit_config(d, [](auto& j) { j["text_config"]["num_kv_shared_layers"] = 2; }); }),
        ConfigError, Has("text_config.num_kv_shared_layers: must be num_hidden_layers (4)"));
    CHECK_THROWS_MATCHES(
        load_against("heads_field", good, target, [](const auto& d) { edit_config(d, [](auto& j) { j["text_config"].erase("num_attention_heads"); }); }),
        ConfigError, Has("text_config.num_attention_heads: missing"));

    // tensors: one missing, one the layout does not have (an assistant has no k_proj)
    auto rewrite = [&](const std::filesystem::path& dir, bool drop, bool extra) {
        AssistantWeights unused;
        std::vector<TensorBlob> blobs;
        for (const TensorSpec& spec : assistant_tensor_table(good, unused)) {
            if (drop && spec.name() == "post_projection.weight") continue;
            std::int64_t n = 1;
            for (auto x : spec.shape) n *= x;
            blobs.push_back({spec.name(), DType::F32, spec.shape, encode_values(std::vector<double>(static_cast<std::size_t>(n), 0.5), DType::F32)});
        }
        if (extra) blobs.push_back({"model.layers.0.self_attn.k_proj.weight", DType::F32, {32, 32},
                                    encode_values(std::vector<double>(32 * 32, 0.5), DType::F32)});
        write_safetensors(dir / "model.safetensors", blobs, {{"format", "pt"}});
    };
    CHECK_THROWS_MATCHES(load_against("missing_tensor", good, target, [&](const auto& d) { rewrite(d, true, false); }), ShapeError,
                         Has("missing tensor 'post_projection.weight'"));
    CHECK_THROWS_MATCHES(load_against("extra_tensor", good, target, [&](const auto& d) { rewrite(d, false, true); }), ShapeError,
                         Has("unexpected tensor 'model.layers.0.self_attn.k_proj.weight'"));
}

TEST_CASE("assistant step rejects bad rows", "[assistant][errors]") {
    using gemma4::test::Has;
    const Fixture f("bad_rows", DType::BF16);
    const auto target = Model<float>::load(f.target_dir);
    const auto assistant = Assistant<float>::load(f.assistant_dir, target);
    KVCache<float> cache = target.make_cache();
    const auto [a, b] = fill(target, cache);
    const std::int64_t B = target.config().hidden_size;
    std::vector<float> next;
    auto step = [&](std::vector<AssistantRow> rows, std::int64_t state_rows) {
        const std::vector<float> state(static_cast<std::size_t>(state_rows * B), 0.1f);
        assistant.step(std::span<const AssistantRow>(rows), std::span<const float>(state), target, cache, next);
    };
    REQUIRE_NOTHROW(step({{a, 1, 5}}, 1));
    CHECK_THROWS_MATCHES(step({{a, 1, 5}}, 2), InvalidArgument, Has("state holds 128 values; 1 rows"));
    CHECK_THROWS_MATCHES(step({{a, 512, 5}}, 1), InvalidArgument, Has("token id 512 is outside the vocabulary"));
    CHECK_THROWS_MATCHES(step({{a, 1, 6}}, 1), InvalidArgument, Has("position 6 of sequence 0 must be in [1, 5]"));
    CHECK_THROWS_MATCHES(step({{a, 1, 0}}, 1), InvalidArgument, Has("must be in [1, 5]"));
    CHECK_THROWS_MATCHES(step({{7, 1, 1}}, 1), InvalidArgument, Has("sequence 7 is not in the cache"));
    CHECK_THROWS_MATCHES(step({{b, 1, 37}}, 1), InvalidArgument, Has("needs sliding keys from 30"));
    CHECK_THROWS_MATCHES(step({}, 0), InvalidArgument, Has("no rows"));
    const std::vector<float> h(static_cast<std::size_t>(B - 1), 0.f);
    const AssistantSeed<float> seed{a, 1, h};
    CHECK_THROWS_MATCHES(assistant.draft(std::span<const AssistantSeed<float>>(&seed, 1), target, cache, 2, 0.0), InvalidArgument,
                         Has("hidden state of 63 values"));
}

TEST_CASE("the published 12B assistant config: 423M parameters, reads target layers 46 and 47", "[assistant]") {
    const AssistantConfig a = gemma4_12b_assistant_config();
    const std::int64_t n = assistant_parameter_count(a);
    CHECK(n == 422'856'964);  // the published ≈ 423M
    const AssistantSources s = check_assistant_fits(a, kGemma4_12B);
    CHECK(s.sliding == 46);
    CHECK(s.full == 47);
    CHECK(a.text.layer(0).q_dim() == 16 * 256);
    CHECK(a.text.layer(3).q_dim() == 16 * 512);
    CHECK(a.text.layer(3).num_kv_heads == 1);
    // config.json round trip
    const AssistantConfig back = parse_assistant_config(assistant_config_to_json(a), "round_trip");
    CHECK(back.backbone_hidden_size == 3840);
    CHECK(back.text.hidden_size == 1024);
    CHECK(back.text.intermediate_size == 8192);
    CHECK(back.text.num_hidden_layers == 4);
    CHECK(back.text.layer_kind(3) == AttentionKind::Full);
    CHECK(back.text.layer_kind(2) == AttentionKind::Sliding);
    CHECK(back.text.sliding_window == 1024);
    CHECK(assistant_parameter_count(back) == n);
    CHECK(assistant_config_to_json(a)["text_config"]["num_kv_shared_layers"] == 4);
}

}  // namespace assistant_test
