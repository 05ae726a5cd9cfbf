// oomb train: trains a Hugging Face model directory on a token file, or, with no --model and no
// --data, the embedded demo: a built-in tiny model learning a generated long-range repeat task.
#include <filesystem>
#include <functional>
#include <fstream>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "data/text_corpus.h"
#include "model/rope.h"
#include "cli/config_file.h"
#include "cli/dist_flags.h"
#include "cli/guards.h"
#include "cli/lora_flags.h"
#include "cli/memory_report.h"
#include "cli/offload_advice.h"
#include "cli/sweep_flag.h"
#include "cli/train_checkpoints.h"
#include "core/resident.h"
#if defined(OOMB_HAVE_CUDA) || defined(OOMB_SIMT)  // (simt: simt_oomb, the CUDA backend on the CPU)
#include "backend/cuda/cuda_device.h"
#endif
#include "data/eos.h"
#include "cli/train_data.h"
#include "data/open_data.h"
#include "data/repeat_task.h"
#include "hf/checkpoint.h"
#include "hf/peft.h"
#include "model/init.h"
#include "train/trainer.h"
#include "cli/prompt_fields.h"
#include "cli/rope_flags.h"
#include "cli/save_best.h"

namespace oomb::cli {

namespace {

struct TrainArgs {
  // precision: "" until the run resolves it for its device (default_precision)
  std::vector<std::string> data;  // one source, or a mix (cli/train_data.h)
  std::vector<std::string> data_weights;  // (joined by commas: "0.7,0.3", or a --config file's [0.7, 0.3])
  std::string eos;  // --eos-id: an id or a token
  std::string model, device = "cpu", out, metrics, kv_grad_dtype = "f32", kv_dtype = "auto", precision;
  std::string data_format = "auto", tokenizer, text_field = "text", utf8_errors = "strict", offload;
  std::string tensorboard, sweep = "chunk", packing = "wrapped", save_best;
  std::vector<std::string> eval_data;  // one held-out set, or several
  int64_t offload_group = 0, device_memory = 0, eval_every = 0;
  std::vector<int64_t> eval_windows;  // --eval-windows: one count for every held-out set, or one per set
  double peak_tflops = 0;
  bool shuffle = false, doc_mask = false, split_special = false, force = false, keep_attention = false;
  int64_t seq_len = 0, steps = 0, grad_accum = 1, log_every = 0, chunk = 0, page = 128;
  OptimConfig optim;
  float grad_clip = 0;  // default when not given: 1.0 for adamw, 0 (off) for sgd
  float lr = 0;         // default when not given: per mode
  uint64_t seed = 0;
  CheckpointFlags ckpt;
  SparseFlags sparse;
  LoraFlags lora;
  DistOptions dist;
  PromptFields prompt_fields;
  RopeFlags rope;
  int64_t rank = 0;  // this process's rank (mpirun)
  bool device_comm = false;  // the ranks' tensors cross over NCCL (Dist::attach)
  CLI::App* cmd = nullptr;
  bool given(const char* flag) const { return cmd->count(flag) > 0; }
};

// MFU's denominator: --peak-tflops, else the GPU's known bf16 peak, else unknown (0).
double peak_flops(const TrainArgs& a) {
  if (a.peak_tflops > 0) return a.peak_tflops * 1e12;
#if defined(OOMB_HAVE_CUDA) || defined(OOMB_SIMT)
  if (a.device == "cuda") return cuda::peak_bf16_flops(cuda::device_name());
#endif
  return 0.0;
}

// --chunk-size defaults to min(N, 1024): chunk-recurrent whenever the sequence is longer.
// (CLI11 has already checked that every size flag given is positive.)
ChunkPlan chunk_plan(const TrainArgs& a, const ModelConfig& cfg, int32_t doc_sep = -1) {
  ChunkPlan p{std::min(a.chunk > 0 ? a.chunk : 1024, a.seq_len), a.page, dtype_parse(a.kv_grad_dtype), doc_sep};
  p.precision = a.precision == "bf16" ? DType::BF16 : DType::F32;
  p.kv_dtype = kv_page_dtype(a.kv_dtype, p.precision);
  set_offload(a.offload, a.offload_group, a.seq_len, p);
  set_sparse(a.sparse, cfg, p);
  set_dist(a.dist, a.rank, p);
  p.device_comm = a.device_comm;
  p.keep_attention = a.keep_attention ? a.seq_len : 0;
  return p;
}

// The device's capacity for the plan check: --device-memory on sim, the GPU's free memory on cuda.
Limit device_limit(const TrainArgs& a) {
  if (a.device == "sim") return {Accountant::global().capacity(Tier::Device), "--device-memory"};
#if defined(OOMB_HAVE_CUDA) || defined(OOMB_SIMT)
  if (a.device == "cuda")  // what is free now, and what the backend already holds (counted in the plan)
    return {int64_t(cuda::free_memory()) + Accountant::global().total(Tier::Device).current, "the GPU's free memory"};
#endif
  return {};
}

// --sweep into the plan (auto: by the bytes moved and this rank's share of the host's available
// memory); the line the banner prints.
std::string resolve_sweep(const TrainArgs& a, const ModelConfig& cfg, ChunkPlan& plan, const Backend& be) {
  const int64_t host = host_share(available_host_memory(), local_ranks()).bytes;
  return set_sweep(a.sweep, a.given("--sweep"), cfg, a.seq_len, host, [&](const ChunkPlan& p) {
    return plan_memory(cfg, p, a.seq_len, a.optim.kind, be.workspace_bytes(workspace_shape(cfg, p)),
                       be.tier(), be.pinned_workspace_bytes());
  }, plan);
}

// Refuses, before any work, a run whose plan exceeds the host's available memory or the device's
// capacity (naming the tier, the tag and the largest N or C that fits), unless --force.
void check_memory_fits(const TrainArgs& a, const ModelConfig& cfg, const ChunkPlan& plan, Backend& be) {
  auto plan_for = [&](int64_t n, int64_t c) {
    ChunkPlan p = plan;
    p.chunk = std::min(c, n);
    if (p.keep_attention > 0) p.keep_attention = n;  // (the sequence's outputs: N of them)
    return plan_memory(cfg, p, n, a.optim.kind, be.workspace_bytes(workspace_shape(cfg, p)), be.tier(),
                       be.pinned_workspace_bytes());
  };
  const MemoryPlan m = plan_for(a.seq_len, plan.chunk);
  const Limit dev = device_limit(a);
  if (plan.offload_kv && dev.bytes > 0 && !a.force) {  // the two groups the device streams through must fit beside everything else
    OOMB_CHECK(m.total(Tier::Device) <= dev.bytes,
               "{} {}: too small for --offload kv: two groups of {} pages and the rest need {} "
               "(kv {}, kv_grad {} on the device); lower --offload-group or --chunk-size",
               dev.what, dev.bytes, KVCache::group_for(kv_cache_options(cfg, plan), a.seq_len),
               format_bytes(m.total(Tier::Device)), format_bytes(m.get(Tier::Device, Tag::KV)),
               format_bytes(m.get(Tier::Device, Tag::KVGrad)));
  }
  set_out_of_memory_advice(plan_advice(a.seq_len, plan.chunk, plan_for));
  const Limit host = host_share(available_host_memory(), local_ranks());
  // on a device, a refusal also says which other --offload settings would fit; with --keep-attention,
  // what the run needs without it
  auto offload = [&]() -> std::string {
    auto plan_p = [&](const ChunkPlan& q) {
      return plan_memory(cfg, q, a.seq_len, a.optim.kind, be.workspace_bytes(workspace_shape(cfg, q)), be.tier(),
                         be.pinned_workspace_bytes());
    };
    std::string keep;
    if (plan.keep_attention > 0) {
      ChunkPlan off = plan;
      off.keep_attention = 0;
      off.offload_attention = false;
      const MemoryPlan m0 = plan_p(off);
      keep = be.tier() == Tier::Device
                 ? fmt::format("without --keep-attention it needs device {}, host and pinned {}",
                               format_bytes(m0.total(Tier::Device)),
                               format_bytes(m0.total(Tier::Host) + m0.total(Tier::Pinned)))
                 : fmt::format("without --keep-attention it needs host and pinned {}",
                               format_bytes(m0.total(Tier::Host) + m0.total(Tier::Pinned)));
    }
    if (be.tier() != Tier::Device) return keep;
    const std::string others = offload_fits(offloads_of(plan), plan.keep_attention > 0, host, dev, [&](const Offloads& o) {
      return plan_with_offload(plan, o, a.sweep, a.given("--sweep"), cfg, a.seq_len, host.bytes, be.tier(),
                               plan_p);
    });
    return keep.empty() ? others : others.empty() ? keep : keep + "; " + others;
  };
  check_plan_fits(m, a.seq_len, plan.chunk, host, dev, plan_for, a.force, &std::cout, offload);
}

// Without --keep-attention: a line saying it would fit this machine (the device's limit and the host's
// available memory, as check_memory_fits weighs them) and what it saves; "" where it would not.
std::string keep_attention_hint(const TrainArgs& a, const ModelConfig& cfg, const ChunkPlan& plan, Backend& be) {
  const bool on_device = be.tier() == Tier::Device;
  const Limit dev = device_limit(a), host = host_share(available_host_memory(), local_ranks());
  if (plan.keep_attention > 0 || (on_device && dev.bytes <= 0)) return "";  // (a device of unknown size: no hint)
  bool offloaded = false;
  const auto m = keep_attention_fits(plan, a.seq_len, host, dev, [&](const ChunkPlan& p) {
    return plan_memory(cfg, p, a.seq_len, a.optim.kind, be.workspace_bytes(workspace_shape(cfg, p)), be.tier(),
                       be.pinned_workspace_bytes());
  }, on_device ? &offloaded : nullptr);
  if (!m) return "";
  Offloads with = offloads_of(plan);
  with.attention = true;
  return fmt::format("--keep-attention{} would fit ({} {}, of {} {}): {} attention forward passes a step instead of {}, "
                     "the same bits", offloaded ? " " + offload_name(with) : "", on_device ? "device" : "host",
                     format_bytes(on_device ? m->total(Tier::Device) : m->total(Tier::Host) + m->total(Tier::Pinned)),
                     on_device ? dev.what : host.what, format_bytes(on_device ? dev.bytes : host.bytes), cfg.layers,
                     recomputed_attention_passes(cfg, plan));
}

// The tokenizer for text data: --tokenizer, else the model directory's tokenizer.json.
std::string tokenizer_path(const TrainArgs& a) {
  if (!a.tokenizer.empty()) return a.tokenizer;
  const auto p = std::filesystem::path(a.model) / "tokenizer.json";
  return std::filesystem::exists(p) ? p.string() : "";
}

// The document separator, found as `oomb tokenize` finds it: --eos-id (an id or a token), else the model directory's
// config.json eos_token_id, else its tokenizer_config.json eos_token. -1 when none names one.
int32_t eos_of(const TrainArgs& a, const ModelConfig& cfg) {
  if (!a.eos.empty()) return eos_flag(a.eos, cfg.vocab, tokenizer_path(a));
  return resolve_eos(a.model, cfg.vocab).id;
}

// How --data, or a held-out set (--eval-data: in order, no --shuffle), is read.
DataOptions data_options(const TrainArgs& a, int32_t eos, const std::string& held_out = "") {
  DataOptions d;
  d.format = a.data_format;
  d.corpus.text_field = a.text_field;
  apply_prompt_fields(a.prompt_fields, d.corpus, tokenizer_path(a));
  // (held-out token files: their masks beside them, or none; the fields are the text's)
  if (!held_out.empty() && is_token_data(held_out, a.data_format))
    d.corpus.prompt_field = d.corpus.completion_field = d.corpus.messages_field = "";
  d.corpus.utf8 = utf8_errors_parse(a.utf8_errors);
  d.tokenizer = tokenizer_path(a);
  d.split_special = a.split_special;
  d.packing = {eos, a.shuffle && held_out.empty(), a.seed, a.doc_mask, a.packing == "whole"};
  d.log = &std::cout;
  return d;
}

// Refuses outputs that would overwrite an input, or mix with an earlier run's checkpoints, before anything
// is opened for writing.
void check_paths(const TrainArgs& a) {
  // (the model's, the tokenizer's and the adapter's directories are read as a whole: nothing goes inside)
  std::vector<NamedPath> inputs = {{"--model", a.model, true}, {"--tokenizer", a.tokenizer, true},
                                   {"--lora", a.lora.dir, true}};
  for (const std::string& d : a.data) inputs.push_back({"--data", d, true});
  for (const std::string& d : a.eval_data) inputs.push_back({"--eval-data", d, true});
  refuse_aliasing({{"--out", a.out, true}, {"--metrics", a.metrics}, {"--checkpoint-dir", a.ckpt.dir, true},
                   {"--tensorboard", a.tensorboard, true}, {"--save-best", a.save_best, true}},
                  inputs);
  refuse_earlier_checkpoints(a.ckpt);
  // A checkpoint's config.toml repeats its run, outputs and all: a fresh run from it (no --resume)
  // must not replace that run's results with its own.
  // (--resume auto resumes only where the directory holds a checkpoint; else the run starts afresh)
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool resumes = !a.ckpt.resume.empty() &&
                       (a.ckpt.resume != "auto" || (fs::is_directory(a.ckpt.dir, ec) && !latest_checkpoint(a.ckpt.dir, nullptr).empty()));
  if (resumes) return;
  // (--tensorboard is left out: each run writes an event file of its own there)
  for (const auto& [flag, path] : {std::pair<std::string, std::string>{"--out", a.out}, {"--metrics", a.metrics},
                                   {"--save-best", a.save_best}}) {
    const std::string file = config_gave(flag);
    if (path.empty() || file.empty() || !fs::exists(fs::path(file).parent_path() / "state.json", ec)) continue;
    OOMB_CHECK(!fs::exists(path, ec) || (fs::is_directory(path, ec) && fs::is_empty(path, ec)),
               "{} {} (from --config {}): holds the results of the run that checkpoint comes from, which a fresh "
               "run would replace: give {} anew, or --resume auto to continue that run", flag, path, file, flag);
  }
}

// Runs fn on the model's parameters in host memory: the masters themselves on the CPU and with
// --offload params (pinned host memory); on a device, a host copy (tag io) downloaded first, or
// uploaded after when fn writes them.
void with_host_params(Model& model, const std::function<void(Params&)>& fn, bool writes) {
  if (model.params().flat().tier != Tier::Device && !model.sharded()) return fn(model.params());
  Params host(model.config(), model.host_layout(), Tier::Host, Tag::IO);
  if (!writes) model.download_params(host);
  fn(host);
  if (writes) model.upload_params(host);
}

// Every flag that changes the math, resolved, as a checkpoint records it: a resumed run must match
// each. (--offload and --offload-group give the same bits; the flags that only decide which tokens
// are read, such as --data-format or --tokenizer, are covered by the data's fingerprint.)
nlohmann::json math_flags(const TrainArgs& a, const TrainOptions& o, const ChunkPlan& plan, int32_t eos,
                          const TrainData& data) {
  nlohmann::json f = {{"--seq-len", o.seq_len},
          {"--grad-accum", o.grad_accum},
          {"--optimizer", o.optim.kind},
          {"--lr", flag_value(o.optim.lr)},
          {"--weight-decay", flag_value(o.optim.weight_decay)},
          {"--grad-clip", flag_value(o.optim.grad_clip)},
          {"--warmup-steps", o.optim.warmup_steps},
          {"--skip-nonfinite", o.optim.skip_nonfinite},
          {"--chunk-size", plan.chunk},
          {"--page-size", plan.page_size},
          {"--kv-dtype", dtype_name(plan.kv_dtype)},
          {"--precision", a.precision},
          {"--kv-grad-dtype", a.kv_grad_dtype},
          {"--doc-mask", a.doc_mask},
          {"--sparse-pages", plan.sparse.pages},
          {"--sparse-tile", plan.sparse.tile},
          {"--sink-pages", plan.sparse.sinks},
          {"--sparse-shared", plan.sparse.shared},
          {"--shuffle", a.shuffle},
          {"--seed", a.seed},
          {"--eos-id", eos},
          {"--device", a.device},
          {"--dp", a.dist.dp}};  // windows per step: grad_accum x dp
  if (plan.lora.on()) {  // (with the base weights' fingerprint: RunCheckpoints::set_lora_base)
    f["--lora-rank"] = plan.lora.rank;
    f["--lora-alpha"] = plan.lora.alpha;
    f["--lora-targets"] = fmt::format("{}", fmt::join(plan.lora.target_names(), ","));
    f["--rslora"] = plan.lora.rslora;
    f["--train-embeddings-norms"] = plan.lora.train_embeddings_norms;
    if (plan.lora.dropout > 0) f["--lora-dropout"] = plan.lora.dropout;  // (0: as checkpoints before it)
  }
  if (a.packing != "wrapped") f["--packing"] = a.packing;  // (wrapped: as checkpoints before it)
  // the schedule's shape (cosine to 0.1: as checkpoints before these flags)
  if (o.optim.schedule != "cosine") f["--lr-schedule"] = o.optim.schedule;
  if (o.optim.min_lr_ratio != 0.1f && o.optim.schedule != "constant")  // (constant: no floor)
    f["--min-lr-ratio"] = flag_value(o.optim.min_lr_ratio);
  if (o.optim.schedule == "wsd") f["--decay-steps"] = wsd_decay_steps(o.optim);
  if (data.mix) f["--data-weights"] = data.weights_flag();  // (the mix's shares; one source: none)
  return f;
}

// This run as a checkpoint at step 0 describes it (train/checkpoint_state.h).
CheckpointState run_state(const TrainArgs& a, const TrainOptions& o, const ChunkPlan& plan, int32_t eos,
                          const ModelConfig& cfg, const TrainData& data) {
  CheckpointState s;
  s.total_steps = o.steps;
  s.model = config_to_json(cfg);
  s.data = data.identity(a.data);
  s.flags = math_flags(a, o, plan, eos, data);
  return s;
}

// The demo's model: a 2-layer Llama-style model sized for a CPU, over the recall task's vocabulary.
ModelConfig demo_config(int64_t vocab) {
  ModelConfig c = preset_config("tiny");
  c.vocab = vocab;
  c.raw = nlohmann::json::object();
  return parse_config(config_to_json(c), "the demo's built-in model");
}

// The longest sequence full-sequence training (C = N) can hold in `bytes`, by the exact planner.
int64_t full_sequence_reach(const ModelConfig& cfg, const ChunkPlan& plan, int64_t bytes, const Backend& be) {
  int64_t lo = 1, hi = 1;
  auto fits = [&](int64_t n) {
    ChunkPlan full = plan;
    full.chunk = n;
    return plan_memory(cfg, full, n, "adamw", be.workspace_bytes(workspace_shape(cfg, full))).total() <= bytes;
  };
  while (fits(hi * 2)) hi *= 2;
  for (hi *= 2; hi - lo > 1;) {
    const int64_t mid = (lo + hi) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

int run_demo(TrainArgs& a, Backend& be, Dist& dist) {
  OOMB_CHECK(!a.ckpt.any(), "--checkpoint-dir, --save-every, --keep-last and --resume need --model and --data (the "
             "built-in demo does not checkpoint)");
  OOMB_CHECK(a.eval_data.empty(), "--eval-data needs --model and --data (the built-in demo scores its own task)");
  OOMB_CHECK(a.eos.empty(), "--eos-id needs --model and --data (the built-in demo's task has no documents to end)");
  OOMB_CHECK(a.data_weights.empty(), "--data-weights needs --model and two --data sources or more (the built-in demo "
             "trains on its own task)");
  OOMB_CHECK(a.prompt_fields.prompt.empty() && a.prompt_fields.completion.empty() && a.prompt_fields.messages.empty() &&
                 a.prompt_fields.chat_template.empty() && a.packing == "wrapped",
             "--prompt-field, --completion-field, --messages-field, --chat-template and --packing need --model and --data (the built-in demo makes its "
             "own task)");
  RepeatTask task(a.seed + 1, 128);
  const ModelConfig cfg = demo_config(task.vocab());
  if (!a.given("--seq-len")) a.seq_len = 1024;
  if (!a.given("--chunk-size")) a.chunk = 128;
  if (!a.given("--page-size")) a.page = 64;
  if (!a.given("--steps")) a.steps = 800;
  if (!a.given("--lr")) a.lr = 1e-3f;
  if (!a.given("--warmup-steps")) a.optim.warmup_steps = 30;
  ChunkPlan plan = chunk_plan(a, cfg);
  const std::string sweep = resolve_sweep(a, cfg, plan, be);
  check_model_out("--out", a.out, cfg, a.force);
  check_memory_fits(a, cfg, plan, be);
  const MemoryPlan mem = plan_memory(cfg, plan, a.seq_len, "adamw", be.workspace_bytes(workspace_shape(cfg, plan)));
  ChunkPlan full_plan = plan;
  full_plan.chunk = a.seq_len;
  full_plan.sp = 1;
  const MemoryPlan full = plan_memory(cfg, full_plan, a.seq_len, "adamw", be.workspace_bytes(workspace_shape(cfg, full_plan)));
  std::cout << fmt::format(
                   "oomb demo (no --model/--data given; see `oomb train --help`)\n"
                   "A {}-parameter, {}-layer model learns a long-range task: the second half of every {}-token\n"
                   "context repeats its first half, so each of its {} tokens must be found {} tokens back\n"
                   "(chance: 1 in {}). Loss and accuracy count the repeated half only.\n\n"
                   "Chunk-recurrent training: {} chunks of {} tokens, K/V in {}-token pages, planned peak {}.\n"
                   "Full-sequence training needs {} at this length; in {} it holds at most {} tokens.\n",
                   param_count(cfg), cfg.layers, a.seq_len, a.seq_len / 2, (a.seq_len + 1) / 2, task.vocab(),
                   chunk_count(a.seq_len, plan.chunk), plan.chunk, plan.page_size, format_bytes(mem.total()),
                   format_bytes(full.total()), format_bytes(mem.total()),
                   full_sequence_reach(cfg, plan, mem.total(), be))
            << std::endl;
  if (a.given("--sweep")) std::cout << sweep << std::endl;
  Model model(cfg, be, plan, &dist.tensor_sp(), &dist.world());
  with_host_params(model, [&](Params& p) { init_params(p, a.seed); }, true);
  TrainOptions o{a.seq_len, a.steps, a.grad_accum, a.log_every ? a.log_every : 100, a.optim, a.metrics};
  o.dist = &dist;
  o.peak_flops = peak_flops(a);
  o.tensorboard_dir = a.tensorboard;
  o.optim.lr = a.lr;
  o.optim.grad_clip = a.given("--grad-clip") ? a.grad_clip : 1.0f;
  const StepStats last = train(model, task, o, std::cout);
  RepeatTask held_out(a.seed + 1000, task.vocab());  // fresh random tokens never trained on
  std::vector<int32_t> ids(static_cast<size_t>(a.seq_len)), tg(static_cast<size_t>(a.seq_len));
  int64_t hits = 0, n = 0;
  double loss = 0;
  for (int64_t w = 0; w < 4; ++w) {
    held_out.window(w, a.seq_len, ids.data(), tg.data());
    const LossStats ls = model.evaluate(ids.data(), tg.data(), a.seq_len);
    hits += ls.correct, n += ls.targets, loss += ls.loss_sum;
  }
  std::cout << fmt::format("\nheld-out: accuracy {:.1f}% over {} tokens (chance {:.1f}%), loss {:.3f} "
                           "(last train loss {:.3f})",
                           100.0 * double(hits) / double(n), n, 100.0 / double(task.vocab()), loss / double(n),
                           last.loss)
            << std::endl;
  std::cout << "memory peaks (host): " << Accountant::global().report(Tier::Host) << std::endl;
  if (!a.out.empty() && (dist.leader() || model.sharded()))  // --zero 3: every rank takes part in the gather
    with_host_params(model, [&](Params& p) { if (dist.leader()) save_model(a.out, cfg, p, DType::F32); }, false);
  return 0;
}

}  // namespace

Command add_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* c = app.add_subcommand("train", "Train a model (with no --model and --data: the built-in demo)");
  c->add_option("--model", a->model, "Hugging Face model directory (config.json + safetensors)")->check(model_dir());
  c->add_option("--data", a->data, "Token file (.bin: raw uint32 or llm.c shard), directory of shards, or text "
                 "(.txt, .jsonl, or a directory of them; tokenized at start). Given more than once: a mix, each "
                 "window one source's (--data-weights)")->allow_extra_args(false);
  c->add_option("--data-weights", a->data_weights, "With --data given more than once: each source's share of the "
                "windows, comma-separated in --data's order (e.g. 0.7,0.3; numbers > 0, over their sum), each window "
                "taken, among the sources below their share at its end, from the one whose next window is due first: every "
                "prefix of the run within one window of each share (default: each source's share of the tokens)");
  c->add_option("--data-format", a->data_format, "auto, u32, u16 (nanoGPT), llmc, text or jsonl")
      ->check(CLI::IsMember({"auto", "u32", "u16", "llmc", "text", "jsonl"}))->capture_default_str();
  c->add_option("--tokenizer", a->tokenizer, "Text data: tokenizer.json or a directory with one (default: --model's)");
  c->add_option("--text-field", a->text_field, "JSON-lines data: the field holding the text")->capture_default_str();
  add_prompt_fields(c, a->prompt_fields);
  c->add_option("--utf8-errors", a->utf8_errors, "Text data: strict (invalid UTF-8 is an error) or replace (U+FFFD)")
      ->check(CLI::IsMember({"strict", "replace"}))->capture_default_str();
  c->add_flag("--split-special-tokens", a->split_special, "Text data: special tokens in the text stay plain text");
  c->add_option("--eos-id,--eos", a->eos, "Id or token ending each document (default: the model's eos_token_id, as "
                "`oomb tokenize` finds it)");
  c->add_flag("--shuffle", a->shuffle, "Take the documents in a new order every epoch (seeded by --seed)");
  c->add_option("--packing", a->packing, "How documents fill the windows: wrapped (back to back, a document cut "
                "where a window ends) or whole (each window holds whole documents, padded at its end without targets; "
                "one longer than a window takes windows of its own), for records (--prompt-field) that must not lose "
                "their prompt to a window's edge; with --doc-mask each document attends to itself only")
      ->check(CLI::IsMember({"wrapped", "whole"}))->capture_default_str();
  c->add_option("--peak-tflops", a->peak_tflops, "The device's peak TFLOP/s, for MFU (default on CUDA: the GPU's "
                 "dense bf16 peak when it is an A100/H100/H200)")->check(positive());
  c->add_flag("--no-overlap-update{false}", a->optim.overlap_update, "--offload params: update on the host only "
              "after the step, rather than beside the next step's first layers (the same bits either way)");
  c->add_option("--update-threads", a->optim.update_threads, "--offload params: threads of the host's update "
                "(default: OpenMP's, less one while it runs beside the next step, leaving the thread that drives "
                "the device a core; the same bits on any count)")->check(count());
  c->add_flag("--skip-nonfinite", a->optim.skip_nonfinite, "Skip a step whose loss or gradient is NaN or Inf "
              "(default: stop, naming the step and the first tensor)");
  c->add_flag("--doc-mask", a->doc_mask, "Attention within documents only, positions restarting per document");
  c->add_flag("--keep-attention", a->keep_attention, KEEP_ATTENTION_HELP);
  c->add_option("--seq-len", a->seq_len, "Tokens per training sequence N (default 2048; demo 1024)")->check(count());
  c->add_option("--steps", a->steps, "Optimizer steps (default 100; demo 800)")->check(count());
  c->add_option("--optimizer", a->optim.kind, "adamw or sgd")->check(CLI::IsMember({"adamw", "sgd"}))->capture_default_str();
  c->add_option("--lr", a->lr, "Peak learning rate (default 1e-4; demo 1e-3)")->check(positive());
  c->add_option("--weight-decay", a->optim.weight_decay, "AdamW decoupled weight decay on weight matrices")
      ->check(non_negative())->capture_default_str();
  c->add_option("--grad-clip", a->grad_clip, "Max global gradient norm; 0 disables (default 1.0 for adamw, 0 for sgd)")
      ->check(non_negative());
  c->add_option("--warmup-steps", a->optim.warmup_steps, "Linear warmup steps, then --lr-schedule (demo 30)")
      ->check(count(true))->capture_default_str();
  c->add_option("--lr-schedule", a->optim.schedule, "After the warmup: cosine (to --min-lr-ratio x lr at the last "
                "step), linear (the same, in a line), constant, or wsd (constant, then the last --decay-steps down a "
                "line to --min-lr-ratio x lr)")
      ->check(CLI::IsMember({"cosine", "linear", "constant", "wsd"}))->capture_default_str();
  c->add_option("--min-lr-ratio", a->optim.min_lr_ratio, "cosine, linear, wsd: the last step's lr over the peak")
      ->check(non_negative())->check(CLI::Range(0.0, 1.0))->capture_default_str();
  c->add_option("--decay-steps", a->optim.decay_steps, "wsd: the last steps, decaying (default a tenth of the steps "
                "after the warmup)")->check(count());
  c->add_option("--grad-accum", a->grad_accum, "Sequences per optimizer step")->check(count())->capture_default_str();
  c->add_option("--chunk-size", a->chunk, "Tokens per chunk C of chunk-recurrent training (default min(N, 1024); N = full sequence; demo 128)")
      ->check(count());
  c->add_option("--page-size", a->page, "Tokens per KV page (demo 64)")->check(count())->capture_default_str();
  c->add_option("--kv-grad-dtype", a->kv_grad_dtype, "KV-gradient pages: f32, or bf16 for half the bytes")
      ->check(CLI::IsMember({"f32", "bf16"}))->capture_default_str();
  c->add_option("--precision", a->precision, "fp32, or bf16: every matmul (LoRA's adapters too) reads bf16 values and "
                 "accumulates in fp32 (master weights, moments, norms, softmax, loss and the residual stream stay fp32); "
                 "default bf16 on --device cuda, fp32 elsewhere")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  c->add_option("--kv-dtype", a->kv_dtype, "K/V pages: f32, or bf16 for half the bytes (K and V rounded to bf16); "
                 "auto: bf16 under --precision bf16 (which rounds K and V to bf16 anyway: the same bits), else f32")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}))->capture_default_str();
  c->add_option("--device", a->device, "cpu, cuda, or sim (the CPU kernels on simulated device memory with a copy "
                 "engine)")->check(CLI::IsMember({"cpu", "sim", "cuda"}))->capture_default_str();
  c->add_option("--device-memory", a->device_memory, "With --device sim: the device's capacity in bytes")
      ->check(count());
  c->add_option("--offload", a->offload, "kv: K/V and gradient pages in pinned host memory, streamed through the "
                 "device in groups of pages; params: master weights and gradients in pinned host memory, AdamW "
                 "moments in host memory, layers streamed through two device slots; attention (with --keep-attention): "
                 "the kept attention outputs in pinned host memory, two chunks' rows on the device; any of them, "
                 "comma-separated (kv,params)")->check(offload_list());
  c->add_option("--offload-group", a->offload_group, "With --offload kv: pages per group (default about 4 MiB of "
                 "K/V, at most a layer's pages)")->check(count());
  c->add_option("--out", a->out, "Save the trained model here (HF format, the loaded dtype) after the last step");
  c->add_option("--metrics", a->metrics, "Write one JSON line of metrics per step to this file");
  CLI::Option* eval_data = c->add_option("--eval-data", a->eval_data, "Held-out data (read as --data is, in order): "
                                         "its loss after every --eval-every steps and the last, in the progress "
                                         "line, --metrics (eval) and --tensorboard (eval/). Given more than once: "
                                         "each set scored, and the loss over every set's targets")
                                 ->allow_extra_args(false);
  c->add_option("--eval-every", a->eval_every, "With --eval-data: evaluate every K steps (default: after the last "
                "only)")->check(count())->needs(eval_data);
  c->add_option("--eval-windows", a->eval_windows, "With --eval-data: windows of --seq-len tokens scored each time, "
                "from its start (default: every whole window of it; a multiple of --dp); of each set: one count for "
                "every set, or one per set (2,4)")->delimiter(',')->check(count())->needs(eval_data);
  c->add_option("--save-best", a->save_best, "With --eval-data: save the model (as --out does) here whenever the "
                "held-out loss is the lowest so far, with oomb_best.json (the step and loss)")->needs(eval_data);
  c->add_option("--tensorboard", a->tensorboard, "Write TensorBoard event files (loss, lr, grad norm, tokens/s, MFU, "
                 "memory per tier; the held-out loss with --eval-data) into this directory");
  c->add_flag("--force", a->force, "Run even when the plan exceeds the memory the machine has, and replace a "
              "different model in --out");
  c->add_option("--log-every", a->log_every, "Print a progress line every k steps (default 1; demo 100)")->check(count());
  c->add_option("--seed", a->seed, "Seed of --shuffle, of --lora-dropout's masks, and of the demo's model and task")->check(count(true))->capture_default_str();
  add_sweep_flag(c, a->sweep);
  add_checkpoint_flags(c, a->ckpt);
  add_sparse_flags(c, a->sparse);
  add_lora_flags(c, a->lora, true);
  add_rope_flags(c, a->rope);
  add_dist_flags(c, a->dist, true);
  a->cmd = c;
  return {c, [a] {
            a->precision = default_precision(a->precision, a->device);
            a->ckpt.config_toml = resolved_config(*a->cmd);
            a->ckpt.final = a->out.empty();  // a checkpoint is then what holds the result
            a->ckpt.model_dir = a->model;
            Dist dist(a->dist);  // the ranks mpirun started (MPI), or this process alone
            a->rank = dist.rank();
            if (!dist.leader()) std::cout.rdbuf(nullptr);  // rank 0 alone prints (errors: every rank)
            dist.check_same_flags(a->ckpt.config_toml);
            check_paths(*a);
            auto be = make_backend(a->device, a->device_memory, local_rank());
            dist.attach(*be);
            a->device_comm = dist.device_comm();
            LoraConfig lora = lora_config(a->lora, a->cmd);
            OOMB_CHECK(!lora.on() || !(a->model.empty() && a->data.empty()),
                       "--lora-rank / --lora need --model and --data (the built-in demo trains every parameter)");
            OOMB_CHECK(!a->rope.any() || !(a->model.empty() && a->data.empty()),
                       "--rope-* / --max-position-embeddings need --model and --data (the built-in demo's model is "
                       "its own)");
            if (a->model.empty() && a->data.empty()) return run_demo(*a, *be, dist);
            OOMB_CHECK(!a->model.empty(), "--model is required with --data");
            OOMB_CHECK(!a->data.empty(), "--data is required with --model");
            if (a->given("--text-field")) {  // read by some source, --data or --eval-data, else ignored: refused
              std::vector<std::string> text = a->data;
              text.insert(text.end(), a->eval_data.begin(), a->eval_data.end());
              check_text_field_read(text, a->data_format, a->text_field);
            }
            bool rope_changed = false;
            const ModelConfig cfg = run_config(a->model, a->lora.dir, a->rope, std::cout, &rope_changed);
            default_lora_targets(lora, a->lora, a->cmd, cfg);
            check_training_dropout(cfg, (std::filesystem::path(a->model) / "config.json").string());
            check_model_out("--out", a->out, cfg, a->force, lora.on());
            check_model_out("--save-best", a->save_best, cfg, a->force, lora.on());
            if (dist.leader())
              for (const auto& [flag, dir] : {std::pair{"--out", a->out}, {"--save-best", a->save_best}})
                remove_stale_saves(flag, dir, std::cout);
            const int32_t eos = eos_of(*a, cfg);
            OOMB_CHECK(!a->doc_mask || eos >= 0, "--doc-mask needs the EOS id that ends each document: neither the "
                       "model's config.json (eos_token_id) nor its tokenizer_config.json (eos_token) names one; give "
                       "--eos-id");
            TrainOptions o{a->seq_len ? a->seq_len : 2048, a->steps ? a->steps : 100, a->grad_accum,
                           a->log_every ? a->log_every : 1, a->optim, a->metrics};
            o.optim.lr = a->given("--lr") ? a->lr : 1e-4f;
            o.peak_flops = peak_flops(*a);
            o.tensorboard_dir = a->tensorboard;
            o.seed = a->seed;
            o.optim.grad_clip = a->given("--grad-clip") ? a->grad_clip : (o.optim.kind == "sgd" ? 0.0f : 1.0f);
            o.optim.total_steps = o.steps;
            check_schedule(o.optim);
            a->seq_len = o.seq_len;
            ChunkPlan plan = chunk_plan(*a, cfg, a->doc_mask ? eos : -1);
            OOMB_CHECK(!a->given("--update-threads") || plan.offload_params,
                       "--update-threads: only with --offload params (the update runs on the host only then)");
            OOMB_CHECK(!a->given("--no-overlap-update") || plan.offload_params,
                       "--no-overlap-update: only with --offload params (the update runs beside the next step only then)");
            check_comm_device(a->dist, a->device);
            OOMB_CHECK(!a->given("--weight-decay") || a->optim.kind == "adamw",
                       "--weight-decay: AdamW's only (--optimizer {} has no weight decay)", a->optim.kind);
            if (o.optim.warmup_steps > o.steps)  // (the warmup's step k takes lr (k + 1) / warmup)
              std::cout << fmt::format("note: --warmup-steps {} is longer than the run's {} steps: the learning rate "
                                       "stays in its warmup and never reaches --lr\n", o.optim.warmup_steps, o.steps);
            plan.lora = lora;
            const std::string sweep = resolve_sweep(*a, cfg, plan, *be);
            check_memory_fits(*a, cfg, plan, *be);
            const std::string keep_hint = keep_attention_hint(*a, cfg, plan, *be);  // (before the model takes memory)
            TrainData data = open_train_data(a->data, fmt::format("{}", fmt::join(a->data_weights, ",")), cfg.vocab,
                                             data_options(*a, eos));
            data.notes(o.seq_len, o.steps * o.grad_accum * std::max<int64_t>(1, a->dist.dp), std::cout);
            HeldOut held_out;
            if (!a->eval_data.empty()) {
              held_out = open_held_out(
                  a->eval_data, [&](const std::string& p) { return data_options(*a, eos, p); }, cfg.vocab, o.seq_len,
                  a->eval_windows, std::max<int64_t>(1, a->dist.dp), plan.doc_sep,
                  a->eval_every > 0 ? fmt::format("every {} steps and after the last", a->eval_every)
                                    : std::string("after the last step"),
                  std::cout);
              o.eval_data = held_out.source();
              o.eval_every = a->eval_every;
              o.eval_windows = held_out.windows();
            }
            RunCheckpoints ckpt(a->ckpt, a->ckpt.any() ? run_state(*a, o, plan, eos, cfg, data) : CheckpointState{},
                                o.optim, o.seq_len, o.grad_accum,
                                [&](int64_t w, CheckpointState& st) { data.position(w, o.seq_len, st); }, std::cout);
            ckpt.set_dist(&dist);
            Model model(cfg, *be, plan, &dist.tensor_sp(), &dist.world());
            o.dist = &dist;
            DType dtype = DType::F32;
            if (ckpt.resuming() && !lora.on()) {  // the weights come from the checkpoint (load_checkpoint, at the start)
              dtype = dtype_parse(ckpt.weights_dtype());
            } else {  // (LoRA: the frozen base is --model's; a checkpoint holds the adapters)
              std::string base_fingerprint;
              with_host_params(model, [&](Params& p) {
                dtype = load_weights(a->model, cfg, p);
                if (lora.on() && a->ckpt.any()) base_fingerprint = params_fingerprint(p);
              }, true);
              ckpt.set_weights_dtype(std::string(dtype_name(dtype)));
              if (lora.on() && a->ckpt.any()) ckpt.set_lora_base(a->model, base_fingerprint);
            }
            if (lora.on() && ckpt.resuming()) {
              std::cout << fmt::format("LoRA: rank {}, alpha {}{}; the adapters come from the checkpoint", lora.rank,
                                       lora.alpha, lora.dropout > 0 ? fmt::format(", dropout {}", lora.dropout) : "")
                        << std::endl;
            } else if (lora.on()) {  // the adapters: from --lora DIR, or B = 0 and A as PEFT initialises it
              Params host(cfg, lora_layout(cfg, lora), Tier::Host, Tag::IO);
              with_host_params(model, [&](Params& base) {
                if (!a->lora.dir.empty()) load_adapter(a->lora.dir, base, host);
                else init_lora(host, base, a->seed);
              }, false);
              model.upload_trainable(host);
              std::cout << fmt::format("LoRA: rank {}, alpha {}{}, on {} ({} trainable parameters of {}){}{}",
                                       lora.rank, lora.alpha, lora.rslora ? " (rsLoRA)" : "",
                                       fmt::join(lora.target_names(cfg.fused_qkv(), cfg.fused_gate_up()), ", "),
                                       lora_param_count(cfg, lora),
                                       param_count(cfg), lora.train_embeddings_norms ? "; embeddings and norms train" : "",
                                       lora.dropout > 0 ? fmt::format("; dropout {}", lora.dropout) : "")
                        << std::endl;
            }
            o.start_step = ckpt.start_step();
            std::cout << fmt::format("oomb train: {} ({}, {} parameters, {}) on {}, {} tokens per step in chunks "
                                     "of {}, {} step{}; --device {}, --precision {}",
                                     a->model, cfg.architecture, param_count(cfg), dtype_name(dtype),
                                     data.describe(), o.seq_len * o.grad_accum, plan.chunk, o.steps,
                                     o.steps == 1 ? "" : "s", a->device, a->precision)
                      << (a->doc_mask ? fmt::format("; attention within documents ended by token {}", eos) : "")
                      << std::endl;
            if (a->device == "cuda") std::cout << cuda_attention_summary(plan.precision == DType::BF16) << std::endl;
            if (a->out.empty() && a->ckpt.dir.empty() && a->save_best.empty())
              std::cout << "note: no --out, --checkpoint-dir or --save-best: the trained weights will not be saved"
                        << std::endl;
            if (const std::string note = rope_reach_note(cfg, o.seq_len); !note.empty() && !rope_changed)
              std::cout << note << std::endl;
            if (const int64_t sw = rope_switch_length(cfg); sw > 0)  // LongRoPE: which table, and why
              std::cout << (a->doc_mask && o.seq_len > sw ? fmt::format("LongRoPE: each window takes the long factors where its longest "
                                                      "document passes {} positions, else the short ones (as "
                                                      "transformers chooses by max(position_ids) + 1)", sw)
                                        : fmt::format("LongRoPE: windows of {} tokens take the {} factors (past {} "
                                                      "positions: long)", o.seq_len, o.seq_len > sw ? "long" : "short",
                                                      sw))
                        << std::endl;
            if (dist.size() > 1)  // the ranks' layout, once (rank 0 alone prints)
              std::cout << fmt::format("{} ranks ({}): --sp {} x --dp {}{}; each rank holds {} of every chunk's {} "
                                       "tokens, {} of {} heads and {} of {} kv heads in attention", dist.size(),
                                       dist.device_comm() ? "tensors over nccl" : dist.world().name(), a->dist.sp, a->dist.dp,
                                       a->dist.zero ? fmt::format(", --zero {}", a->dist.zero) : "",
                                       plan.chunk / plan.sp, plan.chunk, cfg.heads / plan.sp, cfg.heads,
                                       cfg.kv_heads / plan.sp, cfg.kv_heads)
                        << (plan.head_chunks > 1 ? fmt::format(", taken in {} head groups (--sp-head-chunks)",
                                                               plan.head_chunks)
                                                 : "")
                        << std::endl;
            if (const std::string t = describe(dist.threads()); !t.empty()) std::cout << t << std::endl;
            if (a->given("--sweep") || plan.offload_params) std::cout << sweep << std::endl;
            if (!keep_hint.empty()) std::cout << keep_hint << std::endl;
            // the trained weights (LoRA: the adapters) into dir as a unit with `extra`; every rank calls it
            // (--zero 3: every rank's shards gathered by every rank; else the ranks hold the same weights: rank 0 saves)
            auto save_to = [&](const std::string& dir, const ExtraFiles& extra) {
              if (model.sharded()) {
                Params host(cfg, Tier::Host, Tag::IO);
                model.download_params(host);
                if (dist.leader()) save_model(dir, cfg, host, dtype, a->model, extra);
              } else if (!dist.leader()) {
              } else if (lora.on()) {
                Params host(cfg, lora_layout(cfg, lora), Tier::Host, Tag::IO);
                model.download_trainable(host);
                save_adapter(dir, cfg, lora, host, a->model, extra);
              } else {
                with_host_params(model, [&](Params& p) { save_model(dir, cfg, p, dtype, a->model, extra); }, false);
              }
            };
            TrainHooks hooks = ckpt.hooks(model);
            StepStats last;  // the step just done (its held-out loss), for --save-best
            if (!a->save_best.empty())
              add_save_best(a->save_best, held_out.sets ? nlohmann::json(a->eval_data) : nlohmann::json(a->eval_data[0]),
                            held_out.sets ? nlohmann::json(held_out.set_windows) : nlohmann::json(o.eval_windows),
                            ckpt.start_step(), dist, last, hooks, save_to);
            train(model, data.source(), o, std::cout, [&](const StepStats& s) { last = s; }, hooks);
            // stopped by SIGINT/SIGTERM (128 + the signal) or --time-limit (75), a checkpoint written
            if (const int status = ckpt.finish()) return status;
            if (!a->out.empty()) {
              save_to(a->out, {});
              std::cout << "saved " << a->out
                        << (lora.on() ? std::string(" (a PEFT LoRA adapter; `oomb merge` writes the merged model)")
                                      : fmt::format(" ({})", dtype_name(dtype)))
                        << std::endl;
            }
            if (const int sig = ckpt.saved())  // (a signal after the last step began: the run was done)
              std::cout << fmt::format("oomb train: {} received after the last step began: the run finished{}",
                                       signal_name(sig), a->out.empty() ? "" : " and saved --out " + a->out)
                        << std::endl;
            return 0;
          }};
}

}  // namespace oomb::cli
