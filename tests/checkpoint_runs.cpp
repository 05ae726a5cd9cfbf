#include "checkpoint_runs.h"

#include <fmt/format.h>
#include <bit>
#include <cstring>
#include <memory>
#include <sstream>

#include "data/packed_tokens.h"
#include "hf/checkpoint.h"
#include "model_fixture.h"
#include "train/checkpoint.h"
#include "train/model.h"
#include "train/optimizer.h"
#include "train/trainer.h"

namespace oomb::testing {

namespace fs = std::filesystem;

namespace {

// A state that opens (the fields a CLI run fills; the library does not read them back).
CheckpointState state_for(const ModelConfig& cfg, int64_t step) {
  CheckpointState s;
  s.step = step;
  s.total_steps = kSteps;
  s.model = config_to_json(cfg);
  s.data = {"t.bin", 2000, "0000000000000000"};
  return s;
}

}  // namespace

RunResult checkpoint_run(Backend& be, const std::string& label, const ChunkPlan& plan, const fs::path& dir,
                         const std::string& optimizer, const fs::path& resume, int64_t stop_after) {
  const ModelConfig cfg = load_config(dir);
  Optimizer::delay_update_for_test(plan.offload_params ? 3000 : 0);
  Model m(cfg, be, plan);
  PackedTokens data(std::make_unique<FileTokens>(dir / "t.bin", TokenFormat::U32), cfg.vocab, {5, true, 7});
  TrainOptions o{kN, kSteps, kAccum, 100, {}, ""};
  o.optim.kind = optimizer;
  o.optim.lr = 3e-3f;
  o.optim.weight_decay = 0.1f;
  o.optim.warmup_steps = 2;
  o.optim.grad_clip = 0.5f;
  RunResult r;
  TrainHooks h;
  CheckpointState saved;
  if (resume.empty()) {
    load_for_training(m, dir);
  } else {
    saved = open_checkpoint(resume);
    o.start_step = saved.step;
    h.begin = [&](Optimizer& opt) { load_checkpoint(resume, saved, m, opt); };
  }
  h.after_step = [&](int64_t done, Optimizer& opt) {
    if (done != stop_after) return false;
    r.checkpoint = save_checkpoint(dir / ("ck-" + label + "-" + optimizer), state_for(cfg, done), m, opt);
    return true;
  };
  std::ostringstream log;
  train(m, data, o, log, [&](const StepStats& s) {
    r.loss.push_back(s.loss);
    r.grad_norm.push_back(s.grad_norm);
    r.lr.push_back(s.lr);
  }, h);
  Optimizer::delay_update_for_test(0);
  Params host(cfg, Tier::Host, Tag::IO);
  m.download_params(host);
  r.params.assign(host.flat().f(), host.flat().f() + host.flat().numel());
  return r;
}

std::string resume_difference(const RunResult& whole, const RunResult& first, const RunResult& rest, int64_t k) {
  if (whole.loss.size() != size_t(kSteps) || first.loss.size() != size_t(k) || rest.loss.size() != size_t(kSteps - k))
    return fmt::format("steps run: {} whole, {} before the checkpoint, {} after", whole.loss.size(), first.loss.size(),
                       rest.loss.size());
  for (int64_t s = 0; s < kSteps; ++s) {
    const RunResult& r = s < k ? first : rest;
    const size_t i = size_t(s < k ? s : s - k), w = size_t(s);
    if (std::bit_cast<uint64_t>(r.loss[i]) != std::bit_cast<uint64_t>(whole.loss[w]))
      return fmt::format("step {}: loss {} vs {}", s, r.loss[i], whole.loss[w]);
    if (std::bit_cast<uint64_t>(r.grad_norm[i]) != std::bit_cast<uint64_t>(whole.grad_norm[w]))
      return fmt::format("step {}: gradient norm {} vs {}", s, r.grad_norm[i], whole.grad_norm[w]);
    if (std::bit_cast<uint32_t>(r.lr[i]) != std::bit_cast<uint32_t>(whole.lr[w]))
      return fmt::format("step {}: lr {} vs {}", s, r.lr[i], whole.lr[w]);
  }
  if (rest.params.size() != whole.params.size() ||
      std::memcmp(rest.params.data(), whole.params.data(), whole.params.size() * 4) != 0)
    return "the final weights differ";
  if (std::memcmp(first.params.data(), whole.params.data(), whole.params.size() * 4) == 0)
    return "the interrupted run's weights are the whole run's: the comparison is blind";
  return "";
}

}  // namespace oomb::testing
