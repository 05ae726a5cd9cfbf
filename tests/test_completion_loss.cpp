// Prompt-completion data (--prompt-field, --completion-field): each JSON-lines record is a document
// whose prompt is context only, the loss over its completion and the EOS after it; and the
// trainer's loss, the mean over every target of a step, so that a window holding fewer targets
// weighs less.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/backend.h"
#include "core/error.h"
#include "data/loss_mask.h"
#include "data/open_data.h"
#include "metrics_plan.h"
#include "model_fixture.h"
#include "test_util.h"
#include "tokenizer_fixture.h"
#include "train/trainer.h"
#include "train_steps.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

constexpr int32_t kEos = 7;  // (a byte no record holds)

// Records of a prompt of letters and a completion of digits (so that a byte's id says which it is),
// of lengths cycling through 1..13 and 0..6 (some completions empty); their byte-level stream
// (prompt, completion, EOS) into *stream.
std::string prompt_records(int n, std::vector<int32_t>* stream) {
  std::string jl;
  for (int i = 0; i < n; ++i) {
    const std::string p(size_t(1 + (i * 5) % 13), char('a' + i % 26)), c(size_t((i * 3) % 7), char('0' + i % 10));
    jl += nlohmann::json({{"q", p}, {"a", c}, {"other", i}}).dump() + "\n";
    for (char ch : p + c) stream->push_back(int32_t(uint8_t(ch)));
    stream->push_back(kEos);
  }
  return jl;
}

bool is_prompt_id(int32_t id) { return id >= 'a' && id <= 'z'; }

std::unique_ptr<PackedTokens> open_records(const fs::path& dir, bool fields, bool shuffle) {
  DataOptions d;
  d.tokenizer = dir / "tok.json";
  if (fields) d.corpus.prompt_field = "q", d.corpus.completion_field = "a";
  else d.corpus.text_field = "q";  // (only to open: its stream is not compared)
  d.packing = {kEos, shuffle, 7, false};
  return open_training_data(dir / (fields ? "r.jsonl" : "all.jsonl"), 300, d);
}

}  // namespace

// The stream is every record's prompt, completion and EOS; a target is ignored exactly where the
// token it predicts is a prompt's, in order and shuffled (the mask follows the documents),
// across window edges and where the stream wraps; targets_in counts what read gives.
TEST(CompletionLoss, PromptsAreContextOnly) {
  const fs::path dir = temp_dir("_completion_data");
  write_bytes(dir / "tok.json", byte_tokenizer_json({}).dump());
  std::vector<int32_t> stream;
  write_bytes(dir / "r.jsonl", prompt_records(40, &stream));
  // the same documents as whole texts: the stream without a mask
  std::string all;
  for (int i = 0, at = 0; i < 40; ++i) {
    std::string text;
    for (; stream[size_t(at)] != kEos; ++at) text += char(stream[size_t(at)]);
    ++at;
    all += nlohmann::json({{"q", text}}).dump() + "\n";
  }
  write_bytes(dir / "all.jsonl", all);
  const int64_t N = 37, L = int64_t(stream.size());
  for (const bool shuffle : {false, true}) {
    SCOPED_TRACE(shuffle ? "shuffled" : "in order");
    auto masked = open_records(dir, true, shuffle), plain = open_records(dir, false, shuffle);
    ASSERT_NE(masked->mask(), nullptr);
    EXPECT_EQ(plain->mask(), nullptr);
    ASSERT_EQ(masked->stream_size(), L);
    int64_t trained = 0;
    for (int32_t id : stream) trained += !is_prompt_id(id);
    EXPECT_EQ(masked->mask()->trained(), trained);
    if (!shuffle) {
      std::vector<uint32_t> got(static_cast<size_t>(L));
      masked->stream(0, L, got.data());
      EXPECT_EQ(std::vector<int32_t>(got.begin(), got.end()), stream);
    }
    int64_t ignored_seen = 0, kept_seen = 0;
    for (int64_t w = 0; w < 3 * L / N; ++w) {  // three epochs: the stream wraps, epochs reorder
      std::vector<int32_t> ids(N), tg(N), ids0(N), tg0(N);
      masked->window(w, N, ids.data(), tg.data());
      plain->window(w, N, ids0.data(), tg0.data());
      ASSERT_EQ(ids, ids0) << "window " << w;
      int64_t count = 0;
      for (int64_t i = 0; i < N; ++i) {
        if (is_prompt_id(tg0[size_t(i)])) {
          EXPECT_EQ(tg[size_t(i)], -1) << "window " << w << " position " << i;
          ++ignored_seen;
        } else {
          EXPECT_EQ(tg[size_t(i)], tg0[size_t(i)]) << "window " << w << " position " << i;
          ++kept_seen, ++count;
        }
      }
      EXPECT_EQ(masked->targets_in(w, N), count) << "window " << w;
      EXPECT_EQ(plain->targets_in(w, N), N);
      // --doc-mask: nor the targets whose input is EOS
      const int64_t eos_inputs = std::count(ids.begin(), ids.end(), kEos);
      EXPECT_EQ(plain->targets_in(w, N, kEos), N - eos_inputs) << "window " << w;
      int64_t after_eos = 0;  // (masked: the target after an EOS is a prompt's, already ignored)
      for (int64_t i = 0; i < N; ++i) after_eos += ids[size_t(i)] == kEos && tg[size_t(i)] >= 0;
      EXPECT_EQ(after_eos, 0);
      EXPECT_EQ(masked->targets_in(w, N, kEos), count) << "window " << w;
      // a part of a window reads as the whole window's part
      std::vector<int32_t> part_ids(10), part_tg(10);
      masked->read(w, N, 13, 10, part_ids.data(), part_tg.data());
      EXPECT_EQ(part_tg, std::vector<int32_t>(tg.begin() + 13, tg.begin() + 23));
    }
    EXPECT_GT(ignored_seen, 100);
    EXPECT_GT(kept_seen, 100);
  }
}

