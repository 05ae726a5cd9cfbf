// `oomb train --checkpoint-dir/--save-every/--keep-last/--resume` end to end, the binary run as a
// child process: a run resumed from any checkpoint logs every later loss and saves the final
// weights bit for bit as the uninterrupted run; a resume that differs from the checkpoint's run is
// refused naming the difference; SIGKILL at random moments (during steps and during checkpoint
// writes) never leaves a checkpoint that does not load, and resuming after each kill still ends
// bit for bit where the uninterrupted run ends; SIGTERM and SIGINT write a checkpoint and stop.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "hf/config.h"
#include "model_fixture.h"
#include "test_util.h"
#include "train/checkpoint.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

// `oomb ARGS` (words split at spaces) as a child process, its output into `log`, with
// OOMB_TEST_CKPT_DELAY_MS=delay_ms when delay_ms > 0.
pid_t spawn(const std::string& args, const fs::path& log, int delay_ms = 0) {
  std::vector<std::string> words{(binary_dir() / "oomb").string()};
  std::istringstream in(args);
  for (std::string w; in >> w;) words.push_back(w);
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  if (delay_ms > 0) ::setenv("OOMB_TEST_CKPT_DELAY_MS", std::to_string(delay_ms).c_str(), 1);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(fd, 1);
  ::dup2(fd, 2);
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  ::execv(argv[0], argv.data());
  ::_exit(127);
}

struct StepLog {
  double loss = 0, grad_norm = 0, lr = 0;
};
// A --metrics file by step; *cut counts a last line cut short (by a kill).
std::map<int64_t, StepLog> read_metrics(const fs::path& p, int* cut = nullptr, int* lines = nullptr) {
  std::map<int64_t, StepLog> m;
  std::istringstream in(read_text(p));
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) {
      if (cut) ++*cut;
      continue;
    }
    const int64_t step = j["step"].get<int64_t>();
    EXPECT_EQ(m.count(step), 0u) << p << ": step " << step << " logged twice";
    m[step] = {j["loss"].get<double>(), j["grad_norm"].get<double>(), j["lr"].get<double>()};
    if (lines) ++*lines;
  }
  return m;
}

// Every step of `got` logged exactly (bit for bit) as in `ref`.
void expect_same_steps(const std::map<int64_t, StepLog>& got, const std::map<int64_t, StepLog>& ref,
                       const std::string& what) {
  for (const auto& [step, s] : got) {
    ASSERT_TRUE(ref.count(step)) << what << ": step " << step << " is not in the reference";
    const StepLog& r = ref.at(step);
    EXPECT_EQ(std::bit_cast<uint64_t>(s.loss), std::bit_cast<uint64_t>(r.loss))
        << what << ": step " << step << " loss " << fmt::format("{:.17g} vs {:.17g}", s.loss, r.loss);
    EXPECT_EQ(std::bit_cast<uint64_t>(s.grad_norm), std::bit_cast<uint64_t>(r.grad_norm)) << what << ": step " << step;
    EXPECT_EQ(std::bit_cast<uint64_t>(s.lr), std::bit_cast<uint64_t>(r.lr)) << what << ": step " << step;
  }
}

bool same_file(const fs::path& a, const fs::path& b) {
  return fs::exists(a) && fs::exists(b) && read_text(a) == read_text(b);
}

// The model and data every test trains: the tiny preset (Llama-style, 2 layers, hidden 64) on
// random ids, with shuffled documents (EOS 3), two windows a step, chunks and AdamW.
void make_inputs(const fs::path& dir, const std::string& dtype = "f32") {
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --dtype {} --seed 5 --out {}/m", dtype, dir.string())).code,
            0);
  write_tokens(dir / "t.bin", 4000, 128, 6);
}
std::string train_args(const fs::path& dir, int64_t steps, int64_t seq_len = 128) {
  return fmt::format("train --model {0}/m --data {0}/t.bin --seq-len {1} --chunk-size 32 --page-size 16 --grad-accum 2 "
                     "--steps {2} --optimizer adamw --lr 2e-3 --weight-decay 0.1 --warmup-steps 3 --shuffle "
                     "--eos-id 3 --log-every 100",
                     dir.string(), seq_len, steps);
}

