// Stop strings for streamed text. Decoded pieces arrive one token at a time and a stop string
// may span several of them, so text that could still be the start of a stop string is held
// back until it is known not to be one: the caller never shows part of a stop string.
//
// The stop is the occurrence that completes first in the text; among occurrences ending at the
// same byte, the one starting earliest. That rule depends only on the text, never on how it was
// cut into pieces, so the output is the same for any split.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// What one piece of text released.
struct StopStep {
    std::string text;  ///< safe to show now (never contains or ends inside a stop string)
    bool stopped = false;
    std::size_t stop_index = std::numeric_limits<std::size_t>::max();  ///< which stop string, when stopped
};

class StopMatcher {
public:
    explicit StopMatcher(std::vector<std::string> stop_strings) : stops_(std::move(stop_strings)) {
        for (std::size_t i = 0; i < stops_.size(); ++i) {
            if (stops_[i].empty())
                throw InvalidArgument("StopMatcher: stop string " + std::to_string(i) + " is empty");
            longest_ = std::max(longest_, stops_[i].size());
        }
    }

    const std::vector<std::string>& stop_strings() const { return stops_; }
    bool stopped() const { return stopped_; }
    /// Text received but not yet released because a stop string may still complete there.
    std::string_view held() const { return pending_; }

    /// Adds the next piece of generated text. After a stop, further pieces release nothing.
    StopStep feed(std::string_view piece) {
        StopStep step;
        if (stopped_) {
            step.stopped = true;
            step.stop_index = stop_index_;
            return step;
        }
        const std::size_t checked = pending_.size();  // no stop ends inside the held text
        pending_.append(piece);
        for (std::size_t end = checked + 1; end <= pending_.size(); ++end) {
            for (std::size_t s = 0; s < stops_.size(); ++s) {
                const std::string& stop = stops_[s];
                if (stop.size() > end || pending_.compare(end - stop.size(), stop.size(), stop) != 0)
                    continue;
                // Among stops ending here the longest starts earliest; keep the first listed on ties.
                if (!step.stopped || stop.size() > stops_[step.stop_index].size()) {
                    step.stopped = true;
                    step.stop_index = s;
                }
            }
            if (step.stopped) {
                step.text = pending_.substr(0, end - stops_[step.stop_index].size());
                pending_.clear();
                stopped_ = true;
                stop_index_ = step.stop_index;
                return step;
            }
        }
        const std::size_t hold = held_suffix_length();
        step.text = pending_.substr(0, pending_.size() - hold);
        pending_.erase(0, pending_.size() - hold);
        return step;
    }

    /// The held-back text, for when generation ends without a stop string (end-of-sequence
    /// token, length limit). Empty after a stop.
    std::string flush() {
        std::string rest;
        rest.swap(pending_);
        return rest;
    }

    void reset() {
        pending_.clear();
        stopped_ = false;
        stop_index_ = std::numeric_limits<std::size_t>::max();
    }

private:
    /// The longest suffix of the pending text that is a proper prefix of some stop string; every
    /// shorter candidate lies inside it, so holding it covers them all.
    std::size_t held_suffix_length() const {
        const std::size_t limit = std::min(pending_.size(), longest_ - 1);
        for (std::size_t length = limit; length > 0; --length) {
            const std::string_view suffix = std::string_view(pending_).substr(pending_.size() - length);
            for (const std::string& stop : stops_)
                if (stop.size() > length && std::string_view(stop).starts_with(suffix)) return length;
        }
        return 0;
    }

    std::vector<std::string> stops_;
    std::size_t longest_ = 1;
    std::string pending_;
    bool stopped_ = false;
    std::size_t stop_index_ = std::numeric_limits<std::size_t>::max();
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
