// The fields that constrain a reply's form, as the grammar text (GBNF) that enforces them:
// OpenAI's response_format ({"type": "text" | "json_object" | "json_schema", json_schema: {name,
// schema, strict}}) on both endpoints, and llama-server's `grammar` (GBNF) and `json_schema`
// fields. A schema or grammar that cannot be compiled is a 400 naming the field, before any
// token is generated (docs/structured-output.md).
#pragma once

#include "api_error.hpp"

#include <gemma4/error.hpp>
#include <gemma4/grammar/gbnf.hpp>
#include <gemma4/grammar/json_schema.hpp>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace gemma4::server {

/// A reply's grammar and the request field it came from (for a 400 on a later failure).
struct OutputGrammar {
    std::string gbnf;
    std::string param;
};

namespace detail {

/// The grammar of a JSON Schema from the request, a 400 naming `param` when it cannot be compiled.
inline std::string schema_grammar(const nlohmann::ordered_json& schema, const std::string& param) {
    if (!schema.is_object() && !schema.is_boolean()) throw bad_field(param, "expected a JSON Schema object");
    try {
        return json_schema_to_gbnf(schema);
    } catch (const GrammarError& e) {
        throw bad_field(param, e.what());
    }
}

inline OutputGrammar checked_gbnf(const nlohmann::ordered_json& v, const std::string& param) {
    if (!v.is_string()) throw bad_field(param, "expected GBNF grammar text");
    try {
        parse_gbnf(v.get<std::string>());
    } catch (const GrammarError& e) {
        throw bad_field(param, e.what());
    }
    return {v.get<std::string>(), param};
}

inline std::optional<OutputGrammar> parse_response_format(const nlohmann::ordered_json& format) {
    if (!format.is_object()) throw bad_field("response_format", "expected an object");
    const auto type = format.find("type");
    if (type == format.end() || !type->is_string()) throw bad_field("response_format.type", "missing (text, json_object or json_schema)");
    if (*type == "text") return std::nullopt;
    if (*type == "json_object") return OutputGrammar{json_object_gbnf(), "response_format"};
    if (*type != "json_schema")
        throw bad_field("response_format.type", "unknown type '" + type->get<std::string>() + "' (text, json_object or json_schema)");
    const auto spec = format.find("json_schema");
    if (spec == format.end() || !spec->is_object()) throw bad_field("response_format.json_schema", "missing ({name, schema, strict})");
    if (const auto name = spec->find("name"); name != spec->end() && !name->is_string())
        throw bad_field("response_format.json_schema.name", "expected a string");
    if (const auto strict = spec->find("strict"); strict != spec->end() && !strict->is_boolean() && !strict->is_null())
        throw bad_field("response_format.json_schema.strict", "expected a boolean");
    const auto schema = spec->find("schema");
    // OpenAI treats a missing schema as any JSON object.
    if (schema == spec->end() || schema->is_null()) return OutputGrammar{json_object_gbnf(), "response_format.json_schema.schema"};
    return OutputGrammar{schema_grammar(*schema, "response_format.json_schema.schema"), "response_format.json_schema.schema"};
}

}  // namespace detail

/// The grammar the request's fields ask for, or nothing. At most one of response_format (other
/// than "text"), `grammar` and `json_schema` may be given. `body` keeps its keys in the order
/// sent: a schema's properties are generated in that order.
inline std::optional<OutputGrammar> parse_output_grammar(const nlohmann::ordered_json& body) {
    std::optional<OutputGrammar> out;
    int given = 0;
    if (const auto f = body.find("response_format"); f != body.end() && !f->is_null()) {
        out = detail::parse_response_format(*f);
        given += out.has_value();
    }
    if (const auto g = body.find("grammar"); g != body.end() && !g->is_null()) {
        out = detail::checked_gbnf(*g, "grammar");
        ++given;
    }
    if (const auto s = body.find("json_schema"); s != body.end() && !s->is_null()) {
        out = OutputGrammar{detail::schema_grammar(*s, "json_schema"), "json_schema"};
        ++given;
    }
    if (given > 1) throw bad_field("response_format", "give one of response_format, grammar and json_schema");
    return out;
}

}  // namespace gemma4::server
