#include <gemma4/generate/chat.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using gemma4::ChatMessage;
using gemma4::ChatOptions;
using gemma4::InvalidArgument;
using gemma4::render_chat;
using gemma4::render_chat_continuation;

namespace {

std::string remove_all(std::string text, const std::string& what) {
    for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos))
        text.erase(pos, what.size());
    return text;
}

}  // namespace

TEST_CASE("a single user turn", "[chat]") {
    const std::vector<ChatMessage> messages{{"user", "What is the capital of France?"}};
    CHECK(render_chat(messages) ==
          "<bos><|turn>user\nWhat is the capital of France?<turn|>\n"
          "<|turn>model\n<|channel>thought\n<channel|>");
    CHECK(render_chat(messages, {.add_generation_prompt = false}) ==
          "<bos><|turn>user\nWhat is the capital of France?<turn|>\n");
}

TEST_CASE("the generation prompt with and without thinking", "[chat]") {
    const std::vector<ChatMessage> messages{{"user", "Hi"}};
    CHECK(render_chat(messages, {.enable_thinking = false}) ==
          "<bos><|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
    // Thinking on: a system turn carries <|think|> even without a system message, and the
    // model opens its own thought channel.
    CHECK(render_chat(messages, {.enable_thinking = true}) ==
          "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n");
}

TEST_CASE("a system message, with and without thinking", "[chat]") {
    const std::vector<ChatMessage> messages{{"system", "  You are terse.\n"}, {"user", "Hi"}};
    CHECK(render_chat(messages) ==
          "<bos><|turn>system\nYou are terse.<turn|>\n<|turn>user\nHi<turn|>\n"
          "<|turn>model\n<|channel>thought\n<channel|>");
    CHECK(render_chat(messages, {.enable_thinking = true}) ==
          "<bos><|turn>system\n<|think|>\nYou are terse.<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n");
    const std::vector<ChatMessage> developer{{"developer", "You are terse."}, {"user", "Hi"}};
    CHECK(render_chat(developer) == render_chat(messages));
}

TEST_CASE("multi-turn: assistant is rendered as model and earlier thoughts are stripped", "[chat]") {
    const std::vector<ChatMessage> messages{
        {"user", "What is 2+2?"}, {"assistant", "<|channel>thought\nSimple sum.<channel|>\n4"},
        {"user", " And 3+3? "},   {"model", "<|channel>thought\n<channel|>6\n"},
        {"user", "Thanks"},
    };
    CHECK(render_chat(messages) ==
          "<bos><|turn>user\nWhat is 2+2?<turn|>\n"
          "<|turn>model\n4<turn|>\n"
          "<|turn>user\nAnd 3+3?<turn|>\n"
          "<|turn>model\n6<turn|>\n"
          "<|turn>user\nThanks<turn|>\n"
          "<|turn>model\n<|channel>thought\n<channel|>");
    CHECK(render_chat(messages, {.add_generation_prompt = false, .keep_thoughts = true}) ==
          "<bos><|turn>user\nWhat is 2+2?<turn|>\n"
          "<|turn>model\n<|channel>thought\nSimple sum.<channel|>\n4<turn|>\n"
          "<|turn>user\nAnd 3+3?<turn|>\n"
          "<|turn>model\n<|channel>thought\n<channel|>6<turn|>\n"
          "<|turn>user\nThanks<turn|>\n");
}

TEST_CASE("content is trimmed like Jinja's trim, inner text and placeholders untouched", "[chat]") {
    // U+00A0 no-break space, U+3000 ideographic space and U+2028 line separator are white space
    // to Python's str.strip; U+200B zero-width space is not.
    const std::vector<ChatMessage> messages{
        {"user", "\xC2\xA0\t Describe <|image|> and <|audio|>\n\n  please \xE3\x80\x80\xE2\x80\xA8"},
    };
    CHECK(render_chat(messages, {.add_generation_prompt = false}) ==
          "<bos><|turn>user\nDescribe <|image|> and <|audio|>\n\n  please<turn|>\n");
    const std::vector<ChatMessage> zero_width{{"user", "\xE2\x80\x8Bx\xE2\x80\x8B"}};
    CHECK(render_chat(zero_width, {.add_generation_prompt = false}) ==
          "<bos><|turn>user\n\xE2\x80\x8Bx\xE2\x80\x8B<turn|>\n");
    const std::vector<ChatMessage> only_space{{"user", " \n "}, {"user", "\xF0\x9F\x99\x82 "}};
    CHECK(render_chat(only_space, {.add_generation_prompt = false}) ==
          "<bos><|turn>user\n<turn|>\n<|turn>user\n\xF0\x9F\x99\x82<turn|>\n");
}

TEST_CASE("strip_thoughts removes every thought channel", "[chat]") {
    using gemma4::strip_thoughts;
    CHECK(strip_thoughts("<|channel>thought\nplan<channel|>\n\nAnswer.") == "Answer.");
    CHECK(strip_thoughts("A<|channel>x<channel|>B<|channel>y<channel|> C ") == "AB C");
    CHECK(strip_thoughts("Answer.<|channel>thought\nnever closed") == "Answer.");
    CHECK(strip_thoughts("no thoughts at all") == "no thoughts at all");
    CHECK(strip_thoughts("stray <channel|> close") == "stray <channel|> close");
}

TEST_CASE("an empty conversation still opens the model turn", "[chat]") {
    CHECK(render_chat({}) == "<bos><|turn>model\n<|channel>thought\n<channel|>");
    CHECK(render_chat({}, {.add_generation_prompt = false}) == "<bos>");
}

TEST_CASE("a cached conversation appends what the full render would contain", "[chat]") {
    for (const bool thinking : {false, true}) {
        INFO("enable_thinking " << thinking);
        const ChatOptions options{.enable_thinking = thinking};
        const std::vector<ChatMessage> opening{{"system", "Be brief."}, {"user", "Hi"}};
        std::string cached = render_chat(opening, options);

        const std::string reply1 = thinking ? "<|channel>thought\nGreet back.<channel|>Hello!" : "Hello!";
        cached += reply1 + "<turn|>";  // the model emitted <turn|>, which went into the cache
        const std::vector<ChatMessage> turn2{{"user", "  Name a colour. "}};
        cached += render_chat_continuation(reply1 + "<turn|>", turn2, options);

        const std::string reply2 = "Blue.";
        cached += reply2 + "<turn|>";
        const std::vector<ChatMessage> turn3{{"user", "Another?"}};
        cached += render_chat_continuation(reply2 + "<turn|>", turn3, options);

        // The cache holds each model turn as the text between <|turn>model\n and <turn|>:
        // the generation prompt's thought channel, then the reply.
        const std::string prompt_thought = thinking ? "" : std::string(gemma4::kEmptyThought);
        const std::vector<ChatMessage> history{
            {"system", "Be brief."},       {"user", "Hi"},    {"assistant", reply1},
            {"user", "  Name a colour. "}, {"model", reply2}, {"user", "Another?"},
        };
        std::vector<ChatMessage> cached_history = history;
        cached_history[2].content = prompt_thought + reply1;
        cached_history[4].content = prompt_thought + reply2;
        CHECK(cached == render_chat(cached_history, {.enable_thinking = thinking, .keep_thoughts = true}));

        // The reference render differs exactly by the thoughts of earlier model turns.
        std::string without_thoughts = remove_all(cached, std::string(gemma4::kEmptyThought));
        without_thoughts = remove_all(without_thoughts, "<|channel>thought\nGreet back.<channel|>");
        const std::string full = render_chat(history, options);
        if (thinking) {
            CHECK(without_thoughts == full);
        } else {
            // The final generation prompt keeps its empty thought channel in the full render.
            CHECK(without_thoughts + std::string(gemma4::kEmptyThought) == full);
        }
    }
}

TEST_CASE("a continuation closes a reply that did not end its turn", "[chat]") {
    const std::vector<ChatMessage> next{{"user", "Go on"}};
    CHECK(render_chat_continuation("cut off mid-sen", next) ==
          "<turn|>\n<|turn>user\nGo on<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
    CHECK(render_chat_continuation("done<turn|>", next, {.add_generation_prompt = false}) ==
          "\n<|turn>user\nGo on<turn|>\n");
    CHECK(render_chat_continuation("done<turn|>", next, {.enable_thinking = true}) ==
          "\n<|turn>user\nGo on<turn|>\n<|turn>model\n");
}

TEST_CASE("roles are checked", "[chat]") {
    const std::vector<ChatMessage> unknown{{"user", "Hi"}, {"narrator", "{}"}};
    REQUIRE_THROWS_AS(render_chat(unknown), InvalidArgument);
    REQUIRE_THROWS_WITH(render_chat(unknown),
                        Catch::Contains("message 1 has role 'narrator'; expected system, developer, user"));

    const std::vector<ChatMessage> late_system{{"user", "Hi"}, {"system", "Be brief."}};
    REQUIRE_THROWS_AS(render_chat(late_system), InvalidArgument);
    REQUIRE_THROWS_WITH(
        render_chat(late_system),
        Catch::Contains(
            "render_chat: message 1 has role 'system'; a system or developer message must be the first"));

    const std::vector<ChatMessage> empty_role{{"", "Hi"}};
    REQUIRE_THROWS_AS(render_chat(empty_role), InvalidArgument);
    REQUIRE_THROWS_WITH(render_chat(empty_role), Catch::Contains("message 0 has role ''"));

    const std::vector<ChatMessage> system_later{{"developer", "x"}};
    REQUIRE_THROWS_AS(render_chat_continuation("<turn|>", system_later), InvalidArgument);
    REQUIRE_THROWS_WITH(render_chat_continuation("<turn|>", system_later),
                        Catch::Contains("render_chat_continuation: message 0 has role 'developer'"));
    const std::vector<ChatMessage> upper{{"User", "Hi"}};
    REQUIRE_THROWS_AS(render_chat_continuation("<turn|>", upper), InvalidArgument);
    REQUIRE_THROWS_WITH(render_chat_continuation("<turn|>", upper), Catch::Contains("role 'User'"));
}
