// The CUDA backend: every Backend op on one stream, fp32 storage and compute (the CPU reference's
// arithmetic, so the two agree op by op) but for the matmuls, which take bf16 operands too
// (--precision bf16), cuBLASLt GEMMs and oomb's own kernels (kernels.h).
// Deterministic: no atomics anywhere; reductions in a fixed order.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"

namespace oomb {

namespace {

void cuda_check(cudaError_t e, const char* op) {
  OOMB_CHECK(e == cudaSuccess, "{}: CUDA error: {}", op, cudaGetErrorString(e));
}

// Validation: errors start with the op's name, as on the CPU.
void check(const char* op, const char* what, const Tensor& t, int ndim, DType dt = DType::F32) {
  OOMB_CHECK(!t.empty() || t.numel() == 0, "{}: {} is empty", op, what);
  OOMB_CHECK(t.dtype == dt, "{}: {} must be {}, got {}", op, what, dtype_name(dt), dtype_name(t.dtype));
  OOMB_CHECK(t.tier == Tier::Device, "{}: {} must be in device memory for the CUDA backend", op, what);
  OOMB_CHECK(ndim < 0 || t.ndim == ndim, "{}: {} must have {} dims, got {}", op, what, ndim, t.shape_str());
}
// A GEMM's input: f32 or bf16, of `like`'s dtype when given (cuBLASLt takes A and B of one type).
void check_matmul(const char* op, const char* what, const Tensor& t, int ndim, const char* like_name = nullptr,
                  const Tensor* like = nullptr) {
  OOMB_CHECK(t.dtype == DType::F32 || t.dtype == DType::BF16, "{}: {} must be f32 or bf16, got {}", op, what,
             dtype_name(t.dtype));
  OOMB_CHECK(!like || t.dtype == like->dtype, "{}: {} ({}) and {} ({}) must share one dtype", op, what,
             dtype_name(t.dtype), like_name, dtype_name(like->dtype));
  check(op, what, t, ndim, t.dtype);
}
void check_same(const char* op, const char* an, const Tensor& a, const char* bn, const Tensor& b) {
  bool same = a.ndim == b.ndim;
  for (int i = 0; same && i < a.ndim; ++i) same = a.shape[i] == b.shape[i];
  OOMB_CHECK(same, "{}: {} {} and {} {} must have the same shape", op, an, a.shape_str(), bn, b.shape_str());
}

// A device buffer (tag workspace) grown to the largest size asked for: steady-state steps allocate nothing.
struct Scratch {
  Buffer buf;
  void* get(size_t bytes) {
    if (buf.bytes() < bytes) {
      buf.reset();  // the old one first: the peak is the larger buffer alone
      buf = Buffer(Tier::Device, Tag::Workspace, bytes);
    }
    return buf.data();
  }
};

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    // blocking streams: they wait for the legacy stream, where the allocator zeroes new memory
    cuda_check(cudaStreamCreate(&stream_), "cuda backend");
    cuda_check(cudaStreamCreate(&copy_stream_), "cuda backend");
    for (auto& st : table_stage_) {
      st.host = Buffer(Tier::Pinned, Tag::Workspace, kTableStage);
      st.dev = Buffer(Tier::Device, Tag::Workspace, kTableStage);
      cuda_check(cudaEventCreateWithFlags(&st.done, cudaEventDisableTiming), "cuda backend");
    }
    gemm_ws_ = Buffer(Tier::Device, Tag::Workspace, kGemmWorkspace);
    gemm_ = std::make_unique<cuda::Gemm>(stream_, gemm_ws_.data(), kGemmWorkspace);
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    cudaStreamSynchronize(copy_stream_);
    for (auto& st : table_stage_) cudaEventDestroy(st.done);
    gemm_.reset();
    cudaStreamDestroy(copy_stream_);
    cudaStreamDestroy(stream_);
  }
  std::string_view name() const override { return "cuda"; }
  Tier tier() const override { return Tier::Device; }

