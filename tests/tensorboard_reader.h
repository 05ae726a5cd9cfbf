// A reader of TensorBoard event files for the tests, written from the formats' definitions and
// sharing no code with train/tensorboard: TFRecord framing with both CRCs checked (CRC32C computed
// bit by bit, reflected polynomial 0x82F63B78), and the Event / Summary protobuf fields decoded
// from their wire format.
#pragma once
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace oomb::testing {

inline uint32_t crc32c_bitwise(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}
inline uint32_t tf_mask(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

struct TbEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::map<std::string, float> scalars;
};

class ProtoReader {
 public:
  ProtoReader(const std::string& s) : s_(s) {}
  bool done() const { return i_ >= s_.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (i_ >= s_.size() || shift > 63) throw std::runtime_error("protobuf: varint runs past the end");
      const uint8_t b = uint8_t(s_[i_++]);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
  }
  std::string take(size_t n) {
    if (n > s_.size() - i_) throw std::runtime_error("protobuf: field runs past the end");
    std::string r = s_.substr(i_, n);
    i_ += n;
    return r;
  }

 private:
  std::string s_;
  size_t i_ = 0;
};

inline TbEvent decode_event(const std::string& data) {
  TbEvent e;
  ProtoReader r(data);
  while (!r.done()) {
    const uint64_t k = r.varint();
    const int field = int(k >> 3), wire = int(k & 7);
    if (field == 1 && wire == 1) {
      const std::string b = r.take(8);
      std::memcpy(&e.wall_time, b.data(), 8);
    } else if (field == 2 && wire == 0) {
      e.step = int64_t(r.varint());
    } else if (field == 3 && wire == 2) {
      e.file_version = r.take(r.varint());
    } else if (field == 5 && wire == 2) {
      ProtoReader sum(r.take(r.varint()));
      while (!sum.done()) {
        if (sum.varint() != (1 << 3 | 2)) throw std::runtime_error("summary: expected a value (field 1)");
        ProtoReader v(sum.take(sum.varint()));
        std::string tag;
        float x = 0;
        bool has = false;
        while (!v.done()) {
          const uint64_t vk = v.varint();
          if (vk == (1 << 3 | 2)) {
            tag = v.take(v.varint());
          } else if (vk == (2 << 3 | 5)) {
            const std::string b = v.take(4);
            std::memcpy(&x, b.data(), 4);
            has = true;
          } else {
            throw std::runtime_error("value: unexpected field");
          }
        }
        if (!has) throw std::runtime_error("value " + tag + ": no simple_value");
        e.scalars[tag] = x;
      }
    } else {
      throw std::runtime_error("event: unexpected field " + std::to_string(field));
    }
  }
  return e;
}

// Every record of the file; throws naming the record whose framing or CRC is wrong.
inline std::vector<TbEvent> read_events(const std::string& bytes) {
  std::vector<TbEvent> out;
  size_t i = 0;
  auto u = [&](size_t at) { return reinterpret_cast<const uint8_t*>(bytes.data()) + at; };
  while (i < bytes.size()) {
    const std::string rec = "record " + std::to_string(out.size());
    if (bytes.size() - i < 12) throw std::runtime_error(rec + ": truncated header");
    uint64_t len;
    uint32_t lcrc, dcrc;
    std::memcpy(&len, u(i), 8);
    std::memcpy(&lcrc, u(i + 8), 4);
    if (lcrc != tf_mask(crc32c_bitwise(u(i), 8))) throw std::runtime_error(rec + ": length CRC mismatch");
    if (len > bytes.size() - i - 16) throw std::runtime_error(rec + ": truncated data");
    std::memcpy(&dcrc, u(i + 12 + len), 4);
    if (dcrc != tf_mask(crc32c_bitwise(u(i + 12), len))) throw std::runtime_error(rec + ": data CRC mismatch");
    out.push_back(decode_event(bytes.substr(i + 12, len)));
    i += 16 + len;
  }
  return out;
}

}  // namespace oomb::testing
