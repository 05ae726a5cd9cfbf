#include "backend/cuda/op_profile.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"

namespace oomb::cuda {

void OpProfile::mark(const char* op, cudaStream_t s, double flops) {
  const Clock::time_point launched = Clock::now();
  const cudaError_t e = cudaStreamSynchronize(s);
  OOMB_CHECK(e == cudaSuccess, "{}: CUDA error: {}", op, cudaGetErrorString(e));
  const Clock::time_point done = Clock::now();
  Row& r = rows_[op];
  r.calls += 1;
  r.host_s += std::chrono::duration<double>(launched - last_).count();
  r.gpu_s += std::chrono::duration<double>(done - launched).count();
  r.flops += flops;
  last_ = done;
}

namespace {

std::string rate(double flops, double s) { return flops > 0 && s > 0 ? fmt::format("{:.1f}", flops / s / 1e12) : ""; }

}  // namespace

void OpProfile::print() const {
  std::vector<std::pair<std::string, Row>> rows(rows_.begin(), rows_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.gpu_s > b.second.gpu_s; });
  // the classes: attention (every attention_* row), matmuls (the other rows that count FLOPs), the rest
  Row all, cls[3];
  for (const auto& [op, r] : rows) {
    Row& c = cls[op.starts_with("attention_") ? 0 : r.flops > 0 ? 1 : 2];
    for (Row* t : {&all, &c}) t->calls += r.calls, t->gpu_s += r.gpu_s, t->host_s += r.host_s, t->flops += r.flops;
  }
  const auto share = [&](double s) { return all.gpu_s > 0 ? 100.0 * s / all.gpu_s : 0.0; };
  std::string out = fmt::format(
      "oomb CUDA op profile (OOMB_CUDA_PROFILE: the stream synchronised after every op): GPU {:.3f} s, host "
      "{:.3f} s, {:.4g} TFLOP counted at {} TFLOP/s\n",
      all.gpu_s, all.host_s, all.flops / 1e12, rate(all.flops, all.gpu_s));
  const char* names[3] = {"attention", "matmuls", "the rest"};
  for (int i = 0; i < 3; ++i)
    out += fmt::format("  {}: {:.3f} s GPU ({:.1f}%), {:.4g} TFLOP{}\n", names[i], cls[i].gpu_s, share(cls[i].gpu_s),
                       cls[i].flops / 1e12, i < 2 ? fmt::format(" at {} TFLOP/s", rate(cls[i].flops, cls[i].gpu_s)) : "");
  out += "| op | calls | GPU s | GPU share | mean GPU ms | host s | TFLOP | TFLOP/s |\n|---|---|---|---|---|---|---|---|\n";
  for (const auto& [op, r] : rows)
    out += fmt::format("| {} | {} | {:.3f} | {:.1f}% | {:.3f} | {:.3f} | {} | {} |\n", op, r.calls, r.gpu_s,
                       share(r.gpu_s), 1e3 * r.gpu_s / double(r.calls), r.host_s,
                       r.flops > 0 ? fmt::format("{:.4g}", r.flops / 1e12) : "", rate(r.flops, r.gpu_s));
  std::fputs(out.c_str(), stderr);
  if (json_path_.empty()) return;
  nlohmann::json j = nlohmann::json::array();
  for (const auto& [op, r] : rows)
    j.push_back({{"op", op}, {"calls", r.calls}, {"gpu_s", r.gpu_s}, {"host_s", r.host_s}, {"flops", r.flops}});
  try {  // (called from the backend's destructor: a failure is reported, not thrown)
    write_file_atomic(json_path_, j.dump(1) + "\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oomb CUDA op profile: could not write %s: %s\n", json_path_.c_str(), e.what());
  }
}

}  // namespace oomb::cuda
