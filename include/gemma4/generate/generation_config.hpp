// generation_config.json: the checkpoint's suggested decoding settings (stop ids, sampling
// defaults, length limits). The file is optional; without it generation is greedy, as in
// Hugging Face transformers, whose GenerationConfig defaults `do_sample` to false.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/io/json_file.hpp>
#include <gemma4/generate/sampler.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// The fields of generation_config.json that gemma4 uses. Optional fields are empty when the
/// file does not set them (or sets them to null), so a caller can tell "absent" from a value.
struct GenerationConfig {
    std::vector<std::int32_t> eos_token_id{};  ///< empty: not given here (config.json's apply)
    std::optional<std::int32_t> pad_token_id;
    std::optional<std::int32_t> bos_token_id;
    bool do_sample = false;
    std::optional<double> temperature;
    std::optional<std::int32_t> top_k;
    std::optional<double> top_p;
    std::optional<double> min_p;
    std::optional<double> repetition_penalty;
    std::vector<std::int32_t> suppress_tokens{};
    std::optional<std::int64_t> max_new_tokens;
    std::optional<std::int64_t> max_length;  ///< prompt + reply, in tokens

    bool is_eos(std::int32_t id) const {
        return std::find(eos_token_id.begin(), eos_token_id.end(), id) != eos_token_id.end();
    }
};

namespace detail {

/// Reads one field of generation_config.json; every complaint names the source and the field.
class GenerationConfigReader {
public:
    GenerationConfigReader(const nlohmann::json& root, std::string source)
        : root_(root), source_(std::move(source)) {
        if (!root_.is_object())
            throw ConfigError(source_ + ": top level must be a JSON object, got " + root_.type_name());
    }

    const nlohmann::json* find(const char* field) const {
        const auto it = root_.find(field);
        return it == root_.end() || it->is_null() ? nullptr : &*it;
    }

    std::int64_t integer(const nlohmann::json& value, const char* field, std::int64_t lo,
                         std::int64_t hi) const {
        if (!value.is_number_integer())
            fail(field, std::string("must be an integer, got ") + value.type_name());
        if (value.is_number_unsigned() && value.get<std::uint64_t>() > static_cast<std::uint64_t>(hi))
            fail(field, "is " + value.dump() + ", out of range");
        const auto v = value.get<std::int64_t>();
        if (v < lo || v > hi)
            fail(field, "is " + std::to_string(v) + ", out of range [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "]");
        return v;
    }

    std::optional<std::int64_t> integer(const char* field, std::int64_t lo, std::int64_t hi) const {
        const auto* value = find(field);
        if (!value) return std::nullopt;
        return integer(*value, field, lo, hi);
    }

    std::optional<std::int32_t> token_id(const char* field) const {
        const auto v = integer(field, 0, std::numeric_limits<std::int32_t>::max());
        if (!v) return std::nullopt;
        return static_cast<std::int32_t>(*v);
    }

    /// A token id or a list of them (eos_token_id is written both ways).
    std::vector<std::int32_t> token_ids(const char* field, bool single_allowed) const {
        std::vector<std::int32_t> ids;
        const auto* value = find(field);
        if (!value) return ids;
        constexpr std::int64_t max_id = std::numeric_limits<std::int32_t>::max();
        if (single_allowed && value->is_number_integer()) {
            ids.push_back(static_cast<std::int32_t>(integer(*value, field, 0, max_id)));
            return ids;
        }
        if (!value->is_array())
            fail(field, std::string(single_allowed ? "must be an integer or a list of integers"
                                                   : "must be a list of integers") +
                            ", got " + value->type_name());
        for (const auto& item : *value)
            ids.push_back(static_cast<std::int32_t>(integer(item, field, 0, max_id)));
        return ids;
    }

    std::optional<double> number(const char* field, double lo, double hi, bool lo_inclusive) const {
        const auto* value = find(field);
        if (!value) return std::nullopt;
        if (!value->is_number()) fail(field, std::string("must be a number, got ") + value->type_name());
        const double v = value->get<double>();
        const bool above_lo = lo_inclusive ? v >= lo : v > lo;
        if (!above_lo || !(v <= hi))
            fail(field, "is " + value->dump() + ", out of range " + (lo_inclusive ? "[" : "(") + format(lo) +
                            ", " + format(hi) + "]");
        return v;
    }

