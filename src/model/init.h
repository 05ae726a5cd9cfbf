// Random-init models: named presets (tiny, real model shapes) and explicit dimensions.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "hf/config.h"
#include "model/params.h"

namespace oomb {

std::vector<std::string> preset_names();
ModelConfig preset_config(const std::string& name);  // throws listing the presets
// HF-style init: matrices ~ N(0, std), norms = 1, biases = 0. Deterministic per (seed, tensor name):
// each tensor has its own generator, so the tensors are filled on every core (OpenMP) with the bits
// of one thread.
void init_params(Params& p, uint64_t seed, float std = 0.02f);
// Writes a random-init model directory without holding fp32 weights: each tensor generated in
// `dtype` (through a block of fp32 values on the stack), on every core.
void write_random_model(const std::filesystem::path& dir, const ModelConfig& c, uint64_t seed, DType dtype,
                        float std = 0.02f);

}  // namespace oomb
