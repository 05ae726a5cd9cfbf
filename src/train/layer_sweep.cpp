// The layer-major training step (--sweep layer; issue 18, MegaTrain + ALST): the chunk order's
// arithmetic, taken layer by layer so that each layer's weights cross the host-device link once per
// pass. What one layer hands the next for every chunk lives in host memory (model/activation_store):
//   forward sweep, layer l = 0..L-1, chunks in order: h_l (the embedding's lookup for l = 0, else
//     array l-1) -> layer l (attention over the earlier pages, K/V written into pages) -> array l;
//   the loss, chunks in reverse: array L-1 -> final norm, fused lm_head + cross-entropy -> dh,
//     written over array L-1 (or into array L when the embedding is tied);
//   backward sweep, layer l = L-1..0, chunks in reverse: layer l recomputed from its input
//     (attention included; with --keep-attention its output is the forward sweep's), its backward
//     from dh (dK/dV of the pages read accumulate into gradient pages, which the later chunks of
//     the same layer filled first), dh written back for layer l-1; at layer 0 the embedding's
//     gradient. A layer's pages are freed chunk by chunk, so only one layer's gradient pages exist
//     at once.
// Every accumulation happens in the chunk order's order: a layer's weight gradients and gradient
// pages take the chunks from the last; the final norm's and lm_head's gradients and the loss sums
// take the chunks from the last in the loss pass. A tied embedding is one gradient tensor for the
// lm_head and the embedding, which the chunk order adds into alternately (chunk t's lm_head part,
// then its embedding part); here the loss pass leaves it alone and layer 0's pass computes each
// chunk's lm_head part again just before its embedding part (one more lm_head forward per chunk).
// With --sp P each rank keeps its own C / P rows of every chunk (N / P rows per array; chunks of
// C / P in the store) and runs the chunk order's all-to-alls inside each (layer, chunk), in the
// same order on every rank.
#include "train/model.h"

#include <numeric>
#include <string>

