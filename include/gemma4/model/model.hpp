// Model: embedding → decoder layers → final norm → tied, soft-capped LM head (spec nodes embed …
// lm_head). One forward step takes chunks of one or more sequences; their positions come from
// the KV cache, so a prompt may be fed whole, in chunks, or token by token with equal results.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/error.hpp>
#include <gemma4/kernels/linear.hpp>
#include <gemma4/kernels/ops.hpp>
#include <gemma4/kernels/thread_pool.hpp>
#include <gemma4/layers/attention.hpp>
#include <gemma4/layers/context.hpp>
#include <gemma4/layers/decoder_layer.hpp>
#include <gemma4/layers/mlp.hpp>
#include <gemma4/layers/observer.hpp>
#include <gemma4/layers/rms_norm.hpp>
#include <gemma4/layers/step_scratch.hpp>
#include <gemma4/model/checkpoint.hpp>
#include <gemma4/kv/kv_cache.hpp>
#include <gemma4/model/quantize.hpp>

#include <cmath>
#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// Which positions get logits: every token (scoring, tests) or each chunk's last (generation).
enum class LogitsMode : std::uint8_t { All, Last };

/// Part of one sequence fed in one step: its next ids.
struct SequenceChunk {
    SeqId seq;
    std::span<const std::int32_t> ids;
    /// Logits for every id of this chunk even in LogitsMode::Last (a speculative step verifies
    /// each drafted id).
    bool all_logits = false;
};

/// logits[rows, vocab], row-major, and the final-normed hidden state each row came from.
template <class T>
struct Logits {
    std::int64_t rows = 0, vocab = 0;
    std::vector<T> values;
    /// [rows, hidden_size]: final_norm's output at the same positions (a drafter reads it).
    std::vector<T> hidden;
    std::span<const T> row(std::int64_t r) const {
        return {values.data() + r * vocab, static_cast<std::size_t>(vocab)};
    }
    std::span<const T> hidden_row(std::int64_t r) const {
        const auto width = rows ? static_cast<std::int64_t>(hidden.size()) / rows : 0;
        return {hidden.data() + r * width, static_cast<std::size_t>(width)};
    }
};

/// Soft tokens of one step (images, audio): rows that replace the placeholder ids' embeddings,
/// unscaled, and the bidirectional blocks of images.
template <class T>
struct SoftTokens {
    /// [n, hidden_size]: one row per placeholder id (image, audio or video token) of the step,
    /// in the order the ids appear across the step's chunks.
    std::span<const T> rows;
    /// Per id of the step (chunks concatenated): the image it belongs to (>= 0: those ids see each
    /// other in both directions), or -1. Empty: every id causal. A block must lie in one chunk.
    std::span<const std::int32_t> blocks;
};

struct ModelOptions {
    unsigned n_threads = 0;  ///< 0: hardware concurrency
    /// Image blocks are bidirectional on sliding layers (decision 9); true also on full layers,
    /// reproducing the reference implementation's default path.
    bool image_blocks_on_full_layers = false;
};

template <class T, const Gemma4Config& Fixed = kConfigFromCheckpoint>
using StandardSlidingLayer = DecoderLayer<T, Attention<Sliding, T, Fixed>, GeGLU<T>>;
template <class T, const Gemma4Config& Fixed = kConfigFromCheckpoint>
using StandardFullLayer = DecoderLayer<T, Attention<Full, T, Fixed>, GeGLU<T>>;

/// Throws a ConfigError naming every field (its config.json path) in which `actual` differs from
/// `expected`, the configuration a model type is compiled for.
inline void check_config_equals(const Gemma4Config& expected, const Gemma4Config& actual, const std::string& where) {
    const nlohmann::json e = config_to_json(expected), a = config_to_json(actual);
    std::string fields;
    for (const nlohmann::json& op : nlohmann::json::diff(e, a)) {
        const std::string path = op.at("path").get<std::string>();
        const nlohmann::json::json_pointer at(path);
        fields += "\n  " + path.substr(1) + ": " + (a.contains(at) ? a.at(at).dump() : std::string("absent")) + ", compiled for " +
                  (e.contains(at) ? e.at(at).dump() : std::string("absent"));
    }
    if (!fields.empty()) throw ConfigError(where + ": the checkpoint's configuration differs from the model type's in" + fields);
}

