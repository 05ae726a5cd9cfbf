#include "model/chunk_inputs.h"

#include <algorithm>

#include "data/token_source.h"

namespace oomb {

int64_t chunk_count(int64_t N, int64_t C) { return (N + C - 1) / C; }

ChunkSpan chunk_span(int64_t N, int64_t C, int64_t t) {
  const int64_t end = N - (chunk_count(N, C) - 1 - t) * C;
  return {std::max<int64_t>(0, end - C), end};
}

// Two host copies of the four arrays: the host fills one while the other may still be uploading.
struct ChunkInputs::Stage {
  Arena arena;
  int32_t* a[2][4] = {};  // [buffer][ids, targets, pos, doc]
  std::unique_ptr<Event> uploaded[2];
  int next = 0;
};

size_t ChunkInputs::device_bytes(int64_t C, bool docs) { return (docs ? 4 : 3) * Arena::need(DType::I32, {C}); }

size_t ChunkInputs::staging_bytes(int64_t C, bool docs, Tier backend_tier) {
  return backend_tier == Tier::Host ? 0 : 2 * device_bytes(C, docs);
}

ChunkInputs::ChunkInputs(int64_t C, int32_t sep, int64_t vocab, Backend& be)
    : C_(C), sep_(sep), vocab_(vocab), be_(be), dev_(be.tier(), Tag::Data, device_bytes(C, sep >= 0)) {
  ids_ = dev_.take(DType::I32, {C});
  targets_ = dev_.take(DType::I32, {C});
  pos_ = dev_.take(DType::I32, {C});
  if (sep >= 0) doc_ = dev_.take(DType::I32, {C});
  if (be.tier() == Tier::Host) return;  // the host writes the backend's memory itself
  stage_ = std::make_unique<Stage>();
  stage_->arena = Arena(Tier::Pinned, Tag::Data, staging_bytes(C, sep >= 0, be.tier()));
  for (auto& buf : stage_->a)
    for (int i = 0; i < (sep >= 0 ? 4 : 3); ++i) buf[i] = stage_->arena.take(DType::I32, {C}).as<int32_t>();
  for (auto& e : stage_->uploaded) e = be.new_event();
}

ChunkInputs::~ChunkInputs() {
  if (stage_) be_.synchronize();
}

void ChunkInputs::begin_sequence() {
  last_id_ = -1;
  last_doc_ = 0;
}

int64_t ChunkInputs::load(const ChunkReader& read, ChunkSpan c, bool first_pass, PagedDocs& docs) {
  const int64_t n = c.size();
  int32_t* h[4] = {ids_.as<int32_t>(), targets_.as<int32_t>(), pos_.as<int32_t>(), doc_.as<int32_t>()};
  int s = 0;
  if (stage_) {  // the staging buffer's previous upload (two chunks ago) is done
    s = stage_->next;
    stage_->next ^= 1;
    be_.synchronize(*stage_->uploaded[s]);
    std::copy(std::begin(stage_->a[s]), std::end(stage_->a[s]), h);
  }
  int32_t *ids = h[0], *tg = h[1], *pos = h[2], *doc = h[3];
  host_ids_ = ids;
  read(c.begin, n, ids, tg);
  const int32_t sep = sep_;
  if (sep >= 0 && !first_pass) docs.read(c.begin, doc, n);  // derived in the forward sweep
  int64_t counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = c.begin + i;
    OOMB_CHECK(ids[i] >= 0 && ids[i] < vocab_, "input: token id {} at position {} is outside the vocabulary (size {})",
               ids[i], t, vocab_);
    OOMB_CHECK(tg[i] < vocab_, "input: target id {} at position {} is outside the vocabulary (size {})", tg[i], t,
               vocab_);
    if (sep >= 0) {
      if (first_pass) {  // the document starts at the sequence's start or after a separator
        if (t == 0 || last_id_ == sep) last_doc_ = int32_t(t);
        doc[i] = last_doc_;
        last_id_ = ids[i];
      }
      pos[i] = int32_t(t - doc[i]);
      if (!counted_target(ids[i], tg[i], sep)) tg[i] = -1;  // not across a document's end
    } else {
      pos[i] = int32_t(t);
    }
    counted += tg[i] >= 0;
  }
  if (sep >= 0 && first_pass) docs.write(c.begin, doc, n);
  if (stage_) {
    const Tensor* dst[4] = {&ids_, &targets_, &pos_, &doc_};
    for (int i = 0; i < (sep >= 0 ? 4 : 3); ++i)
      be_.copy_async(dst[i]->data, be_.tier(), h[i], Tier::Pinned, size_t(n) * 4, Stream::Compute);
    be_.record(*stage_->uploaded[s], Stream::Compute);
  }
  return counted;
}

}  // namespace oomb
