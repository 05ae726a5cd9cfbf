// --precision bf16: the weight matrices the matmuls read, as a real bf16 copy of the fp32 masters
// (tag weights, 2 bytes a value): every layer's seven projections and the lm_head (the embedding
// when tied; the lookup reads the masters), or LoRA's adapters (every A and B; their masters,
// moments and gradients stay fp32). Each matrix starts at a 256-byte-aligned offset (cuBLASLt's
// fastest kernels want 16-byte-aligned operands; 256 keeps every slot as aligned as the buffer
// itself). Norms and biases stay fp32: nothing multiplies them in a GEMM.
#pragma once
#include <vector>

#include "backend/backend.h"
#include "model/lora.h"
#include "model/params.h"

namespace oomb {

class Bf16Weights {
 public:
  Bf16Weights(const ModelConfig& c, Tier tier);  // the base's matrices
  Bf16Weights(const ModelConfig& c, const LoraConfig& lora, Tier tier);  // LoRA's adapters
  static int64_t bytes(const ModelConfig& c);  // the buffer, padding included
  static int64_t adapter_bytes(const ModelConfig& c, const LoraConfig& lora);
  // Every matrix := its master rounded to bf16 (cast, nearest even). Before each pass: the
  // optimizer moves the masters between passes. masters: the model's Params (base), or LoRA's
  // trainable set (adapters).
  void sync(Backend& be, const Params& masters);

  // base: wq, wk, wv, wo, wgate, wup, wdown (bf16); adapters: lora[t].a and .b (bf16); the rest empty
  std::vector<LayerParams> layers;
  Tensor lm_head;                   // (V, d) bf16 (base only)

 private:
  struct Slot {
    ParamSpec master;  // the master's name, shape and place in the fp32 layout
    Tensor copy;       // its bf16 copy
  };
  static std::vector<Slot> layout(const std::vector<ParamSpec>& specs, bool tied, int64_t* bytes);
  void allocate(Tier tier, int64_t bytes);
  Tensor get(const std::string& name) const;
  std::vector<Slot> slots_;
  Buffer buf_;
};

}  // namespace oomb
