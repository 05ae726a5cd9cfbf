#include "train/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fstream>
#include <functional>
#include <memory>
#include <thread>

#include "core/atomic_file.h"
#include "core/error.h"
#include "hf/checkpoint.h"
#include "hf/fused_projections.h"
#include "hf/peft.h"
#include "hf/safetensors.h"
#include "model/param_shards.h"

namespace oomb {

namespace fs = std::filesystem;

namespace {

constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kExpAvg = ".exp_avg";
constexpr const char* kExpAvgSq = ".exp_avg_sq";
constexpr const char* kAdapterWeights = "adapter_model.safetensors";  // a LoRA run's (hf/peft.h)
constexpr const char* kAdapterConfig = "adapter_config.json";


std::vector<SaveTensor> tensors_of(const Params& p, const char* suffix) {
  OOMB_CHECK(!p.mixed(), "checkpoint: a frozen bf16 base is not saved (a LoRA checkpoint holds its adapters)");
  std::vector<SaveTensor> t;
  for (const ParamSpec& s : p.specs()) t.push_back({s.name + suffix, DType::F32, s.shape, p.view(s).data});
  return t;
}

// p's values in host memory: p itself when it is there (a host backend, --offload params), else a
// copy (tag io) in `copy`.
const Params& on_host(const Params& p, Backend& be, std::unique_ptr<Params>& copy) {
  if (p.flat().tier != Tier::Device) return p;
  copy = std::make_unique<Params>(p.config(), p.specs(), Tier::Host, Tag::IO);
  be.copy(copy->flat().data, Tier::Host, p.flat().data, be.tier(), p.flat().bytes());
  return *copy;
}

// Loads into `dst` (in be's memory, or the host's) through `load`, which fills host parameters.
void into(Params& dst, Backend& be, const std::function<void(Params&)>& load) {
  if (dst.flat().tier != Tier::Device) return load(dst);
  Params host(dst.config(), dst.specs(), Tier::Host, Tag::IO);
  load(host);
  be.copy(dst.flat().data, be.tier(), host.flat().data, Tier::Host, dst.flat().bytes());
}

// A sharded optimizer's (--zero 1, 2) AdamW moment in flat order: rank j's block broadcast from rank j
// a piece at a time; rank 0 writes each piece as it arrives (out), the others only send theirs.
void stream_moment(const Tensor& mine, int64_t n, Comm& world, Backend& be, SafetensorsWriter* out) {
  const int P = world.size();
  const int64_t piece = std::min(Shard::of(n, 0, P).block, grad_sync_piece());
  Buffer stage(Tier::Host, Tag::IO, size_t(piece) * 4);
  for (int j = 0; j < P; ++j) {
    const Shard s = Shard::of(n, j, P);
    for (int64_t o = 0; o < s.size(); o += piece) {
      const size_t bytes = size_t(std::min(piece, s.size() - o)) * 4;
      if (j == world.rank()) be.copy(stage.data(), Tier::Host, mine.f() + o, mine.tier, bytes);
      world.broadcast(stage.data(), bytes, j);
      if (out) out->write(stage.data(), bytes);
    }
  }
}

void stream_moments(const Optimizer& opt, Comm& world, Backend& be, SafetensorsWriter* out) {
  const int64_t n = opt.params().flat().numel();
  OOMB_CHECK(opt.shard().range.size() == Shard::of(n, world.rank(), world.size()).size(),
             "checkpoint: the optimizer's shard is not this rank's block of {} ranks", world.size());
  stream_moment(opt.exp_avg_shard(), n, world, be, out);
  stream_moment(opt.exp_avg_sq_shard(), n, world, be, out);
}

// --zero 3: the masters (or a moment) are this rank's packed parts of every range
// (model/param_shards.h; on the device: through a host copy, tag io); every rank's streamed in flat
// order, into `full` or `out` on rank 0.
void stream_packed(Model& model, const Params& packed, Comm& world, float* full, SafetensorsWriter* out) {
  std::unique_ptr<Params> copy;
  const Params& host = on_host(packed, model.backend(), copy);
  ParamShards::Sink sink;
  if (full) sink = [&](int64_t at, const float* x, int64_t n) { std::memcpy(full + at, x, size_t(n) * 4); };
  if (out) sink = [&](int64_t, const float* x, int64_t n) { out->write(x, uint64_t(n) * 4); };
  ParamShards::stream(model.config(), world, host.flat().f(), sink);
}

// optimizer.safetensors' layout: every parameter's two moments, in the flat layout's order (the
// data streamed in after it)
std::vector<SaveTensor> moments_layout(const std::vector<ParamSpec>& specs) {
  std::vector<SaveTensor> t;
  for (const char* suffix : {kExpAvg, kExpAvgSq})
    for (size_t i = 0; i < specs.size(); ++i) {
      OOMB_CHECK(specs[i].offset == (i ? specs[i - 1].offset + specs[i - 1].numel() : 0),
                 "checkpoint: the flat layout has a gap before '{}'", specs[i].name);
      t.push_back({specs[i].name + suffix, DType::F32, specs[i].shape, nullptr});
    }
  return t;
}

void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// The step of a directory name "step-N", or -1.
int64_t step_of(const std::string& name) {
  if (!name.starts_with("step-") || name.size() == 5 || name.size() > 5 + 18) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

// Whether the process `pid` still runs (a writer whose staging directory must be left alone).
bool alive(long pid) { return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno != ESRCH); }

}  // namespace

std::string checkpoint_name(int64_t step) { return fmt::format("step-{:06}", step); }

// Floats a device's AdamW moment crosses to or from host memory at a time (a checkpoint's write and a
// resume's read), so that a checkpoint holds one piece of the moments on the host (two on resume),
// not a copy of both (2 x 4 bytes per parameter: 61 GB at 7B).
static int64_t moment_piece(const Params& moment) {
  return std::max<int64_t>(1, std::min<int64_t>(moment.flat().numel(), int64_t(16) << 20));
}

fs::path save_checkpoint(const fs::path& dir, CheckpointState state, Model& model, const Optimizer& opt,
                         const std::map<std::string, std::string>& extra, const std::string& base_model,
                         Comm* world) {
  opt.finish();  // an update beside the next step (--offload params) done: the weights and moments are final
  const auto t0 = std::chrono::steady_clock::now();
  const bool sharded = !opt.exp_avg_shard().empty();  // AdamW's moments split between the ranks
  const bool zero3 = model.sharded();                   // the masters and moments both (--zero 3)
  OOMB_CHECK(!(sharded || zero3) || world, "checkpoint: sharded weights or moments need their ranks to gather them");
  if (world && world->rank() != 0) {  // rank 0 writes
    if (zero3) {  // the masters, then the moments, as rank 0 writes them
      stream_packed(model, model.params(), *world, nullptr, nullptr);
      if (opt.exp_avg()) {
        stream_packed(model, *opt.exp_avg(), *world, nullptr, nullptr);
        stream_packed(model, *opt.exp_avg_sq(), *world, nullptr, nullptr);
      }
    } else if (sharded) {
      stream_moments(opt, *world, model.backend(), nullptr);
    }
    return dir / checkpoint_name(state.step);
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  OOMB_CHECK(!ec, "--checkpoint-dir {}: cannot create: {}", dir.string(), ec.message());
  remove_stale_checkpoint_files(dir);
  const fs::path target = dir / checkpoint_name(state.step);
  AtomicDir out(target);
  Backend& be = model.backend();
  if (const LoraConfig& lora = model.plan().lora; lora.on()) {
    // the trainable set as a PEFT adapter directory; the frozen base stays --model's
    Params host(model.config(), model.trainable().specs(), Tier::Host, Tag::IO);
    model.download_trainable(host);
    write_adapter_files(out.staging(), model.config(), lora, host, base_model);
    test_write_delay();
  } else {  // the weights: fp32 masters as a Hugging Face model directory (--zero 3: gathered here)
    std::unique_ptr<Params> copy;
    if (zero3) {
      copy = std::make_unique<Params>(model.config(), Tier::Host, Tag::IO);
      stream_packed(model, model.params(), *world, copy->flat().f(), nullptr);
    }
    std::vector<Buffer> joined;  // Phi-3: its fused tensors, as the model directory holds them
    const std::vector<SaveTensor> weights = tensors_of(zero3 ? *copy : on_host(model.params(), be, copy), "");
    save_safetensors_dir(out.staging(), fuse_for_save(model.config(), weights, joined));
    test_write_delay();
    ModelConfig saved = model.config();
    saved.torch_dtype = "float32";
    write_file_atomic(out.staging() / "config.json", config_to_json(saved).dump(2) + "\n");
    test_write_delay();
  }
  if (opt.exp_avg() && zero3) {  // the same file as one optimizer's, every rank's parts in flat order
    SafetensorsWriter w(out.staging() / kOptimizerFile, moments_layout(param_layout(model.config())),
                        {{"oomb", "AdamW moments"}});
    stream_packed(model, *opt.exp_avg(), *world, nullptr, &w);
    stream_packed(model, *opt.exp_avg_sq(), *world, nullptr, &w);
    w.commit();
    test_write_delay();
  } else if (opt.exp_avg() && opt.exp_avg()->flat().tier == Tier::Device) {  // streamed through a staging piece
    const std::vector<ParamSpec>& specs = opt.exp_avg()->specs();
    SafetensorsWriter w(out.staging() / kOptimizerFile, moments_layout(specs), {{"oomb", "AdamW moments"}});
    const int64_t piece = moment_piece(*opt.exp_avg());
    Buffer stage(Tier::Host, Tag::IO, size_t(piece) * 4);
    for (const Params* moment : {opt.exp_avg(), opt.exp_avg_sq()})
      for (const ParamSpec& s : specs)
        for (int64_t o = 0; o < s.numel(); o += piece) {
          const size_t bytes = size_t(std::min(piece, s.numel() - o)) * 4;
          be.copy(stage.data(), Tier::Host, moment->view(s).f() + o, Tier::Device, bytes);
          w.write(stage.data(), bytes);
        }
    w.commit();
    test_write_delay();
  } else if (opt.exp_avg()) {
    std::vector<SaveTensor> t = tensors_of(*opt.exp_avg(), kExpAvg);
    const std::vector<SaveTensor> v = tensors_of(*opt.exp_avg_sq(), kExpAvgSq);
    t.insert(t.end(), v.begin(), v.end());
    save_safetensors(out.staging() / kOptimizerFile, t, {{"oomb", "AdamW moments"}});
    test_write_delay();
  } else if (sharded) {  // the same file, its data gathered from every rank's shard in flat order
    SafetensorsWriter w(out.staging() / kOptimizerFile, moments_layout(opt.params().specs()),
                        {{"oomb", "AdamW moments"}});
    stream_moments(opt, *world, be, &w);
    w.commit();
    test_write_delay();
  }
  for (const auto& [name, text] : extra) {
    OOMB_CHECK(name != kCheckpointStateFile && !fs::exists(out.staging() / name), "checkpoint: {} is written already",
               name);
    write_file_atomic(out.staging() / name, text);
  }
  state.adam_step = opt.adam_step();
  state.files.clear();
  for (const auto& e : fs::directory_iterator(out.staging())) {
    OOMB_CHECK(e.is_regular_file(), "{}: {} is not a regular file", out.staging().string(), e.path().string());
    state.files[e.path().filename().string()] = int64_t(e.file_size());
  }
  state.write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  write_file_atomic(out.staging() / kCheckpointStateFile, state_to_json(state).dump(2) + "\n");
  test_write_delay();
  out.commit([](const std::string&) { return true; });  // a checkpoint of the same step is replaced whole
  return target;
}

CheckpointState open_checkpoint(const fs::path& step_dir) {
  const std::string d = step_dir.string();
  std::error_code ec;
  OOMB_CHECK(fs::is_directory(step_dir, ec), "{}: not a checkpoint directory ({})", d,
             fs::exists(step_dir, ec) ? "not a directory" : "it does not exist");
  const fs::path state_path = step_dir / kCheckpointStateFile;
  OOMB_CHECK(fs::exists(state_path, ec), "{}: not a complete checkpoint: {} is missing (it is written last, so the "
             "checkpoint was never completed)", d, kCheckpointStateFile);
  std::ifstream f(state_path, std::ios::binary);
  OOMB_CHECK(f.good(), "{}: cannot read", state_path.string());
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CheckpointState st = parse_checkpoint_state(text, state_path.string());
  const int64_t named = step_of(step_dir.filename().string());
  OOMB_CHECK(named < 0 || named == st.step, "{}: {} says step {}, the directory's name step {}", d,
             kCheckpointStateFile, st.step, named);
  if (st.files.count(kAdapterWeights)) {  // a LoRA run's: its adapter
    OOMB_CHECK(st.files.count(kAdapterConfig), "{}: {} does not list {}", d, kCheckpointStateFile, kAdapterConfig);
  } else {
    OOMB_CHECK(st.files.count("config.json"), "{}: {} does not list config.json", d, kCheckpointStateFile);
    OOMB_CHECK(st.files.count("model.safetensors") || st.files.count("model.safetensors.index.json"),
               "{}: {} lists no model.safetensors (nor an index)", d, kCheckpointStateFile);
  }
  for (const auto& [name, bytes] : st.files) {
    const fs::path p = step_dir / name;
    OOMB_CHECK(fs::is_regular_file(p, ec), "{}: {} is missing ({} lists it, {} bytes)", d, name,
               kCheckpointStateFile, bytes);
    const auto size = fs::file_size(p, ec);
    OOMB_CHECK(!ec && int64_t(size) == bytes, "{}: {} holds {} bytes, {} says {}", d, name,
               ec ? std::string("an unknown number of") : std::to_string(size), kCheckpointStateFile, bytes);
  }
  return st;
}

// AdamW's moments from optimizer.safetensors into host parameters.
static void load_moments(const fs::path& step_dir, const CheckpointState& st, Params& exp_avg, Params& exp_avg_sq) {
  const fs::path file = step_dir / kOptimizerFile;
  OOMB_CHECK(st.files.count(kOptimizerFile), "{}: {} is missing: the checkpoint holds no AdamW moments",
             step_dir.string(), kOptimizerFile);
  const SafetensorsModel m = SafetensorsModel::open(file);
  OOMB_CHECK(m.names().size() == 2 * exp_avg.specs().size(), "{}: holds {} tensors; this model's AdamW moments are {}",
             file.string(), m.names().size(), 2 * exp_avg.specs().size());
  for (auto [moment, suffix] : {std::pair{&exp_avg, kExpAvg}, {&exp_avg_sq, kExpAvgSq}}) {
    for (const ParamSpec& s : moment->specs()) {
      float* x = moment->view(s).f();
      m.read_f32(s.name + suffix, x, s.shape);
      for (int64_t i = 0; i < s.numel(); ++i)
        if (!std::isfinite(x[i]) || (suffix == kExpAvgSq && x[i] < 0)) [[unlikely]]
          fail("{}: tensor '{}{}' holds {} at flat index {}; the checkpoint is damaged", file.string(), s.name,
               suffix, x[i], i);
    }
  }
}

// A part of the flat layout a sharded optimizer holds: floats [lo, lo + n), at `at` in its buffers.
struct Segment {
  int64_t lo = 0, n = 0, at = 0;
};

// Segments [lo, lo + n) of each moment tensor of the flat layout `specs` from optimizer.safetensors
// into exp_avg and exp_avg_sq (host memory) at each segment's `at`.
static void load_moment_segments(const fs::path& step_dir, const CheckpointState& st,
                                 const std::vector<ParamSpec>& specs, const std::vector<Segment>& segments,
                                 float* exp_avg, float* exp_avg_sq) {
  const fs::path file = step_dir / kOptimizerFile;
  OOMB_CHECK(st.files.count(kOptimizerFile), "{}: {} is missing: the checkpoint holds no AdamW moments",
             step_dir.string(), kOptimizerFile);
  const SafetensorsFile f = SafetensorsFile::open(file);
  OOMB_CHECK(f.tensors().size() == 2 * specs.size(), "{}: holds {} tensors; this model's AdamW moments are {}",
             file.string(), f.tensors().size(), 2 * specs.size());
  for (auto [x, suffix] : {std::pair{exp_avg, kExpAvg}, {exp_avg_sq, kExpAvgSq}})
    for (const Segment& r : segments)
      for (const ParamSpec& s : specs) {
        const int64_t a = std::max(s.offset, r.lo), b = std::min(s.offset + s.numel(), r.lo + r.n);
        if (a >= b) continue;
        const std::string name = s.name + suffix;
        const TensorInfo* t = f.find(name);
        OOMB_CHECK(t, "{}: tensor '{}' not found", file.string(), name);
        OOMB_CHECK(t->dtype == DType::F32 && t->shape == s.shape, "{}: tensor '{}' is {} {}, expected F32 {}",
                   file.string(), name, dtype_safetensors_name(t->dtype), fmt::join(t->shape, "x"),
                   fmt::join(s.shape, "x"));
        float* y = x + r.at + (a - r.lo);
        f.read_range(*t, uint64_t(a - s.offset) * 4, uint64_t(b - a) * 4, y);
        for (int64_t i = 0; i < b - a; ++i)
          if (!std::isfinite(y[i]) || (suffix == kExpAvgSq && y[i] < 0)) [[unlikely]]
            fail("{}: tensor '{}' holds {} at flat index {}; the checkpoint is damaged", file.string(), name, y[i],
                 a - s.offset + i);
      }
}

// A sharded optimizer's range [lo, hi) of each moment tensor (--zero 1, 2).
static void load_moment_shard(const fs::path& step_dir, const CheckpointState& st, Optimizer& opt, Backend& be) {
  const Shard& r = opt.shard().range;
  const Tensor m = opt.exp_avg_shard(), v = opt.exp_avg_sq_shard();
  Buffer host;
  if (m.tier == Tier::Device) host = Buffer(Tier::Host, Tag::IO, size_t(r.held()) * 8);
  float* hm = host.data() ? host.as<float>() : m.f();
  float* hv = host.data() ? host.as<float>() + r.held() : v.f();
  load_moment_segments(step_dir, st, opt.params().specs(), {{r.lo, r.size(), 0}}, hm, hv);
  if (!host.data()) return;
  be.copy(m.data, m.tier, hm, Tier::Host, size_t(r.size()) * 4);
  be.copy(v.data, v.tier, hv, Tier::Host, size_t(r.size()) * 4);
}

// --zero 3: this rank's part of every range (model/param_shards.h) of each moment tensor (on the
// device: through host copies).
static void load_packed_moments(const fs::path& step_dir, const CheckpointState& st, const Model& model,
                                Optimizer& opt, Backend& be) {
  const ModelConfig& c = model.config();
  std::vector<Segment> parts;
  for (const ParamShards::Range& r : ParamShards::of(c, int(model.plan().rank), int(model.plan().ranks)).ranges)
    parts.push_back({r.lo + r.mine, r.size, r.at});
  Params& m = *opt.exp_avg();
  Params& v = *opt.exp_avg_sq();
  into(m, be, [&](Params& hm) {
    into(v, be, [&](Params& hv) { load_moment_segments(step_dir, st, param_layout(c), parts, hm.flat().f(), hv.flat().f()); });
  });
}

void load_checkpoint_tensors(const fs::path& step_dir, const CheckpointState& st, const ModelConfig& cfg,
                             Params& weights, Params* exp_avg, Params* exp_avg_sq) {
  load_weights(step_dir, cfg, weights);
  OOMB_CHECK(!exp_avg == !exp_avg_sq, "checkpoint: both AdamW moments or none");
  if (exp_avg) load_moments(step_dir, st, *exp_avg, *exp_avg_sq);
}

void load_checkpoint(const fs::path& step_dir, const CheckpointState& st, Model& model, Optimizer& opt) {
  Backend& be = model.backend();
  const bool adapter = st.files.count(kAdapterWeights) > 0;
  if (model.plan().lora.on()) {  // the adapters; the frozen base is --model's, loaded already
    OOMB_CHECK(adapter, "{}: holds a whole model, not a LoRA adapter: it was written by a run without --lora-rank",
               step_dir.string());
    Params host(model.config(), model.trainable().specs(), Tier::Host, Tag::IO);
    load_adapter_tensors(step_dir, nullptr, host);
    model.upload_trainable(host);
  } else {
    OOMB_CHECK(!adapter, "{}: holds a LoRA adapter, not a whole model: resume it with the --lora-* flags it was "
               "written with", step_dir.string());
    if (model.sharded()) {  // --zero 3: this rank's parts of the whole model
      Params host(model.config(), Tier::Host, Tag::IO);
      load_weights(step_dir, model.config(), host);
      model.upload_params(host);
    } else {
      into(model.params(), be, [&](Params& w) { load_weights(step_dir, model.config(), w); });
    }
  }
  if (model.sharded() && opt.exp_avg()) {
    load_packed_moments(step_dir, st, model, opt, be);
  } else if (!opt.exp_avg_shard().empty()) {
    load_moment_shard(step_dir, st, opt, be);
  } else if (!opt.exp_avg()) {
    return;
  } else if (opt.exp_avg()->flat().tier != Tier::Device) {  // a host backend, or --offload params
    load_moments(step_dir, st, *opt.exp_avg(), *opt.exp_avg_sq());
  } else {  // on the device: piece by piece of the flat layout through two staging pieces
    const Params& m = *opt.exp_avg();
    const int64_t piece = moment_piece(m), end = m.flat().numel();
    Buffer stage(Tier::Host, Tag::IO, size_t(piece) * 8);
    float* hm = stage.as<float>();
    float* hv = hm + piece;
    for (int64_t lo = 0; lo < end; lo += piece) {
      const int64_t n = std::min(piece, end - lo);
      std::fill(hm, hm + 2 * piece, 0.0f);  // (a gap between tensors stays zero)
      load_moment_segments(step_dir, st, m.specs(), {{lo, n, 0}}, hm, hv);
      be.copy(m.flat().f() + lo, be.tier(), hm, Tier::Host, size_t(n) * 4);
      be.copy(opt.exp_avg_sq()->flat().f() + lo, be.tier(), hv, Tier::Host, size_t(n) * 4);
    }
  }
  opt.set_adam_step(st.adam_step);
}

std::vector<CheckpointEntry> list_checkpoints(const fs::path& dir) {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int64_t step = step_of(e.path().filename().string());
    if (step >= 0 && e.is_directory(ec)) out.push_back({step, e.path()});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

fs::path latest_checkpoint(const fs::path& dir, std::ostream* log) {
  const std::vector<CheckpointEntry> all = list_checkpoints(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      open_checkpoint(it->path);
      return it->path;
    } catch (const Error& e) {
      if (log) *log << "note: --resume auto passes over " << it->path.string() << ": " << e.what() << std::endl;
    }
  }
  return {};
}

void prune_checkpoints(const fs::path& dir, int64_t newest, int64_t keep) {
  if (keep <= 0) return;
  std::vector<CheckpointEntry> older;
  std::error_code ec;
  for (const CheckpointEntry& c : list_checkpoints(dir))
    if (c.step < newest && fs::exists(c.path / kCheckpointStateFile, ec)) older.push_back(c);
  if (int64_t(older.size()) <= keep - 1) return;
  older.resize(older.size() - size_t(keep - 1));  // the oldest, to delete
  for (const CheckpointEntry& c : older) {
    // out of the step-* names first (one rename), so that a crash while deleting leaves no
    // step-* directory missing files
    const fs::path away = dir / fmt::format(".{}.oomb-old.{}", c.path.filename().string(), ::getpid());
    OOMB_CHECK(::rename(c.path.c_str(), away.c_str()) == 0, "--keep-last: cannot move {} aside for deletion: {}",
               c.path.string(), std::strerror(errno));
    fsync_dir(dir);
    fs::remove_all(away, ec);
    OOMB_CHECK(!ec, "--keep-last: cannot delete {} (moved aside from {}): {}", away.string(), c.path.string(),
               ec.message());
  }
}

void remove_stale_checkpoint_files(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with(".step-")) continue;
    size_t at = name.find(".oomb-new.");
    if (at == std::string::npos) at = name.find(".oomb-old.");
    if (at == std::string::npos) continue;
    const long pid = std::strtol(name.c_str() + at + 10, nullptr, 10);
    if (alive(pid)) continue;  // its writer still runs
    fs::remove_all(e.path(), ec);
  }
}

}  // namespace oomb
