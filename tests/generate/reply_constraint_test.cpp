// Constrained generation: a reply is a sentence of its grammar whatever the weights and the
// sampling; the Engine (a different grammar per request), speculative decoding and a restored
// session give exactly the constrained output of a plain Session; a thought channel stays free.
#include <catch2/catch.hpp>

#include <gemma4/generate/detail/reply_constraint.hpp>
#include <gemma4/generate/engine.hpp>
#include <gemma4/generate/session.hpp>
#include <gemma4/grammar/constraint.hpp>
#include <gemma4/tokenizer/tiny_tokenizer.hpp>

#include "support/json_schema_validator.hpp"
#include "support/temp_dir.hpp"
#include "support/tiny_model.hpp"

#include <memory>
#include <string>
#include <vector>

using namespace gemma4;

namespace {

struct ConstraintFixture {
    test::TinyModelFiles files;
    Tokenizer tokenizer;
    Model<float> model;
    std::shared_ptr<const TokenVocabulary> vocabulary;
};

const ConstraintFixture& constraint_fixture() {
    static const ConstraintFixture f = [] {
        auto files = test::write_tiny_model("reply_constraint_model", 41, 512);
        Tokenizer tokenizer = Tokenizer::from_file(files.info.tokenizer_json);
        auto vocabulary = TokenVocabulary::from_tokenizer(tokenizer);
        Model<float> model = Model<float>::load(files.dir, ModelOptions{2});
        return ConstraintFixture{std::move(files), std::move(tokenizer), std::move(model), std::move(vocabulary)};
    }();
    return f;
}

constexpr const char* kRecordGrammar = R"(
root    ::= "{\"name\": " string ", \"age\": " integer ", \"tags\": [" ( string ( ", " string ){0,3} )? "]}"
string  ::= "\"" [a-z ]{0,12} "\""
integer ::= "0" | "-"? [1-9] [0-9]{0,2}
)";

std::shared_ptr<const Constraint> compile(const std::string& gbnf) {
    return Constraint::from_gbnf(gbnf, constraint_fixture().vocabulary);
}

GenerateOptions constrained(std::shared_ptr<const Constraint> c, double temperature, std::uint64_t seed) {
    GenerateOptions o;
    o.max_new_tokens = 200;
    o.sampling = SamplingParams{.temperature = temperature, .top_k = temperature > 0 ? 40 : 0, .seed = seed};
    o.constraint = std::move(c);
    return o;
}

GenerationResult lone(const std::vector<std::int32_t>& prompt, const GenerateOptions& o) {
    Session<float> session(constraint_fixture().model, &constraint_fixture().tokenizer);
    return session.generate(std::span<const std::int32_t>(prompt), o);
}

std::vector<std::int32_t> prompt_of(const std::string& text) { return constraint_fixture().tokenizer.encode(text); }

/// The reply's text without the end id that closed it (the session's text spells it).
std::string answer(const GenerationResult& r) {
    auto ids = r.ids;
    if (r.finish == FinishReason::EndToken) ids.pop_back();
    return constraint_fixture().tokenizer.decode(ids);
}

std::string answer(const EngineResult& r) {
    GenerationResult g;
    g.ids = r.ids;
    g.finish = r.finish;
    return answer(g);
}

/// Whether `text` is a whole sentence of the grammar, by the matcher fed its bytes one at a time
/// (the tiny tokenizer has a piece for every byte), independent of how the reply was tokenized.
bool is_sentence(const std::shared_ptr<const Constraint>& c, const std::string& text) {
    const auto& v = *constraint_fixture().vocabulary;
    GrammarMatcher m(c, {});
    for (const char ch : text) {
        std::int32_t id = -1;
        for (std::size_t i = 0; i < v.size() && id < 0; ++i)
            if (v.is_text(static_cast<std::int32_t>(i)) && v.bytes(static_cast<std::int32_t>(i)) == std::string(1, ch)) id = static_cast<std::int32_t>(i);
        if (id < 0 || !m.allows(id)) return false;
        m.accept(id);
    }
    return m.can_end();
}

}  // namespace

TEST_CASE("greedy under a grammar that admits one string yields that string and ends", "[constraint]") {
    const auto c = compile("root ::= \"The answer is 42, and that is \\\"final\\\".\"");
    const GenerationResult r = lone(prompt_of("Tell me."), constrained(c, 0.0, 0));
    CHECK(answer(r) == "The answer is 42, and that is \"final\".");
    CHECK(r.finish == FinishReason::EndToken);
    CHECK(r.ids.back() == constraint_fixture().files.info.eos);
}

TEST_CASE("every sampled reply is a sentence of its grammar, at every temperature and seed", "[constraint]") {
    const auto c = compile(kRecordGrammar);
    for (const double temperature : {0.0, 0.7, 1.5})
        for (std::uint64_t seed = 1; seed <= 6; ++seed) {
            const GenerationResult r = lone(prompt_of("Describe a person as JSON."), constrained(c, temperature, seed));
            INFO("temperature " << temperature << ", seed " << seed << ": " << answer(r));
            CHECK(r.finish == FinishReason::EndToken);
            CHECK(is_sentence(c, answer(r)));
        }
}

