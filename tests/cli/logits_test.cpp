// `gemma4 make-tiny` and `gemma4 logits`: files, batching, chunking, taps, and one-line errors.
#include <catch2/catch.hpp>

#include <gemma4/io/npy.hpp>
#include <gemma4/model/model.hpp>

#include "support/reference_model.hpp"
#include "support/run_cli.hpp"
#include "support/temp_dir.hpp"

using namespace gemma4;
using test::run_cli;

TEST_CASE("logits writes [T, vocab] .npy equal to the library's forward pass", "[cli][logits]") {
    const auto dir = test::temp_dir("cli_logits");
    REQUIRE(run_cli("make-tiny --no-tokenizer --out " + (dir / "m").string() + " --seed 5 --shards 2").status == 0);
    const std::string ids = "2,17,33,4,5,6,7,8,9,10,11,12,13";
    auto r = run_cli("logits --model " + (dir / "m").string() + " --tokens " + ids + " --precision f64 --out " + (dir / "a.npy").string());
    REQUIRE(r.status == 0);
    const auto a = read_npy<double>(dir / "a.npy");
    REQUIRE(a.shape == std::vector<std::int64_t>{13, 512});
    const std::vector<std::int32_t> v = {2, 17, 33, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
    const test::Matrix expected = test::ReferenceModel(dir / "m").forward(v);
    CHECK(test::relative_error(a.data.data(), expected.v.data(), a.data.size()) <= 1e-12);

    SECTION("chunked f32") {
        r = run_cli("logits --model " + (dir / "m").string() + " --tokens " + ids + " --chunk 3 --out " + (dir / "b.npy").string());
        REQUIRE(r.status == 0);
        const auto b = read_npy<float>(dir / "b.npy");
        std::vector<double> bd(b.data.begin(), b.data.end());
        CHECK(test::relative_error(bd.data(), expected.v.data(), bd.size()) <= 1e-5);
    }
    SECTION("several sequences as one batch") {
        r = run_cli("logits --model " + (dir / "m").string() + " --tokens " + ids + " --tokens 2,9,9 --precision f64 --chunk 4 --out-dir " +
                    (dir / "batch").string());
        REQUIRE(r.status == 0);
        const auto b0 = read_npy<double>(dir / "batch" / "0.npy");
        const auto b1 = read_npy<double>(dir / "batch" / "1.npy");
        CHECK(test::relative_error(b0.data.data(), expected.v.data(), b0.data.size()) <= 1e-12);
        const test::Matrix e1 = test::ReferenceModel(dir / "m").forward({2, 9, 9});
        REQUIRE(b1.shape == std::vector<std::int64_t>{3, 512});
        CHECK(test::relative_error(b1.data.data(), e1.v.data(), b1.data.size()) <= 1e-12);
    }
    SECTION("activation dumps") {
        r = run_cli("logits --model " + (dir / "m").string() + " --tokens 2,3,4 --out " + (dir / "c.npy").string() + " --dump-taps " +
                    (dir / "taps").string());
        REQUIRE(r.status == 0);
        const auto core = read_npy<float>(dir / "taps" / "layers.2.attn.core.npy");
        CHECK(core.shape == std::vector<std::int64_t>{3, 4 * 32});
        CHECK(std::filesystem::exists(dir / "taps" / "lm_head.npy"));
        CHECK(std::filesystem::exists(dir / "taps" / "embed.npy"));
    }
}

TEST_CASE("logits errors: one line on stderr, exit status in 1..127", "[cli][errors]") {
    const auto dir = test::temp_dir("cli_errors");
    REQUIRE(run_cli("make-tiny --no-tokenizer --out " + (dir / "m").string()).status == 0);
    const std::string m = " --model " + (dir / "m").string() + " --out " + (dir / "x.npy").string();
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"logits --tokens 2,3" + std::string(" --model ") + (dir / "missing").string() + " --out x.npy", "model directory not found"},
        {"logits --tokens 2,999" + m, "token id 999 at index 1 is outside the vocabulary"},
        {"logits --tokens 2,x" + m, "'x' is not a token id"},
        {"logits --tokens ''" + m, "is not a token id"},
        {"logits --tokens 2 --precision f16" + m, "--precision must be f32 or f64"},
        {"logits --tokens 2 --bogus 1" + m, "unknown option --bogus"},
        {"logits" + m, "missing --tokens"},
        {"make-tiny --out " + (dir / "t").string() + " --heads 3", "num_key_value_heads: must divide num_attention_heads"},
        {"nonsense", "unknown command"},
    };
    for (const auto& [args, message] : cases) {
        INFO(args);
        const auto r = run_cli(args);
        CHECK(r.status >= 1);
        CHECK(r.status <= 127);
        CHECK(r.err.find(message) != std::string::npos);
        if (args != "nonsense") CHECK(gemma4::test::line_count(r.err) == 1);
    }
    // A truncated shard.
    std::filesystem::resize_file(dir / "m" / "model.safetensors", 100);
    const auto r = run_cli("logits --tokens 2" + m);
    CHECK(r.status == 1);
    CHECK(r.err.find("model.safetensors") != std::string::npos);
    CHECK(gemma4::test::line_count(r.err) == 1);
}
