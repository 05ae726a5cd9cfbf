#include "model/model.h"

#include <cmath>
#include <cstring>
#include <utility>

namespace oomb {

int64_t chunk_count(int64_t N, int64_t C) { return (N + C - 1) / C; }

ChunkSpan chunk_span(int64_t N, int64_t C, int64_t t) {
  const int64_t end = N - (chunk_count(N, C) - 1 - t) * C;
  return {std::max<int64_t>(0, end - C), end};
}

static KVShape kv_shape(const ModelConfig& c, const ChunkPlan& p, DType dtype) {
  return {c.layers, c.kv_heads, c.head_dim, p.page_size, dtype};
}

Model::Model(const ModelConfig& cfg, Backend& be, const ChunkPlan& plan)
    : cfg_(cfg),
      be_(be),
      plan_(plan),
      params_(cfg, be.tier(), Tag::Weights),
      kv_(kv_shape(cfg, plan, plan.kv_dtype), be, Tag::KV),
      dkv_(kv_shape(cfg, plan, plan.kv_grad_dtype), be, Tag::KVGrad),
      data_(be.tier(), Tag::Data, data_bytes(plan)),
      saved_(be.tier(), Tag::Activations, saved_bytes(cfg, plan)),
      layer_plan_(cfg, plan.chunk, be.tier()),
      docs_(std::max<int64_t>(plan.page_size, 1), be) {
  OOMB_CHECK(plan.chunk > 0, "--chunk-size: must be positive, got {}", plan.chunk);
  OOMB_CHECK(plan.page_size > 0, "--page-size: must be positive, got {}", plan.page_size);
  inv_freq_ = rope_inv_freq(cfg, &attention_scaling_);
  const int64_t C = plan.chunk;
  ids_ = data_.take(DType::I32, {C});
  targets_ = data_.take(DType::I32, {C});
  pos_ = data_.take(DType::I32, {C});
  if (plan.doc_sep >= 0) doc_ = data_.take(DType::I32, {C});
  // the host computes a chunk's ids, targets, positions and documents; a device backend gets a copy
  if (be.tier() == Tier::Host) {
    host_ = {ids_.as<int32_t>(), targets_.as<int32_t>(), pos_.as<int32_t>(), doc_.as<int32_t>()};
  } else {
    stage_ = Arena(Tier::Host, Tag::Data, data_bytes(plan));
    for (int32_t** p : {&host_.ids, &host_.targets, &host_.pos}) *p = stage_.take(DType::I32, {C}).as<int32_t>();
    if (plan.doc_sep >= 0) host_.doc = stage_.take(DType::I32, {C}).as<int32_t>();
  }
  for (int64_t l = 0; l <= cfg.layers; ++l) h_.push_back(saved_.take(DType::F32, {C, cfg.hidden}));
  dh_ = saved_.take(DType::F32, {C, cfg.hidden});
  hnorm_ = saved_.take(DType::F32, {C, cfg.hidden});
  rstd_final_ = saved_.take(DType::F32, {C});
}

size_t Model::data_bytes(const ChunkPlan& p) { return (p.doc_sep >= 0 ? 4 : 3) * Arena::need(DType::I32, {p.chunk}); }

size_t Model::saved_bytes(const ModelConfig& c, const ChunkPlan& p) {
  return size_t(c.layers + 3) * Arena::need(DType::F32, {p.chunk, c.hidden}) + Arena::need(DType::F32, {p.chunk});
}

MemoryPlan plan_memory(const ModelConfig& cfg, const ChunkPlan& plan, int64_t N, const std::string& optimizer,
                       size_t workspace_bytes) {
  const int64_t P = param_count(cfg), C = std::min(plan.chunk, N);
  const KVShape kv = kv_shape(cfg, plan, plan.kv_dtype), kvg = kv_shape(cfg, plan, plan.kv_grad_dtype);
  MemoryPlan m;
  m.weights = P * 4;
  m.grads = P * 4;
  m.optimizer = optimizer == "adamw" ? 2 * P * 4 : 0;
  ChunkPlan used = plan;
  used.chunk = C;
  m.activations = LayerPlan::bytes(cfg, C) + int64_t(Model::saved_bytes(cfg, used));
  m.kv = cfg.layers * kv.pages_for(N) * kv.page_bytes();
  // the last chunk is full, so N - C tokens precede it: their pages of every layer hold gradients
  m.kv_grad = cfg.layers * kvg.pages_for(N - C) * kvg.page_bytes();
  m.workspace = int64_t(workspace_bytes);
  m.data = int64_t(Model::data_bytes(used));
  if (plan.doc_sep >= 0) m.data += kv.pages_for(N) * plan.page_size * 4;  // document ids of every page
  return m;
}

void Model::enable_grads() {
  if (!grads_) grads_ = std::make_unique<Params>(cfg_, be_.tier(), Tag::Grads);
}

LossStats Model::forward_backward(const ChunkReader& read, int64_t N, float weight) {
  OOMB_CHECK(grads_ != nullptr, "model: forward_backward needs enable_grads() first");
  return run(read, N, weight, true);
}

LossStats Model::evaluate(const ChunkReader& read, int64_t N) { return run(read, N, 1.0f, false); }

static ChunkReader array_reader(const int32_t* ids, const int32_t* targets) {
  return [=](int64_t t0, int64_t n, int32_t* i, int32_t* t) {
    std::memcpy(i, ids + t0, size_t(n) * 4);
    std::memcpy(t, targets + t0, size_t(n) * 4);
  };
}

LossStats Model::forward_backward(const int32_t* ids, const int32_t* targets, int64_t N, float weight) {
  return forward_backward(array_reader(ids, targets), N, weight);
}

LossStats Model::evaluate(const int32_t* ids, const int32_t* targets, int64_t N) {
  return evaluate(array_reader(ids, targets), N);
}

int64_t Model::load_chunk(const ChunkReader& read, ChunkSpan c, bool first_pass) {
  const int64_t n = c.end - c.begin;
  int32_t *ids = host_.ids, *tg = host_.targets, *pos = host_.pos, *doc = host_.doc;
  read(c.begin, n, ids, tg);
  const int32_t sep = plan_.doc_sep;
  if (sep >= 0 && !first_pass) docs_.read(c.begin, doc, n);  // derived in the forward sweep
  int64_t counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = c.begin + i;
    if (sep >= 0) {
      if (first_pass) {  // the document starts at the sequence's start or after a separator
        if (t == 0 || last_id_ == sep) last_doc_ = int32_t(t);
        doc[i] = last_doc_;
        last_id_ = ids[i];
      }
      pos[i] = int32_t(t - doc[i]);
      if (ids[i] == sep) tg[i] = -1;  // the next document is not predictable from this one
    } else {
      pos[i] = int32_t(t);
    }
    counted += tg[i] >= 0;
  }
  if (sep >= 0 && first_pass) docs_.write(c.begin, doc, n);
  const Tier t = be_.tier();
  be_.copy(ids_.data, t, ids, Tier::Host, size_t(n) * 4);
  be_.copy(targets_.data, t, tg, Tier::Host, size_t(n) * 4);
  be_.copy(pos_.data, t, pos, Tier::Host, size_t(n) * 4);
  if (sep >= 0) be_.copy(doc_.data, t, doc, Tier::Host, size_t(n) * 4);
  return counted;
}