TEST(Resume, FromEveryCheckpointEqualsTheUninterruptedRun) {
  const auto dir = temp_dir();
  make_inputs(dir, "bf16");
  const std::string d = dir.string(), train = train_args(dir, 10);
  CmdResult r = oomb_cmd(dir, train + fmt::format(" --checkpoint-dir {0}/ck --save-every 2 --metrics {0}/ref.jsonl "
                                                  "--out {0}/ref", d));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr(fmt::format("checkpoint {}/ck/step-000002 written", d)));
  const auto ref = read_metrics(dir / "ref.jsonl");
  ASSERT_EQ(ref.size(), 10u);
  int steps = 0;
  for (int k : {2, 4, 6, 8, 10}) {
    SCOPED_TRACE(fmt::format("resumed from step {}", k));
    const fs::path ck = dir / "ck" / checkpoint_name(k);
    r = oomb_cmd(dir, train + fmt::format(" --resume {} --metrics {}/r{}.jsonl --out {}/r{}", ck.string(), d, k, d, k));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_THAT(r.out, HasSubstr(fmt::format("resumed from {}: step {}/10", ck.string(), k)));
    const auto got = read_metrics(dir / fmt::format("r{}.jsonl", k));
    EXPECT_EQ(got.size(), size_t(10 - k));
    if (!got.empty()) {
      EXPECT_EQ(got.begin()->first, k);
    }
    expect_same_steps(got, ref, "resumed run");
    steps += int(got.size());
    // saved in the dtype the model was loaded in (bf16), equal to the uninterrupted run's
    EXPECT_TRUE(same_file(dir / fmt::format("r{}", k) / "model.safetensors", dir / "ref" / "model.safetensors"));
    EXPECT_EQ(load_config(dir / fmt::format("r{}", k)).torch_dtype, "bfloat16");
  }
  std::cout << fmt::format("resumed from 5 checkpoints: {} later steps equal bit for bit, 5 final models byte for byte",
                           steps)
            << std::endl;
}

// A LoRA run's checkpoints hold its trainable set as a PEFT adapter directory (not the frozen base)
// and the adapters' moments; resumed from each, every later step and the final adapter equal the
// uninterrupted run's bit for bit. Another base, or the LoRA flags left off, is refused, named.
TEST(Resume, LoraCheckpointsHoldTheAdapterAndResumeBitForBit) {
  const auto dir = temp_dir();
  make_inputs(dir);
  const std::string d = dir.string(),
                    train = train_args(dir, 6) + " --lora-rank 4 --lora-alpha 8 --lora-targets q,v,down "
                                                 "--train-embeddings-norms";
  CmdResult r = oomb_cmd(dir, train + fmt::format(" --checkpoint-dir {0}/ck --save-every 2 --metrics {0}/ref.jsonl "
                                                  "--out {0}/ref", d));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto ref = read_metrics(dir / "ref.jsonl");
  ASSERT_EQ(ref.size(), 6u);
  const fs::path ck2 = dir / "ck" / checkpoint_name(2);
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors", "optimizer.safetensors", "state.json"})
    EXPECT_TRUE(fs::exists(ck2 / f)) << f;
  EXPECT_FALSE(fs::exists(ck2 / "model.safetensors")) << "the frozen base is --model's, not the checkpoint's";
  for (int k : {2, 4}) {
    SCOPED_TRACE(fmt::format("resumed from step {}", k));
    const fs::path ck = dir / "ck" / checkpoint_name(k);
    r = oomb_cmd(dir, train + fmt::format(" --resume {} --metrics {}/r{}.jsonl --out {}/r{}", ck.string(), d, k, d, k));
    ASSERT_EQ(r.code, 0) << r.out;
    const auto got = read_metrics(dir / fmt::format("r{}.jsonl", k));
    EXPECT_EQ(got.size(), size_t(6 - k));
    expect_same_steps(got, ref, "resumed LoRA run");
    EXPECT_TRUE(same_file(dir / fmt::format("r{}", k) / "adapter_model.safetensors",
                          dir / "ref" / "adapter_model.safetensors"));
  }
  // control: the adapter changed between checkpoints (the equality above is not of untouched files)
  EXPECT_FALSE(same_file(ck2 / "adapter_model.safetensors", dir / "ck" / checkpoint_name(4) / "adapter_model.safetensors"));
  // another base of the same shape
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --seed 6 --out {}/m2", d)).code, 0);
  std::string other = train;
  other.replace(other.find(d + "/m "), d.size() + 3, d + "/m2 ");
  r = oomb_cmd(dir, other + fmt::format(" --resume {}", ck2.string()));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("holds other base weights than the run that wrote it"));
  // the LoRA flags left off
  r = oomb_cmd(dir, train_args(dir, 6) + fmt::format(" --resume {}", ck2.string()));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--lora-rank is not recorded here but 4 in the checkpoint"));
}