  // x, w: f32 (fp32 GEMM) or bf16 (bf16 GEMM, fp32 accumulation); y, b fp32
  void linear_fwd(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) override {
    check_matmul("linear_fwd", "x", x, 2);
    check_matmul("linear_fwd", "w", w, 2, "x", &x);
    check("linear_fwd", "y", y, 2);
    const int64_t T = x.dim(0), in = x.dim(1), out = w.dim(0);
    OOMB_CHECK(w.dim(1) == in && y.dim(0) == T && y.dim(1) == out, "linear_fwd: shapes x {} w {} y {} do not fit",
               x.shape_str(), w.shape_str(), y.shape_str());
    if (b) {
      check("linear_fwd", "b", *b, 1);
      OOMB_CHECK(b->dim(0) == out, "linear_fwd: bias {} does not match out {}", b->shape_str(), out);
    }
    const bool bf16 = x.dtype == DType::BF16;
    gemm_->run(false, true, T, out, in, x.data, in, w.data, in, y.f(), out, 1.0f, 0.0f, b ? b->f() : nullptr, bf16);
    launched("linear_fwd");
  }
  // x, w, dy: all f32 or all bf16; dx, dw, db fp32 (dw accumulates, beta = 1)
  void linear_bwd(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, bool acc, Tensor* dw,
                  Tensor* db) override {
    check_matmul("linear_bwd", "x", x, 2);
    check_matmul("linear_bwd", "w", w, 2, "x", &x);
    check_matmul("linear_bwd", "dy", dy, 2, "x", &x);
    const int64_t T = x.dim(0), in = x.dim(1), out = w.dim(0);
    OOMB_CHECK(w.dim(1) == in && dy.dim(0) == T && dy.dim(1) == out, "linear_bwd: shapes x {} w {} dy {} do not fit",
               x.shape_str(), w.shape_str(), dy.shape_str());
    if (dx) {
      check("linear_bwd", "dx", *dx, 2);
      check_same("linear_bwd", "dx", *dx, "x", x);
    }
    if (dw) {
      check("linear_bwd", "dw", *dw, 2);
      check_same("linear_bwd", "dw", *dw, "w", w);
    }
    if (db) {
      check("linear_bwd", "db", *db, 1);
      OOMB_CHECK(db->dim(0) == out, "linear_bwd: db {} does not match out {}", db->shape_str(), out);
    }
    if (T == 0) return;
    const bool bf16 = x.dtype == DType::BF16;
    if (dx)  // dx (T, in) = dy (T, out) . w (out, in)
      gemm_->run(false, false, T, in, out, dy.data, out, w.data, in, dx->f(), in, 1.0f, acc ? 1.0f : 0.0f, nullptr,
                 bf16);
    if (dw)  // dw (out, in) += dy^T . x
      gemm_->run(true, false, out, in, T, dy.data, out, x.data, in, dw->f(), in, 1.0f, 1.0f, nullptr, bf16);
    if (db) cuda::k::column_sums(dy.data, bf16, db->f(), T, out, stream_);
    launched("linear_bwd");
  }

  void embedding_fwd(const Tensor& ids, const Tensor& table, Tensor& out) override {
    check("embedding_fwd", "ids", ids, 1, DType::I32);
    check("embedding_fwd", "table", table, 2);
    check("embedding_fwd", "out", out, 2);
    OOMB_CHECK(out.dim(0) == ids.dim(0) && out.dim(1) == table.dim(1), "embedding_fwd: out {} must be ({}, {})",
               out.shape_str(), ids.dim(0), table.dim(1));
    if (sync_each_) check_ids("embedding_fwd", ids, table.dim(0));  // else checked on the host before upload
    cuda::k::embedding_fwd(ids.as<int32_t>(), table.f(), out.f(), ids.dim(0), table.dim(1), stream_);
    launched("embedding_fwd");
  }
  void embedding_bwd(const Tensor& ids, const Tensor& dout, Tensor& dtable) override {
    check("embedding_bwd", "ids", ids, 1, DType::I32);
    check("embedding_bwd", "dout", dout, 2);
    check("embedding_bwd", "dtable", dtable, 2);
    OOMB_CHECK(dout.dim(0) == ids.dim(0) && dout.dim(1) == dtable.dim(1), "embedding_bwd: dout {} must be ({}, {})",
               dout.shape_str(), ids.dim(0), dtable.dim(1));
    if (sync_each_) check_ids("embedding_bwd", ids, dtable.dim(0));
    cuda::k::embedding_bwd(ids.as<int32_t>(), dout.f(), dtable.f(), ids.dim(0), dtable.dim(1), stream_);
    launched("embedding_bwd");
  }

