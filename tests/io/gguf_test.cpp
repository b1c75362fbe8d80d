// GGUF reading: the fixtures' metadata and tensor infos as written by llama.cpp's tools, every
// tensor dequantized bit for bit as ggml does, values of every metadata type, and every kind of
// malformed file as a FormatError naming the file and the key or tensor at fault.
#include <catch2/catch.hpp>

#include <gemma4/io/gguf.hpp>
#include <gemma4/io/gguf_writer.hpp>
#include <gemma4/tensor/ggml_blocks.hpp>

#include "support/gguf_fixtures.hpp"
#include "support/skip.hpp"
#include "support/message_matcher.hpp"
#include "support/temp_dir.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <string>

using namespace gemma4;

namespace {

std::filesystem::path write_bytes(const std::string& name, const std::string& bytes) {
    static const auto dir = test::temp_dir("gguf_io");
    const auto path = dir / name;
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
}

std::string f32_bytes(const std::vector<float>& v) {
    std::string s(v.size() * 4, '\0');
    std::memcpy(s.data(), v.data(), s.size());
    return s;
}

/// A small valid file: a few keys and two F32 tensors.
std::string small_file() {
    return gguf_file_bytes({gguf_string("general.architecture", "gemma4"), gguf_uint32("a.count", 7),
                            gguf_int32_array("a.list", {1, -2, 3})},
                           {{"t0", {4, 2}, GgmlType::F32, f32_bytes({1, 2, 3, 4, 5, 6, 7, 8})},
                            {"t1", {3}, GgmlType::F32, f32_bytes({9, 10, 11})}});
}

/// The header bytes of a file with no key/values, `n_tensors` claimed, then `rest`.
std::string header(std::uint64_t n_tensors, std::uint64_t n_kv, const std::string& rest, std::uint32_t version = 3) {
    std::string out = "GGUF";
    gguf_bytes::put_u32(out, version);
    gguf_bytes::put_u64(out, n_tensors);
    gguf_bytes::put_u64(out, n_kv);
    return out + rest;
}

/// One tensor info record.
std::string tensor_info(const std::string& name, const std::vector<std::uint64_t>& ne, std::uint32_t type, std::uint64_t offset) {
    std::string out;
    gguf_bytes::put_string(out, name);
    gguf_bytes::put_u32(out, static_cast<std::uint32_t>(ne.size()));
    for (auto n : ne) gguf_bytes::put_u64(out, n);
    gguf_bytes::put_u32(out, type);
    gguf_bytes::put_u64(out, offset);
    return out;
}

/// Header + infos, padded to 32, then `data_bytes` zero bytes.
std::string with_data(const std::string& head, std::size_t data_bytes) {
    std::string out = head;
    out.resize((out.size() + 31) / 32 * 32, '\0');
    out.append(data_bytes, '\0');
    return out;
}

void expect_format_error(const std::string& bytes, const std::string& needle) {
    const auto path = write_bytes("bad.gguf", bytes);
    CHECK_THROWS_MATCHES(GgufFile(path), FormatError, test::Has(path.string()) && test::Has(needle));
}

}  // namespace

