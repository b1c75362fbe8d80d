// Who may use the server: the API key check (constant time) and the loopback test behind the
// start-up rule "a non-loopback address needs --api-key".
#pragma once

#include <cctype>
#include <cstddef>
#include <string>
#include <string_view>

namespace gemma4::server {

/// Equality whose running time depends only on the lengths, not on where the strings differ,
/// so that timing a wrong key reveals nothing about the right one.
inline bool constant_time_equal(std::string_view a, std::string_view b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    const std::size_t n = a.size() < b.size() ? a.size() : b.size();
    // Always walk the expected key's length, so a short guess takes as long as a long one.
    for (std::size_t i = 0; i < b.size(); ++i) diff |= static_cast<unsigned char>((i < n ? a[i] : 0) ^ b[i]);
    return diff == 0;
}

/// Whether an `Authorization` header value carries `key` as a bearer token.
inline bool bearer_matches(std::string_view header, std::string_view key) {
    constexpr std::string_view scheme = "Bearer ";
    if (header.size() < scheme.size()) return false;
    for (std::size_t i = 0; i < scheme.size(); ++i)  // the scheme is case-insensitive (RFC 7235)
        if (std::tolower(static_cast<unsigned char>(header[i])) != std::tolower(static_cast<unsigned char>(scheme[i]))) return false;
    std::string_view token = header.substr(scheme.size());
    while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
    while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
    return constant_time_equal(token, key);
}

/// Whether a request carries `key`: as a bearer token (OpenAI's clients) or as `x-api-key`
/// (Anthropic's). Both are compared, each in constant time, whichever matches.
inline bool request_key_matches(std::string_view authorization, std::string_view x_api_key, std::string_view key) {
    const bool bearer = bearer_matches(authorization, key);
    const bool header = constant_time_equal(x_api_key, key);
    return bearer || header;
}

/// Whether `host` names only this machine: localhost, 127.0.0.0/8 or ::1.
inline bool is_loopback_host(std::string_view host) {
    if (host == "localhost" || host == "::1" || host == "[::1]") return true;
    if (!host.starts_with("127.")) return false;
    int dots = 0;
    for (char c : host) {
        if (c == '.') ++dots;
        else if (c < '0' || c > '9') return false;
    }
    return dots == 3;
}

}  // namespace gemma4::server