// The checkpoint's data identity: the ids' fingerprint alone without a mask (older checkpoints
// resume), another with one, and another with another mask.
TEST(CompletionLoss, FingerprintCoversTheMask) {
  const MemoryTokens ids(std::vector<uint32_t>{1, 2, 3, 4, 5, 6}, "ids");
  LossMaskBuilder a, b;
  a.append(2, false), a.append(4, true);
  b.append(3, false), b.append(3, true);
  const LossMask ma(a), mb(b);
  EXPECT_EQ(ma.trained(), 4);
  std::vector<uint8_t> bits(6);
  ma.get(0, 6, bits.data());
  EXPECT_EQ(bits, (std::vector<uint8_t>{0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(data_fingerprint(ids, nullptr), token_fingerprint(ids));
  EXPECT_NE(data_fingerprint(ids, &ma), token_fingerprint(ids));
  EXPECT_NE(data_fingerprint(ids, &ma), data_fingerprint(ids, &mb));
  // bits across a word's edge
  LossMaskBuilder c;
  c.append(63, true), c.append(2, false), c.append(70, true);
  const LossMask mc(c);
  std::vector<uint8_t> at(4);
  mc.get(62, 4, at.data());
  EXPECT_EQ(at, (std::vector<uint8_t>{1, 0, 0, 1}));
  EXPECT_EQ(mc.trained(), 133);
}

namespace {
// Window w: step_tokens(N + 1, 40 + w), its first skip(w) targets ignored.
class Masked final : public TokenSource {
 public:
  Masked(int64_t vocab, std::function<int64_t(int64_t)> skip) : vocab_(vocab), skip_(std::move(skip)) {}
  void read(int64_t w, int64_t N, int64_t t0, int64_t n, int32_t* ids, int32_t* targets) override {
    const std::vector<int32_t> t = step_tokens(N + 1, 40 + uint64_t(w), vocab_);
    for (int64_t i = 0; i < n; ++i) {
      ids[i] = t[size_t(t0 + i)];
      targets[i] = t0 + i < skip_(w) ? -1 : t[size_t(t0 + i + 1)];
    }
  }
  std::string describe() const override { return "masked windows"; }

 private:
  int64_t vocab_;
  std::function<int64_t(int64_t)> skip_;
};

std::vector<float> host_params(Model& m) {
  std::vector<float> p(static_cast<size_t>(m.params().flat().numel()));
  m.backend().copy(p.data(), Tier::Host, m.params().flat().data, m.params().flat().tier, p.size() * 4);
  return p;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - double(b[i])));
  return worst;
}
}  // namespace

// Two accumulated windows holding 10 and 60 targets: the step's gradient is their sum over all 70
// targets / 70, the mean-loss gradients of the windows (each from a model of its own) weighted 1/7
// and 6/7, not 1/2 each (the mean of the windows' means, the control); the loss is 70 targets'
// mean; the metrics line says 70.
TEST(CompletionLoss, StepIsTheMeanOverEveryTarget) {
  const fs::path dir = temp_dir("_completion_step");
  write_tiny_model(dir, tiny_config_json("llama", 2), 5);
  const ModelConfig cfg = load_config(dir);
  const int64_t N = 64;
  Masked data(cfg.vocab, [&](int64_t w) { return w == 0 ? N - 10 : N - 60; });
  auto be = make_cpu_backend();
  std::vector<float> g[2];
  double loss_sum[2];
  for (int64_t w = 0; w < 2; ++w) {
    Model m(cfg, *be, ChunkPlan{16, 8});
    load_for_training(m, dir);
    const LossStats ls = m.forward_backward(
        [&](int64_t t0, int64_t n, int32_t* ids, int32_t* tg) { data.read(w, N, t0, n, ids, tg); }, N, 1.0f);
    ASSERT_EQ(ls.targets, w == 0 ? 10 : 60);
    g[w] = host_grads(m);
    loss_sum[w] = ls.loss_sum;
  }
  Model m(cfg, *be, ChunkPlan{16, 8});
  load_for_training(m, dir);
  TrainOptions o{N, 1, 2, 1};
  o.optim.kind = "sgd", o.optim.lr = 1e-2f, o.optim.grad_clip = 0;
  o.metrics_path = (dir / "metrics.jsonl").string();
  std::ostringstream log;
  const StepStats st = train(m, data, o, log);
  EXPECT_EQ(st.targets, 70);
  EXPECT_NEAR(st.loss, (loss_sum[0] + loss_sum[1]) / 70, 1e-12 * st.loss);
  const std::vector<float> got = host_grads(m);
  std::vector<double> want(got.size()), windows_mean(got.size());
  double scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    want[i] = (10.0 * g[0][i] + 60.0 * g[1][i]) / 70.0;
    windows_mean[i] = 0.5 * (double(g[0][i]) + double(g[1][i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  const double err = max_abs_diff(want, got) / scale, control = max_abs_diff(windows_mean, got) / scale;
  std::cout << fmt::format("gradient against the 70 targets' mean {:.2e}; against the windows' means' mean {:.2e}\n",
                           err, control);
  EXPECT_LT(err, 1e-6);
  EXPECT_GT(control, 0.05);
  const std::vector<nlohmann::json> lines = metrics_lines(dir / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["targets"], 70);
}

// A step whose every window is all prompt trains nothing: it is skipped (named in the log, the
// weights as they were, loss null and 0 targets in --metrics, the schedule's learning rate), and
// the next step trains.
TEST(CompletionLoss, AStepWithoutTargetsIsSkipped) {
  const fs::path dir = temp_dir("_completion_skip");
  write_tiny_model(dir, tiny_config_json("qwen2", 2), 6);
  const ModelConfig cfg = load_config(dir);
  const int64_t N = 32;
  Masked data(cfg.vocab, [&](int64_t w) { return w < 2 ? N : 5; });
  auto be = make_cpu_backend();
  Model m(cfg, *be, ChunkPlan{16, 8});
  load_for_training(m, dir);
  const std::vector<float> w0 = host_params(m);
  TrainOptions o{N, 2, 2, 1};
  o.optim.lr = 1e-2f, o.optim.warmup_steps = 1;
  o.metrics_path = (dir / "metrics.jsonl").string();
  std::ostringstream log;
  std::vector<std::vector<float>> after;
  train(m, data, o, log, [&](const StepStats&) { after.push_back(host_params(m)); });
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[0], w0);
  EXPECT_NE(after[1], w0);
  EXPECT_THAT(log.str(), HasSubstr("step 1: skipped: its 2 windows of 32 tokens hold no target to train"));
  const std::vector<nlohmann::json> lines = metrics_lines(dir / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(lines[0]["loss"].is_null());
  EXPECT_EQ(lines[0]["targets"], 0);
  EXPECT_EQ(lines[0]["skipped"], true);
  EXPECT_FLOAT_EQ(float(lines[0]["lr"]), lr_at([&] { OptimConfig c = o.optim; c.total_steps = 2; return c; }(), 0));
  EXPECT_EQ(lines[1]["targets"], 2 * (N - 5));
  EXPECT_EQ(lines[1]["skipped"], false);
}

namespace {
// The weights after 3 AdamW steps of one window each, the second all prompt (skipped), on the
// simulated device, each update held until a pass waits for it or the trainer's finish() (with
// --offload params it runs beside the next step).
std::vector<float> weights_after_a_skip(const fs::path& dir, bool offload) {
  const ModelConfig cfg = load_config(dir);
  auto sim = make_sim_backend(0, 100);
  ChunkPlan plan{16, 8};
  plan.offload_params = offload;
  Model m(cfg, *sim, plan);
  load_for_training(m, dir);
  Masked data(cfg.vocab, [](int64_t w) { return w == 1 ? 32 : 3; });
  TrainOptions o{32, 3, 1, 100};
  o.optim.lr = 1e-2f;
  std::ostringstream log;
  struct Held {  // (a step that does not wait for the update leaves it undone)
    Held() { Optimizer::hold_update_for_test(true); }
    ~Held() { Optimizer::hold_update_for_test(false); }
  } held;
  train(m, data, o, log);
  EXPECT_THAT(log.str(), HasSubstr("step 2: skipped"));
  return host_params(m);
}
}  // namespace

// With --offload params the first step's update runs beside the next step; the skipped step runs
// no pass that would wait for it, so it waits itself: the third step's start does not clear the
// gradients the update still reads. The resident run's weights, bit for bit.
TEST(CompletionLoss, ASkippedStepWaitsForTheUpdateBesideIt) {
  const fs::path dir = temp_dir("_completion_skip_offload");
  write_tiny_model(dir, tiny_config_json("llama", 2), 8);
  EXPECT_EQ(weights_after_a_skip(dir, true), weights_after_a_skip(dir, false));
}

namespace {
struct Cli {
  fs::path dir = temp_dir("_completion_cli");
  std::string d = dir.string();
  std::vector<int32_t> stream;
  Cli() {
    EXPECT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --vocab 300 --out {}/m", d)).code, 0);
    write_bytes(dir / "m/tokenizer.json", byte_tokenizer_json({}).dump());
    write_bytes(dir / "r.jsonl", prompt_records(60, &stream));
  }
  // trained targets of window w of N: stream positions w N + 1 .. w N + N
  int64_t trained_in(int64_t w, int64_t N) const {
    int64_t n = 0;
    for (int64_t p = w * N + 1; p <= w * N + N; ++p) n += !is_prompt_id(stream[size_t(p % int64_t(stream.size()))]);
    return n;
  }
  std::string train(const std::string& flags) const {
    return fmt::format("train --model {0}/m --data {0}/r.jsonl --eos-id {1} --seq-len 64 --chunk-size 16 --page-size 8 "
                       "--lr 1e-2 {2}", d, kEos, flags);
  }
};
}  // namespace

// oomb train and oomb eval read the records: --metrics' targets are the windows' completion tokens
// and EOS, counted here from the text; eval scores as many; the banner says what is trained.
TEST(CompletionLoss, TrainAndEvalReadTheRecords) {
  Cli c;
  const std::string fields = "--prompt-field q --completion-field a";
  CmdResult r = oomb_cmd(c.dir, c.train(fields + " --steps 2 --grad-accum 2 --metrics " + c.d + "/m.jsonl"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("in prompts, not trained"));
  const std::vector<nlohmann::json> lines = metrics_lines(c.dir / "m.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  for (int64_t k = 0; k < 2; ++k)
    EXPECT_EQ(lines[size_t(k)]["targets"], c.trained_in(2 * k, 64) + c.trained_in(2 * k + 1, 64)) << "step " << k;
  EXPECT_LT(int64_t(lines[0]["targets"]), 2 * 64);
  // --doc-mask drops the targets across a document's end: each a prompt's first token here anyway
  r = oomb_cmd(c.dir, c.train(fields + " --steps 2 --grad-accum 2 --doc-mask --metrics " + c.d + "/doc.jsonl"));
  ASSERT_EQ(r.code, 0) << r.out;
  const std::vector<nlohmann::json> doc = metrics_lines(c.dir / "doc.jsonl");
  ASSERT_EQ(doc.size(), 2u);
  for (size_t k = 0; k < 2; ++k) EXPECT_EQ(doc[k]["targets"], lines[k]["targets"]) << "step " << k;
  r = oomb_cmd(c.dir, fmt::format("eval --model {0}/m --data {0}/r.jsonl --eos-id {1} --seq-len 64 "
                                  "--chunk-size 16 --windows 3 --json {2}", c.d, kEos, fields));
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["targets"], c.trained_in(0, 64) + c.trained_in(1, 64) + c.trained_in(2, 64));
  // the fields are the text's: a held-out token file without a mask scores every token
  write_tokens(c.dir / "e.bin", 200, 300, 4);
  r = oomb_cmd(c.dir, c.train(fields + fmt::format(" --steps 1 --eval-data {}/e.bin --eval-windows 2 --metrics {}/e.jsonl",
                                                   c.d, c.d)));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(metrics_lines(c.dir / "e.jsonl")[0]["eval"]["targets"], 2 * 64);
}

// Bad input is named: one field without the other, the same field twice, a record without the
// field (file and line, and the flag choosing it), a field that is not a string, plain text with
// the fields, the demo; a checkpoint of masked data
// does not resume on the same text unmasked (the data's fingerprint covers the mask).
TEST(CompletionLoss, BadInputIsNamed) {
  Cli c;
  CmdResult r = oomb_cmd(c.dir, c.train("--steps 1 --prompt-field q"));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--prompt-field 'q' needs --completion-field too"));
  r = oomb_cmd(c.dir, c.train("--steps 1 --completion-field a"));
  EXPECT_THAT(r.out, HasSubstr("--completion-field 'a' needs --prompt-field too"));
  r = oomb_cmd(c.dir, c.train("--steps 1 --prompt-field q --completion-field q"));
  EXPECT_THAT(r.out, HasSubstr("both name 'q'"));
  r = oomb_cmd(c.dir, c.train("--steps 1 --prompt-field q --completion-field answer"));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr(c.d + "/r.jsonl:1: the record has no \"answer\" field (choose the field with "
                               "--completion-field)"));
  r = oomb_cmd(c.dir, c.train("--steps 1 --prompt-field other --completion-field a"));
  EXPECT_THAT(r.out, HasSubstr(c.d + "/r.jsonl:1: field \"other\" is number, not a string"));
  write_bytes(c.dir / "plain.txt", "some text\n");
  r = oomb_cmd(c.dir, fmt::format("train --model {0}/m --data {0}/plain.txt --steps 1 --seq-len 4 --prompt-field q "
                                  "--completion-field a", c.d));
  EXPECT_THAT(r.out, HasSubstr(c.d + "/plain.txt: --prompt-field and --completion-field read JSON lines"));
  r = oomb_cmd(c.dir, "train --steps 1 --prompt-field q --completion-field a");
  EXPECT_THAT(r.out, HasSubstr("--prompt-field, --completion-field, --messages-field, --chat-template and --packing "
                               "need --model and --data"));
  write_tokens(c.dir / "t.bin", 200, 300, 1);
  r = oomb_cmd(c.dir, fmt::format("train --model {0}/m --data {0}/t.bin --steps 1 --seq-len 16 --prompt-field q "
                                  "--completion-field a", c.d));
  EXPECT_THAT(r.out, HasSubstr("token file " + c.d + "/t.bin has no mask beside it; --prompt-field, "
                               "--completion-field and --messages-field are read when text is tokenized"));
  // held-out windows that are all prompt: refused before the first step
  write_bytes(c.dir / "long_prompt.jsonl", "{\"q\": \"abcdefghijklmnopqrstuvwxyz\", \"a\": \"1\"}\n");
  r = oomb_cmd(c.dir, fmt::format("train --model {0}/m --data {0}/r.jsonl --eos-id {1} --seq-len 16 --steps 1 "
                                  "--prompt-field q --completion-field a --eval-data {0}/long_prompt.jsonl "
                                  "--eval-windows 1", c.d, kEos));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("its 1 window of 16 tokens hold no target to score (every token in a prompt)"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("step     1/1")));
  // resuming: the checkpoint of the masked run is not the data of the same ids unmasked (each
  // record's prompt and completion as one text)
  std::string whole;
  std::istringstream lines(read_text(c.dir / "r.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    whole += nlohmann::json({{"text", std::string(j["q"]) + std::string(j["a"])}}).dump() + "\n";
  }
  write_bytes(c.dir / "whole.jsonl", whole);
  r = oomb_cmd(c.dir, c.train(fmt::format("--steps 3 --save-every 1 --checkpoint-dir {}/ck --prompt-field q "
                                          "--completion-field a", c.d)));
  ASSERT_EQ(r.code, 0) << r.out;
  r = oomb_cmd(c.dir, fmt::format("train --model {0}/m --data {0}/whole.jsonl --eos-id {1} --seq-len 64 --chunk-size 16 "
                                  "--page-size 8 --lr 1e-2 --steps 3 --checkpoint-dir {0}/ck --resume auto", c.d, kEos));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("is not the checkpoint's data"));
  EXPECT_THAT(r.out, HasSubstr(fmt::format("{} tokens here", c.stream.size())));
  r = oomb_cmd(c.dir, c.train(fmt::format("--steps 3 --checkpoint-dir {}/ck --resume auto --prompt-field q "
                                          "--completion-field a", c.d)));  // (done: nothing left to run)
  EXPECT_EQ(r.code, 0) << r.out;
}

// oomb tokenize --prompt-field writes the mask beside the ids (FILE.mask), and --data FILE reads
// the windows the records give as text, in order and shuffled; oomb train on the token file gives
// the text's losses bit for bit. In a directory of shards, a shard without a mask trains every
// token. Tokenizing again without the fields removes the mask (it would not fit the new ids).
TEST(CompletionLoss, TokenizeWritesTheMaskBesideTheIds) {
  Cli c;
  const std::string fields = "--prompt-field q --completion-field a";
  CmdResult r = oomb_cmd(c.dir, fmt::format("tokenize --tokenizer {0}/m/tokenizer.json --input {0}/r.jsonl --output "
                                            "{0}/r.bin --eos {1} {2}", c.d, kEos, fields));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("the loss mask -> " + c.d + "/r.bin.mask"));
  ASSERT_TRUE(fs::exists(c.dir / "r.bin.mask"));
  for (const bool shuffle : {false, true}) {
    DataOptions text, ids;
    text.tokenizer = c.dir / "m/tokenizer.json";
    text.corpus.prompt_field = "q", text.corpus.completion_field = "a";
    text.packing = ids.packing = {kEos, shuffle, 3, false};
    auto from_text = open_training_data(c.dir / "r.jsonl", 300, text), from_ids = open_training_data(c.dir / "r.bin", 300, ids);
    ASSERT_NE(from_ids->mask(), nullptr);
    EXPECT_EQ(from_ids->mask()->fingerprint(), from_text->mask()->fingerprint());
    for (int64_t w = 0; w < 30; ++w) {
      std::vector<int32_t> a(29), at(29), b(29), bt(29);
      from_text->window(w, 29, a.data(), at.data());
      from_ids->window(w, 29, b.data(), bt.data());
      EXPECT_EQ(a, b);
      EXPECT_EQ(at, bt) << "window " << w << (shuffle ? " shuffled" : "");
    }
  }
  std::vector<nlohmann::json> runs[2];
  for (int i = 0; i < 2; ++i) {
    const std::string m = fmt::format("{}/run{}.jsonl", c.d, i);
    r = oomb_cmd(c.dir, i == 0 ? c.train(fields + " --steps 3 --shuffle --metrics " + m)
                               : fmt::format("train --model {0}/m --data {0}/r.bin --eos-id {1} --seq-len 64 "
                                             "--chunk-size 16 --page-size 8 --lr 1e-2 --steps 3 --shuffle --metrics {2}",
                                             c.d, kEos, m));
    ASSERT_EQ(r.code, 0) << r.out;
    runs[i] = metrics_lines(m);
  }
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(runs[1][k]["loss"], runs[0][k]["loss"]) << "step " << k;
    EXPECT_EQ(runs[1][k]["targets"], runs[0][k]["targets"]) << "step " << k;
  }
  // shards: s/a.bin masked, s/b.bin not
  fs::create_directories(c.dir / "s");
  fs::copy_file(c.dir / "r.bin", c.dir / "s/a.bin");
  fs::copy_file(c.dir / "r.bin.mask", c.dir / "s/a.bin.mask");
  fs::copy_file(c.dir / "r.bin", c.dir / "s/b.bin");
  DataOptions d;
  d.packing = {kEos, false, 0, false};
  auto shards = open_training_data(c.dir / "s", 300, d);
  const int64_t L = int64_t(c.stream.size());
  ASSERT_EQ(shards->stream_size(), 2 * L);
  std::vector<int32_t> ids(size_t(2 * L - 1)), tg(size_t(2 * L - 1));
  shards->window(0, 2 * L - 1, ids.data(), tg.data());
  for (int64_t i = 0; i + 1 < 2 * L; ++i) {
    const int32_t next = c.stream[size_t((i + 1) % L)];
    EXPECT_EQ(tg[size_t(i)], i + 1 < L && is_prompt_id(next) ? -1 : next) << "position " << i;
  }
  // given the fields, a shard without its mask is named (it would train its prompts)
  d.corpus.prompt_field = "q", d.corpus.completion_field = "a";
  try {
    open_training_data(c.dir / "s", 300, d);
    ADD_FAILURE() << "a shard without a mask was taken with --prompt-field";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("token file " + c.d + "/s/b.bin has no mask beside it"));
  }
  // without the fields: the mask goes
  r = oomb_cmd(c.dir, fmt::format("tokenize --tokenizer {0}/m/tokenizer.json --input {0}/r.jsonl --output {0}/r.bin "
                                  "--eos {1} --text-field a", c.d, kEos));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(fs::exists(c.dir / "r.bin.mask"));
}

