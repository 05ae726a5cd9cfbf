#include "model/kept_attention_offload.h"

#include <string>

namespace oomb {

namespace {
std::string g_dropped_wait;  // tests only
bool dropped(const char* which) { return !g_dropped_wait.empty() && g_dropped_wait == which; }
bool same(ChunkSpan a, ChunkSpan b) { return a.end > a.begin && a.begin == b.begin && a.end == b.end; }

// a slot of C rows of o (N, H, D) or lse (N, H): its bytes in an arena, and taken from one
size_t slot_bytes(const Tensor& t, int64_t C) {
  return t.ndim == 3 ? Arena::need(t.dtype, {C, t.dim(1), t.dim(2)}) : Arena::need(t.dtype, {C, t.dim(1)});
}
Tensor take_slot(Arena& a, const Tensor& t, int64_t C) {
  return t.ndim == 3 ? a.take(t.dtype, {C, t.dim(1), t.dim(2)}) : a.take(t.dtype, {C, t.dim(1)});
}
}  // namespace

void KeptAttentionOffload::drop_wait_for_test(const char* which) { g_dropped_wait = which ? which : ""; }

int64_t KeptAttentionOffload::device_bytes(std::span<const Tensor> o, std::span<const Tensor> lse, int64_t C) {
  int64_t b = 0;
  for (const Tensor& t : o) b += int64_t(slot_bytes(t, C));
  for (const Tensor& t : lse) b += int64_t(slot_bytes(t, C));
  return 2 * b;
}

KeptAttentionOffload::KeptAttentionOffload(Backend& be, std::span<const Tensor> o, std::span<const Tensor> lse,
                                           int64_t C)
    : be_(be),
      host_o_(o.begin(), o.end()),
      host_lse_(lse.begin(), lse.end()),
      C_(C),
      slots_(be.tier(), Tag::Activations, size_t(device_bytes(o, lse, C))) {
  OOMB_CHECK(o.size() == lse.size(), "--offload attention: {} outputs against {} LSEs", o.size(), lse.size());
  for (int s = 0; s < 2; ++s) {
    for (size_t a = 0; a < o.size(); ++a) {
      o_[s].push_back(take_slot(slots_, o[a], C));
      lse_[s].push_back(take_slot(slots_, lse[a], C));
    }
    arrived_[s] = be.new_event();
    used_[s] = be.new_event();
    gone_[s] = be.new_event();
  }
}

KeptAttentionOffload::~KeptAttentionOffload() { be_.synchronize(); }

ChunkSpan KeptAttentionOffload::span(size_t pos) const { return chunk_span(N_, C_, chunks_[pos]); }

void KeptAttentionOffload::begin_pass(int64_t N, std::span<const int64_t> chunks, bool write) {
  OOMB_CHECK(N > 0 && (host_o_.empty() || N <= host_o_[0].dim(0)),
             "--offload attention: a sequence of {} tokens, the store keeps {}", N,
             host_o_.empty() ? 0 : host_o_[0].dim(0));
  N_ = N;
  chunks_.assign(chunks.begin(), chunks.end());
  write_ = write;
  pos_ = 0;
  first_set_ = 0;
  if (chunks_.empty()) return;
  if (!write_) {  // the first two chunks: from their sets if they are still there, else from home
    if (same(holds_[1], span(0))) first_set_ = 1;
    for (size_t pos = 0; pos < std::min<size_t>(2, chunks_.size()); ++pos)
      if (!same(holds_[set(pos)], span(pos))) fetch(pos);
  }
  enter(0);
}

// Chunk `pos`'s rows from home into its set, once the compute stream is done with the set's previous
// chunk and everything sent home has landed (the pass reads what the forward sweep wrote).
void KeptAttentionOffload::fetch(size_t pos) {
  const int s = set(pos);
  const ChunkSpan c = span(pos);
  be_.wait(Stream::Copy, *used_[s]);
  if (last_gone_ >= 0 && !dropped("gone")) be_.wait(Stream::Copy, *gone_[last_gone_]);
  copy_rows(s, c, true);
  be_.record(*arrived_[s], Stream::Copy);
  holds_[s] = c;
}

// Chunk c's rows of every array between home and set s: in on the copy stream, or out on the copy-out stream.
void KeptAttentionOffload::copy_rows(int s, ChunkSpan c, bool in) {
  for (size_t a = 0; a < host_o_.size(); ++a)
    for (const auto& [home_of, slot_of] : {std::pair{&host_o_, &o_[s]}, {&host_lse_, &lse_[s]}}) {
      const Tensor home = (*home_of)[a].rows(c.begin, c.size()), slot = (*slot_of)[a];
      if (in) be_.copy_async(slot.data, slot.tier, home.data, home.tier, home.bytes(), Stream::Copy);
      else be_.copy_async(home.data, home.tier, slot.data, slot.tier, home.bytes(), Stream::CopyOut);
      (in ? traffic_.in : traffic_.out) += int64_t(home.bytes());
    }
}

void KeptAttentionOffload::enter(size_t pos) {
  const int s = set(pos);
  if (write_) {
    holds_[s] = {};  // (until the compute stream is done writing it)
    if (!dropped("write")) be_.wait(Stream::Compute, *gone_[s]);
  } else if (!dropped("in")) {  // (rows the forward sweep left in the set: the set's last fetch, long done)
    be_.wait(Stream::Compute, *arrived_[s]);
  }
}

void KeptAttentionOffload::check(ChunkSpan c) const {
  OOMB_CHECK(pos_ < chunks_.size() && span(pos_).begin == c.begin && span(pos_).end == c.end,
             "--offload attention: tokens [{}, {}) asked for outside the pass's current chunk", c.begin, c.end);
}

Tensor KeptAttentionOffload::o(size_t a, ChunkSpan c) const {
  check(c);
  return o_[set(pos_)][a].rows(0, c.size());
}

Tensor KeptAttentionOffload::lse(size_t a, ChunkSpan c) const {
  check(c);
  return lse_[set(pos_)][a].rows(0, c.size());
}

void KeptAttentionOffload::next() {
  OOMB_CHECK(pos_ < chunks_.size(), "--offload attention: next past the pass's chunks");
  const int s = set(pos_);
  be_.record(*used_[s], Stream::Compute);
  if (write_) {  // the chunk's rows home, once the compute stream has written them
    const ChunkSpan c = span(pos_);
    be_.wait(Stream::CopyOut, *used_[s]);
    copy_rows(s, c, false);
    be_.record(*gone_[s], Stream::CopyOut);
    last_gone_ = s;
    holds_[s] = c;
  }
  ++pos_;
  if (!write_ && pos_ + 1 < chunks_.size()) fetch(pos_ + 1);
  if (pos_ < chunks_.size()) enter(pos_);
}

}  // namespace oomb