namespace detail {
/// Whether a layer type's attention is compiled for one configuration (Attention<Kind, T, C>).
template <class Layer>
constexpr bool is_fixed_layer() {
    if constexpr (requires { Layer::attention_type::is_fixed; }) return Layer::attention_type::is_fixed;
    else return false;
}
}  // namespace detail

/// The decoder over scalar type T (float for inference, double for conformance), with the layer
/// types as parameters so that a custom layer can replace either kind.
template <class T, class SlidingLayer = StandardSlidingLayer<T>, class FullLayer = StandardFullLayer<T>>
class BasicModel {
public:
    using scalar_type = T;
    using Layer = std::variant<SlidingLayer, FullLayer>;

    explicit BasicModel(Checkpoint checkpoint, ModelOptions options = {})
        : BasicModel(std::move(checkpoint), options, std::make_unique<ThreadPool>(options.n_threads)) {}

    /// Loads a checkpoint directory (or GGUF file); re-encoding at load runs on the model's own
    /// pool of options.n_threads threads, unless `load` names a pool or a thread count of its own.
    static BasicModel load(const std::filesystem::path& dir, ModelOptions options = {}, LoadOptions load = {}) {
        auto pool = std::make_unique<ThreadPool>(options.n_threads);
        if (!load.pool && load.n_threads == 0) load.pool = pool.get();
        Checkpoint ck = load_checkpoint_as(dir, load);
        return BasicModel(std::move(ck), options, std::move(pool));
    }

    const Gemma4Config& config() const { return ck_.config; }
    const ModelWeights& weights() const { return ck_.weights; }
    const Checkpoint& checkpoint() const { return ck_; }
    ThreadPool& pool() const { return *pool_; }
    T embed_scale() const { return embed_scale_; }
    const std::vector<Layer>& layers() const { return layers_; }

    KVCache<T> make_cache(KVCacheOptions options = {}) const { return KVCache<T>(ck_.config, options); }

    /// Whether `id` stands for a soft token (image, audio or video placeholder).
    bool is_placeholder(std::int32_t id) const {
        const TokenIds& k = ck_.config.tokens;
        return id == k.image || id == k.audio || id == k.video;
    }

    /// One forward step over chunks of distinct sequences. Appends their keys and values to the
    /// cache and returns logits for every token (All) or for each chunk's last token (Last).
    template <class Obs = NoObserver>
    Logits<T> forward(std::span<const SequenceChunk> batch, KVCache<T>& cache, LogitsMode mode = LogitsMode::All,
                      Obs&& obs = {}) const {
        return forward(batch, cache, SoftTokens<T>{}, mode, std::forward<Obs>(obs));
    }

    /// The same, with soft tokens (images, audio) replacing the placeholder ids' embeddings.
    template <class Obs = NoObserver>
    Logits<T> forward(std::span<const SequenceChunk> batch, KVCache<T>& cache, const SoftTokens<T>& soft,
                      LogitsMode mode = LogitsMode::All, Obs&& obs = {}) const {
        Logits<T> out;
        forward_into(batch, cache, soft, mode, out, std::forward<Obs>(obs));
        return out;
    }

    /// The same into `out`, whose buffers are reused: a caller that steps again and again (a
    /// Session, the Engine) keeps one Logits, and a step of as many rows as the last one neither
    /// allocates nor clears its rows × vocabulary values (16 MB at batch 16) before the LM head
    /// overwrites them. The step's working buffers are this call's own.
    template <class Obs = NoObserver>
    void forward_into(std::span<const SequenceChunk> batch, KVCache<T>& cache, const SoftTokens<T>& soft, LogitsMode mode,
                      Logits<T>& out, Obs&& obs = {}) const {
        StepScratch<T> scratch;
        step(batch, cache, soft, mode, out, scratch, obs);
    }

