#include "text/byte_level.h"

#include "text/utf8.h"

namespace oomb {

namespace {
struct Tables {
  std::array<uint32_t, 256> to_char{};
  std::array<int16_t, 512> to_byte{};  // every mapped code point is below U+0144
  Tables() {
    to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      to_char[size_t(b)] = self ? uint32_t(b) : next++;
      to_byte[to_char[size_t(b)]] = int16_t(b);
    }
  }
};
const Tables& tables() {
  static const Tables t;
  return t;
}
}  // namespace

uint32_t byte_to_char(uint8_t b) { return tables().to_char[b]; }

int char_to_byte(uint32_t cp) { return cp < 512 ? tables().to_byte[cp] : -1; }

bool byte_level_decode(std::string_view s, std::string& bytes) {
  bytes.clear();
  for (size_t i = 0; i < s.size();) {
    if (utf8_seq_len(s, i) == 0) return false;
    const int b = char_to_byte(utf8_next(s, i));
    if (b < 0) return false;
    bytes += char(b);
  }
  return true;
}

}  // namespace oomb
