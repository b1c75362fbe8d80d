// `gemma4 generate`, `chat` and `demo` on a tiny checkpoint with its tokenizer.
#include <catch2/catch.hpp>

#include <gemma4/model/model.hpp>

#include "support/run_cli.hpp"
#include "support/temp_dir.hpp"

#include <nlohmann/json.hpp>

#include <fstream>

using namespace gemma4;
using test::run_cli;

TEST_CASE("generate --print-ids equals the step-by-step argmax of logits", "[cli][generate]") {
    const auto dir = test::temp_dir("cli_generate");
    REQUIRE(run_cli("make-tiny --out " + (dir / "m").string() + " --seed 3").status == 0);
    const auto r = run_cli("generate --model " + (dir / "m").string() + " --prompt-ids 2,40,41,42 --max-new-tokens 6 --temperature 0 --print-ids");
    INFO(r.err);
    REQUIRE(r.status == 0);
    const auto ids = nlohmann::json::parse(r.out).get<std::vector<std::int32_t>>();
    REQUIRE(!ids.empty());
    const Model<float> model = Model<float>::load(dir / "m");
    std::vector<std::int32_t> seq = {2, 40, 41, 42};
    for (std::size_t i = 0; i < ids.size(); ++i) {
        const auto l = model.logits(seq);
        const auto last = l.row(l.rows - 1);
        const auto best = static_cast<std::int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
        CHECK(ids[i] == best);
        seq.push_back(best);
        if (model.config().tokens.is_eos(best)) CHECK(i + 1 == ids.size());  // the end token ends it, included
    }
    // Seeded sampling repeats.
    const std::string sampled = "generate --model " + (dir / "m").string() + " --prompt-ids 2,40 --max-new-tokens 8 --temperature 1 --top-k 20 --seed 9 --print-ids";
    CHECK(run_cli(sampled).out == run_cli(sampled).out);
    // Text mode streams text on stdout and stats on stderr.
    const auto text = run_cli("generate --model " + (dir / "m").string() + " --prompt '<bos>Hello world' --max-new-tokens 4");
    CHECK(text.status == 0);
    CHECK(text.err.find("tok/s") != std::string::npos);
    // Bad input.
    const auto empty = run_cli("generate --model " + (dir / "m").string() + " --prompt ''");
    CHECK(empty.status == 1);
    CHECK(empty.err.find("empty prompt") != std::string::npos);
    const auto both = run_cli("generate --model " + (dir / "m").string() + " --prompt x --prompt-ids 2");
    CHECK(both.err.find("exactly one of --prompt and --prompt-ids") != std::string::npos);
    const auto temp = run_cli("generate --model " + (dir / "m").string() + " --prompt-ids 2 --temperature -1");
    CHECK(temp.status == 1);
    CHECK(temp.err.find("temperature") != std::string::npos);
    std::string long_prompt = "2";
    for (int i = 0; i < 4100; ++i) long_prompt += ",40";
    const auto too_long = run_cli("generate --model " + (dir / "m").string() + " --prompt-ids " + long_prompt);
    CHECK(too_long.status == 1);
    CHECK(too_long.err.find("exceeds the context of 4096 tokens") != std::string::npos);
}

TEST_CASE("chat answers each line and keeps going", "[cli][chat]") {
    const auto dir = test::temp_dir("cli_chat");
    REQUIRE(run_cli("make-tiny --out " + (dir / "m").string()).status == 0);
    const auto r = run_cli("chat --model " + (dir / "m").string() + " --system 'Be brief.' --max-new-tokens 5", "Hello\nHow are you?\n/exit\n");
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(std::count(r.out.begin(), r.out.end(), '>') >= 3);  // three prompts: two turns and /exit
    CHECK(std::count(r.err.begin(), r.err.end(), '[') == 2);  // stats after each reply
}

