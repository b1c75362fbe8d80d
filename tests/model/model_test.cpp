// The whole decoder against the reference forward pass, cached decoding against the uncached
// pass, and the taps against the reference's nodes.
#include <catch2/catch.hpp>

#include <gemma4/model/model.hpp>
#include <gemma4/model/random_checkpoint.hpp>

#include "support/reference_model.hpp"
#include "support/temp_dir.hpp"

#include <cstring>
#include <map>

using namespace gemma4;
using gemma4::test::relative_error;

namespace {

std::vector<std::int32_t> test_ids(std::int64_t n, std::int64_t vocab, std::uint32_t seed) {
    std::vector<std::int32_t> ids;
    std::uint32_t s = seed;
    for (std::int64_t i = 0; i < n; ++i) {
        s = s * 1664525u + 1013904223u;
        const auto id = static_cast<std::int32_t>((s >> 8) % static_cast<std::uint32_t>(vocab));
        ids.push_back(id >= 300 && id <= 306 ? id - 10 : id);  // not the tiny config's placeholder ids
    }
    return ids;
}

struct Variant {
    std::string name;
    RandomCheckpointOptions options;
    Gemma4Config config;
};

std::vector<Variant> variants() {
    std::vector<Variant> v;
    v.push_back({"bf16", {.seed = 11, .dtype = DType::BF16}, tiny_config()});
    v.push_back({"f32_sharded", {.seed = 12, .dtype = DType::F32, .shards = 3}, tiny_config()});
    v.push_back({"f64_text_only", {.seed = 13, .dtype = DType::F64, .text_only_layout = true}, tiny_config()});
    Gemma4Config other = tiny_config();  // no k_eq_v, full layers with their own V, other window
    other.attention_k_eq_v = false;
    other.sliding_window = 5;
    other.num_hidden_layers = 4;
    other.layer_types = Gemma4Config::default_layer_types(4);
    other.layer_types[1] = other.layer_types[3] = AttentionKind::Full;
    v.push_back({"f16_no_k_eq_v", {.seed = 14, .dtype = DType::F16}, other});
    return v;
}

}  // namespace

TEST_CASE("model in double matches the reference forward pass to 1e-12", "[model]") {
    for (const Variant& variant : variants()) {
        DYNAMIC_SECTION(variant.name) {
            const auto dir = test::temp_dir("model_ref_" + variant.name);
            write_random_checkpoint(dir, variant.config, variant.options);
            const auto ids = test_ids(21, variant.config.vocab_size, 7);  // longer than the window
            const test::ReferenceModel ref(dir);
            const test::Matrix expected = ref.forward(ids);
            const Model<double> model = Model<double>::load(dir, ModelOptions{2});
            const Logits<double> got = model.logits(ids);
            REQUIRE(got.rows == expected.rows);
            REQUIRE(got.vocab == expected.cols);
            const double err = relative_error(got.values.data(), expected.v.data(), expected.v.size());
            INFO("relative error " << err);
            CHECK(err <= 1e-12);

            const Model<float> fmodel = Model<float>::load(dir, ModelOptions{2});
            const Logits<float> fgot = fmodel.logits(ids);
            std::vector<double> f(fgot.values.begin(), fgot.values.end());
            const double ferr = relative_error(f.data(), expected.v.data(), expected.v.size());
            INFO("float relative error " << ferr);
            CHECK(ferr <= 1e-5);
        }
    }
}

