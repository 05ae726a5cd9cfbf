// Checkpoints with many ranks: rank 0 writes the files a single rank writes (--zero 0, 1, 2, 3;
// sharded moments and masters gathered in pieces), and resumed runs, across layouts too, repeat the
// uninterrupted run's losses and files.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <regex>
#include <tuple>
#include <vector>

#include "dist/mpirun_util.h"
#include "hf/checkpoint.h"
#include "metrics_plan.h"
#include "hf/config.h"
#include "model/params.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;

// Checkpoints with several ranks (--zero 0): rank 0 writes the same files a single rank writes (its
// weights within 1e-6 of the single rank's, --grad-accum 2 against --dp 2), and a resumed run on two
// ranks ends bit for bit where the uninterrupted one did.
TEST(Dist, CheckpointsWrittenByRankZeroAndResumed) {
  NEED_MPI();
  const auto dir = temp_dir("dist_ckpt");
  const std::string oomb = (binary_dir() / "oomb").string();
  ASSERT_TRUE(tiny_model_and_tokens(oomb, dir));
  const std::string run = fmt::format("{} train --model {}/m --data {}/tokens.bin --seq-len 256 --chunk-size 64 --steps 4 "
                                      "--save-every 2 --log-every 1", oomb, dir.string(), dir.string());
  CmdResult single = run_cmd_in(dir, fmt::format("OMP_NUM_THREADS=1 {} --grad-accum 2 --checkpoint-dir {}/a", run,
                                                 dir.string()));
  ASSERT_EQ(single.code, 0) << single.out;
  CmdResult two = mpirun(2, run + " --dp 2 --checkpoint-dir " + (dir / "b").string());
  ASSERT_EQ(two.code, 0) << two.out;
  const ModelConfig cfg = load_config((dir / "m").string());
  auto weights = [&](const std::filesystem::path& p) {
    Params w(cfg, Tier::Host, Tag::IO);
    load_weights(p.string(), cfg, w);
    return std::vector<float>(w.flat().as<float>(), w.flat().as<float>() + w.flat().numel());
  };
  const double e = rel_error(weights(dir / "b/step-000004"), weights(dir / "a/step-000004"));
  std::cout << "two ranks' checkpoint against one rank's, after 4 AdamW steps: rel. error " << e << std::endl;
  EXPECT_LE(e, 1e-4);  // AdamW steps (see dist_check's weights bound)
  // resumed on two ranks from step 2: the same step-4 files, bit for bit
  CmdResult resumed = mpirun(2, run + " --dp 2 --checkpoint-dir " + (dir / "c").string() + " --resume " +
                                    (dir / "b/step-000002").string());
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_EQ(read_text(dir / "c/step-000004/model.safetensors"), read_text(dir / "b/step-000004/model.safetensors"));
  EXPECT_EQ(read_text(dir / "c/step-000004/optimizer.safetensors"),
            read_text(dir / "b/step-000004/optimizer.safetensors"));
  // a single rank resuming the two ranks' checkpoint is another run (windows per step differ)
  CmdResult other = run_cmd_in(dir, fmt::format("{} --grad-accum 2 --checkpoint-dir {}/e --resume {}/b/step-000002",
                                                run, dir.string(), dir.string()));
  EXPECT_NE(other.code, 0);
  EXPECT_NE(other.out.find("--dp"), std::string::npos) << other.out;
}

namespace {
// The "loss" of every line of a --metrics file, as written (JSON doubles round-trip: equal text is equal bits).
std::vector<std::string> metric_losses(const std::filesystem::path& p) {
  std::vector<std::string> v;
  const std::string t = read_text(p);
  const std::regex loss("\"loss\":([^,}]+)");
  for (auto it = std::sregex_iterator(t.begin(), t.end(), loss); it != std::sregex_iterator(); ++it)
    v.push_back((*it)[1]);
  return v;
}

// Adds `delta` to the float at byte `at` of a safetensors file's data section (at < 0: from its end).
void bump_float(const std::filesystem::path& p, int64_t at, float delta) {
  std::string b = read_text(p);
  uint64_t header = 0;
  std::memcpy(&header, b.data(), 8);
  const size_t off = at >= 0 ? size_t(8 + header + uint64_t(at)) : size_t(int64_t(b.size()) + at);
  float x;
  std::memcpy(&x, b.data() + off, 4);
  x += delta;
  std::memcpy(b.data() + off, &x, 4);
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(b.data(), std::streamsize(b.size()));
}
}  // namespace

