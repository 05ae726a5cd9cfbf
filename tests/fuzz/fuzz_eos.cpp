// fuzz-sources: data/eos.cpp text/utf8.cpp text/normalizer.cpp text/regex_split.cpp text/byte_level.cpp text/bpe.cpp text/added_tokens.cpp text/tokenizer.cpp
// fuzz-libs: -lpcre2-8 -lutf8proc
// Feeds bytes as a model directory's config.json and tokenizer_config.json (split at the first NUL;
// no tokenizer.json) to resolve_eos, the rule that picks the documents' separator: only
// oomb::Error may come out, and an id it returns lies in the vocabulary.
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "core/error.h"
#include "data/eos.h"
#include "fuzz_check.h"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fs::path dir = [] {
    char t[] = "/tmp/fuzz_eos.XXXXXX";
    return fs::path(mkdtemp(t));
  }();
  const char* p = reinterpret_cast<const char*>(data);
  const void* nul = std::memchr(p, 0, size);
  const size_t cut = nul ? size_t(static_cast<const char*>(nul) - p) : size;
  std::ofstream(dir / "config.json", std::ios::binary | std::ios::trunc).write(p, std::streamsize(cut));
  const size_t rest = cut < size ? size - cut - 1 : 0;
  std::ofstream(dir / "tokenizer_config.json", std::ios::binary | std::ios::trunc)
      .write(p + size - rest, std::streamsize(rest));
  const int64_t vocab = 1000;
  try {
    const oomb::EosChoice e = oomb::resolve_eos(dir, vocab, nullptr);
    check(e.id == -1 || (e.id >= 0 && e.id < vocab), "an id in the vocabulary, or none");
    check((e.id == -1) == e.from.empty(), "an id says where it was found");
  } catch (const oomb::Error&) {
  }
  return 0;
}