TEST_CASE("gguf: fixture metadata as llama.cpp writes it", "[io][gguf]") {
    const GgufFile f(test::repo_gguf_dir() / "tiny-gemma4-q8_0.gguf");
    CHECK(f.version() == 3);
    CHECK(f.alignment() == 32);
    CHECK(f.data_offset() % 32 == 0);
    REQUIRE(f.metadata().size() == 40);
    CHECK(f.metadata().front().first == "general.architecture");
    // llama-quantize sets general.file_type again, which moves it to the end
    CHECK(f.metadata().back().first == "general.file_type");
    CHECK(f.get_string("general.architecture") == "gemma4");
    CHECK(f.get_string("general.name") == "Tiny Gemma4");
    CHECK(f.require("gemma4.block_count").type() == GgufValueType::UInt32);
    CHECK(f.get_int("gemma4.block_count") == 6);
    CHECK(f.get_int("general.file_type") == 7);
    CHECK(f.get_int("gemma4.attention.key_length") == 32);
    CHECK(f.get_int("gemma4.attention.key_length_swa") == 16);
    const GgufValue& kv = f.get_array("gemma4.attention.head_count_kv");
    CHECK(kv.type_string() == "ARRAY[INT32]");
    REQUIRE(kv.size() == 6);
    std::vector<std::int64_t> kv_values;
    for (std::size_t i = 0; i < kv.size(); ++i) kv_values.push_back(*kv.at(i).as_int());
    CHECK(kv_values == std::vector<std::int64_t>{2, 2, 1, 2, 2, 1});
    const GgufValue& pattern = f.get_array("gemma4.attention.sliding_window_pattern");
    CHECK(pattern.element_type() == GgufValueType::Bool);
    std::vector<bool> sliding;
    for (std::size_t i = 0; i < pattern.size(); ++i) sliding.push_back(*pattern.at(i).as_bool());
    CHECK(sliding == std::vector<bool>{true, true, false, true, true, false});
    CHECK(f.require("gemma4.attention.layer_norm_rms_epsilon").type() == GgufValueType::Float32);
    CHECK(f.get_float("gemma4.attention.layer_norm_rms_epsilon") == static_cast<double>(1e-6f));
    CHECK(f.get_float("gemma4.rope.freq_base") == 1e6);
    CHECK(f.get_float("gemma4.rope.freq_base_swa") == 1e4);
    CHECK(f.get_bool("tokenizer.ggml.add_bos_token"));
    CHECK_FALSE(f.get_bool("tokenizer.ggml.add_eos_token"));
    const GgufValue& tokens = f.get_array("tokenizer.ggml.tokens");
    REQUIRE(tokens.strings().size() == 384);
    CHECK(tokens.strings()[2] == "<bos>");
    CHECK(tokens.strings()[131] == "<0x03>");
    const GgufValue& scores = f.get_array("tokenizer.ggml.scores");
    CHECK(scores.element_type() == GgufValueType::Float32);
    CHECK(*scores.at(383).as_double() == -1000.0);
    CHECK(f.get_array("tokenizer.ggml.merges").strings().front() == "\xe2\x96\x81 t");
    // typed access names the key
    CHECK_THROWS_MATCHES(f.get_int("gemma4.nope"), ConfigError, test::Has("'gemma4.nope': missing"));
    CHECK_THROWS_MATCHES(f.get_string("gemma4.block_count"), ConfigError,
                         test::Has("'gemma4.block_count': expected a STRING, got UINT32"));
}

TEST_CASE("gguf: tensor infos keep GGUF's dimension order", "[io][gguf]") {
    const GgufFile f(test::repo_gguf_dir() / "tiny-gemma4-q4_0-mixed.gguf");
    CHECK(f.tensors().size() == 85);
    const GgufTensorInfo& embd = f.tensor("token_embd.weight");
    CHECK(embd.ne == std::vector<std::uint64_t>{64, 384});
    CHECK(embd.shape() == std::vector<std::int64_t>{384, 64});
    CHECK(embd.type == GgmlType::Q8_0);
    CHECK(embd.size_bytes == 384 * 2 * 34);
    const GgufTensorInfo& q = f.tensor("blk.5.attn_q.weight");
    CHECK(q.ne == std::vector<std::uint64_t>{64, 128});
    CHECK(q.type == GgmlType::Q4_0);
    CHECK(q.size_bytes == 128 * 2 * 18);
    CHECK(f.tensor("rope_freqs.weight").type == GgmlType::F32);
    CHECK(f.tensor("blk.0.layer_output_scale.weight").ne == std::vector<std::uint64_t>{1});
    CHECK(f.find_tensor("blk.5.attn_v.weight") == nullptr);
    CHECK_THROWS_MATCHES(f.tensor("output.weight"), ShapeError, test::Has("no tensor 'output.weight'"));
    for (const auto& t : f.tensors()) CHECK(t.offset % 32 == 0);
}