// Checkpoints with AdamW's moments sharded (--zero 1, 2): rank 0 writes the files one optimizer
// holding every moment writes, each rank's shard reaching it in pieces of 1000 floats
// (OOMB_GRAD_SYNC_PIECE: many pieces on the tiny model), and a resumed run, each rank reading its
// shard, repeats the uninterrupted run's later losses and files bit for bit. --zero 1's math is
// --zero 0's bit for bit, so its files are --zero 0's, and a checkpoint resumes under either layout.
// --zero 2 sums the gradient norm's squares by shard (another order) and --sp sums the gradients in
// another order, so their files need not be --zero 0's (printed, not asserted); 4 ranks: --sp 2 --dp 2.
// Negative controls: one moment changed in the first rank's shard, or the last rank's, and the
// resumed run's files differ.
TEST(Dist, CheckpointsWithShardedMoments) {
  NEED_MPI();
  const auto dir = temp_dir("dist_ckpt_zero");
  const std::string oomb = (binary_dir() / "oomb").string();
  ASSERT_TRUE(tiny_model_and_tokens(oomb, dir));
  const std::string run = fmt::format("{} train --model {}/m --data {}/tokens.bin --seq-len 256 --chunk-size 64 --steps 4 "
                                      "--save-every 2 --log-every 1 --dp 2", oomb, dir.string(), dir.string());
  const std::string piece = "OOMB_GRAD_SYNC_PIECE=1000";
  auto train = [&](const std::string& flags, const std::string& out, const std::string& resume = "") {
    const int np = flags.find("--sp 2") != std::string::npos ? 4 : 2;
    const CmdResult r = mpirun(np, fmt::format("{} {} --checkpoint-dir {}/{} --metrics {}/{}.jsonl{}", run, flags,
                                              dir.string(), out, dir.string(), out,
                                              resume.empty() ? "" : " --resume " + (dir / resume).string()), piece);
    EXPECT_EQ(r.code, 0) << flags << " " << out << "\n" << r.out;
  };
  auto file = [&](const std::string& run_dir, int step, const char* name) {
    return read_text(dir / run_dir / fmt::format("step-{:06}", step) / name);
  };
  auto same_files = [&](const std::string& x, const std::string& y, int step) {
    return file(x, step, "model.safetensors") == file(y, step, "model.safetensors") &&
           file(x, step, "optimizer.safetensors") == file(y, step, "optimizer.safetensors");
  };
  train("--zero 0", "z0");
  for (const char* layout : {"--zero 1", "--zero 2", "--zero 1 --device sim --offload params", "--zero 2 --sp 2"}) {
    SCOPED_TRACE(layout);
    std::string u = "u";  // "u1", "u1devicesimoffloadparams", ...
    for (const char* c = layout + 7; *c; ++c)
      if (std::isalnum(static_cast<unsigned char>(*c))) u += *c;
    const std::string r = u + "r";
    train(layout, u);
    train(layout, r, u + "/step-000002");
    EXPECT_FALSE(file(u, 4, "optimizer.safetensors").empty());
    EXPECT_TRUE(same_files(r, u, 4)) << "resumed from step 2: other step-4 files";
    const std::vector<std::string> lu = metric_losses(dir / (u + ".jsonl")), lr = metric_losses(dir / (r + ".jsonl"));
    ASSERT_EQ(lu.size(), 4u);
    ASSERT_EQ(lr.size(), 2u);
    EXPECT_EQ(lr[0], lu[2]);
    EXPECT_EQ(lr[1], lu[3]);
    const bool as_zero0 = same_files(u, "z0", 2) && same_files(u, "z0", 4);
    std::cout << layout << ": resumed run's losses " << lr[0] << ", " << lr[1] << " (uninterrupted " << lu[2] << ", "
              << lu[3] << "); files equal --zero 0's: " << (as_zero0 ? "yes" : "no") << std::endl;
    if (std::string(layout) == "--zero 1") {
      EXPECT_TRUE(as_zero0);
    }
  }
  // one layout's checkpoint resumed under another: --zero 1 from --zero 0's, and --zero 0 from --zero 1's
  train("--zero 1", "x1", "z0/step-000002");
  train("--zero 0", "x0", "u1/step-000002");
  EXPECT_TRUE(same_files("x1", "z0", 4));
  EXPECT_TRUE(same_files("x0", "z0", 4));
  // negative controls: the first moment of rank 0's shard, then the last of rank 1's, changed
  for (const auto& [name, at, delta] : {std::tuple{"n0", int64_t(0), 1e-3f}, {"n1", int64_t(-4), 1.0f}}) {
    std::filesystem::create_directories(dir / name);
    std::filesystem::copy(dir / "u1/step-000002", dir / name / "step-000002", std::filesystem::copy_options::recursive);
    bump_float(dir / name / "step-000002/optimizer.safetensors", at, delta);
    train("--zero 1", std::string(name) + "r", std::string(name) + "/step-000002");
    EXPECT_FALSE(same_files(std::string(name) + "r", "u1", 4)) << name << ": a changed moment went unnoticed";
  }
}

