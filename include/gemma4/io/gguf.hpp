// GGUF reading (the llama.cpp file format, versions 2 and 3, little-endian): one file, mmap'd.
// Every count, length, offset, alignment and type is checked against the file before it is used,
// so a hostile file gives a FormatError naming the file and the key or tensor at fault, never a
// read outside the mapping or an allocation the file cannot back.
//
// Layout: "GGUF", u32 version, u64 tensor count, u64 key/value count, the key/values (string key,
// u32 value type, value), the tensor infos (string name, u32 n_dims, u64 ne[n_dims] fastest
// first, u32 ggml type, u64 offset into the data section), then padding to `general.alignment`
// (default 32) and the data section. Strings are u64 length + bytes (no terminator); an array is
// u32 element type, u64 count, the elements (arrays may nest).
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/io/mapped_file.hpp>
#include <gemma4/tensor/dtype.hpp>
#include <gemma4/tensor/ggml_type.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

enum class GgufValueType : std::uint32_t {
    UInt8 = 0,
    Int8 = 1,
    UInt16 = 2,
    Int16 = 3,
    UInt32 = 4,
    Int32 = 5,
    Float32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    UInt64 = 10,
    Int64 = 11,
    Float64 = 12,
};

constexpr std::string_view gguf_value_type_name(GgufValueType t) {
    switch (t) {
        case GgufValueType::UInt8: return "UINT8";
        case GgufValueType::Int8: return "INT8";
        case GgufValueType::UInt16: return "UINT16";
        case GgufValueType::Int16: return "INT16";
        case GgufValueType::UInt32: return "UINT32";
        case GgufValueType::Int32: return "INT32";
        case GgufValueType::Float32: return "FLOAT32";
        case GgufValueType::Bool: return "BOOL";
        case GgufValueType::String: return "STRING";
        case GgufValueType::Array: return "ARRAY";
        case GgufValueType::UInt64: return "UINT64";
        case GgufValueType::Int64: return "INT64";
        case GgufValueType::Float64: return "FLOAT64";
    }
    return "?";
}

/// Bytes of a fixed-size GGUF value type; 0 for STRING and ARRAY.
constexpr std::size_t gguf_scalar_size(GgufValueType t) {
    switch (t) {
        case GgufValueType::UInt8:
        case GgufValueType::Int8:
        case GgufValueType::Bool: return 1;
        case GgufValueType::UInt16:
        case GgufValueType::Int16: return 2;
        case GgufValueType::UInt32:
        case GgufValueType::Int32:
        case GgufValueType::Float32: return 4;
        case GgufValueType::UInt64:
        case GgufValueType::Int64:
        case GgufValueType::Float64: return 8;
        default: return 0;
    }
}

/// One metadata value. Strings are views into the mapping (valid while the GgufFile lives).
/// Arrays of fixed-size elements keep a pointer to their bytes and decode on access, so a
/// file cannot make the reader allocate much more than its own size.
class GgufValue {
public:
    GgufValueType type() const { return type_; }
    bool is_array() const { return type_ == GgufValueType::Array; }
    bool is_string() const { return type_ == GgufValueType::String; }
    bool is_bool() const { return type_ == GgufValueType::Bool; }
    bool is_float() const { return type_ == GgufValueType::Float32 || type_ == GgufValueType::Float64; }
    bool is_integer() const { return !is_array() && !is_string() && !is_bool() && !is_float(); }

