// A mix of training data (--data given more than once, --data-weights; data/mixed_tokens.h): the
// rule that gives each window its source, worked by hand; every prefix of a run within one window
// of each share; a window read through the mix is its source's own; each source's loss in
// --metrics and TensorBoard is the loss of its windows alone; checkpoints record each source's
// position and resume the mix bit for bit; another mix is refused, naming the flag. Several
// held-out sets (--eval-data given more than once; data/window_sets.h): each set's loss its own.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <map>
#include <random>

#include "cli/train_data.h"
#include "data/mixed_tokens.h"
#include "metrics_plan.h"
#include "model_fixture.h"
#include "tensorboard_reader.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

// A source of n ids, id i = (base + i) % 97 (distinct per source), packed as --data packs a file.
std::unique_ptr<PackedTokens> source(int64_t n, uint32_t base, const PackingOptions& o = {}) {
  std::vector<uint32_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(uint32_t((base + uint32_t(i)) % 97));
  return std::make_unique<PackedTokens>(std::make_unique<MemoryTokens>(ids, fmt::format("s{}", base)), 128, o);
}

MixedTokens mix_of(const std::vector<int64_t>& weights, const PackingOptions& o = {}) {
  std::vector<MixSource> s;
  for (size_t i = 0; i < weights.size(); ++i) s.push_back({source(500 + 100 * int64_t(i), uint32_t(10 * i), o),
                                                            fmt::format("s{}.bin", i), weights[i]});
  return MixedTokens(std::move(s));
}

}  // namespace

// Window n goes, among the sources with c_s < w_s (n + 1) (c_s: its windows so far), to the one whose
// next window is due first, (c_s + 1) / w_s, the first on a tie. Worked by hand: 3:1 gives a a a b
// (at n = 2 both are due at 1: a; at n = 3 a is at its share), twice; 1:1:1 gives 0 1 2 0 1 2; 1:2
// gives 1 0 1 (source 1 due at 1/2 first; then both at 1: source 0; then 0 is at its share), twice.
TEST(DataMix, EachWindowsSourceFollowsTheRule) {
  MixedTokens m = mix_of({3, 1});
  const std::vector<std::pair<int, int64_t>> want = {{0, 0}, {0, 1}, {0, 2}, {1, 0}, {0, 3}, {0, 4}, {0, 5}, {1, 1}};
  for (int64_t w = 0; w < int64_t(want.size()); ++w) EXPECT_EQ(m.locate(w), want[size_t(w)]) << "window " << w;
  MixedTokens three = mix_of({1, 1, 1});
  for (int64_t w = 0; w < 6; ++w) EXPECT_EQ(three.locate(w), std::make_pair(int(w % 3), w / 3)) << "window " << w;
  MixedTokens heavy_second = mix_of({1, 2});
  const std::vector<int> order = {1, 0, 1, 1, 0, 1};
  for (int64_t w = 0; w < 6; ++w) EXPECT_EQ(heavy_second.source_of(w), order[size_t(w)]) << "window " << w;
  EXPECT_EQ(m.share(0), 0.75);
  EXPECT_EQ(m.share(1), 0.25);
}

// After any n windows, each source has given within one window of share x n (no generator: the
// proportions hold in every step, not on average), with many sources too (the skewed sets of four
// and more drift past one window under the largest-deficit rule).
TEST(DataMix, EveryPrefixIsWithinOneWindowOfEachShare) {
  std::vector<std::vector<int64_t>> sets = {{7, 3},          {1, 2, 3, 4},          {1, 99},   {1, 1000, 1000},
                                            {1, 2},          {3001, 1001},          {1, 5, 21, 21},
                                            {1, 50, 1000, 1000}, {1, 1, 100, 50, 3}};
  std::vector<int64_t> powers;
  for (int i = 0; i < 12; ++i) powers.push_back(int64_t(1) << i);
  sets.push_back(powers);
  std::mt19937_64 g(5);
  for (int k = 0; k < 20; ++k) {  // random sets of 2 to 16 sources, weights over four orders of magnitude
    std::vector<int64_t> w(2 + g() % 15);
    for (int64_t& x : w) {  // (each draw its own statement: the order is the language's)
      const int64_t big = int64_t(g() % 10000), on = int64_t(g() % 2), small = int64_t(g() % 10);
      x = 1 + big * on + small;
    }
    sets.push_back(w);
  }
  for (const std::vector<int64_t>& weights : sets) {
    MixedTokens m = mix_of(weights);
    std::vector<int64_t> count(weights.size(), 0);
    double worst = 0;
    for (int64_t n = 1; n <= 20000; ++n) {
      ++count[size_t(m.locate(n - 1).first)];
      for (size_t s = 0; s < weights.size(); ++s) worst = std::max(worst, std::abs(double(count[s]) - m.share(int(s)) * double(n)));
    }
    EXPECT_LT(worst, 1.0) << fmt::format("weights {}", fmt::join(weights, ","));
    EXPECT_EQ(m.windows_before(20000), count);
  }
}