namespace {

/// Every tensor of `name` dequantized (float and double) against the fixture's dequantized file.
void check_dequantized_bit_for_bit(const std::string& name) {
    const GgufFile f(test::gguf_fixture(name));
    const test::ExpectedTensors expected(name);
    const auto hf_names = expected.hf_names();
    std::size_t values = 0;
    for (const GgufTensorInfo& t : f.tensors()) {
        INFO(name << ": " << t.name << " (" << ggml_type_name(t.type) << ")");
        const std::string hf = test::hf_name_of(t.name, hf_names);
        REQUIRE(!hf.empty());
        const WeightView want = expected.view(t.name, hf);
        REQUIRE(want.shape == t.shape());
        const auto n = static_cast<std::int64_t>(t.numel);
        std::vector<float> got(static_cast<std::size_t>(n));
        std::vector<double> got64(static_cast<std::size_t>(n));
        ggml::dequantize_row(t.type, f.data(t), n, got.data());
        ggml::dequantize_row(t.type, f.data(t), n, got64.data());
        std::int64_t differ = 0, differ64 = 0;
        for (std::int64_t i = 0; i < n; ++i) {
            const float w = want.at<float>(i);
            differ += std::memcmp(&w, &got[static_cast<std::size_t>(i)], 4) != 0;
            differ64 += static_cast<double>(w) != got64[static_cast<std::size_t>(i)];
        }
        CHECK(differ == 0);
        CHECK(differ64 == 0);
        values += static_cast<std::size_t>(n);
    }
    CHECK(values > 0);
}

}  // namespace

TEST_CASE("gguf: Q8_0, Q4_0 and mixed fixtures dequantize bit for bit", "[io][gguf]") {
    for (const auto& name : test::repo_gguf_fixtures()) check_dequantized_bit_for_bit(name);
}

namespace {

/// FNV-1a (64 bits) of the little-endian float32 bytes of `values`.
std::uint64_t fnv1a64_of_floats(const std::vector<float>& values) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (const float v : values) {
        unsigned char b[4];
        std::memcpy(b, &v, 4);
        for (const unsigned char c : b) h = (h ^ c) * 0x100000001b3ull;
    }
    return h;
}

}  // namespace

TEST_CASE("gguf: the carried K-quant fixtures dequantize to ggml's values (digests)", "[io][gguf]") {
    // kquant-dequant-digests.json holds, per tensor, the FNV-1a digest of ggml's dequantization
    // (the shared data's .dequant.safetensors), so a clone on its own checks every value too.
    std::ifstream in(test::repo_gguf_dir() / "kquant-dequant-digests.json");
    REQUIRE(in);
    const nlohmann::json digests = nlohmann::json::parse(in);
    REQUIRE(digests.size() == 2);
    std::set<std::string> types;
    for (const auto& [name, tensors] : digests.items()) {
        const GgufFile f(test::repo_gguf_dir() / (name + ".gguf"));
        REQUIRE(tensors.size() == f.tensors().size());
        for (const GgufTensorInfo& t : f.tensors()) {
            INFO(name << ": " << t.name << " (" << ggml_type_name(t.type) << ")");
            const nlohmann::json& want = tensors.at(t.name);
            CHECK(want.at("type").get<std::string>() == ggml_type_name(t.type));
            REQUIRE(want.at("values").get<std::int64_t>() == static_cast<std::int64_t>(t.numel));
            const auto n = static_cast<std::int64_t>(t.numel);
            std::vector<float> got(static_cast<std::size_t>(n));
            std::vector<double> got64(static_cast<std::size_t>(n));
            ggml::dequantize_row(t.type, f.data(t), n, got.data());
            ggml::dequantize_row(t.type, f.data(t), n, got64.data());
            char hex[17];
            std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a64_of_floats(got)));
            CHECK(want.at("fnv1a64").get<std::string>() == hex);
            std::int64_t differ64 = 0;  // the double path reads the same values
            for (std::int64_t i = 0; i < n; ++i) differ64 += static_cast<double>(got[static_cast<std::size_t>(i)]) != got64[static_cast<std::size_t>(i)];
            CHECK(differ64 == 0);
            types.insert(std::string(ggml_type_name(t.type)));
        }
    }
    CHECK(types == std::set<std::string>{"F32", "Q4_K", "Q6_K", "IQ4_XS"});
}

