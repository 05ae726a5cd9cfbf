#include "backend/backend.h"

#include <algorithm>

namespace oomb {

size_t cuda_workspace_bytes(int64_t vocab, int64_t chunk) {
  constexpr size_t kGemmWorkspace = size_t(32) << 20, kTables = 2 * (size_t(1) << 20);
  const size_t tile = size_t(std::clamp<int64_t>(chunk, 1, 256));
  return tile * size_t(vocab) * 4 + tile * 12 + kGemmWorkspace + 16 + kTables;
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

}  // namespace oomb