    /// Integer types: the value (UINT64 above INT64_MAX: nullopt). Others: nullopt.
    std::optional<std::int64_t> as_int() const {
        if (!is_integer()) return std::nullopt;
        if (type_ == GgufValueType::UInt64) {
            if (bits_ > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
            return static_cast<std::int64_t>(bits_);
        }
        return signed_;
    }
    /// FLOAT32 / FLOAT64 as double (exactly).
    std::optional<double> as_double() const {
        if (!is_float()) return std::nullopt;
        return float_;
    }
    std::optional<bool> as_bool() const { return is_bool() ? std::optional<bool>(bits_ != 0) : std::nullopt; }
    /// The little-endian bits of a fixed-size scalar as stored (floats: their IEEE bits).
    std::uint64_t bits() const { return bits_; }
    std::optional<std::string_view> as_string() const { return is_string() ? std::optional(str_) : std::nullopt; }

    /// Arrays: element type and count.
    GgufValueType element_type() const { return element_type_; }
    std::size_t size() const { return static_cast<std::size_t>(count_); }
    /// Element i of an array (a copy for nested arrays).
    GgufValue at(std::size_t i) const {
        if (!is_array() || i >= size()) throw InvalidArgument("GgufValue::at: index " + std::to_string(i) + " out of range");
        if (element_type_ == GgufValueType::String) return string_value(strings_[i]);
        if (element_type_ == GgufValueType::Array) return arrays_[i];
        return scalar(element_type_, raw_ + i * gguf_scalar_size(element_type_));
    }
    /// The strings of a string array (views into the mapping).
    const std::vector<std::string_view>& strings() const { return strings_; }
    /// The elements of a nested array.
    const std::vector<GgufValue>& arrays() const { return arrays_; }

    /// Short description for messages: "UINT32", "ARRAY[INT32]".
    std::string type_string() const {
        if (!is_array()) return std::string(gguf_value_type_name(type_));
        return "ARRAY[" + std::string(gguf_value_type_name(element_type_)) + "]";
    }

    /// A scalar decoded from its little-endian bytes.
    static GgufValue scalar(GgufValueType t, const std::byte* p) {
        GgufValue v;
        v.type_ = t;
        std::uint64_t u = 0;
        const std::size_t n = gguf_scalar_size(t);
        for (std::size_t k = 0; k < n; ++k) u |= static_cast<std::uint64_t>(std::to_integer<unsigned>(p[k])) << (8 * k);
        v.bits_ = u;
        switch (t) {
            case GgufValueType::UInt8:
            case GgufValueType::UInt16:
            case GgufValueType::UInt32: v.signed_ = static_cast<std::int64_t>(u); break;
            case GgufValueType::Int8: v.signed_ = static_cast<std::int8_t>(u); break;
            case GgufValueType::Int16: v.signed_ = static_cast<std::int16_t>(u); break;
            case GgufValueType::Int32: v.signed_ = static_cast<std::int32_t>(u); break;
            case GgufValueType::Int64: v.signed_ = static_cast<std::int64_t>(u); break;
            case GgufValueType::Float32: {
                float f;
                const auto w = static_cast<std::uint32_t>(u);
                std::memcpy(&f, &w, 4);
                v.float_ = f;
                break;
            }
            case GgufValueType::Float64: {
                double d;
                std::memcpy(&d, &u, 8);
                v.float_ = d;
                break;
            }
            default: break;
        }
        return v;
    }
    static GgufValue string_value(std::string_view s) {
        GgufValue v;
        v.type_ = GgufValueType::String;
        v.str_ = s;
        return v;
    }

private:
    friend class GgufFile;
    GgufValueType type_ = GgufValueType::UInt8;
    std::uint64_t bits_ = 0;
    std::int64_t signed_ = 0;
    double float_ = 0;
    std::string_view str_;
    GgufValueType element_type_ = GgufValueType::UInt8;
    std::uint64_t count_ = 0;
    const std::byte* raw_ = nullptr;
    std::vector<std::string_view> strings_;
    std::vector<GgufValue> arrays_;
};

struct GgufTensorInfo {
    std::string name;
    std::vector<std::uint64_t> ne;  ///< dimensions as in the file, fastest first (ne[0] = row length)
    GgmlType type = GgmlType::F32;
    std::uint64_t offset = 0;  ///< into the data section
    std::uint64_t numel = 0;
    std::uint64_t size_bytes = 0;

