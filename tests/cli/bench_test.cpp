// `gemma4 bench` at the tiny shapes: --weights q8_0 / q4_0 write a GGUF file, load it through the
// GGUF loader and report the load apart from prefill and decode (and delete the file unless
// --keep-gguf); the bytes read per decode step are labelled computed, and with --context the
// K/V bytes read per step are counted from the cache geometry and grow with the context;
// --quant-block picks the int8/int4 block size (and `quantize` writes it).
#include <catch2/catch.hpp>

#include <gemma4/io/gguf.hpp>
#include <gemma4/model/model.hpp>
#include <gemma4/model/random_checkpoint.hpp>

#include "support/run_cli.hpp"
#include "support/temp_dir.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

using gemma4::test::run_cli;

namespace {

const std::string kTinyBench = "bench --config tiny --random-weights --bandwidth-mb 8 --threads 2 --prompt-tokens 12 --gen-tokens 4 --json ";

nlohmann::json bench_json(const std::string& args) {
    const auto r = run_cli(kTinyBench + args);
    INFO(r.err);
    REQUIRE(r.status == 0);
    return nlohmann::json::parse(r.out);
}

/// The sum of the run's decode step times.
double decode_seconds(const nlohmann::json& j) {
    double s = 0;
    for (const auto& step : j["decode_step_s"]) s += step.get<double>();
    REQUIRE(s > 0);
    return s;
}

}  // namespace

TEST_CASE("bench --weights q8_0 / q4_0 loads a GGUF file it wrote, times the load, and deletes the file", "[cli][bench][gguf]") {
    const auto dir = gemma4::test::temp_dir("cli_bench_gguf");
    for (const std::string type : {"q8_0", "q4_0"}) {
        INFO(type);
        const nlohmann::json j = bench_json("--weights " + type + " --gguf-dir " + dir.string());
        CHECK(j["weights"] == type);
        CHECK(j["gguf_type"] == type);
        CHECK(j["gguf_matches_in_memory"] == true);
        CHECK(j["gguf_file_bytes"].get<double>() > 0);
        CHECK(j["gguf_load_s"].get<double>() > 0);
        // The rates are the counts over the times that the same run reports.
        CHECK(j["gguf_load_bytes_per_s"].get<double>() == Approx(j["gguf_file_bytes"].get<double>() / j["gguf_load_s"].get<double>()));
        CHECK(j["decode_tokens_per_s"].get<double>() == Approx(j["gen_tokens"].get<double>() / decode_seconds(j)));
        CHECK(std::filesystem::is_empty(dir));  // the scratch file is gone
    }
    // --keep-gguf keeps it, and it is a GGUF file of the tiny shapes with Q4_0 matrices.
    const nlohmann::json kept = bench_json("--weights q4_0 --layers 2 --keep-gguf --gguf-dir " + dir.string());
    const std::filesystem::path path = kept["gguf_path"].get<std::string>();
    REQUIRE(std::filesystem::exists(path));
    CHECK(std::filesystem::file_size(path) == kept["gguf_file_bytes"].get<std::uint64_t>());
    const gemma4::GgufFile f(path);
    CHECK(f.get_int("gemma4.block_count") == 2);
    CHECK(f.find_tensor("blk.1.ffn_up.weight")->type == gemma4::GgmlType::Q4_0);
    std::filesystem::remove(path);

    const auto bad = run_cli(kTinyBench + "--weights int8 --keep-gguf");
    CHECK(bad.status != 0);
    CHECK(bad.err.find("--gguf-dir and --keep-gguf need --weights q8_0 or q4_0") != std::string::npos);
}

