// TensorBoard event files written directly (oomb train --tensorboard DIR): no TensorFlow, no
// protobuf library. A file DIR/events.out.tfevents.<unix time>.<host>.<pid>.oomb is a TFRecord
// stream: each record is
//   uint64 length (little-endian), uint32 masked CRC32C of those 8 bytes,
//   the data, uint32 masked CRC32C of the data
// (mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8), and each record's data is one Event protobuf,
// encoded here by hand: wall_time (field 1, double), step (2, varint), file_version (3, string, the
// first record: "brain.Event:2") or summary (5, message) holding values (1, message) of tag
// (1, string) and simple_value (2, float). CRC32C comes from Boost.CRC (header-only).
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace oomb {

uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

// Protobuf encodings of the two messages (exposed for tests).
std::string event_file_version(double wall_time);
std::string event_scalars(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& values);
// One TFRecord holding data.
std::string tfrecord(const std::string& data);

class TensorBoardWriter {
 public:
  explicit TensorBoardWriter(const std::filesystem::path& dir);  // creates DIR and the file; errors name --tensorboard
  void scalars(int64_t step, const std::vector<std::pair<std::string, float>>& values);  // one event, flushed
  const std::filesystem::path& path() const { return path_; }

 private:
  void write(const std::string& record);
  std::filesystem::path path_;
  std::ofstream f_;
};

}  // namespace oomb