// Checkpoints under --zero 3: rank 0 gathers the masters range by range, and every rank's parts of
// the moments reach it in flat order (pieces of 1000 floats), so the files are those one optimizer
// writes; each rank reads back its parts. With one chunk a sequence and no clipping (--grad-clip 0)
// --zero 3's arithmetic is --zero 0's bit for bit (two ranks' gradients summed by one addition
// either way; no chunk-by-chunk sums; the norm's order unused), so its step-2 and step-4 files are
// --zero 0's byte for byte (and so --zero 1's: CheckpointsWithShardedMoments); resumed from step 2,
// under --zero 3 and across layouts (--zero 3 from --zero 0's checkpoint; --zero 0 and --zero 1
// from --zero 3's), the step-4 files and the losses are the uninterrupted run's; with the shards in
// device memory (no --offload params) the same files, and resumed from the offloaded run's. With 4 chunks a
// sequence and clipping (--zero 3's own bits): resumed from step 2 bit for bit; four ranks (--sp 2
// --dp 2 --zero 3) from two ranks' checkpoint, and two from four ranks', within 1e-4 of the
// uninterrupted run (--sp sums in another order). Negative controls: one moment changed in rank 0's
// part or in rank 1's, and the resumed run's files differ.
TEST(Dist, CheckpointsUnderZeroThree) {
  NEED_MPI();
  const auto dir = temp_dir("dist_ckpt_zero3");
  const std::string oomb = (binary_dir() / "oomb").string();
  ASSERT_TRUE(tiny_model_and_tokens(oomb, dir));
  const std::string base = fmt::format("{} train --model {}/m --data {}/tokens.bin --steps 4 --save-every 2 "
                                       "--log-every 1 --device sim", oomb, dir.string(), dir.string());
  const std::string run = base + " --dp 2";  // (--offload params in each run's flags, or the shards on the device)
  auto train = [&](const std::string& flags, const std::string& out, const std::string& resume = "") {
    const int np = flags.find("--sp 2") != std::string::npos ? 4 : 2;
    const CmdResult r = mpirun(np, fmt::format("{} {} --checkpoint-dir {}/{} --metrics {}/{}.jsonl{}", run, flags,
                                              dir.string(), out, dir.string(), out,
                                              resume.empty() ? "" : " --resume " + (dir / resume).string()),
                               "OOMB_GRAD_SYNC_PIECE=1000");
    EXPECT_EQ(r.code, 0) << flags << " " << out << "\n" << r.out;
  };
  auto file = [&](const std::string& run_dir, int step, const char* name) {
    return read_text(dir / run_dir / fmt::format("step-{:06}", step) / name);
  };
  auto same_files = [&](const std::string& x, const std::string& y, int step) {
    return !file(x, step, "optimizer.safetensors").empty() &&
           file(x, step, "model.safetensors") == file(y, step, "model.safetensors") &&
           file(x, step, "optimizer.safetensors") == file(y, step, "optimizer.safetensors") &&
           file(x, step, "config.json") == file(y, step, "config.json");
  };
  auto same_losses = [&](const std::string& resumed, const std::string& whole) {
    const std::vector<std::string> lr = metric_losses(dir / (resumed + ".jsonl")),
                                   lu = metric_losses(dir / (whole + ".jsonl"));
    std::cout << resumed << ": losses of steps 3, 4 " << (lr.size() == 2 ? lr[0] + ", " + lr[1] : "?") << " ("
              << whole << ": " << (lu.size() == 4 ? lu[2] + ", " + lu[3] : "?") << ")" << std::endl;
    return lr.size() == 2 && lu.size() == 4 && lr[0] == lu[2] && lr[1] == lu[3];
  };
  const ModelConfig cfg = load_config((dir / "m").string());
  auto weights = [&](const std::filesystem::path& p) {
    Params w(cfg, Tier::Host, Tag::IO);
    load_weights(p.string(), cfg, w);
    return std::vector<float>(w.flat().as<float>(), w.flat().as<float>() + w.flat().numel());
  };

  const std::string one = "--seq-len 128 --chunk-size 128 --grad-clip 0 --offload params";
  train(one + " --zero 0", "a0");
  train(one + " --zero 3", "a3");
  EXPECT_TRUE(same_files("a3", "a0", 2)) << "--zero 3's step-2 files are not --zero 0's";
  EXPECT_TRUE(same_files("a3", "a0", 4)) << "--zero 3's step-4 files are not --zero 0's";
  // One rank (--grad-accum 2: the same windows) adds the two windows' gradients inside its backward,
  // not after: the same files but for those roundings (the safetensors headers and config.json byte
  // for byte, the weights and moments within 1e-6), and --zero 3's moved from step 2's (control).
  const CmdResult single = run_cmd_in(dir, fmt::format("OMP_NUM_THREADS=1 {} {} --grad-accum 2 --checkpoint-dir {}/s1",
                                                       base, one, dir.string()));
  ASSERT_EQ(single.code, 0) << single.out;
  auto header = [&](const std::string& text) {
    uint64_t n = 0;
    if (text.size() >= 8) std::memcpy(&n, text.data(), 8);
    return text.size() >= 8 + n ? text.substr(0, 8 + n) : std::string();
  };
  auto floats = [&](const std::string& text) {
    const size_t h = header(text).size();
    std::vector<float> v((text.size() - h) / 4);
    if (!v.empty()) std::memcpy(v.data(), text.data() + h, v.size() * 4);
    return v;
  };
  for (const char* name : {"model.safetensors", "optimizer.safetensors"}) {
    const std::string z3 = file("a3", 4, name), s1 = file("s1", 4, name);
    EXPECT_FALSE(header(z3).empty()) << name;
    EXPECT_EQ(header(z3), header(s1)) << name;
    const double e = rel_error(floats(z3), floats(s1)), moved = rel_error(floats(z3), floats(file("a3", 2, name)));
    std::cout << "--zero 3 against one rank, step 4's " << name << ": rel. error " << e << " (byte-identical: "
              << (z3 == s1 ? "yes" : "no") << "; against step 2's " << moved << ")" << std::endl;
    EXPECT_LE(e, 1e-6) << name;
    EXPECT_GT(moved, 1e-4) << name;
  }
  EXPECT_EQ(file("a3", 4, "config.json"), file("s1", 4, "config.json"));
  // the shards in device memory (no --offload params): the same files; resumed from the offloaded run's
  const std::string one_dev = "--seq-len 128 --chunk-size 128 --grad-clip 0";
  train(one_dev + " --zero 3", "a3d");
  EXPECT_TRUE(same_files("a3d", "a0", 2) && same_files("a3d", "a0", 4)) << "device shards: not --zero 0's files";
  train(one_dev + " --zero 3", "a3dr", "a3/step-000002");
  EXPECT_TRUE(same_files("a3dr", "a0", 4));
  EXPECT_TRUE(same_losses("a3dr", "a0"));
  train(one + " --zero 3", "a3r", "a3/step-000002");
  EXPECT_TRUE(same_files("a3r", "a3", 4));
  EXPECT_TRUE(same_losses("a3r", "a3"));
  train(one + " --zero 3", "a3x", "a0/step-000002");  // --zero 0's checkpoint under --zero 3
  EXPECT_TRUE(same_files("a3x", "a0", 4));
  EXPECT_TRUE(same_losses("a3x", "a0"));
  for (const char* z : {"0", "1"}) {  // --zero 3's checkpoint under --zero 0 and 1
    const std::string out = std::string("a") + z + "x";
    train(one + " --zero " + z, out, "a3/step-000002");
    EXPECT_TRUE(same_files(out, "a0", 4)) << out;
    EXPECT_TRUE(same_losses(out, "a0")) << out;
  }
  // negative controls: the first moment (rank 0's part of the embedding), then the last (rank 1's
  // part of the tail), changed
  for (const auto& [name, at, delta] : {std::tuple{"n0", int64_t(0), 1e-3f}, {"n1", int64_t(-4), 1.0f}}) {
    std::filesystem::create_directories(dir / name);
    std::filesystem::copy(dir / "a3/step-000002", dir / name / "step-000002", std::filesystem::copy_options::recursive);
    bump_float(dir / name / "step-000002/optimizer.safetensors", at, delta);
    train(one + " --zero 3", std::string(name) + "r", std::string(name) + "/step-000002");
    EXPECT_FALSE(same_files(std::string(name) + "r", "a3", 4)) << name << ": a changed moment went unnoticed";
  }

  const std::string four = "--seq-len 256 --chunk-size 64 --offload params";
  train(four + " --zero 3", "b2");
  train(four + " --zero 3", "b2r", "b2/step-000002");
  EXPECT_TRUE(same_files("b2r", "b2", 4));
  EXPECT_TRUE(same_losses("b2r", "b2"));
  train(four + " --zero 3 --sp 2", "b4");
  train(four + " --zero 3 --sp 2", "b4x", "b2/step-000002");  // two ranks' checkpoint on four
  train(four + " --zero 3", "b2x", "b4/step-000002");         // and four ranks' on two
  for (const auto& [resumed, whole, from] : {std::tuple{"b4x", "b2", "b2"}, {"b2x", "b4", "b4"}}) {
    const std::vector<float> got = weights(dir / resumed / "step-000004"), want = weights(dir / whole / "step-000004");
    const double e = rel_error(got, want), moved = rel_error(got, weights(dir / from / "step-000002"));
    std::cout << resumed << " against " << whole << " at step 4: rel. error " << e << " (against step 2's weights "
              << moved << ")" << std::endl;
    EXPECT_LE(e, 1e-4) << resumed;
    EXPECT_GT(moved, 1e-4) << resumed;
  }
}

