// Writes the seed corpora under fuzz/corpus/<target>/: for each target a few valid inputs made
// by the library's own writers (or libpng/libjpeg for images) and a few near-valid ones that
// stop at different checks. Usage: gemma4_fuzz_corpus <fuzz/corpus folder>. The output is
// deterministic, so the committed corpora can be regenerated and diffed.
#include <gemma4/io/config_json.hpp>
#include <gemma4/io/gguf_writer.hpp>
#include <gemma4/io/npy.hpp>
#include <gemma4/tensor/ggml_blocks.hpp>
#include <gemma4/io/safetensors_writer.hpp>
#include <gemma4/model/random_checkpoint.hpp>
#include <gemma4/tokenizer/tiny_tokenizer.hpp>

#include "session_fixture.hpp"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <png.h>
#include <unistd.h>
#include <jpeglib.h>

namespace fs = std::filesystem;
using Bytes = std::vector<unsigned char>;

namespace {

fs::path g_root;

void put(const std::string& target, const std::string& name, const Bytes& bytes) {
    const fs::path dir = g_root / target;
    fs::create_directories(dir);
    std::ofstream out(dir / name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw std::runtime_error("cannot write " + (dir / name).string());
}

void put(const std::string& target, const std::string& name, const std::string& text) {
    put(target, name, Bytes(text.begin(), text.end()));
}

Bytes read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(in), {});
}