// A mask that is not its file's is refused, naming it: another file's ids, a truncated one, one
// that is not a mask; --data naming the mask.
TEST(CompletionLoss, AMaskThatIsNotItsFilesIsNamed) {
  Cli c;
  CmdResult r = oomb_cmd(c.dir, fmt::format("tokenize --tokenizer {0}/m/tokenizer.json --input {0}/r.jsonl --output "
                                            "{0}/r.bin --eos {1} --prompt-field q --completion-field a", c.d, kEos));
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string mask = read_text(c.dir / "r.bin.mask");
  auto train_on = [&](const std::string& data) {
    return oomb_cmd(c.dir, fmt::format("train --model {0}/m --data {0}/{1} --eos-id {2} --seq-len 16 --steps 1", c.d,
                                       data, kEos));
  };
  // the same number of tokens, other ids
  std::vector<int32_t> other = c.stream;
  std::reverse(other.begin(), other.end());
  std::string bytes;
  for (int32_t id : other) bytes.append(reinterpret_cast<const char*>(&id), 4);
  write_bytes(c.dir / "o.bin", bytes);
  write_bytes(c.dir / "o.bin.mask", mask);
  r = train_on("o.bin");
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr(c.d + "/o.bin.mask: was written for other tokens"));
  write_bytes(c.dir / "o.bin", bytes + bytes);
  r = train_on("o.bin");
  EXPECT_THAT(r.out, HasSubstr(fmt::format("o.bin.mask: holds the mask of {} tokens, but", c.stream.size())));
  write_bytes(c.dir / "r.bin.mask", mask.substr(0, mask.size() - 1));
  r = train_on("r.bin");
  EXPECT_THAT(r.out, HasSubstr(c.d + "/r.bin.mask: " + std::to_string(mask.size() - 1) + " bytes, but the mask of"));
  write_bytes(c.dir / "r.bin.mask", "not a mask at all, but long enough to have a header");
  r = train_on("r.bin");
  EXPECT_THAT(r.out, HasSubstr(c.d + "/r.bin.mask: not a loss mask"));
  r = train_on("r.bin.mask");
  EXPECT_THAT(r.out, HasSubstr("r.bin.mask: is a token file's loss mask; give the token file beside it"));
}