TEST_CASE("every spec node is tapped and matches the reference", "[model][taps]") {
    const auto dir = test::temp_dir("model_taps");
    write_random_checkpoint(dir, tiny_config(), {.seed = 21, .dtype = DType::BF16});
    const auto ids = test_ids(12, tiny_config().vocab_size, 3);
    std::map<std::string, test::Matrix> expected;
    test::ReferenceModel(dir).forward(ids, &expected);

    std::map<std::string, test::Matrix> got;
    auto observer = [&](const TapView<double>& v) {
        test::Matrix m(v.rows, v.cols);
        for (std::int64_t r = 0; r < v.rows; ++r)
            for (std::int64_t c = 0; c < v.cols; ++c) m(r, c) = v(r, c);
        REQUIRE(got.emplace(v.full_name(), m).second);  // each node once per step
    };
    const Model<double> model = Model<double>::load(dir);
    model.logits(ids, observer);

    const std::vector<std::string> per_layer = {"input_norm", "attn.qkv_proj", "attn.qk_norm", "attn.v_norm", "attn.rope",
                                                "attn.core", "attn.o_proj", "post_mix_norm", "attn_residual", "post_attn_norm",
                                                "mlp.gate_up", "mlp.act", "mlp.down", "post_ffn_norm", "mlp_residual"};
    std::size_t count = 3;  // embed, final_norm, lm_head
    for (std::int64_t l = 0; l < tiny_config().num_hidden_layers; ++l)
        for (const auto& node : per_layer) {
            (void)node;
            ++count;
        }
    CHECK(got.size() == count);
    CHECK(expected.size() == count);
    for (const auto& [name, e] : expected) {
        INFO("node " << name);
        REQUIRE(got.count(name) == 1);
        const test::Matrix& g = got.at(name);
        REQUIRE(g.rows == e.rows);
        REQUIRE(g.cols == e.cols);
        CHECK(relative_error(g.v.data(), e.v.data(), e.v.size()) <= 1e-12);
    }
}

TEST_CASE("chunked prefill and token-by-token decode equal the full forward pass", "[model][cache]") {
    const auto dir = test::temp_dir("model_chunks");
    const Gemma4Config c = tiny_config();
    write_random_checkpoint(dir, c, {.seed = 31, .dtype = DType::BF16});
    const auto ids = test_ids(40, c.vocab_size, 9);  // five windows
    const Model<double> model = Model<double>::load(dir);
    const Logits<double> full = model.logits(ids);
    for (std::size_t chunk : {std::size_t(1), std::size_t(3), std::size_t(8), std::size_t(13)}) {
        DYNAMIC_SECTION("chunk " << chunk) {
            KVCache<double> cache = model.make_cache();
            const SeqId s = cache.add_sequence();
            std::vector<double> got;
            for (std::size_t start = 0; start < ids.size(); start += chunk) {
                const auto part = std::span<const std::int32_t>(ids).subspan(start, std::min(chunk, ids.size() - start));
                const Logits<double> l = model.forward(part, cache, s);
                got.insert(got.end(), l.values.begin(), l.values.end());
            }
            REQUIRE(got.size() == full.values.size());
            CHECK(relative_error(got.data(), full.values.data(), got.size()) <= 1e-13);
            CHECK(cache.length(s) == static_cast<std::int64_t>(ids.size()));
        }
    }
    SECTION("float decode equals float full pass") {
        const Model<float> fmodel = Model<float>::load(dir);
        const Logits<float> ffull = fmodel.logits(ids);
        KVCache<float> cache = fmodel.make_cache();
        const SeqId s = cache.add_sequence();
        double worst = 0, scale = 0;
        for (std::size_t t = 0; t < ids.size(); ++t) {
            const Logits<float> l = fmodel.forward(std::span<const std::int32_t>(&ids[t], 1), cache, s, LogitsMode::Last);
            for (std::int64_t v = 0; v < c.vocab_size; ++v) {
                worst = std::max(worst, std::abs(double(l.row(0)[v]) - double(ffull.row(static_cast<std::int64_t>(t))[v])));
                scale = std::max(scale, std::abs(double(ffull.row(static_cast<std::int64_t>(t))[v])));
            }
        }
        CHECK(worst / scale <= 1e-5);
    }
}

