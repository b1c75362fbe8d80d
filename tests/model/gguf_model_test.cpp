// Gemma 4 from GGUF files: the config derived from the metadata equals the source checkpoint's
// config.json, the f64 logits equal those of that checkpoint holding the GGUF's dequantized
// weights, the formats the matrices get per ggml type, and every inconsistent file as an error
// naming the key, tensor or architecture. Q8 / Q4 weights exported as GGUF (model/gguf_export.hpp)
// load back bit for bit.
#include <catch2/catch.hpp>

#include <gemma4/detail/random.hpp>
#include <gemma4/io/gguf_writer.hpp>
#include <gemma4/io/safetensors_writer.hpp>
#include <gemma4/model/gguf_export.hpp>
#include <gemma4/model/model.hpp>
#include <gemma4/model/quantize.hpp>
#include <gemma4/model/random_checkpoint.hpp>
#include <gemma4/model/random_weights.hpp>
#include <gemma4/model/save_checkpoint.hpp>

#include "support/gguf_fixtures.hpp"
#include "support/reference_model.hpp"
#include "support/skip.hpp"
#include "support/message_matcher.hpp"
#include "support/temp_dir.hpp"

#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>

using namespace gemma4;

namespace {

std::vector<std::int32_t> fixture_ids() {
    // 20 ids (longer than the sliding window of 8): words, a special token, byte pieces
    return {2, 105, 17, 40, 9, 60, 107, 200, 33, 81, 5, 6, 99, 120, 255, 31, 64, 77, 106, 1};
}

bool have(const std::string& name) { return std::filesystem::exists(test::gguf_fixture(name)); }

/// config.json of the source checkpoint + model.safetensors holding the GGUF's dequantized
/// tensors (F32, HF names): the checkpoint the GGUF stands for.
std::filesystem::path dequantized_checkpoint(const std::string& name) {
    const auto dir = test::temp_dir("gguf_dequant_" + name);
    std::filesystem::copy_file(test::gguf_source_checkpoint(name) / "config.json", dir / "config.json");
    const test::ExpectedTensors expected(name);
    const auto hf_names = expected.hf_names();
    const GgufFile f(test::gguf_fixture(name));
    std::vector<TensorRef> refs;
    for (const auto& t : f.tensors()) {
        if (t.name == "rope_freqs.weight") continue;  // generated, not a checkpoint tensor
        const std::string hf = test::hf_name_of(t.name, hf_names);
        const WeightView v = expected.view(t.name, hf);
        refs.push_back({hf, v.dtype, v.shape, v.data, v.size_bytes});
    }
    write_safetensors(dir / "model.safetensors", refs);
    return dir;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
    return m;
}

/// A copy of the q8_0 fixture with `edit` applied to its keys and tensors.
std::filesystem::path edited_fixture(const std::string& label, const test::GgufEdit& edit) {
    return test::edited_gguf(test::repo_gguf_dir() / "tiny-gemma4-q8_0.gguf", "gguf_edit", label, edit);
}

GgufKv& key(std::vector<GgufKv>& kvs, const std::string& name) { return test::gguf_key(kvs, name); }
void drop_key(std::vector<GgufKv>& kvs, const std::string& name) {
    std::erase_if(kvs, [&](const GgufKv& kv) { return kv.key == name; });
}
void drop_tensor(std::vector<GgufTensorOut>& ts, const std::string& name) {
    std::erase_if(ts, [&](const GgufTensorOut& t) { return t.name == name; });
}
GgufTensorOut& tensor(std::vector<GgufTensorOut>& ts, const std::string& name) { return test::gguf_tensor(ts, name); }

}  // namespace

