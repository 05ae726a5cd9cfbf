#include "kv/kv_cache.h"

#include <algorithm>
#include <string>
#include <utility>

namespace oomb {

namespace {

std::string g_dropped_wait;  // tests only
bool dropped(const char* which) { return !g_dropped_wait.empty() && g_dropped_wait == which; }

// Bytes of (T, G, D) rows in a dtype, 64-byte aligned.
size_t rows_bytes(const KVShape& s, int64_t T) { return (size_t(T) * s.row_bytes() + 63) / 64 * 64; }

}  // namespace

void KVCache::drop_wait_for_test(const char* which) { g_dropped_wait = which ? which : ""; }

int64_t KVCacheOptions::first_page(int64_t layer, int64_t begin) const {
  const int64_t w = window(layer);
  return w > 0 ? std::max<int64_t>(0, begin - w + 1) / kv.page_size : 0;
}

// Per layer, the most gradient pages alive at once. When the backward sweep (chunks from the last)
// reaches chunk t, the pages its queries read, [first_page_t, ceil(begin_t / P)), hold gradients,
// and so do the pages chunk t + 1 read that are not freed yet (those of chunk t's own tokens,
// which start its dK/dV): the union of the two ranges. Full attention: every page before the last
// chunk, pages(N - C). The layer order frees a layer's pages before the next layer's backward
// starts: the most of one layer (with --sp-head-chunks K, of one model layer: K cache layers).
int64_t KVCache::grad_pages(const KVCacheOptions& o, int64_t N, int64_t C) {
  const int64_t P = o.grad.page_size, T = (N + C - 1) / C, full = o.grad.pages_for(N - std::min(C, N));
  int64_t total = 0, layer = 0;  // layer: the model layer's so far
  auto add = [&](int64_t l, int64_t pages) {
    layer += pages;
    if ((l + 1) % o.head_chunks != 0) return;
    total = o.layer_major ? std::max(total, layer) : total + layer;
    layer = 0;
  };
  for (int64_t l = 0; l < o.grad.layers; ++l) {
    if (o.window(l) <= 0) {
      add(l, full);
      continue;
    }
    auto range = [&](int64_t t) {  // pages read by chunk t: [lo, hi)
      const int64_t begin = std::max<int64_t>(0, N - (T - t) * C);
      return std::pair<int64_t, int64_t>{o.first_page(l, begin), (begin + P - 1) / P};
    };
    int64_t most = 0;
    for (int64_t t = 0; t < T; ++t) {
      const auto [lo, hi] = range(t);
      int64_t alive = std::max<int64_t>(0, hi - lo);
      if (t + 1 < T) {
        const auto [lo1, hi1] = range(t + 1);
        alive += std::max<int64_t>(0, hi1 - std::max(lo1, hi));
      }
      most = std::max(most, alive);
    }
    add(l, most);
  }
  return total;
}

// ---- resident: every page in the backend's memory, one group of every earlier page ----
class KVCache::Resident final : public PrefixBlocks {
 public:
  explicit Resident(KVCache& c) : c_(c) {}
  void set(int64_t l, int64_t end, bool grads) {
    pages_.clear();
    for (int64_t p = c_.o_.first_page(l, end); p * c_.o_.kv.page_size < end; ++p) pages_.push_back(p);
    set_pages(l, end, grads, pages_);
  }
  void set_pages(int64_t l, int64_t end, bool grads, std::span<const int64_t> pages) {
    const int64_t P = c_.o_.kv.page_size;
    blocks_.clear();
    for (const int64_t p : pages) {
      OOMB_CHECK(p >= 0 && p * P < end, "kv cache: page {} is not before token {}", p, end);
      const int64_t rows = std::min(P, end - p * P);
      KVBlock b;
      b.k = c_.kv_.k(l, p, 0, rows);
      b.v = c_.kv_.v(l, p, 0, rows);
      if (grads) {
        c_.grad_.ensure(l, p);  // a gradient page exists once something accumulates into it
        b.dk = c_.grad_.k(l, p, 0, rows);
        b.dv = c_.grad_.v(l, p, 0, rows);
      }
      b.idx0 = p * P;
      if (c_.o_.docs) b.doc = std::as_const(c_.docs_).page(p);
      blocks_.push_back(b);
    }
  }
  int64_t groups() const override { return blocks_.empty() ? 0 : 1; }
  std::span<const KVBlock> acquire(int64_t) override { return blocks_; }
  void release(int64_t) override {}