// The rule walked plainly, window after window from the start: each window's source and index.
static std::vector<std::pair<int, int64_t>> walk_plainly(const std::vector<int64_t>& p, int64_t windows) {
  int64_t P = 0;
  for (int64_t x : p) P += x;
  std::vector<int64_t> c(p.size(), 0);
  std::vector<std::pair<int, int64_t>> out;
  for (int64_t n = 0; n < windows; ++n) {
    int best = -1;
    for (size_t s = 0; s < p.size(); ++s)
      if (c[s] * P < p[s] * (n + 1) && (best < 0 || (c[s] + 1) * p[size_t(best)] < (c[size_t(best)] + 1) * p[s]))
        best = int(s);
    out.emplace_back(best, c[size_t(best)]++);
  }
  return out;
}

// Windows asked for in any order (a resumed run, dp ranks, a step's windows counted then read) are
// those of the plain walk in order (the mix's cursor, its saved counts, its period), and
// windows_before counts them: a period of 10 windows, and one of 4002 (over the saved counts).
TEST(DataMix, AnyOrderOfReadsGivesTheSameWindows) {
  for (const std::vector<int64_t>& p : {std::vector<int64_t>{2, 5, 3}, std::vector<int64_t>{3001, 1001}}) {
    const int64_t W = 10000;
    const std::vector<std::pair<int, int64_t>> in_order = walk_plainly(p, W);
    std::vector<int64_t> order(static_cast<size_t>(W));
    for (int64_t w = 0; w < W; ++w) order[size_t(w)] = w;
    std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
    MixedTokens jumps = mix_of(p);
    for (int64_t w : order) ASSERT_EQ(jumps.locate(w), in_order[size_t(w)]) << "window " << w;
    for (int64_t w : {int64_t(0), int64_t(1), int64_t(10), int64_t(1023), int64_t(1024), int64_t(4002), int64_t(4003),
                      int64_t(9999)}) {
      std::vector<int64_t> want(p.size(), 0);
      for (int64_t v = 0; v < w; ++v) ++want[size_t(in_order[size_t(v)].first)];
      EXPECT_EQ(jumps.windows_before(w), want) << "window " << w;
    }
  }
}

// Window w of the mix reads as window k of its source: ids, targets and their count, shuffled
// sources too.
TEST(DataMix, AWindowIsItsSourcesWindow) {
  PackingOptions o;
  o.eos = 5, o.shuffle = true, o.seed = 3;
  MixedTokens m = mix_of({2, 1}, o);
  const int64_t N = 48;
  for (int64_t w = 0; w < 40; ++w) {
    const auto [s, k] = m.locate(w);
    auto alone = source(500 + 100 * s, uint32_t(10 * s), o);
    std::vector<int32_t> ids(N), tg(N), want_ids(N), want_tg(N);
    m.read(w, N, 0, N, ids.data(), tg.data());
    alone->read(k, N, 0, N, want_ids.data(), want_tg.data());
    EXPECT_EQ(ids, want_ids) << "window " << w;
    EXPECT_EQ(tg, want_tg) << "window " << w;
    EXPECT_EQ(m.targets_in(w, N), alone->targets_in(k, N)) << "window " << w;
    EXPECT_EQ(m.source_of(w), s);
  }
  EXPECT_THAT(m.describe(), HasSubstr("66.67% of the windows: s0"));
}

