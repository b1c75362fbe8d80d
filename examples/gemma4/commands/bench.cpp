// gemma4 bench: prefill and decode speed at the published shapes with random weights held in
// memory, next to what this machine can do in the same run (streaming read bandwidth, FMA peak),
// and peak RSS. --json prints one JSON object on stdout.
//
// --batch B: B sequences prefilled one after the other, then decoding together (one step feeds
// one token of each). With B > 1 one more sequence decodes alone, its steps alternating with the
// batch steps, so that the batch speedup compares steps taken under the same conditions (a
// shared machine's memory bandwidth varies from minute to minute); not with --context.
// --context N: no prefill; the KV cache of each sequence is filled with random K/V for N
// positions (only what a later query can see: the sliding layers' window, every position of the
// full layers), then decode steps are timed at that context. --kv int8 stores
// the cache as int8 with a scale per (position, head).
// --draft oracle --accept P[,P...] --draft-max K[,K...]: speculative decoding's mechanism. Random
// weights make a real drafter's acceptance meaningless, so a plain greedy run's output is
// replayed by the oracle drafter with each drafted id right with probability P; each (P, K) run
// alternates with a plain run of the same length, and the table gives tokens/s, the speedup
// over the plain run next to it, and what a verification step costs relative to a plain one.
// --draft assistant: the published 12B MTP assistant's shapes with random weights in the
// format of --weights (written to a scratch folder, then loaded): the time it takes per
// drafted id, reading the prefilled target's cache, next to a decode step of the target.
// --weights q8_0|q4_0: the random int8 / int4 weights are written as a GGUF file (Q8_0 / Q4_0,
// streamed a few rows at a time) in --gguf-dir, flushed to disk and dropped from the page
// cache, then loaded through the GGUF loader as a user's file is; the load is timed on its own
// (seconds and GB/s of file), and a few greedy ids from the file's model are checked equal to
// those of the same weights in memory. The file is deleted afterwards unless --keep-gguf.
//
// Bytes read per decode step are computed, not measured: the matrices' sizes (the weights are
// read once per step whatever the batch) and, with --context, the K/V each sequence's query
// reads (every layer's visible positions, the window on sliding layers, times the cache's bytes
// per position). The bandwidth fraction compares their sum per second with the measured read
// bandwidth: the best of five probe passes before the run, and, paired with the steps, the best
// of one probe pass after each decode step (a shared machine's bandwidth moves by a factor of
// two within minutes, so a probe taken once can be far from what the steps saw; the best, as
// one pass reads slower than the steps at times).
// --model PATH: a checkpoint directory or GGUF file (a user's own, e.g. a Q4_0 file) measured
// instead of random weights, at its own shapes, re-encoded at load as --weights asks.
// --image-tokens N[,N...]: the vision embedder on images of N soft tokens, and its two dense
// products timed by the run-time bf16 kernel and by Eigen over f32 copies (why the float path
// keeps the kernels: docs/architecture.md).
// --grammar FILE | --json-schema FILE with --tokenizer: what a constraint costs per token at that
// vocabulary (bench_grammar.hpp).
#include "../cli.hpp"
#include "../probes.hpp"
#include "bench_grammar.hpp"

#include <gemma4/generate/session.hpp>
#include <gemma4/kernels/dense.hpp>
#include <gemma4/layers/embedders.hpp>
#include <gemma4/model/assistant.hpp>
#include <gemma4/model/gguf_export.hpp>
#include <gemma4/model/model.hpp>
#include <gemma4/model/quantize.hpp>
#include <gemma4/model/random_checkpoint.hpp>
#include <gemma4/model/random_weights.hpp>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>


namespace cmd_bench {

using namespace gemma4;
using probes::Clock;
using probes::seconds_since;

std::size_t peak_rss_bytes() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("VmHWM:", 0) == 0) return static_cast<std::size_t>(std::stoull(line.substr(6))) * 1024;
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<std::size_t>(u.ru_maxrss) * 1024;
}

/// Multiply-adds ×2 of one forward step: matrices for `tokens` rows, LM head for `head_rows`,
/// attention scores and values over each token's visible keys.
double step_flops(const Gemma4Config& c, std::int64_t tokens, std::int64_t head_rows, std::int64_t start) {
    double f = 0;
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const LayerGeometry g = c.layer(l);
        const double H = static_cast<double>(c.hidden_size), I = static_cast<double>(c.intermediate_size);
        const double mats = g.q_dim() * H + 2.0 * g.kv_dim() * H * (g.has_v_proj ? 1 : 0.5) + H * g.q_dim() + 3 * I * H;
        f += 2 * mats * static_cast<double>(tokens);
        for (std::int64_t t = 0; t < tokens; ++t) {
            const std::int64_t p = start + t, lo = g.kind == AttentionKind::Sliding ? std::max<std::int64_t>(0, p - g.window + 1) : 0;
            f += 4.0 * static_cast<double>(g.num_heads * g.head_dim * (p - lo + 1));
        }
    }
    return f + 2.0 * static_cast<double>(c.vocab_size * c.hidden_size * head_rows);
}

std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    return "unknown";
}