void put_le(Bytes& b, std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

// ---------------------------------------------------------------------------------------------

Bytes safetensors_file(const std::string& header, const Bytes& data) {
    Bytes b;
    put_le(b, header.size(), 8);
    b.insert(b.end(), header.begin(), header.end());
    b.insert(b.end(), data.begin(), data.end());
    return b;
}

void safetensors(const fs::path& tmp) {
    using gemma4::DType;
    std::vector<gemma4::TensorBlob> tensors;
    tensors.push_back({"a.weight", DType::F32, {2, 3}, std::vector<std::byte>(24, std::byte{0x3f})});
    tensors.push_back({"b.weight", DType::BF16, {4}, std::vector<std::byte>(8, std::byte{0x40})});
    tensors.push_back({"empty", DType::F16, {0, 5}, {}});
    gemma4::write_safetensors(tmp / "valid.safetensors", tensors, {{"format", "pt"}});
    put("safetensors", "valid", read_file(tmp / "valid.safetensors"));

    const Bytes four(4, 0);
    put("safetensors", "scalar", safetensors_file(R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})", four));
    put("safetensors", "overlap",
        safetensors_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"y":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", four));
    put("safetensors", "past_end", safetensors_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", four));
    put("safetensors", "bad_dtype", safetensors_file(R"({"x":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", four));
    put("safetensors", "negative", safetensors_file(R"({"x":{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}})", four));
    put("safetensors", "metadata", safetensors_file(R"({"__metadata__":{"format":"pt","n":1}})", {}));
    Bytes long_header = safetensors_file("{}", {});
    long_header[0] = 0xff;
    put("safetensors", "header_too_long", long_header);
}

// ---------------------------------------------------------------------------------------------

void config_json() {
    put("config_json", "tiny", gemma4::config_to_json(gemma4::tiny_config()).dump(1));
    put("config_json", "gemma4_12b", gemma4::config_to_json(gemma4::kGemma4_12B).dump());
    nlohmann::json text_only = gemma4::config_to_json(gemma4::tiny_config())["text_config"];
    put("config_json", "text_only", text_only.dump());
    nlohmann::json bad_layers = text_only;
    bad_layers["layer_types"].erase(0);
    put("config_json", "layer_types_short", bad_layers.dump());
    nlohmann::json missing = text_only;
    missing.erase("vocab_size");
    put("config_json", "missing_vocab", missing.dump());
    nlohmann::json moe = text_only;
    moe["enable_moe_block"] = true;
    put("config_json", "moe", moe.dump());
}

// ---------------------------------------------------------------------------------------------

void tokenizers(const fs::path& tmp) {
    // Few merges keep the seeds small; the loader paths are the same.
    const auto info = gemma4::write_tiny_tokenizer(tmp / "tok", false, 40);
    const Bytes tiny = read_file(info.tokenizer_json);
    put("tokenizer_load", "tiny", tiny);
    nlohmann::json j = nlohmann::json::parse(tiny);
    j["model"]["merges"] = nlohmann::json::array();
    put("tokenizer_load", "no_merges", j.dump());
    nlohmann::json no_vocab = j;
    no_vocab["model"].erase("vocab");
    put("tokenizer_load", "no_vocab", no_vocab.dump());
    nlohmann::json wrong_id = j;
    if (!wrong_id["added_tokens"].empty()) wrong_id["added_tokens"][0]["id"] = 100000;
    put("tokenizer_load", "added_token_id_out_of_range", wrong_id.dump());
    nlohmann::json no_normalizer = j;
    no_normalizer["normalizer"] = nullptr;
    no_normalizer["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}};
    put("tokenizer_load", "metaspace_pretokenizer", no_normalizer.dump());

    put("tokenizer_encode", "english", std::string(gemma4::detail::kTinyTrainingText.substr(0, 300)));
    put("tokenizer_encode", "chat", "<bos><|turn>user\nWhy is the sky blue?<turn|>\n<|turn>model\n");
    put("tokenizer_encode", "unicode", "caf\xC3\xA9 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD");
    put("tokenizer_encode", "spaces", "  leading\t\ttabs\n\n\nand   runs \xE2\x96\x81 metaspace  ");
    put("tokenizer_encode", "invalid_utf8", std::string("ok \xC3\x28 \xED\xA0\x80 \xF4\x90\x80\x80 \xC0\xAF", 19));
    put("tokenizer_encode", "special_lookalikes", "<|turn><turn|><|tur<bos><eos><pad><0x41><unk>");
}

// ---------------------------------------------------------------------------------------------

std::string chat_input(unsigned char flags, const std::vector<std::pair<unsigned char, std::string>>& messages) {
    std::string s(1, static_cast<char>(flags));
    for (const auto& [role, text] : messages) {
        s += static_cast<char>(role);
        s += text;
        s += '\0';
    }
    return s;
}

void chat() {
    // role bytes: 0 system, 1 developer, 2 user, 3 assistant, 4 model, 6 invalid
    put("chat", "one_turn", chat_input(1, {{2, "Why is the sky blue?"}}));
    put("chat", "system_and_history",
        chat_input(3, {{0, "  Answer briefly. "}, {2, "Hi"}, {3, "<|channel>thought\nhmm<channel|>Hello!"}, {2, "More?"}}));
    put("chat", "keep_thoughts", chat_input(5, {{2, "a"}, {4, "<|channel>unclosed thought"}, {2, "b\xE2\x80\x83"}}));
    put("chat", "late_system", chat_input(1, {{2, "x"}, {1, "late system"}}));
    put("chat", "bad_role", chat_input(0, {{6, "tool output"}}));
    put("chat", "unicode_spaces", chat_input(1, {{2, "\xE3\x80\x80\xC2\xA0text\xE2\x80\xA8\xC2\x85"}}));
}

// ---------------------------------------------------------------------------------------------

void gbnf() {
    put("gbnf", "json", "root ::= value\nvalue ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
                        "object ::= \"{\" ( string \":\" value ( \",\" string \":\" value )* )? \"}\"\n"
                        "array ::= \"[\" ( value ( \",\" value )* )? \"]\"\n"
                        "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" [\"\\\\nt] )* \"\\\"\"\n"
                        "number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]+ )?\n");
    put("gbnf", "repetitions", "root ::= ( [a-c]{2,5} | \"x\"+ )* \"!\"? item{3}\n# comment\nitem ::= \"é\" | [\\u4e00-\\u9fff]\n   | .\n");
    put("gbnf", "recursion", "root ::= \"(\" root \")\" root | \"\"\n");
    put("gbnf", "left_recursion", "root ::= root \"a\" | \"a\"\n");
    put("gbnf", "undefined", "root ::= missing\n");
}

// ---------------------------------------------------------------------------------------------

void npy(const fs::path& tmp) {
    const std::vector<float> f = {1.5f, -2.0f, 0.25f, 8.0f, 0.0f, 3.0f};
    const std::vector<std::int64_t> shape23 = {2, 3}, shape6 = {6};
    gemma4::write_npy<float>(tmp / "f.npy", f, shape23);
    put("npy", "float_2x3", read_file(tmp / "f.npy"));
    const std::vector<double> d = {1.0, 2.0};
    const std::vector<std::int64_t> shape2 = {2};
    gemma4::write_npy<double>(tmp / "d.npy", d, shape2);
    put("npy", "double_2", read_file(tmp / "d.npy"));
    const std::vector<std::int32_t> i = {7, 8, 9, 10, 11, 12};
    gemma4::write_npy<std::int32_t>(tmp / "i.npy", i, shape6);
    put("npy", "int32_6", read_file(tmp / "i.npy"));
    const std::vector<float> scalar = {4.0f};
    gemma4::write_npy<float>(tmp / "s.npy", scalar, {});
    put("npy", "scalar", read_file(tmp / "s.npy"));

    auto hand_made = [](unsigned version, const std::string& dict, std::size_t data_bytes) {
        Bytes b = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<unsigned char>(version), 0};
        put_le(b, dict.size(), version == 1 ? 2 : 4);
        b.insert(b.end(), dict.begin(), dict.end());
        b.insert(b.end(), data_bytes, 0);
        return b;
    };
    put("npy", "version2", hand_made(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n", 8));
    put("npy", "fortran", hand_made(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2), }\n", 8));
    put("npy", "big_endian", hand_made(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }\n", 8));
    put("npy", "huge_shape", hand_made(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }\n", 0));
    put("npy", "truncated", hand_made(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\n", 8));
}

// ---------------------------------------------------------------------------------------------

Bytes png(std::uint32_t width, std::uint32_t height, std::uint32_t format) {
    png_image image{};
    image.version = PNG_IMAGE_VERSION;
    image.width = width;
    image.height = height;
    image.format = format;
    const std::size_t stride = PNG_IMAGE_ROW_STRIDE(image);
    const std::size_t component = PNG_IMAGE_PIXEL_COMPONENT_SIZE(format);
    std::vector<unsigned char> pixels(stride * height * component);
    for (std::size_t k = 0; k < pixels.size(); ++k) pixels[k] = static_cast<unsigned char>((k * 37 + k / 7) & 0xff);
    png_alloc_size_t size = 0;
    if (!png_image_write_to_memory(&image, nullptr, &size, 0, pixels.data(), 0, nullptr))
        throw std::runtime_error(std::string("png size: ") + image.message);
    Bytes out(size);
    if (!png_image_write_to_memory(&image, out.data(), &size, 0, pixels.data(), 0, nullptr))
        throw std::runtime_error(std::string("png write: ") + image.message);
    out.resize(size);
    return out;
}

Bytes jpeg(int width, int height, int components, bool progressive, int orientation) {
    jpeg_compress_struct cinfo{};
    jpeg_error_mgr err{};
    cinfo.err = jpeg_std_error(&err);  // the default handler exits on error: fine for a tool
    jpeg_create_compress(&cinfo);
    unsigned char* buffer = nullptr;
    unsigned long size = 0;
    jpeg_mem_dest(&cinfo, &buffer, &size);
    cinfo.image_width = static_cast<JDIMENSION>(width);
    cinfo.image_height = static_cast<JDIMENSION>(height);
    cinfo.input_components = components;
    cinfo.in_color_space = components == 3 ? JCS_RGB : JCS_GRAYSCALE;
    jpeg_set_defaults(&cinfo);
    jpeg_set_quality(&cinfo, 75, TRUE);
    if (progressive) jpeg_simple_progression(&cinfo);
    jpeg_start_compress(&cinfo, TRUE);
    if (orientation) {
        // EXIF APP1 with one IFD0 entry: Orientation (0x0112), SHORT, count 1.
        const unsigned char exif[] = {'E', 'x', 'i', 'f', 0, 0, 'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0,
                                      1, 0, 0, 0, static_cast<unsigned char>(orientation), 0, 0, 0, 0, 0, 0, 0};
        jpeg_write_marker(&cinfo, JPEG_APP0 + 1, exif, sizeof exif);
    }
    std::vector<unsigned char> row(static_cast<std::size_t>(width * components));
    while (cinfo.next_scanline < cinfo.image_height) {
        for (std::size_t k = 0; k < row.size(); ++k) row[k] = static_cast<unsigned char>((k * 11 + cinfo.next_scanline * 29) & 0xff);
        JSAMPROW p = row.data();
        jpeg_write_scanlines(&cinfo, &p, 1);
    }
    jpeg_finish_compress(&cinfo);
    Bytes out(buffer, buffer + size);
    jpeg_destroy_compress(&cinfo);
    std::free(buffer);
    return out;
}

void images() {
    put("image", "rgb.png", png(7, 5, PNG_FORMAT_RGB));
    put("image", "gray.png", png(3, 9, PNG_FORMAT_GRAY));
    put("image", "rgba16.png", png(4, 4, PNG_FORMAT_LINEAR_RGB_ALPHA));
    put("image", "ga.png", png(2, 2, PNG_FORMAT_GA));
    put("image", "rgb.jpg", jpeg(9, 6, 3, false, 0));
    put("image", "gray_progressive.jpg", jpeg(5, 7, 1, true, 0));
    put("image", "exif_rotated.jpg", jpeg(6, 3, 3, false, 6));
    Bytes cut = png(16, 16, PNG_FORMAT_RGB);
    cut.resize(cut.size() / 2);
    put("image", "truncated.png", cut);
    put("image", "gif", std::string("GIF89a\x01\x00\x01\x00", 10));
}

// ---------------------------------------------------------------------------------------------

Bytes wav(unsigned tag, unsigned channels, std::uint32_t rate, unsigned bits, const Bytes& data, bool extensible,
          bool extra_chunk) {
    Bytes fmt;
    put_le(fmt, extensible ? 0xFFFE : tag, 2);
    put_le(fmt, channels, 2);
    put_le(fmt, rate, 4);
    put_le(fmt, rate * channels * bits / 8, 4);
    put_le(fmt, channels * bits / 8, 2);
    put_le(fmt, bits, 2);
    if (extensible) {
        put_le(fmt, 22, 2);
        put_le(fmt, bits, 2);
        put_le(fmt, 0, 4);  // channel mask
        put_le(fmt, tag, 2);
        const unsigned char tail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};
        fmt.insert(fmt.end(), tail, tail + 14);
    }
    Bytes body = {'W', 'A', 'V', 'E', 'f', 'm', 't', ' '};
    put_le(body, fmt.size(), 4);
    body.insert(body.end(), fmt.begin(), fmt.end());
    if (extra_chunk) {
        const Bytes list = {'L', 'I', 'S', 'T', 3, 0, 0, 0, 'a', 'b', 'c', 0};
        body.insert(body.end(), list.begin(), list.end());
    }
    body.insert(body.end(), {'d', 'a', 't', 'a'});
    put_le(body, data.size(), 4);
    body.insert(body.end(), data.begin(), data.end());
    Bytes file = {'R', 'I', 'F', 'F'};
    put_le(file, body.size(), 4);
    file.insert(file.end(), body.begin(), body.end());
    return file;
}

Bytes ramp(std::size_t n) {
    Bytes d(n);
    for (std::size_t k = 0; k < n; ++k) d[k] = static_cast<unsigned char>(k * 13);
    return d;
}

void wavs() {
    put("wav", "pcm16_mono_16k.wav", wav(1, 1, 16000, 16, ramp(64), false, false));
    put("wav", "pcm16_stereo_44k.wav", wav(1, 2, 44100, 16, ramp(128), false, true));
    put("wav", "pcm24_8k.wav", wav(1, 1, 8000, 24, ramp(60), false, false));
    put("wav", "pcm32_ext_48k.wav", wav(1, 2, 48000, 32, ramp(64), true, false));
    Bytes floats;
    for (float f : {0.5f, -0.25f, 1.0f, 0.0f}) {
        std::uint32_t u;
        std::memcpy(&u, &f, 4);
        put_le(floats, u, 4);
    }
    put("wav", "float32_22k.wav", wav(3, 1, 22050, 32, floats, false, false));
    Bytes doubles;
    for (double x : {0.5, -0.75}) {
        std::uint64_t u;
        std::memcpy(&u, &x, 8);
        put_le(doubles, u, 8);
    }
    put("wav", "float64_16k.wav", wav(3, 1, 16000, 64, doubles, false, false));
    put("wav", "adpcm.wav", wav(2, 1, 16000, 4, ramp(16), false, false));
    Bytes cut = wav(1, 1, 16000, 16, ramp(64), false, false);
    cut.resize(cut.size() - 10);
    put("wav", "truncated.wav", cut);
}


// ---------------------------------------------------------------------------------------------
// GGUF: a micro Gemma 4 model (2 layers, one sliding and one k_eq_v full layer with partial
// RoPE, a 10-token vocabulary) whose matrices use every type the loader maps, a file with one
// tensor of each supported type, and one with a value of each metadata type.

std::string gguf_data(gemma4::GgmlType type, std::uint64_t n, std::uint32_t seed) {
    using gemma4::GgmlType;
    std::string out;
    std::uint32_t s = seed * 2654435761u + 1;
    const auto next = [&] { return (s = s * 1664525u + 1013904223u) >> 24; };
    const auto put16 = [&](std::uint16_t v) { out.push_back(static_cast<char>(v & 0xff)), out.push_back(static_cast<char>(v >> 8)); };
    switch (type) {
        case GgmlType::F32:
            for (std::uint64_t i = 0; i < n; ++i) {
                const float x = 0.9f + 0.01f * static_cast<float>(next() % 20);
                out.append(reinterpret_cast<const char*>(&x), 4);
            }
            break;
        case GgmlType::F16:
            for (std::uint64_t i = 0; i < n; ++i) put16(gemma4::float_to_f16(0.01f * static_cast<float>(static_cast<int>(next() % 21) - 10)));
            break;
        case GgmlType::BF16:
            for (std::uint64_t i = 0; i < n; ++i) put16(gemma4::float_to_bf16(0.01f * static_cast<float>(static_cast<int>(next() % 21) - 10)));
            break;
        default: {  // a block type: random bytes, its f16 scales small and finite
            const gemma4::ggml::BlockDecoder dec = gemma4::ggml::block_decoder(type);
            for (std::uint64_t b = 0; b < n / static_cast<std::uint64_t>(dec.values); ++b) {
                std::string block(static_cast<std::size_t>(dec.bytes), '\0');
                for (char& c : block) c = static_cast<char>(next());
                for (const int at : dec.f16_scales)
                    if (at >= 0) {
                        const std::uint16_t h = gemma4::float_to_f16(0.001f * static_cast<float>(1 + next() % 4));
                        block[static_cast<std::size_t>(at)] = static_cast<char>(h & 0xff);
                        block[static_cast<std::size_t>(at) + 1] = static_cast<char>(h >> 8);
                    }
                out += block;
            }
            return out;
        }
    }
    return out;
}

void gguf() {
    using namespace gemma4;
    const auto bytes = [](const std::string& s) { return Bytes(s.begin(), s.end()); };
    // micro model
    const std::vector<std::string> tokens{"<pad>", "<eos>", "<bos>", "<unk>", "<turn|>", "\xe2\x96\x81", "a", "b", "\xe2\x96\x81" "a", "<0x0A>"};
    std::vector<GgufKv> kvs{
        gguf_string("general.architecture", "gemma4"),
        gguf_uint32("gemma4.block_count", 2),
        gguf_uint32("gemma4.context_length", 64),
        gguf_uint32("gemma4.embedding_length", 32),
        gguf_uint32("gemma4.feed_forward_length", 32),
        gguf_uint32("gemma4.attention.head_count", 2),
        gguf_int32_array("gemma4.attention.head_count_kv", {1, 1}),
        gguf_float32("gemma4.rope.freq_base", 1e6f),
        gguf_float32("gemma4.rope.freq_base_swa", 1e4f),
        gguf_float32("gemma4.attention.layer_norm_rms_epsilon", 1e-6f),
        gguf_uint32("gemma4.attention.key_length", 32),
        gguf_uint32("gemma4.attention.value_length", 32),
        gguf_float32("gemma4.final_logit_softcapping", 30.0f),
        gguf_uint32("gemma4.attention.sliding_window", 4),
        gguf_bool_array("gemma4.attention.sliding_window_pattern", {true, false}),
        gguf_uint32("gemma4.attention.key_length_swa", 16),
        gguf_uint32("gemma4.attention.value_length_swa", 16),
        gguf_string("tokenizer.ggml.model", "gemma4"),
        gguf_string_array("tokenizer.ggml.tokens", tokens),
        gguf_int32_array("tokenizer.ggml.token_type", {3, 3, 3, 3, 3, 1, 1, 1, 1, 6}),
        gguf_string_array("tokenizer.ggml.merges", {"\xe2\x96\x81 a"}),
        gguf_uint32("tokenizer.ggml.bos_token_id", 2),
        gguf_uint32("tokenizer.ggml.eos_token_id", 1),
        gguf_uint32("tokenizer.ggml.unknown_token_id", 3),
        gguf_uint32("tokenizer.ggml.padding_token_id", 0),
        gguf_bool("tokenizer.ggml.add_bos_token", true),
    };
    std::vector<GgufTensorOut> ts;
    std::uint32_t seed = 1;
    const auto add = [&](const std::string& name, std::vector<std::uint64_t> ne, GgmlType type) {
        std::uint64_t n = 1;
        for (auto d : ne) n *= d;
        ts.push_back({name, std::move(ne), type, gguf_data(type, n, seed++)});
    };
    std::string rope;
    for (int i = 0; i < 16; ++i) {
        const float f = i < 4 ? 1.0f : 1e30f;
        rope.append(reinterpret_cast<const char*>(&f), 4);
    }
    ts.push_back({"rope_freqs.weight", {16}, GgmlType::F32, rope});
    add("token_embd.weight", {32, 10}, GgmlType::Q8_0);
    add("output_norm.weight", {32}, GgmlType::F32);
    for (int l = 0; l < 2; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        const std::uint64_t d = l == 0 ? 16 : 32;
        add(p + "attn_norm.weight", {32}, GgmlType::F32);
        add(p + "attn_q.weight", {32, 2 * d}, GgmlType::Q4_0);
        add(p + "attn_k.weight", {32, d}, GgmlType::F16);
        if (l == 0) add(p + "attn_v.weight", {32, d}, GgmlType::BF16);
        add(p + "attn_output.weight", {2 * d, 32}, GgmlType::Q8_0);
        add(p + "attn_q_norm.weight", {d}, GgmlType::F32);
        add(p + "attn_k_norm.weight", {d}, GgmlType::F32);
        add(p + "post_attention_norm.weight", {32}, GgmlType::F32);
        add(p + "ffn_norm.weight", {32}, GgmlType::F32);
        add(p + "ffn_gate.weight", {32, 32}, GgmlType::Q4_0);
        add(p + "ffn_up.weight", {32, 32}, l == 0 ? GgmlType::Q5_1 : GgmlType::IQ4_NL);  // run as stored
        add(p + "ffn_down.weight", {32, 32}, GgmlType::Q8_0);
        add(p + "post_ffw_norm.weight", {32}, GgmlType::F32);
        add(p + "layer_output_scale.weight", {1}, GgmlType::F32);
    }
    const std::string model = gguf_file_bytes(kvs, ts);
    put("gguf", "micro_model.gguf", bytes(model));
    auto missing = ts;
    missing.erase(missing.begin() + 5);
    put("gguf", "micro_model_missing_tensor.gguf", bytes(gguf_file_bytes(kvs, missing)));

    // one tensor of each type
    ts.clear();
    for (const GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                             GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                             GgmlType::IQ4_XS})
        add(std::string("t.") + std::string(ggml_type_name(t)), {256, 2}, t);
    put("gguf", "types.gguf", bytes(gguf_file_bytes({gguf_uint32("general.alignment", 64)}, ts, 64)));

    // a value of each metadata type, nested arrays included
    std::string nested;  // [[5], [5]] of UINT16
    for (int i = 0; i < 2; ++i) {
        gguf_bytes::put_u32(nested, static_cast<std::uint32_t>(GgufValueType::UInt16));
        gguf_bytes::put_u64(nested, 1);
        gguf_bytes::put(nested, 5, 2);
    }
    std::vector<GgufKv> values{gguf_uint32("u32", 7), gguf_int32("i32", -7), gguf_float32("f32", 0.5f), gguf_bool("b", true),
                               gguf_string("s", "text"), gguf_string_array("strings", {"a", "bc"}),
                               gguf_array("nested", GgufValueType::Array, 2, nested)};
    for (const auto& [t, size] : std::vector<std::pair<GgufValueType, int>>{{GgufValueType::UInt8, 1}, {GgufValueType::Int8, 1},
                                                                            {GgufValueType::UInt16, 2}, {GgufValueType::Int16, 2},
                                                                            {GgufValueType::UInt64, 8}, {GgufValueType::Int64, 8},
                                                                            {GgufValueType::Float64, 8}})
        values.push_back({"v." + std::string(gguf_value_type_name(t)), t, std::string(static_cast<std::size_t>(size), '\x01')});
    put("gguf", "metadata.gguf", bytes(gguf_file_bytes(values, {})));

    // an mmproj (image and audio embedders) of a text model of hidden size 32, as fuzz_gguf also
    // reads every input: patch 1 × pooling 3 (27 values), width 8, 4 positions, frames of 32
    const std::vector<GgufKv> mm{
        gguf_string("general.architecture", "clip"),
        gguf_string("general.type", "mmproj"),
        gguf_bool("clip.has_vision_encoder", true),
        gguf_uint32("clip.vision.projection_dim", 32),
        gguf_uint32("clip.vision.patch_size", 1),
        gguf_uint32("clip.vision.embedding_length", 8),
        gguf_bool("clip.has_audio_encoder", true),
        gguf_uint32("clip.audio.projection_dim", 32),
        gguf_uint32("clip.audio.embedding_length", 32),
        gguf_string("clip.vision.projector_type", "gemma4uv"),
        gguf_float32("clip.vision.attention.layer_norm_epsilon", 1e-6f),
        gguf_string("clip.audio.projector_type", "gemma4ua"),
    };
    ts.clear();
    add("mm.a.input_projection.weight", {32, 32}, GgmlType::Q8_0);
    add("mm.input_projection.weight", {8, 32}, GgmlType::F16);
    add("v.patch_embd.bias", {8}, GgmlType::F32);
    add("v.patch_embd.weight", {27, 8}, GgmlType::F16);
    add("v.patch_norm.1.bias", {27}, GgmlType::F32);
    add("v.patch_norm.1.weight", {27}, GgmlType::F32);
    for (const char* n : {"2", "3"}) {
        add(std::string("v.patch_norm.") + n + ".bias", {8}, GgmlType::F32);
        add(std::string("v.patch_norm.") + n + ".weight", {8}, GgmlType::F32);
    }
    add("v.position_embd.weight", {8, 4, 2}, GgmlType::F32);
    put("gguf", "micro_mmproj.gguf", bytes(gguf_file_bytes(mm, ts)));
}
}  // namespace

// Session files of the fuzz_session model: a short one, one past the sliding window, an Int8
// cache, chats before and after their first reply; then another version and a truncation.
void sessions(const fs::path& tmp) {
    using namespace gemma4;
    const fuzz::SessionFixture f = fuzz::make_session_fixture(tmp / "session_model");
    const Model<float>& model = *f.model;
    const GenerateOptions greedy{.max_new_tokens = 3, .sampling = {.temperature = 0.0}};
    const GenerateOptions sampled{.max_new_tokens = 4, .sampling = {.temperature = 1.0, .seed = 3}};
    const auto save = [&](const std::string& name, const auto& session) {
        session.save(tmp / "s.g4s");
        put("session", name, read_file(tmp / "s.g4s"));
    };
    std::vector<std::int32_t> ids;
    for (std::int32_t i = 0; i < 40; ++i) ids.push_back(20 + i);
    {
        Session<float> s(model);
        s.generate(std::span<const std::int32_t>(ids).first(4), greedy);
        save("short", s);
    }
    {
        Session<float> s(model);
        s.generate(std::span<const std::int32_t>(ids), sampled);
        save("past_window", s);
    }
    {
        Session<float> s(model, nullptr, {.kv_dtype = KVDtype::Int8});
        s.generate(std::span<const std::int32_t>(ids).first(20), greedy);
        save("int8", s);
    }
    {
        ChatSession<float> chat(model, *f.tokenizer, {}, std::string("Be brief."));
        save("chat_start", chat);
        chat.reply("Hello", sampled);
        save("chat_one_turn", chat);
    }
    Bytes v2 = read_file(g_root / "session" / "short");
    v2[8] = 2;
    put("session", "version_2", v2);
    const Bytes whole = read_file(g_root / "session" / "past_window");
    put("session", "truncated", Bytes(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(whole.size() / 2)));
}

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s <corpus folder>\n", argv[0]);
        return 2;
    }
    g_root = argv[1];
    const fs::path tmp = fs::temp_directory_path() / ("gemma4-make-corpus-" + std::to_string(::getpid()));
    fs::create_directories(tmp);
    try {
        safetensors(tmp);
        gguf();
        config_json();
        tokenizers(tmp);
        chat();
        gbnf();
        npy(tmp);
        images();
        wavs();
        sessions(tmp);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        fs::remove_all(tmp);
        return 1;
    }
    fs::remove_all(tmp);
    return 0;
}
