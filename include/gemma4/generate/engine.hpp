// Engine: continuous batching. Requests are submitted from any thread; one scheduler thread owned
// by the engine steps every active sequence together, one Model::forward per step, so the weights
// are read once per step for all of them. A request joins or leaves at any step.
//
// One step holds every decoding sequence's next id first, then prefill chunks of newly admitted
// prompts up to `step_tokens` (an image's block is never split), so a long prompt does not
// freeze the other streams. Admission is by memory: each running request reserves the KV pages
// it may need at most (its prompt plus max_new_tokens, within the context; sliding layers only
// their window), and prompts cached for reuse count too; requests that do not fit wait in a
// bounded FIFO.
//
// Prefix reuse: the state at the end of each prompt, and at the end of each finished
// conversation, is kept (LRU). A prompt that shares a page or more of ids with a kept one forks
// its pages, cut back to the shared ids (the sliding window's pages at that point included), and
// prefills only the rest: a system prompt shared by many users, or a conversation's history when
// its next turn comes. A prompt that shares as much with a prompt still being prefilled waits for
// that one's state instead of computing the same K/V beside it: that prompt's prefill stops at
// the shared length, the waiting request forks its pages there, and both go on; one that shares
// ids a running request has already prefilled (and can still be cut back to) forks them at once.
// This needs no prefix cache (prefix_cache_entries = 0 too): requests that arrive together with
// the same prompt (a server's n choices) prefill it once.
//
// Every forward kernel gives a token's outputs bit for bit whatever else shares its step, and a
// request samples with its own Sampler, decoder and stop matcher as Session does, so each
// request's output equals what a lone Session<T> produces for it.
//
// Conversations can be parked on disk between requests, in the session file format
// (generate/session_file.hpp, docs/session-file.md): EngineRequest::save_to writes a request's
// final state when it finishes, before its pages are freed; EngineRequest::resume_from makes a
// request continue a saved conversation (its prompt ids come after it). Files of Session::save
// resume in an engine and files an engine saves load into a Session, with the same tokens as a
// Session that never stopped.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/generate/detail/generation.hpp>
#include <gemma4/generate/sampler.hpp>
#include <gemma4/generate/session.hpp>
#include <gemma4/generate/stop.hpp>
#include <gemma4/kv/kv_cache.hpp>
#include <gemma4/kv/prompt_cache.hpp>
#include <gemma4/model/model.hpp>
#include <gemma4/model/multimodal.hpp>
#include <gemma4/tokenizer/streaming_decoder.hpp>
#include <gemma4/tokenizer/tokenizer.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// What one forward step of the engine held (EngineOptions::on_step).
struct EngineStepInfo {
    std::int64_t decode_tokens = 0;   ///< one per decoding sequence, plus its drafted ids
    std::int64_t drafted_tokens = 0;  ///< of those, drafted ids being verified
    std::int32_t drafting_sequences = 0;  ///< sequences whose drafts the step verified
    std::int64_t prefill_tokens = 0;  ///< prompt ids of the step's prefill chunks
    std::int32_t sequences = 0;       ///< chunks in the step
};

struct EngineOptions {
    std::int32_t max_sequences = 16;        ///< sequences stepped together
    std::int64_t step_tokens = 512;         ///< token budget of one forward step: decode tokens first, then prefill chunks
    std::size_t kv_bytes = 0;               ///< KV page budget that decides admission (0: no bound beyond max_sequences)
    KVDtype kv_dtype = KVDtype::Float;
    std::int64_t context = 0;               ///< per-request context limit (0: the model's max_position_embeddings)
    std::int32_t max_queue = 64;            ///< waiting requests beyond this are rejected with QueueFullError
    /// Prompt and conversation states kept for reuse (LRU); 0 keeps none (a request still takes
    /// the shared prompt of one being prefilled beside it).
    std::int32_t prefix_cache_entries = 16;
    /// Called on the scheduler thread after every forward step (monitoring, tests). Exceptions
    /// it throws are ignored.
    std::function<void(const EngineStepInfo&)> on_step{};
};

struct RequestStats {
    double queue_seconds = 0;            ///< submit -> admitted
    double time_to_first_token = 0;      ///< submit -> first sampled id
    std::int64_t prompt_tokens = 0;      ///< ids of the prompt
    std::int64_t reused_tokens = 0;      ///< of those, taken from the prefix cache or a resumed file (not prefilled)
    std::int64_t generated_tokens = 0;
    double generation_seconds = 0;       ///< first token -> finish
    std::int64_t drafted_tokens = 0;     ///< ids a drafter proposed and the model verified (options.speculative)
    std::int64_t accepted_tokens = 0;    ///< of those, ids the model sampled too
    /// Ids generated after the first per second of generation_seconds.
    double tokens_per_s() const {
        return generation_seconds > 0 && generated_tokens > 1 ? static_cast<double>(generated_tokens - 1) / generation_seconds : 0;
    }
};

template <class T>
struct EngineRequest {
    std::vector<std::int32_t> prompt;    ///< ids (a rendered chat is tokenized by the caller; placeholders expanded)
    std::vector<ImageInput<T>> images;   ///< soft tokens for the prompt's image placeholders, in order (model/multimodal.hpp)
    std::vector<AudioInput<T>> audios;
    /// Sampling, end/stop ids, stop strings, max_new_tokens, logprobs, on_token and on_logprob
    /// (called on the scheduler thread; on_token returning false cancels), cancel flag,
    /// prefill_chunk (a cap on this request's chunks, below step_tokens).
    GenerateOptions options;
    /// A session file (Session::save, or an earlier request's save_to) whose conversation this
    /// request continues: its KV pages are taken over instead of prefilling its ids, `prompt`
    /// comes after them (it may then be empty if the file holds a sampled id not yet fed), and a
    /// sampling seed equal to the file's continues its random stream, as Session::generate
    /// after Session::load does. The file is read and checked by submit, which throws its
    /// typed error (FormatError, ConfigError, InvalidArgument, IoError; see Session::load).
    std::filesystem::path resume_from{};
    /// When not empty, the request's conversation (the resumed one, its prompt and the ids it
    /// generated), its KV pages and its random stream are written here when it finishes (any
    /// finish reason, cancellation included, once its prompt has been prefilled), replacing
    /// the file; Session::load or a later request's resume_from continues it. The write runs
    /// on the scheduler thread, between two steps.
    std::filesystem::path save_to{};
};

/// What a finished request produced.
struct EngineResult {
    std::vector<std::int32_t> ids;
    std::string text;                            ///< empty without a tokenizer
    std::vector<TokenLogprob> logprobs;          ///< one per id with options.logprobs >= 0 (GenerationResult::logprobs)
    FinishReason finish = FinishReason::MaxTokens;  ///< Cancelled on cancel, shutdown or error
    RequestStats stats;
    std::exception_ptr error;                    ///< set if the request failed (e.g. on_token threw); ids/text then partial
    /// Whether the request's save_to file was written. When it was asked for but could not be
    /// (the request failed, or finished before its prompt was prefilled, or the write failed),
    /// `error` says why; ids and text are still the request's.
    bool saved = false;
};

