// The image and audio embedders from llama.cpp's mmproj GGUF (model/gguf_mmproj.hpp): every
// tensor equals the checkpoint's after the converter's layout changes are undone; an image and
// an audio prompt give the logits of the Hugging Face checkpoint the pair comes from; a file that
// is not an mmproj, or one that does not fit the text model, is an error naming both files.
#include <catch2/catch.hpp>

#include <gemma4/io/gguf_writer.hpp>
#include <gemma4/io/safetensors_writer.hpp>
#include <gemma4/model/gguf_mmproj.hpp>
#include <gemma4/model/model.hpp>
#include <gemma4/model/multimodal.hpp>
#include <gemma4/model/save_checkpoint.hpp>

#include "support/gguf_fixtures.hpp"
#include "support/message_matcher.hpp"
#include "support/reference_model.hpp"
#include "support/skip.hpp"
#include "support/temp_dir.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>

using namespace gemma4;

namespace {

const std::vector<std::string> kTypes{"f32", "f16", "q8_0"};

/// The q8_0 text file (the mm checkpoint's text weights, quantized) with the multimodal tokens.
std::filesystem::path text_gguf() {
    static const auto path =
        test::multimodal_text_gguf(test::repo_gguf_dir() / "tiny-gemma4-q8_0.gguf", test::temp_dir("mmproj_text") / "text.gguf");
    return path;
}

std::vector<WeightView*> embedder_views(ModelWeights& w) {
    VisionWeights& v = w.vision;
    return {&v.patch_ln1_weight, &v.patch_ln1_bias, &v.patch_dense_weight, &v.patch_dense_bias, &v.patch_ln2_weight, &v.patch_ln2_bias,
            &v.pos_embedding, &v.pos_norm_weight, &v.pos_norm_bias, &v.embedding_projection, &w.audio.embedding_projection};
}

/// The Hugging Face checkpoint a (text GGUF, mmproj) pair stands for: tiny-gemma4-mm's
/// config.json, the text file's dequantized tensors and the mmproj's, under the unified names.
std::filesystem::path reference_checkpoint(const std::string& type) {
    const auto dir = test::temp_dir("mmproj_reference_" + type);
    std::filesystem::copy_file(test::mm_checkpoint_dir() / "config.json", dir / "config.json");
    const SafetensorsFile text(test::repo_gguf_dir() / "tiny-gemma4-q8_0.dequant.safetensors"), mm(test::mmproj_dequantized(type));
    std::vector<TensorRef> refs;
    for (const auto& [name, e] : text.entries()) {
        if (name == "rope_freqs.weight") continue;  // generated, not a checkpoint tensor
        const WeightView v = text.view(name);
        refs.push_back({"model.language_model." + name.substr(std::string("model.").size()), v.dtype, v.shape, v.data, v.size_bytes});
    }
    for (const auto& [name, e] : mm.entries()) {
        const WeightView v = mm.view(name);
        refs.push_back({name, v.dtype, v.shape, v.data, v.size_bytes});
    }
    write_safetensors(dir / "model.safetensors", refs);
    return dir;
}

template <class T>
std::vector<T> wave(std::size_t n, double phase) {
    std::vector<T> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(0.5 + 0.5 * std::sin(phase + 0.37 * static_cast<double>(i)));
    return v;
}

/// An image of 12 × 10 model patches (72 × 60 px: within the 24-entry position table) and a clip of
/// 5 frames, each in a prompt of its own.
template <class T>
struct Prompts {
    ImageInput<T> image;
    AudioInput<T> audio;
    std::vector<std::int32_t> image_ids, audio_ids;

