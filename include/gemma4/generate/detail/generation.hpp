// The generation core: what one sequence's reply needs between forward steps, written once for
// Session and the Engine. It holds the sampler chain, the streaming decoder and the stop
// matcher, the finish rules, the verification of drafted ids and the rule that cuts a prompt
// into chunks. Session::generate drives one over its own cache; the Engine drives one per request
// over the shared cache. Because both run this code, a request's output in the Engine is a lone
// Session's by construction.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/generate/detail/reply_constraint.hpp>
#include <gemma4/generate/drafter.hpp>
#include <gemma4/generate/generate_options.hpp>
#include <gemma4/generate/sampler.hpp>
#include <gemma4/generate/speculative.hpp>
#include <gemma4/generate/stop.hpp>
#include <gemma4/kv/kv_cache.hpp>
#include <gemma4/model/model.hpp>
#include <gemma4/tokenizer/streaming_decoder.hpp>
#include <gemma4/tokenizer/tokenizer.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {
namespace detail {

/// Whether generation ends at the sampled id `id`, and why, in this order: a stop string in its
/// text, an end id (options.end_ids, else the model's eos ids), a stop id, then a callback that
/// asked to stop.
inline std::optional<FinishReason> finish_after(std::int32_t id, const GenerateOptions& options, const TokenIds& tokens,
                                                bool stopped_by_string, bool keep_going) {
    const auto& ends = options.end_ids;
    if (stopped_by_string) return FinishReason::StopString;
    if (ends.empty() ? tokens.is_eos(id) : std::find(ends.begin(), ends.end(), id) != ends.end()) return FinishReason::EndToken;
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), id) != options.stop_ids.end()) return FinishReason::StopId;
    if (!keep_going) return FinishReason::Cancelled;
    return std::nullopt;
}

/// The ids whose sampling would end the reply by finish_after's rules: the end ids (or the
/// model's eos ids) and the stop ids; negative ones (`{-1}`: no end id) left out.
inline std::vector<std::int32_t> ending_ids(const GenerateOptions& options, const TokenIds& tokens) {
    std::vector<std::int32_t> ids;
    if (options.end_ids.empty()) ids.assign(tokens.eos.begin(), tokens.eos.begin() + static_cast<std::ptrdiff_t>(tokens.eos_count));
    else ids = options.end_ids;
    ids.insert(ids.end(), options.stop_ids.begin(), options.stop_ids.end());
    std::erase_if(ids, [](std::int32_t id) { return id < 0; });
    return ids;
}

/// The end of a prefill chunk that starts at `at` of `size` ids and takes at most `limit`. An
/// image's block is never split (its ids attend to each other in one step): a chunk that would
/// cut one stops before it, or, when the block starts the chunk, takes the whole block, which may
/// exceed `limit`. `blocks` gives each id's image (-1: none), or is empty.
inline std::size_t chunk_end(std::span<const std::int32_t> blocks, std::size_t at, std::size_t size, std::size_t limit) {
    std::size_t end = at + std::min(size - at, std::max<std::size_t>(limit, 1));
    if (blocks.empty() || end >= size || blocks[end] < 0 || blocks[end] != blocks[end - 1]) return end;
    std::size_t start = end;
    while (start > at && blocks[start - 1] == blocks[end]) --start;
    if (start > at) return start;
    while (end < size && blocks[end] == blocks[start]) ++end;
    return end;
}

/// One sequence's reply in progress. The caller feeds the model; after each step it hands the
/// step's logits rows to take(), which samples them in order and says whether the reply ended.
/// Between steps, pending() is the sampled id to feed next and draft() proposes ids to verify
/// with it.
template <class T>
class Generation {
public:
    using clock = std::chrono::steady_clock;

