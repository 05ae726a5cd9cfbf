#include "dist/grad_sync.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace oomb {

Shard Shard::of(int64_t n, int rank, int ranks) {
  Shard s;
  s.block = ((n + ranks - 1) / ranks + 15) / 16 * 16;
  s.lo = std::min(n, s.block * rank);
  s.hi = std::min(n, s.lo + s.block);
  return s;
}

// zero 0 on host memory needs nothing; a device's gradients pass through a copy; a shard's
// collectives take every rank's padded block and this rank's own.
int64_t GradSync::host_bytes(int64_t n, int ranks, int zero, Tier home) {
  if (ranks == 1 || (zero == 0 && home != Tier::Device)) return 0;
  if (zero == 0) return n * 4;
  return Shard::of(n, 0, ranks).block * (ranks + 1) * 4;
}

GradSync::GradSync(Comm& world, Backend& be, int64_t n, int zero)
    : comm_(world), be_(be), n_(n), zero_(zero), shard_(Shard::of(n, world.rank(), world.size())) {
  if (zero == 0) shard_ = {0, n, n};
  if (const int64_t b = host_bytes(n, world.size(), zero, be.tier()); b > 0)
    stage_ = Buffer(Tier::Host, Tag::Workspace, size_t(b));
}

void GradSync::reduce(const Tensor& g) {
  OOMB_CHECK(g.numel() == n_ && g.dtype == DType::F32, "grad sync: expected {} f32 gradients, got {}", n_,
             g.shape_str());
  if (comm_.size() == 1) return;
  const size_t bytes = size_t(n_) * 4;
  if (zero_ < 2) {
    if (g.tier != Tier::Device) return comm_.all_reduce_sum(static_cast<float*>(g.data), size_t(n_));
    be_.copy(stage_.data(), Tier::Host, g.data, g.tier, bytes);
    comm_.all_reduce_sum(stage_.as<float>(), size_t(n_));
    be_.copy(g.data, g.tier, stage_.data(), Tier::Host, bytes);
    return;
  }
  // zero 2: the padded buffer's block r summed over ranks lands in this rank's [lo, hi)
  float* s = stage_.as<float>();
  be_.copy(s, Tier::Host, g.data, g.tier, bytes);
  std::fill(s + n_, s + shard_.block * comm_.size(), 0.0f);
  float* mine = s + shard_.block * comm_.size();
  comm_.reduce_scatter_sum(s, mine, size_t(shard_.block));
  if (shard_.size() > 0)
    be_.copy(static_cast<char*>(g.data) + shard_.lo * 4, g.tier, mine, Tier::Host, size_t(shard_.size()) * 4);
}

void GradSync::gather(const Tensor& p) {
  OOMB_CHECK(p.numel() == n_ && p.dtype == DType::F32, "grad sync: expected {} f32 parameters, got {}", n_,
             p.shape_str());
  if (comm_.size() == 1 || zero_ == 0) return;
  float* s = stage_.as<float>();
  float* mine = s + shard_.block * comm_.size();
  if (shard_.size() > 0)
    be_.copy(mine, Tier::Host, static_cast<const char*>(p.data) + shard_.lo * 4, p.tier, size_t(shard_.size()) * 4);
  comm_.all_gather(mine, s, size_t(shard_.block) * 4);
  be_.copy(p.data, p.tier, s, Tier::Host, size_t(n_) * 4);
}

}  // namespace oomb
