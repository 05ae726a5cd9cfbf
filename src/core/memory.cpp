#include "core/memory.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>

#include "core/error.h"

namespace oomb {

namespace {
constexpr std::string_view kTagNames[kNumTags] = {"weights", "grads",     "optimizer", "activations", "kv",
                                                  "kv_grad", "page_meta", "workspace", "data",      "io"};
DeviceAllocator g_device_alloc, g_pinned_alloc;
bool g_device_is_host = false;
OutOfMemoryAdvice g_oom_advice;

// The exception, with the command's advice (called with no lock held: it may read the accountant).
OutOfMemory out_of_memory(std::string msg, Tier tier, Tag tag, int64_t bytes, int64_t in_use) {
  if (g_oom_advice) {
    try {
      const std::string advice = g_oom_advice(tier, tag, bytes, in_use);
      if (!advice.empty()) msg += "\n  " + advice;
    } catch (const std::exception&) {  // the advice is extra: the error itself must still come out
    }
  }
  return OutOfMemory(msg, tier, tag, bytes, in_use);
}

}  // namespace

void* zeroed_host_alloc(size_t bytes, std::string_view what) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  OOMB_CHECK(p != nullptr, "out of host memory allocating {} for {}", format_bytes(int64_t(bytes)), what);
  std::memset(p, 0, bytes);
  return p;
}

std::string_view tier_name(Tier t) {
  return t == Tier::Host ? "host" : t == Tier::Device ? "device" : "pinned";
}
std::string_view tag_name(Tag t) { return kTagNames[static_cast<int>(t)]; }

Accountant& Accountant::global() {
  static Accountant a;
  return a;
}

void set_out_of_memory_advice(OutOfMemoryAdvice f) { g_oom_advice = std::move(f); }

int64_t largest_host_block(int64_t up_to) {
  int64_t lo = 0, hi = up_to;
  while (hi - lo > std::max<int64_t>(4096, hi / 64)) {
    const int64_t mid = lo + (hi - lo) / 2;
    void* p = std::malloc(size_t(mid));  // a probe, freed at once and never touched: not accounted
    std::free(p);
    (p != nullptr ? lo : hi) = mid;
  }
  return lo;
}

void Accountant::on_alloc(Tier tier, Tag tag, size_t bytes) {
  std::unique_lock<std::mutex> l(mu_);
  const int64_t cap = cap_[int(tier)];
  if (cap != 0 && total_[int(tier)].current + int64_t(bytes) > cap) {
    const int64_t in_use = total_[int(tier)].current;
    std::string msg = fmt::format("{} memory: {} more for {} exceeds {} {} ({} in use: {})", tier_name(tier),
                                  format_bytes(int64_t(bytes)), tag_name(tag), cap_flag_[int(tier)], cap,
                                  format_bytes(in_use), report_locked(tier));
    l.unlock();
    throw out_of_memory(std::move(msg), tier, tag, int64_t(bytes), in_use);
  }
  ++allocations_;
  auto& c = c_[int(tier)][int(tag)];
  c.current += int64_t(bytes);
  if (c.current > c.peak) c.peak = c.current;
  auto& t = total_[int(tier)];
  t.current += int64_t(bytes);
  if (t.current > t.peak) t.peak = t.current;
}

void Accountant::on_free(Tier tier, Tag tag, size_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  c_[int(tier)][int(tag)].current -= int64_t(bytes);
  total_[int(tier)].current -= int64_t(bytes);
}

void Accountant::on_failed(Tier tier, Tag tag, size_t bytes, int64_t tag_peak_before, int64_t total_peak_before) {
  std::lock_guard<std::mutex> l(mu_);
  auto& c = c_[int(tier)][int(tag)];
  auto& t = total_[int(tier)];
  c.current -= int64_t(bytes);
  t.current -= int64_t(bytes);
  c.peak = std::max(tag_peak_before, c.current);
  t.peak = std::max(total_peak_before, t.current);
}

MemCounter Accountant::get(Tier tier, Tag tag) const {
  std::lock_guard<std::mutex> l(mu_);
  return c_[int(tier)][int(tag)];
}

int64_t Accountant::allocations() const {
  std::lock_guard<std::mutex> l(mu_);
  return allocations_;
}

MemCounter Accountant::total(Tier tier) const {
  std::lock_guard<std::mutex> l(mu_);
  return total_[int(tier)];
}

void Accountant::reset_peaks() {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& tier : c_)
    for (auto& c : tier) c.peak = c.current;
  for (auto& t : total_) t.peak = t.current;
}

void Accountant::set_capacity(Tier tier, int64_t bytes, std::string flag) {
  std::lock_guard<std::mutex> l(mu_);
  cap_[int(tier)] = bytes;
  cap_flag_[int(tier)] = std::move(flag);
}

