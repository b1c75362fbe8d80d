// gemma4::Tokenizer — loads a Hugging Face tokenizer.json of the Gemma family (BPE with byte
// fallback) and encodes / decodes text exactly as Hugging Face `tokenizers` does.
//
// Encoding: (1) added tokens are cut out of the raw text as whole units, (2) each remaining
// stretch is normalized, (3) added tokens marked `normalized` are cut out of that, (4) the
// pre-tokenizer splits it, (5) BPE encodes each piece, (6) the post-processor template adds
// BOS (or not, as tokenizer_config.json's add_bos_token says).
//
// Input text must be valid UTF-8: anything else throws TokenizerError naming the byte offset.
// Decoding never fails on valid ids and always returns valid UTF-8 (see Decoder::run).
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/tokenizer/added_tokens.hpp>
#include <gemma4/tokenizer/bpe.hpp>
#include <gemma4/tokenizer/components.hpp>
#include <gemma4/tokenizer/json_reader.hpp>
#include <gemma4/tokenizer/tokenizer_config.hpp>
#include <gemma4/tokenizer/utf8.hpp>

#include <cstdint>
#include <deque>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

class Tokenizer {
public:
    /// Ids above this are rejected when loading, so a corrupt file cannot ask for gigabytes.
    static constexpr std::int64_t kMaxTokenId = (std::int64_t{1} << 24) - 1;

    // Move-only: lookup tables hold views into the tokenizer's own strings.
    Tokenizer(Tokenizer&&) noexcept = default;
    Tokenizer& operator=(Tokenizer&&) noexcept = default;
    Tokenizer(const Tokenizer&) = delete;
    Tokenizer& operator=(const Tokenizer&) = delete;

    /// Loads `tokenizer_json`. The config is `config_path` when given, else a
    /// tokenizer_config.json in the same folder when there is one.
    static Tokenizer from_file(const std::filesystem::path& tokenizer_json,
                               const std::optional<std::filesystem::path>& config_path = std::nullopt) {
        TokenizerConfig config;
        if (config_path) {
            config = TokenizerConfig::from_file(*config_path);
        } else {
            const auto sibling = tokenizer_json.parent_path() / "tokenizer_config.json";
            std::error_code ec;
            if (std::filesystem::is_regular_file(sibling, ec)) config = TokenizerConfig::from_file(sibling);
        }
        return from_json_text(detail::read_text_file(tokenizer_json), config, tokenizer_json.string());
    }

    /// Loads from the bytes of a tokenizer.json; `source` names it in error messages.
    static Tokenizer from_json_text(std::string_view text, const TokenizerConfig& config = {},
                                    std::string source = "tokenizer.json") {
        Tokenizer t;
        t.source_.name = std::move(source);
        t.load(text, config);
        return t;
    }

    /// Token ids of `text`; with `add_special`, the post-processor's tokens (BOS) are added.
    std::vector<std::int32_t> encode(std::string_view text, bool add_special = true) const {
        std::vector<std::int32_t> ids;
        encode_into(text, ids, add_special);
        return ids;
    }

    /// As `encode`, appending to `ids`.
    void encode_into(std::string_view text, std::vector<std::int32_t>& ids, bool add_special = true) const {
        if (const auto bad = detail::first_invalid_utf8(text))
            throw TokenizerError("encode: input text is not valid UTF-8 (byte offset " + std::to_string(*bad) + ")");
        EncodeState state(ids);
        if (add_special) ids.insert(ids.end(), template_.prefix.begin(), template_.prefix.end());
        raw_added_.split(
            text, [&](std::string_view segment) { encode_segment(segment, state); },
            [&](std::size_t index) { ids.push_back(added_[index].id); });
        if (add_special) ids.insert(ids.end(), template_.suffix.begin(), template_.suffix.end());
    }

    /// Text of `ids`; with `skip_special`, special added tokens (BOS, turn markers, ...) are left
    /// out. Throws InvalidArgument for an id that is not in the vocabulary.
    std::string decode(std::span<const std::int32_t> ids, bool skip_special = false) const {
        return decode_impl(ids, skip_special, true);
    }