// open_train_data shuffles each source with its own seed, the first with --seed itself: a mix's first
// source reads as the file alone does; the same file as the second source takes another order.
TEST(DataMix, EachSourceShufflesWithItsOwnSeed) {
  const fs::path dir = temp_dir("_data_mix_seeds");
  write_tokens(dir / "a.bin", 4000, 128, 21);
  DataOptions o;
  o.packing.eos = 7, o.packing.shuffle = true, o.packing.seed = 4;
  const std::string a = (dir / "a.bin").string();
  cli::TrainData alone = cli::open_train_data({a}, "", 128, o), mix = cli::open_train_data({a, a}, "1,1", 128, o);
  ASSERT_TRUE(mix.mix);
  const int64_t N = 64;
  std::vector<int32_t> x(N), y(N), tg(N);
  bool differ = false;
  for (int64_t k = 0; k < 120; ++k) {  // (two epochs of 62 windows)
    alone.one->read(k, N, 0, N, x.data(), tg.data());
    mix.mix->source(0).read(k, N, 0, N, y.data(), tg.data());
    EXPECT_EQ(x, y) << "window " << k;
    mix.mix->source(1).read(k, N, 0, N, y.data(), tg.data());
    differ = differ || x != y;
  }
  EXPECT_TRUE(differ) << "the second source took the first one's order";
}

TEST(DataMix, WeightsAreChecked) {
  // read exactly, as whole numbers in their ratio, in lowest terms
  using W = std::vector<int64_t>;
  EXPECT_EQ(parse_data_weights("0.7,0.3", 2), (W{7, 3}));
  EXPECT_EQ(parse_data_weights("0.6,0.2", 2), (W{3, 1}));
  EXPECT_EQ(parse_data_weights("3,1", 2), (W{3, 1}));
  EXPECT_EQ(parse_data_weights("1.5,0.25", 2), (W{6, 1}));
  EXPECT_EQ(parse_data_weights("3,1,2e-1", 3), (W{15, 5, 1}));
  EXPECT_EQ(parse_data_weights("1E-3,1,.5", 3), (W{1, 1000, 500}));
  EXPECT_EQ(parse_data_weights("0.7, 0.3", 2), (W{7, 3}));  // (spaces after commas)
  EXPECT_EQ(parse_data_weights("1000000000000000000,1e18", 2), (W{1, 1}));  // (trailing zeros are not digits kept)
  EXPECT_EQ(parse_data_weights("0.70000000000000000000,3e-1", 2), (W{7, 3}));
  EXPECT_EQ(parse_data_weights("1e-99999999,1e-99999999", 2), (W{1, 1}));
  for (const char* bad : {"", "0.7,", ",0.3", "0.7;0.3", "abc,1", "0,1", "0.000,1", "-1,2", "+1,2", "inf,1", "nan,1",
                          "1e999,1", "1e,1", "0x10,1", "1.2.3,1", "1234567890123456,1", "1e16,1", "1e-16,1"})
    EXPECT_THAT(error_of([&] { parse_data_weights(bad, 2); }), HasSubstr(fmt::format("--data-weights {}:", bad)))
        << bad;
  EXPECT_THAT(error_of([&] { parse_data_weights("1,2,3", 2); }), HasSubstr("3 weights for 2 --data sources"));
  std::vector<MixSource> one;
  one.push_back({source(100, 0), "a", 1});
  EXPECT_THAT(error_of([&] { MixedTokens m(std::move(one)); }), HasSubstr("two sources or more"));
}

namespace {

struct MixRun {
  fs::path dir;
  std::string d;
  explicit MixRun(const std::string& hint) : dir(temp_dir(hint)), d(dir.string()) {
    EXPECT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --out {}/m", d)).code, 0);
    write_tokens(dir / "a.bin", 3000, 128, 11);
    write_tokens(dir / "b.bin", 1000, 128, 12);
  }
  CmdResult train(const std::string& data, const std::string& flags) const {
    return oomb_cmd(dir, fmt::format("train --model {0}/m {1} --seq-len 64 --chunk-size 32 --page-size 16 --lr 0.01 {2}",
                                     d, data, flags));
  }
  std::string both() const { return fmt::format("--data {0}/a.bin --data {0}/b.bin", d); }
};

}  // namespace

