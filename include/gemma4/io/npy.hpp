// NumPy .npy files (format version 1.0/2.0, little-endian, C order): write float/double/int32
// arrays, read them back with every header field checked.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/io/mapped_file.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

namespace detail {
template <class T>
constexpr const char* npy_descr() {
    if constexpr (std::is_same_v<T, float>) return "<f4";
    else if constexpr (std::is_same_v<T, double>) return "<f8";
    else if constexpr (std::is_same_v<T, std::int32_t>) return "<i4";
    else static_assert(sizeof(T) == 0, "unsupported .npy element type");
}
}  // namespace detail

/// Writes `data` (C order, `shape` product elements) as a .npy file.
template <class T>
void write_npy(const std::filesystem::path& path, std::span<const T> data, std::span<const std::int64_t> shape) {
    std::int64_t count = 1;
    for (auto d : shape) count *= d;
    if (count != static_cast<std::int64_t>(data.size()))
        throw InvalidArgument(path.string() + ": .npy shape does not match the data size");
    std::string dict = std::string("{'descr': '") + detail::npy_descr<T>() + "', 'fortran_order': False, 'shape': (";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        dict += std::to_string(shape[i]);
        if (shape.size() == 1 || i + 1 < shape.size()) dict += ",";
        if (i + 1 < shape.size()) dict += " ";
    }
    dict += "), }";
    // magic(6) + version(2) + len(2) + dict + '\n' padded to a multiple of 64
    std::size_t total = 10 + dict.size() + 1;
    dict.append((64 - total % 64) % 64, ' ');
    dict += '\n';
    std::ofstream out(path, std::ios::binary);
    if (!out) throw IoError(path.string() + ": cannot open for writing");
    const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
    out.write(magic, 8);
    const std::uint16_t hlen = static_cast<std::uint16_t>(dict.size());
    const unsigned char len_bytes[2] = {static_cast<unsigned char>(hlen & 0xff), static_cast<unsigned char>(hlen >> 8)};
    out.write(reinterpret_cast<const char*>(len_bytes), 2);
    out.write(dict.data(), static_cast<std::streamsize>(dict.size()));
    out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size_bytes()));
    if (!out) throw IoError(path.string() + ": write failed");
}

/// A .npy array read into memory.
template <class T>
struct NpyArray {
    std::vector<std::int64_t> shape;
    std::vector<T> data;
};

/// Reads a .npy array of element type T (exactly; no conversions), C order only.
template <class T>
NpyArray<T> read_npy(const std::filesystem::path& path) {
    MappedFile file(path);
    const auto bytes = file.bytes();
    const std::string name = path.string();
    if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0)
        throw FormatError(name + ": not a .npy file (bad magic or truncated)");
    const auto major = static_cast<unsigned>(bytes[6]);
    std::size_t header_len = 0, offset = 0;
    if (major == 1) {
        header_len = static_cast<std::size_t>(bytes[8]) | (static_cast<std::size_t>(bytes[9]) << 8);
        offset = 10;
    } else if (major == 2 || major == 3) {
        if (bytes.size() < 12) throw FormatError(name + ": truncated .npy header");
        header_len = 0;
        for (int i = 0; i < 4; ++i) header_len |= static_cast<std::size_t>(bytes[8 + i]) << (8 * i);
        offset = 12;
    } else {
        throw FormatError(name + ": unsupported .npy version " + std::to_string(major));
    }
    if (header_len > bytes.size() - offset) throw FormatError(name + ": .npy header runs past the end of the file");
    const std::string header(reinterpret_cast<const char*>(bytes.data() + offset), header_len);
    auto field = [&](const std::string& key) -> std::string {
        const auto k = header.find("'" + key + "'");
        if (k == std::string::npos) throw FormatError(name + ": .npy header has no '" + key + "'");
        auto colon = header.find(':', k);
        if (colon == std::string::npos) throw FormatError(name + ": .npy header field '" + key + "' is malformed");
        auto start = header.find_first_not_of(' ', colon + 1);
        if (start == std::string::npos) throw FormatError(name + ": .npy header field '" + key + "' is malformed");
        std::size_t end;
        if (header[start] == '(') end = header.find(')', start) + 1;
        else if (header[start] == '\'') end = header.find('\'', start + 1) + 1;
        else end = header.find_first_of(",}", start);
        if (end == std::string::npos || end == 0 || end <= start)
            throw FormatError(name + ": .npy header field '" + key + "' is malformed");
        return header.substr(start, end - start);
    };
    const std::string descr = field("descr");
    if (descr != std::string("'") + detail::npy_descr<T>() + "'")
        throw FormatError(name + ": .npy dtype is " + descr + ", expected '" + detail::npy_descr<T>() + "'");
    if (field("fortran_order") != "True" && field("fortran_order") != "False")
        throw FormatError(name + ": .npy fortran_order is malformed");
    if (field("fortran_order") == "True") throw FormatError(name + ": Fortran-order .npy arrays are not supported");
    const std::string shape_text = field("shape");
    NpyArray<T> out;
    std::int64_t count = 1;
    for (std::size_t i = 1; i + 1 < shape_text.size();) {
        while (i + 1 < shape_text.size() && (shape_text[i] == ' ' || shape_text[i] == ',')) ++i;
        if (i + 1 >= shape_text.size()) break;
        std::int64_t v = 0;
        bool digits = false;
        while (i + 1 < shape_text.size() && shape_text[i] >= '0' && shape_text[i] <= '9') {
            v = v * 10 + (shape_text[i] - '0');
            if (v > (std::int64_t(1) << 40)) throw FormatError(name + ": .npy shape is absurd");
            ++i;
            digits = true;
        }
        if (!digits) throw FormatError(name + ": .npy shape " + shape_text + " is malformed");
        out.shape.push_back(v);
        // Checked before multiplying: two dimensions of up to 2^40 would overflow int64.
        if (v != 0 && count > (std::int64_t(1) << 40) / v) throw FormatError(name + ": .npy shape is absurd");
        count *= v;
    }
    const std::size_t data_offset = offset + header_len;
    const std::size_t need = static_cast<std::size_t>(count) * sizeof(T);
    if (bytes.size() - data_offset != need)
        throw FormatError(name + ": .npy data has " + std::to_string(bytes.size() - data_offset) + " bytes, shape " +
                          shape_text + " needs " + std::to_string(need));
    out.data.resize(static_cast<std::size_t>(count));
    if (need) std::memcpy(out.data.data(), bytes.data() + data_offset, need);
    return out;
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
