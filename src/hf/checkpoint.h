// Loading and saving Hugging Face model directories (config.json + safetensors).
#pragma once
#include <filesystem>
#include <span>

#include "core/atomic_file.h"
#include "hf/config.h"
#include "model/params.h"

namespace oomb {

// Reads every parameter of c from DIR's safetensors into p (fp32). Checks names, shapes and that the
// checkpoint holds no tensor the model would ignore. Returns the checkpoint's float dtype.
DType load_weights(const std::filesystem::path& dir, const ModelConfig& c, Params& p);

// Writes DIR/config.json and DIR's safetensors (tensors in `dtype`), each file atomically.
// Tokenizer and generation files found in copy_from are copied along.
void save_model(const std::filesystem::path& dir, const ModelConfig& c, const Params& p, DType dtype,
                const std::filesystem::path& copy_from = {});

struct SaveTensor;
// The same for tensors already in `dtype`.
void save_model_tensors(const std::filesystem::path& dir, const ModelConfig& c, std::span<const SaveTensor> tensors,
                        DType dtype, const std::filesystem::path& copy_from = {});

}  // namespace oomb