  void rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) override {
    check("rmsnorm_fwd", "x", x, 2);
    check("rmsnorm_fwd", "w", w, 1);
    check_same("rmsnorm_fwd", "y", y, "x", x);
    check("rmsnorm_fwd", "rstd", rstd, 1);
    OOMB_CHECK(w.dim(0) == x.dim(1) && rstd.dim(0) == x.dim(0), "rmsnorm_fwd: w {} / rstd {} do not fit x {}",
               w.shape_str(), rstd.shape_str(), x.shape_str());
    cuda::k::rmsnorm_fwd(x.f(), w.f(), eps, y.f(), rstd.f(), x.dim(0), x.dim(1), stream_);
    launched("rmsnorm_fwd");
  }
  void rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx, bool acc,
                   Tensor& dw) override {
    check("rmsnorm_bwd", "x", x, 2);
    check_same("rmsnorm_bwd", "dy", dy, "x", x);
    check_same("rmsnorm_bwd", "dx", dx, "x", x);
    check_same("rmsnorm_bwd", "dw", dw, "w", w);
    cuda::k::rmsnorm_bwd(x.f(), w.f(), rstd.f(), dy.f(), dx.f(), acc, dw.f(), x.dim(0), x.dim(1), stream_);
    launched("rmsnorm_bwd");
  }

  void rope_fwd(Tensor& x, const Tensor& pos, const RopeTable& r) override { rope("rope_fwd", x, pos, r, false); }
  void rope_bwd(Tensor& dx, const Tensor& pos, const RopeTable& r) override { rope("rope_bwd", dx, pos, r, true); }

  void swiglu_fwd(const Tensor& gate, const Tensor& up, Tensor& out) override {
    check("swiglu_fwd", "gate", gate, -1);
    check_same("swiglu_fwd", "up", up, "gate", gate);
    check_same("swiglu_fwd", "out", out, "gate", gate);
    cuda::k::swiglu_fwd(gate.f(), up.f(), out.f(), gate.numel(), stream_);
    launched("swiglu_fwd");
  }
  void swiglu_bwd(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup) override {
    check("swiglu_bwd", "gate", gate, -1);
    for (const auto& [n, t] : {std::pair<const char*, const Tensor*>{"up", &up}, {"dout", &dout}, {"dgate", &dgate},
                               {"dup", &dup}})
      check_same("swiglu_bwd", n, *t, "gate", gate);
    cuda::k::swiglu_bwd(gate.f(), up.f(), dout.f(), dgate.f(), dup.f(), gate.numel(), stream_);
    launched("swiglu_bwd");
  }

  void attention_fwd(const Tensor& q, std::span<const KVBlock> blocks, const AttnArgs& a, Tensor& o,
                     Tensor& lse) override {
    cuda::k::AttnParams p = attention_params("attention_fwd", q, blocks, a, false);
    check_same("attention_fwd", "o", o, "q", q);
    check("attention_fwd", "lse", lse, 2);
    OOMB_CHECK(lse.dim(0) == p.T && lse.dim(1) == p.H, "attention_fwd: lse {} must be ({}, {})", lse.shape_str(), p.T,
               p.H);
    cuda::k::attention_fwd(p, q.f(), o.f(), lse.f(), stream_);
    launched("attention_fwd");
  }
  void attention_bwd(const Tensor& q, const Tensor& o, const Tensor& lse, const Tensor& dout,
                     std::span<const KVBlock> blocks, const AttnArgs& a, Tensor& dq) override {
    cuda::k::AttnParams p = attention_params("attention_bwd", q, blocks, a, true);
    check_same("attention_bwd", "o", o, "q", q);
    check_same("attention_bwd", "dout", dout, "q", q);
    check_same("attention_bwd", "dq", dq, "q", q);
    check("attention_bwd", "lse", lse, 2);
    float* dsum = static_cast<float*>(dsum_.get(size_t(std::max<int64_t>(p.T * p.H, 1)) * 4));
    cuda::k::attention_bwd(p, q.f(), o.f(), lse.f(), dout.f(), dq.f(), dsum, stream_);
    launched("attention_bwd");
  }

  void page_key_means(const Tensor& k, int64_t t0, int64_t page_size, Tensor& means) override {
    check("page_key_means", "k", k, 3);
    check("page_key_means", "means", means, 3, DType::BF16);
    OOMB_CHECK(means.dim(1) == k.dim(1) && means.dim(2) == k.dim(2) && page_size > 0 && t0 >= 0 &&
                   (k.dim(0) == 0 || (t0 + k.dim(0) - 1) / page_size < means.dim(0)),
               "page_key_means: k {} at token {} does not fit means {} (page size {})", k.shape_str(), t0,
               means.shape_str(), page_size);
    cuda::k::page_key_means(k.f(), t0, page_size, means.as<uint16_t>(), k.dim(0), k.dim(1), k.dim(2), stream_);
    launched("page_key_means");
  }
  void page_scores(const Tensor& q, int64_t tile, const Tensor& means, Tensor& scores) override {
    check("page_scores", "q", q, 3);
    check("page_scores", "means", means, 3, DType::BF16);
    check("page_scores", "scores", scores, 3);
    const int64_t T = q.dim(0), H = q.dim(1), D = q.dim(2), G = means.dim(1), pages = means.dim(0);
    OOMB_CHECK(tile > 0 && G > 0 && H % G == 0 && means.dim(2) == D, "page_scores: means {} do not fit q {}",
               means.shape_str(), q.shape_str());
    const int64_t S = scores.dim(1);
    OOMB_CHECK(scores.dim(0) == (T + tile - 1) / tile && (S == G || S == 1) && scores.dim(2) == pages,
               "page_scores: scores {} must be ({}, {} or 1, {})", scores.shape_str(), (T + tile - 1) / tile, G, pages);
    OOMB_CHECK((S == 1 ? G : 1) * D * 4 <= 48 * 1024, "page_scores: {} kv heads of dim {} exceed shared memory", G, D);
    cuda::k::page_scores(q.f(), tile, means.as<uint16_t>(), scores.f(), T, H, G, D, pages, S, stream_);
    launched("page_scores");
  }
  void page_key_minmax(const Tensor& k, int64_t t0, int64_t page_size, Tensor& minmax) override {
    check("page_key_minmax", "k", k, 3);
    check("page_key_minmax", "minmax", minmax, 4, DType::BF16);
    OOMB_CHECK(minmax.dim(1) == 2 && minmax.dim(2) == k.dim(1) && minmax.dim(3) == k.dim(2) && page_size > 0 &&
                   t0 >= 0 && (k.dim(0) == 0 || (t0 + k.dim(0) - 1) / page_size < minmax.dim(0)),
               "page_key_minmax: k {} at token {} does not fit minmax {} (page size {})", k.shape_str(), t0,
               minmax.shape_str(), page_size);
    cuda::k::page_key_minmax(k.f(), t0, page_size, minmax.as<uint16_t>(), k.dim(0), k.dim(1), k.dim(2), stream_);
    launched("page_key_minmax");
  }
  void page_quest_scores(const Tensor& q, int64_t tile, const Tensor& minmax, Tensor& scores) override {
    check("page_quest_scores", "q", q, 3);
    check("page_quest_scores", "minmax", minmax, 4, DType::BF16);
    check("page_quest_scores", "scores", scores, 3);
    const int64_t T = q.dim(0), H = q.dim(1), D = q.dim(2), G = minmax.dim(2), pages = minmax.dim(0);
    OOMB_CHECK(tile > 0 && G > 0 && H % G == 0 && minmax.dim(1) == 2 && minmax.dim(3) == D,
               "page_quest_scores: minmax {} does not fit q {}", minmax.shape_str(), q.shape_str());
    const int64_t S = scores.dim(1);
    OOMB_CHECK(scores.dim(0) == (T + tile - 1) / tile && (S == G || S == 1) && scores.dim(2) == pages,
               "page_quest_scores: scores {} must be ({}, {} or 1, {})", scores.shape_str(), (T + tile - 1) / tile, G,
               pages);
    OOMB_CHECK(2 * (S == 1 ? G : 1) * D * 4 <= 48 * 1024, "page_quest_scores: {} kv heads of dim {} exceed shared memory",
               G, D);
    cuda::k::page_quest_scores(q.f(), tile, minmax.as<uint16_t>(), scores.f(), T, H, G, D, pages, S, stream_);
    launched("page_quest_scores");
  }
  void page_topk(const Tensor& scores, int64_t first, Tensor& chosen) override {
    check("page_topk", "scores", scores, 3);
    check("page_topk", "chosen", chosen, 3, DType::I32);
    const int64_t tiles = scores.dim(0), S = scores.dim(1), pages = scores.dim(2), K = chosen.dim(2);
    OOMB_CHECK(chosen.dim(0) == tiles && chosen.dim(1) == S && K >= 1, "page_topk: chosen {} must be ({}, {}, K >= 1)",
               chosen.shape_str(), tiles, S);
    OOMB_CHECK(first >= 0 && first <= pages && pages <= INT32_MAX,
               "page_topk: first page {} outside the {} pages of scores", first, pages);
    OOMB_CHECK(S <= 65535, "page_topk: {} groups exceed the grid (65535)", S);
    cuda::k::page_topk(scores.f(), tiles, S, pages, first, chosen.as<int32_t>(), K, stream_);
    launched("page_topk");
  }

  void lm_head_xent_stats(const Tensor& h, const Tensor& w, int64_t v0, const Tensor& targets,
                          Tensor& stats) override {
    const char* op = "lm_head_xent_stats";
    check_xent(op, h, w, v0, targets, stats);
    const int64_t T = h.dim(0), d = h.dim(1), Vt = w.dim(0), tile = std::clamp<int64_t>(T, 1, kLossTile);
    const bool bf16 = h.dtype == DType::BF16;
    float* logits = reinterpret_cast<float*>(logits_.get(loss_tile(tile, Vt, bf16).bytes));
    const size_t row_bytes = size_t(d) * dtype_size(h.dtype);
    for (int64_t t0 = 0; t0 < T; t0 += tile) {
      const int64_t n = std::min(tile, T - t0);
      const void* ht = static_cast<const char*>(h.data) + size_t(t0) * row_bytes;  // (n, d)
      gemm_->run(false, true, n, Vt, d, ht, d, w.data, d, logits, Vt, 1.0f, 0.0f, nullptr, bf16);
      cuda::k::xent_stats(logits, Vt, targets.as<int32_t>() + t0, v0, Vt, n, stats.as<double>() + t0 * 4, stream_);
      launched(op);
    }
  }
  void lm_head_xent_loss(const Tensor& stats, const Tensor& targets, Tensor& sums) override {
    const char* op = "lm_head_xent_loss";
    check(op, "targets", targets, 1, DType::I32);
    check(op, "stats", stats, 2, DType::F64);
    check(op, "sums", sums, 1, DType::F64);
    OOMB_CHECK(stats.dim(0) == targets.dim(0) && stats.dim(1) == 4 && sums.dim(0) == 2,
               "{}: stats {} must be ({}, 4) and sums {} (2)", op, stats.shape_str(), targets.dim(0), sums.shape_str());
    cuda::k::xent_loss(stats.as<double>(), targets.as<int32_t>(), targets.dim(0), sums.as<double>(), stream_);
    launched(op);
  }
  void lm_head_xent_grad(const Tensor& h, const Tensor& w, int64_t v0, const Tensor& targets, const Tensor& stats,
                         float scale, Tensor* dh, bool dh_accumulate, Tensor* dw) override {
    const char* op = "lm_head_xent_grad";
    check_xent(op, h, w, v0, targets, stats);
    if (dh) {
      check(op, "dh", *dh, 2);
      check_same(op, "dh", *dh, "h", h);
    }
    if (dw) {
      check(op, "dw", *dw, 2);
      check_same(op, "dw", *dw, "w", w);
    }
    const int64_t T = h.dim(0), d = h.dim(1), Vt = w.dim(0), tile = std::clamp<int64_t>(T, 1, kLossTile);
    const bool bf16 = h.dtype == DType::BF16;
    const LossTile at = loss_tile(tile, Vt, bf16);
    char* buf = static_cast<char*>(logits_.get(at.bytes));
    float* logits = reinterpret_cast<float*>(buf);
    // bf16: the backward GEMMs read the tile's gradient rounded to bf16 (the CPU rounds it alike)
    void* dl16 = buf + at.logits16;
    const void* dlogits = bf16 ? dl16 : static_cast<const void*>(logits);
    const size_t row_bytes = size_t(d) * dtype_size(h.dtype);
    for (int64_t t0 = 0; t0 < T; t0 += tile) {
      const int64_t n = std::min(tile, T - t0);
      const void* ht = static_cast<const char*>(h.data) + size_t(t0) * row_bytes;  // (n, d)
      gemm_->run(false, true, n, Vt, d, ht, d, w.data, d, logits, Vt, 1.0f, 0.0f, nullptr, bf16);
      cuda::k::xent_grad(logits, Vt, targets.as<int32_t>() + t0, v0, Vt, n, stats.as<double>() + t0 * 4, scale,
                         stream_);
      if (bf16) cuda::k::cast(logits, false, dl16, true, n * Vt, stream_);
      if (dh)  // dh (n, d) (+)= dl (n, Vt) . w (Vt, d)
        gemm_->run(false, false, n, d, Vt, dlogits, Vt, w.data, d, dh->f() + t0 * d, d, 1.0f,
                   dh_accumulate ? 1.0f : 0.0f, nullptr, bf16);
      if (dw)  // dw (Vt, d) += dl^T (Vt, n) . h (n, d)
        gemm_->run(true, false, Vt, d, n, dlogits, Vt, ht, d, dw->f(), d, 1.0f, 1.0f, nullptr, bf16);
      launched(op);
    }
  }
  // h (T, d), w (Vt, d) both f32 or both bf16, targets (T) i32, stats (T, 4) f64
  void check_xent(const char* op, const Tensor& h, const Tensor& w, int64_t v0, const Tensor& targets,
                  const Tensor& stats) {
    check_matmul(op, "h", h, 2);
    check_matmul(op, "w", w, 2, "h", &h);
    check(op, "targets", targets, 1, DType::I32);
    check(op, "stats", stats, 2, DType::F64);
    const int64_t T = h.dim(0);
    OOMB_CHECK(w.dim(1) == h.dim(1) && targets.dim(0) == T && stats.dim(0) == T && stats.dim(1) == 4 && v0 >= 0,
               "{}: w {} / targets {} / stats {} / v0 {} do not fit h {}", op, w.shape_str(), targets.shape_str(),
               stats.shape_str(), v0, h.shape_str());
    // targets were checked on the host before upload (every id < V); with OOMB_CUDA_SYNC, their sign here
    if (sync_each_) check_ids(op, targets, INT32_MAX, true);
  }
  // the loss tile (loss_tile: the logits, and with bf16 matmuls their bf16 gradient),
  // cuBLASLt's workspace and the rest (cuda_workspace_bytes)
  size_t workspace_bytes(const WorkspaceShape& s) const override {
    return cuda_workspace_bytes(s);
  }
  size_t pinned_workspace_bytes() const override { return cuda_pinned_workspace_bytes(); }

  void copy(void* dst, Tier dt, const void* src, Tier st, size_t bytes) override {
    if (bytes == 0 || dst == src) return;
    // pinned memory is host memory (--offload params keeps the masters there): unified addressing
    // tells the sides apart
    cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "copy");
    // the host may read what arrived, or reuse what it sent, once this returns
    if (dt != Tier::Device || st != Tier::Device) cuda_check(cudaStreamSynchronize(stream_), "copy");
  }
  void fill_zero(void* dst, size_t bytes) override {
    if (bytes > 0) cuda_check(cudaMemsetAsync(dst, 0, bytes, stream_), "fill_zero");
  }
  void copy_async(void* dst, Tier dt, const void* src, Tier st, size_t bytes, Stream s) override {
    if (bytes == 0 || dst == src) return;
    cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, on(s)), "copy_async");
  }
  void fill_zero_async(void* dst, size_t bytes, Stream s) override {
    if (bytes > 0) cuda_check(cudaMemsetAsync(dst, 0, bytes, on(s)), "fill_zero_async");
  }
  void copy_rows(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows,
                 Tier t) override {
    if (rows == 0 || width == 0) return;
    cuda_check(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDefault, stream_), "copy_rows");
    if (t != Tier::Device) cuda_check(cudaStreamSynchronize(stream_), "copy_rows");
  }
  void* native_stream(Stream s) override { return on(s); }
  std::unique_ptr<Event> new_event() override { return std::make_unique<CudaEvent>(); }
  void record(Event& e, Stream s) override { cuda_check(cudaEventRecord(ev(e), on(s)), "record"); }
  void wait(Stream s, const Event& e) override { cuda_check(cudaStreamWaitEvent(on(s), ev(e), 0), "wait"); }
  void synchronize(const Event& e) override { cuda_check(cudaEventSynchronize(ev(e)), "synchronize"); }
  void synchronize() override {
    cuda_check(cudaStreamSynchronize(copy_stream_), "synchronize");
    cuda_check(cudaStreamSynchronize(stream_), "synchronize");
  }


  void add(Tensor& y, const Tensor& x) override {
    check("add", "y", y, -1);
    OOMB_CHECK(x.numel() == y.numel(), "add: x {} and y {} differ in size", x.shape_str(), y.shape_str());
    OOMB_CHECK(x.dtype == DType::F32 || x.dtype == DType::BF16, "add: x must be f32 or bf16, got {}",
               dtype_name(x.dtype));
    OOMB_CHECK(x.tier == Tier::Device, "add: x must be in device memory for the CUDA backend");
    cuda::k::add(y.f(), x.data, x.dtype == DType::BF16, y.numel(), stream_);
    launched("add");
  }
  void cast(const Tensor& src, Tensor& dst) override {
    auto ok = [](DType t) { return t == DType::F32 || t == DType::BF16; };
    OOMB_CHECK(ok(src.dtype) && ok(dst.dtype), "cast: src and dst must be f32 or bf16, got {} and {}",
               dtype_name(src.dtype), dtype_name(dst.dtype));
    OOMB_CHECK(src.numel() == dst.numel(), "cast: src {} and dst {} differ in size", src.shape_str(), dst.shape_str());
    OOMB_CHECK(src.tier == Tier::Device && dst.tier == Tier::Device, "cast: src and dst must be in device memory");
    cuda::k::cast(src.data, src.dtype == DType::BF16, dst.data, dst.dtype == DType::BF16, src.numel(), stream_);
    launched("cast");
  }
  void round_bf16(Tensor& x) override {
    check("round_bf16", "x", x, -1);
    cuda::k::round_bf16(x.f(), x.numel(), stream_);
    launched("round_bf16");
  }
  void zero(Tensor& y) override { fill_zero(y.data, y.bytes()); }
  void scale(Tensor& y, float s) override {
    check("scale", "y", y, -1);
    cuda::k::scale(y.f(), s, y.numel(), stream_);
    launched("scale");
  }
  double sum_squares(const Tensor& x) override {
    check("sum_squares", "x", x, -1);
    const int64_t n = x.numel(), nc = (n + cuda::k::kSumChunk - 1) / cuda::k::kSumChunk;
    if (n == 0) return 0.0;
    double* part = static_cast<double*>(partials_.get(size_t(nc) * 8));
    cuda::k::sum_squares_chunks(x.f(), n, part, stream_);
    launched("sum_squares");
    std::vector<double> h(static_cast<size_t>(nc));
    copy(h.data(), Tier::Host, part, Tier::Device, size_t(nc) * 8);
    double s = 0;
    for (double v : h) s += v;  // chunk order, as on the CPU
    return s;
  }

  void adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamW& a) override {
    check("adamw_step", "param", p, -1);
    OOMB_CHECK(g.numel() == p.numel() && m.numel() == p.numel() && v.numel() == p.numel(),
               "adamw_step: param, grad and moments differ in size");
    const double bc1 = 1.0 - std::pow(double(a.beta1), double(a.step));
    const double bc2 = 1.0 - std::pow(double(a.beta2), double(a.step));
    cuda::k::adamw(p.f(), g.f(), m.f(), v.f(), p.numel(), a.lr, a.beta1, a.beta2, a.eps, a.weight_decay,
                   float(a.lr / bc1), float(1.0 / std::sqrt(bc2)), stream_);
    launched("adamw_step");
  }
  void sgd_step(Tensor& p, const Tensor& g, float lr) override {
    check("sgd_step", "param", p, -1);
    OOMB_CHECK(g.numel() == p.numel(), "sgd_step: param and grad differ in size");
    cuda::k::sgd(p.f(), g.f(), lr, p.numel(), stream_);
    launched("sgd_step");
  }

 private:
  static constexpr int64_t kLossTile = 256;
  static constexpr size_t kGemmWorkspace = size_t(32) << 20;

  // The loss tile's scratch: the logits (fp32, tile x Vt); with bf16 matmuls their gradient as
  // bf16 from the next 256-byte boundary. cuda_workspace_bytes counts the same.
  struct LossTile {
    size_t logits16, bytes;
  };
  static LossTile loss_tile(int64_t tile, int64_t Vt, bool bf16) {
    LossTile t;
    t.bytes = size_t(tile * Vt) * 4;
    t.logits16 = (t.bytes + 255) / 256 * 256;
    if (bf16) t.bytes = t.logits16 + size_t(tile * Vt) * 2;
    return t;
  }

  // A kernel's fault surfaces at the next sync, named after whichever op syncs; OOMB_CUDA_SYNC=1
  // waits after every op so that the op which faulted names it (debugging, slower).
  void launched(const char* op) {
    cuda_check(cudaGetLastError(), op);
    if (sync_each_) cuda_check(cudaStreamSynchronize(stream_), op);
  }

  // ids must index the table (read back, a host sync: only with OOMB_CUDA_SYNC; the model checks
  // every id on the host before it uploads them). targets: ids < vocab, negative ones ignored.
  void check_ids(const char* op, const Tensor& ids, int64_t vocab, bool targets = false) {
    ids_host_.resize(size_t(ids.dim(0)));
    copy(ids_host_.data(), Tier::Host, ids.data, Tier::Device, size_t(ids.dim(0)) * 4);
    for (int64_t t = 0; t < ids.dim(0); ++t)
      OOMB_CHECK((targets || ids_host_[size_t(t)] >= 0) && ids_host_[size_t(t)] < vocab,
                 "{}: {} id {} at position {} is outside the vocabulary (size {})", op, targets ? "target" : "token",
                 ids_host_[size_t(t)], t, vocab);
  }

  void rope(const char* op, Tensor& x, const Tensor& pos, const RopeTable& r, bool inverse) {
    check(op, "x", x, 3);
    check(op, "pos", pos, 1, DType::I32);
    OOMB_CHECK(pos.dim(0) == x.dim(0), "{}: pos must be ({}) i32, got {}", op, x.dim(0), pos.shape_str());
    OOMB_CHECK(r.inv_freq != nullptr, "{}: no inv_freq table", op);
    const int64_t D = x.dim(2);
    OOMB_CHECK(D % 2 == 0, "{}: head dim {} must be even", op, D);
    // the table lives in host memory; a device copy is kept while its values stay the same
    if (rope_host_.size() != size_t(D / 2) || std::memcmp(rope_host_.data(), r.inv_freq, size_t(D / 2) * 4) != 0) {
      rope_host_.clear();  // marked stale until the copy has succeeded
      void* dev = rope_dev_.get(size_t(D / 2) * 4);
      copy(dev, Tier::Device, r.inv_freq, Tier::Host, size_t(D / 2) * 4);
      rope_host_.assign(r.inv_freq, r.inv_freq + D / 2);
    }
    cuda::k::rope(x.f(), pos.as<int32_t>(), static_cast<const float*>(rope_dev_.buf.data()), r.attention_scaling,
                  inverse, x.dim(0), x.dim(1), D, stream_);
    launched(op);
  }

  // Validates the blocks like the CPU backend and uploads their table.
  cuda::k::AttnParams attention_params(const char* op, const Tensor& q, std::span<const KVBlock> blocks,
                                       const AttnArgs& a, bool backward) {
    check(op, "q", q, 3);
    cuda::k::AttnParams p{};
    p.T = q.dim(0), p.H = q.dim(1), p.D = q.dim(2), p.scale = a.scale, p.q_idx0 = a.q_idx0, p.q_doc = a.q_doc;
    p.window = a.window;
    OOMB_CHECK(!blocks.empty() || p.T == 0, "{}: no KV blocks", op);
    OOMB_CHECK(p.D <= cuda::k::kMaxHeadDim, "{}: head dim {} is above the kernels' {}", op, p.D,
               cuda::k::kMaxHeadDim);
    table_.clear();
    for (size_t b = 0; b < blocks.size(); ++b) {
      const KVBlock& kb = blocks[b];
      // K/V f32, or bf16 (pages with --kv-dtype bf16), as on the CPU
      check(op, "block k", kb.k, 3, kb.k.dtype == DType::BF16 ? DType::BF16 : DType::F32);
      check(op, "block v", kb.v, 3, kb.k.dtype);
      check_same(op, "block v", kb.v, "block k", kb.k);
      if (b == 0) p.G = kb.k.dim(1);
      OOMB_CHECK(kb.k.dim(1) == p.G && kb.k.dim(2) == p.D, "{}: block {} k {} does not fit q {} (G={}, D={})", op, b,
                 kb.k.shape_str(), q.shape_str(), p.G, p.D);
      if (backward) {
        check_same(op, "block dk", kb.dk, "block k", kb.k);
        check_same(op, "block dv", kb.dv, "block k", kb.k);
        OOMB_CHECK(kb.dk.tier == Tier::Device && kb.dv.tier == Tier::Device,
                   "{}: block {} gradients must be in device memory for the CUDA backend", op, b);
        OOMB_CHECK((kb.dk.dtype == DType::F32 || kb.dk.dtype == DType::BF16) && kb.dv.dtype == kb.dk.dtype,
                   "{}: block {} gradients must be f32 or bf16, got {} and {}", op, b, dtype_name(kb.dk.dtype),
                   dtype_name(kb.dv.dtype));
      }
      table_.push_back({kb.k.data, kb.v.data, kb.dk.data, kb.dv.data, kb.doc, kb.idx0, kb.k.dim(0),
                        int32_t(backward && kb.dk.dtype == DType::BF16), int32_t(kb.k.dtype == DType::BF16),
                        kb.heads});
      p.max_len = std::max(p.max_len, kb.k.dim(0));
    }
    if (p.G > 0) OOMB_CHECK(p.H % p.G == 0, "{}: query heads {} not a multiple of kv heads {}", op, p.H, p.G);
    // the dK/dV grid has a z dimension of 32-key tiles (at most 65535) and y of kv heads
    OOMB_CHECK((p.max_len + 31) / 32 <= 65535 && p.G <= 65535 && p.H <= 65535,
               "{}: blocks of {} keys or {} heads exceed the kernels' grid limits", op, p.max_len, p.H);
    p.n_blocks = int64_t(table_.size());
    p.first = a.first, p.last = a.last;
    if (!a.first || !a.last) {
      if (!backward) {
        check(op, "run_sum", a.run_sum, 2);
        OOMB_CHECK(a.run_sum.dim(0) == p.T && a.run_sum.dim(1) == p.H, "{}: run_sum {} must be ({}, {})", op,
                   a.run_sum.shape_str(), p.T, p.H);
        p.run_sum = a.run_sum.f();
      }
    }
    // the table goes up from pinned staging, double-buffered: a staging buffer is rewritten only
    // once the copy that last read it is done (two calls ago), so the host does not wait here
    const size_t bytes = table_.size() * sizeof(cuda::k::AttnBlock);
    OOMB_CHECK(bytes <= kTableStage, "{}: {} blocks exceed the staged table's {} entries", op, table_.size(),
               kTableStage / sizeof(cuda::k::AttnBlock));
    TableStage& st = table_stage_[table_next_];
    table_next_ ^= 1;
    cuda_check(cudaEventSynchronize(st.done), op);
    std::memcpy(st.host.data(), table_.data(), bytes);
    cuda_check(cudaMemcpyAsync(st.dev.data(), st.host.data(), bytes, cudaMemcpyHostToDevice, stream_), op);
    cuda_check(cudaEventRecord(st.done, stream_), op);
    p.blocks = static_cast<const cuda::k::AttnBlock*>(st.dev.data());
    return p;
  }

  struct CudaEvent final : Event {
    cudaEvent_t e = nullptr;
    CudaEvent() { cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "new_event"); }
    ~CudaEvent() override { cudaEventDestroy(e); }
  };
  static cudaEvent_t ev(const Event& e) {
    const auto* c = dynamic_cast<const CudaEvent*>(&e);
    OOMB_CHECK(c != nullptr, "cuda: an event made by another backend");
    return c->e;
  }
  cudaStream_t on(Stream s) const { return s == Stream::Copy ? copy_stream_ : stream_; }

  // pinned staging of the attention's block table and its device copy, two of each
  static constexpr size_t kTableStage = size_t(1) << 20;  // 14K blocks (cuda_pinned_workspace_bytes: two)
  struct TableStage {
    Buffer host, dev;
    cudaEvent_t done = nullptr;
  };
  TableStage table_stage_[2];
  int table_next_ = 0;

  cudaStream_t stream_ = nullptr, copy_stream_ = nullptr;
  const bool sync_each_ = std::getenv("OOMB_CUDA_SYNC") != nullptr;
  Buffer gemm_ws_;
  std::unique_ptr<cuda::Gemm> gemm_;
  Scratch logits_, partials_, dsum_, rope_dev_;
  std::vector<cuda::k::AttnBlock> table_;
  std::vector<float> rope_host_;
  std::vector<int32_t> ids_host_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(std::string* why) {
  if (!cuda::device_available(why)) return nullptr;
  cuda::install_device_allocator();
  return std::make_unique<CudaBackend>();
}

}  // namespace oomb
