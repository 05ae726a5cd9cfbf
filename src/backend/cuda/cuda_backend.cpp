// The CUDA backend: every Backend op on one stream (asynchronous copies on two more, one each way:
// Stream::Copy, Stream::CopyOut), fp32 storage and compute (the CPU reference's
// arithmetic, so the two agree op by op) but for the matmuls, which take bf16 operands too
// (--precision bf16), and attention under --precision bf16, on tensor cores (P and dS in bf16);
// cuBLASLt GEMMs and oomb's own kernels (kernels.h).
// Deterministic: no atomics anywhere; reductions in a fixed order.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/attention_flops.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cudnn_attention.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/op_profile.h"
#include "backend/cuda/scratch.h"
#include "backend/cuda/stream_timeline.h"

namespace oomb {

namespace {

void cuda_check(cudaError_t e, const char* op) {
  OOMB_CHECK(e == cudaSuccess, "{}: CUDA error: {}", op, cudaGetErrorString(e));
}

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    OOMB_CHECK(!profile_ || !timeline_on(), "OOMB_CUDA_TIMELINE and OOMB_CUDA_PROFILE: the profile waits after every "
                                            "op, so the streams would never overlap; set one of them");
    const int copy_streams = copy_streams_from_env();  // (before any stream: a bad value leaks none)
    // blocking streams: they wait for the legacy stream, where the allocator zeroes new memory
    cuda_check(cudaStreamCreate(&stream_), "cuda backend");
    cuda_check(cudaStreamCreate(&copy_stream_), "cuda backend");
    if (copy_streams == 2) cuda_check(cudaStreamCreate(&copy_out_stream_), "cuda backend");
    else copy_out_stream_ = copy_stream_;  // (OOMB_COPY_STREAMS=1)
    for (auto& st : table_stage_) {
      st.host = Buffer(Tier::Pinned, Tag::Workspace, kTableStage);
      st.dev = Buffer(Tier::Device, Tag::Workspace, kTableStage);
      cuda_check(cudaEventCreateWithFlags(&st.done, cudaEventDisableTiming), "cuda backend");
    }
    gemm_ws_ = Buffer(Tier::Device, Tag::Workspace, kGemmWorkspace);
    group_sums_ = Buffer(Tier::Device, Tag::Workspace, cuda::k::kRowGroupBytes);
    gemm_ = std::make_unique<cuda::Gemm>(stream_, gemm_ws_.data(), kGemmWorkspace);
    if (timeline_on()) timeline_ = std::make_unique<cuda::StreamTimeline>(stream_, copy_stream_, copy_out_stream_);
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    cudaStreamSynchronize(copy_stream_);
    cudaStreamSynchronize(copy_out_stream_);  // (the same stream again with OOMB_COPY_STREAMS=1: at once)
    if (profile_) profile_->print();
    if (timeline_) timeline_->print();
    for (auto& st : table_stage_) cudaEventDestroy(st.done);
    gemm_.reset();
    if (copy_out_stream_ != copy_stream_) cudaStreamDestroy(copy_out_stream_);
    cudaStreamDestroy(copy_stream_);
    cudaStreamDestroy(stream_);
  }
  std::string_view name() const override { return "cuda"; }
  Tier tier() const override { return Tier::Device; }