TEST_CASE("gguf: the config from the metadata equals the source config.json", "[model][gguf]") {
    for (const std::string name : {"tiny-gemma4-q8_0", "tiny-gemma4-q6_k"}) {
        if (!have(name)) GEMMA4_SKIP(test::gguf_fixture(name).string() << " not found (shared data)");
        INFO(name);
        const Gemma4Config g = gguf_config(GgufFile(test::gguf_fixture(name)));
        const Gemma4Config c = load_config(test::gguf_source_checkpoint(name) / "config.json");
        CHECK(g.vocab_size == c.vocab_size);
        CHECK(g.hidden_size == c.hidden_size);
        CHECK(g.intermediate_size == c.intermediate_size);
        CHECK(g.num_hidden_layers == c.num_hidden_layers);
        CHECK(g.num_attention_heads == c.num_attention_heads);
        CHECK(g.num_key_value_heads == c.num_key_value_heads);
        CHECK(g.num_global_key_value_heads == c.num_global_key_value_heads);
        CHECK(g.head_dim == c.head_dim);
        CHECK(g.global_head_dim == c.global_head_dim);
        CHECK(g.attention_k_eq_v == c.attention_k_eq_v);
        CHECK(g.sliding_window == c.sliding_window);
        CHECK(g.max_position_embeddings == c.max_position_embeddings);
        CHECK(g.rms_norm_eps == c.rms_norm_eps);  // the FLOAT32 key read as its decimal
        CHECK(g.final_logit_softcapping == c.final_logit_softcapping);
        CHECK(g.rope_sliding.rope_theta == c.rope_sliding.rope_theta);
        CHECK(g.rope_full.rope_theta == c.rope_full.rope_theta);
        CHECK(g.rope_full.rope_type == RopeType::Proportional);
        CHECK(g.rope_full.partial_rotary_factor == c.rope_full.partial_rotary_factor);
        CHECK(g.tie_word_embeddings);
        CHECK_FALSE(g.has_vision);
        for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
            const LayerGeometry a = g.layer(i), b = c.layer(i);
            CHECK(a.kind == b.kind);
            CHECK(a.head_dim == b.head_dim);
            CHECK(a.num_kv_heads == b.num_kv_heads);
            CHECK(a.has_v_proj == b.has_v_proj);
            CHECK(a.rope_pairs == b.rope_pairs);
            CHECK(a.window == b.window);
        }
        CHECK(g.tokens.bos == 2);
        CHECK(g.tokens.is_eos(1));
        CHECK(g.tokens.is_eos(106));  // <turn|>
    }
}

namespace {

void check_logits_match_dequantized_checkpoint(const std::string& name) {
    INFO(name);
    const auto ref_dir = dequantized_checkpoint(name);
    const auto ids = fixture_ids();
    const Model<double> from_gguf = Model<double>::load(test::gguf_fixture(name), ModelOptions{2});
    const Model<double> from_hf = Model<double>::load(ref_dir, ModelOptions{2});
    const Logits<double> a = from_gguf.logits(ids), b = from_hf.logits(ids);
    REQUIRE(a.values.size() == b.values.size());
    const double diff = max_abs_diff(a.values, b.values);
    const test::ReferenceModel reference(ref_dir);
    const test::Matrix expected = reference.forward(ids);
    const double ref_err = test::relative_error(a.values.data(), expected.v.data(), expected.v.size());
    // float path: Q8 / Q4 matrices and the other block types through the int8 kernels
    // (activations quantized per block of 32); our own format of the same values (re-encoded
    // from the dequantized checkpoint: int4 for Q4_0, int8 for the others) for scale
    const Model<float> f32 = Model<float>::load(test::gguf_fixture(name), ModelOptions{2});
    const auto f32_error = [&](const Model<float>& m) {
        const Logits<float> fl = m.logits(ids);
        const std::vector<double> fd(fl.values.begin(), fl.values.end());
        return test::relative_error(fd.data(), expected.v.data(), expected.v.size());
    };
    const double f32_err = f32_error(f32);
    const WeightFormat own = name.find("q4_0") != std::string::npos ? WeightFormat::Int4
                             : name.find("f32") != std::string::npos  ? WeightFormat::AsStored
                                                                      : WeightFormat::Int8;
    const double own_err = f32_error(Model<float>::load(ref_dir, ModelOptions{2}, LoadOptions{.format = own}));
    std::cout << "gguf " << name << ": f64 logits max |gguf - dequantized checkpoint| " << diff << ", vs plain-loop reference (rel.) "
              << ref_err << "; f32 path rel. error " << f32_err << " (our " << weight_format_name(own) << " of the same values: " << own_err << ")\n";
    CHECK(diff <= 1e-12);
    CHECK(ref_err <= 1e-12);
    CHECK(f32_err <= 1.5 * own_err + 1e-5);
}

}  // namespace