// Each source's loss and accuracy in --metrics are those of its windows alone: the mix's first step
// (3:1, four windows: a0 a1 a2 b0) against runs on a.bin (its first three windows) and b.bin (its
// first) from the same weights; the step's loss is their mean by targets; TensorBoard has them.
TEST(DataMix, EachSourcesLossIsItsWindowsLoss) {
  MixRun r("_data_mix_loss");
  CmdResult c = r.train(r.both(), fmt::format("--data-weights 3,1 --steps 1 --grad-accum 4 --metrics {0}/mix.jsonl "
                                              "--tensorboard {0}/tb", r.d));
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_THAT(c.out, HasSubstr("a.bin: 75% of the windows, 3 windows"));
  EXPECT_THAT(c.out, HasSubstr("b.bin: 25% of the windows, 1 window,"));
  c = r.train(fmt::format("--data {}/a.bin", r.d), fmt::format("--steps 1 --grad-accum 3 --metrics {}/a.jsonl", r.d));
  ASSERT_EQ(c.code, 0) << c.out;
  c = r.train(fmt::format("--data {}/b.bin", r.d), fmt::format("--steps 1 --metrics {}/b.jsonl", r.d));
  ASSERT_EQ(c.code, 0) << c.out;
  const nlohmann::json mix = metrics_lines(r.dir / "mix.jsonl").at(0), a = metrics_lines(r.dir / "a.jsonl").at(0),
                       b = metrics_lines(r.dir / "b.jsonl").at(0);
  ASSERT_EQ(mix["sources"].size(), 2u);
  const nlohmann::json& sa = mix["sources"][0];
  const nlohmann::json& sb = mix["sources"][1];
  EXPECT_EQ(sa["data"], r.d + "/a.bin");
  EXPECT_EQ(sa["windows"], 3);
  EXPECT_EQ(sb["windows"], 1);
  EXPECT_EQ(sa["targets"], a["targets"]);
  EXPECT_EQ(sb["targets"], b["targets"]);
  EXPECT_DOUBLE_EQ(sa["loss"].get<double>(), a["loss"].get<double>());
  EXPECT_DOUBLE_EQ(sb["loss"].get<double>(), b["loss"].get<double>());
  EXPECT_DOUBLE_EQ(sa["accuracy"].get<double>(), a["accuracy"].get<double>());
  EXPECT_DOUBLE_EQ(sb["accuracy"].get<double>(), b["accuracy"].get<double>());
  const double ta = sa["targets"].get<double>(), tb = sb["targets"].get<double>();
  EXPECT_NEAR(mix["loss"].get<double>(), (sa["loss"].get<double>() * ta + sb["loss"].get<double>() * tb) / (ta + tb),
              1e-12);
  EXPECT_NE(sa["loss"].get<double>(), sb["loss"].get<double>());  // (the two are told apart)
  std::vector<TbEvent> events;
  for (const auto& f : fs::directory_iterator(r.dir / "tb")) events = read_events(read_text(f.path()));
  bool found = false;
  for (const TbEvent& e : events)
    if (e.scalars.count("train/loss/a.bin")) {
      found = true;
      EXPECT_FLOAT_EQ(e.scalars.at("train/loss/a.bin"), float(sa["loss"].get<double>()));
      EXPECT_FLOAT_EQ(e.scalars.at("train/loss/b.bin"), float(sb["loss"].get<double>()));
    }
  EXPECT_TRUE(found) << "no train/loss/a.bin in the TensorBoard events";
}

