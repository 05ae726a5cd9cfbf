// Bytes one optimizer step moves between host and device, for the two sweep orders (--sweep; issue
// 18; MegaTrain, ALST), and the host memory the layer order's arrays take. Each count equals what
// the stores copy (ParamStore::traffic, ActivationStore::traffic; test_offload_params, test_sweep).
//
// chunk order: with --offload params every pass over a chunk streams every layer through the
//   slots: the forward sweep's T passes, then per chunk of the backward sweep a recompute pass and
//   a backward pass; a pass finds the two layers the previous pass ended with still in the slots
//   only at the recompute/backward turns (exact for L >= 4 layers; fewer layers reuse more).
//   Gradients come in for every layer and chunk but the step's first (zero fills), go out for
//   every layer and chunk; the head crosses once per sequence each way (its gradients in from the
//   second sequence of an accumulated step on). No activations move. Resident parameters: nothing.
// Both orders, a streamed lm_head (ParamStore::streams_head): each chunk's loss is two passes over
//   its tiles (statistics ascending, gradients descending); a pass finds its first two tiles in
//   the slots but for a sequence's first (ParamStore::head_tiles_copied); the tiles' gradients go
//   out every chunk and come in every chunk but the step's first.
// layer order (--sweep layer): each layer's weights cross once per sweep (forward, backward; the
//   backward finds the forward's last two layers in the slots) and its gradients once (in too
//   from the second sequence on). Activations: the forward sweep sends out every layer's output
//   (L x N x d x 4 bytes) and reads back every input but the embedding's (L - 1); the loss reads
//   the top array and writes dh (2); the backward reads each layer's input but the first (L - 1)
//   and dh (L) and writes dh (L - 1): 5L - 1 arrays' worth, one more when a tied head is computed
//   again at layer 0. Host: L arrays of N x d x 4 bytes (L + 1 with a tied head), in the plan.
//   (--sp P: one rank's figures, its N / P rows of the activations; sweep_traffic passes them.)
// --offload kv adds the K/V and gradient pages' traffic (kv/kv_traffic.h) to both: the same
//   pages, but the layer order's forward reads the last layer's prefix too (dense); with sparse
//   attention an upper bound, the same for both orders.
#pragma once
#include <cstdint>

#include "hf/config.h"
#include "model/memory_plan.h"

namespace oomb {

struct SweepTraffic {
  int64_t weights = 0, grads = 0, activations = 0;  // bytes moved per optimizer step
  int64_t kv = 0, kv_grads = 0;                     // K/V pages and gradient pages (--offload kv)
  bool kv_exact = true;                             // false: sparse attention's upper bound
  int64_t host_bytes = 0;                           // the layer order's host arrays (in its plan)
  int64_t total() const { return weights + grads + activations + kv + kv_grads; }
};

// A step of `accum` sequences of N tokens in chunks of C, parameters offloaded (--offload params);
// with --sp P one rank's: N / P tokens in chunks of C / P.
// bf16 (--precision bf16): the weights cross as the layers' images and the head's bf16 lm_head
// (ParamStore::layer_image_bytes, head_image_copied); gradients stay fp32.
SweepTraffic chunk_order_traffic(const ModelConfig& c, int64_t N, int64_t C, int64_t accum, bool bf16 = false);
// tied_head: recomputes_tied_head (one more array of host memory and of activations moved).
SweepTraffic layer_order_traffic(const ModelConfig& c, int64_t N, int64_t C, int64_t accum, bool tied_head,
                                 bool bf16 = false);

// The K/V pages' traffic of one sequence in an order (zero unless plan.offload_kv).
SweepTraffic kv_order_traffic(const ModelConfig& c, const ChunkPlan& plan, int64_t N, SweepOrder order);

// --offload attention's bytes for one sequence: every layer's and head group's kept output and LSE
// out in the forward sweep and in again in the backward, but the last two chunks' rows, which the
// backward finds still in their slots (model/kept_attention_offload).
int64_t kept_attention_traffic(const ModelConfig& c, const ChunkPlan& plan, int64_t N);

// The two orders' traffic for a plan (its offload_params decides whether weights move, its
// offload_kv whether pages do, its offload_attention whether the chunk order's kept outputs do), and
// --sweep auto's choice: the layer order when it moves fewer bytes and its plan fits the host
// (layer_fits_host), else the chunk order.
struct SweepChoice {
  SweepTraffic chunk, layer;
};
SweepChoice sweep_traffic(const ModelConfig& c, const ChunkPlan& plan, int64_t N);
SweepOrder choose_sweep(const SweepChoice& s, bool layer_fits_host);
const char* sweep_name(SweepOrder s);

}  // namespace oomb
