// The end-of-sequence token that separates packed documents.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

#include "text/tokenizer.h"

namespace oomb {

struct EosChoice {
  int32_t id = -1;
  std::string from;  // where it was found, for the log
};

// Next to a tokenizer (its directory): config.json's eos_token_id (the first of a list), else
// tokenizer_config.json's eos_token. id -1 when neither says.
EosChoice find_eos(const std::filesystem::path& tokenizer_path, const Tokenizer& tok);
// --eos VALUE: an id, or a token as written in tokenizer.json ("<|endoftext|>").
int32_t parse_eos(const std::string& value, const Tokenizer& tok);

}  // namespace oomb
