// Media inside a request: base64 and `data:` URLs. The server never fetches anything, so an
// http(s) URL is refused with a message that says so.
#pragma once

#include "api_error.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gemma4::server {

/// Standard base64 (RFC 4648 §4), padding optional, ASCII white space ignored (line-wrapped
/// input). Nothing for any other character, misplaced padding or a dangling 6-bit group.
inline std::optional<std::vector<std::byte>> decode_base64(std::string_view text) {
    auto value = [](char c) -> int {
        if (c >= 'A' && c <= 'Z') return c - 'A';
        if (c >= 'a' && c <= 'z') return c - 'a' + 26;
        if (c >= '0' && c <= '9') return c - '0' + 52;
        if (c == '+') return 62;
        if (c == '/') return 63;
        return -1;
    };
    std::vector<std::byte> out;
    out.reserve(text.size() / 4 * 3);
    std::uint32_t bits = 0;
    int count = 0, padding = 0;
    for (char c : text) {
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
        if (c == '=') {
            ++padding;
            continue;
        }
        const int v = value(c);
        if (v < 0 || padding > 0) return std::nullopt;  // a foreign character, or data after '='
        bits = (bits << 6) | static_cast<std::uint32_t>(v);
        if (++count == 4) {
            out.push_back(static_cast<std::byte>(bits >> 16));
            out.push_back(static_cast<std::byte>(bits >> 8));
            out.push_back(static_cast<std::byte>(bits));
            bits = 0;
            count = 0;
        }
    }
    if (count == 1 || padding > 2 || (padding > 0 && (count + padding) % 4 != 0)) return std::nullopt;
    if (count == 2) out.push_back(static_cast<std::byte>(bits >> 4));
    if (count == 3) {
        out.push_back(static_cast<std::byte>(bits >> 10));
        out.push_back(static_cast<std::byte>(bits >> 2));
    }
    return out;
}

inline std::string encode_base64(std::string_view bytes) {
    static constexpr char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    std::size_t i = 0;
    for (; i + 3 <= bytes.size(); i += 3) {
        const auto v = (std::uint32_t(std::uint8_t(bytes[i])) << 16) | (std::uint32_t(std::uint8_t(bytes[i + 1])) << 8) |
                       std::uint8_t(bytes[i + 2]);
        for (int s = 18; s >= 0; s -= 6) out += digits[(v >> s) & 63];
    }
    if (i + 1 == bytes.size()) {
        const auto v = std::uint32_t(std::uint8_t(bytes[i])) << 16;
        out += digits[(v >> 18) & 63];
        out += digits[(v >> 12) & 63];
        out += "==";
    } else if (i + 2 == bytes.size()) {
        const auto v = (std::uint32_t(std::uint8_t(bytes[i])) << 16) | (std::uint32_t(std::uint8_t(bytes[i + 1])) << 8);
        for (int s = 18; s >= 6; s -= 6) out += digits[(v >> s) & 63];
        out += '=';
    }
    return out;
}

/// Base64 field of a request (`param` names it in the error).
inline std::vector<std::byte> require_base64(std::string_view text, const std::string& param) {
    auto bytes = decode_base64(text);
    if (!bytes) throw bad_field(param, "invalid base64 data");
    if (bytes->empty()) throw bad_field(param, "empty data");
    return std::move(*bytes);
}

struct DataUrl {
    std::string media_type;  ///< "image/png"; empty when the URL names none
    std::vector<std::byte> bytes;
};

/// `data:[<media type>][;base64],<data>`; only base64 payloads are accepted (images are binary).
inline DataUrl parse_data_url(std::string_view url, const std::string& param) {
    if (url.starts_with("http://") || url.starts_with("https://") || url.starts_with("file:") || url.starts_with("ftp://"))
        throw ApiError(400, param + ": remote URLs are not fetched by this server; send the image inline as a data: URL (data:image/png;base64,...)",
                       "invalid_request_error", param, "remote_url_not_supported");
    if (!url.starts_with("data:")) throw bad_field(param, "expected a data: URL (data:image/png;base64,...)");
    const auto comma = url.find(',');
    if (comma == std::string_view::npos) throw bad_field(param, "data: URL without ','");
    std::string_view header = url.substr(5, comma - 5);
    if (!header.ends_with(";base64")) throw bad_field(param, "only base64 data: URLs are supported");
    header.remove_suffix(7);
    return DataUrl{std::string(header), require_base64(url.substr(comma + 1), param)};
}

}  // namespace gemma4::server