    /// The id of a piece or added token, if there is one.
    std::optional<std::int32_t> token_to_id(std::string_view token) const {
        if (const auto it = added_by_content_.find(token); it != added_by_content_.end()) return it->second;
        if (const std::int32_t id = model_.vocab.find(token); id >= 0) return id;
        return std::nullopt;
    }

    /// The piece or added-token text of `id`; InvalidArgument when `id` is not in the vocabulary.
    std::string_view id_to_token(std::int32_t id) const {
        check_id(id, "id_to_token");
        return token_text(id);
    }

    bool contains_id(std::int32_t id) const {
        return id >= 0 && static_cast<std::size_t>(id) < kind_of_id_.size() &&
               kind_of_id_[static_cast<std::size_t>(id)] != IdKind::None;
    }

    /// One past the largest id (vocabulary and added tokens): the embedding rows needed.
    std::size_t vocab_size() const { return kind_of_id_.size(); }

    /// True for added tokens marked special (`<bos>`, `<|turn>`, ...).
    bool is_special(std::int32_t id) const {
        return contains_id(id) && kind_of_id_[static_cast<std::size_t>(id)] == IdKind::Special;
    }

    /// The id of the special added token spelled `token` (e.g. "<|turn>"); TokenizerError if
    /// there is no such special token.
    std::int32_t special_id(std::string_view token) const {
        const auto id = token_to_id(token);
        if (!id || !is_special(*id))
            throw TokenizerError(source_.name + ": no special token \"" + std::string(token) + "\"");
        return *id;
    }

    std::int32_t bos_id() const { return require_role(bos_id_, "BOS"); }
    std::int32_t eos_id() const { return require_role(eos_id_, "EOS"); }
    std::int32_t pad_id() const { return require_role(pad_id_, "pad"); }
    /// The unk id, if the model has an unk token.
    std::optional<std::int32_t> unk_id() const {
        return model_.unk_id >= 0 ? std::optional<std::int32_t>(model_.unk_id) : std::nullopt;
    }

    /// Whether `encode(text, true)` starts with BOS.
    bool adds_bos() const {
        return !template_.prefix.empty() && bos_id_ >= 0 && template_.prefix.front() == bos_id_;
    }

    /// Ids `encode(..., true)` puts before / after the text.
    std::span<const std::int32_t> prefix_ids() const { return template_.prefix; }
    std::span<const std::int32_t> suffix_ids() const { return template_.suffix; }

    bool decoder_has_byte_fallback() const { return decoder_.has_byte_fallback(); }
    const std::string& source() const { return source_.name; }

    /// Decoding of a continuation: `at_text_start` false keeps decoder steps that only apply at
    /// the start of the text (Strip after Fuse) from applying again. Used by StreamingDecoder.
    std::string decode_impl(std::span<const std::int32_t> ids, bool skip_special, bool at_text_start) const {
        std::vector<std::string> pieces;
        pieces.reserve(ids.size());
        for (std::size_t i = 0; i < ids.size(); ++i) {
            const std::int32_t id = ids[i];
            if (!contains_id(id))
                throw InvalidArgument("decode: id " + std::to_string(id) + " at position " + std::to_string(i) +
                                      " is not in the vocabulary (size " + std::to_string(vocab_size()) + ")");
            if (skip_special && is_special(id)) continue;
            pieces.emplace_back(token_text(id));
        }
        return decoder_.run(std::move(pieces), at_text_start);
    }

    const detail::Decoder& decoder() const { return decoder_; }

private:
    enum class IdKind : std::uint8_t { None, Piece, Added, Special };

    // Words up to this many bytes are remembered per encode call; longer ones are rare and cheap
    // to miss.
    static constexpr std::size_t kMaxCachedWordBytes = 64;
    static constexpr std::size_t kMaxCachedWords = 1 << 16;

    struct WordHash {
        std::size_t operator()(std::string_view s) const { return detail::hash_bytes(s); }
    };

