#include "model/param_store.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "backend/cpu/cpu_optimizer.h"
#include "core/dtype.h"

namespace oomb {

namespace {

std::string g_dropped_wait;  // tests only
bool g_skip_reduce = false;   // tests only
bool dropped(const char* which) { return !g_dropped_wait.empty() && g_dropped_wait == which; }

constexpr Tensor LayerParams::* kLayerFields[] = {
    &LayerParams::attn_norm, &LayerParams::wq,     &LayerParams::bq,    &LayerParams::wk,
    &LayerParams::bk,        &LayerParams::wv,     &LayerParams::bv,    &LayerParams::wo,
    &LayerParams::bo,        &LayerParams::q_norm, &LayerParams::k_norm, &LayerParams::mlp_norm,
    &LayerParams::wgate,     &LayerParams::bgate,  &LayerParams::wup,   &LayerParams::bup,
    &LayerParams::wdown,     &LayerParams::bdown,  &LayerParams::attn_post_norm, &LayerParams::mlp_post_norm};

// t, which lies in a range starting at `from`, moved to the same place in a range starting at `to`.
Tensor rebase(const Tensor& t, const float* from, float* to, Tier tier) {
  if (t.empty()) return t;
  Tensor r = t;
  r.data = to + (t.f() - from);
  r.tier = tier;
  return r;
}

LayerParams rebase(const LayerParams& p, const float* from, float* to, Tier tier) {
  LayerParams r = p;
  for (auto f : kLayerFields) r.*f = rebase(p.*f, from, to, tier);
  return r;
}

}  // namespace

void ParamStore::drop_wait_for_test(const char* which) { g_dropped_wait = which ? which : ""; }
void ParamStore::skip_reduce_for_test(bool skip) { g_skip_reduce = skip; }

ParamStore::ParamStore(const ModelConfig& c, Backend& be, bool offload, bool bf16, Comm* world, int64_t chunk_rows)
    : cfg_(c),
      be_(be),
      slots_(offload || world),
      home_(home(be, offload)),
      bf16_(slots_ && bf16),
      world_(world) {
  OOMB_CHECK(!offload || be.tier() == Tier::Device,
             "--offload params: the {} backend has no device memory to offload from (use --device sim or cuda)",
             be.name());
  tile_rows_ = lm_head_vocab_tile(c.vocab);
  tiles_ = vocab_tiles(c);
  streams_ = offload && streams_head(c, world != nullptr);
  tile_slots_ = head_tile_slots(c, world != nullptr) * (offload ? 1 : 0);
  for (int s = 0; s < tile_slots_; ++s) tin_[s] = be.new_event(), tused_[s] = be.new_event();
  gout_ = be.new_event(), tout_ = be.new_event();
  chunk_rows_ = chunk_rows;
  if (!world_) return;
  OOMB_CHECK(be.tier() == Tier::Device, "--zero 3: needs a device (--device sim or cuda): the layers are gathered "
             "into the parameter store's device slots");
  const int P = world->size();
  shards_ = ParamShards::of(c, world->rank(), P);
  const std::array<int64_t, 3> n = zero3_ranges(c);
  sync_layer_ = std::make_unique<GradSync>(*world, be, n[0], 2, be.tier());
  sync_embed_ = std::make_unique<GradSync>(*world, be, n[1], 2, be.tier());
  sync_tail_ = std::make_unique<GradSync>(*world, be, n[2], 2, be.tier());
  int64_t most = 0;
  for (int64_t x : n) most = std::max(most, Shard::of(x, 0, P).block);
  if (home_ != Tier::Device) sum_ = Buffer(Tier::Host, Tag::Workspace, size_t(most) * 4);
}

void ParamStore::gather_into(float* dev, const ParamShards::Range& r, GradSync& sync) {
  if (r.size > 0) be_.copy(dev + r.mine, Tier::Device, weights_->flat().f() + r.at, home_, size_t(r.size) * 4);
  sync.gather(Tensor(dev, DType::F32, {r.n}, Tier::Device));
  traffic_.weights_in += r.n * 4;
}

void ParamStore::reduce_from(float* dev, const ParamShards::Range& r, GradSync& sync) {
  if (!g_skip_reduce) sync.reduce(Tensor(dev, DType::F32, {r.n}, Tier::Device));
  traffic_.grads_out += r.n * 4;
  if (r.size == 0) return;
  if (home_ == Tier::Device) {  // the shard += this rank's part of the sum, on the device (the same fp32 adds)
    Tensor g(grads_->flat().f() + r.at, DType::F32, {r.size}, Tier::Device);
    return be_.add(g, Tensor(dev + r.mine, DType::F32, {r.size}, Tier::Device));
  }
  be_.copy(sum_.data(), Tier::Host, dev + r.mine, Tier::Device, size_t(r.size) * 4);
  float* g = grads_->flat().f() + r.at;
  const float* x = sum_.as<float>();
  for (int64_t i = 0; i < r.size; ++i) g[i] += x[i];
}

// --zero 3 with --precision bf16: the fp32 range gathered into the gradient slot's memory (free
// while a layer arrives: the slot's last gradients are reduced and its next start at zero), then
// cast into the image the layers compute with (Backend::cast: core/dtype's rounding, as the host
// images' of one rank) on the compute stream.
void ParamStore::layer_image_from_shards(int64_t l, int64_t s) {
  OOMB_CHECK(gslots_.data() != nullptr, "--zero 3 with --precision bf16: the layers are gathered through the gradient slots; "
             "bind gradients first (training)");
  const Tier D = Tier::Device;
  float* st = gslots_.as<float>() + s * layer_numel(cfg_);
  gather_into(st, shards_.layer(l), *sync_layer_);
  char* image = wslots_.as<char>() + s * image_bytes_;
  for (const ImagePart& p : parts_) {
    const Tensor src(st + p.master, DType::F32, {p.numel}, D);
    Tensor dst(image + p.at, p.bf16 ? DType::BF16 : DType::F32, {p.numel}, D);
    if (p.bf16) be_.cast(src, dst);
    else be_.copy(dst.data, D, src.data, D, size_t(p.numel) * 4);
  }
}

// The head's image (fp32 embedding and final norm, the lm_head's bf16 copy, or the embedding's when
// tied) from the head's ranges gathered into its gradients' buffer.
void ParamStore::head_image_from_shards() {
  OOMB_CHECK(ghead_buf_.data() != nullptr, "--zero 3 with --precision bf16: the head is gathered through its gradients' "
             "buffer; bind gradients first (training)");
  const ModelConfig& c = cfg_;
  const int64_t E = c.vocab * c.hidden;
  const Tier D = Tier::Device;
  float* st = ghead_buf_.as<float>();
  gather_into(st, shards_.embed(), *sync_embed_);
  gather_into(st + E, shards_.tail(), *sync_tail_);
  char* h = whead_.as<char>();
  be_.copy(h, D, st, D, size_t(E) * 4);
  be_.copy(h + head_norm_at(c, world_ != nullptr), D, st + E, D, size_t(c.hidden) * 4);
  const Tensor lm(c.tie_word_embeddings ? st : st + E + c.hidden, DType::F32, {E}, D);
  Tensor lm16(h + head_lm_at(c, world_ != nullptr), DType::BF16, {E}, D);
  be_.cast(lm, lm16);
}

ParamStore::~ParamStore() { be_.synchronize(); }

void ParamStore::bind(Params& weights, ParamViews views) {
  weights_ = &weights;
  w_ = std::move(views);
  if (!slots_) return;
  adapters_ = w_.layers;
  const ModelConfig& c = cfg_;
  if (w_.trained) {
    OOMB_CHECK(!c.tie_word_embeddings, "--offload params with --train-embeddings-norms on tied embeddings: not "
               "supported yet (the lm_head would stream the frozen base's table, not the trained one)");
    trained_embed_ = w_.embed, trained_final_norm_ = w_.final_norm, trained_norms_ = true;
  } else if (offloaded() && embeds_on_host(c, world_ != nullptr)) {
    host_embed_ = std::make_unique<HostEmbedding>(c, be_, chunk_rows_);
    // one host table tied to a streamed lm_head: its adds after the tiles' copies back (on a GPU in
    // the layer order nothing else orders the host's adds after those copies: the compute stream,
    // not the host, waits for the next tiles; the simulated device's compute stream is the host,
    // whose waits for the next tiles order them there)
    if (streams_ && c.tie_word_embeddings) host_embed_->add_after(tout_.get());
  }
  if (world_)
    OOMB_CHECK(weights.flat().tier == home_ && weights.flat().numel() == shards_.numel,
               "param store: --zero 3's masters must be this rank's shards in {} memory", tier_name(home_));
  else if (weights.mixed())
    OOMB_CHECK(bf16_ && weights.flat().tier == Tier::Pinned &&
                   int64_t(weights.flat().bytes()) == layout_bytes(frozen_bf16_layout(c)),
               "param store: an offloaded frozen bf16 base must be the whole model in pinned memory, with --precision bf16");
  else
    OOMB_CHECK(weights.flat().tier == Tier::Pinned && weights.flat().numel() == param_count(c) &&
                   layer_offset(c, c.layers) == weights.get("model.norm.weight").f() - weights.flat().f(),
               "param store: offloaded masters must be the whole model in pinned memory, laid out embedding, layers, norm");
  mixed_ = weights.mixed();
  if (mixed_) {  // each layer is its image: image_bytes apart, from its first tensor
    const int64_t n = layer_image_bytes(c);
    for (int64_t l = 0; l < c.layers; ++l)
      OOMB_CHECK(static_cast<const char*>(weights.layers[size_t(l)].attn_norm.data) -
                         static_cast<const char*>(weights.layers[0].attn_norm.data) == l * n,
                 "param store: a frozen bf16 base's layer {} is not where its image would be", l);
  }
  if (bf16_) return bind_images();
  const Tier D = Tier::Device;
  wslots_ = Buffer(D, Tag::Weights, size_t(2 * layer_numel(c)) * 4);
  whead_ = Buffer(D, Tag::Weights, size_t(device_head_numel(c, world_ != nullptr)) * 4);
  wtiles_ = Buffer(D, Tag::Weights, size_t(tile_slots_ * tile_numel(c)) * 4);
  tile_grad_zero_.assign(size_t(tiles_), true);
  for (int s = 0; s < 2; ++s) {
    in_[s] = be_.new_event();
    used_[s] = be_.new_event();
  }
  device_views(weights, wslots_, whead_, wview_, w_);
  grad_zero_.assign(size_t(c.layers), true);
}

void ParamStore::bind_images() {
  const ModelConfig& c = cfg_;
  parts_ = image_parts(c, &image_bytes_);
  const Tier D = Tier::Device;
  wslots_ = Buffer(D, Tag::Weights, size_t(2 * image_bytes_));
  whead_ = Buffer(D, Tag::Weights, size_t(head_image_bytes(c, world_ != nullptr)));
  wtiles_ = Buffer(D, Tag::Weights, size_t(tile_slots_ * tile_numel(c)) * 2);
  tile_grad_zero_.assign(size_t(tiles_), true);
  if (!world_) himages_ = Buffer(Tier::Pinned, Tag::Weights, size_t(host_image_bytes(c, mixed_)));
  const LayerZero l0 = layer_zero(*weights_);
  // where layer 0 starts: its parts are found by their byte offsets from there (a frozen bf16
  // base's layer is laid out as its image: the parts' `at`; fp32 masters: 4 bytes a value)
  const char* layer0 = mixed_ ? static_cast<const char*>(weights_->layers[0].attn_norm.data)
                              : reinterpret_cast<const char*>(l0.base);
  for (int s = 0; s < 2 && l0.layer; ++s) {
    LayerParams& v = wview_[s];
    v = *l0.layer;
    for (auto f : kLayerFields) {
      Tensor& t = v.*f;
      if (t.empty()) continue;
      const int64_t off = static_cast<const char*>(t.data) - layer0;
      auto part = std::find_if(parts_.begin(), parts_.end(),
                               [&](const ImagePart& p) { return (mixed_ ? p.at : p.master * 4) == off; });
      OOMB_CHECK(part != parts_.end() && part->numel == t.numel(), "param store: a layer tensor {} outside the image",
                 t.shape_str());
      t.data = wslots_.as<char>() + s * image_bytes_ + part->at;
      t.dtype = part->bf16 ? DType::BF16 : DType::F32;
      t.tier = D;
    }
    in_[s] = be_.new_event();
    used_[s] = be_.new_event();
  }
  char* h = whead_.as<char>();
  const bool z3 = world_ != nullptr;
  w_ = {{}, embeds_on_host(c, z3) ? Tensor() : Tensor(h, DType::F32, {c.vocab, c.hidden}, D),
        Tensor(h + head_norm_at(c, z3), DType::F32, {c.hidden}, D),
        streams_ ? Tensor() : Tensor(h + head_lm_at(c, z3), DType::BF16, {c.vocab, c.hidden}, D)};
  grad_zero_.assign(size_t(c.layers), true);
}

// Every layer's image and the lm_head's bf16 copy from the masters (pinned host memory, no copy
// in flight): the values core/dtype's rounding gives, as Backend::cast. A frozen bf16 base's
// layers and untied lm_head are their own images: only a tied lm_head's copy is made.
void ParamStore::cast_images() {
  for (int64_t l = 0; l < cfg_.layers && !mixed_; ++l) cast_layer_image(l);
  if (mixed_ && !cfg_.tie_word_embeddings) return;
  cast_lm_image();
}

void ParamStore::cast_layer_image(int64_t l) {
  const float* m = weights_->flat().f();  // (fp32 masters only)
  char* h = himages_.as<char>();
  for (const ImagePart& p : parts_) {
    const float* src = m + layer_offset(cfg_, l) + p.master;
    char* dst = h + l * image_bytes_ + p.at;
    if (!p.bf16) {
      std::memcpy(dst, src, size_t(p.numel) * 4);
      continue;
    }
    cpu::cast_to_bf16(src, reinterpret_cast<uint16_t*>(dst), p.numel);
  }
}

void ParamStore::cast_lm_image() {
  const ModelConfig& c = cfg_;
  const float* lm = c.tie_word_embeddings ? weights_->embed.f() : weights_->lm_head.f();
  uint16_t* d16 = reinterpret_cast<uint16_t*>(const_cast<char*>(lm_image()));
  cpu::cast_to_bf16(lm, d16, c.vocab * c.hidden);
}

const char* ParamStore::layer_image(int64_t l) const {
  if (mixed_) return static_cast<const char*>(weights_->layers[size_t(l)].attn_norm.data);
  return himages_.as<char>() + l * image_bytes_;
}

const char* ParamStore::lm_image() const {
  if (mixed_) return cfg_.tie_word_embeddings ? himages_.as<char>() : static_cast<const char*>(weights_->lm_head.data);
  return himages_.as<char>() + cfg_.layers * image_bytes_;
}

// Layer 0's views as bound in `host` and where its range starts; under --zero 3, whose shards hold
// no whole tensor, those of a one-layer model's layout (vocabulary 1), which has the same offsets.
ParamStore::LayerZero ParamStore::layer_zero(const Params& host) const {
  const ModelConfig& c = cfg_;
  LayerZero z;
  if (!world_) {
    z.layer = host.layers.empty() ? nullptr : &host.layers[0];
    z.base = host.mixed() ? nullptr : host.flat().f() + layer_offset(c, 0);  // (a mixed layout: bytes, bind_images)
    return z;
  }
  ModelConfig c1 = c;
  c1.layers = 1, c1.vocab = 1;
  z.one = std::make_unique<Params>(c1, Tier::Host, Tag::IO);
  z.layer = &z.one->layers[0];
  z.base = z.one->flat().f() + layer_offset(c1, 0);
  OOMB_CHECK(layer_numel(c1) == layer_numel(c), "param store: a one-layer model's layer has {} values, not {}",
             layer_numel(c1), layer_numel(c));
  return z;
}

// The device slots' and head's views: as the masters' (rebased), or under --zero 3 from a one-layer
// model's layout (layer_zero) and the head's shapes.
void ParamStore::device_views(const Params& host, Buffer& slots, Buffer& head, LayerParams* view, ParamViews& out) {
  const ModelConfig& c = cfg_;
  const int64_t n = layer_numel(c), E = device_embed_numel(c, world_ != nullptr);
  const Tier D = Tier::Device;
  const LayerZero l0 = layer_zero(host);
  for (int s = 0; s < 2 && l0.layer; ++s) view[s] = rebase(*l0.layer, l0.base, slots.as<float>() + s * n, D);
  float* dh = head.as<float>();  // [embedding (unless on the host)][final norm][lm_head (unless tied or in tiles)]
  out = {{}, E ? Tensor(dh, DType::F32, {c.vocab, c.hidden}, D) : Tensor(), Tensor(dh + E, DType::F32, {c.hidden}, D),
         {}};
  out.lm_head = c.tie_word_embeddings ? out.embed
                : streams_         ? Tensor()  // in tiles
                                   : Tensor(dh + E + c.hidden, DType::F32, {c.vocab, c.hidden}, D);
}

void ParamStore::bind_grads(Params& grads, ParamViews views) {
  grads_ = &grads;
  g_ = std::move(views);
  // whether the lm_head has a gradient (not under LoRA): the views' (--zero 3's shards have no
  // whole tensor to view: the device's, below)
  head_grad_ = !g_.lm_head.empty();
  if (!slots_) return;
  // LoRA: the adapters' gradients, beside them (the pinned base has none)
  frozen_base_ = home_ == Tier::Pinned && grads.flat().tier == be_.tier();
  if (frozen_base_) return;
  OOMB_CHECK(grads.flat().tier == home_ && grads.flat().numel() == (world_ ? shards_.numel : param_count(cfg_)),
             "param store: the gradients must be the whole model (--zero 3: this rank's shards) in {} memory",
             tier_name(home_));
  if (world_) zero_home_grads();  // added into from the first release
  if (host_embed_) host_embed_->bind_grads(grads_->embed);
  gslots_ = Buffer(Tier::Device, Tag::Grads, size_t(2 * layer_numel(cfg_)) * 4);
  ghead_buf_ = Buffer(Tier::Device, Tag::Grads, size_t(device_head_numel(cfg_, world_ != nullptr)) * 4);
  gtiles_ = Buffer(Tier::Device, Tag::Grads, size_t(tile_slots_ * tile_numel(cfg_)) * 4);
  device_views(grads, gslots_, ghead_buf_, gview_, g_);
  if (!streams_) head_grad_ = !g_.lm_head.empty();
}

void ParamStore::zero_grads() {
  OOMB_CHECK(grads_ != nullptr, "param store: zero_grads needs gradients bound first");
  if (!slots_ || frozen_base_) return be_.zero(grads_->flat());
  if (!update_zeroes_) zero_home_grads();  // (else the overlapped update zeroes them, unit by unit)
  update_zeroes_ = false;
  grad_zero_.assign(grad_zero_.size(), true);
  tile_grad_zero_.assign(tile_grad_zero_.size(), true);
  head_grad_zero_ = true;
}

// The store's gradients from zero: in pinned memory (no copy in flight), or (--zero 3) the device's.
void ParamStore::zero_home_grads() {
  if (home_ == Tier::Device) return be_.zero(grads_->flat());
  std::memset(grads_->flat().data, 0, grads_->flat().bytes());
}

// The head's two host ranges (embedding, unless it stays on the host; final norm and lm_head) to
// or from one device range.
void ParamStore::head_copy(float* dev, Params& host, bool in) {
  const int64_t E = device_embed_numel(cfg_, world_ != nullptr), tail = device_head_numel(cfg_, world_ != nullptr) - E;
  float* h = host.flat().f();
  float* h_tail = h + cfg_.vocab * cfg_.hidden + cfg_.layers * layer_numel(cfg_);
  const Tier D = Tier::Device, P = Tier::Pinned;
  (&host == weights_ ? traffic_.weights_in : in ? traffic_.grads_in : traffic_.grads_out) += (E + tail) * 4;
  if (in) {
    if (E) be_.copy_async(dev, D, h, P, size_t(E) * 4, Stream::Copy);
    be_.copy_async(dev + E, D, h_tail, P, size_t(tail) * 4, Stream::Copy);
  } else {
    if (E) be_.copy_async(h, P, dev, D, size_t(E) * 4, Stream::Copy);
    be_.copy_async(h_tail, P, dev + E, D, size_t(tail) * 4, Stream::Copy);
  }
}

void ParamStore::embed_fwd(const Tensor& ids, const int32_t* host_ids, Tensor& out) {
  if (!trained_embed_.empty()) return be_.embedding_fwd(ids, trained_embed_, out);
  if (!host_embed_) return be_.embedding_fwd(ids, w_.embed, out);
  traffic_.weights_in += host_embed_->fwd(ids, host_ids, weights_->embed, out);
}

void ParamStore::embed_bwd(const Tensor& ids, const int32_t* host_ids, const Tensor& dout) {
  if (!host_embed_ || !trained_embed_.empty()) {  // (trained: g_ are the trainable set's, as bound)
    if (!g_.embed.empty()) be_.embedding_bwd(ids, dout, g_.embed, cfg_.pad_token_id);
    return;
  }
  if (!seq_grads_ || frozen_base_ || grads_ == nullptr) return;  // (LoRA: the embedding is frozen)
  traffic_.grads_out += host_embed_->bwd(ids, host_ids, dout);
}

std::array<ParamStore::Range, 2> ParamStore::unit_ranges(int64_t unit) const {
  const int64_t E = cfg_.vocab * cfg_.hidden, Ln = layer_numel(cfg_), L = cfg_.layers;
  const int64_t tail = E + L * Ln, lm = tail + cfg_.hidden, end = weights_->flat().numel();  // lm: the lm_head's first
  if (unit >= 1 && unit <= L) return {{{layer_offset(cfg_, unit - 1), layer_offset(cfg_, unit - 1) + Ln}, {}}};
  if (unit == 0) return {{{0, E}, {tail, lm_unit_last() ? lm : end}}};
  return {{{lm, end}, {}}};  // the streamed untied lm_head
}

int64_t ParamStore::update_unit(int64_t i) const {
  for (int64_t u = 0; u < update_units(); ++u)
    for (const Range& r : unit_ranges(u))
      if (i >= r.lo && i < r.hi) return u;
  fail("param store: offset {} is outside the masters", i);
}

void ParamStore::begin_overlapped_update(UpdateGate* gate) {
  OOMB_CHECK(can_overlap_update(), "param store: an overlapped update needs fp32 masters in pinned memory");
  gate_ = gate;
  update_casts_ = bf16_, update_zeroes_ = update_grads_ = grads_ != nullptr;
  update_cast_images_ = false;
}

// On the update's thread, in the pass that makes the masters final: a layer tensor's part of its
// layer's image, the lm_head's bf16 copy (a tied embedding's), and the gradients from zero (the
// next step's; nothing reads or adds them before the pass that waits for the unit).
ParamStore::UpdateDest ParamStore::update_dest(const ParamSpec& s) const {
  UpdateDest d{nullptr, false, update_grads_};
  if (!bf16_) return d;
  const ModelConfig& c = cfg_;
  const int64_t first = layer_offset(c, 0), Ln = layer_numel(c);
  const float* master = weights_->flat().f() + s.offset;
  if (s.offset >= first && s.offset < first + c.layers * Ln) {
    const int64_t l = (s.offset - first) / Ln, at = s.offset - layer_offset(c, l);
    const auto part = std::find_if(parts_.begin(), parts_.end(), [&](const ImagePart& p) { return p.master == at; });
    OOMB_CHECK(part != parts_.end() && part->numel == s.numel(), "param store: {} is not a part of its layer's image",
               s.name);
    d.image = himages_.as<char>() + l * image_bytes_ + part->at;
    d.image_bf16 = part->bf16;
  } else if (master == (c.tie_word_embeddings ? weights_->embed.f() : weights_->lm_head.f())) {
    d.image = const_cast<char*>(lm_image());
    d.image_bf16 = true;
  }
  return d;
}

void ParamStore::wait_update(int64_t unit, const char* which) {
  if (gate_ && !dropped(which)) gate_->wait(unit);
}

void ParamStore::begin_sequence(bool grads, bool masters_changed) {
  seq_grads_ = grads;
  if (!slots_) return;
  wait_update(0, "update-head");  // the embedding's and final norm's weights (and a whole lm_head's)
  holds_[0] = holds_[1] = -1;  // the masters may have changed
  tholds_[0] = tholds_[1] = -1;
  if (world_ && bf16_) {  // the head's ranges gathered into its gradients' buffer, then its image made there
    be_.synchronize();
    head_image_from_shards();
    OOMB_CHECK(!grads || grads_ != nullptr, "param store: a sequence with gradients needs gradients bound first");
    if (grads) be_.fill_zero_async(ghead_buf_.data(), ghead_buf_.bytes(), Stream::Compute);  // after the casts
  } else if (world_) {  // every rank's shards of the head's ranges; its gradients from zero
    const int64_t E = cfg_.vocab * cfg_.hidden;
    be_.synchronize();
    gather_into(whead_.as<float>(), shards_.embed(), *sync_embed_);
    gather_into(whead_.as<float>() + E, shards_.tail(), *sync_tail_);
    OOMB_CHECK(!grads || grads_ != nullptr, "param store: a sequence with gradients needs gradients bound first");
    if (grads) be_.fill_zero_async(ghead_buf_.data(), ghead_buf_.bytes(), Stream::Copy);
  } else if (bf16_) {  // the images cast again; the head: embedding and final norm, then the lm_head's copy
    if (update_casts_) {  // the overlapped update casts each unit's image once it is done
      update_casts_ = false, update_cast_images_ = true;
    } else if (update_cast_images_) {
      // (the masters have not moved since the update made them: no cast, whatever masters_changed says)
    } else if (masters_changed || !images_cast_) {
      wait_update(update_units() - 1, "update-all");
      cast_images(), ++image_casts_;
    }
    images_cast_ = true;
    const int64_t E = cfg_.vocab * cfg_.hidden, d = cfg_.hidden;
    char* h = whead_.as<char>();
    const Tier D = Tier::Device, P = Tier::Pinned;
    if (!embeds_on_host(cfg_, false)) be_.copy_async(h, D, weights_->embed.data, P, size_t(E) * 4, Stream::Copy);
    be_.copy_async(h + head_norm_at(cfg_, false), D, weights_->final_norm.data, P, size_t(d) * 4, Stream::Copy);
    if (!streams_)  // (no --zero 3 here)
      be_.copy_async(h + head_lm_at(cfg_, false), D, lm_image(), P, size_t(E) * 2, Stream::Copy);
    traffic_.weights_in += head_image_copied(cfg_);
  } else {
    head_copy(whead_.as<float>(), *weights_, true);
  }
  if (!world_ && grads && !frozen_base_) {
    OOMB_CHECK(grads_ != nullptr, "param store: a sequence with gradients needs gradients bound first");
    if (head_grad_zero_)
      be_.fill_zero_async(ghead_buf_.data(), ghead_buf_.bytes(), Stream::Copy);
    else
      head_copy(ghead_buf_.as<float>(), *grads_, true);
  }
  be_.record(*in_[0], Stream::Copy);
  be_.wait(Stream::Compute, *in_[0]);
}

void ParamStore::end_sequence() {
  if (!slots_) return;
  if (world_ && seq_grads_) {  // the head's gradients summed over every rank into this rank's shards
    const int64_t E = cfg_.vocab * cfg_.hidden;
    be_.synchronize();
    reduce_from(ghead_buf_.as<float>(), shards_.embed(), *sync_embed_);
    reduce_from(ghead_buf_.as<float>() + E, shards_.tail(), *sync_tail_);
    head_grad_zero_ = false;
  } else if (seq_grads_ && !frozen_base_) {
    be_.record(*used_[0], Stream::Compute);
    be_.wait(Stream::Copy, *used_[0]);
    head_copy(ghead_buf_.as<float>(), *grads_, false);
    head_grad_zero_ = false;
  }
  if (!dropped("sync")) be_.synchronize();
  if (host_embed_) host_embed_->flush();
}

int64_t ParamStore::head_tile_rows(int64_t j) const { return std::min(tile_rows_, cfg_.vocab - j * tile_rows_); }

void ParamStore::begin_head(bool descending, bool grads) {
  torder_.resize(size_t(tiles_));
  for (int64_t j = 0; j < tiles_; ++j) torder_[size_t(j)] = descending ? tiles_ - 1 - j : j;
  tpos_ = 0;
  tgrads_ = grads && head_grad_;
  OOMB_CHECK(!grads || grads_ != nullptr, "param store: the lm_head's gradients need gradients bound first");
  if (!streams_ || tiles_ == 0) return;
  const bool tied_on_host = host_embed_ && cfg_.tie_word_embeddings;
  if (tgrads_ && tied_on_host && host_embed_->pending() && !dropped("tied-order")) {  // the later chunks' embedding parts first
    host_embed_->flush();
    tile_grad_zero_.assign(tile_grad_zero_.size(), false);
  }
  tbase_ = tholds_[1] == torder_[0] ? 1 : 0;  // a slot holding the first tile keeps it
  for (size_t p = 0; p < size_t(tile_slots_); ++p) tile_fetch(p);
}

// The tile at position pos of the head's pass into its slot, once the compute stream is done with
// the slot's previous tile: its weights (unless there already) and, with gradients, the host's (or zero).
void ParamStore::tile_fetch(size_t pos) {
  const int64_t s = tile_slot(pos), j = torder_[pos], v0 = head_tile_v0(j), n = head_tile_rows(j) * cfg_.hidden;
  const Tier D = Tier::Device, P = Tier::Pinned;
  be_.wait(Stream::Copy, *tused_[s]);
  if (tholds_[s] != j) {
    wait_update(update_units() - 1, "update-lm");  // (the last unit: the lm_head's)
    const size_t es = bf16_ ? 2 : 4, bytes = size_t(n) * es;
    const char* src = bf16_ ? lm_image() + size_t(v0 * cfg_.hidden) * 2
                            : reinterpret_cast<const char*>(weights_->lm_head.f() + v0 * cfg_.hidden);
    be_.copy_async(wtiles_.as<char>() + size_t(s * tile_numel(cfg_)) * es, D, src, P, bytes, Stream::Copy);
    tholds_[s] = j;
    traffic_.weights_in += int64_t(bytes);
  }
  if (tgrads_) {  // once the slot's gradients (and this tile's, on the host) have gone out
    if (!dropped("head-out")) be_.wait(Stream::Copy, *tout_);
    float* g = gtiles_.as<float>() + s * tile_numel(cfg_);
    if (tile_grad_zero_[size_t(j)]) {
      be_.fill_zero_async(g, size_t(n) * 4, Stream::Copy);
    } else {
      be_.copy_async(g, D, grads_->lm_head.f() + v0 * cfg_.hidden, P, size_t(n) * 4, Stream::Copy);
      traffic_.grads_in += n * 4;
    }
  }
  be_.record(*tin_[s], Stream::Copy);
}

const Tensor& ParamStore::head_tile(int64_t j) {
  OOMB_CHECK(tpos_ < torder_.size() && torder_[tpos_] == j, "param store: lm_head tile {} out of the pass's order", j);
  const int64_t rows = head_tile_rows(j), d = cfg_.hidden;
  if (!streams_) return tile_w_ = w_.lm_head.rows(head_tile_v0(j), rows);
  const int64_t s = tile_slot(tpos_);
  if (!dropped("head-in")) be_.wait(Stream::Compute, *tin_[s]);
  const size_t es = bf16_ ? 2 : 4;
  return tile_w_ = Tensor(wtiles_.as<char>() + size_t(s * tile_numel(cfg_)) * es, bf16_ ? DType::BF16 : DType::F32,
                          {rows, d}, Tier::Device);
}

Tensor& ParamStore::head_grad_tile(int64_t j) {
  OOMB_CHECK(tgrads_ && tpos_ < torder_.size() && torder_[tpos_] == j,
             "param store: lm_head tile {}'s gradients outside a pass with gradients", j);
  const int64_t rows = head_tile_rows(j);
  if (!streams_) return tile_g_ = g_.lm_head.rows(head_tile_v0(j), rows);
  return tile_g_ = Tensor(gtiles_.as<float>() + tile_slot(tpos_) * tile_numel(cfg_), DType::F32, {rows, cfg_.hidden},
                          Tier::Device);
}

void ParamStore::release_head_tile(int64_t j) {
  OOMB_CHECK(tpos_ < torder_.size() && torder_[tpos_] == j, "param store: lm_head tile {} released out of order", j);
  if (streams_) {
    const int64_t s = tile_slot(tpos_), n = head_tile_rows(j) * cfg_.hidden;
    be_.record(*tused_[s], Stream::Compute);
    if (tgrads_) {  // the tile's gradients go back once the compute stream is done with them
      be_.wait(Stream::CopyOut, *tused_[s]);
      be_.copy_async(grads_->lm_head.f() + head_tile_v0(j) * cfg_.hidden, Tier::Pinned,
                     gtiles_.as<float>() + s * tile_numel(cfg_), Tier::Device, size_t(n) * 4, Stream::CopyOut);
      tile_grad_zero_[size_t(j)] = false;
      traffic_.grads_out += n * 4;
      be_.record(*tout_, Stream::CopyOut);  // (tied: the embedding's adds wait for it too)
    }
  }
  ++tpos_;
  if (streams_ && tpos_ + size_t(tile_slots_) - 1 < torder_.size()) tile_fetch(tpos_ + size_t(tile_slots_) - 1);
}

void ParamStore::begin_pass(std::span<const int64_t> order, bool grads) {
  order_.assign(order.begin(), order.end());
  pos_ = 0;
  pass_grads_ = grads;
  OOMB_CHECK(!grads || grads_ != nullptr, "param store: a pass with gradients needs gradients bound first");
  if (!slots_ || order_.empty()) return;
  base_ = holds_[1] == order_[0] ? 1 : 0;  // a slot that already holds the first layer keeps it
  fetch(0);
  if (order_.size() > 1) fetch(1);
}

// The layer at position pos of the pass into its slot, once the compute stream is done with the
// slot's previous layer: its weights (unless the slot holds them already) and, in a pass with
// gradients, what the host's gradients hold (or zero).
void ParamStore::fetch(size_t pos) {
  const int64_t s = slot(pos), l = order_[pos], n = layer_numel(cfg_);
  const size_t bytes = size_t(n) * 4;
  const Tier D = Tier::Device, P = Tier::Pinned;
  if (world_) {  // --zero 3: the layer's shards gathered once the device is done with the slot
    be_.synchronize();
    float* g = gslots_.as<float>() + s * n;
    if (holds_[s] != l && bf16_) layer_image_from_shards(l, s);
    else if (holds_[s] != l) gather_into(wslots_.as<float>() + s * n, shards_.layer(l), *sync_layer_);
    holds_[s] = l;
    if (pass_grads_) be_.fill_zero_async(g, bytes, bf16_ ? Stream::Compute : Stream::Copy);  // (bf16: after the casts)
    be_.record(*in_[s], Stream::Copy);
    return;
  }
  be_.wait(Stream::Copy, *used_[s]);
  if (holds_[s] != l) wait_update(1 + l, "update-layer");
  if (holds_[s] != l && bf16_) {  // the layer's image
    be_.copy_async(wslots_.as<char>() + s * image_bytes_, D, layer_image(l), P, size_t(image_bytes_), Stream::Copy);
    holds_[s] = l;
    traffic_.weights_in += image_bytes_;
  } else if (holds_[s] != l) {
    be_.copy_async(wslots_.as<float>() + s * n, D, weights_->flat().f() + layer_offset(cfg_, l), P, bytes, Stream::Copy);
    holds_[s] = l;
    traffic_.weights_in += int64_t(bytes);
  }
  if (pass_grads_ && !frozen_base_) {  // once the slot's gradients (and this layer's, on the host) have gone out
    if (!dropped("out")) be_.wait(Stream::Copy, *gout_);
    float* g = gslots_.as<float>() + s * n;
    if (grad_zero_[size_t(l)])
      be_.fill_zero_async(g, bytes, Stream::Copy);
    else
      be_.copy_async(g, D, grads_->flat().f() + layer_offset(cfg_, l), P, bytes, Stream::Copy), traffic_.grads_in += int64_t(bytes);
  }
  be_.record(*in_[s], Stream::Copy);
}

const LayerParams& ParamStore::acquire(int64_t l) {
  OOMB_CHECK(pos_ < order_.size() && order_[pos_] == l, "param store: layer {} acquired out of the pass's order", l);
  if (!slots_) return w_.layers[size_t(l)];
  const int64_t s = slot(pos_);
  if (!dropped("in")) be_.wait(Stream::Compute, *in_[s]);
  LayerParams& v = wview_[s];  // the slot's base tensors with this layer's adapters (LoRA)
  const LayerParams& a = adapters_[size_t(l)];
  std::copy(std::begin(a.lora), std::end(a.lora), std::begin(v.lora));
  v.lora_scale = a.lora_scale;
  if (trained_norms_) {
    v.attn_norm = a.attn_norm, v.mlp_norm = a.mlp_norm, v.q_norm = a.q_norm, v.k_norm = a.k_norm;
    v.attn_post_norm = a.attn_post_norm, v.mlp_post_norm = a.mlp_post_norm;
  }
  return v;
}

LayerParams& ParamStore::grads_of(int64_t l) {
  OOMB_CHECK(pass_grads_ && pos_ < order_.size() && order_[pos_] == l,
             "param store: layer {}'s gradients outside a pass with gradients", l);
  return slots_ && !frozen_base_ ? gview_[slot(pos_)] : g_.layers[size_t(l)];
}

void ParamStore::reduce_chunk(int64_t l) {
  OOMB_CHECK(pass_grads_ && pos_ < order_.size() && order_[pos_] == l,
             "param store: layer {}'s gradients reduced outside a pass with gradients", l);
  if (!slots_ || !world_) return;
  const int64_t n = layer_numel(cfg_);
  float* g = gslots_.as<float>() + slot(pos_) * n;
  be_.synchronize();
  reduce_from(g, shards_.layer(l), *sync_layer_);
  be_.fill_zero_async(g, size_t(n) * 4, Stream::Compute);
}

void ParamStore::release(int64_t l) {
  OOMB_CHECK(pos_ < order_.size() && order_[pos_] == l, "param store: layer {} released out of the pass's order", l);
  if (slots_ && world_ && pass_grads_) {  // --zero 3: summed over every rank into this rank's shard
    be_.synchronize();
    reduce_from(gslots_.as<float>() + slot(pos_) * layer_numel(cfg_), shards_.layer(l), *sync_layer_);
  } else if (slots_) {
    const int64_t s = slot(pos_), n = layer_numel(cfg_);
    be_.record(*used_[s], Stream::Compute);
    if (pass_grads_ && !frozen_base_) {  // the layer's gradients go back once its backward is done
      be_.wait(Stream::CopyOut, *used_[s]);
      be_.copy_async(grads_->flat().f() + layer_offset(cfg_, l), Tier::Pinned, gslots_.as<float>() + s * n,
                     Tier::Device, size_t(n) * 4, Stream::CopyOut);
      be_.record(*gout_, Stream::CopyOut);
      grad_zero_[size_t(l)] = false;
      traffic_.grads_out += n * 4;
    }
  }
  ++pos_;
  if (slots_ && pos_ + 1 < order_.size()) fetch(pos_ + 1);
}

}  // namespace oomb
