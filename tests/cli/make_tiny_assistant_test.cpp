// gemma4 make-tiny --assistant: a random assistant for a target checkpoint, which loads against
// that target and drafts.
#include <catch2/catch.hpp>

#include <gemma4/model/assistant.hpp>
#include <gemma4/model/model.hpp>

#include "support/run_cli.hpp"
#include "support/temp_dir.hpp"

#include <filesystem>
#include <string>

TEST_CASE("make-tiny --assistant writes an assistant that loads against its target and drafts", "[cli][assistant]") {
    using namespace gemma4;
    const auto target_dir = test::temp_dir("cli_assistant_target"), assistant_dir = test::temp_dir("cli_assistant");
    REQUIRE(test::run_cli("make-tiny --out " + target_dir.string() + " --text-only --hidden-size 48 --kv-heads 1 --layer-types sfssfs --layers 6")
                .status == 0);
    const auto r = test::run_cli("make-tiny --assistant --target " + target_dir.string() + " --out " + assistant_dir.string() + " --dtype f32");
    REQUIRE(r.status == 0);
    CHECK(r.err.find("assistant of") != std::string::npos);

    const auto target = Model<float>::load(target_dir);
    const auto assistant = Assistant<float>::load(assistant_dir, target);
    CHECK(assistant.config().backbone_hidden_size == 48);
    CHECK(assistant.config().text.hidden_size == 24);
    CHECK(assistant.sources().sliding == 5);  // the last sliding and full layers of sfssfs
    CHECK(assistant.sources().full == 4);
    CHECK(assistant.weights().pre_projection.dtype == DType::F32);

    KVCache<float> cache = target.make_cache();
    const SeqId s = cache.add_sequence();
    const std::int32_t ids[] = {2, 10, 20, 30};
    target.forward(std::span<const std::int32_t>(ids), cache, s, LogitsMode::Last);
    const std::vector<float> h(48, 0.5f);
    const AssistantSeed<float> seed{s, 40, h};
    const auto drafts = assistant.draft(std::span<const AssistantSeed<float>>(&seed, 1), target, cache, 3, 0.0);
    CHECK(drafts.at(0).size() == 3);

    // gemma4 quantize writes an assistant in the quantized checkpoint format
    const auto quantized_dir = test::temp_dir("cli_assistant_int4");
    REQUIRE(test::run_cli("quantize --model " + assistant_dir.string() + " --weights int4 --out " + quantized_dir.string()).status == 0);
    const auto quantized = Assistant<float>::load(quantized_dir, target);
    CHECK(quantized.weights().post_projection.dtype == DType::Q4);
    CHECK(quantized.draft(std::span<const AssistantSeed<float>>(&seed, 1), target, cache, 3, 0.0).at(0).size() == 3);

    // --assistant and --target go together
    CHECK(test::run_cli("make-tiny --assistant --out " + assistant_dir.string()).status != 0);
    CHECK(test::run_cli("make-tiny --target " + target_dir.string() + " --out " + assistant_dir.string()).status != 0);
}
