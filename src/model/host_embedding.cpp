#include "model/host_embedding.h"

#include <algorithm>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

namespace oomb {

HostEmbedding::HostEmbedding(const ModelConfig& c, Backend& be, int64_t rows)
    : be_(be), d_(c.hidden), rows_(rows), pad_(c.pad_token_id) {
  OOMB_CHECK(rows_ > 0, "param store: an embedding on the host needs the rows a chunk takes");
  rows_buf_ = Buffer(Tier::Pinned, Tag::Weights, size_t(bytes(d_, rows_, Tag::Weights)));
  for (int s = 0; s < 2; ++s) sent_[s] = be.new_event(), got_[s] = be.new_event();
}

int64_t HostEmbedding::staging_bytes(const ModelConfig& c, int64_t rows, Tag tag) { return bytes(c.hidden, rows, tag); }

int64_t HostEmbedding::bytes(int64_t d, int64_t rows, Tag tag) {
  const int64_t row = tag == Tag::Data ? 4 : d * 4;  // an id, or a row of d floats
  return tag == Tag::Weights || tag == Tag::Grads || tag == Tag::Data ? 2 * rows * row : 0;
}

void HostEmbedding::bind_grads(const Tensor& grad) {
  grad_ = grad;
  grads_buf_ = Buffer(Tier::Pinned, Tag::Grads, size_t(bytes(d_, rows_, Tag::Grads)));
  ids_buf_ = Buffer(Tier::Pinned, Tag::Data, size_t(bytes(d_, rows_, Tag::Data)));
}

int64_t HostEmbedding::fwd(const Tensor& ids, const int32_t* host_ids, const Tensor& embed, Tensor& out) {
  const int64_t n = out.dim(0);
  OOMB_CHECK(ids.numel() == n && n <= rows_ && out.dtype == DType::F32 && out.dim(1) == d_,
             "param store: embed_fwd of {} ids into {} (at most {} rows of {})", ids.numel(), out.shape_str(), rows_,
             d_);
  const int s = next_fwd_;
  next_fwd_ ^= 1;
  be_.synchronize(*sent_[s]);  // the slot's copy (two chunks ago) is done
  Tensor rows(rows_buf_.as<float>() + s * rows_ * d_, DType::F32, {n, d_}, Tier::Pinned);
  cpu::embedding_fwd(Tensor(const_cast<int32_t*>(host_ids), DType::I32, {n}, Tier::Host), embed, rows);
  be_.copy_async(out.data, Tier::Device, rows.data, Tier::Pinned, size_t(n * d_) * 4, Stream::Compute);
  be_.record(*sent_[s], Stream::Compute);
  return n * d_ * 4;
}

int64_t HostEmbedding::bwd(const Tensor& ids, const int32_t* host_ids, const Tensor& dout) {
  const int64_t n = dout.dim(0);
  OOMB_CHECK(!grad_.empty() && ids.numel() == n && n <= rows_ && dout.dtype == DType::F32 && dout.dim(1) == d_,
             "param store: embed_bwd of {} ids from {} (at most {} rows of {}{})", ids.numel(), dout.shape_str(), rows_,
             d_, grad_.empty() ? "; no gradients bound" : "");
  const int s = next_bwd_;
  next_bwd_ ^= 1;
  flush(s);  // the slot's chunk two ago added first: the chunks' order
  std::copy_n(host_ids, n, ids_buf_.as<int32_t>() + s * rows_);
  be_.copy_async(grads_buf_.as<float>() + s * rows_ * d_, Tier::Pinned, dout.data, Tier::Device, size_t(n * d_) * 4,
                 Stream::Compute);
  be_.record(*got_[s], Stream::Compute);
  pending_[s] = n;
  return n * d_ * 4;
}

void HostEmbedding::flush(int s) {
  const int64_t n = pending_[s];
  if (n == 0) return;
  be_.synchronize(*got_[s]);
  if (after_) be_.synchronize(*after_);
  const Tensor ids(ids_buf_.as<int32_t>() + s * rows_, DType::I32, {n}, Tier::Pinned);
  const Tensor dout(grads_buf_.as<float>() + s * rows_ * d_, DType::F32, {n, d_}, Tier::Pinned);
  cpu::embedding_bwd(ids, dout, grad_, pad_);
  pending_[s] = 0;
}

void HostEmbedding::flush() {
  flush(next_bwd_);  // the older of the two first
  flush(next_bwd_ ^ 1);
}

}  // namespace oomb
