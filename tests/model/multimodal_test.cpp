// Images and audio end to end: the embedders, placeholder expansion, soft-token splicing and
// the image blocks' bidirectional attention against the plain reference.
#include <catch2/catch.hpp>

#include <gemma4/generate/session.hpp>
#include <gemma4/model/multimodal.hpp>
#include <gemma4/model/random_checkpoint.hpp>

#include "support/reference_model.hpp"
#include "support/temp_dir.hpp"

using namespace gemma4;

namespace {

struct Fixture {
    std::filesystem::path dir;
    Gemma4Config config;
    std::vector<ImageInput<double>> images;
    std::vector<AudioInput<double>> audios;
    std::vector<std::int32_t> ids;

    explicit Fixture(Gemma4Config c = tiny_config(), const std::string& name = "multimodal") : dir(test::temp_dir(name)), config(c) {
        write_random_checkpoint(dir, config, {.seed = 91, .dtype = DType::BF16});
        const std::int64_t P = config.vision.patch_values(), F = config.audio.audio_embed_dim;
        auto fill = [](std::size_t n, double phase) {
            std::vector<double> v(n);
            for (std::size_t i = 0; i < n; ++i) v[i] = 0.5 + 0.5 * std::sin(phase + 0.37 * static_cast<double>(i));
            return v;
        };
        images.push_back({fill(static_cast<std::size_t>(4 * P), 0.1), {0, 0, 1, 0, 0, 1, 1, 1}});  // 2×2 tiles
        images.push_back({fill(static_cast<std::size_t>(3 * P), 0.7), {0, 0, 1, 0, 2, 0}});        // 1×3 tiles
        audios.push_back({fill(static_cast<std::size_t>(5 * F), 1.3)});
        const TokenIds& t = config.tokens;
        // "<bos> a <|image|> b <|audio|> c <|image|> d": placeholders expanded below.
        const std::vector<std::int32_t> prompt = {2, 40, t.image, 41, 42, t.audio, 43, t.image, 44, 45, 46, 47, 48};
        const std::int64_t image_tokens[2] = {4, 3}, audio_tokens[1] = {5};
        ids = expand_placeholders(prompt, t, image_tokens, audio_tokens);
    }

    test::ReferenceModel::Soft reference_soft(const test::ReferenceModel& ref, bool on_full) const {
        const std::int64_t P = config.vision.patch_values(), F = config.audio.audio_embed_dim;
        std::vector<test::Matrix> image_rows, audio_rows;
        for (const auto& im : images) {
            test::Matrix m(im.num_tiles(), P);
            m.v = im.patches;
            image_rows.push_back(ref.embed_image(m, im.positions));
        }
        for (const auto& a : audios) {
            test::Matrix m(a.num_frames(F), F);
            m.v = a.frames;
            audio_rows.push_back(ref.embed_audio(m));
        }
        test::ReferenceModel::Soft soft{test::Matrix(4 + 3 + 5, config.hidden_size), {}, on_full};
        std::size_t next_image = 0, next_audio = 0;
        std::int64_t used = 0, row = 0;
        for (std::size_t i = 0; i < ids.size(); ++i) {
            const bool img = ids[i] == config.tokens.image, aud = ids[i] == config.tokens.audio;
            soft.blocks.push_back(img ? static_cast<std::int32_t>(next_image) : -1);
            if (!img && !aud) continue;
            const test::Matrix& src = img ? image_rows[next_image] : audio_rows[next_audio];
            for (std::int64_t c = 0; c < config.hidden_size; ++c) soft.rows(row, c) = src(used, c);
            ++row;
            if (++used == src.rows) {
                used = 0;
                ++(img ? next_image : next_audio);
            }
        }
        return soft;
    }
};

}  // namespace

TEST_CASE("placeholder expansion", "[multimodal]") {
    const TokenIds t = tiny_config().tokens;
    const std::vector<std::int32_t> prompt = {2, t.image, 7, t.audio};
    const std::int64_t img[1] = {3}, aud[1] = {2};
    const auto ids = expand_placeholders(prompt, t, img, aud);
    CHECK(ids == std::vector<std::int32_t>{2, t.boi, t.image, t.image, t.image, t.eoi, 7, t.boa, t.audio, t.audio, t.eoa});
    const std::int64_t none[1] = {1};
    REQUIRE_THROWS_AS(expand_placeholders(prompt, t, std::span<const std::int64_t>(), aud), InvalidArgument);
    REQUIRE_THROWS_WITH(expand_placeholders(prompt, t, std::span<const std::int64_t>(), aud),
                        Catch::Contains("more image placeholders than images (0)"));
    const std::int64_t two[2] = {1, 1};
    REQUIRE_THROWS_WITH(expand_placeholders(prompt, t, two, none), Catch::Contains("2 images given but the prompt has 1 image placeholders"));
    const std::vector<std::int32_t> video = {t.video};
    REQUIRE_THROWS_WITH(expand_placeholders(video, t, {}, {}), Catch::Contains("video input is not supported"));
}

