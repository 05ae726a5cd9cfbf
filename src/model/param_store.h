// Where a model's parameters live, and the views its layers compute with (design notes:
// shared/DESIGN.md, section 10; MegaTrain, arXiv 2604.05091).
//
// The model owns the masters and gradients (Params) and binds them here with the views it computes
// with (with LoRA, the base's layers with adapters bound).
//
// Resident (default): the fp32 masters and gradients (and the optimizer's moments, which the
// optimizer allocates beside them) in the backend's memory, or LoRA's frozen bf16 base (mixed
// layout, model/params.h); the views are handed back as bound.
//
// Offloaded (--offload params): the masters and gradients live in pinned host memory, the
// optimizer's moments beside them in host memory (core/memory.h: host_side).
// With LoRA the offloaded masters are the frozen base's: its layers stream through the weight
// slots as without LoRA, each acquired layer bound to its adapters; the trainable set (adapters),
// its gradients and moments stay in the backend's memory (bind_grads: a resident set), so no
// gradient slot exists and nothing goes back to the host. With --train-embeddings-norms
// (ParamViews::trained, an untied lm_head) the trainable set's embedding, final norm and layer norms
// stand in for the base's: acquire binds each layer's norms over its slot's, and the embedding and
// final norm are the trainable set's, resident (the base's embedding stays on the host, unread
// and unstaged; its final norm still crosses into the head with it, unread).
// The device holds two layer slots of weights and two of gradients (double-buffered: the layer
// computing and the next one arriving on the copy stream) and the head (embedding, final norm,
// lm_head) with its gradients. A pass announces its layer order (begin_pass); acquire(l) waits for
// layer l's copy and returns the same LayerParams views bound to its slot; release(l) sends the
// layer's gradients out (backward, on the copy-out stream, so they leave while the next weights
// arrive) and starts the copy of the layer two ahead into the freed slot, its gradients' part once
// the slot's have left. A layer's gradients accumulate in its device slot while it is there, starting from what the host
// holds (or zero, without a copy, while the host's are known to be zero), so the result is bitwise
// the resident run's. The head arrives once per sequence and its gradients leave at its end.
//
// --zero 3 (world given; needs a device): the masters, gradients and moments (pinned, the moments host, when
// offloaded, else in device memory) are this rank's shards of every range (model/param_shards.h),
// and the layers pass through the slots as offloaded ones do. A layer's fetch waits for the device,
// puts this rank's shard into the slot and gathers the others' (all-gather through host staging,
// grad_sync.h); its gradient slot starts at zero; release reduce-scatters the slot's gradients over
// every rank and adds this rank's part of the sum into its shard (fp32, across chunks and
// sequences). The head's ranges alike, once per sequence. The collectives block the host: no
// overlap of copies with compute in this mode yet. The layer order (--sweep layer) gathers a layer
// once per pass and reduces its gradients chunk by chunk (reduce_chunk).
//
// Flat ranges: layer l is one contiguous range of the flat layout (layer_offset, layer_numel); the
// head is two (the embedding first; the final norm and an untied lm_head last), one after the
// other on the device.
//
// The lm_head in vocabulary tiles (lm_head_vocab_tile(V) rows, the last shorter): the loss takes
// them one at a time, ascending for its first pass and descending for the gradient pass
// (begin_head, head_tile, head_grad_tile, release_head_tile). Resident, or under --zero 3, or of
// two tiles or fewer, a tile is a view of the lm_head the device holds (tied: of the embedding).
// Offloaded and of more than two tiles (streams_head), the device holds two tile slots of
// weights and two of gradients instead of the lm_head (the layer slots' pattern: the tile after next arrives on the copy stream while a
// tile computes; a slot that holds the next pass's first tile keeps it, so the gradient pass starts
// with the two tiles the first pass ended with); a tile's gradient starts in its slot from what the
// host holds (or zero) and leaves when the tile is released. bf16: the weight slots hold the
// lm_head's bf16 copy's rows.
//
// The embedding of an offloaded model (not --zero 3: embeds_on_host) stays in host memory, its rows
// crossing for each chunk through pinned staging (model/host_embedding.h; none when LoRA's
// trainable embedding stands in for it, above), unless it is tied to an
// lm_head of two tiles or fewer, which the device holds whole. Tied to a streamed lm_head, the one
// host table is read by both and its gradient takes both parts in the resident run's order: a
// chunk's lm_head part (the tiles' gradients start from the host's and go back to it), then its
// embedding part (added on the host once the tiles' copies back are done, before the next
// gradient pass fetches a tile).
//
// Offloaded with --precision bf16: what crosses to the device is what the layers compute with. A
// pinned host image per layer (its tensors in the layout's order, the matrices bf16 and the norms
// and biases fp32, each from a 256-byte boundary: layer_image_bytes) is cast from the masters on
// the host when a sequence begins, and a weight slot holds one image (one copy, half the bytes of
// fp32); the head on the device is the embedding (where it is there) and final norm (fp32, from the masters) and the
// lm_head's bf16 copy (from a pinned host copy; the embedding's when tied). The masters, gradients
// (fp32 slots, as without bf16) and moments stay on the host. A frozen bf16 base (LoRA: masters
// in model/params.h's mixed layout) needs no images: each layer is laid out as its image, and so is
// an untied lm_head; only a tied lm_head's bf16 copy is made, from the embedding.
#pragma once
#include <array>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "dist/grad_sync.h"
#include "model/host_embedding.h"
#include "model/param_shards.h"
#include "model/params.h"
#include "model/update_gate.h"

