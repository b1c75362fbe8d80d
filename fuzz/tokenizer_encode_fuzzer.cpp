// Encoding arbitrary bytes with a fixed, valid tokenizer: the tiny one the demo writes, or the
// tokenizer.json named by GEMMA4_FUZZ_TOKENIZER (e.g. the real Gemma 3 file in ../shared).
// Invalid UTF-8 must be a TokenizerError; valid text must decode back to itself (the Gemma
// normalizer maps ' ' to U+2581 and the decoder maps U+2581 back to ' ', so a literal U+2581 in
// the input comes back as a space) and the streaming decoder must agree with decode().
#include <gemma4/tokenizer/streaming_decoder.hpp>
#include <gemma4/tokenizer/tiny_tokenizer.hpp>
#include <gemma4/tokenizer/tokenizer.hpp>

#include "fuzz_support.hpp"

#include <memory>

namespace {

std::unique_ptr<gemma4::Tokenizer> g_tokenizer;
bool g_check_round_trip = true;

std::string metaspace_to_space(std::string_view text) {
    std::string out;
    for (std::size_t i = 0; i < text.size();) {
        if (text.substr(i, 3) == "\xE2\x96\x81") {
            out += ' ';
            i += 3;
        } else {
            out += text[i++];
        }
    }
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    if (const char* path = std::getenv("GEMMA4_FUZZ_TOKENIZER"); path && *path) {
        g_tokenizer = std::make_unique<gemma4::Tokenizer>(gemma4::Tokenizer::from_file(path));
        // Other tokenizers may normalise (NFKC, lower-casing, ...); only crashes count there.
        g_check_round_trip = std::getenv("GEMMA4_FUZZ_ROUND_TRIP") != nullptr;
    } else {
        const auto dir = gemma4::fuzz::scratch_dir("tokenizer");
        const gemma4::TinyTokenizerInfo info = gemma4::write_tiny_tokenizer(dir);
        g_tokenizer = std::make_unique<gemma4::Tokenizer>(gemma4::Tokenizer::from_file(info.tokenizer_json));
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const gemma4::Tokenizer& tok = *g_tokenizer;
    const std::string_view text = gemma4::fuzz::as_text(data, size);
    std::vector<std::int32_t> ids;
    try {
        ids = tok.encode(text, /*add_special=*/false);
    } catch (const gemma4::TokenizerError&) {
        if (!gemma4::detail::first_invalid_utf8(text)) gemma4::fuzz::fail("valid UTF-8 rejected by encode");
        return 0;
    }
    if (gemma4::detail::first_invalid_utf8(text)) gemma4::fuzz::fail("invalid UTF-8 accepted by encode");
    for (const std::int32_t id : ids)
        if (!tok.contains_id(id)) gemma4::fuzz::fail("encode produced an id outside the vocabulary");

    const std::string decoded = tok.decode(ids);
    if (g_check_round_trip && decoded != metaspace_to_space(text)) gemma4::fuzz::fail("decode(encode(text)) != text");

    gemma4::StreamingDecoder stream(tok);
    std::string streamed;
    for (const std::int32_t id : ids) streamed += stream.push(id);
    streamed += stream.finish();
    if (streamed != decoded) gemma4::fuzz::fail("streaming decode differs from decode");

    // With special tokens added the ids only grow by the post-processor's BOS/EOS.
    gemma4::fuzz::expect_ok_or_error([&] { (void)tok.encode(text, true); });
    return 0;
}
