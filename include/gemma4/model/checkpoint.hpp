// Opening a checkpoint directory as published: config.json, model.safetensors or shards listed
// in model.safetensors.index.json. Every tensor of the table is looked up, shape-checked and
// bound as a zero-copy view; unknown tensors are rejected so that a checkpoint of a variant we
// do not implement cannot load silently.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/error.hpp>
#include <gemma4/io/config_json.hpp>
#include <gemma4/io/json_file.hpp>
#include <gemma4/io/safetensors.hpp>
#include <gemma4/kernels/thread_pool.hpp>
#include <gemma4/model/tensor_table.hpp>
#include <gemma4/tensor/weights.hpp>
#include <gemma4/tensor/quant.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// All tensors of a checkpoint directory, by name, over one or more mapped shards.
class TensorStore {
public:
    explicit TensorStore(const std::filesystem::path& dir) : dir_(dir) {
        if (!std::filesystem::is_directory(dir)) throw IoError(dir.string() + ": model directory not found");
        const auto index = dir / "model.safetensors.index.json";
        if (std::filesystem::exists(index)) {
            open_sharded(index);
        } else if (std::filesystem::exists(dir / "model.safetensors")) {
            files_.push_back(std::make_unique<SafetensorsFile>(dir / "model.safetensors"));
            for (const auto& [name, e] : files_.back()->entries()) where_[name] = files_.back().get();
        } else {
            throw IoError(dir.string() + ": no model.safetensors or model.safetensors.index.json");
        }
    }

    bool contains(const std::string& name) const { return where_.count(name) != 0; }
    WeightView view(const std::string& name) const { return where_.at(name)->view(name); }
    std::string file_of(const std::string& name) const { return where_.at(name)->path().string(); }
    std::vector<std::string> names() const {
        std::vector<std::string> n;
        for (const auto& [k, v] : where_) n.push_back(k);
        return n;
    }
    const std::filesystem::path& directory() const { return dir_; }
    const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

private:
    void open_sharded(const std::filesystem::path& index) {
        const nlohmann::json j = read_json_file<FormatError>(index);
        if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
            throw FormatError(index.string() + ": missing weight_map object");
        std::map<std::string, SafetensorsFile*> by_file;
        for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
            if (!it->is_string()) throw FormatError(index.string() + ": weight_map['" + it.key() + "'] is not a file name");
            const std::string shard = it->get<std::string>();
            if (shard.empty() || shard.find('/') != std::string::npos || shard.find("..") != std::string::npos)
                throw FormatError(index.string() + ": weight_map['" + it.key() + "'] names an invalid shard '" + shard + "'");
            auto f = by_file.find(shard);
            if (f == by_file.end()) {
                files_.push_back(std::make_unique<SafetensorsFile>(dir_ / shard));
                f = by_file.emplace(shard, files_.back().get()).first;
            }
            if (!f->second->contains(it.key()))
                throw ShapeError(f->second->path().string() + ": tensor '" + it.key() + "' listed in the index is not in this shard");
            where_[it.key()] = f->second;
        }
        for (const auto& file : files_)
            for (const auto& [name, e] : file->entries())
                if (!where_.count(name))
                    throw FormatError(file->path().string() + ": tensor '" + name + "' is not listed in " + index.filename().string());
    }

    std::filesystem::path dir_;
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::map<std::string, SafetensorsFile*> where_;
};

/// "model.language_model." (unified) or "model." (text-only), from the embedding's name.
inline std::string detect_text_prefix(const TensorStore& store) {
    if (store.contains("model.language_model.embed_tokens.weight")) return "model.language_model.";
    if (store.contains("model.embed_tokens.weight")) return "model.";
    throw ShapeError(store.directory().string() +
                     ": missing tensor 'model.language_model.embed_tokens.weight' (or 'model.embed_tokens.weight')");
}

struct LoadOptions {
    /// Load the vision / audio embedders when the checkpoint has them.
    bool multimodal = true;
    /// Format of the big matrices in memory (model/quantize.hpp); AsStored: as in the files.
    WeightFormat format = WeightFormat::AsStored;
    /// Elements per scale when `format` re-encodes in int8/int4: 32 or 64, 0 for the format's
    /// default (quant::kDefaultBlock, 32). Matrices already quantized keep theirs.
    std::int64_t block = 0;
    /// Progress of re-encoding at load (none when the checkpoint is already in `format`).
    QuantizeProgress progress{};
    /// Threads that re-encode at load; 0: hardware concurrency. Ignored when `pool` is set.
    unsigned n_threads = 0;
    /// The pool that re-encodes at load (it must outlive the call), or null for one of
    /// `n_threads` made for the load. Model::load and Assistant::load pass the model's own, so
    /// that loading runs on the threads the model was given and starts no others.
    ThreadPool* pool = nullptr;
    /// With a GGUF model file: llama.cpp's mmproj GGUF holding its image and audio embedders
    /// (model/gguf_mmproj.hpp); empty for none.
    std::filesystem::path mmproj{};
};