void Model::logits(const int32_t* ids, int64_t N, float* out) {
  OOMB_CHECK(N > 0, "model: sequence length must be positive, got {}", N);
  const int64_t C = plan_.chunk, V = cfg_.vocab;
  Arena tile(be_.tier(), Tag::Workspace, Arena::need(DType::F32, {C, V}));
  Tensor lg = tile.take(DType::F32, {C, V});
  std::vector<int32_t> none(size_t(N), -1);
  const ChunkReader read = array_reader(ids, none.data());
  kv_.clear();
  docs_.clear();
  for (int64_t t = 0; t < chunk_count(N, C); ++t) {
    const ChunkSpan c = chunk_span(N, C, t);
    const int64_t n = c.end - c.begin;
    load_chunk(read, c, true);
    forward_layers(c, true, false);
    Tensor hn = hnorm_.rows(0, n), rstd = rstd_final_.rows(0, n), l = lg.rows(0, n);
    be_.rmsnorm_fwd(h_.back().rows(0, n), params_.final_norm, float(cfg_.rms_norm_eps), hn, rstd);
    be_.linear_fwd(hn, params_.lm_head, nullptr, l);
    be_.copy(out + c.begin * V, Tier::Host, l.data, be_.tier(), l.bytes());
  }
  kv_.clear();
  docs_.clear();
}

