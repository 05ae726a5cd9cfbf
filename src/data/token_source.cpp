#include "data/token_source.h"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "core/error.h"

namespace oomb {

TokenFile::TokenFile(const std::filesystem::path& path, int64_t vocab) : path_(path), vocab_(vocab) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  OOMB_CHECK(fd_ >= 0, "--data {}: cannot open: {}", path.string(), std::strerror(errno));
  const off_t bytes = ::lseek(fd_, 0, SEEK_END);
  OOMB_CHECK(bytes >= 0, "--data {}: cannot read its size", path.string());
  OOMB_CHECK(bytes % 4 == 0, "--data {}: size {} bytes is not a multiple of 4 (expected raw uint32 token ids)",
             path.string(), int64_t(bytes));
  n_tokens_ = bytes / 4;
  OOMB_CHECK(n_tokens_ >= 2, "--data {}: holds {} tokens; training needs at least 2", path.string(), n_tokens_);
}

TokenFile::~TokenFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string TokenFile::describe() const { return fmt::format("{} ({} tokens)", path_.string(), n_tokens_); }

void TokenFile::window(int64_t w, int64_t N, int32_t* ids, int32_t* targets) {
  if (scratch_len_ < N + 1) {
    scratch_.reset(new uint32_t[size_t(N + 1)]);
    scratch_len_ = N + 1;
  }
  // read N + 1 ids from start, in pieces where the window wraps
  const int64_t start = (w * N) % n_tokens_;
  int64_t got = 0;
  while (got < N + 1) {
    const int64_t at = (start + got) % n_tokens_, n = std::min(N + 1 - got, n_tokens_ - at);
    const ssize_t r = ::pread(fd_, scratch_.get() + got, size_t(n) * 4, off_t(at) * 4);
    OOMB_CHECK(r == ssize_t(n) * 4, "--data {}: short read at token {}", path_.string(), at);
    for (int64_t i = 0; i < n; ++i) {
      uint32_t id = scratch_[size_t(got + i)];
      if (std::endian::native == std::endian::big) id = __builtin_bswap32(id);
      OOMB_CHECK(int64_t(id) < vocab_, "--data {}: token id {} at position {} is beyond the model's vocabulary ({})",
                 path_.string(), id, at + i, vocab_);
      scratch_[size_t(got + i)] = id;
    }
    got += n;
  }
  for (int64_t i = 0; i < N; ++i) {
    ids[i] = int32_t(scratch_[size_t(i)]);
    targets[i] = int32_t(scratch_[size_t(i + 1)]);
  }
}

std::unique_ptr<TokenSource> open_token_source(const std::filesystem::path& path, int64_t vocab) {
  OOMB_CHECK(path.extension() == ".bin", "--data {}: unsupported file type '{}' (supported: .bin raw uint32 ids)",
             path.string(), path.extension().string());
  return std::make_unique<TokenFile>(path, vocab);
}

}  // namespace oomb
