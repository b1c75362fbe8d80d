// Reading small text and JSON files (config.json, index files, generation_config.json) with the
// errors every loader reports the same way.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// The whole file; IoError naming it if it cannot be read.
inline std::string read_text_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw IoError(path.string() + ": cannot open");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw IoError(path.string() + ": read failed");
    return text;
}

/// The JSON document in `path`; `BadJson` (a gemma4::Error) naming the file if it is not JSON,
/// including numbers nlohmann cannot represent (reported as out_of_range, not parse_error).
template <class BadJson = FormatError>
nlohmann::json read_json_file(const std::filesystem::path& path) {
    const std::string text = read_text_file(path);
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw BadJson(path.string() + ": not valid JSON: " + e.what());
    }
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