// A mix's run stopped after its first step resumes to the whole run's losses and weights bit for bit
// (shuffled sources); the checkpoint records each source's windows and position; a run with other
// weights, or the sources in another order, is refused, naming the difference; the same shares
// written otherwise resume.
TEST(DataMix, ResumesAsTheWholeRunAndRecordsEachSource) {
  MixRun r("_data_mix_resume");
  const std::string base = "--steps 4 --grad-accum 4 --shuffle --eos-id 7", flags = base + " --data-weights 3,1";
  CmdResult c = r.train(r.both(), flags + fmt::format(" --metrics {0}/whole.jsonl --out {0}/whole", r.d));
  ASSERT_EQ(c.code, 0) << c.out;
  const std::string cut = base + fmt::format(" --checkpoint-dir {0}/ck --metrics {0}/cut.jsonl --out {0}/cut", r.d);
  c = r.train(r.both(), cut + " --data-weights 3,1 --time-limit 0.001s");
  ASSERT_EQ(c.code, 75) << c.out;
  const nlohmann::json st = nlohmann::json::parse(read_text(r.dir / "ck/step-000001/state.json"));
  ASSERT_TRUE(st.contains("sources")) << st.dump();
  EXPECT_EQ(st["sources"][0]["windows"], 3);
  EXPECT_EQ(st["sources"][1]["windows"], 1);
  EXPECT_EQ(st["sources"][0]["epoch_position"], 3 * 64);
  EXPECT_EQ(st["sources"][1]["epoch_position"], 64);
  EXPECT_EQ(st["flags"]["--data-weights"], "3,1");
  EXPECT_EQ(st["data"]["path"], fmt::format("{0}/a.bin + {0}/b.bin", r.d));
  c = r.train(r.both(), base + fmt::format(" --checkpoint-dir {0}/ck --resume auto", r.d) + " --data-weights 1,1");
  EXPECT_NE(c.code, 0);
  EXPECT_THAT(c.out, HasSubstr("--data-weights is 1,1 here but 3,1 in the checkpoint"));
  c = r.train(fmt::format("--data {0}/b.bin --data {0}/a.bin", r.d),
              flags + fmt::format(" --checkpoint-dir {0}/ck --resume auto", r.d));
  EXPECT_NE(c.code, 0);
  EXPECT_THAT(c.out, HasSubstr("is not the checkpoint's data"));
  c = r.train(r.both(), cut + " --resume auto --data-weights 0.6,0.2");  // (3:1 again)
  ASSERT_EQ(c.code, 0) << c.out;
  std::vector<double> whole, resumed;
  for (const nlohmann::json& l : metrics_lines(r.dir / "whole.jsonl")) whole.push_back(l["loss"].get<double>());
  for (const nlohmann::json& l : metrics_lines(r.dir / "cut.jsonl")) resumed.push_back(l["loss"].get<double>());
  EXPECT_EQ(resumed, whole);
  EXPECT_EQ(read_text(r.dir / "cut/model.safetensors"), read_text(r.dir / "whole/model.safetensors"));
}

// Flags a mix needs, and errors that name them; a --config file's lists.
TEST(DataMix, BadFlagsAreNamed) {
  MixRun r("_data_mix_flags");
  write_bytes(r.dir / "c.toml", fmt::format("data = [\"{0}/a.bin\", \"{0}/b.bin\"]\ndata-weights = [0.6, 0.2]\n", r.d));
  CmdResult t = r.train(fmt::format("--config {}/c.toml", r.d), "--steps 1 --grad-accum 4");
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_THAT(t.out, HasSubstr("a.bin: 75% of the windows, 3 windows"));
  t = r.train(fmt::format("--data {0}/a.bin {0}/b.bin", r.d), "--steps 1");  // (one path a --data)
  EXPECT_NE(t.code, 0);
  EXPECT_THAT(t.out, HasSubstr("b.bin"));
  CmdResult c = r.train(fmt::format("--data {}/a.bin", r.d), "--steps 1 --data-weights 1");
  EXPECT_NE(c.code, 0);
  EXPECT_THAT(c.out, HasSubstr("--data-weights: only with two --data sources or more"));
  c = r.train(r.both(), "--steps 1 --data-weights 1,2,3");
  EXPECT_NE(c.code, 0);
  EXPECT_THAT(c.out, HasSubstr("--data-weights 1,2,3: 3 weights for 2 --data sources"));
  c = r.train(r.both(), "--steps 1 --data-weights 1,x");
  EXPECT_NE(c.code, 0);
  EXPECT_THAT(c.out, HasSubstr("--data-weights 1,x: 'x' is not a number > 0 written in decimal"));
  c = r.train(r.both() + fmt::format(" --data {}/missing.bin", r.d), "--steps 1");
  EXPECT_NE(c.code, 0);
  EXPECT_THAT(c.out, HasSubstr("missing.bin"));
  // the default weights: each source's share of the tokens (3000 and 1000)
  c = r.train(r.both(), "--steps 2 --grad-accum 2");
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_THAT(c.out, HasSubstr("a.bin: 75% of the windows, 3 windows"));
}

