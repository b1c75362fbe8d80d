// tokenizer.json loading: the input is the whole file. A tokenizer that loads is then used once
// (encode and decode a fixed text), which walks the tables the loader built.
#include <gemma4/tokenizer/tokenizer.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    gemma4::fuzz::expect_ok_or_error([&] {
        const auto tokenizer = gemma4::Tokenizer::from_json_text(gemma4::fuzz::as_text(data, size), {}, "fuzz/tokenizer.json");
        const auto ids = tokenizer.encode("Hello world, <|turn>user\n\xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80 1234");
        (void)tokenizer.decode(ids);
    });
    return 0;
}
