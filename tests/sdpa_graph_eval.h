// A CPU interpreter of oomb::sdpa::Graph (src/backend/sdpa_graph.h) in float64, so the graphs oomb asks
// cuDNN for as fused attention can be checked against attention written plainly, with no GPU.
//
// Nodes run in order. External tensors (neither virtual nor by value) live in flat buffers, one per uid,
// addressed through the tensor's own dims and strides: element (b, h, s, d) is at
// b*stride[0] + h*stride[1] + s*stride[2] + d*stride[3] (so a k described as k^T over k's memory reads
// k correctly, and a wrong stride reads the wrong element). Virtual tensors are dense in logical order
// (their declared strides are ignored); by-value tensors hold `value`. The arithmetic ignores dtypes.
//
// Everything the header's contract implies is checked as the graph runs, and a violation throws
// SdpaEvalError naming the node and tensors: a uid that names no tensor or two; a node reading a tensor
// not yet written or bound, or writing one already written (or bound as an input, or by value); an
// operand an op does not take, or a missing one; dims that do not agree with the op; a by-value tensor
// whose dims are not all 1; an external tensor whose strides reach outside its buffer or map two
// elements to one place; an external tensor bound to no buffer, or an output never written.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <vector>

#include "backend/sdpa_graph.h"

namespace oomb::testing {

struct SdpaEvalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using SdpaBuffers = std::map<int64_t, std::vector<double>>;  // external tensors' memory, by uid

// Evaluates g. `in`: the external tensors g reads, by uid. `out`: the external tensors g writes, each
// sized by the caller; the elements a tensor addresses are overwritten, any others left as they are.
// Every external tensor of g must be in exactly one of the two.
void eval_sdpa_graph(const sdpa::Graph& g, const SdpaBuffers& in, SdpaBuffers& out);

}  // namespace oomb::testing
