// Inputs found by the fuzzers in fuzz/ (docs/fuzzing.md) that once crashed or misbehaved; each
// must now be a gemma4::Error with a precise message.
#include <catch2/catch.hpp>

#include <gemma4/io/npy.hpp>
#include <gemma4/io/safetensors.hpp>
#include <gemma4/model/checkpoint.hpp>

#include "support/temp_dir.hpp"

#include <fstream>
#include <string>

using namespace gemma4;

namespace {
void write_file(const std::filesystem::path& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
}  // namespace

// fuzz_npy: two dimensions of 2^40 each passed the per-dimension limit, and their product
// overflowed int64 (UBSan: signed integer overflow in read_npy) before the total was checked.
TEST_CASE("fuzz: .npy shape whose element count overflows int64", "[io][npy][fuzz]") {
    const auto dir = test::temp_dir("fuzz_npy_overflow");
    const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }\n";
    std::string file = "\x93NUMPY\x01";
    file += '\0';
    file += static_cast<char>(dict.size() & 0xff);
    file += static_cast<char>(dict.size() >> 8);
    file += dict;
    write_file(dir / "huge.npy", file);
    const std::string expected = (dir / "huge.npy").string() + ": .npy shape is absurd";
    REQUIRE_THROWS_AS(read_npy<float>(dir / "huge.npy"), FormatError);
    REQUIRE_THROWS_WITH(read_npy<float>(dir / "huge.npy"), expected);
}

// fuzz_safetensors: nlohmann reports a number too large for a double ("1e400") as out_of_range,
// not parse_error; only parse_error was caught, so the nlohmann exception escaped the loader.
// The same catch was fixed in config_json, checkpoint (the shard index), tokenizer_config and
// generation_config.
TEST_CASE("fuzz: safetensors header with a number overflowing a double", "[io][safetensors][fuzz]") {
    const auto dir = test::temp_dir("fuzz_safetensors_overflow");
    const std::string header = R"({"x":{"dtype":"F32","shape":[1e400],"data_offsets":[0,4]}})";
    std::string file;
    for (int i = 0; i < 8; ++i) file += static_cast<char>((header.size() >> (8 * i)) & 0xff);
    file += header;
    file += std::string(4, '\0');
    write_file(dir / "model.safetensors", file);
    const std::string expected = (dir / "model.safetensors").string() +
                                 ": header is not valid JSON: [json.exception.out_of_range.406] number overflow parsing '1e400'";
    REQUIRE_THROWS_AS(SafetensorsFile(dir / "model.safetensors"), FormatError);
    REQUIRE_THROWS_WITH(SafetensorsFile(dir / "model.safetensors"), expected);
}

TEST_CASE("fuzz: shard index with a number overflowing a double", "[io][checkpoint][fuzz]") {
    const auto dir = test::temp_dir("fuzz_index_overflow");
    write_file(dir / "model.safetensors.index.json", R"({"metadata":{"total_size":1e999},"weight_map":{}})");
    const std::string expected = (dir / "model.safetensors.index.json").string() +
                                 ": not valid JSON: [json.exception.out_of_range.406] number overflow parsing '1e999'";
    REQUIRE_THROWS_AS(TensorStore(dir), FormatError);
    REQUIRE_THROWS_WITH(TensorStore(dir), expected);
}
