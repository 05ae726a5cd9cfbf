// The op interface every backend implements. Model code calls only these ops.
// Shapes use T = tokens, d = hidden, H = query heads, G = kv heads, D = head dim, V = vocab.
// Ops validate their inputs with errors that start with the op's name.
#pragma once
#include <memory>
#include <span>
#include <string_view>

#include "core/tensor.h"

namespace oomb {

// One block of keys/values for attention (design notes: shared/DESIGN.md, section 3): `len` consecutive tokens whose
// sequence indices start at idx0. Blocks may come in any order; any subset is allowed.
struct KVBlock {
  Tensor k, v;    // (len, G, D), f32 or bf16 (both the same; read as fp32)
  Tensor dk, dv;  // (len, G, D) fp32 gradient accumulators (+=); backward only
  int64_t idx0 = 0;
  const int32_t* doc = nullptr;  // optional per-token document ids (len); null = one document
};

struct AttnArgs {
  float scale = 1.0f;              // softmax scale, usually 1/sqrt(D)
  int64_t q_idx0 = 0;              // sequence index of the first query (causal: key idx <= query idx)
  const int32_t* q_doc = nullptr;  // optional per-query document ids (T); keys of other documents masked
};

// RoPE parameters as transformers computes them: angle = pos * inv_freq (fp32), cos/sin scaled.
struct RopeTable {
  const float* inv_freq = nullptr;  // (D/2)
  float attention_scaling = 1.0f;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual Tier tier() const = 0;

  // y (T, out) = x (T, in) . w^T (out, in) [+ b (out)]
  virtual void linear_fwd(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) = 0;
  // dx (T, in) = dy . w (or += when dx_accumulate);  dw += dy^T . x;  db += sum_t dy.  Null = skip.
  virtual void linear_bwd(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, bool dx_accumulate,
                          Tensor* dw, Tensor* db) = 0;

  // out (T, d) = table[ids];  ids: (T) i32
  virtual void embedding_fwd(const Tensor& ids, const Tensor& table, Tensor& out) = 0;
  // dtable[ids[t]] += dout[t]
  virtual void embedding_bwd(const Tensor& ids, const Tensor& dout, Tensor& dtable) = 0;

  // y (T, d) = x * rstd * w;  rstd: (T) saved for backward
  virtual void rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) = 0;
  // dx (T, d) = ... (or += when dx_accumulate);  dw += ...
  virtual void rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx,
                           bool dx_accumulate, Tensor& dw) = 0;

  // x: (T, H, D) rotated in place at positions pos: (T) i32 (rotate-half layout, as in HF Llama)
  virtual void rope_fwd(Tensor& x, const Tensor& pos, const RopeTable& rope) = 0;
  // dx: (T, H, D) in place: the transpose rotation
  virtual void rope_bwd(Tensor& dx, const Tensor& pos, const RopeTable& rope) = 0;

  // out = silu(gate) * up;  all (T, I)
  virtual void swiglu_fwd(const Tensor& gate, const Tensor& up, Tensor& out) = 0;
  virtual void swiglu_bwd(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate,
                          Tensor& dup) = 0;

  // Causal GQA attention over KV blocks, online softmax. q, o: (T, H, D); lse: (T, H) fp32
  virtual void attention_fwd(const Tensor& q, std::span<const KVBlock> blocks, const AttnArgs& a, Tensor& o,
                             Tensor& lse) = 0;
  // dq (T, H, D) = ...;  every block's dk, dv += its contribution (in place)
  virtual void attention_bwd(const Tensor& q, const Tensor& o, const Tensor& lse, const Tensor& dout,
                             std::span<const KVBlock> blocks, const AttnArgs& a, Tensor& dq) = 0;

  // Fused lm_head + cross-entropy, tiled over tokens (never more than tile x V logits).
  // h: (T, d), w: (V, d), targets: (T) i32 (< 0 = ignored). Returns the summed loss over targets.
  // If dh: dh = scale * dloss/dh;  if dw: dw += scale * dloss/dw.  correct: argmax hits (may be null).
  virtual double lm_head_xent(const Tensor& h, const Tensor& w, const Tensor& targets, float scale, Tensor* dh,
                              Tensor* dw, int64_t* correct) = 0;
  // Bytes of workspace (tag workspace) the backend holds for a vocabulary of V: the loss tile.
  virtual size_t workspace_bytes(int64_t vocab) const = 0;

  // Memory. copy: bytes between this backend's memory and the host's, either way or within one,
  // in order with the ops; the host may read or reuse its side once it returns. fill_zero: this
  // backend's memory.
  virtual void copy(void* dst, Tier dst_tier, const void* src, Tier src_tier, size_t bytes) = 0;
  virtual void fill_zero(void* dst, size_t bytes) = 0;
  // dst = src converted (f32 <-> bf16, round to nearest even; same dtype: a copy); equal numel.
  virtual void cast(const Tensor& src, Tensor& dst) = 0;
  // x (f32) rounded in place to the nearest bf16 value (ties to even), kept in f32.
  virtual void round_bf16(Tensor& x) = 0;

  // Elementwise and reductions over fp32 tensors.
  virtual void add(Tensor& y, const Tensor& x) = 0;  // y += x; x f32 or bf16 (read as fp32)
  virtual void zero(Tensor& y) = 0;
  virtual void scale(Tensor& y, float s) = 0;
  virtual double sum_squares(const Tensor& x) = 0;

  // Optimizer updates over flat fp32 tensors of equal length.
  struct AdamW {
    float lr, beta1, beta2, eps, weight_decay;
    int64_t step;  // 1-based, for bias correction
  };
  virtual void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamW& a) = 0;
  virtual void sgd_step(Tensor& param, const Tensor& grad, float lr) = 0;
};

std::unique_ptr<Backend> make_cpu_backend();
// Null when the build has no CUDA backend or no GPU is visible; `why` says which.
std::unique_ptr<Backend> make_cuda_backend(std::string* why);

}  // namespace oomb