// Under --precision bf16 the pages' dtype does not change the bits (K and V are rounded to bf16
// either way), so a checkpoint written with f32 pages (as every bf16 run's was before --kv-dtype
// auto) resumes with the default bf16 pages, bit for bit; under fp32 it changes the math and is
// refused (AnotherRunIsRefusedNamingTheDifference).
TEST(Resume, Bf16RunsResumeWhateverTheirPagesDtype) {
  const auto dir = temp_dir();
  make_inputs(dir);
  const std::string d = dir.string(), train = train_args(dir, 4) + " --precision bf16";
  CmdResult r = oomb_cmd(dir, train + fmt::format(" --kv-dtype f32 --checkpoint-dir {0}/ck --save-every 2 "
                                                  "--metrics {0}/ref.jsonl", d));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto ref = read_metrics(dir / "ref.jsonl");
  ASSERT_EQ(ref.size(), 4u);
  const fs::path ck = dir / "ck" / checkpoint_name(2);
  r = oomb_cmd(dir, train + fmt::format(" --resume {} --metrics {}/r.jsonl", ck.string(), d));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto got = read_metrics(dir / "r.jsonl");
  EXPECT_EQ(got.size(), 2u);
  expect_same_steps(got, ref, "resumed with bf16 pages");
}

TEST(Resume, AnotherRunIsRefusedNamingTheDifference) {
  const auto dir = temp_dir();
  make_inputs(dir);
  const std::string d = dir.string(), ck = " --checkpoint-dir " + d + "/ck";
  ASSERT_EQ(oomb_cmd(dir, train_args(dir, 4) + ck + " --save-every 2").code, 0);
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --rope-theta 500000 --out {}/m2", d)).code, 0);
  write_tokens(dir / "t2.bin", 4000, 128, 7);
  const std::string base = train_args(dir, 4);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = base;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {with("--lr 2e-3", "--lr 3e-3"), "--lr is 0.003 here but 0.002 in the checkpoint"},
      {with("--seq-len 128", "--seq-len 64"), "--seq-len is 64 here but 128 in the checkpoint"},
      {with("--chunk-size 32", "--chunk-size 64"), "--chunk-size is 64 here but 32 in the checkpoint"},
      // (SGD takes no --weight-decay: refused before any resume)
      {with("--optimizer adamw --lr 2e-3 --weight-decay 0.1", "--optimizer sgd --lr 2e-3"),
       "--optimizer is sgd here but adamw in the checkpoint"},
      {with("--shuffle", "--seed 9 --shuffle"), "--seed is 9 here but 0 in the checkpoint"},
      // (--steps 6 resumes here: steps 0-3, the warmup and the peak, have the same lr under either length; a
      // schedule that would not is refused in test_lr_schedule)
      {with("--warmup-steps 3", "--warmup-steps 4"), "--warmup-steps is 4 here but 3 in the checkpoint"},
      {with("--warmup-steps 3", "--warmup-steps 2 --kv-dtype bf16"), "--kv-dtype is bf16 here but f32 in the checkpoint"},
      {with("/t.bin", "/t2.bin"), fmt::format("--data {0}/t2.bin is not the checkpoint's data {0}/t.bin", d)},
      {with("/m ", "/m2 "), "config.json differs from the checkpoint's in field 'rope_theta': 500000.0 here, 10000.0"},
  };
  for (const auto& [args, message] : cases) {
    SCOPED_TRACE(args);
    const CmdResult r = oomb_cmd(dir, args + ck + " --resume auto --save-every 1");
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_THAT(r.out, HasSubstr(fmt::format("cannot resume from {}/ck/step-000004", d)));
    EXPECT_THAT(r.out, HasSubstr(message));
    EXPECT_EQ(list_checkpoints(dir / "ck").size(), 2u) << "a refused run writes no checkpoint";
  }
  // a checkpoint that is not complete, named; auto passes over it to the newest complete one
  fs::rename(dir / "ck" / "step-000004" / "optimizer.safetensors", dir / "optimizer.safetensors");
  CmdResult r = oomb_cmd(dir, base + " --resume " + d + "/ck/step-000004");
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr(d + "/ck/step-000004: optimizer.safetensors is missing (state.json lists it"));
  r = oomb_cmd(dir, base + " --resume " + d + "/ck/nothing");
  EXPECT_THAT(r.out, HasSubstr(d + "/ck/nothing: not a checkpoint directory (it does not exist)"));
  r = oomb_cmd(dir, base + ck + " --resume auto");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--resume auto passes over " + d + "/ck/step-000004"));
  EXPECT_THAT(r.out, HasSubstr(fmt::format("resumed from {}/ck/step-000002: step 2/4", d)));
  // flags that need another
  r = oomb_cmd(dir, base + " --resume auto");
  EXPECT_THAT(r.out, HasSubstr("--resume auto: needs --checkpoint-dir"));
  r = oomb_cmd(dir, base + " --save-every 2");
  EXPECT_THAT(r.out, HasSubstr("--save-every requires --checkpoint-dir"));
  r = oomb_cmd(dir, "train --steps 2 --resume auto" + ck);
  EXPECT_THAT(r.out, HasSubstr("need --model and --data (the built-in demo does not checkpoint)"));
  r = oomb_cmd(dir, base + " --checkpoint-dir " + d + "/m");
  EXPECT_THAT(r.out, HasSubstr("--checkpoint-dir"));
  EXPECT_NE(r.code, 0);
  // --resume auto with no checkpoint yet starts at step 0
  r = oomb_cmd(dir, base + " --resume auto --checkpoint-dir " + d + "/fresh");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--resume auto: no checkpoint in " + d + "/fresh yet; starting at step 0"));
}

