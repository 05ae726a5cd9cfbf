#include "data/passkey.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fmt/format.h>

#include "core/error.h"

namespace oomb {

namespace {
uint64_t mix(uint64_t x) {
  x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull, x ^= x >> 33;
  return x;
}
constexpr int32_t kMark = 10, kFirstFiller = 11;
const char* const kPrefix =
    "There is an important piece of information hidden inside a lot of irrelevant text. Find it and "
    "memorize it. I will quiz you about it.\n";
const char* const kFiller = " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
const char* const kQuestion = "\nWhat is the pass key? The pass key is";
}  // namespace

PasskeyPrompts PasskeyPrompts::tokens(int64_t vocab, int digits) {
  OOMB_CHECK(vocab >= 12, "passkey: the token form needs a vocabulary of at least 12 ids (digits 0-9, a mark, "
             "filler), the model has {}", vocab);
  OOMB_CHECK(digits >= 1 && digits <= 18, "--digits {}: must be 1 to 18", digits);
  PasskeyPrompts p;
  p.vocab_ = vocab, p.digits_ = digits;
  return p;
}

PasskeyPrompts PasskeyPrompts::text(const Tokenizer* tok, int digits) {
  OOMB_CHECK(digits >= 1 && digits <= 18, "--digits {}: must be 1 to 18", digits);
  PasskeyPrompts p;
  p.tok_ = tok, p.digits_ = digits;
  p.prefix_ = tok->encode(kPrefix);
  p.filler_ = tok->encode(kFiller);
  p.question_ = tok->encode(kQuestion);
  OOMB_CHECK(!p.filler_.empty(), "passkey: the filler encodes to no tokens");
  return p;
}

int64_t PasskeyPrompts::answer_tokens() const { return tok_ ? digits_ + 3 : digits_; }

std::string PasskeyPrompts::describe() const {
  return tok_ ? fmt::format("text prompts, {}-digit keys", digits_)
              : fmt::format("token prompts (digits = ids 0-9, mark = id 10), {}-digit keys", digits_);
}

int64_t PasskeyPrompts::shortest() const {
  if (!tok_) return 1 + digits_ + 1;
  const std::string needle = fmt::format("\nThe pass key is {0}. Remember it. {0} is the pass key.\n",
                                         std::string(size_t(digits_), '1'));
  return int64_t(prefix_.size() + tok_->encode(needle).size() + question_.size());
}

PasskeyPrompt PasskeyPrompts::make(int64_t length, double depth, uint64_t seed, uint64_t which) const {
  OOMB_CHECK(depth >= 0 && depth <= 1, "--depths: {} is not between 0 and 1", depth);
  PasskeyPrompt p;
  uint64_t h = mix(seed * 0x9e3779b97f4a7c15ull ^ mix(which + 1));
  for (int i = 0; i < digits_; ++i, h = mix(h + 1)) {
    const int d = (i == 0 && tok_) ? 1 + int(h % 9) : int(h % 10);  // text: no leading zero
    p.key += char('0' + d);
  }
  std::vector<int32_t> needle, head, tail;
  if (tok_) {
    needle = tok_->encode(fmt::format("\nThe pass key is {0}. Remember it. {0} is the pass key.\n", p.key));
    head = prefix_, tail = question_;
  } else {
    needle.push_back(kMark);
    for (char c : p.key) p.answer.push_back(int32_t(c - '0'));
    needle.insert(needle.end(), p.answer.begin(), p.answer.end());
    tail = {kMark};
  }
  const int64_t fixed = int64_t(head.size() + needle.size() + tail.size());
  OOMB_CHECK(length >= fixed, "--lengths {}: too short for the prompt's {} tokens without filler", length, fixed);
  const int64_t F = length - fixed, at = std::llround(depth * double(F));
  auto filler = [&](int64_t i) {
    if (tok_) return filler_[size_t(i) % filler_.size()];
    return int32_t(kFirstFiller + int64_t(mix(h ^ uint64_t(i) * 0x2545f4914f6cdd1dull) % uint64_t(vocab_ - kFirstFiller)));
  };
  p.ids = head;
  for (int64_t i = 0; i < at; ++i) p.ids.push_back(filler(i));
  p.needle_at = int64_t(p.ids.size());
  p.ids.insert(p.ids.end(), needle.begin(), needle.end());
  for (int64_t i = at; i < F; ++i) p.ids.push_back(filler(i));
  p.ids.insert(p.ids.end(), tail.begin(), tail.end());
  return p;
}

bool PasskeyPrompts::correct(const PasskeyPrompt& p, const std::vector<int32_t>& generated) const {
  if (!tok_) return generated.size() >= p.answer.size() && std::equal(p.answer.begin(), p.answer.end(), generated.begin());
  const std::string s = tok_->decode(generated);
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos || s.compare(b, p.key.size(), p.key) != 0) return false;
  const size_t e = b + p.key.size();
  return e == s.size() || !std::isdigit(static_cast<unsigned char>(s[e]));
}

PasskeyTask::PasskeyTask(uint64_t seed, int64_t vocab, int digits)
    : seed_(seed), prompts_(PasskeyPrompts::tokens(vocab, digits)), digits_(digits) {}

std::string PasskeyTask::describe() const { return "generated passkey task (" + prompts_.describe() + ")"; }

void PasskeyTask::read(int64_t w, int64_t N, int64_t t0, int64_t n, int32_t* ids, int32_t* targets) {
  const int64_t len = N - (digits_ - 1);
  const double depth = double(mix(seed_ ^ mix(uint64_t(w) + 77)) % 1001) / 1000.0;
  const PasskeyPrompt p = prompts_.make(len, depth, seed_, uint64_t(w));
  std::vector<int32_t> all = p.ids, tg(size_t(N), -1);
  all.insert(all.end(), p.answer.begin(), p.answer.end() - 1);
  for (int i = 0; i < digits_; ++i) tg[size_t(len - 1 + i)] = p.answer[size_t(i)];
  std::copy_n(all.begin() + t0, n, ids);
  std::copy_n(tg.begin() + t0, n, targets);
}

}  // namespace oomb
