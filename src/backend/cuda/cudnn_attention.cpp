#include "backend/cuda/cudnn_attention.h"

#include <fmt/core.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <vector>

#include "backend/cuda/kernels_runs.h"
#include "core/memory.h"

namespace oomb::cuda {

namespace {

// (idx0, keys) of each block, in ascending idx0 (as the route's table holds them)
std::vector<std::pair<int64_t, int64_t>> sorted_spans(std::span<const KVBlock> blocks) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const KVBlock& b : blocks) spans.push_back({b.idx0, b.k.dim(0)});
  std::sort(spans.begin(), spans.end());
  return spans;
}

}  // namespace

std::string CudnnAttention::unsupported(const AttnArgs& a, std::span<const KVBlock> blocks, int64_t T, int64_t D) {
  if (!a.bf16) return "--precision fp32";
  if (a.own_kernels) return "a run kept on oomb's kernels (sparse pages)";
  if (a.q_doc) return "document masks";
  if (a.window > 0) return "a sliding window";
  if (D % 8 != 0 || D > 128) return "head dim " + std::to_string(D) + " (cuDNN's fused attention: a multiple of 8, at most 128)";
  // runs are at most T keys long: a few queries (decoding, short prefill chunks) would make a cuDNN
  // call per few keys; oomb's kernels take those in one call
  if (T < cudnn_min_queries())
    return std::to_string(T) + " queries (fewer than OOMB_CUDNN_MIN_QUERIES, " + std::to_string(cudnn_min_queries()) + ")";
  if (blocks.empty()) return "no keys";
  for (const KVBlock& b : blocks) {
    if (b.k.dim(0) == 0) return "an empty block";  // (runs hold at least a key)
    if (b.doc) return "document masks";
    if ((~b.heads) & ((uint64_t(1) << std::min<int64_t>(b.k.dim(1), 63)) - 1)) return "sparse selection per head group";
  }
  // earlier keys (before the chunk: every query sees them) in any spans, once each; the chunk's own
  // keys all of them or none (one causal run); none after the chunk
  const auto spans = sorted_spans(blocks);
  int64_t next = spans.front().first, own = 0;
  for (const auto& [i0, len] : spans) {
    if (i0 < next) return "blocks that overlap";
    if (i0 < a.q_idx0 && i0 + len > a.q_idx0) return "a block across the chunk's first query";
    if (i0 >= a.q_idx0) own += len;
    next = i0 + len;
  }
  if (next > a.q_idx0 + T) return "keys after the chunk's last query";
  if (own != 0 && (own != T || spans.back().first + spans.back().second != a.q_idx0 + T))
    return "some of the chunk's own keys without the others";
  return "";
}

std::vector<CudnnAttention::Run> CudnnAttention::runs(int64_t q_idx0, int64_t T, std::span<const KVBlock> blocks) {
  const auto spans = sorted_spans(blocks);  // (unsupported checked them)
  std::vector<Run> r;
  if (spans.back().first >= q_idx0) r.push_back({q_idx0, T, true, 0, 0});  // the chunk's own keys first
  // then each stretch of contiguous earlier keys, latest first, in runs of T back from its end
  for (size_t e = spans.size(); e > 0;) {
    size_t b = e - 1;
    if (spans[b].first >= q_idx0) {
      e = b;
      continue;
    }
    while (b > 0 && spans[b - 1].first + spans[b - 1].second == spans[b].first) --b;
    const int64_t lo = spans[b].first;
    for (int64_t end = spans[e - 1].first + spans[e - 1].second; end > lo; end -= T) {
      const int64_t a = std::max(lo, end - T);
      r.push_back({a, end - a, false, 0, 0});
    }
    e = b;
  }
  // a run's blocks: in ascending idx0, the range from the one holding its first key to the one
  // holding its last
  for (Run& run : r) {
    const auto lo = std::upper_bound(spans.begin(), spans.end(), std::pair{run.a, INT64_MAX}) - 1;
    const auto hi = std::lower_bound(spans.begin(), spans.end(), std::pair{run.a + run.len, INT64_MIN});
    run.first = lo - spans.begin(), run.count = hi - lo;
  }
  return r;
}

std::vector<CudnnAttention::QueryBlock> CudnnAttention::query_blocks(int64_t T, int64_t H) {
  std::vector<QueryBlock> qb;
  const int64_t tq = cudnn_query_block(T, H);
  for (int64_t qa = 0; qa < T; qa += tq) qb.push_back({qa, std::min(tq, T - qa)});
  return qb;
}

