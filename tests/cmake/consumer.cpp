// The program both package consumers build: it writes a tiny random checkpoint, loads it
// through gemma4::Model, and prints the last position's logits and the greedy next token.
// Usage: consumer <scratch folder>.
#include <gemma4/gemma4.hpp>
#include <gemma4/model/random_checkpoint.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <vector>

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s <scratch folder>\n", argv[0]);
        return 2;
    }
    try {
        gemma4::write_random_checkpoint(argv[1], gemma4::tiny_config(), {.seed = 7});
        const auto model = gemma4::Model<float>::load(argv[1], gemma4::ModelOptions{1});
        const std::vector<std::int32_t> ids = {2, 10, 11, 12};
        const gemma4::Logits<float> logits = model.logits(ids);
        const auto last = logits.row(logits.rows - 1);
        std::printf("logits[0..4]:");
        for (int i = 0; i < 4; ++i) std::printf(" %.6f", static_cast<double>(last[static_cast<std::size_t>(i)]));
        const auto next = std::max_element(last.begin(), last.end()) - last.begin();
        std::printf("\nnext token: %td\nconsumer: ok\n", next);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "consumer: %s\n", e.what());
        return 1;
    }
}
