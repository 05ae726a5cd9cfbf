#include "hf/fused_projections.h"

#include <cstring>
#include <map>

#include "core/error.h"

namespace oomb {
namespace {

struct Group {
  const char* fused;
  const char* parts[3];  // null-terminated when two
};
constexpr Group kGroups[] = {{"self_attn.qkv_proj", {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
                             {"mlp.gate_up_proj", {"mlp.gate_proj", "mlp.up_proj", nullptr}}};

// "model.layers.L." and the rest of a layer parameter's name, or nothing
bool split_layer_name(const std::string& name, std::string& prefix, std::string& rest) {
  static const std::string kLayers = "model.layers.";
  if (!name.starts_with(kLayers)) return false;
  const size_t dot = name.find('.', kLayers.size());
  if (dot == std::string::npos) return false;
  prefix = name.substr(0, dot + 1), rest = name.substr(dot + 1);
  return true;
}

std::vector<int64_t> part_rows(const ModelConfig& c, const Group& g) {
  if (g.parts[2]) return {c.heads * c.head_dim, c.kv_heads * c.head_dim, c.kv_heads * c.head_dim};
  return {c.intermediate, c.intermediate};
}

}  // namespace

std::optional<FusedPart> fused_part(const ModelConfig& c, const std::string& name) {
  std::string prefix, rest;
  if (!c.fused_projections() || !split_layer_name(name, prefix, rest)) return std::nullopt;
  for (const Group& g : kGroups) {
    if (!(g.parts[2] ? c.fused_qkv() : c.fused_gate_up())) continue;
    const std::vector<int64_t> rows = part_rows(c, g);
    FusedPart f{prefix + g.fused + ".weight"};
    for (size_t i = 0; i < rows.size(); ++i) {
      f.parts.push_back(prefix + g.parts[i] + ".weight");
      if (f.parts.back() == name) f.row0 = f.fused_rows, f.rows = rows[i];
      f.fused_rows += rows[i];
    }
    if (f.rows > 0) return f;
  }
  return std::nullopt;
}

std::vector<SaveTensor> fuse_for_save(const ModelConfig& c, std::span<const SaveTensor> in,
                                      std::vector<Buffer>& storage) {
  if (!c.fused_projections()) return {in.begin(), in.end()};
  std::map<std::string, const SaveTensor*> by_name;
  for (const SaveTensor& t : in) by_name[t.name] = &t;
  std::vector<SaveTensor> out;
  for (const SaveTensor& t : in) {
    const std::optional<FusedPart> part = fused_part(c, t.name);
    if (!part) {
      out.push_back(t);
      continue;
    }
    auto need = [&](const std::string& p) -> const SaveTensor& {
      const auto it = by_name.find(p);
      OOMB_CHECK(it != by_name.end(), "save: '{}' needs '{}' beside '{}'", part->fused, p, t.name);
      return *it->second;
    };
    if (part->row0 != 0) {  // joined at the group's first part, which must be there
      need(part->parts.front());
      continue;
    }
    const size_t es = dtype_size(t.dtype);
    const int64_t cols = t.shape.size() == 2 ? t.shape[1] : -1;
    std::vector<const SaveTensor*> parts;
    int64_t rows = 0;
    bool adjacent = true;  // each part's bytes right after the one before: joined in place
    for (const std::string& p : part->parts) {
      const SaveTensor& s = need(p);
      OOMB_CHECK(s.dtype == t.dtype && s.shape.size() == 2 && s.shape[1] == cols, "save: '{}' and '{}' do not join "
                 "into '{}'", t.name, s.name, part->fused);
      adjacent = adjacent && static_cast<const char*>(t.data) + size_t(rows * cols) * es == s.data;
      parts.push_back(&s);
      rows += s.shape[0];
    }
    OOMB_CHECK(rows == part->fused_rows, "save: '{}' would have {} rows, the config makes it {}", part->fused, rows,
               part->fused_rows);
    const void* data = t.data;
    if (!adjacent) {
      storage.emplace_back(Tier::Host, Tag::IO, size_t(rows * cols) * es);
      char* dst = storage.back().as<char>();
      for (const SaveTensor* p : parts) {
        const size_t bytes = size_t(p->shape[0] * cols) * es;
        std::memcpy(dst, p->data, bytes);
        dst += bytes;
      }
      data = storage.back().data();
    }
    out.push_back({part->fused, t.dtype, {rows, cols}, data});
  }
  return out;
}

}  // namespace oomb