TEST_CASE("sliding-window cache memory stops growing at the window", "[model][cache]") {
    const auto dir = test::temp_dir("model_window_memory");
    const Gemma4Config c = tiny_config();  // window 8 = half a page
    write_random_checkpoint(dir, c, {.seed = 41, .dtype = DType::BF16});
    const Model<float> model = Model<float>::load(dir);
    KVCache<float> cache = model.make_cache();
    const SeqId s = cache.add_sequence();
    std::int64_t max_sliding = 0;
    const auto ids = test_ids(200, c.vocab_size, 5);
    for (std::size_t t = 0; t < ids.size(); ++t) {
        model.forward(std::span<const std::int32_t>(&ids[t], 1), cache, s, LogitsMode::Last);
        max_sliding = std::max(max_sliding, cache.pages_in_use(AttentionKind::Sliding));
    }
    // Window W needs at most ceil((W − 1) / 16) + 1 pages; full layers keep every page.
    CHECK(max_sliding <= (c.sliding_window - 1 + 15) / 16 + 1);
    CHECK(cache.pages_in_use(AttentionKind::Full) == (200 + 15) / 16);
    cache.remove_sequence(s);
    CHECK(cache.pages_in_use(AttentionKind::Sliding) == 0);
    CHECK(cache.pages_in_use(AttentionKind::Full) == 0);
}

TEST_CASE("batched sequences equal each sequence alone", "[model][batch]") {
    const auto dir = test::temp_dir("model_batch");
    const Gemma4Config c = tiny_config();
    write_random_checkpoint(dir, c, {.seed = 51, .dtype = DType::BF16});
    const Model<double> model = Model<double>::load(dir);
    const std::vector<std::vector<std::int32_t>> seqs = {test_ids(19, c.vocab_size, 1), test_ids(5, c.vocab_size, 2),
                                                         test_ids(33, c.vocab_size, 3)};
    KVCache<double> cache = model.make_cache();
    std::vector<SeqId> ids;
    for (std::size_t i = 0; i < seqs.size(); ++i) ids.push_back(cache.add_sequence());
    std::vector<std::vector<double>> got(seqs.size());
    for (std::size_t step = 0;; ++step) {
        std::vector<SequenceChunk> batch;
        std::vector<std::size_t> which;
        for (std::size_t i = 0; i < seqs.size(); ++i) {
            const std::size_t start = step * 7;
            if (start >= seqs[i].size()) continue;
            batch.push_back({ids[i], std::span<const std::int32_t>(seqs[i]).subspan(start, std::min<std::size_t>(7, seqs[i].size() - start))});
            which.push_back(i);
        }
        if (batch.empty()) break;
        const Logits<double> l = model.forward(batch, cache);
        std::int64_t row = 0;
        for (std::size_t k = 0; k < batch.size(); ++k)
            for (std::size_t j = 0; j < batch[k].ids.size(); ++j, ++row)
                got[which[k]].insert(got[which[k]].end(), l.row(row).begin(), l.row(row).end());
    }
    for (std::size_t i = 0; i < seqs.size(); ++i) {
        const Logits<double> alone = model.logits(seqs[i]);
        REQUIRE(got[i].size() == alone.values.size());
        CHECK(relative_error(got[i].data(), alone.values.data(), got[i].size()) <= 1e-13);
    }
}

