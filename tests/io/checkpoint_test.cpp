// Loading checkpoint directories: layouts, shards, and every missing / mis-shaped / unexpected
// tensor or inconsistent config as a clear error.
#include <catch2/catch.hpp>

#include <gemma4/model/checkpoint.hpp>
#include <gemma4/model/random_checkpoint.hpp>

#include "support/temp_dir.hpp"

#include <fstream>

using namespace gemma4;

namespace {

/// Rewrites model.safetensors through `edit` (on the list of tensors as blobs).
void rewrite(const std::filesystem::path& dir, const std::function<void(std::vector<TensorBlob>&)>& edit) {
    std::vector<TensorBlob> blobs;
    {
        const SafetensorsFile f(dir / "model.safetensors");
        for (const auto& [name, e] : f.entries()) {
            const WeightView v = f.view(name);
            blobs.push_back({name, v.dtype, v.shape, std::vector<std::byte>(v.data, v.data + v.size_bytes)});
        }
    }
    edit(blobs);
    write_safetensors(dir / "model.safetensors", blobs);
}

void set_config(const std::filesystem::path& dir, const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j;
    std::ifstream(dir / "config.json") >> j;
    edit(j);
    std::ofstream(dir / "config.json") << j.dump();
}

}  // namespace

TEST_CASE("checkpoint layouts load", "[io][checkpoint]") {
    const Gemma4Config c = tiny_config();
    SECTION("unified, one file") {
        const auto dir = test::temp_dir("ck_unified");
        write_random_checkpoint(dir, c, {.seed = 1});
        const Checkpoint ck = load_checkpoint(dir);
        CHECK(ck.text_prefix == "model.language_model.");
        CHECK(ck.weights.layers.size() == 6);
        CHECK(ck.weights.vision.patch_dense_weight);
        CHECK(ck.weights.audio.embedding_projection);
        CHECK_FALSE(ck.weights.layers[2].v_proj);  // full layer with k_eq_v
        CHECK(ck.weights.layers[0].v_proj);
        const Checkpoint text = load_checkpoint(dir, {.multimodal = false});
        CHECK_FALSE(text.weights.vision.patch_dense_weight);
    }
    SECTION("sharded with an index") {
        const auto dir = test::temp_dir("ck_sharded");
        write_random_checkpoint(dir, c, {.seed = 1, .shards = 4});
        CHECK(std::filesystem::exists(dir / "model-00004-of-00004.safetensors"));
        CHECK(load_checkpoint(dir).weights.embed_tokens.shape == std::vector<std::int64_t>{512, 64});
    }
    SECTION("text-only prefix") {
        const auto dir = test::temp_dir("ck_text");
        write_random_checkpoint(dir, c, {.seed = 1, .text_only_layout = true});
        CHECK(load_checkpoint(dir).text_prefix == "model.");
    }
    SECTION("module-style multimodal names") {
        const auto dir = test::temp_dir("ck_alias");
        write_random_checkpoint(dir, c, {.seed = 1});
        rewrite(dir, [](std::vector<TensorBlob>& b) {
            for (auto& t : b) {
                if (t.name.rfind("model.vision_embedder.", 0) == 0) t.name = "model.embed_vision." + t.name.substr(22);
                if (t.name == "model.embed_audio.embedding_projection.weight")
                    t.name = "model.embed_audio.multimodal_embedder.embedding_projection.weight";
            }
        });
        const Checkpoint ck = load_checkpoint(dir);
        CHECK(ck.weights.vision.patch_ln1_weight);
        CHECK(ck.weights.audio.embedding_projection);
    }
}

