#include "data/token_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "core/error.h"
#include "core/fnv.h"

namespace oomb {

TokenFormat token_format_parse(const std::string& s) {
  if (s == "u32") return TokenFormat::U32;
  if (s == "u16") return TokenFormat::U16;
  if (s == "llmc") return TokenFormat::LlmC;
  fail("--format: '{}' is not one of u32, u16, llmc", s);
}

const char* token_format_name(TokenFormat f) {
  return f == TokenFormat::U32 ? "u32" : f == TokenFormat::U16 ? "u16" : "llmc";
}

static int32_t le32(const unsigned char* p) {
  return int32_t(uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24);
}

TokenFormat sniff_token_format(const std::filesystem::path& path, TokenFormat dflt) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return dflt;
  unsigned char h[4];
  const bool got = ::pread(fd, h, 4, 0) == 4;
  ::close(fd);
  const int32_t magic = got ? le32(h) : 0;
  return magic == kLlmcMagicGpt2 || magic == kLlmcMagicLlama3 ? TokenFormat::LlmC : dflt;
}

FileTokens::FileTokens(const std::filesystem::path& path, TokenFormat fmt) : path_(path), fmt_(fmt) {
  const std::string p = path.string();
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  OOMB_CHECK(fd_ >= 0, "--data {}: cannot open: {}", p, std::strerror(errno));
  struct stat st {};
  // the destructor does not run for a throwing constructor: close first
  auto bad = [&](const std::string& msg) {
    ::close(fd_);
    fd_ = -1;
    throw Error(fmt::format("--data {}: {}", p, msg));
  };
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) bad("not a regular file");
  const int64_t bytes = st.st_size;
  if (fmt == TokenFormat::LlmC) {
    unsigned char h[kLlmcHeaderBytes];
    if (bytes < kLlmcHeaderBytes || ::pread(fd_, h, kLlmcHeaderBytes, 0) != kLlmcHeaderBytes)
      bad(fmt::format("{} bytes is too short for an llm.c shard's {}-byte header", bytes, kLlmcHeaderBytes));
    const int32_t magic = le32(h), version = le32(h + 4), count = le32(h + 8);
    if (magic == kLlmcMagicGpt2 && version == kLlmcVersionU16) width_ = 2;
    else if (magic == kLlmcMagicLlama3 && version == kLlmcVersionU32) width_ = 4;
    else bad(fmt::format("llm.c header has magic {} version {}; expected {} v{} (uint16) or {} v{} (uint32)", magic,
                         version, kLlmcMagicGpt2, kLlmcVersionU16, kLlmcMagicLlama3, kLlmcVersionU32));
    if (count < 0 || kLlmcHeaderBytes + int64_t(count) * width_ != bytes)
      bad(fmt::format("llm.c header says {} tokens of {} bytes, but the file has {} bytes after the header", count,
                      width_, bytes - kLlmcHeaderBytes));
    offset_ = kLlmcHeaderBytes;
    n_ = count;
  } else {
    width_ = fmt == TokenFormat::U16 ? 2 : 4;
    if (bytes % width_ != 0)
      bad(fmt::format("size {} bytes is not a multiple of {} (expected raw {} token ids{})", bytes, width_,
                      fmt == TokenFormat::U16 ? "uint16" : "uint32",
                      fmt == TokenFormat::U32 ? "; for nanoGPT's uint16 files pass --data-format u16" : ""));
    n_ = bytes / width_;
  }
  if (n_ == 0) bad("holds no tokens (an empty file)");
}

FileTokens::~FileTokens() {
  if (fd_ >= 0) ::close(fd_);
}

void FileTokens::get(int64_t begin, int64_t n, uint32_t* out) const {
  constexpr int64_t kPiece = 1 << 14;
  unsigned char buf[kPiece * 4];
  for (int64_t done = 0; done < n;) {
    const int64_t len = std::min(kPiece, n - done);
    const off_t at = off_t(offset_ + (begin + done) * width_);
    const ssize_t want = ssize_t(len * width_), r = ::pread(fd_, buf, size_t(want), at);
    OOMB_CHECK(r == want, "--data {}: short read at token {}{}", path_.string(), begin + done,
               r < 0 ? std::string(": ") + std::strerror(errno) : "");
    if (width_ == 4) {
      for (int64_t i = 0; i < len; ++i) out[done + i] = uint32_t(le32(buf + 4 * i));
    } else {
      for (int64_t i = 0; i < len; ++i) out[done + i] = uint32_t(buf[2 * i]) | uint32_t(buf[2 * i + 1]) << 8;
    }
    done += len;
  }
}

std::string FileTokens::where(int64_t i) const { return fmt::format("{}, token {}", path_.string(), i); }

std::string FileTokens::describe() const {
  return fmt::format("{} ({} tokens, {}{})", path_.string(), n_, token_format_name(fmt_),
                     fmt_ == TokenFormat::LlmC ? (width_ == 2 ? " uint16" : " uint32") : "");
}

