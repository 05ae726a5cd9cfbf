// A decoder-only model (Llama / Qwen2 / Mistral) trained chunk-recurrently (design notes: shared/DESIGN.md, section 2):
// a forward sweep over chunks fills paged K/V; a backward sweep in reverse chunk order recomputes
// each chunk from its embedding, runs each layer's backward from its saved input, accumulates
// attention gradients in place into gradient pages of every page read, and frees pages as soon as
// no remaining chunk needs them. One chunk of C = N tokens is plain full-sequence training.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "kv/paged_docs.h"
#include "kv/paged_kv.h"
#include "model/config.h"
#include "model/layer.h"
#include "model/params.h"

namespace oomb {

struct LossStats {
  double loss_sum = 0;  // summed cross-entropy over counted targets
  int64_t targets = 0;  // targets counted (ids >= 0)
  int64_t correct = 0;  // argmax hits
};

// Supplies tokens [t0, t0 + n) of the current sequence: input ids and next-token targets (< 0: ignored).
using ChunkReader = std::function<void(int64_t t0, int64_t n, int32_t* ids, int32_t* targets)>;

struct ChunkPlan {
  int64_t chunk = 0;                  // C, tokens per chunk
  int64_t page_size = 128;            // P, tokens per KV page
  DType kv_grad_dtype = DType::F32;   // gradient pages: f32, or bf16 (half the bytes)
  // --doc-mask: the token that ends each packed document (-1: off). A token after it starts a new
  // document: attention stays within documents, positions restart at 0, and the separator's
  // own target (the next document's first token) is not trained.
  int32_t doc_sep = -1;
  // K/V pages: f32, or bf16 (half the kv bytes). With bf16 every layer rounds its K (after RoPE)
  // and V to bf16 before attention, its own chunk's too, so chunked training still equals
  // full-sequence training; gradients pass the rounding straight through.
  DType kv_dtype = DType::F32;
};

// Chunk t of T covers [begin, end); chunks are aligned to the end of the sequence, so the last one
// is full and the first may be short.
struct ChunkSpan {
  int64_t begin, end;
};
ChunkSpan chunk_span(int64_t N, int64_t C, int64_t t);
int64_t chunk_count(int64_t N, int64_t C);

// Bytes per tag that a Model with this plan allocates for sequences of N tokens, at their peak:
// the same functions size the allocations. Tags not listed (io) are transient during load and save.
struct MemoryPlan {
  int64_t weights = 0, grads = 0, optimizer = 0, activations = 0, kv = 0, kv_grad = 0, workspace = 0, data = 0;
  int64_t total() const { return weights + grads + optimizer + activations + kv + kv_grad + workspace + data; }
};
MemoryPlan plan_memory(const ModelConfig& cfg, const ChunkPlan& plan, int64_t N, const std::string& optimizer,
                       size_t workspace_bytes);

class Model {
 public:
  Model(const ModelConfig& cfg, Backend& be, const ChunkPlan& plan);
  const ModelConfig& config() const { return cfg_; }
  const ChunkPlan& plan() const { return plan_; }
  Params& params() { return params_; }
  Params& grads() { return *grads_; }
  Backend& backend() { return be_; }
  void enable_grads();  // allocates the gradient buffer (tag grads), zeroed
  // Parameters from / to host memory (load and save through them when the backend is a device).
  void upload_params(const Params& host);
  void download_params(Params& host) const;

  // One sequence of N tokens. Loss = mean cross-entropy over its targets; grads accumulate
  // weight * dLoss/dparam (weight = 1 / accumulated sequences).
  LossStats forward_backward(const ChunkReader& read, int64_t N, float weight);
  LossStats evaluate(const ChunkReader& read, int64_t N);
  // Logits of every position of a sequence of N tokens: out (N, V), host memory, fp32.
  void logits(const int32_t* ids, int64_t N, float* out);
  // The same over whole arrays (tests, small inputs).
  LossStats forward_backward(const int32_t* ids, const int32_t* targets, int64_t N, float weight);
  LossStats evaluate(const int32_t* ids, const int32_t* targets, int64_t N);

  const PagedKV& kv() const { return kv_; }
  const PagedKV& kv_grad() const { return dkv_; }

 private:
  static size_t data_bytes(const ChunkPlan& p);
  static size_t saved_bytes(const ModelConfig& c, const ChunkPlan& p);
  friend MemoryPlan plan_memory(const ModelConfig&, const ChunkPlan&, int64_t, const std::string&, size_t);
  LossStats run(const ChunkReader& read, int64_t N, float weight, bool backward);
  // Reads chunk c's ids and targets and sets positions (and documents with doc_sep). first_pass:
  // the forward sweep, which derives document ids and stores them in pages for the backward one.
  int64_t load_chunk(const ChunkReader& read, ChunkSpan c, bool first_pass);  // returns targets counted
  LayerCtx layer_ctx(int64_t layer, ChunkSpan c, bool with_grads);
  void forward_layers(ChunkSpan c, bool write_kv, bool kv_only_last);

  ModelConfig cfg_;
  Backend& be_;
  ChunkPlan plan_;
  Params params_;
  std::unique_ptr<Params> grads_;
  std::vector<float> inv_freq_;
  float attention_scaling_ = 1.0f;
  PagedKV kv_, dkv_;   // tags kv, kv_grad
  Arena data_;         // ids, targets, positions of one chunk (tag data)
  Arena saved_;        // one chunk's layer inputs h_0..h_L, dh, final norm (tag activations)
  LayerPlan layer_plan_;
  Tensor ids_, targets_, pos_, doc_, dh_, hnorm_, rstd_final_;
  struct HostChunk {  // the host's copy of a chunk's ids, targets, positions, documents
    int32_t *ids = nullptr, *targets = nullptr, *pos = nullptr, *doc = nullptr;
  } host_;
  Arena stage_;  // holds host_ when the backend's memory is not the host's (tag data)
  PagedDocs docs_;                    // document of every token so far (doc_sep >= 0)
  int32_t last_id_ = -1, last_doc_ = 0;  // the forward sweep's previous token and its document
  std::vector<Tensor> h_;             // layers + 1 of (C, d)
  std::vector<KVBlock> prefix_;       // reused block list
};

}  // namespace oomb