// --time-limit and --save-best on two ranks with --zero 3 (the best model's shards gathered by every
// rank): rank 0 decides both for every rank, so a run stopped after each step and resumed ends with
// the best model and record of the uninterrupted run, and no rank waits alone.
TEST(Dist, TimeLimitAndSaveBestDecideAlikeOnEveryRank) {
  NEED_MPI();
  const auto dir = temp_dir("dist_limit");
  const std::string d = dir.string(), oomb = (binary_dir() / "oomb").string();
  ASSERT_TRUE(tiny_model_and_tokens(oomb, dir));
  const std::string run = fmt::format("{0} train --model {1}/m --data {1}/tokens.bin --seq-len 128 --chunk-size 64 "
                                      "--steps 4 --lr 0.01 --device sim --dp 2 --zero 3 --eval-data {1}/tokens.bin "
                                      "--eval-windows 2 --eval-every 1", oomb, d);
  CmdResult whole = mpirun(2, run + fmt::format(" --save-best {}/whole", d));
  ASSERT_EQ(whole.code, 0) << whole.out;
  int runs = 0;
  CmdResult cut;
  do {
    cut = mpirun(2, run + fmt::format(" --save-best {0}/cut --checkpoint-dir {0}/ck --resume auto --time-limit 0.001s", d));
    ASSERT_TRUE(cut.code == 0 || cut.code == 75) << cut.out;
  } while (cut.code == 75 && ++runs < 10);
  EXPECT_EQ(runs, 3);  // (4 steps, one a run)
  EXPECT_EQ(read_text(dir / "cut/oomb_best.json"), read_text(dir / "whole/oomb_best.json"));
  EXPECT_EQ(read_text(dir / "cut/model.safetensors"), read_text(dir / "whole/model.safetensors"));
}

