#include "core/memory.h"

#include <cstdlib>
#include <cstring>
#include <fmt/format.h>

#include "core/error.h"

namespace oomb {

namespace {
constexpr std::string_view kTagNames[kNumTags] = {"weights", "grads",     "optimizer", "activations", "kv",
                                                  "kv_grad", "workspace", "data",      "io"};
DeviceAllocator g_device_alloc;
}  // namespace

std::string_view tier_name(Tier t) { return t == Tier::Host ? "host" : "device"; }
std::string_view tag_name(Tag t) { return kTagNames[static_cast<int>(t)]; }

Accountant& Accountant::global() {
  static Accountant a;
  return a;
}

void Accountant::on_alloc(Tier tier, Tag tag, size_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
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

std::string Accountant::report(Tier tier) const {
  std::string s;
  for (int i = 0; i < kNumTags; ++i) {
    MemCounter c = get(tier, Tag(i));
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

Buffer::Buffer(Tier tier, Tag tag, size_t bytes) : bytes_(bytes), tier_(tier), tag_(tag) {
  if (bytes == 0) return;
  if (tier == Tier::Host) {
    size_t rounded = (bytes + 63) / 64 * 64;
    p_ = std::aligned_alloc(64, rounded);
    OOMB_CHECK(p_ != nullptr, "out of host memory allocating {} for {}", format_bytes(int64_t(bytes)),
               tag_name(tag));
    std::memset(p_, 0, bytes);
  } else {
    OOMB_CHECK(g_device_alloc.alloc != nullptr, "no device backend is initialised (allocating {} for {})",
               format_bytes(int64_t(bytes)), tag_name(tag));
    p_ = g_device_alloc.alloc(bytes);
  }
  Accountant::global().on_alloc(tier, tag, bytes);
}

void Buffer::reset() {
  if (p_ == nullptr) return;
  if (tier_ == Tier::Host)
    std::free(p_);
  else
    g_device_alloc.free(p_);
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
