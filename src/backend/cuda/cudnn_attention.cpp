#include "backend/cuda/cudnn_attention.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "backend/cuda/kernels_runs.h"

namespace oomb::cuda {

namespace {

// cuDNN's deterministic backward keeps dP (bf16) per head in its workspace (its dP-workspace
// path): the most a run of T queries over R <= T keys asks for, and what is planned
size_t cudnn_workspace(int64_t T, int64_t H) { return cudnn_attention_workspace(T, H); }

// a buffer grown to the largest size asked for (tag workspace): steady-state calls allocate nothing
void* grow(Buffer& b, size_t bytes) {
  if (b.bytes() < bytes) {
    b.reset();
    b = Buffer(Tier::Device, Tag::Workspace, bytes);
  }
  return b.data();
}

}  // namespace

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
    if (s->workspace_bytes() > cudnn_workspace(p.T, p.H))
      throw std::runtime_error(fmt::format("its workspace of {} bytes is over the {} planned", s->workspace_bytes(),
                                           cudnn_workspace(p.T, p.H)));
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

// what cudnn_attention_bytes plans, for chunks of p.T queries
void CudnnAttention::buffers(const k::AttnParams& p) {
  const size_t q = size_t(p.T * p.H * p.D), kv = size_t(p.T * p.G * p.D);
  grow(q16_, q * 2), grow(k16_, kv * 2), grow(v16_, kv * 2), grow(dk16_, kv * 2), grow(dv16_, kv * 2);
  grow(o_run_, q * 4), grow(dq_run_, q * 4), grow(lse_run_, size_t(p.T * p.H) * 4);
  grow(ws_, cudnn_workspace(p.T, p.H));
}

bool CudnnAttention::forward(const k::AttnParams& p, std::span<const KVBlock> blocks, const float* q, float* o,
                             float* lse, cudaStream_t stream) {
  const std::vector<Run> rs = runs(p.q_idx0, p.T, blocks);
  if (!plans_for(p, rs, stream)) return false;
  buffers(p);
  auto* q16 = q16_.as<uint16_t>();
  auto *k16 = k16_.as<uint16_t>(), *v16 = v16_.as<uint16_t>();
  k::cast(q, false, q16, true, p.T * p.H * p.D, stream);
  for (size_t i = 0; i < rs.size(); ++i) {
    k::gather_run(p, rs[i].first, rs[i].count, rs[i].a, rs[i].len, k16, v16, stream);
    cudnn::Sdpa* s = plan(p, rs[i].len, rs[i].causal, stream);
    if (i == 0) {
      s->forward(q16, k16, v16, o, lse, ws_.data());
    } else {
      s->forward(q16, k16, v16, o_run_.as<float>(), lse_run_.as<float>(), ws_.data());
      k::merge_run(o, lse, o_run_.as<float>(), lse_run_.as<float>(), p.T * p.H, p.D, stream);
    }
  }
  return true;
}

bool CudnnAttention::backward(const k::AttnParams& p, std::span<const KVBlock> blocks, const float* q, const float* o,
                              const float* lse, const float* dout, float* dq, float* dsum, cudaStream_t stream) {
  const std::vector<Run> rs = runs(p.q_idx0, p.T, blocks);
  if (!plans_for(p, rs, stream)) return false;
  buffers(p);
  auto* q16 = q16_.as<uint16_t>();
  auto *k16 = k16_.as<uint16_t>(), *v16 = v16_.as<uint16_t>(), *dk16 = dk16_.as<uint16_t>(),
       *dv16 = dv16_.as<uint16_t>();
  k::cast(q, false, q16, true, p.T * p.H * p.D, stream);
  for (size_t i = 0; i < rs.size(); ++i) {
    k::gather_run(p, rs[i].first, rs[i].count, rs[i].a, rs[i].len, k16, v16, stream);
    float* dq_i = i == 0 ? dq : dq_run_.as<float>();
    plan(p, rs[i].len, rs[i].causal, stream)->backward(q16, k16, v16, o, dout, lse, dq_i, dk16, dv16, dsum, ws_.data());
    if (i > 0) k::add(dq, dq_i, false, p.T * p.H * p.D, stream);
    k::fold_run(p, rs[i].first, rs[i].count, rs[i].a, rs[i].len, dk16, dv16, stream);
  }
  return true;
}

}  // namespace oomb::cuda
