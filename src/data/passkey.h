// Passkey retrieval prompts (oomb eval --passkey): filler with a numeric key hidden at a chosen
// depth, then a question the model answers by decoding the key. Two forms:
//   text (the model has a tokenizer): the usual English filler ("The grass is green. ...") with
//     "The pass key is 48213. Remember it. 48213 is the pass key." inside, ending in
//     "What is the pass key? The pass key is"; right when the decoded text starts with the key;
//   tokens (no tokenizer; any vocabulary of at least 12): digit k is id k, id 10 marks the key,
//     filler is random ids from 11 up; the needle is [10, d1 .. dK] and the prompt ends with [10];
//     right when the next K ids are the key's digits.
// Every prompt is exactly the length asked for; the needle starts after round(depth * F) of the F
// filler tokens (depth 0: at the start, 1: just before the question).
// PasskeyTask serves the token form as training windows (targets on the answer only), for tests.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/token_source.h"
#include "text/tokenizer.h"

namespace oomb {

struct PasskeyPrompt {
  std::vector<int32_t> ids;      // the prompt, ending with the question
  std::string key;               // the digits
  std::vector<int32_t> answer;   // token form: the key's ids (text form: empty)
  int64_t needle_at = 0;         // token index where the needle starts
};

class PasskeyPrompts {
 public:
  static PasskeyPrompts tokens(int64_t vocab, int digits);
  static PasskeyPrompts text(const Tokenizer* tok, int digits);  // tok outlives this
  // `which` picks the key (a hash of it and the seed).
  PasskeyPrompt make(int64_t length, double depth, uint64_t seed, uint64_t which) const;
  int64_t answer_tokens() const;  // tokens to decode
  bool correct(const PasskeyPrompt& p, const std::vector<int32_t>& generated) const;
  std::string describe() const;
  int64_t shortest() const;  // the shortest prompt (no filler)

 private:
  const Tokenizer* tok_ = nullptr;
  int64_t vocab_ = 0;
  int digits_ = 5;
  std::vector<int32_t> prefix_, filler_, question_;  // text form
};

class PasskeyTask final : public TokenSource {
 public:
  // Windows of N tokens: a token-form prompt of N - (digits - 1) tokens at a random depth, then the
  // key's first digits - 1 ids; targets: the key's digits after the prompt's last token, -1 elsewhere.
  PasskeyTask(uint64_t seed, int64_t vocab, int digits);
  void read(int64_t w, int64_t N, int64_t t0, int64_t n, int32_t* ids, int32_t* targets) override;
  std::string describe() const override;

 private:
  uint64_t seed_;
  PasskeyPrompts prompts_;
  int digits_;
};

}  // namespace oomb