void Model::upload_params(const Params& host) {
  OOMB_CHECK(host.flat().numel() == params_.flat().numel(), "model: parameters of another shape");
  be_.copy(params_.flat().data, be_.tier(), host.flat().data, Tier::Host, params_.flat().bytes());
}

void Model::download_params(Params& host) const {
  OOMB_CHECK(host.flat().numel() == params_.flat().numel(), "model: parameters of another shape");
  be_.copy(host.flat().data, Tier::Host, params_.flat().data, be_.tier(), params_.flat().bytes());
}

// The layer's view of the chunk: K/V blocks of every page before the chunk (partial pages cut at
// its first token) and, when with_grads, the gradient pages they accumulate into.
LayerCtx Model::layer_ctx(int64_t l, ChunkSpan c, bool with_grads) {
  const int64_t P = plan_.page_size, n = c.end - c.begin;
  prefix_.clear();
  for (int64_t p = 0; p * P < c.begin; ++p) {
    const int64_t rows = std::min(P, c.begin - p * P);
    KVBlock b;
    b.k = kv_.k(l, p, 0, rows);
    b.v = kv_.v(l, p, 0, rows);
    if (with_grads) {
      dkv_.ensure(l, p);  // a gradient page exists once something accumulates into it
      b.dk = dkv_.k(l, p, 0, rows);
      b.dv = dkv_.v(l, p, 0, rows);
    }
    b.idx0 = p * P;
    if (plan_.doc_sep >= 0) b.doc = std::as_const(docs_).page(p);
    prefix_.push_back(b);
  }
  LayerCtx ctx{cfg_, be_, RopeTable{inv_freq_.data(), attention_scaling_}, pos_.rows(0, n),
               AttnArgs{float(1.0 / std::sqrt(double(cfg_.head_dim))), c.begin,
                        plan_.doc_sep >= 0 ? doc_.as<int32_t>() : nullptr},
               std::span<const KVBlock>(prefix_), {}};
  ctx.kv_bf16 = plan_.kv_dtype == DType::BF16;
  if (with_grads) ctx.add_kv_grad = [this, l, c](Tensor& dk, Tensor& dv) { dkv_.add_into(l, c.begin, dk, dv); };
  return ctx;
}

// Embedding and every layer of chunk c, keeping each layer's input in h_. write_kv: store each
// layer's K/V in its pages (the forward sweep); kv_only_last: the last layer stops after its K/V.
void Model::forward_layers(ChunkSpan c, bool write_kv, bool kv_only_last) {
  const int64_t n = c.end - c.begin, L = cfg_.layers;
  LayerBuffers buf = layer_plan_.view(n);
  Tensor h0 = h_[0].rows(0, n);
  be_.embedding_fwd(ids_.rows(0, n), params_.embed, h0);
  for (int64_t l = 0; l < L; ++l) {
    const LayerCtx ctx = layer_ctx(l, c, false);
    Tensor h_out = h_[size_t(l) + 1].rows(0, n);
    layer_forward(ctx, params_.layers[size_t(l)], h_[size_t(l)].rows(0, n), h_out, buf, kv_only_last && l + 1 == L);
    if (!write_kv) continue;
    for (int64_t p = c.begin / plan_.page_size; p * plan_.page_size < c.end; ++p) kv_.ensure(l, p);
    kv_.write(l, c.begin, buf.k, buf.v);
  }
}

