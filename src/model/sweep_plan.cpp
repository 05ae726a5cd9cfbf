#include "model/sweep_plan.h"

#include <algorithm>
#include <utility>

#include "kv/kv_traffic.h"
#include "model/activation_store.h"
#include "model/chunk_inputs.h"
#include "model/param_store.h"

namespace oomb {

// A layer's and the head's weights as they cross: fp32, or (bf16) their images
static int64_t layer_weights(const ModelConfig& c, bool bf16) {
  return bf16 ? ParamStore::layer_image_bytes(c) : ParamStore::layer_numel(c) * 4;
}
static int64_t head_weights(const ModelConfig& c, bool bf16) {
  return bf16 ? ParamStore::head_image_copied(c) : ParamStore::device_head_numel(c, false) * 4;
}

// An embedding on the host (ParamStore::embeds_on_host): a sequence's N rows cross twice (the forward
// sweep, then the recompute before the backward, in either order) and their gradients once.
static int64_t embed_row_bytes(const ModelConfig& c, int64_t N) {
  return ParamStore::embeds_on_host(c, false) ? 2 * N * c.hidden * 4 : 0;
}
static void embed_rows(SweepTraffic& s, const ModelConfig& c, int64_t N) {
  s.weights += embed_row_bytes(c, N);
  s.grads += embed_row_bytes(c, N) / 2;
}

// A sequence of T chunks: the loss's 2 T passes over a streamed lm_head's tiles (every chunk: its
// statistics, then its gradients; 4 T when the layer order computes a tied head's part again at
// layer 0: `again`); the tiles' gradients in for every chunk but the step's first (first: zero
// fills), out for every chunk.
static void head_tiles(SweepTraffic& s, const ModelConfig& c, int64_t T, bool first_seq, bool bf16, bool again = false) {
  if (!ParamStore::streams_head(c, false)) return;
  const int64_t G = c.vocab * c.hidden * 4;
  s.weights += ParamStore::head_tiles_copied(c, (again ? 4 : 2) * T, bf16);
  s.grads += (first_seq ? T - 1 : T) * G + T * G;
}

// A sequence's layer copies in the chunk order: every chunk's forward pass (layers up), then for
// every chunk its recompute (up) and its backward (down), through the param store's two slots as
// ParamStore::begin_pass and fetch take them (a pass takes the slots alternately, starting from
// slot 1 when it holds the pass's first layer; a slot that holds its layer is not copied; the
// slots start empty each sequence). Walked rather than summed: with three layers the alternation
// finds layer 1 in its slot again, and a closed form would have to know every such case.
static int64_t chunk_order_layer_copies(int64_t L, int64_t T) {
  int64_t holds[2] = {-1, -1}, copies = 0;
  auto pass = [&](bool up) {
    const int64_t base = holds[1] == (up ? 0 : L - 1) ? 1 : 0;
    for (int64_t pos = 0; pos < L; ++pos) {
      int64_t& h = holds[(base + pos) & 1];
      const int64_t l = up ? pos : L - 1 - pos;
      if (h != l) ++copies, h = l;
    }
  };
  for (int64_t t = 0; t < T; ++t) pass(true);
  for (int64_t t = 0; t < T; ++t) pass(true), pass(false);
  return copies;
}

SweepTraffic chunk_order_traffic(const ModelConfig& c, int64_t N, int64_t C, int64_t accum, bool bf16) {
  const int64_t T = chunk_count(N, C), L = c.layers, W = ParamStore::layer_numel(c) * 4,
                H = ParamStore::device_head_numel(c, false) * 4, W16 = layer_weights(c, bf16),
                H16 = head_weights(c, bf16);
  const int64_t layer_copies = chunk_order_layer_copies(L, T);
  SweepTraffic s;
  for (int64_t seq = 0; seq < accum; ++seq) {
    s.weights += layer_copies * W16 + H16;
    s.grads += (seq == 0 ? T - 1 : T) * L * W + (seq == 0 ? 0 : H);  // in
    s.grads += T * L * W + H;                                        // out
    head_tiles(s, c, T, seq == 0, bf16);
    embed_rows(s, c, N);
  }
  return s;
}

SweepTraffic layer_order_traffic(const ModelConfig& c, int64_t N, int64_t C, int64_t accum, bool tied_head,
                                 bool bf16) {
  const int64_t L = c.layers, W = ParamStore::layer_numel(c) * 4, H = ParamStore::device_head_numel(c, false) * 4,
                act = N * c.hidden * 4, kept = std::min<int64_t>(L, 2), W16 = layer_weights(c, bf16),
                H16 = head_weights(c, bf16);
  SweepTraffic s;
  for (int64_t seq = 0; seq < accum; ++seq) {
    s.weights += (2 * L - kept) * W16 + H16;
    s.grads += (seq == 0 ? 0 : L * W + H) + L * W + H;
    s.activations += (5 * L - 1 + (tied_head ? 1 : 0)) * act;
    head_tiles(s, c, chunk_count(N, C), seq == 0, bf16, tied_head);
    embed_rows(s, c, N);
  }
  s.host_bytes = ActivationStore::host_bytes(c, ActivationStore::arrays(c, tied_head), N);
  return s;
}

SweepTraffic kv_order_traffic(const ModelConfig& c, const ChunkPlan& plan, int64_t N, SweepOrder order) {
  const int64_t C = std::min(plan.chunk, N);
  ChunkPlan p = plan;
  p.chunk = C;
  p.sweep = order;
  const KVTrafficPlan k =
      plan_kv_traffic(kv_cache_options(attention_side(c, plan.sp), p), plan.sparse, N, C, order == SweepOrder::Layer,
                      plan.keep_attention > 0);
  SweepTraffic s;
  s.kv = k.bytes.kv();
  s.kv_grads = k.bytes.grads();
  s.kv_exact = k.exact;
  return s;
}

int64_t kept_attention_traffic(const ModelConfig& c, const ChunkPlan& plan, int64_t N) {
  const ModelConfig g = attention_group(c, plan);
  const int64_t o_bytes = plan.precision == DType::BF16 ? 2 : 4;
  // every row out; back in all but the last two chunks' (still in their slots for the backward)
  const int64_t rows_in = std::max<int64_t>(0, N - 2 * plan.chunk);  // (chunk_span: the short chunk comes first)
  return c.layers * plan.head_chunks * (N + rows_in) * g.heads * (g.head_dim * o_bytes + 4);
}

SweepChoice sweep_traffic(const ModelConfig& c, const ChunkPlan& plan, int64_t N) {
  ChunkPlan layer = plan;
  layer.sweep = SweepOrder::Layer;
  const bool bf16 = plan.precision == DType::BF16;
  // (--sp P: each rank moves every layer's weights and its own N / P rows of the activations)
  SweepChoice s{chunk_order_traffic(c, N / plan.sp, plan.chunk / plan.sp, 1, bf16),
                layer_order_traffic(c, N / plan.sp, plan.chunk / plan.sp, 1, recomputes_tied_head(c, layer), bf16)};
  if (!plan.offload_params) {  // resident weights and gradients do not move
    s.chunk = {};
    s.layer.weights = s.layer.grads = 0;
  } else if (plan.lora.on() && plan.lora.train_embeddings_norms) {  // (LoRA's resident embedding stands in)
    const int64_t rows = embed_row_bytes(c, N / plan.sp);
    s.chunk.weights -= rows, s.layer.weights -= rows;
  }
  if (plan.lora.on()) s.chunk.grads = s.layer.grads = 0;  // the frozen base has none; LoRA's stay
  if (plan.offload_attention) s.chunk.activations += kept_attention_traffic(c, plan, N);
  for (auto [t, order] : {std::pair{&s.chunk, SweepOrder::Chunk}, std::pair{&s.layer, SweepOrder::Layer}}) {
    const SweepTraffic k = kv_order_traffic(c, plan, N, order);
    t->kv = k.kv;
    t->kv_grads = k.kv_grads;
    t->kv_exact = k.kv_exact;
  }
  return s;
}

SweepOrder choose_sweep(const SweepChoice& s, bool layer_fits_host) {
  return layer_fits_host && s.layer.total() < s.chunk.total() ? SweepOrder::Layer : SweepOrder::Chunk;
}

const char* sweep_name(SweepOrder s) { return s == SweepOrder::Layer ? "layer" : "chunk"; }

}  // namespace oomb
