#include "model/model.h"

#include <cmath>
#include <cstring>

namespace oomb {

Model::Model(const ModelConfig& cfg, Backend& be, int64_t max_tokens)
    : cfg_(cfg),
      be_(be),
      max_tokens_(max_tokens),
      params_(cfg, be.tier(), Tag::Weights),
      data_(be.tier(), Tag::Data, 3 * Arena::need(DType::I32, {max_tokens})),
      saved_(be.tier(), Tag::Activations,
             size_t(cfg.layers + 3) * Arena::need(DType::F32, {max_tokens, cfg.hidden}) +
                 Arena::need(DType::F32, {max_tokens})),
      plan_(cfg, max_tokens, be.tier()) {
  OOMB_CHECK(max_tokens > 0, "model: sequence length must be positive, got {}", max_tokens);
  inv_freq_ = rope_inv_freq(cfg, &attention_scaling_);
  ids_ = data_.take(DType::I32, {max_tokens});
  targets_ = data_.take(DType::I32, {max_tokens});
  pos_ = data_.take(DType::I32, {max_tokens});
  for (int64_t l = 0; l <= cfg.layers; ++l) h_.push_back(saved_.take(DType::F32, {max_tokens, cfg.hidden}));
  dh_ = saved_.take(DType::F32, {max_tokens, cfg.hidden});
  hnorm_ = saved_.take(DType::F32, {max_tokens, cfg.hidden});
  rstd_final_ = saved_.take(DType::F32, {max_tokens});
}

void Model::enable_grads() {
  if (!grads_) grads_ = std::make_unique<Params>(cfg_, be_.tier(), Tag::Grads);
}

LossStats Model::forward_backward(const int32_t* ids, const int32_t* targets, int64_t T, float loss_scale) {
  OOMB_CHECK(grads_ != nullptr, "model: forward_backward needs enable_grads() first");
  return run(ids, targets, T, loss_scale, true);
}

LossStats Model::evaluate(const int32_t* ids, const int32_t* targets, int64_t T) {
  return run(ids, targets, T, 1.0f, false);
}

LossStats Model::run(const int32_t* ids, const int32_t* targets, int64_t T, float loss_scale, bool backward) {
  OOMB_CHECK(T > 0 && T <= max_tokens_, "model: {} tokens given, planned for 1..{}", T, max_tokens_);
  std::memcpy(ids_.data, ids, size_t(T) * 4);
  std::memcpy(targets_.data, targets, size_t(T) * 4);
  for (int64_t t = 0; t < T; ++t) pos_.as<int32_t>()[t] = int32_t(t);
  const Tensor ids_t = ids_.rows(0, T), tg = targets_.rows(0, T);
  LayerBuffers buf = plan_.view(T);
  const LayerCtx ctx{cfg_, be_, RopeTable{inv_freq_.data(), attention_scaling_}, pos_.rows(0, T),
                     AttnArgs{float(1.0 / std::sqrt(double(cfg_.head_dim))), 0, nullptr}};
  std::vector<Tensor> h(h_.size());
  for (size_t l = 0; l < h.size(); ++l) h[l] = h_[l].rows(0, T);
  Tensor dh = dh_.rows(0, T), hn = hnorm_.rows(0, T), rstd = rstd_final_.rows(0, T);

  be_.embedding_fwd(ids_t, params_.embed, h[0]);
  for (int64_t l = 0; l < cfg_.layers; ++l)
    layer_forward(ctx, params_.layers[size_t(l)], h[size_t(l)], h[size_t(l) + 1], buf);
  be_.rmsnorm_fwd(h.back(), params_.final_norm, float(cfg_.rms_norm_eps), hn, rstd);

  LossStats st;
  for (int64_t t = 0; t < T; ++t) st.targets += targets[t] >= 0;
  if (!backward) {
    st.loss_sum = be_.lm_head_xent(hn, params_.lm_head, tg, 1.0f, nullptr, nullptr, &st.correct);
    return st;
  }
  Params& g = *grads_;
  // dh starts as dL/d(final norm output), then flows back through the norm and each layer
  Tensor dhn = buf.g.da;  // (T, d) scratch, free until the last layer's backward
  st.loss_sum = be_.lm_head_xent(hn, params_.lm_head, tg, loss_scale, &dhn, &g.lm_head, &st.correct);
  be_.zero(dh);
  be_.rmsnorm_bwd(h.back(), params_.final_norm, rstd, dhn, dh, false, g.final_norm);
  for (int64_t l = cfg_.layers - 1; l >= 0; --l) {
    const size_t li = size_t(l);
    layer_forward(ctx, params_.layers[li], h[li], h[li + 1], buf);  // recompute this layer's internals
    layer_backward(ctx, params_.layers[li], g.layers[li], h[li], dh, buf);
  }
  be_.embedding_bwd(ids_t, dh, g.embed);
  return st;
}

}  // namespace oomb
