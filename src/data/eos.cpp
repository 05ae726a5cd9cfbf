#include "data/eos.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace oomb {

namespace fs = std::filesystem;
using nlohmann::json;

static json read_json_or_null(const fs::path& p) {
  std::ifstream f(p);
  if (!f.good()) return nullptr;
  return json::parse(f, nullptr, /*allow_exceptions=*/false);
}

static fs::path dir_of(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec) ? p : p.parent_path().empty() ? fs::path(".") : p.parent_path();
}

int64_t vocab_next_to(const fs::path& tokenizer_path, const Tokenizer& tok) {
  const json cfg = read_json_or_null(dir_of(tokenizer_path) / "config.json");
  if (cfg.is_object() && cfg.contains("vocab_size") && cfg["vocab_size"].is_number_integer() &&
      cfg["vocab_size"].get<int64_t>() > 0)
    return cfg["vocab_size"].get<int64_t>();
  return tok.id_limit();
}

static EosChoice tokenizer_config_eos(const fs::path& dir, int64_t vocab, const Tokenizer* tok);

EosChoice resolve_eos(const fs::path& where, int64_t vocab, const Tokenizer* tok) {
  const fs::path dir = dir_of(where);
  const fs::path cfg_path = dir / "config.json";
  const json cfg = read_json_or_null(cfg_path);
  if (cfg.is_object() && cfg.contains("eos_token_id") && !cfg["eos_token_id"].is_null()) {
    json e = cfg["eos_token_id"];
    if (e.is_array() && !e.empty()) e = e[0];
    if (e.is_number_integer()) {
      const int64_t id = e.get<int64_t>();
      OOMB_CHECK(id >= 0 && id < vocab, "{}: eos_token_id {} is beyond the vocabulary (ids 0..{}); fix config.json "
                 "or name the separator with a flag", cfg_path.string(), id, vocab - 1);
      return {int32_t(id), cfg_path.string() + " eos_token_id"};
    }
  }
  return tokenizer_config_eos(dir, vocab, tok);
}

// tokenizer_config.json's eos_token in dir, mapped to its id (by tok, added_tokens_decoder, or
// dir's tokenizer.json); id -1 when it names none.
static EosChoice tokenizer_config_eos(const fs::path& dir, int64_t vocab, const Tokenizer* tok) {
  const fs::path tc_path = dir / "tokenizer_config.json";
  const json tc = read_json_or_null(tc_path);
  if (!tc.is_object() || !tc.contains("eos_token")) return {};
  json e = tc["eos_token"];
  if (e.is_object() && e.contains("content")) e = e["content"];
  if (!e.is_string()) return {};
  const std::string token = e.get<std::string>();
  int64_t id = tok ? tok->token_id(token) : -1;
  if (id < 0 && tc.contains("added_tokens_decoder") && tc["added_tokens_decoder"].is_object())
    for (const auto& [k, v] : tc["added_tokens_decoder"].items())
      if (v.is_object() && v.value("content", json()) == token) {
        int64_t n = -1;
        const auto [end, err] = std::from_chars(k.data(), k.data() + k.size(), n);
        if (err == std::errc() && end == k.data() + k.size()) id = n;
        break;
      }
  std::error_code ec;
  if (id < 0 && !tok && fs::exists(dir / "tokenizer.json", ec)) id = Tokenizer::load(dir / "tokenizer.json").token_id(token);
  if (id < 0) return {};
  OOMB_CHECK(id < vocab, "{}: eos_token {} is id {}, beyond the vocabulary (ids 0..{})", tc_path.string(), e.dump(), id,
             vocab - 1);
  return {int32_t(id), tc_path.string() + " eos_token " + e.dump()};
}

std::vector<int64_t> stop_token_ids(const fs::path& dir, std::vector<int64_t> eos, int64_t vocab,
                                    const Tokenizer* tok) {
  const fs::path gen_path = dir / "generation_config.json";
  const json gen = read_json_or_null(gen_path);
  if (gen.is_object() && gen.contains("eos_token_id")) {
    const json& e = gen["eos_token_id"];
    for (const json& id : e.is_array() ? e : json::array({e}))
      if (id.is_number_integer()) {
        OOMB_CHECK(id.get<int64_t>() >= 0 && id.get<int64_t>() < vocab, "{}: eos_token_id {} is beyond the "
                   "vocabulary (ids 0..{})", gen_path.string(), id.get<int64_t>(), vocab - 1);
        eos.push_back(id.get<int64_t>());
      }
  }
  if (const EosChoice c = tokenizer_config_eos(dir, vocab, tok); c.id >= 0) eos.push_back(c.id);
  std::sort(eos.begin(), eos.end());
  eos.erase(std::unique(eos.begin(), eos.end()), eos.end());
  return eos;
}

int32_t parse_eos(const std::string& v, const Tokenizer& tok) {
  int64_t id = -1;
  const auto [end, err] = std::from_chars(v.data(), v.data() + v.size(), id);
  if (err == std::errc() && end == v.data() + v.size()) {
    OOMB_CHECK(id >= 0 && id < tok.id_limit(), "--eos {}: not an id of the tokenizer (0..{})", v, tok.id_limit() - 1);
    return int32_t(id);
  }
  const int32_t t = tok.token_id(v);
  OOMB_CHECK(t >= 0, "--eos {}: neither an id nor a token of {}", v, tok.source());
  return t;
}

int32_t eos_flag(const std::string& v, int64_t vocab, const fs::path& tokenizer) {
  int64_t id = -1;
  const auto [end, err] = std::from_chars(v.data(), v.data() + v.size(), id);
  if (err == std::errc() && end == v.data() + v.size()) {
    OOMB_CHECK(id >= 0 && id < vocab, "--eos-id {}: not an id of the model's vocabulary (0..{})", v, vocab - 1);
    return int32_t(id);
  }
  std::error_code ec;
  OOMB_CHECK(!tokenizer.empty() && fs::exists(tokenizer, ec), "--eos-id {}: not an id; a token's id is "
             "found by the tokenizer, and there is none (give --tokenizer, or the id)", v);
  const Tokenizer tok = Tokenizer::load(tokenizer);
  const int32_t t = tok.token_id(v);
  OOMB_CHECK(t >= 0, "--eos-id {}: neither an id nor a token of {}", v, tok.source());
  OOMB_CHECK(t < vocab, "--eos-id {}: its id {} is beyond the model's vocabulary ({})", v, t, vocab);
  return t;
}

}  // namespace oomb