    /// The same in the caller's working buffers too: a step no larger than one `scratch` has
    /// seen (or was reserved for, make_scratch) allocates nothing.
    void forward_into(std::span<const SequenceChunk> batch, KVCache<T>& cache, const SoftTokens<T>& soft, LogitsMode mode,
                      Logits<T>& out, StepScratch<T>& scratch) const {
        NoObserver obs;
        step(batch, cache, soft, mode, out, scratch, obs);
    }

    /// Working buffers for steps of up to `tokens` ids, allocated now.
    StepScratch<T> make_scratch(std::int64_t tokens) const { return StepScratch<T>(ck_.config, tokens); }

    /// One sequence's next ids.
    template <class Obs = NoObserver>
    Logits<T> forward(std::span<const std::int32_t> ids, KVCache<T>& cache, SeqId seq, LogitsMode mode = LogitsMode::All,
                      Obs&& obs = {}) const {
        const SequenceChunk chunk{seq, ids};
        return forward(std::span<const SequenceChunk>(&chunk, 1), cache, mode, std::forward<Obs>(obs));
    }

    /// The uncached forward pass of a whole sequence: logits at every position.
    template <class Obs = NoObserver>
    Logits<T> logits(std::span<const std::int32_t> ids, Obs&& obs = {}) const {
        KVCache<T> cache = make_cache();
        const SeqId s = cache.add_sequence();
        return forward(ids, cache, s, LogitsMode::All, std::forward<Obs>(obs));
    }

private:
    /// embed → layers → final_norm → lm_head, one statement per spec node; the loops are in kernels/.
    template <class Obs>
    void step(std::span<const SequenceChunk> batch, KVCache<T>& cache, const SoftTokens<T>& soft, LogitsMode mode, Logits<T>& out,
              StepScratch<T>& scratch, Obs& obs) const {
        const Gemma4Config& c = ck_.config;
        const std::int64_t H = c.hidden_size;
        const StepTokens& tokens = plan_step(batch, cache, soft, scratch);
        const std::int64_t n = tokens.size();
        T* const x = StepScratch<T>::values(scratch.x, n * H);

        embed(batch, soft, x);                                                   tap(obs, -1, "embed", x, n, H, H);
        scratch.rope.assign(c, tokens.pos);
        for (std::size_t l = 0; l < layers_.size(); ++l) {
            LayerContext<T> ctx{c, static_cast<int>(l), tokens, cache, *pool_, scratch.rope, scratch};
            std::visit([&](const auto& layer) { layer.forward(ctx, x, obs); }, layers_[l]);
        }
        for (const SequenceChunk& chunk : batch) cache.advance(chunk.seq, static_cast<std::int64_t>(chunk.ids.size()));

        const std::int64_t r = logit_rows(batch, mode, scratch.logit_rows);
        out.rows = r;
        out.vocab = c.vocab_size;
        out.hidden.resize(static_cast<std::size_t>(r * H));
        T* const h = out.hidden.data();
        for (std::int64_t i = 0; i < r; ++i) final_norm_(x + scratch.logit_rows[static_cast<std::size_t>(i)] * H, H, h + i * H, H, 1);
        tap(obs, -1, "final_norm", h, r, H, H);
        // lm_head: z = h·Eᵀ (tied), logits = cap · tanh(z / cap)
        out.values.resize(static_cast<std::size_t>(r * c.vocab_size));
        linear<T>(ck_.weights.embed_tokens, {h, H}, {out.values.data(), c.vocab_size}, r, *pool_);
        kernels::softcap_rows(out.values.data(), r, c.vocab_size, static_cast<T>(c.final_logit_softcapping), *pool_);
        tap(obs, -1, "lm_head", out.values.data(), r, c.vocab_size, c.vocab_size);
    }

