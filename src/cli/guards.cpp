#include "cli/guards.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <ostream>

#include "core/atomic_file.h"
#include "core/error.h"

namespace oomb::cli {

namespace fs = std::filesystem;

namespace {

fs::path resolved(const std::string& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p, ec), ec);
  return ec ? fs::absolute(p).lexically_normal() : r;
}

// inner lies strictly inside outer (both resolved)
bool inside(const fs::path& inner, const fs::path& outer) {
  const fs::path rel = inner.lexically_relative(outer);
  return !rel.empty() && rel != "." && *rel.begin() != "..";
}

bool same_file(const fs::path& a, const fs::path& b) {
  if (a == b) return true;
  std::error_code ec;
  return fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec);  // hard links, bind mounts
}

}  // namespace

void refuse_aliasing(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs) {
  for (size_t k = 0; k < outputs.size(); ++k) {
    const NamedPath& o = outputs[k];
    if (o.path.empty()) continue;
    const fs::path ro = resolved(o.path);
    for (const NamedPath& i : inputs) {
      if (i.path.empty()) continue;
      const fs::path ri = resolved(i.path);
      std::error_code ec;
      OOMB_CHECK(!same_file(ro, ri), "{} {}: is the same path as {} {}; writing it would destroy the input: choose "
                 "another path", o.flag, o.path, i.flag, i.path);
      OOMB_CHECK(!inside(ri, ro), "{} {}: holds {} {}; writing it would replace or destroy the input: choose "
                 "another path", o.flag, o.path, i.flag, i.path);
      OOMB_CHECK(!(i.whole && fs::is_directory(ri, ec) && inside(ro, ri)),
                 "{} {}: lies inside {} {}; the output would be mixed into the input: choose a path outside it",
                 o.flag, o.path, i.flag, i.path);
    }
    for (size_t j = 0; j < k; ++j) {  // two outputs never share a path, nor one inside a model directory
      const NamedPath& p = outputs[j];
      if (p.path.empty()) continue;
      const fs::path rp = resolved(p.path);
      OOMB_CHECK(!same_file(ro, rp) && !(p.whole && inside(ro, rp)) && !(o.whole && inside(rp, ro)),
                 "{} {} and {} {}: one output would overwrite the other: choose separate paths", p.flag, p.path,
                 o.flag, o.path);
    }
  }
}

// A directory another file system is mounted on (or the root): its device differs from its parent's,
// or it is its own parent. (Through a symlink: the directory it names, as the save resolves it.)
static bool is_mount_point(const fs::path& d) {
  std::error_code ec;
  if (!fs::is_directory(d, ec)) return false;
  const fs::path real = fs::canonical(d, ec);
  if (ec) return false;
  struct stat self {}, up {};
  if (::stat(real.c_str(), &self) != 0 || ::stat(real.parent_path().c_str(), &up) != 0) return false;
  return self.st_dev != up.st_dev || (self.st_ino == up.st_ino && self.st_dev == up.st_dev);
}

