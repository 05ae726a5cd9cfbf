// Fused attention as cuDNN is asked for it: a graph of plain operations (matmuls, pointwise ops,
// reductions, reshapes) that cuDNN's engines recognise as one flash-attention kernel. The graphs are
// built here as data, with no CUDA: src/backend/cuda/cudnn_sdpa.cpp turns one into cuDNN backend
// descriptors, and tests/test_sdpa_graph.cpp evaluates the same graph on the CPU against attention
// in float64, so the math of what cuDNN is asked for is checked on every machine.
//
// Layouts are oomb's, token-major and batch 1: q, o, dq, do: (q_len, heads, dim); k, v, dk, dv:
// (kv_len, kv_heads, dim); stats and softmax_sum: (q_len, heads) fp32, as oomb's lse. q, k, v, dk
// and dv are bf16 (cuDNN's fused engines take no other type); o, do and dq bf16 or fp32. cuDNN numbers every
// tensor's dims (b, h, s, d); a tensor here gives those dims and the strides of its memory, so k
// described as k^T (as cuDNN's first matmul takes it) has dims and strides of s and d swapped.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace oomb::sdpa {

enum class DType { bf16, f32, i32, boolean };

struct Tensor {
  int64_t uid = 0;
  std::string name;
  DType dtype = DType::f32;
  std::array<int64_t, 4> dim{}, stride{};  // (b, h, s, d)
  bool is_virtual = true;                 // lives only inside the fused kernel
  bool by_value = false;                  // a scalar (dims all 1) passed by value: `value`
  double value = 0;
};

// y = f(x[, b[, t]]); `compute` is the arithmetic's type
enum class Op {
  matmul,         // y = x @ b over the last two dims; heads broadcast (one's heads divide the other's)
  add, sub, mul,  // y = x op b; b's dims of size 1 broadcast
  div,
  exp, log,       // y = op(x)
  identity,       // y = x (a type conversion)
  gen_index,      // y = each element's index along `axis` of x (int32)
  cmp_ge,         // y = x >= b (boolean)
  binary_select,  // y = t ? x : b
  reduce_max,     // y = max over the dims where y is smaller than x (a head dim of y dividing x's sums
  reduce_add,     //     groups of consecutive heads: GQA's dk, dv)
  reshape,        // y = x with its last two dims swapped (the same memory, seen transposed)
};

struct Node {
  Op op;
  std::string name;
  int64_t x = 0, b = 0, t = 0, y = 0;  // uids; 0: none
  int64_t axis = -1;                   // gen_index (and the index arithmetic, as cuDNN's frontend sets it)
  DType compute = DType::f32;
};

struct Graph {
  std::vector<Tensor> tensors;
  std::vector<Node> nodes;
  const Tensor& tensor(int64_t uid) const;  // throws naming the uid if absent
};

struct Shape {
  int64_t heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, dim = 0;
  float scale = 0;      // softmax(scale q k^T)
  bool causal = true;   // bottom-right: query i (of q_len) sees keys j <= i + kv_len - q_len
  DType out = DType::bf16;  // o, do and dq: bf16 or f32
};

// The tensors a caller binds, by uid. Stats: the natural-log LSE of each row of scale q k^T
// (written by the forward, read by the backward); SoftmaxSum: the backward's fp32 workspace
// (rowsum(do * o)), (q_len, heads).
enum Uid : int64_t { Q = 1, K, V, O, Stats, dO, dQ, dK, dV, SoftmaxSum, kFirstInternal = 100 };

// Throw std::invalid_argument naming the field when a shape cannot be built (heads not a multiple of
// kv_heads, a length or dim < 1, causal with q_len > kv_len, out neither bf16 nor f32).
Graph forward(const Shape& s);   // q, k, v -> o, stats
Graph backward(const Shape& s);  // q, k, v, o, do, stats -> dq, dk, dv (deterministic: no atomics)

// Each graph's external tensors by uid, bound to their memory (what Sdpa::forward and backward
// hand to cuDNN, or to simt's stand-in)
using Bindings = std::map<int64_t, const void*>;
Bindings forward_bindings(const void* q, const void* k, const void* v, void* o, float* stats);
Bindings backward_bindings(const void* q, const void* k, const void* v, const void* o, const void* d_o,
                           const float* stats, void* dq, void* dk, void* dv, float* softmax_sum);

std::string describe(const Graph& g);  // a line per tensor and per node, for logs and error messages
const char* name(Op op);
const char* name(DType t);

}  // namespace oomb::sdpa
