#include "backend/backend.h"

#ifdef OOMB_HAVE_CUDA
#include "backend/cuda/cuda_device.h"
#endif

#include <algorithm>

namespace oomb {

size_t cuda_pinned_workspace_bytes() { return 2 * (size_t(1) << 20); }

size_t cuda_workspace_bytes(const WorkspaceShape& s) {
  constexpr size_t kGemmWorkspace = size_t(32) << 20, kTables = 2 * (size_t(1) << 20);
  constexpr int64_t kSumChunk = int64_t(1) << 16;  // cuda::k::kSumChunk
  const size_t tile = size_t(std::clamp<int64_t>(s.scored(), 1, 256));
  // row losses and hits, the logits tile (fp32) and with bf16 matmuls its gradient as bf16, each
  // from a 256-byte boundary (cuda_backend.cpp's loss_tile); then the call's (2) f64 sums
  size_t loss = (tile * 12 + 255) / 256 * 256 + tile * size_t(s.vocab) * 4;
  if (s.bf16) loss = (loss + 255) / 256 * 256 + tile * size_t(s.vocab) * 2;
  loss += 16;
  const size_t dsum = size_t(std::max<int64_t>(s.chunk * s.heads, 1)) * 4;  // attention backward: (C, H)
  const size_t partials = size_t((s.params + kSumChunk - 1) / kSumChunk) * 8;
  const size_t rope = size_t(s.head_dim / 2) * 4;
  return loss + kGemmWorkspace + kTables + dsum + partials + rope;
}

double Backend::lm_head_xent(const Tensor& h, const Tensor& w, const Tensor& targets, float scale, Tensor* dh,
                             Tensor* dw, int64_t* correct) {
  Buffer buf(tier(), Tag::Workspace, 16);
  Tensor sums(buf.data(), DType::F64, {2}, tier());
  lm_head_xent_acc(h, w, targets, scale, dh, dw, sums);
  double host[2];
  copy(host, Tier::Host, buf.data(), tier(), 16);
  if (correct) *correct = int64_t(host[1]);
  return host[0];
}

std::unique_ptr<Backend> make_backend(const std::string& device, int64_t device_memory, int local_rank) {
  OOMB_CHECK(device_memory == 0 || device == "sim", "--device-memory: only for --device sim");
  if (device == "cpu") return make_cpu_backend();
  if (device == "sim") return make_sim_backend(device_memory);
  OOMB_CHECK(device == "cuda", "--device: '{}' is not one of cpu, sim, cuda", device);
#ifdef OOMB_HAVE_CUDA
  if (const int gpus = cuda::device_count(); gpus > 1) cuda::use_device(local_rank % gpus);
#endif
  std::string why;
  auto be = make_cuda_backend(&why);
  OOMB_CHECK(be != nullptr, "--device cuda: {}", why);
  return be;
}

}  // namespace oomb