TEST_CASE("images and audio end to end match the reference in double", "[multimodal]") {
    const Fixture f;
    const test::ReferenceModel ref(f.dir);
    for (bool on_full : {false, true}) {
        DYNAMIC_SECTION("image blocks on full layers: " << on_full) {
            const Model<double> model = Model<double>::load(f.dir, ModelOptions{.n_threads = 2, .image_blocks_on_full_layers = on_full});
            const SoftTokenPlan<double> plan = plan_soft_tokens<double>(model, f.ids, f.images, f.audios);
            KVCache<double> cache = model.make_cache();
            const SeqId s = cache.add_sequence();
            const SequenceChunk chunk{s, f.ids};
            const Logits<double> got = model.forward(std::span<const SequenceChunk>(&chunk, 1), cache, plan.view());
            const auto soft = f.reference_soft(ref, on_full);
            const test::Matrix expected = ref.forward(f.ids, nullptr, &soft);
            CHECK(test::relative_error(got.values.data(), expected.v.data(), expected.v.size()) <= 1e-12);
            // The embedders alone.
            for (std::int64_t r = 0; r < soft.rows.rows; ++r)
                for (std::int64_t c = 0; c < soft.rows.cols; ++c)
                    REQUIRE(std::abs(plan.rows[static_cast<std::size_t>(r * soft.rows.cols + c)] - soft.rows(r, c)) <= 1e-12 * 10);
        }
    }
}

TEST_CASE("a vision embedder narrower than the text model (mm_embed_dim != hidden_size)", "[multimodal]") {
    // Hugging Face's own vision tester runs an embedder of width 64 under a smaller text model:
    // patch_dense maps to mm_embed_dim and only embedding_projection reaches the hidden size.
    Gemma4Config c = tiny_config();
    c.vision.mm_embed_dim = 24;
    REQUIRE(c.vision_embed_dim() != c.hidden_size);
    const Fixture f(c, "multimodal_narrow");
    const Checkpoint ck = load_checkpoint(f.dir);
    CHECK(ck.config.vision_embed_dim() == 24);
    CHECK(ck.weights.vision.patch_dense_weight.shape == std::vector<std::int64_t>{24, c.vision.patch_values()});
    CHECK(ck.weights.vision.pos_embedding.shape == std::vector<std::int64_t>{c.vision.mm_posemb_size, 2, 24});
    CHECK(ck.weights.vision.embedding_projection.shape == std::vector<std::int64_t>{c.hidden_size, 24});

    const test::ReferenceModel ref(f.dir);
    const Model<double> model = Model<double>::load(f.dir, ModelOptions{.n_threads = 2});
    const SoftTokenPlan<double> plan = plan_soft_tokens<double>(model, f.ids, f.images, f.audios);
    KVCache<double> cache = model.make_cache();
    const SequenceChunk chunk{cache.add_sequence(), f.ids};
    const Logits<double> got = model.forward(std::span<const SequenceChunk>(&chunk, 1), cache, plan.view());
    const auto soft = f.reference_soft(ref, false);
    const test::Matrix expected = ref.forward(f.ids, nullptr, &soft);
    CHECK(test::relative_error(got.values.data(), expected.v.data(), expected.v.size()) <= 1e-12);
    CHECK(test::relative_error(plan.rows.data(), soft.rows.v.data(), soft.rows.v.size()) <= 1e-12);
}