TEST_CASE("bench: bytes read per step are labelled computed, and with --context the K/V read is counted and grows", "[cli][bench]") {
    const nlohmann::json plain = bench_json("--weights int8");
    CHECK(plain.contains("weight_bytes_per_step_computed"));
    CHECK(plain.contains("weight_bytes_per_token_computed"));
    CHECK(plain["bytes_read_per_step_computed"] == plain["weight_bytes_per_step_computed"]);
    CHECK_FALSE(plain.contains("weight_bytes_per_token"));
    CHECK_FALSE(plain.contains("kv_bytes_read_per_step_computed"));
    // The fraction against the probe's passes between the steps is the same rate over that bandwidth.
    const double between = plain["read_bandwidth_between_steps_bytes_per_s"].get<double>();
    CHECK(between > 0);
    const double rate = plain["bytes_read_per_step_computed"].get<double>() * plain["decode_tokens_per_s"].get<double>();
    CHECK(plain["decode_fraction_of_bandwidth_between_steps"].get<double>() == Approx(rate / between));
    CHECK(plain["decode_bandwidth_fraction"].get<double>() == Approx(rate / plain["measured_read_bandwidth_bytes_per_s"].get<double>()));
    // Each step against the faster probe pass just before or after it, the median over the steps.
    const auto steps = plain["decode_step_s"].get<std::vector<double>>(), passes = plain["probe_pass_s_after_step"].get<std::vector<double>>();
    REQUIRE(steps.size() == plain["gen_tokens"].get<std::size_t>());
    REQUIRE(passes.size() == steps.size());
    double steps_total = 0;
    for (const double s : steps) steps_total += s;
    CHECK(plain["decode_tokens_per_s"].get<double>() == Approx(static_cast<double>(steps.size()) / steps_total));
    const double fastest = *std::min_element(passes.begin(), passes.end());
    const double probe_bytes = between * fastest;
    std::vector<double> local;
    for (std::size_t g = 0; g < steps.size(); ++g)
        local.push_back(plain["bytes_read_per_step_computed"].get<double>() / steps[g] /
                        (probe_bytes / (g == 0 ? passes[0] : std::min(passes[g - 1], passes[g]))));
    std::sort(local.begin(), local.end());
    const std::size_t n = local.size();
    CHECK(plain["decode_fraction_of_local_bandwidth"].get<double>() == Approx(n % 2 ? local[n / 2] : (local[n / 2 - 1] + local[n / 2]) / 2));

    const auto text = run_cli("bench --config tiny --random-weights --bandwidth-mb 8 --threads 2 --prompt-tokens 12 --gen-tokens 4 "
                              "--weights int8 --context 64");
    REQUIRE(text.status == 0);
    CHECK(text.out.find("GB read per step (computed from the matrix sizes)") != std::string::npos);
    CHECK(text.out.find("KV read") != std::string::npos);
    CHECK(text.out.find("read by the fastest probe pass between the decode steps") != std::string::npos);
    CHECK(text.out.find("median step: ") != std::string::npos);

    // The tiny config: 4 sliding layers (window 8) and 2 full ones; float K/V.
    const gemma4::Gemma4Config c = gemma4::tiny_config();
    double last = 0;
    for (const std::int64_t context : {16, 64, 256}) {
        INFO("context " << context);
        const nlohmann::json j = bench_json("--weights int8 --context " + std::to_string(context));
        const double kv = j["kv_bytes_read_per_step_computed"].get<double>();
        CHECK(kv > last);
        last = kv;
        CHECK(j["bytes_read_per_step_computed"].get<double>() == Approx(j["weight_bytes_per_step_computed"].get<double>() + kv));
        // Steps at positions context .. context + 3: full layers see every position, sliding ones the window.
        double expected = 0;
        for (std::int64_t p = context; p < context + 4; ++p)
            for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
                const auto g = c.layer(l);
                const double seen = g.kind == gemma4::AttentionKind::Sliding ? static_cast<double>(std::min<std::int64_t>(p + 1, c.sliding_window))
                                                                             : static_cast<double>(p + 1);
                expected += seen * 2.0 * static_cast<double>(g.kv_dim()) * sizeof(float);
            }
        CHECK(kv == Approx(expected / 4));
    }
    // Int8 K/V read fewer bytes at the same context.
    const nlohmann::json int8 = bench_json("--weights int8 --kv int8 --context 256");
    CHECK(int8["kv_bytes_read_per_step_computed"].get<double>() < last / 2);
}

TEST_CASE("bench --model measures a checkpoint directory or a GGUF file at its own shapes", "[cli][bench][gguf]") {
    const auto gguf = std::filesystem::path(GEMMA4_TEST_DATA_DIR) / "gguf" / "tiny-gemma4-q8_0.gguf";
    const auto dir = gemma4::test::temp_dir("cli_bench_model");
    REQUIRE(run_cli("make-tiny --out " + dir.string() + " --layers 3").status == 0);
    const std::string common = " --bandwidth-mb 8 --threads 2 --prompt-tokens 6 --gen-tokens 3 --json";
    for (const auto& [path, weights, layers] : {std::tuple{gguf.string(), std::string("as-stored"), 0}, std::tuple{dir.string(), std::string("int8"), 3}}) {
        INFO(path << " " << weights);
        const auto r = run_cli("bench --model " + path + " --weights " + weights + common);
        INFO(r.err);
        REQUIRE(r.status == 0);
        const auto j = nlohmann::json::parse(r.out);
        CHECK(j["config"] == path);
        if (layers > 0) CHECK(j["layers"] == layers);
        CHECK(j["layers"].get<int>() >= 1);
        CHECK(j["decode_tokens_per_s"].get<double>() > 0);
        CHECK(j["weight_bytes_per_step_computed"].get<double>() > 0);
        CHECK(j["model_load_s"].get<double>() > 0);
    }
    const std::string with_model = "bench --model " + dir.string();
    for (const std::string& bad : std::vector<std::string>{with_model + " --random-weights --weights int8", with_model + " --weights int8 --layers 2",
                                                           with_model + " --weights q4_0", "bench --weights int8"}) {
        INFO(bad);
        const auto r = run_cli(bad + common);
        CHECK(r.status != 0);
        CHECK(r.err.find("--model") != std::string::npos);
    }
}