/// Counters of an engine since it started, and its state now: a consistent snapshot.
struct EngineStats {
    std::int64_t requests_submitted = 0;  ///< accepted by submit
    std::int64_t requests_finished = 0;   ///< completed in any way (cancelled and failed included)
    std::int64_t requests_rejected = 0;   ///< submit threw (queue full, shutting down, invalid, too long)
    std::int64_t requests_cancelled = 0;  ///< finished as Cancelled
    std::int64_t prompt_tokens = 0;       ///< prompt ids of admitted requests
    std::int64_t prefilled_tokens = 0;    ///< prompt ids run through the model (prompt_tokens minus reuse)
    std::int64_t generated_tokens = 0;
    std::int32_t queue_depth = 0;         ///< waiting for admission
    std::int32_t active_sequences = 0;    ///< admitted and not finished
    std::int64_t kv_pages_in_use = 0;     ///< sliding + full pages held (prefix cache included)
    std::size_t kv_bytes_in_use = 0;
    std::size_t kv_bytes_reserved = 0;    ///< admission's account: running requests' reservations + prefix cache
    std::int64_t prefix_hits = 0, prefix_misses = 0, prefix_reused_tokens = 0;
    std::int32_t prefix_entries = 0;      ///< prompt and conversation states held by the prefix cache
    std::int64_t prefix_cache_pages = 0;  ///< distinct pages those prompts hold
    std::int64_t steps = 0;               ///< forward steps run
    std::int64_t decode_tokens = 0;       ///< ids fed by decoding sequences: the sampled one and its drafts
    std::int64_t drafted_tokens = 0, accepted_tokens = 0;  ///< speculative decoding: verified drafts, kept drafts
    std::int64_t mixed_steps = 0;         ///< steps that held decode tokens and prefill chunks together
};

namespace detail {

/// What a RequestHandle and the scheduler share.
struct EngineRequestState {
    explicit EngineRequestState(std::uint64_t request_id) : id(request_id) {}
    const std::uint64_t id;
    std::atomic<bool> cancel{false};
    mutable std::mutex mutex;
    mutable std::condition_variable finished;
    bool done = false;
    EngineResult result;
};

}  // namespace detail

/// A submitted request. Copyable; every member may be called from any thread, also after the
/// engine is gone.
class RequestHandle {
public:
    RequestHandle() = default;
    bool valid() const { return state_ != nullptr; }
    std::uint64_t id() const { return state().id; }
    /// The request finishes as Cancelled at the engine's next step and frees its pages.
    void cancel() const { state().cancel.store(true); }
    bool done() const {
        const auto& s = state();
        std::lock_guard lock(s.mutex);
        return s.done;
    }
    /// Blocks until the request has finished; rethrows nothing (see EngineResult::error).
    EngineResult wait() const {
        const auto& s = state();
        std::unique_lock lock(s.mutex);
        s.finished.wait(lock, [&] { return s.done; });
        return s.result;
    }
    std::optional<EngineResult> wait_for(std::chrono::milliseconds timeout) const {
        const auto& s = state();
        std::unique_lock lock(s.mutex);
        if (!s.finished.wait_for(lock, timeout, [&] { return s.done; })) return std::nullopt;
        return s.result;
    }

private:
    template <class>
    friend class Engine;
    explicit RequestHandle(std::shared_ptr<detail::EngineRequestState> state) : state_(std::move(state)) {}
    detail::EngineRequestState& state() const {
        if (!state_) throw InvalidArgument("RequestHandle: an empty handle (not returned by Engine::submit)");
        return *state_;
    }
    std::shared_ptr<detail::EngineRequestState> state_;
};

template <class T>
class Engine {
public:
    /// Starts the scheduler thread. `tokenizer` may be null (ids only; then stop strings are an
    /// error). The model and tokenizer must outlive the engine.
    Engine(const Model<T>& model, const Tokenizer* tokenizer, EngineOptions options = {})
        : model_(&model), tokenizer_(tokenizer), options_(std::move(options)), context_(checked_context(model, options_)),
          cache_(model.make_cache(KVCacheOptions{.max_bytes = 0,
                                                 .max_sequences = options_.max_sequences + options_.prefix_cache_entries + 1,
                                                 .kv_dtype = options_.kv_dtype})) {
        const Gemma4Config& c = model.config();
        for (AttentionKind kind : {AttentionKind::Sliding, AttentionKind::Full})
            page_bytes_[kind == AttentionKind::Full] =
                cache_.bytes_per_position(kind) * static_cast<std::size_t>(c.num_layers_of(kind) * KVCache<T>::kPageSize);
        layers_of_[0] = c.num_layers_of(AttentionKind::Sliding);
        layers_of_[1] = c.num_layers_of(AttentionKind::Full);
        thread_ = std::thread([this] { run(); });
    }

    ~Engine() { shutdown(); }
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    /// Queues a request; any thread. Throws QueueFullError (queue at max_queue, or shutting
    /// down), ContextLengthError (a prompt longer than the context, or a request whose
    /// reservation exceeds the whole KV budget), InvalidArgument (empty prompt, ids outside the
    /// vocabulary, soft tokens that do not match the placeholders, stop strings without a
    /// tokenizer, bad sampling parameters).
    RequestHandle submit(EngineRequest<T> request) {
        std::unique_ptr<Job> job;
        try {
            job = prepare(std::move(request));
        } catch (...) {
            std::lock_guard lock(mutex_);
            ++stats_.requests_rejected;
            throw;
        }
        std::lock_guard lock(mutex_);
        if (stopping_) {
            ++stats_.requests_rejected;
            throw QueueFullError("engine: shutting down, no new requests");
        }
        if (static_cast<std::int64_t>(queue_.size()) >= options_.max_queue) {
            ++stats_.requests_rejected;
            throw QueueFullError("engine: " + std::to_string(queue_.size()) + " requests are already waiting (max_queue)");
        }
        auto state = std::make_shared<detail::EngineRequestState>(next_id_++);
        job->shared = state;
        job->gen->cancel_also_on(&state->cancel);
        job->submitted = clock::now();
        queue_.push_back(std::move(job));
        ++stats_.requests_submitted;
        stats_.queue_depth = static_cast<std::int32_t>(queue_.size());
        wake_.notify_all();
        return RequestHandle(std::move(state));
    }

    EngineStats stats() const {
        std::lock_guard lock(mutex_);
        return stats_;
    }

    /// Stops admitting (submit then throws QueueFullError), lets queued and running requests
    /// go on for up to `grace`, cancels the rest, joins the scheduler. Idempotent.
    void shutdown(std::chrono::milliseconds grace = std::chrono::milliseconds(0)) {
        std::lock_guard once(shutdown_mutex_);
        {
            std::lock_guard lock(mutex_);
            if (!stopping_) {
                stopping_ = true;
                deadline_ = clock::now() + grace;
            }
            wake_.notify_all();
        }
        if (thread_.joinable()) thread_.join();
    }

