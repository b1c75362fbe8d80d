// Where the GGUF fixtures are: the small ones in tests/data/gguf (always there), the rest in the
// shared reference data (GEMMA4_SHARED_DIR/gguf, may be absent: tests skip).
#pragma once

#include <gemma4/io/config_json.hpp>
#include <gemma4/io/gguf.hpp>
#include <gemma4/io/gguf_writer.hpp>
#include <gemma4/io/safetensors.hpp>
#include <gemma4/model/gguf_checkpoint.hpp>
#include <gemma4/model/gguf_mmproj.hpp>

#include "support/temp_dir.hpp"

#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <string>

namespace gemma4::test {

inline std::filesystem::path repo_gguf_dir() { return std::filesystem::path(GEMMA4_TEST_DATA_DIR) / "gguf"; }
inline std::filesystem::path shared_gguf_dir() { return std::filesystem::path(GEMMA4_SHARED_DIR) / "gguf"; }

/// A fixture's .gguf path: in the repository if carried there, else in the shared data.
inline std::filesystem::path gguf_fixture(const std::string& name) {
    const auto repo = repo_gguf_dir() / (name + ".gguf");
    return std::filesystem::exists(repo) ? repo : shared_gguf_dir() / (name + ".gguf");
}

/// An edit of a GGUF file's keys and tensors (edited_gguf).
using GgufEdit = std::function<void(std::vector<GgufKv>&, std::vector<GgufTensorOut>&)>;

/// A copy of the GGUF file `source` with `edit` applied, as `label`.gguf in the scratch folder `folder`.
inline std::filesystem::path edited_gguf(const std::filesystem::path& source, const std::string& folder, const std::string& label,
                                         const GgufEdit& edit) {
    const GgufFile f(source);
    auto kvs = gguf_kvs_of(f);
    auto tensors = gguf_tensors_of(f);
    edit(kvs, tensors);
    const auto path = temp_dir(folder) / (label + ".gguf");
    write_gguf(path, kvs, tensors);
    return path;
}

/// The key or tensor `name` of an edit's lists.
inline GgufKv& gguf_key(std::vector<GgufKv>& kvs, const std::string& name) {
    for (auto& kv : kvs)
        if (kv.key == name) return kv;
    throw std::runtime_error("test: no key " + name);
}
inline GgufTensorOut& gguf_tensor(std::vector<GgufTensorOut>& ts, const std::string& name) {
    for (auto& t : ts)
        if (t.name == name) return t;
    throw std::runtime_error("test: no tensor " + name);
}

/// The fixtures carried in the repository.
inline const std::vector<std::string>& repo_gguf_fixtures() {
    static const std::vector<std::string> names{"tiny-gemma4-q8_0", "tiny-gemma4-q4_0", "tiny-gemma4-q4_0-mixed"};
    return names;
}
/// Those only in the shared data.
inline const std::vector<std::string>& shared_gguf_fixtures() {
    static const std::vector<std::string> names{
        "tiny-gemma4-f32",  "tiny-gemma4-q4_1", "tiny-gemma4-q5_0",   "tiny-gemma4-q5_1",   "tiny-gemma4-iq4_nl",       "tiny-gemma4-k256-f32",
        "tiny-gemma4-q4_k_m", "tiny-gemma4-q6_k", "tiny-gemma4-q2_k", "tiny-gemma4-q3_k", "tiny-gemma4-q5_k", "tiny-gemma4-iq4_xs",
        "tiny-gemma4-q4_k_m-mixed", "tiny-gemma4-q5_k_m-mixed"};
    return names;
}

/// Whether the data a shared fixture's comparisons need are here: its dequantized values (the
/// shared data's .dequant.safetensors) and its .gguf (carried or shared).
inline bool have_shared_fixture(const std::string& name) {
    return std::filesystem::exists(gguf_fixture(name)) && std::filesystem::exists(shared_gguf_dir() / (name + ".dequant.safetensors"));
}

/// Whether a fixture comes from the k256 checkpoint (rows of 256: the super-block types).
inline bool is_k256_fixture(const std::string& name) {
    for (const char* t : {"k256", "_k", "iq4_xs"})
        if (name.find(t) != std::string::npos) return true;
    return false;
}

/// The HF checkpoint directory a fixture comes from (config.json is all the tests need of it).
inline std::filesystem::path gguf_source_checkpoint(const std::string& name) {
    if (is_k256_fixture(name)) return shared_gguf_dir() / "tiny-gemma4-k256";
    return repo_gguf_dir() / "tiny-gemma4";
}

/// Expected F32 values of every tensor of a fixture, by HF name (rope_freqs.weight by its GGUF
/// name), from its .dequant.safetensors. The mixed file's values are the Q8_0 file's for its Q8_0
/// tensors and the Q4_0 file's for the others when its own dequantized file is not carried.
class ExpectedTensors {
public:
    explicit ExpectedTensors(const std::string& name) {
        auto own = repo_gguf_dir() / (name + ".dequant.safetensors");
        if (!std::filesystem::exists(own)) own = shared_gguf_dir() / (name + ".dequant.safetensors");
        if (std::filesystem::exists(own)) {
            files_.emplace_back(own);
        } else {
            files_.emplace_back(repo_gguf_dir() / "tiny-gemma4-q8_0.dequant.safetensors");
            files_.emplace_back(repo_gguf_dir() / "tiny-gemma4-q4_0.dequant.safetensors");
            const GgufFile f(gguf_fixture(name));
            for (const auto& t : f.tensors()) q8_.insert(t.type == GgmlType::Q8_0 ? t.name : "");
        }
    }
    /// The view of GGUF tensor `gguf_name` (its HF name looked up).
    WeightView view(const std::string& gguf_name, const std::string& hf_name) const {
        const bool from_q8 = files_.size() == 1 || q8_.count(gguf_name);
        return files_[from_q8 ? 0 : 1].view(hf_name);
    }
    std::vector<std::string> hf_names() const {
        std::vector<std::string> n;
        for (const auto& [k, e] : files_[0].entries()) n.push_back(k);
        return n;
    }

private:
    std::vector<SafetensorsFile> files_;
    std::set<std::string> q8_;
};

/// The HF name of a GGUF tensor, through the loader's mapping.
inline std::string hf_name_of(const std::string& gguf_name, const std::vector<std::string>& hf_names) {
    if (gguf_name == "rope_freqs.weight") return gguf_name;
    for (const auto& n : hf_names)
        if (detail::gguf_tensor_name(n) == gguf_name) return n;
    return "";
}

/// The multimodal checkpoint the mmproj fixtures come from (its config.json is carried; its
/// weights are in the shared data).
inline std::filesystem::path mm_checkpoint_dir() { return repo_gguf_dir() / "tiny-gemma4-mm"; }

/// The mmproj fixture of `type` (f32, f16, q8_0) and its .dequant.safetensors.
inline std::filesystem::path mmproj_fixture(const std::string& type) { return repo_gguf_dir() / ("tiny-gemma4-mm-mmproj-" + type + ".gguf"); }
inline std::filesystem::path mmproj_dequantized(const std::string& type) {
    return repo_gguf_dir() / ("tiny-gemma4-mm-mmproj-" + type + ".dequant.safetensors");
}

/// A copy of the text GGUF `source` whose vocabulary holds Gemma 4's multimodal tokens at the ids
/// tiny-gemma4-mm's config.json gives them (the tiny tokenizer has none: there they are byte
/// pieces), as control tokens, as in the 12B's vocabulary.
inline std::filesystem::path multimodal_text_gguf(const std::filesystem::path& source, const std::filesystem::path& out) {
    const GgufFile f(source);
    const TokenIds ids = load_config(mm_checkpoint_dir() / "config.json").tokens;
    std::vector<std::string> tokens(f.get_array("tokenizer.ggml.tokens").strings().begin(), f.get_array("tokenizer.ggml.tokens").strings().end());
    std::vector<std::int32_t> types;
    const GgufValue& tt = f.get_array("tokenizer.ggml.token_type");
    for (std::size_t i = 0; i < tt.size(); ++i) types.push_back(static_cast<std::int32_t>(*tt.at(i).as_int()));
    for (const auto& token : detail::kMultimodalTokens) {
        const auto id = static_cast<std::size_t>(ids.*token.field);
        tokens.at(id) = token.piece;
        types.at(id) = 3;  // CONTROL
    }
    auto kvs = gguf_kvs_of(f);
    for (auto& kv : kvs) {
        if (kv.key == "tokenizer.ggml.tokens") kv = gguf_string_array(kv.key, tokens);
        if (kv.key == "tokenizer.ggml.token_type") kv = gguf_int32_array(kv.key, types);
    }
    write_gguf(out, kvs, gguf_tensors_of(f));
    return out;
}

}  // namespace gemma4::test
