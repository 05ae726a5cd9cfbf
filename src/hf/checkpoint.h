// Loading and saving Hugging Face model directories (config.json + safetensors).
#pragma once
#include <filesystem>
#include <map>
#include <vector>
#include <string>
#include <span>

#include "core/atomic_file.h"
#include "hf/config.h"
#include "model/params.h"

namespace oomb {

// Reads every parameter of c from DIR's safetensors into p (fp32). Checks names, shapes and that the
// checkpoint holds no tensor the model would ignore, and that every value is finite (naming the
// tensor). Returns the checkpoint's float dtype.
DType load_weights(const std::filesystem::path& dir, const ModelConfig& c, Params& p);

// Writes DIR/config.json and DIR's safetensors (tensors in `dtype`) as one unit (core/atomic_file.h
// AtomicDir): a crash at any moment leaves the old directory or the new one, never new weights
// beside an old config.json. Tokenizer, chat template and generation files found in copy_from are copied along;
// other files of an existing DIR are kept. extra: more files (name -> contents) in the same unit.
using ExtraFiles = std::map<std::string, std::string>;
void save_model(const std::filesystem::path& dir, const ModelConfig& c, const Params& p, DType dtype,
                const std::filesystem::path& copy_from = {}, const ExtraFiles& extra = {});

// The tokenizer's, chat's and generation files save_model copies along, by name (one,
// additional_chat_templates, is a directory).
const std::vector<std::string>& model_side_files();
// Those of them in dir that are files, name -> contents: a training checkpoint carries them, so that
// it serves generate and eval as a model directory does.
ExtraFiles model_side_file_contents(const std::filesystem::path& dir);

struct SaveTensor;
// The same for tensors already in `dtype`.
void save_model_tensors(const std::filesystem::path& dir, const ModelConfig& c, std::span<const SaveTensor> tensors,
                        DType dtype, const std::filesystem::path& copy_from = {}, const ExtraFiles& extra = {});

}  // namespace oomb
