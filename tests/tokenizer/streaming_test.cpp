// StreamingDecoder: never a partial character, same text as batch decode, U+FFFD for leftovers.
// On the generated small tokenizer, and on the real Gemma 3 one when it is there.
#include "support/real_tokenizer.hpp"

#include <gemma4/tokenizer/streaming_decoder.hpp>
#include <gemma4/tokenizer/tiny_tokenizer.hpp>
#include <gemma4/tokenizer/tokenizer.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using gemma4::StreamingDecoder;
using gemma4::Tokenizer;

namespace {

const std::string kReplacement = "\xEF\xBF\xBD";

struct Tiny {
    gemma4::TinyTokenizerInfo info;
    Tokenizer tokenizer;
};

const Tiny& tiny() {
    static const Tiny t = [] {
        auto info = gemma4::write_tiny_tokenizer(std::filesystem::path(GEMMA4_TEST_TMP_DIR) / "tiny_streaming");
        return Tiny{info, Tokenizer::from_file(info.tokenizer_json)};
    }();
    return t;
}

std::int32_t byte_piece(std::uint8_t b) { return tiny().info.first_byte_piece + b; }

bool valid_utf8(std::string_view s) { return !gemma4::detail::first_invalid_utf8(s).has_value(); }

const std::string kMixedText = "Hi 日本語 and 😀🦩 — naïve café\n<|turn>user\n你好<turn|>";

void check_streams_like_batch(const Tokenizer& t, const std::string& text) {
    const auto ids = t.encode(text, false);
    StreamingDecoder stream(t);
    std::string streamed;
    for (const std::int32_t id : ids) {
        const std::string piece = stream.push(id);
        CHECK(valid_utf8(piece));
        streamed += piece;
        CHECK(valid_utf8(streamed));
    }
    streamed += stream.finish();
    CHECK(streamed == text);
    CHECK(streamed == t.decode(ids));
}

}  // namespace

TEST_CASE("streaming: an emoji spread over four byte pieces comes out whole", "[tokenizer][streaming]") {
    StreamingDecoder stream(tiny().tokenizer);
    CHECK(stream.push(byte_piece(0xF0)).empty());
    CHECK(stream.push(byte_piece(0x9F)).empty());
    CHECK(stream.push(byte_piece(0x98)).empty());
    CHECK(stream.has_pending());
    CHECK(stream.push(byte_piece(0x80)) == "\xF0\x9F\x98\x80");
    CHECK_FALSE(stream.has_pending());
    CHECK(stream.finish().empty());
}

TEST_CASE("streaming: mixed text, CJK and emoji equal the batch decode at every step", "[tokenizer][streaming]") {
    check_streams_like_batch(tiny().tokenizer, kMixedText);
    // The tiny vocabulary has no CJK pieces, so these characters really were split into bytes.
    const auto ids = tiny().tokenizer.encode("日", false);
    CHECK(ids == std::vector<std::int32_t>{byte_piece(0xE6), byte_piece(0x97), byte_piece(0xA5)});
}

TEST_CASE("streaming: mixed text, CJK and emoji equal the batch decode at every step (Gemma 3 tokenizer)", "[tokenizer][streaming]") {
    GEMMA4_SKIP_WITHOUT_REAL_TOKENIZER();
    check_streams_like_batch(gemma4::test::shared_real_tokenizer(), kMixedText);
}

TEST_CASE("streaming: golden texts stream to the same text as batch decode", "[tokenizer][streaming]") {
    GEMMA4_SKIP_WITHOUT_REAL_TOKENIZER();
    const std::vector<std::string> texts = {"Hello world", "  two leading spaces", "emoji 👩‍👩‍👧 family", "tabs\t\tand\n\nnewlines",
                                            "<start_of_turn>user\nhi<end_of_turn>", "ℝ∑∫ √2 ≈ 1.414"};
    for (const std::string& text : texts) {
        for (const bool skip : {false, true}) {
            const auto ids = gemma4::test::shared_real_tokenizer().encode(text);
            StreamingDecoder stream(gemma4::test::shared_real_tokenizer(), skip);
            std::string streamed;
            for (const std::int32_t id : ids) streamed += stream.push(id);
            streamed += stream.finish();
            CHECK(streamed == gemma4::test::shared_real_tokenizer().decode(ids, skip));
        }
    }
}

TEST_CASE("streaming: bytes that never form a character become U+FFFD", "[tokenizer][streaming]") {
    const std::int32_t a = *tiny().tokenizer.token_to_id("a");
    StreamingDecoder stream(tiny().tokenizer);
    // An unfinished three-byte character at the end: one U+FFFD per byte, at finish().
    CHECK(stream.push(a) == "a");
    CHECK(stream.push(byte_piece(0xE4)).empty());
    CHECK(stream.push(byte_piece(0xB8)).empty());
    CHECK(stream.finish() == kReplacement + kReplacement);

    // A byte that can never start a character is replaced at once.
    CHECK(stream.push(byte_piece(0xFF)) == kReplacement);
    // An unfinished character interrupted by an ordinary piece.
    CHECK(stream.push(byte_piece(0xC3)).empty());
    CHECK(stream.push(a) == kReplacement + "a");
    // A lead byte followed by a byte that cannot continue it.
    CHECK(stream.push(byte_piece(0xE4)).empty());
    CHECK(stream.push(byte_piece(0x41)) == kReplacement + "A");
    CHECK(stream.finish().empty());

    const std::vector<std::int32_t> ids{byte_piece(0xE4), byte_piece(0xB8), a};
    CHECK(tiny().tokenizer.decode(ids) == kReplacement + kReplacement + "a");
}

TEST_CASE("streaming: ids outside the vocabulary are rejected", "[tokenizer][streaming]") {
    StreamingDecoder stream(tiny().tokenizer);
    REQUIRE_THROWS_AS(stream.push(tiny().info.vocab_size), gemma4::InvalidArgument);
    REQUIRE_THROWS_AS(stream.push(-1), gemma4::InvalidArgument);
}
