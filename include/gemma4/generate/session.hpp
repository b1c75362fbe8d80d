// Session: one conversation with the model. It keeps its KV cache between calls, so each call
// prefills only the ids it has not seen; it samples, streams text pieces as they complete, and
// stops on end tokens, stop ids, stop strings, max tokens or cancellation.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/generate/chat.hpp>
#include <gemma4/generate/sampler.hpp>
#include <gemma4/generate/session_file.hpp>
#include <gemma4/generate/speculative.hpp>
#include <gemma4/generate/stop.hpp>
#include <gemma4/model/model.hpp>
#include <gemma4/model/multimodal.hpp>
#include <gemma4/tokenizer/streaming_decoder.hpp>
#include <gemma4/tokenizer/tokenizer.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

enum class FinishReason : std::uint8_t { EndToken, StopId, StopString, MaxTokens, ContextFull, Cancelled };

constexpr std::string_view finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::EndToken: return "end token";
        case FinishReason::StopId: return "stop id";
        case FinishReason::StopString: return "stop string";
        case FinishReason::MaxTokens: return "max tokens";
        case FinishReason::ContextFull: return "context full";
        case FinishReason::Cancelled: return "cancelled";
    }
    return "?";
}

struct GenerationStats {
    std::int64_t prompt_tokens = 0;     ///< ids prefilled by this call
    std::int64_t generated_tokens = 0;  ///< ids sampled by this call
    double prompt_seconds = 0;          ///< prefill time
    double generation_seconds = 0;      ///< time spent after the first token
    double time_to_first_token = 0;     ///< from the call to the first sampled id
    // Speculative decoding (GenerateOptions::speculative):
    std::int64_t drafted_tokens = 0;   ///< ids the drafter proposed and the target verified
    std::int64_t accepted_tokens = 0;  ///< of those, ids the target sampled too (emitted)
    std::int64_t decode_steps = 0;     ///< forward steps after the prefill

    /// accepted / drafted (0 without drafts).
    double acceptance_rate() const { return drafted_tokens ? static_cast<double>(accepted_tokens) / static_cast<double>(drafted_tokens) : 0; }

    double prompt_tokens_per_s() const { return prompt_seconds > 0 ? static_cast<double>(prompt_tokens) / prompt_seconds : 0; }
    double generation_tokens_per_s() const {
        return generation_seconds > 0 && generated_tokens > 1 ? static_cast<double>(generated_tokens - 1) / generation_seconds : 0;
    }
};

struct GenerationResult {
    std::vector<std::int32_t> ids;  ///< sampled ids, the end token or stop id included when reached
    std::string text;               ///< their text, cut before a stop string
    FinishReason finish = FinishReason::MaxTokens;
    GenerationStats stats;
};

struct GenerateOptions {
    std::int64_t max_new_tokens = 256;
    SamplingParams sampling{};
    std::vector<std::int32_t> end_ids{};    ///< empty: the model's eos ids (config.json)
    std::vector<std::int32_t> stop_ids{};   ///< further ids that end generation
    std::vector<std::string> stop_strings{};
    /// Called for every sampled id with the text that became complete (may be empty). Return
    /// false to stop (FinishReason::Cancelled).
    std::function<bool(std::int32_t id, std::string_view text)> on_token{};
    /// Checked before every step; set from any thread to cancel.
    const std::atomic<bool>* cancel = nullptr;
    /// Prefill feeds at most this many ids per forward step.
    std::int64_t prefill_chunk = 512;
    /// A drafter and its draft lengths: several ids per forward step, same output.
    SpeculativeOptions speculative{};
};

namespace detail {

/// Whether generation ends at the sampled id `id`, and why, in the order Session and Engine
/// both check: a stop string in its text, an end id (options.end_ids, else the model's eos
/// ids), a stop id, then a callback that asked to stop.
inline std::optional<FinishReason> finish_after(std::int32_t id, const GenerateOptions& options, const TokenIds& tokens,
                                                bool stopped_by_string, bool keep_going) {
    const auto& ends = options.end_ids;
    if (stopped_by_string) return FinishReason::StopString;
    if (ends.empty() ? tokens.is_eos(id) : std::find(ends.begin(), ends.end(), id) != ends.end()) return FinishReason::EndToken;
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), id) != options.stop_ids.end()) return FinishReason::StopId;
    if (!keep_going) return FinishReason::Cancelled;
    return std::nullopt;
}

}  // namespace detail