 private:
  KVCache& c_;
  std::vector<KVBlock> blocks_;  // reused: steady-state steps do not allocate
  std::vector<int64_t> pages_;
};

// ---- streamed: pages in pinned host memory, groups through two device slots ----
class KVCache::Streamed final : public PrefixBlocks {
 public:
  explicit Streamed(KVCache& c) : c_(c), be_(c.be_) {
    for (auto* e : {&arrived_, &freed_, &staged_, &cast_done_})
      for (auto& x : *e) x = be_.new_event();
    own_in_ = be_.new_event();
    own_used_ = be_.new_event();
    gone_ = be_.new_event();
  }

  // Device buffers for groups of g pages and chunks of C tokens (kept when large enough).
  void size_for(int64_t g) {
    if (g <= group_) return;
    be_.synchronize();
    group_ = g;
    const KVCacheOptions& o = c_.o_;
    kv_slots_ = Buffer(Tier::Device, Tag::KV, 2 * size_t(g) * size_t(o.kv.page_bytes()));
    grad_slots_ = Buffer(Tier::Device, Tag::KVGrad, 2 * size_t(g) * size_t(o.grad.page_bytes()));
    if (stage_.bytes() == 0) {
      stage_ = Buffer(Tier::Device, Tag::KV, 4 * rows_bytes(o.kv, o.chunk));       // 2 x (K, V)
      own_ = Buffer(Tier::Device, Tag::KVGrad, 2 * rows_bytes(o.grad, o.chunk));  // K, V
    }
  }
  static Bytes device_bytes(const KVCacheOptions& o, int64_t g) {
    Bytes b;
    b.device_kv = 2 * g * o.kv.page_bytes() + 4 * int64_t(rows_bytes(o.kv, o.chunk));
    b.device_kv_grad = 2 * g * o.grad.page_bytes() + 2 * int64_t(rows_bytes(o.grad, o.chunk));
    return b;
  }

  void begin_pass(std::span<const int64_t> layers, int64_t end, bool grads) {
    items_.clear();
    pages_.clear();
    issued_ = cursor_ = 0;
    const int64_t np = c_.o_.kv.pages_for(end);
    for (int64_t l : layers) {
      const size_t at = pages_.size();
      for (int64_t p = c_.o_.first_page(l, end); p < np; ++p) pages_.push_back(p);
      add_items(l, at, end, grads);
    }
  }

  // Layer l's listed pages alone (sparse attention's chosen pages, ascending), in groups.
  PrefixBlocks& view_pages(int64_t l, int64_t end, bool grads, std::span<const int64_t> pages) {
    items_.clear();
    pages_.assign(pages.begin(), pages.end());
    issued_ = cursor_ = 0;
    add_items(l, 0, end, grads);
    first_ = 0;
    count_ = int64_t(items_.size());
    cursor_ = items_.size();
    return *this;
  }

  PrefixBlocks& view(int64_t l, int64_t end, bool grads) {
    const bool next_is_ours = cursor_ < items_.size() && items_[cursor_].layer == l &&
                              items_[cursor_].end == end && items_[cursor_].grads == grads;
    if (!next_is_ours && end > c_.o_.first_page(l, end) * c_.o_.kv.page_size) {  // not announced: this layer alone
      const int64_t one[] = {l};
      begin_pass(one, end, grads);
    }
    first_ = cursor_;
    const int64_t pages = end > 0 ? c_.o_.kv.pages_for(end) - c_.o_.first_page(l, end) : 0;
    count_ = (pages + group_ - 1) / group_;
    cursor_ += size_t(count_);
    return *this;
  }

  int64_t groups() const override { return count_; }

