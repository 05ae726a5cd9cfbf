// A CUDA library loaded on first use (cublaslt_lazy.cpp, cudnn/cudnn_lazy.cpp): the first of the
// names that dlopen()s, and its symbols by name; null where the library or the symbol is absent;
// OOMB_LAZY_SYMBOL defines a stand-in for one of its entry points.
#pragma once
#include <dlfcn.h>

#include <initializer_list>

namespace oomb::cuda {

inline void* open_first(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (void* h = ::dlopen(n, RTLD_NOW | RTLD_LOCAL)) return h;
  return nullptr;
}

// the library's `name`, typed as `self` (the stand-in function being defined)
template <typename F>
F* resolve(void* library, F* self, const char* name) {
  (void)self;
  return library ? reinterpret_cast<F*>(::dlsym(library, name)) : nullptr;
}

}  // namespace oomb::cuda

// extern "C" ret api name params: the library's `name` (library() opens it), or `missing` without
// the library or the symbol
#define OOMB_LAZY_SYMBOL(library, ret, api, missing, name, params, args)             \
  extern "C" ret api name params {                                                   \
    static auto* const f = ::oomb::cuda::resolve(library(), &name, #name);           \
    return f ? f args : missing;                                                     \
  }
