// Where a run saves, refused before the first step when the save could not land: a mount point as
// --out (a container's volume: the new directory cannot be renamed over it, and the trained model
// was lost after the last step), and an empty path (`--out "$OUT"` with OUT unset, which saved
// nothing, or failed after the merge); and a file's temporary copy that a killed writer left
// (a tokenized corpus cut by Ctrl-C stayed on disk for good) is removed at the next write; an
// adapter is not saved into a model's directory, nor a model into an adapter's, without --force.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fmt/format.h>

#include "core/atomic_file.h"
#include "model_fixture.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

namespace {

TEST(SaveTargets, AMountPointIsRefusedBeforeTheFirstStep) {
  const auto dir = temp_dir();
  const std::string d = dir.string();
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --out {}/m", d)).code, 0);
  write_tokens(dir / "t.bin", 600, 128, 1);
  ASSERT_EQ(oomb_cmd(dir, fmt::format("train --model {0}/m --data {0}/t.bin --seq-len 64 --steps 1 --lora-rank 2 "
                                      "--out {0}/a", d)).code, 0);
  fs::create_directories(dir / "vol");
  if (::mount("tmpfs", (dir / "vol").c_str(), "tmpfs", 0, "size=16m") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << "): needs CAP_SYS_ADMIN";
  struct Unmount {
    fs::path p;
    ~Unmount() { ::umount(p.c_str()); }
  } unmount{dir / "vol"};
  for (const std::string& cmd : {fmt::format("train --model {0}/m --data {0}/t.bin --seq-len 64 --steps 2 --out {0}/vol", d),
                                 fmt::format("train --model {0}/m --data {0}/t.bin --seq-len 64 --steps 2 --eval-data "
                                             "{0}/t.bin --save-best {0}/vol", d),
                                 fmt::format("merge --model {0}/m --lora {0}/a --out {0}/vol", d)}) {
    SCOPED_TRACE(cmd);
    const CmdResult r = oomb_cmd(dir, cmd);
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_THAT(r.out, HasSubstr(d + "/vol: is a mount point")) << r.out;
    EXPECT_THAT(r.out, Not(HasSubstr("step ")));
  }
  // inside it: saved
  const CmdResult r =
      oomb_cmd(dir, fmt::format("train --model {0}/m --data {0}/t.bin --seq-len 64 --steps 2 --out {0}/vol/run1", d));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(dir / "vol/run1/model.safetensors"));
}

TEST(SaveTargets, AnEmptyPathIsRefused) {
  const auto dir = temp_dir();
  const std::string d = dir.string();
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --out {}/m", d)).code, 0);
  write_tokens(dir / "t.bin", 600, 128, 1);
  for (const std::string& cmd : {fmt::format("train --model {0}/m --data {0}/t.bin --seq-len 64 --steps 1 --out ''", d),
                                 fmt::format("train --model {0}/m --data {0}/t.bin --seq-len 64 --steps 1 --metrics ''", d),
                                 fmt::format("merge --model {0}/m --lora {0}/m --out ''", d),
                                 fmt::format("eval --model {0}/m --data {0}/t.bin --seq-len 64 --out ''", d),
                                 fmt::format("tokenize --tokenizer {0}/tok --input {0}/x.txt --output ''", d)}) {
    SCOPED_TRACE(cmd);
    const CmdResult r = oomb_cmd(dir, cmd);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_THAT(r.out, HasSubstr("an empty value (an unset variable?)"));
    EXPECT_THAT(r.out, Not(HasSubstr("step ")));
  }
}

TEST(SaveTargets, AnAdapterAndAModelDoNotShareADirectory) {
  const auto dir = temp_dir();
  const std::string d = dir.string();
  ASSERT_EQ(oomb_cmd(dir, fmt::format("init --preset tiny --out {}/m", d)).code, 0);
  write_tokens(dir / "t.bin", 600, 128, 1);
  const std::string lora = fmt::format("train --model {0}/m --data {0}/t.bin --seq-len 64 --steps 1 --lora-rank 2 ", d);
  ASSERT_EQ(oomb_cmd(dir, lora + fmt::format("--out {}/a", d)).code, 0);
  ASSERT_EQ(oomb_cmd(dir, fmt::format("merge --model {0}/m --lora {0}/a --out {0}/full", d)).code, 0);
  const auto before = read_text(dir / "full/model.safetensors");
  CmdResult r = oomb_cmd(dir, lora + fmt::format("--out {}/full", d));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr(d + "/full: holds a model (model.safetensors), and an adapter saved beside it"));
  EXPECT_THAT(r.out, Not(HasSubstr("step ")));
  EXPECT_FALSE(fs::exists(dir / "full/adapter_config.json"));
  r = oomb_cmd(dir, fmt::format("merge --model {0}/m --lora {0}/a --out {0}/a", d));  // (its own input: refused)
  EXPECT_NE(r.code, 0);
  ASSERT_EQ(oomb_cmd(dir, lora + fmt::format("--out {}/a2", d)).code, 0);
  r = oomb_cmd(dir, fmt::format("merge --model {0}/m --lora {0}/a --out {0}/a2", d));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr(d + "/a2: holds a LoRA adapter (adapter_config.json), and a model saved beside it"));
  EXPECT_FALSE(fs::exists(dir / "a2/model.safetensors"));
  r = oomb_cmd(dir, lora + fmt::format("--out {}/full --force", d));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(dir / "full/adapter_config.json"));
  EXPECT_EQ(read_text(dir / "full/model.safetensors"), before);
}

TEST(SaveTargets, AKilledWritersTemporaryGoesAtTheNextWrite) {
  const auto dir = temp_dir();
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ASSERT_GT(gone, 0);
  ASSERT_EQ(::waitpid(gone, nullptr, 0), gone);  // (a pid no process holds until it is reused)
  const fs::path dead = dir / fmt::format("t.bin.tmp.{}", gone), live = dir / fmt::format("t.bin.tmp.{}", ::getppid()),
                 other = dir / fmt::format("u.bin.tmp.{}", gone);
  for (const fs::path& p : {dead, live, other}) write_bytes(p, "partial");
  write_file_atomic(dir / "t.bin", "whole");
  EXPECT_EQ(read_text(dir / "t.bin"), "whole");
  EXPECT_FALSE(fs::exists(dead)) << "the temporary of a writer that is gone stays";
  EXPECT_TRUE(fs::exists(live)) << "a running writer's temporary (its pid alive) is not ours to remove";
  EXPECT_TRUE(fs::exists(other)) << "another file's temporary is not this one's";
}

}  // namespace