  std::span<const KVBlock> acquire(int64_t i) override {
    const size_t gi = first_ + size_t(i);
    while (issued_ < items_.size() && issued_ <= gi + 1) issue(issued_++);  // this group and the next
    const int s = int(gi % 2);
    if (!dropped("in")) be_.wait(Stream::Compute, *arrived_[s]);
    const Item& it = items_[gi];
    const KVCacheOptions& o = c_.o_;
    const int64_t P = o.kv.page_size, G = o.kv.kv_heads, D = o.kv.head_dim;
    blocks_.clear();
    for (int64_t j = 0; j < it.n; ++j) {
      const int64_t p = page(it, j), rows = std::min(P, it.end - p * P);
      KVBlock b;
      char* kp = kv_page(s, j);
      b.k = Tensor(kp, o.kv.dtype, {rows, G, D}, Tier::Device);
      b.v = Tensor(kp + size_t(P) * o.kv.row_bytes(), o.kv.dtype, {rows, G, D}, Tier::Device);
      if (it.grads) {
        char* gp = grad_page(s, j);
        b.dk = Tensor(gp, o.grad.dtype, {rows, G, D}, Tier::Device);
        b.dv = Tensor(gp + size_t(P) * o.grad.row_bytes(), o.grad.dtype, {rows, G, D}, Tier::Device);
      }
      b.idx0 = p * P;
      if (o.docs) b.doc = std::as_const(c_.docs_).page(p);
      blocks_.push_back(b);
    }
    return blocks_;
  }

  void release(int64_t i) override {
    const size_t gi = first_ + size_t(i);
    const int s = int(gi % 2);
    be_.record(*freed_[s], Stream::Compute);
    const Item& it = items_[gi];
    if (!it.grads) return;
    // the group's gradient pages go home once attention has added into them
    if (!dropped("out")) be_.wait(Stream::CopyOut, *freed_[s]);
    const int64_t P = c_.o_.kv.page_size;
    const size_t rb = c_.o_.grad.row_bytes();
    for (int64_t j = 0; j < it.n; ++j) {
      const int64_t p = page(it, j), rows = std::min(P, it.end - p * P);
      char* gp = grad_page(s, j);
      be_.copy_async(c_.grad_.k(it.layer, p, 0, rows).data, Tier::Pinned, gp, Tier::Device, size_t(rows) * rb,
                     Stream::CopyOut);
      be_.copy_async(c_.grad_.v(it.layer, p, 0, rows).data, Tier::Pinned, gp + size_t(P) * rb, Tier::Device,
                     size_t(rows) * rb, Stream::CopyOut);
      traffic_.grads_out += 2 * rows * int64_t(rb);
      set_filled(it.layer, p, std::max(filled(it.layer, p), rows));
    }
    be_.record(*gone_, Stream::CopyOut);
  }

  void write(int64_t l, int64_t t0, const Tensor& k, const Tensor& v) {
    const KVCacheOptions& o = c_.o_;
    const int64_t T = k.dim(0), G = o.kv.kv_heads, D = o.kv.head_dim;
    OOMB_CHECK(T <= o.chunk, "kv cache: {} tokens written at once, more than the chunk's {}", T, o.chunk);
    const int s = int(writes_++ % 2);
    // the copies out of this staging buffer (two writes ago) are done
    if (!dropped("write")) be_.wait(Stream::Compute, *staged_[s]);
    char* base = stage_.as<char>() + size_t(s) * 2 * rows_bytes(o.kv, o.chunk);
    Tensor ks(base, o.kv.dtype, {T, G, D}, Tier::Device), vs(base + rows_bytes(o.kv, o.chunk), o.kv.dtype, {T, G, D},
                                                              Tier::Device);
    be_.cast(k, ks);
    be_.cast(v, vs);
    be_.record(*cast_done_[s], Stream::Compute);
    be_.wait(Stream::CopyOut, *cast_done_[s]);
    const size_t rb = o.kv.row_bytes();
    for_page_rows(o.kv.page_size, t0, T, [&](int64_t p, int64_t r, int64_t i, int64_t len) {
      c_.kv_.ensure(l, p, false);  // every row is written before it is read
      be_.copy_async(c_.kv_.k(l, p, r, len).data, Tier::Pinned, ks.rows(i, len).data, Tier::Device, size_t(len) * rb,
                     Stream::CopyOut);
      be_.copy_async(c_.kv_.v(l, p, r, len).data, Tier::Pinned, vs.rows(i, len).data, Tier::Device, size_t(len) * rb,
                     Stream::CopyOut);
      traffic_.kv_out += 2 * len * int64_t(rb);
    });
    be_.record(*staged_[s], Stream::CopyOut);
    be_.record(*gone_, Stream::CopyOut);
  }

