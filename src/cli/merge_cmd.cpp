// oomb merge: a base model and a PEFT LoRA adapter made one Hugging Face model directory,
// W + s B A for every adapted linear (trainable embeddings and norms replaced), in the base's dtype.
#include <fmt/format.h>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/guards.h"
#include "cli/rope_flags.h"
#include "hf/checkpoint.h"
#include "hf/peft.h"

namespace oomb::cli {

namespace {
struct MergeArgs {
  std::string model, lora, out;
  bool force = false;
  RopeFlags rope;
};
}  // namespace

Command add_merge(CLI::App& app) {
  auto a = std::make_shared<MergeArgs>();
  CLI::App* c = app.add_subcommand("merge", "Merge a LoRA adapter (PEFT format) into its base model");
  c->add_option("--model", a->model, "The base model's Hugging Face directory")->required()->check(model_dir());
  c->add_option("--lora", a->lora, "The adapter's directory (adapter_config.json, adapter_model.safetensors)")
      ->required();
  c->add_option("--out", a->out, "Where the merged model goes (Hugging Face format, the base's dtype)")->required();
  c->add_flag("--force", a->force, "Replace a different model in --out");
  add_rope_flags(c, a->rope);
  return {c, [a] {
            // the merged model replaces --out as a unit: neither input may be it, hold it or lie inside it
            refuse_aliasing({{"--out", a->out, true}}, {{"--model", a->model, true}, {"--lora", a->lora, true}});
            // the merged model's RoPE: the one the adapter was trained under (oomb_rope.json), then the flags
            const ModelConfig cfg = run_config(a->model, a->lora, a->rope, std::cout);
            check_model_out("--out", a->out, cfg, a->force);
            remove_stale_saves("--out", a->out, std::cout);
            const LoraConfig lc = load_adapter_config(a->lora);
            Params base(cfg, Tier::Host, Tag::IO), adapter(cfg, lora_layout(cfg, lc), Tier::Host, Tag::IO);
            const DType dtype = load_weights(a->model, cfg, base);
            load_adapter(a->lora, base, adapter);
            merge_adapter(base, adapter, lc);
            save_model(a->out, cfg, base, dtype, a->model);
            std::cout << fmt::format("merged {} (rank {}, {} tensors) into {} -> {} ({})", a->lora, lc.rank,
                                     adapter.specs().size(), a->model, a->out, dtype_name(dtype))
                      << std::endl;
            return 0;
          }};
}

}  // namespace oomb::cli
