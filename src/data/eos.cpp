#include "data/eos.h"

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

EosChoice find_eos(const fs::path& tokenizer_path, const Tokenizer& tok) {
  std::error_code ec;
  const fs::path dir = fs::is_directory(tokenizer_path, ec) ? tokenizer_path : tokenizer_path.parent_path();
  const json cfg = read_json_or_null(dir / "config.json");
  if (cfg.is_object() && cfg.contains("eos_token_id")) {
    json e = cfg["eos_token_id"];
    if (e.is_array() && !e.empty()) e = e[0];
    if (e.is_number_integer() && e.get<int64_t>() >= 0 && e.get<int64_t>() < tok.id_limit())
      return {int32_t(e.get<int64_t>()), (dir / "config.json").string() + " eos_token_id"};
  }
  const json tc = read_json_or_null(dir / "tokenizer_config.json");
  if (tc.is_object() && tc.contains("eos_token")) {
    json e = tc["eos_token"];
    if (e.is_object() && e.contains("content")) e = e["content"];
    if (e.is_string()) {
      const int32_t id = tok.token_id(e.get<std::string>());
      if (id >= 0) return {id, (dir / "tokenizer_config.json").string() + " eos_token " + e.dump()};
    }
  }
  return {};
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

}  // namespace oomb