// The acceptance test: SIGKILL at random moments, by turns anywhere in the run, while a checkpoint
// is being written (OOMB_TEST_CKPT_DELAY_MS stretches each write) and during a step, each followed
// by --resume auto, until the run completes; rounds repeat until 24 kills. After every kill every step-* directory loads and equals
// the uninterrupted run's checkpoint of that step file for file; every loss any attempt logged, and
// the final weights, equal the uninterrupted run's bit for bit.
TEST(Resume, SurvivesSigkillAtRandomMoments) {
  const auto dir = temp_dir();
  make_inputs(dir);
  const std::string d = dir.string();
  const int delay_ms = 20;
  const std::string train = train_args(dir, 30, 256) + " --save-every 3";
  CmdResult r = oomb_cmd(dir, train + fmt::format(" --checkpoint-dir {0}/refck --metrics {0}/ref.jsonl --out {0}/ref", d));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto ref = read_metrics(dir / "ref.jsonl");
  ASSERT_EQ(ref.size(), 30u);
  // the length of a whole run with the write delay, for the random moments
  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = spawn(train + fmt::format(" --checkpoint-dir {0}/timing --keep-last 2", d), dir / "timing.log", delay_ms);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_text(dir / "timing.log");
  const double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::mt19937 g(20250611);
  auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(g); };
  int kills = 0, in_write = 0, in_step = 0, rounds = 0, attempts = 0, lines = 0, cut = 0, loaded = 0;
  while (kills < 24) {
    const fs::path rd = dir / fmt::format("round{}", rounds++), ck = rd / "ck";
    fs::create_directories(ck);
    for (int attempt = 0;; ++attempt, ++attempts) {
      ASSERT_LT(attempt, 200) << "no progress";
      const fs::path metrics = rd / fmt::format("m{}.jsonl", attempt), log = rd / fmt::format("log{}", attempt);
      const int ino = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
      ASSERT_GE(ino, 0);
      ::inotify_add_watch(ino, ck.c_str(), IN_CREATE);
      pid = spawn(train + fmt::format(" --checkpoint-dir {} --keep-last 2 --resume auto --metrics {} --out {}/out",
                                      ck.string(), metrics.string(), rd.string()),
                  log, delay_ms);
      // by turns: a random moment of the run; while a checkpoint is written (its staging directory
      // appeared); during a step (a step's metrics line appeared and no checkpoint follows it)
      const int mode = kills % 3;
      const bool kill_it = kills < 24, at_write = mode == 1, in_a_step = mode == 2;
      const auto deadline = std::chrono::steady_clock::now() +
                            std::chrono::duration<double>(mode == 0 ? uniform(0, run_s / 3) : 600.0);
      size_t seen = 0;
      bool exited = false;
      for (;;) {
        if (::waitpid(pid, &status, WNOHANG) == pid) {
          exited = true;
          break;
        }
        if (!kill_it) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          continue;
        }
        const auto left = std::chrono::duration<double, std::milli>(deadline - std::chrono::steady_clock::now()).count();
        if (left <= 0) break;
        if (in_a_step) {
          const auto m = read_metrics(metrics);
          if (m.size() > seen && (m.rbegin()->first + 1) % 3 != 0) {
            std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(uniform(0, 10)));
            break;
          }
          seen = m.size();
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
          continue;
        }
        pollfd pf{ino, POLLIN, 0};
        if (::poll(&pf, 1, int(std::min(left, 10.0)) + 1) <= 0) continue;
        alignas(inotify_event) char buf[4096];
        const ssize_t len = ::read(ino, buf, sizeof buf);
        bool staging = false;  // a checkpoint's staging directory appeared: its files are being written
        for (ssize_t at = 0; at < len;) {
          const auto* ev = reinterpret_cast<const inotify_event*>(buf + at);
          staging = staging || (ev->len > 0 && std::string(ev->name).find(".oomb-new.") != std::string::npos);
          at += ssize_t(sizeof(inotify_event) + ev->len);
        }
        if (at_write && staging) {  // inside the write: its four pauses of delay_ms come after this moment
          std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(uniform(0, 3.8 * delay_ms)));
          break;
        }
      }
      if (!exited) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
      }
      ::close(ino);
      int c = 0;
      expect_same_steps(read_metrics(metrics, &c, &lines), ref, metrics.string());
      cut += c;
      if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
        ++kills;
        bool writing = false;  // this writer's staging directory, or a checkpoint it moved aside to delete
        for (const auto& e : fs::directory_iterator(ck))
          writing = writing || e.path().filename().string().ends_with(fmt::format(".{}", pid));
        (writing ? in_write : in_step) += 1;
        // every step-* directory loads, and is the uninterrupted run's checkpoint of that step
        for (const CheckpointEntry& e : list_checkpoints(ck)) {
          SCOPED_TRACE(fmt::format("kill {}: {}", kills, e.path.string()));
          ASSERT_EQ(error_of([&] {
                      const CheckpointState st = open_checkpoint(e.path);
                      const ModelConfig cfg = load_config(e.path);
                      Params w(cfg, Tier::Host, Tag::IO), m(cfg, Tier::Host, Tag::IO), v(cfg, Tier::Host, Tag::IO);
                      load_checkpoint_tensors(e.path, st, cfg, w, &m, &v);
                    }),
                    "(no error)");
          for (const char* f : {"model.safetensors", "optimizer.safetensors", "config.json"})
            EXPECT_TRUE(same_file(e.path / f, dir / "refck" / e.path.filename() / f)) << f;
          ++loaded;
        }
        continue;
      }
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_text(log);
      break;
    }
    // the round's end: the final weights are the uninterrupted run's; every step was logged by some attempt
    EXPECT_TRUE(same_file(rd / "out" / "model.safetensors", dir / "ref" / "model.safetensors")) << rd;
    std::map<int64_t, StepLog> all;
    for (const auto& e : fs::directory_iterator(rd))
      if (e.path().extension() == ".jsonl")
        for (const auto& [step, s] : read_metrics(e.path())) all[step] = s;
    EXPECT_EQ(all.size(), ref.size()) << rd;
    std::vector<std::string> hidden;  // nothing left behind by the killed writers
    for (const auto& e : fs::directory_iterator(ck))
      if (e.path().filename().string()[0] == '.') hidden.push_back(e.path().filename().string());
    EXPECT_TRUE(hidden.empty()) << ::testing::PrintToString(hidden);
    EXPECT_LE(list_checkpoints(ck).size(), 2u) << "--keep-last 2";
  }
  std::cout << fmt::format("{} rounds of a 30-step run ({:.2f} s uninterrupted with the write delay), {} attempts: "
                           "{} SIGKILLs, {} during checkpoint writes and {} outside them; {} checkpoint loads after "
                           "kills, all equal to the uninterrupted run's; {} logged steps equal bit for bit ({} lines "
                           "cut by kills); every round's final weights equal",
                           rounds, run_s, attempts + rounds, kills, in_write, in_step, loaded, lines, cut)
            << std::endl;
  EXPECT_GE(kills, 20);
  EXPECT_GE(in_write, 8);
  EXPECT_GE(in_step, 8);
}