    /// embed — each id's row scaled by √H; soft tokens replace placeholders unscaled (spec §4.4).
    void embed(std::span<const SequenceChunk> batch, const SoftTokens<T>& soft, T* x) const {
        const std::int64_t H = ck_.config.hidden_size;
        std::int64_t t = 0, soft_row = 0;
        for (const SequenceChunk& chunk : batch)
            for (std::int32_t id : chunk.ids) {
                T* row = x + t++ * H;
                if (is_placeholder(id)) {
                    std::copy_n(soft.rows.data() + soft_row++ * H, H, row);
                } else {
                    detail::load_row(ck_.weights.embed_tokens, id, row);
                    for (std::int64_t i = 0; i < H; ++i) row[i] *= embed_scale_;
                }
            }
    }

    /// The rows of the step that get logits (every id, or each chunk's last unless it asks for
    /// all), into `rows`; returns their count.
    static std::int64_t logit_rows(std::span<const SequenceChunk> batch, LogitsMode mode, std::vector<std::int64_t>& rows) {
        rows.clear();
        std::int64_t end = 0;
        for (const SequenceChunk& chunk : batch) {
            const auto len = static_cast<std::int64_t>(chunk.ids.size());
            if (mode == LogitsMode::All || chunk.all_logits)
                for (std::int64_t j = 0; j < len; ++j) rows.push_back(end + j);
            else
                rows.push_back(end + len - 1);
            end += len;
        }
        return static_cast<std::int64_t>(rows.size());
    }

