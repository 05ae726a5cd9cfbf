// The BPE model of a tokenizer.json: vocabulary, ranked merges and ignore_merges. Byte-level (Qwen, Llama 3):
// pieces arrive as raw bytes, each byte starting as the token of its byte-level character. SentencePiece
// style (byte_fallback: Llama 2, Mistral, Phi-3, Gemma): each character starts as its own token as the
// vocabulary writes it, or where it has none as the tokens <0xXX> of its UTF-8 bytes (or unk_token's,
// consecutive ones fused with fuse_unk). Then the lowest-ranked adjacent pair is merged (the leftmost
// among equals) until none applies, as in Hugging Face's tokenizers and transformers.js.
#pragma once
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace oomb {

// Hash lookups by string_view without building a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Ids of pieces already encoded: open addressing with linear probing over a power-of-two table
// that starts small and doubles at half load (a fresh state costs little); keys and results live
// back to back in two arrays. Cleared when the largest table is half full (a cache, not a record).
class PieceCache {
 public:
  // The cached ids of `key` (nullptr if absent); n receives their count.
  const int32_t* find(std::string_view key, uint64_t h, uint32_t* n) const;
  void insert(std::string_view key, uint64_t h, const std::vector<int32_t>& ids);
  static uint64_t hash(std::string_view key);

 private:
  struct Slot {
    uint64_t hash = 0;  // 0: empty (hash() never returns 0)
    uint32_t key_at = 0, key_len = 0, ids_at = 0, ids_len = 0;
  };
  static constexpr size_t kMinSlots = size_t(1) << 10, kMaxSlots = size_t(1) << 19;
  void place(const Slot& s);
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t used_ = 0;
};

// Per-thread state of encoding: the piece cache, and scratch space.
struct BpeCache {
  PieceCache pieces;
  std::vector<int32_t> work;
  struct Sym {
    int32_t id, prev, next;
  };
  std::vector<Sym> syms;
  struct Cand {
    int32_t rank, pos, left, right;
  };
  std::vector<Cand> heap;
};

class BytePairModel {
 public:
  // `j`: the "model" object of tokenizer.json; `where` names the file in errors.
  static BytePairModel from_json(const nlohmann::json& j, std::string_view where);
  // Appends the ids of one piece of raw bytes.
  void encode(std::string_view bytes, std::vector<int32_t>& out, BpeCache& cache) const;
  // The raw bytes a vocabulary id stands for (a token outside the byte-level alphabet: its UTF-8;
  // SentencePiece style: the token as written, a <0xXX> token its byte).
  bool has(int32_t id) const { return id >= 0 && size_t(id) < bytes_.size() && present_[size_t(id)]; }
  bool byte_fallback() const { return byte_fallback_; }
  bool is_byte_token(int32_t id) const { return byte_fallback_ && byte_token_[size_t(id)]; }
  const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }
  int64_t id_limit() const { return int64_t(bytes_.size()); }  // 1 + the largest id
  // The id of a vocabulary entry given as tokenizer.json writes it (byte-level string), or -1.
  int32_t find(std::string_view token) const;
  int64_t merges() const { return int64_t(pairs_.size()); }
  // SentencePiece style: "\n" starts as one token no merge takes (its own or <0x0A>, not an unk that could
  // fuse), and no piece is taken whole (not ignore_merges: a part may be a token the whole is not), so the
  // ids of a piece are those of its parts cut after a newline.
  bool newline_is_boundary() const;

 private:
  struct Merge {
    int32_t rank, merged;
  };
  static uint64_t key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }
  const Merge* merge_of(int32_t a, int32_t b) const {
    auto it = pairs_.find(key(a, b));
    return it == pairs_.end() ? nullptr : &it->second;
  }
  void merge_small(std::vector<int32_t>& ids) const;
  void initial_symbols(std::string_view piece, std::vector<int32_t>& ids) const;  // SentencePiece style
  void merge_large(std::vector<int32_t>& ids, BpeCache& c) const;

  std::array<int32_t, 256> byte_id_{};
  std::unordered_map<uint64_t, Merge> pairs_;
  StringIdMap by_bytes_;     // raw bytes -> id (byte-level entries)
  StringIdMap other_;        // entries outside the byte-level alphabet, as written
  std::vector<std::string> bytes_;
  std::vector<bool> present_;
  bool ignore_merges_ = false;
  bool byte_fallback_ = false, fuse_unk_ = false;
  int32_t unk_ = -1;
  std::array<int32_t, 256> fallback_id_{};  // <0xXX>'s id, -1 where the vocabulary lacks it
  std::vector<bool> byte_token_;
};

}  // namespace oomb
