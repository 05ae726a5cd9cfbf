// Bytes one optimizer step moves between host and device with --offload params, for the two sweep
// orders, and the host memory each needs beyond the memory plan (issue 18; MegaTrain, ALST).
//
// chunk order (what Model runs): every pass over a chunk streams every layer through the slots:
//   the forward sweep's T passes, then per chunk of the backward sweep a recompute pass and a
//   backward pass; a pass finds the two layers the previous pass ended with still in the slots
//   only at the recompute/backward turns (exact for L >= 4 layers; fewer layers reuse more).
//   Gradients come in for every layer and chunk but the step's first (zero fills), go out for
//   every layer and chunk; the head crosses once per sequence each way (its gradients in from the
//   second sequence of an accumulated step on). Host: nothing beyond the plan.
// layer order (--sweep layer, planned, not built): each layer's weights cross once per sweep
//   (forward, backward) and its gradients once (in too from the second sequence on); each layer's
//   input for every chunk goes out in the forward sweep and comes back for the next layer and for
//   the backward, and dh of every chunk crosses between layers (out and in): (5L + 1) x N x d x 4
//   bytes of activations. Host: the L + 1 layer inputs and dh of every token, (L + 2) x N x d x 4.
#pragma once
#include <cstdint>

#include "hf/config.h"

namespace oomb {

struct SweepTraffic {
  int64_t weights = 0, grads = 0, activations = 0;  // bytes moved per optimizer step
  int64_t host_bytes = 0;                           // host memory beyond the memory plan
  int64_t total() const { return weights + grads + activations; }
};

// A step of `accum` sequences of N tokens in chunks of C.
SweepTraffic chunk_order_traffic(const ModelConfig& c, int64_t N, int64_t C, int64_t accum);
SweepTraffic layer_order_traffic(const ModelConfig& c, int64_t N, int64_t C, int64_t accum);

}  // namespace oomb