    /// The row-major shape (slowest first): ne reversed, e.g. [out, in] for a matrix.
    std::vector<std::int64_t> shape() const {
        std::vector<std::int64_t> s(ne.rbegin(), ne.rend());
        return s;
    }
    std::int64_t row_length() const { return ne.empty() ? 1 : static_cast<std::int64_t>(ne[0]); }
    std::int64_t rows() const { return ne.empty() || ne[0] == 0 ? 0 : static_cast<std::int64_t>(numel / ne[0]); }
};

class GgufFile {
public:
    static constexpr std::uint32_t kMagic = 0x46554747u;  // "GGUF" little-endian
    static constexpr std::uint32_t kDefaultAlignment = 32;
    static constexpr std::uint32_t kMaxDims = 4;          // GGML_MAX_DIMS
    static constexpr int kMaxArrayDepth = 8;              // nested arrays deeper than this are rejected
    static constexpr std::uint64_t kMaxAlignment = 1u << 16;

    explicit GgufFile(const std::filesystem::path& path) : file_(path) { parse(); }

    const std::filesystem::path& path() const { return file_.path(); }
    std::uint32_t version() const { return version_; }
    std::uint64_t alignment() const { return alignment_; }
    /// Offset of the data section in the file.
    std::uint64_t data_offset() const { return data_offset_; }

    /// Key/values in file order.
    const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
    const GgufValue* find(std::string_view key) const {
        const auto it = kv_index_.find(std::string(key));
        return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
    }
    bool contains(std::string_view key) const { return find(key) != nullptr; }

    /// Tensor infos in file order.
    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
    const GgufTensorInfo* find_tensor(std::string_view name) const {
        const auto it = tensor_index_.find(std::string(name));
        return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
    }
    const GgufTensorInfo& tensor(std::string_view name) const {
        const GgufTensorInfo* t = find_tensor(name);
        if (!t) throw ShapeError(path().string() + ": no tensor '" + std::string(name) + "'");
        return *t;
    }
    /// The bytes of a tensor (bounds checked at open).
    const std::byte* data(const GgufTensorInfo& t) const { return file_.data() + data_offset_ + t.offset; }
    /// Drops the mapped pages of a tensor that was copied out (MappedFile::release).
    void release(const GgufTensorInfo& t) const { file_.release(data(t), static_cast<std::size_t>(t.size_bytes)); }

    // ---- typed access to metadata: ConfigError naming the key when missing or mistyped ------

    [[noreturn]] void key_error(std::string_view key, const std::string& what) const {
        throw ConfigError(path().string() + ": metadata key '" + std::string(key) + "': " + what);
    }
    const GgufValue& require(std::string_view key) const {
        const GgufValue* v = find(key);
        if (!v) key_error(key, "missing");
        return *v;
    }
    std::int64_t get_int(std::string_view key) const {
        const GgufValue& v = require(key);
        const auto i = v.as_int();
        if (!i) key_error(key, "expected an integer, got " + v.type_string());
        return *i;
    }
    std::optional<std::int64_t> find_int(std::string_view key) const {
        return contains(key) ? std::optional(get_int(key)) : std::nullopt;
    }
    double get_float(std::string_view key) const {
        const GgufValue& v = require(key);
        if (const auto d = v.as_double()) return *d;
        if (const auto i = v.as_int()) return static_cast<double>(*i);
        key_error(key, "expected a number, got " + v.type_string());
    }
    bool get_bool(std::string_view key) const {
        const GgufValue& v = require(key);
        const auto b = v.as_bool();
        if (!b) key_error(key, "expected a BOOL, got " + v.type_string());
        return *b;
    }
    std::string_view get_string(std::string_view key) const {
        const GgufValue& v = require(key);
        const auto s = v.as_string();
        if (!s) key_error(key, "expected a STRING, got " + v.type_string());
        return *s;
    }
    const GgufValue& get_array(std::string_view key) const {
        const GgufValue& v = require(key);
        if (!v.is_array()) key_error(key, "expected an ARRAY, got " + v.type_string());
        return v;
    }

private:
    [[noreturn]] void fail(const std::string& what) const { throw FormatError(path().string() + ": " + what); }

