// Paged attention: check against the CPU reference, then time forward and backward. See README.md.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cudnn/cudnn_sdpa.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "attention_wmma.h"
#include "core/dtype.h"

using namespace oomb;

namespace {

#define CK(x)                                                                               \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

struct Shape {
  int64_t H = 14, G = 2, D = 64, C = 4096, N = 32768, P = 128;
};

std::vector<float> randn(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

float* dev(const std::vector<float>& h) {
  float* p = nullptr;
  CK(cudaMalloc(&p, std::max<size_t>(h.size(), 1) * 4));
  CK(cudaMemcpy(p, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  return p;
}
std::vector<float> host(const float* d, size_t n) {
  std::vector<float> h(n);
  CK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
  return h;
}
double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += double(a[i] - b[i]) * (a[i] - b[i]), den += double(b[i]) * b[i];
  return std::sqrt(num / std::max(den, 1e-300));
}

// bf16 copies on the device, and back to float
uint16_t* dev_bf16(const std::vector<float>& h) {
  std::vector<uint16_t> b(h.size());
  for (size_t i = 0; i < h.size(); ++i) b[i] = f32_to_bf16(h[i]);
  uint16_t* p = nullptr;
  CK(cudaMalloc(&p, std::max<size_t>(b.size(), 1) * 2));
  CK(cudaMemcpy(p, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  return p;
}
std::vector<float> host_bf16(const uint16_t* d, size_t n) {
  std::vector<uint16_t> b(n);
  CK(cudaMemcpy(b.data(), d, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = bf16_to_f32(b[i]);
  return h;
}

// N keys in pages of P (the last C of them the chunk's own queries' keys); K/V on host and device,
// f32, and bf16 copies (what the model hands attention under --precision bf16).
struct Layout {
  Shape s;
  std::vector<std::vector<float>> k, v, dk, dv;
  std::vector<float*> kd, vd, dkd, dvd;
  std::vector<uint16_t*> kd16, vd16;
  std::vector<int64_t> idx0;
  explicit Layout(const Shape& sh) : s(sh) {
    for (int64_t at = 0; at < s.N; at += s.P) {
      const int64_t len = std::min(s.P, s.N - at);
      const size_t n = size_t(len * s.G * s.D);
      k.push_back(randn(n, unsigned(at + 1))), v.push_back(randn(n, unsigned(at + 2)));
      dk.emplace_back(n, 0.0f), dv.emplace_back(n, 0.0f);
      kd.push_back(dev(k.back())), vd.push_back(dev(v.back())), dkd.push_back(dev(dk.back())),
          dvd.push_back(dev(dv.back()));
      kd16.push_back(dev_bf16(k.back())), vd16.push_back(dev_bf16(v.back()));
      idx0.push_back(at);
    }
  }
  std::vector<KVBlock> cpu_blocks() {
    std::vector<KVBlock> b;
    for (size_t i = 0; i < k.size(); ++i) {
      const int64_t len = int64_t(k[i].size()) / (s.G * s.D);
      b.push_back({Tensor::f32(k[i].data(), {len, s.G, s.D}), Tensor::f32(v[i].data(), {len, s.G, s.D}),
                   Tensor::f32(dk[i].data(), {len, s.G, s.D}), Tensor::f32(dv[i].data(), {len, s.G, s.D}), idx0[i],
                   nullptr});
    }
    return b;
  }
  // reversed: the blocks in descending order (any order must give the same result); bf16_pages:
  // every block read as bf16, as the model hands them under --precision bf16 (the pages, and the
  // chunk's own keys as bf16 copies); else every block f32
  cuda::k::AttnParams params(cuda::k::AttnBlock** table, bool reversed = false, bool bf16_pages = false) {
    std::vector<cuda::k::AttnBlock> t;
    for (size_t i = 0; i < k.size(); ++i) {
      const int64_t len = int64_t(k[i].size()) / (s.G * s.D);
      const bool b16 = bf16_pages;
      t.push_back({b16 ? static_cast<const void*>(kd16[i]) : kd[i], b16 ? static_cast<const void*>(vd16[i]) : vd[i],
                   dkd[i], dvd[i], nullptr, idx0[i], len, 0, b16 ? 1 : 0, ~uint64_t(0)});  // every kv head reads it
    }
    if (reversed) std::reverse(t.begin(), t.end());
    CK(cudaMalloc(table, t.size() * sizeof t[0]));
    CK(cudaMemcpy(*table, t.data(), t.size() * sizeof t[0], cudaMemcpyHostToDevice));
    cuda::k::AttnParams p{};
    p.blocks = *table, p.n_blocks = int64_t(t.size()), p.max_len = s.P;
    p.T = s.C, p.H = s.H, p.G = s.G, p.D = s.D, p.scale = float(1.0 / std::sqrt(double(s.D))), p.q_idx0 = s.N - s.C;
    return p;
  }
};

template <typename F>
float median_ms(F f, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  f();  // warm-up (twice for the fast kernels)
  if (reps > 1) f();
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    CK(cudaEventRecord(a));
    f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Device buffers for outputs, filled with NaN (bytes 0xFF) so an element a kernel skips shows.
float* dev_nan(size_t n) {
  float* p = nullptr;
  CK(cudaMalloc(&p, std::max<size_t>(n, 1) * 4));
  CK(cudaMemset(p, 0xFF, std::max<size_t>(n, 1) * 4));
  return p;
}

std::vector<float> concat(const std::vector<std::vector<float>>& pages) {
  std::vector<float> all;
  for (const auto& p : pages) all.insert(all.end(), p.begin(), p.end());
  return all;
}

// cuDNN's fused SDPA (src/backend/cuda/cudnn) on the same queries over the N keys laid out
// contiguously, (N, G, D) bf16, causal bottom-right: against the CPU reference's O, LSE, dQ, dK, dV.
// Returns false when cuDNN runs and an error is over bf16's bound; a cuDNN that is missing or
// refuses the graph is reported, with its message, and is not a failure of the kernels checked here.
// fe, be >= 0: those engines (cuDNN's global indices), as --cudnn-survey tries them
bool check_cudnn(const Shape& s, const Layout& L, const std::vector<float>& q, const std::vector<float>& dout,
                 const std::vector<float>& o, const std::vector<float>& lse, const std::vector<float>& dq,
                 int64_t fe = -1, int64_t be = -1) {
  std::string why;
  if (!cuda::cudnn::available(&why)) {
    std::printf("check cudnn: skipped (%s)\n", why.c_str());
    return true;
  }
  // o, do, dq in bf16, as the backend asks for them
  const sdpa::Shape sh{s.H, s.G, s.C, s.N, s.D, float(1.0 / std::sqrt(double(s.D))), true, sdpa::DType::bf16};
  std::unique_ptr<cuda::cudnn::Sdpa> att;
  try {
    att = std::make_unique<cuda::cudnn::Sdpa>(sh, nullptr, fe, be);
  } catch (const std::exception& e) {
    std::printf("check cudnn %s: NOT BUILT: %s\n", cuda::cudnn::version().c_str(), e.what());
    return true;
  }
  const auto k = concat(L.k), v = concat(L.v);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  uint16_t *qd = dev_bf16(q), *kd = dev_bf16(k), *vd = dev_bf16(v), *dkd = dev_bf16(k), *dvd = dev_bf16(v);
  uint16_t *dod = dev_bf16(dout), *od = dev_bf16(std::vector<float>(o.size(), nan)),
           *dqd = dev_bf16(std::vector<float>(dq.size(), nan));
  float *stats = dev_nan(lse.size()), *ssum = dev_nan(lse.size());
  void* ws = nullptr;
  CK(cudaMalloc(&ws, std::max<size_t>(att->workspace_bytes(), 1)));
  auto free_all = [&] {
    for (void* p : {(void*)qd, (void*)kd, (void*)vd, (void*)dod, (void*)od, (void*)dqd, (void*)dkd, (void*)dvd,
                    (void*)stats, (void*)ssum, ws})
      CK(cudaFree(p));
  };
  try {  // (the first H200 run: a plan cuDNN built would not execute)
    att->forward(qd, kd, vd, od, stats, ws);
    att->backward(qd, kd, vd, od, dod, stats, dqd, dkd, dvd, ssum, ws);
  } catch (const std::exception& e) {
    std::printf("check cudnn %s (%s): FAILED to execute: %s\n", cuda::cudnn::version().c_str(), att->engines().c_str(),
                e.what());
    CK(cudaDeviceSynchronize());
    free_all();
    return false;
  }
  CK(cudaDeviceSynchronize());
  bool ok = true;
  auto bound = [&](double e) {
    if (!(e <= 3e-2)) ok = false;
    return e;
  };
  std::printf("check cudnn %s (%s): rel. error O %.2e  LSE %.2e  dQ %.2e  dK %.2e  dV %.2e\n",
              cuda::cudnn::version().c_str(), att->engines().c_str(), bound(rel(host_bf16(od, o.size()), o)),
              bound(rel(host(stats, lse.size()), lse)),
              bound(rel(host_bf16(dqd, dq.size()), dq)), bound(rel(host_bf16(dkd, k.size()), concat(L.dk))),
              bound(rel(host_bf16(dvd, v.size()), concat(L.dv))));
  // determinism: a second backward gives the same bits
  const auto dq1 = host_bf16(dqd, dq.size()), dk1 = host_bf16(dkd, k.size());
  att->backward(qd, kd, vd, od, dod, stats, dqd, dkd, dvd, ssum, ws);
  CK(cudaDeviceSynchronize());
  const bool same = host_bf16(dqd, dq.size()) == dq1 && host_bf16(dkd, k.size()) == dk1;
  std::printf("check cudnn: a second backward gives %s bits\n", same ? "the same" : "DIFFERENT");
  free_all();
  return ok && same;
}

bool cudnn_ok = true;  // check_cudnn's verdict
// --cudnn 0: oomb's kernels alone (racecheck's step: on the H200 it reported 13 hazards, every one in
// cuDNN's generated wgmma kernels, whose asynchronous copies and barriers it does not follow)
bool with_cudnn = true;

// The CUDA libraries this process has mapped (cuDNN and the NVRTC its engines compile with, cuBLAS,
// the runtime), from /proc/self/maps: which of a machine's copies ran
void print_cuda_libraries() {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> seen;
  for (std::string line; std::getline(maps, line);) {
    const size_t at = line.find('/');
    if (at == std::string::npos) continue;
    const std::string path = line.substr(at);
    for (const char* name : {"libcudnn", "libnvrtc", "libcublas", "libcudart"})
      if (path.find(name) != std::string::npos && seen.insert(path).second) std::printf("library %s\n", path.c_str());
  }
}

// --cudnn-survey: every engine cuDNN offers for the check's forward and backward graphs (o, do,
// dq in bf16, as the backend asks, and in fp32, as it asked before the first H200 run), what
// building each said, then each bf16 pair that built, checked as check_cudnn checks the default
// choice (which engines compute attention on this GPU)
bool cudnn_survey = false;
void survey_cudnn(const Shape& s, const Layout& L, const std::vector<float>& q, const std::vector<float>& dout,
                  const std::vector<float>& o, const std::vector<float>& lse, const std::vector<float>& dq) {
  std::vector<int64_t> built[2];  // (bf16)
  const char* names[2] = {"forward", "backward"};
  for (auto out : {sdpa::DType::bf16, sdpa::DType::f32}) {
    const sdpa::Shape sh{s.H, s.G, s.C, s.N, s.D, float(1.0 / std::sqrt(double(s.D))), true, out};
    for (int w = 0; w < 2; ++w) {
      try {
        for (const auto& t : cuda::cudnn::survey(w == 0 ? sdpa::forward(sh) : sdpa::backward(sh), names[w])) {
          std::printf("survey cudnn %s, o/do/dq %s, engine %ld (%s): %s\n", names[w], sdpa::name(out), long(t.index),
                      t.deterministic ? "deterministic" : "nondeterministic",
                      t.status.empty() ? ("built, workspace " + std::to_string(t.workspace) + " B").c_str()
                                       : t.status.c_str());
          if (t.status.empty() && out == sdpa::DType::bf16) built[w].push_back(t.index);
        }
      } catch (const std::exception& e) {
        std::printf("survey cudnn %s, o/do/dq %s: %s\n", names[w], sdpa::name(out), e.what());
      }
    }
  }
  for (int64_t f : built[0])
    for (int64_t b : built[1]) check_cudnn(s, L, q, dout, o, lse, dq, f, b);
}

// Returns false when an error exceeds its bound: fp32 kernels 1e-4, bf16 (tensor-core) ones 3e-2.
bool check(Shape s) {
  // C not a multiple of the 64-query tiles; the last page partial (700 = 5 x 128 + 60)
  s.C = std::min<int64_t>(s.C, 190), s.N = std::min<int64_t>(s.N, 700);
  bool ok = true;
  auto bound = [&](double e, double limit) {
    if (!(e <= limit)) ok = false;  // NaN fails too
    return e;
  };
  Layout L(s);
  auto q = randn(size_t(s.C * s.H * s.D), 7), dout = randn(q.size(), 8);
  std::vector<float> o(q.size()), lse(size_t(s.C * s.H)), dq(q.size());
  auto blocks = L.cpu_blocks();
  const AttnArgs a{float(1.0 / std::sqrt(double(s.D))), s.N - s.C, nullptr};
  Tensor ot = Tensor::f32(o.data(), {s.C, s.H, s.D}), lt = Tensor::f32(lse.data(), {s.C, s.H});
  cpu::attention_fwd(Tensor::f32(q.data(), {s.C, s.H, s.D}), blocks, a, ot, lt);
  Tensor dqt = Tensor::f32(dq.data(), {s.C, s.H, s.D});
  cpu::attention_bwd(Tensor::f32(q.data(), {s.C, s.H, s.D}), Tensor::f32(o.data(), {s.C, s.H, s.D}),
                     Tensor::f32(lse.data(), {s.C, s.H}), Tensor::f32(dout.data(), {s.C, s.H, s.D}), blocks, a, dqt);
  cuda::k::AttnBlock* table = nullptr;
  const cuda::k::AttnParams p = L.params(&table);
  float *qd = dev(q), *od = dev_nan(o.size()), *lsed = dev_nan(lse.size()), *dod = dev(dout),
        *dqd = dev_nan(dq.size()), *dsum = dev_nan(lse.size());
  cuda::k::attention_fwd(p, qd, od, lsed, nullptr);
  cuda::k::attention_bwd(p, qd, od, lsed, dod, dqd, dsum, nullptr);
  CK(cudaDeviceSynchronize());
  // the worst block's error of device gradient pages against the CPU's (L's host pages)
  auto pages_err = [&](const std::vector<float*>& got, const std::vector<std::vector<float>>& want) {
    double e = 0;
    for (size_t i = 0; i < want.size(); ++i) e = std::max(e, rel(host(got[i], want[i].size()), want[i]));
    return e;
  };
  const double edk = pages_err(L.dkd, L.dk), edv = pages_err(L.dvd, L.dv);
  // cuDNN's failure is reported and fails the lab at its end, after oomb's kernels are timed
  if (with_cudnn) cudnn_ok = check_cudnn(s, L, q, dout, o, lse, dq);
  print_cuda_libraries();  // (before the survey, which may run past its step's time)
  if (cudnn_survey) survey_cudnn(s, L, q, dout, o, lse, dq);
  std::printf("check (C=%ld N=%ld H=%ld G=%ld D=%ld): rel. error O %.2e  LSE %.2e  dQ %.2e  dK %.2e  dV %.2e\n",
              long(s.C), long(s.N), long(s.H), long(s.G), long(s.D), bound(rel(host(od, o.size()), o), 1e-4),
              bound(rel(host(lsed, lse.size()), lse), 1e-4), bound(rel(host(dqd, dq.size()), dq), 1e-4),
              bound(edk, 1e-4), bound(edv, 1e-4));
  // the tensor-core variants round Q, K, V and P to bf16: their error is bf16's (~1e-2 .. 1e-3)
  if (const char* why = cuda::k::attention_mma_unsupported(p)) {
    std::printf("check mma (src/): skipped (%s)\n", why);
  } else {
    // f32 blocks handed over in reverse (the plain-load path), then bf16 ones (cp.async's) in order
    // with bf16 copies of q and dO beside them, as the model hands them under --precision bf16
    uint16_t *q16 = dev_bf16(q), *do16 = dev_bf16(dout);
    for (const bool bf16_pages : {false, true}) {
      Layout L3(s);  // the same K/V, gradient pages zeroed
      cuda::k::AttnBlock* table3 = nullptr;
      cuda::k::AttnParams p3 = L3.params(&table3, !bf16_pages, bf16_pages);
      if (bf16_pages) p3.q16 = q16, p3.do16 = do16;
      float *o3 = dev_nan(o.size()), *lse3 = dev_nan(lse.size()), *dq3 = dev_nan(dq.size()),
            *dsum3 = dev_nan(lse.size());
      cuda::k::attention_fwd_mma(p3, qd, o3, lse3, nullptr);
      cuda::k::attention_bwd_mma(p3, qd, o3, lse3, dod, dq3, dsum3, nullptr);
      CK(cudaDeviceSynchronize());
      std::printf("check mma (src/, bf16 products, %s): rel. error O %.2e  LSE %.2e  dQ %.2e  dK %.2e  dV %.2e\n",
                  bf16_pages ? "bf16 pages, bf16 q and dO" : "f32 pages", bound(rel(host(o3, o.size()), o), 3e-2),
                  bound(rel(host(lse3, lse.size()), lse), 3e-2), bound(rel(host(dq3, dq.size()), dq), 3e-2),
                  bound(pages_err(L3.dkd, L.dk), 3e-2), bound(pages_err(L3.dvd, L.dv), 3e-2));
    }
  }
  if (const char* why = cuda::lab::attention_fwd_wmma_unsupported(p)) {
    std::printf("check wmma forward: skipped (%s)\n", why);
    return ok;
  }
  Layout L2(s);  // the same K/V, gradient pages zeroed, blocks handed over in reverse
  cuda::k::AttnBlock* table2 = nullptr;
  const cuda::k::AttnParams p2 = L2.params(&table2, true);
  float *o2 = dev_nan(o.size()), *lse2 = dev_nan(lse.size()), *dq2 = dev_nan(dq.size()), *dsum2 = dev_nan(lse.size());
  CK(cuda::lab::attention_fwd_wmma(p2, qd, o2, lse2, nullptr));
  CK(cudaDeviceSynchronize());
  std::printf("check wmma forward (bf16 products): rel. error O %.2e  LSE %.2e\n",
              bound(rel(host(o2, o.size()), o), 3e-2), bound(rel(host(lse2, lse.size()), lse), 3e-2));
  if (const char* why = cuda::lab::attention_bwd_wmma_unsupported(p2)) {
    std::printf("check wmma backward: skipped (%s)\n", why);
    return ok;
  }
  CK(cuda::lab::attention_bwd_wmma(p2, qd, o2, lse2, dod, dq2, dsum2, nullptr));
  CK(cudaDeviceSynchronize());
  const double wdk = pages_err(L2.dkd, L.dk), wdv = pages_err(L2.dvd, L.dv);
  std::printf("check wmma backward (bf16 products): rel. error dQ %.2e  dK %.2e  dV %.2e\n",
              bound(rel(host(dq2, dq.size()), dq), 3e-2), bound(wdk, 3e-2), bound(wdv, 3e-2));
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each row shows as it is measured, also through a pipe
  std::string why;
  if (!cuda::device_available(&why)) {
    std::fprintf(stderr, "attention_lab: %s\n", why.c_str());
    return 1;
  }
  Shape s;
  bool check_only = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    if (f == "--deviceprop-json") {  // this GPU's properties as cuDNN serialises them (tests/fixtures/cudnn)
      try {
        const std::string json = cuda::cudnn::deviceprop_json();
        std::FILE* out = std::fopen(argv[i + 1], "w");
        if (!out) return std::fprintf(stderr, "cannot write %s\n", argv[i + 1]), 1;
        std::fputs(json.c_str(), out);
        std::fclose(out);
        std::printf("cuDNN %s: device properties written to %s\n", cuda::cudnn::version().c_str(), argv[i + 1]);
        print_cuda_libraries();
        return 0;
      } catch (const std::exception& e) {
        return std::fprintf(stderr, "attention_lab: %s\n", e.what()), 1;
      }
    }
    const int64_t v = std::atoll(argv[i + 1]);
    if (f == "--heads") s.H = v;
    else if (f == "--kv-heads") s.G = v;
    else if (f == "--dim") s.D = v;
    else if (f == "--chunk") s.C = v;
    else if (f == "--keys") s.N = v;
    else if (f == "--page") s.P = v;
    else if (f == "--check-only") check_only = v != 0;  // the small check alone (for racecheck)
    else if (f == "--cudnn-survey") cudnn_survey = v != 0;  // every engine cuDNN offers, checked (survey_cudnn)
    else if (f == "--cudnn") with_cudnn = v != 0;
    else return std::fprintf(stderr, "unknown flag %s\n", f.c_str()), 2;
  }
  if (!check(s)) {
    std::printf("check FAILED: an error is over its bound (fp32 1e-4, bf16 3e-2); no timing\n");
    return 1;
  }
  if (check_only) return cudnn_ok ? 0 : 1;
  Layout L(s);
  cuda::k::AttnBlock* table = nullptr;
  const cuda::k::AttnParams p = L.params(&table);
  auto q = randn(size_t(s.C * s.H * s.D), 7);
  float *qd = dev(q), *od = dev(q), *dod = dev(q), *dqd = dev(q), *lsed = nullptr, *dsum = nullptr;
  CK(cudaMalloc(&lsed, size_t(s.C * s.H) * 4));
  CK(cudaMalloc(&dsum, size_t(s.C * s.H) * 4));
  const double pairs = double(s.C) * double(s.N - s.C) + double(s.C) * double(s.C + 1) / 2;
  const double fwd_flops = 4.0 * pairs * double(s.H) * double(s.D), bwd_flops = 2.5 * fwd_flops;
  std::printf("device %s; C=%ld queries over N=%ld keys, pages of %ld, H=%ld G=%ld D=%ld\n",
              cuda::device_name().c_str(), long(s.C), long(s.N), long(s.P), long(s.H), long(s.G), long(s.D));
  std::printf("| kernel | ms (median) | TFLOP/s |\n|---|---|---|\n");
  auto row = [](const char* name, float ms, double flops) {
    std::printf("| %s | %.3f | %.2f |\n", name, ms, flops / ms / 1e9);
  };
  // the fp32 per-lane kernels take seconds at these shapes: one timed rep each (after the warm-up)
  row("attention forward", median_ms([&] { cuda::k::attention_fwd(p, qd, od, lsed, nullptr); }, 1), fwd_flops);
  row("attention backward", median_ms([&] { cuda::k::attention_bwd(p, qd, od, lsed, dod, dqd, dsum, nullptr); }, 1),
      bwd_flops);
  if (cuda::k::attention_mma_unsupported(p) == nullptr) {
    // every block f32, then bf16 with bf16 copies of q and dO, as the model hands them under
    // --precision bf16; the backward whole (its TFLOP/s counting 2.5 forwards, as FlashAttention
    // does) and its two kernels apart (each counting the products it runs: dq 1.5 forwards, dk/dv
    // 2; together they recompute S and dP); the dk/dv kernel once more on f32 q and dO rows (the
    // stage it converts from, without the copies)
    cuda::k::AttnBlock* table16 = nullptr;
    cuda::k::AttnParams p16 = L.params(&table16, false, true);
    const cuda::k::AttnParams p16_f32q = p16;
    uint16_t *q16 = dev_bf16(q), *do16 = dev_bf16(q);
    p16.q16 = q16, p16.do16 = do16;
    using Variant = std::pair<const cuda::k::AttnParams*, const char*>;
    for (const auto& [pp, pages] : {Variant{&p, "f32 pages"}, Variant{&p16, "bf16 pages, bf16 q and dO"}}) {
      const cuda::k::AttnParams& pk = *pp;
      row(fmt::format("attention forward, mma bf16 (src/), {}", pages).c_str(),
          median_ms([&] { cuda::k::attention_fwd_mma(pk, qd, od, lsed, nullptr); }, 10), fwd_flops);
      row(fmt::format("attention backward, mma bf16 (src/), {}", pages).c_str(),
          median_ms([&] { cuda::k::attention_bwd_mma(pk, qd, od, lsed, dod, dqd, dsum, nullptr); }, 10), bwd_flops);
      row(fmt::format("  its dsum + dq kernels, {}", pages).c_str(),
          median_ms([&] { cuda::k::attention_bwd_mma(pk, qd, od, lsed, dod, dqd, dsum, nullptr, cuda::k::kBwdDq); },
                    10),
          1.5 * fwd_flops);
      row(fmt::format("  its dk/dv kernel, {}", pages).c_str(),
          median_ms([&] { cuda::k::attention_bwd_mma(pk, qd, od, lsed, dod, dqd, dsum, nullptr, cuda::k::kBwdDkdv); },
                    10),
          2.0 * fwd_flops);
    }
    row("  its dk/dv kernel, bf16 pages, f32 q and dO",
        median_ms([&] { cuda::k::attention_bwd_mma(p16_f32q, qd, od, lsed, dod, dqd, dsum, nullptr, cuda::k::kBwdDkdv); },
                  10),
        2.0 * fwd_flops);
  }
  if (cuda::lab::attention_fwd_wmma_unsupported(p) == nullptr)
    row("attention forward, wmma bf16 (lab)",
        median_ms([&] { CK(cuda::lab::attention_fwd_wmma(p, qd, od, lsed, nullptr)); }, 5), fwd_flops);
  if (cuda::lab::attention_bwd_wmma_unsupported(p) == nullptr)
    row("attention backward, wmma bf16 (lab)",
        median_ms([&] { CK(cuda::lab::attention_bwd_wmma(p, qd, od, lsed, dod, dqd, dsum, nullptr)); }, 3), bwd_flops);
  // cuDNN's fused SDPA over the same keys laid out contiguously (N, G, D), bf16
  std::string why_not;
  if (!with_cudnn) {
    std::printf("| cuDNN SDPA: not run (--cudnn 0) | | |\n");
  } else if (!cuda::cudnn::available(&why_not)) {
    std::printf("| cuDNN SDPA: not run (%s) | | |\n", why_not.c_str());
  } else {
    try {
      cuda::cudnn::Sdpa att({s.H, s.G, s.C, s.N, s.D, float(1.0 / std::sqrt(double(s.D))), true, sdpa::DType::bf16},
                            nullptr);
      const auto kv = randn(size_t(s.N * s.G * s.D), 9);
      uint16_t *qb = dev_bf16(q), *kb = dev_bf16(kv), *vb = dev_bf16(kv), *dkb = dev_bf16(kv), *dvb = dev_bf16(kv);
      uint16_t *ob = dev_bf16(q), *dob = dev_bf16(q), *dqb = dev_bf16(q);
      void* ws = nullptr;
      CK(cudaMalloc(&ws, std::max<size_t>(att.workspace_bytes(), 1)));
      const std::string f = "attention forward, cuDNN " + cuda::cudnn::version() + " SDPA";
      row(f.c_str(), median_ms([&] { att.forward(qb, kb, vb, ob, lsed, ws); }, 10), fwd_flops);
      const std::string b = "attention backward, cuDNN " + cuda::cudnn::version() + " SDPA";
      row(b.c_str(), median_ms([&] { att.backward(qb, kb, vb, ob, dob, lsed, dqb, dkb, dvb, dsum, ws); }, 10),
          bwd_flops);
      // what the backend plans for runs of at most C keys (backend.h), beside what this GPU's engine asks
      std::printf("(cuDNN: %s; the backend plans %zu B for runs of at most %ld keys)\n", att.engines().c_str(),
                  cudnn_attention_workspace(s.C, s.H, s.G, s.D), long(s.C));
      for (void* p : {(void*)qb, (void*)kb, (void*)vb, (void*)ob, (void*)dob, (void*)dqb, (void*)dkb, (void*)dvb, ws})
        CK(cudaFree(p));
    } catch (const std::exception& e) {
      std::printf("| cuDNN SDPA: not built or not run (%s) | | |\n", e.what());
    }
  }
  // the fp32 GEMM rate of this GPU, measured now: 8192^3
  const int64_t M = 8192;
  float *A = dev(randn(size_t(M * M), 1)), *B = dev(randn(size_t(M * M), 2)), *Cm = nullptr, *ws = nullptr;
  CK(cudaMalloc(&Cm, size_t(M * M) * 4));
  CK(cudaMalloc(&ws, 32 << 20));
  cuda::Gemm gemm(nullptr, ws, 32 << 20);
  row("fp32 GEMM 8192^3 (cuBLASLt)", median_ms([&] { gemm.run(false, true, M, M, M, A, M, B, M, Cm, M, 1.0f, 0.0f); }, 5),
      2.0 * double(M) * M * M);
  if (!cudnn_ok) std::printf("check cudnn FAILED (above); oomb's kernels were checked and timed\n");
  return cudnn_ok ? 0 : 1;
}
