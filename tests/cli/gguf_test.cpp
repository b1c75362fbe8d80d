// `gemma4 logits / generate / chat --model FILE.gguf`: a GGUF file works wherever a checkpoint
// directory does, with the tokenizer from its tokenizer.ggml.* keys, and images and audio with
// its --mmproj.
#include <catch2/catch.hpp>

#include <gemma4/generate/session.hpp>
#include <gemma4/io/npy.hpp>
#include <gemma4/model/model.hpp>
#include <gemma4/model/multimodal.hpp>
#include <gemma4/multimodal/audio.hpp>
#include <gemma4/multimodal/image.hpp>
#include <gemma4/tokenizer/gguf_tokenizer.hpp>

#include "multimodal/test_files.hpp"
#include "support/gguf_fixtures.hpp"
#include "support/run_cli.hpp"
#include "support/temp_dir.hpp"

#include <nlohmann/json.hpp>

using namespace gemma4;
using test::run_cli;

namespace {
std::string fixture(const std::string& name) { return (std::filesystem::path(GEMMA4_TEST_DATA_DIR) / "gguf" / name).string(); }
}  // namespace

TEST_CASE("logits --model FILE.gguf equals the library's forward pass", "[cli][gguf]") {
    const auto dir = test::temp_dir("cli_gguf_logits");
    for (const std::string name : {"tiny-gemma4-q8_0.gguf", "tiny-gemma4-q4_0-mixed.gguf"}) {
        INFO(name);
        const std::string ids = "2,105,17,40,9,60,107,200,33,81,5,6";
        const auto r = run_cli("logits --model " + fixture(name) + " --tokens " + ids + " --precision f64 --out " + (dir / "a.npy").string());
        REQUIRE(r.status == 0);
        const auto a = read_npy<double>(dir / "a.npy");
        REQUIRE(a.shape == std::vector<std::int64_t>{12, 384});
        const Model<double> model = Model<double>::load(fixture(name), ModelOptions{1});
        const Logits<double> want = model.logits(std::vector<std::int32_t>{2, 105, 17, 40, 9, 60, 107, 200, 33, 81, 5, 6});
        CHECK(a.data == want.values);
        // and in float through the Q8 / Q4 kernels
        REQUIRE(run_cli("logits --model " + fixture(name) + " --tokens " + ids + " --out " + (dir / "b.npy").string()).status == 0);
        const auto b = read_npy<float>(dir / "b.npy");
        const Logits<float> fwant = Model<float>::load(fixture(name), ModelOptions{1}).logits(std::vector<std::int32_t>{2, 105, 17, 40, 9, 60, 107, 200, 33, 81, 5, 6});
        CHECK(b.data == fwant.values);
    }
    const auto bad = run_cli("logits --model " + (dir / "a.npy").string() + " --tokens 2 --out " + (dir / "c.npy").string());
    CHECK(bad.status == 1);
    CHECK(bad.err.find("bad magic (not a GGUF file)") != std::string::npos);
}

TEST_CASE("generate --model FILE.gguf: ids greedy like logits, text through the file's tokenizer", "[cli][gguf]") {
    const std::string model_path = fixture("tiny-gemma4-q8_0.gguf");
    const auto r = run_cli("generate --model " + model_path + " --prompt-ids 2,40,41,42 --max-new-tokens 6 --temperature 0 --print-ids");
    REQUIRE(r.status == 0);
    const auto ids = nlohmann::json::parse(r.out).get<std::vector<std::int32_t>>();
    REQUIRE(!ids.empty());
    const Model<float> model = Model<float>::load(model_path, ModelOptions{1});
    std::vector<std::int32_t> seq{2, 40, 41, 42};
    for (std::size_t i = 0; i < ids.size(); ++i) {
        const Logits<float> l = model.logits(seq);
        const auto last = l.row(l.rows - 1);
        const auto best = static_cast<std::int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
        CHECK(ids[i] == best);
        seq.push_back(best);
    }
    // text in, text out: the prompt is encoded by the GGUF's tokenizer
    const auto text = run_cli("generate --model " + model_path + " --prompt 'the cat sat' --max-new-tokens 4 --temperature 0");
    CHECK(text.status == 0);
    CHECK(text.err.find("tok/s") != std::string::npos);
    const Tokenizer tok = load_gguf_tokenizer(model_path);
    const auto with_ids = run_cli("generate --model " + model_path + " --prompt 'the cat sat' --max-new-tokens 4 --temperature 0 --print-ids");
    REQUIRE(with_ids.status == 0);
    const auto gen = nlohmann::json::parse(with_ids.out).get<std::vector<std::int32_t>>();
    CHECK(text.out == tok.decode(gen) + "\n");
}