    struct EncodeState {
        explicit EncodeState(std::vector<std::int32_t>& out) : ids(out) {}
        std::vector<std::int32_t>& ids;
        std::string normalized;
        std::vector<detail::TextRange> pre_tokens;
        std::vector<detail::TextRange> split_scratch;
        detail::BpeScratch bpe;
        std::unordered_map<std::string_view, std::pair<std::uint32_t, std::uint32_t>, WordHash> cache;
        std::vector<std::int32_t> cached_ids;
        std::deque<std::string> cache_keys_owner;  // normalized text is rebuilt per segment
    };

    Tokenizer() = default;

    void encode_segment(std::string_view segment, EncodeState& state) const {
        if (normalizer_.empty()) {
            encode_normalized(segment, state, /*stable=*/true);
            return;
        }
        normalizer_.apply(segment, state.normalized);
        const std::string_view normalized = state.normalized;
        if (normalized_added_.empty()) {
            encode_normalized(normalized, state, false);
            return;
        }
        normalized_added_.split(
            normalized, [&](std::string_view part) { encode_normalized(part, state, false); },
            [&](std::size_t index) { state.ids.push_back(added_[index].id); });
    }

    // `stable` says whether `text` outlives the encode call's cache (it points into the caller's
    // input rather than into the reused normalization buffer).
    void encode_normalized(std::string_view text, EncodeState& state, bool stable) const {
        if (pre_tokenizer_.empty()) {
            encode_pre_token(text, state, stable);
            return;
        }
        pre_tokenizer_.apply(text, state.pre_tokens, state.split_scratch);
        for (const detail::TextRange r : state.pre_tokens) encode_pre_token(text.substr(r.begin, r.end - r.begin), state, stable);
    }

    void encode_pre_token(std::string_view word, EncodeState& state, bool stable) const {
        std::size_t start = 0;
        std::size_t pos = word.find(detail::kMetaspace, 1);
        while (pos != std::string_view::npos) {
            if (model_.is_cut_point(word, pos)) {
                encode_word_cached(word.substr(start, pos - start), state, stable);
                start = pos;
            }
            pos = word.find(detail::kMetaspace, pos + detail::kMetaspace.size());
        }
        encode_word_cached(word.substr(start), state, stable);
    }

    void encode_word_cached(std::string_view word, EncodeState& state, bool stable) const {
        if (word.empty()) return;
        if (word.size() > kMaxCachedWordBytes) {
            model_.encode_word(word, state.ids, state.bpe);
            return;
        }
        if (const auto it = state.cache.find(word); it != state.cache.end()) {
            const auto [offset, count] = it->second;
            state.ids.insert(state.ids.end(), state.cached_ids.begin() + offset, state.cached_ids.begin() + offset + count);
            return;
        }
        const std::size_t before = state.ids.size();
        model_.encode_word(word, state.ids, state.bpe);
        if (state.cache.size() >= kMaxCachedWords) return;
        const auto offset = static_cast<std::uint32_t>(state.cached_ids.size());
        state.cached_ids.insert(state.cached_ids.end(), state.ids.begin() + static_cast<std::ptrdiff_t>(before), state.ids.end());
        std::string_view key = word;
        if (!stable) {
            state.cache_keys_owner.emplace_back(word);
            key = state.cache_keys_owner.back();
        }
        state.cache.emplace(key, std::pair{offset, static_cast<std::uint32_t>(state.ids.size() - before)});
    }

    std::string_view token_text(std::int32_t id) const {
        const auto kind = kind_of_id_[static_cast<std::size_t>(id)];
        if (kind == IdKind::Added || kind == IdKind::Special)
            return added_[static_cast<std::size_t>(added_index_of_id_.at(id))].content;
        return model_.vocab.piece_of(id);
    }

    void check_id(std::int32_t id, std::string_view what) const {
        if (!contains_id(id))
            throw InvalidArgument(std::string(what) + ": id " + std::to_string(id) + " is not in the vocabulary (size " +
                                  std::to_string(vocab_size()) + ")");
    }

    std::int32_t require_role(std::int32_t id, std::string_view role) const {
        if (id < 0) throw TokenizerError(source_.name + ": the tokenizer has no " + std::string(role) + " token");
        return id;
    }

    // ---- loading ---------------------------------------------------------------------------