    explicit Prompts(const Gemma4Config& c) {
        image.patches = wave<T>(static_cast<std::size_t>(120 * c.vision.patch_values()), 0.3);
        for (std::int32_t y = 0; y < 10; ++y)
            for (std::int32_t x = 0; x < 12; ++x) image.positions.insert(image.positions.end(), {x, y});
        audio.frames = wave<T>(static_cast<std::size_t>(5 * c.audio.audio_embed_dim), 1.1);
        const std::int64_t image_tokens[1] = {120}, audio_tokens[1] = {5};
        image_ids = expand_placeholders(std::vector<std::int32_t>{2, 40, c.tokens.image, 41, 42, 43}, c.tokens, image_tokens, {});
        audio_ids = expand_placeholders(std::vector<std::int32_t>{2, 40, c.tokens.audio, 41, 42, 43}, c.tokens, {}, audio_tokens);
    }
};

/// The logits of `ids` with the image (or the audio clip) spliced in, and the soft-token rows.
template <class T>
std::pair<std::vector<T>, std::vector<T>> run(const Model<T>& model, const std::vector<std::int32_t>& ids, const Prompts<T>& p, bool image) {
    const std::vector<ImageInput<T>> images = image ? std::vector<ImageInput<T>>{p.image} : std::vector<ImageInput<T>>{};
    const std::vector<AudioInput<T>> audios = image ? std::vector<AudioInput<T>>{} : std::vector<AudioInput<T>>{p.audio};
    const SoftTokenPlan<T> plan = plan_soft_tokens<T>(model, ids, images, audios);
    KVCache<T> cache = model.make_cache();
    const SequenceChunk chunk{cache.add_sequence(), ids};
    return {model.forward(std::span<const SequenceChunk>(&chunk, 1), cache, plan.view()).values, plan.rows};
}

template <class A, class B>
double relative(const std::vector<A>& a, const std::vector<B>& b) {
    const std::vector<double> x(a.begin(), a.end()), y(b.begin(), b.end());
    return test::relative_error(x.data(), y.data(), y.size());
}

/// `text` + `mmproj` against the checkpoint `reference`: the config and, for an image prompt and
/// an audio prompt, the largest relative differences of the logits in double and in float (the
/// checkpoint's text matrices in `text_format`, the pair's as the GGUF holds them), of the float
/// soft tokens, and the float error of the pair against the double checkpoint.
struct PairResult {
    double f64 = 0, f32 = 0, f32_rows = 0, f32_vs_f64 = 0;
};
PairResult compare_pair(const std::filesystem::path& text, const std::filesystem::path& mmproj, const std::filesystem::path& reference,
                        WeightFormat text_format) {
    const Model<double> pair = Model<double>::load(text, ModelOptions{2}, LoadOptions{.mmproj = mmproj});
    const Model<double> hf = Model<double>::load(reference, ModelOptions{2});
    const Gemma4Config &a = pair.config(), &b = hf.config();
    CHECK(a.has_vision);
    CHECK(a.has_audio);
    CHECK(a.vision.patch_size == b.vision.patch_size);
    CHECK(a.vision.pooling_kernel_size == b.vision.pooling_kernel_size);
    CHECK(a.vision.mm_posemb_size == b.vision.mm_posemb_size);
    CHECK(a.vision_embed_dim() == b.vision_embed_dim());
    CHECK(a.vision.rms_norm_eps == b.vision.rms_norm_eps);
    CHECK(a.audio.audio_embed_dim == b.audio.audio_embed_dim);
    CHECK(a.audio.rms_norm_eps == b.audio.rms_norm_eps);
    for (const auto& token : detail::kMultimodalTokens) {
        INFO(token.piece);
        CHECK(a.tokens.*token.field == b.tokens.*token.field);
    }
    CHECK(parameter_count(a) == parameter_count(b));

    PairResult r;
    const Prompts<double> p(a);
    const Prompts<float> pf(a);
    const Model<float> pair_f = Model<float>::load(text, ModelOptions{2}, LoadOptions{.mmproj = mmproj});
    const Model<float> hf_f = Model<float>::load(reference, ModelOptions{2}, LoadOptions{.format = text_format});
    for (const bool image : {true, false}) {
        const auto& ids = image ? p.image_ids : p.audio_ids;
        const auto [got, got_rows] = run(pair, ids, p, image);
        const auto [want, want_rows] = run(hf, ids, p, image);
        REQUIRE(got.size() == want.size());
        r.f64 = std::max(r.f64, relative(got, want));
        const auto [got_f, got_rows_f] = run(pair_f, ids, pf, image);
        const auto [want_f, want_rows_f] = run(hf_f, ids, pf, image);
        r.f32 = std::max(r.f32, relative(got_f, want_f));
        r.f32_vs_f64 = std::max(r.f32_vs_f64, relative(got_f, want));
        r.f32_rows = std::max(r.f32_rows, relative(got_rows_f, want_rows_f));
    }
    return r;
}

bool same_bits(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }

}  // namespace

