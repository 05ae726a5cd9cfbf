// RoPE's flags (oomb train, eval, generate, merge): a longer context than the model was trained for,
// by a larger rope_theta (ABF) or a RoPE scaling (linear position interpolation, YaRN, Llama 3.1's),
// and the RoPE a LoRA adapter was trained under, which its directory records beside it.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "hf/config.h"

namespace oomb::cli {

struct RopeFlags {
  double theta = 0, factor = 0;  // 0: not given
  std::string scaling;           // "": not given; none | linear | yarn | llama3
  int64_t original_max = 0, max_positions = 0;
  bool any() const { return theta > 0 || factor > 0 || !scaling.empty() || original_max > 0 || max_positions > 0; }
};

// --rope-theta, --rope-scaling, --rope-factor, --rope-original-max, --max-position-embeddings.
void add_rope_flags(CLI::App* c, RopeFlags& f);

// cfg (the config.json of `model`) with the flags applied, read back as the config.json it saves as
// is: what a saved model, a checkpoint and a resumed run see. A scaling switched on keeps the
// positions it scales from explicit (original_max_position_embeddings), so that raising
// max_position_embeddings later does not change it.
ModelConfig apply_rope_flags(const ModelConfig& cfg, const RopeFlags& f, const std::string& model);

// The run's model config: --model's, with the RoPE a LoRA adapter in lora_dir was trained under
// (hf/peft.h's oomb_rope.json; none: the base's), then the flags. Where the RoPE is not --model's,
// says so in a line to `log` (rope_change_line).
// *changed: whether the run's RoPE is not --model's.
ModelConfig run_config(const std::string& model, const std::string& lora_dir, const RopeFlags& f, std::ostream& log,
                       bool* changed = nullptr);

// "RoPE: rope_theta 1000000 -> rope_theta 8000000, yarn factor 4 from 32768 positions, ..." or "" when
// the same.
std::string rope_change_line(const ModelConfig& before, const ModelConfig& after);
// A note when windows of n tokens reach past the positions the model's RoPE is set for
// (max_position_embeddings, or a scaling's length times its factor); "" otherwise. For a run on the
// model's own RoPE (a changed one is the user's choice).
std::string rope_reach_note(const ModelConfig& cfg, int64_t n);

}  // namespace oomb::cli
