// Which tokens of a token store are trained: one bit per token (1: predicting it counts in the
// loss), in host memory (tag data). Text read with --prompt-field / --completion-field marks each
// prompt's tokens 0 and its completion's (and the EOS after it) 1, so a window's target at t is
// ignored where token t + 1 is a prompt's.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/memory.h"

namespace oomb {

class TokenStore;

// Bits appended run by run while text is tokenized.
class LossMaskBuilder {
 public:
  void append(int64_t n, bool trained);
  int64_t size() const { return n_; }
  const std::vector<uint64_t>& words() const { return words_; }

 private:
  std::vector<uint64_t> words_;
  int64_t n_ = 0;
};

class LossMask {
 public:
  explicit LossMask(const LossMaskBuilder& b);
  int64_t size() const { return n_; }
  int64_t trained() const { return trained_; }  // tokens whose bit is 1
  // bits [begin, begin + n) as 0/1 bytes; 0 <= begin, begin + n <= size()
  void get(int64_t begin, int64_t n, uint8_t* out) const;
  // 16 hex digits (FNV-1a 64 of the size and every word): a checkpoint's data identity includes it
  std::string fingerprint() const;

 private:
  Buffer words_;
  int64_t n_ = 0, trained_ = 0;
};

// A checkpoint's fingerprint of training data: the ids' (token_fingerprint), with a mask both mixed.
std::string data_fingerprint(const TokenStore& ids, const LossMask* mask);

}  // namespace oomb
