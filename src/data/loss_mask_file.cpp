#include "data/loss_mask_file.h"

#include <cstring>
#include <fstream>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"

namespace oomb {

namespace fs = std::filesystem;

namespace {
constexpr char kMagic[8] = {'O', 'O', 'M', 'B', 'M', 'A', 'S', 'K'};
constexpr int64_t kHeader = 32;
}  // namespace

fs::path loss_mask_path(const fs::path& token_file) { return fs::path(token_file.string() + ".mask"); }

bool is_loss_mask_file(const fs::path& p) { return p.extension() == ".mask"; }

bool holds_loss_mask(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  char magic[8] = {};
  return f.read(magic, 8) && std::memcmp(magic, kMagic, 8) == 0;
}

void write_loss_mask(const fs::path& path, const LossMaskBuilder& bits, const TokenStore& ids) {
  OOMB_CHECK(bits.size() == ids.size(), "{}: {} mask bits for {} tokens", path.string(), bits.size(), ids.size());
  char header[kHeader];
  std::memcpy(header, kMagic, 8);
  const uint64_t n = uint64_t(bits.size());
  for (int b = 0; b < 8; ++b) header[8 + b] = char((n >> (8 * b)) & 0xff);
  const std::string fp = token_fingerprint(ids);
  std::memcpy(header + 16, fp.data(), 16);
  AtomicFile f(path);
  f.write(header, kHeader);
  std::vector<uint8_t> body(size_t((bits.size() + 7) / 8));
  for (size_t k = 0; k < body.size(); ++k) body[k] = uint8_t(bits.words()[k / 8] >> (8 * (k % 8)));
  f.write(body.data(), body.size());
  f.commit();
}

void read_loss_mask(const fs::path& path, const TokenStore& ids, LossMaskBuilder& into) {
  const std::string where = path.string();
  std::ifstream f(path, std::ios::binary);
  OOMB_CHECK(f.good(), "{}: cannot open", where);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  OOMB_CHECK(bytes.size() >= size_t(kHeader) && std::memcmp(bytes.data(), kMagic, 8) == 0,
             "{}: not a loss mask (it starts with \"OOMBMASK\" when `oomb tokenize --prompt-field` writes it)", where);
  uint64_t n = 0;
  for (int b = 0; b < 8; ++b) n |= uint64_t(uint8_t(bytes[size_t(8 + b)])) << (8 * b);
  OOMB_CHECK(n == uint64_t(ids.size()), "{}: holds the mask of {} tokens, but {} has {}: tokenize again (or, if "
             "those ids are read in the wrong format, name it with --data-format)", where, n, ids.describe(), ids.size());
  const std::string fp = bytes.substr(16, 16), want = token_fingerprint(ids);
  OOMB_CHECK(fp == want, "{}: was written for other tokens (fingerprint '{}', {} has {}): tokenize again", where, fp,
             ids.describe(), want);
  const uint64_t body = (n + 7) / 8;
  OOMB_CHECK(bytes.size() == size_t(kHeader) + body, "{}: {} bytes, but the mask of {} tokens takes {}", where,
             bytes.size(), n, uint64_t(kHeader) + body);
  const uint8_t* p = reinterpret_cast<const uint8_t*>(bytes.data()) + kHeader;
  for (uint64_t i = 0; i < n;) {  // runs of equal bits
    const bool bit = (p[i / 8] >> (i % 8)) & 1;
    uint64_t j = i + 1;
    while (j < n && bool((p[j / 8] >> (j % 8)) & 1) == bit) ++j;
    into.append(int64_t(j - i), bit);
    i = j;
  }
}

}  // namespace oomb