template <class T>
class ChatSession;

template <class T>
class Session {
public:
    /// `tokenizer` may be null for id-only use; both must outlive the session.
    explicit Session(const Model<T>& model, const Tokenizer* tokenizer = nullptr, KVCacheOptions cache = {})
        : model_(&model), tokenizer_(tokenizer), cache_(model.make_cache(cache)), seq_(cache_.add_sequence()) {}

    /// Feeds `prompt` after everything seen so far, then generates. `soft` (optional) holds the
    /// soft tokens of the prompt's image/audio placeholder ids (see model/multimodal.hpp).
    GenerationResult generate(std::span<const std::int32_t> prompt, const GenerateOptions& options,
                              const SoftTokenPlan<T>* soft = nullptr) {
        using clock = std::chrono::steady_clock;
        const auto start = clock::now();
        GenerationResult result;
        std::vector<std::int32_t> feed = pending_;
        feed.insert(feed.end(), prompt.begin(), prompt.end());
        if (feed.empty()) throw InvalidArgument("generate: empty prompt");
        if (options.max_new_tokens < 0) throw InvalidArgument("generate: max_new_tokens must be >= 0");
        options.speculative.validate();
        const std::int64_t limit = model_->config().max_position_embeddings;
        if (cache_.length(seq_) + static_cast<std::int64_t>(feed.size()) > limit)
            throw ContextLengthError("prompt of " + std::to_string(feed.size()) + " tokens after " +
                                     std::to_string(cache_.length(seq_)) + " earlier ones exceeds the context of " +
                                     std::to_string(limit) + " tokens");

        // Each placeholder id takes one soft-token row; without this check a placeholder with
        // no rows would slice past the end of the (empty) soft-token plan.
        std::int64_t placeholders = 0;
        for (const std::int32_t id : feed) placeholders += model_->is_placeholder(id);
        const std::size_t soft_values = soft ? soft->rows.size() : 0;
        if (static_cast<std::size_t>(placeholders * model_->config().hidden_size) != soft_values)
            throw InvalidArgument("generate: the prompt has " + std::to_string(placeholders) + " image/audio placeholder ids but " +
                                  std::to_string(soft_values / static_cast<std::size_t>(model_->config().hidden_size)) +
                                  " soft-token rows were given");

        // A sampled image/audio placeholder could not be fed back (it stands for a soft token
        // that does not exist), so those ids are never sampled.
        SamplingParams sampling = options.sampling;
        const TokenIds& special = model_->config().tokens;
        sampling.suppress_tokens.insert(sampling.suppress_tokens.end(), {special.image, special.audio, special.video});
        Sampler sampler(sampling);
        // The session draws from one random stream: a call with the seed the stream started
        // from continues it, another seed starts it afresh (see random_).
        if (random_.started && random_.seed == sampling.seed) sampler.set_rng_state(random_.state);
        else random_ = {true, sampling.seed, sampler.rng_state()};
        pending_.clear();  // only now: a call refused above keeps its pending id
        history_.insert(history_.end(), prompt.begin(), prompt.end());  // pending ids are in it already
        sampler.set_prompt(history_);

        // Prefill in chunks that never split an image's block; only the last logits are needed.
        const std::size_t offset = feed.size() - prompt.size();  // a pending id comes first
        SoftTokenPlan<T> plan;
        if (soft) {
            plan.rows = soft->rows;
            if (!soft->blocks.empty()) {
                plan.blocks.assign(offset, -1);
                plan.blocks.insert(plan.blocks.end(), soft->blocks.begin(), soft->blocks.end());
            }
        }
        const std::int64_t H = model_->config().hidden_size;
        Logits<T> logits;
        const auto chunk = static_cast<std::size_t>(std::max<std::int64_t>(1, options.prefill_chunk));
        std::int64_t rows_before = 0;
        for (std::size_t at = 0; at < feed.size();) {
            std::size_t end = std::min(feed.size(), at + chunk);
            while (!plan.blocks.empty() && end < feed.size() && plan.blocks[end] >= 0 && plan.blocks[end] == plan.blocks[end - 1]) ++end;
            std::int64_t rows_in = 0;
            for (std::size_t i = at; i < end; ++i) rows_in += model_->is_placeholder(feed[i]);
            const SequenceChunk part{seq_, std::span<const std::int32_t>(feed).subspan(at, end - at)};
            model_->forward_into(std::span<const SequenceChunk>(&part, 1), cache_, plan.slice(at, end, rows_before, rows_in, H),
                                 LogitsMode::Last, logits);
            rows_before += rows_in;
            at = end;
        }
        result.stats.prompt_tokens = static_cast<std::int64_t>(feed.size());
        const auto prefilled = clock::now();
        result.stats.prompt_seconds = std::chrono::duration<double>(prefilled - start).count();

        std::optional<StreamingDecoder> decoder;
        if (tokenizer_) decoder.emplace(*tokenizer_);
        StopMatcher stops(options.stop_strings);
        std::optional<clock::time_point> first;
        const SpeculativeOptions& spec = options.speculative;
        // Rejected drafts are rolled back; their sliding pages must outlive the step.
        if (spec.enabled()) cache_.set_max_rollback(seq_, spec.draft_max);
        std::vector<std::int32_t> drafts;  // ids fed after the pending one in the last step
        std::int64_t step_start = 0;       // the cache's length before the last step

        // Row r of `logits` gives the id after the r-th id of the last step; a row past the
        // first is read only while the target samples exactly the drafted ids.
        for (bool done = false; !done;) {
            std::int64_t rows_used = 0;
            for (std::int64_t r = 0; r < logits.rows && !done; ++r) {
                if (result.stats.generated_tokens >= options.max_new_tokens) {
                    result.finish = FinishReason::MaxTokens;
                    done = true;
                    break;
                }
                if (options.cancel && options.cancel->load()) {
                    result.finish = FinishReason::Cancelled;
                    done = true;
                    break;
                }
                const std::int32_t id = sampler.sample(logits.row(r));
                random_.state = sampler.rng_state();
                sampler.accept(id);
                ++rows_used;
                if (!first) {
                    first = clock::now();
                    result.stats.time_to_first_token = std::chrono::duration<double>(*first - start).count();
                }
                result.ids.push_back(id);
                history_.push_back(id);
                ++result.stats.generated_tokens;
                // The sampled id is not in the cache yet: it is fed first by the next step or call.
                pending_ = {id};
                done = emit(id, options, decoder, stops, result);
                if (static_cast<std::size_t>(r) < drafts.size() && id == drafts[static_cast<std::size_t>(r)]) ++result.stats.accepted_tokens;
                else break;
            }
            // Keep the pending id's predecessor and the accepted drafts; forget the rest.
            if (!drafts.empty()) cache_.truncate(seq_, step_start + rows_used);
            if (done) break;
            if (cache_.length(seq_) + 1 > limit) {
                result.finish = FinishReason::ContextFull;
                break;
            }
            if (result.stats.generated_tokens >= options.max_new_tokens) {
                result.finish = FinishReason::MaxTokens;
                break;
            }
            drafts.clear();
            const std::int64_t budget =
                detail::draft_budget(spec, options.max_new_tokens - result.stats.generated_tokens, limit - cache_.length(seq_));
            if (spec.enabled() && budget >= 1) {
                DraftRequest request{history_, budget, spec.p_min, DraftTarget<T>{model_, &cache_, seq_, logits.hidden_row(rows_used - 1)}};
                spec.drafter->draft(std::span<const DraftRequest>(&request, 1), std::span<std::vector<std::int32_t>>(&drafts, 1));
                detail::trim_draft(drafts, budget, spec, model_->config());
            }
            std::vector<std::int32_t> feed = pending_;
            feed.insert(feed.end(), drafts.begin(), drafts.end());
            step_start = cache_.length(seq_);
            const SequenceChunk part{seq_, feed, /*all_logits=*/!drafts.empty()};
            model_->forward_into(std::span<const SequenceChunk>(&part, 1), cache_, SoftTokens<T>{}, LogitsMode::Last, logits);
            pending_.clear();
            ++result.stats.decode_steps;
            result.stats.drafted_tokens += static_cast<std::int64_t>(drafts.size());
        }
        if (spec.enabled()) cache_.set_max_rollback(seq_, 0);
        if (decoder && result.finish != FinishReason::StopString) {
            const std::string rest = stops.feed(decoder->finish()).text + stops.flush();
            result.text += rest;
            if (!rest.empty() && options.on_token) options.on_token(-1, rest);
        }
        if (first) result.stats.generation_seconds = std::chrono::duration<double>(clock::now() - *first).count();
        return result;
    }