    struct Cursor {
        const GgufFile* file;
        const std::byte* base;
        std::uint64_t size;
        std::uint64_t pos = 0;

        std::uint64_t remaining() const { return size - pos; }
        void need(std::uint64_t n, const std::string& what) const {
            if (n > remaining())
                file->fail(what + ": needs " + std::to_string(n) + " bytes at offset " + std::to_string(pos) + ", the file has " +
                           std::to_string(remaining()) + " left (truncated?)");
        }
        std::uint64_t uint(std::size_t n, const std::string& what) {
            need(n, what);
            std::uint64_t u = 0;
            for (std::size_t k = 0; k < n; ++k) u |= static_cast<std::uint64_t>(std::to_integer<unsigned>(base[pos + k])) << (8 * k);
            pos += n;
            return u;
        }
        std::uint32_t u32(const std::string& what) { return static_cast<std::uint32_t>(uint(4, what)); }
        std::uint64_t u64(const std::string& what) { return uint(8, what); }
        std::string_view string(const std::string& what) {
            const std::uint64_t n = u64(what + " (string length)");
            need(n, what + " (string of " + std::to_string(n) + " bytes)");
            const std::string_view s(reinterpret_cast<const char*>(base + pos), static_cast<std::size_t>(n));
            pos += n;
            return s;
        }
    };

    static std::uint64_t peek_u64(const Cursor& c) {
        std::uint64_t u = 0;
        for (std::size_t k = 0; k < 8; ++k) u |= static_cast<std::uint64_t>(std::to_integer<unsigned>(c.base[c.pos + k])) << (8 * k);
        return u;
    }

    static bool known_value_type(std::uint32_t t) { return t <= static_cast<std::uint32_t>(GgufValueType::Float64); }

    /// Fewest bytes one element of type `t` takes in the file (to bound counts before reserving).
    static std::uint64_t min_element_bytes(GgufValueType t) {
        if (t == GgufValueType::String) return 8;
        if (t == GgufValueType::Array) return 12;
        return gguf_scalar_size(t);
    }

    GgufValue read_value(Cursor& c, GgufValueType t, const std::string& where, int depth) {
        if (t == GgufValueType::String) return GgufValue::string_value(c.string(where));
        if (t != GgufValueType::Array) {
            const std::size_t n = gguf_scalar_size(t);
            c.need(n, where);
            GgufValue v = GgufValue::scalar(t, c.base + c.pos);
            c.pos += n;
            if (t == GgufValueType::Bool && v.bits_ > 1) fail(where + ": BOOL value " + std::to_string(v.bits_) + " is neither 0 nor 1");
            return v;
        }
        if (depth >= kMaxArrayDepth) fail(where + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth));
        const std::uint32_t et = c.u32(where + " (array element type)");
        if (!known_value_type(et)) fail(where + ": unknown array element type " + std::to_string(et));
        const auto elem = static_cast<GgufValueType>(et);
        const std::uint64_t count = c.u64(where + " (array length)");
        const std::uint64_t min_bytes = min_element_bytes(elem);
        if (count > c.remaining() / min_bytes)
            fail(where + ": array of " + std::to_string(count) + " " + std::string(gguf_value_type_name(elem)) +
                 " elements cannot fit in the " + std::to_string(c.remaining()) + " bytes left");
        GgufValue v;
        v.type_ = GgufValueType::Array;
        v.element_type_ = elem;
        v.count_ = count;
        if (elem == GgufValueType::String) {
            v.strings_.reserve(static_cast<std::size_t>(count));
            for (std::uint64_t i = 0; i < count; ++i) {
                // messages are built only on failure: token lists have 10^5 entries
                if (c.remaining() < 8 || c.remaining() - 8 < peek_u64(c))
                    (void)c.string(where + "[" + std::to_string(i) + "]");  // throws the bounds error
                v.strings_.push_back(c.string(std::string()));
            }
        } else if (elem == GgufValueType::Array) {
            v.arrays_.reserve(static_cast<std::size_t>(count));
            for (std::uint64_t i = 0; i < count; ++i)
                v.arrays_.push_back(read_value(c, GgufValueType::Array, where + "[" + std::to_string(i) + "]", depth + 1));
        } else {
            const std::uint64_t bytes = count * min_bytes;  // bounded by remaining() above
            v.raw_ = c.base + c.pos;
            if (elem == GgufValueType::Bool)
                for (std::uint64_t i = 0; i < count; ++i)
                    if (std::to_integer<unsigned>(v.raw_[i]) > 1)
                        fail(where + "[" + std::to_string(i) + "]: BOOL value is neither 0 nor 1");
            c.pos += bytes;
        }
        return v;
    }

