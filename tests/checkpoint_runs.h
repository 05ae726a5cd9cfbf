// Training runs interrupted by a checkpoint and resumed from it (test_checkpoint on the CPU and the
// simulated device, test_cuda_features on CUDA): kSteps optimizer steps of kAccum windows of kN
// tokens from dir/t.bin (shuffled documents), every step's loss, gradient norm and lr recorded.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/memory_plan.h"

namespace oomb::testing {

constexpr int64_t kSteps = 8, kN = 48, kAccum = 2;

struct RunResult {
  std::vector<double> loss, grad_norm;
  std::vector<float> lr;
  std::vector<float> params;             // the final weights
  std::filesystem::path checkpoint;      // written after step stop_after
};

// Trains the model of dir on `be` with `plan` (with --offload params the update runs beside the
// next step, slowed so that a checkpoint written before it ends would hold the weights before it):
// from dir's weights, or from the checkpoint `resume`; stops after step `stop_after`, writing a
// checkpoint there, under dir/ck-<label>-<optimizer>.
RunResult checkpoint_run(Backend& be, const std::string& label, const ChunkPlan& plan, const std::filesystem::path& dir,
                         const std::string& optimizer, const std::filesystem::path& resume = {},
                         int64_t stop_after = -1);

// Where the run interrupted after step k (`first`, then `rest` resumed from its checkpoint) first
// differs from the uninterrupted `whole` (a step's loss, gradient norm or lr, the final weights), or
// "" when they are the same bit for bit; also when `first`'s own weights equal the whole run's.
std::string resume_difference(const RunResult& whole, const RunResult& first, const RunResult& rest, int64_t k);

}  // namespace oomb::testing