cudnn::Sdpa* CudnnAttention::plan(const k::AttnParams& p, int64_t nq, int64_t R, bool causal, cudaStream_t stream) {
  const Key key{nq, R, p.H, p.G, p.D, causal, p.scale};
  if (auto it = plans_.find(key); it != plans_.end()) return it->second.get();
  if (refused_.count(key)) return nullptr;
  std::string why;
  try {
    if (!cudnn::available(&why)) throw std::runtime_error(why);
    auto s = std::make_unique<cudnn::Sdpa>(sdpa::Shape{p.H, p.G, nq, R, p.D, p.scale, causal, sdpa::DType::bf16}, stream);
    if (s->workspace_bytes() > cudnn_attention_workspace(p.T, p.H, p.G, p.D))
      throw std::runtime_error(fmt::format("its workspace of {} bytes is over the {} planned", s->workspace_bytes(),
                                           cudnn_attention_workspace(p.T, p.H, p.G, p.D)));
    const Buffers b = buffers(p);  // (planned: a block's queries and a run's keys are at most T)
    s->trial(b.q16, b.k16, b.v16, b.o16, b.lse_run, b.dk16, b.dv16, b.ws);
    return (plans_[key] = std::move(s)).get();
  } catch (const OutOfMemory&) {
    throw;  // the buffers' allocation: the user's to see, with oomb plan's advice
  } catch (const std::exception& e) {
    refused_[key] = e.what();
    fmt::print(stderr, "oomb: cuDNN attention for {} queries over {} keys ({}): not used: {}; oomb's tensor-core "
               "kernels instead\n", nq, R, causal ? "causal" : "all visible", e.what());
    return nullptr;
  }
}

bool CudnnAttention::plans_for(const k::AttnParams& p, const std::vector<Run>& rs, const std::vector<QueryBlock>& qb,
                               cudaStream_t s) {
  for (const Run& r : rs)
    for (const QueryBlock& b : qb)
      if (!plan(p, b.nq, keys_of(r, b), r.causal, s)) return false;
  return true;
}

CudnnAttention::Buffers CudnnAttention::buffers(const k::AttnParams& p) {
  const size_t q = size_t(p.T * p.H * p.D), kv = size_t(p.T * p.G * p.D);
  Buffers b;
  const size_t had = q16_.buf.bytes();
  b.q16 = q16_.get<uint16_t>(q);
  if (q16_.buf.bytes() != had) q16_of_ = nullptr;  // grown: what it held is gone
  b.k16 = k16_.get<uint16_t>(kv), b.v16 = v16_.get<uint16_t>(kv);
  b.dk16 = dk16_.get<uint16_t>(kv), b.dv16 = dv16_.get<uint16_t>(kv);
  // the forward's o_run (fp32) and the backward's do16 and dq16 (bf16, half of it each) share one
  // buffer, and o16 is the forward's run o or the backward's bf16 o: the two never run at once (one
  // stream, each call done with its buffers before the next)
  b.o_run = run_out_.get<float>(q);
  b.do16 = reinterpret_cast<uint16_t*>(b.o_run), b.dq16 = b.do16 + q;
  b.o16 = o16_.get<uint16_t>(q);
  b.lse_run = lse_run_.get<float>(size_t(p.T * p.H));
  b.dk_sum = dk_sum_.get<float>(kv), b.dv_sum = dv_sum_.get<float>(kv);
  b.ws = ws_.get(cudnn_attention_workspace(p.T, p.H, p.G, p.D));
  return b;
}

void CudnnAttention::cast_q(const k::AttnParams& p, const float* q, uint16_t* q16, cudaStream_t s) {
  if (q16_of_ == q) return;  // this fold's earlier call made it
  k::cast(q, false, q16, true, p.T * p.H * p.D, s);
  q16_of_ = q;
}

