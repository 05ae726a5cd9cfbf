// Safetensors I/O: validated reading (single files and HF-style sharded directories) and atomic writing.
// Format: u64 LE header length N, N bytes of JSON header, then the data section (offsets relative to it).
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace oomb {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
  int64_t numel() const;
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // sorted by offset
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // file offset of the data section (8 + N)
};

constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;  // same limit as the reference implementation

// Validates a file's header. `bytes` holds the file's first bytes: all of them, or at least 8 + N when the
// length prefix is acceptable. Every error is an oomb::Error starting with `path`.
SafetensorsHeader parse_safetensors_header(std::string_view bytes, uint64_t file_size,
                                           const std::filesystem::path& path);

// One file; the header is fully validated on open, data is read on demand with pread.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::filesystem::path& path);
  const std::filesystem::path& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return h_.tensors; }  // in file order of offsets
  const TensorInfo* find(std::string_view name) const;                   // null if absent
  const std::map<std::string, std::string>& metadata() const { return h_.metadata; }
  void read_raw(const TensorInfo& t, void* dst) const;  // exactly t.end - t.begin bytes
  // bytes [off, off + n) of tensor t
  void read_range(const TensorInfo& t, uint64_t off, uint64_t n, void* dst) const;

 private:
  struct Fd;
  std::filesystem::path path_;
  SafetensorsHeader h_;
  std::map<std::string, size_t, std::less<>> by_name_;
  std::shared_ptr<Fd> fd_;
};

// A model directory (DIR/model.safetensors, or DIR/model.safetensors.index.json and its shards; the index
// wins when both exist) or a single file.
class SafetensorsModel {
 public:
  static SafetensorsModel open(const std::filesystem::path& dir_or_file);
  std::vector<std::string> names() const;               // sorted
  const TensorInfo* find(std::string_view name) const;  // null if absent
  const TensorInfo& get(std::string_view name) const;   // throws "<dir>: tensor '<name>' not found"
  // Converts a float tensor to fp32 into dst; throws naming the tensor if shape != expected_shape
  // (when non-empty).
  void read_f32(std::string_view name, float* dst, const std::vector<int64_t>& expected_shape = {}) const;
  void read_raw(std::string_view name, void* dst) const;

 private:
  struct Loc {
    size_t file, tensor;
  };
  const Loc& locate(std::string_view name) const;
  std::filesystem::path root_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, Loc, std::less<>> index_;
};

struct SaveTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// Writes atomically: to "<path>.tmp.<pid>", fsync, then rename, so a crash never leaves a half-written file.
// Adds {"format": "pt"} to metadata unless it has a "format" key.
void save_safetensors(const std::filesystem::path& path, std::span<const SaveTensor> tensors,
                      const std::map<std::string, std::string>& metadata = {});
// Writes DIR/model.safetensors if the total fits max_shard_bytes, else DIR/model-0000i-of-0000n.safetensors
// + DIR/model.safetensors.index.json, HF style. Every file is atomic and the index is written last; stale
// model*.safetensors* files of an earlier save are removed only after the new ones are in place.
void save_safetensors_dir(const std::filesystem::path& dir, std::span<const SaveTensor> tensors,
                          uint64_t max_shard_bytes = 5ull << 30);

// One file whose tensors' bytes arrive in order, a piece at a time (data too large to hold at once,
// or gathered from many ranks): the layout's data pointers are not read. Atomic as save_safetensors;
// commit checks that exactly the layout's bytes were written.
class AtomicFile;
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::filesystem::path& path, std::span<const SaveTensor> layout,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  void write(const void* data, uint64_t bytes);
  void commit();

 private:
  std::unique_ptr<AtomicFile> f_;
  std::string where_;
  uint64_t left_ = 0;
};

}  // namespace oomb
