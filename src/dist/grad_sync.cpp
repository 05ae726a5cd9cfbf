#include "dist/grad_sync.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace oomb {

// Staging moves at most this many floats per collective call (64 MiB), so host memory for it stays
// small beside the gradients themselves. OOMB_GRAD_SYNC_PIECE (tests) sets a smaller piece, so that
// small models take the many-piece path too.
int64_t grad_sync_piece() {
  static const int64_t piece = [] {
    const char* e = std::getenv("OOMB_GRAD_SYNC_PIECE");
    const int64_t v = e ? std::atoll(e) : 0;
    return v > 0 ? v : int64_t(1) << 24;
  }();
  return piece;
}

Shard Shard::of(int64_t n, int rank, int ranks) {
  Shard s;
  s.block = ((n + ranks - 1) / ranks + 15) / 16 * 16;
  s.lo = std::min(n, s.block * rank);
  s.hi = std::min(n, s.lo + s.block);
  return s;
}

// zero 0 where the group reads the gradients' memory needs nothing; a device's gradients pass
// through a piece at a time; a shard's collectives take a piece of every rank's block and this
// rank's own.
static int64_t staging_bytes(int64_t n, int ranks, int zero, Tier home, bool device_comm) {
  const bool direct = home != Tier::Device || device_comm;
  if (ranks == 1 || zero == 3 || (zero == 0 && direct)) return 0;
  if (zero == 0) return std::min(n, grad_sync_piece()) * 4;
  return std::min(Shard::of(n, 0, ranks).block, grad_sync_piece()) * (ranks + 1) * 4;
}
int64_t GradSync::host_bytes(int64_t n, int ranks, int zero, Tier home, bool device_comm) {
  return device_comm ? 0 : staging_bytes(n, ranks, zero, home, false);
}
int64_t GradSync::device_bytes(int64_t n, int ranks, int zero, bool device_comm) {
  return device_comm ? staging_bytes(n, ranks, zero, Tier::Device, true) : 0;
}

GradSync::GradSync(Comm& world, Backend& be, int64_t n, int zero, Tier home)
    : comm_(world), be_(be), n_(n), zero_(zero), shard_(Shard::of(n, world.rank(), world.size())),
      st_(world.on_device() ? Tier::Device : Tier::Host) {
  if (zero == 0) shard_ = {0, n, n};
  if (const int64_t b = staging_bytes(n, world.size(), zero, home, world.on_device()); b > 0)
    stage_ = Buffer(st_, Tag::Workspace, size_t(b));
}

void GradSync::reduce(const Tensor& g) {
  OOMB_CHECK(g.numel() == n_ && g.dtype == DType::F32, "grad sync: expected {} f32 gradients, got {}", n_,
             g.shape_str());
  if (comm_.size() == 1 || zero_ == 3) return;
  char* gd = static_cast<char*>(g.data);
  if (zero_ < 2) {
    if (g.tier != Tier::Device || comm_.on_device())
      return comm_.all_reduce_sum(static_cast<float*>(g.data), size_t(n_));
    for (int64_t at = 0; at < n_; at += grad_sync_piece()) {
      const size_t bytes = size_t(std::min(grad_sync_piece(), n_ - at)) * 4;
      be_.copy(stage_.data(), Tier::Host, gd + at * 4, g.tier, bytes);
      comm_.all_reduce_sum(stage_.as<float>(), bytes / 4);
      be_.copy(gd + at * 4, g.tier, stage_.data(), Tier::Host, bytes);
    }
    return;
  }
  // zero 2: piece [o, o + s) of every rank's block, summed over ranks, lands in this rank's block
  const int P = comm_.size();
  const int64_t B = shard_.block, s = std::min(B, grad_sync_piece());
  float* send = stage_.as<float>();
  float* mine = send + s * P;
  for (int64_t o = 0; o < B; o += s) {
    const int64_t len = std::min(s, B - o);
    for (int j = 0; j < P; ++j) {
      const int64_t lo = std::min(n_, j * B + o), hi = std::min(n_, j * B + o + len);
      if (hi > lo) be_.copy(send + j * len, st_, gd + lo * 4, g.tier, size_t(hi - lo) * 4);
      if (hi - lo < len) {  // past the end of the last shard: zeros
        float* pad = send + j * len + std::max<int64_t>(hi - lo, 0);
        const size_t bytes = size_t(len - std::max<int64_t>(hi - lo, 0)) * 4;
        if (st_ == Tier::Host) std::memset(pad, 0, bytes);
        else be_.fill_zero(pad, bytes);
      }
    }
    comm_.reduce_scatter_sum(send, mine, size_t(len));
    const int64_t lo = std::min(shard_.hi, shard_.lo + o), hi = std::min(shard_.hi, shard_.lo + o + len);
    if (hi > lo) be_.copy(gd + lo * 4, g.tier, mine, st_, size_t(hi - lo) * 4);
  }
}

void GradSync::gather(const Tensor& p) {
  OOMB_CHECK(p.numel() == n_ && p.dtype == DType::F32, "grad sync: expected {} f32 parameters, got {}", n_,
             p.shape_str());
  if (comm_.size() == 1 || zero_ == 0 || zero_ == 3) return;
  const int P = comm_.size();
  const int64_t B = shard_.block, s = std::min(B, grad_sync_piece());
  float* all = stage_.as<float>();
  float* mine = all + s * P;
  char* pd = static_cast<char*>(p.data);
  for (int64_t o = 0; o < B; o += s) {
    const int64_t len = std::min(s, B - o);
    const int64_t lo = std::min(shard_.hi, shard_.lo + o), hi = std::min(shard_.hi, shard_.lo + o + len);
    if (hi > lo) be_.copy(mine, st_, pd + lo * 4, p.tier, size_t(hi - lo) * 4);
    comm_.all_gather(mine, all, size_t(len) * 4);
    for (int j = 0; j < P; ++j) {
      const int64_t a = std::min(n_, j * B + o), b = std::min(n_, j * B + o + len);
      if (b > a && j != comm_.rank()) be_.copy(pd + a * 4, p.tier, all + j * len, st_, size_t(b - a) * 4);
    }
  }
}

}  // namespace oomb
