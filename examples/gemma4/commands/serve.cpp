// gemma4 serve: an OpenAI-compatible HTTP server (and Anthropic's Messages API) over the
// continuous-batching Engine. The HTTP side (cpp-httplib) runs one thread per connection; every
// request becomes one Engine request per choice (OpenAI's `n`, submitted together so that the
// engine prefills their prompt once), so concurrent clients share forward steps. See
// docs/server.md.
#include "../cli.hpp"
#include "../generation_args.hpp"
#include "../server/anthropic_encode.hpp"
#include "../server/anthropic_request.hpp"
#include "../server/api_error.hpp"
#include "../server/auth.hpp"
#include "../server/chat_request.hpp"
#include "../server/connection.hpp"
#include "../server/constraint_cache.hpp"
#include "../server/media.hpp"
#include "../server/openai_encode.hpp"
#include "../server/reply_parser.hpp"
#include "../server/response_format.hpp"
#include "../server/responses_api.hpp"
#include "../server/tool_grammar.hpp"
#include "../server/token_logprobs.hpp"

#include <gemma4/generate/engine.hpp>
#include <gemma4/tensor/quant.hpp>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <map>
#include <mutex>
#include <pthread.h>
#include <random>
#include <thread>

namespace cmd_serve {

using namespace gemma4;
using nlohmann::json;
using server::ApiError;

struct ServeConfig {
    std::string host = "127.0.0.1";
    int port = 8080;
    std::string api_key;
    std::size_t max_body = 16u << 20;
    int max_soft_tokens = 280;
    double grace_seconds = 10;
    /// A completion request may name any model (--accept-any-model); otherwise only the served
    /// names, and another is a 404.
    bool accept_any_model = false;
    /// Every request speculates with this drafter (--lookup); the engine verifies the drafts of
    /// all decoding requests in one step.
    SpeculativeOptions speculative{};
    /// The most choices (`n`) a chat or completion request may ask for (--max-n).
    std::int32_t max_n = 8;
};

/// Everything a handler needs; shared by all connection threads.
class Api {
public:
    /// `model_names`: the names the model is served under, the first one the name responses carry.
    Api(Engine<float>& engine, const Tokenizer& tokenizer, const GenerationConfig& generation, std::vector<std::string> model_names,
        ServeConfig config)
        : engine_(engine),
          tokenizer_(tokenizer),
          generation_(generation),
          model_id_(model_names.at(0)),
          model_names_(std::move(model_names)),
          config_(std::move(config)),
          constraints_(TokenVocabulary::from_tokenizer(tokenizer), kConstraintCacheEntries) {
        const Gemma4Config& c = engine_.model().config();
        context_ = engine_.options().context > 0 ? engine_.options().context : c.max_position_embeddings;
        for (std::size_t i = 0; i < c.tokens.eos_count; ++i) end_ids_.push_back(c.tokens.eos[i]);
        for (auto id : generation_.eos_token_id)
            if (std::find(end_ids_.begin(), end_ids_.end(), id) == end_ids_.end()) end_ids_.push_back(id);
        // A reply ends with <turn|>, and a tool call hands over with <|tool_response>, even when the
        // checkpoint's configs list only <eos>.
        for (const char* t : {"<turn|>", "<|tool_response>"})
            if (auto id = tokenizer_.token_to_id(t)) stop_ids_.push_back(*id);
    }

