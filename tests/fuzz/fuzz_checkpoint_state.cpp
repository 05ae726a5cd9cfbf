// fuzz-sources: train/checkpoint_state.cpp
// Feeds bytes to parse_checkpoint_state (a checkpoint's state.json): only oomb::Error may come out.
// A state that parses survives state_to_json -> parse unchanged, and resumes against itself.
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "fuzz_check.h"
#include "train/checkpoint_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  oomb::CheckpointState s;
  try {
    s = oomb::parse_checkpoint_state(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz/state.json");
  } catch (const oomb::Error&) {
    return 0;
  }
  check(s.step >= 0 && s.step <= s.total_steps && s.adam_step <= s.step && s.data.tokens >= 1, "validated ranges");
  const nlohmann::json j = oomb::state_to_json(s);
  const oomb::CheckpointState t = oomb::parse_checkpoint_state(j.dump(), "fuzz/roundtrip.json");
  check(oomb::state_to_json(t) == j, "state_to_json round trip");
  oomb::check_same_run(s, t, "fuzz");  // throws (and the fuzzer reports it) if a state differs from itself
  return 0;
}