// SIGTERM and SIGINT: the step under way finishes, a checkpoint is written, the run stops (128 +
// the signal) saying where the checkpoint is; --resume auto continues it bit for bit, on the same
// --metrics file (its lines of later steps from the stopped run dropped).
TEST(Resume, SigtermAndSigintWriteACheckpointAndStop) {
  const auto dir = temp_dir();
  make_inputs(dir);
  const std::string d = dir.string(), train = train_args(dir, 40, 256);
  CmdResult r = oomb_cmd(dir, train + fmt::format(" --metrics {0}/ref.jsonl --out {0}/ref", d));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto ref = read_metrics(dir / "ref.jsonl");
  for (int sig : {SIGTERM, SIGINT}) {
    const std::string name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
    SCOPED_TRACE(name);
    const fs::path sd = dir / name, metrics = sd / "m.jsonl";
    fs::create_directories(sd);
    const std::string args = train + fmt::format(" --checkpoint-dir {0}/ck --metrics {1} --out {0}/out", sd.string(),
                                                 metrics.string());
    const pid_t pid = spawn(args, sd / "log");
    while (read_metrics(metrics).size() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ::kill(pid, sig);
    int status = 0;
    ::waitpid(pid, &status, 0);
    const std::string out = read_text(sd / "log");
    ASSERT_TRUE(WIFEXITED(status)) << out;
    EXPECT_EQ(WEXITSTATUS(status), 128 + sig);
    const auto ckpts = list_checkpoints(sd / "ck");
    ASSERT_EQ(ckpts.size(), 1u) << out;
    const int64_t step = ckpts[0].step;
    EXPECT_GE(step, 3);
    EXPECT_LT(step, 40);
    EXPECT_THAT(out, HasSubstr(fmt::format("oomb train: {} received: stopped after step {}/40; checkpoint written to "
                                           "{}; continue with --resume {}",
                                           name, step, ckpts[0].path.string(), ckpts[0].path.string())));
    EXPECT_EQ(open_checkpoint(ckpts[0].path).step, step);
    EXPECT_FALSE(fs::exists(sd / "out")) << "a stopped run saves no --out";
    EXPECT_EQ(read_metrics(metrics).size(), size_t(step));
    // the stopped run's line of a later step, as a kill between the line and the checkpoint leaves it
    std::ofstream(metrics, std::ios::app) << "{\"step\": " << step << ", \"loss\": 1.0, \"grad_norm\": 1.0, \"lr\": 1.0}\n{\"step\": ";
    r = oomb_cmd(sd, args + " --resume auto");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_THAT(r.out, HasSubstr(fmt::format("resumed from {}: step {}/40", ckpts[0].path.string(), step)));
    int cut = 0;
    const auto all = read_metrics(metrics, &cut);
    EXPECT_EQ(cut, 0);
    EXPECT_EQ(all.size(), 40u);
    expect_same_steps(all, ref, "stopped and resumed");
    EXPECT_TRUE(same_file(sd / "out" / "model.safetensors", dir / "ref" / "model.safetensors"));
    std::cout << fmt::format("{}: stopped after step {} of 40 with a checkpoint; resumed: 40 steps equal bit for bit",
                             name, step)
              << std::endl;
  }
}

// A --metrics FILE that is not a run's metrics (a line that is not a JSON object with a "step") is
// neither started afresh nor cut back on resume: refused, naming the line, the file intact. A run's
// metrics file (a torn last line too) is started afresh.
TEST(Resume, AFileThatIsNotMetricsIsNotTruncated) {
  const auto dir = temp_dir();
  make_inputs(dir);
  const std::string d = dir.string(), train = train_args(dir, 2) + " ";
  const std::string notes = "{\"step\": 0, \"loss\": 1}\nmy notes\n";
  write_bytes(dir / "notes.txt", notes);
  CmdResult r = oomb_cmd(dir, train + fmt::format("--metrics {}/notes.txt", d));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr(fmt::format("--metrics {}/notes.txt: line 2 is not a metrics line (a JSON object with a "
                                           "\"step\"): the file is not a run's metrics, and starting it afresh would "
                                           "lose it; give another --metrics", d)));
  EXPECT_EQ(read_text(dir / "notes.txt"), notes);
  r = oomb_cmd(dir, train + fmt::format("--checkpoint-dir {0}/ck --save-every 1 --metrics {0}/m.jsonl", d));
  ASSERT_EQ(r.code, 0) << r.out;
  r = oomb_cmd(dir, train + fmt::format("--resume {0}/ck/{1} --metrics {0}/notes.txt --out {0}/o", d,
                                        checkpoint_name(1)));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("keeping only the earlier steps' lines would lose it"));
  EXPECT_EQ(read_text(dir / "notes.txt"), notes);
  std::ofstream(dir / "m.jsonl", std::ios::app) << "{\"step\": ";  // a torn last line, as a kill leaves
  r = oomb_cmd(dir, train + fmt::format("--metrics {}/m.jsonl", d));
  EXPECT_EQ(r.code, 0) << r.out;
}