  // x, w: f32 (fp32 GEMM) or bf16 (bf16 GEMM, fp32 accumulation); y, b fp32
  void do_linear_fwd(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) override {
    const int64_t T = x.dim(0), in = x.dim(1), out = w.dim(0);
    const bool bf16 = x.dtype == DType::BF16;
    gemm_->run(false, true, T, out, in, x.data, in, w.data, in, y.f(), out, 1.0f, 0.0f, b ? b->f() : nullptr, bf16);
    launched("linear_fwd", 2.0 * double(T) * double(out) * double(in));
  }
  // x, w, dy: all f32 or all bf16; dx, dw, db fp32 (dw accumulates, beta = 1)
  void do_linear_bwd(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, bool acc, Tensor* dw,
                  Tensor* db) override {
    const int64_t T = x.dim(0), in = x.dim(1), out = w.dim(0);
    if (T == 0) return;
    const bool bf16 = x.dtype == DType::BF16;
    if (dx)  // dx (T, in) = dy (T, out) . w (out, in)
      gemm_->run(false, false, T, in, out, dy.data, out, w.data, in, dx->f(), in, 1.0f, acc ? 1.0f : 0.0f, nullptr,
                 bf16);
    if (dw)  // dw (out, in) += dy^T . x
      gemm_->run(true, false, out, in, T, dy.data, out, x.data, in, dw->f(), in, 1.0f, 1.0f, nullptr, bf16);
    if (db) cuda::k::column_sums(dy.data, bf16, db->f(), group_sums_.as<double>(), T, out, stream_);
    launched("linear_bwd", 2.0 * double(T) * double(out) * double(in) * ((dx ? 1 : 0) + (dw ? 1 : 0)));
  }

  void do_embedding_fwd(const Tensor& ids, const Tensor& table, Tensor& out) override {
    if (sync_each_) check_ids("embedding_fwd", ids, table.dim(0));  // else checked on the host before upload
    cuda::k::embedding_fwd(ids.as<int32_t>(), table.f(), out.f(), ids.dim(0), table.dim(1), stream_);
    launched("embedding_fwd");
  }
  void do_embedding_bwd(const Tensor& ids, const Tensor& dout, Tensor& dtable, int64_t skip) override {
    if (sync_each_) check_ids("embedding_bwd", ids, dtable.dim(0));
    cuda::k::embedding_bwd(ids.as<int32_t>(), dout.f(), dtable.f(), ids.dim(0), dtable.dim(1), int32_t(skip), stream_);
    launched("embedding_bwd");
  }