    void load(std::string_view text, const TokenizerConfig& config) {
        const detail::JsonSource& src = source_;
        detail::RawTokenizerJson raw = detail::read_tokenizer_json(text, src.name);
        const detail::json& root = raw.document;
        src.expect_object(root, "");
        const detail::json& model = src.require(root, "model", "");
        src.expect_object(model, "model");
        if (const detail::json* type = src.find(model, "type")) {
            if (!type->is_string()) src.fail("model.type", std::string("expected a string, got ") + type->type_name());
            if (type->get<std::string>() != "BPE")
                src.fail("model.type", "unsupported model type \"" + type->get<std::string>() + "\" (only BPE is supported)");
        }
        load_model_options(model);
        load_vocab(raw, model);
        load_merges(raw, model);
        load_added_tokens(root);
        load_model_unk(model);
        normalizer_ = detail::Normalizer::from_json(src, src.find(root, "normalizer"), "normalizer");
        pre_tokenizer_ = detail::PreTokenizer::from_json(src, src.find(root, "pre_tokenizer"), "pre_tokenizer");
        decoder_ = detail::Decoder::from_json(src, src.find(root, "decoder"), "decoder");
        template_ = detail::read_post_processor(src, src.find(root, "post_processor"), "post_processor",
                                                [this](std::int32_t id) { return contains_id(id); });
        apply_config(config);
    }