// Until a save's staging directory (".NAME.oomb-new.PID") appears in dir.
void wait_for_staging(const fs::path& dir) {
  for (;;) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().filename().string().find(".oomb-new.") != std::string::npos) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// Resuming from an earlier checkpoint into the --checkpoint-dir that holds later ones (a branch:
// another schedule's decay) is refused, naming them, before anything is replaced; into a directory
// of its own it runs. A run without --out writes a checkpoint at its last step (the result); with
// --out, only every --save-every steps. Each checkpoint carries --model's tokenizer and chat files.
TEST(Resume, BranchesKeepTheirSourceAndTheLastStepIsKept) {
  const auto dir = temp_dir();
  make_inputs(dir);
  write_bytes(dir / "m/tokenizer.json", "{\"model\": \"a tokenizer\"}");
  write_bytes(dir / "m/chat_template.jinja", "{{ messages }}");
  const std::string d = dir.string(), train = train_args(dir, 5);
  CmdResult r = oomb_cmd(dir, train + fmt::format(" --checkpoint-dir {}/ck --save-every 2", d));
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* f : {"tokenizer.json", "chat_template.jinja"})
    EXPECT_EQ(read_text(dir / "ck" / checkpoint_name(5) / f), read_text(dir / "m" / f)) << f;
  EXPECT_NO_THROW(open_checkpoint(dir / "ck" / checkpoint_name(5)));  // (state.json lists them)
  auto steps = [](const fs::path& ck) {
    std::vector<int64_t> s;
    for (const CheckpointEntry& e : list_checkpoints(ck)) s.push_back(e.step);
    return s;
  };
  EXPECT_EQ(steps(dir / "ck"), (std::vector<int64_t>{2, 4, 5}));
  r = oomb_cmd(dir, train + fmt::format(" --checkpoint-dir {}/ck-out --save-every 2 --out {}/o", d, d));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(steps(dir / "ck-out"), (std::vector<int64_t>{2, 4}));
  const std::string ck4 = (dir / "ck" / checkpoint_name(4)).string(), ck5 = (dir / "ck" / checkpoint_name(5)).string();
  const std::string before = read_text(fs::path(ck4) / "state.json") + read_text(fs::path(ck5) / "state.json");
  r = oomb_cmd(dir, train + fmt::format(" --checkpoint-dir {0}/ck --save-every 2 --resume {0}/ck/{1}", d,
                                        checkpoint_name(2)));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr(fmt::format("--resume {0}/ck/{1}: --checkpoint-dir {0}/ck holds 2 later checkpoints ({2}, "
                                           "{3}), which this run would replace as it saves (and --resume auto then "
                                           "take the newest); give this run a --checkpoint-dir of its own, or remove "
                                           "them", d, checkpoint_name(2), checkpoint_name(4), checkpoint_name(5))));
  EXPECT_EQ(read_text(fs::path(ck4) / "state.json") + read_text(fs::path(ck5) / "state.json"), before);
  r = oomb_cmd(dir, train + fmt::format(" --checkpoint-dir {0}/branch --save-every 2 --resume {0}/ck/{1}", d,
                                        checkpoint_name(2)));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(steps(dir / "branch"), (std::vector<int64_t>{4, 5}));
  // the newest, or auto, continues in place
  r = oomb_cmd(dir, train + fmt::format(" --checkpoint-dir {}/ck --save-every 2 --resume auto", d));
  EXPECT_EQ(r.code, 0) << r.out;
}

