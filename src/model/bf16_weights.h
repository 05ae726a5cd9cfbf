// --precision bf16: the weight matrices the matmuls read, as a real bf16 copy of the fp32 masters
// (tag weights, 2 bytes a value): every layer's seven projections and the lm_head (the embedding
// when tied; the lookup reads the masters). Each matrix starts at a 256-byte-aligned offset
// (cuBLASLt's fastest kernels want 16-byte-aligned operands; 256 keeps every slot as aligned as
// the buffer itself). Norms and biases stay fp32: nothing multiplies them in a GEMM.
#pragma once
#include <vector>

#include "backend/backend.h"
#include "model/params.h"

namespace oomb {

class Bf16Weights {
 public:
  Bf16Weights(const ModelConfig& c, Tier tier);
  static int64_t bytes(const ModelConfig& c);  // the buffer, padding included
  // Every matrix := its master rounded to bf16 (cast, nearest even). Before each pass: the
  // optimizer moves the masters between passes.
  void sync(Backend& be, const Params& masters);

  std::vector<LayerParams> layers;  // wq, wk, wv, wo, wgate, wup, wdown (bf16); the rest empty
  Tensor lm_head;                   // (V, d) bf16

 private:
  struct Slot {
    ParamSpec master;  // the master's name, shape and place in the fp32 layout
    Tensor copy;       // its bf16 copy
  };
  static std::vector<Slot> layout(const ModelConfig& c, int64_t* bytes);
  std::vector<Slot> slots_;
  Buffer buf_;
};

}  // namespace oomb
