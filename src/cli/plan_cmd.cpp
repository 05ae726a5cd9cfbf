// oomb plan: the memory each tag will take at its peak for a model, N, C and page size, without
// running anything. `oomb train --metrics` reports the measured peaks under the same names.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/lora_flags.h"
#include "cli/dist_flags.h"
#include "cli/guards.h"
#include "cli/memory_report.h"
#include "cli/offload_advice.h"
#include "cli/sweep_flag.h"
#include "core/resident.h"
#include "model/init.h"
#include "model/sweep_plan.h"
#include "train/model.h"

namespace oomb::cli {

namespace {
struct PlanArgs {
  std::string model, preset, optimizer = "adamw", device, kv_grad_dtype = "f32", kv_dtype = "auto", offload,
      precision, sweep = "chunk";  // precision: "" until the device is known (bf16 on cuda)
  int64_t seq_len = 0, chunk = 0, page = 128, offload_group = 0, device_memory = 0, host_memory = 0;
  bool json = false, doc_mask = false, keep_attention = false;
  SparseFlags sparse;
  LoraFlags lora;
  DistOptions dist;
  CLI::App* cmd = nullptr;
};

// --sp-head-chunks K > 1: the head groups attention takes ("" for one).
std::string head_groups(const ModelConfig& cfg, const ChunkPlan& plan) {
  if (plan.head_chunks == 1) return "";
  const ModelConfig g = attention_group(cfg, plan);
  return fmt::format(", taken in {} head groups of {} heads and {} kv heads (--sp-head-chunks)", plan.head_chunks,
                     g.heads, g.kv_heads);
}
}  // namespace

Command add_plan(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* c = app.add_subcommand("plan", "Predict peak memory per tag for a training run, without running it");
  c->add_option("--model", a->model, "Hugging Face model directory, or its config.json (or use --preset)")
      ->check(model_dir(true));
  c->add_option("--preset", a->preset, "A model shape from `oomb init --help`");
  c->add_option("--seq-len", a->seq_len, "Tokens per sequence N")->required()->check(count());
  c->add_option("--chunk-size", a->chunk, "Tokens per chunk C (default min(N, 1024), as oomb train)")->check(count());
  c->add_option("--page-size", a->page, "Tokens per KV page")->check(count())->capture_default_str();
  c->add_option("--optimizer", a->optimizer, "adamw or sgd")->check(CLI::IsMember({"adamw", "sgd"}))->capture_default_str();
  c->add_option("--device", a->device, "cpu, sim or cuda (default cpu; cuda with --offload)")
      ->check(CLI::IsMember({"cpu", "sim", "cuda"}));
  c->add_option("--offload", a->offload, "kv: K/V and gradient pages in pinned host memory; params: master weights and "
                 "gradients in pinned host memory, AdamW moments in host memory; attention (with --keep-attention): "
                 "the kept attention outputs in pinned host memory; any of them, comma-separated (kv,params)")
      ->check(offload_list());
  c->add_option("--offload-group", a->offload_group, "Pages per group streamed through the device (default ~4 MiB)")
      ->check(count());
  c->add_option("--kv-grad-dtype", a->kv_grad_dtype, "KV-gradient pages: f32 or bf16")
      ->check(CLI::IsMember({"f32", "bf16"}))->capture_default_str();
  c->add_option("--kv-dtype", a->kv_dtype, "K/V pages: f32 or bf16; auto: as --precision (as oomb train)")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}))->capture_default_str();
  c->add_option("--precision", a->precision, "fp32 or bf16 (as oomb train: default bf16 on cuda, fp32 elsewhere)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  c->add_flag("--doc-mask", a->doc_mask, "Documents masked as oomb train --doc-mask (their ids take 4 B a token)");
  c->add_flag("--keep-attention", a->keep_attention, KEEP_ATTENTION_HELP);
  add_sparse_flags(c, a->sparse);
  add_sweep_flag(c, a->sweep);
  c->add_option("--device-memory", a->device_memory, "With --device sim or cuda: a device's capacity in bytes; says "
                 "whether the plan fits it and this host's available memory, and which other --offload settings would "
                 "(exit status 3 when it does not fit)")
      ->check(count());
  c->add_option("--host-memory", a->host_memory, "With --device-memory: the host's memory in bytes for that check "
                 "and --sweep auto's (default: this host's available memory, MemAvailable)")->check(count());
  c->add_flag("--json", a->json, "Print one JSON object instead of a table");
  add_lora_flags(c, a->lora, false);
  add_dist_flags(c, a->dist, false);
  a->cmd = c;
  return {c, [a] {
            OOMB_CHECK(a->model.empty() != a->preset.empty(), "give exactly one of --model and --preset");
            const ModelConfig cfg = a->model.empty() ? preset_config(a->preset) : load_config(a->model);
            ChunkPlan plan{std::min(a->chunk > 0 ? a->chunk : 1024, a->seq_len), a->page,
                           dtype_parse(a->kv_grad_dtype)};
            if (a->doc_mask) plan.doc_sep = 0;  // any separator: the plan needs only whether there is one
            plan.keep_attention = a->keep_attention ? a->seq_len : 0;
            set_offload(a->offload, a->offload_group, a->seq_len, plan);
            set_sparse(a->sparse, cfg, plan);
            set_dist(a->dist, 0, plan);
            const bool offload = plan.offload_kv || plan.offload_params || plan.offload_attention;
            const std::string device = !a->device.empty() ? a->device : offload ? "cuda" : "cpu";
            check_comm_device(a->dist, device);
            const std::string precision = default_precision(a->precision, device);
            plan.precision = precision == "bf16" ? DType::BF16 : DType::F32;
            plan.kv_dtype = kv_page_dtype(a->kv_dtype, plan.precision);
            OOMB_CHECK(!offload || device != "cpu", "--offload {}: the cpu backend has no device memory to offload from "
                       "(use --device sim or cuda)", a->offload);
            plan.lora = lora_config(a->lora, a->cmd);
            default_lora_targets(plan.lora, a->lora, a->cmd, cfg);
            // the backend's workspace, and of it cuDNN's attention buffers (cuda, where cuDNN loads)
            auto cudnn_bytes = [&](const ChunkPlan& p) {
              return device == "cuda" && cudnn_attention_planned() ? cudnn_attention_bytes(workspace_shape(cfg, p)) : 0;
            };
            auto workspace_of = [&](const ChunkPlan& p) {
              const WorkspaceShape wss = workspace_shape(cfg, p);
              return device == "cuda" ? cuda_workspace_bytes(wss) + cudnn_bytes(p)
                                      : make_cpu_backend()->workspace_bytes(wss);
            };
            auto plan_for = [&](const ChunkPlan& p) {
              return plan_memory(cfg, p, a->seq_len, a->optimizer, workspace_of(p),
                                 device == "cpu" ? Tier::Host : Tier::Device,
                                 device == "cuda" ? cuda_pinned_workspace_bytes() : 0);
            };
            OOMB_CHECK(a->device_memory == 0 || device != "cpu", "--device-memory: only for --device sim or cuda");
            OOMB_CHECK(a->host_memory == 0 || a->device_memory > 0, "--host-memory: only with --device-memory");
            // the host for auto's check and --device-memory's: --host-memory, else this host's available
            // memory; the plan's ranks are taken to share it, as under one mpirun
            Limit host_limit = host_share(a->host_memory > 0 ? a->host_memory : available_host_memory(), int(plan.ranks));
            if (a->host_memory > 0) host_limit.what = plan.ranks > 1 ? "this rank's share of --host-memory" : "--host-memory";
            const std::string sweep_line = set_sweep(a->sweep, a->cmd->count("--sweep") > 0, cfg, a->seq_len,
                                                     host_limit.bytes, plan_for, plan);
            const MemoryPlan m = plan_for(plan);
            const SweepChoice sweep = sweep_traffic(cfg, plan, a->seq_len);
            // --device-memory: whether it fits that device and the host, and what else would
            const Limit dev{a->device_memory, "--device-memory"};
            const int64_t need_dev = m.total(Tier::Device), need_host = m.total(Tier::Host) + m.total(Tier::Pinned);
            const bool fits = need_dev <= dev.bytes && need_host <= host_limit.bytes;
            const int status = a->device_memory > 0 && !fits ? kPlanDoesNotFit : 0;  // (printed all the same)
            const std::string others = a->device_memory == 0 ? "" : offload_fits(
                offloads_of(plan), plan.keep_attention > 0, host_limit, dev, [&](const Offloads& o) {
                  return plan_with_offload(plan, o, a->sweep, a->cmd->count("--sweep") > 0, cfg, a->seq_len,
                                           host_limit.bytes, Tier::Device, plan_for);
                });
            // --device-memory without --keep-attention: whether keeping would fit too
            std::string keep_fits;
            bool keep_offloaded = false;
            if (a->device_memory > 0 && fits && plan.keep_attention == 0)
              if (const auto mk = keep_attention_fits(plan, a->seq_len, host_limit, dev, plan_for, &keep_offloaded))
                keep_fits = fmt::format("--keep-attention{} fits too (device {}): {} attention forward passes a step "
                                        "instead of {}", keep_offloaded ? " " + offload_name({plan.offload_kv,
                                                                                             plan.offload_params, true})
                                                                        : "",
                                        format_bytes(mk->total(Tier::Device)), cfg.layers,
                                        recomputed_attention_passes(cfg, plan));
            if (a->json) {
              nlohmann::json j = plan_json(m);
              j["run"] = {{"device", device}, {"precision", precision}};  // beside the tiers ("device" is one)
              j["sweep"]["order"] = sweep_name(plan.sweep);
              if (a->device_memory > 0)
                j["fits"] = {{"device_memory", a->device_memory}, {"host_memory", host_limit.bytes}, {"fits", fits},
                             {"other_offloads", others}, {"keep_attention", keep_fits}};
              for (const auto& [name, t] : {std::pair{"chunk", sweep.chunk}, {"layer", sweep.layer}})
                j["sweep"][name] = {{"weights", t.weights}, {"grads", t.grads}, {"activations", t.activations},
                                    {"kv", t.kv}, {"kv_grads", t.kv_grads}, {"kv_exact", t.kv_exact},
                                    {"total", t.total()}, {"host_bytes", t.host_bytes}};
              std::cout << j.dump() << std::endl;
              return status;
            }
            std::cout << fmt::format("{} ({} parameters), N = {}, C = {}, page = {} tokens, kv {}, kv_grad {}, {}, {} {}{}{}{}\n",
                                     a->model.empty() ? a->preset : a->model, param_count(cfg), a->seq_len,
                                     plan.chunk, plan.page_size, dtype_name(plan.kv_dtype), a->kv_grad_dtype, a->optimizer, device,
                                     precision,
                                     plan.offload_kv ? fmt::format(", kv offloaded in groups of {} pages",
                                                                   KVCache::group_for(kv_cache_options(cfg, plan),
                                                                                      a->seq_len))
                                                     : "",
                                     plan.offload_params ? ", params offloaded (two layer slots on the device)" : "",
                                     plan.offload_attention ? ", kept attention offloaded (two chunks' rows on the device)" : "")
                      << (plan.ranks > 1 ? fmt::format("per rank, of {} ranks (--sp {} x --dp {}{}): each holds {} of "
                                                       "every chunk's tokens, {} heads and {} kv heads in attention{}\n",
                                                       plan.ranks, plan.sp, a->dist.dp,
                                                       plan.zero ? fmt::format(", --zero {}", plan.zero) : "",
                                                       plan.chunk / plan.sp, cfg.heads / plan.sp,
                                                       cfg.kv_heads / plan.sp, head_groups(cfg, plan))
                                         : "");
            if (!plan.lora.on()) {
              std::cout << plan_table(m);
            } else {
              ChunkPlan full = plan;
              full.lora = {};
              const MemoryPlan mf = plan_for(full);
              std::cout << fmt::format("LoRA rank {} on {} ({} trainable parameters{}): the base frozen, no gradients or "
                                       "moments for it{}\n",
                                       plan.lora.rank, fmt::join(plan.lora.target_names(cfg.fused_qkv(), cfg.fused_gate_up()), ", "),
                                       lora_param_count(cfg, plan.lora),
                                       plan.lora.train_embeddings_norms ? ", embeddings and norms included" : "",
                                       frozen_bf16(plan) ? "; held once in bf16 (its matrices; no fp32 masters)" : "")
                        << plan_table(m) << "\nfull fine-tuning, for comparison:\n" << plan_table(mf)
                        << fmt::format("LoRA saves {} ({:.0f}% of full fine-tuning's {})\n",
                                       format_bytes(mf.total() - m.total()),
                                       100.0 * double(mf.total() - m.total()) / double(mf.total()),
                                       format_bytes(mf.total()));
            }
            if (const size_t c = cudnn_bytes(plan); c > 0)
              std::cout << fmt::format("of the device workspace, cuDNN's attention takes {} (one chunk's runs: K/V, "
                                       "outputs and its own workspace; none with OOMB_CUDA_ATTENTION=mma)\n",
                                       format_bytes(int64_t(c)));
            if (plan.keep_attention > 0) {  // what keeping costs, and what it saves
              ChunkPlan off = plan;
              off.keep_attention = 0;
              off.offload_attention = false;
              const MemoryPlan m0 = plan_for(off);
              const Tier dev = device == "cpu" ? Tier::Host : Tier::Device;
              const int64_t L = cfg.layers, fwd = recomputed_attention_passes(cfg, plan);
              auto more = [&](Tier t) { return m.get(t, Tag::Activations) - m0.get(t, Tag::Activations); };
              std::cout << fmt::format("--keep-attention: {} more {} activations (every layer's attention output and "
                                       "LSE for all {} tokens, in place of the layers' own buffers; {} in all against {}), for {} attention forward passes "
                                       "a step instead of {}, beside the {} backward{}\n",
                                       format_bytes(more(dev)), tier_name(dev), a->seq_len, format_bytes(m.total()),
                                       format_bytes(m0.total()), L, fwd, L,
                                       plan.offload_attention
                                           ? fmt::format("; --offload attention holds them in pinned memory ({} more "
                                                         "pinned activations), two chunks' rows on the device, {} moved "
                                                         "a sequence (out, then back in but the last two chunks')",
                                                         format_bytes(more(Tier::Pinned)),
                                                         format_bytes(kept_attention_traffic(cfg, plan, a->seq_len)))
                                           : "");
            }
            if (plan.head_chunks > 1) {  // what head groups are for: attention's buffers of fewer heads
              ChunkPlan one = plan;
              one.head_chunks = 1;
              const MemoryPlan m1 = plan_for(one);
              const Tier dev = device == "cpu" ? Tier::Host : Tier::Device;
              std::cout << fmt::format("--sp-head-chunks {}: {} activations {} and {} in all per rank, against {} and {} "
                                       "with 1 ({} less)\n", plan.head_chunks, tier_name(dev),
                                       format_bytes(m.get(dev, Tag::Activations)), format_bytes(m.total()),
                                       format_bytes(m1.get(dev, Tag::Activations)), format_bytes(m1.total()),
                                       format_bytes(m1.total() - m.total()));
            }
            if (plan.sparse.on()) {  // what sparse attention is for: a device that barely grows with N
              const double per_token = device_bytes_per_token(
                  cfg, plan, a->seq_len, a->optimizer, workspace_of(plan), device == "cpu" ? Tier::Host : Tier::Device,
                  device == "cuda" ? cuda_pinned_workspace_bytes() : 0);
              std::cout << fmt::format("  {} memory per token: {:.1f} B ({:.2f} MB per +10K tokens; from the plans at N "
                                       "and 2N; sparse: K = {} pages per {}-query tile{}, {} sink pages)\n",
                                       device == "cpu" ? "host" : "device", per_token, per_token * 1e4 / 1e6,
                                       plan.sparse.pages, plan.sparse.tile,
                                       plan.sparse.shared ? ", shared by every head" : " per kv head group",
                                       plan.sparse.sinks);
            }
            if (plan.offload_params || a->cmd->count("--sweep") > 0) {
              std::cout << sweep_line << "\n";
              std::cout << "bytes moved between host and device per step (one sequence), by sweep order:\n";
              for (const auto& [name, t] : {std::pair{"chunk", sweep.chunk}, {"layer", sweep.layer}})
                std::cout << fmt::format("  {:<6} weights {}, grads {}, activations {}{}: {}{}{}\n", name,
                                         format_bytes(t.weights), format_bytes(t.grads), format_bytes(t.activations),
                                         plan.offload_kv ? fmt::format(", kv pages {}, kv_grad pages {}",
                                                                       format_bytes(t.kv), format_bytes(t.kv_grads))
                                                         : "",
                                         t.kv_exact ? "" : "at most ", format_bytes(t.total()),
                                         std::string(name) == "layer"
                                             ? fmt::format("; its host arrays {}", format_bytes(t.host_bytes))
                                             : "");
            }
            if (a->device_memory > 0)
              std::cout << fmt::format("{} a device of {} and {} of {} (device {}, host and pinned {}){}{}\n",
                                       fits ? "fits" : "does not fit", format_bytes(dev.bytes), host_limit.what,
                                       format_bytes(host_limit.bytes), format_bytes(need_dev), format_bytes(need_host),
                                       others.empty() ? "; no other --offload setting fits" : "; ", others)
                        << (keep_fits.empty() ? "" : keep_fits + "\n");
            return status;
          }};
}

}  // namespace oomb::cli
