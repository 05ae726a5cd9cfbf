#include "data/token_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "core/error.h"

namespace oomb {

TokenFile::TokenFile(const std::filesystem::path& path, int64_t vocab) : path_(path), vocab_(vocab) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  OOMB_CHECK(fd_ >= 0, "--data {}: cannot open: {}", path.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);  // the destructor does not run for a throwing constructor
    fail("--data {}: not a regular file", path.string());
  }
  const off_t bytes = st.st_size;
  if (bytes % 4 != 0 || bytes / 4 < 2) ::close(fd_);
  OOMB_CHECK(bytes % 4 == 0, "--data {}: size {} bytes is not a multiple of 4 (expected raw uint32 token ids)",
             path.string(), int64_t(bytes));
  n_tokens_ = bytes / 4;
  OOMB_CHECK(n_tokens_ >= 2, "--data {}: holds {} tokens; training needs at least 2", path.string(), n_tokens_);
}

TokenFile::~TokenFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string TokenFile::describe() const { return fmt::format("{} ({} tokens)", path_.string(), n_tokens_); }

// Reads ids [start, start + n] of the file (n + 1 of them, wrapping) into ids[0..n) and targets[0..n).
void TokenFile::read(int64_t w, int64_t N, int64_t t0, int64_t n, int32_t* ids, int32_t* targets) {
  const int64_t start = ((w % n_tokens_) * (N % n_tokens_) + t0) % n_tokens_;
  constexpr int64_t kPiece = 4096;
  uint32_t buf[kPiece];
  int64_t got = 0;  // ids read so far, of n + 1
  while (got < n + 1) {
    const int64_t at = (start + got) % n_tokens_, len = std::min({n + 1 - got, n_tokens_ - at, kPiece});
    const ssize_t r = ::pread(fd_, buf, size_t(len) * 4, off_t(at) * 4);
    OOMB_CHECK(r == ssize_t(len) * 4, "--data {}: short read at token {}", path_.string(), at);
    for (int64_t i = 0; i < len; ++i) {
      uint32_t id = buf[i];
      if (std::endian::native == std::endian::big) id = __builtin_bswap32(id);
      OOMB_CHECK(int64_t(id) < vocab_, "--data {}: token id {} at position {} is beyond the model's vocabulary ({})",
                 path_.string(), id, at + i, vocab_);
      const int64_t k = got + i;  // id k is input k (k < n) and target k - 1 (k > 0)
      if (k < n) ids[k] = int32_t(id);
      if (k > 0) targets[k - 1] = int32_t(id);
    }
    got += len;
  }
}

std::unique_ptr<TokenSource> open_token_source(const std::filesystem::path& path, int64_t vocab) {
  OOMB_CHECK(path.extension() == ".bin", "--data {}: unsupported file type '{}' (supported: .bin raw uint32 ids)",
             path.string(), path.extension().string());
  return std::make_unique<TokenFile>(path, vocab);
}

}  // namespace oomb
