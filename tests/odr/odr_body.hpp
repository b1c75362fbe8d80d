// The body both translation units compile (included once in each, after its own flags).
#include <gemma4/kernels/linear.hpp>
#include <gemma4/model/model.hpp>

#include "odr_run.hpp"

// Internal linkage: each unit its own (an inline function of one name would be merged).
static OdrRun odr_run(const std::filesystem::path& dir) {
    using namespace gemma4;
    OdrRun r;
    r.abi = abi_name();
    const KernelChoice k = active_kernels();
    r.quant = k.quant;
    r.bf16 = k.bf16;
    const auto model = Model<float>::load(dir, {.n_threads = 2}, {.format = WeightFormat::Int8});
    const std::vector<std::int32_t> ids{2, 7, 19, 33, 4, 11};
    r.logits = model.logits(ids).values;
    // one Q8 matrix alone: the level's kernel, the same in both units
    std::vector<float> w(48 * 256), x(3 * 256);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(static_cast<int>(i * 37 % 101) - 50) / 50.0f;
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i * 13 % 29) - 14) / 7.0f;
    constexpr std::int64_t N = 48, K = 256;
    constexpr std::int64_t B = 64;
    const std::int64_t rb = quant::row_bytes(DType::Q8, K), nb = quant::blocks_per_row(K, B);
    std::vector<std::byte> panels(static_cast<std::size_t>(quant::panel_count(N) * quant::panel_bytes(DType::Q8, B, K)));
    std::vector<std::byte> row_codes(static_cast<std::size_t>(rb));
    std::vector<std::uint16_t> row_scales(static_cast<std::size_t>(nb));
    for (std::int64_t n = 0; n < N; ++n) {
        const std::int64_t p = n / quant::kPanelRows;
        quant::quantize_row(DType::Q8, B, w.data() + n * K, K, row_codes.data(), row_scales.data());
        quant::row_to_panel(DType::Q8, B, row_codes.data(), row_scales.data(), K, n % quant::kPanelRows,
                            panels.data() + p * quant::panel_bytes(DType::Q8, B, K));
    }
    WeightView view{.name = "w", .dtype = DType::Q8, .shape = {N, K}, .data = panels.data(), .size_bytes = panels.size(), .block = B};
    r.q8.resize(3 * N);
    ThreadPool pool(2);
    linear<float>(view, {x.data(), K}, {r.q8.data(), N}, 3, pool);
    return r;
}
