#include "text/bpe.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "core/error.h"
#include "text/byte_level.h"
#include "text/utf8.h"

namespace oomb {

namespace {
using nlohmann::json;

bool opt_bool(const json& j, const char* k, std::string_view where) {
  if (!j.contains(k) || j[k].is_null()) return false;
  OOMB_CHECK(j[k].is_boolean(), "{}: model.{} must be true or false", where, k);
  return j[k].get<bool>();
}

void check_empty_or_null(const json& j, const char* k, std::string_view where) {
  if (!j.contains(k) || j[k].is_null()) return;
  OOMB_CHECK(j[k].is_string() && j[k].get<std::string>().empty(),
             "{}: model.{} = {} is not supported (byte-level BPE uses none)", where, k, j[k].dump());
}
}  // namespace

BytePairModel BytePairModel::from_json(const json& j, std::string_view where) {
  OOMB_CHECK(j.is_object(), "{}: \"model\" must be an object", where);
  const std::string type = j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
  OOMB_CHECK(type == "BPE", "{}: unsupported model type \"{}\" (supported: BPE, the byte-level BPE of "
             "Qwen2/Qwen2.5/Qwen3 and Llama 3 or the SentencePiece-style one of Llama 2 and Gemma)", where,
             type.empty() ? j.value("type", json()).dump() : type);
  if (j.contains("dropout") && !j["dropout"].is_null())
    OOMB_CHECK(j["dropout"].is_number() && j["dropout"].get<double>() == 0.0,
               "{}: model.dropout = {} is not supported (training-time BPE dropout)", where, j["dropout"].dump());
  check_empty_or_null(j, "continuing_subword_prefix", where);
  check_empty_or_null(j, "end_of_word_suffix", where);
  BytePairModel m;
  m.ignore_merges_ = opt_bool(j, "ignore_merges", where);
  m.byte_fallback_ = opt_bool(j, "byte_fallback", where);
  m.fuse_unk_ = opt_bool(j, "fuse_unk", where);

  OOMB_CHECK(j.contains("vocab") && j["vocab"].is_object(), "{}: model.vocab must be an object of token: id", where);
  const json& vocab = j["vocab"];
  int64_t limit = 0;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    OOMB_CHECK(it.value().is_number_integer() && it.value().get<int64_t>() >= 0 &&
                   it.value().get<int64_t>() < INT32_MAX,
               "{}: model.vocab[{}] = {} is not a token id (an integer from 0)", where, json(it.key()).dump(),
               it.value().dump());
    limit = std::max(limit, it.value().get<int64_t>() + 1);
  }
  OOMB_CHECK(limit <= int64_t(vocab.size()) * 4 + 1024,
             "{}: model.vocab ids reach {} for {} entries; the ids are too sparse", where, limit - 1, vocab.size());
  m.bytes_.resize(size_t(limit));
  m.present_.assign(size_t(limit), false);
  m.byte_token_.assign(size_t(limit), false);
  m.fallback_id_.fill(-1);
  std::string raw;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int32_t id = int32_t(it.value().get<int64_t>());
    OOMB_CHECK(!m.present_[size_t(id)], "{}: model.vocab gives id {} to two tokens (the second is {})", where, id,
               json(it.key()).dump());
    m.present_[size_t(id)] = true;
    if (m.byte_fallback_) {  // as written; <0xXX> stands for its byte
      const std::string& k = it.key();
      m.other_.emplace(k, id);
      m.bytes_[size_t(id)] = k;
      if (k.size() == 6 && k.starts_with("<0x") && k[5] == '>' && std::isxdigit(static_cast<unsigned char>(k[3])) &&
          std::isxdigit(static_cast<unsigned char>(k[4]))) {
        const unsigned b = unsigned(std::stoul(k.substr(3, 2), nullptr, 16));
        m.byte_token_[size_t(id)] = true;  // (decoded as its byte in either case, as ByteFallback's decoder does)
        m.bytes_[size_t(id)] = std::string(1, char(b));
        if (!std::islower(static_cast<unsigned char>(k[3])) && !std::islower(static_cast<unsigned char>(k[4])))
          m.fallback_id_[b] = id;  // (encoding looks up "<0x%02X>", upper case)
      }
      continue;
    }
    if (byte_level_decode(it.key(), raw)) {
      m.by_bytes_.emplace(raw, id);
      m.bytes_[size_t(id)] = raw;
    } else {
      m.other_.emplace(it.key(), id);
      m.bytes_[size_t(id)] = it.key();  // decoded as written, as Hugging Face's ByteLevel decoder does
    }
  }
  if (m.byte_fallback_) {
    const json u = j.value("unk_token", json());
    OOMB_CHECK(u.is_null() || u.is_string(), "{}: model.unk_token must be a string or null, got {}", where, u.dump());
    if (u.is_string()) {
      m.unk_ = m.find(u.get<std::string>());
      OOMB_CHECK(m.unk_ >= 0, "{}: model.unk_token {} is not in model.vocab", where, u.dump());
    }
    const auto missing = std::find(m.fallback_id_.begin(), m.fallback_id_.end(), -1);
    OOMB_CHECK(m.unk_ >= 0 || missing == m.fallback_id_.end(), "{}: model.vocab lacks the byte token <0x{:02X}> and "
               "model.unk_token is null: a character with neither a token nor its bytes' would be dropped (as Hugging "
               "Face drops it); give unk_token", where, missing - m.fallback_id_.begin());
  }
  for (int b = 0; b < 256 && !m.byte_fallback_; ++b) {
    const auto it = m.by_bytes_.find(std::string(1, char(b)));
    OOMB_CHECK(it != m.by_bytes_.end(), "{}: model.vocab lacks the byte-level token of byte {:#04x}; this is not a "
               "byte-level BPE vocabulary", where, b);
    m.byte_id_[size_t(b)] = it->second;
  }

  OOMB_CHECK(j.contains("merges") && j["merges"].is_array(), "{}: model.merges must be an array", where);
  const json& merges = j["merges"];
  m.pairs_.reserve(merges.size());
  std::string a, b;
  for (size_t r = 0; r < merges.size(); ++r) {
    const json& e = merges[r];
    if (e.is_string()) {  // "a b" (tokenizers < 0.20)
      const std::string& s = e.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      OOMB_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < s.size(),
                 "{}: model.merges[{}] = {} is not two tokens separated by a space", where, r, e.dump());
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else {  // ["a", "b"] (tokenizers >= 0.20)
      OOMB_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(),
                 "{}: model.merges[{}] = {} is neither \"a b\" nor [\"a\", \"b\"]", where, r, e.dump());
      a = e[0].get<std::string>(), b = e[1].get<std::string>();
    }
    const int32_t ia = m.find(a), ib = m.find(b), im = m.find(a + b);
    OOMB_CHECK(ia >= 0 && ib >= 0 && im >= 0, "{}: model.merges[{}] = {}: token {} is not in model.vocab", where, r,
               e.dump(), json(ia < 0 ? a : ib < 0 ? b : a + b).dump());
    m.pairs_[key(ia, ib)] = {int32_t(r), im};  // a repeated pair keeps its last rank, as both references do
  }
  return m;
}