TEST_CASE("mmproj: every tensor equals its dequantized counterpart in the checkpoint's layout (f32, f16, q8_0)", "[model][gguf][mmproj]") {
    for (const auto& type : kTypes) {
        INFO(type);
        Checkpoint ck = load_checkpoint(text_gguf(), LoadOptions{.mmproj = test::mmproj_fixture(type)});
        const SafetensorsFile expected(test::mmproj_dequantized(type));
        std::size_t compared = 0;
        for (WeightView* v : embedder_views(ck.weights)) {
            INFO(v->name);
            REQUIRE(expected.contains(v->name));
            const WeightView e = expected.view(v->name);
            REQUIRE(v->shape == e.shape);
            std::int64_t differ = 0;
            for (std::int64_t i = 0; i < e.numel(); ++i) differ += !same_bits(v->at<float>(i), e.at<float>(i));
            CHECK(differ == 0);
            ++compared;
        }
        CHECK(compared == expected.entries().size());
        // The types as stored, or exact F32 for the quantized ones (docs/checkpoint-formats.md).
        const DType projection = type == "f32" ? DType::F32 : DType::F16;
        CHECK(ck.weights.vision.embedding_projection.dtype == projection);
        CHECK(ck.weights.vision.patch_dense_weight.dtype == (type == "f16" ? DType::F16 : DType::F32));
        CHECK(ck.weights.audio.embedding_projection.dtype == (type == "q8_0" ? DType::F32 : projection));
        CHECK(ck.weights.vision.pos_embedding.dtype == DType::F32);
    }
    // The F32 file's dequantized tensors are the checkpoint's own, bit for bit.
    const auto shared_mm = test::shared_gguf_dir() / "tiny-gemma4-mm" / "model.safetensors";
    if (!std::filesystem::exists(shared_mm)) GEMMA4_SKIP(shared_mm.string() << " not found (shared data)");
    const SafetensorsFile original(shared_mm), dequantized(test::mmproj_dequantized("f32"));
    for (const auto& [name, e] : dequantized.entries()) {
        INFO(name);
        const WeightView a = original.view(name), b = dequantized.view(name);
        REQUIRE(a.shape == b.shape);
        for (std::int64_t i = 0; i < a.numel(); ++i) REQUIRE(same_bits(a.at<float>(i), b.at<float>(i)));
    }
}

TEST_CASE("mmproj: an image and an audio prompt give the checkpoint's logits (f64 to 1e-12, f32 close)", "[model][gguf][mmproj]") {
    for (const auto& type : kTypes) {
        INFO(type);
        // The checkpoint's text matrices re-encoded as int8 are the file's Q8_0 blocks again
        // (ggml's scale is max|x| / 127, ours too), so both float paths run the same kernels.
        const PairResult r = compare_pair(text_gguf(), test::mmproj_fixture(type), reference_checkpoint(type), WeightFormat::Int8);
        std::cout << "mmproj " << type << " + tiny-gemma4-q8_0: logits rel. difference f64 " << r.f64 << ", f32 " << r.f32
                  << "; f32 soft tokens " << r.f32_rows << "; f32 pair vs f64 checkpoint " << r.f32_vs_f64
                  << " (the int8 text model's activation rounding)\n";
        CHECK(r.f64 <= 1e-12);
        CHECK(r.f32 <= 1e-6);
        CHECK(r.f32_rows <= 1e-6);
    }
}

