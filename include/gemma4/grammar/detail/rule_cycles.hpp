// A cycle in the graph of "rule r can begin with rule s": left recursion, which both the GBNF
// parser and the JSON Schema compiler refuse (the matcher's expansion of such a rule would
// never end).
#pragma once

#include <gemma4/abi.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {
namespace detail {

/// The rules of one cycle of `starts` (starts[r]: the rules r can begin with), in order, or an
/// empty list. An iterative depth-first search, so deep grammars do not exhaust the stack.
inline std::vector<std::size_t> find_rule_cycle(const std::vector<std::vector<std::size_t>>& starts) {
    std::vector<std::uint8_t> mark(starts.size(), 0);  // 0 unvisited, 1 on the path, 2 done
    std::vector<std::pair<std::size_t, std::size_t>> path;
    for (std::size_t r0 = 0; r0 < starts.size(); ++r0) {
        if (mark[r0]) continue;
        path.push_back({r0, 0});
        mark[r0] = 1;
        while (!path.empty()) {
            auto& [r, next] = path.back();
            if (next == starts[r].size()) {
                mark[r] = 2;
                path.pop_back();
                continue;
            }
            const std::size_t s = starts[r][next++];
            if (mark[s] == 1) {
                std::vector<std::size_t> cycle;
                auto it = std::find_if(path.begin(), path.end(), [s](const auto& p) { return p.first == s; });
                for (; it != path.end(); ++it) cycle.push_back(it->first);
                return cycle;
            }
            if (mark[s] == 0) {
                mark[s] = 1;
                path.push_back({s, 0});
            }
        }
    }
    return {};
}

}  // namespace detail
}  // namespace GEMMA4_ABI
}  // namespace gemma4