namespace {
// Next fit, as --packing whole promises it: the epoch's documents (its stream cut after each EOS),
// in order, fill windows of N + 1 tokens while they fit; a longer one takes windows of its own at
// offsets 0, N, 2N, ... of it. Each window's tokens, before padding.
std::vector<std::vector<int32_t>> next_fit(const std::vector<int32_t>& epoch_stream, int64_t N) {
  std::vector<std::vector<int32_t>> docs(1), windows;
  for (int32_t id : epoch_stream) {
    docs.back().push_back(id);
    if (id == kEos) docs.emplace_back();
  }
  docs.pop_back();
  std::vector<int32_t> cur;
  for (const auto& d : docs) {
    if (int64_t(d.size()) > N + 1) {
      if (!cur.empty()) windows.push_back(cur), cur.clear();
      for (int64_t off = 0;; off += N) {
        windows.emplace_back(d.begin() + off, d.begin() + std::min<int64_t>(off + N + 1, int64_t(d.size())));
        if (off + N + 1 >= int64_t(d.size())) break;
      }
      continue;
    }
    if (int64_t(cur.size() + d.size()) > N + 1) windows.push_back(cur), cur.clear();
    cur.insert(cur.end(), d.begin(), d.end());
  }
  if (!cur.empty()) windows.push_back(cur);
  return windows;
}
}  // namespace