TEST_CASE("masks: image tokens see their whole image on sliding layers, audio stays causal", "[multimodal][masks]") {
    Fixture f;
    const Model<double> model = Model<double>::load(f.dir);
    auto first_hidden = [&](const std::vector<ImageInput<double>>& images, const std::vector<AudioInput<double>>& audios, int layer) {
        const auto plan = plan_soft_tokens<double>(model, f.ids, images, audios);
        std::vector<std::vector<double>> rows;
        auto obs = [&](const TapView<double>& v) {
            if (v.layer == layer && v.node == "mlp_residual")
                for (std::int64_t r = 0; r < v.rows; ++r) rows.emplace_back(v.data + r * v.stride, v.data + r * v.stride + v.cols);
        };
        KVCache<double> cache = model.make_cache();
        const SequenceChunk chunk{cache.add_sequence(), f.ids};
        model.forward(std::span<const SequenceChunk>(&chunk, 1), cache, plan.view(), LogitsMode::Last, obs);
        return rows;
    };
    const auto first_image = static_cast<std::size_t>(std::find(f.ids.begin(), f.ids.end(), f.config.tokens.image) - f.ids.begin());
    const auto first_audio = static_cast<std::size_t>(std::find(f.ids.begin(), f.ids.end(), f.config.tokens.audio) - f.ids.begin());
    const auto base = first_hidden(f.images, f.audios, 0);  // layer 0 is sliding

    auto changed_image = f.images;
    changed_image[0].patches.back() += 0.5;  // the image's last tile
    const auto img = first_hidden(changed_image, f.audios, 0);
    CHECK(img[first_image] != base[first_image]);            // earlier tile of the same image sees it
    CHECK(img[first_image - 1] == base[first_image - 1]);    // <|image> before the block does not

    auto changed_audio = f.audios;
    changed_audio[0].frames.back() += 0.5;  // the clip's last frame
    const auto aud = first_hidden(f.images, changed_audio, 0);
    CHECK(aud[first_audio] == base[first_audio]);            // causal: earlier frames do not see it
    CHECK(aud[first_audio + 4] != base[first_audio + 4]);

    // Full layers (layer 2) are causal for images unless asked otherwise.
    const auto full_base = first_hidden(f.images, f.audios, 2);
    const auto full_img = first_hidden(changed_image, f.audios, 2);
    CHECK(full_img[first_image] != full_base[first_image]);  // via the sliding layers below it
}

TEST_CASE("session prefill never splits an image block, and matches one forward pass", "[multimodal][session]") {
    const Fixture f;
    const Model<double> model = Model<double>::load(f.dir);
    const auto plan = plan_soft_tokens<double>(model, f.ids, f.images, f.audios);
    KVCache<double> cache = model.make_cache();
    const SequenceChunk chunk{cache.add_sequence(), f.ids};
    const Logits<double> full = model.forward(std::span<const SequenceChunk>(&chunk, 1), cache, plan.view(), LogitsMode::Last);
    const auto expected = static_cast<std::int32_t>(std::max_element(full.values.begin(), full.values.end()) - full.values.begin());
    for (std::int64_t step : {1, 2, 3, 5, 100}) {
        Session<double> session(model);
        GenerateOptions o{.max_new_tokens = 1, .sampling = {.temperature = 0.0}, .prefill_chunk = step};
        const auto r = session.generate(std::span<const std::int32_t>(f.ids), o, &plan);
        CHECK(r.ids == std::vector<std::int32_t>{expected});
    }
}

TEST_CASE("soft-token misuse is a clear error", "[multimodal][errors]") {
    const Fixture f;
    const Model<double> model = Model<double>::load(f.dir);
    KVCache<double> cache = model.make_cache();
    const SeqId s = cache.add_sequence();
    const SequenceChunk chunk{s, f.ids};
    const std::span<const SequenceChunk> batch(&chunk, 1);
    REQUIRE_THROWS_WITH(model.forward(batch, cache), Catch::Contains("is an image/audio placeholder but no soft tokens were given"));
    const auto plan = plan_soft_tokens<double>(model, f.ids, f.images, f.audios);
    const std::span<const double> short_rows(plan.rows.data(), plan.rows.size() - 64);
    REQUIRE_THROWS_WITH(model.forward(batch, cache, SoftTokens<double>{short_rows, plan.blocks}),
                        Catch::Contains("soft-token values given for 12 placeholder ids"));
    std::vector<std::int32_t> split = plan.blocks;
    split[4] = 1;  // image 0's run broken in two by image 1's id
    REQUIRE_THROWS_WITH(model.forward(batch, cache, SoftTokens<double>{plan.rows, split}), Catch::Contains("is not one contiguous run"));
    CHECK(cache.length(s) == 0);
    auto bad = f.images;
    bad[0].positions[0] = 99;  // outside the 16-entry position table
    REQUIRE_THROWS_AS(plan_soft_tokens<double>(model, f.ids, bad, f.audios), InvalidArgument);
    REQUIRE_THROWS_WITH(plan_soft_tokens<double>(model, f.ids, bad, f.audios), Catch::Contains("outside the position table [0, 16)"));
    auto ragged = f.audios;
    ragged[0].frames.pop_back();
    REQUIRE_THROWS_AS(plan_soft_tokens<double>(model, f.ids, f.images, ragged), ShapeError);
    const std::vector<AudioInput<double>> no_audio;
    REQUIRE_THROWS_WITH(plan_soft_tokens<double>(model, f.ids, f.images, no_audio), Catch::Contains("more audio placeholder runs than inputs"));
}
