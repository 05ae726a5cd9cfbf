#include "model/activation_store.h"

#include <string>

#include "model/chunk_inputs.h"

namespace oomb {

namespace {
std::string g_dropped_wait;  // tests only
bool dropped(const char* which) { return !g_dropped_wait.empty() && g_dropped_wait == which; }
}  // namespace

void ActivationStore::drop_wait_for_test(const char* which) { g_dropped_wait = which ? which : ""; }

int64_t ActivationStore::device_bytes(const ModelConfig& c, int64_t C) {
  return 2 * (kMaxReads + 1) * int64_t(Arena::need(DType::F32, {C, c.hidden}));
}

ActivationStore::ActivationStore(const ModelConfig& c, Backend& be, int64_t C, int64_t arrays)
    : cfg_(c), be_(be), C_(C), arrays_(arrays), slots_(be.tier(), Tag::Activations, size_t(device_bytes(c, C))) {
  for (int s = 0; s < 2; ++s) {
    for (auto& t : rd_[s]) t = slots_.take(DType::F32, {C, c.hidden});
    wr_[s] = slots_.take(DType::F32, {C, c.hidden});
    arrived_[s] = be.new_event();
    used_[s] = be.new_event();
  }
  gone_ = be.new_event();
}

ActivationStore::~ActivationStore() { be_.synchronize(); }

void ActivationStore::begin_sequence(int64_t N) {
  const size_t need = size_t(host_bytes(cfg_, arrays_, N));
  if (host_.bytes() < need) {
    be_.synchronize();  // no copy still reads or writes the old arrays
    host_ = Buffer();   // freed first: the peak is the new arrays alone
    host_ = Buffer(home(be_.tier()), Tag::Activations, need);
  }
  N_ = N;
}

float* ActivationStore::row(int64_t array, int64_t token) const {
  return host_.as<float>() + (array * N_ + token) * cfg_.hidden;
}

void ActivationStore::begin_pass(std::span<const int64_t> chunks, std::initializer_list<int64_t> reads, int64_t write,
                                 int write_from) {
  OOMB_CHECK(N_ > 0, "activation store: a pass before begin_sequence");
  OOMB_CHECK(int64_t(reads.size()) <= kMaxReads && write < arrays_ && write_from < int(reads.size()),
             "activation store: a pass of {} reads, writing array {} of {}", reads.size(), write, arrays_);
  chunks_.assign(chunks.begin(), chunks.end());
  nreads_ = 0;
  for (int64_t r : reads) {
    OOMB_CHECK(r >= 0 && r < arrays_, "activation store: no array {} of {}", r, arrays_);
    reads_[nreads_++] = r;
  }
  write_ = write, write_from_ = write_from;
  pos_ = 0;
  if (!chunks_.empty()) fetch(0);
  if (chunks_.size() > 1) fetch(1);
}

// The reads of the chunk at position pos into its slots, once the compute stream is done with the
// slots' previous chunk and every output sent out has landed (the slots' previous one, whose slot
// may be a read's; and what this pass, or the one before, wrote into the rows read here).
void ActivationStore::fetch(size_t pos) {
  const int s = int(pos & 1);
  const ChunkSpan c = chunk_span(N_, C_, chunks_[pos]);
  const size_t bytes = size_t(c.size() * cfg_.hidden) * 4;
  be_.wait(Stream::Copy, *used_[s]);
  if (!dropped("gone")) be_.wait(Stream::Copy, *gone_);
  for (int64_t k = 0; k < nreads_; ++k) {
    be_.copy_async(rd_[s][k].data, be_.tier(), row(reads_[k], c.begin), home(be_.tier()), bytes, Stream::Copy);
    traffic_.in += int64_t(bytes);
  }
  be_.record(*arrived_[s], Stream::Copy);
}

Tensor ActivationStore::in(int k) {
  OOMB_CHECK(k < nreads_ && pos_ < chunks_.size(), "activation store: read {} of a pass of {}", k, nreads_);
  const int s = int(pos_ & 1);
  if (!dropped("in")) be_.wait(Stream::Compute, *arrived_[s]);
  return rd_[s][k].rows(0, chunk_span(N_, C_, chunks_[pos_]).size());
}

Tensor ActivationStore::out() {
  OOMB_CHECK(pos_ < chunks_.size(), "activation store: out of the pass's chunks");
  const int s = int(pos_ & 1);
  be_.wait(Stream::Compute, *arrived_[s]);  // the slot's previous output has gone out (fetch waited for it)
  const Tensor& t = write_from_ >= 0 ? rd_[s][write_from_] : wr_[s];
  return t.rows(0, chunk_span(N_, C_, chunks_[pos_]).size());
}

void ActivationStore::next() {
  OOMB_CHECK(pos_ < chunks_.size(), "activation store: next past the pass's chunks");
  const int s = int(pos_ & 1);
  be_.record(*used_[s], Stream::Compute);
  if (write_ >= 0) {
    const ChunkSpan c = chunk_span(N_, C_, chunks_[pos_]);
    const size_t bytes = size_t(c.size() * cfg_.hidden) * 4;
    be_.wait(Stream::CopyOut, *used_[s]);
    const Tensor& t = write_from_ >= 0 ? rd_[s][write_from_] : wr_[s];
    be_.copy_async(row(write_, c.begin), home(be_.tier()), t.data, be_.tier(), bytes, Stream::CopyOut);
    be_.record(*gone_, Stream::CopyOut);
    traffic_.out += int64_t(bytes);
  }
  ++pos_;
  if (pos_ + 1 < chunks_.size()) fetch(pos_ + 1);
}

}  // namespace oomb
