#include "core/memory.h"

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

void Accountant::on_alloc(Tier tier, Tag tag, size_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  const int64_t cap = cap_[int(tier)];
  OOMB_CHECK(cap == 0 || total_[int(tier)].current + int64_t(bytes) <= cap,
             "{} memory: {} more for {} exceeds {} {} ({} in use: {})", tier_name(tier),
             format_bytes(int64_t(bytes)), tag_name(tag), cap_flag_[int(tier)], cap,
             format_bytes(total_[int(tier)].current), report_locked(tier));
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

void set_device_allocator(DeviceAllocator a) { g_device_alloc = a; }
void set_pinned_allocator(DeviceAllocator a) { g_pinned_alloc = a; }
bool device_memory_is_host() { return g_device_is_host; }
void set_device_memory_is_host(bool yes) { g_device_is_host = yes; }

Buffer::Buffer(Tier tier, Tag tag, size_t bytes) : bytes_(bytes), tier_(tier), tag_(tag) {
  if (bytes == 0) return;
  Accountant::global().on_alloc(tier, tag, bytes);  // first: a capacity refusal allocates nothing
  try {
    if (tier == Tier::Device) {
      OOMB_CHECK(g_device_alloc.alloc != nullptr, "no device backend is initialised (allocating {} for {})",
                 format_bytes(int64_t(bytes)), tag_name(tag));
      p_ = g_device_alloc.alloc(bytes);
    } else if (tier == Tier::Pinned && g_pinned_alloc.alloc != nullptr) {
      p_ = g_pinned_alloc.alloc(bytes);
    } else {
      p_ = zeroed_host_alloc(bytes, tag_name(tag));
    }
  } catch (...) {
    Accountant::global().on_free(tier, tag, bytes);
    throw;
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
