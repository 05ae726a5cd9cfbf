// oomb eval's parts: the loss by position (each bucket equal to the sequence scored with every
// target outside it dropped) and the passkey prompts. Trained models: test_eval_trained.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "data/passkey.h"
#include "data/repeat_task.h"
#include "model/init.h"
#include "model_fixture.h"
#include "test_util.h"
#include "train/eval.h"
#include "train/passkey_eval.h"
#include "train/trainer.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;

namespace {

// Random tokens with every target kept.
class RandomTokens final : public TokenSource {
 public:
  explicit RandomTokens(int64_t vocab) : vocab_(vocab) {}
  void read(int64_t w, int64_t N, int64_t t0, int64_t n, int32_t* ids, int32_t* targets) override {
    for (int64_t i = 0; i < n; ++i) ids[i] = tok(w, t0 + i), targets[i] = tok(w, t0 + i + 1);
  }
  std::string describe() const override { return "random"; }
  int32_t tok(int64_t w, int64_t t) const { return int32_t((uint64_t(w * 7919 + t) * 2654435761ull >> 7) % uint64_t(vocab_)); }

 private:
  int64_t vocab_;
};

TEST(Eval, ChunkSizeDividesTheBucketsAndErrorsNameTheFlag) {
  EXPECT_EQ(eval_chunk_size(1024, 16, 1024), 64);
  EXPECT_EQ(eval_chunk_size(1024, 4, 100), 64);
  EXPECT_EQ(eval_chunk_size(96, 2, 40), 24);
  EXPECT_THAT(error_of([] { eval_chunk_size(100, 16, 64); }), HasSubstr("--buckets 16: must divide --seq-len 100"));
  EXPECT_THAT(error_of([] { eval_chunk_size(8, 9, 64); }), HasSubstr("--buckets 9"));
}

// Each bucket's sums equal the whole sequence scored with the targets outside the bucket dropped.
TEST(Eval, EveryBucketEqualsTheSequenceScoredOnItsPositionsAlone) {
  const auto dir = temp_dir();
  const ModelConfig cfg = write_tiny_model(dir, tiny_config_json("llama", 2), 3);
  auto be = make_cpu_backend();
  const int64_t N = 96, B = 4, C = eval_chunk_size(N, B, 16);
  ASSERT_EQ(C, 12);
  Model m(cfg, *be, ChunkPlan{C, 16});
  load_for_training(m, dir);
  RandomTokens data(cfg.vocab);
  const EvalResult r = evaluate_by_position(m, data, N, 2, B);
  ASSERT_EQ(r.buckets.size(), size_t(B));
  double sum = 0;
  for (size_t b = 0; b < r.buckets.size(); ++b) {
    double loss = 0;
    int64_t targets = 0, correct = 0;
    for (int64_t w = 0; w < 2; ++w) {
      std::vector<int32_t> ids(N), tg(N);
      data.window(w, N, ids.data(), tg.data());
      for (int64_t t = 0; t < N; ++t)
        if (t < r.buckets[b].begin || t >= r.buckets[b].end) tg[size_t(t)] = -1;
      const LossStats st = m.evaluate(ids.data(), tg.data(), N);
      loss += st.loss_sum, targets += st.targets, correct += st.correct;
    }
    EXPECT_EQ(r.buckets[b].begin, int64_t(b) * 24);
    EXPECT_EQ(r.buckets[b].targets, targets);
    EXPECT_EQ(r.buckets[b].correct, correct);
    EXPECT_NEAR(r.buckets[b].loss_sum, loss, 1e-9 * loss) << "bucket " << b;
    sum += r.buckets[b].loss_sum;
  }
  EXPECT_EQ(r.targets, 2 * N);
  EXPECT_NEAR(sum, r.loss_sum, 1e-9 * sum);
  EXPECT_NEAR(r.perplexity(), std::exp(r.loss_sum / double(r.targets)), 1e-12 * r.perplexity());
}

TEST(Passkey, TokenPromptsHoldTheKeyAtTheDepthAsked) {
  const PasskeyPrompts pp = PasskeyPrompts::tokens(61, 5);
  for (double depth : {0.0, 0.25, 0.5, 1.0}) {
    const PasskeyPrompt p = pp.make(200, depth, 1, 2);
    ASSERT_EQ(p.ids.size(), 200u);
    ASSERT_EQ(p.key.size(), 5u);
    const int64_t F = 200 - 7;  // mark + 5 digits, and the final mark
    EXPECT_EQ(p.needle_at, std::llround(depth * double(F)));
    EXPECT_EQ(p.ids[size_t(p.needle_at)], 10);
    EXPECT_EQ(p.ids.back(), 10);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(p.ids[size_t(p.needle_at + 1 + i)], p.key[size_t(i)] - '0');
    int64_t marks = 0, digits = 0;
    for (int32_t id : p.ids) marks += id == 10, digits += id < 10;
    EXPECT_EQ(marks, 2);
    EXPECT_EQ(digits, 5);  // the digits appear in the needle only
    EXPECT_TRUE(pp.correct(p, p.answer));
    std::vector<int32_t> wrong = p.answer;
    wrong[4] = (wrong[4] + 1) % 10;
    EXPECT_FALSE(pp.correct(p, wrong));
  }
  EXPECT_NE(pp.make(200, 0.5, 1, 2).key + pp.make(200, 0.5, 1, 3).key + pp.make(200, 0.5, 1, 4).key,
            pp.make(200, 0.5, 1, 2).key + pp.make(200, 0.5, 1, 2).key + pp.make(200, 0.5, 1, 2).key);
  EXPECT_THAT(error_of([&] { pp.make(6, 0.5, 1, 2); }), HasSubstr("--lengths 6: too short"));
  EXPECT_THAT(error_of([] { PasskeyPrompts::tokens(11, 5); }), HasSubstr("at least 12"));
}

TEST(Passkey, TextPromptsWithARealTokenizer) {
  const auto path = npm_tokenizer_json("qwen3");
  if (path.empty()) OOMB_MISSING_REFERENCE(npm_missing_reason("qwen3"));
  const Tokenizer tok = Tokenizer::load(path);
  const PasskeyPrompts pp = PasskeyPrompts::text(&tok, 5);
  for (double depth : {0.0, 0.5, 1.0}) {
    const PasskeyPrompt p = pp.make(1000, depth, 7, 1);
    ASSERT_EQ(p.ids.size(), 1000u);
    const std::string text = tok.decode(p.ids);
    const size_t at = text.find("The pass key is " + p.key + ". Remember it.");
    ASSERT_NE(at, std::string::npos) << text;
    EXPECT_NEAR(double(at) / double(text.size()), depth, 0.2);
    EXPECT_THAT(text, ::testing::EndsWith("What is the pass key? The pass key is"));
    EXPECT_TRUE(pp.correct(p, tok.encode(" " + p.key + ". The")));
    EXPECT_FALSE(pp.correct(p, tok.encode(" " + p.key + "7")));
    EXPECT_FALSE(pp.correct(p, tok.encode(" 1" + p.key)));
  }
}

}  // namespace