TEST_CASE("checkpoint errors name the file and the tensor", "[io][checkpoint][errors]") {
    const Gemma4Config c = tiny_config();
    const auto dir = test::temp_dir("ck_errors");
    write_random_checkpoint(dir, c, {.seed = 2});
    SECTION("missing directory") {
        REQUIRE_THROWS_AS(load_checkpoint(dir / "nope"), IoError);
        REQUIRE_THROWS_WITH(load_checkpoint(dir / "nope"), Catch::Contains("nope: model directory not found"));
    }
    SECTION("no weights") {
        std::filesystem::remove(dir / "model.safetensors");
        REQUIRE_THROWS_WITH(load_checkpoint(dir), Catch::Contains("no model.safetensors or model.safetensors.index.json"));
    }
    SECTION("no config") {
        std::filesystem::remove(dir / "config.json");
        REQUIRE_THROWS_AS(load_checkpoint(dir), IoError);
        REQUIRE_THROWS_WITH(load_checkpoint(dir), Catch::Contains("config.json: cannot open"));
    }
    SECTION("missing tensor") {
        rewrite(dir, [](auto& b) { std::erase_if(b, [](const TensorBlob& t) { return t.name.find("layers.3.mlp.up_proj") != std::string::npos; }); });
        REQUIRE_THROWS_AS(load_checkpoint(dir), ShapeError);
        REQUIRE_THROWS_WITH(load_checkpoint(dir),
                            Catch::Contains("missing tensor 'model.language_model.layers.3.mlp.up_proj.weight' (expected shape [128, 64])"));
    }
    SECTION("mis-shaped tensor") {
        rewrite(dir, [](auto& b) {
            for (auto& t : b)
                if (t.name == "model.language_model.layers.1.self_attn.q_norm.weight") t.shape = {4, 4};
        });
        REQUIRE_THROWS_WITH(load_checkpoint(dir),
                            Catch::Contains("model.safetensors: tensor 'model.language_model.layers.1.self_attn.q_norm.weight' has shape [4, 4], config.json implies [16]"));
    }
    SECTION("unexpected tensor (e.g. a v_proj on a k_eq_v layer)") {
        rewrite(dir, [](auto& b) {
            b.push_back({"model.language_model.layers.2.self_attn.v_proj.weight", DType::F32, {1}, std::vector<std::byte>(4)});
        });
        REQUIRE_THROWS_WITH(load_checkpoint(dir), Catch::Contains("unexpected tensor 'model.language_model.layers.2.self_attn.v_proj.weight'"));
    }
    SECTION("config inconsistent with the weights") {
        set_config(dir, [](nlohmann::json& j) { j["text_config"]["intermediate_size"] = 96; });
        REQUIRE_THROWS_AS(load_checkpoint(dir), ShapeError);
        REQUIRE_THROWS_WITH(load_checkpoint(dir), Catch::Contains("tensor 'model.language_model.layers.0.mlp.gate_proj.weight' has shape [128, 64], config.json implies [96, 64]"));
    }
    SECTION("wrong dtype") {
        rewrite(dir, [](auto& b) {
            for (auto& t : b)
                if (t.name == "model.language_model.norm.weight") t.dtype = DType::I32, t.bytes.resize(64 * 4);
        });
        REQUIRE_THROWS_WITH(load_checkpoint(dir), Catch::Contains("has dtype I32; expected BF16, F16, F32 or F64"));
    }
    SECTION("a shard named in the index but absent") {
        const auto sharded = test::temp_dir("ck_errors_shard");
        write_random_checkpoint(sharded, c, {.seed = 2, .shards = 2});
        std::filesystem::remove(sharded / "model-00002-of-00002.safetensors");
        REQUIRE_THROWS_AS(load_checkpoint(sharded), IoError);
        REQUIRE_THROWS_WITH(load_checkpoint(sharded), Catch::Contains("model-00002-of-00002.safetensors: cannot open"));
    }
    SECTION("truncated shard") {
        std::filesystem::resize_file(dir / "model.safetensors", std::filesystem::file_size(dir / "model.safetensors") - 10);
        REQUIRE_THROWS_AS(load_checkpoint(dir), FormatError);
        REQUIRE_THROWS_WITH(load_checkpoint(dir), Catch::Contains("is past the data area"));
    }
}