TEST_CASE("chat --model FILE.gguf answers each line", "[cli][gguf]") {
    const auto r = run_cli("chat --model " + fixture("tiny-gemma4-q4_0.gguf") + " --max-new-tokens 4", "Hello\nHow are you?\n/exit\n");
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(std::count(r.out.begin(), r.out.end(), '>') >= 3);
}

TEST_CASE("generate --model FILE.gguf --mmproj FILE: images and audio as with the library", "[cli][gguf][mmproj]") {
    const auto dir = test::temp_dir("cli_gguf_mmproj");
    const auto text = test::multimodal_text_gguf(fixture("tiny-gemma4-q8_0.gguf"), dir / "text.gguf");
    const auto mmproj = test::mmproj_fixture("q8_0");
    // 72 × 60 px: 12 × 10 patches of 6 px at 140 soft tokens, within the 24-entry position table
    std::vector<unsigned> rgb;
    for (unsigned y = 0; y < 60; ++y)
        for (unsigned x = 0; x < 72; ++x) rgb.insert(rgb.end(), {x * 3, y * 4, (x * y) % 256});
    test::write_png(dir / "image.png", test::PngSpec{.width = 72, .height = 60}, rgb);
    std::vector<std::int16_t> samples;
    for (int i = 0; i < 3000; ++i) samples.push_back(static_cast<std::int16_t>(8000 * std::sin(0.03 * i)));
    test::write_bytes(dir / "audio.wav", test::wav_bytes(test::WavSpec{}, test::pcm16_data(samples)));
    const std::string prompt = "<bos>Look: <|image|> and listen: <|audio|>";
    const auto r = run_cli("generate --model " + text.string() + " --mmproj " + mmproj.string() + " --prompt '" + prompt +
                           "' --image " + (dir / "image.png").string() + " --audio " + (dir / "audio.wav").string() +
                           " --max-soft-tokens 140 --max-new-tokens 4 --temperature 0 --print-ids");
    INFO(r.err);
    REQUIRE(r.status == 0);
    const auto ids = nlohmann::json::parse(r.out).get<std::vector<std::int32_t>>();

    const Model<float> model = Model<float>::load(text, ModelOptions{1}, LoadOptions{.mmproj = mmproj});
    const Gemma4Config& c = model.config();
    const ImagePatches p = preprocess_image(dir / "image.png", {.max_soft_tokens = 140, .patch_size = 2, .pooling_kernel_size = 3});
    CHECK(p.num_patches == 120);
    const AudioFrames a = preprocess_audio(dir / "audio.wav", {.frame_size = c.audio.audio_embed_dim});
    const std::vector<ImageInput<float>> images{{p.values, p.positions}};
    const std::vector<AudioInput<float>> audios{{a.values}};
    const std::int64_t image_tokens[1] = {120};
    const std::int64_t audio_tokens[1] = {audios[0].num_frames(c.audio.audio_embed_dim)};
    const auto prompt_ids = expand_placeholders(load_gguf_tokenizer(text).encode(prompt), c.tokens, image_tokens, audio_tokens);
    const auto plan = plan_soft_tokens<float>(model, prompt_ids, images, audios);
    Session<float> session(model);
    const auto want = session.generate(std::span<const std::int32_t>(prompt_ids), GenerateOptions{.max_new_tokens = 4, .sampling = {.temperature = 0.0}},
                                       &plan);
    CHECK(ids == want.ids);

    // chat takes it too; a checkpoint directory has embedders of its own
    const auto chat = run_cli("chat --model " + text.string() + " --mmproj " + mmproj.string() + " --image " + (dir / "image.png").string() +
                              " --max-soft-tokens 140 --max-new-tokens 2", "What is this? <|image|>\n/exit\n");
    INFO(chat.err);
    CHECK(chat.status == 0);
    const auto wrong = run_cli("generate --model " + fixture("tiny-gemma4-q8_0.gguf") + " --mmproj " + mmproj.string() +
                               " --prompt-ids 2,40 --max-new-tokens 1");
    CHECK(wrong.status == 1);
    CHECK(wrong.err.find("vocabulary has no '<|image|>' token") != std::string::npos);
}
