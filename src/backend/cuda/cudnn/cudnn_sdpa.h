// Flash attention through cuDNN's fused SDPA engines (forward and backward, causal bottom-right,
// GQA, natural-log stats, deterministic backward), asked for with the graphs of
// backend/sdpa_graph.h and built once per shape. oomb's layouts: q: (q_len, heads, dim) bf16; o, do,
// dq: the same, bf16 or fp32 (Shape::out); k, v, dk, dv: (kv_len, kv_heads, dim) bf16; stats, softmax_sum:
// (q_len, heads) fp32, as oomb's lse; softmax_sum is the backward's scratch (rowsum(do * o)).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/sdpa_graph.h"

namespace oomb::cuda::cudnn {

// Whether cuDNN can be used here; if not, why (no headers at build time, no library at run time,
// a version too old).
bool available(std::string* why);
std::string version();  // e.g. "9.19.0", or why there is none
size_t version_code();  // e.g. 91900; 0: no library

// Deviceless (cuDNN >= 9.8): builds both plans for `shape` on the GPU that `deviceprop_json`
// describes (cuDNN's own serialisation of a device's properties), with no GPU here. Where the
// driver is CUDA's stub library, cuDNN checks the graph, picks engines and compiles their kernels,
// and only loading a kernel fails: that counts as accepted. Returns, per plan, the engine, its
// workspace and how far it got; throws as Sdpa does when no engine accepts the graph. *workspace
// (if given): the bytes the engine asks for (the larger plan's), as Sdpa::workspace_bytes says.
std::string build_deviceless(const sdpa::Shape& shape, const std::string& deviceprop_json,
                             size_t* workspace = nullptr);
std::string build_deviceless(const sdpa::Graph& graph, const std::string& deviceprop_json, const char* which,
                             size_t* workspace = nullptr);
// This machine's GPU 0, serialised by cuDNN (needs the GPU): what build_deviceless takes.
std::string deviceprop_json();

// Every engine config cuDNN's heuristics offer for `graph` on this GPU, in their order: its global
// index, whether its notes leave out nondeterministic, what finalizing its plan said ("": built)
// and the built plan's workspace. On this GPU, or deviceless on the one `deviceprop_json` describes
// (build_deviceless's: on a stub driver a compiled kernel reports CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER).
// For the attention lab's --cudnn-survey and the deviceless tests.
struct EngineTry {
  int64_t index;
  bool deterministic;
  std::string status;
  int64_t workspace;
};
std::vector<EngineTry> survey(const sdpa::Graph& graph, const char* which, const std::string& deviceprop_json = "");

class Sdpa {
 public:
  // Builds both plans; throws naming the graph step and cuDNN's own message when cuDNN refuses.
  // fwd_engine, bwd_engine >= 0: that engine (a global index, as survey lists) and no other.
  Sdpa(const sdpa::Shape& shape, cudaStream_t stream, int64_t fwd_engine = -1, int64_t bwd_engine = -1);
  ~Sdpa();
  Sdpa(const Sdpa&) = delete;
  Sdpa& operator=(const Sdpa&) = delete;

  const sdpa::Shape& shape() const { return shape_; }
  size_t workspace_bytes() const;  // the larger plan's; callers pass at least this much
  std::string engines() const;     // which cuDNN engine each plan runs, for logs

  // Both plans once, on scratch (inputs as they are, outputs overwritten, o also the backward's do
  // and dq, stats also its softmax_sum): cuDNN checks a plan's bindings only when it executes it, so
  // a plan built but refused there (the first H200 run: "nullptr == dq_ptr") is found before a call's
  // state is touched. Throws as forward and backward do.
  void trial(const void* q, const void* k, const void* v, void* o, float* stats, void* dk, void* dv, void* workspace);
  void forward(const void* q, const void* k, const void* v, void* o, float* stats, void* workspace);
  void backward(const void* q, const void* k, const void* v, const void* o, const void* d_o, const float* stats,
                void* dq, void* dk, void* dv, float* softmax_sum, void* workspace);

 struct Plan;  // cudnn_sdpa.cpp

 private:
  sdpa::Shape shape_;
  cudaStream_t stream_;
  std::unique_ptr<Plan> fwd_, bwd_;
};

}  // namespace oomb::cuda::cudnn
