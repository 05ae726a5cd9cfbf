// Optimizer steps run as the trainer runs them, recording every step's loss and gradients and the
// final weights and moments, and the first bit where two such runs differ (test_offload_params,
// test_sweep: runs that must be bitwise identical).
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/memory_plan.h"
#include "model/params.h"
#include "train/model.h"

namespace oomb::testing {

struct Trained {
  std::vector<double> losses;
  std::vector<std::vector<float>> grads;  // per step, before the update
  std::vector<float> weights, exp_avg, exp_avg_sq;  // after the last step
};

// n deterministic token ids < vocab (seeded); with sep >= 0 every 11th token (from the 7th) is sep,
// so that --doc-mask sees several documents.
std::vector<int32_t> step_tokens(int64_t n, uint64_t seed, int64_t vocab, int32_t sep = -1);
std::vector<float> on_host(Backend& be, const Params& p);
// With plan.lora, the adapters as PEFT starts them (A seeded, B zero) on the base loaded from dir,
// uploaded into m; nothing otherwise.
void start_lora(Model& m, const std::filesystem::path& dir, const ChunkPlan& plan);
// `steps` optimizer steps (opt: adamw or sgd; lr 2e-2, clipping at 0.5, one warmup step) of `accum`
// sequences of N tokens each, for the model in dir; with plan.lora, of the adapters (seeded A, B
// zero) on the frozen base, and `weights` are the adapters' (--lora-dropout's masks: the trainer's,
// window k accum + i at --seed 0). overlap: as the trainer, the store's
// update where the parameters allow it (Optimizer::overlap_with; --offload params), beside the next
// step, or with beside false within the step (--no-overlap-update); else the update in place.
Trained train_steps(Backend& be, const std::filesystem::path& dir, const ChunkPlan& plan, const std::string& opt,
                    int64_t N, int steps, int accum, bool overlap = true, bool beside = true);
// The host waits (Backend::host_waits: drains, waits for one event) of one optimizer step of two
// sequences of N tokens in the steady state, steps 2 and 3 of a fresh model of dir on `be` (AdamW)
// after a first step that allocates, and the accountant's allocations in those two steps.
struct WaitsPerStep {
  int64_t drains = 0, event_waits = 0, allocations = 0;
};
WaitsPerStep waits_per_step(Backend& be, const std::filesystem::path& dir, const ChunkPlan& plan, int64_t N);
// Where two runs first differ, or "" when they are bit for bit the same.
std::string difference(const Trained& a, const Trained& b);

}  // namespace oomb::testing
