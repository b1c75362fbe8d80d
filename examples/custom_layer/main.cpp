// custom_layer: runs Gemma 4 with linear attention on its full-attention layers next to the
// standard model and prints, per spec node, how far the two drift apart.
//
//   custom_layer MODEL_DIR [ids...]
#include "linear_attention.hpp"

#include <cstdio>
#include <map>

int main(int argc, char** argv) try {
    if (argc < 2) {
        std::fprintf(stderr, "usage: custom_layer MODEL_DIR [ids...]\n");
        return 2;
    }
    std::vector<std::int32_t> ids = {2, 10, 20, 30, 40, 50};
    if (argc > 2) {
        ids.clear();
        for (int i = 2; i < argc; ++i) ids.push_back(std::stoi(argv[i]));
    }
    const auto ours = gemma4::Model<double>::load(argv[1]);
    const auto theirs = custom::LinearGlobalModel<double>::load(argv[1]);
    std::map<std::string, std::vector<double>> a, b;
    auto record = [](std::map<std::string, std::vector<double>>& m) {
        return [&m](const gemma4::TapView<double>& v) {
            auto& out = m[v.full_name()];
            for (std::int64_t r = 0; r < v.rows; ++r) out.insert(out.end(), v.data + r * v.stride, v.data + r * v.stride + v.cols);
        };
    };
    ours.logits(ids, record(a));
    theirs.logits(ids, record(b));
    for (const auto& [name, va] : a) {
        const auto& vb = b.at(name);
        double diff = 0, scale = 0;
        for (std::size_t i = 0; i < va.size(); ++i) diff = std::max(diff, std::abs(va[i] - vb[i])), scale = std::max(scale, std::abs(va[i]));
        if (diff > 0) std::printf("%-32s max |Δ| / max |x| = %.3e\n", name.c_str(), diff / scale);
    }
    return 0;
} catch (const gemma4::Error& e) {
    std::fprintf(stderr, "custom_layer: %s\n", e.what());
    return 1;
}
