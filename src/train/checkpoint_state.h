// The state file of a training checkpoint (DIR/step-NNNNNN/state.json): everything beside the
// tensors that a resumed run needs to continue bit for bit, and what the resumed run must match.
// It is written last, after every other file of the checkpoint, and lists those files with their
// sizes: a checkpoint without it, or missing a file it lists, is not complete and does not load.
//
//   {"format": "oomb-checkpoint", "version": 1,
//    "step": 6,                 optimizer steps done; the resumed run's first step is step 6 (from 0)
//    "total_steps": 20,         --steps (the lr schedule's length)
//    "adam_step": 6,            AdamW's bias-correction count (steps skipped by --skip-nonfinite do not count)
//    "windows": 12,             training windows consumed (step x --grad-accum)
//    "epoch": 0, "epoch_position": 192,   where the next window starts in the data's stream
//    "sources": [{"path": "...", "windows": 8, "epoch": 0, "epoch_position": 128}, ...],
//                               a mix of data (--data given more than once) instead of the two above:
//                               each source's windows consumed and where its next one starts
//    "next_lr": 0.00085,        the schedule's lr at `step` (recomputed and compared on resume)
//    "weights_dtype": "bf16",   the dtype --model was loaded in (--out saves in it)
//    "model": {...},            config.json of the run's model as loaded
//    "data": {"path": "...", "tokens": 4000, "fingerprint": "89ab..."},
//    "flags": {"--lr": 0.001, "--seq-len": 16, ...},   every flag that changes the math, resolved
//    "files": {"config.json": 712, "model.safetensors": 41234, "optimizer.safetensors": 82412}}
//
// No generator state is carried: the only randomness in training is --shuffle's document order,
// which is drawn per epoch from (--seed, epoch), so the window index alone restores it.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace oomb {

constexpr int kCheckpointVersion = 1;
constexpr const char* kCheckpointStateFile = "state.json";

struct DataIdentity {
  std::string path;         // --data as given (informational: moved data with the same tokens resumes)
  int64_t tokens = 0;       // tokens in the store (after tokenization, for text)
  std::string fingerprint;  // 16 hex digits over the token count and sampled blocks of ids
};

struct SourcePosition {  // (informational: the window count restores the mix)
  std::string path;
  int64_t windows = 0, epoch = 0, epoch_position = 0;
};

struct CheckpointState {
  int64_t step = 0;
  int64_t total_steps = 1;
  int64_t adam_step = 0;
  int64_t windows = 0;
  int64_t epoch = 0, epoch_position = 0;  // (one source)
  std::vector<SourcePosition> sources;    // a mix of data; empty: one source
  double next_lr = 0;
  std::string weights_dtype = "f32";  // f32 | bf16 | f16
  nlohmann::json model = nlohmann::json::object();
  DataIdentity data;
  nlohmann::json flags = nlohmann::json::object();  // "--flag": number, string or boolean
  std::map<std::string, int64_t> files;             // every other file of the checkpoint: bytes
  double write_s = 0;  // seconds its files took to write (--time-limit's forecast; absent in older ones: 0)
};

nlohmann::json state_to_json(const CheckpointState& s);
// Validates every field; errors start with `where` (the file) and name the field at fault.
CheckpointState state_from_json(const nlohmann::json& j, const std::string& where);
CheckpointState parse_checkpoint_state(std::string_view text, const std::string& where);

// A float flag as the state file keeps it: the double whose shortest form is the float's own
// ("--lr 1e-3" is 0.001, not 0.0010000000474974513), so equal floats give equal values.
double flag_value(float x);

// Refuses to resume `now` from `saved` (read from `where`) when they differ in anything that changes
// the math: the model's config (naming the field), the data (naming both files), a flag (naming it,
// with both values), or the schedule's length. Differences in the files, step and optimizer
// position are the checkpoint's own and not compared. schedule_extended: the schedule (--steps,
// --lr-schedule, --decay-steps, --min-lr-ratio) may differ (RunCheckpoints: every step the
// checkpoint has done has the same learning rate under both, so that they are the new run's too).
void check_same_run(const CheckpointState& saved, const CheckpointState& now, const std::string& where,
                    bool schedule_extended = false);

}  // namespace oomb
