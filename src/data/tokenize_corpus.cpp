#include "data/tokenize_corpus.h"

#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <cstdio>
#include <fmt/format.h>
#include <string>
#include <vector>

#include "core/error.h"

namespace oomb {

namespace {

using Clock = std::chrono::steady_clock;

struct Unit {
  size_t block, begin, end;
  bool continues;  // the text before it is of the same document (EncodeOptions::continues)
};

class Progress {
 public:
  Progress(std::ostream* out, int64_t total) : out_(out), total_(total), tty_(out && ::isatty(2)) {}
  void update(int64_t bytes, int64_t tokens, bool force = false) {
    if (!tty_) return;
    const auto now = Clock::now();
    if (!force && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    const double s = std::chrono::duration<double>(now - start_).count(), f = double(bytes) / double(total_);
    const int w = 30, fill = int(f * w);
    *out_ << fmt::format("\r[{}{}] {:5.1f}%  {} / {}  {} tokens  {:.1f} MB/s  ETA {:.0f} s   ", std::string(fill, '='),
                         std::string(w - fill, ' '), 100 * f, format_mb(bytes), format_mb(total_), tokens,
                         double(bytes) / 1e6 / std::max(s, 1e-9), s / std::max(f, 1e-9) - s)
          << std::flush;
  }
  void done() {
    if (tty_) *out_ << "\n";
  }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  static std::string format_mb(int64_t b) { return fmt::format("{:.1f} MB", double(b) / 1e6); }
  std::ostream* out_;
  int64_t total_;
  bool tty_;
  Clock::time_point start_ = Clock::now(), last_{};
};

}  // namespace

TokenizeStats tokenize_corpus(const TextCorpus& corpus, const Tokenizer& tok, const TokenizeOptions& o,
                              const std::function<void(std::span<const int32_t>, bool trained)>& sink) {
  TokenizeStats st;
  Progress progress(o.progress, corpus.total_bytes());
  std::vector<EncodeState> states(static_cast<size_t>(omp_get_max_threads()));
  EncodeOptions eo;
  eo.split_special = o.split_special;
  const bool cut = tok.cut_after_newline_is_safe();

  // A batch: copies of blocks (the corpus reuses its buffers), whether each ends a document, and
  // where each comes from (for errors).
  std::vector<std::string> blocks, wheres;
  std::vector<bool> ends, trained, eos_trained, continues;
  bool document_open = false;  // the last block seen did not end its document
  int64_t batch = 0;
  std::vector<Unit> units;
  std::vector<std::vector<int32_t>> out;
  auto flush = [&] {
    units.clear();
    for (size_t b = 0; b < blocks.size(); ++b) {
      const std::string_view s = blocks[b];
      size_t at = 0;
      while (at < s.size()) {
        size_t end = s.size();
        if (cut && s.size() - at > size_t(o.unit_bytes)) {  // the first cut point after the unit size
          for (size_t i = at + size_t(o.unit_bytes); i < s.size(); ++i)
            if (s[i - 1] == '\n' && is_cut_point(s, i)) {
              end = i;
              break;
            }
        }
        units.push_back({b, at, end, continues[b] || at > 0});
        at = end;
      }
    }
    out.resize(std::max(out.size(), units.size()));
    // an exception must not leave an OpenMP region: keep the first, rethrow it after
    std::exception_ptr error;
    size_t error_unit = 0;
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t u = 0; u < units.size(); ++u) {
      const Unit& x = units[u];
      out[u].clear();
      try {
        EncodeOptions uo = eo;
        uo.continues = x.continues;
        tok.encode(std::string_view(blocks[x.block]).substr(x.begin, x.end - x.begin), out[u],
                   states[size_t(omp_get_thread_num())], uo);
      } catch (...) {
#pragma omp critical
        if (!error || u < error_unit) error = std::current_exception(), error_unit = u;
      }
    }
    if (error) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        fail("{}: {}", wheres[units[error_unit].block], e.what());
      }
    }
    size_t u = 0;
    for (size_t b = 0; b < blocks.size(); ++b) {
      for (; u < units.size() && units[u].block == b; ++u) {
        sink(out[u], trained[b]);
        st.tokens += int64_t(out[u].size());
        if (!trained[b]) st.untrained += int64_t(out[u].size());
      }
      if (ends[b]) {
        ++st.documents;
        if (o.eos >= 0) {
          const int32_t e = o.eos;
          sink(std::span<const int32_t>(&e, 1), eos_trained[b]);
          ++st.tokens;
          if (!eos_trained[b]) ++st.untrained;
        }
      }
      st.bytes += int64_t(blocks[b].size());
    }
    progress.update(std::min(st.bytes, corpus.total_bytes()), st.tokens);
    blocks.clear(), ends.clear(), trained.clear(), eos_trained.clear(), continues.clear(), wheres.clear();
    batch = 0;
  };
  corpus.for_each([&](const TextBlock& b) {
    blocks.emplace_back(b.text);
    ends.push_back(b.ends_document);
    continues.push_back(document_open);
    document_open = !b.ends_document;
    trained.push_back(b.trained);
    eos_trained.push_back(b.eos_trained);
    wheres.push_back(*b.where);
    batch += int64_t(b.text.size());
    if (batch >= o.batch_bytes) flush();
  });
  flush();
  st.seconds = progress.seconds();
  progress.update(corpus.total_bytes(), st.tokens, true);
  progress.done();
  return st;
}

}  // namespace oomb
