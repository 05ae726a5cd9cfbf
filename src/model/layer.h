// One decoder layer (pre-norm attention + SwiGLU MLP): forward, and backward from its saved input.
// Buffers for T tokens are planned once (LayerPlan); nothing is allocated per call.
#pragma once
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/params.h"

namespace oomb {

// Per-layer activations of one pass over T tokens (recomputed in backward from the layer input).
struct LayerActs {
  Tensor a, rstd1;       // attn-norm output (T, d), its rstd (T)
  Tensor q, o, lse;      // (T, H, D) after RoPE, attention output (T, H, D), (T, H)
  Tensor hmid;           // h + attention (T, d)
  Tensor b, rstd2;       // mlp-norm output (T, d), (T)
  Tensor gate, up, act;  // (T, I)
};
struct LayerGradScratch {
  Tensor dq, dattn;         // (T, H, D)
  Tensor da, db;            // (T, d)
  Tensor dgate, dup, dact;  // (T, I)
};

struct LayerBuffers {
  LayerActs acts;
  LayerGradScratch g;
  Tensor k, v;    // (T, G, D), K after RoPE
  Tensor dk, dv;  // (T, G, D)
  LayerBuffers first(int64_t T) const;  // views of the first T tokens
};

// The static plan for up to T tokens: activations (tag activations), K/V (kv), dK/dV (kv_grad).
class LayerPlan {
 public:
  LayerPlan(const ModelConfig& c, int64_t T, Tier tier);
  static int64_t activation_bytes(const ModelConfig& c, int64_t T);
  LayerBuffers view(int64_t T) const { return all_.first(T); }

 private:
  Arena act_arena_, kv_arena_, kvg_arena_;
  LayerBuffers all_;
};

struct LayerCtx {
  const ModelConfig& cfg;
  Backend& be;
  RopeTable rope;
  Tensor pos;  // (T) i32 RoPE positions
  AttnArgs attn;
  int64_t block = 64;  // tokens per KV block handed to attention
};

// h_out (T, d) = layer(h_in); fills plan.acts, plan.k, plan.v.
void layer_forward(const LayerCtx& ctx, const LayerParams& p, const Tensor& h_in, Tensor& h_out, LayerBuffers& plan);
// dh: (T, d), in = dL/dh_out, out = dL/dh_in. Needs plan.acts of the same h_in. Grads accumulate into g.
void layer_backward(const LayerCtx& ctx, const LayerParams& p, LayerParams& g, const Tensor& h_in, Tensor& dh,
                    LayerBuffers& plan);

}  // namespace oomb
