// gemma4 logits: the final soft-capped logits at every position, as .npy ([T, vocab]).
// Several --tokens run as one batch; --chunk N feeds each sequence N ids per step.
#include "../cli.hpp"
#include "../media_args.hpp"

#include <gemma4/io/npy.hpp>
#include <gemma4/model/model.hpp>

#include <cstdio>
#include <filesystem>
#include <map>

namespace cmd_logits {

using namespace gemma4;

/// Collects every tap's rows across steps, to dump them as one .npy per node.
template <class T>
struct TapRecorder {
    std::map<std::string, std::pair<std::int64_t, std::vector<T>>> nodes;  // cols, values
    void operator()(const TapView<T>& v) {
        auto& [cols, values] = nodes[v.full_name()];
        cols = v.cols;
        for (std::int64_t r = 0; r < v.rows; ++r) values.insert(values.end(), v.data + r * v.stride, v.data + r * v.stride + v.cols);
    }
};

template <class T>
int run_precision(cli::Args& args, const std::vector<std::vector<std::int32_t>>& seqs, std::int64_t chunk,
                  const std::optional<std::string>& out, const std::optional<std::string>& out_dir,
                  const std::optional<std::string>& dump, unsigned threads, const std::string& model_dir, WeightFormat format) {
    const Model<T> model = Model<T>::load(model_dir, ModelOptions{threads}, LoadOptions{.format = format, .mmproj = args.mmproj()});
    const cli::Media<T> media = cli::read_media_arrays<T>(args, model.config());
    args.finish();
    if (!media.empty() && seqs.size() > 1) throw InvalidArgument("logits: images and audio go with a single --tokens");
    SoftTokenPlan<T> plan;
    bool placeholders = false;
    for (const auto id : seqs[0]) placeholders |= model.is_placeholder(id);
    if (!media.empty() || placeholders) plan = plan_soft_tokens<T>(model, seqs[0], media.images, media.audios);
    const std::int64_t H = model.config().hidden_size;
    std::int64_t rows_before = 0;
    KVCache<T> cache = model.make_cache();
    std::vector<SeqId> ids;
    for (std::size_t i = 0; i < seqs.size(); ++i) ids.push_back(cache.add_sequence());
    std::vector<std::vector<T>> results(seqs.size());
    TapRecorder<T> recorder;
    const std::int64_t V = model.config().vocab_size;
    for (std::size_t done = 0;;) {
        std::vector<SequenceChunk> step;
        std::vector<std::size_t> which;
        for (std::size_t i = 0; i < seqs.size(); ++i) {
            const auto start = static_cast<std::size_t>(cache.length(ids[i]));
            if (start >= seqs[i].size()) continue;
            const std::size_t end = cli::chunk_end(plan.blocks, start, seqs[i].size(), static_cast<std::size_t>(chunk));
            step.push_back({ids[i], std::span<const std::int32_t>(seqs[i]).subspan(start, end - start)});
            which.push_back(i);
        }
        if (step.empty()) break;
        std::int64_t rows_in = 0;
        for (const auto id : step[0].ids) rows_in += model.is_placeholder(id);
        const auto begin = static_cast<std::size_t>(step[0].ids.data() - seqs[which[0]].data());
        const SoftTokens<T> soft = plan.rows.empty() ? SoftTokens<T>{} : plan.slice(begin, begin + step[0].ids.size(), rows_before, rows_in, H);
        rows_before += plan.rows.empty() ? 0 : rows_in;
        const Logits<T> logits = dump ? model.forward(step, cache, soft, LogitsMode::All, recorder) : model.forward(step, cache, soft, LogitsMode::All);
        std::int64_t row = 0;
        for (std::size_t k = 0; k < step.size(); ++k)
            for (std::size_t j = 0; j < step[k].ids.size(); ++j, ++row) {
                auto r = logits.row(row);
                results[which[k]].insert(results[which[k]].end(), r.begin(), r.end());
            }
        ++done;
    }
    auto write = [&](const std::filesystem::path& path, std::size_t i) {
        const std::int64_t shape[2] = {static_cast<std::int64_t>(seqs[i].size()), V};
        write_npy<T>(path, results[i], shape);
    };
    if (out) write(*out, 0);
    if (out_dir) {
        std::filesystem::create_directories(*out_dir);
        for (std::size_t i = 0; i < seqs.size(); ++i) write(std::filesystem::path(*out_dir) / (std::to_string(i) + ".npy"), i);
    }
    if (dump) {
        std::filesystem::create_directories(*dump);
        for (const auto& [name, node] : recorder.nodes) {
            const std::int64_t shape[2] = {static_cast<std::int64_t>(node.second.size()) / node.first, node.first};
            write_npy<T>(std::filesystem::path(*dump) / (name + ".npy"), node.second, shape);
        }
    }
    return 0;
}

int run(cli::Args& args) {
    const std::string model_dir = args.require("model");
    const auto token_lists = args.get_all("tokens");
    if (token_lists.empty()) throw InvalidArgument("logits: missing --tokens");
    std::vector<std::vector<std::int32_t>> seqs;
    for (const auto& t : token_lists) seqs.push_back(cli::parse_id_list(t, "logits: --tokens"));
    const std::string precision = args.get("precision").value_or("f32");
    const auto chunk = args.number<std::int64_t>("chunk", 0);
    const auto out = args.get("out");
    const auto out_dir = args.get("out-dir");
    const auto dump = args.get("dump-taps");
    const auto threads = args.number<unsigned>("threads", 0);
    const std::string weights = args.get("weights").value_or("as-stored");
    const auto format = parse_weight_format(weights);
    if (!format) throw InvalidArgument("logits: --weights must be int8, int4 or bf16, got '" + weights + "'");
    if (chunk < 0) throw InvalidArgument("logits: --chunk must be positive");
    if (seqs.size() == 1 && !out && !out_dir) throw InvalidArgument("logits: missing --out");
    if (seqs.size() > 1 && !out_dir) throw InvalidArgument("logits: several --tokens need --out-dir");
    if (seqs.size() > 1 && out) throw InvalidArgument("logits: --out takes one sequence; use --out-dir");
    std::size_t longest = 0;
    for (const auto& s : seqs) longest = std::max(longest, s.size());
    const std::int64_t step = chunk ? chunk : static_cast<std::int64_t>(longest);
    if (precision == "f32") return run_precision<float>(args, seqs, step, out, out_dir, dump, threads, model_dir, *format);
    if (precision == "f64") return run_precision<double>(args, seqs, step, out, out_dir, dump, threads, model_dir, *format);
    throw InvalidArgument("logits: --precision must be f32 or f64, got '" + precision + "'");
}

const cli::Command reg{"logits", "final logits at every position as .npy (--dump-taps DIR: every node)",
                       cli::Options{
                           {"model", "PATH", "checkpoint directory or .gguf file", cli::kRequired},
                           {"tokens", "IDS", "comma-separated token ids (at least one --tokens; several run as one batch)", cli::kRepeatable},
                           {"out", "FILE", "[T, vocab] .npy of the one sequence"},
                           {"out-dir", "DIR", "one <i>.npy per sequence"},
                           {"precision", "f32|f64", "arithmetic type (default: f32)"},
                           {"weights", "FORMAT", "as-stored (default), bf16, int8 or int4: re-encode the weights at load"},
                           {"chunk", "N", "feed each sequence N ids per step (default: all at once)"},
                           {"dump-taps", "DIR", "also write every node's activations as DIR/<node>.npy"},
                       } + cli::media_array_options() + cli::mmproj_option() + cli::threads_option(),
                       run};

}  // namespace cmd_logits
