// The checkpoint state file (train/checkpoint_state.h): parsing and validation, every refusal naming
// its field, and the comparison of a resumed run with its checkpoint naming each difference.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "test_util.h"
#include "train/checkpoint_state.h"

using namespace oomb;
using namespace oomb::testing;
using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;

namespace {

CheckpointState sample() {
  CheckpointState s;
  s.step = 6;
  s.total_steps = 20;
  s.adam_step = 5;
  s.windows = 12;
  s.epoch = 1;
  s.epoch_position = 192;
  s.next_lr = 0.00085;
  s.weights_dtype = "bf16";
  s.model = {{"hidden_size", 64}, {"num_hidden_layers", 2}, {"transformers_version", "4.51.0"}};
  s.data = {"data/t.bin", 4000, "0123456789abcdef"};
  s.flags = {{"--lr", flag_value(1e-3f)}, {"--seq-len", 256}, {"--optimizer", "adamw"}, {"--shuffle", true}};
  s.files = {{"config.json", 712}, {"model.safetensors", 41234}, {"optimizer.safetensors", 82412}};
  s.write_s = 0.25;
  return s;
}

std::string parse_error(const json& j) {
  return error_of([&] { parse_checkpoint_state(j.dump(), "ck/step-000006/state.json"); });
}

TEST(CheckpointState, RoundTrips) {
  const CheckpointState s = sample();
  const CheckpointState t = parse_checkpoint_state(state_to_json(s).dump(2), "x");
  EXPECT_EQ(state_to_json(t), state_to_json(s));
  EXPECT_EQ(t.step, 6);
  EXPECT_EQ(t.adam_step, 5);
  EXPECT_EQ(t.data.fingerprint, "0123456789abcdef");
  EXPECT_EQ(t.files.at("optimizer.safetensors"), 82412);
  EXPECT_EQ(t.flags["--lr"].dump(), "0.001");  // the float's shortest form, not 0.0010000000474974513
  EXPECT_EQ(t.write_s, 0.25);
}

// write_s (the files' write time, --time-limit's forecast) is optional, as checkpoints before it lack it.
TEST(CheckpointState, WriteTimeIsOptional) {
  json j = state_to_json(sample());
  j.erase("write_s");
  EXPECT_EQ(parse_checkpoint_state(j.dump(), "x").write_s, 0);
  for (const json& bad : {json(-1), json("1"), json(nullptr)}) {
    j["write_s"] = bad;
    EXPECT_THAT(parse_error(j), HasSubstr("field 'write_s' must be a finite number >= 0")) << bad;
  }
}

// A mix of data (--data given more than once) records each source's position instead of one
// epoch and offset; the list is checked as the rest is.
TEST(CheckpointState, AMixRecordsEachSourcesPosition) {
  CheckpointState s = sample();
  s.sources = {{"long.bin", 9, 0, 576}, {"short.bin", 3, 2, 64}};
  const json j = state_to_json(s);
  EXPECT_FALSE(j.contains("epoch"));
  EXPECT_FALSE(j.contains("epoch_position"));
  const CheckpointState t = parse_checkpoint_state(j.dump(), "x");
  ASSERT_EQ(t.sources.size(), 2u);
  EXPECT_EQ(t.sources[1].path, "short.bin");
  EXPECT_EQ(t.sources[1].windows, 3);
  EXPECT_EQ(t.sources[1].epoch, 2);
  EXPECT_EQ(t.sources[1].epoch_position, 64);
  EXPECT_EQ(state_to_json(t), j);
  json bad = j;
  bad["sources"] = json::array({j["sources"][0]});
  EXPECT_THAT(parse_error(bad), HasSubstr("field 'sources' must be a list of two sources or more"));
  bad = j;
  bad["sources"][1].erase("windows");
  EXPECT_THAT(parse_error(bad), HasSubstr("(sources[1]): field 'windows' is missing"));
  bad = j;
  bad["sources"][0]["epoch_position"] = -1;
  EXPECT_THAT(parse_error(bad), HasSubstr("(sources[0]): field 'epoch_position' must be 0 or more"));
  bad = j;
  bad["sources"][0] = 5;
  EXPECT_THAT(parse_error(bad), HasSubstr("(sources[0]): not an object"));
  bad = j;
  bad.erase("sources");  // (one source: its epoch and offset are required)
  EXPECT_THAT(parse_error(bad), HasSubstr("'epoch'"));
}

TEST(CheckpointState, BadJsonNamesTheFile) {
  const std::string e = error_of([] { parse_checkpoint_state("{\"format\": \"oomb-checkpoint\", ", "ck/s/state.json"); });
  EXPECT_THAT(e, HasSubstr("ck/s/state.json: not valid JSON"));
  EXPECT_THAT(error_of([] { parse_checkpoint_state("[1, 2]", "f.json"); }), HasSubstr("f.json: not a checkpoint state"));
  EXPECT_THAT(error_of([] { parse_checkpoint_state("", "f.json"); }), HasSubstr("f.json: not valid JSON"));
}

TEST(CheckpointState, EveryMissingFieldIsNamed) {
  const json full = state_to_json(sample());
  for (const auto& [name, v] : full.items()) {
    SCOPED_TRACE(name);
    if (name == "write_s") continue;  // (optional: WriteTimeIsOptional)
    json j = full;
    j.erase(name);
    EXPECT_THAT(parse_error(j), HasSubstr(fmt::format("ck/step-000006/state.json: field '{}' is missing", name)));
  }
  for (const char* name : {"path", "tokens", "fingerprint"}) {
    json j = full;
    j["data"].erase(name);
    EXPECT_THAT(parse_error(j), HasSubstr(fmt::format("state.json (data): field '{}' is missing", name)));
  }
}

TEST(CheckpointState, BadValuesAreNamed) {
  const json full = state_to_json(sample());
  const std::vector<std::tuple<std::string, json, std::string>> cases = {
      {"format", "other", "field 'format' is 'other', not 'oomb-checkpoint'"},
      {"version", 2, "field 'version' is 2; this oomb reads version 1"},
      {"step", "6", "field 'step' must be a whole number, got \"6\""},
      {"step", -1, "field 'step' must be 0 or more, got -1"},
      {"step", 6.5, "field 'step' must be a whole number, got 6.5"},
      {"step", 21, "field 'step' (21) is beyond 'total_steps' (20)"},
      {"step", json(18446744073709551615ull), "field 'step' must be 0 or more"},
      {"total_steps", 0, "field 'total_steps' must be 1 or more"},
      {"adam_step", 7, "field 'adam_step' (7) is beyond 'step' (6)"},
      {"next_lr", "0.1", "field 'next_lr' must be a finite number >= 0"},
      {"next_lr", -1, "field 'next_lr' must be a finite number >= 0"},
      {"weights_dtype", "int8", "field 'weights_dtype' is 'int8', not one of f32, bf16, f16"},
      {"model", json::array(), "field 'model' must be an object, got array"},
      {"flags", 3, "field 'flags' must be an object, got 3"},
      {"flags", json{{"lr", 1}}, "flags: 'lr' is not a flag name (--name)"},
      {"flags", json{{"--lr", nullptr}}, "flags: '--lr' must be a number, string or boolean, got null"},
      {"flags", json{{"--lr", json::array({1})}}, "flags: '--lr' must be a number, string or boolean"},
      {"files", json{{"../model.safetensors", 3}}, "files: '../model.safetensors' is not a file name"},
      {"files", json{{"state.json", 3}}, "files: 'state.json' is not a file name"},
      {"files", json{{"model.safetensors", -3}}, "files: the size of 'model.safetensors' must be a whole number >= 0"},
      {"files", json{{"model.safetensors", "3"}}, "files: the size of 'model.safetensors' must be a whole number >= 0"},
  };
  for (const auto& [name, value, message] : cases) {
    SCOPED_TRACE(name + " = " + value.dump());
    json j = full;
    j[name] = value;
    EXPECT_THAT(parse_error(j), HasSubstr("ck/step-000006/state.json: " + message));
  }
  json j = full;
  j["data"]["fingerprint"] = "0123456789ABCDEF";
  EXPECT_THAT(parse_error(j), HasSubstr("(data): field 'fingerprint' must be 16 lowercase hex digits"));
  j = full;
  j["data"]["tokens"] = 0;
  EXPECT_THAT(parse_error(j), HasSubstr("(data): field 'tokens' must be 1 or more"));
}

TEST(CheckpointState, FloatFlagsKeepTheirShortestForm) {
  EXPECT_EQ(flag_value(1e-3f), 0.001);
  EXPECT_EQ(flag_value(3e-4f), 0.0003);
  EXPECT_EQ(flag_value(0.1f), 0.1);
  EXPECT_EQ(flag_value(1.0f), 1.0);
  EXPECT_NE(flag_value(1e-3f), flag_value(std::nextafter(1e-3f, 1.0f)));  // every float its own value
}

TEST(CheckpointState, TheSameRunResumes) {
  const CheckpointState saved = sample();
  CheckpointState now = sample();
  now.step = 0, now.adam_step = 0, now.windows = 0, now.files.clear();  // the checkpoint's own position
  now.data.path = "moved/t.bin";                                        // the same tokens elsewhere
  now.model["transformers_version"] = "4.57.0";                         // another writer of config.json
  now.model["torch_dtype"] = "float32";
  EXPECT_EQ(error_of([&] { check_same_run(saved, now, "ck/step-000006"); }), "(no error)");
}

TEST(CheckpointState, EveryDifferenceIsNamed) {
  const CheckpointState saved = sample();
  auto refusal = [&](const std::function<void(CheckpointState&)>& change) {
    CheckpointState now = sample();
    change(now);
    return error_of([&] { check_same_run(saved, now, "ck/step-000006"); });
  };
  EXPECT_THAT(refusal([](CheckpointState& s) { s.flags["--lr"] = flag_value(2e-3f); }),
              HasSubstr("cannot resume from ck/step-000006: this run differs"));
  EXPECT_THAT(refusal([](CheckpointState& s) { s.flags["--lr"] = flag_value(2e-3f); }),
              HasSubstr("--lr is 0.002 here but 0.001 in the checkpoint"));
  EXPECT_THAT(refusal([](CheckpointState& s) { s.flags["--optimizer"] = "sgd"; }),
              HasSubstr("--optimizer is sgd here but adamw in the checkpoint"));
  EXPECT_THAT(refusal([](CheckpointState& s) { s.flags["--shuffle"] = false; }),
              HasSubstr("--shuffle is false here but true in the checkpoint"));
  EXPECT_THAT(refusal([](CheckpointState& s) { s.flags.erase("--seq-len"); }),
              HasSubstr("--seq-len is not recorded here but 256 in the checkpoint"));
  EXPECT_THAT(refusal([](CheckpointState& s) { s.flags["--doc-mask"] = true; }),
              HasSubstr("--doc-mask is true here but not recorded in the checkpoint"));
  EXPECT_THAT(refusal([](CheckpointState& s) { s.total_steps = 30; }),
              HasSubstr("--steps is 30 here but 20 in the checkpoint"));
  EXPECT_THAT(refusal([](CheckpointState& s) { s.model["hidden_size"] = 128; }),
              HasSubstr("config.json differs from the checkpoint's in field 'hidden_size': 128 here, 64 in the checkpoint"));
  EXPECT_THAT(refusal([](CheckpointState& s) { s.model["rope_theta"] = 1e6; }),
              HasSubstr("field 'rope_theta': 1000000.0 here, absent in the checkpoint"));
  EXPECT_THAT(refusal([](CheckpointState& s) { s.data = {"other.bin", 4000, "fedcba9876543210"}; }),
              HasSubstr("--data other.bin is not the checkpoint's data data/t.bin: 4000 tokens here (fingerprint "
                        "fedcba9876543210), 4000 in the checkpoint (fingerprint 0123456789abcdef)"));
  EXPECT_THAT(refusal([](CheckpointState& s) { s.data.tokens = 3999; }), HasSubstr("3999 tokens here"));
  // several differences: every one listed
  const std::string e = refusal([](CheckpointState& s) {
    s.flags["--seq-len"] = 128;
    s.flags["--lr"] = flag_value(5e-4f);
    s.total_steps = 10;
  });
  EXPECT_THAT(e, HasSubstr("--seq-len is 128 here but 256"));
  EXPECT_THAT(e, HasSubstr("--lr is 0.0005 here but 0.001"));
  EXPECT_THAT(e, HasSubstr("--steps is 10 here but 20"));
  EXPECT_THAT(e, Not(HasSubstr("--optimizer")));
}

}  // namespace