    /// Tokenizes `text` (special tokens and BOS as the tokenizer says) and generates.
    GenerationResult generate(std::string_view text, const GenerateOptions& options, bool add_special = true) {
        if (!tokenizer_) throw InvalidArgument("generate: this session has no tokenizer");
        if (text.empty()) throw InvalidArgument("generate: empty prompt");
        const auto ids = tokenizer_->encode(text, add_special && history_.empty());
        check_vocab(ids);
        return generate(std::span<const std::int32_t>(ids), options);
    }

    /// Every id of the conversation (prompts and sampled ids).
    const std::vector<std::int32_t>& history() const { return history_; }
    /// Ids in the cache.
    std::int64_t cached_tokens() const { return cache_.length(seq_); }
    const Model<T>& model() const { return *model_; }
    const Tokenizer* tokenizer() const { return tokenizer_; }

    /// Forgets the conversation and the random stream.
    void reset() {
        cache_.remove_sequence(seq_);
        seq_ = cache_.add_sequence();
        history_.clear();
        pending_.clear();
        random_ = {};
    }

    /// Writes the conversation to `path` (replacing the file): its ids, the ids not yet in the
    /// cache, the random stream, and the KV pages the sequence holds. load() into a session over
    /// the same model (same config, scalar type and KV dtype) continues exactly where this one
    /// is: the next call gives the tokens and logits it would have given here.
    /// docs/session-file.md describes the format.
    void save(const std::filesystem::path& path) const { write_file(path, nullptr); }

