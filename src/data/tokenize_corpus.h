// Tokenizes a text corpus in parallel, in order: blocks are cut into units (at exact cut points,
// is_cut_point, when the tokenizer allows) and encoded by all threads, then handed on in corpus
// order. With an EOS id, every document is followed by it (a single plain text file gets nothing
// added). The sink hears whether each run of ids is trained (a prompt's is not; an EOS is). An error
// names the file it came from.
#pragma once
#include <cstdint>
#include <functional>
#include <ostream>
#include <span>

#include "data/text_corpus.h"
#include "text/tokenizer.h"

namespace oomb {

struct TokenizeOptions {
  int32_t eos = -1;            // appended after each document; -1: nothing
  bool split_special = false;  // special tokens in the text stay text
  int64_t unit_bytes = 256 << 10;
  int64_t batch_bytes = 64 << 20;  // text encoded per parallel round
  std::ostream* progress = nullptr;  // progress and a summary line (a bar when it is a terminal)
};

struct TokenizeStats {
  int64_t bytes = 0, tokens = 0, documents = 0;
  int64_t untrained = 0;  // tokens of prompts (CorpusOptions::prompt_field)
  double seconds = 0;
};

TokenizeStats tokenize_corpus(const TextCorpus& corpus, const Tokenizer& tok, const TokenizeOptions& o,
                              const std::function<void(std::span<const int32_t>, bool trained)>& sink);

}  // namespace oomb
