// --zero 3: each rank's part of every parameter range the parameter store moves as one (the
// embedding; each layer; the final norm with an untied lm_head). Rank r holds Shard::of(range, r, P)
// of each range (dist/grad_sync.h), packed one after the other: its masters, gradients and AdamW's
// moments alike (model/param_store.h gathers a layer's shards into a device slot before it
// computes, and reduce-scatters the slot's gradients into them after its backward).
#pragma once
#include <functional>
#include <vector>

#include "dist/comm.h"
#include "model/params.h"

namespace oomb {

struct ParamShards {
  struct Range {
    int64_t lo = 0, n = 0;  // the range [lo, lo + n) of the flat layout
    int64_t mine = 0, size = 0, at = 0;  // this rank's part: [lo + mine, lo + mine + size), packed at `at`
  };
  std::vector<Range> ranges;  // the embedding, layers 0 .. L-1, the tail
  int64_t numel = 0;          // floats packed
  static ParamShards of(const ModelConfig& c, int rank, int ranks);
  const Range& embed() const { return ranges.front(); }
  const Range& layer(int64_t l) const { return ranges[size_t(l + 1)]; }
  const Range& tail() const { return ranges.back(); }
  // The packed layout as a Params layout: each tensor's part in a range, named "<name>[a:b]" (a, b
  // within the tensor), shaped (1, b - a) for a matrix and (b - a) otherwise, so that AdamW decays
  // the parts of matrices alone.
  std::vector<ParamSpec> layout(const ModelConfig& c) const;
  // packed := this rank's parts of full (the whole flat layout, host memory)
  void pack(const float* full, float* packed) const;
  // full := every rank's packed parts (collective over `world`, whose ranks these shards are)
  static void gather(const ModelConfig& c, Comm& world, const float* packed, float* full);
  // Every rank's packed parts in the flat layout's order (range by range, each range rank by rank),
  // a piece of at most grad_sync_piece() floats at a time broadcast from the rank holding it (host
  // staging, tag io): sink(at, x, n), when given, sees the flat layout's floats [at, at + n) in
  // order. Collective over `world`; packed in host memory (pinned under --offload params). Rank 0
  // gathers the whole model this way (checkpoints), holding no more than it writes.
  using Sink = std::function<void(int64_t at, const float* x, int64_t n)>;
  static void stream(const ModelConfig& c, Comm& world, const float* packed, const Sink& sink);
};

}  // namespace oomb