namespace oomb {

namespace {
std::string g_fault;  // tests only
}  // namespace

void Model::layer_sweep_fault_for_test(const char* which) { g_fault = which ? which : ""; }

LossStats Model::run_layer_major(const ChunkReader& read, int64_t N, float weight, int64_t per) {
  const int64_t C = plan_.chunk, T = chunk_count(N, C), P = plan_.page_size, L = cfg_.layers;
  OOMB_CHECK(N % plan_.sp == 0, "--sp {}: a sequence of {} tokens does not split evenly (--seq-len and --chunk-size "
             "must be multiples of --sp)", plan_.sp, N);
  // (the lm_head's gradient is the embedding's: a view of it, or tiles streamed into the host's)
  OOMB_CHECK(tied_head_ == (cfg_.tie_word_embeddings && store_.head_has_grad()),
             "model: the layer order's plan of the tied head does not match the gradients");
  const bool changed = sync_compute_weights();
  cache_.begin_sequence(N, std::min(C, N), true);
  if (sparse_) sparse_->begin_sequence(N, C, true);
  inputs_.begin_sequence();
  store_.begin_sequence(true, changed);
  acts_->begin_sequence(N / plan_.sp);  // this rank's rows
  be_.zero(sums_t_);
  chunks_up_.resize(size_t(T));
  std::iota(chunks_up_.begin(), chunks_up_.end(), int64_t(0));
  chunks_down_.assign(chunks_up_.rbegin(), chunks_up_.rend());
  LossStats st;
  auto layer_buffers = [&](int64_t l, ChunkSpan c) {  // (without --keep-attention every layer's buffers are one)
    LayerBuffers buf = layer_plan_.view(c.size());
    keep_attention(buf, l, c);
    return buf;
  };
  auto embedded = [&](int64_t n) {  // h_0 of this rank's rows of the loaded chunk
    Tensor h0 = h_[0].rows(0, local(n));
    embed(n, h0);
    return h0;
  };

  // Forward sweep: layer by layer, each over every chunk in order.
  store_.begin_pass(bottom_up_, false);
  for (int64_t l = 0; l < L; ++l) {
    const LayerParams& p = store_.acquire(l);
    if (l == 0) acts_->begin_pass(chunks_up_, {}, 0);
    else acts_->begin_pass(chunks_up_, {l - 1}, l);
    for (const int64_t t : chunks_up_) {
      const ChunkSpan c = chunk_span(N, C, t);
      const int64_t n = c.size();
      const int64_t counted = inputs_.load(read, c, l == 0, cache_.docs());  // documents derived once
      if (l == 0) st.targets += counted;
      const Tensor h_in = l == 0 ? embedded(n) : acts_->in(0);
      Tensor h_out = acts_->out();
      LayerBuffers buf = layer_buffers(l, c);  // (--keep-attention: attention writes into the store)
      layer_forward(layer_ctx(l, c, true, false, true), p, h_in, h_out, buf, LayerPass::Full);  // K/V written
      acts_->next();
    }
    store_.release(l);
  }
  const float scale = loss_scale(weight, per, st.targets);

  // The loss, chunks in reverse: dh of the last layer's output for every chunk.
  const int64_t top = L - 1, dh_array = tied_head_ ? L : L - 1;
  const bool head_later = tied_head_ && g_fault != "tied-head";
  acts_->begin_pass(chunks_down_, {top}, dh_array);
  for (const int64_t t : chunks_down_) {
    const ChunkSpan c = chunk_span(N, C, t);
    const int64_t n = c.size();
    inputs_.load(read, c, false, cache_.docs());
    const Tensor h = acts_->in(0), hn = final_norm(h);
    LayerBuffers buf = layer_plan_.view(n);
    Tensor dhn = buf.g.da, dh = acts_->out();
    head_loss(hn, mine(inputs_.targets(n), n), scale, &dhn, !head_later, head_later ? pass_sums_ : sums_t_);
    final_norm_bwd(h, dhn, dh, buf);
    acts_->next();
  }

  // Backward sweep: layer by layer from the top, each over every chunk in reverse.
  store_.begin_pass(top_down_, true);
  for (int64_t l = L - 1; l >= 0; --l) {
    const LayerParams& p = store_.acquire(l);
    LayerParams& g = store_.grads_of(l);
    if (l > 0) acts_->begin_pass(chunks_down_, {l - 1, dh_array}, dh_array, 1);  // dh updated in place
    else if (tied_head_) acts_->begin_pass(chunks_down_, {dh_array, top}, -1);
    else acts_->begin_pass(chunks_down_, {dh_array}, -1);
    for (const int64_t t : chunks_down_) {
      const ChunkSpan c = chunk_span(N, C, t);
      const int64_t n = c.size();
      inputs_.load(read, c, false, cache_.docs());
      const Tensor h_in = l == 0 ? embedded(n) : acts_->in(0);
      Tensor dh = acts_->in(l == 0 ? 0 : 1), scratch = h_[1].rows(0, local(n));
      LayerBuffers buf = layer_buffers(l, c);
      // recomputed from its input, attention too (--keep-attention: its output kept from the forward sweep)
      layer_forward(layer_ctx(l, c, !keeping_, false, false), p, h_in, scratch, buf,
                    keeping_ ? LayerPass::SavedAttention : LayerPass::Full);
      layer_backward(layer_ctx(l, c, true, true, false), p, g, h_in, dh, buf);
      const int64_t first_free = (c.begin + P - 1) / P;  // pages starting at or after the chunk
      release_pages(l, first_free);  // no earlier chunk reads them
      if (l == 0) {
        if (head_later) {  // the chunk's lm_head part, then its embedding part, as the chunk order adds them
          const Tensor hn = final_norm(acts_->in(1));
          head_loss(hn, mine(inputs_.targets(n), n), scale, nullptr, true, sums_t_);
        }
        embed_bwd(n, dh);
        cache_.docs().release_from(first_free);
      }
      acts_->next();
      if (t != chunks_down_.back() && g_fault != "reduce-once") store_.reduce_chunk(l);  // --zero 3: as the chunk order
    }
    store_.release(l);
  }
  read_sums(st);
  store_.end_sequence();
  cache_.clear();
  return st;
}

}  // namespace oomb
