// detail/random.hpp: the library's generators keep their published sequences, random
// checkpoints keep their bytes, and random_weights walks the checkpoint tensor table.
#include <catch2/catch.hpp>

#include <gemma4/detail/random.hpp>
#include <gemma4/io/binary_stream.hpp>
#include <gemma4/model/quantize.hpp>
#include <gemma4/model/random_checkpoint.hpp>
#include <gemma4/model/random_weights.hpp>
#include <gemma4/model/tensor_table.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <vector>

#include "support/temp_dir.hpp"

using namespace gemma4;

namespace {

/// FNV-1a of every file of `dir`, in name order.
std::uint64_t directory_fingerprint(const std::filesystem::path& dir) {
    std::set<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir)) files.insert(e.path());
    std::vector<std::byte> all;
    for (const auto& f : files) {
        std::ifstream in(f, std::ios::binary);
        const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
        for (char ch : bytes) all.push_back(static_cast<std::byte>(ch));
    }
    return fnv1a64(all);
}

}  // namespace

TEST_CASE("splitmix64 gives the reference sequence", "[random]") {
    detail::SplitMix64 zero{0};
    CHECK(zero.next() == 0xe220a8397b1dcdafull);
    CHECK(zero.next() == 0x6e789e6aa1b965f4ull);
    CHECK(zero.next() == 0x06c45d188009454full);
    detail::SplitMix64 one{1};
    CHECK(one.next() == 0x910a2dec89025cc1ull);
    std::uint64_t state = 1;
    detail::splitmix64(state);
    CHECK(detail::splitmix64(state) == 0xbeeb8da1658eec67ull);
    for (int i = 0; i < 1000; ++i) {
        const double u = one.uniform(), s = one.symmetric();
        REQUIRE((u >= 0.0 && u < 1.0));
        REQUIRE((s >= -1.0 && s < 1.0));
    }
}

// Fingerprints of checkpoints written before the generators and the config.json writer were
// shared: the random values, the safetensors layout and config.json are unchanged.
TEST_CASE("random checkpoints keep their bytes", "[random][checkpoint]") {
    const auto root = test::temp_dir("random_fingerprints");
    Gemma4Config multimodal = tiny_config();
    multimodal.has_vision = multimodal.has_audio = true;
    write_random_checkpoint(root / "a", tiny_config(), {.seed = 11, .dtype = DType::BF16});
    write_random_checkpoint(root / "b", tiny_config(), {.seed = 12, .dtype = DType::F32, .shards = 3});
    write_random_checkpoint(root / "c", tiny_config(), {.seed = 13, .dtype = DType::F64, .text_only_layout = true});
    write_random_checkpoint(root / "d", multimodal, {.seed = 5, .dtype = DType::F32});
    CHECK(directory_fingerprint(root / "a") == 0x481ee100a5b3e306ull);
    CHECK(directory_fingerprint(root / "b") == 0xb7c501941e4b36bfull);
    CHECK(directory_fingerprint(root / "c") == 0xa137d17e4ce18106ull);
    CHECK(directory_fingerprint(root / "d") == 0xcf1feb5a22711eecull);
    std::filesystem::remove_all(root);
}

TEST_CASE("random_weights holds the text tensors of the checkpoint table", "[random][layers]") {
    Gemma4Config c = tiny_config();
    c.attention_k_eq_v = true;  // full layers without v_proj
    ModelWeights table_weights;
    const std::vector<TensorSpec> table = tensor_table(c, "model.language_model.", table_weights);
    for (const WeightFormat format : {WeightFormat::BF16, WeightFormat::Int8, WeightFormat::Int4}) {
        ModelWeights w = random_weights(c, format, 3, 2);
        const std::vector<TensorSpec> mine = tensor_table(c, "model.language_model.", w);
        std::size_t text = 0;
        for (std::size_t i = 0; i < table.size(); ++i) {
            if (table[i].group != TensorGroup::Text) continue;
            ++text;
            const WeightView& v = *mine[i].field;
            INFO(table[i].name());
            REQUIRE(v);
            CHECK(v.name == table[i].name());
            CHECK(v.shape == table[i].shape);
            CHECK((v.shape.size() == 2 ? v.dtype == format_dtype(format) : v.dtype == DType::F32));
        }
        // big_matrices: the embedding, then every layer's 2-D tensors of kLayerTensors present
        std::size_t matrices = 1, expected_text = 2;
        for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
            matrices += c.layer(l).has_v_proj ? 7 : 6;
            expected_text += c.layer(l).has_v_proj ? 14 : 13;
        }
        const std::vector<WeightView*> big = big_matrices(w);
        REQUIRE(big.size() == matrices);
        CHECK(big[0] == &w.embed_tokens);
        CHECK(big[1] == &w.layers[0].q_proj);
        CHECK(big.back() == &w.layers.back().down_proj);
        for (const WeightView* v : big) CHECK(v->shape.size() == 2);
        CHECK(text == expected_text);
    }
}

TEST_CASE("random_weights does not depend on the thread count", "[random]") {
    const Gemma4Config c = tiny_config();
    for (const WeightFormat format : {WeightFormat::BF16, WeightFormat::Int4}) {
        ModelWeights one = random_weights(c, format, 9, 1), three = random_weights(c, format, 9, 3);
        const auto a = big_matrices(one), b = big_matrices(three);
        REQUIRE(a.size() == b.size());
        for (std::size_t i = 0; i < a.size(); ++i) {
            REQUIRE(a[i]->size_bytes == b[i]->size_bytes);
            CHECK(std::memcmp(a[i]->data, b[i]->data, a[i]->size_bytes) == 0);
        }
    }
}