// --packing whole: every window of three epochs (in order, and shuffled: each epoch its own
// order, read from the stream) holds the next-fit windows of the epoch's documents, padding (EOS
// ids, no targets) after them; a record longer than a window (one of 40 tokens here) over windows
// of its own; the targets ignored where a prompt's token or padding is predicted; targets_in as read.
TEST(CompletionLoss, WholePackingKeepsRecordsWhole) {
  const fs::path dir = temp_dir("_completion_whole");
  write_bytes(dir / "tok.json", byte_tokenizer_json({}).dump());
  std::vector<int32_t> stream;
  std::string jl = prompt_records(30, &stream);
  jl += nlohmann::json({{"q", std::string(30, 'x')}, {"a", "123456789"}}).dump() + "\n";
  for (char ch : std::string(30, 'x') + "123456789") stream.push_back(int32_t(uint8_t(ch)));
  stream.push_back(kEos);
  write_bytes(dir / "r.jsonl", jl);
  const int64_t N = 24, L = int64_t(stream.size());
  for (const bool shuffle : {false, true}) {
    SCOPED_TRACE(shuffle ? "shuffled" : "in order");
    DataOptions d;
    d.tokenizer = dir / "tok.json";
    d.corpus.prompt_field = "q", d.corpus.completion_field = "a";
    d.packing = {kEos, shuffle, 5, false, true};
    auto data = open_training_data(dir / "r.jsonl", 300, d);
    int64_t w = 0;
    for (int64_t e = 0; e < 3; ++e) {
      std::vector<uint32_t> ep(static_cast<size_t>(L));
      data->stream(e * L, L, ep.data());
      const auto windows = next_fit(std::vector<int32_t>(ep.begin(), ep.end()), N);
      if (e == 0 && !shuffle) {
        EXPECT_EQ(data->whole_packing(N).windows, int64_t(windows.size()));
        EXPECT_EQ(data->whole_packing(N).split, 1);
        EXPECT_THAT(data->whole_summary(N), HasSubstr(fmt::format("31 documents in {} windows of 24 tokens",
                                                                  windows.size())));
      }
      for (const auto& want : windows) {
        std::vector<int32_t> ids(N), tg(N);
        data->window(w, N, ids.data(), tg.data());
        int64_t count = 0;
        for (int64_t i = 0; i < N; ++i) {
          const bool real_in = i < int64_t(want.size()), real_next = i + 1 < int64_t(want.size());
          EXPECT_EQ(ids[size_t(i)], real_in ? want[size_t(i)] : kEos) << "window " << w << " position " << i;
          const int32_t t = real_next && !is_prompt_id(want[size_t(i) + 1]) ? want[size_t(i) + 1] : -1;
          EXPECT_EQ(tg[size_t(i)], t) << "window " << w << " position " << i;
          count += t >= 0;
        }
        EXPECT_EQ(data->targets_in(w, N), count);
        EXPECT_EQ(data->position_of(w, N).first, e);
        ++w;
      }
    }
  }
}