TEST_CASE("gguf: f64 logits equal the dequantized checkpoint's (Q8_0, Q4_0, mixed)", "[model][gguf]") {
    for (const auto& name : test::repo_gguf_fixtures()) check_logits_match_dequantized_checkpoint(name);
}

TEST_CASE("gguf: f64 logits equal the dequantized checkpoint's (F32, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K … Q6_K, IQ4_XS, mixes)", "[model][gguf]") {
    for (const auto& name : test::shared_gguf_fixtures()) {
        if (!test::have_shared_fixture(name)) GEMMA4_SKIP(name << ": its dequantized values are not here (shared data)");
        check_logits_match_dequantized_checkpoint(name);
    }
}

TEST_CASE("gguf: each ggml type gets its in-memory format", "[model][gguf]") {
    SECTION("Q8_0 and Q4_0 stay 8 / 4 bits, same codes and scales; vectors are mapped F32") {
        const Checkpoint ck = load_checkpoint(test::repo_gguf_dir() / "tiny-gemma4-q4_0-mixed.gguf");
        CHECK(ck.weights.embed_tokens.dtype == DType::Q8);
        CHECK(ck.weights.embed_tokens.origin == DType::F32);
        CHECK(ck.weights.layers[0].q_proj.dtype == DType::Q4);
        CHECK(ck.weights.layers[5].o_proj.dtype == DType::Q4);
        CHECK(ck.weights.layers[0].input_layernorm.dtype == DType::F32);
        CHECK(ck.weights.layers[0].layer_scalar.dtype == DType::F32);
        CHECK_FALSE(ck.weights.layers[2].v_proj);  // k_eq_v full layer
        CHECK(ck.directory == test::repo_gguf_dir() / "tiny-gemma4-q4_0-mixed.gguf");
        // the model re-lays them as panels for the kernels, values unchanged
        const Model<float> m(load_checkpoint(test::repo_gguf_dir() / "tiny-gemma4-q4_0-mixed.gguf"), ModelOptions{1});
        const WeightView& q = m.weights().layers[1].gate_proj;
        CHECK(q.layout == WeightView::Layout::Panels);
        const WeightView& rows = ck.weights.layers[1].gate_proj;
        for (std::int64_t i = 0; i < rows.numel(); ++i) REQUIRE(q.at<float>(i) == rows.at<float>(i));
    }
    SECTION("a requested format re-encodes after loading") {
        const Checkpoint ck = load_checkpoint_as(test::repo_gguf_dir() / "tiny-gemma4-q4_0.gguf", {.format = WeightFormat::Int8});
        CHECK(ck.weights.layers[0].q_proj.dtype == DType::Q8);
    }
    SECTION("the other block types: as stored, from the mapping; or straight into the requested format") {
        for (const std::string name : {"tiny-gemma4-q4_k_m-mixed", "tiny-gemma4-iq4_xs"}) {  // carried in the repository
            INFO(name);
            const auto path = test::gguf_fixture(name);
            const auto t0 = std::chrono::steady_clock::now();
            const Checkpoint stored = load_checkpoint(path);
            const auto t1 = std::chrono::steady_clock::now();
            const Checkpoint int8 = load_checkpoint_as(path, {.format = WeightFormat::Int8});
            const auto t2 = std::chrono::steady_clock::now();
            const Checkpoint bf16 = load_checkpoint_as(path, {.format = WeightFormat::BF16});
            const WeightView& q = stored.weights.layers[0].q_proj;
            CHECK(q.dtype == DType::Ggml);
            const bool iq4 = name == "tiny-gemma4-iq4_xs";
            CHECK(q.ggml == (iq4 ? GgmlType::IQ4_XS : GgmlType::Q4_K));
            CHECK(stored.weights.embed_tokens.ggml == (iq4 ? GgmlType::IQ4_XS : GgmlType::Q6_K));
            CHECK(q.layout == WeightView::Layout::Rows);
            {  // in place: the view points into the mapped file, its bytes the tensor's
                const GgufFile f(path);
                const GgufTensorInfo& t = f.tensor("blk.0.attn_q.weight");
                CHECK(q.size_bytes == t.size_bytes);
                CHECK(std::memcmp(q.data, f.data(t), q.size_bytes) == 0);
            }
            CHECK(int8.weights.layers[0].q_proj.dtype == DType::Q8);
            CHECK(bf16.weights.layers[0].q_proj.dtype == DType::BF16);
            const auto ids = fixture_ids();
            const Logits<double> e = Model<double>(load_checkpoint(path), ModelOptions{2}).logits(ids);
            const Logits<double> i8 = Model<double>(load_checkpoint_as(path, {.format = WeightFormat::Int8}), ModelOptions{2}).logits(ids);
            const Logits<double> h = Model<double>(load_checkpoint_as(path, {.format = WeightFormat::BF16}), ModelOptions{2}).logits(ids);
            const double err_int8 = test::relative_error(i8.values.data(), e.values.data(), e.values.size());
            const double err_bf16 = test::relative_error(h.values.data(), e.values.data(), e.values.size());
            // the float path through the block kernels (int8 activations per 32): 0.026 and 0.033 measured
            const Logits<float> fl = Model<float>::load(path, ModelOptions{2}).logits(ids);
            const std::vector<double> fd(fl.values.begin(), fl.values.end());
            CHECK(test::relative_error(fd.data(), e.values.data(), e.values.size()) < 0.05);
            std::cout << "gguf " << name << ": load as stored " << std::chrono::duration<double, std::milli>(t1 - t0).count()
                      << " ms, into int8 " << std::chrono::duration<double, std::milli>(t2 - t1).count()
                      << " ms; f64 logits rel. error int8 " << err_int8 << ", bf16 " << err_bf16 << "\n";
            CHECK(err_int8 < 0.1);
            CHECK(err_bf16 < 0.05);
            CHECK(err_int8 > 0);  // re-encoding is not exact
        }
    }
}