TEST_CASE("chat --session: two runs of one turn each equal one run of both turns", "[cli][chat]") {
    const auto dir = test::temp_dir("cli_chat_session");
    REQUIRE(run_cli("make-tiny --out " + (dir / "m").string()).status == 0);
    // Sampled, so the second run must also continue the first run's random stream.
    const std::string chat = "chat --model " + (dir / "m").string() + " --system 'Be brief.' --max-new-tokens 8 --temperature 1 --seed 5";
    const std::string turns[2] = {"Hello\n", "How are you?\n"};
    const auto both = run_cli(chat, turns[0] + turns[1]);
    INFO(both.err);
    REQUIRE(both.status == 0);

    const std::string file = (dir / "conversation.g4s").string();
    const auto first = run_cli(chat + " --session " + file, turns[0]);
    INFO(first.err);
    REQUIRE(first.status == 0);
    REQUIRE(std::filesystem::exists(file));
    CHECK(first.err.find("resumed") == std::string::npos);
    const auto second = run_cli(chat + " --session " + file, turns[1]);
    INFO(second.err);
    REQUIRE(second.status == 0);
    CHECK(second.err.find("resumed") != std::string::npos);
    // Each run prints "> " again when its input ends.
    REQUIRE(first.out.size() >= 2);
    REQUIRE(first.out.substr(first.out.size() - 2) == "> ");
    CHECK(first.out + second.out.substr(2) == both.out);
    // Only replies count: the reply of a fresh run's single turn differs from the resumed one.
    const auto alone = run_cli(chat, turns[1]);
    CHECK(alone.out != second.out);

    // A file that is not a session: one line naming it, status 1.
    std::ofstream(dir / "junk.g4s") << "not a session";
    const auto junk = run_cli(chat + " --session " + (dir / "junk.g4s").string(), turns[0]);
    CHECK(junk.status == 1);
    CHECK(junk.err.find("junk.g4s: truncated") != std::string::npos);
}

TEST_CASE("demo writes its model once and generates", "[cli][demo]") {
    const auto dir = test::temp_dir("cli_demo");
    const auto r = run_cli("demo --out " + (dir / "d").string() + " --max-new-tokens 8");
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(std::filesystem::exists(dir / "d" / "tokenizer.json"));
    CHECK(std::filesystem::exists(dir / "d" / "model.safetensors"));
    CHECK(r.out.rfind("<bos>The quick brown fox", 0) == 0);
    CHECK(r.err.find("generated at") != std::string::npos);
    CHECK(run_cli("demo --out " + (dir / "d").string() + " --max-new-tokens 8").out == r.out);  // seeded: same text again
}

TEST_CASE("generate --lookup and --draft-model print exactly the plain decode's ids, and check the draft options", "[cli][generate][speculative]") {
    const auto dir = test::temp_dir("cli_generate_lookup");
    REQUIRE(run_cli("make-tiny --out " + (dir / "m").string() + " --seed 4").status == 0);
    const std::string base = "generate --model " + (dir / "m").string() +
                             " --prompt-ids 2,40,41,42,43,40,41,42,43,40,41,42,43 --max-new-tokens 24 --temperature 0 --print-ids";
    const auto plain = run_cli(base);
    REQUIRE(plain.status == 0);
    REQUIRE(run_cli("make-tiny --assistant --target " + (dir / "m").string() + " --out " + (dir / "a").string()).status == 0);
    const std::string mtp = " --draft-model " + (dir / "a").string();
    for (const std::string& spec : std::vector<std::string>{" --lookup 3", " --lookup 2 --draft-max 6", " --lookup 1 --draft-max 2 --draft-min 2", mtp,
                                   mtp + " --draft-max 5 --precision f64"}) {
        const auto r = run_cli(base + spec);
        INFO(spec << ": " << r.err);
        REQUIRE(r.status == 0);
        CHECK(r.out == plain.out);  // one JSON array, the same ids
        CHECK(nlohmann::json::parse(r.out).is_array());
        CHECK(r.err.find("drafted") != std::string::npos);
    }
    for (const std::string bad : {" --lookup 3 --draft-max 0", " --lookup 3 --draft-max -2"}) {
        const auto r = run_cli(base + bad);
        CHECK(r.status == 1);
        CHECK(r.err.find("--draft-max must be >= 1") != std::string::npos);
    }
    const auto no_drafter = run_cli(base + " --draft-max 4");
    CHECK(no_drafter.status == 1);
    CHECK(no_drafter.err.find("need a drafter") != std::string::npos);
    const auto both = run_cli(base + " --lookup 2" + mtp);
    CHECK(both.status == 1);
    CHECK(both.err.find("give one drafter") != std::string::npos);
    const auto lookup0 = run_cli(base + " --lookup 0");
    CHECK(lookup0.status == 1);
    CHECK(lookup0.err.find("--lookup") != std::string::npos);
    const auto min_over_max = run_cli(base + " --lookup 2 --draft-max 2 --draft-min 3");
    CHECK(min_over_max.status == 1);
    CHECK(min_over_max.err.find("--draft-min") != std::string::npos);
}

