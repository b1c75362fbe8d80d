// gemma4::StreamingDecoder — turns ids into text one id at a time, as a model generates them.
//
// `push(id)` returns the text that became complete. A character split over several byte-fallback
// pieces (emoji, CJK, ...) is held back until its last byte arrives, so the output never ends in
// the middle of a UTF-8 sequence. `finish()` returns what is still held; bytes that never formed
// a character come out as U+FFFD, one per byte. Bytes that cannot start or continue a character
// are replaced as soon as that is certain. The concatenation of everything returned equals
// `Tokenizer::decode` of all ids.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/tokenizer/tokenizer.hpp>
#include <gemma4/tokenizer/utf8.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

class StreamingDecoder {
public:
    /// `tokenizer` must outlive the decoder.
    explicit StreamingDecoder(const Tokenizer& tokenizer, bool skip_special = false)
        : tokenizer_(&tokenizer), skip_special_(skip_special) {
        for (const auto& step : tokenizer.decoder().steps())
            if (step.kind == detail::Decoder::Step::Kind::Strip && step.after_fuse && step.stop > 0)
                throw TokenizerError(tokenizer.source() +
                                     ": decoder: streaming is not supported with a Strip step (stop > 0) after Fuse");
    }

    /// Adds one id; returns the text completed by it (often empty while a character is pending).
    /// InvalidArgument if `id` is not in the vocabulary.
    std::string push(std::int32_t id) {
        if (!tokenizer_->contains_id(id))
            throw InvalidArgument("decode: id " + std::to_string(id) + " is not in the vocabulary (size " +
                                  std::to_string(tokenizer_->vocab_size()) + ")");
        pending_.push_back(id);
        if (ends_with_unfinished_character()) return {};
        return flush_pending();
    }

    /// Everything still held back; the decoder is then ready for a new text.
    std::string finish() {
        std::string out = flush_pending();
        at_text_start_ = true;
        return out;
    }

    /// Whether some ids are held back waiting for the rest of a character.
    bool has_pending() const { return !pending_.empty(); }

private:
    // The pending ids end in byte pieces whose bytes are the valid start of a character.
    bool ends_with_unfinished_character() const {
        if (!tokenizer_->decoder_has_byte_fallback()) return false;
        std::size_t first = pending_.size();
        while (first > 0 && detail::Decoder::byte_of_piece(tokenizer_->id_to_token(pending_[first - 1])) >= 0) --first;
        if (first == pending_.size()) return false;
        std::string bytes;
        for (std::size_t i = first; i < pending_.size(); ++i)
            bytes.push_back(static_cast<char>(detail::Decoder::byte_of_piece(tokenizer_->id_to_token(pending_[i]))));
        return detail::ends_with_unfinished_utf8(bytes);
    }

    std::string flush_pending() {
        if (pending_.empty()) return {};
        std::string text = tokenizer_->decode_impl(pending_, skip_special_, at_text_start_);
        pending_.clear();
        if (!text.empty() || !skip_special_) at_text_start_ = false;
        return text;
    }

    const Tokenizer* tokenizer_;
    bool skip_special_;
    bool at_text_start_ = true;
    std::vector<std::int32_t> pending_;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