    std::optional<bool> boolean(const char* field) const {
        const auto* value = find(field);
        if (!value) return std::nullopt;
        if (!value->is_boolean())
            fail(field, std::string("must be true or false, got ") + value->type_name());
        return value->get<bool>();
    }

private:
    [[noreturn]] void fail(const char* field, const std::string& what) const {
        throw ConfigError(source_ + ": field '" + field + "' " + what);
    }
    static std::string format(double v) {
        if (std::isinf(v)) return "inf";
        std::string text = std::to_string(v);
        text.erase(text.find_last_not_of('0') + 1);
        if (text.back() == '.') text.pop_back();
        return text;
    }

    const nlohmann::json& root_;
    std::string source_;
};

}  // namespace detail

/// Reads a parsed generation_config.json. `source` names the file in error messages.
inline GenerationConfig generation_config_from_json(const nlohmann::json& root,
                                                    const std::string& source = "generation_config.json") {
    const detail::GenerationConfigReader read(root, source);
    constexpr double inf = std::numeric_limits<double>::infinity();
    constexpr std::int64_t max_tokens = std::numeric_limits<std::int64_t>::max();
    GenerationConfig config;
    config.eos_token_id = read.token_ids("eos_token_id", true);
    config.pad_token_id = read.token_id("pad_token_id");
    config.bos_token_id = read.token_id("bos_token_id");
    config.do_sample = read.boolean("do_sample").value_or(false);
    config.temperature = read.number("temperature", 0.0, inf, true);
    if (const auto k = read.integer("top_k", 0, std::numeric_limits<std::int32_t>::max()))
        config.top_k = static_cast<std::int32_t>(*k);
    config.top_p = read.number("top_p", 0.0, 1.0, false);
    config.min_p = read.number("min_p", 0.0, 1.0, true);
    config.repetition_penalty = read.number("repetition_penalty", 0.0, inf, false);
    config.suppress_tokens = read.token_ids("suppress_tokens", false);
    config.max_new_tokens = read.integer("max_new_tokens", 0, max_tokens);
    config.max_length = read.integer("max_length", 0, max_tokens);
    return config;
}

/// Parses the text of a generation_config.json. Malformed JSON is a FormatError.
inline GenerationConfig generation_config_from_text(std::string_view text,
                                                    const std::string& source = "generation_config.json") {
    nlohmann::json root;
    try {
        root = nlohmann::json::parse(text.begin(), text.end());
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number overflow
        throw FormatError(source + ": invalid JSON: " + e.what());
    }
    return generation_config_from_json(root, source);
}

/// Reads `generation_config.json` from a checkpoint directory, or a file named directly. The
/// file is optional in a checkpoint: without it the result is the defaults, i.e. greedy
/// decoding. A path that is neither a directory nor a file is an error, since it means the
/// checkpoint path is wrong.
inline GenerationConfig load_generation_config(const std::filesystem::path& checkpoint) {
    std::error_code ec;
    std::filesystem::path path = checkpoint;
    if (std::filesystem::is_directory(checkpoint, ec)) {
        path /= "generation_config.json";
        if (!std::filesystem::exists(path, ec)) return {};
    } else if (!std::filesystem::exists(checkpoint, ec)) {
        throw IoError(checkpoint.string() + ": no such checkpoint directory or generation_config.json");
    }
    return generation_config_from_text(read_text_file(path), path.string());
}

/// `params` with the checkpoint's suggestions applied: every field the file sets replaces the
/// one in `params`, and do_sample false means greedy (temperature 0), as in transformers.
/// Fields the file does not set keep the caller's values; apply user overrides afterwards.
inline SamplingParams apply_generation_config(const GenerationConfig& config, SamplingParams params = {}) {
    if (config.temperature) params.temperature = *config.temperature;
    if (config.top_k) params.top_k = *config.top_k;
    if (config.top_p) params.top_p = *config.top_p;
    if (config.min_p) params.min_p = *config.min_p;
    if (config.repetition_penalty) params.repetition_penalty = *config.repetition_penalty;
    if (!config.suppress_tokens.empty()) params.suppress_tokens = config.suppress_tokens;
    if (!config.do_sample) params.temperature = 0.0;
    return params;
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
