// An embedding kept in host memory by an offloaded parameter store (ParamStore::embeds_on_host).
// fwd gathers a chunk's rows from the pinned masters on the host (core ops' CPU kernel) into one of
// two pinned staging slots and sends them into the layers' input on the compute stream (a slot is
// written again once its copy two chunks ago is done); bwd sends the chunk's input gradients back
// into two more, and the host adds them into the embedding's gradients (the same kernel, tokens in
// order) when the slot comes round again or at flush: in chunk order, the resident run's fp32 adds.
// The device then holds no V x d table of weights or gradients. Tied to a streamed lm_head, whose
// tiles' gradients are copied back into the same host table, the adds wait for those copies first
// (add_after) and the store flushes before each gradient pass over the tiles.
#pragma once
#include <cstdint>
#include <memory>

#include "backend/backend.h"
#include "hf/config.h"

namespace oomb {

class HostEmbedding {
 public:
  // rows: the most token rows a call takes (this rank's of a chunk)
  HostEmbedding(const ModelConfig& c, Backend& be, int64_t rows);
  // Pinned staging bytes: tag weights (the gathered rows), grads (their gradients), data (their ids).
  static int64_t staging_bytes(const ModelConfig& c, int64_t rows, Tag tag);
  // grad: the embedding's gradients in host memory, which bwd's rows are added into.
  void bind_grads(const Tensor& grad);
  // out (n, d), device := embed's (host) rows for host_ids (ids: the same in the backend's memory).
  // Returns the bytes sent.
  int64_t fwd(const Tensor& ids, const int32_t* host_ids, const Tensor& embed, Tensor& out);
  // dout (n, d), device: to be added into grad's rows for host_ids. Returns the bytes sent.
  int64_t bwd(const Tensor& ids, const int32_t* host_ids, const Tensor& dout);
  void flush();  // every pending slot added, older first (the host waits for their copies)
  bool pending() const { return pending_[0] > 0 || pending_[1] > 0; }
  // Adds into the gradients wait for e too (recorded by the store after copies into them); null: none.
  void add_after(const Event* e) { after_ = e; }

 private:
  void flush(int s);
  static int64_t bytes(int64_t d, int64_t rows, Tag tag);
  Backend& be_;
  int64_t d_, rows_;
  int64_t pad_;  // the config's pad_token_id: its row takes no gradient (-1: none)
  Buffer rows_buf_, grads_buf_, ids_buf_;
  Tensor grad_;
  std::unique_ptr<Event> sent_[2], got_[2];
  int next_fwd_ = 0, next_bwd_ = 0;
  int64_t pending_[2] = {0, 0};  // rows of gradients slot s holds, not yet added
  const Event* after_ = nullptr;
};

}  // namespace oomb