bool CudnnAttention::forward(const k::AttnParams& p, std::span<const KVBlock> blocks, const float* q, float* o,
                             float* lse, cudaStream_t stream) {
  const std::vector<Run> rs = runs(p.q_idx0, p.T, blocks);
  const std::vector<QueryBlock> qb = query_blocks(p.T, p.H);
  if (!plans_for(p, rs, qb, stream)) return false;
  const Buffers b = buffers(p);
  const bool whole = p.first && p.last;  // one call over every key, not a fold over several
  cast_q(p, q, b.q16, stream);
  for (size_t i = 0; i < rs.size(); ++i) {
    k::gather_run(p, rs[i].first, rs[i].count, rs[i].a, rs[i].len, b.k16, b.v16, stream);
    for (const QueryBlock& blk : qb) {
      // this block's rows of q, o (T, H, D) and lse, run_sum (T, H)
      const int64_t at = blk.qa * p.H * p.D, at_row = blk.qa * p.H, n = blk.nq * p.H * p.D, rows = blk.nq * p.H;
      cudnn::Sdpa* s = plan(p, blk.nq, keys_of(rs[i], blk), rs[i].causal, stream);
      if (whole && i == 0) {
        s->forward(b.q16 + at, b.k16, b.v16, b.o16 + at, lse + at_row, b.ws);
        k::cast(b.o16 + at, true, o + at, false, n, stream);
        continue;
      }
      s->forward(b.q16 + at, b.k16, b.v16, b.o16 + at, b.lse_run + at_row, b.ws);
      k::cast(b.o16 + at, true, b.o_run + at, false, n, stream);
      if (whole)
        k::merge_run(o + at, lse + at_row, b.o_run + at, b.lse_run + at_row, rows, p.D, stream);
      else  // the fold's state, as oomb's tensor-core kernels keep it between calls
        k::merge_fold(o + at, lse + at_row, p.run_sum + at_row, b.o_run + at, b.lse_run + at_row, p.first && i == 0,
                      p.last && i + 1 == rs.size(), rows, p.D, stream);
    }
  }
  return true;
}

bool CudnnAttention::backward(const k::AttnParams& p, std::span<const KVBlock> blocks, const float* q, const float* o,
                              const float* lse, const float* dout, float* dq, float* dsum, cudaStream_t stream) {
  const std::vector<Run> rs = runs(p.q_idx0, p.T, blocks);
  const std::vector<QueryBlock> qb = query_blocks(p.T, p.H);
  if (!plans_for(p, rs, qb, stream)) return false;
  const Buffers b = buffers(p);
  // q and do in bf16: the model's copies where it hands them (AttnParams::q16, do16: the same values,
  // read in place), else cast here
  const bool copies = k::reads_q16(p);
  const uint16_t* q16 = copies ? static_cast<const uint16_t*>(p.q16) : b.q16;
  const uint16_t* do16 = copies ? static_cast<const uint16_t*>(p.do16) : b.do16;
  if (!copies) {
    cast_q(p, q, b.q16, stream);
    k::cast(dout, false, b.do16, true, p.T * p.H * p.D, stream);
  }
  k::cast(o, false, b.o16, true, p.T * p.H * p.D, stream);  // (cuDNN's fused backward takes o, do and dq in bf16)
  for (size_t i = 0; i < rs.size(); ++i) {
    k::gather_run(p, rs[i].first, rs[i].count, rs[i].a, rs[i].len, b.k16, b.v16, stream);
    const int64_t kv = rs[i].len * p.G * p.D;
    for (size_t bi = qb.size(); bi-- > 0;) {  // the last block first: its call takes every key of the run
      const QueryBlock& blk = qb[bi];
      const int64_t at = blk.qa * p.H * p.D, at_row = blk.qa * p.H, n = blk.nq * p.H * p.D;
      const int64_t R = keys_of(rs[i], blk), kvb = R * p.G * p.D;
      plan(p, blk.nq, R, rs[i].causal, stream)
          ->backward(q16 + at, b.k16, b.v16, b.o16 + at, do16 + at, lse + at_row, b.dq16 + at, b.dk16, b.dv16,
                     dsum + at_row, b.ws);
      // dq: written by a fold's first call (its first run), added to after
      if (i == 0 && p.first) k::cast(b.dq16 + at, true, dq + at, false, n, stream);
      else k::add(dq + at, b.dq16 + at, true, n, stream);
      // dk, dv: the blocks' shares summed in fp32 (the causal run's: over its first R keys), then
      // folded once, as one call over every query would; the last block's share (all kv keys) starts the sums
      OOMB_CHECK(bi + 1 < qb.size() || kvb == kv, "cuDNN attention: the last query block takes {} of a run's {} keys",
                 R, rs[i].len);
      if (qb.size() > 1 && bi + 1 == qb.size()) {
        k::cast(b.dk16, true, b.dk_sum, false, kvb, stream);
        k::cast(b.dv16, true, b.dv_sum, false, kvb, stream);
      } else if (qb.size() > 1) {
        k::add(b.dk_sum, b.dk16, true, kvb, stream);
        k::add(b.dv_sum, b.dv16, true, kvb, stream);
      }
    }
    if (qb.size() > 1) {
      k::cast(b.dk_sum, false, b.dk16, true, kv, stream);
      k::cast(b.dv_sum, false, b.dv16, true, kv, stream);
    }
    k::fold_run(p, rs[i].first, rs[i].count, rs[i].a, rs[i].len, b.dk16, b.dv16, stream);
  }
  return true;
}

}  // namespace oomb::cuda
