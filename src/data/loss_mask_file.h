// A token file's loss mask beside it: `oomb tokenize --prompt-field` writes FILE.mask next to
// FILE, and `--data FILE` (or a directory of shards) reads it. Little-endian:
//   bytes 0-7   "OOMBMASK"
//   bytes 8-15  uint64 token count
//   bytes 16-31 the ids' token_fingerprint (16 ASCII hex digits): a mask of other ids is refused
//   then      one bit per token, ceil(count / 8) bytes: bit j of byte k is token 8 k + j (1: trained)
#pragma once
#include <filesystem>
#include <string>

#include "data/loss_mask.h"
#include "data/token_store.h"

namespace oomb {

// FILE's sidecar: FILE.mask
std::filesystem::path loss_mask_path(const std::filesystem::path& token_file);
bool is_loss_mask_file(const std::filesystem::path& p);  // a name ending in .mask
bool holds_loss_mask(const std::filesystem::path& p);    // a file starting with the mask's magic

// Writes bits (one per id of `ids`, the token file just written) to path, atomically.
void write_loss_mask(const std::filesystem::path& path, const LossMaskBuilder& bits, const TokenStore& ids);
// Appends the bits of path, the mask of `ids`, to into; errors name the file and what is wrong.
void read_loss_mask(const std::filesystem::path& path, const TokenStore& ids, LossMaskBuilder& into);

}  // namespace oomb
