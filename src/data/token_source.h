// Sources of training windows: N input ids and their N next-token targets (target < 0 = ignored).
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace oomb {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // Tokens [t0, t0 + n) of window w (from 0) of N tokens: ids and their next-token targets.
  virtual void read(int64_t w, int64_t N, int64_t t0, int64_t n, int32_t* ids, int32_t* targets) = 0;
  void window(int64_t w, int64_t N, int32_t* ids, int32_t* targets) { read(w, N, 0, N, ids, targets); }
  virtual std::string describe() const = 0;
};

// Raw little-endian uint32 token ids, no header. Window w covers tokens [w*N, w*N + N] (N + 1 ids),
// wrapping at the end of the file. Every id read is checked against the vocabulary.
class TokenFile final : public TokenSource {
 public:
  TokenFile(const std::filesystem::path& path, int64_t vocab);
  ~TokenFile() override;
  void read(int64_t w, int64_t N, int64_t t0, int64_t n, int32_t* ids, int32_t* targets) override;
  std::string describe() const override;
  int64_t size() const { return n_tokens_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  int64_t n_tokens_ = 0, vocab_ = 0;
};

// Opens --data FILE by its extension (.bin: raw uint32).
std::unique_ptr<TokenSource> open_token_source(const std::filesystem::path& path, int64_t vocab);

}  // namespace oomb