/// Writes random K/V (unit scale, like the normed keys and values) for positions [0, n) of every
/// sequence, in chunks, as a prefill would but without computing anything: sliding layers only
/// get the positions a later query still sees; pages out of the window are dropped by advance().
void fill_cache(const Gemma4Config& c, KVCache<float>& cache, const std::vector<SeqId>& seqs, std::int64_t n) {
    constexpr std::int64_t kChunk = 4096;
    std::int64_t kv_max = 0;
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) kv_max = std::max(kv_max, c.layer(l).kv_dim());
    std::vector<float> k(static_cast<std::size_t>(kv_max)), v(k.size());
    std::uint64_t state = 0x9e3779b97f4a7c15ull;
    auto refill = [&] {
        for (std::size_t i = 0; i < k.size(); ++i) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            k[i] = static_cast<float>(static_cast<double>(state >> 40) * 0x1.0p-24 * 3.4 - 1.7);
            v[i] = static_cast<float>(static_cast<double>((state >> 16) & 0xffffff) * 0x1.0p-24 * 3.4 - 1.7);
        }
    };
    for (const SeqId s : seqs)
        for (std::int64_t p0 = 0; p0 < n; p0 += kChunk) {
            const std::int64_t len = std::min(kChunk, n - p0);
            cache.reserve(s, len);
            for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
                const bool sliding = c.layer(l).kind == AttentionKind::Sliding;
                for (std::int64_t p = p0; p < p0 + len; ++p) {
                    if (sliding && p < n - c.sliding_window) continue;  // never visible again
                    if (p % 64 == 0) refill();  // fresh values now and then; generating them is not the point
                    cache.store(l, s, p, k.data(), v.data());
                }
            }
            cache.advance(s, len);
        }
}

/// One row of the speculative table.
struct SpeculativeRun {
    double accept = 0;
    std::int64_t draft_max = 0;
    double tokens_per_s = 0, plain_tokens_per_s = 0;
    double acceptance = 0;          ///< accepted / drafted
    double tokens_per_step = 0;     ///< emitted ids per verification step
    double step_cost = 0;           ///< seconds per verification step / seconds per plain step
};

/// Greedy generation of `n` ids after `prompt` (end ids off), with or without a drafter.
GenerationResult greedy_run(const Model<float>& model, std::span<const std::int32_t> prompt, std::int64_t n, SpeculativeOptions spec = {}) {
    Session<float> session(model);
    GenerateOptions o;
    o.max_new_tokens = n;
    o.sampling.temperature = 0.0;
    o.end_ids = {-1};
    o.speculative = spec;
    return session.generate(prompt, o);
}

double seconds_per_step(const GenerationResult& r) {
    return r.stats.generation_seconds / static_cast<double>(std::max<std::int64_t>(1, r.stats.decode_steps));
}

std::vector<SpeculativeRun> speculative_bench(const Model<float>& model, std::span<const std::int32_t> prompt, std::int64_t n,
                                              const std::vector<double>& accepts, const std::vector<std::int64_t>& lengths) {
    const GenerationResult reference = greedy_run(model, prompt, n);
    std::vector<std::int32_t> sequence(prompt.begin(), prompt.end());
    sequence.insert(sequence.end(), reference.ids.begin(), reference.ids.end());
    std::vector<SpeculativeRun> rows;
    std::uint64_t seed = 1;
    for (const double p : accepts)
        for (const std::int64_t k : lengths) {
            const GenerationResult plain = greedy_run(model, prompt, n);
            OracleDrafter oracle(sequence, p, seed++);
            const GenerationResult spec = greedy_run(model, prompt, n, {.drafter = &oracle, .draft_max = k});
            if (spec.ids != reference.ids || plain.ids != reference.ids)
                throw Error("bench: speculative decoding changed the greedy output (accept " + std::to_string(p) + ", draft length " +
                            std::to_string(k) + ")");
            rows.push_back({p, k, spec.stats.generation_tokens_per_s(), plain.stats.generation_tokens_per_s(), spec.stats.acceptance_rate(),
                            static_cast<double>(spec.stats.generated_tokens - 1) / static_cast<double>(std::max<std::int64_t>(1, spec.stats.decode_steps)),
                            seconds_per_step(spec) / seconds_per_step(plain)});
        }
    return rows;
}

/// Bytes of K/V that B sequences' decode steps read on average over `steps` steps after
/// `context` cached positions: per layer, the positions its query sees (the window on sliding
/// layers), times the cache's bytes of K and V per position.
double kv_read_bytes_per_step(const Gemma4Config& c, const KVCache<float>& cache, std::int64_t context, std::int64_t steps, std::int64_t B) {
    double bytes = 0;
    for (std::int64_t g = 0; g < steps; ++g) {
        const std::int64_t p = context + g;  // the position of this step's query
        for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
            const LayerGeometry geo = c.layer(l);
            const std::int64_t lo = geo.kind == AttentionKind::Sliding ? std::max<std::int64_t>(0, p - geo.window + 1) : 0;
            bytes += static_cast<double>(p - lo + 1) * static_cast<double>(cache.bytes_per_position(geo.kind));
        }
    }
    return bytes * static_cast<double>(B) / static_cast<double>(steps);
}

/// Writes `path` to disk and drops it from the page cache, so that loading it reads the disk as
/// a user's first load does. Returns whether the kernel accepted both.
bool flush_and_evict(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return false;
    const bool ok = ::fdatasync(fd) == 0 && ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
    ::close(fd);
    return ok;
}

/// What the GGUF path of the bench measured.
struct GgufRun {
    std::string type;  ///< q8_0 or q4_0
    std::filesystem::path path;
    std::uint64_t file_bytes = 0;
    double write_s = 0, load_s = 0;
    bool evicted = false;  ///< the load read a file dropped from the page cache
    bool matches = false;  ///< greedy ids equal those of the weights in memory
    std::vector<std::int32_t> ids;
};

/// Removes the scratch file on every way out, unless it is to be kept.
struct ScratchFile {
    std::filesystem::path path;
    bool keep = false;
    ~ScratchFile() {
        std::error_code ec;
        if (!keep && !path.empty()) std::filesystem::remove(path, ec);
    }
};

template <class V>
std::vector<V> parse_list(cli::Args& args, const std::string& name, const std::string& text) {
    std::vector<V> out;
    for (std::size_t at = 0; at <= text.size();) {
        const std::size_t comma = std::min(text.find(',', at), text.size());
        out.push_back(args.parse_number<V>(name, text.substr(at, comma - at)));
        at = comma + 1;
    }
    return out;
}

