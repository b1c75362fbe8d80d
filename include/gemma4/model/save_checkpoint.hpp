// Writing checkpoints in the official layout: a directory with config.json and one
// model.safetensors, quantized matrices in the format of docs/checkpoint-formats.md (gemma4
// quantize), for the text model and for the MTP assistant.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/error.hpp>
#include <gemma4/io/config_json.hpp>
#include <gemma4/io/safetensors_writer.hpp>
#include <gemma4/model/assistant_checkpoint.hpp>
#include <gemma4/model/checkpoint.hpp>
#include <gemma4/model/tensor_table.hpp>
#include <gemma4/tensor/quant.hpp>
#include <gemma4/tensor/weights.hpp>

#include <cstdint>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// Writes the tensors of `table` (the views its fields point to) as one .safetensors file: plain
/// tensors as they are in memory, quantized matrices as "<name>" (I8 codes for Q8, U8 packed
/// nibbles for Q4) plus "<name>_scale" (F16), with `__metadata__` recording the format
/// (docs/checkpoint-formats.md), so that loading the file maps it and converts nothing.
inline void save_tensors(const std::vector<TensorSpec>& table, const std::filesystem::path& file) {
    std::vector<TensorRef> refs;
    std::deque<std::vector<std::byte>> row_layout;  // stable addresses for refs
    std::map<std::string, std::string> meta{{"format", "pt"}};
    std::optional<DType> qtype;
    std::int64_t qblock = 0;
    for (const TensorSpec& spec : table) {
        const WeightView& v = *spec.field;
        if (!v) continue;
        if (v.dtype == DType::Ggml)
            throw InvalidArgument("save_tensors: '" + spec.name() + "' holds GGUF " + std::string(ggml_type_name(v.ggml)) +
                                  " blocks, which a safetensors checkpoint cannot hold (load it in a weight format, or export GGUF)");
        if (v.quantized()) {
            if ((qtype && *qtype != v.dtype) || (qblock && qblock != v.block))
                throw InvalidArgument("save_tensors: matrices of mixed quantized formats or block sizes ('" + spec.name() + "')");
            qtype = v.dtype;
            qblock = v.block;
            meta["gemma4.origin_dtype"] = std::string(dtype_name(v.origin));
            // files hold the rows one after another
            const std::int64_t rows = v.rows(), cols = v.cols(), rb = quant::row_bytes(v.dtype, cols), nb = quant::blocks_per_row(cols, v.block);
            auto& codes = row_layout.emplace_back(static_cast<std::size_t>(rows * rb));
            auto& scales = row_layout.emplace_back(static_cast<std::size_t>(rows * nb * 2));
            for (std::int64_t r = 0; r < rows; ++r)
                v.quant_row(r, codes.data() + r * rb, reinterpret_cast<std::uint16_t*>(scales.data()) + r * nb);
            refs.push_back({spec.name(), v.dtype == DType::Q8 ? DType::I8 : DType::U8, {rows, rb}, codes.data(), codes.size()});
            refs.push_back({spec.name() + "_scale", DType::F16, {rows, nb}, scales.data(), scales.size()});

        } else {
            refs.push_back({spec.name(), v.dtype, v.shape, v.data, v.size_bytes});
        }
    }
    if (qtype) {
        meta["gemma4.weight_format"] = *qtype == DType::Q8 ? "int8" : "int4";
        meta["gemma4.block_size"] = std::to_string(qblock);
        meta["gemma4.row_align"] = std::to_string(quant::kRowAlign);
    }
    write_safetensors(file, refs, meta);
}

namespace detail {

/// Creates `dir` and its config.json: a copy of `source`'s when there is one (its fields as
/// published), else `make_json()`.
template <class MakeJson>
void write_config_file(const std::filesystem::path& dir, const std::filesystem::path& source, MakeJson&& make_json) {
    std::filesystem::create_directories(dir);
    const auto src_config = source.empty() ? std::filesystem::path() : source / "config.json";
    if (!src_config.empty() && std::filesystem::exists(src_config)) {
        if (std::filesystem::absolute(src_config) != std::filesystem::absolute(dir / "config.json"))
            std::filesystem::copy_file(src_config, dir / "config.json", std::filesystem::copy_options::overwrite_existing);
    } else {
        std::ofstream(dir / "config.json") << make_json().dump(2) << "\n";
    }
}

}  // namespace detail

/// Writes `ck` as a checkpoint directory: config.json (copied from the source directory when
/// there is one) and one model.safetensors holding every tensor as it is in memory
/// (save_tensors).
inline void save_checkpoint(const Checkpoint& ck, const std::filesystem::path& dir) {
    detail::write_config_file(dir, ck.directory, [&] { return config_to_json(ck.config); });
    ModelWeights w = ck.weights;  // the table binds pointers into a copy of the views
    const auto table = tensor_table(ck.config, ck.text_prefix.empty() ? "model.language_model." : ck.text_prefix, w);
    save_tensors(table, dir / "model.safetensors");
}

/// Writes `ck` as an assistant checkpoint directory: config.json (copied from the source
/// directory when there is one) and one model.safetensors with every tensor as it is in memory
/// (save_tensors: quantized matrices in the format of docs/checkpoint-formats.md, loaded back by
/// mapping only).
inline void save_assistant_checkpoint(const AssistantCheckpoint& ck, const std::filesystem::path& dir) {
    detail::write_config_file(dir, ck.directory, [&] { return assistant_config_to_json(ck.config); });
    AssistantWeights w = ck.weights;  // the table binds pointers into a copy of the views
    save_tensors(assistant_tensor_table(ck.config, w), dir / "model.safetensors");
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