int32_t BytePairModel::find(std::string_view token) const {
  std::string raw;
  if (!byte_fallback_ && byte_level_decode(token, raw)) {
    const auto it = by_bytes_.find(raw);
    return it == by_bytes_.end() ? -1 : it->second;
  }
  const auto it = other_.find(token);
  return it == other_.end() ? -1 : it->second;
}

// Pieces of a few dozen bytes (nearly all): rescan the pairs after each merge.
void BytePairModel::merge_small(std::vector<int32_t>& ids) const {
  while (ids.size() > 1) {
    int32_t best_rank = INT32_MAX, best_id = -1;
    size_t at = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const Merge* m = merge_of(ids[i], ids[i + 1]);
      if (m && m->rank < best_rank) best_rank = m->rank, best_id = m->merged, at = i;
    }
    if (best_id < 0) return;
    ids[at] = best_id;
    ids.erase(ids.begin() + std::ptrdiff_t(at) + 1);
  }
}

// Long pieces (a run of letters can be megabytes): a heap of candidate merges ordered by
// (rank, position), with stale candidates skipped, O(n log n).
void BytePairModel::merge_large(std::vector<int32_t>& ids, BpeCache& c) const {
  OOMB_CHECK(ids.size() < size_t(INT32_MAX), "BPE: a piece of {} bytes (one unbroken run of letters, digits "
             "or spaces) is more than 2 GiB", ids.size());
  const int32_t n = int32_t(ids.size());
  auto& s = c.syms;
  s.resize(size_t(n));
  for (int32_t i = 0; i < n; ++i) s[size_t(i)] = {ids[size_t(i)], i - 1, i + 1 < n ? i + 1 : -1};
  auto& h = c.heap;
  h.clear();
  auto later = [](const BpeCache::Cand& x, const BpeCache::Cand& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  auto push = [&](int32_t pos) {
    const int32_t nx = s[size_t(pos)].next;
    if (nx < 0) return;
    if (const Merge* m = merge_of(s[size_t(pos)].id, s[size_t(nx)].id)) {
      h.push_back({m->rank, pos, s[size_t(pos)].id, s[size_t(nx)].id});
      std::push_heap(h.begin(), h.end(), later);
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!h.empty()) {
    std::pop_heap(h.begin(), h.end(), later);
    const BpeCache::Cand top = h.back();
    h.pop_back();
    BpeCache::Sym& l = s[size_t(top.pos)];
    if (l.id < 0 || l.id != top.left || l.next < 0 || s[size_t(l.next)].id != top.right) continue;  // stale
    BpeCache::Sym& r = s[size_t(l.next)];
    l.id = merge_of(top.left, top.right)->merged;
    r.id = -1;  // removed
    l.next = r.next;
    if (r.next >= 0) s[size_t(r.next)].prev = top.pos;
    if (l.prev >= 0) push(l.prev);
    push(top.pos);
  }
  ids.clear();
  for (int32_t i = 0; i >= 0; i = s[size_t(i)].next) ids.push_back(s[size_t(i)].id);
}

// Each UTF-8 character of `piece` as its token, or its bytes' <0xXX> tokens, or unk_token's (fused).
void BytePairModel::initial_symbols(std::string_view piece, std::vector<int32_t>& ids) const {
  ids.clear();
  bool last_unk = false;
  for (size_t i = 0; i < piece.size();) {
    const size_t n = size_t(std::max(1, utf8_seq_len(piece, i)));  // (valid UTF-8 arrives; a stray byte alone)
    const std::string_view ch = piece.substr(i, n);
    i += n;
    if (const auto it = other_.find(ch); it != other_.end()) {
      ids.push_back(it->second), last_unk = false;
      continue;
    }
    bool bytes = true;
    for (char b : ch) bytes = bytes && fallback_id_[static_cast<unsigned char>(b)] >= 0;
    if (bytes) {
      for (char b : ch) ids.push_back(fallback_id_[static_cast<unsigned char>(b)]);
      last_unk = false;
      continue;
    }
    OOMB_CHECK(unk_ >= 0, "BPE: the character {} has no token, no byte tokens and no unk_token",
               nlohmann::json(std::string(ch)).dump());
    if (!(fuse_unk_ && last_unk)) ids.push_back(unk_);
    last_unk = true;
  }
}

bool BytePairModel::newline_is_boundary() const {
  if (!byte_fallback_ || ignore_merges_) return false;
  const auto own = other_.find(std::string_view("\n"));
  const int32_t nl = own != other_.end() ? own->second : fallback_id_['\n'];
  if (nl < 0) return false;
  for (const auto& [k, m] : pairs_)
    if (int32_t(k >> 32) == nl || int32_t(uint32_t(k)) == nl) return false;
  return true;
}

void BytePairModel::encode(std::string_view bytes, std::vector<int32_t>& out, BpeCache& c) const {
  if (bytes.empty()) return;
  if (ignore_merges_) {  // a piece that is itself a token is taken whole
    const StringIdMap& whole = byte_fallback_ ? other_ : by_bytes_;
    const auto it = whole.find(bytes);
    if (it != whole.end()) return out.push_back(it->second);
  }
  constexpr size_t kCacheMaxLen = 256;
  const bool cacheable = bytes.size() < kCacheMaxLen;
  const uint64_t h = cacheable ? PieceCache::hash(bytes) : 0;
  if (cacheable) {
    uint32_t n = 0;
    if (const int32_t* ids = c.pieces.find(bytes, h, &n)) {
      out.insert(out.end(), ids, ids + n);
      return;
    }
  }
  auto& w = c.work;
  if (byte_fallback_) {
    initial_symbols(bytes, w);
  } else {
    w.resize(bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i) w[i] = byte_id_[static_cast<unsigned char>(bytes[i])];
  }
  if (w.size() <= 48) merge_small(w);
  else merge_large(w, c);
  out.insert(out.end(), w.begin(), w.end());
  if (cacheable) c.pieces.insert(bytes, h, w);
}

// 8 bytes at a time, multiply-xorshift mixing; never 0 (0 marks an empty slot).
uint64_t PieceCache::hash(std::string_view k) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ k.size();
  size_t i = 0;
  for (; i + 8 <= k.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, k.data() + i, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  uint64_t w = 0;
  std::memcpy(&w, k.data() + i, k.size() - i);
  h = (h ^ w) * 0x94D049BB133111EBull;
  h ^= h >> 29;
  return h | 1;
}

const int32_t* PieceCache::find(std::string_view key, uint64_t h, uint32_t* n) const {
  if (slots_.empty()) return nullptr;
  const size_t mask = slots_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.hash == 0) return nullptr;
    if (s.hash == h && s.key_len == key.size() && std::memcmp(keys_.data() + s.key_at, key.data(), key.size()) == 0) {
      *n = s.ids_len;
      return ids_.data() + s.ids_at;
    }
  }
}

void PieceCache::place(const Slot& s) {
  const size_t mask = slots_.size() - 1;
  size_t i = s.hash & mask;
  while (slots_[i].hash != 0) i = (i + 1) & mask;
  slots_[i] = s;
}

void PieceCache::insert(std::string_view key, uint64_t h, const std::vector<int32_t>& ids) {
  const bool full = used_ + 1 > slots_.size() / 2;
  if (slots_.empty() || (full && slots_.size() >= kMaxSlots) || keys_.size() + key.size() >= UINT32_MAX / 2 ||
      ids_.size() + ids.size() >= UINT32_MAX / 2) {
    slots_.assign(kMinSlots, Slot{});  // start over
    keys_.clear(), ids_.clear();
    used_ = 0;
  } else if (full) {  // double, placing the entries again
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    for (const Slot& s : old)
      if (s.hash != 0) place(s);
  }
  place({h, uint32_t(keys_.size()), uint32_t(key.size()), uint32_t(ids_.size()), uint32_t(ids.size())});
  keys_.append(key);
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  ++used_;
}

}  // namespace oomb
