#include "cli/rope_flags.h"

#include <fmt/format.h>
#include <ostream>

#include "cli/commands.h"
#include "core/error.h"
#include "hf/peft.h"

namespace oomb::cli {

void add_rope_flags(CLI::App* c, RopeFlags& f) {
  c->add_option("--rope-theta", f.theta, "RoPE's base, replacing the model's rope_theta (a larger base for a longer "
                "context: ABF)")->check(positive());
  c->add_option("--rope-scaling", f.scaling, "RoPE scaling replacing the model's: none, linear (position "
                "interpolation), yarn, or llama3 (Llama 3.1's); with --rope-factor")
      ->check(CLI::IsMember({"none", "linear", "yarn", "llama3"}));
  c->add_option("--rope-factor", f.factor, "The RoPE scaling's factor (>= 1): the context it stretches to over the "
                "one it stretches from")->check(positive());
  c->add_option("--rope-original-max", f.original_max, "yarn and llama3: the positions the scaling stretches from "
                "(default: the model's original_max_position_embeddings, else its max_position_embeddings)")
      ->check(count());
  c->add_option("--max-position-embeddings", f.max_positions, "The max_position_embeddings the model's config "
                "declares (and a saved model keeps)")->check(count());
}

namespace {
bool scales_from(const std::string& type) { return type == "yarn" || type == "llama3"; }

// The original length config.json gives a scaling switched on: its top-level
// original_max_position_embeddings (transformers 5's), else max_position_embeddings.
int64_t original_of(const ModelConfig& c) {
  const auto it = c.raw.find("original_max_position_embeddings");
  if (it != c.raw.end() && it->is_number_integer() && it->get<int64_t>() > 0) return it->get<int64_t>();
  return c.max_position_embeddings;
}

// A yarn config whose factor is null: transformers takes max_position_embeddings / original.
bool factor_from_lengths(const ModelConfig& c) {
  if (c.rope.type != "yarn") return false;
  for (const char* k : {"rope_scaling", "rope_parameters"}) {
    const auto it = c.raw.find(k);
    if (it != c.raw.end() && it->is_object()) return it->contains("factor") && (*it)["factor"].is_null();
  }
  return false;
}
}  // namespace

ModelConfig apply_rope_flags(const ModelConfig& cfg, const RopeFlags& f, const std::string& model) {
  if (!f.any()) return cfg;
  ModelConfig c = cfg;
  RopeConfig& r = c.rope;
  // transformers' Phi3Config takes no scaling but longrope (it reads yarn as longrope, refuses the others)
  OOMB_CHECK(c.arch != Arch::Phi3 || f.scaling.empty() || f.scaling == "none", "--rope-scaling {}: {} takes RoPE "
             "scaling longrope only (transformers' Phi3Config reads yarn as longrope and refuses linear and llama3); "
             "--rope-theta and --max-position-embeddings apply", f.scaling, model);
  OOMB_CHECK(r.type != "longrope" || f.factor == 0 || f.scaling == "none" || (!f.scaling.empty() && f.scaling != r.type),
             "--rope-factor: {}'s LongRoPE has a factor per frequency (short_factor, long_factor), not one; its "
             "attention scaling follows its factor, or without one max_position_embeddings over "
             "original_max_position_embeddings (--max-position-embeddings)", model);
  bool scaled = false;  // the flags set a scaling's factor or length
  if (f.scaling == "none") {
    OOMB_CHECK(f.factor == 0 && f.original_max == 0, "--rope-scaling none: --rope-factor and --rope-original-max "
               "belong to a scaling");
    r = RopeConfig{.theta = r.theta, .partial_rotary_factor = r.partial_rotary_factor};  // (the head's, not a scaling's)
  } else if (!f.scaling.empty() && f.scaling != r.type) {
    OOMB_CHECK(f.factor > 0, "--rope-scaling {} needs --rope-factor (the model's RoPE: {})", f.scaling,
               r.type == "default" ? std::string("no scaling") : fmt::format("{} scaling, factor {}", r.type, r.factor));
    RopeConfig n{.type = f.scaling, .theta = r.theta, .partial_rotary_factor = r.partial_rotary_factor};
    if (scales_from(f.scaling))
      n.original_max_position_embeddings = (scales_from(r.type) || r.type == "longrope") && r.original_max_position_embeddings > 0
                                               ? r.original_max_position_embeddings
                                               : original_of(c);
    r = n;
  }
  if (f.factor > 0) {
    OOMB_CHECK(r.type != "default", "--rope-factor: {}'s RoPE has no scaling to take it; give --rope-scaling linear, "
               "yarn or llama3 with it", model);
    OOMB_CHECK(f.factor >= 1, "--rope-factor {}: a scaling stretches the context, so the factor is at least 1",
               f.factor);
    r.factor = f.factor;
    scaled = true;
  }
  if (f.original_max > 0) {
    OOMB_CHECK(scales_from(r.type), "--rope-original-max: only yarn and llama3 scale from a number of positions "
               "({}'s RoPE: {})", model, r.type == "default" ? std::string("no scaling") : r.type + " scaling");
    r.original_max_position_embeddings = f.original_max;
    scaled = true;
  }
  if (f.theta > 0) r.theta = f.theta;
  // Pinned, as the config says it, so that max_position_embeddings no longer moves it: yarn's
  // original length when absent, and a null factor (transformers: max_position_embeddings / original).
  const bool factor_follows = f.factor == 0 && factor_from_lengths(cfg) && r.type == "yarn";
  if (scales_from(r.type) && r.original_max_position_embeddings == 0)
    r.original_max_position_embeddings = c.max_position_embeddings;
  if (f.max_positions > 0) c.max_position_embeddings = f.max_positions;
  const int64_t scaled_context = int64_t(std::llround(double(r.original_max_position_embeddings) * r.factor));
  if (factor_follows) {  // (max_position_embeddings as given or kept; the factor from it)
    r.factor = double(c.max_position_embeddings) / double(r.original_max_position_embeddings);
  } else if (scaled && f.max_positions == 0 && r.type == "yarn") {
    // the scaled context declared: some transformers 4.x releases took yarn's factor as max_position_embeddings /
    // original whenever the original was given, and read the same scaling from original x factor
    c.max_position_embeddings = scaled_context;
  } else if (scaled && f.max_positions == 0 && r.type == "llama3") {
    // (Llama 3.1's own declares more than original x factor: 131072 over 8192 x 8; transformers reads the factor)
    c.max_position_embeddings = std::max(c.max_position_embeddings, scaled_context);
  }
  return parse_config(config_to_json(c), fmt::format("{} with the --rope-* flags", model));
}

ModelConfig run_config(const std::string& model, const std::string& lora_dir, const RopeFlags& f, std::ostream& log,
                       bool* changed) {
  const ModelConfig base = load_config(model);
  ModelConfig c = base;
  bool adapter = false;
  if (!lora_dir.empty())
    if (const auto rope = load_adapter_rope(lora_dir)) {
      c = with_rope_json(base, *rope, fmt::format("{}/oomb_rope.json on {}", lora_dir, model));
      adapter = rope_json(c) != rope_json(base);
    }
  c = apply_rope_flags(c, f, model);
  if (changed) *changed = rope_json(c) != rope_json(base);
  if (const std::string change = rope_change_line(base, c); !change.empty())
    log << change
        << (adapter ? fmt::format(" (the RoPE the adapter {} was trained under{})", lora_dir,
                                  f.any() ? ", then the --rope-* flags" : "")
                    : "")
        << std::endl;
  return c;
}

namespace {
std::string describe(const ModelConfig& c) {
  const RopeConfig& r = c.rope;
  std::string s = fmt::format("rope_theta {}", r.theta);
  if (r.type != "default") {
    s += fmt::format(", {} scaling x{}", r.type, r.factor);
    if (r.original_max_position_embeddings > 0) s += fmt::format(" from {} positions", r.original_max_position_embeddings);
  }
  return s + fmt::format(", max_position_embeddings {}", c.max_position_embeddings);
}
}  // namespace

std::string rope_change_line(const ModelConfig& before, const ModelConfig& after) {
  if (rope_json(before) == rope_json(after)) return "";
  return fmt::format("RoPE: {} -> {}", describe(before), describe(after));
}

std::string rope_reach_note(const ModelConfig& c, int64_t n) {
  const RopeConfig& r = c.rope;
  int64_t reach = c.max_position_embeddings;
  if (r.type != "default" && r.type != "longrope") {  // a scaling's reach: the length it stretches from, times its factor
    const int64_t from = r.original_max_position_embeddings > 0 ? r.original_max_position_embeddings
                                                                : c.max_position_embeddings;
    reach = std::max(reach, int64_t(std::llround(double(from) * r.factor)));
  }
  if (n <= reach) return "";
  return fmt::format("note: windows of {} tokens reach past the {} positions the model's RoPE is set for ({}); "
                     "--rope-theta or --rope-scaling extend it (README: \"Longer contexts\")", n, reach, describe(c));
}

}  // namespace oomb::cli
