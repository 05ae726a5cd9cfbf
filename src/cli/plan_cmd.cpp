// oomb plan: the memory each tag will take at its peak for a model, N, C and page size, without
// running anything. `oomb train --metrics` reports the measured peaks under the same names.
#include <fmt/format.h>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "model/init.h"
#include "model/model.h"

namespace oomb::cli {

namespace {
struct PlanArgs {
  std::string model, preset, optimizer = "adamw", device = "cpu", kv_grad_dtype = "f32", kv_dtype = "f32";
  int64_t seq_len = 0, chunk = 0, page = 128;
  bool json = false;
};
}  // namespace

Command add_plan(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* c = app.add_subcommand("plan", "Predict peak memory per tag for a training run, without running it");
  c->add_option("--model", a->model, "Hugging Face model directory (or use --preset)");
  c->add_option("--preset", a->preset, "A model shape from `oomb init --help`");
  c->add_option("--seq-len", a->seq_len, "Tokens per sequence N")->required()->check(positive());
  c->add_option("--chunk-size", a->chunk, "Tokens per chunk C (default min(N, 1024), as oomb train)")->check(positive());
  c->add_option("--page-size", a->page, "Tokens per KV page")->check(positive())->capture_default_str();
  c->add_option("--optimizer", a->optimizer, "adamw or sgd")->check(CLI::IsMember({"adamw", "sgd"}))->capture_default_str();
  c->add_option("--device", a->device, "cpu (cuda: with the CUDA backend)")->capture_default_str();
  c->add_option("--kv-grad-dtype", a->kv_grad_dtype, "KV-gradient pages: f32 or bf16")
      ->check(CLI::IsMember({"f32", "bf16"}))->capture_default_str();
  c->add_option("--kv-dtype", a->kv_dtype, "K/V pages: f32 or bf16")
      ->check(CLI::IsMember({"f32", "bf16"}))->capture_default_str();
  c->add_flag("--json", a->json, "Print one JSON object instead of a table");
  return {c, [a] {
            OOMB_CHECK(a->model.empty() != a->preset.empty(), "give exactly one of --model and --preset");
            OOMB_CHECK(a->device == "cpu", "--device {}: only cpu plans exist until the CUDA backend lands", a->device);
            const ModelConfig cfg = a->model.empty() ? preset_config(a->preset) : load_config(a->model);
            ChunkPlan plan{std::min(a->chunk > 0 ? a->chunk : 1024, a->seq_len), a->page,
                           dtype_parse(a->kv_grad_dtype)};
            plan.kv_dtype = dtype_parse(a->kv_dtype);
            const MemoryPlan m =
                plan_memory(cfg, plan, a->seq_len, a->optimizer, make_cpu_backend()->workspace_bytes(cfg.vocab));
            const std::pair<const char*, int64_t> rows[] = {
                {"weights", m.weights}, {"grads", m.grads},     {"optimizer", m.optimizer},
                {"activations", m.activations}, {"kv", m.kv}, {"kv_grad", m.kv_grad},
                {"workspace", m.workspace}, {"data", m.data}};
            if (a->json) {
              nlohmann::json j = nlohmann::json::object();
              for (auto [name, b] : rows) j[name] = b;
              j["total"] = m.total();
              std::cout << j.dump() << std::endl;
              return 0;
            }
            std::cout << fmt::format("{} ({} parameters), N = {}, C = {}, page = {} tokens, kv {}, kv_grad {}, {}, {}\n",
                                     a->model.empty() ? a->preset : a->model, param_count(cfg), a->seq_len,
                                     plan.chunk, plan.page_size, a->kv_dtype, a->kv_grad_dtype, a->optimizer,
                                     a->device);
            for (auto [name, b] : rows) std::cout << fmt::format("  {:<12} {:>16} B  {:>12}\n", name, b, format_bytes(b));
            std::cout << fmt::format("  {:<12} {:>16} B  {:>12}\n", "total", m.total(), format_bytes(m.total()));
            return 0;
          }};
}

}  // namespace oomb::cli