TEST_CASE("mmproj: the F32 pair equals the Hugging Face checkpoint it was converted from", "[model][gguf][mmproj]") {
    const auto text = test::shared_gguf_dir() / "tiny-gemma4-mm-f32.gguf", hf = test::shared_gguf_dir() / "tiny-gemma4-mm";
    if (!std::filesystem::exists(text) || !std::filesystem::exists(hf / "model.safetensors"))
        GEMMA4_SKIP(text.string() << " or " << hf.string() << " not found (shared data)");
    const auto with_tokens = test::multimodal_text_gguf(text, test::temp_dir("mmproj_f32_text") / "text.gguf");
    const PairResult r = compare_pair(with_tokens, test::mmproj_fixture("f32"), hf, WeightFormat::AsStored);
    std::cout << "mmproj f32 + tiny-gemma4-mm-f32 vs tiny-gemma4-mm: logits rel. difference f64 " << r.f64 << ", f32 " << r.f32
              << "; f32 soft tokens " << r.f32_rows << "; f32 pair vs f64 checkpoint " << r.f32_vs_f64 << "\n";
    CHECK(r.f64 <= 1e-12);
    CHECK(r.f32 <= 1e-6);
    CHECK(r.f32_rows <= 1e-6);
    CHECK(r.f32_vs_f64 <= 1e-3);
}

namespace {

using MmKvs = std::vector<GgufKv>;
using MmTs = std::vector<GgufTensorOut>;

/// A copy of the f32 mmproj with `edit` applied.
std::filesystem::path edited_mmproj(const std::string& label, const test::GgufEdit& edit) {
    return test::edited_gguf(test::mmproj_fixture("f32"), "mmproj_edit", label, edit);
}

template <class E>
void check_error(const std::string& label, const std::filesystem::path& text, const std::filesystem::path& mmproj, const std::string& needle) {
    INFO(label);
    CHECK_THROWS_MATCHES(load_checkpoint(text, LoadOptions{.mmproj = mmproj}), E,
                         test::Has(needle) && test::Has(text.string()) && test::Has(mmproj.string()));
}

}  // namespace

