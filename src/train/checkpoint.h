// Training checkpoints: DIR/step-NNNNNN (--checkpoint-dir DIR), each holding
//   config.json + model.safetensors   the fp32 master weights as a Hugging Face model directory
//                                     (sharded with an index above 5 GiB), loadable by transformers
//                                     and by `oomb train --model`
//   optimizer.safetensors             AdamW's moments: "<parameter>.exp_avg", "<parameter>.exp_avg_sq"
//                                     (fp32; absent for SGD)
//   state.json                        step, data position, schedule, the run's configuration and the
//                                     other files' sizes (train/checkpoint_state.h), written last
// A LoRA run's checkpoint holds its trainable set as a PEFT adapter directory instead of the weights
// (adapter_config.json + adapter_model.safetensors, hf/peft.h: loadable by PEFT, `--lora DIR` and
// `oomb merge`); the frozen base is --model's, and the moments are the adapters'.
// A checkpoint is written into a staging directory beside it (core/atomic_file.h AtomicDir: every
// file and the directory fsynced), then renamed into place: a crash at any moment leaves the
// earlier checkpoints as they were and no step-* directory that is not complete. Older checkpoints
// are deleted (--keep-last) only once a newer one is in place, each renamed out of the step-*
// names before its files go.
#pragma once
#include <filesystem>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "train/checkpoint_state.h"
#include "train/model.h"
#include "train/optimizer.h"

namespace oomb {

// "step-000123": at least six digits, so names sort by step.
std::string checkpoint_name(int64_t step);

// Writes DIR/step-NNNNNN (state.step) from the model's parameters and the optimizer's moments, as
// a unit; fills state.files. Replaces an existing checkpoint of the same step as a whole. `extra`
// (name -> text) are written beside the others, e.g. the run's resolved flags as config.toml.
// OOMB_TEST_CKPT_DELAY_MS (test only) sleeps that long after each file, so tests can kill a writer
// in the middle of a checkpoint. base_model: a LoRA adapter's base_model_name_or_path.
// Several ranks (`world`): rank 0 writes; the weights are its own (every rank holds them all). With
// a sharded optimizer (--zero 1, 2) every rank calls this: each rank's moments reach rank 0 in
// pieces of grad_sync_piece() floats (a broadcast from the shard's rank), written as they come, so
// the files are those of one optimizer holding every moment. --zero 3 (a sharded model): the
// masters reach rank 0 the same way, range by range (model/param_shards.h), into a host copy of the
// whole model (tag io) that it writes as one rank would, then the moments as they come. Other ranks
// return the path unwritten.
std::filesystem::path save_checkpoint(const std::filesystem::path& dir, CheckpointState state, Model& model,
                                      const Optimizer& opt, const std::map<std::string, std::string>& extra = {},
                                      const std::string& base_model = "", Comm* world = nullptr);

// A checkpoint's state, after checking that it is complete: state.json is there and valid, and every
// file it lists exists with the size it lists. Errors name the directory and the file.
CheckpointState open_checkpoint(const std::filesystem::path& step_dir);

// Loads a checkpoint opened by open_checkpoint: host weights (every tensor, shapes checked, finite)
// and, when the moments are given, AdamW's moments.
void load_checkpoint_tensors(const std::filesystem::path& step_dir, const CheckpointState& state,
                             const ModelConfig& cfg, Params& weights, Params* exp_avg, Params* exp_avg_sq);
// The same into a model and its optimizer (through host copies on a device), with the bias-correction count;
// a LoRA model's adapters (its base is not in the checkpoint). A sharded optimizer (--zero 1, 2) reads its
// range of each moment tensor alone; --zero 3 its part of each range of the weights (through a host
// copy of the whole model, as a fresh run loads --model) and of each moment tensor.
void load_checkpoint(const std::filesystem::path& step_dir, const CheckpointState& state, Model& model,
                     Optimizer& opt);

struct CheckpointEntry {
  int64_t step;
  std::filesystem::path path;
};
// The step-* directories of dir by step, complete or not (state.json is not read).
std::vector<CheckpointEntry> list_checkpoints(const std::filesystem::path& dir);

// The newest checkpoint of dir that opens (`--resume auto`), or an empty path when there is none. A
// newer one that does not open is passed over, saying why on `log`.
std::filesystem::path latest_checkpoint(const std::filesystem::path& dir, std::ostream* log);

// --keep-last keep: deletes the complete checkpoints older than `newest` except the keep - 1 newest
// of them (newer ones, and directories that are not complete checkpoints, are left alone).
void prune_checkpoints(const std::filesystem::path& dir, int64_t newest, int64_t keep);

// Removes what killed writers left in dir: staging directories of checkpoints never completed and
// checkpoints renamed away for deletion.
void remove_stale_checkpoint_files(const std::filesystem::path& dir);

}  // namespace oomb
