// Writing GGUF files (version 3, little-endian): metadata key/values and tensors with their data,
// offsets aligned as the format requires. Used to build test files and fuzzing seeds, and to
// re-write a file with some keys or tensors changed (gguf_copy).
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/io/gguf.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// One key/value as written: the value type and the bytes that follow it.
struct GgufKv {
    std::string key;
    GgufValueType type;
    std::string payload;
};

/// One tensor as written: dims fastest first, its data (already in `type`'s block format).
struct GgufTensorOut {
    std::string name;
    std::vector<std::uint64_t> ne;
    GgmlType type = GgmlType::F32;
    std::string data;
};

namespace gguf_bytes {

inline void put(std::string& out, std::uint64_t v, std::size_t n) {
    for (std::size_t k = 0; k < n; ++k) out.push_back(static_cast<char>((v >> (8 * k)) & 0xffu));
}
inline void put_u32(std::string& out, std::uint32_t v) { put(out, v, 4); }
inline void put_u64(std::string& out, std::uint64_t v) { put(out, v, 8); }
inline void put_string(std::string& out, std::string_view s) {
    put_u64(out, s.size());
    out.append(s);
}

/// The payload of a value (what follows its type), as read.
inline std::string payload(const GgufValue& v) {
    std::string out;
    if (v.is_string()) {
        put_string(out, *v.as_string());
    } else if (!v.is_array()) {
        put(out, v.bits(), gguf_scalar_size(v.type()));
    } else {
        put_u32(out, static_cast<std::uint32_t>(v.element_type()));
        put_u64(out, v.size());
        for (std::size_t i = 0; i < v.size(); ++i) {
            out += payload(v.at(i));
        }
    }
    return out;
}

}  // namespace gguf_bytes

inline GgufKv gguf_copy(const std::string& key, const GgufValue& v) { return {key, v.type(), gguf_bytes::payload(v)}; }

inline GgufKv gguf_uint32(std::string key, std::uint32_t v) {
    GgufKv kv{std::move(key), GgufValueType::UInt32, {}};
    gguf_bytes::put_u32(kv.payload, v);
    return kv;
}
inline GgufKv gguf_int32(std::string key, std::int32_t v) {
    GgufKv kv{std::move(key), GgufValueType::Int32, {}};
    gguf_bytes::put_u32(kv.payload, static_cast<std::uint32_t>(v));
    return kv;
}
inline GgufKv gguf_float32(std::string key, float v) {
    GgufKv kv{std::move(key), GgufValueType::Float32, {}};
    std::uint32_t u;
    std::memcpy(&u, &v, 4);
    gguf_bytes::put_u32(kv.payload, u);
    return kv;
}
inline GgufKv gguf_bool(std::string key, bool v) { return {std::move(key), GgufValueType::Bool, std::string(1, v ? '\1' : '\0')}; }
inline GgufKv gguf_string(std::string key, std::string_view v) {
    GgufKv kv{std::move(key), GgufValueType::String, {}};
    gguf_bytes::put_string(kv.payload, v);
    return kv;
}
/// An array of fixed-size elements from their little-endian bytes.
inline GgufKv gguf_array(std::string key, GgufValueType element, std::uint64_t count, std::string_view element_bytes) {
    GgufKv kv{std::move(key), GgufValueType::Array, {}};
    gguf_bytes::put_u32(kv.payload, static_cast<std::uint32_t>(element));
    gguf_bytes::put_u64(kv.payload, count);
    kv.payload.append(element_bytes);
    return kv;
}
inline GgufKv gguf_int32_array(std::string key, const std::vector<std::int32_t>& v) {
    std::string b;
    for (auto x : v) gguf_bytes::put_u32(b, static_cast<std::uint32_t>(x));
    return gguf_array(std::move(key), GgufValueType::Int32, v.size(), b);
}
inline GgufKv gguf_bool_array(std::string key, const std::vector<bool>& v) {
    std::string b;
    for (bool x : v) b.push_back(x ? '\1' : '\0');
    return gguf_array(std::move(key), GgufValueType::Bool, v.size(), b);
}
inline GgufKv gguf_string_array(std::string key, const std::vector<std::string>& v) {
    std::string b;
    for (const auto& s : v) gguf_bytes::put_string(b, s);
    return gguf_array(std::move(key), GgufValueType::String, v.size(), b);
}

/// One tensor's entry in a GGUF header: its name, dims (fastest first), type and data bytes.
struct GgufTensorHeader {
    std::string name;
    std::vector<std::uint64_t> ne;
    GgmlType type = GgmlType::F32;
    std::uint64_t size_bytes = 0;
};