  void do_rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd, float off) override {
    cuda::k::rmsnorm_fwd(x.f(), w.f(), off, eps, y.data, y.dtype == DType::BF16, rstd.f(), x.dim(0), x.dim(1), stream_);
    launched("rmsnorm_fwd");
  }
  void do_rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx, bool acc,
                      Tensor& dw, float off) override {
    cuda::k::rmsnorm_bwd(x.f(), w.f(), off, rstd.f(), dy.f(), dx.f(), acc, dw.f(), group_sums_.as<double>(), x.dim(0),
                         x.dim(1), stream_);
    launched("rmsnorm_bwd");
  }

  void do_rope_fwd(Tensor& x, const Tensor& pos, const RopeTable& r) override { rope("rope_fwd", x, pos, r, false); }
  void do_rope_bwd(Tensor& dx, const Tensor& pos, const RopeTable& r) override { rope("rope_bwd", dx, pos, r, true); }

  void do_glu_fwd(const Tensor& gate, const Tensor& up, Tensor& out, Act act) override {
    cuda::k::glu_fwd(gate.f(), up.f(), out.data, out.dtype == DType::BF16, act == Act::GeluTanh, gate.numel(), stream_);
    launched("glu_fwd");
  }
  void do_glu_bwd(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup,
                  Act act) override {
    cuda::k::glu_bwd(gate.f(), up.f(), dout.f(), dgate.data, dup.data, dgate.dtype == DType::BF16, act == Act::GeluTanh,
                     gate.numel(), stream_);
    launched("glu_bwd");
  }

  void do_attention_fwd(const Tensor& q, std::span<const KVBlock> blocks, const AttnArgs& a, Tensor& o,
                     Tensor& lse) override {
    if (a.first) cudnn_attention_.new_fold();
    const bool dense = use_cudnn("attention_fwd", a, blocks, q);
    cuda::k::AttnParams p = attention_params("attention_fwd", q, blocks, a, false, dense);
    // a fold's state crosses between cuDNN's route and the tensor-core kernels (log2 units), never
    // the fp32 reference kernels (natural log): the route takes only calls those kernels take
    OOMB_CHECK(!dense || tensor_cores(a, p), "attention_fwd: cuDNN's route took a call the tensor-core kernels "
               "cannot take (head dim {}), so a fold's state could reach the reference kernels", p.D);
    if (dense && cudnn_attention_.forward(p, blocks, q.f(), o.f(), lse.f(), stream_))
      return launched("attention_fwd (cuDNN)", attention_counted(a, p, blocks, false));
    cudnn_refused("attention_fwd");
    const bool tc = tensor_cores(a, p);
    if (tc) cuda::k::attention_fwd_mma(p, q.f(), o.f(), lse.f(), stream_);
    else cuda::k::attention_fwd(p, q.f(), o.f(), lse.f(), stream_);
    launched(tc ? "attention_fwd (tensor cores)" : "attention_fwd", attention_counted(a, p, blocks, false));
  }
  void do_attention_bwd(const Tensor& q, const Tensor& o, const Tensor& lse, const Tensor& dout,
                     std::span<const KVBlock> blocks, const AttnArgs& a, Tensor& dq) override {
    if (a.first) cudnn_attention_.new_fold();
    const bool dense = use_cudnn("attention_bwd", a, blocks, q);
    cuda::k::AttnParams p = attention_params("attention_bwd", q, blocks, a, true, dense);
    float* dsum = static_cast<float*>(dsum_.get(size_t(std::max<int64_t>(p.T * p.H, 1)) * 4));
    if (dense && cudnn_attention_.backward(p, blocks, q.f(), o.f(), lse.f(), dout.f(), dq.f(), dsum, stream_))
      return launched("attention_bwd (cuDNN)", attention_counted(a, p, blocks, true));
    cudnn_refused("attention_bwd");
    const bool tc = tensor_cores(a, p);
    if (tc) cuda::k::attention_bwd_mma(p, q.f(), o.f(), lse.f(), dout.f(), dq.f(), dsum, stream_);
    else cuda::k::attention_bwd(p, q.f(), o.f(), lse.f(), dout.f(), dq.f(), dsum, stream_);
    launched(tc ? "attention_bwd (tensor cores)" : "attention_bwd", attention_counted(a, p, blocks, true));
  }

  void do_page_key_means(const Tensor& k, int64_t t0, int64_t page_size, Tensor& means) override {
    cuda::k::page_key_means(k.f(), t0, page_size, means.as<uint16_t>(), k.dim(0), k.dim(1), k.dim(2), stream_);
    launched("page_key_means");
  }
  void do_page_scores(const Tensor& q, int64_t tile, const Tensor& means, Tensor& scores) override {
    const int64_t T = q.dim(0), H = q.dim(1), D = q.dim(2), G = means.dim(1), pages = means.dim(0);
    const int64_t S = scores.dim(1);
    OOMB_CHECK((S == 1 ? G : 1) * D * 4 <= 48 * 1024, "page_scores: {} kv heads of dim {} exceed shared memory", G, D);
    cuda::k::page_scores(q.f(), tile, means.as<uint16_t>(), scores.f(), T, H, G, D, pages, S, stream_);
    launched("page_scores");
  }
  void do_page_key_minmax(const Tensor& k, int64_t t0, int64_t page_size, Tensor& minmax) override {
    cuda::k::page_key_minmax(k.f(), t0, page_size, minmax.as<uint16_t>(), k.dim(0), k.dim(1), k.dim(2), stream_);
    launched("page_key_minmax");
  }
  void do_page_quest_scores(const Tensor& q, int64_t tile, const Tensor& minmax, Tensor& scores) override {
    const int64_t T = q.dim(0), H = q.dim(1), D = q.dim(2), G = minmax.dim(2), pages = minmax.dim(0);
    const int64_t S = scores.dim(1);
    OOMB_CHECK(2 * (S == 1 ? G : 1) * D * 4 <= 48 * 1024, "page_quest_scores: {} kv heads of dim {} exceed shared memory",
               G, D);
    cuda::k::page_quest_scores(q.f(), tile, minmax.as<uint16_t>(), scores.f(), T, H, G, D, pages, S, stream_);
    launched("page_quest_scores");
  }
  void do_page_topk(const Tensor& scores, int64_t first, Tensor& chosen) override {
    const int64_t tiles = scores.dim(0), S = scores.dim(1), pages = scores.dim(2), K = chosen.dim(2);
    OOMB_CHECK(S <= 65535, "page_topk: {} groups exceed the grid (65535)", S);
    cuda::k::page_topk(scores.f(), tiles, S, pages, first, chosen.as<int32_t>(), K, stream_);
    launched("page_topk");
  }

  void do_lm_head_xent_stats(const Tensor& h, const Tensor& w, int64_t v0, const Tensor& targets,
                             Tensor& stats) override {
    const char* op = "lm_head_xent_stats";  // (targets: every id < V, checked on the host before upload)
    const int64_t T = h.dim(0), d = h.dim(1), Vt = w.dim(0), tile = std::clamp<int64_t>(T, 1, kLossTile);
    const bool bf16 = h.dtype == DType::BF16;
    float* logits = reinterpret_cast<float*>(logits_.get(loss_tile(tile, Vt, bf16).bytes));
    const size_t row_bytes = size_t(d) * dtype_size(h.dtype);
    for (int64_t t0 = 0; t0 < T; t0 += tile) {
      const int64_t n = std::min(tile, T - t0);
      const void* ht = static_cast<const char*>(h.data) + size_t(t0) * row_bytes;  // (n, d)
      gemm_->run(false, true, n, Vt, d, ht, d, w.data, d, logits, Vt, 1.0f, 0.0f, nullptr, bf16);  // (n, Vt)
      cuda::k::xent_stats(logits, Vt, targets.as<int32_t>() + t0, v0, Vt, n, stats.as<double>() + t0 * 4, stream_);
      launched(op, 2.0 * double(n) * double(Vt) * double(d));
    }
  }
  void do_lm_head_xent_loss(const Tensor& stats, const Tensor& targets, Tensor& sums) override {
    cuda::k::xent_loss(stats.as<double>(), targets.as<int32_t>(), targets.dim(0), sums.as<double>(), stream_);
    launched("lm_head_xent_loss");
  }
  void do_lm_head_xent_grad(const Tensor& h, const Tensor& w, int64_t v0, const Tensor& targets, const Tensor& stats,
                            float scale, Tensor* dh, bool dh_accumulate, Tensor* dw) override {
    const char* op = "lm_head_xent_grad";
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
      launched(op, 2.0 * double(n) * double(Vt) * double(d) * (1 + (dh ? 1 : 0) + (dw ? 1 : 0)));
    }
  }
  // the loss tile (loss_tile: the logits, and with bf16 matmuls their bf16 gradient),
  // cuBLASLt's workspace and the rest (cuda_workspace_bytes)
  size_t workspace_bytes(const WorkspaceShape& s) const override {
    // (this backend's cuDNN: simt's stand-in in its builds, so not cudnn_attention_planned's)
    const bool cudnn = (attention_mode_ == CudaAttention::Auto || attention_mode_ == CudaAttention::Cudnn) &&
                       cuda::cudnn::available(nullptr);
    return cuda_workspace_bytes(s) + (cudnn ? cudnn_attention_bytes(s) : 0);
  }
  size_t pinned_workspace_bytes() const override { return cuda_pinned_workspace_bytes(); }

  void copy(void* dst, Tier dt, const void* src, Tier st, size_t bytes) override {
    if (bytes == 0 || dst == src) return;
    // pinned memory is host memory (--offload params keeps the masters there): unified addressing
    // tells the sides apart
    timed(stream_, [&] { cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "copy"); });
    // the host may read what arrived, or reuse what it sent, once this returns
    if (dt != Tier::Device || st != Tier::Device) drain(stream_, "copy");
  }
  void fill_zero(void* dst, size_t bytes) override {
    if (bytes == 0) return;
    timed(stream_, [&] { cuda_check(cudaMemsetAsync(dst, 0, bytes, stream_), "fill_zero"); });
  }
  void copy_async(void* dst, Tier dt, const void* src, Tier st, size_t bytes, Stream s) override {
    if (bytes == 0 || dst == src) return;
    timed(on(s), [&] { cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, on(s)), "copy_async"); });
  }
  void fill_zero_async(void* dst, size_t bytes, Stream s) override {
    if (bytes == 0) return;
    timed(on(s), [&] { cuda_check(cudaMemsetAsync(dst, 0, bytes, on(s)), "fill_zero_async"); });
  }
  void copy_rows(void* dst, size_t dpitch, Tier dt, const void* src, size_t spitch, Tier st, size_t width,
                 size_t rows) override {
    if (rows == 0 || width == 0) return;
    timed(stream_, [&] {
      cuda_check(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDefault, stream_), "copy_rows");
    });
    if (dt != Tier::Device || st != Tier::Device) drain(stream_, "copy_rows");
  }
  void* native_stream(Stream s) override { return on(s); }
  std::unique_ptr<Event> new_event() override { return std::make_unique<CudaEvent>(); }
  void record(Event& e, Stream s) override { cuda_check(cudaEventRecord(ev(e), on(s)), "record"); }
  void wait(Stream s, const Event& e) override {
#ifdef OOMB_MUTANT_SKIP_WAIT  // a negative control (simt's, cmake/simt.cmake): streams no longer wait for each other
    (void)s, (void)e;
    return;
#endif
    cuda_check(cudaStreamWaitEvent(on(s), ev(e), 0), "wait");
  }
  void synchronize(const Event& e) override {
    ++waits_.event_waits;
    cuda_check(cudaEventSynchronize(ev(e)), "synchronize");
  }
  void synchronize() override {
    ++waits_.drains;
    cuda_check(cudaStreamSynchronize(copy_stream_), "synchronize");
    cuda_check(cudaStreamSynchronize(copy_out_stream_), "synchronize");
    cuda_check(cudaStreamSynchronize(stream_), "synchronize");
  }
  HostWaits host_waits() const override { return waits_; }
  StreamTimes take_stream_times() override {
    if (!timeline_) return {};
    ++waits_.drains;  // (it waits for every stream)
    return timeline_->take();
  }


  void do_add(Tensor& y, const Tensor& x) override {
    cuda::k::add(y.f(), x.data, x.dtype == DType::BF16, y.numel(), stream_);
    launched("add");
  }
  void do_dropout(const Tensor& x, const DropoutMask& m, Tensor& y, bool accumulate) override {
    cuda::k::dropout(x.data, x.dtype == DType::BF16, m, y.data, y.dtype == DType::BF16, accumulate, x.dim(0), x.dim(1),
                     stream_);
    launched("dropout");
  }
  void do_cast(const Tensor& src, Tensor& dst) override {
    cuda::k::cast(src.data, src.dtype == DType::BF16, dst.data, dst.dtype == DType::BF16, src.numel(), stream_);
    launched("cast");
  }
  void do_cast_pieces(const Tensor& x, std::span<const RowPiece> pieces, DType dtype, bool to_pieces) override {
    cuda::k::CastPieces p{};
    int n = 0;
    int64_t row = 0;
    auto flush = [&] {
      if (cuda::k::cast_pieces(x.data, x.dtype == DType::BF16, p, n, dtype == DType::BF16, x.row_elems(), to_pieces,
                               stream_))
        launched(to_pieces ? "cast_to_pieces" : "cast_from_pieces");
      n = 0;
    };
    for (const RowPiece& piece : pieces) {
      p.data[n] = piece.data, p.row0[n] = row, p.rows[n] = piece.rows;
      row += piece.rows;
      if (++n == cuda::k::kCastPieces) flush();
    }
    if (n > 0) flush();
  }
  void do_round_bf16(Tensor& x) override {
    cuda::k::round_bf16(x.f(), x.numel(), stream_);
    launched("round_bf16");
  }
  void do_zero(Tensor& y) override { fill_zero(y.data, y.bytes()); }
  void do_scale(const Tensor& x, float s, Tensor& y) override {
    cuda::k::scale(x.data, x.dtype == DType::BF16, s, y.data, y.dtype == DType::BF16, y.numel(), stream_);
    launched("scale");
  }
  double do_sum_squares(const Tensor& x) override {
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

  void do_adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamW& a) override {
    const double bc1 = 1.0 - std::pow(double(a.beta1), double(a.step));
    const double bc2 = 1.0 - std::pow(double(a.beta2), double(a.step));
    cuda::k::adamw(p.f(), g.f(), m.f(), v.f(), p.numel(), a.lr, a.beta1, a.beta2, a.eps, a.weight_decay,
                   float(a.lr / bc1), float(1.0 / std::sqrt(bc2)), stream_);
    launched("adamw_step");
  }
  void do_sgd_step(Tensor& p, const Tensor& g, float lr) override {
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

  // The host waits for everything issued to s (counted: host_waits).
  void drain(cudaStream_t s, const char* op) {
    ++waits_.drains;
    cuda_check(cudaStreamSynchronize(s), op);
  }

  // A kernel's fault surfaces at the next sync, named after whichever op syncs; OOMB_CUDA_SYNC=1
  // waits after every op so that the op which faulted names it (debugging, slower).
  // OOMB_CUDA_PROFILE: 1, or a PATH.json the rows go to as well (op_profile.h; under mpirun rank r > 0
  // writes PATH.rank<r>.json); unset, none
  static std::unique_ptr<cuda::OpProfile> make_profile() {
    const char* v = std::getenv("OOMB_CUDA_PROFILE");
    if (!v) return nullptr;
    std::string s = v;
    if (!s.ends_with(".json")) return std::make_unique<cuda::OpProfile>();
    const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
    if (rank && std::string(rank) != "0") s.insert(s.size() - 5, std::string(".rank") + rank);
    return std::make_unique<cuda::OpProfile>(s);
  }
  // an attention call's FLOPs for the profile (backend/attention_flops.h), counted only when profiling
  double attention_counted(const AttnArgs& a, const cuda::k::AttnParams& p, std::span<const KVBlock> blocks,
                           bool backward) const {
    return profile_ ? attention_flops(a, p.T, p.H, p.D, blocks, backward) : 0.0;
  }
  // OOMB_CUDA_TIMELINE set (and not 0): the streams' busy times (stream_timeline.h)
  static bool timeline_on() {
    const char* v = std::getenv("OOMB_CUDA_TIMELINE");
    return v && *v && std::string(v) != "0";
  }
  // an op on the compute stream: its start at its first submission (cuda::about_to_submit), its
  // pieces' ends at launched(); an op inside another is part of it
  void begin_op() override {
    if (timeline_ && op_depth_++ == 0) timeline_->open(stream_);
  }
  void end_op() noexcept override {
    if (timeline_ && --op_depth_ == 0) timeline_->close();
  }
  // a copy or set (issue: its call on stream s): inside an op, part of it; outside, a span of its
  // own on s (closed however it ends: close() ends the piece)
  template <class Issue>
  void timed(cudaStream_t s, Issue&& issue) {
    struct Span {
      cuda::StreamTimeline* t;
      ~Span() {
        if (t) t->close();
      }
    } const span{op_depth_ == 0 ? timeline_.get() : nullptr};
    if (span.t) span.t->open(s);
    cuda::about_to_submit(s);
    issue();
  }
  // flops: the op's arithmetic for the profile's rates (OpProfile), 0 where not counted
  void launched(const char* op, double flops = 0) {
    cuda_check(cudaGetLastError(), op);
    if (timeline_) timeline_->end(stream_);
    if (profile_) {
      ++waits_.drains;  // the profile waits for every op
      return profile_->mark(op, stream_, flops);
    }
    if (sync_each_) drain(stream_, op);
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
    const int64_t D = x.dim(2), R = r.dims(D);
    const size_t half = size_t(R / 2);
    // the table lives in host memory; a device copy is kept per slot while its values stay the same
    std::vector<float>& host = rope_host_[size_t(r.slot)];
    cuda::Scratch& dev = rope_dev_[size_t(r.slot)];
    if (host.size() != half || std::memcmp(host.data(), r.inv_freq, half * 4) != 0) {
      host.clear();  // marked stale until the copy has succeeded
      copy(dev.get(half * 4), Tier::Device, r.inv_freq, Tier::Host, half * 4);
      host.assign(r.inv_freq, r.inv_freq + half);
    }
    cuda::k::rope(x.f(), pos.as<int32_t>(), static_cast<const float*>(dev.buf.data()), r.attention_scaling,
                  inverse, x.dim(0), x.dim(1), D, R, r.interleaved, stream_);
    launched(op);
  }

  // Attention on tensor cores under --precision bf16 where the kernels take the shape, unless
  // OOMB_CUDA_ATTENTION=reference asks for the fp32 reference kernels (to compare, or to debug).
  bool tensor_cores(const AttnArgs& a, const cuda::k::AttnParams& p) const {
    return a.bf16 && attention_mode_ != CudaAttention::Reference && cuda::k::attention_mma_unsupported(p) == nullptr;
  }
  // Whether a call goes to cuDNN (OOMB_CUDA_ATTENTION auto or cudnn, and the call dense: cudnn_attention.h)
  bool use_cudnn(const char* op, const AttnArgs& a, std::span<const KVBlock> blocks, const Tensor& q) const {
    if (attention_mode_ != CudaAttention::Auto && attention_mode_ != CudaAttention::Cudnn) return false;
    const std::string why = cuda::CudnnAttention::unsupported(a, blocks, q.dim(0), q.dim(2));
    OOMB_CHECK(why.empty() || attention_mode_ != CudaAttention::Cudnn,
               "{}: OOMB_CUDA_ATTENTION=cudnn, but cuDNN cannot take this call: {}", op, why);
    return why.empty();
  }
  // after a call that cuDNN did not take: an error if OOMB_CUDA_ATTENTION=cudnn asked for it
  void cudnn_refused(const char* op) const {
    OOMB_CHECK(attention_mode_ != CudaAttention::Cudnn,
               "{}: OOMB_CUDA_ATTENTION=cudnn, but cuDNN refused the call (its reason is printed above)", op);
  }

  // The kernels' parameters, within their limits; uploads the blocks' table (the blocks were checked once, op_checks.cpp).
  // by_index: the table in ascending idx0 (cuDNN's route reads a run of keys as a range of it)
  cuda::k::AttnParams attention_params(const char* op, const Tensor& q, std::span<const KVBlock> blocks,
                                       const AttnArgs& a, bool backward, bool by_index = false) {
    cuda::k::AttnParams p{};
    p.T = q.dim(0), p.H = q.dim(1), p.D = q.dim(2), p.scale = a.scale, p.q_idx0 = a.q_idx0, p.q_doc = a.q_doc;
    p.window = a.window;
    OOMB_CHECK(p.D <= cuda::k::kMaxHeadDim, "{}: head dim {} is above the kernels' {}", op, p.D,
               cuda::k::kMaxHeadDim);
    table_.clear();
    for (size_t b = 0; b < blocks.size(); ++b) {
      const KVBlock& kb = blocks[b];
      if (b == 0) p.G = kb.k.dim(1);
      table_.push_back({kb.k.data, kb.v.data, kb.dk.data, kb.dv.data, kb.doc, kb.idx0, kb.k.dim(0),
                        int32_t(backward && kb.dk.dtype == DType::BF16), int32_t(kb.k.dtype == DType::BF16),
                        kb.heads});
      p.max_len = std::max(p.max_len, kb.k.dim(0));
    }
    if (by_index)
      std::stable_sort(table_.begin(), table_.end(),
                       [](const cuda::k::AttnBlock& x, const cuda::k::AttnBlock& y) { return x.idx0 < y.idx0; });
    // the dK/dV grid has a z dimension of 32-key tiles (at most 65535) and y of kv heads
    OOMB_CHECK((p.max_len + 31) / 32 <= 65535 && p.G <= 65535 && p.H <= 65535,
               "{}: blocks of {} keys or {} heads exceed the kernels' grid limits", op, p.max_len, p.H);
    p.n_blocks = int64_t(table_.size());
    p.first = a.first, p.last = a.last;
    if (!a.first || !a.last) {
      if (!backward) p.run_sum = a.run_sum.f();
    }
    if (backward && !a.q16.empty()) p.q16 = a.q16.data, p.do16 = a.dout16.data;
    // the table goes up from pinned staging, double-buffered: a staging buffer is rewritten only
    // once the copy that last read it is done (two calls ago), so the host waits here only while
    // the GPU is two attention calls or more behind it (a bounded run-ahead, not a drain)
    const size_t bytes = table_.size() * sizeof(cuda::k::AttnBlock);
    OOMB_CHECK(bytes <= kTableStage, "{}: {} blocks exceed the staged table's {} entries", op, table_.size(),
               kTableStage / sizeof(cuda::k::AttnBlock));
    TableStage& st = table_stage_[table_next_];
    table_next_ ^= 1;
    ++waits_.event_waits;
    cuda_check(cudaEventSynchronize(st.done), op);
    std::memcpy(st.host.data(), table_.data(), bytes);
    cuda::about_to_submit(stream_);
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
  cudaStream_t on(Stream s) const {
    return s == Stream::Copy ? copy_stream_ : s == Stream::CopyOut ? copy_out_stream_ : stream_;
  }

  // pinned staging of the attention's block table and its device copy, two of each
  static constexpr size_t kTableStage = size_t(1) << 20;  // 14K blocks (cuda_pinned_workspace_bytes: two)
  struct TableStage {
    Buffer host, dev;
    cudaEvent_t done = nullptr;
  };
  TableStage table_stage_[2];
  int table_next_ = 0;

  cudaStream_t stream_ = nullptr, copy_stream_ = nullptr, copy_out_stream_ = nullptr;
  HostWaits waits_{0, 0};  // what synchronize(), a host copy and the table staging waited for
  const bool sync_each_ = std::getenv("OOMB_CUDA_SYNC") != nullptr;
  const CudaAttention attention_mode_ = cuda_attention_mode();
  const std::unique_ptr<cuda::OpProfile> profile_ = make_profile();
  std::unique_ptr<cuda::StreamTimeline> timeline_;  // OOMB_CUDA_TIMELINE (null: off)
  int op_depth_ = 0;  // ops open (with a timeline)
  Buffer gemm_ws_;
  Buffer group_sums_;  // the column sums' groups (rmsnorm_bwd's dw, the bias gradient), on stream_
  std::unique_ptr<cuda::Gemm> gemm_;
  cuda::Scratch logits_, partials_, dsum_;
  std::array<cuda::Scratch, 2> rope_dev_;  // RopeTable::slot's device copies
  cuda::CudnnAttention cudnn_attention_;  // dense attention through cuDNN (OOMB_CUDA_ATTENTION)
  std::vector<cuda::k::AttnBlock> table_;
  std::array<std::vector<float>, 2> rope_host_;
  std::vector<int32_t> ids_host_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(std::string* why) {
  if (!cuda::device_available(why)) return nullptr;
  cuda::install_device_allocator();
  return std::make_unique<CudaBackend>();
}

}  // namespace oomb
