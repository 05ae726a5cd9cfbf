// fuzz-sources: core/dtype.cpp core/memory.cpp core/atomic_file.cpp hf/safetensors.cpp
// Fuzzes the safetensors header validator on whole-file bytes: it may throw oomb::Error only, and whatever it
// accepts must tile the data section exactly with correctly sized tensors.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "hf/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  oomb::SafetensorsHeader h;
  try {
    h = oomb::parse_safetensors_header(bytes, size, "fuzz.safetensors");
  } catch (const oomb::Error&) {
    return 0;
  }
  uint64_t pos = 0;
  for (const oomb::TensorInfo& t : h.tensors) {
    if (t.begin != pos || t.end < t.begin) std::abort();
    if (uint64_t(t.numel()) * oomb::dtype_size(t.dtype) != t.end - t.begin) std::abort();
    pos = t.end;
  }
  if (h.data_start + pos != size) std::abort();
  return 0;
}
