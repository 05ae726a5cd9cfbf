// A file written under a temporary name and renamed over its target only on commit, after fsync of
// the file (and then of its directory): a crash or an error never leaves a half-written target,
// and an uncommitted temporary is removed (one a killed writer left, NAME.tmp.PID of a process
// gone, at the next write of NAME).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

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

// OOMB_TEST_CKPT_DELAY_MS: for tests only, a pause after each file of a checkpoint and before a saved
// model's directory is swapped in, so that a test can signal or kill the writer in the middle of
// one. Unset (or 0) in every real run.
void test_write_delay();

}  // namespace oomb

namespace oomb {

// A directory written as a unit: files go into a staging directory beside the target
// (".NAME.oomb-new.PID"), and commit() swaps it into place with one rename (renameat2
// RENAME_EXCHANGE when the target exists), after fsync of every file and of the directory. A
// reader, or a crash at any moment, sees the whole old directory or the whole new one. Files of the
// old directory that the new one lacks are carried over (hard links) unless `drop` says they belong
// to what is being replaced; the new directory takes the old one's permissions and group. An
// uncommitted staging directory is removed; stale ones left by killed processes are removed on the
// next write to the same target (and by remove_stale, which oomb train calls for --out at its start).
class AtomicDir {
 public:
  explicit AtomicDir(std::filesystem::path target);
  AtomicDir(const AtomicDir&) = delete;
  AtomicDir& operator=(const AtomicDir&) = delete;
  ~AtomicDir();
  const std::filesystem::path& target() const { return target_; }
  const std::filesystem::path& staging() const { return staging_; }
  void commit(const std::function<bool(const std::string& name)>& drop = {});
  // Removes the staging directories of target (resolved as the constructor does) that writers no
  // longer running left; returns them.
  static std::vector<std::filesystem::path> remove_stale(const std::filesystem::path& target);

 private:
  std::filesystem::path target_, staging_;
  bool committed_ = false;
};

}  // namespace oomb