TEST_CASE("gguf: inconsistent files are errors naming the key, tensor or architecture", "[model][gguf]") {
    using Kvs = std::vector<GgufKv>;
    using Ts = std::vector<GgufTensorOut>;
    CHECK_NOTHROW(load_checkpoint(edited_fixture("unchanged", [](Kvs&, Ts&) {})));

    const auto is_config = [](const std::string& label, auto edit, const std::string& needle) {
        INFO(label);
        const auto path = edited_fixture(label, edit);
        CHECK_THROWS_MATCHES(load_checkpoint(path), ConfigError, test::Has(needle) && test::Has(path.string()));
    };
    const auto is_shape = [](const std::string& label, auto edit, const std::string& needle) {
        INFO(label);
        const auto path = edited_fixture(label, edit);
        CHECK_THROWS_MATCHES(load_checkpoint(path), ShapeError, test::Has(needle) && test::Has(path.string()));
    };

    is_config("arch", [](Kvs& k, Ts&) { key(k, "general.architecture") = gguf_string("general.architecture", "llama"); },
              "general.architecture is 'llama'; only 'gemma4' is supported");
    is_config("no_arch", [](Kvs& k, Ts&) { drop_key(k, "general.architecture"); }, "'general.architecture': missing");
    for (const std::string required :
         {"gemma4.block_count", "gemma4.embedding_length", "gemma4.feed_forward_length", "gemma4.attention.head_count",
          "gemma4.attention.head_count_kv", "gemma4.attention.key_length", "gemma4.attention.key_length_swa",
          "gemma4.attention.sliding_window", "gemma4.attention.sliding_window_pattern", "gemma4.context_length",
          "gemma4.attention.layer_norm_rms_epsilon", "gemma4.rope.freq_base", "gemma4.rope.freq_base_swa"})
        is_config("missing_" + required, [&](Kvs& k, Ts&) { drop_key(k, required); }, "'" + required + "': missing");
    is_config("mistyped", [](Kvs& k, Ts&) { key(k, "gemma4.block_count") = gguf_string("gemma4.block_count", "6"); },
              "'gemma4.block_count': expected an integer, got STRING");
    is_config("kv_length", [](Kvs& k, Ts&) { key(k, "gemma4.attention.head_count_kv") = gguf_int32_array("gemma4.attention.head_count_kv", {2, 2, 1}); },
              "'gemma4.attention.head_count_kv': has 3 entries, block_count is 6");
    is_config("kv_mixed", [](Kvs& k, Ts&) {
        key(k, "gemma4.attention.head_count_kv") = gguf_int32_array("gemma4.attention.head_count_kv", {2, 4, 1, 2, 2, 1});
    }, "'gemma4.attention.head_count_kv': differs between layers of the same kind");
    is_config("pattern_type", [](Kvs& k, Ts&) {
        key(k, "gemma4.attention.sliding_window_pattern") = gguf_int32_array("gemma4.attention.sliding_window_pattern", {1, 1, 0, 1, 1, 0});
    }, "'gemma4.attention.sliding_window_pattern': expected ARRAY[BOOL], got ARRAY[INT32]");
    is_config("shared_kv", [](Kvs& k, Ts&) { key(k, "gemma4.attention.shared_kv_layers") = gguf_uint32("gemma4.attention.shared_kv_layers", 2); },
              "'gemma4.attention.shared_kv_layers': must be 0");
    is_config("value_length", [](Kvs& k, Ts&) { key(k, "gemma4.attention.value_length") = gguf_uint32("gemma4.attention.value_length", 16); },
              "'gemma4.attention.value_length': must equal attention.key_length");
    is_config("untied", [](Kvs&, Ts& t) { auto o = tensor(t, "token_embd.weight"); o.name = "output.weight"; t.push_back(o); },
              "tensor 'output.weight' is present: an untied LM head is not supported");

    // Shapes against the metadata
    is_shape("ffn_length", [](Kvs& k, Ts&) { key(k, "gemma4.feed_forward_length") = gguf_uint32("gemma4.feed_forward_length", 128); },
             "tensor 'blk.0.ffn_gate.weight' has ne [64, 96]; the metadata implies ne [64, 128]");
    is_shape("head_count", [](Kvs& k, Ts&) { key(k, "gemma4.attention.head_count") = gguf_uint32("gemma4.attention.head_count", 2); },
             "tensor 'blk.0.attn_q.weight' has ne [64, 64]; the metadata implies ne [64, 32]");
    is_shape("embedding_length", [](Kvs& k, Ts&) { key(k, "gemma4.embedding_length") = gguf_uint32("gemma4.embedding_length", 32); },
             "tensor 'token_embd.weight' has ne [64, 384]; embedding_length 32");
    is_shape("missing_tensor", [](Kvs&, Ts& t) { drop_tensor(t, "blk.3.ffn_up.weight"); }, "missing tensor 'blk.3.ffn_up.weight'");
    is_shape("missing_v", [](Kvs&, Ts& t) { drop_tensor(t, "blk.0.attn_v.weight"); }, "missing tensor 'blk.0.attn_v.weight'");
    is_shape("unexpected", [](Kvs&, Ts& t) { auto o = tensor(t, "blk.0.attn_norm.weight"); o.name = "blk.0.extra.weight"; t.push_back(o); },
             "unexpected tensor 'blk.0.extra.weight'");
    is_shape("half_v", [](Kvs&, Ts& t) { auto o = tensor(t, "blk.2.attn_k.weight"); o.name = "blk.2.attn_v.weight"; t.push_back(o); },
             "some full-attention layers have attn_v.weight and others do not");
    is_shape("rope_freqs_value", [](Kvs&, Ts& t) {
        auto& r = tensor(t, "rope_freqs.weight");
        const float half = 0.5f;
        std::memcpy(r.data.data() + 4 * 6, &half, 4);
    }, "tensor 'rope_freqs.weight' entry 6 is 0.5");
    is_shape("rope_freqs_shape", [](Kvs&, Ts& t) {
        auto& r = tensor(t, "rope_freqs.weight");
        r.ne = {8};
        r.data.resize(32);
    }, "tensor 'rope_freqs.weight' has ne [8]; attention.key_length 32 implies ne [16]");
    is_shape("unsupported_type", [](Kvs&, Ts& t) {
        auto& w = tensor(t, "blk.1.ffn_up.weight");
        w.type = GgmlType::F64;
        w.data.assign(64 * 96 * 8, '\0');
    }, "tensor 'blk.1.ffn_up.weight': ggml type F64 is not supported");
    {
        // a NaN scale in a Q8_0 block
        const auto path = edited_fixture("nan_scale", [](Kvs&, Ts& t) {
            auto& w = tensor(t, "blk.4.attn_q.weight");
            w.data[0] = '\xff';
            w.data[1] = '\x7f';
        });
        CHECK_THROWS_MATCHES(load_checkpoint(path), FormatError, test::Has("tensor 'blk.4.attn_q.weight': row 0 has a non-finite"));
    }
    // Not a GGUF file at all
    const auto junk = test::temp_dir("gguf_junk") / "x.gguf";
    std::ofstream(junk) << "{\"not\": \"gguf\"}";
    CHECK_THROWS_MATCHES(load_checkpoint(junk), FormatError, test::Has("bad magic"));
}

