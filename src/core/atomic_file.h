// A file written under a temporary name and renamed over its target only on commit, after fsync of
// the file (and then of its directory): a crash or an error never leaves a half-written target,
// and an uncommitted temporary is removed.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

namespace oomb {

class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path target);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();
  const std::filesystem::path& target() const { return target_; }
  void write(const void* p, uint64_t n);
  // Overwrites bytes already written (a header patched once the body's size is known).
  void write_at(uint64_t offset, const void* p, uint64_t n);
  void commit();

 private:
  std::filesystem::path target_;
  std::string tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Writes `text` to path through an AtomicFile.
void write_file_atomic(const std::filesystem::path& path, const std::string& text);

}  // namespace oomb