    void load_model_options(const detail::json& model) {
        const detail::JsonSource& src = source_;
        model_.byte_fallback = src.optional_bool(model, "byte_fallback", "model", false);
        model_.fuse_unk = src.optional_bool(model, "fuse_unk", "model", false);
        model_.ignore_merges = src.optional_bool(model, "ignore_merges", "model", false);
        if (const detail::json* dropout = src.find(model, "dropout")) {
            if (!dropout->is_number()) src.fail("model.dropout", std::string("expected a number, got ") + dropout->type_name());
            if (dropout->get<double>() != 0.0) src.fail("model.dropout", "BPE dropout is not supported");
        }
        for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
            if (const detail::json* v = src.find(model, key)) {
                if (!v->is_string()) src.fail(detail::member_path("model", key), std::string("expected a string, got ") + v->type_name());
                if (!v->get<std::string>().empty()) src.fail(detail::member_path("model", key), "not supported");
            }
        }
    }

    void load_vocab(const detail::RawTokenizerJson& raw, const detail::json& model) {
        const detail::JsonSource& src = source_;
        if (!raw.vocab_streamed) {
            const detail::json* v = src.find(model, "vocab");
            if (!v) src.fail("model.vocab", "missing");
            src.fail("model.vocab", std::string("expected an object of piece → id, got ") + v->type_name());
        }
        model_.vocab.reserve(raw.vocab.size(), raw.strings.size());
        std::int64_t max_id = -1;
        constexpr std::size_t kBatch = 32;
        std::uint64_t hashes[kBatch];
        for (std::size_t first = 0; first < raw.vocab.size(); first += kBatch) {
            const std::size_t n = std::min(kBatch, raw.vocab.size() - first);
            for (std::size_t k = 0; k < n; ++k) {
                hashes[k] = detail::hash_bytes(raw.text(raw.vocab[first + k].piece));
                model_.vocab.prefetch(hashes[k]);
            }
            for (std::size_t k = 0; k < n; ++k) {
                const detail::RawVocabEntry& e = raw.vocab[first + k];
                const std::string_view piece = raw.text(e.piece);
                if (e.id < 0 || e.id > kMaxTokenId)
                    src.fail("model.vocab[\"" + std::string(piece) + "\"]", "id " + std::to_string(e.id) + " out of range");
                const auto id = static_cast<std::int32_t>(e.id);
                if (model_.vocab.has_id(id))
                    src.fail("model.vocab[\"" + std::string(piece) + "\"]", "duplicate id " + std::to_string(id) +
                                                                              " (also used by \"" +
                                                                              std::string(model_.vocab.piece_of(id)) + "\")");
                if (model_.vocab.insert_hashed(piece, hashes[k], id) != detail::PieceTable::kMissing)
                    src.fail("model.vocab[\"" + std::string(piece) + "\"]", "duplicate piece");
                max_id = std::max(max_id, e.id);
            }
        }
        kind_of_id_.assign(static_cast<std::size_t>(max_id + 1), IdKind::None);
        for (std::size_t id = 0; id < kind_of_id_.size(); ++id)
            if (model_.vocab.has_id(static_cast<std::int32_t>(id))) kind_of_id_[id] = IdKind::Piece;
    }

    void load_merges(const detail::RawTokenizerJson& raw, const detail::json& model) {
        const detail::JsonSource& src = source_;
        if (!raw.merges_streamed) {
            const detail::json* m = src.find(model, "merges");
            if (!m) src.fail("model.merges", "missing");
            src.fail("model.merges", std::string("expected an array, got ") + m->type_name());
        }
        model_.merges.reserve(raw.merges.size());
        std::vector<char32_t> glue;
        constexpr std::size_t kBatch = 32;
        struct Pending {
            std::uint64_t left_hash, right_hash, merged_hash;
            std::int32_t left_id, right_id, merged_id;
            std::string merged;
        };
        std::vector<Pending> batch(kBatch);
        for (std::size_t first = 0; first < raw.merges.size(); first += kBatch) {
            const std::size_t n = std::min(kBatch, raw.merges.size() - first);
            for (std::size_t k = 0; k < n; ++k) {
                const detail::RawMerge& m = raw.merges[first + k];
                Pending& p = batch[k];
                p.merged.assign(raw.text(m.left)).append(raw.text(m.right));
                p.left_hash = detail::hash_bytes(raw.text(m.left));
                p.right_hash = detail::hash_bytes(raw.text(m.right));
                p.merged_hash = detail::hash_bytes(p.merged);
                model_.vocab.prefetch(p.left_hash);
                model_.vocab.prefetch(p.right_hash);
                model_.vocab.prefetch(p.merged_hash);
            }
            for (std::size_t k = 0; k < n; ++k) {
                const std::size_t rank = first + k;
                const std::string_view left = raw.text(raw.merges[rank].left);
                const std::string_view right = raw.text(raw.merges[rank].right);
                Pending& p = batch[k];
                const auto lookup = [&](std::string_view piece, std::uint64_t h) {
                    const std::int32_t id = model_.vocab.find_hashed(piece, h);
                    if (id < 0)
                        src.fail(detail::element_path("model.merges", rank), "unknown piece \"" + std::string(piece) + "\"");
                    return id;
                };
                p.left_id = lookup(left, p.left_hash);
                p.right_id = lookup(right, p.right_hash);
                p.merged_id = model_.vocab.find_hashed(p.merged, p.merged_hash);
                if (p.merged_id < 0)
                    src.fail(detail::element_path("model.merges", rank),
                             "merged piece \"" + p.merged + "\" is not in the vocabulary");
                model_.merges.prefetch(p.left_id, p.right_id);
                if (right.starts_with(detail::kMetaspace) && !left.ends_with(detail::kMetaspace)) {
                    const std::size_t last = detail::previous_char_start(left, left.size());
                    glue.push_back(detail::next_utf8(left, last).code_point);
                }
            }
            for (std::size_t k = 0; k < n; ++k)
                model_.merges.insert(batch[k].left_id, batch[k].right_id,
                                     {static_cast<std::int32_t>(first + k), batch[k].merged_id});
        }
        model_.finish(std::move(glue));
    }

    void load_added_tokens(const detail::json& root) {
        const detail::JsonSource& src = source_;
        const detail::json* list = src.find(root, "added_tokens");
        if (!list) {
            finish_added_tokens();
            return;
        }
        if (!list->is_array()) src.fail("added_tokens", std::string("expected an array, got ") + list->type_name());
        added_.reserve(list->size());
        for (std::size_t i = 0; i < list->size(); ++i) {
            const std::string path = detail::element_path("added_tokens", i);
            const detail::json& item = (*list)[i];
            src.expect_object(item, path);
            detail::AddedToken token;
            const std::int64_t id = src.require_integer(item, "id", path);
            if (id < 0 || id > kMaxTokenId) src.fail(detail::member_path(path, "id"), "id " + std::to_string(id) + " out of range");
            token.id = static_cast<std::int32_t>(id);
            token.content = src.require_string(item, "content", path);
            if (token.content.empty()) src.fail(detail::member_path(path, "content"), "empty token");
            if (const auto bad = detail::first_invalid_utf8(token.content))
                src.fail(detail::member_path(path, "content"), "not valid UTF-8");
            token.special = src.optional_bool(item, "special", path, false);
            token.lstrip = src.optional_bool(item, "lstrip", path, false);
            token.rstrip = src.optional_bool(item, "rstrip", path, false);
            token.normalized = src.optional_bool(item, "normalized", path, !token.special);
            if (src.optional_bool(item, "single_word", path, false))
                src.fail(detail::member_path(path, "single_word"), "single_word added tokens are not supported");
            if (static_cast<std::size_t>(token.id) >= kind_of_id_.size())
                kind_of_id_.resize(static_cast<std::size_t>(token.id) + 1, IdKind::None);
            kind_of_id_[static_cast<std::size_t>(token.id)] = token.special ? IdKind::Special : IdKind::Added;
            added_index_of_id_[token.id] = static_cast<std::int32_t>(added_.size());
            added_.push_back(std::move(token));
        }
        finish_added_tokens();
    }

    void finish_added_tokens() {
        raw_added_.build(added_, false);
        normalized_added_.build(added_, true);
        for (const detail::AddedToken& t : added_) added_by_content_[t.content] = t.id;
    }

    void load_model_unk(const detail::json& model) {
        const detail::JsonSource& src = source_;
        if (const detail::json* unk = src.find(model, "unk_token")) {
            if (!unk->is_string()) src.fail("model.unk_token", std::string("expected a string, got ") + unk->type_name());
            const std::string name = unk->get<std::string>();
            model_.unk_id = model_.vocab.find(name);
            if (model_.unk_id < 0) src.fail("model.unk_token", "\"" + name + "\" is not in model.vocab");
        }
    }

    void apply_config(const TokenizerConfig& config) {
        const auto role = [&](const std::optional<std::string>& name, std::string_view fallback, std::string_view field) {
            if (name) {
                const auto id = token_to_id(*name);
                if (!id) throw TokenizerError("tokenizer_config.json: " + std::string(field) + ": \"" + *name +
                                              "\" is not in " + source_.name);
                return *id;
            }
            return token_to_id(fallback).value_or(-1);
        };
        bos_id_ = role(config.bos_token, "<bos>", "bos_token");
        eos_id_ = role(config.eos_token, "<eos>", "eos_token");
        pad_id_ = role(config.pad_token, "<pad>", "pad_token");
        const auto override_marker = [](std::vector<std::int32_t>& ids, std::int32_t marker, std::optional<bool> add,
                                        bool at_front) {
            if (!add || marker < 0) return;
            std::erase(ids, marker);
            if (*add) ids.insert(at_front ? ids.begin() : ids.end(), marker);
        };
        override_marker(template_.prefix, bos_id_, config.add_bos_token, true);
        override_marker(template_.suffix, eos_id_, config.add_eos_token, false);
        if (config.add_bos_token.value_or(false) && bos_id_ < 0)
            throw TokenizerError("tokenizer_config.json: add_bos_token is true but " + source_.name + " has no BOS token");
    }

    detail::JsonSource source_;
    detail::BpeModel model_;
    std::vector<detail::AddedToken> added_;
    std::unordered_map<std::int32_t, std::int32_t> added_index_of_id_;
    std::unordered_map<std::string_view, std::int32_t, WordHash> added_by_content_;
    std::vector<IdKind> kind_of_id_;
    detail::AddedTokenMatcher raw_added_;
    detail::AddedTokenMatcher normalized_added_;
    detail::Normalizer normalizer_;
    detail::PreTokenizer pre_tokenizer_;
    detail::Decoder decoder_;
    detail::TemplateIds template_;
    std::int32_t bos_id_ = -1;
    std::int32_t eos_id_ = -1;
    std::int32_t pad_id_ = -1;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
