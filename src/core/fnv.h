// FNV-1a 64: the fingerprints of data, masks and mixes that checkpoints compare (not a
// cryptographic hash: it tells another file from the checkpoint's, not an adversary's).
#pragma once
#include <cstdint>
#include <fmt/format.h>
#include <string>

namespace oomb {

struct Fnv {
  uint64_t h = 0xcbf29ce484222325ull;
  // The low `bytes` bytes of v, little-endian.
  void mix(uint64_t v, int bytes = 8) {
    for (int b = 0; b < bytes; ++b) h = (h ^ ((v >> (8 * b)) & 0xff)) * 0x100000001b3ull;
  }
  void mix(const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  }
  std::string hex() const { return fmt::format("{:016x}", h); }
};

}  // namespace oomb