/// The block size a re-encoding in Q8/Q4 uses: `block`, or quant::kDefaultBlock for 0.
inline std::int64_t quant_block_for(std::int64_t block) {
    if (block == 0) return quant::kDefaultBlock;
    if (!quant::valid_block(block)) throw InvalidArgument("quant block: " + std::to_string(block) + " elements per scale; expected 32 or 64");
    return block;
}

namespace detail {

/// The pool of a load: `options.pool`, or one of `options.n_threads` threads owned for the load.
class LoadPool {
public:
    explicit LoadPool(const LoadOptions& options) {
        if (options.pool) pool_ = options.pool;
        else pool_ = &owned_.emplace(options.n_threads);
    }
    LoadPool(const LoadPool&) = delete;
    LoadPool& operator=(const LoadPool&) = delete;
    ThreadPool& operator*() const { return *pool_; }

private:
    std::optional<ThreadPool> owned_;
    ThreadPool* pool_;
};

/// The Q8/Q4 format of a quantized checkpoint (docs/checkpoint-formats.md), from the
/// `__metadata__` of its files, which must agree, and its block size in `block`; nullopt for a
/// plain checkpoint.
inline std::optional<DType> stored_quant_format(const TensorStore& store, DType& origin, std::int64_t& block) {
    std::optional<DType> found;
    std::int64_t found_block = 0;
    bool first = true;
    for (const auto& f : store.files()) {
        const auto& m = f->metadata();
        const auto it = m.find("gemma4.weight_format");
        std::optional<DType> here;
        if (it != m.end()) {
            if (it->second == "int8") here = DType::Q8;
            else if (it->second == "int4") here = DType::Q4;
            else throw FormatError(f->path().string() + ": __metadata__.gemma4.weight_format '" + it->second + "' is not int8 or int4");
            auto require = [&](const std::string& key, const std::string& value) {
                const auto k = m.find(key);
                if (k == m.end() || k->second != value)
                    throw FormatError(f->path().string() + ": __metadata__." + key + " must be '" + value + "' for " + it->second);
            };
            const auto bs = m.find("gemma4.block_size");
            if (bs == m.end() || (bs->second != "32" && bs->second != "64"))
                throw FormatError(f->path().string() + ": __metadata__.gemma4.block_size must be '32' or '64' for " + it->second);
            const std::int64_t here_block = bs->second == "64" ? 64 : 32;
            if (!first && found_block != here_block)
                throw FormatError(f->path().string() + ": __metadata__.gemma4.block_size differs between shards");
            found_block = here_block;
            require("gemma4.row_align", std::to_string(quant::kRowAlign));
            const auto o = m.find("gemma4.origin_dtype");
            const auto od = o == m.end() ? std::nullopt : parse_safetensors_dtype(o->second);
            if (!od || (*od != DType::BF16 && *od != DType::F16 && *od != DType::F32 && *od != DType::F64))
                throw FormatError(f->path().string() + ": __metadata__.gemma4.origin_dtype missing or not BF16/F16/F32/F64");
            origin = *od;
        }
        if (!first && here != found) throw FormatError(f->path().string() + ": __metadata__.gemma4.weight_format differs between shards");
        found = here;
        first = false;
    }
    block = found_block;
    return found;
}

/// A quantized matrix of logical shape `shape` from its codes tensor `name` and `name`_scale.
inline WeightView bind_quantized(const TensorStore& store, const std::string& name, const std::vector<std::int64_t>& shape,
                                 DType q, std::int64_t block, DType origin) {
    const std::string file = store.file_of(name), scale_name = name + "_scale";
    if (shape.size() != 2) throw FormatError(file + ": tensor '" + name + "' has a scale tensor but is not a matrix");
    const WeightView codes = store.view(name);
    const DType code_dtype = q == DType::Q8 ? DType::I8 : DType::U8;
    const std::vector<std::int64_t> code_shape{shape[0], quant::row_bytes(q, shape[1])};
    if (codes.dtype != code_dtype || codes.shape != code_shape)
        throw ShapeError(file + ": tensor '" + name + "' holds " + std::string(dtype_name(codes.dtype)) + " " + shape_string(codes.shape) +
                         "; " + std::string(dtype_name(q)) + " of shape " + shape_string(shape) + " needs " +
                         std::string(dtype_name(code_dtype)) + " " + shape_string(code_shape));
    if (!store.contains(scale_name)) throw ShapeError(file + ": missing tensor '" + scale_name + "'");
    const WeightView scales = store.view(scale_name);
    const std::vector<std::int64_t> scale_shape{shape[0], quant::blocks_per_row(shape[1], block)};
    if (scales.dtype != DType::F16 || scales.shape != scale_shape)
        throw ShapeError(store.file_of(scale_name) + ": tensor '" + scale_name + "' holds " + std::string(dtype_name(scales.dtype)) + " " +
                         shape_string(scales.shape) + "; expected F16 " + shape_string(scale_shape));
    WeightView v = codes;
    v.dtype = q;
    v.shape = shape;
    v.scales = scales.data;
    v.layout = WeightView::Layout::Rows;  // as mapped; the model re-lays it as panels (to_panels)
    v.origin = origin;
    v.block = block;
    return v;
}

/// Binds every tensor of `table` from `store` as a view into its field: shapes and dtypes are
/// checked, a quantized checkpoint's codes and scales bound together, a missing required tensor
/// or a tensor of the store that the table does not name rejected (`layout` says what the table
/// describes). Optional groups other than Text are bound only when `multimodal` is set.
inline void bind_tensors(const TensorStore& store, const std::vector<TensorSpec>& table, bool multimodal, const std::string& layout) {
    DType origin = DType::BF16;
    std::int64_t qblock = 0;
    const std::optional<DType> qformat = detail::stored_quant_format(store, origin, qblock);

    std::set<std::string> known;
    for (const TensorSpec& spec : table) {
        const std::string* found = nullptr;
        for (const auto& n : spec.names) {
            known.insert(n);
            if (!found && store.contains(n)) found = &n;
        }
        if (!found) {
            if (spec.required)
                throw ShapeError(store.directory().string() + ": missing tensor '" + spec.name() + "' (expected shape " +
                                 shape_string(spec.shape) + ")");
            continue;
        }
        if (qformat && store.contains(*found + "_scale")) {
            known.insert(*found + "_scale");
            WeightView v = detail::bind_quantized(store, *found, spec.shape, *qformat, qblock, origin);
            if (spec.group == TensorGroup::Text || multimodal) *spec.field = std::move(v);
            continue;
        }
        WeightView v = store.view(*found);
        if (v.shape != spec.shape)
            throw ShapeError(store.file_of(*found) + ": tensor '" + *found + "' has shape " + shape_string(v.shape) +
                             ", config.json implies " + shape_string(spec.shape));
        if (v.dtype == DType::I32 || v.dtype == DType::I8 || v.dtype == DType::U8)
            throw ShapeError(store.file_of(*found) + ": tensor '" + *found + "' has dtype " + std::string(dtype_name(v.dtype)) +
                             "; expected BF16, F16, F32 or F64");
        if (spec.group == TensorGroup::Text || multimodal) *spec.field = std::move(v);
    }
    for (const auto& name : store.names())
        if (!known.count(name))
            throw ShapeError(store.file_of(name) + ": unexpected tensor '" + name +
                             "' (not part of " + layout + ")");
}

}  // namespace detail