// SIGTERM or SIGINT once the last step has begun: the run is done, so it is not stopped; the final
// save (--out, or without it the last step's checkpoint) finishes, saying so, and the exit status is
// 0 (without the handler the signal would end the process in the middle of the save).
TEST(Resume, ASignalDuringTheFinalSaveLetsItFinish) {
  const auto dir = temp_dir();
  make_inputs(dir);
  const std::string d = dir.string(), train = train_args(dir, 3);
  for (const bool out : {true, false}) {
    const int sig = out ? SIGTERM : SIGINT;
    SCOPED_TRACE(out ? "--out, SIGTERM" : "--checkpoint-dir, SIGINT");
    const fs::path sd = dir / (out ? "o" : "c");
    fs::create_directories(sd);
    const std::string args = train + (out ? fmt::format(" --out {}/model", sd.string())
                                          : fmt::format(" --checkpoint-dir {}/ck", sd.string()));
    const pid_t pid = spawn(args, sd / "log", 1500);  // (each checkpoint file, and the model before its swap)
    wait_for_staging(out ? sd : sd / "ck");
    ::kill(pid, sig);
    int status = 0;
    ::waitpid(pid, &status, 0);
    const std::string log = read_text(sd / "log");
    ASSERT_TRUE(WIFEXITED(status)) << log;
    EXPECT_EQ(WEXITSTATUS(status), 0) << log;
    EXPECT_THAT(log, HasSubstr(out ? "oomb train: signal received: the final save finishes first"
                                   : "oomb train: signal received: the step under way finishes"));
    EXPECT_THAT(log, HasSubstr(fmt::format("oomb train: {} received after the last step began: the run finished{}",
                                           out ? "SIGTERM" : "SIGINT",
                                           out ? fmt::format(" and saved --out {}/model", sd.string()) : "")));
    if (out) {
      EXPECT_NO_THROW(load_config(sd / "model"));
      EXPECT_TRUE(fs::exists(sd / "model" / "model.safetensors"));
    } else {
      ASSERT_EQ(list_checkpoints(sd / "ck").size(), 1u) << log;
      EXPECT_EQ(open_checkpoint(list_checkpoints(sd / "ck")[0].path).step, 3);
    }
  }
}

// A second signal stops the process at once, whichever the first was: SIGINT, then SIGTERM while
// the checkpoint it asked for is being written, ends the process by SIGTERM (the earlier
// checkpoints whole, the one under way never a step-* directory).
TEST(Resume, ASecondSignalOfEitherKindStopsAtOnce) {
  const auto dir = temp_dir();
  make_inputs(dir);
  const fs::path metrics = dir / "m.jsonl", ck = dir / "ck";
  const std::string args = train_args(dir, 40, 256) + fmt::format(" --checkpoint-dir {} --metrics {}", ck.string(),
                                                                   metrics.string());
  const pid_t pid = spawn(args, dir / "log", 2000);
  while (read_metrics(metrics).size() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ::kill(pid, SIGINT);
  wait_for_staging(ck);
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const std::string log = read_text(dir / "log");
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status) << "\n" << log;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_TRUE(list_checkpoints(ck).empty()) << log;
}

}  // namespace