    void parse() {
        const std::uint64_t size = file_.size();
        if (size == 0) fail("empty file (not a GGUF file)");
        Cursor c{this, file_.data(), size};
        if (size < 4) fail("truncated: " + std::to_string(size) + " bytes, shorter than the magic");
        const std::uint32_t magic = c.u32("magic");
        if (magic != kMagic) fail("bad magic (not a GGUF file)");
        version_ = c.u32("version");
        if (version_ != 2 && version_ != 3) {
            const bool swapped = version_ == 0x02000000u || version_ == 0x03000000u;
            fail("unsupported GGUF version " + std::to_string(version_) +
                 (swapped ? " (a big-endian file; only little-endian is supported)" : " (expected 2 or 3)"));
        }
        const std::uint64_t n_tensors = c.u64("tensor count");
        const std::uint64_t n_kv = c.u64("metadata count");
        // Each key/value takes at least 13 bytes (empty key, type, 1-byte value) and each tensor
        // info at least 24: counts beyond what the file can hold are rejected before reserving.
        if (n_kv > c.remaining() / 13)
            fail("metadata count " + std::to_string(n_kv) + " cannot fit in the " + std::to_string(c.remaining()) + " bytes left");
        if (n_tensors > c.remaining() / 24)
            fail("tensor count " + std::to_string(n_tensors) + " cannot fit in the " + std::to_string(c.remaining()) + " bytes left");

        kv_.reserve(static_cast<std::size_t>(n_kv));
        for (std::uint64_t i = 0; i < n_kv; ++i) {
            const std::string entry = "metadata entry " + std::to_string(i);
            const std::string key(c.string(entry + " key"));
            const std::string where = "metadata key '" + key + "'";
            const std::uint32_t t = c.u32(where + " (value type)");
            if (!known_value_type(t)) fail(where + ": unknown value type " + std::to_string(t));
            GgufValue v = read_value(c, static_cast<GgufValueType>(t), where, 0);
            if (!kv_index_.emplace(key, kv_.size()).second) fail(where + ": duplicate key");
            kv_.emplace_back(key, std::move(v));
        }

        alignment_ = kDefaultAlignment;
        if (const GgufValue* a = find("general.alignment")) {
            const auto n = a->as_int();
            if (!n || a->type() != GgufValueType::UInt32)
                fail("metadata key 'general.alignment': expected a UINT32, got " + a->type_string());
            if (*n == 0 || (*n & (*n - 1)) != 0 || static_cast<std::uint64_t>(*n) > kMaxAlignment)
                fail("metadata key 'general.alignment': " + std::to_string(*n) + " is not a power of two up to " +
                     std::to_string(kMaxAlignment));
            alignment_ = static_cast<std::uint64_t>(*n);
        }

        tensors_.reserve(static_cast<std::size_t>(n_tensors));
        for (std::uint64_t i = 0; i < n_tensors; ++i) {
            GgufTensorInfo t;
            t.name = std::string(c.string("tensor info " + std::to_string(i) + " name"));
            const std::string where = "tensor '" + t.name + "'";
            const std::uint32_t n_dims = c.u32(where + " (dimension count)");
            if (n_dims > kMaxDims) fail(where + ": " + std::to_string(n_dims) + " dimensions (at most " + std::to_string(kMaxDims) + ")");
            std::uint64_t numel = 1;
            for (std::uint32_t d = 0; d < n_dims; ++d) {
                const std::uint64_t n = c.u64(where + " (dimension " + std::to_string(d) + ")");
                if (n > static_cast<std::uint64_t>(INT64_MAX)) fail(where + ": dimension " + std::to_string(d) + " is negative or absurd");
                if (n != 0 && numel > static_cast<std::uint64_t>(INT64_MAX) / n)
                    fail(where + ": the product of its dimensions overflows");
                numel *= n;
                t.ne.push_back(n);
            }
            const std::uint32_t type = c.u32(where + " (type)");
            const auto traits = ggml_type_traits(type);
            if (!traits) fail(where + ": unknown ggml type " + std::to_string(type));
            t.type = static_cast<GgmlType>(type);
            t.offset = c.u64(where + " (offset)");
            const std::uint64_t row = t.ne.empty() ? 1 : t.ne[0];
            if (row % static_cast<std::uint64_t>(traits->block) != 0)
                fail(where + ": row length " + std::to_string(row) + " is not a multiple of the " + std::string(traits->name) +
                     " block size " + std::to_string(traits->block));
            t.numel = numel;
            const std::uint64_t blocks = numel / static_cast<std::uint64_t>(traits->block);
            if (blocks > static_cast<std::uint64_t>(INT64_MAX) / static_cast<std::uint64_t>(traits->block_bytes))
                fail(where + ": its size in bytes overflows");
            t.size_bytes = blocks * static_cast<std::uint64_t>(traits->block_bytes);
            if (t.offset % alignment_ != 0)
                fail(where + ": offset " + std::to_string(t.offset) + " is not a multiple of the alignment " + std::to_string(alignment_));
            if (!tensor_index_.emplace(t.name, tensors_.size()).second) fail(where + ": duplicate tensor name");
            tensors_.push_back(std::move(t));
        }

        // The data section starts at the next multiple of the alignment.
        const std::uint64_t pad = (alignment_ - c.pos % alignment_) % alignment_;
        if (pad > c.remaining()) {
            bool any_data = false;
            for (const auto& t : tensors_) any_data = any_data || t.size_bytes > 0;
            if (any_data) fail("the data section would start at offset " + std::to_string(c.pos + pad) + ", past the end of the file (" +
                               std::to_string(size) + " bytes)");
            data_offset_ = size;
        } else {
            data_offset_ = c.pos + pad;
        }
        const std::uint64_t data_size = size - data_offset_;
        for (const auto& t : tensors_)
            if (t.offset > data_size || t.size_bytes > data_size - t.offset)
                fail("tensor '" + t.name + "': data [" + std::to_string(t.offset) + ", +" + std::to_string(t.size_bytes) +
                     ") runs past the end of the data section (" + std::to_string(data_size) + " bytes; file truncated?)");
        // No two tensors may share bytes.
        std::vector<const GgufTensorInfo*> order;
        for (const auto& t : tensors_)
            if (t.size_bytes > 0) order.push_back(&t);
        std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->offset < b->offset; });
        for (std::size_t i = 1; i < order.size(); ++i)
            if (order[i]->offset < order[i - 1]->offset + order[i - 1]->size_bytes)
                fail("tensors '" + order[i - 1]->name + "' and '" + order[i]->name + "' overlap");
    }

    MappedFile file_;
    std::uint32_t version_ = 0;
    std::uint64_t alignment_ = kDefaultAlignment;
    std::uint64_t data_offset_ = 0;
    std::vector<std::pair<std::string, GgufValue>> kv_;
    std::map<std::string, std::size_t> kv_index_;
    std::vector<GgufTensorInfo> tensors_;
    std::map<std::string, std::size_t> tensor_index_;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
