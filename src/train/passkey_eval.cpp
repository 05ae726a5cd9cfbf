#include "train/passkey_eval.h"

#include <fmt/format.h>
#include <random>

#include "core/error.h"
#include "train/sampling.h"

namespace oomb {

double PasskeyResult::mean_accuracy() const {
  int64_t h = 0, n = 0;
  for (const auto& row : hits)
    for (int64_t x : row) h += x, n += trials;
  return n ? double(h) / double(n) : 0.0;
}

// Feeds the prompt in chunks, then decodes the answer greedily.
static std::vector<int32_t> answer(Model& model, const std::vector<int32_t>& prompt, int64_t tokens) {
  const int64_t C = model.plan().chunk, V = model.config().vocab;
  std::vector<float> logits(size_t(V), 0.0f);
  std::mt19937_64 unused(0);
  model.begin_decode(int64_t(prompt.size()) + tokens);
  for (size_t i = 0; i < prompt.size(); i += size_t(C))
    model.decode(prompt.data() + i, std::min<int64_t>(C, int64_t(prompt.size() - i)), logits.data());
  std::vector<int32_t> out;
  for (int64_t k = 0; k < tokens; ++k) {
    out.push_back(sample_next(logits.data(), V, {}, unused));
    if (k + 1 < tokens) model.decode(&out.back(), 1, logits.data());
  }
  model.end_decode();
  return out;
}

PasskeyResult run_passkey(Model& model, const PasskeyPrompts& prompts, const std::vector<int64_t>& lengths,
                          const std::vector<double>& depths, int64_t trials, uint64_t seed, std::ostream* log) {
  OOMB_CHECK(!lengths.empty() && !depths.empty(), "--passkey: give at least one length and one depth");
  OOMB_CHECK(trials >= 1, "--trials {}: must be at least 1", trials);
  PasskeyResult r{lengths, depths, trials, {}};
  for (size_t l = 0; l < lengths.size(); ++l) {
    r.hits.emplace_back(depths.size(), 0);
    for (size_t d = 0; d < depths.size(); ++d) {
      for (int64_t t = 0; t < trials; ++t) {
        const PasskeyPrompt p = prompts.make(lengths[l], depths[d], seed, uint64_t(l * 1000003 + d * 1009) * 131 + uint64_t(t));
        r.hits[l][d] += prompts.correct(p, answer(model, p.ids, prompts.answer_tokens())) ? 1 : 0;
      }
      if (log)
        *log << fmt::format("length {} depth {}: {}/{} keys retrieved", lengths[l], depths[d], r.hits[l][d], trials)
             << std::endl;
    }
  }
  return r;
}

nlohmann::json to_json(const PasskeyResult& r, const std::string& form) {
  nlohmann::json acc = nlohmann::json::array();
  for (size_t l = 0; l < r.lengths.size(); ++l) {
    nlohmann::json row = nlohmann::json::array();
    for (size_t d = 0; d < r.depths.size(); ++d) row.push_back(r.accuracy(l, d));
    acc.push_back(row);
  }
  return {{"passkey", {{"form", form}, {"lengths", r.lengths}, {"depths", r.depths}, {"trials", r.trials},
                       {"accuracy", acc}, {"hits", r.hits}, {"mean_accuracy", r.mean_accuracy()}}}};
}

std::string format_table(const PasskeyResult& r) {
  std::string s = fmt::format("{:>10}", "length");
  for (double d : r.depths) s += fmt::format(" {:>7}", fmt::format("d={:g}", d));
  s += "\n";
  for (size_t l = 0; l < r.lengths.size(); ++l) {
    s += fmt::format("{:>10}", r.lengths[l]);
    for (size_t d = 0; d < r.depths.size(); ++d) s += fmt::format(" {:>6.0f}%", 100 * r.accuracy(l, d));
    s += "\n";
  }
  return s + fmt::format("mean accuracy {:.1f}% over {} prompts per cell\n", 100 * r.mean_accuracy(), r.trials);
}

}  // namespace oomb