// A mix of data (--data twice, 3:1) on two ranks: each step's windows are the single rank's (--dp 2
// --grad-accum 2 against --grad-accum 4), so each source's windows and targets in --metrics are the
// same and its first step's loss (the same weights) equal within the sums' order; so is each of two
// held-out sets' loss (the ranks sharing their windows); --zero 1, resumed from step 2 on two
// ranks, ends bit for bit where the uninterrupted run did.
TEST(Dist, AMixOfDataSharesItsWindowsAcrossRanks) {
  NEED_MPI();
  const auto dir = temp_dir("dist_mix");
  const std::string d = dir.string(), oomb = (binary_dir() / "oomb").string();
  ASSERT_TRUE(tiny_model_and_tokens(oomb, dir));
  write_tokens(dir / "short.bin", 1500, 120, 6);
  const std::string run = fmt::format("{0} train --model {1}/m --data {1}/tokens.bin --data {1}/short.bin "
                                      "--data-weights 3,1 --seq-len 128 --chunk-size 64 --steps 4 --lr 0.01 --shuffle "
                                      "--eos-id 3 --eval-data {1}/short.bin --eval-data {1}/tokens.bin --eval-windows 2 "
                                      "--eval-every 1", oomb, d);
  CmdResult one = run_cmd_in(dir, fmt::format("OMP_NUM_THREADS=1 {} --grad-accum 4 --metrics {}/one.jsonl", run, d));
  ASSERT_EQ(one.code, 0) << one.out;
  CmdResult two = mpirun(2, run + fmt::format(" --dp 2 --grad-accum 2 --zero 1 --metrics {0}/two.jsonl --checkpoint-dir "
                                              "{0}/ck --save-every 2", d));
  ASSERT_EQ(two.code, 0) << two.out;
  const std::vector<nlohmann::json> a = metrics_lines(dir / "one.jsonl"), b = metrics_lines(dir / "two.jsonl");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t k = 0; k < 4; ++k)
    for (size_t s = 0; s < 2; ++s) {
      EXPECT_EQ(b[k]["sources"][s]["windows"], a[k]["sources"][s]["windows"]) << "step " << k;
      EXPECT_EQ(b[k]["sources"][s]["targets"], a[k]["sources"][s]["targets"]) << "step " << k;
    }
  EXPECT_EQ(a[0]["sources"][0]["windows"], 3);
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_NEAR(b[0]["sources"][s]["loss"].get<double>(), a[0]["sources"][s]["loss"].get<double>(), 1e-12);
    const nlohmann::json &ea = a[0]["eval"]["sets"][s], &eb = b[0]["eval"]["sets"][s];
    EXPECT_EQ(eb["windows"], 2);
    EXPECT_EQ(eb["targets"], ea["targets"]);
    // (one step's weights, summed in another order: within fp32's noise, far from half the windows')
    EXPECT_NEAR(eb["loss"].get<double>(), ea["loss"].get<double>(), 1e-5) << "held-out set " << s;
  }
  CmdResult resumed = mpirun(2, run + fmt::format(" --dp 2 --grad-accum 2 --zero 1 --checkpoint-dir {0}/ck2 --save-every 2 --resume "
                                                  "{0}/ck/step-000002", d));
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_EQ(read_text(dir / "ck2/step-000004/model.safetensors"), read_text(dir / "ck/step-000004/model.safetensors"));
}