    /// `context` is every id the reply continues (prompt and earlier turns), for the sampler's
    /// penalties; `rng_state`, when given, continues a random stream instead of starting it from
    /// the seed; sampled ids are appended to `history` when it is not null (what a drafter
    /// continues). `options` and `history` must outlive the generation.
    Generation(const Model<T>& model, const Tokenizer* tokenizer, const GenerateOptions& options, std::span<const std::int32_t> context,
               std::int64_t context_limit, const std::array<std::uint64_t, 4>* rng_state = nullptr,
               std::vector<std::int32_t>* history = nullptr)
        : model_(&model),
          options_(&options),
          sampler_(without_placeholders(options.sampling, model.config().tokens)),
          stops_(options.stop_strings),
          history_(history),
          context_limit_(context_limit) {
        if (tokenizer) decoder_.emplace(*tokenizer);
        sampler_.set_prompt(context);
        // Room for the whole reply, so that recording an id never grows a buffer mid-decode.
        const auto most = static_cast<std::size_t>(std::clamp<std::int64_t>(std::min(options.max_new_tokens, context_limit), 0, kMaxReserve));
        ids_.reserve(most);
        if (history_) history_->reserve(history_->size() + most);
        if (tokenizer) text_.reserve(8 * most);
        if (rng_state) sampler_.set_rng_state(*rng_state);
        if (options.min_tokens < 0)
            throw InvalidArgument("GenerateOptions::min_tokens must be >= 0, not " + std::to_string(options.min_tokens));
        if (options.min_tokens > 0) held_back_ = ending_ids(options, model.config().tokens);
        if (options.constraint) constraint_.emplace(options, ending_ids(options, model.config().tokens));
        check_logprobs(options);
        if (options.logprobs >= 0) want_logprobs(options.logprobs, most);
    }

    /// Samples the step's rows from `first_row` on: the row after the pending id, then, while
    /// the sampled id equals the next of `drafts` (the ids fed after the pending one), the row
    /// after it. The cache of `seq`, `step_start` long before the step, then forgets the
    /// rejected drafts. Returns why the reply ended, or nothing when pending() is to be fed.
    std::optional<FinishReason> take(const Logits<T>& logits, std::int64_t first_row, std::span<const std::int32_t> drafts,
                                     KVCache<T>& cache, SeqId seq, std::int64_t step_start) {
        std::optional<FinishReason> finished;
        std::int64_t emitted = 0;
        for (std::size_t r = 0; r <= drafts.size(); ++r) {
            const std::size_t before = ids_.size();
            finished = sample(logits.row(first_row + static_cast<std::int64_t>(r)), step_start + static_cast<std::int64_t>(r) + 1);
            if (ids_.size() == before) break;  // nothing sampled: max tokens or cancelled
            ++emitted;
            const bool accepted = r < drafts.size() && ids_.back() == drafts[r];
            accepted_ += accepted;
            if (finished || !accepted) break;
        }
        // Keep the fed id before each emitted one; forget the rejected drafts.
        if (!drafts.empty()) cache.truncate(seq, step_start + emitted);
        if (speculative() && !finished) {
            const auto h = logits.hidden_row(first_row + emitted - 1);
            hidden_.assign(h.begin(), h.end());
        }
        if (finished) finish(*finished);
        return finished;
    }

    /// How many ids the next step may draft, with the cache `cache_length` long.
    std::int64_t draft_budget(std::int64_t cache_length) const {
        if (!speculative()) return 0;
        return detail::draft_budget(options_->speculative, options_->max_new_tokens - generated(), context_limit_ - cache_length);
    }

    /// What the drafter is asked for this sequence, `seq` of `cache`, with `budget` ids.
    DraftRequest draft_request(const KVCache<T>& cache, SeqId seq, std::int64_t budget) const {
        return {*history_, budget, options_->speculative.p_min, DraftTarget<T>{model_, &cache, seq, hidden_}};
    }

    /// Cuts a drafter's proposal to what the target can verify (trim_draft) and counts it.
    void accept_draft(std::vector<std::int32_t>& draft, std::int64_t budget) {
        trim_draft(draft, budget, options_->speculative, model_->config());
        if (constraint_) constraint_->trim(draft);
        drafted_ += static_cast<std::int64_t>(draft.size());
    }