// Several held-out sets (--eval-data given more than once): each set's loss in --metrics (eval.sets),
// TensorBoard (eval/loss/<file name>) and the log is the loss of a run given that set alone, and
// the held-out loss is the mean over every set's targets (what --save-best compares).
TEST(DataMix, EachHeldOutSetsLossIsItsOwn) {
  MixRun r("_data_mix_eval");
  const std::string data = fmt::format("--data {}/a.bin", r.d), flags = "--steps 2 --eval-windows 2 --eval-every 1";
  CmdResult c = r.train(data, flags + fmt::format(" --eval-data {0}/a.bin --eval-data {0}/b.bin --metrics {0}/both.jsonl "
                                                  "--tensorboard {0}/tb --save-best {0}/best", r.d));
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_THAT(c.out, HasSubstr("held-out loss: 2 sets, every 1 steps and after the last:"));
  EXPECT_THAT(c.out, HasSubstr(fmt::format("  {}/b.bin: ", r.d)));
  for (const char* set : {"a", "b"}) {
    c = r.train(data, flags + fmt::format(" --eval-data {0}/{1}.bin --metrics {0}/{1}.jsonl", r.d, set));
    ASSERT_EQ(c.code, 0) << c.out;
  }
  const std::vector<nlohmann::json> both = metrics_lines(r.dir / "both.jsonl"), a = metrics_lines(r.dir / "a.jsonl"),
                                    b = metrics_lines(r.dir / "b.jsonl");
  ASSERT_EQ(both.size(), 2u);
  double best = 1e9;
  for (size_t k = 0; k < 2; ++k) {
    const nlohmann::json& e = both[k]["eval"];
    ASSERT_EQ(e["sets"].size(), 2u) << e.dump();
    EXPECT_EQ(e["windows"], 4);
    EXPECT_EQ(e["sets"][1]["data"], r.d + "/b.bin");
    EXPECT_EQ(e["sets"][0]["windows"], 2);
    EXPECT_DOUBLE_EQ(e["sets"][0]["loss"].get<double>(), a[k]["eval"]["loss"].get<double>()) << "step " << k;
    EXPECT_DOUBLE_EQ(e["sets"][1]["loss"].get<double>(), b[k]["eval"]["loss"].get<double>()) << "step " << k;
    EXPECT_EQ(e["sets"][1]["targets"], b[k]["eval"]["targets"]);
    const double ta = e["sets"][0]["targets"].get<double>(), tb = e["sets"][1]["targets"].get<double>();
    EXPECT_NEAR(e["loss"].get<double>(),
                (e["sets"][0]["loss"].get<double>() * ta + e["sets"][1]["loss"].get<double>() * tb) / (ta + tb), 1e-12);
    EXPECT_EQ(e["targets"].get<double>(), ta + tb);
    EXPECT_FALSE(a[k]["eval"].contains("sets"));  // (one set: as before)
    best = std::min(best, e["loss"].get<double>());
  }
  const nlohmann::json rec = nlohmann::json::parse(read_text(r.dir / "best/oomb_best.json"));
  EXPECT_EQ(rec["eval_loss"].get<double>(), best);
  EXPECT_EQ(rec["eval_data"], nlohmann::json::array({r.d + "/a.bin", r.d + "/b.bin"}));
  EXPECT_EQ(rec["eval_windows"], nlohmann::json::array({2, 2}));  // (each set's: a total would not tell splits apart)
  std::map<std::string, float> last;
  for (const auto& f : fs::directory_iterator(r.dir / "tb"))
    for (const TbEvent& ev : read_events(read_text(f.path())))
      for (const auto& [tag, v] : ev.scalars) last[tag] = v;
  ASSERT_TRUE(last.count("eval/loss/b.bin")) << "no eval/loss/b.bin in the TensorBoard events";
  EXPECT_FLOAT_EQ(last["eval/loss/b.bin"], float(both[1]["eval"]["sets"][1]["loss"].get<double>()));

  // oomb eval of the best model on the same sets (--data given twice, --windows 2 each, chunks of
  // 32): the record's loss, each set's loss as the metrics of that step, bit for bit; one set alone
  // gives that set's; the table names each set.
  size_t at = 0;
  while (at < both.size() && both[at]["eval"]["loss"].get<double>() != best) ++at;
  ASSERT_LT(at, both.size());
  const std::string eval = fmt::format("eval --model {0}/best --seq-len 64 --chunk-size 32 --page-size 16 --buckets 2 "
                                       "--windows 2 ", r.d);
  c = oomb_cmd(r.dir, eval + fmt::format("--data {0}/a.bin --data {0}/b.bin --out {0}/sets.json", r.d));
  ASSERT_EQ(c.code, 0) << c.out;
  const nlohmann::json e = nlohmann::json::parse(read_text(r.dir / "sets.json"));
  EXPECT_EQ(e["loss"].get<double>(), best);
  EXPECT_EQ(e["windows"], 4);
  EXPECT_EQ(e["targets"], both[at]["eval"]["targets"]);
  EXPECT_EQ(e["data"], nlohmann::json::array({r.d + "/a.bin", r.d + "/b.bin"}));
  ASSERT_EQ(e["sets"].size(), 2u) << e.dump();
  int64_t by_position = 0;
  for (const nlohmann::json& bucket : e["loss_by_position"]) by_position += bucket["targets"].get<int64_t>();
  EXPECT_EQ(by_position, e["targets"].get<int64_t>());
  for (size_t s = 0; s < 2; ++s) {
    SCOPED_TRACE(s);
    EXPECT_EQ(e["sets"][s]["loss"].get<double>(), both[at]["eval"]["sets"][s]["loss"].get<double>());
    EXPECT_EQ(e["sets"][s]["targets"], both[at]["eval"]["sets"][s]["targets"]);
    EXPECT_EQ(e["sets"][s]["windows"], 2);
    EXPECT_EQ(e["sets"][s]["loss_by_position"].size(), 2u);
  }
  EXPECT_EQ(e["sets"][1]["data"], r.d + "/b.bin");
  EXPECT_THAT(c.out, HasSubstr(fmt::format("{}/b.bin: loss {:.4f}", r.d, e["sets"][1]["loss"].get<double>())));
  EXPECT_THAT(c.out, HasSubstr(fmt::format("all 2 sets: loss {:.4f}", best)));
  c = oomb_cmd(r.dir, eval + fmt::format("--data {}/b.bin --json", r.d));
  ASSERT_EQ(c.code, 0) << c.out;
  const nlohmann::json alone = nlohmann::json::parse(c.out.substr(c.out.find('{')));
  EXPECT_EQ(alone["loss"], e["sets"][1]["loss"]);
  EXPECT_EQ(alone["loss_by_position"], e["sets"][1]["loss_by_position"]);
  EXPECT_FALSE(alone.contains("sets"));
  EXPECT_EQ(alone["data"], r.d + "/b.bin");
  c = oomb_cmd(r.dir, fmt::format("eval --model {0}/best --seq-len 64 --data {0}/a.bin --data {0}/b.bin --windows 2,2,2",
                                  r.d));
  EXPECT_NE(c.code, 0);
  EXPECT_THAT(c.out, HasSubstr("--windows: 3 counts for 2 --data sets"));

  // --eval-windows one count per set (3 of a.bin, 1 of b.bin), recorded per set; too many counts refused
  c = r.train(data, fmt::format("--steps 1 --eval-data {0}/a.bin --eval-data {0}/b.bin --eval-windows 3,1 --metrics "
                                "{0}/per_set.jsonl --save-best {0}/best2", r.d));
  ASSERT_EQ(c.code, 0) << c.out;
  const nlohmann::json ps = metrics_lines(r.dir / "per_set.jsonl").at(0)["eval"];
  EXPECT_EQ(ps["windows"], 4);
  EXPECT_EQ(ps["sets"][0]["windows"], 3);
  EXPECT_EQ(ps["sets"][1]["windows"], 1);
  EXPECT_EQ(nlohmann::json::parse(read_text(r.dir / "best2/oomb_best.json"))["eval_windows"],
            nlohmann::json::array({3, 1}));
  c = r.train(data, fmt::format("--steps 1 --eval-data {0}/a.bin --eval-data {0}/b.bin --eval-windows 1,1,1", r.d));
  EXPECT_NE(c.code, 0);
  EXPECT_THAT(c.out, HasSubstr("--eval-windows: 3 counts for 2 --eval-data sets"));
}
