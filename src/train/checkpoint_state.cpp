#include "train/checkpoint_state.h"

#include <cmath>
#include <fmt/format.h>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"

namespace oomb {

using json = nlohmann::json;

namespace {

constexpr const char* kFormat = "oomb-checkpoint";

// config.json fields that do not change the math: which library wrote the file, the declared dtype
// (the checkpoint's weights are fp32 masters; weights_dtype keeps the loaded one), a local name.
const std::set<std::string>& ignored_model_fields() {
  static const std::set<std::string> s = {"transformers_version", "torch_dtype", "dtype", "_name_or_path"};
  return s;
}

const json& field(const json& j, const char* name, const std::string& where) {
  const auto it = j.find(name);
  OOMB_CHECK(it != j.end(), "{}: field '{}' is missing", where, name);
  return *it;
}

int64_t int_field(const json& j, const char* name, const std::string& where, int64_t lo = 0) {
  const json& v = field(j, name, where);
  OOMB_CHECK(v.is_number_integer(), "{}: field '{}' must be a whole number, got {}", where, name, v.dump());
  // unsigned values above 2^63 - 1 come out negative from get<int64_t>, and are refused with them
  const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX) ? -1 : v.get<int64_t>();
  OOMB_CHECK(x >= lo, "{}: field '{}' must be {} or more, got {}", where, name, lo, v.dump());
  return x;
}

std::string string_field(const json& j, const char* name, const std::string& where) {
  const json& v = field(j, name, where);
  OOMB_CHECK(v.is_string(), "{}: field '{}' must be a string, got {}", where, name, v.dump());
  return v.get<std::string>();
}

const json& object_field(const json& j, const char* name, const std::string& where) {
  const json& v = field(j, name, where);
  OOMB_CHECK(v.is_object(), "{}: field '{}' must be an object, got {}", where, name,
             v.is_structured() ? std::string(v.type_name()) : v.dump());
  return v;
}

bool is_hex16(const std::string& s) {
  if (s.size() != 16) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// A file name inside the checkpoint directory: no path, not the state file itself.
bool plain_file_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\0') == std::string::npos && s != kCheckpointStateFile;
}

// Whether every number in v is finite (JSON has no infinities: 1e999 parses to one and would be
// written back as null).
bool all_finite(const json& v) {
  if (v.is_number_float()) return std::isfinite(v.get<double>());
  if (v.is_structured())
    for (const auto& e : v) if (!all_finite(e)) return false;
  return true;
}

// A value for a message: strings without their quotes.
std::string shown(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

}  // namespace

double flag_value(float x) { return std::stod(fmt::format("{}", x)); }

json state_to_json(const CheckpointState& s) {
  json files = json::object();
  for (const auto& [name, bytes] : s.files) files[name] = bytes;
  json j = {{"format", kFormat},
          {"version", kCheckpointVersion},
          {"step", s.step},
          {"total_steps", s.total_steps},
          {"adam_step", s.adam_step},
          {"windows", s.windows},
          {"next_lr", s.next_lr},
          {"weights_dtype", s.weights_dtype},
          {"model", s.model},
          {"data", {{"path", s.data.path}, {"tokens", s.data.tokens}, {"fingerprint", s.data.fingerprint}}},
          {"flags", s.flags},
          {"files", files},
          {"write_s", s.write_s}};
  if (s.sources.empty()) {
    j["epoch"] = s.epoch, j["epoch_position"] = s.epoch_position;
  } else {
    j["sources"] = json::array();
    for (const SourcePosition& p : s.sources)
      j["sources"].push_back(
          {{"path", p.path}, {"windows", p.windows}, {"epoch", p.epoch}, {"epoch_position", p.epoch_position}});
  }
  return j;
}

CheckpointState state_from_json(const json& j, const std::string& where) {
  OOMB_CHECK(j.is_object(), "{}: not a checkpoint state (a JSON object was expected, got {})", where, j.type_name());
  const std::string format = string_field(j, "format", where);
  OOMB_CHECK(format == kFormat, "{}: field 'format' is '{}', not '{}'", where, format, kFormat);
  const int64_t version = int_field(j, "version", where);
  OOMB_CHECK(version == kCheckpointVersion, "{}: field 'version' is {}; this oomb reads version {}", where, version,
             kCheckpointVersion);
  CheckpointState s;
  s.step = int_field(j, "step", where);
  s.total_steps = int_field(j, "total_steps", where, 1);
  OOMB_CHECK(s.step <= s.total_steps, "{}: field 'step' ({}) is beyond 'total_steps' ({})", where, s.step,
             s.total_steps);
  s.adam_step = int_field(j, "adam_step", where);
  OOMB_CHECK(s.adam_step <= s.step, "{}: field 'adam_step' ({}) is beyond 'step' ({})", where, s.adam_step, s.step);
  s.windows = int_field(j, "windows", where);
  if (j.contains("sources")) {  // a mix of data
    const json& src = j["sources"];
    OOMB_CHECK(src.is_array() && src.size() >= 2, "{}: field 'sources' must be a list of two sources or more, got {}",
               where, src.dump());
    for (size_t i = 0; i < src.size(); ++i) {
      const std::string at = fmt::format("{} (sources[{}])", where, i);
      OOMB_CHECK(src[i].is_object(), "{}: not an object", at);
      s.sources.push_back({string_field(src[i], "path", at), int_field(src[i], "windows", at),
                           int_field(src[i], "epoch", at), int_field(src[i], "epoch_position", at)});
    }
  } else {
    s.epoch = int_field(j, "epoch", where);
    s.epoch_position = int_field(j, "epoch_position", where);
  }
  const json& lr = field(j, "next_lr", where);
  OOMB_CHECK(lr.is_number() && std::isfinite(lr.get<double>()) && lr.get<double>() >= 0,
             "{}: field 'next_lr' must be a finite number >= 0, got {}", where, lr.dump());
  s.next_lr = lr.get<double>();
  s.weights_dtype = string_field(j, "weights_dtype", where);
  OOMB_CHECK(s.weights_dtype == "f32" || s.weights_dtype == "bf16" || s.weights_dtype == "f16",
             "{}: field 'weights_dtype' is '{}', not one of f32, bf16, f16", where, s.weights_dtype);
  s.model = object_field(j, "model", where);
  OOMB_CHECK(all_finite(s.model), "{}: field 'model' holds a number beyond the range of a double", where);
  const json& data = object_field(j, "data", where);
  const std::string data_where = where + " (data)";
  s.data.path = string_field(data, "path", data_where);
  s.data.tokens = int_field(data, "tokens", data_where, 1);
  s.data.fingerprint = string_field(data, "fingerprint", data_where);
  OOMB_CHECK(is_hex16(s.data.fingerprint), "{}: field 'fingerprint' must be 16 lowercase hex digits, got '{}'",
             data_where, s.data.fingerprint);
  s.flags = object_field(j, "flags", where);
  for (const auto& [name, v] : s.flags.items()) {
    OOMB_CHECK(name.starts_with("--") && name.size() > 2, "{}: flags: '{}' is not a flag name (--name)", where, name);
    OOMB_CHECK(v.is_primitive() && !v.is_null(), "{}: flags: '{}' must be a number, string or boolean, got {}",
               where, name, v.dump());
    OOMB_CHECK(!v.is_number_float() || std::isfinite(v.get<double>()), "{}: flags: '{}' is not finite", where, name);
  }
  for (const auto& [name, v] : object_field(j, "files", where).items()) {
    OOMB_CHECK(plain_file_name(name), "{}: files: '{}' is not a file name of the checkpoint directory", where, name);
    OOMB_CHECK(v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) &&
                   v.get<int64_t>() >= 0,
               "{}: files: the size of '{}' must be a whole number >= 0, got {}", where, name, v.dump());
    s.files[name] = v.get<int64_t>();
  }
  if (j.contains("write_s")) {  // (optional: checkpoints before it lack it)
    const json& w = j["write_s"];
    OOMB_CHECK(w.is_number() && std::isfinite(w.get<double>()) && w.get<double>() >= 0,
               "{}: field 'write_s' must be a finite number >= 0, got {}", where, w.dump());
    s.write_s = w.get<double>();
  }
  return s;
}