    void install(httplib::Server& http) {
        http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
            if (config_.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
            if (server::request_key_matches(req.get_header_value("Authorization"), req.get_header_value("x-api-key"), config_.api_key))
                return httplib::Server::HandlerResponse::Unhandled;
            res.set_header("WWW-Authenticate", "Bearer");
            send_error(res, ApiError(401, "missing or wrong API key (Authorization: Bearer KEY, or x-api-key: KEY)", "authentication_error", "", "invalid_api_key"),
                       server::error_shape_for_path(req.path));
            return httplib::Server::HandlerResponse::Handled;
        });
        // Statuses that no handler wrote a body for (unknown route, body too large, ...).
        http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty()) return;
            std::string message = res.status == 404   ? "no route for " + req.method + " " + req.path
                                  : res.status == 413 ? "request body too large"
                                                      : "HTTP " + std::to_string(res.status);
            const json body = server::error_shape_for_path(req.path) == server::ErrorShape::Anthropic
                                  ? server::anthropic_error_body(res.status, message)
                                  : server::error_body(message, server::error_type_for_status(res.status));
            res.set_content(body.dump(), "application/json");
        });
        http.set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
            try {
                std::rethrow_exception(ep);
            } catch (const std::exception& e) {
                send_error(res, ApiError(500, std::string("internal error: ") + e.what(), "server_error"), server::error_shape_for_path(req.path));
            } catch (...) {
                send_error(res, ApiError(500, "internal error", "server_error"), server::error_shape_for_path(req.path));
            }
        });
        http.set_logger([this](const httplib::Request&, const httplib::Response& res) {
            std::lock_guard lock(metrics_mutex_);
            ++responses_[res.status];
        });

        http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
            if (stopping_) {
                res.status = 503;
                res.set_content(R"({"status":"shutting down"})", "application/json");
                return;
            }
            res.set_content(R"({"status":"ok"})", "application/json");
        });
        http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
            json data = json::array();
            for (const std::string& name : model_names_) data.push_back(model_json(name));
            res.set_content(json{{"object", "list"}, {"data", std::move(data)}}.dump(), "application/json");
        });
        http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
            guarded(res, [&] {
                const std::string name = req.matches[1];
                if (!serves(name)) throw model_not_found(name);
                res.set_content(model_json(name).dump(), "application/json");
            });
        });
        http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) { res.set_content(metrics(), "text/plain; version=0.0.4"); });
        http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { guarded(res, [&] { tokenize(req, res); }); });
        http.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) { guarded(res, [&] { detokenize(req, res); }); });
        http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { guarded(res, [&] { chat(req, res); }); });
        http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { guarded(res, [&] { complete(req, res); }); });
        http.Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) { guarded(res, [&] { responses(req, res); }); });
        const auto anthropic = server::ErrorShape::Anthropic;
        http.Post("/v1/messages", [this, anthropic](const httplib::Request& req, httplib::Response& res) {
            guarded(res, [&] { anthropic_messages(req, res); }, anthropic);
        });
        http.Post("/v1/messages/count_tokens", [this, anthropic](const httplib::Request& req, httplib::Response& res) {
            guarded(res, [&] { anthropic_count_tokens(req, res); }, anthropic);
        });
    }

    void stop_accepting() { stopping_ = true; }

    /// Waits (up to `timeout`) until every streaming response has written its end: stopping the
    /// HTTP server earlier would cut them off mid-stream.
    void wait_for_streams(std::chrono::milliseconds timeout) {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        while (open_streams_.load() > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }

private:
    struct Prepared {
        EngineRequest<float> request;
        bool parse_tools = false;
    };

    /// State shared by a response's writer (a connection thread) and the engine's on_token (the
    /// scheduler thread): one Choice per engine request of the response (the request's `n`).
    struct Stream {
        struct Choice {
            std::string text;  ///< produced, not yet written
            std::vector<server::LogprobEntry> logprobs;  ///< of the tokens produced, not yet written
            std::int64_t reply_characters = 0;           ///< of all the text produced: the next token's text_offset
            /// on_logprob's entry, held until on_token of its id adds it with the id's text, so
            /// that the writer never sees one without the other (only the engine's thread touches it).
            std::optional<TokenLogprob> sampled;
            RequestHandle handle;  ///< set by the connection thread once submitted
        };
        std::mutex mutex;
        std::condition_variable ready;
        std::vector<Choice> choices;  ///< sized before the first submit, never after
        std::atomic<bool> client_gone{false};
        int socket = -1;  ///< the client's connection (server/connection.hpp), or -1: not watched

        /// Whether the client has gone: polls its connection until it has.
        bool hung_up() {
            if (!client_gone && socket >= 0 && server::peer_closed(socket)) client_gone = true;
            return client_gone;
        }
        /// Cancels the request of every choice submitted (each finishes at the engine's next
        /// step and frees its KV pages).
        void cancel() {
            for (const Choice& c : choices)
                if (c.handle.valid()) c.handle.cancel();
        }
    };

    /// A request's stream, watching the connection `req` came on.
    static std::shared_ptr<Stream> stream_for(const httplib::Request& req) {
        auto stream = std::make_shared<Stream>();
        stream->socket = server::connection_socket(req.remote_addr, req.remote_port, req.local_port);
        return stream;
    }

    static void send_error(httplib::Response& res, const ApiError& e, server::ErrorShape shape = server::ErrorShape::OpenAI) {
        res.status = e.status;
        res.set_content(server::error_body(e, shape).dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
    }

    /// Runs a handler, turning every failure into an error response of the route's API.
    template <class Fn>
    void guarded(httplib::Response& res, Fn&& fn, server::ErrorShape shape = server::ErrorShape::OpenAI) {
        const auto send = [&](const ApiError& e) { send_error(res, e, shape); };
        try {
            fn();
        } catch (const ApiError& e) {
            send(e);
        } catch (const QueueFullError& e) {
            if (stopping_) return send(ApiError(503, "server is shutting down", "server_unavailable_error"));
            res.set_header("Retry-After", "1");
            send(ApiError(429, std::string("server busy: ") + e.what(), "rate_limit_error", "", "queue_full"));
        } catch (const ContextLengthError& e) {
            send(ApiError(400, e.what(), "invalid_request_error", "messages", "context_length_exceeded"));
        } catch (const InvalidArgument& e) {
            send(ApiError(400, e.what()));
        } catch (const TokenizerError& e) {
            send(ApiError(400, e.what()));
        } catch (const Error& e) {
            send(ApiError(stopping_ ? 503 : 500, e.what(), stopping_ ? "server_unavailable_error" : "server_error"));
        }
    }

    static json parse_body(const httplib::Request& req) {
        json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
        if (body.is_discarded()) throw ApiError(400, "malformed JSON in the request body", "invalid_request_error", "", "invalid_json");
        if (!body.is_object()) throw ApiError(400, "request body must be a JSON object", "invalid_request_error", "", "invalid_json");
        return body;
    }

    static json model_json(const std::string& name) { return {{"id", name}, {"object", "model"}, {"created", 0}, {"owned_by", "gemma4"}}; }

    bool serves(const std::string& name) const { return std::find(model_names_.begin(), model_names_.end(), name) != model_names_.end(); }

    ApiError model_not_found(const std::string& name) const {
        std::string names;
        for (const std::string& n : model_names_) names += (names.empty() ? "'" : ", '") + n + "'";
        return ApiError(404, "model '" + name + "' does not exist; this server serves " + names, "invalid_request_error", "model",
                        "model_not_found");
    }

    /// A completion request's `model`: absent, one of the served names, or anything with
    /// --accept-any-model. Responses carry the first served name whichever was asked for.
    void check_model(const std::string& name) const {
        if (!name.empty() && !config_.accept_any_model && !serves(name)) throw model_not_found(name);
    }

    /// The checkpoint's sampling defaults (generation_config.json) with the request's fields on
    /// top; 400 for a value the sampler refuses or a logit_bias id outside the vocabulary, before
    /// the request is queued (in the engine they would fail it at its first sample).
    SamplingParams sampling_for(const server::SamplingFields& s) const {
        SamplingParams p = apply_generation_config(generation_, SamplingParams{.temperature = 1.0});
        if (s.temperature) p.temperature = *s.temperature;
        if (s.top_p) p.top_p = *s.top_p;
        if (s.top_k) p.top_k = *s.top_k;
        if (s.min_p) p.min_p = *s.min_p;
        if (s.seed) p.seed = *s.seed;
        if (s.presence_penalty) p.presence_penalty = *s.presence_penalty;
        if (s.frequency_penalty) p.frequency_penalty = *s.frequency_penalty;
        if (s.repetition_penalty) p.repetition_penalty = *s.repetition_penalty;
        if (s.repeat_last_n) p.repeat_last_n = *s.repeat_last_n;
        p.logit_bias = s.logit_bias;
        for (const TokenBias& b : p.logit_bias)
            if (!tokenizer_.contains_id(b.id) || b.id >= engine_.model().config().vocab_size)
                throw server::bad_field("logit_bias", "token id " + std::to_string(b.id) + " is not in the vocabulary");
        Sampler check(p);  // InvalidArgument (400)
        (void)check;
        return p;
    }

    /// Ids + media + options for the engine; 400 for anything that cannot run.
    /// The request's response_format / grammar / json_schema as its options' constraint; with
    /// thinking on, a thought channel may come before the constrained answer.
    /// `prefill`: the text the prompt already opened the reply with (a forced tool call's).
    void constrain(GenerateOptions& o, const std::optional<server::OutputGrammar>& grammar, bool thinking, bool ignore_eos,
                   const std::string& prefill = {}) {
        if (!grammar) return;
        if (ignore_eos) throw server::bad_field(grammar->param, "a constrained reply needs its end token: not with ignore_eos");
        o.constraint = constraints_.get(grammar->gbnf, grammar->param);
        o.constraint_prefix = tokenizer_.encode(prefill, /*add_special=*/false);
        const auto start = tokenizer_.token_to_id("<|channel>"), end = tokenizer_.token_to_id("<channel|>");
        if (thinking && start && end) o.thought_channel = {*start, *end};
    }

    Prepared prepare(std::vector<std::int32_t> ids, const server::DecodedMedia<float>& media, const server::SamplingFields& s) {
        if (stopping_) throw ApiError(503, "server is shutting down", "server_unavailable_error");
        const TokenIds& tok = engine_.model().config().tokens;
        ids = expand_placeholders(ids, tok, media.image_tokens, media.audio_tokens);
        if (ids.empty()) throw ApiError(400, "empty prompt", "invalid_request_error", "prompt");
        for (auto id : ids)
            if (!tokenizer_.contains_id(id)) throw ApiError(400, "token id " + std::to_string(id) + " is not in the vocabulary", "invalid_request_error", "prompt");
        const auto n = static_cast<std::int64_t>(ids.size());
        if (n >= context_)
            throw ApiError(400, "prompt of " + std::to_string(n) + " tokens does not fit the context of " + std::to_string(context_) + " tokens",
                           "invalid_request_error", "messages", "context_length_exceeded");
        Prepared p;
        GenerateOptions& o = p.request.options;
        o.sampling = sampling_for(s);
        // Without max_tokens a reply may use the rest of the context; a larger one is clipped to it.
        o.max_new_tokens = std::min<std::int64_t>(s.max_tokens.value_or(context_ - n), context_ - n);
        o.min_tokens = s.min_tokens.value_or(0);
        o.end_ids = s.ignore_eos ? std::vector<std::int32_t>{-1} : end_ids_;  // {-1}: no end id
        o.stop_ids = s.ignore_eos ? std::vector<std::int32_t>{} : stop_ids_;
        o.stop_strings = s.stop;
        o.speculative = config_.speculative;
        o.logprobs = s.logprobs;
        p.request.prompt = std::move(ids);
        p.request.images = media.images;
        p.request.audios = media.audios;
        return p;
    }

    static std::string finish_reason(FinishReason f, bool tool_calls) {
        if (f == FinishReason::MaxTokens || f == FinishReason::ContextFull) return "length";
        return tool_calls ? "tool_calls" : "stop";
    }

    static server::Usage usage_of(const EngineResult& r) {
        return {r.stats.prompt_tokens, r.stats.generated_tokens, r.stats.reused_tokens};
    }

    /// The usage of a request's choices, as OpenAI counts it: the prompt once, the completion
    /// tokens of every choice; cached: the prompt tokens that none of them prefilled (taken from
    /// the prefix cache; the choices after the first take the prompt from the first).
    static server::Usage usage_of(const std::vector<EngineResult>& results) {
        server::Usage u = usage_of(results.at(0));
        for (std::size_t i = 1; i < results.size(); ++i) {
            u.completion_tokens += results[i].stats.generated_tokens;
            u.cached_tokens = std::min(u.cached_tokens, results[i].stats.reused_tokens);
        }
        return u;
    }

    /// Whether `id` ends the reply: the text of end and stop ids is not part of it.
    bool ends_reply(std::int32_t id) const {
        return std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end() ||
               std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end();
    }

    /// on_token for choice `i` of a request: the id's text and logprob entry
    /// (logprob_collector's) join its reply, except for end and stop ids.
    std::function<bool(std::int32_t, std::string_view)> collector(std::shared_ptr<Stream> stream, std::size_t i) const {
        return [this, stream, i](std::int32_t id, std::string_view text) {
            Stream::Choice& c = stream->choices[i];
            if (!ends_reply(id)) {
                std::lock_guard lock(stream->mutex);
                if (c.sampled && c.sampled->id == id) c.logprobs.push_back({std::move(*c.sampled), c.reply_characters});
                c.text += text;
                c.reply_characters += server::count_characters(text);
            }
            c.sampled.reset();
            stream->ready.notify_one();
            // A client that hung up stops its request at this token, even when the writer has not
            // run since (a fast model can otherwise finish the whole reply into a closed socket).
            return !stream->hung_up();
        };
    }

    /// on_logprob for choice `i`, called just before on_token for the same id, which adds the
    /// entry (unless the id ends the reply) at the reply's length before the id's text.
    static std::function<void(const TokenLogprob&)> logprob_collector(std::shared_ptr<Stream> stream, std::size_t i) {
        return [stream, i](const TokenLogprob& lp) { stream->choices[i].sampled = lp; };
    }

    /// The 400s of a request's `n` before anything is queued: above --max-n; more choices than
    /// the queue holds (they wait there together); with --kv-budget, choices whose KV
    /// reservations (each may need its prompt and max_tokens new ids: admission's account,
    /// though their prompt pages are shared) cannot all be held at once, so that they could not
    /// run together. A single choice that can never fit is the engine's own 400.
    void check_choices(const EngineRequest<float>& r, std::int32_t n) const {
        if (n > config_.max_n) throw server::bad_field("n", "must be at most " + std::to_string(config_.max_n) + " (this server's --max-n)");
        if (n == 1) return;
        const std::int32_t queue = engine_.options().max_queue;
        if (n > queue)
            throw server::bad_field("n", std::to_string(n) + " choices wait in the engine's queue together, which holds " + std::to_string(queue) +
                                             " requests (--queue)");
        const std::size_t budget = engine_.options().kv_bytes;
        if (!budget) return;
        const GenerateOptions& o = r.options;
        const auto prompt = static_cast<std::int64_t>(r.prompt.size());
        const std::int64_t chunk = std::max(o.prefill_chunk, o.speculative.enabled() ? 2 * o.speculative.draft_max + 1 : 1);
        const std::size_t one = engine_.kv_bytes_needed(prompt, o.max_new_tokens, chunk);
        if (one > budget) return;
        if (one * static_cast<std::size_t>(n) > budget)
            throw server::bad_field("n", std::to_string(n) + " choices of a " + std::to_string(prompt) + "-token prompt and up to " +
                                             std::to_string(o.max_new_tokens) + " new tokens each need " + std::to_string(one * static_cast<std::size_t>(n)) +
                                             " bytes of KV pages, more than the budget of " + std::to_string(budget) +
                                             " (--kv-budget); ask for fewer choices or a smaller max_tokens");
    }

    /// A seed for a choice of a request without `seed` (n > 1): each gets its own.
    static std::uint64_t random_seed() {
        std::random_device device;
        return (static_cast<std::uint64_t>(device()) << 32) ^ device();
    }

    /// Submits `n` copies of `request`, one per choice, one right after the other: the first
    /// prefills the prompt and the others, admitted while it does (or later, from the prefix
    /// cache), take its pages (Engine's prompt sharing). Choice i samples with the request's seed
    /// + i, or without `seed` (and n > 1) with a random one. If one cannot be queued, those
    /// queued are cancelled and the error goes on (429 for a full queue).
    std::shared_ptr<Stream> submit(const httplib::Request& req, EngineRequest<float> request, std::int32_t n, bool seeded) {
        auto stream = stream_for(req);
        stream->choices.resize(static_cast<std::size_t>(n));
        const std::uint64_t seed = request.options.sampling.seed;
        try {
            for (std::int32_t i = 0; i < n; ++i) {
                EngineRequest<float> r = i + 1 < n ? request : std::move(request);
                r.options.sampling.seed = n > 1 && !seeded ? random_seed() : seed + static_cast<std::uint64_t>(i);
                r.options.on_token = collector(stream, static_cast<std::size_t>(i));
                r.options.on_logprob = logprob_collector(stream, static_cast<std::size_t>(i));
                stream->choices[static_cast<std::size_t>(i)].handle = engine_.submit(std::move(r));
            }
        } catch (...) {
            stream->cancel();
            throw;
        }
        return stream;
    }

    /// A request that was accepted and then failed in the engine. A prompt over the context is
    /// the client's (400, as when it is found at admission); anything else — the model's output
    /// not decoding, a full disk when saving — is the server's: 500, or 503 while stopping.
    [[noreturn]] void rethrow_generation_error(std::exception_ptr error) const {
        try {
            std::rethrow_exception(error);
        } catch (const ContextLengthError&) {
            throw;
        } catch (const std::exception& e) {
            if (stopping_) throw ApiError(503, std::string("generation stopped: ") + e.what(), "server_unavailable_error");
            throw ApiError(500, std::string("generation failed: ") + e.what(), "server_error");
        }
    }

    /// Waits for the results of a non-streaming request's choices, watching its connection
    /// meanwhile: a client that goes away cancels them (their KV pages are freed at the engine's
    /// next step), as a streaming one does. A choice that fails cancels the others; its error is
    /// rethrown (rethrow_generation_error).
    std::vector<EngineResult> finished_unless_gone(Stream& stream) const {
        std::vector<EngineResult> results;
        std::exception_ptr error;
        for (const Stream::Choice& c : stream.choices) {
            std::optional<EngineResult> r;
            while (!(r = c.handle.wait_for(std::chrono::milliseconds(100))))  // also while queued
                if (stream.hung_up()) stream.cancel();
            if (r->error && !error) {
                error = r->error;
                stream.cancel();
            }
            results.push_back(std::move(*r));
        }
        if (error) rethrow_generation_error(error);
        return results;
    }

    /// A chat request (of any of the three APIs) in the engine: its stream, and its prompt's length.
    struct Submitted {
        std::shared_ptr<Stream> stream;
        std::int64_t prompt_tokens = 0;
    };

    /// Submits `cr` with `prompt` (its rendering) and its media, one engine request per choice
    /// (`n`); `grammar` constrains every reply.
    Submitted submit_chat(const httplib::Request& req, const server::ChatRequest& cr, const std::string& prompt,
                          const std::optional<server::OutputGrammar>& grammar) {
        const auto media = server::decode_media<float>(cr.media, engine_.model().config(), config_.max_soft_tokens);
        Prepared p = prepare(tokenizer_.encode(prompt, /*add_special=*/false), media, cr.sampling);
        constrain(p.request.options, grammar, cr.thinking, cr.sampling.ignore_eos, server::reply_prefill(cr));
        check_choices(p.request, cr.sampling.n);
        const auto prompt_tokens = static_cast<std::int64_t>(p.request.prompt.size());
        return {submit(req, std::move(p.request), cr.sampling.n, cr.sampling.seed.has_value()), prompt_tokens};
    }

    void chat(const httplib::Request& req, httplib::Response& res) {
        const json body = parse_body(req);
        server::ChatRequest cr = server::parse_chat_request(body);
        check_model(cr.sampling.model);
        const auto ordered = nlohmann::ordered_json::parse(req.body);
        auto grammar = server::parse_output_grammar(ordered);
        if (auto calls = server::tool_call_grammar(cr, ordered)) {
            if (grammar) throw server::bad_field(grammar->param, "cannot be combined with a forced tool call or a strict tool");
            grammar = std::move(calls);
        }
        const std::string id = server::make_id("chatcmpl-");
        const std::int64_t created = server::unix_seconds();
        const auto stream = submit_chat(req, cr, server::render_prompt(cr), grammar).stream;
        if (cr.sampling.stream) return stream_chat(res, stream, cr, id, created);
        const std::vector<EngineResult> results = finished_unless_gone(*stream);
        std::lock_guard lock(stream->mutex);  // every on_token and on_logprob ran before the requests finished
        std::vector<server::ChatChoice> choices;
        for (std::size_t i = 0; i < results.size(); ++i) {
            const Stream::Choice& c = stream->choices[i];
            server::ParsedReply reply = server::parse_chat_reply(cr, c.text);
            const std::string finish = finish_reason(results[i].finish, !reply.tool_calls.empty());
            choices.push_back({std::move(reply), finish, cr.sampling.logprobs >= 0 ? server::chat_logprobs(tokenizer_, c.logprobs) : json(nullptr)});
        }
        res.set_content(server::chat_completion(id, model_id_, created, choices, usage_of(results)).dump(-1, ' ', false, json::error_handler_t::replace),
                        "application/json");
    }

    /// A chat's Server-Sent Events, every chunk of one choice (its `index`); the choices' chunks
    /// interleave as they are generated. A chunk with a delta carries, with logprobs asked for,
    /// the entries of its choice's tokens that arrived since the last chunk that carried some;
    /// what is left at the end rides on the choice's finish_reason chunk. The usage chunk comes
    /// after every choice has ended.
    void stream_chat(httplib::Response& res, std::shared_ptr<Stream> stream, const server::ChatRequest& cr, const std::string& id,
                     std::int64_t created) {
        struct Writer {
            server::ReplyParser parser;
            std::vector<server::ReplyEvent> prefill_events;
            server::ChatDeltas deltas;
            bool started = false;
            bool want_logprobs = false;
            std::vector<server::LogprobEntry> logprobs;  ///< of tokens no chunk has carried yet
            json take_logprobs(const Tokenizer& tokenizer) {
                if (!want_logprobs || logprobs.empty()) return nullptr;
                json j = server::chat_logprobs(tokenizer, logprobs);
                logprobs.clear();
                return j;
            }
        };
        auto writers = std::make_shared<std::vector<Writer>>(stream->choices.size());
        for (Writer& writer : *writers) {
            writer.parser = server::reply_parser_for(cr, &writer.prefill_events);
            writer.want_logprobs = cr.sampling.logprobs >= 0;
        }
        const bool include_usage = cr.sampling.include_usage;
        stream_response(
            res, stream,
            [=, this](std::size_t i, std::string piece, std::vector<server::LogprobEntry> entries, const EngineResult* done) {
                Writer& writer = (*writers)[i];
                std::string out;
                writer.logprobs.insert(writer.logprobs.end(), std::make_move_iterator(entries.begin()), std::make_move_iterator(entries.end()));
                std::vector<server::ReplyEvent> events;
                if (!writer.started) {
                    writer.started = true;
                    out += server::sse_event(server::chat_chunk(id, model_id_, created, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr, i));
                    events = std::move(writer.prefill_events);  // a forced call's name, sent at once
                }
                auto fed = writer.parser.feed(piece);
                events.insert(events.end(), fed.begin(), fed.end());
                if (done) {
                    auto rest = writer.parser.finish();
                    events.insert(events.end(), rest.begin(), rest.end());
                }
                for (const auto& e : events)
                    if (json delta = writer.deltas.delta_for(e); !delta.is_null())
                        out += server::sse_event(server::chat_chunk(id, model_id_, created, std::move(delta), nullptr, writer.take_logprobs(tokenizer_), i));
                if (done)
                    out += server::sse_event(server::chat_chunk(id, model_id_, created, json::object(), finish_reason(done->finish, writer.parser.saw_tool_call()),
                                                                writer.take_logprobs(tokenizer_), i));
                return out;
            },
            [=, this](const std::vector<EngineResult>& results) {
                return include_usage ? server::sse_event(server::usage_chunk(id, "chat.completion.chunk", model_id_, created, usage_of(results)))
                                     : std::string();
            });
    }

    void complete(const httplib::Request& req, httplib::Response& res) {
        const json body = parse_body(req);
        const server::SamplingFields s = server::parse_completion_sampling(body);
        check_model(s.model);
        const auto* prompt = server::detail::field(body, "prompt");
        if (!prompt) throw server::bad_field("prompt", "missing");
        std::vector<std::int32_t> ids;
        const json* p = prompt;
        if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];  // a batch of one
        if (p->is_string()) {
            ids = tokenizer_.encode(p->get<std::string>(), /*add_special=*/true);
        } else if (p->is_array() && !p->empty()) {
            for (std::size_t i = 0; i < p->size(); ++i)
                ids.push_back(static_cast<std::int32_t>(server::detail::integer_field((*p)[i], "prompt[" + std::to_string(i) + "]", 0, INT32_MAX)));
        } else {
            throw server::bad_field("prompt", "expected a string, an array of token ids, or a batch of one of them");
        }
        const auto grammar = server::parse_output_grammar(nlohmann::ordered_json::parse(req.body));
        Prepared prepared = prepare(std::move(ids), {}, s);
        constrain(prepared.request.options, grammar, false, s.ignore_eos);
        check_choices(prepared.request, s.n);
        const std::string id = server::make_id("cmpl-");
        const std::int64_t created = server::unix_seconds();
        const auto stream = submit(req, std::move(prepared.request), s.n, s.seed.has_value());
        if (s.stream) return stream_completion(res, stream, s, id, created);
        const std::vector<EngineResult> results = finished_unless_gone(*stream);
        const server::Usage usage = usage_of(results);
        std::lock_guard lock(stream->mutex);
        std::vector<server::TextChoice> choices;
        for (std::size_t i = 0; i < results.size(); ++i) {
            const Stream::Choice& c = stream->choices[i];
            choices.push_back({c.text, finish_reason(results[i].finish, false),
                               s.logprobs >= 0 ? server::completion_logprobs(tokenizer_, c.logprobs) : nlohmann::ordered_json(nullptr)});
        }
        res.set_content(server::text_completion(id, model_id_, created, choices, &usage).dump(-1, ' ', false, json::error_handler_t::replace),
                        "application/json");
    }

    void anthropic_messages(const httplib::Request& req, httplib::Response& res) {
        const server::AnthropicRequest a = server::parse_anthropic_request(parse_body(req));
        check_model(a.chat.sampling.model);
        const auto grammar = server::anthropic_tool_grammar(a, nlohmann::ordered_json::parse(req.body));
        const Submitted submitted = submit_chat(req, a.chat, server::render_prompt(a), grammar);
        auto message = std::make_shared<server::AnthropicMessage>(server::make_id("msg_"), model_id_, submitted.prompt_tokens);
        reply_in_blocks(res, submitted, a.chat, message, [](const server::AnthropicMessage& m) { return m.message(); });
    }

    /// The prompt's length as /v1/messages would count it (media expanded), nothing generated.
    void anthropic_count_tokens(const httplib::Request& req, httplib::Response& res) {
        const server::AnthropicRequest a = server::parse_anthropic_request(parse_body(req), server::MessagesEndpoint::CountTokens);
        check_model(a.chat.sampling.model);
        server::anthropic_tool_grammar(a, nlohmann::ordered_json::parse(req.body));  // the 400s /v1/messages would give
        const auto media = server::decode_media<float>(a.chat.media, engine_.model().config(), config_.max_soft_tokens);
        const auto ids = expand_placeholders(tokenizer_.encode(server::render_prompt(a), /*add_special=*/false), engine_.model().config().tokens,
                                             media.image_tokens, media.audio_tokens);
        res.set_content(json{{"input_tokens", ids.size()}}.dump(), "application/json");
    }

    void responses(const httplib::Request& req, httplib::Response& res) {
        const server::ResponsesRequest q = server::parse_responses_request(parse_body(req));
        check_model(q.chat.sampling.model);
        const auto grammar = server::responses_output_grammar(q, nlohmann::ordered_json::parse(req.body));
        const Submitted submitted = submit_chat(req, q.chat, server::render_prompt(q.chat), grammar);
        auto reply = std::make_shared<server::ResponsesReply>(server::make_id("resp_"), model_id_, server::unix_seconds(), q.echo);
        reply_in_blocks(res, submitted, q.chat, reply, [](const server::ResponsesReply& r) { return r.response(); });
    }

    /// How a reply of `cr` ended, for the block encoders: a stop string's match is found again in
    /// the decoded ids (the reply's text leaves it out).
    server::ReplyEnd reply_end(const EngineResult& r, const std::vector<std::string>& stops, bool tool_call) const {
        server::ReplyEnd end{.finish = r.finish, .tool_call = tool_call};
        if (r.finish == FinishReason::StopString) end.stop_sequence = server::matched_stop(tokenizer_.decode(r.ids), stops);
        const server::Usage usage = usage_of(r);
        end.prompt_tokens = usage.prompt_tokens;
        end.output_tokens = usage.completion_tokens;
        end.cached_tokens = usage.cached_tokens;
        return end;
    }

    /// A reply in blocks (Anthropic's messages, the Responses API): `encoder`'s events streamed,
    /// or, not streamed, `body_of(encoder)` once it has seen the whole reply, so both come from
    /// the same steps.
    template <class Encoder, class Body>
    void reply_in_blocks(httplib::Response& res, const Submitted& submitted, const server::ChatRequest& cr, std::shared_ptr<Encoder> encoder,
                         Body body_of) {
        struct Writer {
            server::ReplyParser parser;
            std::vector<server::ReplyEvent> prefill_events;  ///< a forced call's opening
            bool started = false;
        };
        auto writer = std::make_shared<Writer>();
        writer->parser = server::reply_parser_for(cr, &writer->prefill_events);
        auto step = [this, writer, encoder, stops = cr.sampling.stop](const std::string& piece, const EngineResult* done) {
            std::string out;
            if (!writer->started) {
                writer->started = true;
                out += encoder->start();
                out += encoder->add(writer->prefill_events);
            }
            out += encoder->add(writer->parser.feed(piece));
            if (done) {
                out += encoder->add(writer->parser.finish());
                out += encoder->finish(reply_end(*done, stops, writer->parser.saw_tool_call()));
            }
            return out;
        };
        if (cr.sampling.stream)
            return stream_response(
                res, submitted.stream,
                [step](std::size_t, std::string piece, std::vector<server::LogprobEntry>, const EngineResult* done) { return step(piece, done); },
                [](const std::vector<EngineResult>&) { return std::string(); },
                StreamFraming{.done = "", .error = [encoder](const std::string& message) { return encoder->error(message); }});
        const EngineResult r = finished_unless_gone(*submitted.stream).at(0);
        std::lock_guard lock(submitted.stream->mutex);  // every on_token ran before the request finished
        step(submitted.stream->choices.at(0).text, &r);
        res.set_content(body_of(*encoder).dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
    }

    /// A completion's Server-Sent Events, every chunk of one choice (its `index`), interleaved as
    /// they are generated: each text chunk carries, with logprobs asked for, the entries of its
    /// choice's tokens that arrived since its last text chunk; what is left at the end rides on
    /// the choice's finish_reason chunk. The usage chunk comes after every choice has ended.
    void stream_completion(httplib::Response& res, std::shared_ptr<Stream> stream, const server::SamplingFields& s, const std::string& id,
                           std::int64_t created) {
        const bool include_usage = s.include_usage, want_logprobs = s.logprobs >= 0;
        // Per choice, the entries of tokens no chunk has carried yet.
        auto pending = std::make_shared<std::vector<std::vector<server::LogprobEntry>>>(stream->choices.size());
        stream_response(
            res, stream,
            [=, this](std::size_t i, std::string piece, std::vector<server::LogprobEntry> entries, const EngineResult* done) {
                std::vector<server::LogprobEntry>& held = (*pending)[i];
                held.insert(held.end(), std::make_move_iterator(entries.begin()), std::make_move_iterator(entries.end()));
                const auto take_logprobs = [&] {
                    nlohmann::ordered_json j = want_logprobs && !held.empty() ? server::completion_logprobs(tokenizer_, held) : nullptr;
                    held.clear();
                    return j;
                };
                std::string out;
                if (!piece.empty()) out += server::sse_event(server::text_completion(id, model_id_, created, piece, nullptr, nullptr, take_logprobs(), i));
                if (done)
                    out += server::sse_event(
                        server::text_completion(id, model_id_, created, "", finish_reason(done->finish, false), nullptr, take_logprobs(), i));
                return out;
            },
            [=, this](const std::vector<EngineResult>& results) {
                return include_usage ? server::sse_event(server::usage_chunk(id, "text_completion", model_id_, created, usage_of(results))) : std::string();
            });
    }

    /// How a stream ends: OpenAI's chat and completions with `data: [DONE]`, a failure as an
    /// OpenAI error; the block streams (Anthropic's, the Responses API's) with no marker and
    /// their own error event.
    struct StreamFraming {
        std::string done = std::string(server::kSseDone);
        std::function<std::string(const std::string&)> error = [](const std::string& message) {
            return server::sse_event(server::error_body(message, "server_error"));
        };
    };

    /// An SSE response fed by `stream`'s choices. `encode(i, piece, logprobs, done)` turns choice
    /// i's new text, the entries of the tokens that produced it (and, once, its finished result)
    /// into events; the choices' events interleave as they are generated. `finish(results)`
    /// writes what comes after the last choice has ended (a usage chunk), then a failed choice's
    /// error (a failure cancels the other choices), then the framing's end. A client that goes
    /// away cancels every choice, which frees their KV pages.
    template <class Encode, class Finish>
    void stream_response(httplib::Response& res, std::shared_ptr<Stream> stream, Encode encode, Finish finish, StreamFraming framing = {}) {
        res.set_header("Cache-Control", "no-cache");
        res.set_header("X-Accel-Buffering", "no");
        struct Progress {
            std::vector<std::optional<EngineResult>> results;  ///< of the choices whose end was written
            std::string error;                                 ///< the first failed choice's
            bool finished = false;
        };
        auto progress = std::make_shared<Progress>();
        progress->results.resize(stream->choices.size());
        ++open_streams_;
        res.set_chunked_content_provider(
            "text/event-stream",
            [stream, encode, finish, progress, framing](std::size_t, httplib::DataSink& sink) mutable {
                auto gone = [&] {
                    stream->client_gone = true;
                    stream->cancel();
                    return false;
                };
                if (!sink.is_writable()) return gone();
                const std::size_t n = stream->choices.size();
                std::vector<std::string> pieces(n);
                std::vector<std::vector<server::LogprobEntry>> logprobs(n);
                {
                    std::unique_lock lock(stream->mutex);
                    stream->ready.wait_for(lock, std::chrono::milliseconds(50), [&] {
                        return std::any_of(stream->choices.begin(), stream->choices.end(), [](const Stream::Choice& c) { return !c.text.empty(); });
                    });
                    for (std::size_t i = 0; i < n; ++i) {
                        pieces[i].swap(stream->choices[i].text);
                        logprobs[i].swap(stream->choices[i].logprobs);
                    }
                }
                std::string out;
                bool all_done = true;
                for (std::size_t i = 0; i < n; ++i) {
                    if (progress->results[i]) continue;  // its end is written
                    Stream::Choice& c = stream->choices[i];
                    std::optional<EngineResult> result;
                    if (c.handle.done()) {
                        result = c.handle.wait();
                        std::lock_guard lock(stream->mutex);  // every on_token ran before the request finished
                        pieces[i] += c.text;
                        c.text.clear();
                        logprobs[i].insert(logprobs[i].end(), std::make_move_iterator(c.logprobs.begin()), std::make_move_iterator(c.logprobs.end()));
                        c.logprobs.clear();
                    }
                    out += encode(i, std::move(pieces[i]), std::move(logprobs[i]), result ? &*result : nullptr);
                    if (!result) {
                        all_done = false;
                        continue;
                    }
                    if (result->error && progress->error.empty()) {
                        progress->error = "generation failed";
                        try {
                            std::rethrow_exception(result->error);
                        } catch (const std::exception& e) {
                            progress->error = e.what();
                        } catch (...) {
                        }
                        stream->cancel();  // the other choices end at the engine's next step
                    }
                    progress->results[i] = std::move(result);
                }
                if (all_done) {
                    std::vector<EngineResult> results;
                    for (auto& r : progress->results) results.push_back(std::move(*r));
                    out += finish(results);
                    if (!progress->error.empty()) out += framing.error(progress->error);
                }
                if (!out.empty() && !sink.write(out.data(), out.size())) return gone();
                if (all_done) {
                    if (!framing.done.empty() && !sink.write(framing.done.data(), framing.done.size())) return gone();
                    progress->finished = true;
                    sink.done();
                }
                return true;
            },
            [this, stream, progress](bool success) {
                if (!success || !progress->finished) {
                    stream->client_gone = true;
                    stream->cancel();
                }
                --open_streams_;
            });
    }

    void tokenize(const httplib::Request& req, httplib::Response& res) {
        const json body = parse_body(req);
        const auto* content = server::detail::field(body, "content");
        if (!content) throw server::bad_field("content", "missing");
        const std::string text = server::detail::string_field(*content, "content");
        bool add_special = false;
        if (auto v = server::detail::field(body, "add_special")) add_special = server::detail::bool_field(*v, "add_special");
        res.set_content(json{{"tokens", tokenizer_.encode(text, add_special)}}.dump(), "application/json");
    }

    void detokenize(const httplib::Request& req, httplib::Response& res) {
        const json body = parse_body(req);
        const auto* tokens = server::detail::field(body, "tokens");
        if (!tokens || !tokens->is_array()) throw server::bad_field("tokens", "expected an array of token ids");
        std::vector<std::int32_t> ids;
        for (std::size_t i = 0; i < tokens->size(); ++i) {
            const auto id = server::detail::integer_field((*tokens)[i], "tokens[" + std::to_string(i) + "]", 0, INT32_MAX);
            if (!tokenizer_.contains_id(static_cast<std::int32_t>(id)))
                throw server::bad_field("tokens[" + std::to_string(i) + "]", "id " + std::to_string(id) + " is not in the vocabulary");
            ids.push_back(static_cast<std::int32_t>(id));
        }
        res.set_content(json{{"content", tokenizer_.decode(ids)}}.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
    }

    std::string metrics() const {
        const EngineStats s = engine_.stats();
        std::string out;
        auto metric = [&](const char* name, const char* type, const char* help, auto value) {
            out += std::string("# HELP gemma4_") + name + " " + help + "\n# TYPE gemma4_" + name + " " + type + "\ngemma4_" + name + " " +
                   std::to_string(value) + "\n";
        };
        metric("requests_submitted_total", "counter", "Requests accepted by the engine.", s.requests_submitted);
        metric("requests_finished_total", "counter", "Requests finished (any reason).", s.requests_finished);
        metric("requests_rejected_total", "counter", "Requests rejected because the queue was full.", s.requests_rejected);
        metric("requests_cancelled_total", "counter", "Requests cancelled (client gone, shutdown).", s.requests_cancelled);
        metric("prompt_tokens_total", "counter", "Prompt tokens of accepted requests.", s.prompt_tokens);
        metric("prefilled_tokens_total", "counter", "Prompt tokens actually prefilled (not reused).", s.prefilled_tokens);
        metric("generated_tokens_total", "counter", "Tokens generated.", s.generated_tokens);
        metric("queue_depth", "gauge", "Requests waiting for admission.", s.queue_depth);
        metric("active_sequences", "gauge", "Requests being stepped.", s.active_sequences);
        metric("kv_pages_in_use", "gauge", "KV cache pages held (prefix cache included).", s.kv_pages_in_use);
        metric("kv_bytes_in_use", "gauge", "KV cache bytes held.", s.kv_bytes_in_use);
        metric("prefix_cache_hits_total", "counter", "Prompts that reused a cached prefix.", s.prefix_hits);
        metric("prefix_cache_misses_total", "counter", "Prompts that found no cached prefix.", s.prefix_misses);
        metric("prefix_cache_reused_tokens_total", "counter", "Prompt tokens taken from the prefix cache.", s.prefix_reused_tokens);
        metric("prefix_cache_pages", "gauge", "KV pages held by the prefix cache alone.", s.prefix_cache_pages);
        metric("kv_bytes_reserved", "gauge", "KV bytes reserved by running requests and the prefix cache.", s.kv_bytes_reserved);
        metric("engine_steps_total", "counter", "Forward steps run.", s.steps);
        metric("draft_tokens_total", "counter", "Drafted tokens verified (--draft-model, --lookup).", s.drafted_tokens);
        metric("draft_tokens_accepted_total", "counter", "Drafted tokens the model sampled too.", s.accepted_tokens);
        metric("http_streams_open", "gauge", "Streaming responses being written.", open_streams_.load());
        out += "# HELP gemma4_http_responses_total HTTP responses by status.\n# TYPE gemma4_http_responses_total counter\n";
        std::lock_guard lock(metrics_mutex_);
        for (const auto& [status, count] : responses_)
            out += "gemma4_http_responses_total{code=\"" + std::to_string(status) + "\"} " + std::to_string(count) + "\n";
        return out;
    }

    Engine<float>& engine_;
    const Tokenizer& tokenizer_;
    GenerationConfig generation_;
    std::string model_id_;
    std::vector<std::string> model_names_;  ///< model_id_ first
    ServeConfig config_;
    std::int64_t context_ = 0;
    std::vector<std::int32_t> end_ids_, stop_ids_;
    /// Grammars compiled for requests, kept for the requests that send them again.
    static constexpr std::size_t kConstraintCacheEntries = 32;
    server::ConstraintCache constraints_;
    std::atomic<bool> stopping_{false};
    std::atomic<int> open_streams_{0};
    mutable std::mutex metrics_mutex_;
    std::map<int, std::int64_t> responses_;
};

/// The names the model is served under: those of --served-model-name (else the checkpoint's
/// folder or file name), then those of --alias, each once.
std::vector<std::string> model_names(const std::filesystem::path& dir, std::vector<std::string> served, const std::vector<std::string>& aliases) {
    if (served.empty()) {
        const std::string folder = std::filesystem::weakly_canonical(dir).filename().string();
        served.push_back(folder.empty() ? "gemma4" : folder);
    }
    served.insert(served.end(), aliases.begin(), aliases.end());
    std::vector<std::string> names;
    for (std::string& name : served) {
        if (name.empty()) throw InvalidArgument("serve: --served-model-name and --alias need a non-empty name");
        if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(std::move(name));
    }
    return names;
}

int run(cli::Args& args) {
    const std::filesystem::path dir = args.require("model");
    const std::vector<std::string> names = model_names(dir, args.get_all("served-model-name"), args.get_all("alias"));
    ServeConfig config;
    config.host = args.get("host").value_or(config.host);
    config.port = args.number<int>("port", config.port);
    config.api_key = args.get("api-key").value_or("");
    config.max_body = args.number<std::size_t>("max-body", config.max_body);
    config.max_soft_tokens = args.number<int>("max-soft-tokens", config.max_soft_tokens);
    config.grace_seconds = args.number<double>("grace", config.grace_seconds);
    config.accept_any_model = args.flag("accept-any-model");
    config.max_n = args.number<std::int32_t>("max-n", config.max_n);
    EngineOptions engine_options;
    engine_options.max_sequences = args.number<std::int32_t>("parallel", engine_options.max_sequences);
    engine_options.context = args.number<std::int64_t>("ctx-size", 0);
    engine_options.max_queue = args.number<std::int32_t>("queue", engine_options.max_queue);
    engine_options.kv_bytes = args.bytes("kv-budget", 0);
    engine_options.prefix_cache_entries = args.number<std::int32_t>("prefix-cache", engine_options.prefix_cache_entries);
    const std::string weights = args.get("weights").value_or("as-stored");
    const std::int64_t quant_block = args.quant_block();
    const std::filesystem::path mmproj = args.mmproj();
    const auto threads = args.number<unsigned>("threads", 0);
    const cli::SpeculativeArgs draft_args = cli::read_speculative_args(args);
    args.finish();
    const auto format = parse_weight_format(weights);
    if (!format) throw InvalidArgument("serve: --weights must be int8, int4 or bf16, got '" + weights + "'");
    if (quant_block && *format != WeightFormat::Int8 && *format != WeightFormat::Int4)
        throw InvalidArgument("serve: --quant-block applies to --weights int8 and int4");
    if (config.port < 0 || config.port > 65535) throw InvalidArgument("serve: --port must be between 0 and 65535");
    if (engine_options.max_sequences < 1) throw InvalidArgument("serve: --parallel must be at least 1");
    if (engine_options.max_queue < 0) throw InvalidArgument("serve: --queue must be >= 0");
    if (engine_options.context < 0) throw InvalidArgument("serve: --ctx-size must be >= 0");
    if (engine_options.prefix_cache_entries < 0) throw InvalidArgument("serve: --prefix-cache must be >= 0");
    if (config.max_n < 1) throw InvalidArgument("serve: --max-n must be at least 1");
    if (config.max_body < 1024) throw InvalidArgument("serve: --max-body must be at least 1024 bytes");
    if (config.grace_seconds < 0) throw InvalidArgument("serve: --grace must be >= 0");
    // Anyone who can reach a public address could use the model: require a key there.
    if (!server::is_loopback_host(config.host) && config.api_key.empty())
        throw InvalidArgument("serve: refusing to listen on non-loopback address '" + config.host +
                              "' without --api-key (anyone who can reach it could use the server)");

    // SIGINT/SIGTERM are taken by one thread with sigwait: blocked here, before any other thread
    // exists, so that every thread inherits the mask.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    // A shell starts background jobs with SIGINT ignored, and an ignored signal never reaches
    // sigwait: take both back (they stay blocked, so their default action never runs).
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    std::signal(SIGPIPE, SIG_IGN);

    const Model<float> model = Model<float>::load(dir, ModelOptions{threads}, LoadOptions{.format = *format, .block = quant_block, .mmproj = mmproj});
    const auto tokenizer = cli::load_tokenizer_if_present(dir);
    if (!tokenizer) throw IoError(cli::tokenizer_location(dir) + ": not found (the server needs the tokenizer)");
    const GenerationConfig generation = cli::checkpoint_generation_config(dir);
    if (engine_options.context > model.config().max_position_embeddings)
        throw InvalidArgument("serve: --ctx-size " + std::to_string(engine_options.context) + " exceeds the model's " +
                              std::to_string(model.config().max_position_embeddings) + " positions");

    const cli::Speculation speculation = cli::make_speculation(draft_args, model, threads);
    config.speculative = speculation.options;
    Engine<float> engine(model, &*tokenizer, engine_options);
    Api api(engine, *tokenizer, generation, names, config);
    httplib::Server http;
    // One thread per open connection: every running or queued request holds one, plus room for
    // keep-alive connections and the cheap endpoints.
    const std::size_t pool = static_cast<std::size_t>(engine_options.max_sequences + engine_options.max_queue) + 16;
    http.new_task_queue = [pool] { return new httplib::ThreadPool(pool); };
    http.set_payload_max_length(config.max_body);
    http.set_keep_alive_max_count(100);
    http.set_keep_alive_timeout(5);
    http.set_read_timeout(30);
    http.set_write_timeout(30);
    api.install(http);

    int port = config.port;
    if (port == 0) {
        port = http.bind_to_any_port(config.host);
        if (port < 0) throw IoError("serve: cannot bind to " + config.host);
    } else if (!http.bind_to_port(config.host, port)) {
        throw IoError("serve: cannot bind to " + config.host + ":" + std::to_string(port) + " (in use, or not an address of this machine)");
    }
    {
        ModelWeights views = model.weights();  // views: a cheap copy
        std::fprintf(stderr, "gemma4 serve: weights %s\n", matrix_summary(views).c_str());
    }
    std::fprintf(stderr, "gemma4 serve: model '%s', listening on http://%s:%d\n", names.front().c_str(), config.host.c_str(), port);
    std::fflush(stderr);

    std::atomic<bool> by_signal{false};
    std::thread signal_thread([&] {
        int received = 0;
        sigwait(&signals, &received);
        if (!by_signal.exchange(true) && received != 0) {
            std::fprintf(stderr, "gemma4 serve: %s, finishing in-flight requests (up to %g s)\n", received == SIGINT ? "SIGINT" : "SIGTERM",
                         config.grace_seconds);
            std::fflush(stderr);
        }
        api.stop_accepting();
        engine.shutdown(std::chrono::milliseconds(static_cast<std::int64_t>(config.grace_seconds * 1000)));
        api.wait_for_streams(std::chrono::seconds(5));
        http.stop();
    });
    http.listen_after_bind();
    if (!by_signal.exchange(true)) pthread_kill(signal_thread.native_handle(), SIGTERM);  // wake the waiting thread
    signal_thread.join();
    std::fprintf(stderr, "gemma4 serve: stopped\n");
    return 0;
}

const cli::Command reg{"serve", "OpenAI-compatible HTTP server (chat, completions, responses, streaming; Anthropic's messages too) over the batching engine",
                       cli::Options{
                           {"model", "PATH", "checkpoint directory (config.json, *.safetensors, tokenizer.json) or GGUF file", cli::kRequired},
                           {"host", "ADDR", "address to listen on (default: 127.0.0.1; others need --api-key)"},
                           {"port", "N", "TCP port (default: 8080; 0: any free port, printed at start-up)"},
                           {"parallel", "N", "requests decoded together (default: 16)"},
                           {"ctx-size", "N", "context of each request in tokens (default: the model's)"},
                           {"queue", "N", "requests waiting beyond --parallel before 429 (default: 64)"},
                           {"kv-budget", "SIZE", "KV cache bytes for running requests and kept prefixes (K, M, G suffixes): a request waits until its pages fit, one that never can is a 400 (default: no bound beyond --parallel)"},
                           {"prefix-cache", "N", "prompt and conversation states kept for reuse by later requests (default: 16; 0: none, requests sent together still share their prompt)"},
                           {"max-n", "N", "most choices (n) a chat or completion request may ask for; more is a 400 (default: 8)"},
                           {"api-key", "KEY", "require 'Authorization: Bearer KEY' (or 'x-api-key: KEY') on every endpoint but /health"},
                           {"weights", "FORMAT", "as-stored (default), bf16, int8 or int4: re-encode the weights at load"},
                           {"max-body", "BYTES", "largest request body; larger ones get 413 (default: 16 MiB)"},
                           {"max-soft-tokens", "N", "soft tokens per image: 70, 140, 280 (default), 560 or 1120"},
                           {"grace", "SECONDS", "on SIGINT/SIGTERM, time given to in-flight requests before they are cancelled (default: 10)"},
                           {"served-model-name", "NAME", "the model's name in the API, instead of the checkpoint's folder name; the first is the one responses carry", cli::kRepeatable},
                           {"alias", "NAME", "a further name requests may use for the model (listed by /v1/models)", cli::kRepeatable},
                           {"accept-any-model", "", "answer completion requests whatever model they name (default: another name is a 404)"},
                       } + cli::speculative_options() + cli::mmproj_option() + cli::quant_block_option() + cli::threads_option(),
                       run};

}  // namespace cmd_serve
