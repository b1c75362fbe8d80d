// model/quantize.hpp: the one-line summary of the big matrices as loaded, for a GGUF file whose
// matrices are Q8_0 but one, edited to Q4_1 blocks that run as stored.
#include <catch2/catch.hpp>

#include <gemma4/model/checkpoint.hpp>
#include <gemma4/model/quantize.hpp>
#include <gemma4/tensor/ggml_blocks.hpp>

#include "support/gguf_fixtures.hpp"

#include <string>

using namespace gemma4;

TEST_CASE("matrix_summary counts the big matrices by storage, most bytes first", "[model][quantize]") {
    // blk.4.attn_q (64 rows of 64 values: two Q4_1 blocks each)
    const auto path = test::edited_gguf(test::repo_gguf_dir() / "tiny-gemma4-q8_0.gguf", "quantize_summary", "q4_1",
                                        [](std::vector<GgufKv>&, std::vector<GgufTensorOut>& ts) {
                                            GgufTensorOut& w = test::gguf_tensor(ts, "blk.4.attn_q.weight");
                                            w.type = GgmlType::Q4_1;
                                            w.data.assign(64 * 2 * 20, '\0');  // 64 rows of two blocks, d = m = 0
                                        });
    Checkpoint ck = load_checkpoint(path);
    const std::string summary = matrix_summary(ck.weights);
    const std::size_t matrices = big_matrices(ck.weights).size();
    CHECK(summary.rfind("Q8: " + std::to_string(matrices - 1) + " matrices, ", 0) == 0);
    CHECK(summary.find("; Q4_1 as stored: 1 matrix, 0.00 GB") != std::string::npos);
    CHECK(summary.find(';') == summary.rfind(';'));  // two kinds
}