namespace gguf_bytes {

/// The header of a GGUF v3 file, padded to `alignment` (where the data starts), and each
/// tensor's data offset from there.
inline std::string header(const std::vector<GgufKv>& kvs, const std::vector<GgufTensorHeader>& tensors, std::uint64_t alignment,
                          std::vector<std::uint64_t>& offsets) {
    std::string out = "GGUF";
    put_u32(out, 3);
    put_u64(out, tensors.size());
    put_u64(out, kvs.size());
    for (const auto& kv : kvs) {
        put_string(out, kv.key);
        put_u32(out, static_cast<std::uint32_t>(kv.type));
        out += kv.payload;
    }
    const auto align = [&](std::uint64_t n) { return (n + alignment - 1) / alignment * alignment; };
    std::uint64_t offset = 0;
    offsets.clear();
    for (const auto& t : tensors) {
        put_string(out, t.name);
        put_u32(out, static_cast<std::uint32_t>(t.ne.size()));
        for (auto n : t.ne) put_u64(out, n);
        put_u32(out, static_cast<std::uint32_t>(t.type));
        put_u64(out, offset);
        offsets.push_back(offset);
        offset = align(offset + t.size_bytes);
    }
    out.resize(static_cast<std::size_t>(align(out.size())), '\0');
    return out;
}

}  // namespace gguf_bytes

/// The bytes of a GGUF v3 file holding `kvs` (in order) and `tensors` (data aligned to
/// `alignment`; a `general.alignment` key, if wanted, is the caller's).
inline std::string gguf_file_bytes(const std::vector<GgufKv>& kvs, const std::vector<GgufTensorOut>& tensors,
                                   std::uint64_t alignment = GgufFile::kDefaultAlignment) {
    std::vector<GgufTensorHeader> headers;
    for (const auto& t : tensors) headers.push_back({t.name, t.ne, t.type, t.data.size()});
    std::vector<std::uint64_t> offsets;
    std::string out = gguf_bytes::header(kvs, headers, alignment, offsets);
    const std::size_t data_start = out.size();
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        out.resize(static_cast<std::size_t>(data_start + offsets[i]), '\0');
        out += tensors[i].data;
    }
    return out;
}

inline void write_gguf(const std::filesystem::path& path, const std::vector<GgufKv>& kvs, const std::vector<GgufTensorOut>& tensors,
                       std::uint64_t alignment = GgufFile::kDefaultAlignment) {
    const std::string bytes = gguf_file_bytes(kvs, tensors, alignment);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw IoError(path.string() + ": cannot write");
}

/// Writes a GGUF file whose tensor data is produced while writing, so that a file larger than
/// memory never exists in memory: `produce(i, write)` must pass tensor i's size_bytes bytes, in
/// order, to `write(data, n)` (in as many pieces as it likes). Returns the file's size.
/// IoError if the file cannot be written; InvalidArgument if a tensor's bytes do not add up.
template <class Produce>
std::uint64_t write_gguf_streaming(const std::filesystem::path& path, const std::vector<GgufKv>& kvs,
                                   const std::vector<GgufTensorHeader>& tensors, Produce&& produce,
                                   std::uint64_t alignment = GgufFile::kDefaultAlignment) {
    std::vector<std::uint64_t> offsets;
    const std::string head = gguf_bytes::header(kvs, tensors, alignment, offsets);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) throw IoError(path.string() + ": cannot open for writing");
    out.write(head.data(), static_cast<std::streamsize>(head.size()));
    std::uint64_t at = 0;  // bytes of data written
    const std::string zeros(static_cast<std::size_t>(alignment), '\0');
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        out.write(zeros.data(), static_cast<std::streamsize>(offsets[i] - at));
        at = offsets[i];
        std::uint64_t written = 0;
        produce(i, [&](const void* data, std::size_t n) {
            if (written + n > tensors[i].size_bytes)
                throw InvalidArgument("write_gguf_streaming: tensor '" + tensors[i].name + "' was given more than its " +
                                      std::to_string(tensors[i].size_bytes) + " bytes");
            out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
            written += n;
        });
        if (written != tensors[i].size_bytes)
            throw InvalidArgument("write_gguf_streaming: tensor '" + tensors[i].name + "' was given " + std::to_string(written) +
                                  " of its " + std::to_string(tensors[i].size_bytes) + " bytes");
        at += written;
        if (!out) throw IoError(path.string() + ": write failed");
    }
    out.flush();
    if (!out) throw IoError(path.string() + ": write failed");
    return head.size() + at;
}

/// The key/values and tensors of `f`, to be edited and written again.
inline std::vector<GgufKv> gguf_kvs_of(const GgufFile& f) {
    std::vector<GgufKv> kvs;
    for (const auto& [key, v] : f.metadata()) kvs.push_back(gguf_copy(key, v));
    return kvs;
}
inline std::vector<GgufTensorOut> gguf_tensors_of(const GgufFile& f) {
    std::vector<GgufTensorOut> ts;
    for (const auto& t : f.tensors())
        ts.push_back({t.name, t.ne, t.type, std::string(reinterpret_cast<const char*>(f.data(t)), static_cast<std::size_t>(t.size_bytes))});
    return ts;
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
