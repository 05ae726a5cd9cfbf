// `oomb train --data PATH`: token files (raw u32 .bin, nanoGPT u16, llm.c shards, or a directory
// of shards) are read in place, each with its loss mask FILE.mask where there is one; text (plain
// files, JSON lines, or directories of them) is tokenized once at start into memory (tag data),
// prompt-completion records (CorpusOptions::prompt_field) with a mask of their prompts. `oomb tokenize` makes a token file instead,
// for corpora worth tokenizing only once.
#pragma once
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>

#include "data/packed_tokens.h"
#include "data/text_corpus.h"

namespace oomb {

struct DataOptions {
  std::string format = "auto";  // auto | u32 | u16 | llmc | text | jsonl
  CorpusOptions corpus;         // text inputs: field, UTF-8 handling
  std::filesystem::path tokenizer;  // text inputs: tokenizer.json or a directory holding one
  bool split_special = false;
  PackingOptions packing;       // eos (document separator), shuffle, seed
  std::ostream* log = nullptr;  // tokenization progress and summary
};

std::unique_ptr<PackedTokens> open_training_data(const std::filesystem::path& path, int64_t vocab,
                                                 const DataOptions& o);

// Held-out data (flag: --data or --eval-data) scored in wrapped windows of N: one window (N + 1
// tokens) must fit in it, or the window holds the data twice and a model scores the repeat by
// copying; throws naming the flag, the data and the --seq-len that fits.
void check_held_out_fits_a_window(const PackedTokens& data, int64_t N, const std::string& flag,
                                  const std::string& path);

// Whether PATH (file or directory) holds token files rather than text, by the rules above.
bool is_token_data(const std::filesystem::path& path, const std::string& format);

}  // namespace oomb
