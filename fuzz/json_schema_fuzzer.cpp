// JSON Schema to GBNF: the input, when it parses as JSON, is a schema, compiled as
// nlohmann::json and as ordered_json (whose key order the compiler follows). A schema is either
// compiled or refused with gemma4::Error (GrammarError); and a compiled grammar must be one the
// library's GBNF parser accepts (its size, repetition counts and nesting within
// GrammarLimits, no left recursion), or it could not be used.
#include <gemma4/grammar/gbnf.hpp>
#include <gemma4/grammar/json_schema.hpp>

#include "fuzz_support.hpp"

#include <nlohmann/json.hpp>

namespace {

template <class Json>
void compile(std::string_view text) {
    const Json schema = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (schema.is_discarded()) return;
    std::string grammar;
    try {
        grammar = gemma4::json_schema_to_gbnf(schema);
    } catch (const gemma4::Error&) {
        return;
    }
    try {
        gemma4::parse_gbnf(grammar);
    } catch (const gemma4::Error& e) {
        std::fprintf(stderr, "%s\n--- grammar:\n%s\n", e.what(), grammar.c_str());
        gemma4::fuzz::fail("a compiled schema's grammar does not parse");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text = gemma4::fuzz::as_text(data, size);
    compile<nlohmann::json>(text);
    compile<nlohmann::ordered_json>(text);
    return 0;
}