/// --image-tokens N[,N...]: an image of N soft tokens through the vision embedder at the
/// config's shapes (random bf16 weights), and its two dense products (patch_dense P → E,
/// embedding_projection E → H) timed both ways: the run-time level's bf16 kernel, and Eigen
/// over f32 copies of the weights. Best of --repeat runs each, alternating.
int run_image(cli::Args& args) {
    const std::string config_name = args.get("config").value_or("gemma-4-12b");
    const std::string weights = args.require("weights");
    const bool random = args.flag("random-weights");
    const auto counts = parse_list<std::int64_t>(args, "image-tokens", *args.get("image-tokens"));
    const auto threads = args.number<unsigned>("threads", 0);
    const auto repeats = args.number<int>("repeat", 3);
    const bool json = args.flag("json");
    args.finish();
    if (!random || weights != "bf16")
        throw InvalidArgument("bench: --image-tokens runs the vision embedder on random weights held as checkpoints store them: give --random-weights --weights bf16");
    if (config_name != "gemma-4-12b" && config_name != "tiny")
        throw InvalidArgument("bench: --config must be gemma-4-12b or tiny, got '" + config_name + "'");
    if (repeats < 1) throw InvalidArgument("bench: --repeat must be >= 1");
    for (const std::int64_t n : counts)
        if (n < 1 || n > 4096) throw InvalidArgument("bench: --image-tokens values must be in [1, 4096]");
    // Only the embedder's tensors: no decoder layers, a token table of a few rows.
    Gemma4Config c = with_layers(config_name == "tiny" ? tiny_config() : kGemma4_12B, 0);
    c.vocab_size = 16;
    c.has_vision = true;
    c.has_audio = false;
    ThreadPool pool(threads);
    const ModelWeights w = random_weights(c, WeightFormat::BF16, 1, threads);
    const VisionEmbedder<float> embed(c, w.vision);
    const std::int64_t P = c.vision.patch_values(), E = c.vision_embed_dim(), H = c.hidden_size, table = c.vision.mm_posemb_size;
    // The Eigen side multiplies f32 copies of the weights (Eigen has no bf16 product).
    const std::vector<float> dense_values = w.vision.patch_dense_weight.to_vector<float>(),
                             projection_values = w.vision.embedding_projection.to_vector<float>();
    const auto f32_view = [](const std::vector<float>& v, std::int64_t rows, std::int64_t cols) {
        return WeightView{"f32 copy", DType::F32, {rows, cols}, reinterpret_cast<const std::byte*>(v.data()), v.size() * sizeof(float)};
    };
    const WeightView dense_f32 = f32_view(dense_values, E, P), projection_f32 = f32_view(projection_values, H, E);

    nlohmann::json runs = nlohmann::json::array();
    for (const std::int64_t n : counts) {
        detail::SplitMix64 rng{static_cast<std::uint64_t>(n)};
        std::vector<float> patches(static_cast<std::size_t>(n * P));
        for (float& v : patches) v = static_cast<float>(rng.symmetric());
        std::vector<std::int32_t> positions(static_cast<std::size_t>(2 * n));
        for (std::int64_t i = 0; i < n; ++i) {
            positions[static_cast<std::size_t>(2 * i)] = static_cast<std::int32_t>(i % table);
            positions[static_cast<std::size_t>(2 * i + 1)] = static_cast<std::int32_t>(i / table % table);
        }
        std::vector<float> h(static_cast<std::size_t>(n * E)), out_kernel(static_cast<std::size_t>(n * H)), h_eigen(h.size()), out_eigen(out_kernel.size());
        double embedder_s = 1e30, kernel_s = 1e30, eigen_s = 1e30;
        for (int r = 0; r < repeats; ++r) {
            auto t0 = Clock::now();
            const std::vector<float> soft = embed(patches, positions, pool);
            embedder_s = std::min(embedder_s, seconds_since(t0));
            t0 = Clock::now();
            linear<float>(w.vision.patch_dense_weight, {patches.data(), P}, {h.data(), E}, n, pool);
            linear<float>(w.vision.embedding_projection, {h.data(), E}, {out_kernel.data(), H}, n, pool);
            kernel_s = std::min(kernel_s, seconds_since(t0));
            t0 = Clock::now();
            detail::linear_eigen<float>(dense_f32, {patches.data(), P}, {h_eigen.data(), E}, n, pool);
            detail::linear_eigen<float>(projection_f32, {h_eigen.data(), E}, {out_eigen.data(), H}, n, pool);
            eigen_s = std::min(eigen_s, seconds_since(t0));
        }
        double max_diff = 0, max_abs = 0;
        for (std::size_t i = 0; i < out_kernel.size(); ++i) {
            max_diff = std::max(max_diff, static_cast<double>(std::abs(out_kernel[i] - out_eigen[i])));
            max_abs = std::max(max_abs, static_cast<double>(std::abs(out_kernel[i])));
        }
        const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(P * E + E * H);
        runs.push_back({{"image_tokens", n},
                        {"embedder_s", embedder_s},
                        {"dense_kernels_s", kernel_s},
                        {"dense_eigen_f32_s", eigen_s},
                        {"dense_kernels_flops_per_s", flops / kernel_s},
                        {"dense_eigen_flops_per_s", flops / eigen_s},
                        {"max_abs_difference", max_diff},
                        {"max_abs_output", max_abs}});
    }
    const KernelChoice kernels = active_kernels();
    const nlohmann::json j{{"config", config_name},
                           {"threads", pool.size()},
                           {"patch_values", P},
                           {"embed_dim", E},
                           {"hidden_size", H},
                           {"repeat", repeats},
                           {"images", runs},
                           {"cpu", cpu_model()},
                           {"isa", isa_name(active_isa())},
                           {"linear_bf16", kernels.bf16},
                           {"eigen_simd", Eigen::SimdInstructionSetsInUse()},
                           {"build_abi", abi_name()}};
    if (json) {
        std::printf("%s\n", j.dump().c_str());
        return 0;
    }
    std::printf("vision embedder, %s shapes (P %lld -> E %lld -> H %lld), %u threads, %s; best of %d\n", config_name.c_str(),
                static_cast<long long>(P), static_cast<long long>(E), static_cast<long long>(H), pool.size(), std::string(isa_name(active_isa())).c_str(), repeats);
    std::printf("  soft tokens  embedder s  dense: kernels s  Eigen f32 s  (GFLOP/s kernels / Eigen)\n");
    for (const auto& r : runs)
        std::printf("  %11lld  %10.3f  %16.3f  %11.3f  (%.1f / %.1f)\n", r["image_tokens"].get<long long>(), r["embedder_s"].get<double>(),
                    r["dense_kernels_s"].get<double>(), r["dense_eigen_f32_s"].get<double>(), r["dense_kernels_flops_per_s"].get<double>() / 1e9,
                    r["dense_eigen_flops_per_s"].get<double>() / 1e9);
    return 0;
}

