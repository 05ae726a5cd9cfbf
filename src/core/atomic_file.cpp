#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "core/error.h"

namespace oomb {

namespace fs = std::filesystem;

AtomicFile::AtomicFile(fs::path target)
    : target_(std::move(target)), tmp_(fmt::format("{}.tmp.{}", target_.string(), ::getpid())) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  OOMB_CHECK(fd_ >= 0, "{}: cannot create: {}", tmp_, std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* p, uint64_t n) {
  auto* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd_, c, std::min<uint64_t>(n, 1u << 30));
    if (w < 0 && errno == EINTR) continue;
    OOMB_CHECK(w > 0, "{}: write failed: {}", tmp_, std::strerror(errno));
    c += w;
    n -= uint64_t(w);
  }
}

void AtomicFile::write_at(uint64_t offset, const void* p, uint64_t n) {
  auto* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd_, c, std::min<uint64_t>(n, 1u << 30), off_t(offset));
    if (w < 0 && errno == EINTR) continue;
    OOMB_CHECK(w > 0, "{}: write failed: {}", tmp_, std::strerror(errno));
    c += w, offset += uint64_t(w), n -= uint64_t(w);
  }
}

void AtomicFile::commit() {
  OOMB_CHECK(::fsync(fd_) == 0, "{}: fsync failed: {}", tmp_, std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  OOMB_CHECK(::close(fd) == 0, "{}: close failed: {}", tmp_, std::strerror(errno));
  OOMB_CHECK(::rename(tmp_.c_str(), target_.c_str()) == 0, "{}: cannot rename {} over it: {}", target_.string(), tmp_,
             std::strerror(errno));
  committed_ = true;
  const fs::path dir = target_.parent_path().empty() ? fs::path(".") : target_.parent_path();
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {  // make the rename durable
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomic(const fs::path& path, const std::string& text) {
  AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
}

}  // namespace oomb