int64_t Accountant::capacity(Tier tier) const {
  std::lock_guard<std::mutex> l(mu_);
  return cap_[int(tier)];
}

std::string Accountant::report(Tier tier) const {
  std::lock_guard<std::mutex> l(mu_);
  return report_locked(tier);
}

std::string Accountant::report_locked(Tier tier) const {
  std::string s;
  for (int i = 0; i < kNumTags; ++i) {
    MemCounter c = c_[int(tier)][i];
    if (c.peak == 0) continue;
    if (!s.empty()) s += ", ";
    s += fmt::format("{} {}", kTagNames[i], format_bytes(c.peak));
  }
  return s.empty() ? "none" : s;
}

std::string format_bytes(int64_t b) {
  double v = double(b);
  if (std::abs(v) >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", v / (1024.0 * 1024 * 1024));
  if (std::abs(v) >= 1024.0 * 1024) return fmt::format("{:.2f} MiB", v / (1024.0 * 1024));
  if (std::abs(v) >= 1024.0) return fmt::format("{:.1f} KiB", v / 1024.0);
  return fmt::format("{} B", b);
}

// A buffer is freed by the allocator in place when it goes: another device backend's allocator
// would free (and hand out) the wrong kind of memory, so none replaces it while its tier holds any.
static void install(DeviceAllocator& in_place, DeviceAllocator a, Tier tier) {
  const int64_t live = Accountant::global().total(tier).current;
  OOMB_CHECK(a.alloc == in_place.alloc || live == 0,
             "a second kind of device backend cannot start while the first holds {} of {} memory (one device "
             "backend kind at a time in a process: --device sim or cuda)", format_bytes(live), tier_name(tier));
  in_place = a;
}
void set_device_allocator(DeviceAllocator a) { install(g_device_alloc, a, Tier::Device); }
void set_pinned_allocator(DeviceAllocator a) { install(g_pinned_alloc, a, Tier::Pinned); }
bool device_memory_is_host() { return g_device_is_host; }
void set_device_memory_is_host(bool yes) { g_device_is_host = yes; }

Buffer::Buffer(Tier tier, Tag tag, size_t bytes) : bytes_(bytes), tier_(tier), tag_(tag) {
  if (bytes == 0) return;
  OOMB_CHECK(tier != Tier::Device || g_device_alloc.alloc != nullptr,
             "no device backend is initialised (allocating {} for {})", format_bytes(int64_t(bytes)), tag_name(tag));
  Accountant& acc = Accountant::global();
  const int64_t tag_peak = acc.get(tier, tag).peak, total_peak = acc.total(tier).peak;
  acc.on_alloc(tier, tag, bytes);  // first: a capacity refusal allocates nothing
  std::string why;
  try {
    if (tier == Tier::Device) {
      p_ = g_device_alloc.alloc(bytes);
    } else if (tier == Tier::Pinned && g_pinned_alloc.alloc != nullptr) {
      p_ = g_pinned_alloc.alloc(bytes);
    } else {
      p_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
      if (p_ != nullptr) std::memset(p_, 0, bytes);
    }
    if (p_ == nullptr) why = "the allocator returned no memory";
  } catch (const Error& e) {  // a device allocator's own error
    why = e.what();
  } catch (...) {
    acc.on_failed(tier, tag, bytes, tag_peak, total_peak);
    throw;
  }
  if (p_ == nullptr) {  // out of memory in this tier
    acc.on_failed(tier, tag, bytes, tag_peak, total_peak);
    const int64_t used = acc.total(tier).current;
    throw out_of_memory(fmt::format("{} memory: allocating {} for {} failed with {} in use (peaks: {}): {}",
                                    tier_name(tier), format_bytes(int64_t(bytes)), tag_name(tag), format_bytes(used),
                                    acc.report(tier), why),
                        tier, tag, int64_t(bytes), used);
  }
}

void Buffer::reset() {
  if (p_ == nullptr) return;
  if (tier_ == Tier::Device)
    g_device_alloc.free(p_);
  else if (tier_ == Tier::Pinned && g_pinned_alloc.free != nullptr)
    g_pinned_alloc.free(p_);
  else
    std::free(p_);
  Accountant::global().on_free(tier_, tag_, bytes_);
  p_ = nullptr;
  bytes_ = 0;
}

Buffer::~Buffer() { reset(); }

Buffer::Buffer(Buffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_), tier_(o.tier_), tag_(o.tag_) {
  o.p_ = nullptr;
  o.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    p_ = o.p_;
    bytes_ = o.bytes_;
    tier_ = o.tier_;
    tag_ = o.tag_;
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

}  // namespace oomb