LossStats Model::run(const ChunkReader& read, int64_t N, float weight, bool backward) {
  OOMB_CHECK(N > 0, "model: sequence length must be positive, got {}", N);
  const int64_t C = plan_.chunk, T = chunk_count(N, C), P = plan_.page_size;
  const float eps = float(cfg_.rms_norm_eps);
  kv_.clear();
  dkv_.clear();
  docs_.clear();
  LossStats st;

  // Forward sweep: fill the K/V pages chunk by chunk (with the loss too when only evaluating).
  for (int64_t t = 0; t < T; ++t) {
    const ChunkSpan c = chunk_span(N, C, t);
    const int64_t n = c.end - c.begin;
    st.targets += load_chunk(read, c, true);
    forward_layers(c, true, backward);
    if (!backward) {
      Tensor hn = hnorm_.rows(0, n), rstd = rstd_final_.rows(0, n);
      be_.rmsnorm_fwd(h_.back().rows(0, n), params_.final_norm, eps, hn, rstd);
      int64_t correct = 0;
      st.loss_sum += be_.lm_head_xent(hn, params_.lm_head, targets_.rows(0, n), 1.0f, nullptr, nullptr, &correct);
      st.correct += correct;
    }
  }
  if (!backward) {
    kv_.clear();
    docs_.clear();
    return st;
  }
  OOMB_CHECK(st.targets > 0, "model: the sequence has no targets to train on");
  const float scale = weight / float(st.targets);
  Params& g = *grads_;

  // Backward sweep, chunks in reverse.
  for (int64_t t = T - 1; t >= 0; --t) {
    const ChunkSpan c = chunk_span(N, C, t);
    const int64_t n = c.end - c.begin;
    load_chunk(read, c, false);
    forward_layers(c, false, false);  // recompute, keeping each layer's input
    LayerBuffers buf = layer_plan_.view(n);
    Tensor hn = hnorm_.rows(0, n), rstd = rstd_final_.rows(0, n), dh = dh_.rows(0, n);
    be_.rmsnorm_fwd(h_.back().rows(0, n), params_.final_norm, eps, hn, rstd);
    Tensor dhn = buf.g.da;  // (n, d) scratch, free until the layers' backward
    int64_t correct = 0;
    st.loss_sum += be_.lm_head_xent(hn, params_.lm_head, targets_.rows(0, n), scale, &dhn, &g.lm_head, &correct);
    st.correct += correct;
    be_.rmsnorm_bwd(h_.back().rows(0, n), params_.final_norm, rstd, dhn, dh, false, g.final_norm);
    const int64_t first_free = (c.begin + P - 1) / P;  // pages starting at or after the chunk
    for (int64_t l = cfg_.layers - 1; l >= 0; --l) {
      const size_t li = size_t(l);
      const LayerCtx ctx = layer_ctx(l, c, true);
      Tensor h_in = h_[li].rows(0, n), h_out = h_[li + 1].rows(0, n);
      if (l + 1 < cfg_.layers) layer_forward(ctx, params_.layers[li], h_in, h_out, buf);  // recompute internals
      layer_backward(ctx, params_.layers[li], g.layers[li], h_in, dh, buf);
      // no remaining (earlier) chunk reads these tokens' K/V or their gradients
      kv_.release_from(l, first_free);
      dkv_.release_from(l, first_free);
    }
    be_.embedding_bwd(ids_.rows(0, n), dh, g.embed);
    docs_.release_from(first_free);
  }
  return st;
}

}  // namespace oomb