int64_t first_id_at_least(const void* ids, int64_t n, int width, uint32_t limit) {
  constexpr int64_t kBlock = 1 << 16;  // a block's max first (branch-free, vectorizable); then the index
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t len = std::min(kBlock, n - b);
    uint32_t m[8] = {};
    if (width == 4) {
      const unsigned char* p = static_cast<const unsigned char*>(ids) + b * 4;
      int64_t i = 0;
      for (; i + 8 <= len; i += 8)
        for (int k = 0; k < 8; ++k) {
          uint32_t v;
          std::memcpy(&v, p + 4 * (i + k), 4);  // little-endian hosts (as is every supported machine)
          m[k] = std::max(m[k], v);
        }
      for (; i < len; ++i) {
        uint32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        m[0] = std::max(m[0], v);
      }
    } else {
      const unsigned char* p = static_cast<const unsigned char*>(ids) + b * 2;
      int64_t i = 0;
      for (; i + 8 <= len; i += 8)
        for (int k = 0; k < 8; ++k) {
          uint16_t v;
          std::memcpy(&v, p + 2 * (i + k), 2);
          m[k] = std::max<uint32_t>(m[k], v);
        }
      for (; i < len; ++i) {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        m[0] = std::max<uint32_t>(m[0], v);
      }
    }
    if (*std::max_element(m, m + 8) < limit) continue;
    for (int64_t i = 0; i < len; ++i) {
      uint32_t v = 0;
      std::memcpy(&v, static_cast<const unsigned char*>(ids) + (b + i) * width, size_t(width));
      if (v >= limit) return b + i;
    }
  }
  return -1;
}

int64_t FileTokens::find_at_least(uint32_t limit, uint32_t* value) const {
  if (width_ == 2 && limit > 0xFFFF) return -1;
  const size_t bytes = size_t(offset_ + n_ * width_);
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd_, 0);
  if (map == MAP_FAILED) {  // e.g. a file system without mmap: read it in pieces instead
    std::vector<uint32_t> buf(1 << 16);
    for (int64_t at = 0; at < n_; at += int64_t(buf.size())) {
      const int64_t len = std::min<int64_t>(int64_t(buf.size()), n_ - at);
      get(at, len, buf.data());
      const int64_t i = first_id_at_least(buf.data(), len, 4, limit);
      if (i >= 0) return *value = buf[size_t(i)], at + i;
    }
    return -1;
  }
  ::madvise(map, bytes, MADV_SEQUENTIAL);
  const unsigned char* ids = static_cast<const unsigned char*>(map) + offset_;
  const int64_t i = first_id_at_least(ids, n_, width_, limit);
  if (i >= 0) {
    *value = 0;
    std::memcpy(value, ids + i * width_, size_t(width_));
  }
  ::munmap(map, bytes);
  return i;
}

MemoryTokens::MemoryTokens(const std::vector<uint32_t>& ids, std::string name)
    : buf_(Tier::Host, Tag::Data, std::max<size_t>(ids.size(), 1) * 4), n_(int64_t(ids.size())), name_(std::move(name)) {
  if (!ids.empty()) std::memcpy(buf_.data(), ids.data(), ids.size() * 4);
}

void MemoryTokens::get(int64_t begin, int64_t n, uint32_t* out) const {
  std::memcpy(out, buf_.as<uint32_t>() + begin, size_t(n) * 4);
}

std::string MemoryTokens::where(int64_t i) const { return fmt::format("{}, token {}", name_, i); }
std::string MemoryTokens::describe() const { return fmt::format("{} ({} tokens)", name_, n_); }

int64_t MemoryTokens::find_at_least(uint32_t limit, uint32_t* value) const {
  const int64_t i = first_id_at_least(buf_.data(), n_, 4, limit);
  if (i >= 0) *value = buf_.as<uint32_t>()[i];
  return i;
}

int64_t ConcatTokens::find_at_least(uint32_t limit, uint32_t* value) const {
  for (size_t k = 0; k < parts_.size(); ++k) {
    const int64_t i = parts_[k]->find_at_least(limit, value);
    if (i >= 0) return starts_[k] + i;
  }
  return -1;
}

ConcatTokens::ConcatTokens(std::vector<std::unique_ptr<TokenStore>> parts) : parts_(std::move(parts)) {
  OOMB_CHECK(!parts_.empty(), "--data: no token files");
  starts_.push_back(0);
  for (const auto& p : parts_) starts_.push_back(starts_.back() + p->size());
}

size_t ConcatTokens::part_of(int64_t i) const {
  return size_t(std::upper_bound(starts_.begin(), starts_.end(), i) - starts_.begin()) - 1;
}

void ConcatTokens::get(int64_t begin, int64_t n, uint32_t* out) const {
  while (n > 0) {
    const size_t k = part_of(begin);
    const int64_t off = begin - starts_[k], len = std::min(n, starts_[k + 1] - begin);
    parts_[k]->get(off, len, out);
    begin += len, out += len, n -= len;
  }
}

std::string ConcatTokens::where(int64_t i) const {
  const size_t k = part_of(i);
  return parts_[k]->where(i - starts_[k]);
}

std::string ConcatTokens::describe() const {
  return fmt::format("{} files ({} tokens; first {})", parts_.size(), size(), parts_.front()->describe());
}

std::string token_fingerprint(const TokenStore& s) {
  Fnv f;
  const int64_t n = s.size(), block = 4096, blocks = 256;
  f.mix(uint64_t(n), 8);
  std::vector<uint32_t> buf(static_cast<size_t>(block));
  auto hash_range = [&](int64_t at, int64_t len) {
    s.get(at, len, buf.data());
    for (int64_t i = 0; i < len; ++i) f.mix(buf[size_t(i)], 4);
  };
  if (n <= block * blocks) {
    for (int64_t at = 0; at < n; at += block) hash_range(at, std::min(block, n - at));
  } else {
    for (int64_t b = 0; b < blocks; ++b) hash_range((n - block) / (blocks - 1) * b, block);
  }
  return f.hex();
}

}  // namespace oomb