// oomb eval --lora: a trained adapter on its base scores as the merged model (oomb merge) does,
// within fp32 rounding (W x + s B (A x) against (W + s B A) x); the base alone scores otherwise.
TEST(Eval, LoraAdapterOnItsBaseScoresAsTheMergedModel) {
  const auto dir = temp_dir();
  const std::string d = dir.string();
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --seed 3 --out {}/m", d)).code, 0);
  write_tokens(dir / "t.bin", 4000, 120, 4);
  CmdResult r = oomb_cmd(dir, fmt::format("train --model {0}/m --data {0}/t.bin --seq-len 128 --chunk-size 32 --steps 4 "
                                          "--lr 5e-3 --lora-rank 4 --lora-targets q,v,down --out {0}/a", d));
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_EQ(oomb_cmd(dir, fmt::format("merge --model {0}/m --lora {0}/a --out {0}/merged", d)).code, 0);
  const std::string eval = fmt::format("eval --data {}/t.bin --seq-len 128 --buckets 2 --chunk-size 32 --windows 3 --json",
                                       d);
  auto loss = [&](const std::string& args) {
    const CmdResult e = oomb_cmd(dir, eval + " " + args);
    EXPECT_EQ(e.code, 0) << e.out;
    const size_t at = e.out.find("{\n");
    const auto j = nlohmann::json::parse(e.out.substr(at == std::string::npos ? 0 : at), nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << e.out;
    return j.is_discarded() ? 0.0 : j["loss"].get<double>();
  };
  const double adapted = loss(fmt::format("--model {0}/m --lora {0}/a", d)), merged = loss(fmt::format("--model {}/merged", d)),
               base = loss(fmt::format("--model {}/m", d));
  std::cout << fmt::format("eval loss: base + adapter {:.7f}, merged {:.7f}, base alone {:.7f}", adapted, merged, base)
            << std::endl;
  EXPECT_NEAR(adapted, merged, 1e-5 * merged);
  EXPECT_GT(std::abs(adapted - base), 1e-3 * base);  // control: the adapter changed the model
}
