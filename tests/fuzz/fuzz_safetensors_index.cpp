// fuzz-sources: core/dtype.cpp core/memory.cpp core/atomic_file.cpp hf/safetensors.cpp
// Feeds bytes as a sharded model's model.safetensors.index.json, in a directory holding two valid
// shards (tensor "a" in a.safetensors, "b" in sub/b.safetensors), to SafetensorsModel::open: only
// oomb::Error may come out. A model that opens holds only the shards' tensors, each found.
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "core/error.h"
#include "fuzz_check.h"
#include "hf/safetensors.h"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fs::path dir = [] {
    char t[] = "/tmp/fuzz_safetensors_index.XXXXXX";
    const fs::path d = mkdtemp(t);
    static const float a[2] = {1, 2}, b[3] = {3, 4, 5};
    fs::create_directories(d / "sub");
    oomb::save_safetensors(d / "a.safetensors", std::vector<oomb::SaveTensor>{{"a", oomb::DType::F32, {2}, a}});
    oomb::save_safetensors(d / "sub/b.safetensors", std::vector<oomb::SaveTensor>{{"b", oomb::DType::F32, {3}, b}});
    return d;
  }();
  std::ofstream(dir / "model.safetensors.index.json", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), std::streamsize(size));
  try {
    const oomb::SafetensorsModel m = oomb::SafetensorsModel::open(dir);
    for (const std::string& n : m.names()) check(n == "a" || n == "b", "only the shards' tensors");
    for (const std::string& n : m.names()) check(m.find(n) != nullptr, "every name found");
  } catch (const oomb::Error&) {
  }
  return 0;
}