void check_model_out(const std::string& flag, const std::string& dir, const ModelConfig& cfg, bool force,
                     bool adapter) {
  if (dir.empty()) return;
  std::error_code ec;
  const fs::path d(dir);
  OOMB_CHECK(!fs::exists(d, ec) || fs::is_directory(d, ec), "{} {}: exists and is not a directory", flag, dir);
  const bool holds_model = fs::exists(d / "model.safetensors", ec) || fs::exists(d / "model.safetensors.index.json", ec),
             holds_adapter = fs::exists(d / "adapter_config.json", ec);
  OOMB_CHECK(force || !(adapter ? holds_model : holds_adapter), "{} {}: holds {}, and {} saved beside it would mix "
             "the two (a loader that finds adapter_config.json loads the adapter on its base, not the weights there): "
             "give another directory, or --force to save there anyway", flag, dir,
             adapter ? "a model (model.safetensors)" : "a LoRA adapter (adapter_config.json)",
             adapter ? "an adapter" : "a model");
  if (fs::exists(d / "config.json", ec) && !force) {
    nlohmann::json old;
    try {
      old = config_to_json(load_config(d));
    } catch (const Error& e) {
      fail("{} {}: holds a config.json that does not load ({}); pass --force to replace that directory", flag, dir,
           e.what());
    }
    nlohmann::json now = config_to_json(cfg);
    for (const char* k : {"torch_dtype", "dtype"}) old.erase(k), now.erase(k);  // saved in the loaded dtype
    if (old != now) {
      std::string field;
      for (auto it = now.begin(); it != now.end() && field.empty(); ++it)
        if (!old.contains(it.key()) || old[it.key()] != it.value())
          field = fmt::format("{} {} there, {} here", it.key(), old.contains(it.key()) ? old[it.key()].dump() : "absent",
                              it.value().dump());
      for (auto it = old.begin(); it != old.end() && field.empty(); ++it)
        if (!now.contains(it.key())) field = fmt::format("{} {} there, absent here", it.key(), it.value().dump());
      fail("{} {}: holds a different model ({}); pass --force to replace it", flag, dir, field);
    }
  }
  // the new directory is written beside DIR and renamed into place: DIR must not be a mount point
  // (a container's volume: the rename fails, after the work), and its parent must be writable
  OOMB_CHECK(!is_mount_point(d), "{} {}: is a mount point; a model is saved as a whole by renaming a new directory "
             "into place, which a mount point refuses: give a directory inside it ({} {}/NAME)", flag, dir, flag,
             d.lexically_normal().string());
  fs::path up = fs::absolute(d, ec).lexically_normal();
  if (!up.has_filename()) up = up.parent_path();
  up = up.parent_path();
  while (!up.empty() && !fs::exists(up, ec) && up != up.root_path()) up = up.parent_path();
  OOMB_CHECK(fs::is_directory(up, ec), "{} {}: {} is not a directory", flag, dir, up.string());
  OOMB_CHECK(::access(up.c_str(), W_OK | X_OK) == 0, "{} {}: {} is not writable", flag, dir, up.string());
}

void remove_stale_saves(const std::string& flag, const std::string& dir, std::ostream& log) {
  if (dir.empty()) return;
  for (const fs::path& p : AtomicDir::remove_stale(dir))
    log << fmt::format("{} {}: removed {}, a save an oomb that no longer runs left unfinished", flag, dir,
                      p.lexically_normal().string())
        << std::endl;
}

void check_file_out(const std::string& flag, const std::string& file) {
  if (file.empty()) return;
  std::error_code ec;
  const fs::path f(file);
  OOMB_CHECK(!fs::is_directory(f, ec), "{} {}: is a directory; give a file name", flag, file);
  const fs::path up = f.has_parent_path() ? f.parent_path() : fs::path(".");
  OOMB_CHECK(fs::is_directory(up, ec), "{} {}: its folder {} does not exist", flag, file, up.string());
  OOMB_CHECK(::access(up.c_str(), W_OK | X_OK) == 0, "{} {}: its folder {} is not writable", flag, file, up.string());
}

namespace {

struct Overflow {
  std::string tier;
  int64_t need = 0;
  Tag tag = Tag::Weights;
  int64_t tag_bytes = 0;
};

int64_t need_of(const MemoryPlan& m, bool host) {
  return host ? m.total(Tier::Host) + m.total(Tier::Pinned) : m.total(Tier::Device);
}

}  // namespace