namespace oomb {

// What the layers compute with: every layer's tensors and the head's.
struct ParamViews {
  std::vector<LayerParams> layers;
  Tensor embed, final_norm, lm_head;
  // LoRA's --train-embeddings-norms: embed, final_norm and the layers' norms are the trainable
  // set's (in the backend's memory), not the frozen base's
  bool trained = false;
};

class ParamStore {
 public:
  // chunk_rows: the most token rows embed_fwd / embed_bwd take at once (this rank's of a chunk)
  ParamStore(const ModelConfig& c, Backend& be, bool offload, bool bf16 = false, Comm* zero3_world = nullptr,
             int64_t chunk_rows = 0);
  ~ParamStore();
  bool offloaded() const { return slots_ && home_ == Tier::Pinned; }
  // The tier the masters and gradients live in (the moments: host_side of it): the backend's, or
  // pinned host memory.
  static Tier home(const Backend& be, bool offload) { return offload ? Tier::Pinned : be.tier(); }
  // The masters (in home()) and the views over them; offloaded, the same layout bound to the
  // device's slots and head (allocated here, tags weights and grads).
  void bind(Params& weights, ParamViews views);
  void bind_grads(Params& grads, ParamViews views);
  void zero_grads();  // between sequences only

  // An optimizer update overlapping the next pass (train/optimizer.h, --offload params): possible
  // where fp32 masters live in pinned memory on one rank (not --zero 3, not a frozen base).
  bool can_overlap_update() const { return offloaded() && !world_ && !frozen_base_ && !mixed_; }
  // the units in the order a pass reads them: 0 the embedding and final norm (and an lm_head that
  // is tied or crosses whole), 1 + l layer l, and last a streamed untied lm_head (read at the loss)
  int64_t update_units() const { return cfg_.layers + 1 + (lm_unit_last() ? 1 : 0); }
  int64_t update_unit(int64_t i) const;  // the unit holding flat offset i of the masters
  // An update starts (the caller started the gate): until it ends, a pass waits for each unit
  // before it reads it, and the bf16 images and zeroed gradients come from the update itself
  // (update_dest), unit by unit, rather than from begin_sequence and zero_grads all at once.
  void begin_overlapped_update(UpdateGate* gate);
  // every unit done (or the update failed): no more waits; the next sequence casts its images and
  // the next zero_grads zeroes, as without an update (anything may have written the masters since)
  void end_overlapped_update() { gate_ = nullptr, update_casts_ = update_zeroes_ = update_cast_images_ = false; }
  // Where the overlapped update writes spec s's new weights besides its master, in the same pass
  // (on the update's thread, or within the step): its image (a layer tensor's part of its layer's
  // image, bf16 or an fp32 copy; the lm_head's bf16 copy, which a tied embedding writes; none for
  // an untied embedding or the final norm, which cross as the masters), and whether it leaves the
  // gradient zero.
  struct UpdateDest {
    void* image = nullptr;
    bool image_bf16 = false, zero_grad = false;
  };
  UpdateDest update_dest(const ParamSpec& s) const;