    /// Validates the step and lays out its tokens in scratch.tokens; reserves cache pages.
    const StepTokens& plan_step(std::span<const SequenceChunk> batch, KVCache<T>& cache, const SoftTokens<T>& soft,
                                StepScratch<T>& scratch) const {
        const Gemma4Config& c = ck_.config;
        if (batch.empty()) throw InvalidArgument("forward: empty batch");
        std::vector<SeqId>& seen = scratch.seen;
        seen.clear();
        StepTokens& tokens = scratch.tokens;
        tokens.clear();
        for (const SequenceChunk& chunk : batch) {
            if (chunk.ids.empty()) throw InvalidArgument("forward: empty id list for sequence " + std::to_string(chunk.seq));
            if (std::find(seen.begin(), seen.end(), chunk.seq) != seen.end())
                throw InvalidArgument("forward: sequence " + std::to_string(chunk.seq) + " appears twice in one step");
            seen.push_back(chunk.seq);
            for (std::size_t j = 0; j < chunk.ids.size(); ++j)
                if (chunk.ids[j] < 0 || chunk.ids[j] >= c.vocab_size)
                    throw InvalidArgument("token id " + std::to_string(chunk.ids[j]) + " at index " + std::to_string(j) +
                                          " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
        }
        check_soft_tokens(batch, soft);
        for (const SequenceChunk& chunk : batch) {
            const std::int64_t start = cache.length(chunk.seq);
            cache.reserve(chunk.seq, static_cast<std::int64_t>(chunk.ids.size()));
            for (std::size_t j = 0; j < chunk.ids.size(); ++j) {
                tokens.seq.push_back(chunk.seq);
                tokens.pos.push_back(start + static_cast<std::int64_t>(j));
            }
        }
        if (!soft.blocks.empty()) {
            // Each id of a block sees up to the block's last position.
            tokens.last_key = tokens.pos;
            tokens.blocks_on_full_layers = options_.image_blocks_on_full_layers;
            for (std::int64_t end = tokens.size() - 1; end >= 0; --end) {
                const auto e = static_cast<std::size_t>(end);
                if (soft.blocks[e] >= 0 && e + 1 < soft.blocks.size() && soft.blocks[e + 1] == soft.blocks[e] &&
                    tokens.seq[e + 1] == tokens.seq[e])
                    tokens.last_key[e] = tokens.last_key[e + 1];
            }
        }
        return tokens;
    }

    void check_soft_tokens(std::span<const SequenceChunk> batch, const SoftTokens<T>& soft) const {
        const std::int64_t H = ck_.config.hidden_size;
        std::int64_t placeholders = 0, ids = 0;
        for (const SequenceChunk& chunk : batch) {
            for (std::size_t j = 0; j < chunk.ids.size(); ++j)
                if (is_placeholder(chunk.ids[j])) {
                    if (soft.rows.empty())
                        throw InvalidArgument("forward: id " + std::to_string(chunk.ids[j]) + " at index " + std::to_string(j) +
                                              " is an image/audio placeholder but no soft tokens were given");
                    ++placeholders;
                }
            ids += static_cast<std::int64_t>(chunk.ids.size());
        }
        if (static_cast<std::int64_t>(soft.rows.size()) != placeholders * H)
            throw InvalidArgument("forward: " + std::to_string(soft.rows.size()) + " soft-token values given for " +
                                  std::to_string(placeholders) + " placeholder ids of hidden size " + std::to_string(H));
        if (!soft.blocks.empty()) {
            if (static_cast<std::int64_t>(soft.blocks.size()) != ids)
                throw InvalidArgument("forward: " + std::to_string(soft.blocks.size()) + " block ids given for " + std::to_string(ids) + " ids");
            // A block is one contiguous run inside one chunk.
            std::set<std::int32_t> closed;
            std::size_t at = 0;
            for (const SequenceChunk& chunk : batch)
                for (std::size_t j = 0; j < chunk.ids.size(); ++j, ++at) {
                    const std::int32_t b = soft.blocks[at];
                    if (b < 0) continue;
                    const bool continues = j > 0 && soft.blocks[at - 1] == b;
                    if (!continues && !closed.insert(b).second)
                        throw InvalidArgument("forward: image block " + std::to_string(b) + " is not one contiguous run within one chunk");
                }
        }
    }

    BasicModel(Checkpoint checkpoint, ModelOptions options, std::unique_ptr<ThreadPool> pool)
        : ck_(std::move(checkpoint)), pool_(std::move(pool)), options_(options) {
        const Gemma4Config& c = ck_.config;
        const std::string where = ck_.directory.empty() ? std::string("model") : ck_.directory.string();
        if constexpr (detail::is_fixed_layer<SlidingLayer>()) check_config_equals(*SlidingLayer::attention_type::fixed_config, c, where);
        if constexpr (detail::is_fixed_layer<FullLayer>()) check_config_equals(*FullLayer::attention_type::fixed_config, c, where);
        to_panels(ck_.weights, *pool_);  // a quantized checkpoint's rows, as the kernels read them
        kernels::reserve_thread_buffers<T>(*pool_);
        for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
            const int l = static_cast<int>(i);
            const LayerWeights& w = ck_.weights.layers[static_cast<std::size_t>(i)];
            if (c.layer_kind(i) == AttentionKind::Sliding) layers_.emplace_back(std::in_place_index<0>, c, l, w);
            else layers_.emplace_back(std::in_place_index<1>, c, l, w);
        }
        final_norm_ = RMSNorm<T>(ck_.weights.norm, c.rms_norm_eps);
        // Decision 1: √H rounded to the embedding table's storage dtype (bf16 → 62 for H = 3840).
        embed_scale_ = static_cast<T>(round_to_dtype(std::sqrt(static_cast<double>(c.hidden_size)), ck_.weights.embed_tokens.value_dtype()));
    }

    Checkpoint ck_;
    std::unique_ptr<ThreadPool> pool_;
    ModelOptions options_;
    std::vector<Layer> layers_;
    RMSNorm<T> final_norm_;
    T embed_scale_{};
};

/// The standard Gemma 4 decoder: Model<float> runs any checkpoint's configuration (read at
/// load); Model<float, kGemma4_12B> is compiled for one (see kConfigFromCheckpoint).
template <class T, const Gemma4Config& Fixed = kConfigFromCheckpoint>
using Model = BasicModel<T, StandardSlidingLayer<T, Fixed>, StandardFullLayer<T, Fixed>>;

}  // namespace GEMMA4_ABI
}  // namespace gemma4