// --packing whole over a token file whose last document lacks its EOS: the EOS added (trained), the
// window's padding after it; where each window starts; --doc-mask's count leaves out the target
// whose input is an EOS (here one beside others in a window).
TEST(CompletionLoss, WholePackingAddsTheLastEos) {
  const fs::path dir = temp_dir("_completion_whole_eos");
  const std::vector<uint32_t> ids = {1, 2, uint32_t(kEos), 3, 4, 5, uint32_t(kEos), 6, 8, 9, 10};  // (no EOS at the end)
  write_bytes(dir / "t.bin", std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 4));
  DataOptions d;
  d.packing = {kEos, false, 0, false, true};
  auto data = open_training_data(dir / "t.bin", 300, d);
  // N = 7: [1 2 E 3 4 5 E] fills 7 of 8, [6 8 9 10 E] (E added) 5
  const int64_t N = 7;
  EXPECT_EQ(data->windows_per_epoch(N), 2);
  std::vector<int32_t> in(N), tg(N);
  data->window(1, N, in.data(), tg.data());
  EXPECT_EQ(in, (std::vector<int32_t>{6, 8, 9, 10, kEos, kEos, kEos}));
  EXPECT_EQ(tg, (std::vector<int32_t>{8, 9, 10, kEos, -1, -1, -1}));
  EXPECT_EQ(data->position_of(0, N), (std::pair<int64_t, int64_t>{0, 0}));
  EXPECT_EQ(data->position_of(1, N), (std::pair<int64_t, int64_t>{0, 7}));
  EXPECT_EQ(data->position_of(3, N), (std::pair<int64_t, int64_t>{1, 7}));
  EXPECT_EQ(data->targets_in(0, N), 6);
  EXPECT_EQ(data->targets_in(0, N, kEos), 5);  // (not E -> 3)
  EXPECT_EQ(data->targets_in(1, N, kEos), 4);
  EXPECT_THAT(data->whole_summary(N), HasSubstr(fmt::format("{:.1f}% of their tokens padding", 100.0 * 4 / 16)));
}