  // A sequence begins: the masters may have changed since the last (loading, an optimizer step;
  // masters_changed false: they have not, as a LoRA run's frozen base, so bf16's images are not
  // cast again); the head's weights arrive (and its gradients when grads). end_sequence: the head's gradients
  // leave and the host waits for every copy, so the masters and gradients may be read or written.
  void begin_sequence(bool grads, bool masters_changed = true);
  void end_sequence();
  // out = the embedding's rows for ids (ids in the backend's memory, host_ids the same on the
  // host); embed_bwd adds dout's rows into the embedding's gradients (nothing where it has none).
  // out, dout: (n, d)
  void embed_fwd(const Tensor& ids, const int32_t* host_ids, Tensor& out);
  void embed_bwd(const Tensor& ids, const int32_t* host_ids, const Tensor& dout);
  const Tensor& final_norm() const { return trained_final_norm_.empty() ? w_.final_norm : trained_final_norm_; }
  const Tensor& lm_head() const { return w_.lm_head; }
  // the head's gradients (empty where a tensor is frozen, under LoRA)
  Tensor& grad_embed() { return g_.embed; }
  Tensor& grad_final_norm() { return g_.final_norm; }
  Tensor& grad_lm_head() { return g_.lm_head; }

  // The lm_head's vocabulary tiles: tile j is rows [j Vt, j Vt + head_tile_rows(j)). A pass over
  // every tile, ascending or descending (with their gradients when grads); then for each in that
  // order: head_tile, compute (head_grad_tile: its gradient, when the lm_head has one), release.
  int64_t head_tiles() const { return tiles_; }
  int64_t head_tile_v0(int64_t j) const { return j * tile_rows_; }
  int64_t head_tile_rows(int64_t j) const;
  bool head_has_grad() const { return head_grad_; }
  void begin_head(bool descending, bool grads);
  const Tensor& head_tile(int64_t j);
  Tensor& head_grad_tile(int64_t j);
  void release_head_tile(int64_t j);

  // A pass over layers in `order` (with their gradients when grads); then for each in that order:
  // acquire, compute (grads_of: the acquired layer's gradients), release.
  void begin_pass(std::span<const int64_t> order, bool grads);
  const LayerParams& acquire(int64_t l);
  LayerParams& grads_of(int64_t l);
  void release(int64_t l);
  // --zero 3, the layer order (one acquire for every chunk): the acquired layer's gradients so far
  // (one chunk's) summed over every rank into this rank's shard, the slot zeroed; called after each
  // chunk but the last (release reduces that one), so that the shard takes the chunks' sums one by
  // one as in the chunk order, with its bits. Nothing otherwise.
  void reduce_chunk(int64_t l);

  static int64_t layer_offset(const ModelConfig& c, int64_t l);
  static int64_t layer_numel(const ModelConfig& c);
  static int64_t head_numel(const ModelConfig& c);
  // The lm_head's vocabulary tiles; offloaded, whether it streams through tile slots (more than two
  // tiles, not --zero 3; tied: tiles of the embedding), and their number (2 or 0).
  static int64_t vocab_tiles(const ModelConfig& c);
  static bool streams_head(const ModelConfig& c, bool zero3);
  static int64_t head_tile_slots(const ModelConfig& c, bool zero3);
  // The head's values an offloaded device holds besides tile slots: the embedding (unless
  // embeds_on_host), the final norm, and an untied lm_head that does not stream.
  static int64_t device_head_numel(const ModelConfig& c, bool zero3);
  // Offloaded: whether the embedding stays in host memory (not --zero 3; untied, or tied to an
  // lm_head that streams: both the table's users then read the host's), and the pinned
  // staging that takes (two slots of `rows` rows each; tag weights: the gathered rows; with
  // gradients, tag grads: their gradients, tag data: their ids).
  static bool embeds_on_host(const ModelConfig& c, bool zero3);
  static int64_t embed_staging_bytes(const ModelConfig& c, bool zero3, int64_t rows, Tag tag);
  // Device bytes an offloaded store holds (tags weights and grads, each): two layer slots + the head
  // (with streams_head: the final norm, the embedding unless embeds_on_host, and the lm_head's tile
  // slots).
  static int64_t device_bytes(const ModelConfig& c, bool zero3 = false);
  // Bytes of a streamed lm_head's tiles that cross in `passes` head passes of one sequence (the
  // loss: ascending, then descending, ...; fp32, or bf16 copies): every tile in the first; each
  // later pass finds its first two tiles (the previous pass's last two) in the slots. 0 unless
  // streams_head.
  static int64_t head_tiles_copied(const ModelConfig& c, int64_t passes, bool bf16);
  // --precision bf16, offloaded: one layer's image (bf16 matrices, fp32 norms and biases, padding
  // included); the head's bytes on the device (fp32 embedding and final norm, bf16 lm_head,
  // padding included) and those of it that cross (no padding); the device's weight bytes (two
  // image slots and the head) and the pinned host images' (every layer's and the lm_head's).
  static int64_t layer_image_bytes(const ModelConfig& c);
  static int64_t head_image_bytes(const ModelConfig& c, bool zero3 = false);
  static int64_t head_image_copied(const ModelConfig& c);
  static int64_t device_weight_bytes(const ModelConfig& c, bool bf16, bool zero3 = false);
  // (frozen_bf16: a frozen bf16 base's, whose layers and untied lm_head are their own images)
  static int64_t host_image_bytes(const ModelConfig& c, bool frozen_bf16 = false);
  // --zero 3: host bytes (tag workspace) of the gathers' and reductions' staging, the shards in `home`.
  static int64_t zero3_host_bytes(const ModelConfig& c, int ranks, Tier dev, Tier home);
  // Tests only: --zero 3 without the gradients' reduce-scatter (each rank keeps its own part).
  static void skip_reduce_for_test(bool skip);