    /// Replaces this session's conversation with the one saved in `path`. Nothing changes
    /// unless the whole file is read and valid: FormatError for a bad file (truncated,
    /// corrupted, another version), ConfigError for a file of another model, InvalidArgument
    /// for another scalar type or KV dtype or a ChatSession's file; IoError if it cannot be read.
    void load(const std::filesystem::path& path) { adopt(read_file(path, SessionFileKind::Session)); }

    /// The session's cache and the sequence it uses (to inspect pages, or to fork).
    const KVCache<T>& cache() const { return cache_; }
    SeqId sequence() const { return seq_; }

    /// TokenizerError if the tokenizer produced an id the model does not have (a tokenizer with
    /// a larger vocabulary than the checkpoint's).
    void check_vocab(std::span<const std::int32_t> ids) const {
        for (auto id : ids)
            if (id >= model_->config().vocab_size)
                throw TokenizerError("tokenizer id " + std::to_string(id) + " (\"" + std::string(tokenizer_->id_to_token(id)) +
                                     "\") is outside the model's vocabulary of " + std::to_string(model_->config().vocab_size));
    }

private:
    friend class ChatSession<T>;

    /// Streams one sampled id (its text, the callback) and says whether generation ends there.
    bool emit(std::int32_t id, const GenerateOptions& options, std::optional<StreamingDecoder>& decoder, StopMatcher& stops,
              GenerationResult& result) const {
        std::string piece;
        bool stopped_by_string = false;
        if (decoder) {
            const StopStep s = stops.feed(decoder->push(id));
            piece = s.text;
            stopped_by_string = s.stopped;
        }
        result.text += piece;
        const bool keep_going = !options.on_token || options.on_token(id, piece);
        const auto finish = detail::finish_after(id, options, model_->config().tokens, stopped_by_string, keep_going);
        if (finish) result.finish = *finish;
        return finish.has_value();
    }

