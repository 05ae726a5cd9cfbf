#include "model/sweep_plan.h"

#include "model/chunk_inputs.h"
#include "model/param_store.h"

namespace oomb {

SweepTraffic chunk_order_traffic(const ModelConfig& c, int64_t N, int64_t C, int64_t accum) {
  const int64_t T = chunk_count(N, C), L = c.layers, W = ParamStore::layer_numel(c) * 4,
                H = ParamStore::head_numel(c) * 4, kept = std::min<int64_t>(L, 2);
  // forward passes, the first recompute pass, backward passes, the later recompute passes
  const int64_t layer_copies = T * L + L + T * (L - kept) + (T - 1) * (L - kept);
  SweepTraffic s;
  for (int64_t seq = 0; seq < accum; ++seq) {
    s.weights += layer_copies * W + H;
    s.grads += (seq == 0 ? T - 1 : T) * L * W + (seq == 0 ? 0 : H);  // in
    s.grads += T * L * W + H;                                        // out
  }
  return s;
}

SweepTraffic layer_order_traffic(const ModelConfig& c, int64_t N, int64_t C, int64_t accum) {
  const int64_t L = c.layers, W = ParamStore::layer_numel(c) * 4, H = ParamStore::head_numel(c) * 4,
                act = N * c.hidden * 4;
  SweepTraffic s;
  for (int64_t seq = 0; seq < accum; ++seq) {
    s.weights += 2 * L * W + H;
    s.grads += (seq == 0 ? 0 : L * W + H) + L * W + H;
    s.activations += (5 * L + 1) * act;
  }
  s.host_bytes = (L + 2) * act;
  return s;
}

}  // namespace oomb
