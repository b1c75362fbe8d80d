// Session: one conversation with the model. It keeps its KV cache between calls, so each call
// prefills only the ids it has not seen; it samples, streams text pieces as they complete, and
// stops on end tokens, stop ids, stop strings, max tokens or cancellation.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/generate/chat.hpp>
#include <gemma4/generate/detail/generation.hpp>
#include <gemma4/generate/generate_options.hpp>
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
        const auto start = clock::now();
        std::vector<std::int32_t> feed = pending_;
        feed.insert(feed.end(), prompt.begin(), prompt.end());
        check_request(feed, options, soft);
        // The session draws from one random stream: a call with the seed the stream started
        // from continues it, another seed starts it afresh (see random_).
        const bool continues = random_.started && random_.seed == options.sampling.seed;
        pending_.clear();  // only now: a call refused above keeps its pending id
        history_.insert(history_.end(), prompt.begin(), prompt.end());  // pending ids are in it already
        detail::Generation<T> gen(*model_, tokenizer_, options, history_, model_->config().max_position_embeddings,
                                  continues ? &random_.state : nullptr, &history_);
        if (!continues) random_ = {true, options.sampling.seed, gen.rng_state()};

        GenerationResult result;
        try {
            prefill(feed, feed.size() - prompt.size(), soft, options.prefill_chunk);
            result.stats.prompt_tokens = static_cast<std::int64_t>(feed.size());
            result.stats.prompt_seconds = std::chrono::duration<double>(clock::now() - start).count();
            result.finish = decode(gen, result.stats);
        } catch (...) {
            keep_state(gen);
            throw;
        }
        keep_state(gen);
        gen.hand_over(result, start);
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

    using clock = std::chrono::steady_clock;

    /// The checks of a call before anything changes: a prompt, a sane max_new_tokens and
    /// speculative options, room in the context, and one soft-token row per placeholder id.
    void check_request(std::span<const std::int32_t> feed, const GenerateOptions& options, const SoftTokenPlan<T>* soft) const {
        if (feed.empty()) throw InvalidArgument("generate: empty prompt");
        if (options.max_new_tokens < 0) throw InvalidArgument("generate: max_new_tokens must be >= 0");
        options.speculative.validate();
        check_logprobs(options);
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
        const auto H = static_cast<std::size_t>(model_->config().hidden_size);
        if (static_cast<std::size_t>(placeholders) * H != soft_values)
            throw InvalidArgument("generate: the prompt has " + std::to_string(placeholders) + " image/audio placeholder ids but " +
                                  std::to_string(soft_values / H) + " soft-token rows were given");
    }

    /// Feeds `feed` (a pending id, then the prompt from `offset` on) in chunks that never split
    /// an image's block; leaves the last id's logits in logits_.
    void prefill(std::span<const std::int32_t> feed, std::size_t offset, const SoftTokenPlan<T>* soft, std::int64_t chunk) {
        SoftTokenPlan<T> plan;
        if (soft) {
            plan.rows = soft->rows;
            if (!soft->blocks.empty()) {
                plan.blocks.assign(offset, -1);
                plan.blocks.insert(plan.blocks.end(), soft->blocks.begin(), soft->blocks.end());
            }
        }
        const std::int64_t H = model_->config().hidden_size;
        StepScratch<T> scratch;  // the prompt's chunks are large: their buffers go when it is in the cache
        std::int64_t rows_before = 0;
        for (std::size_t at = 0; at < feed.size();) {
            const std::size_t end = detail::chunk_end(plan.blocks, at, feed.size(), static_cast<std::size_t>(std::max<std::int64_t>(1, chunk)));
            std::int64_t rows_in = 0;
            for (std::size_t i = at; i < end; ++i) rows_in += model_->is_placeholder(feed[i]);
            const SequenceChunk part{seq_, feed.subspan(at, end - at)};
            model_->forward_into(std::span<const SequenceChunk>(&part, 1), cache_, plan.slice(at, end, rows_before, rows_in, H),
                                 LogitsMode::Last, logits_, scratch);
            rows_before += rows_in;
            at = end;
        }
    }

    /// Samples from the prefill's logits, then steps one id (and its drafts) at a time until
    /// the reply ends.
    FinishReason decode(detail::Generation<T>& gen, GenerationStats& stats) {
        const SpeculativeOptions& spec = gen.options().speculative;
        // Rejected drafts are rolled back; their sliding pages must outlive the step.
        if (spec.enabled()) cache_.set_max_rollback(seq_, spec.draft_max);
        drafts_.clear();
        std::int64_t step_start = cache_.length(seq_) - 1;  // the prefill's last id is this step's
        std::optional<FinishReason> finished;
        while (!(finished = gen.take(logits_, 0, drafts_, cache_, seq_, step_start))) {
            drafts_.clear();
            if (const std::int64_t budget = gen.draft_budget(cache_.length(seq_)); budget >= 1) {
                const DraftRequest request = gen.draft_request(cache_, seq_, budget);
                spec.drafter->draft(std::span<const DraftRequest>(&request, 1), std::span<std::vector<std::int32_t>>(&drafts_, 1));
                gen.accept_draft(drafts_, budget);
            }
            step_ids_.assign(1, gen.pending());
            step_ids_.insert(step_ids_.end(), drafts_.begin(), drafts_.end());
            step_start = cache_.length(seq_);
            const SequenceChunk part{seq_, step_ids_, /*all_logits=*/!drafts_.empty()};
            model_->forward_into(std::span<const SequenceChunk>(&part, 1), cache_, SoftTokens<T>{}, LogitsMode::Last, logits_, scratch_);
            ++stats.decode_steps;
        }
        if (spec.enabled()) cache_.set_max_rollback(seq_, 0);
        return *finished;
    }

    /// What outlives the call: the sampled id not yet in the cache, and the random stream.
    void keep_state(const detail::Generation<T>& gen) {
        if (gen.pending() >= 0) pending_ = {gen.pending()};
        random_.state = gen.rng_state();
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
    // A decode step's buffers, kept from one step and call to the next.
    Logits<T> logits_;
    StepScratch<T> scratch_;
    std::vector<std::int32_t> drafts_, step_ids_;
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
        if (options.constraint && options_.enable_thinking) options.thought_channel = thought_channel_ids(*session_.tokenizer());
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
    /// <|channel> and <channel|>, where the tokenizer has both: a thought channel is free text
    /// before the constrained answer.
    static std::array<std::int32_t, 2> thought_channel_ids(const Tokenizer& tokenizer) {
        const auto start = tokenizer.token_to_id(kChannelStart), end = tokenizer.token_to_id(kChannelEnd);
        if (!start || !end) return {-1, -1};
        return {*start, *end};
    }

    Session<T> session_;
    ChatOptions options_;
    std::vector<ChatMessage> pending_messages_;
    std::string last_reply_;
    bool first_turn_ = true;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