  void own_grads(int64_t l, int64_t t0, Tensor& dk, Tensor& dv) {
    const KVCacheOptions& o = c_.o_;
    const int64_t T = dk.dim(0), G = o.grad.kv_heads, D = o.grad.head_dim;
    OOMB_CHECK(T <= o.chunk, "kv cache: {} tokens read at once, more than the chunk's {}", T, o.chunk);
    Tensor gk(own_.data(), o.grad.dtype, {T, G, D}, Tier::Device),
        gv(own_.as<char>() + rows_bytes(o.grad, o.chunk), o.grad.dtype, {T, G, D}, Tier::Device);
    be_.wait(Stream::Copy, *own_used_);  // the previous layer's cast out of the staging is done
    if (!dropped("gone")) be_.wait(Stream::Copy, *gone_);  // the gradient rows sent home have landed
    const size_t rb = o.grad.row_bytes();
    for_page_rows(o.grad.page_size, t0, T, [&](int64_t p, int64_t r, int64_t i, int64_t len) {
      // the rows a later chunk's prefix sent home (the page's first `filled` rows); the rest hold
      // nothing yet (a page is read from its first row, and a pooled page's other rows are stale)
      const int64_t held = std::clamp(filled(l, p) - r, int64_t(0), len);
      for (auto [dst, k] : {std::pair{gk.rows(i, len).data, true}, std::pair{gv.rows(i, len).data, false}}) {
        if (held > 0) {
          const Tensor src = k ? c_.grad_.k(l, p, r, held) : c_.grad_.v(l, p, r, held);
          be_.copy_async(dst, Tier::Device, src.data, Tier::Pinned, size_t(held) * rb, Stream::Copy);
          traffic_.grads_in += held * int64_t(rb);
        }
        if (held < len)  // nothing was accumulated for these tokens
          be_.fill_zero_async(static_cast<char*>(dst) + size_t(held) * rb, size_t(len - held) * rb, Stream::Copy);
      }
    });
    be_.record(*own_in_, Stream::Copy);
    if (!dropped("own")) be_.wait(Stream::Compute, *own_in_);
    be_.cast(gk, dk);
    be_.cast(gv, dv);
    be_.record(*own_used_, Stream::Compute);
  }

  const KVTraffic& traffic() const { return traffic_; }

  void finish() {
    be_.synchronize();
    filled_.clear();
    items_.clear();
    issued_ = cursor_ = 0;
    first_ = 0;
    count_ = 0;
  }

 private:
  struct Item {
    int64_t layer, off, n, end;  // pages pages_[off, off + n) (ascending) of tokens [0, end)
    bool grads;
  };
  int64_t page(const Item& it, int64_t j) const { return pages_[size_t(it.off + j)]; }

  // The rows of gradient page (l, p) that hold sums sent home (a prefix of the page: 0 for a page
  // absent or just acquired); and that count, set or raised.
  int64_t filled(int64_t l, int64_t p) const {
    if (!c_.grad_.has(l, p) || size_t(l) >= filled_.size() || size_t(p) >= filled_[size_t(l)].size()) return 0;
    return filled_[size_t(l)][size_t(p)];
  }
  void set_filled(int64_t l, int64_t p, int64_t rows) {
    if (filled_.size() <= size_t(l)) filled_.resize(size_t(l) + 1);
    std::vector<int64_t>& f = filled_[size_t(l)];
    if (f.size() <= size_t(p)) f.resize(size_t(p) + 1, 0);
    f[size_t(p)] = rows;
  }

  // Items of layer l for the pages listed from pages_[at] on, in groups of group_ pages.
  void add_items(int64_t l, size_t at, int64_t end, bool grads) {
    const int64_t n = int64_t(pages_.size() - at), P = c_.o_.kv.page_size;
    for (int64_t i = at; i < int64_t(at) + n; ++i)
      OOMB_CHECK(pages_[size_t(i)] >= 0 && pages_[size_t(i)] * P < end, "kv cache: page {} is not before token {}",
                 pages_[size_t(i)], end);
    for (int64_t j = 0; j < n; j += group_) items_.push_back({l, int64_t(at) + j, std::min(group_, n - j), end, grads});
  }

