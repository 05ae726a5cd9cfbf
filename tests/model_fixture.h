// Tiny random HF model directories for model-level tests.
#pragma once
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/dtype.h"
#include "hf/config.h"
#include "model/memory_plan.h"
#include "train/model.h"

namespace oomb::testing {

// A small config.json: hidden 32, 2 layers, 4 heads of dim 8, intermediate 48, vocab 61.
nlohmann::json tiny_config_json(const std::string& arch, int64_t kv_heads);
// A tiny Granite with its four multipliers off 1 (none a power of two; attention's apart from
// 1/sqrt(head_dim)), tied, token 0 its pad (as IBM's files)
nlohmann::json tiny_granite_json(int64_t kv_heads);
// A tiny Gemma 3: its first layer sliding (window 6, turned by the plain RoPE of rope_local_base_freq
// 100), its second full (rope_theta's, scaled linearly x2); heads of 16 (q twice as wide as hidden, as
// Gemma's); query_pre_attn_scalar 20; tied, pad 0 (Gemma3TextConfig's).
nlohmann::json tiny_gemma3_json(int64_t kv_heads);
// Writes dir/config.json (exactly `cfg_json`) and dir/model.safetensors with random weights:
// matrices N(0, 0.15), norms 1 + N(0, 0.1) (Gemma 3's, scaling by 1 + w: N(0, 0.1)), biases N(0, 0.1),
// stored in `dtype`.
ModelConfig write_tiny_model(const std::filesystem::path& dir, const nlohmann::json& cfg_json, uint64_t seed,
                             DType dtype = DType::F32);
// The weights of dir loaded into m, through a host copy when the backend's memory is a device's;
// gradients enabled.
void load_for_training(Model& m, const std::filesystem::path& dir);
// A frozen bf16 base's bytes (LoRA under --precision bf16), written out here rather than taken
// from the code under test: each tensor from a 256-byte boundary, bf16 where a matmul reads it
// (2-D, not the embedding), fp32 otherwise.
int64_t frozen_bf16_bytes(const ModelConfig& cfg);
// m's gradients, copied to the host.
std::vector<float> host_grads(Model& m);

// Phi-3: the checkpoint tensor that holds the engine's parameter `name` (qkv_proj = [q; k; v] rows,
// gate_up_proj = [gate; up]), its first row there in row0 and its rows in total; written out here, not
// taken from hf/fused_projections (the code under test). Any other name is its own (total = -1).
std::string hf_tensor_of(const ModelConfig& cfg, const std::string& name, int64_t& row0, int64_t& total);
// One forward and backward of ids/targets on a fresh model of dir on `be`: the mean loss and every
// gradient (host copy); every page is returned afterwards (checked).
struct StepResult {
  double loss;
  std::vector<float> grads;
};
StepResult one_step(Backend& be, const std::filesystem::path& dir, const std::vector<int32_t>& ids,
                    const std::vector<int32_t>& targets, const ChunkPlan& plan);
// A tiny model of `config` (seed `seed`) stepped on the CPU over 79 tokens in chunks of 23, pages of 8:
// with --keep-attention against the recompute, in fp32 and bf16, each sweep order: the same bits
// (checked here).
void expect_kept_attention_bits(const nlohmann::json& config, uint64_t seed);
// The same step in bf16 against fp32: {the loss's relative distance, the whole gradient's}.
std::pair<double, double> bf16_against_f32(const nlohmann::json& config, uint64_t seed);
// The shape of parameter `name` in c's layout (empty: no such parameter).
std::vector<int64_t> param_shape(const ModelConfig& c, const std::string& name);
// That step checked as the families' tests check it: within bf16's reach of fp32 (the loss 1e-2, the
// whole gradient 3e-2) and rounded (more than 1e-4 apart); the figures printed under `name`.
void expect_bf16_tracks_f32(const nlohmann::json& config, uint64_t seed, const std::string& name);
// oomb train (in `dir`) of the model in `model` on a repeating cycle (400 tokens of 1..13; 32 a step in
// chunks of 16, lr 1e-2, 6 steps), saved to `out`: checks that it ran and its loss fell; its output.
std::string expect_cli_trains(const std::filesystem::path& dir, const std::filesystem::path& model,
                              const std::filesystem::path& out);
// `steps` training steps of N tokens (the repeat task, seed 2) of a model initialised with seed 1
// on a fresh backend (the simulated device, or the CPU), for the accountant's peaks; returns the
// plan of that run (workspace from the backend that ran). The masters are initialised in place
// where the host can write them, else through a host copy (tag io).
MemoryPlan train_for_peaks(const ModelConfig& cfg, const ChunkPlan& plan, int64_t N, bool sim, int64_t steps = 1);
// The same on the backend `make` returns (the CUDA backend's tests: simt's or the GPU's).
MemoryPlan train_for_peaks_on(const std::function<std::unique_ptr<Backend>()>& make, const ModelConfig& cfg,
                              const ChunkPlan& plan, int64_t N, int64_t steps = 1);
// Every (tier, tag) peak of the global accountant equals the plan's bytes (tag io, the tests' own
// buffers, aside).
void expect_peaks_equal(const MemoryPlan& plan);
// N + 1 random token ids < vocab, written as raw uint32 to path; returns them.
std::vector<int32_t> write_tokens(const std::filesystem::path& path, int64_t n_plus_1, int64_t vocab, uint64_t seed);

}  // namespace oomb::testing