TEST_CASE("gguf: a block type other than Q8_0 / Q4_0 runs as stored, exports unchanged, and is checked", "[model][gguf]") {
    using Kvs = std::vector<GgufKv>;
    using Ts = std::vector<GgufTensorOut>;
    // blk.4.attn_q.weight (64 rows of 64) as Q4_1: random codes, d 0.01, m -0.02
    const auto as_q4_1 = [](Ts& t, int nan_row) {
        auto& w = tensor(t, "blk.4.attn_q.weight");
        w.type = GgmlType::Q4_1;
        w.data.assign(64 * 2 * 20, '\0');
        detail::SplitMix64 rng(9);
        for (std::size_t b = 0; b < w.data.size() / 20; ++b) {
            const std::uint16_t d = float_to_f16(0.01f), m = float_to_f16(-0.02f);
            std::memcpy(w.data.data() + 20 * b, &d, 2);
            std::memcpy(w.data.data() + 20 * b + 2, &m, 2);
            for (int j = 4; j < 20; ++j) w.data[20 * b + static_cast<std::size_t>(j)] = static_cast<char>(rng.next() & 0xff);
        }
        if (nan_row >= 0) {  // the m of the row's second block
            w.data[static_cast<std::size_t>(20 * (2 * nan_row + 1) + 2)] = '\x00';
            w.data[static_cast<std::size_t>(20 * (2 * nan_row + 1) + 3)] = '\x7e';
        }
    };
    const auto path = edited_fixture("q4_1", [&](Kvs&, Ts& t) { as_q4_1(t, -1); });
    const Checkpoint ck = load_checkpoint(path);
    const WeightView& q = ck.weights.layers[4].q_proj;
    CHECK(q.dtype == DType::Ggml);
    CHECK(q.ggml == GgmlType::Q4_1);
    CHECK(q.size_bytes == 64 * 2 * 20);
    const GgufFile f(path);
    CHECK(std::memcmp(q.data, f.data(f.tensor("blk.4.attn_q.weight")), q.size_bytes) == 0);  // the file's blocks
    // exported as the same blocks, so the file reads back bit for bit
    const auto out = test::temp_dir("gguf_q4_1_export") / "out.gguf";
    write_gguf_model(out, ck.config, ck.weights);
    const GgufFile g(out);
    const GgufTensorInfo& t = g.tensor("blk.4.attn_q.weight");
    CHECK(t.type == GgmlType::Q4_1);
    CHECK(std::memcmp(g.data(t), q.data, q.size_bytes) == 0);
    const auto ids = fixture_ids();
    CHECK(max_abs_diff(Model<double>::load(path, ModelOptions{2}).logits(ids).values, Model<double>::load(out, ModelOptions{2}).logits(ids).values) == 0.0);
    // a safetensors checkpoint cannot hold the blocks: refused by name, not written as garbage
    CHECK_THROWS_MATCHES(save_checkpoint(ck, test::temp_dir("gguf_q4_1_saved") / "ck"), InvalidArgument,
                         test::Has("'model.layers.4.self_attn.q_proj.weight' holds GGUF Q4_1 blocks, which a safetensors checkpoint cannot hold"));
    // a NaN m is a FormatError naming the tensor and row
    const auto bad = edited_fixture("q4_1_nan", [&](Kvs&, Ts& t) { as_q4_1(t, 3); });
    CHECK_THROWS_MATCHES(load_checkpoint(bad), FormatError,
                         test::Has(bad.string()) && test::Has("tensor 'blk.4.attn_q.weight': row 3 has a non-finite block scale"));
}