  // Bytes copied between the host and the device so far (zero fills not counted).
  struct Traffic {
    int64_t weights_in = 0, grads_in = 0, grads_out = 0;
  };
  const Traffic& traffic() const { return traffic_; }
  // bf16, offloaded: how many times the host images were made from the masters (a frozen bf16
  // base's: only a tied lm_head's copy is cast; the count still counts each making)
  int64_t image_casts() const { return image_casts_; }

  // Tests only: skip one of the store's waits ("in": a layer's arrival before it computes;
  // "head-in": an lm_head tile's; "out" and "head-out": a fetch's for a layer's or a tile's
  // gradients to have gone out; "sync": the host's wait for the copies at the end of a
  // sequence; tied to a streamed lm_head, "tied-order": the embedding's adds before the next
  // gradient pass over the tiles), to show that the tests catch it.
  static void drop_wait_for_test(const char* which);

 private:
  // sizes (param_store_sizes.cpp): an lm_head tile's values; the embedding's values on the device
  // (none when it stays on the host); where a bf16 head image puts the final norm and the lm_head;
  // --zero 3's ranges (a layer, the embedding, the tail)
  static int64_t tile_numel(const ModelConfig& c);
  static int64_t device_embed_numel(const ModelConfig& c, bool zero3);
  static int64_t head_norm_at(const ModelConfig& c, bool zero3);
  static int64_t head_lm_at(const ModelConfig& c, bool zero3);
  static std::array<int64_t, 3> zero3_ranges(const ModelConfig& c);
  int64_t slot(size_t pos) const { return int64_t((base_ + pos) & 1); }
  void fetch(size_t pos);
  void head_copy(float* dev, Params& host, bool in);
  void bind_images();     // bf16: the images' layout, buffers and views
  void cast_images();     // bf16: the host images from the masters
  void cast_layer_image(int64_t l);
  void cast_lm_image();
  void wait_update(int64_t unit, const char* which);  // a pass reads unit (which: the wait's test name)
  struct Range {
    int64_t lo = 0, hi = 0;  // [lo, hi) of the flat masters (and gradients)
  };
  std::array<Range, 2> unit_ranges(int64_t unit) const;  // an update unit's ranges (the second may be empty)
  bool lm_unit_last() const { return streams_ && !cfg_.tie_word_embeddings; }
  // bf16: layer l's host image and the lm_head's bf16 copy (in the masters for a frozen bf16 base)
  const char* layer_image(int64_t l) const;
  const char* lm_image() const;
  // --zero 3: range r's shards gathered into dev (r.n floats); dev's gradients reduced into the shard
  void device_views(const Params& host, Buffer& slots, Buffer& head, LayerParams* view, ParamViews& out);
  struct LayerZero {
    std::unique_ptr<Params> one;  // --zero 3: a one-layer model whose layout gives the views
    const LayerParams* layer = nullptr;
    const float* base = nullptr;
  };
  LayerZero layer_zero(const Params& host) const;
  // --zero 3 with bf16: layer l's image in slot s, the head's image, each from the gathered fp32 range
  void layer_image_from_shards(int64_t l, int64_t s);
  void head_image_from_shards();
  void zero_home_grads();  // the gradients where they live (home_) from zero
  void gather_into(float* dev, const ParamShards::Range& r, GradSync& sync);
  void reduce_from(float* dev, const ParamShards::Range& r, GradSync& sync);

