#include "core/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>

#include "core/error.h"

namespace oomb {

namespace fs = std::filesystem;

// Whether the writer whose pid starts name at `at` (the pid alone, or before ".old") is gone.
static bool writer_gone(const std::string& name, size_t at) {
  char* end = nullptr;
  const long pid = std::strtol(name.c_str() + at, &end, 10);
  return pid > 0 && (*end == '\0' || *end == '.') && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH;
}

// NAME.tmp.PID files beside target that a killed writer left (its process gone): a tokenized
// corpus interrupted by Ctrl-C stayed on disk for good.
static void remove_stale_tmp(const fs::path& target) {
  std::error_code ec;
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string stem = target.filename().string() + ".tmp.";
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(stem) && writer_gone(name, stem.size())) fs::remove(e.path(), ec);
  }
}

AtomicFile::AtomicFile(fs::path target)
    : target_(std::move(target)), tmp_(fmt::format("{}.tmp.{}", target_.string(), ::getpid())) {
  remove_stale_tmp(target_);
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

// ---- AtomicDir ----

namespace oomb {

namespace {

void fsync_path(const fs::path& p, bool dir) {
  const int fd = ::open(p.c_str(), (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  OOMB_CHECK(fd >= 0, "{}: cannot open to sync: {}", p.string(), std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  OOMB_CHECK(rc == 0, "{}: fsync failed: {}", p.string(), std::strerror(err));
}

fs::path parent_of(const fs::path& p) { return p.parent_path().empty() ? fs::path(".") : p.parent_path(); }

}  // namespace

void test_write_delay() {
  static const int ms = [] {
    const char* e = std::getenv("OOMB_TEST_CKPT_DELAY_MS");
    return e ? std::max(0, std::atoi(e)) : 0;
  }();
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// The directory a save into `target` replaces: "out/" is "out"; a link, the directory it points at.
static fs::path resolved(fs::path target) {
  if (!target.has_filename()) target = target.parent_path();
  std::error_code ec;
  if (fs::is_symlink(target, ec)) {
    fs::path real = fs::canonical(target, ec);
    if (!ec) return real;
  }
  return target;
}

AtomicDir::AtomicDir(fs::path target) : target_(resolved(std::move(target))) {
  std::error_code ec;
  const fs::path parent = parent_of(target_);
  fs::create_directories(parent, ec);
  OOMB_CHECK(!ec, "{}: cannot create the directory {}: {}", target_.string(), parent.string(), ec.message());
  OOMB_CHECK(!fs::exists(target_, ec) || fs::is_directory(target_, ec), "{}: exists and is not a directory",
             target_.string());
  remove_stale(target_);
  staging_ = parent / ("." + target_.filename().string() + ".oomb-new." + std::to_string(::getpid()));
  fs::remove_all(staging_, ec);
  fs::create_directory(staging_, ec);
  OOMB_CHECK(!ec, "{}: cannot create {}: {}", target_.string(), staging_.string(), ec.message());
}

std::vector<fs::path> AtomicDir::remove_stale(const fs::path& given) {
  const fs::path target = resolved(given);
  std::vector<fs::path> removed;
  std::error_code ec;
  const std::string stem = "." + target.filename().string() + ".oomb-new.";
  for (const auto& e : fs::directory_iterator(parent_of(target), ec)) {  // left by a killed writer
    const std::string name = e.path().filename().string();
    if (!name.starts_with(stem)) continue;
    // (without RENAME_EXCHANGE a kill between the two renames leaves the old directory as NAME...old:
    // while there is no target it is the only copy)
    if (name.ends_with(".old") && !fs::exists(target, ec)) continue;
    if (!writer_gone(name, stem.size())) continue;  // its writer still runs
    fs::remove_all(e.path(), ec);
    if (!ec) removed.push_back(e.path());
  }
  return removed;
}

AtomicDir::~AtomicDir() {
  std::error_code ec;
  if (!committed_) fs::remove_all(staging_, ec);
}

void AtomicDir::commit(const std::function<bool(const std::string&)>& drop) {
  std::error_code ec;
  const bool replace = fs::exists(target_, ec);
  if (replace) {  // carry over what the new directory does not replace (never lose a user's file)
    for (const auto& e : fs::directory_iterator(target_, ec)) {
      const std::string name = e.path().filename().string();
      if (fs::exists(staging_ / name, ec) || (drop && drop(name))) continue;
      if (e.is_directory(ec)) {
        fs::copy(e.path(), staging_ / name, fs::copy_options::recursive | fs::copy_options::create_hard_links, ec);
      } else {
        fs::create_hard_link(e.path(), staging_ / name, ec);
        if (ec) fs::copy(e.path(), staging_ / name, fs::copy_options::copy_symlinks, ec);
      }
      OOMB_CHECK(!ec, "{}: cannot carry {} over into the new directory: {}", target_.string(), name, ec.message());
    }
    OOMB_CHECK(!ec, "{}: cannot list: {}", target_.string(), ec.message());
  }
  // the old directory's mode, setgid and group (a group the user may not give stays the user's own);
  // the owner keeps every right until the old directory is gone (a read-only one could not be
  // emptied), then the mode is exactly the old one
  struct stat old_dir {};
  const bool keep_mode = replace && ::stat(target_.c_str(), &old_dir) == 0;
  if (keep_mode) {
    const int group_kept = ::chown(staging_.c_str(), uid_t(-1), old_dir.st_gid);
    (void)group_kept;
    OOMB_CHECK(::chmod(staging_.c_str(), (old_dir.st_mode & 07777) | S_IRWXU) == 0, "{}: cannot give {} the "
               "directory's permissions: {}", target_.string(), staging_.string(), std::strerror(errno));
  }
  for (const auto& e : fs::recursive_directory_iterator(staging_, ec))
    if (e.is_regular_file(ec) && !e.is_symlink(ec)) fsync_path(e.path(), false);
  fsync_path(staging_, true);
  if (replace) {
    if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) != 0) {
      // a file system without RENAME_EXCHANGE: move the old directory aside first
      OOMB_CHECK(errno == EINVAL || errno == ENOSYS || errno == ENOTSUP, "{}: cannot swap in {}: {}",
                 target_.string(), staging_.string(), std::strerror(errno));
      const fs::path aside = staging_.string() + ".old";
      OOMB_CHECK(::rename(target_.c_str(), aside.c_str()) == 0, "{}: cannot move aside: {}", target_.string(),
                 std::strerror(errno));
      OOMB_CHECK(::rename(staging_.c_str(), target_.c_str()) == 0, "{}: cannot rename {} into place: {}",
                 target_.string(), staging_.string(), std::strerror(errno));
      fs::rename(aside, staging_, ec);
    }
  } else {
    OOMB_CHECK(::rename(staging_.c_str(), target_.c_str()) == 0, "{}: cannot rename {} into place: {}",
               target_.string(), staging_.string(), std::strerror(errno));
  }
  committed_ = true;
  fsync_path(parent_of(target_), true);
  if (keep_mode) fs::permissions(staging_, fs::perms::owner_all, fs::perm_options::add, ec);
  fs::remove_all(staging_, ec);  // the old directory, now under the staging name
  if (keep_mode) ::chmod(target_.c_str(), old_dir.st_mode & 07777);
}

}  // namespace oomb