TEST_CASE("the Engine gives each request its own grammar, equal to a lone constrained session", "[constraint][engine]") {
    const std::vector<std::shared_ptr<const Constraint>> grammars = {
        compile(kRecordGrammar), compile("root ::= ( \"yes\" | \"no\" ) \".\""), compile("root ::= [0-9]{3} \"-\" [0-9]{4}"), nullptr};
    Engine<float> engine(constraint_fixture().model, &constraint_fixture().tokenizer, EngineOptions{.max_sequences = 8});
    std::vector<std::vector<std::int32_t>> prompts;
    std::vector<GenerateOptions> options;
    std::vector<RequestHandle> handles;
    for (std::size_t i = 0; i < 8; ++i) {
        prompts.push_back(prompt_of("Request number " + std::to_string(i) + ", please answer."));
        options.push_back(constrained(grammars[i % grammars.size()], i % 2 ? 0.8 : 0.0, 100 + i));
        if (!grammars[i % grammars.size()]) options.back().max_new_tokens = 12;
        EngineRequest<float> request;
        request.prompt = prompts.back();
        request.options = options.back();
        handles.push_back(engine.submit(std::move(request)));
    }
    for (std::size_t i = 0; i < handles.size(); ++i) {
        const EngineResult got = handles[i].wait();
        const GenerationResult expected = lone(prompts[i], options[i]);
        REQUIRE_FALSE(got.error);
        CHECK(got.ids == expected.ids);
        CHECK(got.text == expected.text);
        if (grammars[i % grammars.size()]) CHECK(is_sentence(grammars[i % grammars.size()], answer(got)));
    }
}

TEST_CASE("speculative constrained decoding equals plain constrained decoding", "[constraint][speculative]") {
    const auto c = compile(kRecordGrammar);
    for (const double temperature : {0.0, 0.9}) {
        // A prompt that repeats what the grammar wants, so that prompt lookup drafts often.
        const auto prompt = prompt_of("{\"name\": \"ann\", \"age\": 31, \"tags\": [\"a\", \"b\"]} again: ");
        const GenerateOptions plain = constrained(c, temperature, 5);
        GenerateOptions speculative = plain;
        PromptLookupDrafter lookup(3);
        speculative.speculative = SpeculativeOptions{.drafter = &lookup, .draft_max = 4};
        const GenerationResult a = lone(prompt, plain);
        const GenerationResult b = lone(prompt, speculative);
        CHECK(b.ids == a.ids);
        CHECK(b.text == a.text);
        CHECK(b.stats.drafted_tokens > 0);
    }
}

TEST_CASE("a restored session's constrained reply equals the original's", "[constraint][session]") {
    const auto c = compile(kRecordGrammar);
    Session<float> original(constraint_fixture().model, &constraint_fixture().tokenizer);
    GenerateOptions first;
    first.max_new_tokens = 8;
    original.generate(std::span<const std::int32_t>(prompt_of("A first turn.")), first);
    const auto path = test::temp_dir("reply_constraint_session") / "s.gemma4";
    original.save(path);
    Session<float> restored(constraint_fixture().model, &constraint_fixture().tokenizer);
    restored.load(path);
    const auto next = prompt_of(" And now JSON: ");
    const GenerationResult a = original.generate(std::span<const std::int32_t>(next), constrained(c, 0.8, 9));
    const GenerationResult b = restored.generate(std::span<const std::int32_t>(next), constrained(c, 0.8, 9));
    CHECK(a.ids == b.ids);
    CHECK(is_sentence(c, answer(a)));
}

TEST_CASE("a thought channel opens the reply unconstrained and the grammar starts after it closes", "[constraint]") {
    const auto& info = constraint_fixture().files.info;
    const auto c = compile("root ::= \"ok\"");
    GenerateOptions o;
    o.constraint = c;
    o.thought_channel = {info.channel_start, info.channel_end};
    detail::ReplyConstraint reply(o, {info.eos});
    Sampler sampler(SamplingParams{.temperature = 0.0});
    const auto vocab = static_cast<std::size_t>(constraint_fixture().model.config().vocab_size);
    // Logits that favour one id: the sampler's greedy pick shows what the mask let through.
    const auto pick = [&](std::int32_t favourite) {
        std::vector<float> logits(vocab, 0.0f);
        logits[static_cast<std::size_t>(favourite)] = 10.0f;
        reply.restrict(sampler);
        const std::int32_t id = sampler.sample(logits);
        reply.accept(id);
        return id;
    };
    const auto id_of = [&](const std::string& piece) { return *constraint_fixture().tokenizer.token_to_id(piece); };
    CHECK(pick(info.channel_start) == info.channel_start);    // may open the channel
    CHECK(pick(id_of("z")) == id_of("z"));                      // free inside it
    CHECK(pick(info.eos) == info.eos);                          // even an end id
    CHECK(pick(info.channel_end) == info.channel_end);          // closes it
    CHECK(pick(id_of("z")) != id_of("z"));                      // constrained again
    CHECK(pick(info.channel_start) != info.channel_start);      // and only one channel
}

