// Flat arrays of token ids on disk or in memory, read by range. The formats:
//   u32   raw little-endian uint32 ids, no header (oomb's .bin, `oomb tokenize`'s default)
//   u16   raw little-endian uint16 ids, no header (nanoGPT's train.bin / val.bin)
//   llmc  llm.c shards: a header of 256 int32 (magic, version, token count), then the ids:
//         magic 20240520 version 1 = uint16 (GPT-2), magic 20240801 version 7 = uint32 (Llama 3)
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/memory.h"

namespace oomb {

enum class TokenFormat { U32, U16, LlmC };
TokenFormat token_format_parse(const std::string& s);  // "u32" | "u16" | "llmc"
const char* token_format_name(TokenFormat f);

constexpr int32_t kLlmcMagicGpt2 = 20240520, kLlmcMagicLlama3 = 20240801;
constexpr int32_t kLlmcVersionU16 = 1, kLlmcVersionU32 = 7;
constexpr int64_t kLlmcHeaderBytes = 256 * 4;

class TokenStore {
 public:
  virtual ~TokenStore() = default;
  virtual int64_t size() const = 0;
  // ids [begin, begin + n), 0 <= begin, begin + n <= size()
  virtual void get(int64_t begin, int64_t n, uint32_t* out) const = 0;
  // Where token i comes from, for errors: "FILE, token K".
  virtual std::string where(int64_t i) const = 0;
  virtual std::string describe() const = 0;
  // The index of the first id >= limit (and that id in *value), or -1: every id checked at open
  // time, at memory speed, rather than when training reaches it.
  virtual int64_t find_at_least(uint32_t limit, uint32_t* value) const = 0;
};

// Ids in a file: `width` bytes each (2 or 4), starting at byte `offset`.
class FileTokens final : public TokenStore {
 public:
  FileTokens(const std::filesystem::path& path, TokenFormat fmt);
  ~FileTokens() override;
  int64_t size() const override { return n_; }
  void get(int64_t begin, int64_t n, uint32_t* out) const override;
  std::string where(int64_t i) const override;
  std::string describe() const override;
  int64_t find_at_least(uint32_t limit, uint32_t* value) const override;
  int width() const { return width_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1, width_ = 4;
  int64_t offset_ = 0, n_ = 0;
  TokenFormat fmt_;
};

// Ids held in host memory (tag data), e.g. text tokenized when training starts.
class MemoryTokens final : public TokenStore {
 public:
  MemoryTokens(const std::vector<uint32_t>& ids, std::string name);
  int64_t size() const override { return n_; }
  void get(int64_t begin, int64_t n, uint32_t* out) const override;
  std::string where(int64_t i) const override;
  std::string describe() const override;
  int64_t find_at_least(uint32_t limit, uint32_t* value) const override;

 private:
  Buffer buf_;
  int64_t n_;
  std::string name_;
};

// Several stores end to end (a directory of shards, in name order).
class ConcatTokens final : public TokenStore {
 public:
  explicit ConcatTokens(std::vector<std::unique_ptr<TokenStore>> parts);
  int64_t size() const override { return starts_.back(); }
  void get(int64_t begin, int64_t n, uint32_t* out) const override;
  std::string where(int64_t i) const override;
  std::string describe() const override;
  int64_t find_at_least(uint32_t limit, uint32_t* value) const override;

 private:
  size_t part_of(int64_t i) const;
  std::vector<std::unique_ptr<TokenStore>> parts_;
  std::vector<int64_t> starts_;  // parts + 1 prefix sums
};

// The first index of ids[0, n) (little-endian, `width` bytes each) holding an id >= limit, or -1.
int64_t first_id_at_least(const void* ids, int64_t n, int width, uint32_t limit);

// Detects llm.c shards by their magic; otherwise `dflt` (a .bin without a header is u32).
TokenFormat sniff_token_format(const std::filesystem::path& path, TokenFormat dflt);

// A fingerprint of a store's ids (16 hex digits, FNV-1a 64): its size and 256 evenly spaced blocks of
// 4096 ids (every id of a store up to 1M ids). A checkpoint keeps it, so a resumed run finds
// data that changed without reading a large store whole.
std::string token_fingerprint(const TokenStore& s);

}  // namespace oomb