  char* kv_page(int s, int64_t j) const {
    return kv_slots_.as<char>() + (size_t(s) * size_t(group_) + size_t(j)) * size_t(c_.o_.kv.page_bytes());
  }
  char* grad_page(int s, int64_t j) const {
    return grad_slots_.as<char>() + (size_t(s) * size_t(group_) + size_t(j)) * size_t(c_.o_.grad.page_bytes());
  }

  // Item k's pages into slot k % 2, once the slot's previous group is done with it.
  void issue(size_t k) {
    const int s = int(k % 2);
    const Item& it = items_[k];
    be_.wait(Stream::Copy, *freed_[s]);
    // what went home has landed: the pages' K/V and gradient rows read below, and the slot's gradient
    // pages (its group before last's, going out) before they are overwritten
    if (!dropped("gone")) be_.wait(Stream::Copy, *gone_);
    const int64_t P = c_.o_.kv.page_size;
    const size_t rb = c_.o_.kv.row_bytes(), grb = c_.o_.grad.row_bytes();
    for (int64_t j = 0; j < it.n; ++j) {
      const int64_t p = page(it, j), rows = std::min(P, it.end - p * P);
      char* kp = kv_page(s, j);
      be_.copy_async(kp, Tier::Device, c_.kv_.k(it.layer, p, 0, rows).data, Tier::Pinned, size_t(rows) * rb,
                     Stream::Copy);
      be_.copy_async(kp + size_t(P) * rb, Tier::Device, c_.kv_.v(it.layer, p, 0, rows).data, Tier::Pinned,
                     size_t(rows) * rb, Stream::Copy);
      traffic_.kv_in += 2 * rows * int64_t(rb);
      if (!it.grads) continue;
      char* gp = grad_page(s, j);
      if (c_.grad_.ensure(it.layer, p, false)) set_filled(it.layer, p, 0);  // a new gradient page holds nothing
      // its rows that hold sums come in, the rest start at zero
      const int64_t held = std::min(rows, filled(it.layer, p));
      if (held > 0) {
        be_.copy_async(gp, Tier::Device, c_.grad_.k(it.layer, p, 0, held).data, Tier::Pinned, size_t(held) * grb,
                       Stream::Copy);
        be_.copy_async(gp + size_t(P) * grb, Tier::Device, c_.grad_.v(it.layer, p, 0, held).data, Tier::Pinned,
                       size_t(held) * grb, Stream::Copy);
        traffic_.grads_in += 2 * held * int64_t(grb);
      }
      if (held < rows) {
        be_.fill_zero_async(gp + size_t(held) * grb, size_t(rows - held) * grb, Stream::Copy);
        be_.fill_zero_async(gp + size_t(P + held) * grb, size_t(rows - held) * grb, Stream::Copy);
      }
    }
    be_.record(*arrived_[s], Stream::Copy);
  }

