// Passkey retrieval (oomb eval --passkey): for every (length, depth), `trials` prompts
// (data/passkey.h) are fed through the KV cache in chunks and the key is decoded greedily;
// accuracy = the share of prompts whose key came back exactly.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "data/passkey.h"
#include "train/model.h"

namespace oomb {

struct PasskeyResult {
  std::vector<int64_t> lengths;
  std::vector<double> depths;
  int64_t trials = 0;
  std::vector<std::vector<int64_t>> hits;  // [length][depth]
  double accuracy(size_t l, size_t d) const { return double(hits[l][d]) / double(trials); }
  double mean_accuracy() const;
};

// The model's chunk plan decides how prompts are fed; its sequences must hold the longest prompt
// plus the answer. log (optional) gets a line per cell.
PasskeyResult run_passkey(Model& model, const PasskeyPrompts& prompts, const std::vector<int64_t>& lengths,
                          const std::vector<double>& depths, int64_t trials, uint64_t seed,
                          std::ostream* log = nullptr);

nlohmann::json to_json(const PasskeyResult& r, const std::string& form);
std::string format_table(const PasskeyResult& r);  // lengths down, depths across, accuracy in %

}  // namespace oomb