TEST_CASE("gguf: F32, Q4_K and Q6_K fixtures dequantize bit for bit", "[io][gguf]") {
    // Q4_K included: its multiply-subtract is computed unfused, so the tolerance is 0 ulp.
    for (const auto& name : test::shared_gguf_fixtures()) {
        if (!test::have_shared_fixture(name)) GEMMA4_SKIP(name << ": its dequantized values are not here (shared data)");
        check_dequantized_bit_for_bit(name);
    }
}

TEST_CASE("gguf: Q8_0 and Q4_0 rows repack into Q8 / Q4 without changing a value", "[io][gguf]") {
    const GgufFile f(test::repo_gguf_dir() / "tiny-gemma4-q4_0-mixed.gguf");
    for (const std::string name : {"token_embd.weight", "blk.0.ffn_down.weight", "blk.5.attn_q.weight"}) {
        const GgufTensorInfo& t = f.tensor(name);
        const DType q = t.type == GgmlType::Q8_0 ? DType::Q8 : DType::Q4;
        const std::int64_t cols = t.row_length();
        std::vector<std::byte> codes(static_cast<std::size_t>(quant::row_bytes(q, cols)));
        std::vector<std::uint16_t> scales(static_cast<std::size_t>(quant::blocks_per_row(cols, 32)));
        std::vector<float> want(static_cast<std::size_t>(cols));
        for (std::int64_t r = 0; r < t.rows(); ++r) {
            const std::byte* row = f.data(t) + ggml::bytes_of(t.type, cols) * r;
            ggml::dequantize_row(t.type, row, cols, want.data());
            if (q == DType::Q8) ggml::q8_0_to_q8_row(row, cols, codes.data(), scales.data());
            else ggml::q4_0_to_q4_row(row, cols, codes.data(), scales.data());
            for (std::int64_t i = 0; i < quant::padded_cols(cols); ++i) {
                const float v = quant::dequantize_at(q, 32, codes.data(), scales.data(), i);
                if (i < cols) REQUIRE(v == want[static_cast<std::size_t>(i)]);
                else REQUIRE(v == 0.0f);  // padding
            }
        }
    }
    // Every nibble value, including 0 (code -8, which our own quantizer never writes).
    std::string block(18, '\0');
    const std::uint16_t d = float_to_f16(0.5f);
    std::memcpy(block.data(), &d, 2);
    for (int j = 0; j < 16; ++j) block[static_cast<std::size_t>(2 + j)] = static_cast<char>(j | ((15 - j) << 4));
    std::vector<std::byte> codes(64);
    std::vector<std::uint16_t> scales(4);
    ggml::q4_0_to_q4_row(reinterpret_cast<const std::byte*>(block.data()), 32, codes.data(), scales.data());
    for (int j = 0; j < 16; ++j) {
        CHECK(quant::dequantize_at(DType::Q4, 32, codes.data(), scales.data(), j) == 0.5f * static_cast<float>(j - 8));
        CHECK(quant::dequantize_at(DType::Q4, 32, codes.data(), scales.data(), j + 16) == 0.5f * static_cast<float>(7 - j));
    }
}

