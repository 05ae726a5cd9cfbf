// Oniguruma as a reference splitter (its header cannot share a translation unit with GoogleTest's).
#pragma once
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

namespace oomb::testing {

class OnigSplit {
 public:
  explicit OnigSplit(std::string_view pattern);  // Oniguruma's default syntax, UTF-8, as Hugging Face compiles it
  ~OnigSplit();
  // Matches and gaps between them, as Hugging Face's Split ("Isolated") forms them.
  std::vector<std::pair<size_t, size_t>> split(std::string_view s) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace oomb::testing
