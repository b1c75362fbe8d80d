// The MTP assistant as a drafter (generate/drafter.hpp): greedy drafts of the published
// multi-token-prediction model (model/assistant.hpp), which reads the target's final-normed
// hidden state and KV cache, so it needs no cache of its own. The requests of one call are
// drafted together: one assistant step per draft position for all of them.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/generate/drafter.hpp>
#include <gemma4/model/assistant.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

template <class T>
class MtpDrafter final : public Drafter {
public:
    explicit MtpDrafter(std::shared_ptr<const Assistant<T>> assistant) : assistant_(std::move(assistant)) {
        if (!assistant_) throw InvalidArgument("MtpDrafter: no assistant");
    }

    const Assistant<T>& assistant() const { return *assistant_; }

    void draft(std::span<const DraftRequest> requests, std::span<std::vector<std::int32_t>> drafts) override {
        // Requests over the same target, cache and p_min are drafted in one batch, to the
        // longest budget among them; each draft is then cut to its own.
        using Key = std::tuple<const Model<T>*, const KVCache<T>*, double>;
        std::map<Key, std::vector<std::size_t>> groups;
        for (std::size_t i = 0; i < requests.size(); ++i) {
            const auto* target = std::get_if<DraftTarget<T>>(&requests[i].target);
            if (!target || !target->model || !target->cache)
                throw InvalidArgument(std::string("MTP drafter: request ") + std::to_string(i) + " carries no " +
                                      (sizeof(T) == sizeof(float) ? "float" : "double") +
                                      " target state (the assistant reads the target's hidden state and KV cache)");
            groups[{target->model, target->cache, requests[i].p_min}].push_back(i);
        }
        for (const auto& [key, members] : groups) {
            std::vector<AssistantSeed<T>> seeds;
            std::int64_t longest = 0;
            for (const std::size_t i : members) {
                const DraftRequest& r = requests[i];
                const auto& target = std::get<DraftTarget<T>>(r.target);
                if (r.context.empty()) throw InvalidArgument("MTP drafter: request " + std::to_string(i) + " has an empty context");
                seeds.push_back({target.seq, r.context.back(), target.hidden});
                longest = std::max(longest, r.max_tokens);
            }
            auto out = assistant_->draft(std::span<const AssistantSeed<T>>(seeds), *std::get<0>(key), *std::get<1>(key), longest,
                                         std::get<2>(key));
            for (std::size_t g = 0; g < members.size(); ++g) {
                auto& d = out[g];
                const auto budget = static_cast<std::size_t>(std::max<std::int64_t>(0, requests[members[g]].max_tokens));
                if (d.size() > budget) d.resize(budget);
                drafts[members[g]] = std::move(d);
            }
        }
    }

private:
    std::shared_ptr<const Assistant<T>> assistant_;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