TEST_CASE("gguf: values of every metadata type, nested arrays included", "[io][gguf]") {
    std::string u64s, i8s, nested;
    gguf_bytes::put_u64(u64s, 0xffffffffffffffffull);
    gguf_bytes::put_u64(u64s, 5);
    i8s = std::string("\x80\x7f", 2);
    // [[1, 2], [3]] of UINT16, then an empty array of strings
    gguf_bytes::put_u32(nested, static_cast<std::uint32_t>(GgufValueType::UInt16));
    gguf_bytes::put_u64(nested, 2);
    gguf_bytes::put(nested, 1, 2);
    gguf_bytes::put(nested, 2, 2);
    gguf_bytes::put_u32(nested, static_cast<std::uint32_t>(GgufValueType::UInt16));
    gguf_bytes::put_u64(nested, 1);
    gguf_bytes::put(nested, 3, 2);
    gguf_bytes::put_u32(nested, static_cast<std::uint32_t>(GgufValueType::String));
    gguf_bytes::put_u64(nested, 0);
    const auto scalar = [](std::string key, GgufValueType t, std::uint64_t bits) {
        GgufKv kv{std::move(key), t, {}};
        gguf_bytes::put(kv.payload, bits, gguf_scalar_size(t));
        return kv;
    };
    double pi = 3.141592653589793;
    std::uint64_t pi_bits;
    std::memcpy(&pi_bits, &pi, 8);
    const std::vector<GgufKv> kvs{
        scalar("u8", GgufValueType::UInt8, 200),
        scalar("i8", GgufValueType::Int8, 0xfe),
        scalar("u16", GgufValueType::UInt16, 65535),
        scalar("i16", GgufValueType::Int16, 0x8000),
        scalar("u32", GgufValueType::UInt32, 4000000000u),
        gguf_int32("i32", -7),
        gguf_float32("f32", 0.1f),
        gguf_bool("b", true),
        gguf_string("s", "h\xc3\xa9llo"),
        scalar("u64", GgufValueType::UInt64, 0xffffffffffffffffull),
        scalar("i64", GgufValueType::Int64, 0x8000000000000000ull),
        scalar("f64", GgufValueType::Float64, pi_bits),
        gguf_array("u64s", GgufValueType::UInt64, 2, u64s),
        gguf_array("i8s", GgufValueType::Int8, 2, i8s),
        gguf_array("nested", GgufValueType::Array, 3, nested),
        gguf_string_array("strings", {"a", "", "c d"}),
    };
    const auto path = write_bytes("types.gguf", gguf_file_bytes(kvs, {}));
    const GgufFile f(path);
    CHECK(f.tensors().empty());
    CHECK(f.get_int("u8") == 200);
    CHECK(f.get_int("i8") == -2);
    CHECK(f.get_int("u16") == 65535);
    CHECK(f.get_int("i16") == -32768);
    CHECK(f.get_int("u32") == 4000000000);
    CHECK(f.get_int("i32") == -7);
    CHECK(f.get_float("f32") == static_cast<double>(0.1f));
    CHECK(f.get_bool("b"));
    CHECK(f.get_string("s") == "h\xc3\xa9llo");
    CHECK_FALSE(f.require("u64").as_int());  // above INT64_MAX
    CHECK(f.require("u64").bits() == 0xffffffffffffffffull);
    CHECK(f.get_int("i64") == INT64_MIN);
    CHECK(f.get_float("f64") == pi);
    CHECK(f.require("u64s").at(0).bits() == 0xffffffffffffffffull);
    CHECK(*f.require("u64s").at(1).as_int() == 5);
    CHECK(*f.require("i8s").at(0).as_int() == -128);
    CHECK(*f.require("i8s").at(1).as_int() == 127);
    const GgufValue& n = f.require("nested");
    CHECK(n.type_string() == "ARRAY[ARRAY]");
    REQUIRE(n.size() == 3);
    CHECK(n.arrays()[0].size() == 2);
    CHECK(*n.arrays()[0].at(1).as_int() == 2);
    CHECK(*n.at(1).at(0).as_int() == 3);
    CHECK(n.arrays()[2].element_type() == GgufValueType::String);
    CHECK(n.arrays()[2].size() == 0);
    CHECK(f.require("strings").strings() == std::vector<std::string_view>{"a", "", "c d"});
    CHECK_THROWS_AS(n.at(3), InvalidArgument);
    // The writer's copy of each value reads back the same bytes.
    const auto copy = write_bytes("types_copy.gguf", gguf_file_bytes(gguf_kvs_of(f), {}));
    const GgufFile g(copy);
    for (const auto& [key, v] : f.metadata()) CHECK(gguf_bytes::payload(g.require(key)) == gguf_bytes::payload(v));
}

TEST_CASE("gguf: a small valid file and its alignment", "[io][gguf]") {
    const GgufFile f(write_bytes("small.gguf", small_file()));
    REQUIRE(f.tensors().size() == 2);
    float x;
    std::memcpy(&x, f.data(f.tensor("t1")) + 8, 4);
    CHECK(x == 11.0f);
    CHECK(f.tensor("t0").shape() == std::vector<std::int64_t>{2, 4});
    // general.alignment moves the data section and the offsets
    const std::vector<GgufKv> kvs{gguf_uint32("general.alignment", 64)};
    const GgufFile g(write_bytes("aligned.gguf", gguf_file_bytes(kvs, {{"a", {3}, GgmlType::F32, f32_bytes({1, 2, 3})},
                                                                       {"b", {1}, GgmlType::F32, f32_bytes({4})}},
                                                                  64)));
    CHECK(g.alignment() == 64);
    CHECK(g.data_offset() % 64 == 0);
    CHECK(g.tensor("b").offset == 64);
    std::memcpy(&x, g.data(g.tensor("b")), 4);
    CHECK(x == 4.0f);
}