    void write_file(const std::filesystem::path& path, const ChatState* chat) const {
        detail::write_session_file(path, model_->config(), cache_, seq_, history_, pending_, random_, chat);
    }
    SessionFileContents<T> read_file(const std::filesystem::path& path, SessionFileKind kind) const {
        return detail::read_session_file<T>(path, model_->config(), cache_.options(), kind);
    }
    void adopt(SessionFileContents<T>&& s) {
        cache_ = std::move(s.cache);
        seq_ = s.seq;
        history_ = std::move(s.history);
        pending_ = std::move(s.pending);
        random_ = s.random;
    }

    const Model<T>* model_;
    const Tokenizer* tokenizer_;
    KVCache<T> cache_;
    SeqId seq_;
    std::vector<std::int32_t> history_;
    std::vector<std::int32_t> pending_;
    /// One random stream for the whole conversation, so that sampled calls do not repeat each
    /// other's draws and a saved session continues the stream where it stopped. It starts from
    /// sampling.seed at the first call; a later call with another seed starts it again from
    /// that seed; reset() forgets it.
    SessionRandomState random_;
};

/// A chat over a Session: renders the Gemma 4 turn format and feeds only each new turn.
template <class T>
class ChatSession {
public:
    ChatSession(const Model<T>& model, const Tokenizer& tokenizer, ChatOptions options = {}, std::optional<std::string> system = {})
        : session_(model, &tokenizer), options_(options) {
        if (system) pending_messages_.push_back({"system", *system});
    }

    /// Adds a user turn and generates the model's reply (ends at <turn|> or another end id).
    /// Each `<|image|>` / `<|audio|>` in the text takes the next of `images` / `audios`.
    GenerationResult reply(const std::string& user_text, GenerateOptions options, std::span<const ImageInput<T>> images = {},
                           std::span<const AudioInput<T>> audios = {}) {
        const Model<T>& model = session_.model();
        pending_messages_.push_back({"user", user_text});
        const std::string text = first_turn_ ? render_chat(pending_messages_, options_)
                                             : render_chat_continuation(last_reply_, pending_messages_, options_);
        pending_messages_.clear();
        first_turn_ = false;
        std::vector<std::int64_t> image_tokens, audio_tokens;
        for (const auto& im : images) image_tokens.push_back(im.num_tiles());
        for (const auto& a : audios) audio_tokens.push_back(a.num_frames(model.config().audio.audio_embed_dim));
        const auto ids = expand_placeholders(session_.tokenizer()->encode(text, /*add_special=*/false), model.config().tokens,
                                             image_tokens, audio_tokens);
        session_.check_vocab(ids);
        SoftTokenPlan<T> plan;
        if (!images.empty() || !audios.empty()) plan = plan_soft_tokens<T>(model, ids, images, audios);
        GenerationResult r = session_.generate(std::span<const std::int32_t>(ids), options,
                                               images.empty() && audios.empty() ? nullptr : &plan);
        last_reply_ = session_.tokenizer()->decode(r.ids);
        return r;
    }

    Session<T>& session() { return session_; }
    const Session<T>& session() const { return session_; }

    /// Session::save plus the chat's own state: the messages not yet sent (a system prompt
    /// before the first turn), the last reply, whether the next turn is the first, the options.
    void save(const std::filesystem::path& path) const {
        const ChatState chat{options_, pending_messages_, last_reply_, first_turn_};
        session_.write_file(path, &chat);
    }

    /// Replaces the conversation with the one in `path` (a ChatSession's file), the chat
    /// options included; errors as Session::load, and nothing changes on error.
    void load(const std::filesystem::path& path) {
        SessionFileContents<T> s = session_.read_file(path, SessionFileKind::Chat);
        ChatState chat = std::move(*s.chat);
        session_.adopt(std::move(s));
        options_ = chat.options;
        pending_messages_ = std::move(chat.pending_messages);
        last_reply_ = std::move(chat.last_reply);
        first_turn_ = chat.first_turn;
    }

    const ChatOptions& options() const { return options_; }

private:
    Session<T> session_;
    ChatOptions options_;
    std::vector<ChatMessage> pending_messages_;
    std::string last_reply_;
    bool first_turn_ = true;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