  ModelConfig cfg_;
  Backend& be_;
  bool slots_;  // the layers pass through device slots (offloaded, or --zero 3)
  Tier home_;   // where the masters, gradients and moments live (home())
  bool frozen_base_ = false;  // offloaded, with gradients resident: LoRA's (the base has none)
  std::vector<LayerParams> adapters_;  // with slots: each layer's views as bound (LoRA: its adapters)
  // with slots and ParamViews::trained: LoRA's trainable embedding and final norm, and whether the
  // layers' norms in adapters_ are the trainable set's
  Tensor trained_embed_, trained_final_norm_;
  bool trained_norms_ = false;
  bool bf16_;   // slots with --precision bf16: the slots hold images
  bool mixed_ = false;  // the masters are a frozen bf16 base (model/params.h): its layers are their images
  Comm* world_ = nullptr;  // --zero 3
  ParamShards shards_;
  std::unique_ptr<GradSync> sync_layer_, sync_embed_, sync_tail_;
  Buffer sum_;  // host: a shard's part of a reduced sum
  Params* weights_ = nullptr;
  Params* grads_ = nullptr;
  ParamViews w_, g_;  // what the model computes with: its views, or (offloaded) the device head's
  // offloaded only
  Buffer wslots_, gslots_, whead_, ghead_buf_;  // device: 2 layer slots each, the head
  LayerParams wview_[2], gview_[2];             // the slots' views (every layer has the same layout)
  // bf16: every layer's image and the lm_head's bf16 copy (pinned; a frozen bf16 base: a tied
  // lm_head's copy alone, or nothing), and where each of a layer's
  // tensors sits in its image: (master's offset in the layer's range, byte offset, numel, bf16)
  Buffer himages_;
  struct ImagePart {
    int64_t master = 0, at = 0, numel = 0;
    bool bf16 = false;
  };
  static std::vector<ImagePart> image_parts(const ModelConfig& c, int64_t* bytes);
  std::vector<ImagePart> parts_;
  int64_t image_bytes_ = 0;
  std::unique_ptr<Event> in_[2], used_[2];
  int64_t holds_[2] = {-1, -1};  // the layer whose current weights a slot holds
  std::vector<bool> grad_zero_;  // per layer: the host's gradients are zero
  bool head_grad_zero_ = true, seq_grads_ = false, images_cast_ = false;
  int64_t image_casts_ = 0;
  Traffic traffic_;
  // the embedding on the host (embeds_on_host, offloaded; made by bind unless ParamViews::trained)
  std::unique_ptr<HostEmbedding> host_embed_;
  // the last layer's gradients and the last tile's on their way back (Stream::CopyOut): a slot's
  // gradients, and a layer's or tile's on the host, are not read or overwritten before it
  std::unique_ptr<Event> gout_, tout_;
  // the lm_head's tiles (streams_: through tile slots)
  void tile_fetch(size_t pos);
  int64_t tile_slot(size_t pos) const { return int64_t((tbase_ + pos) % size_t(tile_slots_)); }
  bool streams_ = false, head_grad_ = false;
  int64_t tile_rows_ = 0, tiles_ = 0, tile_slots_ = 0;
  int64_t chunk_rows_ = 0;  // the host embedding's staging rows (made by bind, unless ParamViews::trained)
  Buffer wtiles_, gtiles_;  // device: tile_slots_ tiles each (weights fp32 or bf16; gradients fp32)
  std::unique_ptr<Event> tin_[2], tused_[2];
  int64_t tholds_[2] = {-1, -1};       // the tile whose current weights a slot holds
  std::vector<bool> tile_grad_zero_;   // per tile: the host's gradients are zero
  std::vector<int64_t> torder_;
  size_t tpos_ = 0, tbase_ = 0;
  bool tgrads_ = false;
  Tensor tile_w_, tile_g_;
  // an overlapped optimizer update (null: none started)
  UpdateGate* gate_ = nullptr;
  bool update_casts_ = false, update_zeroes_ = false;  // the next sequence's images, the next step's zero
  // the images are the running update's (a sequence took them): every sequence until the update
  // ends (the next step's, an evaluation's, the next accumulated window) reads them as they are
  bool update_cast_images_ = false;
  bool update_grads_ = false;  // the update's thread zeroes the gradients (read there alone)
  // the pass
  std::vector<int64_t> order_;
  size_t pos_ = 0, base_ = 0;
  bool pass_grads_ = false;
};

}  // namespace oomb