TEST_CASE("drafts are cut at the first id the grammar refuses", "[constraint][speculative]") {
    const auto c = compile("root ::= \"abc\"");
    GenerateOptions o;
    o.constraint = c;
    detail::ReplyConstraint reply(o, {constraint_fixture().files.info.eos});
    const auto id_of = [&](const std::string& piece) { return *constraint_fixture().tokenizer.token_to_id(piece); };
    std::vector<std::int32_t> draft = {id_of("a"), id_of("b"), id_of("x"), id_of("c")};
    reply.trim(draft);
    CHECK(draft == std::vector<std::int32_t>{id_of("a"), id_of("b")});
    std::vector<std::int32_t> whole = {id_of("a"), id_of("b"), id_of("c"), constraint_fixture().files.info.eos, id_of("a")};
    reply.trim(whole);
    CHECK(whole.size() == 4);  // the end id ends the sentence; nothing may follow it
}

TEST_CASE("min_tokens gives way where the grammar can only end", "[constraint]") {
    const auto c = compile("root ::= \"hi\"");
    GenerateOptions o = constrained(c, 0.0, 0);
    o.min_tokens = 20;
    const GenerationResult r = lone(prompt_of("Say hi."), o);
    CHECK(answer(r) == "hi");
    CHECK(r.finish == FinishReason::EndToken);
}

TEST_CASE("a constraint's bad setup is an error before any token", "[constraint][errors]") {
    GenerateOptions o = constrained(compile("root ::= \"a\""), 0.0, 0);
    o.thought_channel = {constraint_fixture().files.info.channel_start, -1};
    CHECK_THROWS_WITH(lone(prompt_of("x"), o), Catch::Contains("thought_channel"));
}

TEST_CASE("a constraint prefix is taken by the grammar before the reply", "[constraint]") {
    const auto id_of = [&](const std::string& piece) { return *constraint_fixture().tokenizer.token_to_id(piece); };
    const auto c = compile("root ::= \"(\" [a-z]{2} \")\"");
    GenerateOptions o = constrained(c, 0.0, 0);
    o.constraint_prefix = {id_of("(")};
    const GenerationResult r = lone(prompt_of("Go: ("), o);
    const std::string text = answer(r);
    CHECK(text.size() == 3);
    CHECK(text.back() == ')');
    CHECK(is_sentence(c, "(" + text));
    o.constraint_prefix = {id_of("x")};
    CHECK_THROWS_WITH(lone(prompt_of("Go: "), o), Catch::Contains("constraint_prefix: the grammar does not allow id"));
}

TEST_CASE("every reply under a JSON Schema parses and validates (an independent validator), for schemas, seeds and temperatures",
          "[constraint][schema]") {
    const char* const schemas[] = {
        R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer", "minimum": 0,
            "maximum": 120}, "email": {"type": "string", "maxLength": 12}}, "required": ["name", "age"]})",
        R"({"type": "array", "items": {"enum": ["red", "green", 7, null, true]}, "minItems": 1, "maxItems": 4})",
        R"({"anyOf": [{"type": "integer", "minimum": -50, "maximum": 50}, {"type": "boolean"}, {"const": {"k": [1, 2]}}]})",
        R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 9},
            "next": {"$ref": "#/$defs/node"}}, "required": ["v"]}}, "$ref": "#/$defs/node"})",
        R"({"type": "object", "properties": {"when": {"type": "string", "format": "date"}, "id": {"type": "string", "format": "uuid"},
            "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"}}, "required": ["when", "id", "code"]})",
        R"({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 5},
            "maxItems": 3}, "score": {"type": "number"}}, "required": ["tags", "score"], "additionalProperties": false})",
    };
    for (const char* text : schemas) {
        const auto schema = nlohmann::ordered_json::parse(text);
        const auto c = Constraint::from_json_schema(schema, constraint_fixture().vocabulary);
        int complete = 0;
        for (const double temperature : {0.0, 0.8, 1.5})
            for (std::uint64_t seed = 1; seed <= (temperature > 0 ? 3u : 1u); ++seed) {
                GenerateOptions o = constrained(c, temperature, seed);
                o.max_new_tokens = 400;
                const GenerationResult r = lone(prompt_of("JSON, please: "), o);
                INFO(text << "\ntemperature " << temperature << ", seed " << seed << ": " << answer(r));
                if (r.finish == FinishReason::MaxTokens) continue;  // a recursive schema may nest on
                REQUIRE(r.finish == FinishReason::EndToken);
                ++complete;
                const auto value = nlohmann::json::parse(answer(r));
                std::string why;
                const bool valid = test::validates(value, nlohmann::json::parse(text), &why);
                INFO(why);
                CHECK(valid);
            }
        CHECK(complete >= 5);  // of 7 replies
    }
}
