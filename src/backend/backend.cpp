#include "backend/backend.h"

#include "core/error.h"

#if defined(OOMB_HAVE_CUDA) || defined(OOMB_SIMT)  // (simt: simt_oomb, the CUDA backend on the CPU)
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cudnn/cudnn_sdpa.h"
#endif

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace oomb {

size_t cuda_pinned_workspace_bytes() { return 2 * (size_t(1) << 20); }

int copy_streams_from_env() {
  const char* v = std::getenv("OOMB_COPY_STREAMS");
  if (!v || !*v) return 2;
  const std::string s = v;
  OOMB_CHECK(s == "1" || s == "2", "OOMB_COPY_STREAMS: 1 or 2, got '{}'", s);
  return s == "1" ? 1 : 2;
}

size_t cuda_workspace_bytes(const WorkspaceShape& s) {
  constexpr size_t kGemmWorkspace = size_t(32) << 20, kTables = 2 * (size_t(1) << 20);
  constexpr int64_t kSumChunk = int64_t(1) << 16;  // cuda::k::kSumChunk
  constexpr size_t kRowGroups = size_t(512) * 32 * 8;  // cuda::k::kRowGroupBytes: the column sums' groups
  const size_t tile = size_t(std::clamp<int64_t>(s.scored(), 1, 256)), Vt = size_t(lm_head_vocab_tile(s.vocab));
  // the logits tile (fp32, tile x Vt) and with bf16 matmuls its gradient as bf16, from a 256-byte
  // boundary (cuda_backend.cpp's loss_tile)
  size_t loss = tile * Vt * 4;
  if (s.bf16) loss = (loss + 255) / 256 * 256 + tile * Vt * 2;
  // attention backward: (C, H) of a call (--sp-head-chunks K: H / K heads)
  const size_t dsum = size_t(std::max<int64_t>(s.chunk * (s.heads / s.head_chunks), 1)) * 4;
  const size_t partials = size_t((s.params + kSumChunk - 1) / kSumChunk) * 8;
  const int64_t R = s.rope_dim > 0 ? s.rope_dim : s.head_dim;  // (a table holds R / 2 values: the rope op's)
  const size_t rope = size_t(R / 2) * 4 * size_t(std::max<int64_t>(s.rope_tables, 1));
  return loss + kGemmWorkspace + kTables + kRowGroups + dsum + partials + rope;
}

namespace {
// The environment variable `name` as a whole number >= 1, or `fallback` where it is not set
int64_t env_count(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (!v) return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  OOMB_CHECK(end != v && *end == '\0' && x >= 1, "{}={}: expected a whole number >= 1", name, v);
  return int64_t(x);
}
}  // namespace

int64_t cudnn_query_block(int64_t T, int64_t H) {
  if (const int64_t x = env_count("OOMB_CUDNN_QUERY_BLOCK", 0)) return std::min(T, x);
  // bf16 dS over every query, key and head, as cuDNN pads it: the queries to 128, the keys to 64
  const auto ds = [&](int64_t tq) { return double((tq + 127) / 128 * 128) * double((T + 63) / 64 * 64) * double(H) * 2; };
  int64_t blocks = std::max<int64_t>(1, int64_t(std::ceil(ds(T) / double(kCudnnDsBytes))));
  for (;; ++blocks) {  // equal blocks of a multiple of 128 queries whose dS fits (or of 128)
    const int64_t tq = std::min(T, ((T + blocks - 1) / blocks + 127) / 128 * 128);
    if (tq <= 128 || ds(tq) <= double(kCudnnDsBytes)) return tq;
  }
}

size_t cudnn_attention_workspace(int64_t T, int64_t H, int64_t G, int64_t D) {
  // cuDNN 9.19's deterministic backward with o, do, dq in bf16 (engine 6 on sm90), as it asks
  // deviceless (tests/test_cudnn_deviceless.cpp) and on the H200 for a call of Tq queries over R
  // keys: dS in bf16, the queries rounded up to 128 and the keys to 64, (pad128(Tq), H, pad64(R));
  // with GQA dk and dv per query head in bf16 before their reduction, 2 x (R, H, D); 256 bytes; the
  // sum rounded up to 256. The calls take the chunk's queries in blocks (cudnn_query_block) over
  // runs of at most T keys. 4 KiB over, for engines that tile otherwise. (Until 2026-11-28 the
  // queries were rounded to 64, checked only at multiples of 128: on the H200 cuDNN refused the
  // CUDA tests' chunks of 5 to 130 queries; deviceless, with its properties, 33 queries ask
  // 74,240 bytes, where 45,312 were planned.)
  const size_t tq = size_t((cudnn_query_block(T, H) + 127) / 128 * 128), r = size_t((T + 63) / 64 * 64);
  const size_t h = size_t(H), d = size_t(D);
  const size_t gqa = G < H ? 2 * size_t(T) * h * d * 2 : 0;
  return tq * r * h * 2 + gqa + 4096;
}

int64_t cudnn_min_queries() { return env_count("OOMB_CUDNN_MIN_QUERIES", 128); }

size_t cudnn_attention_bytes(const WorkspaceShape& s) {
  // the calls that may take the route (cuda/cudnn_attention.cpp's unsupported)
  if (!s.bf16 || !s.dense_attention || s.chunk < cudnn_min_queries() || s.head_dim % 8 != 0 || s.head_dim > 128)
    return 0;
  const int64_t H = s.heads / s.head_chunks, G = s.kv_heads / s.head_chunks;
  const size_t q = size_t(s.chunk * H * s.head_dim), kv = size_t(s.chunk * G * s.head_dim);
  // q in bf16; k, v, dk, dv of a run in bf16; a run's o, or o's bf16 copy (bf16); a run's o in fp32,
  // or do's bf16 copy and a run's dq (one buffer); its lse; its dk, dv summed over query blocks
  // (fp32); cuDNN's workspace
  return q * 2 + 4 * kv * 2 + q * 2 + q * 4 + size_t(s.chunk * H) * 4 + 2 * kv * 4 +
         cudnn_attention_workspace(s.chunk, H, G, s.head_dim);
}

CudaAttention cuda_attention_mode() {
  const char* v = std::getenv("OOMB_CUDA_ATTENTION");
  if (v == nullptr || std::strcmp(v, "auto") == 0) return CudaAttention::Auto;
  if (std::strcmp(v, "cudnn") == 0) return CudaAttention::Cudnn;
  if (std::strcmp(v, "mma") == 0) return CudaAttention::Mma;
  OOMB_CHECK(std::strcmp(v, "reference") == 0, "OOMB_CUDA_ATTENTION={}: expected auto, cudnn, mma or reference", v);
  return CudaAttention::Reference;
}

bool cudnn_attention_planned() {
  const CudaAttention mode = cuda_attention_mode();
  if (mode != CudaAttention::Auto && mode != CudaAttention::Cudnn) return false;
#if defined(OOMB_HAVE_CUDA) || defined(OOMB_SIMT)
  return cuda::cudnn::available(nullptr);
#else
  return false;
#endif
}

std::string cuda_attention_summary(bool bf16) {
  const CudaAttention mode = cuda_attention_mode();
  if (!bf16) return "attention on the fp32 kernels (--precision fp32)";
  if (mode == CudaAttention::Reference) return "attention on the fp32 reference kernels (OOMB_CUDA_ATTENTION=reference)";
  if (mode == CudaAttention::Mma) return "attention on oomb's tensor-core kernels (OOMB_CUDA_ATTENTION=mma)";
  const bool pinned = mode == CudaAttention::Cudnn;
  std::string why = "this build has no CUDA";
#if defined(OOMB_HAVE_CUDA) || defined(OOMB_SIMT)
  if (cuda::cudnn::available(&why))
    return fmt::format("attention through cuDNN {}'s fused SDPA where a call's keys are masked only by causality "
                       "and it has at least {} queries (OOMB_CUDNN_MIN_QUERIES), oomb's tensor-core kernels for the "
                       "rest (documents, windows, sparse pages){}",
                       cuda::cudnn::version(), cudnn_min_queries(),
                       pinned ? "; OOMB_CUDA_ATTENTION=cudnn: a call cuDNN cannot take is an error" : "");
#endif
  return "attention on oomb's tensor-core kernels (cuDNN: " + why + ")" +
         (pinned ? "; OOMB_CUDA_ATTENTION=cudnn: its calls will be refused" : "");
}

int64_t lm_head_vocab_tile(int64_t vocab) {
  constexpr int64_t kMostRows = 8192, kAlign = 64;
  if (vocab <= kMostRows) return vocab;
  const int64_t tiles = (vocab + kMostRows - 1) / kMostRows;
  return ((vocab + tiles - 1) / tiles + kAlign - 1) / kAlign * kAlign;
}

void Backend::lm_head_xent_acc(const Tensor& h, const Tensor& w, const Tensor& targets, float scale, Tensor* dh,
                               Tensor* dw, Tensor& sums, Tensor& stats) {
  OOMB_CHECK(w.ndim == 2 && (!dw || (dw->ndim == 2 && dw->dim(0) == w.dim(0))),
             "lm_head_xent: w {} and dw must be (V, d)", w.shape_str());
  const int64_t V = w.dim(0), Vt = lm_head_vocab_tile(V);
  if (host_addressable(targets.tier) && targets.dtype == DType::I32)  // (a device's caller checks its ids)
    for (int64_t t = 0; t < targets.numel(); ++t)
      OOMB_CHECK(targets.as<int32_t>()[t] < V,
                 "lm_head_xent: target id {} at position {} is outside the vocabulary (size {})",
                 targets.as<int32_t>()[t], t, V);
  for (int64_t v0 = 0; v0 < V; v0 += Vt) lm_head_xent_stats(h, w.rows(v0, std::min(Vt, V - v0)), v0, targets, stats);
  lm_head_xent_loss(stats, targets, sums);
  if (!dh && !dw) return;
  const int64_t last = (V - 1) / Vt * Vt;
  for (int64_t v0 = last; v0 >= 0; v0 -= Vt) {  // in reverse (the model's order: model/param_store.h)
    const int64_t n = std::min(Vt, V - v0);
    Tensor dwt = dw ? dw->rows(v0, n) : Tensor();
    lm_head_xent_grad(h, w.rows(v0, n), v0, targets, stats, scale, dh, v0 != last, dw ? &dwt : nullptr);
  }
}

double Backend::lm_head_xent(const Tensor& h, const Tensor& w, const Tensor& targets, float scale, Tensor* dh,
                             Tensor* dw, int64_t* correct) {
  OOMB_CHECK(h.ndim == 2, "lm_head_xent: h must be (T, d), got {}", h.shape_str());
  Buffer buf(tier(), Tag::Workspace, 16 + size_t(h.dim(0)) * 32);
  Tensor sums(buf.data(), DType::F64, {2}, tier());
  Tensor stats(buf.as<double>() + 2, DType::F64, {h.dim(0), 4}, tier());
  fill_zero(buf.data(), 16);
  lm_head_xent_acc(h, w, targets, scale, dh, dw, sums, stats);
  double host[2];
  copy(host, Tier::Host, buf.data(), tier(), 16);
  if (correct) *correct = int64_t(host[1]);
  return host[0];
}

void Backend::do_cast_pieces(const Tensor& x, std::span<const RowPiece> pieces, DType dtype, bool to_pieces) {
  int64_t r = 0;
  for (const RowPiece& p : pieces) {
    Tensor xr = x.rows(r, p.rows);
    r += p.rows;
    if (p.rows == 0) continue;
    Tensor pt = xr;  // the piece: x's rows' shape, in `dtype`, at p.data
    pt.data = p.data, pt.dtype = dtype;
    if (to_pieces) do_cast(xr, pt);
    else if (p.data) do_cast(pt, xr);
    else fill_zero(xr.data, xr.bytes());
  }
}

std::unique_ptr<Backend> make_backend(const std::string& device, int64_t device_memory, int local_rank) {
  OOMB_CHECK(device_memory == 0 || device == "sim", "--device-memory: only for --device sim");
  if (device == "cpu") return make_cpu_backend();
  if (device == "sim") return make_sim_backend(device_memory);
  OOMB_CHECK(device == "cuda", "--device: '{}' is not one of cpu, sim, cuda", device);
#if defined(OOMB_HAVE_CUDA) || defined(OOMB_SIMT)
  if (const int gpus = cuda::device_count(); gpus > 1) cuda::use_device(local_rank % gpus);
#endif
  std::string why;
  auto be = make_cuda_backend(&why);
  OOMB_CHECK(be != nullptr, "--device cuda: {}", why);
  return be;
}

}  // namespace oomb
