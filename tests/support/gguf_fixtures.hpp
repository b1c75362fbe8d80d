// Where the GGUF fixtures are: the small ones in tests/data/gguf (always there), the rest in the
// shared reference data (GEMMA4_SHARED_DIR/gguf, may be absent: tests skip).
#pragma once

#include <gemma4/io/gguf.hpp>
#include <gemma4/io/safetensors.hpp>
#include <gemma4/model/gguf_checkpoint.hpp>

#include <filesystem>
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

/// The fixtures carried in the repository.
inline const std::vector<std::string>& repo_gguf_fixtures() {
    static const std::vector<std::string> names{"tiny-gemma4-q8_0", "tiny-gemma4-q4_0", "tiny-gemma4-q4_0-mixed"};
    return names;
}
/// Those only in the shared data.
inline const std::vector<std::string>& shared_gguf_fixtures() {
    static const std::vector<std::string> names{"tiny-gemma4-f32", "tiny-gemma4-k256-f32", "tiny-gemma4-q4_k_m", "tiny-gemma4-q6_k"};
    return names;
}

/// The HF checkpoint directory a fixture comes from (config.json is all the tests need of it).
inline std::filesystem::path gguf_source_checkpoint(const std::string& name) {
    if (name.find("k256") != std::string::npos || name.find("_k") != std::string::npos) return shared_gguf_dir() / "tiny-gemma4-k256";
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

}  // namespace gemma4::test