TEST_CASE("gguf: a GGUF file's model saves as a checkpoint directory that loads the same", "[model][gguf]") {
    const auto path = test::repo_gguf_dir() / "tiny-gemma4-q8_0.gguf";
    const auto dir = test::temp_dir("gguf_saved");
    save_checkpoint(load_checkpoint(path), dir);
    const auto ids = fixture_ids();
    const Logits<double> a = Model<double>::load(path, ModelOptions{2}).logits(ids);
    const Logits<double> b = Model<double>::load(dir, ModelOptions{2}).logits(ids);
    CHECK(max_abs_diff(a.values, b.values) == 0.0);
    // The float path too: the GGUF's Q8_0 blocks are our Q8 codes and scales, through the same
    // kernels as our own int8 checkpoint, bit for bit.
    for (const std::string name : {"tiny-gemma4-q8_0", "tiny-gemma4-q4_0"}) {
        const auto src = test::repo_gguf_dir() / (name + ".gguf");
        const auto saved = test::temp_dir("gguf_saved_" + name);
        save_checkpoint(load_checkpoint(src), saved.string() + "/ck");
        const Logits<float> fa = Model<float>::load(src, ModelOptions{2}).logits(ids);
        const Logits<float> fb = Model<float>::load(saved / "ck", ModelOptions{2}).logits(ids);
        CHECK(fa.values == fb.values);
    }
}