std::string what_fits(int64_t N, int64_t C, bool is_host, int64_t bytes,
                      const std::function<MemoryPlan(int64_t, int64_t)>& plan_for) {
  auto fits = [&](int64_t n, int64_t c) {
    try {
      return need_of(plan_for(n, std::min(c, n)), is_host) <= bytes;
    } catch (const Error&) {
      return false;
    }
  };
  int64_t lo = 0, hi = N;  // the longest sequence at this C
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid, C) ? lo : hi) = mid;
  }
  int64_t clo = 0, chi = C;  // the largest chunk at this N
  while (chi - clo > 1) {
    const int64_t mid = clo + (chi - clo) / 2;
    (fits(N, mid) ? clo : chi) = mid;
  }
  std::string fit;
  if (lo > 0) fit = fmt::format("at most N = {} fits at C = {}", lo, std::min(C, lo));
  if (clo > 0) fit += fmt::format("{}C = {} fits at N = {}", fit.empty() ? "" : "; ", clo, N);
  if (fit.empty()) fit = "no length fits";
  return fit;
}

OutOfMemoryAdvice plan_advice(int64_t N, int64_t C, std::function<MemoryPlan(int64_t, int64_t)> plan_for) {
  return [=](Tier tier, Tag, int64_t bytes, int64_t in_use) {
    const bool host = tier != Tier::Device;
    const int64_t held = host ? Accountant::global().total(Tier::Host).current +
                                    Accountant::global().total(Tier::Pinned).current
                              : in_use;
    const int64_t cap = host ? 0 : Accountant::global().capacity(Tier::Device);
    // the device: its capacity; the host: what it holds and the largest block it still gives
    const int64_t within = cap > 0 ? cap : host ? held + largest_host_block(bytes) : held + bytes - 1;
    const MemoryPlan m = plan_for(N, C);
    return fmt::format("oomb plan: this run (N = {}, C = {}) needs {} in {}{}; within {}: {}", N, C,
                       format_bytes(need_of(m, host)), host ? "host and pinned memory" : "device memory",
                       cap > 0 ? fmt::format(" (--device-memory {})", cap) : "", format_bytes(within),
                       what_fits(N, C, host, within, plan_for));
  };
}

Limit host_share(int64_t available, int ranks_here) {
  OOMB_CHECK(ranks_here >= 1, "host memory: {} ranks on this node", ranks_here);
  if (ranks_here == 1) return {available, "the host's available memory (MemAvailable)"};
  return {available / ranks_here,
          fmt::format("this rank's share of the host's available memory (MemAvailable / {} ranks on this node)", ranks_here)};
}

void check_plan_fits(const MemoryPlan& m, int64_t N, int64_t C, const Limit& host, const Limit& device,
                     const std::function<MemoryPlan(int64_t, int64_t)>& plan_for, bool force, std::ostream* warn,
                     const std::function<std::string()>& offload) {
  for (const bool is_host : {false, true}) {
    const Limit& lim = is_host ? host : device;
    const int64_t need = need_of(m, is_host);
    if (lim.bytes <= 0 || need <= lim.bytes) continue;
    Tag biggest = Tag::Weights;  // the tag that takes most in this tier
    int64_t most = -1;
    for (int i = 0; i < kNumTags; ++i) {
      const int64_t b = is_host ? m.get(Tier::Host, Tag(i)) + m.get(Tier::Pinned, Tag(i)) : m.get(Tier::Device, Tag(i));
      if (b > most) most = b, biggest = Tag(i);
    }
    std::string fit = what_fits(N, C, is_host, lim.bytes, plan_for);
    if (const std::string o = offload ? offload() : ""; !o.empty()) fit += "; " + o;
    const std::string msg = fmt::format(
        "{} memory: the plan needs {} at N = {}, C = {} ({} the most: {}), more than {} ({}); {} (see oomb plan)",
        is_host ? "host" : "device", format_bytes(need), N, C, tag_name(biggest), format_bytes(most), lim.what,
        format_bytes(lim.bytes), fit);
    if (!force) fail("{}; --force runs it anyway", msg);
    if (warn) *warn << "warning (--force): " << msg << std::endl;
  }
}

}  // namespace oomb::cli
