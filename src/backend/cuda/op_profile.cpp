#include "backend/cuda/op_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/error.h"

namespace oomb::cuda {

void OpProfile::mark(const char* op, cudaStream_t s) {
  const Clock::time_point launched = Clock::now();
  const cudaError_t e = cudaStreamSynchronize(s);
  OOMB_CHECK(e == cudaSuccess, "{}: CUDA error: {}", op, cudaGetErrorString(e));
  const Clock::time_point done = Clock::now();
  Row& r = rows_[op];
  r.calls += 1;
  r.host_s += std::chrono::duration<double>(launched - last_).count();
  r.gpu_s += std::chrono::duration<double>(done - launched).count();
  last_ = done;
}

void OpProfile::print() const {
  std::vector<std::pair<std::string, Row>> rows(rows_.begin(), rows_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.gpu_s > b.second.gpu_s; });
  double gpu = 0, host = 0;
  for (const auto& [op, r] : rows) gpu += r.gpu_s, host += r.host_s;
  std::string out = fmt::format(
      "oomb CUDA op profile (OOMB_CUDA_PROFILE: the stream synchronised after every op): GPU {:.3f} s, host "
      "{:.3f} s\n| op | calls | GPU s | GPU share | mean GPU ms | host s |\n|---|---|---|---|---|---|\n",
      gpu, host);
  for (const auto& [op, r] : rows)
    out += fmt::format("| {} | {} | {:.3f} | {:.1f}% | {:.3f} | {:.3f} |\n", op, r.calls, r.gpu_s,
                       gpu > 0 ? 100.0 * r.gpu_s / gpu : 0.0, 1e3 * r.gpu_s / double(r.calls), r.host_s);
  std::fputs(out.c_str(), stderr);
}

}  // namespace oomb::cuda