namespace {

Gemma4Config export_config() {
    Gemma4Config c = tiny_config();  // both layer kinds, k_eq_v, partial RoPE on the full layers
    c.has_vision = c.has_audio = false;
    return c;
}

std::string file_bytes(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

TEST_CASE("gguf streaming writer: the same bytes as the in-memory writer, and a tensor's bytes must add up", "[model][gguf][gguf-export]") {
    const auto dir = test::temp_dir("gguf_streaming");
    const std::vector<GgufKv> kvs{gguf_string("general.architecture", "x"), gguf_uint32("n", 3)};
    const std::vector<GgufTensorOut> tensors{{"a", {3}, GgmlType::F32, std::string(12, '\1')},
                                             {"b", {32, 2}, GgmlType::Q8_0, std::string(68, '\2')}};
    std::vector<GgufTensorHeader> headers;
    for (const auto& t : tensors) headers.push_back({t.name, t.ne, t.type, t.data.size()});
    const auto size = write_gguf_streaming(dir / "s.gguf", kvs, headers, [&](std::size_t i, const auto& write) {
        const std::string& d = tensors[i].data;
        write(d.data(), 5);  // in pieces
        write(d.data() + 5, d.size() - 5);
    });
    const std::string expected = gguf_file_bytes(kvs, tensors);
    CHECK(file_bytes(dir / "s.gguf") == expected);
    CHECK(size == expected.size());
    CHECK_THROWS_AS(write_gguf_streaming(dir / "t.gguf", kvs, headers,
                                         [&](std::size_t i, const auto& write) { write(tensors[i].data.data(), tensors[i].data.size() - 1); }),
                    InvalidArgument);
    CHECK_THROWS_AS(write_gguf_streaming(dir / "no such dir" / "u.gguf", kvs, headers, [](std::size_t, const auto&) {}), IoError);
}

TEST_CASE("gguf export: Q8 and Q4 weights as Q8_0 / Q4_0 load back with the config and bit-identical logits", "[model][gguf][gguf-export]") {
    const Gemma4Config c = export_config();
    const auto dir = test::temp_dir("gguf_export");
    const std::pair<WeightFormat, std::int64_t> formats[] = {
        {WeightFormat::Int8, 32}, {WeightFormat::Int4, 32}, {WeightFormat::Int8, 64}, {WeightFormat::Int4, 64}};
    for (const auto& [format, block] : formats) {
        const bool q8 = format == WeightFormat::Int8;
        INFO((q8 ? "int8 -> Q8_0" : "int4 -> Q4_0") << ", blocks of " << block);
        ModelWeights w = random_weights(c, format, 7, 2, block);
        const auto path = dir / ((q8 ? "q8_0_" : "q4_0_") + std::to_string(block) + ".gguf");
        const std::uint64_t bytes = write_gguf_model(path, c, w, 2);
        CHECK(std::filesystem::file_size(path) == bytes);

        const GgufFile f(path);
        const GgmlType want = q8 ? GgmlType::Q8_0 : GgmlType::Q4_0;
        for (const std::string name : {"token_embd.weight", "blk.0.attn_q.weight", "blk.2.attn_k.weight", "blk.5.ffn_down.weight"})
            CHECK(f.find_tensor(name)->type == want);
        CHECK_FALSE(f.find_tensor("blk.2.attn_v.weight"));  // k_eq_v on the full layers
        REQUIRE(f.find_tensor("rope_freqs.weight"));
        const Gemma4Config g = gguf_config(f);
        REQUIRE(g.num_hidden_layers == c.num_hidden_layers);
        for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
            INFO("layer " << i);
            const LayerGeometry a = c.layer(i), b = g.layer(i);
            CHECK(a.kind == b.kind);
            CHECK(a.q_dim() == b.q_dim());
            CHECK(a.kv_dim() == b.kv_dim());
            CHECK(a.has_v_proj == b.has_v_proj);
            CHECK(a.rope_pairs == b.rope_pairs);
            CHECK(a.window == b.window);
        }
        CHECK(g.tokens.eos_count == 2);

        const Model<float> from_file = Model<float>::load(path, ModelOptions{2});
        const Model<float> in_memory(Checkpoint{c, std::move(w), {}, "model.language_model."}, ModelOptions{2});
        if (block == 32) {  // the same blocks: the same model
            std::vector<std::int32_t> ids;
            for (std::int32_t i = 0; i < 20; ++i) ids.push_back(2 + (i * 37) % 500);  // past the window of 8
            CHECK(from_file.logits(ids).values == in_memory.logits(ids).values);
        } else {  // a block of 64 is two Q8_0 / Q4_0 blocks with its scale: the same values, in blocks of 32
            ModelWeights a = from_file.weights(), b = in_memory.weights();
            const auto ma = big_matrices(a), mb = big_matrices(b);
            REQUIRE(ma.size() == mb.size());
            for (std::size_t i = 0; i < ma.size(); ++i) {
                INFO(mb[i]->name);
                CHECK(ma[i]->block == 32);
                CHECK(mb[i]->block == 64);
                std::int64_t differ = 0;
                for (std::int64_t e = 0; e < mb[i]->numel(); e += 7) differ += ma[i]->at<float>(e) != mb[i]->at<float>(e);
                CHECK(differ == 0);
            }
        }
    }
    // What GGUF cannot hold is refused by name.
    ModelWeights odd = random_weights(c, WeightFormat::Int8, 1, 2);
    Gemma4Config sliding_proportional = c;
    sliding_proportional.rope_sliding.rope_type = RopeType::Proportional;
    CHECK_THROWS_AS(write_gguf_model(dir / "bad.gguf", sliding_proportional, odd, 2), InvalidArgument);
}
