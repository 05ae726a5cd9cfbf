// fuzz-sources: data/text_corpus.cpp data/token_store.cpp data/packed_tokens.cpp text/utf8.cpp core/memory.cpp
// The dataset readers on arbitrary bytes; only oomb::Error may come out. First byte selects:
//   0: JSON lines (strict UTF-8)  1: JSON lines (repaired)  2: plain text in small blocks, which
//   must join back to the (repaired) input  3..5: a token file as u32, u16 or llm.c, packed with
//   document shuffling: every epoch must hold the same tokens as the file (plus a final EOS).
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/error.h"
#include "fuzz_check.h"
#include "data/packed_tokens.h"
#include "data/text_corpus.h"

using namespace oomb;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const int mode = data[0] % 6;
  try {
    if (mode <= 1) {
      CorpusOptions o;
      o.utf8 = mode == 0 ? Utf8Errors::Strict : Utf8Errors::Replace;
      std::istringstream in(rest);
      read_jsonl_stream(in, "fuzz.jsonl", o, [](const TextBlock& b) {
        check(utf8_first_invalid(b.text) == b.text.size(), "blocks are valid UTF-8");
      });
    } else if (mode == 2) {
      CorpusOptions o;
      o.utf8 = Utf8Errors::Replace;
      o.allow_cuts = true;
      o.block_bytes = 7;
      std::istringstream in(rest);
      std::string joined;
      read_text_stream(in, "fuzz.txt", o, [&](const TextBlock& b) { joined += b.text; });
      check(joined == utf8_replace_invalid(rest), "blocks join back to the input");
    } else {
      static const std::string path = "/tmp/oomb_fuzz_data_" + std::to_string(::getpid()) + ".bin";
      FILE* f = std::fopen(path.c_str(), "wb");
      std::fwrite(rest.data(), 1, rest.size(), f);
      std::fclose(f);
      const TokenFormat fmt = mode == 3 ? TokenFormat::U32 : mode == 4 ? TokenFormat::U16 : TokenFormat::LlmC;
      auto store = std::make_unique<FileTokens>(path, fmt);
      std::vector<uint32_t> all(static_cast<size_t>(store->size()));
      store->get(0, store->size(), all.data());
      const uint32_t eos = all[0];
      PackedTokens p(std::move(store), int64_t(1) << 32, {int32_t(eos & 0x7fffffff), true, 3});
      if (int64_t(eos) == int64_t(eos & 0x7fffffff) && p.stream_size() < (1 << 16)) {
        if (all.back() != eos) all.push_back(eos);
        std::sort(all.begin(), all.end());
        for (int e = 0; e < 2; ++e) {
          std::vector<uint32_t> ep(static_cast<size_t>(p.stream_size()));
          p.stream(e * p.stream_size(), p.stream_size(), ep.data());
          std::sort(ep.begin(), ep.end());
          check(ep == all, "an epoch holds the file's tokens");
        }
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