TEST_CASE("bench --image-tokens times the vision embedder and its dense products by the kernels and by Eigen", "[cli][bench][image]") {
    const auto r = run_cli("bench --config tiny --random-weights --weights bf16 --image-tokens 3,17 --repeat 2 --threads 2 --json");
    INFO(r.err);
    REQUIRE(r.status == 0);
    const auto j = nlohmann::json::parse(r.out);
    REQUIRE(j["images"].size() == 2);
    CHECK(j["images"][0]["image_tokens"] == 3);
    CHECK(j["images"][1]["image_tokens"] == 17);
    CHECK(j["patch_values"].get<int>() > 0);
    for (const auto& image : j["images"]) {
        CHECK(image["embedder_s"].get<double>() > 0);
        CHECK(image["dense_kernels_s"].get<double>() > 0);
        CHECK(image["dense_eigen_f32_s"].get<double>() > 0);
        // Both ways compute the same products of the same bf16 values: only the order of the
        // float sums differs.
        CHECK(image["max_abs_output"].get<double>() > 0);
        CHECK(image["max_abs_difference"].get<double>() <= 1e-4 * image["max_abs_output"].get<double>());
    }
    for (const std::string bad : {"--weights int8 --image-tokens 4", "--weights bf16 --image-tokens 0", "--weights bf16 --image-tokens 4 --repeat 0"}) {
        INFO(bad);
        const auto b = run_cli("bench --config tiny --random-weights --threads 2 " + bad);
        CHECK(b.status != 0);
        CHECK((b.err.find("--image-tokens") != std::string::npos || b.err.find("--repeat") != std::string::npos));
    }
}

TEST_CASE("bench --batch B: B sequences per step against one decoding alone, the weights counted once per step", "[cli][bench]") {
    const nlohmann::json one = bench_json("--weights int8");
    CHECK_FALSE(one.contains("batch_speedup"));
    const nlohmann::json j = bench_json("--weights int8 --batch 4");
    CHECK(j["batch"] == 4);
    const double step_bytes = j["weight_bytes_per_step_computed"].get<double>();
    CHECK(step_bytes == Approx(one["weight_bytes_per_step_computed"].get<double>()));
    CHECK(j["weight_bytes_per_token_computed"].get<double>() == Approx(step_bytes / 4));
    const double batch = j["decode_tokens_per_s"].get<double>(), alone = j["alone_decode_tokens_per_s"].get<double>();
    // B sequences' ids over the steps' times of the same run; the lone sequence is timed apart.
    CHECK(batch == Approx(4 * j["gen_tokens"].get<double>() / decode_seconds(j)));
    CHECK(alone > 0);
    CHECK(j["batch_speedup"].get<double>() == Approx(batch / alone));
    // Counted after the B prompts (before the lone sequence's): B prompts' K/V against one.
    CHECK(j["kv_bytes_in_use"].get<double>() > 3 * one["kv_bytes_in_use"].get<double>());
    // A batch needs at least one sequence.
    const auto bad = run_cli(kTinyBench + "--weights int8 --batch 0");
    CHECK(bad.status != 0);
    CHECK(bad.err.find("--prompt-tokens, --gen-tokens and --batch must be >= 1") != std::string::npos);
}

TEST_CASE("bench --quant-block: int8/int4 in blocks of 32 (the default) or 64, named in the JSON, bad values and formats errors", "[cli][bench]") {
    for (const std::string weights : {"int8", "int4"}) {
        INFO(weights);
        const nlohmann::json standard = bench_json("--weights " + weights);
        const nlohmann::json wide = bench_json("--weights " + weights + " --quant-block 64");
        CHECK(standard["quant_block"] == 32);
        CHECK(wide["quant_block"] == 64);
        // one f16 scale per block: half the scale bytes
        CHECK(wide["weight_bytes_per_step_computed"].get<double>() < standard["weight_bytes_per_step_computed"].get<double>());
        CHECK(bench_json("--weights " + weights + " --quant-block 32")["quant_block"] == 32);
    }
    CHECK(bench_json("--weights bf16")["quant_block"] == 0);
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"--weights int8 --quant-block 48", "bench: --quant-block must be 32 or 64, got '48'"},
        {"--weights int8 --quant-block x", "bench: --quant-block expects a number, got 'x'"},
        {"--weights bf16 --quant-block 64", "bench: --quant-block applies to --weights int8 and int4"},
        {"--weights q8_0 --quant-block 64", "bench: --quant-block applies to --weights int8 and int4"},
    };
    for (const auto& [args, message] : bad) {
        INFO(args);
        const auto r = run_cli(kTinyBench + args);
        CHECK(r.status != 0);
        CHECK(r.err.find(message) != std::string::npos);
    }
}