int run(cli::Args& args) {
    if (args.get("image-tokens")) return run_image(args);
    if (args.get("grammar") || args.get("json-schema")) return run_grammar(args);
    const auto config_opt = args.get("config");
    const std::string config_name = config_opt.value_or("gemma-4-12b");
    const auto model_path = args.get("model");
    const std::filesystem::path mmproj = args.mmproj();
    const std::string weights = args.require("weights");
    const bool random = args.flag("random-weights");
    const auto P = args.number<std::int64_t>("prompt-tokens", 128);
    const auto G = args.number<std::int64_t>("gen-tokens", 16);
    const auto threads = args.number<unsigned>("threads", 0);
    const auto batch_opt = args.get("batch");
    const auto bw_mb = args.number<std::int64_t>("bandwidth-mb", 1536);
    const auto context = args.number<std::int64_t>("context", 0);
    const std::string kv = args.get("kv").value_or("float");
    const bool json = args.flag("json");
    const auto draft = args.get("draft");
    const auto accept_list = args.get("accept");
    const auto draft_max_list = args.get("draft-max");
    const auto gguf_dir = args.get("gguf-dir");
    const bool keep_gguf = args.flag("keep-gguf");
    const auto layers_opt = args.get("layers");
    const std::int64_t quant_block = args.quant_block();
    args.finish();
    std::vector<double> accepts;
    std::vector<std::int64_t> draft_lengths;
    if (draft) {
        if (*draft != "oracle" && *draft != "assistant") throw InvalidArgument("bench: --draft must be oracle or assistant, got '" + *draft + "'");
        accepts = parse_list<double>(args, "accept", accept_list.value_or("0.5,0.7,0.9"));
        draft_lengths = parse_list<std::int64_t>(args, "draft-max", draft_max_list.value_or("1,2,3,4,5,6"));
        for (const double p : accepts)
            if (!(p >= 0 && p <= 1)) throw InvalidArgument("bench: --accept values must be in [0, 1]");
        for (const std::int64_t k : draft_lengths)
            if (k < 1) throw InvalidArgument("bench: --draft-max values must be >= 1");
        if (batch_opt || context > 0) throw InvalidArgument("bench: --draft measures one sequence: no --batch or --context");
    } else if (accept_list || draft_max_list) {
        throw InvalidArgument("bench: --accept and --draft-max need --draft");
    }
    if (random == model_path.has_value())
        throw InvalidArgument("bench: give either --random-weights (the config's shapes) or --model PATH (a checkpoint directory or GGUF file)");
    if (!mmproj.empty() && !model_path) throw InvalidArgument("bench: --mmproj goes with --model FILE.gguf");
    if (model_path && (config_opt || layers_opt || draft == "assistant"))
        throw InvalidArgument("bench: --model PATH measures that checkpoint as it is: no --config, --layers or --draft assistant");
    if (config_name != "gemma-4-12b" && config_name != "tiny")
        throw InvalidArgument("bench: --config must be gemma-4-12b or tiny, got '" + config_name + "'");
    Gemma4Config c = config_name == "tiny" ? tiny_config() : kGemma4_12B;
    c.has_vision = c.has_audio = false;
    // q8_0 / q4_0: the int8 / int4 weights, through a GGUF file.
    const std::string gguf_type = weights == "q8_0" || weights == "q4_0" ? weights : "";
    const auto format = gguf_type.empty() ? parse_weight_format(weights) : gguf_type == "q8_0" ? WeightFormat::Int8 : WeightFormat::Int4;
    if (!format || (*format == WeightFormat::AsStored && !model_path) || (model_path && gguf_type.size()))
        throw InvalidArgument("bench: --weights must be int8, int4, bf16, q8_0 or q4_0 (with --model: as-stored, bf16, int8 or int4), got '" +
                              weights + "'");
    if ((gguf_dir || keep_gguf) && gguf_type.empty()) throw InvalidArgument("bench: --gguf-dir and --keep-gguf need --weights q8_0 or q4_0");
    if (quant_block && (gguf_type.size() || (*format != WeightFormat::Int8 && *format != WeightFormat::Int4)))
        throw InvalidArgument("bench: --quant-block applies to --weights int8 and int4 (q8_0 / q4_0 have blocks of 32)");
    if (gguf_type.size() && draft == "assistant") throw InvalidArgument("bench: --draft assistant loads its own weights: not with q8_0 / q4_0");
    const std::int64_t max_layers = c.num_hidden_layers;
    const std::int64_t layers = layers_opt ? args.parse_number<std::int64_t>("layers", *layers_opt) : max_layers;
    const std::int64_t B = batch_opt ? args.parse_number<std::int64_t>("batch", *batch_opt) : 1;
    if (layers < 1 || layers > max_layers) throw InvalidArgument("bench: --layers must be in [1, " + std::to_string(max_layers) + "]");
    if (P < 1 || G < 1 || B < 1) throw InvalidArgument("bench: --prompt-tokens, --gen-tokens and --batch must be >= 1");
    if (kv != "float" && kv != "int8") throw InvalidArgument("bench: --kv must be float or int8, got '" + kv + "'");
    if (context < 0 || context + G > c.max_position_embeddings)
        throw InvalidArgument("bench: --context plus --gen-tokens must be within max_position_embeddings (" +
                              std::to_string(c.max_position_embeddings) + ")");
    if (P > c.max_position_embeddings) throw InvalidArgument("bench: --prompt-tokens beyond max_position_embeddings");
    auto say = [&](const std::string& s) {
        if (!json) std::fprintf(stderr, "%s\n", s.c_str());
    };

    ThreadPool probe_pool(threads);
    say("measuring read bandwidth and peak FLOP/s on " + std::to_string(probe_pool.size()) + " threads ...");
    probes::ReadProbe probe(probe_pool, static_cast<std::size_t>(bw_mb) << 20);
    const double bandwidth = probe.best(5);
    const double peak_fma = probes::fma_peak(probe_pool);
    const double peak_int8 = probes::int8_peak(probe_pool);
    const double peak_amx = probes::amx_int8_peak(probe_pool);

    c.num_hidden_layers = layers;
    if (model_path) say("loading " + *model_path + " as " + weights + " ...");
    else say("generating random " + (gguf_type.empty() ? weights : std::string(gguf_type == "q8_0" ? "int8" : "int4")) + " weights for " + std::to_string(layers) + " layers ...");
    auto t0 = Clock::now();
    // q8_0 / q4_0 hold 32-element blocks: the weights written to the file are made so
    const std::int64_t block = gguf_type.size() ? 32 : quant_block;
    Checkpoint ck = model_path ? Checkpoint{} : Checkpoint{c, random_weights(c, *format, 1, threads, block), {}, "model.language_model."};
    const double gen_s = seconds_since(t0);
    double weight_bytes = static_cast<double>(matrix_bytes(ck.weights));
    // A few plain ids (no placeholders) from `seed`.
    const auto plain_ids = [&](std::int64_t n, std::int64_t seed) {
        std::vector<std::int32_t> ids;
        for (std::int64_t i = 0; i < n; ++i) {
            auto id = static_cast<std::int32_t>((i * 7919 + seed * 104729 + 2) % c.vocab_size);
            if (id == c.tokens.image || id == c.tokens.audio || id == c.tokens.video) id = c.tokens.bos;
            ids.push_back(id);
        }
        return ids;
    };
    GgufRun gguf;
    ScratchFile scratch;
    scratch.keep = keep_gguf;
    const auto load_t0 = Clock::now();
    const Model<float> measured = [&] {
        if (model_path)
            return Model<float>::load(*model_path, ModelOptions{threads}, LoadOptions{.format = *format, .block = quant_block, .mmproj = mmproj});
        if (gguf_type.empty()) return Model<float>(std::move(ck), ModelOptions{threads});
        gguf.type = gguf_type;
        gguf.path = std::filesystem::path(gguf_dir.value_or(std::filesystem::temp_directory_path().string())) /
                    ("gemma4-bench-" + std::to_string(::getpid()) + "-" + gguf_type + ".gguf");
        scratch.path = gguf.path;
        say("writing the weights as " + gguf_type + " to " + gguf.path.string() + " ...");
        t0 = Clock::now();
        gguf.file_bytes = write_gguf_model(gguf.path, c, ck.weights, threads);
        gguf.evicted = flush_and_evict(gguf.path);
        gguf.write_s = seconds_since(t0);
        const std::vector<std::int32_t> check_prompt = plain_ids(8, 7);
        {  // the same weights in memory: the ids the file must give; freed before the file is loaded
            const Model<float> in_memory(std::move(ck), ModelOptions{threads});
            gguf.ids = greedy_run(in_memory, check_prompt, 4).ids;
        }
        say("loading " + gguf.path.string() + " (" + std::to_string(gguf.file_bytes >> 20) + " MiB) ...");
        t0 = Clock::now();
        Model<float> loaded = Model<float>::load(gguf.path, ModelOptions{threads});
        gguf.load_s = seconds_since(t0);
        gguf.matches = greedy_run(loaded, check_prompt, 4).ids == gguf.ids;
        if (!gguf.matches) throw Error("bench: " + gguf.path.string() + " gives other greedy ids than the same weights in memory");
        return loaded;
    }();
    const double model_load_s = seconds_since(load_t0);
    if (model_path) {  // the checkpoint's own shapes and weights
        c = measured.config();
        ModelWeights views = measured.weights();  // views: a cheap copy
        weight_bytes = static_cast<double>(matrix_bytes(views));
        say("weights: " + matrix_summary(views));
    }

    KVCache<float> cache = [&] {
        const Gemma4Config& mc = measured.config();
        return KVCache<float>(mc, KVCacheOptions{.kv_dtype = kv == "int8" ? KVDtype::Int8 : KVDtype::Float});
    }();
    std::vector<SeqId> seqs;
    std::vector<std::vector<std::int32_t>> prompts;
    const std::int64_t alone = B > 1 && context == 0 ? 1 : 0;  // the sequence decoding alone, after the batch's
    double prefill_s = 0, prefill_flops = 0, fill_s = 0;
    std::vector<float> last_hidden;  // the first sequence's final-normed state after its prompt
    std::size_t kv_bytes = 0;
    double decode_s = 0, alone_s = 0;
    double between_s = std::numeric_limits<double>::infinity();  // the fastest read probe pass between decode steps
    std::vector<double> step_s, pass_s;  // each decode step (the batch's) and the probe pass after it
    unsigned pool_size = 0;
    const auto time_steps = [&](const auto& model) {
        pool_size = model.pool().size();
        // prefill: B sequences of P tokens, one step each
        for (std::int64_t b = 0; b < B + alone; ++b) {
            seqs.push_back(cache.add_sequence());
            prompts.push_back(plain_ids(P, b));
        }
        {  // warm-up: threads, thread-local buffers, first touch of the weights
            KVCache<float> warm = model.make_cache();
            const SeqId s = warm.add_sequence();
            const std::int32_t id[2] = {2, 3};
            model.forward(std::span<const std::int32_t>(id, 2), warm, s, LogitsMode::Last);
        }
        if (context > 0) {
            say("filling the KV cache with " + std::to_string(context) + " random positions per sequence ...");
            t0 = Clock::now();
            fill_cache(c, cache, seqs, context);
            fill_s = seconds_since(t0);
        } else {
            say("prefill " + std::to_string(P) + " tokens ...");
            t0 = Clock::now();
            for (std::int64_t b = 0; b < B; ++b) {
                const Logits<float> l = model.forward(prompts[static_cast<std::size_t>(b)], cache, seqs[static_cast<std::size_t>(b)], LogitsMode::Last);
                if (b == 0) last_hidden = l.hidden;
            }
            prefill_s = seconds_since(t0);
            prefill_flops = static_cast<double>(B) * step_flops(c, P, 1, 0);
        }
        kv_bytes = cache.bytes_in_use();
        if (alone) model.forward(prompts[static_cast<std::size_t>(B)], cache, seqs[static_cast<std::size_t>(B)], LogitsMode::Last);

        say("decode " + std::to_string(G) + " steps of " + std::to_string(B) + " sequence(s) ...");
        std::vector<std::int32_t> next(static_cast<std::size_t>(B + alone));
        // Each kind of step keeps its logits and working buffers between steps, as a Session and
        // the Engine do (Model::forward_into with a StepScratch), so the steps allocate nothing.
        Logits<float> batch_logits, alone_logits;
        StepScratch<float> batch_scratch = model.make_scratch(B), alone_scratch = model.make_scratch(1);
        for (std::int64_t g = 0; g < G; ++g) {
            std::vector<SequenceChunk> step;
            for (std::int64_t b = 0; b < B + alone; ++b) {
                next[static_cast<std::size_t>(b)] = static_cast<std::int32_t>((g * 31 + b * 17 + 5) % c.vocab_size);
                if (model.is_placeholder(next[static_cast<std::size_t>(b)])) next[static_cast<std::size_t>(b)] = c.tokens.bos;
                step.push_back({seqs[static_cast<std::size_t>(b)], std::span<const std::int32_t>(&next[static_cast<std::size_t>(b)], 1)});
            }
            t0 = Clock::now();
            model.forward_into(std::span<const SequenceChunk>(step.data(), static_cast<std::size_t>(B)), cache, {}, LogitsMode::Last, batch_logits,
                               batch_scratch);
            step_s.push_back(seconds_since(t0));
            decode_s += step_s.back();
            if (alone) {
                t0 = Clock::now();
                model.forward_into(std::span<const SequenceChunk>(&step.back(), 1), cache, {}, LogitsMode::Last, alone_logits, alone_scratch);
                alone_s += seconds_since(t0);
            }
            pass_s.push_back(probe.pass_seconds());
            between_s = std::min(between_s, pass_s.back());
        }
    };
    time_steps(measured);

    // The assistant drafts from the first sequence's state after its prompt (before decoding).
    double assistant_s = 0;
    std::int64_t assistant_ids = 0;
    std::size_t assistant_bytes = 0;
    if (draft == "assistant") {
        const auto scratch = std::filesystem::temp_directory_path() / ("gemma4-bench-assistant-" + std::to_string(::getpid()));
        say("writing a random 12B assistant to " + scratch.string() + " and loading it as " + weights + " ...");
        write_random_assistant_checkpoint(scratch, gemma4_12b_assistant_config(), {.seed = 3});
        const Assistant<float> assistant = Assistant<float>::load(scratch, measured, ModelOptions{threads}, LoadOptions{.format = *format, .block = quant_block});
        std::filesystem::remove_all(scratch);
        AssistantWeights views = assistant.weights();  // views: a cheap copy
        for (const WeightView* w : assistant_matrices(views)) assistant_bytes += w->size_bytes + w->scale_bytes();
        const AssistantSeed<float> seed{seqs[0], 5, last_hidden};
        assistant.draft(std::span<const AssistantSeed<float>>(&seed, 1), measured, cache, 1, 0.0);  // warm-up
        for (const std::int64_t k : draft_lengths) {
            t0 = Clock::now();
            assistant_ids += static_cast<std::int64_t>(assistant.draft(std::span<const AssistantSeed<float>>(&seed, 1), measured, cache, k, 0.0)[0].size());
            assistant_s += seconds_since(t0);
        }
    }

    std::vector<SpeculativeRun> speculative;
    if (draft == "oracle") {
        say("speculative decoding: " + std::to_string(accepts.size() * draft_lengths.size()) + " runs of " + std::to_string(G) +
            " ids, each next to a plain run ...");
        speculative = speculative_bench(measured, prompts[0], G, accepts, draft_lengths);
    }

    const double prefill_tps = prefill_s > 0 ? static_cast<double>(B * P) / prefill_s : 0.0;
    const double decode_tps = static_cast<double>(B * G) / decode_s;
    const double alone_tps = alone ? static_cast<double>(G) / alone_s : 0.0;
    const bool int8_kernels = is_quantized(format_dtype(*format));  // bound by the int8 peak, not the FMA one
    const double steps_per_s = static_cast<double>(G) / decode_s;
    const double bytes_per_token = weight_bytes / static_cast<double>(B);
    const double kv_read = context > 0 ? kv_read_bytes_per_step(c, cache, context, G, B) : 0.0;
    const double bytes_per_step = weight_bytes + kv_read;  // computed, not measured
    const double achieved = bytes_per_step * steps_per_s;
    const double between_bandwidth = static_cast<double>(probe.bytes()) / between_s;
    const double local_fraction = probes::median_local_fraction(step_s, pass_s, bytes_per_step, static_cast<double>(probe.bytes()));
    const std::size_t rss = peak_rss_bytes();

    const KernelChoice kernels = active_kernels();
    const WeightView& lm_head = measured.weights().embed_tokens;
    nlohmann::json j{{"config", model_path ? *model_path : config_name},
                     {"weights", weights},
                     {"quant_block", lm_head.quantized() ? lm_head.block : 0},  // elements per scale of the int8/int4 matrices
                     {"layers", c.num_hidden_layers},
                     {"threads", pool_size},
                     {"prompt_tokens", P},
                     {"gen_tokens", G},
                     {"prefill_tokens_per_s", prefill_tps},
                     {"decode_tokens_per_s", decode_tps},
                     {"weight_bytes_per_step_computed", weight_bytes},
                     {"weight_bytes_per_token_computed", bytes_per_token},
                     {"bytes_read_per_step_computed", bytes_per_step},
                     {"measured_read_bandwidth_bytes_per_s", bandwidth},
                     {"decode_bandwidth_fraction", achieved / bandwidth},
                     {"read_bandwidth_between_steps_bytes_per_s", between_bandwidth},
                     {"decode_fraction_of_bandwidth_between_steps", achieved / between_bandwidth},
                     {"decode_fraction_of_local_bandwidth", local_fraction},
                     {"decode_step_s", step_s},
                     {"probe_pass_s_after_step", pass_s},
                     {"prefill_flops_per_s", prefill_s > 0 ? prefill_flops / prefill_s : 0.0},
                     {"measured_peak_fma_flops_per_s", peak_fma},
                     {"measured_peak_int8_ops_per_s", peak_int8},
                     {"prefill_fraction_of_fma_peak", prefill_s > 0 ? prefill_flops / prefill_s / peak_fma : 0.0},
                     {"decode_ms_per_step", 1e3 * decode_s / static_cast<double>(G)},
                     {"kv_dtype", kv},
                     {"kv_bytes_in_use", kv_bytes},
                     {"peak_rss_bytes", rss},
                     {"weight_generation_s", gen_s},
                     {"model_load_s", model_load_s},
                     {"cpu", cpu_model()},
                     {"isa", isa_name(active_isa())},
                     {"isa_cpu", isa_name(isa_report().cpu)},
                     {"kernels", {{"linear_q8_q4", kernels.quant}, {"linear_bf16", kernels.bf16}, {"attention", kernels.attention}}},
                     {"build_abi", abi_name()}};
    if (batch_opt) j["batch"] = B;
    if (alone) {
        j["alone_decode_tokens_per_s"] = alone_tps;
        j["batch_speedup"] = decode_tps / alone_tps;
    }
    if (int8_kernels)
        j["prefill_fraction_of_int8_peak"] = prefill_s > 0 ? prefill_flops / prefill_s / peak_int8 : 0.0;
    if (peak_amx > 0) {  // the Q8/Q4 kernels take AMX tiles for 8 or more tokens at a time
        j["measured_peak_amx_int8_ops_per_s"] = peak_amx;
        if (int8_kernels) j["prefill_fraction_of_amx_peak"] = prefill_s > 0 ? prefill_flops / prefill_s / peak_amx : 0.0;
    }
    if (context > 0) {
        j["context"] = context;
        j["kv_fill_s"] = fill_s;
        j["kv_bytes_read_per_step_computed"] = kv_read;
    }
    if (!gguf.type.empty()) {
        j["gguf_type"] = gguf.type;
        j["gguf_file_bytes"] = gguf.file_bytes;
        j["gguf_write_s"] = gguf.write_s;
        j["gguf_load_s"] = gguf.load_s;
        j["gguf_load_bytes_per_s"] = static_cast<double>(gguf.file_bytes) / gguf.load_s;
        j["gguf_load_from_disk"] = gguf.evicted;
        j["gguf_matches_in_memory"] = gguf.matches;
        if (keep_gguf) j["gguf_path"] = gguf.path.string();
    }
    if (assistant_ids > 0) {
        j["assistant_ms_per_draft_token"] = 1e3 * assistant_s / static_cast<double>(assistant_ids);
        j["assistant_weight_bytes"] = assistant_bytes;
        j["assistant_cost_per_decode_step"] = assistant_s / static_cast<double>(assistant_ids) / (decode_s / static_cast<double>(G));
    }
    for (const SpeculativeRun& r : speculative)
        j["speculative"].push_back({{"accept", r.accept},
                                    {"draft_max", r.draft_max},
                                    {"tokens_per_s", r.tokens_per_s},
                                    {"plain_tokens_per_s", r.plain_tokens_per_s},
                                    {"speedup", r.tokens_per_s / r.plain_tokens_per_s},
                                    {"acceptance", r.acceptance},
                                    {"tokens_per_step", r.tokens_per_step},
                                    {"step_cost", r.step_cost}});
    if (json) {
        std::printf("%s\n", j.dump().c_str());
        return 0;
    }
    std::printf("%s, %s weights, %lld layers, %u threads, level %s (q8/q4 %s, bf16 %s, attention %s)\n", cpu_model().c_str(), weights.c_str(),
                static_cast<long long>(c.num_hidden_layers), pool_size, std::string(isa_name(active_isa())).c_str(), kernels.quant.c_str(),
                kernels.bf16.c_str(), kernels.attention.c_str());
    const double peak = int8_kernels ? peak_int8 : peak_fma;
    std::printf("prefill   %8.2f tok/s   (%lld tokens x %lld, %.1f GFLOP/s = %.0f%% of the %s peak %.1f G/s)\n", prefill_tps,
                static_cast<long long>(P), static_cast<long long>(B), prefill_flops / prefill_s / 1e9, 100 * prefill_flops / prefill_s / peak,
                int8_kernels ? "int8" : "FMA", peak / 1e9);
    if (int8_kernels && peak_amx > 0)
        std::printf("          (AMX tiles: %.0f%% of their int8 peak %.1f G/s)\n", 100 * prefill_flops / prefill_s / peak_amx, peak_amx / 1e9);
    std::printf("decode    %8.2f tok/s   (%lld steps x %lld)\n", decode_tps, static_cast<long long>(G), static_cast<long long>(B));
    if (alone)
        std::printf("alone     %8.2f tok/s   (one sequence, steps alternating with the batch's): batch speedup %.2fx\n",
                    alone_tps, decode_tps / alone_tps);
    if (!gguf.type.empty())
        std::printf("gguf      %8.2f s load of %.3f GB (%s, %.2f GB/s%s; written in %.1f s), greedy ids equal to the weights in memory\n",
                    gguf.load_s, static_cast<double>(gguf.file_bytes) / 1e9, gguf.type.c_str(),
                    static_cast<double>(gguf.file_bytes) / gguf.load_s / 1e9, gguf.evicted ? ", from disk" : ", page cache not dropped",
                    gguf.write_s);
    std::printf("weights   %8.3f GB read per step (computed from the matrix sizes)\n", weight_bytes / 1e9);
    if (context > 0)
        std::printf("KV read   %8.3f GB per step (computed: every layer's visible keys and values at context %lld, the window on "
                    "sliding layers, x %lld)\n", kv_read / 1e9, static_cast<long long>(context), static_cast<long long>(B));
    std::printf("read      %8.3f GB per step (computed), %.1f GB/s = %.0f%% of measured read bandwidth %.1f GB/s\n", bytes_per_step / 1e9,
                achieved / 1e9, 100 * achieved / bandwidth, bandwidth / 1e9);
    std::printf("          = %.0f%% of the %.1f GB/s read by the fastest probe pass between the decode steps\n", 100 * achieved / between_bandwidth,
                between_bandwidth / 1e9);
    std::printf("          (median step: %.0f%% of the fastest of the probe passes just before and after it)\n", 100 * local_fraction);
    std::printf("KV cache  %8.3f GB in use (%s), %.1f ms per decode step%s\n", static_cast<double>(kv_bytes) / 1e9, kv.c_str(),
                1e3 * decode_s / static_cast<double>(G), context > 0 ? (" at context " + std::to_string(context)).c_str() : "");
    std::printf("peak RSS  %8.2f GB\n", static_cast<double>(rss) / 1e9);
    if (assistant_ids > 0)
        std::printf("assistant %8.1f ms per drafted id (%lld ids; %.3f GB of weights) = %.2f of a decode step\n",
                    1e3 * assistant_s / static_cast<double>(assistant_ids), static_cast<long long>(assistant_ids),
                    static_cast<double>(assistant_bytes) / 1e9, assistant_s / static_cast<double>(assistant_ids) / (decode_s / static_cast<double>(G)));
    if (!speculative.empty()) {
        std::printf("speculative (oracle drafter, greedy, %lld ids per run; output checked equal to plain decoding):\n"
                    "  accept  draft  tok/s   plain tok/s  speedup  accepted  ids/step  step cost\n", static_cast<long long>(G));
        for (const SpeculativeRun& r : speculative)
            std::printf("  %5.2f  %5lld  %6.2f  %11.2f  %6.2fx  %7.0f%%  %8.2f  %8.2fx\n", r.accept, static_cast<long long>(r.draft_max),
                        r.tokens_per_s, r.plain_tokens_per_s, r.tokens_per_s / r.plain_tokens_per_s, 100 * r.acceptance,
                        r.tokens_per_step, r.step_cost);
    }
    return 0;
}

