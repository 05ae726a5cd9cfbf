#include "backend/cuda/cudnn_attention.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "backend/cuda/kernels_runs.h"

namespace oomb::cuda {


std::string CudnnAttention::unsupported(const AttnArgs& a, std::span<const KVBlock> blocks, int64_t T, int64_t D) {
  if (!a.bf16) return "--precision fp32";
  if (a.own_kernels) return "a run kept on oomb's kernels (--offload kv or sparse pages)";
  if (!a.first || !a.last) return "a fold over several calls (pages streaming through the device)";
  if (a.q_doc) return "document masks";
  if (a.window > 0) return "a sliding window";
  if (D % 8 != 0 || D > 128) return "head dim " + std::to_string(D) + " (cuDNN's fused attention: a multiple of 8, at most 128)";
  // runs are T keys long: a few queries (decoding, short prefill chunks) would make a cuDNN call
  // per few keys; oomb's kernels take those in one call
  if (T < cudnn_min_queries())
    return std::to_string(T) + " queries (fewer than OOMB_CUDNN_MIN_QUERIES, " + std::to_string(cudnn_min_queries()) + ")";
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const KVBlock& b : blocks) {
    if (b.doc) return "document masks";
    if ((~b.heads) & ((uint64_t(1) << std::min<int64_t>(b.k.dim(1), 63)) - 1)) return "sparse selection per head group";
    spans.push_back({b.idx0, b.k.dim(0)});
  }
  // the keys must be exactly [0, q_idx0 + T): every key before the chunk's end, once
  std::sort(spans.begin(), spans.end());
  int64_t next = 0;
  for (const auto& [i0, len] : spans) {
    if (i0 != next) return "blocks that are not every key before the chunk's end (sparse or partial)";
    next += len;
  }
  if (next != a.q_idx0 + T) return "blocks that are not every key before the chunk's end (sparse or partial)";
  return "";
}

std::vector<CudnnAttention::Run> CudnnAttention::runs(int64_t q_idx0, int64_t T, std::span<const KVBlock> blocks) {
  std::vector<Run> r{{q_idx0, T, true, 0, 0}};  // the chunk's own keys first, then back from it
  for (int64_t end = q_idx0; end > 0; end -= T) {
    const int64_t a = std::max<int64_t>(0, end - T);
    r.push_back({a, end - a, false, 0, 0});
  }
  // the blocks tile [0, q_idx0 + T) (unsupported checked): in ascending idx0, a run's blocks are
  // the range from the one holding its first key to the one holding its last
  std::vector<int64_t> starts;
  for (const KVBlock& b : blocks) starts.push_back(b.idx0);
  std::sort(starts.begin(), starts.end());
  for (Run& run : r) {
    const auto lo = std::upper_bound(starts.begin(), starts.end(), run.a) - 1;
    const auto hi = std::lower_bound(starts.begin(), starts.end(), run.a + run.len);
    run.first = lo - starts.begin(), run.count = hi - lo;
  }
  return r;
}

cudnn::Sdpa* CudnnAttention::plan(const k::AttnParams& p, int64_t R, bool causal, cudaStream_t stream) {
  const Key key{p.T, R, p.H, p.G, p.D, causal, p.scale};
  if (auto it = plans_.find(key); it != plans_.end()) return it->second.get();
  if (refused_.count(key)) return nullptr;
  std::string why;
  try {
    if (!cudnn::available(&why)) throw std::runtime_error(why);
    auto s = std::make_unique<cudnn::Sdpa>(sdpa::Shape{p.H, p.G, p.T, R, p.D, p.scale, causal, sdpa::DType::f32}, stream);
    if (s->workspace_bytes() > cudnn_attention_workspace(p.T, p.H, p.G, p.D))
      throw std::runtime_error(fmt::format("its workspace of {} bytes is over the {} planned", s->workspace_bytes(),
                                           cudnn_attention_workspace(p.T, p.H, p.G, p.D)));
    return (plans_[key] = std::move(s)).get();
  } catch (const std::exception& e) {
    refused_[key] = e.what();
    fmt::print(stderr, "oomb: cuDNN attention for {} queries over {} keys ({}): not used: {}; oomb's tensor-core "
               "kernels instead\n", p.T, R, causal ? "causal" : "all visible", e.what());
    return nullptr;
  }
}

bool CudnnAttention::plans_for(const k::AttnParams& p, const std::vector<Run>& rs, cudaStream_t s) {
  for (const Run& r : rs)
    if (!plan(p, r.len, r.causal, s)) return false;
  return true;
}

CudnnAttention::Buffers CudnnAttention::buffers(const k::AttnParams& p) {
  const size_t q = size_t(p.T * p.H * p.D), kv = size_t(p.T * p.G * p.D);
  Buffers b;
  b.q16 = q16_.get<uint16_t>(q);
  b.k16 = k16_.get<uint16_t>(kv), b.v16 = v16_.get<uint16_t>(kv);
  b.dk16 = dk16_.get<uint16_t>(kv), b.dv16 = dv16_.get<uint16_t>(kv);
  b.o_run = o_run_.get<float>(q), b.dq_run = dq_run_.get<float>(q), b.lse_run = lse_run_.get<float>(size_t(p.T * p.H));
  b.ws = ws_.get(cudnn_attention_workspace(p.T, p.H, p.G, p.D));
  return b;
}

bool CudnnAttention::forward(const k::AttnParams& p, std::span<const KVBlock> blocks, const float* q, float* o,
                             float* lse, cudaStream_t stream) {
  const std::vector<Run> rs = runs(p.q_idx0, p.T, blocks);
  if (!plans_for(p, rs, stream)) return false;
  const Buffers b = buffers(p);
  k::cast(q, false, b.q16, true, p.T * p.H * p.D, stream);
  for (size_t i = 0; i < rs.size(); ++i) {
    k::gather_run(p, rs[i].first, rs[i].count, rs[i].a, rs[i].len, b.k16, b.v16, stream);
    cudnn::Sdpa* s = plan(p, rs[i].len, rs[i].causal, stream);
    if (i == 0) {
      s->forward(b.q16, b.k16, b.v16, o, lse, b.ws);
    } else {
      s->forward(b.q16, b.k16, b.v16, b.o_run, b.lse_run, b.ws);
      k::merge_run(o, lse, b.o_run, b.lse_run, p.T * p.H, p.D, stream);
    }
  }
  return true;
}

bool CudnnAttention::backward(const k::AttnParams& p, std::span<const KVBlock> blocks, const float* q, const float* o,
                              const float* lse, const float* dout, float* dq, float* dsum, cudaStream_t stream) {
  const std::vector<Run> rs = runs(p.q_idx0, p.T, blocks);
  if (!plans_for(p, rs, stream)) return false;
  const Buffers b = buffers(p);
  k::cast(q, false, b.q16, true, p.T * p.H * p.D, stream);
  for (size_t i = 0; i < rs.size(); ++i) {
    k::gather_run(p, rs[i].first, rs[i].count, rs[i].a, rs[i].len, b.k16, b.v16, stream);
    float* dq_i = i == 0 ? dq : b.dq_run;
    plan(p, rs[i].len, rs[i].causal, stream)
        ->backward(b.q16, b.k16, b.v16, o, dout, lse, dq_i, b.dk16, b.dv16, dsum, b.ws);
    if (i > 0) k::add(dq, dq_i, false, p.T * p.H * p.D, stream);
    k::fold_run(p, rs[i].first, rs[i].count, rs[i].a, rs[i].len, b.dk16, b.dv16, stream);
  }
  return true;
}

}  // namespace oomb::cuda
