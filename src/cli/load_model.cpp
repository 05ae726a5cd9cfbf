#include "cli/load_model.h"

#include "hf/checkpoint.h"
#include "hf/peft.h"
#include "model/lora.h"

namespace oomb::cli {

std::unique_ptr<Model> load_model_and_adapter(const std::string& model_dir, const std::string& lora_dir,
                                              const ModelConfig& cfg, Backend& be, ChunkPlan plan, Comm* sp) {
  if (!lora_dir.empty()) plan.lora = load_adapter_config(lora_dir);
  auto m = std::make_unique<Model>(cfg, be, plan, sp);
  Params host(cfg, m->host_layout(), Tier::Host, Tag::IO);
  Params& base = be.tier() == Tier::Host ? m->params() : host;
  load_weights(model_dir, cfg, base);
  if (&base == &host) m->upload_params(host);
  if (plan.lora.on()) {  // the adapter over the frozen base (its trainable embeddings and norms too)
    Params adapter(cfg, lora_layout(cfg, plan.lora), Tier::Host, Tag::IO);
    load_adapter(lora_dir, base, adapter);
    m->upload_trainable(adapter);
  }
  return m;
}

}  // namespace oomb::cli