// oomb train --packing whole: the banner says how the records pack; --metrics' targets are the
// next-fit windows' completion tokens and EOS, counted here from the text (with --doc-mask too);
// a checkpoint of it does not resume wrapped; oomb eval --packing whole scores the epoch's windows.
TEST(CompletionLoss, TrainPacksWholeRecords) {
  Cli c;
  const int64_t N = 64;
  const auto windows = next_fit(c.stream, N);
  const std::string fields = "--prompt-field q --completion-field a --packing whole";
  auto targets_of = [&](size_t j) {
    int64_t n = 0;
    for (size_t i = 1; i < windows[j % windows.size()].size(); ++i) n += !is_prompt_id(windows[j % windows.size()][i]);
    return n;
  };
  for (const std::string extra : {"", " --doc-mask"}) {
    const std::string m = c.d + "/whole" + (extra.empty() ? "" : "_doc") + ".jsonl";
    CmdResult r = oomb_cmd(c.dir, c.train(fields + extra + " --steps 2 --grad-accum 2 --metrics " + m));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_THAT(r.out, HasSubstr(fmt::format("--packing whole: 60 documents in {} windows of 64 tokens an epoch",
                                             windows.size())));
    const std::vector<nlohmann::json> lines = metrics_lines(m);
    ASSERT_EQ(lines.size(), 2u);
    for (size_t k = 0; k < 2; ++k)
      EXPECT_EQ(lines[k]["targets"], targets_of(2 * k) + targets_of(2 * k + 1)) << "step " << k << extra;
  }
  CmdResult r = oomb_cmd(c.dir, c.train(fields + fmt::format(" --steps 2 --save-every 1 --checkpoint-dir {}/ck", c.d)));
  ASSERT_EQ(r.code, 0) << r.out;
  r = oomb_cmd(c.dir, c.train(fmt::format("--prompt-field q --completion-field a --steps 2 --checkpoint-dir {}/ck "
                                          "--resume auto", c.d)));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--packing"));
  r = oomb_cmd(c.dir, fmt::format("eval --model {0}/m --data {0}/r.jsonl --eos-id {1} --seq-len 64 --chunk-size 16 "
                                  "--json --prompt-field q --completion-field a --packing whole", c.d, kEos));
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  int64_t all = 0;
  for (size_t w = 0; w < windows.size(); ++w) all += targets_of(w);
  EXPECT_EQ(j["targets"], all);
}

// A SentencePiece-style tokenizer's Prepend ("▁", Llama 2's) starts a record's text, not its completion:
// the completion continues its prompt, as in the one string Hugging Face (TRL) encodes.
TEST(CompletionLoss, ASentencePieceCompletionContinuesItsPrompt) {
  const auto dir = temp_dir();
  write_bytes(dir / "tok.json", sentencepiece_tokenizer_json().dump());
  write_bytes(dir / "r.jsonl", "{\"q\": \"ab\", \"a\": \" ab\"}\n{\"q\": \"a\", \"a\": \"b\"}\n");
  const CmdResult r = oomb_cmd(dir, fmt::format("tokenize --tokenizer {0}/tok.json --input {0}/r.jsonl --output "
                                                "{0}/r.bin --eos 1 --prompt-field q --completion-field a",
                                                dir.string()));
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string bytes = read_text(dir / "r.bin");
  std::vector<int32_t> ids(bytes.size() / 4);
  std::memcpy(ids.data(), bytes.data(), ids.size() * 4);
  // ▁ab | ▁ab, </s>; ▁a | b (not ▁, b), </s>
  EXPECT_EQ(ids, (std::vector<int32_t>{9, 9, 1, 5, 4, 1}));
}
