#include "onig_reference.h"

#include <oniguruma.h>

#include <stdexcept>

namespace oomb::testing {

struct OnigSplit::Impl {
  regex_t* re = nullptr;
};

OnigSplit::OnigSplit(std::string_view pattern) : impl_(std::make_unique<Impl>()) {
  static const bool init = [] {
    OnigEncoding enc = ONIG_ENCODING_UTF8;
    return onig_initialize(&enc, 1) == ONIG_NORMAL;
  }();
  if (!init) throw std::runtime_error("onig_initialize failed");
  const auto* p = reinterpret_cast<const UChar*>(pattern.data());
  OnigErrorInfo info;
  if (onig_new(&impl_->re, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &info) !=
      ONIG_NORMAL)
    throw std::runtime_error("onig_new failed");
}

OnigSplit::~OnigSplit() { onig_free(impl_->re); }

std::vector<std::pair<size_t, size_t>> OnigSplit::split(std::string_view s) const {
  std::vector<std::pair<size_t, size_t>> out;
  const auto* b = reinterpret_cast<const UChar*>(s.data());
  const UChar* e = b + s.size();
  OnigRegion* reg = onig_region_new();
  size_t pos = 0, prev = 0;
  while (pos <= s.size()) {
    if (onig_search(impl_->re, b, e, b + pos, e, reg, ONIG_OPTION_NONE) < 0) break;
    const size_t mb = size_t(reg->beg[0]), me = size_t(reg->end[0]);
    if (mb > prev) out.push_back({prev, mb});
    if (me > mb) out.push_back({mb, me});
    prev = me;
    pos = me > mb ? me : me + 1;  // after an empty match, step one byte (the next search aligns to a character)
  }
  if (prev < s.size()) out.push_back({prev, s.size()});
  onig_region_free(reg, 1);
  return out;
}

}  // namespace oomb::testing