    /// Bytes of KV pages admission sets aside for a request of `prompt_tokens` ids (no images)
    /// and up to `max_new_tokens` new ones, fed in chunks of at most `prefill_chunk`: what
    /// kv_bytes must hold for it (with the prefix cache's pages on top).
    std::size_t kv_bytes_needed(std::int64_t prompt_tokens, std::int64_t max_new_tokens, std::int64_t prefill_chunk = 512) const {
        const std::int64_t positions = std::min(context_, prompt_tokens + std::max<std::int64_t>(0, max_new_tokens - 1));
        return reservation_bytes(positions, std::min(prompt_tokens, std::min(options_.step_tokens, std::max<std::int64_t>(1, prefill_chunk))));
    }

    const Model<T>& model() const { return *model_; }
    const Tokenizer* tokenizer() const { return tokenizer_; }
    const EngineOptions& options() const { return options_; }
    /// The context limit of every request (options().context, or the model's).
    std::int64_t context() const { return context_; }

private:
    using clock = std::chrono::steady_clock;

    struct Job {
        std::shared_ptr<detail::EngineRequestState> shared;
        EngineRequest<T> request;
        SoftTokenPlan<T> plan;
        bool has_soft = false;
        bool cacheable = false;  ///< no placeholders: its ids alone decide its K/V
        /// Its reply in progress: sampler, decoder, stop rules, sampled ids and text.
        std::optional<detail::Generation<T>> gen;
        std::size_t reservation = 0;      ///< bytes admission set aside for it
        clock::time_point submitted, admitted;
        bool running = false;
        SeqId seq = -1;
        std::int64_t fed = 0;            ///< prompt ids in the cache (reused ones included)
        std::int64_t rows_before = 0;    ///< placeholder rows of the prompt before `fed`
        std::int32_t pending = -1;       ///< the sampled id the next step feeds
        // Speculative decoding (request.options.speculative):
        std::vector<std::int32_t> history;  ///< prompt and generated ids: what the drafter continues
        std::vector<std::int32_t> feed;     ///< this step's ids: pending, then the drafts
        std::int64_t step_start = 0;        ///< the cache's length before this step
        bool leaving = false;               ///< finished by this step: leaves active_ at its end
        /// A running request whose prompt shares more of this one's than the prefix cache holds:
        /// this one's prefill waits until that one has prefilled the first `follow_length` ids,
        /// then forks its pages there (or, if that request ends first, takes what the cache has).
        std::uint64_t follows = 0;
        std::int64_t follow_length = 0;
        /// The conversation of resume_from, read by submit; its pages move into the engine's
        /// cache at admission.
        std::optional<SessionFileContents<T>> resumed;
        EngineResult result;

        bool speculative() const { return request.options.speculative.enabled(); }

        bool cancelled() const {
            return shared->cancel.load() || (request.options.cancel && request.options.cancel->load());
        }
        std::int64_t prompt_size() const { return static_cast<std::int64_t>(request.prompt.size()); }
    };

    struct PrefixEntry {
        std::vector<std::int32_t> ids;
        SeqId seq;
        std::size_t bytes;
        std::uint64_t last_use;
    };

    /// Entry `index` of the prefix cache gives the first `length` ids of a prompt.
    struct PrefixMatch {
        std::size_t index;
        std::int64_t length;
    };

    /// Shorter shared prefixes are not reused: every chat prompt shares its first few template
    /// ids, and a fork for them would save less than the page it copies.
    static constexpr std::int64_t kMinReuse = KVCache<T>::kPageSize;

    static std::int64_t checked_context(const Model<T>& model, const EngineOptions& o) {
        const std::int64_t max = model.config().max_position_embeddings;
        if (o.max_sequences < 1) throw InvalidArgument("EngineOptions::max_sequences must be >= 1, not " + std::to_string(o.max_sequences));
        if (o.step_tokens < 1) throw InvalidArgument("EngineOptions::step_tokens must be >= 1, not " + std::to_string(o.step_tokens));
        // Every request passes through the queue, so a bound of 0 would refuse them all.
        if (o.max_queue < 1) throw InvalidArgument("EngineOptions::max_queue must be >= 1, not " + std::to_string(o.max_queue));
        if (o.prefix_cache_entries < 0)
            throw InvalidArgument("EngineOptions::prefix_cache_entries must be >= 0, not " + std::to_string(o.prefix_cache_entries));
        if (o.context < 0 || o.context > max)
            throw InvalidArgument("EngineOptions::context of " + std::to_string(o.context) + " is outside [0, " + std::to_string(max) +
                                  "] (max_position_embeddings)");
        return o.context ? o.context : max;
    }

    // ---- submit (caller's thread) ------------------------------------------------------------

    std::unique_ptr<Job> prepare(EngineRequest<T> request) {
        const GenerateOptions& o = request.options;
        if (o.max_new_tokens < 0) throw InvalidArgument("engine: max_new_tokens must be >= 0, not " + std::to_string(o.max_new_tokens));
        o.speculative.validate();
        auto job = std::make_unique<Job>();
        const bool placeholders = check_ids(request.prompt);
        // A resumed conversation's ids come first; only those after its cache are fed (its
        // pending id, then the prompt), and only those may be placeholders with soft tokens.
        std::size_t in_cache = 0;
        if (!request.resume_from.empty()) {
            job->resumed.emplace(detail::read_session_file<T>(request.resume_from, model_->config(),
                                                              KVCacheOptions{.kv_dtype = options_.kv_dtype}, SessionFileKind::Session));
            const SessionFileContents<T>& r = *job->resumed;
            in_cache = static_cast<std::size_t>(r.cache.length(r.seq));
            request.prompt.insert(request.prompt.begin(), r.history.begin(), r.history.end());
        }
        const auto& prompt = request.prompt;
        if (prompt.size() == in_cache)
            throw InvalidArgument(request.resume_from.empty() ? "engine: empty prompt"
                                                              : "engine: " + request.resume_from.string() +
                                                                    ": the conversation has no id left to feed and the prompt is empty");
        const auto P = static_cast<std::int64_t>(prompt.size());
        if (P > context_)
            throw ContextLengthError("engine: prompt of " + std::to_string(P) + " tokens" +
                                     (in_cache ? " (" + std::to_string(in_cache) + " of them resumed)" : std::string()) +
                                     " exceeds the context of " + std::to_string(context_) + " tokens");
        if (!o.stop_strings.empty() && !tokenizer_) throw InvalidArgument("engine: stop strings need a tokenizer; this engine has none");
        if (placeholders || !request.images.empty() || !request.audios.empty()) {
            job->plan = plan_soft_tokens<T>(*model_, std::span<const std::int32_t>(prompt).subspan(in_cache), request.images, request.audios);
            if (!job->plan.blocks.empty()) job->plan.blocks.insert(job->plan.blocks.begin(), in_cache, -1);
            job->has_soft = true;
            request.images.clear();  // embedded into the plan: the patches are no longer needed
            request.audios.clear();
        }
        job->cacheable = std::none_of(prompt.begin(), prompt.end(), [&](std::int32_t id) { return model_->is_placeholder(id); });
        job->reservation = reservation_of(P, o, job->plan.blocks);
        if (options_.kv_bytes && job->reservation > options_.kv_bytes)
            throw ContextLengthError("engine: a request of " + std::to_string(P) + " prompt tokens and up to " +
                                     std::to_string(o.max_new_tokens) + " new ones needs " + std::to_string(job->reservation) +
                                     " bytes of KV pages, more than the budget of " + std::to_string(options_.kv_bytes) + " (kv_bytes)");
        job->request = std::move(request);
        start_generation(*job);
        job->result.stats.prompt_tokens = P;
        return job;
    }