TEST_CASE("gguf: malformed headers are FormatErrors naming what is wrong", "[io][gguf]") {
    expect_format_error("", "empty file");
    expect_format_error("GG", "truncated");
    expect_format_error("GGML" + std::string(20, '\0'), "bad magic");
    expect_format_error(header(0, 0, "", 1), "unsupported GGUF version 1");
    expect_format_error(header(0, 0, "", 4), "unsupported GGUF version 4");
    expect_format_error(header(0, 0, "", 0x03000000u), "big-endian");
    expect_format_error(std::string("GGUF\3\0\0\0", 8) + std::string(5, '\0'), "tensor count");
    expect_format_error(header(0, 1000, std::string(100, '\0')), "metadata count 1000 cannot fit");
    expect_format_error(header(1000, 0, std::string(100, '\0')), "tensor count 1000 cannot fit");
    expect_format_error(header(0, 0xffffffffffffffffull, std::string(100, '\0')), "cannot fit");

    const auto kv = [](const std::string& key, std::uint32_t type, const std::string& payload) {
        std::string out;
        gguf_bytes::put_string(out, key);
        gguf_bytes::put_u32(out, type);
        return out + payload;
    };
    // a key string whose length runs past the end
    {
        std::string rest;
        gguf_bytes::put_u64(rest, 1000);
        rest += "abc" + std::string(10, '\0');
        expect_format_error(header(0, 1, rest), "metadata entry 0 key");
    }
    // a string value past the end
    {
        std::string payload;
        gguf_bytes::put_u64(payload, 0x7fffffffffffffffull);
        expect_format_error(header(0, 1, kv("k.s", 8, payload) + std::string(8, '\0')), "metadata key 'k.s'");
    }
    expect_format_error(header(0, 1, kv("k.t", 13, std::string(8, '\0'))), "metadata key 'k.t': unknown value type 13");
    expect_format_error(header(0, 1, kv("k.b", 7, std::string("\2", 1) + std::string(12, '\0'))), "'k.b': BOOL value 2");
    // arrays: unknown element type, a count past the end, a string element past the end, too deep
    {
        std::string p;
        gguf_bytes::put_u32(p, 99);
        gguf_bytes::put_u64(p, 1);
        expect_format_error(header(0, 1, kv("k.a", 9, p + std::string(8, '\0'))), "'k.a': unknown array element type 99");
    }
    {
        std::string p;
        gguf_bytes::put_u32(p, static_cast<std::uint32_t>(GgufValueType::UInt32));
        gguf_bytes::put_u64(p, 1000);
        expect_format_error(header(0, 1, kv("k.a", 9, p + std::string(40, '\0'))), "'k.a': array of 1000 UINT32 elements cannot fit");
    }
    {
        std::string p;
        gguf_bytes::put_u32(p, static_cast<std::uint32_t>(GgufValueType::String));
        gguf_bytes::put_u64(p, 2);
        gguf_bytes::put_string(p, "ok");
        gguf_bytes::put_u64(p, 500);
        expect_format_error(header(0, 1, kv("k.a", 9, p + std::string(20, '\0'))), "metadata key 'k.a'[1]");
    }
    {
        std::string p;
        for (int i = 0; i < 12; ++i) {
            gguf_bytes::put_u32(p, static_cast<std::uint32_t>(GgufValueType::Array));
            gguf_bytes::put_u64(p, 1);
        }
        expect_format_error(header(0, 1, kv("k.deep", 9, p + std::string(64, '\0'))), "nested deeper than 8");
    }
    // duplicate keys
    expect_format_error(header(0, 2, kv("k.x", 4, std::string(4, '\0')) + kv("k.x", 4, std::string(4, '\0'))), "'k.x': duplicate key");
    // alignment: wrong type, zero, not a power of two
    expect_format_error(header(0, 1, kv("general.alignment", 5, std::string("\x20\0\0\0", 4))), "general.alignment': expected a UINT32");
    expect_format_error(header(0, 1, kv("general.alignment", 4, std::string(4, '\0'))), "not a power of two");
    expect_format_error(header(0, 1, kv("general.alignment", 4, std::string("\x30\0\0\0", 4))), "not a power of two");
}

