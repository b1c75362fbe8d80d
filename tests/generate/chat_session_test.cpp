// ChatSession: the rendered turns reach the model through the tokenizer, and a new turn
// prefills only its own tokens (the KV cache is kept between turns).
#include <catch2/catch.hpp>

#include <gemma4/generate/session.hpp>
#include <gemma4/model/random_checkpoint.hpp>
#include <gemma4/tokenizer/tiny_tokenizer.hpp>

#include "support/temp_dir.hpp"

using namespace gemma4;

TEST_CASE("a chat turn prefills only the new tokens and equals a fresh render", "[session][chat]") {
    const auto dir = test::temp_dir("chat_session");
    const TinyTokenizerInfo info = write_tiny_tokenizer(dir);
    Gemma4Config c = tiny_config();
    adopt_tiny_tokenizer(c, info);
    write_random_checkpoint(dir, c, {.seed = 5});
    const Model<float> model = Model<float>::load(dir);
    const Tokenizer tokenizer = Tokenizer::from_file(info.tokenizer_json);

    ChatSession<float> chat(model, tokenizer, {}, std::string("Be brief."));
    GenerateOptions o{.max_new_tokens = 5, .sampling = {.temperature = 0.0}};
    const GenerationResult first = chat.reply("Hello there", o);
    const std::string first_text = render_chat(std::vector<ChatMessage>{{"system", "Be brief."}, {"user", "Hello there"}});
    CHECK(first.stats.prompt_tokens == static_cast<std::int64_t>(tokenizer.encode(first_text, false).size()));

    const std::int64_t cached = chat.session().cached_tokens();
    const GenerationResult second = chat.reply("And now?", o);
    const std::string reply = tokenizer.decode(first.ids);
    const std::string added = render_chat_continuation(reply, std::vector<ChatMessage>{{"user", "And now?"}});
    // the last sampled id of the first reply, then only the new turn's tokens
    CHECK(second.stats.prompt_tokens == 1 + static_cast<std::int64_t>(tokenizer.encode(added, false).size()));
    CHECK(chat.session().cached_tokens() > cached);

    // The same ids through a fresh session over the whole conversation give the same reply.
    std::vector<std::int32_t> all = tokenizer.encode(first_text, false);
    all.insert(all.end(), first.ids.begin(), first.ids.end());
    const auto more = tokenizer.encode(added, false);
    all.insert(all.end(), more.begin(), more.end());
    Session<float> fresh(model);
    CHECK(fresh.generate(std::span<const std::int32_t>(all), o).ids == second.ids);
}

TEST_CASE("prompt text errors", "[session][chat]") {
    const auto dir = test::temp_dir("chat_session_errors");
    const TinyTokenizerInfo info = write_tiny_tokenizer(dir);
    Gemma4Config c = tiny_config();
    c.vocab_size = 300;  // smaller than the tokenizer's vocabulary
    c.tokens.image = c.tokens.audio = c.tokens.video = 299;
    write_random_checkpoint(dir, c, {.seed = 6});
    const Model<float> model = Model<float>::load(dir);
    const Tokenizer tokenizer = Tokenizer::from_file(info.tokenizer_json);
    Session<float> session(model, &tokenizer);
    REQUIRE_THROWS_AS(session.generate(std::string_view(""), {}), InvalidArgument);
    REQUIRE_THROWS_WITH(session.generate(std::string_view(""), {}), Catch::Contains("empty prompt"));
    REQUIRE_THROWS_AS(session.generate(std::string_view("\xff\xfe broken"), {}), TokenizerError);
    // Text whose ids fall outside the model's vocabulary: named, not silently wrapped.
    const std::string text = "zebra quizzically";
    bool outside = false;
    for (auto id : tokenizer.encode(text, false)) outside |= id >= 300;
    REQUIRE(outside);
    REQUIRE_THROWS_AS(session.generate(std::string_view(text), {}), TokenizerError);
    REQUIRE_THROWS_WITH(session.generate(std::string_view(text), {}), Catch::Contains("is outside the model's vocabulary of 300"));
}
