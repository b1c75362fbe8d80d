// Safetensors reading: every malformed-header class is a FormatError naming the file and the
// tensor; writing and reading back round-trips every dtype.
#include <catch2/catch.hpp>

#include <gemma4/io/safetensors.hpp>
#include <gemma4/io/safetensors_writer.hpp>

#include "support/temp_dir.hpp"

#include <fstream>

using namespace gemma4;

namespace {

std::filesystem::path write_raw(const std::string& name, const std::string& header, std::size_t data_bytes,
                                std::optional<std::uint64_t> declared_len = std::nullopt) {
    const auto path = test::temp_dir("safetensors") .parent_path() / ("st_" + name + ".safetensors");
    std::ofstream out(path, std::ios::binary);
    const std::uint64_t n = declared_len.value_or(header.size());
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
    out << header;
    out << std::string(data_bytes, '\0');
    return path;
}

void expect_format_error(const std::filesystem::path& path, const std::string& message) {
    INFO(message);
    REQUIRE_THROWS_AS(SafetensorsFile(path), FormatError);
    REQUIRE_THROWS_WITH(SafetensorsFile(path), Catch::Contains(path.string()) && Catch::Contains(message));
}

}  // namespace

TEST_CASE("safetensors round trip in every dtype", "[io][safetensors]") {
    const auto dir = test::temp_dir("safetensors_roundtrip");
    const std::vector<double> values = {1.0, -2.5, 0.1, 3.14159, -0.0, 65504.0};
    std::vector<TensorBlob> blobs;
    for (DType t : {DType::BF16, DType::F16, DType::F32, DType::F64})
        blobs.push_back({"t." + std::string(dtype_name(t)), t, {2, 3}, encode_values(values, t)});
    write_safetensors(dir / "a.safetensors", blobs, {{"format", "pt"}});
    const SafetensorsFile f(dir / "a.safetensors");
    CHECK(f.metadata().at("format") == "pt");
    REQUIRE(f.entries().size() == 4);
    for (DType t : {DType::BF16, DType::F16, DType::F32, DType::F64}) {
        const WeightView v = f.view("t." + std::string(dtype_name(t)));
        CHECK(v.dtype == t);
        CHECK(v.shape == std::vector<std::int64_t>{2, 3});
        for (std::size_t i = 0; i < values.size(); ++i) CHECK(v.at<double>(static_cast<std::int64_t>(i)) == round_to_dtype(values[i], t));
    }
    // Zero-copy: the view points into the mapping, 8-byte aligned data area.
    CHECK(reinterpret_cast<std::uintptr_t>(f.view("t.F64").data) % 8 == 0);
}

TEST_CASE("malformed safetensors files are clear errors", "[io][safetensors][errors]") {
    const std::string ok = R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
    SECTION("empty file") {
        const auto p = write_raw("empty", "", 0);
        std::filesystem::resize_file(p, 0);
        expect_format_error(p, "empty file");
    }
    SECTION("truncated before the header length") {
        const auto p = write_raw("short", "", 0);
        std::filesystem::resize_file(p, 5);
        expect_format_error(p, "truncated: 5 bytes");
    }
    SECTION("absurd header length") { expect_format_error(write_raw("absurd", ok, 16, std::uint64_t(1) << 60), "is absurd"); }
    SECTION("header length past the end") {
        expect_format_error(write_raw("past", ok, 16, ok.size() + 100), "runs past the end of the file");
    }
    SECTION("header not JSON") { expect_format_error(write_raw("notjson", "{\"a\": [1, 2", 0), "header is not valid JSON"); }
    SECTION("header not an object") { expect_format_error(write_raw("array", "[1,2,3]", 0), "header is not a JSON object"); }
    SECTION("unknown dtype") {
        expect_format_error(write_raw("dtype", R"({"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", 2),
                            "tensor 'a': unsupported dtype 'F8_E4M3'");
    }
    SECTION("offsets past the file") {
        expect_format_error(write_raw("offsets", ok, 8), "tensor 'a': data_offsets end 16 is past the data area (8 bytes");
    }
    SECTION("offsets inconsistent with shape × dtype") {
        expect_format_error(write_raw("span", R"({"a":{"dtype":"F32","shape":[3,2],"data_offsets":[0,16]}})", 16),
                            "tensor 'a': data_offsets span 16 bytes but shape [3, 2] of F32 needs 24");
    }
    SECTION("inverted offsets") {
        expect_format_error(write_raw("inverted", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 16),
                            "data_offsets [8, 4] are invalid");
    }
    SECTION("negative dimension") {
        expect_format_error(write_raw("negdim", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
                            "shape has a negative or non-integer dimension");
    }
    SECTION("overlapping tensors") {
        expect_format_error(write_raw("overlap",
                                      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                      12),
                            "tensors 'a' and 'b' overlap");
    }
    SECTION("missing fields") {
        expect_format_error(write_raw("nodtype", R"({"a":{"shape":[2],"data_offsets":[0,8]}})", 8), "missing or non-string dtype");
        expect_format_error(write_raw("nooffs", R"({"a":{"dtype":"F32","shape":[2]}})", 8), "data_offsets must be [begin, end]");
        expect_format_error(write_raw("noshape", R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", 8), "missing shape");
    }
    SECTION("metadata not strings") {
        expect_format_error(write_raw("meta", R"({"__metadata__":{"format":1}})", 0), "__metadata__.format is not a string");
    }
    SECTION("missing file") {
        const auto p = std::filesystem::path(GEMMA4_TEST_TMP_DIR) / "does-not-exist.safetensors";
        REQUIRE_THROWS_AS(SafetensorsFile(p), IoError);
        REQUIRE_THROWS_WITH(SafetensorsFile(p), Catch::Contains("does-not-exist.safetensors: cannot open"));
    }
}
