#include "model/param_shards.h"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>

#include "core/memory.h"
#include "dist/grad_sync.h"
#include "model/param_store.h"

namespace oomb {

ParamShards ParamShards::of(const ModelConfig& c, int rank, int ranks) {
  ParamShards s;
  const int64_t E = c.vocab * c.hidden, n = ParamStore::layer_numel(c);
  auto add = [&](int64_t lo, int64_t len) {
    const Shard sh = Shard::of(len, rank, ranks);
    s.ranges.push_back({lo, len, sh.lo, sh.size(), s.numel});
    s.numel += sh.size();
  };
  add(0, E);
  for (int64_t l = 0; l < c.layers; ++l) add(ParamStore::layer_offset(c, l), n);
  add(ParamStore::layer_offset(c, c.layers), ParamStore::head_numel(c) - E);
  return s;
}

std::vector<ParamSpec> ParamShards::layout(const ModelConfig& c) const {
  std::vector<ParamSpec> out;
  const std::vector<ParamSpec> full = param_layout(c);
  for (const Range& r : ranges) {
    const int64_t lo = r.lo + r.mine, hi = lo + r.size;
    for (const ParamSpec& t : full) {
      const int64_t a = std::max(lo, t.offset), b = std::min(hi, t.offset + t.numel());
      if (a >= b) continue;
      std::vector<int64_t> shape = t.shape.size() >= 2 ? std::vector<int64_t>{1, b - a} : std::vector<int64_t>{b - a};
      add_spec(out, fmt::format("{}[{}:{}]", t.name, a - t.offset, b - t.offset), std::move(shape));
    }
  }
  return out;
}

void ParamShards::pack(const float* full, float* packed) const {
  for (const Range& r : ranges) std::memcpy(packed + r.at, full + r.lo + r.mine, size_t(r.size) * 4);
}

void ParamShards::gather(const ModelConfig& c, Comm& world, const float* packed, float* full) {
  const int P = world.size();
  std::vector<ParamShards> all;
  int64_t most = 0;
  for (int j = 0; j < P; ++j) all.push_back(of(c, j, P)), most = std::max(most, all.back().numel);
  Buffer send(Tier::Host, Tag::IO, size_t(std::max<int64_t>(most, 1)) * 4);
  Buffer recv(Tier::Host, Tag::IO, size_t(std::max<int64_t>(most, 1)) * 4 * size_t(P));
  std::memcpy(send.data(), packed, size_t(all[size_t(world.rank())].numel) * 4);
  world.all_gather(send.data(), recv.data(), size_t(most) * 4);
  for (int j = 0; j < P; ++j)
    for (const Range& r : all[size_t(j)].ranges)
      std::memcpy(full + r.lo + r.mine, recv.as<float>() + j * most + r.at, size_t(r.size) * 4);
}

void ParamShards::stream(const ModelConfig& c, Comm& world, const float* packed, const Sink& sink) {
  const int P = world.size();
  std::vector<ParamShards> all;
  int64_t most = 1;
  for (int j = 0; j < P; ++j) {
    all.push_back(of(c, j, P));
    for (const Range& r : all.back().ranges) most = std::max(most, r.size);
  }
  const int64_t piece = std::min(most, grad_sync_piece());
  Buffer stage(Tier::Host, Tag::IO, size_t(piece) * 4);
  for (size_t i = 0; i < all[0].ranges.size(); ++i)
    for (int j = 0; j < P; ++j) {
      const Range& r = all[size_t(j)].ranges[i];
      for (int64_t o = 0; o < r.size; o += piece) {
        const int64_t n = std::min(piece, r.size - o);
        if (j == world.rank()) std::memcpy(stage.data(), packed + r.at + o, size_t(n) * 4);
        world.broadcast(stage.data(), size_t(n) * 4, j);
        if (sink) sink(r.lo + r.mine + o, stage.as<float>(), n);
      }
    }
}

}  // namespace oomb