    /// A second cancel flag besides options.cancel (the Engine's RequestHandle::cancel); it
    /// must outlive the generation.
    void cancel_also_on(const std::atomic<bool>* flag) { cancel_ = flag; }
    /// Called with each sampled id before its text and callback (the Engine counts it there,
    /// so that its stats already hold an id whose on_token is running).
    void on_sampled(std::function<void(std::int32_t)> hook) { on_sampled_ = std::move(hook); }

    const GenerateOptions& options() const { return *options_; }
    bool speculative() const { return options_->speculative.enabled(); }
    /// The last sampled id, which the next step feeds (-1 before the first).
    std::int32_t pending() const { return ids_.empty() ? -1 : ids_.back(); }
    const std::vector<std::int32_t>& ids() const { return ids_; }
    std::int64_t generated() const { return static_cast<std::int64_t>(ids_.size()); }
    std::int64_t accepted() const { return accepted_; }
    std::array<std::uint64_t, 4> rng_state() const { return sampler_.rng_state(); }

    /// Moves the reply into `result` (a GenerationResult or EngineResult): its ids, text and
    /// log-probabilities, and its counts and times into result.stats: the first token timed from
    /// `start`, the generation from the first token to now.
    template <class Result>
    void hand_over(Result& result, clock::time_point start) {
        result.ids = std::move(ids_);
        result.text = std::move(text_);
        result.logprobs = collected_logprobs();
        auto& stats = result.stats;
        stats.generated_tokens = static_cast<std::int64_t>(result.ids.size());
        stats.drafted_tokens = drafted_;
        stats.accepted_tokens = accepted_;
        if (first_) {
            stats.time_to_first_token = std::chrono::duration<double>(*first_ - start).count();
            stats.generation_seconds = std::chrono::duration<double>(clock::now() - *first_).count();
        }
    }

    /// Releases the text held back (a stop string that did not complete, partial UTF-8) unless
    /// a stop string ended the reply. Called by take() when the reply ends; the caller calls it
    /// for an end that take() did not see (cancelled between steps, context full).
    void finish(FinishReason reason) {
        if (finished_) return;
        finished_ = true;
        if (!decoder_ || reason == FinishReason::StopString) return;
        const std::string rest = stops_.feed(decoder_->finish()).text + stops_.flush();
        text_ += rest;
        if (!rest.empty() && options_->on_token) options_->on_token(-1, rest);
    }

private:
    /// Replies longer than this grow their buffers as they go (geometrically).
    static constexpr std::int64_t kMaxReserve = 1 << 16;

    /// A sampled image/audio placeholder could not be fed back (it stands for a soft token that
    /// does not exist), so those ids are never sampled.
    static SamplingParams without_placeholders(SamplingParams p, const TokenIds& special) {
        p.suppress_tokens.insert(p.suppress_tokens.end(), {special.image, special.audio, special.video});
        return p;
    }

    /// Log-probabilities of every sampled id with `top` alternatives, with room for a reply of
    /// `most` ids so that recording them allocates nothing mid-decode.
    void want_logprobs(std::int32_t top, std::size_t most) {
        sampler_.set_logprobs(top);
        step_logprob_.top.reserve(static_cast<std::size_t>(top));
        logprob_steps_.reserve(most);
        alternatives_.reserve(most * static_cast<std::size_t>(top));
    }

    /// The sampler's log-probabilities of the id it just sampled, into step_logprob_ and the
    /// reply's record.
    void record_logprob(std::int32_t id) {
        const std::span<const IdLogprob> top = sampler_.top_logprobs();
        step_logprob_.id = id;
        step_logprob_.logprob = sampler_.logprob();
        step_logprob_.top.assign(top.begin(), top.end());
        logprob_steps_.push_back({{id, step_logprob_.logprob}, top.size()});
        alternatives_.insert(alternatives_.end(), top.begin(), top.end());
    }