TEST_CASE("quantize --quant-block 64 writes blocks of 64 that generate as loaded in memory", "[cli][quantize]") {
    const auto dir = gemma4::test::temp_dir("cli_quant_block");
    gemma4::write_random_checkpoint(dir / "src", gemma4::tiny_config(), {.seed = 3, .dtype = gemma4::DType::BF16});
    for (const std::string weights : {"int8", "int4"}) {
        INFO(weights);
        const auto out = dir / ("q_" + weights);
        const auto r = run_cli("quantize --model " + (dir / "src").string() + " --weights " + weights + " --quant-block 64 --out " + out.string());
        INFO(r.err);
        REQUIRE(r.status == 0);
        const gemma4::Checkpoint ck = gemma4::load_checkpoint(out);
        CHECK(ck.weights.layers[0].gate_proj.block == 64);
        CHECK(ck.weights.embed_tokens.block == 64);
        // the file, and the source re-encoded in memory at load in blocks of 64, give the same logits
        const gemma4::WeightFormat format = weights == "int8" ? gemma4::WeightFormat::Int8 : gemma4::WeightFormat::Int4;
        const auto from_file = gemma4::Model<float>::load(out, {.n_threads = 2});
        const auto in_memory = gemma4::Model<float>::load(dir / "src", {.n_threads = 2}, {.format = format, .block = 64});
        const auto standard = gemma4::Model<float>::load(dir / "src", {.n_threads = 2}, {.format = format});
        const std::vector<std::int32_t> ids{2, 5, 9, 40};
        const auto a = from_file.logits(ids).values, b = in_memory.logits(ids).values;
        REQUIRE(a.size() == b.size());
        CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
        CHECK(standard.logits(ids).values != a);  // blocks of 32 are other weights
    }
    const auto bad = run_cli("quantize --model " + (dir / "src").string() + " --weights int8 --quant-block 16 --out " + (dir / "bad").string());
    CHECK(bad.status != 0);
    CHECK(bad.err.find("quantize: --quant-block must be 32 or 64, got '16'") != std::string::npos);
}

TEST_CASE("bench --grammar / --json-schema times the token mask over a tokenizer's vocabulary", "[cli][bench][constraint]") {
    const auto dir = gemma4::test::temp_dir("cli_bench_grammar");
    REQUIRE(run_cli("make-tiny --out " + (dir / "m").string()).status == 0);
    std::ofstream(dir / "g.gbnf") << "root ::= \"{\\\"n\\\":\" [0-9]{1,3} \"}\"\n";
    std::ofstream(dir / "s.json") << R"({"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]})";
    const std::string tokenizer = " --tokenizer " + (dir / "m" / "tokenizer.json").string();
    const auto r = run_cli("bench --grammar " + (dir / "g.gbnf").string() + tokenizer + " --replies 5 --json");
    INFO(r.err);
    REQUIRE(r.status == 0);
    const auto j = nlohmann::json::parse(r.out);
    // Each reply is at most {"n":999} then the end id: 2 to 9 steps, and the masks were kept.
    CHECK(j["replies"] == 5);
    CHECK(j["tokens"].get<std::int64_t>() >= 5 * 2);
    CHECK(j["tokens"].get<std::int64_t>() <= 5 * 9);
    CHECK(j["masks_computed"].get<std::int64_t>() >= 2);
    CHECK(j["mask"]["steps"].get<std::int64_t>() + j["first_reply_mask"]["steps"].get<std::int64_t>() == j["apply_mask"]["steps"].get<std::int64_t>());
    CHECK(j["mask"]["median_us"].get<double>() <= j["mask"]["max_us"].get<double>());
    const auto s = run_cli("bench --json-schema " + (dir / "s.json").string() + tokenizer + " --replies 2");
    INFO(s.err);
    REQUIRE(s.status == 0);
    CHECK(s.out.find("mask, later replies") != std::string::npos);
    CHECK(run_cli("bench --grammar " + (dir / "g.gbnf").string() + " --replies 2").err.find("--tokenizer") != std::string::npos);
}