TEST_CASE("gguf: malformed tensor infos and data are FormatErrors naming the tensor", "[io][gguf]") {
    expect_format_error(with_data(header(1, 0, tensor_info("t", {1, 1, 1, 1, 1}, 0, 0)), 64), "tensor 't': 5 dimensions");
    expect_format_error(with_data(header(1, 0, tensor_info("t", {1ull << 32, 1ull << 32, 1ull << 32}, 0, 0)), 64),
                        "tensor 't': the product of its dimensions overflows");
    expect_format_error(with_data(header(1, 0, tensor_info("t", {0x8000000000000000ull}, 0, 0)), 64), "tensor 't': dimension 0");
    expect_format_error(with_data(header(1, 0, tensor_info("t", {4}, 99, 0)), 64), "tensor 't': unknown ggml type 99");
    expect_format_error(with_data(header(1, 0, tensor_info("t", {31, 2}, 8, 0)), 256), "tensor 't': row length 31 is not a multiple of the Q8_0 block size 32");
    expect_format_error(with_data(header(1, 0, tensor_info("t", {1ull << 60}, 12, 0)), 64), "tensor 't'");
    expect_format_error(with_data(header(1, 0, tensor_info("t", {4}, 0, 8)), 64), "tensor 't': offset 8 is not a multiple of the alignment 32");
    expect_format_error(with_data(header(1, 0, tensor_info("t", {4}, 0, 32)), 40), "tensor 't': data [32, +16) runs past the end");
    expect_format_error(with_data(header(1, 0, tensor_info("t", {100}, 0, 0)), 64), "tensor 't': data [0, +400) runs past the end");
    expect_format_error(with_data(header(2, 0, tensor_info("a", {16}, 0, 0) + tensor_info("b", {4}, 0, 32)), 96),
                        "tensors 'a' and 'b' overlap");
    expect_format_error(with_data(header(2, 0, tensor_info("a", {4}, 0, 0) + tensor_info("a", {4}, 0, 32)), 64),
                        "tensor 'a': duplicate tensor name");
    expect_format_error(header(1, 0, tensor_info("t", {4}, 0, 0)), "data section");
    // a name length past the end
    {
        std::string rest;
        gguf_bytes::put_u64(rest, 1ull << 40);
        expect_format_error(header(1, 0, rest + std::string(24, '\0')), "tensor info 0 name");
    }
    // types the reader knows but the library cannot dequantize are reported by name on use
    const GgufFile f(write_bytes("iq2.gguf", with_data(header(1, 0, tensor_info("t", {256}, 16, 0)), 66)));
    const GgufTensorInfo& t = f.tensor("t");
    std::vector<float> out(256);
    CHECK_THROWS_MATCHES(ggml::dequantize_row(t.type, f.data(t), 256, out.data(), "t"), ShapeError,
                         test::Has("t: ggml type IQ2_XXS is not supported (the library runs F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)"));
}

TEST_CASE("gguf: every truncation of a valid file is rejected cleanly", "[io][gguf]") {
    const std::string bytes = small_file();
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        const auto path = write_bytes("cut.gguf", bytes.substr(0, n));
        INFO("first " << n << " bytes");
        CHECK_THROWS_AS(GgufFile(path), FormatError);
    }
    CHECK_NOTHROW(GgufFile(write_bytes("whole.gguf", bytes)));
    // and the fixture itself, cut inside its metadata, its tensor infos and its data
    std::ifstream in(test::repo_gguf_dir() / "tiny-gemma4-q4_0.gguf", std::ios::binary);
    const std::string fixture((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const std::size_t n : {std::size_t{30}, std::size_t{2000}, std::size_t{20000}, fixture.size() - 1})
        CHECK_THROWS_AS(GgufFile(write_bytes("cut_fixture.gguf", fixture.substr(0, n))), FormatError);
}