    /// The recorded log-probabilities, one TokenLogprob per sampled id.
    std::vector<TokenLogprob> collected_logprobs() const {
        std::vector<TokenLogprob> out;
        out.reserve(logprob_steps_.size());
        auto next = alternatives_.begin();
        for (const LogprobStep& step : logprob_steps_) {
            const auto end = next + static_cast<std::ptrdiff_t>(step.alternatives);
            out.push_back({step.sampled.id, step.sampled.logprob, std::vector<IdLogprob>(next, end)});
            next = end;
        }
        return out;
    }

    bool cancelled() const {
        return (options_->cancel && options_->cancel->load()) || (cancel_ && cancel_->load());
    }

    /// One row: the limits, the sample, its text and callback, then the end rules. `length` is
    /// the cache's length once this id is the last emitted (the id itself is fed by the next
    /// step).
    std::optional<FinishReason> sample(std::span<const T> logits, std::int64_t length) {
        const GenerateOptions& o = *options_;
        if (generated() >= o.max_new_tokens) return FinishReason::MaxTokens;
        if (cancelled()) return FinishReason::Cancelled;
        // Not yet min_tokens long: no end, unless the grammar allows nothing else.
        if (generated() < o.min_tokens && (!constraint_ || constraint_->can_continue())) sampler_.suppress_next(held_back_);
        if (constraint_) constraint_->restrict(sampler_);
        const std::int32_t id = sampler_.sample(logits);
        if (o.logprobs >= 0) record_logprob(id);
        sampler_.accept(id);
        if (constraint_) constraint_->accept(id);
        if (!first_) first_ = clock::now();
        ids_.push_back(id);
        if (history_) history_->push_back(id);
        if (on_sampled_) on_sampled_(id);
        bool stopped_by_string = false;
        piece_.clear();
        if (decoder_) {
            StopStep s = stops_.feed(decoder_->push(id));
            piece_ = std::move(s.text);
            stopped_by_string = s.stopped;
        }
        text_ += piece_;
        if (o.logprobs >= 0 && o.on_logprob) o.on_logprob(step_logprob_);
        const bool keep_going = !o.on_token || o.on_token(id, piece_);
        if (const auto end = finish_after(id, o, model_->config().tokens, stopped_by_string, keep_going)) return end;
        if (length + 1 > context_limit_) return FinishReason::ContextFull;
        if (generated() >= o.max_new_tokens) return FinishReason::MaxTokens;
        return std::nullopt;
    }

    const Model<T>* model_;
    const GenerateOptions* options_;
    Sampler sampler_;
    std::optional<StreamingDecoder> decoder_;
    StopMatcher stops_;
    std::vector<std::int32_t>* history_;
    const std::atomic<bool>* cancel_ = nullptr;
    std::function<void(std::int32_t)> on_sampled_;
    std::int64_t context_limit_;
    std::vector<std::int32_t> ids_;
    /// One sampled id's log-probability and how many alternatives of alternatives_ are its.
    struct LogprobStep {
        IdLogprob sampled;
        std::size_t alternatives;
    };
    std::vector<LogprobStep> logprob_steps_;
    std::vector<IdLogprob> alternatives_;  ///< every step's top alternatives, one after the other
    TokenLogprob step_logprob_;            ///< the last sampled id's (what on_logprob is given)
    std::vector<std::int32_t> held_back_;  ///< ending_ids(), suppressed until min_tokens ids are sampled
    std::optional<ReplyConstraint> constraint_;
    std::string text_, piece_;
    std::vector<T> hidden_;  ///< final-normed state of the row that sampled pending()
    std::int64_t drafted_ = 0, accepted_ = 0;
    std::optional<clock::time_point> first_;
    bool finished_ = false;
};

}  // namespace detail
}  // namespace GEMMA4_ABI
}  // namespace gemma4
