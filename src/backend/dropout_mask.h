// Dropout's mask as a pure function of where a value sits, so that the forward, each recompute and
// the backward draw the same mask with nothing stored, on any backend, in any chunk size, sweep
// order or rank split (LoRA's --lora-dropout: PEFT's nn.Dropout on each adapter's input).
//
// For a sequence (window w of the data, the run's --seed s), layer l, adapted linear t (q, k, v, o,
// gate, up, down: 0..6), the token at sequence position `pos` and input feature i:
//   window key  kw = mix(mix(s) ^ w)
//   module key  km = mix(kw ^ (8 l + t))
//   draw        u  = mix(km ^ mix(pos * 2^32 + i)) >> 32      (an unsigned 32-bit integer)
//   kept        u >= floor(p * 2^32), the value times s = 1 / (1 - p) (fp32: 1.0f / float(1 - p),
//               PyTorch's); dropped: 0
// mix is splitmix64's finalizer after its increment. (tests/oracle/torch_oracle.py draws the
// same mask from this text for its float64 reference.)
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define OOMB_HOST_DEVICE __host__ __device__
#else
#define OOMB_HOST_DEVICE
#endif

namespace oomb {

OOMB_HOST_DEVICE inline uint64_t dropout_mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// One dropout call's mask: rows of its (T, n) input are sequence positions row0, row0 + 1, ...
struct DropoutMask {
  uint64_t key = 0;        // the module key km
  int64_t row0 = 0;        // the sequence position of row 0
  uint32_t threshold = 0;  // floor(p * 2^32): a draw below it drops the value
  float scale = 1.0f;      // 1.0f / float(1 - p), as PyTorch's dropout computes it
  OOMB_HOST_DEVICE bool kept(int64_t row, int64_t i) const {
    const uint64_t c = (uint64_t(row0 + row) << 32) | uint64_t(uint32_t(i));
    return uint32_t(dropout_mix(key ^ dropout_mix(c)) >> 32) >= threshold;
  }
};

inline uint64_t dropout_window_key(uint64_t seed, int64_t window) {
  return dropout_mix(dropout_mix(seed) ^ uint64_t(window));
}
inline uint64_t dropout_module_key(uint64_t window_key, int64_t layer, int target) {
  return dropout_mix(window_key ^ uint64_t(8 * layer + target));
}
// p in [0, 1)
inline DropoutMask dropout_mask(uint64_t module_key, int64_t row0, double p) {
  DropoutMask m;
  m.key = module_key, m.row0 = row0;
  m.threshold = uint32_t(p * 4294967296.0);
  m.scale = 1.0f / float(1.0 - p);
  return m;
}

}  // namespace oomb