/// A loaded checkpoint: config, weights as views, the store that owns the mappings.
struct Checkpoint {
    Gemma4Config config;
    ModelWeights weights;
    std::filesystem::path directory;
    std::string text_prefix;
};

/// Defined in model/gguf_checkpoint.hpp (included at the end of this header).
inline Checkpoint load_gguf_checkpoint(const std::filesystem::path& path, const LoadOptions& options);

/// Defined in model/gguf_mmproj.hpp (included at the end of model/gguf_checkpoint.hpp, whose
/// definitions it uses).
inline void load_gguf_mmproj(Checkpoint& ck, const std::filesystem::path& mmproj, const LoadOptions& options = {});

/// Loads a checkpoint directory, or a GGUF file (model/gguf_checkpoint.hpp) when `dir` is a file,
/// with the embedders of `options.mmproj` when given (model/gguf_mmproj.hpp).
inline Checkpoint load_checkpoint(const std::filesystem::path& dir, LoadOptions options = {}) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(dir, ec)) {
        Checkpoint ck = load_gguf_checkpoint(dir, options);
        if (!options.mmproj.empty()) load_gguf_mmproj(ck, options.mmproj, options);
        return ck;
    }
    if (!std::filesystem::is_directory(dir)) throw IoError(dir.string() + ": model directory not found");
    Checkpoint ck;
    ck.directory = dir;
    ck.config = load_config(dir / "config.json");
    auto store = std::make_shared<TensorStore>(dir);
    ck.text_prefix = detect_text_prefix(*store);
    const auto table = tensor_table(ck.config, ck.text_prefix, ck.weights);
    detail::bind_tensors(*store, table, options.multimodal, "the Gemma 4 unified layout described by config.json");
    ck.weights.storage = store;
    if (!options.mmproj.empty()) load_gguf_mmproj(ck, options.mmproj, options);  // refused: a directory has its own
    return ck;
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4

#include <gemma4/model/gguf_checkpoint.hpp>  // and through it model/gguf_mmproj.hpp
