// The statistics `gemma4 loadgen` reports for one concurrency level, from the time line of each
// streamed request: when it started, when its first and later deltas arrived, when it ended.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace gemma4::server {

struct LoadSample {
    using clock = std::chrono::steady_clock;
    double ttft = -1;            ///< seconds to the first content (or reasoning) delta; -1: none
    std::int64_t tokens = 0;     ///< completion_tokens of the usage chunk
    bool ok = false;
    std::string error;           ///< why it failed: "HTTP 401", "connection: …"
    clock::time_point first_at{}, end_at{};  ///< first content delta, end of the stream
    std::vector<clock::time_point> deltas;   ///< arrival of every content delta, the first included
};

struct LoadLevel {
    using clock = LoadSample::clock;
    int concurrency = 0;
    double seconds = 0;
    std::vector<LoadSample> samples;

    std::int64_t ok() const { return std::count_if(samples.begin(), samples.end(), [](const LoadSample& s) { return s.ok; }); }

    std::int64_t tokens() const {
        std::int64_t n = 0;
        for (const auto& s : samples) n += s.tokens;
        return n;
    }

    /// Time to first token at quantile p (nearest rank) over the completed requests; 0 if none.
    double ttft_percentile(double p) const {
        std::vector<double> t;
        for (const auto& s : samples)
            if (s.ok && s.ttft >= 0) t.push_back(s.ttft);
        if (t.empty()) return 0;
        std::sort(t.begin(), t.end());
        const auto i = static_cast<std::size_t>(std::min<double>(static_cast<double>(t.size() - 1), p * static_cast<double>(t.size() - 1) + 0.5));
        return t[i];
    }

    /// Tokens after each request's first, per second of the union of the [first token, end]
    /// intervals: prompt processing before the first reply token and queueing are left out, but
    /// other requests' prompts processed while a reply streams are not.
    double decode_tokens_per_s() const {
        std::vector<std::pair<clock::time_point, clock::time_point>> spans;
        std::int64_t n = 0;
        for (const auto& s : decoding())
            if (s->tokens > 1) {
                spans.emplace_back(s->first_at, s->end_at);
                n += s->tokens - 1;
            }
        std::sort(spans.begin(), spans.end());
        double busy = 0;
        for (std::size_t i = 0; i < spans.size();) {
            auto [lo, hi] = spans[i];
            for (++i; i < spans.size() && spans[i].first <= hi; ++i) hi = std::max(hi, spans[i].second);
            busy += std::chrono::duration<double>(hi - lo).count();
        }
        return busy > 0 ? static_cast<double>(n) / busy : 0;
    }

    /// The decode rate while every client's reply was past its first token at once (each client
    /// decoding, none waiting for a first token): the tokens that arrived in those windows (ends
    /// included), a reply's tokens after its first spread evenly over its deltas after its first
    /// (or all on its one delta, when everything came at once), per second of the windows. This
    /// is the server's rate at full occupancy; 0 when the level never had all its clients
    /// decoding together (replies too short to overlap).
    double saturated_decode_tokens_per_s() const {
        std::vector<std::pair<clock::time_point, int>> edges;
        for (const auto& s : decoding()) {
            edges.emplace_back(s->first_at, +1);
            edges.emplace_back(s->end_at, -1);
        }
        std::sort(edges.begin(), edges.end());  // at equal times an end (-1) comes first
        std::vector<std::pair<clock::time_point, clock::time_point>> windows;
        int active = 0;
        for (const auto& [at, step] : edges) {
            if (step < 0 && active >= concurrency) windows.back().second = at;
            active += step;
            if (step > 0 && active == concurrency) windows.emplace_back(at, at);
        }
        double seconds = 0;
        for (const auto& [lo, hi] : windows) seconds += std::chrono::duration<double>(hi - lo).count();
        if (seconds <= 0) return 0;
        double tokens = 0;
        for (const auto& s : decoding()) {
            if (s->tokens < 2 || s->deltas.empty()) continue;
            const std::size_t first = s->deltas.size() > 1 ? 1 : 0;
            const double per_delta = static_cast<double>(s->tokens - 1) / static_cast<double>(s->deltas.size() - first);
            for (std::size_t d = first; d < s->deltas.size(); ++d)
                for (const auto& [lo, hi] : windows)
                    if (s->deltas[d] >= lo && s->deltas[d] <= hi) {
                        tokens += per_delta;
                        break;  // windows that touch share an end: count the delta once
                    }
        }
        return tokens / seconds;
    }

    /// Failed requests by reason.
    std::map<std::string, std::int64_t> errors() const {
        std::map<std::string, std::int64_t> e;
        for (const auto& s : samples)
            if (!s.ok) ++e[s.error.empty() ? "no reply token" : s.error];
        return e;
    }

private:
    std::vector<const LoadSample*> decoding() const {
        std::vector<const LoadSample*> d;
        for (const auto& s : samples)
            if (s.ok && s.ttft >= 0) d.push_back(&s);
        return d;
    }
};

}  // namespace gemma4::server
