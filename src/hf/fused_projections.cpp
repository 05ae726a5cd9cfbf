#include "hf/fused_projections.h"

#include <algorithm>
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
    const std::vector<int64_t> rows = part_rows(c, g);
    int64_t row0 = 0, total = 0;
    for (int64_t r : rows) total += r;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rest == std::string(g.parts[i]) + ".weight") return FusedPart{prefix + g.fused + ".weight", row0, rows[i], total};
      row0 += rows[i];
    }
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
    std::string prefix, rest;
    split_layer_name(t.name, prefix, rest);
    const Group& g = *std::find_if(std::begin(kGroups), std::end(kGroups), [&](const Group& x) {
      return std::any_of(std::begin(x.parts), std::end(x.parts),
                         [&](const char* p) { return p && rest == std::string(p) + ".weight"; });
    });
    if (part->row0 != 0) {  // joined at the group's first part, which must be there
      OOMB_CHECK(by_name.count(prefix + g.parts[0] + ".weight"), "save: '{}' needs '{}{}.weight' beside '{}'",
                 part->fused, prefix, g.parts[0], t.name);
      continue;
    }
    std::vector<const SaveTensor*> parts;
    for (const char* p : g.parts) {
      if (!p) break;
      auto it = by_name.find(prefix + p + ".weight");
      OOMB_CHECK(it != by_name.end(), "save: '{}' needs '{}{}.weight' beside '{}'", part->fused, prefix, p, t.name);
      parts.push_back(it->second);
    }
    const size_t es = dtype_size(t.dtype);
    const int64_t cols = t.shape.at(1);
    bool adjacent = true;
    for (size_t i = 1; i < parts.size(); ++i) {
      const SaveTensor& a = *parts[i - 1];
      adjacent = adjacent && parts[i]->dtype == t.dtype && parts[i]->shape.at(1) == cols &&
                 static_cast<const char*>(a.data) + size_t(a.shape[0] * cols) * es == parts[i]->data;
    }
    int64_t rows = 0;
    for (const SaveTensor* p : parts) rows += p->shape.at(0);
    OOMB_CHECK(rows == part->fused_rows, "save: '{}' would have {} rows, the config makes it {}", part->fused, rows,
               part->fused_rows);
    const void* data = t.data;
    if (!adjacent) {
      storage.emplace_back(Tier::Host, Tag::IO, size_t(part->fused_rows * cols) * es);
      char* dst = storage.back().as<char>();
      for (const SaveTensor* p : parts) {
        OOMB_CHECK(p->dtype == t.dtype && p->shape.size() == 2 && p->shape[1] == cols, "save: '{}' and '{}' do not "
                   "join into '{}'", t.name, p->name, part->fused);
        const size_t bytes = size_t(p->shape[0] * cols) * es;
        std::memcpy(dst, p->data, bytes);
        dst += bytes;
      }
      data = storage.back().data();
    }
    out.push_back({part->fused, t.dtype, {part->fused_rows, cols}, data});
  }
  return out;
}

}  // namespace oomb
