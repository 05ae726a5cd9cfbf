// LoRA with --precision bf16 on a device (frozen_base_on_host): the frozen base as the layers
// compute with it, without its fp32 masters beside it (they stay in pinned host memory). On the
// device: the weight matrices' bf16 copy (Bf16Weights) and the rest (embedding, norms, biases,
// final norm) in fp32 (a Params of those tensors), tag weights. `sync` casts the matrices on the
// host into a pinned copy of the same layout and sends it in one copy, and copies the rest; the
// model calls it when the masters may have changed (loaded or written through Model::params()).
#pragma once
#include <memory>
#include <vector>

#include "model/bf16_weights.h"

namespace oomb {

class FrozenBase {
 public:
  FrozenBase(const ModelConfig& c, Tier device);
  static std::vector<ParamSpec> rest_layout(const ModelConfig& c);  // the fp32 tensors, in HF order
  static int64_t device_bytes(const ModelConfig& c);   // the bf16 matrices and the fp32 rest
  static int64_t staging_bytes(const ModelConfig& c);  // pinned: the matrices' bf16 copy
  void sync(Backend& be, const Params& masters);       // masters: the whole model, pinned

  std::vector<LayerParams> layers;  // every base tensor: matrices bf16, the rest fp32
  Tensor embed, final_norm, lm_head;  // fp32, fp32, bf16 (the embedding's copy when tied)

 private:
  Params rest_;
  Bf16Weights dev16_, host16_;
  std::unique_ptr<Backend> host_;  // the CPU's cast, on pinned memory
};

}  // namespace oomb