TEST_CASE("mmproj: a file that is not an mmproj, or does not fit the text model, is an error naming both files", "[model][gguf][mmproj]") {
    const auto text = text_gguf();
    CHECK_NOTHROW(load_checkpoint(text, LoadOptions{.mmproj = edited_mmproj("unchanged", [](MmKvs&, MmTs&) {})}));

    // Not an mmproj at all
    check_error<FormatError>("text file", text, text, "not an mmproj file (general.architecture 'gemma4'");
    const auto junk = test::temp_dir("mmproj_junk") / "junk.gguf";
    std::ofstream(junk) << "{\"not\": \"gguf\"}";
    check_error<FormatError>("junk", text, junk, "bad magic");
    check_error<FormatError>("type", text, edited_mmproj("type", [](MmKvs& k, MmTs&) { test::gguf_key(k, "general.type") = gguf_string("general.type", "model"); }),
                             "general.type 'model'");
    check_error<ConfigError>("vision projector", text,
                             edited_mmproj("vproj", [](MmKvs& k, MmTs&) { test::gguf_key(k, "clip.vision.projector_type") = gguf_string("clip.vision.projector_type", "gemma3"); }),
                             "clip.vision.projector_type is 'gemma3'; Gemma 4 unified's is 'gemma4uv'");
    check_error<ConfigError>("audio projector", text,
                             edited_mmproj("aproj", [](MmKvs& k, MmTs&) { test::gguf_key(k, "clip.audio.projector_type") = gguf_string("clip.audio.projector_type", "gemma4a"); }),
                             "clip.audio.projector_type is 'gemma4a'; Gemma 4 unified's is 'gemma4ua'");

    // Widths against the text model
    check_error<ShapeError>("projection_dim", text,
                            edited_mmproj("pdim", [](MmKvs& k, MmTs&) { test::gguf_key(k, "clip.vision.projection_dim") = gguf_uint32("clip.vision.projection_dim", 32); }),
                            "clip.vision.projection_dim is 32 but the text model's hidden size (gemma4.embedding_length) is 64");
    check_error<ShapeError>("projection width", text, edited_mmproj("pwidth", [](MmKvs& k, MmTs& t) {
        k.erase(std::find_if(k.begin(), k.end(), [](const GgufKv& kv) { return kv.key == "clip.audio.projection_dim"; }));
        auto& w = test::gguf_tensor(t, "mm.a.input_projection.weight");
        w.ne = {640, 32};
        w.data.resize(640 * 32 * 4);
    }), "tensor 'mm.a.input_projection.weight' has ne [640, 32]: it does not project to the text model's hidden size 64");

    // Tokens: the tiny tokenizer as converted has no multimodal tokens
    check_error<ConfigError>("no image token", test::repo_gguf_dir() / "tiny-gemma4-q8_0.gguf", test::mmproj_fixture("f32"),
                             "the text model's vocabulary has no '<|image|>' token, which the mmproj's image encoder needs");

    // Keys and tensors against each other
    check_error<ShapeError>("patch size", text,
                            edited_mmproj("patch", [](MmKvs& k, MmTs&) { test::gguf_key(k, "clip.vision.patch_size") = gguf_uint32("clip.vision.patch_size", 3); }),
                            "tensor 'v.patch_norm.1.weight' has ne [108]; the metadata implies ne [243]");
    check_error<ShapeError>("missing", text,
                            edited_mmproj("missing", [](MmKvs&, MmTs& t) { std::erase_if(t, [](const GgufTensorOut& x) { return x.name == "v.patch_norm.3.bias"; }); }),
                            "missing tensor 'v.patch_norm.3.bias'");
    check_error<ShapeError>("unexpected", text, edited_mmproj("unexpected", [](MmKvs&, MmTs& t) {
        auto extra = test::gguf_tensor(t, "v.patch_embd.bias");
        extra.name = "v.blk.0.attn_q.bias";
        t.push_back(extra);
    }), "unexpected tensor 'v.blk.0.attn_q.bias'");
    check_error<ConfigError>("image_mean", text, edited_mmproj("mean", [](MmKvs& k, MmTs&) {
        const float mean[3] = {0.5f, 0.5f, 0.5f};
        test::gguf_key(k, "clip.vision.image_mean") = gguf_array("clip.vision.image_mean", GgufValueType::Float32, 3,
                                                      std::string_view(reinterpret_cast<const char*>(mean), sizeof mean));
    }), "'clip.vision.image_mean': must be all 0");

    // An mmproj goes with a GGUF model file only
    const auto dir = test::temp_dir("mmproj_dir");
    save_checkpoint(load_checkpoint(text), dir / "ck");
    CHECK_THROWS_MATCHES(load_checkpoint(dir / "ck", LoadOptions{.mmproj = test::mmproj_fixture("f32")}), InvalidArgument,
                         test::Has("an mmproj goes with a GGUF model file") && test::Has((dir / "ck").string()));
}

TEST_CASE("mmproj: without multimodal the file is checked but no embedder is bound", "[model][gguf][mmproj]") {
    const Checkpoint ck = load_checkpoint(text_gguf(), LoadOptions{.multimodal = false, .mmproj = test::mmproj_fixture("q8_0")});
    CHECK(ck.config.has_vision);
    CHECK_FALSE(ck.weights.vision.patch_dense_weight);
    CHECK_FALSE(ck.weights.audio.embedding_projection);
}
