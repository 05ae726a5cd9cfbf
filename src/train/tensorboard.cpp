#include "train/tensorboard.h"

#include <boost/crc.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fmt/format.h>
#include <unistd.h>

#include "core/error.h"

namespace oomb {

uint32_t crc32c(const void* data, size_t n) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> c;
  c.process_bytes(data, n);
  return c.checksum();
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

namespace {
void varint(std::string& s, uint64_t v) {
  for (; v >= 0x80; v >>= 7) s += char(uint8_t(v | 0x80));
  s += char(uint8_t(v));
}
void key(std::string& s, int field, int wire) { varint(s, uint64_t(field) << 3 | uint64_t(wire)); }
template <class T>
void fixed(std::string& s, int field, T v) {  // wire type 1 (8 bytes) or 5 (4 bytes), little-endian
  key(s, field, sizeof(T) == 8 ? 1 : 5);
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  s.append(b, sizeof(T));
}
void bytes(std::string& s, int field, const std::string& v) {
  key(s, field, 2);
  varint(s, v.size());
  s += v;
}
double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

std::string event_file_version(double wall_time) {
  std::string e;
  fixed(e, 1, wall_time);
  bytes(e, 3, "brain.Event:2");
  return e;
}

std::string event_scalars(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    bytes(value, 1, tag);
    fixed(value, 2, v);
    bytes(summary, 1, value);
  }
  std::string e;
  fixed(e, 1, wall_time);
  key(e, 2, 0);
  varint(e, uint64_t(step));
  bytes(e, 5, summary);
  return e;
}

std::string tfrecord(const std::string& data) {
  std::string r;
  const uint64_t len = data.size();
  char b[8];
  std::memcpy(b, &len, 8);  // little-endian hosts (x86-64, aarch64)
  r.append(b, 8);
  uint32_t c = masked_crc32c(b, 8);
  r.append(reinterpret_cast<const char*>(&c), 4);
  r += data;
  c = masked_crc32c(data.data(), data.size());
  r.append(reinterpret_cast<const char*>(&c), 4);
  return r;
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  OOMB_CHECK(!ec && std::filesystem::is_directory(dir), "--tensorboard {}: cannot create the directory{}",
             dir.string(), ec ? ": " + ec.message() : "");
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  path_ = dir / fmt::format("events.out.tfevents.{}.{}.{}.oomb", int64_t(now()), host, getpid());
  f_.open(path_, std::ios::binary | std::ios::app);
  OOMB_CHECK(f_.good(), "--tensorboard {}: cannot open {} for writing: {}", dir.string(), path_.string(),
             std::strerror(errno));
  write(tfrecord(event_file_version(now())));
}

void TensorBoardWriter::scalars(int64_t step, const std::vector<std::pair<std::string, float>>& values) {
  write(tfrecord(event_scalars(now(), step, values)));
}

void TensorBoardWriter::write(const std::string& record) {
  errno = 0;
  f_.write(record.data(), std::streamsize(record.size()));
  f_.flush();
  OOMB_CHECK(f_.good(), "--tensorboard: cannot write {}{}", path_.string(),
             errno ? std::string(": ") + std::strerror(errno) : "");
}

}  // namespace oomb
