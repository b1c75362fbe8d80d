// Weight formats end to end: logits quality of bf16 / int8 / int4 against the double path,
// quantized checkpoint save → load round trip, and clear errors for inconsistent files.
#include <catch2/catch.hpp>

#include <gemma4/io/safetensors.hpp>
#include <gemma4/model/model.hpp>
#include <gemma4/model/quantize.hpp>
#include <gemma4/model/save_checkpoint.hpp>
#include <gemma4/model/random_checkpoint.hpp>
#include <gemma4/model/random_weights.hpp>

#include <nlohmann/json.hpp>

#include "support/message_matcher.hpp"
#include "support/temp_dir.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>

#include "kernels/kernel_test_support.hpp"

using namespace gemma4;
using gemma4::test::Rng;

namespace {


std::vector<std::vector<std::int32_t>> prompts(std::int64_t vocab) {
    std::vector<std::vector<std::int32_t>> p;
    std::uint32_t s = 12345;
    for (int i = 0; i < 4; ++i) {
        std::vector<std::int32_t> ids;
        for (int j = 0; j < 24; ++j) {
            s = s * 1664525u + 1013904223u;
            ids.push_back(static_cast<std::int32_t>((s >> 8) % static_cast<std::uint32_t>(vocab)));
        }
        p.push_back(ids);
    }
    return p;
}

struct Quality {
    double top1 = 0, mean_kl = 0;
};

template <class T>
Quality compare(const Model<double>& ref, const Model<T>& m, const std::vector<std::vector<std::int32_t>>& ps) {
    Quality q;
    std::int64_t rows = 0;
    for (const auto& ids : ps) {
        const Logits<double> a = ref.logits(ids);
        const Logits<T> b = m.logits(ids);
        for (std::int64_t r = 0; r < a.rows; ++r, ++rows) {
            const auto ra = a.row(r);
            const auto rb = b.row(r);
            std::size_t ia = 0, ib = 0;
            for (std::size_t i = 1; i < ra.size(); ++i) {
                if (ra[i] > ra[ia]) ia = i;
                if (rb[i] > rb[ib]) ib = i;
            }
            q.top1 += ia == ib;
            double ma = ra[ia], mb = rb[ib], za = 0, zb = 0;
            for (std::size_t i = 0; i < ra.size(); ++i) {
                za += std::exp(ra[i] - ma);
                zb += std::exp(static_cast<double>(rb[i]) - mb);
            }
            double kl = 0;
            for (std::size_t i = 0; i < ra.size(); ++i) {
                const double lpa = ra[i] - ma - std::log(za), lpb = static_cast<double>(rb[i]) - mb - std::log(zb);
                kl += std::exp(lpa) * (lpa - lpb);
            }
            q.mean_kl += kl;
        }
    }
    q.top1 /= static_cast<double>(rows);
    q.mean_kl /= static_cast<double>(rows);
    return q;
}

}  // namespace

TEST_CASE("logits quality of each weight format against the double path", "[formats][quality]") {
    const auto dir = test::temp_dir("formats_quality");
    const Gemma4Config c = test::small_model_config();
    write_random_checkpoint(dir, c, {.seed = 5, .dtype = DType::BF16});
    const auto ps = prompts(c.vocab_size);
    const Model<double> ref = Model<double>::load(dir, ModelOptions{2});
    struct Case {
        WeightFormat format;
        double min_top1, max_kl;
    };
    // Bounds: a few times the values measured at the time of writing (docs/performance.md).
    for (const Case& k : {Case{WeightFormat::AsStored, 0.99, 1e-6}, Case{WeightFormat::Int8, 0.95, 1.5e-2}, Case{WeightFormat::Int4, 0.75, 0.3}}) {
        DYNAMIC_SECTION(weight_format_name(k.format)) {
            const Model<float> m = Model<float>::load(dir, ModelOptions{2}, LoadOptions{.format = k.format});
            const Quality q = compare(ref, m, ps);
            std::printf("quality %-9s top-1 agreement %.4f, mean KL %.3e\n", std::string(weight_format_name(k.format)).c_str(), q.top1, q.mean_kl);
            CHECK(q.top1 >= k.min_top1);
            CHECK(q.mean_kl <= k.max_kl);
        }
    }
}