TEST_CASE("forward_into equals forward bit for bit and reuses its buffers when the rows repeat", "[model][batch]") {
    const auto dir = test::temp_dir("model_forward_into");
    const Gemma4Config c = tiny_config();
    write_random_checkpoint(dir, c, {.seed = 52, .dtype = DType::BF16});
    const Model<float> model = Model<float>::load(dir);
    const auto a = test_ids(9, c.vocab_size, 4), b = test_ids(6, c.vocab_size, 5);
    KVCache<float> fresh = model.make_cache(), reused = model.make_cache();
    const SeqId fa = fresh.add_sequence(), fb = fresh.add_sequence(), ra = reused.add_sequence(), rb = reused.add_sequence();
    Logits<float> out;
    const float* values_before = nullptr;
    const float* hidden_before = nullptr;
    // steps: two prompts' last logits, all logits of one, then three two-row decode steps
    for (int step = 0; step < 5; ++step) {
        const std::span<const std::int32_t> sa(a), sb(b);
        std::vector<SequenceChunk> fresh_batch;
        if (step == 0) {
            fresh_batch = {{fa, sa.first(3)}, {fb, sb.first(3)}};
        } else if (step == 1) {
            fresh_batch = {{fa, sa.subspan(3, 2), /*all_logits=*/true}};
        } else {  // a[5..7] and b[3..5], one id each
            const auto i = static_cast<std::size_t>(step);
            fresh_batch = {{fa, sa.subspan(i + 3, 1)}, {fb, sb.subspan(i + 1, 1)}};
        }
        std::vector<SequenceChunk> reused_batch = fresh_batch;
        for (SequenceChunk& chunk : reused_batch) chunk.seq = chunk.seq == fa ? ra : rb;
        const Logits<float> want = model.forward(fresh_batch, fresh, LogitsMode::Last);
        model.forward_into(reused_batch, reused, SoftTokens<float>{}, LogitsMode::Last, out);
        INFO("step " << step);
        REQUIRE(out.rows == want.rows);
        REQUIRE(out.vocab == want.vocab);
        REQUIRE(out.values.size() == want.values.size());
        REQUIRE(out.hidden.size() == want.hidden.size());
        CHECK(std::memcmp(out.values.data(), want.values.data(), want.values.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(out.hidden.data(), want.hidden.data(), want.hidden.size() * sizeof(float)) == 0);
        if (step >= 3) {  // two rows again, as the step before: the same buffers
            CHECK(out.values.data() == values_before);
            CHECK(out.hidden.data() == hidden_before);
        }
        values_before = out.values.data();
        hidden_before = out.hidden.data();
    }
}

TEST_CASE("results are identical for any thread count", "[model][threads]") {
    const auto dir = test::temp_dir("model_threads");
    write_random_checkpoint(dir, tiny_config(), {.seed = 61, .dtype = DType::BF16});
    const auto ids = test_ids(17, tiny_config().vocab_size, 4);
    const Logits<float> one = Model<float>::load(dir, ModelOptions{1}).logits(ids);
    const Logits<float> three = Model<float>::load(dir, ModelOptions{3}).logits(ids);
    CHECK(one.values == three.values);
}

TEST_CASE("bad forward inputs are clear errors", "[model][errors]") {
    const auto dir = test::temp_dir("model_errors");
    Gemma4Config c = tiny_config();
    c.max_position_embeddings = 20;
    write_random_checkpoint(dir, c, {.seed = 71, .dtype = DType::BF16});
    const Model<float> model = Model<float>::load(dir);
    KVCache<float> cache = model.make_cache();
    const SeqId s = cache.add_sequence();

    const std::vector<std::int32_t> outside = {2, 512};
    REQUIRE_THROWS_AS(model.forward(outside, cache, s), InvalidArgument);
    REQUIRE_THROWS_WITH(model.forward(outside, cache, s), Catch::Contains("token id 512 at index 1 is outside the vocabulary"));
    const std::vector<std::int32_t> negative = {-3};
    REQUIRE_THROWS_WITH(model.forward(negative, cache, s), Catch::Contains("token id -3"));
    REQUIRE_THROWS_AS(model.forward(std::span<const std::int32_t>(), cache, s), InvalidArgument);
    REQUIRE_THROWS_WITH(model.forward(std::span<const std::int32_t>(), cache, s), Catch::Contains("empty id list"));
    CHECK(cache.length(s) == 0);  // nothing was written by the rejected steps

    const auto ids = test_ids(20, c.vocab_size, 1);
    model.forward(ids, cache, s, LogitsMode::Last);
    const std::vector<std::int32_t> one_more = {5};
    REQUIRE_THROWS_AS(model.forward(one_more, cache, s), ContextLengthError);
    REQUIRE_THROWS_WITH(model.forward(one_more, cache, s), Catch::Contains("exceeds max_position_embeddings (20)"));
    REQUIRE_THROWS_WITH(model.forward(one_more, cache, 7), Catch::Contains("no live sequence 7"));
}

