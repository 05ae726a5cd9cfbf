#include "cli/lora_flags.h"
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "core/error.h"
#include "hf/peft.h"

namespace oomb::cli {

void add_lora_flags(CLI::App* c, LoraFlags& f, bool with_dir) {
  c->add_option("--lora-rank", f.rank, "LoRA: train rank-r adapters (r >= 1) on a frozen base, saved in PEFT's format (default: full "
                "fine-tuning)")->check(count(true));
  c->add_option("--lora-alpha", f.alpha, "LoRA: the adapters' scale is alpha / r (alpha / sqrt(r) with --rslora)")
      ->check(positive())->capture_default_str();
  c->add_option("--lora-targets", f.targets,
                 "LoRA: the linears adapted, from q,k,v,o,gate,up,down (or all; Phi-3: qkv, o, gate_up, down; GLM: gate_up)")
      ->capture_default_str();
  c->add_option("--lora-dropout", f.dropout, std::string("LoRA: dropout on each adapter's input while training, as "
                "PEFT's lora_dropout (the base linear reads the input itself); the mask a function of --seed, the window "
                "and the value's place, the same in every pass, sweep order, chunk size or rank split") +
                (with_dir ? "; with --lora DIR: default the adapter's" : ""))
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            size_t used = 0;
            double p = -1;
            try {
              p = std::stod(s, &used);
            } catch (...) {
            }
            return used == s.size() && p >= 0 && p < 1 ? "" : "must be in [0, 1), got " + s;
          },
          "NUMBER in [0, 1)"))
      ->capture_default_str();
  c->add_flag("--rslora", f.rslora, "LoRA: rank-stabilised scale alpha / sqrt(r)");
  c->add_flag("--train-embeddings-norms", f.train_embeddings_norms,
              "LoRA: the embeddings and every norm train too (LongLoRA)");
  if (with_dir)
    c->add_option("--lora", f.dir, "LoRA: continue from this PEFT adapter directory (its rank, alpha and targets)");
}

LoraConfig lora_config(const LoraFlags& f, const CLI::App* cmd) {
  auto given = [&](const char* flag) { return cmd->count(flag) > 0; };
  if (given("--lora-dropout")) check_lora_dropout(f.dropout, "--lora-dropout");
  LoraConfig c;
  if (!f.dir.empty()) {
    c = load_adapter_config(f.dir);
    const std::string where = "--lora " + f.dir;
    OOMB_CHECK(!given("--lora-rank") || f.rank == c.rank, "--lora-rank {} disagrees with {} (r = {})", f.rank, where,
               c.rank);
    OOMB_CHECK(!given("--lora-alpha") || f.alpha == c.alpha, "--lora-alpha {} disagrees with {} (lora_alpha = {})",
               f.alpha, where, c.alpha);
    OOMB_CHECK(!given("--rslora") || c.rslora, "--rslora disagrees with {} (use_rslora false)", where);
    if (given("--lora-targets")) {
      LoraConfig t;
      parse_lora_targets(f.targets, t);
      OOMB_CHECK(t.target_names() == c.target_names(), "--lora-targets {} disagrees with {} (its target_modules, "
                 "a fused linear as its parts: {})", f.targets, where, fmt::format("{}", fmt::join(c.target_names(), ",")));
    }
    c.train_embeddings_norms = c.train_embeddings_norms || f.train_embeddings_norms;
    if (given("--lora-dropout")) c.dropout = f.dropout;  // (a training choice: the adapter's is its default)
    return c;
  }
  if (!given("--lora-rank")) {
    for (const char* flag : {"--lora-alpha", "--lora-targets", "--rslora", "--train-embeddings-norms"})
      OOMB_CHECK(!given(flag), "{} needs --lora-rank (or --lora DIR)", flag);
    // (0 is every run's default: a config file may name it without LoRA)
    OOMB_CHECK(f.dropout == 0.0, "--lora-dropout needs --lora-rank (or --lora DIR)");
    return c;
  }
  c.rank = f.rank;
  c.alpha = f.alpha;
  c.rslora = f.rslora;
  c.dropout = f.dropout;
  c.train_embeddings_norms = f.train_embeddings_norms;
  parse_lora_targets(f.targets, c);
  check_lora(c);
  return c;
}

void default_lora_targets(LoraConfig& c, const LoraFlags& f, const CLI::App* cmd, const ModelConfig& cfg) {
  if (c.on() && f.dir.empty() && cmd->count("--lora-targets") == 0 && cfg.fused_qkv())
    parse_lora_targets("qkv_proj", c);
}

}  // namespace oomb::cli
