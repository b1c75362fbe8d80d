// UTF-8 helpers for the tokenizer: strict validation of input text (RFC 3629: no overlongs, no
// surrogates, nothing above U+10FFFF), lossy decoding of byte-fallback runs, and the
// "is this an unfinished character?" test the streaming decoder needs.
#pragma once

#include <gemma4/abi.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace gemma4::inline GEMMA4_ABI::detail {

enum class Utf8Status : std::uint8_t { Complete, Incomplete, Invalid };

struct Utf8Step {
    Utf8Status status;
    std::uint32_t length;   ///< bytes of the character when Complete
    char32_t code_point;    ///< valid when Complete
};

inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";

/// Classifies the sequence starting at `s[i]`. Incomplete means the bytes up to the end of `s`
/// are a valid start of a character that needs more bytes.
constexpr Utf8Step next_utf8(std::string_view s, std::size_t i) {
    const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const unsigned char lead = byte(0);
    if (lead < 0x80) return {Utf8Status::Complete, 1, lead};
    std::uint32_t length = 0;
    char32_t cp = 0;
    // The first continuation byte has a narrower range for some leads (overlongs, surrogates,
    // code points past U+10FFFF); later continuation bytes are always 0x80..0xBF.
    unsigned char second_lo = 0x80, second_hi = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
        length = 2;
        cp = lead & 0x1F;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        length = 3;
        cp = lead & 0x0F;
        if (lead == 0xE0) second_lo = 0xA0;
        if (lead == 0xED) second_hi = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        length = 4;
        cp = lead & 0x07;
        if (lead == 0xF0) second_lo = 0x90;
        if (lead == 0xF4) second_hi = 0x8F;
    } else {
        return {Utf8Status::Invalid, 1, 0};
    }
    for (std::uint32_t k = 1; k < length; ++k) {
        if (i + k >= s.size()) return {Utf8Status::Incomplete, k, 0};
        const unsigned char c = byte(k);
        const unsigned char lo = k == 1 ? second_lo : 0x80;
        const unsigned char hi = k == 1 ? second_hi : 0xBF;
        if (c < lo || c > hi) return {Utf8Status::Invalid, 1, 0};
        cp = (cp << 6) | (c & 0x3F);
    }
    return {Utf8Status::Complete, length, cp};
}

/// Byte offset of the first byte that does not start a complete, valid character.
inline std::optional<std::size_t> first_invalid_utf8(std::string_view s) {
    std::size_t i = 0;
    while (i < s.size()) {
        // ASCII dominates real text: skip it eight bytes at a time.
        while (i + 8 <= s.size()) {
            std::uint64_t word;
            std::memcpy(&word, s.data() + i, 8);
            if (word & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= s.size()) break;
        const Utf8Step step = next_utf8(s, i);
        if (step.status != Utf8Status::Complete) return i;
        i += step.length;
    }
    return std::nullopt;
}

/// Appends `bytes` keeping every valid character and writing U+FFFD for each byte that is not
/// part of one, so the result is always valid UTF-8.
inline void append_utf8_lossy(std::string_view bytes, std::string& out) {
    std::size_t i = 0;
    while (i < bytes.size()) {
        const Utf8Step step = next_utf8(bytes, i);
        if (step.status == Utf8Status::Complete) {
            out.append(bytes.substr(i, step.length));
            i += step.length;
        } else {
            out.append(kReplacementCharacter);
            ++i;
        }
    }
}

/// True when `bytes` ends in the valid beginning of a character that more bytes could finish.
inline bool ends_with_unfinished_utf8(std::string_view bytes) {
    std::size_t i = 0;
    while (i < bytes.size()) {
        const Utf8Step step = next_utf8(bytes, i);
        if (step.status == Utf8Status::Incomplete) return true;
        i += step.status == Utf8Status::Complete ? step.length : 1;
    }
    return false;
}

/// Start of the character that ends just before `end` (text assumed valid UTF-8).
constexpr std::size_t previous_char_start(std::string_view s, std::size_t end) {
    std::size_t i = end - 1;
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
    return i;
}

}  // namespace gemma4::detail
