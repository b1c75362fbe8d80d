// Writing safetensors files: the header is built with nlohmann/json, padded with spaces to a
// multiple of 8 bytes as the format recommends, then the tensors in order.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/tensor/dtype.hpp>
#include <gemma4/tensor/weight_view.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// A tensor to write: name, dtype, shape and its bytes (already in that dtype).
struct TensorBlob {
    std::string name;
    DType dtype;
    std::vector<std::int64_t> shape;
    std::vector<std::byte> bytes;
};

/// A tensor to write from memory it does not own (large matrices: no copy).
struct TensorRef {
    std::string name;
    DType dtype;
    std::vector<std::int64_t> shape;
    const std::byte* data;
    std::size_t size;
};

inline void write_safetensors(const std::filesystem::path& path, const std::vector<TensorRef>& tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
    nlohmann::json header = nlohmann::json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    std::size_t offset = 0;
    for (const TensorRef& t : tensors) {
        header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                          {"shape", t.shape},
                          {"data_offsets", {offset, offset + t.size}}};
        offset += t.size;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::ofstream out(path, std::ios::binary);
    if (!out) throw IoError(path.string() + ": cannot open for writing");
    const std::uint64_t n = text.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const TensorRef& t : tensors) out.write(reinterpret_cast<const char*>(t.data), static_cast<std::streamsize>(t.size));
    if (!out) throw IoError(path.string() + ": write failed");
}

inline void write_safetensors(const std::filesystem::path& path, const std::vector<TensorBlob>& tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
    std::vector<TensorRef> refs;
    refs.reserve(tensors.size());
    for (const TensorBlob& t : tensors) refs.push_back({t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()});
    write_safetensors(path, refs, metadata);
}

/// `values` stored as `dtype` (BF16/F16 rounded to nearest even).
inline std::vector<std::byte> encode_values(const std::vector<double>& values, DType dtype) {
    std::vector<std::byte> out(values.size() * dtype_size(dtype));
    for (std::size_t i = 0; i < values.size(); ++i) {
        std::byte* p = out.data() + i * dtype_size(dtype);
        switch (dtype) {
            case DType::BF16: {
                const std::uint16_t h = float_to_bf16(static_cast<float>(values[i]));
                std::memcpy(p, &h, 2);
                break;
            }
            case DType::F16: {
                const std::uint16_t h = float_to_f16(static_cast<float>(values[i]));
                std::memcpy(p, &h, 2);
                break;
            }
            case DType::F32: {
                const float f = static_cast<float>(values[i]);
                std::memcpy(p, &f, 4);
                break;
            }
            case DType::F64: std::memcpy(p, &values[i], 8); break;
            default: throw InvalidArgument("encode_values: cannot store " + std::string(dtype_name(dtype)));
        }
    }
    return out;
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
