// A CUDA backend made while OOMB_CUDA_ATTENTION is `mode` (the backend reads it once, when made),
// the variable restored after: the test_cuda_* suites' one spelling of it. Inline, so that each
// suite's build (the GPU's or simt's, whose make_cuda_backend is another name) calls its own.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"
#include "test_util.h"

namespace oomb::testing {

inline std::unique_ptr<Backend> cuda_backend_with_attention(const char* mode, std::string* why = nullptr) {
  const ScopedEnv attention("OOMB_CUDA_ATTENTION", mode);
  return make_cuda_backend(why);
}

}  // namespace oomb::testing
