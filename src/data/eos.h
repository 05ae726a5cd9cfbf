// The end-of-sequence token that separates packed documents.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace oomb {

struct EosChoice {
  int32_t id = -1;
  std::string from;  // where it was found, for the log
};

// The one rule `oomb tokenize` and `oomb train` share (a flag given wins before it is called): in
// DIR (or the directory of the file DIR), config.json's eos_token_id (the first of a list), else
// tokenizer_config.json's eos_token, mapped to its id by `tok`, by tokenizer_config.json's
// added_tokens_decoder, or by DIR/tokenizer.json. id -1 when neither names one. An id outside
// [0, vocab) is an error naming the file, the field and the vocabulary.
EosChoice resolve_eos(const std::filesystem::path& dir, int64_t vocab, const Tokenizer* tok = nullptr);
// The vocabulary a token file made with this tokenizer is for: config.json's vocab_size next to it
// when there is one (the model's), else the tokenizer's id limit.
int64_t vocab_next_to(const std::filesystem::path& tokenizer_path, const Tokenizer& tok);
// The ids generation stops at, as transformers' generate takes them and more: config.json's
// eos_token_id (each of a list: `eos`, the config's), generation_config.json's (each of a list),
// and the tokenizer_config.json eos_token resolve_eos finds (a chat model's end of turn where
// config.json names the base's end of text, or nothing). An id beyond the vocabulary is an error
// naming the file.
std::vector<int64_t> stop_token_ids(const std::filesystem::path& dir, std::vector<int64_t> eos, int64_t vocab,
                                    const Tokenizer* tok);
// --eos VALUE: an id, or a token as written in tokenizer.json ("<|endoftext|>").
int32_t parse_eos(const std::string& value, const Tokenizer& tok);
// train's and eval's --eos-id VALUE (or --eos, as tokenize names it): an id below vocab, or a token
// of the tokenizer at `tokenizer` (a tokenizer.json or a directory holding one; empty or missing: a
// token is refused, saying what to give).
int32_t eos_flag(const std::string& value, int64_t vocab, const std::filesystem::path& tokenizer);

}  // namespace oomb
