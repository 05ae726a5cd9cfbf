// cuDNN's fused attention on simt (src/backend/cuda/cudnn/cudnn_sdpa.h): the same graphs oomb asks
// cuDNN for (backend/sdpa_graph.h), evaluated by the tests' float64 interpreter
// (tests/sdpa_graph_eval.h) when the stream gets there (tests/simt/runtime.cpp). Each external
// tensor is read from and written to memory through the graph's own dims and strides, as cuDNN
// addresses it: bf16 or fp32 by the tensor's dtype, outputs rounded once (to nearest even) and only
// the elements they address overwritten. The interpreter ignores dtypes in between (no bf16 p or
// ds, sums in float64), so this is more exact than cuDNN: it checks the backend's plumbing (layouts,
// strides, stream order, the workspace it plans), not cuDNN's numerics.
//
// The workspace is what cuDNN 9.19's deterministic backward asks for (its bf16 dS per head and,
// with GQA, its bf16 dk, dv per query head; OOMB_SIMT_CUDNN_WORKSPACE=<bytes> overrides it, so a
// test can make this need more than the backend planned); it is unused here, but must not be null,
// and its first bytes are scribbled over each call, so a caller relying on what it held sees garbage.
// simt_calls() counts the calls issued, so a test can tell which calls took cuDNN.
#include "backend/cuda/cudnn/cudnn_sdpa.h"
#include "simt/cudnn_calls.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "sdpa_graph_eval.h"

namespace oomb::cuda::cudnn {

namespace {

constexpr const char* kNoCudnn = "cuDNN attention: simt has no cuDNN (its stand-in runs built plans only)";

// The element offsets of an external tensor, in logical (b, h, s, d) order.
std::vector<size_t> offsets(const sdpa::Tensor& t) {
  std::vector<size_t> o;
  for (int64_t b = 0; b < t.dim[0]; ++b)
    for (int64_t h = 0; h < t.dim[1]; ++h)
      for (int64_t s = 0; s < t.dim[2]; ++s)
        for (int64_t d = 0; d < t.dim[3]; ++d)
          o.push_back(size_t(b * t.stride[0] + h * t.stride[1] + s * t.stride[2] + d * t.stride[3]));
  return o;
}

double load(const void* p, sdpa::DType t, size_t i) {
  if (t == sdpa::DType::bf16) {
    uint16_t h;
    std::memcpy(&h, static_cast<const char*>(p) + 2 * i, 2);
    return ::oomb::bf16_to_f32(h);
  }
  float f;
  std::memcpy(&f, static_cast<const char*>(p) + 4 * i, 4);
  return f;
}

void store(void* p, sdpa::DType t, size_t i, double v) {
  const float f = float(v);
  if (t == sdpa::DType::bf16) {
    const uint16_t h = ::oomb::f32_to_bf16(f);
    std::memcpy(static_cast<char*>(p) + 2 * i, &h, 2);
  } else {
    std::memcpy(static_cast<char*>(p) + 4 * i, &f, 4);
  }
}

}  // namespace

namespace {
size_t calls = 0;  // every forward and backward issued (simt_calls)
}  // namespace

size_t simt_calls() { return calls; }

struct Sdpa::Plan {
  std::shared_ptr<const sdpa::Graph> graph;  // shared with the work issued, which may outlive the plan
  const char* which;

  // The graph's external tensors bound to `ptrs` (by uid) evaluated when `stream` gets there: those a
  // node writes are outputs, the others inputs.
  // what cuDNN checks when a plan executes: the workspace and every external tensor bound
  void check(const std::map<int64_t, const void*>& ptrs, void* workspace, size_t workspace_bytes) const {
    OOMB_CHECK(workspace || workspace_bytes == 0, "cuDNN attention (simt): {}: a null workspace where {} B are needed",
               which, workspace_bytes);
    for (const sdpa::Tensor& t : graph->tensors) {
      if (t.is_virtual || t.by_value) continue;
      auto it = ptrs.find(t.uid);
      OOMB_CHECK(it != ptrs.end() && it->second, "cuDNN attention (simt): {}: tensor '{}' bound to null", which,
                 t.name);
    }
  }

