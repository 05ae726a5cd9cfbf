// ParamStore's sizes (model/param_store.h): where each range lies in the flat layout, what the
// device's slots and head and the pinned images take, and what crosses; the memory plan reads
// them, and the store allocates by them.
#include <algorithm>
#include <array>

#include "model/param_store.h"

namespace oomb {

int64_t ParamStore::layer_offset(const ModelConfig& c, int64_t l) {
  return c.vocab * c.hidden + l * layer_numel(c);  // the layers follow the embedding (param_layout)
}

int64_t ParamStore::layer_numel(const ModelConfig& c) {
  if (c.layers == 0) return 0;
  return (param_count(c) - head_numel(c)) / c.layers;
}

int64_t ParamStore::head_numel(const ModelConfig& c) {
  return c.vocab * c.hidden * (c.tie_word_embeddings ? 1 : 2) + c.hidden;
}

int64_t ParamStore::vocab_tiles(const ModelConfig& c) {
  const int64_t Vt = lm_head_vocab_tile(c.vocab);
  return c.vocab > 0 ? (c.vocab + Vt - 1) / Vt : 0;
}

// (two tiles or fewer: the slots would hold the whole lm_head; tied, tiles of the embedding)
bool ParamStore::streams_head(const ModelConfig& c, bool zero3) { return !zero3 && vocab_tiles(c) > 2; }

bool ParamStore::embeds_on_host(const ModelConfig& c, bool zero3) {
  return !zero3 && (!c.tie_word_embeddings || streams_head(c, zero3));
}

int64_t ParamStore::tile_numel(const ModelConfig& c) { return lm_head_vocab_tile(c.vocab) * c.hidden; }

int64_t ParamStore::head_tile_slots(const ModelConfig& c, bool zero3) { return streams_head(c, zero3) ? 2 : 0; }

// the embedding's values on an offloaded device (none when it stays on the host)
int64_t ParamStore::device_embed_numel(const ModelConfig& c, bool zero3) {
  return ParamStore::embeds_on_host(c, zero3) ? 0 : c.vocab * c.hidden;
}

// the embedding (unless on the host), the final norm, and an untied lm_head that does not stream
int64_t ParamStore::device_head_numel(const ModelConfig& c, bool zero3) {
  const bool lm = !c.tie_word_embeddings && !streams_head(c, zero3);
  return device_embed_numel(c, zero3) + c.hidden + (lm ? c.vocab * c.hidden : 0);
}

int64_t ParamStore::embed_staging_bytes(const ModelConfig& c, bool zero3, int64_t rows, Tag tag) {
  return embeds_on_host(c, zero3) ? HostEmbedding::staging_bytes(c, rows, tag) : 0;
}

int64_t ParamStore::device_bytes(const ModelConfig& c, bool zero3) {
  return (2 * layer_numel(c) + device_head_numel(c, zero3) + head_tile_slots(c, zero3) * tile_numel(c)) * 4;
}

int64_t ParamStore::head_tiles_copied(const ModelConfig& c, int64_t passes, bool bf16) {
  if (!streams_head(c, false) || passes <= 0) return 0;
  const int64_t Vt = lm_head_vocab_tile(c.vocab), K = vocab_tiles(c), es = bf16 ? 2 : 4;
  const int64_t all = c.vocab * c.hidden * es, first_two = 2 * Vt * c.hidden * es;
  const int64_t last_two = (c.vocab - (K - 2) * Vt) * c.hidden * es;
  int64_t b = all;  // the first pass (ascending): every tile
  for (int64_t p = 1; p < passes; ++p) b += all - (p % 2 == 1 ? last_two : first_two);
  return b;
}

// Layer 0's tensors in the layout's order (every layer has the same), placed as the frozen bf16
// base places them (model/params.h: a matrix bf16, the rest fp32, each from a 256-byte boundary),
// so that base's layers are their own images by construction.
std::vector<ParamStore::ImagePart> ParamStore::image_parts(const ModelConfig& c, int64_t* bytes) {
  const std::vector<ParamSpec> fp32 = param_layout(c), mixed = frozen_bf16_layout(c);
  std::vector<ImagePart> parts;
  const int64_t first = layer_offset(c, 0);
  int64_t start = -1, end = 0;
  for (size_t i = 0; i < fp32.size(); ++i) {
    if (!fp32[i].name.starts_with("model.layers.0.")) continue;
    const ParamSpec& m = mixed[i];
    if (start < 0) start = m.at;
    parts.push_back({fp32[i].offset - first, m.at - start, m.numel(), m.dtype == DType::BF16});
    end = m.at - start + m.numel() * int64_t(dtype_size(m.dtype));
  }
  *bytes = align256(end);
  return parts;
}

int64_t ParamStore::layer_image_bytes(const ModelConfig& c) {
  int64_t n = 0;
  image_parts(c, &n);
  return n;
}

// the device head under bf16: embedding (E fp32, unless on the host), final norm (d fp32), the
// lm_head (V x d bf16) unless it streams through bf16 tile slots
int64_t ParamStore::head_norm_at(const ModelConfig& c, bool zero3) { return align256(device_embed_numel(c, zero3) * 4); }
int64_t ParamStore::head_lm_at(const ModelConfig& c, bool zero3) { return align256(head_norm_at(c, zero3) + c.hidden * 4); }
int64_t ParamStore::head_image_bytes(const ModelConfig& c, bool zero3) {
  return head_lm_at(c, zero3) + (streams_head(c, zero3) ? 0 : c.vocab * c.hidden * 2);
}
int64_t ParamStore::head_image_copied(const ModelConfig& c) {
  return device_embed_numel(c, false) * 4 + c.hidden * 4 + (streams_head(c, false) ? 0 : c.vocab * c.hidden * 2);
}

int64_t ParamStore::device_weight_bytes(const ModelConfig& c, bool bf16, bool zero3) {
  return bf16 ? 2 * layer_image_bytes(c) + head_image_bytes(c, zero3) + head_tile_slots(c, zero3) * tile_numel(c) * 2
              : device_bytes(c, zero3);
}

int64_t ParamStore::host_image_bytes(const ModelConfig& c, bool frozen_bf16) {
  if (frozen_bf16) return c.tie_word_embeddings ? c.vocab * c.hidden * 2 : 0;  // (the layers are their own images)
  return c.layers * layer_image_bytes(c) + c.vocab * c.hidden * 2;
}

// --zero 3's ranges: a layer, the embedding, the tail (the final norm and an untied lm_head).
std::array<int64_t, 3> ParamStore::zero3_ranges(const ModelConfig& c) {
  const int64_t E = c.vocab * c.hidden;
  return {ParamStore::layer_numel(c), E, ParamStore::head_numel(c) - E};
}

int64_t ParamStore::zero3_host_bytes(const ModelConfig& c, int ranks, Tier dev, Tier home) {
  int64_t b = 0, most = 0;
  for (int64_t n : zero3_ranges(c)) {
    b += GradSync::host_bytes(n, ranks, 2, dev);
    most = std::max(most, Shard::of(n, 0, ranks).block);
  }
  return b + (home == Tier::Device ? 0 : most * 4);  // (pinned shards: the sum's part added on the host)
}

}  // namespace oomb
