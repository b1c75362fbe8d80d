// Safetensors reading: one file, mmap'd, every header bound checked before any tensor byte is
// touched. Tensor data are returned as zero-copy WeightViews into the mapping.
//
// Layout: u64 little-endian header length N, N bytes of JSON, then the data area. The JSON maps
// tensor names to {dtype, shape, data_offsets: [begin, end)} relative to the data area, plus an
// optional "__metadata__" object of strings.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/io/mapped_file.hpp>
#include <gemma4/tensor/weight_view.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

struct SafetensorsEntry {
    DType dtype;
    std::vector<std::int64_t> shape;
    std::size_t begin = 0;  ///< offset in the data area
    std::size_t end = 0;
};

class SafetensorsFile {
public:
    /// Headers larger than this are rejected as absurd (the 12B's is 89 KB).
    static constexpr std::uint64_t kMaxHeaderBytes = 100u << 20;

    explicit SafetensorsFile(const std::filesystem::path& path) : file_(path) { parse(); }

    const std::filesystem::path& path() const { return file_.path(); }
    const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    bool contains(const std::string& name) const { return entries_.count(name) != 0; }

    WeightView view(const std::string& name) const {
        auto it = entries_.find(name);
        if (it == entries_.end()) throw ShapeError(path().string() + ": no tensor '" + name + "'");
        const SafetensorsEntry& e = it->second;
        return WeightView{name, e.dtype, e.shape, data_area_ + e.begin, e.end - e.begin};
    }

private:
    [[noreturn]] void fail(const std::string& what) const {
        throw FormatError(path().string() + ": " + what);
    }

    static std::int64_t non_negative_int(const nlohmann::json& v) {
        if (v.is_number_unsigned()) {
            const auto u = v.get<std::uint64_t>();
            return u > (std::uint64_t(1) << 62) ? -1 : static_cast<std::int64_t>(u);
        }
        if (v.is_number_integer()) return v.get<std::int64_t>() < 0 ? -1 : v.get<std::int64_t>();
        return -1;
    }

    void parse() {
        const std::size_t size = file_.size();
        if (size == 0) fail("empty file (not a safetensors file)");
        if (size < 8) fail("truncated: " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
        std::uint64_t header_len = 0;
        for (int i = 0; i < 8; ++i)
            header_len |= static_cast<std::uint64_t>(std::to_integer<unsigned>(file_.data()[i])) << (8 * i);
        if (header_len > kMaxHeaderBytes)
            fail("header length " + std::to_string(header_len) + " is absurd (limit " + std::to_string(kMaxHeaderBytes) + ")");
        if (header_len > size - 8)
            fail("header length " + std::to_string(header_len) + " runs past the end of the file (" + std::to_string(size) + " bytes)");
        const char* hp = reinterpret_cast<const char*>(file_.data() + 8);
        nlohmann::json header;
        try {
            header = nlohmann::json::parse(hp, hp + header_len);
        } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number overflow
            fail(std::string("header is not valid JSON: ") + e.what());
        }
        if (!header.is_object()) fail("header is not a JSON object");
        data_area_ = file_.data() + 8 + header_len;
        const std::size_t data_size = size - 8 - static_cast<std::size_t>(header_len);

        for (auto it = header.begin(); it != header.end(); ++it) {
            const std::string& name = it.key();
            const nlohmann::json& v = it.value();
            if (name == "__metadata__") {
                if (!v.is_object()) fail("__metadata__ is not an object");
                for (auto m = v.begin(); m != v.end(); ++m) {
                    if (!m.value().is_string()) fail("__metadata__." + m.key() + " is not a string");
                    metadata_[m.key()] = m.value().get<std::string>();
                }
                continue;
            }
            const std::string where = "tensor '" + name + "'";
            if (!v.is_object()) fail(where + ": entry is not an object");
            if (!v.contains("dtype") || !v["dtype"].is_string()) fail(where + ": missing or non-string dtype");
            const std::string dtype_text = v["dtype"].get<std::string>();
            const auto dtype = parse_safetensors_dtype(dtype_text);
            if (!dtype) fail(where + ": unsupported dtype '" + dtype_text + "'");
            if (!v.contains("shape") || !v["shape"].is_array()) fail(where + ": missing shape");
            SafetensorsEntry e{*dtype, {}, 0, 0};
            std::uint64_t numel = 1;
            for (const auto& d : v["shape"]) {
                const std::int64_t n = non_negative_int(d);
                if (n < 0) fail(where + ": shape has a negative or non-integer dimension");
                if (n != 0 && numel > (std::uint64_t(1) << 50) / static_cast<std::uint64_t>(n))
                    fail(where + ": shape " + d.dump() + " is absurdly large");
                numel *= static_cast<std::uint64_t>(n);
                e.shape.push_back(n);
            }
            const auto& offs = v.contains("data_offsets") ? v["data_offsets"] : nlohmann::json();
            if (!offs.is_array() || offs.size() != 2) fail(where + ": data_offsets must be [begin, end]");
            const std::int64_t b = non_negative_int(offs[0]), en = non_negative_int(offs[1]);
            if (b < 0 || en < 0 || en < b) fail(where + ": data_offsets [" + offs[0].dump() + ", " + offs[1].dump() + "] are invalid");
            if (static_cast<std::uint64_t>(en) > data_size)
                fail(where + ": data_offsets end " + std::to_string(en) + " is past the data area (" + std::to_string(data_size) + " bytes; file truncated?)");
            const std::uint64_t expected = numel * dtype_size(*dtype);
            if (static_cast<std::uint64_t>(en - b) != expected)
                fail(where + ": data_offsets span " + std::to_string(en - b) + " bytes but shape " + shape_string(e.shape) + " of " +
                     dtype_text + " needs " + std::to_string(expected));
            e.begin = static_cast<std::size_t>(b);
            e.end = static_cast<std::size_t>(en);
            entries_.emplace(name, std::move(e));
        }
        // No two tensors may share bytes.
        std::vector<std::pair<std::size_t, const std::string*>> starts;
        for (const auto& [name, e] : entries_)
            if (e.end > e.begin) starts.push_back({e.begin, &name});
        std::sort(starts.begin(), starts.end());
        for (std::size_t i = 1; i < starts.size(); ++i) {
            const auto& prev = entries_.at(*starts[i - 1].second);
            if (starts[i].first < prev.end)
                fail("tensors '" + *starts[i - 1].second + "' and '" + *starts[i].second + "' overlap");
        }
    }

    MappedFile file_;
    const std::byte* data_area_ = nullptr;
    std::map<std::string, SafetensorsEntry> entries_;
    std::map<std::string, std::string> metadata_;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
