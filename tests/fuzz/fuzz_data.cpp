// fuzz-sources: data/text_corpus.cpp data/visible_files.cpp data/token_store.cpp data/packed_tokens.cpp data/packed_whole.cpp data/loss_mask.cpp data/loss_mask_file.cpp core/atomic_file.cpp data/token_source.cpp text/utf8.cpp core/memory.cpp text/chat_template.cpp text/jinja/lexer.cpp text/jinja/parser.cpp text/jinja/template.cpp text/jinja/builtins.cpp text/jinja/value.cpp
// fuzz-libs: -lutf8proc
// The dataset readers on arbitrary bytes; only oomb::Error may come out. First byte selects:
//   0: JSON lines (strict UTF-8)  1: JSON lines (repaired)  2: plain text in small blocks, which
//   must join back to the (repaired) input  3..5: a token file as u32, u16 or llm.c, packed with
//   document shuffling and a loss mask (each id's low bit): every epoch must hold the same tokens
//   as the file (plus a final EOS), each with its bit (the EOS added: 1)  6: JSON lines as
//   prompt-completion records: a prompt's block is followed by its completion's or ends its record
//   7: a loss mask file (FILE.mask) for 20 tokens: refused, or 20 bits  8: JSON lines as conversations
//   through a ChatML template: blocks valid UTF-8, never empty, alternating within a record.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/error.h"
#include "fuzz_check.h"
#include "data/loss_mask_file.h"
#include "data/packed_tokens.h"
#include "data/text_corpus.h"

using namespace oomb;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const int mode = data[0] % 9;
  try {
    if (mode <= 1) {
      CorpusOptions o;
      o.utf8 = mode == 0 ? Utf8Errors::Strict : Utf8Errors::Replace;
      std::istringstream in(rest);
      read_jsonl_stream(in, "fuzz.jsonl", o, [](const TextBlock& b) {
        check(utf8_first_invalid(b.text) == b.text.size(), "blocks are valid UTF-8");
      });
    } else if (mode == 7) {
      static const std::string path = "/tmp/oomb_fuzz_mask_" + std::to_string(::getpid()) + ".mask";
      FILE* f = std::fopen(path.c_str(), "wb");
      std::fwrite(rest.data(), 1, rest.size(), f);
      std::fclose(f);
      std::vector<uint32_t> ids(20);
      for (uint32_t i = 0; i < 20; ++i) ids[i] = i;
      const MemoryTokens store(ids, "ids");
      LossMaskBuilder bits;
      read_loss_mask(path, store, bits);
      check(bits.size() == 20, "a mask read has a bit per token");
    } else if (mode == 6) {
      CorpusOptions o;
      o.utf8 = Utf8Errors::Replace;
      o.prompt_field = "p", o.completion_field = "c";
      std::istringstream in(rest);
      bool open_prompt = false;  // the last block was a prompt's that did not end its record
      read_jsonl_stream(in, "fuzz.jsonl", o, [&](const TextBlock& b) {
        check(utf8_first_invalid(b.text) == b.text.size(), "blocks are valid UTF-8");
        check(!open_prompt || b.trained, "a prompt is followed by its completion");
        open_prompt = !b.trained && !b.ends_document;
      });
      check(!open_prompt, "the last record ends");
    } else if (mode == 8) {
      CorpusOptions o;
      o.utf8 = Utf8Errors::Replace;
      o.messages_field = "messages";
      static const auto chatml = std::make_shared<const ChatTemplate>(
          "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | trim }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
          "chatml", jinja::Value::object());
      o.chat_template = chatml;
      std::istringstream in(rest);
      bool last_trained = false, ended = true;
      read_jsonl_stream(in, "fuzz.jsonl", o, [&](const TextBlock& b) {
        check(utf8_first_invalid(b.text) == b.text.size(), "blocks are valid UTF-8");
        check(!b.text.empty(), "no empty block");
        check(ended || b.trained != last_trained, "a record's blocks alternate");
        last_trained = b.trained, ended = b.ends_document;
      });
      check(ended, "the last record ends");
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
      LossMaskBuilder bits;
      for (uint32_t id : all) bits.append(1, id & 1);
      PackedTokens p(std::move(store), int64_t(1) << 32, {int32_t(eos & 0x7fffffff), true, 3},
                     std::make_unique<LossMask>(bits));
      if (int64_t(eos) == int64_t(eos & 0x7fffffff) && p.stream_size() < (1 << 16)) {
        // (id, bit) as id * 2 + bit
        std::vector<uint64_t> want;
        for (uint32_t id : all) want.push_back(uint64_t(id) * 2 + (id & 1));
        if (all.back() != eos) want.push_back(uint64_t(eos) * 2 + 1);
        std::sort(want.begin(), want.end());
        for (int e = 0; e < 2; ++e) {
          std::vector<uint32_t> ep(static_cast<size_t>(p.stream_size()));
          std::vector<uint8_t> mask(ep.size());
          p.stream(e * p.stream_size(), p.stream_size(), ep.data());
          p.stream_mask(e * p.stream_size(), p.stream_size(), mask.data());
          std::vector<uint64_t> got;
          for (size_t i = 0; i < ep.size(); ++i) got.push_back(uint64_t(ep[i]) * 2 + mask[i]);
          std::sort(got.begin(), got.end());
          check(got == want, "an epoch holds the file's tokens, each with its mask bit");
        }
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
