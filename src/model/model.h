// A decoder-only model (Llama / Qwen2 / Mistral) on one backend: full-sequence forward and backward
// with per-layer recomputation from saved layer inputs.
#pragma once
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/layer.h"
#include "model/params.h"

namespace oomb {

struct LossStats {
  double loss_sum = 0;  // summed cross-entropy over counted targets
  int64_t targets = 0;  // targets counted (ids >= 0)
  int64_t correct = 0;  // argmax hits
};

class Model {
 public:
  // Plans buffers for sequences of up to max_tokens tokens.
  Model(const ModelConfig& cfg, Backend& be, int64_t max_tokens);
  const ModelConfig& config() const { return cfg_; }
  Params& params() { return params_; }
  Params& grads() { return *grads_; }
  Backend& backend() { return be_; }
  void enable_grads();  // allocates the gradient buffer (tag grads), zeroed

  // Loss over T tokens; ids, targets: T each (targets < 0 ignored). When grads are enabled,
  // accumulates loss_scale * dLoss_sum/dparam into grads().
  LossStats forward_backward(const int32_t* ids, const int32_t* targets, int64_t T, float loss_scale);
  LossStats evaluate(const int32_t* ids, const int32_t* targets, int64_t T);

 private:
  LossStats run(const int32_t* ids, const int32_t* targets, int64_t T, float loss_scale, bool backward);

  ModelConfig cfg_;
  Backend& be_;
  int64_t max_tokens_;
  Params params_;
  std::unique_ptr<Params> grads_;
  std::vector<float> inv_freq_;
  float attention_scaling_ = 1.0f;
  Arena data_;         // ids, targets, positions (tag data)
  Arena saved_;        // layer inputs h_0..h_L and the gradient stream dh (tag activations)
  LayerPlan plan_;
  Tensor ids_, targets_, pos_, dh_, hnorm_, rstd_final_;
  std::vector<Tensor> h_;  // layers + 1 of (T, d)
};

}  // namespace oomb