  KVCache& c_;
  Backend& be_;
  int64_t group_ = 0;
  Buffer kv_slots_, grad_slots_, stage_, own_;
  std::unique_ptr<Event> arrived_[2], freed_[2], staged_[2], cast_done_[2], own_in_, own_used_;
  std::unique_ptr<Event> gone_;  // the last copies home (K/V written, gradient pages), on Stream::CopyOut
  std::vector<Item> items_;
  std::vector<int64_t> pages_;  // the items' pages
  size_t issued_ = 0, cursor_ = 0, first_ = 0;
  int64_t count_ = 0;
  uint64_t writes_ = 0;
  std::vector<KVBlock> blocks_;
  KVTraffic traffic_;
  std::vector<std::vector<int64_t>> filled_;  // [layer][page]: rows of the gradient page that hold sums (filled())
};

// ---- the cache ----

KVCache::KVCache(const KVCacheOptions& o, Backend& be)
    : be_(be),
      o_(o),
      kv_(o.kv, be, Tag::KV, o.offload ? Tier::Pinned : be.tier()),
      grad_(o.grad, be, Tag::KVGrad, o.offload ? Tier::Pinned : be.tier()),
      docs_(std::max<int64_t>(o.kv.page_size, 1), be),
      meta_(o.kv, be, o.score) {
  OOMB_CHECK(!o.offload || be.tier() == Tier::Device,
             "--offload kv: the {} backend has no device memory to offload from (use --device sim or cuda)",
             be.name());
  OOMB_CHECK(!o.offload || o.group >= 0, "--offload-group: must be positive, got {}", o.group);
  if (o.offload)
    streamed_ = std::make_unique<Streamed>(*this);
  else
    resident_ = std::make_unique<Resident>(*this);
}

KVCache::~KVCache() {
  if (streamed_) streamed_->finish();
}

int64_t KVCache::group_for(const KVCacheOptions& o, int64_t N) {
  const int64_t layer_pages = std::max<int64_t>(1, o.kv.pages_for(N));
  // default: groups of about 4 MiB of K/V, enough to keep each copy efficient
  int64_t g = o.group > 0 ? o.group : std::max<int64_t>(1, (int64_t(4) << 20) / o.kv.page_bytes());
  // sparse attention reads at most sparse_pages earlier pages at once: no larger group is needed
  if (o.sparse_pages > 0 && o.group <= 0) g = std::min(g, o.sparse_pages);
  return std::min(g, layer_pages);
}

KVCache::Bytes KVCache::plan(const KVCacheOptions& o, int64_t N, int64_t C, bool with_grads) {
  Bytes b;
  const int64_t L = o.kv.layers;
  b.home_kv = L * o.kv.pages_for(N) * o.kv.page_bytes();
  // full attention: the last chunk is full, so N - C tokens precede it, and their pages of every
  // layer hold gradients; a sliding window needs only the pages its chunks' windows reach
  b.home_kv_grad = with_grads ? grad_pages(o, N, C) * o.grad.page_bytes() : 0;
  if (o.offload) {
    const Bytes d = Streamed::device_bytes(o, group_for(o, N));
    b.device_kv = d.device_kv;
    b.device_kv_grad = d.device_kv_grad;
  } else {
    b.device_kv = b.home_kv;
    b.device_kv_grad = b.home_kv_grad;
  }
  if (o.docs) b.device_data = o.kv.pages_for(N) * o.kv.page_size * 4;  // document ids of every page
  return b;
}

void KVCache::begin_sequence(int64_t N, int64_t last_chunk, bool with_grads) {
  clear();
  const int64_t L = o_.kv.layers;
  kv_.reserve(L * o_.kv.pages_for(N));
  if (with_grads) grad_.reserve(grad_pages(o_, N, last_chunk));
  if (o_.docs) docs_.reserve(o_.kv.pages_for(N));
  if (o_.meta) meta_.reserve(N);
  if (streamed_) streamed_->size_for(group_for(o_, N));
}

void KVCache::clear() {
  if (streamed_) streamed_->finish();
  for (int64_t l = 0; l < o_.kv.layers; ++l) release_from(l, 0);
  docs_.clear();
}

const KVTraffic& KVCache::traffic() const {
  static const KVTraffic none;
  return streamed_ ? streamed_->traffic() : none;
}

void KVCache::begin_pass(std::span<const int64_t> layers, int64_t end, bool grads) {
  if (streamed_) streamed_->begin_pass(layers, end, grads);
}

PrefixBlocks& KVCache::prefix_pages(int64_t l, int64_t end, bool grads, std::span<const int64_t> pages) {
  if (streamed_) return streamed_->view_pages(l, end, grads, pages);
  resident_->set_pages(l, end, grads, pages);
  return *resident_;
}

PrefixBlocks& KVCache::prefix(int64_t l, int64_t end, bool grads) {
  if (streamed_) return streamed_->view(l, end, grads);
  resident_->set(l, end, grads);
  return *resident_;
}

void KVCache::write(int64_t l, int64_t t0, const Tensor& k, const Tensor& v) {
  if (o_.meta) meta_.write(l, t0, k);
  if (streamed_) return streamed_->write(l, t0, k, v);
  for (int64_t p = t0 / o_.kv.page_size; p * o_.kv.page_size < t0 + k.dim(0); ++p) kv_.ensure(l, p);
  kv_.write(l, t0, k, v);
}

void KVCache::own_grads(int64_t l, int64_t t0, Tensor& dk, Tensor& dv) {
  if (streamed_) return streamed_->own_grads(l, t0, dk, dv);
  grad_.read_into(l, t0, dk, dv);
}

void KVCache::release_from(int64_t l, int64_t first_page) {
  kv_.release_from(l, first_page);
  grad_.release_from(l, first_page);
}

}  // namespace oomb
