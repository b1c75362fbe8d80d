// GGUF parsing, Gemma 4 checkpoints and tokenizers from GGUF, and mmproj files (the image and
// audio embedders of a fixed text model): the input is a whole .gguf file.
#include <gemma4/io/gguf.hpp>
#include <gemma4/io/gguf_writer.hpp>
#include <gemma4/model/checkpoint.hpp>
#include <gemma4/model/gguf_mmproj.hpp>
#include <gemma4/tensor/ggml_blocks.hpp>
#include <gemma4/tokenizer/gguf_tokenizer.hpp>

#include "fuzz_support.hpp"

#include <vector>

namespace {

/// Reads every element of a value (bounded), as a model loader would.
void visit(const gemma4::GgufValue& v, std::size_t& budget) {
    if (!v.is_array()) {
        (void)v.as_int(), (void)v.as_double(), (void)v.as_string(), (void)v.as_bool();
        return;
    }
    for (std::size_t i = 0; i < v.size() && budget > 0; ++i, --budget) visit(v.at(i), budget);
}

/// The text model every input is also read as the mmproj of: hidden size 32 (as the corpus'
/// micro_mmproj.gguf), its vocabulary (Gemma 4's multimodal tokens) in a file of its own.
const gemma4::Checkpoint& mmproj_text_model() {
    static gemma4::fuzz::MemoryFile vocabulary;
    static const gemma4::Checkpoint ck = [] {
        std::vector<std::string> tokens{"<pad>", "<eos>", "<bos>"};
        for (const auto& t : gemma4::detail::kMultimodalTokens) tokens.push_back(t.piece);
        const std::string bytes = gemma4::gguf_file_bytes({gemma4::gguf_string_array("tokenizer.ggml.tokens", tokens)}, {});
        gemma4::Checkpoint c;
        c.config.hidden_size = 32;
        c.config.vocab_size = static_cast<std::int64_t>(tokens.size());
        c.config.has_vision = c.config.has_audio = false;
        c.directory = vocabulary.write(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
        c.text_prefix = "model.";
        return c;
    }();
    return ck;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static gemma4::fuzz::MemoryFile file;
    const auto& path = file.write(data, size);
    gemma4::fuzz::expect_ok_or_error([&] {
        const gemma4::GgufFile f(path);
        std::size_t budget = 1 << 16;
        for (const auto& [key, value] : f.metadata()) visit(value, budget);
        // Every accepted tensor lies inside the file: touch its first and last byte, and
        // dequantize the small ones.
        unsigned sum = 0;
        for (const auto& t : f.tensors()) {
            if (f.data_offset() + t.offset + t.size_bytes > size) gemma4::fuzz::fail("tensor data past the end of the file");
            const auto* bytes = reinterpret_cast<const unsigned char*>(f.data(t));
            if (t.size_bytes > 0) sum += bytes[0] + bytes[t.size_bytes - 1];
            if (gemma4::ggml::can_dequantize(t.type) && t.numel <= (1u << 16)) {
                std::vector<double> out(static_cast<std::size_t>(t.numel));
                gemma4::ggml::dequantize_row(t.type, f.data(t), static_cast<std::int64_t>(t.numel), out.data());
            }
        }
        volatile unsigned sink = sum;
        (void)sink;
    });
    gemma4::fuzz::expect_ok_or_error([&] {
        gemma4::LoadOptions options;
        options.n_threads = 1;
        const gemma4::Checkpoint ck = gemma4::load_checkpoint(path, options);
        if (ck.weights.layers.size() != static_cast<std::size_t>(ck.config.num_hidden_layers)) gemma4::fuzz::fail("layer count");
    });
    gemma4::fuzz::expect_ok_or_error([&] {
        gemma4::Checkpoint ck = mmproj_text_model();
        gemma4::load_gguf_mmproj(ck, path);
        // Every bound view holds the values its shape says: read the first and the last.
        for (const gemma4::WeightView* v : {&ck.weights.vision.patch_dense_weight, &ck.weights.vision.pos_embedding,
                                            &ck.weights.vision.patch_ln1_weight, &ck.weights.audio.embedding_projection})
            if (*v && v->numel() > 0) {
                volatile float first = v->at<float>(0), last = v->at<float>(v->numel() - 1);
                (void)first, (void)last;
            }
        if (ck.config.has_vision && ck.weights.vision.patch_dense_weight.shape !=
                                        std::vector<std::int64_t>{ck.config.vision_embed_dim(), ck.config.vision.patch_values()})
            gemma4::fuzz::fail("mmproj patch_dense shape");
    });
    gemma4::fuzz::expect_ok_or_error([&] {
        const gemma4::Tokenizer t = gemma4::tokenizer_from_gguf(gemma4::GgufFile(path));
        (void)t.decode(t.encode("a b\n<bos>"));
    });
    return 0;
}