const cli::Command reg{"bench", "prefill/decode speed with random weights at the 12B shapes",
                       cli::Options{
                           {"weights", "FORMAT", "int8, int4, bf16, q8_0 or q4_0: the generated weights (q8_0/q4_0: int8/int4 written as a GGUF file and loaded from it); with --model: as-stored, bf16, int8 or int4 (re-encoded at load); required but with --grammar or --json-schema", cli::kRequired},
                           {"random-weights", "", "generate the weights in memory at the --config's shapes"},
                           {"model", "PATH", "measure this checkpoint directory or GGUF file instead of random weights"},
                           {"config", "NAME", "model shapes: gemma-4-12b (the default) or tiny (6 layers, for tests)"},
                           {"layers", "N", "decoder layers, 1 to the config's (default: all, 48 for the 12B)"},
                           {"prompt-tokens", "N", "prompt length of each sequence (default: 128)"},
                           {"gen-tokens", "N", "decode steps timed (default: 16)"},
                           {"batch", "B", "sequences decoding together (default: 1)"},
                           {"context", "N", "skip the prefill; time decoding after N random cached positions"},
                           {"kv", "float|int8", "KV cache storage (default: float)"},
                           {"draft", "oracle|assistant", "oracle: time speculative decoding at the acceptance rates of --accept; assistant: time the 12B MTP assistant per drafted id"},
                           {"accept", "P[,P...]", "probabilities that a drafted id is right (default: 0.5,0.7,0.9)"},
                           {"draft-max", "K[,K...]", "draft lengths to time (default: 1,2,3,4,5,6)"},
                           {"bandwidth-mb", "MB", "buffer size of the read-bandwidth probe (default: 1536)"},
                           {"gguf-dir", "DIR", "where --weights q8_0/q4_0 write their scratch .gguf (default: the temp folder)"},
                           {"keep-gguf", "", "keep the scratch .gguf (its path is printed in --json)"},
                           {"image-tokens", "N[,N...]", "time the vision embedder on images of N soft tokens, its dense products by the kernels and by Eigen (with --random-weights --weights bf16)"},
                           {"repeat", "N", "with --image-tokens: runs of each, the best kept (default: 3)"},
                           {"json", "", "print one JSON object on stdout"},
                       } + grammar_bench_options() + cli::mmproj_option() + cli::quant_block_option() + cli::threads_option(),
                       run};

}  // namespace cmd_bench