TEST_CASE("generate and chat --grammar / --json-schema: the reply is a sentence of the grammar", "[cli][generate][constraint]") {
    const auto dir = test::temp_dir("cli_constraint");
    REQUIRE(run_cli("make-tiny --out " + (dir / "m").string() + " --seed 5").status == 0);
    {
        std::ofstream(dir / "yes_no.gbnf") << "root ::= (\"yes\" | \"no\") \", because \" [a-z ]{3,20} \".\"\n";
        std::ofstream(dir / "person.json") << R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                                   "age": {"type": "integer", "minimum": 0, "maximum": 120}},
                                                   "required": ["name", "age"], "additionalProperties": false})";
        std::ofstream(dir / "bad.gbnf") << "root ::= missing\n";
        std::ofstream(dir / "bad.json") << R"({"type": "object", "patternProperties": {}})";
    }
    const std::string model = " --model " + (dir / "m").string();
    for (const char* temperature : {"0", "1.2"}) {
        const auto r = run_cli("generate" + model + " --prompt 'Is it?' --max-new-tokens 60 --grammar " + (dir / "yes_no.gbnf").string() +
                               " --temperature " + temperature + " --seed 7");
        INFO(r.err);
        REQUIRE(r.status == 0);
        const std::string answer = r.out.substr(0, r.out.find('.') + 1);
        CHECK((answer.rfind("yes, because ", 0) == 0 || answer.rfind("no, because ", 0) == 0));
        CHECK(answer.back() == '.');
    }
    const auto json = run_cli("generate" + model + " --prompt 'Who?' --max-new-tokens 80 --temperature 1 --seed 3 --json-schema " +
                              (dir / "person.json").string());
    INFO(json.err);
    REQUIRE(json.status == 0);
    const auto reply = nlohmann::json::parse(json.out.substr(0, json.out.rfind('}') + 1));
    CHECK(reply.size() == 2);
    CHECK(reply.at("name").is_string());
    CHECK(reply.at("age").get<int>() >= 0);
    CHECK(reply.at("age").get<int>() <= 120);
    const auto chat = run_cli("chat" + model + " --max-new-tokens 60 --grammar " + (dir / "yes_no.gbnf").string(), "Well?\n/exit\n");
    INFO(chat.err);
    REQUIRE(chat.status == 0);
    CHECK((chat.out.find("yes, because ") != std::string::npos || chat.out.find("no, because ") != std::string::npos));

    const auto bad = run_cli("generate" + model + " --prompt x --grammar " + (dir / "bad.gbnf").string());
    CHECK(bad.status == 1);
    CHECK(bad.err.find("undefined rule \"missing\"") != std::string::npos);
    const auto bad_schema = run_cli("generate" + model + " --prompt x --json-schema " + (dir / "bad.json").string());
    CHECK(bad_schema.status == 1);
    CHECK(bad_schema.err.find("patternProperties") != std::string::npos);
    const auto both = run_cli("generate" + model + " --prompt x --grammar a --json-schema b");
    CHECK(both.err.find("give one of --grammar and --json-schema") != std::string::npos);
}