namespace {

/// The values format `t` (Q8 or Q4) holds for one row of source values `x`, worked out here from
/// docs/checkpoint-formats.md rather than with the library's encoder: per block of 32, the scale
/// is max|x| / max_code rounded to f16, each code is x / scale rounded to nearest (ties to even)
/// and clamped to ±max_code, and the value is code × scale.
std::vector<double> expected_quantized_row(DType t, std::size_t block, const std::vector<float>& x) {
    const int max_code = t == DType::Q4 ? 7 : 127;
    std::vector<double> out(x.size());
    for (std::size_t b0 = 0; b0 < x.size(); b0 += block) {
        const std::size_t b1 = std::min(x.size(), b0 + block);
        float amax = 0;
        for (std::size_t i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float scale = f16_to_float(float_to_f16(std::min(amax / static_cast<float>(max_code), 65504.0f)));
        const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
        for (std::size_t i = b0; i < b1; ++i) {
            const int code = std::clamp(static_cast<int>(std::nearbyint(x[i] * inverse)), -max_code, max_code);
            out[i] = static_cast<double>(code) * static_cast<double>(scale);
        }
    }
    return out;
}

}  // namespace

TEST_CASE("the double path dequantizes quantized weights exactly", "[formats]") {
    const auto dir = test::temp_dir("formats_double");
    write_random_checkpoint(dir, tiny_config(), {.seed = 6, .dtype = DType::BF16});
    const Checkpoint source = load_checkpoint(dir);  // bf16, as written
    ModelWeights sw = source.weights;
    const auto ms = big_matrices(sw);
    for (WeightFormat f : {WeightFormat::Int8, WeightFormat::Int4})
        for (std::int64_t block : {32, 64}) {
            INFO(weight_format_name(f) << " block " << block);
            const Checkpoint q = load_checkpoint_as(dir, {.format = f, .block = block});
            // Every element the double path reads from a quantized matrix equals code × scale
            // worked out from the source value; the same model with its matrices replaced by those
            // values (f64) then gives the same logits.
            Checkpoint exact = q;
            ModelWeights qw = q.weights;
            const auto mq = big_matrices(qw), me = big_matrices(exact.weights);
            REQUIRE(mq.size() == me.size());
            REQUIRE(mq.size() == ms.size());
            std::deque<std::vector<double>> values;
            std::int64_t checked = 0, wrong = 0, nonzero = 0;
            for (std::size_t i = 0; i < mq.size(); ++i) {
                const WeightView& v = *mq[i];
                const WeightView& s = *ms[i];
                INFO(v.name);
                REQUIRE(v.dtype == format_dtype(f));
                REQUIRE(s.dtype == DType::BF16);
                REQUIRE(v.shape == s.shape);
                const std::int64_t rows = v.rows(), cols = v.cols();
                auto& out = values.emplace_back(static_cast<std::size_t>(rows * cols));
                std::vector<float> x(static_cast<std::size_t>(cols));
                std::vector<double> got(static_cast<std::size_t>(cols));
                for (std::int64_t r = 0; r < rows; ++r) {
                    for (std::int64_t c = 0; c < cols; ++c) x[static_cast<std::size_t>(c)] = s.at<float>(r * cols + c);
                    REQUIRE(v.block == block);
                    const std::vector<double> want = expected_quantized_row(v.dtype, static_cast<std::size_t>(block), x);
                    detail::load_row<double>(v, r, got.data());
                    for (std::int64_t c = 0; c < cols; ++c) {
                        const auto k = static_cast<std::size_t>(c);
                        if (got[k] != want[k] && wrong++ < 5)
                            FAIL_CHECK(v.name << " [" << r << ", " << c << "]: " << got[k] << ", expected " << want[k] << " (source " << x[k] << ")");
                        nonzero += want[k] != 0;
                        ++checked;
                        out[static_cast<std::size_t>(r * cols) + k] = want[k];
                    }
                }
                WeightView& e = *me[i];
                e.dtype = DType::F64;
                e.data = reinterpret_cast<const std::byte*>(out.data());
                e.size_bytes = out.size() * sizeof(double);
                e.scales = nullptr;
            }
            std::int64_t elements = 0;
            for (const WeightView* v : ms) elements += v->numel();
            CHECK(checked == elements);
            CHECK(wrong == 0);
            CHECK(nonzero > checked / 2);
            const Model<double> quantized(q, ModelOptions{1}), reference(exact, ModelOptions{1});
            CHECK(quantized.embed_scale() == 8.0);  // √64, rounded to the original bf16
            const std::vector<std::int32_t> ids{1, 2, 3, 17, 5};
            const auto a = quantized.logits(ids), b = reference.logits(ids);
            REQUIRE(a.values.size() == b.values.size());
            REQUIRE(a.rows == 5);
            double worst = 0, largest = 0;
            for (std::size_t i = 0; i < a.values.size(); ++i) {
                worst = std::max(worst, std::fabs(a.values[i] - b.values[i]));
                largest = std::max(largest, std::fabs(b.values[i]));
            }
            CHECK(largest > 0);
            CHECK(worst <= 1e-12 * largest);
        }
}

TEST_CASE("quantized checkpoints round-trip through save and mmap load, in blocks of 32 and 64", "[formats][io]") {
    for (WeightFormat f : {WeightFormat::Int8, WeightFormat::Int4})
        for (std::int64_t block : {0, 32, 64})
            DYNAMIC_SECTION(weight_format_name(f) << " block " << block) {
                const std::string tag = std::string(weight_format_name(f)) + "_" + std::to_string(block);
                const auto src = test::temp_dir("formats_src_" + tag);
                const auto out = test::temp_dir("formats_out_" + tag);
                write_random_checkpoint(src, tiny_config(), {.seed = 7, .dtype = DType::BF16, .shards = 2});
                const Checkpoint q = load_checkpoint_as(src, {.format = f, .block = block});
                const std::int64_t want_block = block ? block : 32;  // 0: the default
                CHECK(q.weights.layers[1].down_proj.block == want_block);
                save_checkpoint(q, out);
                const Checkpoint back = load_checkpoint(out);
                CHECK(back.weights.layers[1].down_proj.dtype == format_dtype(f));
                CHECK(back.weights.layers[1].down_proj.block == want_block);
                CHECK(SafetensorsFile(out / "model.safetensors").metadata().at("gemma4.block_size") == std::to_string(want_block));
                ModelWeights a = q.weights, b = back.weights;
                const auto ma = big_matrices(a), mb = big_matrices(b);
                REQUIRE(ma.size() == mb.size());
                for (std::size_t i = 0; i < ma.size(); ++i) {
                    INFO(ma[i]->name);
                    // in memory as panels, in the file as rows: the same rows either way
                    CHECK(ma[i]->layout == WeightView::Layout::Panels);
                    CHECK(mb[i]->layout == WeightView::Layout::Rows);
                    REQUIRE(mb[i]->size_bytes == static_cast<std::size_t>(mb[i]->rows() * quant::row_bytes(mb[i]->dtype, mb[i]->cols())));
                    const std::int64_t rb = quant::row_bytes(ma[i]->dtype, ma[i]->cols()), nb = quant::blocks_per_row(ma[i]->cols(), want_block);
                    std::vector<std::byte> ca(static_cast<std::size_t>(rb)), cb(ca.size());
                    std::vector<std::uint16_t> sa(static_cast<std::size_t>(nb)), sb(sa.size());
                    std::int64_t differ = 0;
                    for (std::int64_t r = 0; r < ma[i]->rows(); ++r) {
                        ma[i]->quant_row(r, ca.data(), sa.data());
                        mb[i]->quant_row(r, cb.data(), sb.data());
                        differ += ca != cb || sa != sb;
                    }
                    CHECK(differ == 0);
                    CHECK(mb[i]->origin == DType::BF16);
                }
                // loading with the stored format converts nothing: the views point into the mapping
                // (the model re-lays them as panels)
                const Checkpoint again = load_checkpoint_as(out, {.format = f});
                CHECK(again.weights.layers[0].q_proj.layout == WeightView::Layout::Rows);
                CHECK(again.weights.layers[0].q_proj.dtype == format_dtype(f));
                const std::vector<std::int32_t> ids{5, 9, 200, 31, 7};
                const Model<float> m1(q, ModelOptions{2});
                const Model<float> m2 = Model<float>::load(out, ModelOptions{1});
                CHECK(m2.weights().layers[0].q_proj.layout == WeightView::Layout::Panels);
                const auto l1 = m1.logits(ids), l2 = m2.logits(ids);
                REQUIRE(l1.values.size() == l2.values.size());
                CHECK(std::memcmp(l1.values.data(), l2.values.data(), l1.values.size() * sizeof(float)) == 0);
            }
}

namespace {

/// Every tensor of `f`, referring to its mapped bytes.
std::vector<TensorRef> tensor_refs(const SafetensorsFile& f) {
    std::vector<TensorRef> refs;
    for (const auto& [name, e] : f.entries()) {
        const WeightView v = f.view(name);
        refs.push_back({name, e.dtype, e.shape, v.data, v.size_bytes});
    }
    return refs;
}

/// Rewrites `from`'s model.safetensors into `to` with one tensor or the metadata edited.
void rewrite(const std::filesystem::path& from, const std::filesystem::path& to, const std::function<void(std::vector<TensorRef>&, std::map<std::string, std::string>&)>& edit) {
    std::filesystem::create_directories(to);
    std::filesystem::copy_file(from / "config.json", to / "config.json", std::filesystem::copy_options::overwrite_existing);
    SafetensorsFile f(from / "model.safetensors");
    std::vector<TensorRef> refs = tensor_refs(f);
    auto meta = f.metadata();
    edit(refs, meta);
    write_safetensors(to / "model.safetensors", refs, meta);
}

/// Splits `from`'s model.safetensors into two shards in `to`, listed in an index, the second
/// shard's metadata edited by `edit`.
void shard_in_two(const std::filesystem::path& from, const std::filesystem::path& to,
                  const std::function<void(std::map<std::string, std::string>&)>& edit) {
    std::filesystem::remove_all(to);
    std::filesystem::create_directories(to);
    std::filesystem::copy_file(from / "config.json", to / "config.json");
    SafetensorsFile f(from / "model.safetensors");
    const std::vector<TensorRef> refs = tensor_refs(f);
    std::vector<TensorRef> shards[2];
    nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
    const char* names[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    for (std::size_t i = 0; i < refs.size(); ++i) {
        const std::size_t k = i < refs.size() / 2 ? 0 : 1;
        shards[k].push_back(refs[i]);
        index["weight_map"][refs[i].name] = names[k];
    }
    auto second = f.metadata();
    edit(second);
    write_safetensors(to / names[0], shards[0], f.metadata());
    write_safetensors(to / names[1], shards[1], second);
    std::ofstream(to / "model.safetensors.index.json") << index.dump();
}

}  // namespace

TEST_CASE("the shards of a quantized checkpoint must agree on its format and block size", "[formats][errors]") {
    const auto src = test::temp_dir("formats_shards_src");
    const auto good = test::temp_dir("formats_shards_good");
    const auto split = test::temp_dir("formats_shards_split");
    write_random_checkpoint(src, tiny_config(), {.seed = 8, .dtype = DType::BF16});
    save_checkpoint(load_checkpoint_as(src, {.format = WeightFormat::Int8, .block = 64}), good);

    shard_in_two(good, split, [](auto&) {});  // agreeing shards load as the single file does
    const Checkpoint whole = load_checkpoint(good), sharded = load_checkpoint(split);
    CHECK(sharded.weights.layers[1].up_proj.block == 64);
    const WeightView a = whole.weights.layers[1].up_proj, b = sharded.weights.layers[1].up_proj;
    REQUIRE(a.size_bytes == b.size_bytes);
    CHECK(std::memcmp(a.data, b.data, a.size_bytes) == 0);

    shard_in_two(good, split, [](auto& m) { m["gemma4.block_size"] = "32"; });
    CHECK_THROWS_MATCHES(load_checkpoint(split), FormatError,
                         test::Has("model-00002-of-00002.safetensors: __metadata__.gemma4.block_size differs between shards"));
    shard_in_two(good, split, [](auto& m) { m["gemma4.weight_format"] = "int4"; });
    CHECK_THROWS_MATCHES(load_checkpoint(split), FormatError,
                         test::Has("model-00002-of-00002.safetensors: __metadata__.gemma4.weight_format differs between shards"));
}

TEST_CASE("a block size other than 32 or 64 is refused by name, whatever the format", "[formats][errors]") {
    const auto src = test::temp_dir("formats_bad_block");
    write_random_checkpoint(src, tiny_config(), {.seed = 8, .dtype = DType::BF16});
    for (const WeightFormat f : {WeightFormat::Int8, WeightFormat::Int4, WeightFormat::AsStored, WeightFormat::BF16}) {
        INFO(weight_format_name(f));
        CHECK_THROWS_MATCHES(load_checkpoint_as(src, {.format = f, .block = 48}), InvalidArgument,
                             test::Has("quant block: 48 elements per scale; expected 32 or 64"));
    }
    CHECK_THROWS_MATCHES(random_weights(tiny_config(), WeightFormat::Int4, 1, 2, 16), InvalidArgument,
                         test::Has("quant block: 16 elements per scale; expected 32 or 64"));
    CHECK(random_weights(tiny_config(), WeightFormat::Int4, 1, 2, 64).layers[0].up_proj.block == 64);
}

TEST_CASE("a checkpoint holds one block size: matrices of two are refused at save, naming one", "[formats][errors]") {
    const auto src = test::temp_dir("formats_mixed_blocks");
    write_random_checkpoint(src, tiny_config(), {.seed = 8, .dtype = DType::BF16});
    const Checkpoint narrow = load_checkpoint_as(src, {.format = WeightFormat::Int8, .block = 32});
    Checkpoint mixed = load_checkpoint_as(src, {.format = WeightFormat::Int8, .block = 64});
    mixed.weights.layers[1].up_proj = narrow.weights.layers[1].up_proj;  // `narrow` keeps its bytes alive
    CHECK_THROWS_MATCHES(save_checkpoint(mixed, test::temp_dir("formats_mixed_blocks_out")), InvalidArgument,
                         test::Has("save_tensors: matrices of mixed quantized formats or block sizes ('model.language_model.layers.1.mlp.up_proj.weight')"));
}

TEST_CASE("inconsistent quantized checkpoints are clear errors", "[formats][errors]") {
    const auto src = test::temp_dir("formats_err_src");
    const auto good = test::temp_dir("formats_err_good");
    write_random_checkpoint(src, tiny_config(), {.seed = 8, .dtype = DType::BF16});
    save_checkpoint(load_checkpoint_as(src, {.format = WeightFormat::Int8, .block = 64}), good);
    const std::string q = "model.language_model.layers.0.self_attn.q_proj.weight";
    const auto bad = test::temp_dir("formats_err_bad");

    rewrite(good, bad, [](auto&, auto& m) { m["gemma4.weight_format"] = "int3"; });
    REQUIRE_THROWS_AS(load_checkpoint(bad), FormatError);
    REQUIRE_THROWS_WITH(load_checkpoint(bad), Catch::Contains("weight_format 'int3' is not int8 or int4"));

    rewrite(good, bad, [](auto&, auto& m) { m["gemma4.block_size"] = "48"; });
    REQUIRE_THROWS_AS(load_checkpoint(bad), FormatError);
    REQUIRE_THROWS_WITH(load_checkpoint(bad), Catch::Contains("block_size must be '32' or '64' for int8"));

    // written in blocks of 64: said to be 32, the scales have half the columns they need
    rewrite(good, bad, [](auto&, auto& m) { m["gemma4.block_size"] = "32"; });
    REQUIRE_THROWS_AS(load_checkpoint(bad), ShapeError);
    REQUIRE_THROWS_WITH(load_checkpoint(bad), Catch::Contains("_scale' holds F16") && Catch::Contains("expected F16"));

    rewrite(good, bad, [&](auto& refs, auto&) {
        for (auto& r : refs)
            if (r.name == q + "_scale") r.shape = {r.shape[1], r.shape[0]};
    });
    REQUIRE_THROWS_AS(load_checkpoint(bad), ShapeError);
    REQUIRE_THROWS_WITH(load_checkpoint(bad), Catch::Contains("'" + q + "_scale' holds F16"));

    rewrite(good, bad, [&](auto& refs, auto&) {
        for (auto& r : refs)
            if (r.name == q) r.dtype = DType::U8;
    });
    REQUIRE_THROWS_AS(load_checkpoint(bad), ShapeError);
    REQUIRE_THROWS_WITH(load_checkpoint(bad), Catch::Contains("'" + q + "' holds U8"));

    rewrite(good, bad, [](auto&, auto& m) { m.erase("gemma4.weight_format"); });
    REQUIRE_THROWS_AS(load_checkpoint(bad), ShapeError);
    REQUIRE_THROWS_WITH(load_checkpoint(bad), Catch::Contains("has shape [512, 128], config.json implies [512, 64]"));

    rewrite(good, bad, [](auto&, auto& m) { m.erase("gemma4.origin_dtype"); });
    REQUIRE_THROWS_AS(load_checkpoint(bad), FormatError);
    REQUIRE_THROWS_WITH(load_checkpoint(bad), Catch::Contains("origin_dtype"));
}

TEST_CASE("a batch of quantized decodes equals each sequence decoding alone, bit for bit", "[formats][batch]") {
    // 12 sequences in one step put 12 tokens through every matrix (the AMX pass where the CPU has
    // it); alone, each step is a single token (the VNNI or portable pass). Both compute the same
    // block sums and float sequence, so the logits agree exactly.
    const auto dir = test::temp_dir("formats_batch");
    const Gemma4Config c = test::small_model_config();
    write_random_checkpoint(dir, c, {.seed = 9, .dtype = DType::BF16});
    for (WeightFormat format : {WeightFormat::Int8, WeightFormat::Int4})
        for (std::int64_t block : {32, 64}) {
            DYNAMIC_SECTION(weight_format_name(format) << " block " << block) {
                const Model<float> m = Model<float>::load(dir, ModelOptions{2}, LoadOptions{.format = format, .block = block});
                constexpr int kSeqs = 12, kSteps = 3;
                KVCache<float> batched = m.make_cache(), alone = m.make_cache();
                std::vector<SeqId> bs, as;
                std::vector<std::vector<std::int32_t>> next(kSeqs);
                std::uint32_t s = 77;
                auto token = [&] {
                    s = s * 1664525u + 1013904223u;
                    return static_cast<std::int32_t>((s >> 8) % static_cast<std::uint32_t>(c.vocab_size));
                };
                for (int i = 0; i < kSeqs; ++i) {  // ragged prompts, some past the sliding window
                    std::vector<std::int32_t> prompt(static_cast<std::size_t>(3 + 2 * i));
                    for (auto& id : prompt) id = token();
                    bs.push_back(batched.add_sequence());
                    as.push_back(alone.add_sequence());
                    m.forward(prompt, batched, bs.back(), LogitsMode::Last);
                    m.forward(prompt, alone, as.back(), LogitsMode::Last);
                    for (int k = 0; k < kSteps; ++k) next[static_cast<std::size_t>(i)].push_back(token());
                }
                for (int step = 0; step < kSteps; ++step) {
                    std::vector<SequenceChunk> batch;
                    for (int i = 0; i < kSeqs; ++i)
                        batch.push_back({bs[static_cast<std::size_t>(i)], std::span<const std::int32_t>(next[static_cast<std::size_t>(i)]).subspan(static_cast<std::size_t>(step), 1)});
                    const Logits<float> together = m.forward(batch, batched);
                    REQUIRE(together.rows == kSeqs);
                    for (int i = 0; i < kSeqs; ++i) {
                        INFO("step " << step << " sequence " << i);
                        const Logits<float> one = m.forward(std::span<const std::int32_t>(next[static_cast<std::size_t>(i)]).subspan(static_cast<std::size_t>(step), 1),
                                                            alone, as[static_cast<std::size_t>(i)]);
                        const auto a = together.row(i), b = one.row(0);
                        REQUIRE(a.size() == b.size());
                        CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
                    }
                }
            }
    }
}
