// Little-endian binary records with a running FNV-1a 64 checksum, for the library's own state
// files (generate/session_file.hpp, kv/kv_state.hpp). The reader knows how many bytes are
// left and checks every count against that and against a caller's bound before it allocates,
// so a hostile file can never make it allocate more than the file holds.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <istream>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// FNV-1a, 64 bits. Every step is a bijection of the state, so any change of a single byte
/// changes the result.
class Fnv1a64 {
public:
    static constexpr std::uint64_t kOffset = 0xcbf29ce484222325ull;
    static constexpr std::uint64_t kPrime = 0x100000001b3ull;

    void update(std::span<const std::byte> bytes) {
        std::uint64_t h = h_;
        for (const std::byte b : bytes) h = (h ^ static_cast<std::uint64_t>(b)) * kPrime;
        h_ = h;
    }
    void update(const void* data, std::size_t n) { update({static_cast<const std::byte*>(data), n}); }
    std::uint64_t value() const { return h_; }

private:
    std::uint64_t h_ = kOffset;
};

inline std::uint64_t fnv1a64(std::span<const std::byte> bytes) {
    Fnv1a64 h;
    h.update(bytes);
    return h.value();
}

namespace detail {

/// The files hold values as little-endian bytes, and pages of K/V as the host's floats; both
/// are only meaningful on a little-endian host (every platform the library builds for).
inline void require_little_endian(const std::string& what) {
    if constexpr (std::endian::native != std::endian::little)
        throw InvalidArgument(what + ": state files are written and read on little-endian hosts only");
}

template <class U>
void store_le(std::byte* out, U v) {
    for (std::size_t i = 0; i < sizeof(U); ++i) out[i] = static_cast<std::byte>(static_cast<std::uint64_t>(v) >> (8 * i));
}

template <class U>
U load_le(const std::byte* in) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < sizeof(U); ++i) v |= static_cast<std::uint64_t>(in[i]) << (8 * i);
    return static_cast<U>(v);
}

}  // namespace detail

/// Writes records to a stream, hashing and counting every byte.
class BinaryWriter {
public:
    BinaryWriter(std::ostream& out, std::string file) : out_(out), file_(std::move(file)) {}

    void bytes(std::span<const std::byte> b) {
        hash_.update(b);
        out_.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
        if (!out_) throw IoError(file_ + ": write failed");
        count_ += b.size();
    }
    void u8(std::uint8_t v) { bytes(std::as_bytes(std::span(&v, 1))); }
    void u64(std::uint64_t v) {
        std::array<std::byte, 8> b;
        detail::store_le(b.data(), v);
        bytes(b);
    }
    void i64(std::int64_t v) { u64(static_cast<std::uint64_t>(v)); }
    void ids(std::span<const std::int32_t> v) {
        u64(v.size());
        std::vector<std::byte> b(v.size() * 4);
        for (std::size_t i = 0; i < v.size(); ++i) detail::store_le(b.data() + 4 * i, static_cast<std::uint32_t>(v[i]));
        bytes(b);
    }
    void string(std::string_view s) {
        u64(s.size());
        bytes(std::as_bytes(std::span(s.data(), s.size())));
    }

    std::uint64_t checksum() const { return hash_.value(); }
    std::uint64_t written() const { return count_; }
    const std::string& file() const { return file_; }

private:
    std::ostream& out_;
    std::string file_;
    Fnv1a64 hash_;
    std::uint64_t count_ = 0;
};

/// Reads records of a region of `size` bytes, hashing every byte; errors are FormatErrors that
/// name the file and the field.
class BinaryReader {
public:
    BinaryReader(std::istream& in, std::string file, std::uint64_t size) : in_(in), file_(std::move(file)), left_(size) {}

    [[noreturn]] void fail(const std::string& what) const { throw FormatError(file_ + ": " + what); }

    void bytes(std::span<std::byte> out, const char* field) {
        if (out.size() > left_)
            fail(std::string(field) + ": needs " + std::to_string(out.size()) + " bytes, only " + std::to_string(left_) + " are left");
        in_.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()));
        if (static_cast<std::size_t>(in_.gcount()) != out.size()) fail(std::string(field) + ": truncated");
        hash_.update(out);
        left_ -= out.size();
    }
    std::uint8_t u8(const char* field) {
        std::byte b[1];
        bytes(b, field);
        return static_cast<std::uint8_t>(b[0]);
    }
    std::uint64_t u64(const char* field) {
        std::array<std::byte, 8> b;
        bytes(b, field);
        return detail::load_le<std::uint64_t>(b.data());
    }
    std::int64_t i64(const char* field) { return static_cast<std::int64_t>(u64(field)); }
    bool boolean(const char* field) {
        const std::uint8_t v = u8(field);
        if (v > 1) fail(std::string(field) + ": expected 0 or 1, got " + std::to_string(v));
        return v == 1;
    }

    /// A count of elements of `element_bytes` each that follow: at most `max` and no more than
    /// the bytes left, checked before the caller allocates anything.
    std::uint64_t count(const char* field, std::uint64_t max, std::uint64_t element_bytes) {
        const std::uint64_t n = u64(field);
        if (n > max) fail(std::string(field) + ": " + std::to_string(n) + " is more than the " + std::to_string(max) + " allowed");
        if (element_bytes && n > left_ / element_bytes)
            fail(std::string(field) + ": " + std::to_string(n) + " entries of " + std::to_string(element_bytes) +
                 " bytes do not fit in the " + std::to_string(left_) + " bytes left");
        return n;
    }
    /// Ids, each in [0, vocab).
    std::vector<std::int32_t> ids(const char* field, std::uint64_t max, std::int64_t vocab) {
        const std::uint64_t n = count(field, max, 4);
        std::vector<std::byte> b(static_cast<std::size_t>(n) * 4);
        bytes(b, field);
        std::vector<std::int32_t> v(static_cast<std::size_t>(n));
        for (std::size_t i = 0; i < v.size(); ++i) {
            v[i] = static_cast<std::int32_t>(detail::load_le<std::uint32_t>(b.data() + 4 * i));
            if (v[i] < 0 || v[i] >= vocab)
                fail(std::string(field) + "[" + std::to_string(i) + "]: id " + std::to_string(v[i]) +
                     " is outside the vocabulary of " + std::to_string(vocab));
        }
        return v;
    }
    std::string string(const char* field, std::uint64_t max) {
        const std::uint64_t n = count(field, max, 1);
        std::string s(static_cast<std::size_t>(n), '\0');
        bytes(std::as_writable_bytes(std::span(s.data(), s.size())), field);
        return s;
    }

    std::uint64_t checksum() const { return hash_.value(); }
    std::uint64_t left() const { return left_; }
    const std::string& file() const { return file_; }

private:
    std::istream& in_;
    std::string file_;
    std::uint64_t left_;
    Fnv1a64 hash_;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