    /// Whether the prompt has image/audio placeholders; InvalidArgument for an id outside the
    /// vocabulary or a video id.
    bool check_ids(std::span<const std::int32_t> prompt) const {
        const Gemma4Config& c = model_->config();
        bool placeholders = false;
        for (std::size_t i = 0; i < prompt.size(); ++i) {
            const std::int32_t id = prompt[i];
            if (id < 0 || id >= c.vocab_size)
                throw InvalidArgument("engine: token id " + std::to_string(id) + " at index " + std::to_string(i) +
                                      " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
            if (id == c.tokens.video) throw InvalidArgument("engine: video input is not supported (id at index " + std::to_string(i) + ")");
            placeholders = placeholders || model_->is_placeholder(id);
        }
        return placeholders;
    }

    /// The job's generation core over its prompt (a resumed conversation included). As
    /// Session::generate after Session::load: the seed the stream started from continues it.
    void start_generation(Job& job) {
        const GenerateOptions& o = job.request.options;
        const auto& resumed = job.resumed;
        const bool continues = resumed && resumed->random.started && resumed->random.seed == o.sampling.seed;
        if (o.speculative.enabled()) job.history = job.request.prompt;
        job.gen.emplace(*model_, tokenizer_, o, job.request.prompt, context_, continues ? &resumed->random.state : nullptr,
                        o.speculative.enabled() ? &job.history : nullptr);
        job.gen->on_sampled([this](std::int32_t) {
            std::lock_guard lock(mutex_);
            ++stats_.generated_tokens;
        });
    }

    /// The KV bytes admission sets aside for a prompt of P ids with image blocks `blocks`: the
    /// last sampled id is never fed, so max_new_tokens ids need max_new_tokens - 1 positions
    /// (drafts are capped to stay within them); an image's block is one chunk; a verification
    /// step is a chunk of up to draft_max + 1 ids, and the sliding pages it might roll back
    /// over stay held.
    std::size_t reservation_of(std::int64_t P, const GenerateOptions& o, std::span<const std::int32_t> blocks) const {
        std::int64_t largest_block = 0;
        for (std::size_t i = 0, run = 0; i < blocks.size(); ++i) {
            run = blocks[i] >= 0 && i > 0 && blocks[i - 1] == blocks[i] ? run + 1 : (blocks[i] >= 0 ? 1 : 0);
            largest_block = std::max(largest_block, static_cast<std::int64_t>(run));
        }
        const std::int64_t positions = std::min(context_, P + std::max<std::int64_t>(0, o.max_new_tokens - 1));
        const std::int64_t verify_chunk = o.speculative.enabled() ? 2 * o.speculative.draft_max + 1 : 1;
        return std::max({kv_bytes_needed(P, o.max_new_tokens, o.prefill_chunk), reservation_bytes(positions, std::min(P, largest_block)),
                         reservation_bytes(positions, verify_chunk)});
    }

    /// The most bytes of pages a sequence of up to `positions` positions holds at once, fed in
    /// chunks of at most `chunk` ids: every full-attention page, and the sliding pages that
    /// intersect the window plus one chunk (KVCache::reserve / advance).
    std::size_t reservation_bytes(std::int64_t positions, std::int64_t chunk) const {
        constexpr std::int64_t page = KVCache<T>::kPageSize;
        const std::int64_t all = (positions + page - 1) / page;
        const std::int64_t sliding = std::min(all, (cache_.window() - 1 + chunk + page - 1) / page + 1);
        return static_cast<std::size_t>(layers_of_[0] ? sliding : 0) * page_bytes_[0] +
               static_cast<std::size_t>(layers_of_[1] ? all : 0) * page_bytes_[1];
    }

    // ---- the scheduler thread ----------------------------------------------------------------

    void run() {
        for (;;) {
            bool stop_now = false;
            {
                std::unique_lock lock(mutex_);
                wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || !active_.empty(); });
                if (stopping_ && (clock::now() >= deadline_ || (queue_.empty() && active_.empty()))) stop_now = true;
            }
            if (stop_now) break;
            drop_cancelled();
            admit();
            if (!active_.empty()) step();
        }
        // Shutdown: what is left is cancelled.
        std::deque<std::unique_ptr<Job>> left;
        {
            std::lock_guard lock(mutex_);
            left.swap(queue_);
        }
        for (auto& job : left) finish(*job, FinishReason::Cancelled);
        for (auto& job : active_) finish(*job, FinishReason::Cancelled);
        active_.clear();
        while (!prefixes_.empty()) evict(0);
        publish();
    }

    void drop_cancelled() {
        std::vector<std::unique_ptr<Job>> dropped;
        {
            std::lock_guard lock(mutex_);
            for (auto it = queue_.begin(); it != queue_.end();)
                if ((*it)->cancelled()) {
                    dropped.push_back(std::move(*it));
                    it = queue_.erase(it);
                } else {
                    ++it;
                }
        }
        for (auto& job : dropped) finish(*job, FinishReason::Cancelled);
        for (auto it = active_.begin(); it != active_.end();)
            if ((*it)->cancelled()) {
                finish(**it, FinishReason::Cancelled);
                it = active_.erase(it);
            } else {
                ++it;
            }
        if (!dropped.empty()) publish();
    }

    /// How many first ids of `ids` entry e gives (reusable_prefix), if a page or more.
    std::int64_t usable_prefix(const PrefixEntry& e, const std::vector<std::int32_t>& ids) const {
        const std::int64_t n = reusable_prefix(cache_, e.seq, e.ids, ids);
        return n >= kMinReuse ? n : 0;
    }

    /// The entry that gives the most first ids of `ids`.
    std::optional<PrefixMatch> longest_prefix(const std::vector<std::int32_t>& ids) const {
        std::optional<PrefixMatch> best;
        for (std::size_t i = 0; i < prefixes_.size(); ++i) {
            const std::int64_t n = usable_prefix(prefixes_[i], ids);
            if (n > 0 && (!best || n > best->length)) best = PrefixMatch{i, n};
        }
        return best;
    }

    /// A running request whose prompt shares more ids with a new one's than the prefix cache
    /// gives: its id and the number of ids; `seq` is its sequence when those ids are in it
    /// already (the new request forks it at once), else -1 (it waits: hand_over).
    struct Leader {
        std::uint64_t id = 0;
        std::int64_t length = 0;
        SeqId seq = -1;
    };

    /// The running request whose prompt shares the most of `job`'s, more than the prefix cache
    /// gives (`have` ids): one that has prefilled them and can still be cut back to them, or
    /// one still prefilling its prompt, which will stop at them and hand them over. None: id 0.
    Leader prompt_to_follow(const Job& job, std::int64_t have) const {
        if (!job.cacheable) return {};
        const auto& ids = job.request.prompt;
        Leader leader;
        for (const auto& owned : active_) {
            const Job& o = *owned;
            if (!o.cacheable || o.follows) continue;
            const std::int64_t n = detail::common_prefix(o.request.prompt, ids, ids.size() - 1);
            if (n < kMinReuse || n <= have || n < leader.length || (n == leader.length && leader.seq >= 0)) continue;
            if (n <= o.fed) {
                if (cache_.can_truncate(o.seq, n)) leader = {o.shared->id, n, o.seq};
            } else if (o.fed < o.prompt_size()) {
                leader = {o.shared->id, n, -1};
            }
        }
        return leader;
    }

    /// Where `job`'s next prefill chunk must end at the latest: the first length after `fed` a
    /// request waiting for its prompt takes (0: none waits).
    std::int64_t next_hand_over(const Job& job) const {
        std::int64_t at = 0;
        for (const auto& owned : active_)
            if (owned->follows == job.shared->id && owned->follow_length > job.fed && (at == 0 || owned->follow_length < at))
                at = owned->follow_length;
        return at;
    }

    /// The requests waiting for `leader`'s prompt whose shared ids it has now prefilled fork its
    /// sequence, cut back to those ids, and prefill the rest of theirs.
    void hand_over(const Job& leader) {
        for (auto& owned : active_) {
            Job& job = *owned;
            if (job.follows != leader.shared->id || !job.running || job.follow_length > leader.fed ||
                !cache_.can_truncate(leader.seq, job.follow_length))
                continue;
            cache_.remove_sequence(job.seq);  // empty: it fed nothing while it waited
            give_sequence(job, fork_prefix(cache_, leader.seq, job.follow_length), job.follow_length);
            job.follows = 0;
            job.follow_length = 0;
            if (options_.prefix_cache_entries) {
                std::lock_guard lock(mutex_);
                count_prefix(job);
            }
        }
    }

    std::size_t prefix_bytes() const {
        std::size_t b = 0;
        for (const auto& e : prefixes_) b += e.bytes;
        return b;
    }

    /// Admits queued requests in FIFO order while sequences and the KV budget allow; evicts
    /// stored prefixes (least recently used first, the one the request would reuse last) when
    /// that makes room.
    void admit() {
        for (;;) {
            Job* job = nullptr;
            {
                std::lock_guard lock(mutex_);
                if (queue_.empty()) return;
                job = queue_.front().get();
            }
            if (static_cast<std::int32_t>(active_.size()) >= options_.max_sequences) return;
            std::optional<PrefixMatch> match =
                options_.prefix_cache_entries && !job->resumed ? longest_prefix(job->request.prompt) : std::nullopt;
            if (options_.kv_bytes) {
                if (reserved_ + job->reservation > options_.kv_bytes) return;  // waits for running requests to finish
                while (reserved_ + prefix_bytes() + job->reservation > options_.kv_bytes) {
                    std::size_t victim = prefixes_.size();
                    for (std::size_t i = 0; i < prefixes_.size(); ++i)
                        if ((!match || i != match->index) &&
                            (victim == prefixes_.size() || prefixes_[i].last_use < prefixes_[victim].last_use))
                            victim = i;
                    if (victim == prefixes_.size()) victim = match->index;  // only the match is left
                    if (match && victim == match->index) match.reset();
                    else if (match && victim < match->index) --match->index;
                    evict(victim);
                }
            }
            std::unique_ptr<Job> owned;
            {
                std::lock_guard lock(mutex_);
                owned = std::move(queue_.front());
                queue_.pop_front();
            }
            try {
                const Leader leader = owned->resumed ? Leader{} : prompt_to_follow(*owned, match ? match->length : 0);
                start(*owned, leader.id ? std::nullopt : match, leader);  // a leader gives more than the match
            } catch (...) {
                finish(*owned, FinishReason::Cancelled, std::current_exception());
                publish();
                continue;
            }
            active_.push_back(std::move(owned));
            publish();
        }
    }

    /// Gives `job` its sequence: the resumed conversation's pages, a fork of a kept prefix or
    /// of a running request's sequence, or an empty one (which waits for request `leader`'s
    /// prompt when that is not 0).
    void start(Job& job, std::optional<PrefixMatch> match, Leader leader) {
        job.admitted = clock::now();
        job.result.stats.queue_seconds = std::chrono::duration<double>(job.admitted - job.submitted).count();
        const bool waits = leader.id && leader.seq < 0;
        if (job.resumed) {
            give_sequence(job, adopt_sequence(job.resumed->cache, job.resumed->seq), job.resumed->cache.length(job.resumed->seq));
            job.resumed.reset();  // its pages are the engine's now
        } else if (leader.seq >= 0) {
            give_sequence(job, fork_prefix(cache_, leader.seq, leader.length), leader.length);
        } else if (match) {
            give_sequence(job, take_prefix(*match), match->length);
        } else {
            give_sequence(job, cache_.add_sequence(), 0);
        }
        job.running = true;
        job.follows = waits ? leader.id : 0;
        job.follow_length = waits ? leader.length : 0;
        ++running_;
        reserved_ += job.reservation;
        std::lock_guard lock(mutex_);
        stats_.prompt_tokens += job.prompt_size();
        if (options_.prefix_cache_entries && !waits) count_prefix(job);
    }

    /// Makes `seq`, whose first `fed` prompt ids are in the cache, `job`'s sequence.
    void give_sequence(Job& job, SeqId seq, std::int64_t fed) {
        job.seq = seq;
        job.fed = fed;
        job.result.stats.reused_tokens = fed;
        if (job.speculative()) cache_.set_max_rollback(seq, job.request.options.speculative.draft_max);
    }

    /// A new sequence holding the first m.length positions of entry m (its pages shared).
    SeqId take_prefix(const PrefixMatch& m) {
        PrefixEntry& e = prefixes_[m.index];
        e.last_use = ++tick_;
        return fork_prefix(cache_, e.seq, m.length);
    }

    /// A hit if `job` took ids from the prefix cache; under mutex_.
    void count_prefix(const Job& job) {
        if (job.fed > 0) {
            ++stats_.prefix_hits;
            stats_.prefix_reused_tokens += job.fed;
        } else {
            ++stats_.prefix_misses;
        }
    }

    /// The requests still waiting for request `leader`'s prompt (it ended before it prefilled
    /// their ids) take the longest kept prefix now, if any, and prefill the rest.
    void release_followers(std::uint64_t leader) {
        for (auto& owned : active_) {
            Job& job = *owned;
            if (job.follows != leader || !job.running) continue;
            job.follows = 0;
            job.follow_length = 0;
            if (const auto match = longest_prefix(job.request.prompt)) {
                cache_.remove_sequence(job.seq);  // empty: it fed nothing while it waited
                give_sequence(job, take_prefix(*match), match->length);
            }
            if (options_.prefix_cache_entries) {
                std::lock_guard lock(mutex_);
                count_prefix(job);
            }
        }
    }

    /// A new sequence of the engine's cache holding a copy of sequence `s` of `from` (a cache of
    /// the same layout); nothing is left behind if a copy fails.
    SeqId adopt_sequence(const KVCache<T>& from, SeqId s) {
        const std::int64_t length = from.length(s);
        const SeqId seq = cache_.add_sequence_of_length(length);
        try {
            for (const AttentionKind kind : kKVKinds) {
                std::vector<std::byte> page(from.page_bytes(kind));
                const auto [first, end] = from.held_slots(kind, length);
                for (std::int64_t j = first; j < end; ++j) {
                    from.export_page(s, kind, j, page);
                    cache_.import_page(seq, kind, j, page);
                }
            }
        } catch (...) {
            cache_.remove_sequence(seq);
            throw;
        }
        return seq;
    }

    /// `job`'s prompt (a resumed conversation included), then the ids it sampled.
    static std::vector<std::int32_t> conversation(const Job& job) {
        std::vector<std::int32_t> ids = job.request.prompt;
        ids.insert(ids.end(), job.gen->ids().begin(), job.gen->ids().end());
        return ids;
    }

    /// Writes `job`'s conversation to its save_to file: its prompt (a resumed conversation
    /// included) and sampled ids, the ids of those not in the cache (the last sampled id, not
    /// yet fed), its random stream, and its pages.
    void save(Job& job) {
        const std::vector<std::int32_t> history = conversation(job);
        const auto length = static_cast<std::size_t>(cache_.length(job.seq));
        if (history.size() > length + 1)  // more than one id to feed: the prompt was cut short
            throw InvalidArgument("engine: " + job.request.save_to.string() + ": not saved, the request finished after " +
                                  std::to_string(job.fed) + " of its " + std::to_string(job.prompt_size()) + " prompt ids were prefilled");
        const std::span<const std::int32_t> pending = std::span<const std::int32_t>(history).subspan(length);
        const SessionRandomState random{true, job.request.options.sampling.seed, job.gen->rng_state()};
        detail::write_session_file(job.request.save_to, model_->config(), cache_, job.seq, history, pending, random, nullptr);
    }

    struct Chunk {
        Job* job;
        std::int64_t begin = 0, end = 0;  ///< prompt ids [begin, end); decode chunks feed `pending`
        std::int64_t rows = 0;            ///< placeholder rows in it
        bool decode = false;
    };

    /// One forward step: drafts, then every decoding job's ids and the prefill chunks that fit
    /// the budget; each job then samples its rows.
    void step() {
        failed_.clear();
        const auto [drafted, drafting] = draft(failed_);
        for (auto& [job, error] : failed_) {
            finish(*job, FinishReason::Cancelled, error);
            active_.erase(std::find_if(active_.begin(), active_.end(), [job = job](const auto& j) { return j.get() == job; }));
        }
        const auto [decode, prefill] = plan_step();
        if (plan_.empty()) return;
        gather_step();
        try {
            model_->forward_into(std::span<const SequenceChunk>(batch_), cache_, SoftTokens<T>{soft_rows_, soft_blocks_}, LogitsMode::Last,
                                 logits_, scratch_);
        } catch (...) {
            // Not attributable to one request (submit validated each): the step's requests fail.
            fail_step(std::current_exception());
            return;
        }
        {
            std::lock_guard lock(mutex_);
            ++stats_.steps;
            stats_.prefilled_tokens += prefill;
            stats_.decode_tokens += decode;
            stats_.drafted_tokens += drafted;
            if (decode > 0 && prefill > 0) ++stats_.mixed_steps;
        }
        take_step();
        publish();
        if (options_.on_step) {
            try {
                options_.on_step(EngineStepInfo{decode, drafted, drafting, prefill, static_cast<std::int32_t>(plan_.size())});
            } catch (...) {
            }
        }
    }

    /// plan_: every decoding job's ids (pending and drafts) first, then prefill chunks within
    /// step_tokens. A step always prefills something when a prompt waits, even if decode
    /// tokens fill the budget. Returns the decode and prefill token counts.
    std::pair<std::int64_t, std::int64_t> plan_step() {
        plan_.clear();
        std::int64_t decode = 0, prefill = 0;
        for (auto& job : active_)
            if (job->pending >= 0) {
                plan_.push_back({job.get(), 0, 0, 0, true});
                decode += static_cast<std::int64_t>(job->feed.size());
            }
        std::int64_t budget = options_.step_tokens - decode;
        for (auto& owned : active_) {
            Job& job = *owned;
            if (job.pending >= 0 || job.follows) continue;
            if (budget <= 0 && prefill > 0) break;
            const auto at = static_cast<std::size_t>(job.fed);
            std::int64_t limit = std::min(std::max<std::int64_t>(1, budget), std::max<std::int64_t>(1, job.request.options.prefill_chunk));
            if (const std::int64_t stop = next_hand_over(job)) limit = std::min(limit, stop - job.fed);  // no placeholders: no block to keep whole
            const std::size_t end = detail::chunk_end(job.plan.blocks, at, job.request.prompt.size(), static_cast<std::size_t>(limit));
            const auto n = static_cast<std::int64_t>(end - at);
            if (n > budget && prefill > 0) continue;  // a whole image: the first chunk of a later step takes it
            std::int64_t rows = 0;
            for (std::size_t i = at; i < end; ++i) rows += model_->is_placeholder(job.request.prompt[i]);
            plan_.push_back({&job, job.fed, job.fed + n, rows, false});
            budget -= n;
            prefill += n;
        }
        return {decode, prefill};
    }

    /// batch_ and the soft tokens of plan_: the chunks' rows in order; image blocks renumbered
    /// so that two requests' images never share a block id.
    void gather_step() {
        batch_.clear();
        soft_rows_.clear();
        soft_blocks_.clear();
        bool any_blocks = false;
        for (const Chunk& ch : plan_) {
            Job& job = *ch.job;
            if (ch.decode) {
                job.step_start = cache_.length(job.seq);
                batch_.push_back({job.seq, job.feed, /*all_logits=*/job.feed.size() > 1});
            } else {
                batch_.push_back({job.seq, std::span<const std::int32_t>(job.request.prompt)
                                               .subspan(static_cast<std::size_t>(ch.begin), static_cast<std::size_t>(ch.end - ch.begin))});
                any_blocks = any_blocks || !job.plan.blocks.empty();
            }
        }
        const std::int64_t H = model_->config().hidden_size;
        std::int32_t block_offset = 0;
        for (const Chunk& ch : plan_) {
            const auto n = static_cast<std::size_t>(ch.decode ? static_cast<std::int64_t>(ch.job->feed.size()) : ch.end - ch.begin);
            const SoftTokens<T> part = ch.decode || !ch.job->has_soft
                                           ? SoftTokens<T>{}
                                           : ch.job->plan.slice(static_cast<std::size_t>(ch.begin), static_cast<std::size_t>(ch.end),
                                                                ch.job->rows_before, ch.rows, H);
            soft_rows_.insert(soft_rows_.end(), part.rows.begin(), part.rows.end());
            if (!any_blocks) continue;
            if (part.blocks.empty()) {
                soft_blocks_.insert(soft_blocks_.end(), n, -1);
                continue;
            }
            std::int32_t top = -1;
            for (std::int32_t b : part.blocks) {
                soft_blocks_.push_back(b >= 0 ? b + block_offset : -1);
                top = std::max(top, b);
            }
            block_offset += top + 1;
        }
    }

    /// Every request of plan_ fails with `error`.
    void fail_step(std::exception_ptr error) {
        for (auto it = active_.begin(); it != active_.end();)
            if (std::any_of(plan_.begin(), plan_.end(), [&](const Chunk& ch) { return ch.job == it->get(); })) {
                finish(**it, FinishReason::Cancelled, error);
                it = active_.erase(it);
            } else {
                ++it;
            }
        publish();
    }

    /// After the forward step: a chunk hands its ids over to the requests waiting for them; one
    /// that ends its prompt keeps the prompt's state for reuse; every job with a row samples it;
    /// finished jobs leave.
    void take_step() {
        std::int64_t row = 0;  // the chunk's first logits row: a verifying chunk has one per id
        for (const Chunk& ch : plan_) {
            Job& job = *ch.job;
            const std::int64_t first_row = row;
            row += ch.decode ? static_cast<std::int64_t>(job.feed.size()) : 1;
            if (!ch.decode) {
                job.fed = ch.end;
                job.rows_before += ch.rows;
                if (job.cacheable) hand_over(job);
                if (job.fed < job.prompt_size()) continue;
                if (options_.prefix_cache_entries && job.cacheable) store_prefix(job.request.prompt, job.seq);
                release_followers(job.shared->id);
                job.step_start = cache_.length(job.seq) - 1;
                job.feed.assign(1, -1);  // the prompt's last id: one row, as a plain decode step has
            }
            job.pending = -1;
            std::optional<FinishReason> finished;
            std::exception_ptr error;
            try {
                finished = verify(job, logits_, first_row);
            } catch (...) {
                finished = FinishReason::Cancelled;
                error = std::current_exception();
            }
            if (finished) {
                finish(job, *finished, error);
                job.leaving = true;
            }
        }
        active_.erase(std::remove_if(active_.begin(), active_.end(), [](const auto& j) { return j->leaving; }), active_.end());
    }

    /// Drafts for every decoding job that speculates, one drafter call for all the jobs that
    /// share a drafter; fills each decoding job's `feed` (pending, then its drafts). Returns the
    /// number of drafted ids and of sequences with drafts; the jobs whose drafter threw go to
    /// `failed`.
    std::pair<std::int64_t, std::int32_t> draft(std::vector<std::pair<Job*, std::exception_ptr>>& failed) {
        std::map<Drafter*, std::vector<Job*>> by_drafter;
        for (auto& job : active_) {
            if (job->pending < 0) continue;
            job->feed.assign(1, job->pending);
            const SpeculativeOptions& so = job->request.options.speculative;
            if (so.enabled()) by_drafter[so.drafter].push_back(job.get());
        }
        std::int64_t drafted = 0;
        std::int32_t drafting = 0;
        for (auto& [drafter, jobs] : by_drafter) {
            std::vector<Job*> group;
            std::vector<DraftRequest> requests;
            for (Job* job : jobs) {
                const std::int64_t budget = job->gen->draft_budget(cache_.length(job->seq));
                if (budget < 1) continue;
                group.push_back(job);
                requests.push_back(job->gen->draft_request(cache_, job->seq, budget));
            }
            if (group.empty()) continue;
            std::vector<std::vector<std::int32_t>> drafts(group.size());
            try {
                drafter->draft(requests, drafts);
                for (std::size_t g = 0; g < group.size(); ++g) group[g]->gen->accept_draft(drafts[g], requests[g].max_tokens);
            } catch (...) {
                for (Job* job : group) failed.emplace_back(job, std::current_exception());  // the drafter's requests fail
                continue;
            }
            for (std::size_t g = 0; g < group.size(); ++g) {
                group[g]->feed.insert(group[g]->feed.end(), drafts[g].begin(), drafts[g].end());
                drafted += static_cast<std::int64_t>(drafts[g].size());
                drafting += !drafts[g].empty();
            }
        }
        return {drafted, drafting};
    }

    /// Samples `job`'s rows of the step from `first_row` on with its generation core, as
    /// Session::generate does. Returns the finish reason, or nothing when job.pending is to be fed.
    std::optional<FinishReason> verify(Job& job, const Logits<T>& logits, std::int64_t first_row) {
        detail::Generation<T>& gen = *job.gen;
        const std::int64_t accepted = gen.accepted();
        const auto drafts = std::span<const std::int32_t>(job.feed).subspan(1);
        std::optional<FinishReason> finished;
        try {
            finished = gen.take(logits, first_row, drafts, cache_, job.seq, job.step_start);
        } catch (...) {
            count_accepted(gen.accepted() - accepted);
            throw;
        }
        count_accepted(gen.accepted() - accepted);
        job.pending = finished ? -1 : gen.pending();
        return finished;
    }

    void count_accepted(std::int64_t n) {
        std::lock_guard lock(mutex_);
        stats_.accepted_tokens += n;
    }

    /// Keeps the state of sequence `seq`, which holds `ids`, for later requests; drops the kept
    /// states it covers, or only refreshes one that covers it.
    void store_prefix(const std::vector<std::int32_t>& ids, SeqId seq) {
        for (auto& e : prefixes_)
            if (covers_prefix(cache_, e.seq, e.ids, seq, ids)) {
                e.last_use = ++tick_;
                return;
            }
        for (std::size_t i = prefixes_.size(); i-- > 0;)
            if (covers_prefix(cache_, seq, ids, prefixes_[i].seq, prefixes_[i].ids)) evict(i);
        const std::size_t bytes = held_bytes(seq);
        // Room in the budget and in the LRU: evict the least recently used.
        while (!prefixes_.empty() &&
               (static_cast<std::int32_t>(prefixes_.size()) >= options_.prefix_cache_entries ||
                (options_.kv_bytes && reserved_ + prefix_bytes() + bytes > options_.kv_bytes)))
            evict(least_recent());
        if (options_.kv_bytes && reserved_ + prefix_bytes() + bytes > options_.kv_bytes) return;
        prefixes_.push_back({ids, cache_.fork(seq), bytes, ++tick_});
        prefix_pages_dirty_ = true;
    }

    /// Keeps the state at the end of `job`'s conversation (its prompt and the ids it fed after
    /// it) for the conversation's next turn, whose prompt starts with them.
    void store_conversation(const Job& job) {
        std::vector<std::int32_t> ids = conversation(job);  // the last sampled id is not in the cache
        ids.resize(static_cast<std::size_t>(std::min<std::int64_t>(cache_.length(job.seq), static_cast<std::int64_t>(ids.size()))));
        store_prefix(ids, job.seq);
    }

    std::size_t least_recent() const {
        std::size_t v = 0;
        for (std::size_t i = 1; i < prefixes_.size(); ++i)
            if (prefixes_[i].last_use < prefixes_[v].last_use) v = i;
        return v;
    }

    void evict(std::size_t i) {
        cache_.remove_sequence(prefixes_[i].seq);
        prefixes_.erase(prefixes_.begin() + static_cast<std::ptrdiff_t>(i));
        prefix_pages_dirty_ = true;
    }

    /// Bytes of the pages sequence s holds (shared ones included).
    std::size_t held_bytes(SeqId s) const {
        std::size_t b = 0;
        const std::int64_t len = cache_.length(s);
        for (std::int64_t pos = 0; pos < len; pos += KVCache<T>::kPageSize) {
            if (cache_.page_of(s, AttentionKind::Sliding, pos) >= 0) b += page_bytes_[0];
            if (cache_.page_of(s, AttentionKind::Full, pos) >= 0) b += page_bytes_[1];
        }
        return b;
    }

    /// Completes `job`: flushes its text as Session does, saves it when asked, frees its pages,
    /// hands the result over.
    void finish(Job& job, FinishReason reason, std::exception_ptr error = nullptr) {
        EngineResult& r = job.result;
        r.finish = reason;
        r.error = error;
        if (!error) {
            try {
                job.gen->finish(reason);
            } catch (...) {
                r.error = std::current_exception();
                r.finish = FinishReason::Cancelled;
            }
        }
        if (!job.request.save_to.empty() && !r.error) {
            try {
                if (!job.running)
                    throw InvalidArgument("engine: " + job.request.save_to.string() + ": not saved, the request finished before it started");
                save(job);
                r.saved = true;
            } catch (...) {
                r.error = std::current_exception();
            }
        }
        if (job.running) release(job);
        job.gen->hand_over(r, job.submitted);
        {
            std::lock_guard lock(mutex_);
            ++stats_.requests_finished;
            if (r.finish == FinishReason::Cancelled) ++stats_.requests_cancelled;
            publish_locked();
        }
        detail::EngineRequestState& s = *job.shared;
        {
            std::lock_guard lock(s.mutex);
            s.result = std::move(r);
            s.done = true;
        }
        s.finished.notify_all();
    }

    /// Frees a running job's reservation and pages; keeps its conversation for reuse.
    void release(Job& job) {
        reserved_ -= job.reservation;
        job.running = false;
        --running_;
        if (options_.prefix_cache_entries && job.cacheable && !job.result.error && job.fed == job.prompt_size()) {
            try {
                store_conversation(job);
            } catch (...) {  // the cache is a saving only: the request's result stands
            }
        }
        cache_.remove_sequence(job.seq);
        job.seq = -1;
        if (job.follows && options_.prefix_cache_entries) {
            std::lock_guard lock(mutex_);
            count_prefix(job);  // it never took its prefix: a miss
        }
        release_followers(job.shared->id);
    }

    /// Copies the scheduler's state into the snapshot stats() returns.
    void publish() {
        std::lock_guard lock(mutex_);
        publish_locked();
    }
    void publish_locked() {
        if (prefix_pages_dirty_) {
            std::set<std::pair<int, std::int32_t>> pages;
            for (const auto& e : prefixes_)
                for (std::int64_t pos = 0; pos < cache_.length(e.seq); pos += KVCache<T>::kPageSize)
                    for (int k = 0; k < 2; ++k) {
                        const std::int32_t p = cache_.page_of(e.seq, k ? AttentionKind::Full : AttentionKind::Sliding, pos);
                        if (p >= 0) pages.insert({k, p});
                    }
            prefix_cache_pages_ = static_cast<std::int64_t>(pages.size());
            prefix_pages_dirty_ = false;
        }
        stats_.queue_depth = static_cast<std::int32_t>(queue_.size());
        stats_.active_sequences = running_;  // not active_.size(): finish() runs before the erase
        stats_.kv_pages_in_use = cache_.pages_in_use(AttentionKind::Sliding) + cache_.pages_in_use(AttentionKind::Full);
        stats_.kv_bytes_in_use = cache_.bytes_in_use();
        stats_.kv_bytes_reserved = reserved_ + prefix_bytes();
        stats_.prefix_entries = static_cast<std::int32_t>(prefixes_.size());
        stats_.prefix_cache_pages = prefix_cache_pages_;
    }

    const Model<T>* model_;
    const Tokenizer* tokenizer_;
    const EngineOptions options_;
    const std::int64_t context_;
    std::size_t page_bytes_[2] = {0, 0};  // sliding, full
    std::int64_t layers_of_[2] = {0, 0};

    // Shared with submitters and stats readers, under mutex_.
    mutable std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<std::unique_ptr<Job>> queue_;
    bool stopping_ = false;
    clock::time_point deadline_{};
    EngineStats stats_{};
    std::uint64_t next_id_ = 1;

    // The scheduler thread's own (the cache is read under mutex_ by publish_locked on that thread).
    KVCache<T> cache_;
    std::vector<std::unique_ptr<Job>> active_;
    std::vector<PrefixEntry> prefixes_;
    std::uint64_t tick_ = 0;
    std::size_t reserved_ = 0;
    std::int32_t running_ = 0;  // admitted, not finished
    bool prefix_pages_dirty_ = false;
    std::int64_t prefix_cache_pages_ = 0;
    // A step's buffers, kept from one step to the next; scratch_ grows to the largest step.
    Logits<T> logits_;
    StepScratch<T> scratch_;
    std::vector<Chunk> plan_;
    std::vector<SequenceChunk> batch_;
    std::vector<T> soft_rows_;
    std::vector<std::int32_t> soft_blocks_;
    std::vector<std::pair<Job*, std::exception_ptr>> failed_;

    std::mutex shutdown_mutex_;
    std::thread thread_;  // last: starts once everything above exists
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