CheckpointState parse_checkpoint_state(std::string_view text, const std::string& where) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  OOMB_CHECK(!j.is_discarded(), "{}: not valid JSON (a damaged checkpoint state)", where);
  return state_from_json(j, where);
}

// The flags as the math reads them: under --precision bf16 every layer rounds K and V to bf16, so
// the pages' dtype (--kv-dtype) gives the same bits either way (and checkpoints from before its
// "auto" recorded f32 there).
static json math_equivalent(json flags) {
  const auto p = flags.find("--precision");
  if (p != flags.end() && *p == "bf16" && flags.contains("--kv-dtype")) flags["--kv-dtype"] = "bf16";
  return flags;
}

void check_same_run(const CheckpointState& saved_state, const CheckpointState& now_state, const std::string& where,
                    bool schedule_extended) {
  CheckpointState saved = saved_state, now = now_state;
  saved.flags = math_equivalent(saved.flags), now.flags = math_equivalent(now.flags);
  std::vector<std::string> diffs;
  // the model: every config.json field that changes the math
  std::set<std::string> keys;
  for (const auto& [k, v] : saved.model.items()) keys.insert(k);
  for (const auto& [k, v] : now.model.items()) keys.insert(k);
  for (const std::string& k : keys) {
    if (ignored_model_fields().count(k)) continue;
    const bool in_saved = saved.model.contains(k), in_now = now.model.contains(k);
    if (!(in_saved && in_now && saved.model[k] == now.model[k]))
      diffs.push_back(fmt::format("--model's config.json differs from the checkpoint's in field '{}': {} here, {} in "
                                  "the checkpoint{}",
                                  k, in_now ? now.model[k].dump() : "absent", in_saved ? saved.model[k].dump() : "absent",
                                  k.starts_with("rope_") || k.ends_with("max_position_embeddings")
                                      ? " (a RoPE field: --model's config.json, the --rope-* flags, which the "
                                        "checkpoint's config.toml keeps, or a --lora adapter's oomb_rope.json)"
                                      : ""));
  }
  // the data: the same tokens (a moved file resumes; another file, or the same one changed, does not)
  if (saved.data.tokens != now.data.tokens || saved.data.fingerprint != now.data.fingerprint)
    diffs.push_back(fmt::format("--data {} is not the checkpoint's data {}: {} tokens here (fingerprint {}), {} in the "
                                "checkpoint (fingerprint {})",
                                now.data.path, saved.data.path, now.data.tokens, now.data.fingerprint,
                                saved.data.tokens, saved.data.fingerprint));
  if (saved.total_steps != now.total_steps && !schedule_extended)
    diffs.push_back(fmt::format("--steps is {} here but {} in the checkpoint (the learning-rate schedule's length: "
                                "another schedule resumes only where every step done had the lr it gives, as in "
                                "--lr-schedule wsd's stable phase)",
                                now.total_steps, saved.total_steps));
  std::set<std::string> flags;
  for (const auto& [k, v] : saved.flags.items()) flags.insert(k);
  for (const auto& [k, v] : now.flags.items()) flags.insert(k);
  // flags recorded only when not their default (so that checkpoints from before them resume)
  static const std::map<std::string, std::string> kUnrecorded = {
      {"--packing", "wrapped"}, {"--lr-schedule", "cosine"}, {"--min-lr-ratio", "0.1"}, {"--lora-dropout", "0"}};
  auto value = [&](const json& fl, const std::string& f) {
    if (fl.contains(f)) return shown(fl[f]);
    const auto d = kUnrecorded.find(f);
    return d != kUnrecorded.end() ? d->second + " (the default)" : std::string("not recorded");
  };
  for (const std::string& f : flags) {
    if (schedule_extended && (f == "--decay-steps" || f == "--lr-schedule" || f == "--min-lr-ratio")) continue;
    const bool in_saved = saved.flags.contains(f), in_now = now.flags.contains(f);
    if (!(in_saved && in_now && saved.flags[f] == now.flags[f]))
      diffs.push_back(fmt::format("{} is {} here but {} in the checkpoint", f, value(now.flags, f),
                                  value(saved.flags, f)));
  }
  if (diffs.empty()) return;
  std::string msg = fmt::format("cannot resume from {}: this run differs from the checkpoint's in what changes the "
                                "math (a resumed run must match it):", where);
  for (const std::string& d : diffs) msg += "\n  " + d;
  fail("{}", msg);
}

}  // namespace oomb