  void run(const std::map<int64_t, const void*>& ptrs, void* workspace, size_t workspace_bytes,
           cudaStream_t stream) const {
    check(ptrs, workspace, workspace_bytes);
    const size_t scribble = std::min<size_t>(workspace_bytes, 4096);
    ++calls;
    simt_issue(stream, [g = graph, which = which, ptrs, workspace, scribble] {
      try {
        if (workspace) std::memset(workspace, 0xCD, scribble);
        std::map<int64_t, bool> written;
        for (const sdpa::Node& n : g->nodes) written[n.y] = true;
        testing::SdpaBuffers in, out;
        const double nan = std::numeric_limits<double>::quiet_NaN();
        for (const sdpa::Tensor& t : g->tensors) {
          if (t.is_virtual || t.by_value) continue;
          const std::vector<size_t> off = offsets(t);
          const size_t n = *std::max_element(off.begin(), off.end()) + 1;
          if (written.count(t.uid)) {
            out[t.uid].assign(n, nan);
          } else {
            std::vector<double>& b = in[t.uid];
            b.assign(n, nan);  // elements the tensor does not address are neither read nor used
            for (size_t i : off) b[i] = load(ptrs.at(t.uid), t.dtype, i);
          }
        }
        testing::eval_sdpa_graph(*g, in, out);
        for (const sdpa::Tensor& t : g->tensors) {
          auto it = out.find(t.uid);
          if (it == out.end()) continue;
          void* p = const_cast<void*>(ptrs.at(t.uid));
          for (size_t i : offsets(t)) store(p, t.dtype, i, it->second[i]);
        }
      } catch (const std::exception& e) {  // on a GPU a fault in the kernel: nothing after it runs
        std::fprintf(stderr, "simt cuDNN: %s: %s\n", which, e.what());
        std::fflush(stderr);
        std::abort();
      }
    });
  }
};

bool available(std::string*) { return true; }
std::string version() { return "simt (the graph interpreter)"; }
size_t version_code() { return 91900; }  // as cuDNN 9.19, so that callers' version checks pass

std::string build_deviceless(const sdpa::Graph&, const std::string&, const char*, size_t*) {
  ::oomb::fail("{}", kNoCudnn);
}
std::string build_deviceless(const sdpa::Shape&, const std::string&, size_t*) { ::oomb::fail("{}", kNoCudnn); }
std::string deviceprop_json() { ::oomb::fail("{}", kNoCudnn); }

std::vector<EngineTry> survey(const sdpa::Graph&, const char*, const std::string&) { ::oomb::fail("{}", kNoCudnn); }

Sdpa::Sdpa(const sdpa::Shape& shape, cudaStream_t stream, int64_t, int64_t) : shape_(shape), stream_(stream) {
  fwd_ = std::make_unique<Plan>(Plan{std::make_shared<const sdpa::Graph>(sdpa::forward(shape)), "forward"});
  bwd_ = std::make_unique<Plan>(Plan{std::make_shared<const sdpa::Graph>(sdpa::backward(shape)), "backward"});
}

Sdpa::~Sdpa() = default;

size_t Sdpa::workspace_bytes() const {
  if (const char* env = std::getenv("OOMB_SIMT_CUDNN_WORKSPACE")) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(env, &end, 10);
    OOMB_CHECK(*env >= '0' && *env <= '9' && *end == '\0' && errno == 0,
               "OOMB_SIMT_CUDNN_WORKSPACE='{}' is not a number of bytes", env);
    return size_t(v);
  }
  // cuDNN 9.19's deterministic backward on an H100 with o, do, dq in bf16, as it asks deviceless:
  // dS in bf16, (pad64(q_len), heads, pad64(kv_len)), with GQA dk and dv per query head in bf16,
  // and 256 bytes (the forward's 256 too)
  const size_t h = size_t(shape_.heads), d = size_t(shape_.dim);
  const size_t t = size_t((shape_.q_len + 63) / 64 * 64), r = size_t((shape_.kv_len + 63) / 64 * 64);
  const size_t gqa = shape_.kv_heads < shape_.heads ? 2 * h * size_t(shape_.kv_len) * d * 2 : 0;
  return t * r * h * 2 + gqa + 256;
}

std::string Sdpa::engines() const { return "simt: the float64 graph interpreter (forward and backward)"; }

// (the checks alone: a trial's work is not issued, nor counted in simt_calls)
void Sdpa::trial(const void* q, const void* k, const void* v, void* o, float* stats, void* dk, void* dv,
                 void* workspace) {
  fwd_->check(sdpa::forward_bindings(q, k, v, o, stats), workspace, workspace_bytes());
  bwd_->check(sdpa::backward_bindings(q, k, v, o, o, stats, o, dk, dv, stats), workspace, workspace_bytes());
}

void Sdpa::forward(const void* q, const void* k, const void* v, void* o, float* stats, void* workspace) {
  fwd_->run(sdpa::forward_bindings(q, k, v, o, stats), workspace, workspace_bytes(), stream_);
}

void Sdpa::backward(const void* q, const void* k, const void* v, const void* o, const void* d_o, const float* stats,
                    void* dq, void* dk, void* dv, float* softmax_sum, void* workspace) {
  bwd_->run(sdpa::backward_bindings(q, k, v, o, d_o, stats, dq, dk, dv, softmax_sum), workspace, workspace_bytes(),
            stream_);
}

}  // namespace oomb::cuda::cudnn
