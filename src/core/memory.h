// The memory accountant: every byte the engine allocates is tagged and counted, per tier.
// Buffers own memory; tensors are views into buffers.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

#include "core/error.h"

namespace oomb {

// host: plain host memory; device: the backend's device memory; pinned: page-locked host memory
// that a device copies to and from asynchronously (cudaHostAlloc on CUDA; plain memory elsewhere).
enum class Tier : uint8_t { Host, Device, Pinned };
enum class Tag : uint8_t { Weights, Grads, Optimizer, Activations, KV, KVGrad, PageMeta, Workspace, Data, IO };
constexpr int kNumTiers = 3;
constexpr int kNumTags = 10;
constexpr Tier kTiers[kNumTiers] = {Tier::Host, Tier::Device, Tier::Pinned};

std::string_view tier_name(Tier t);  // "host" | "device" | "pinned"
std::string_view tag_name(Tag t);    // "weights", "grads", ..., "kv_grad", ...

struct MemCounter {
  int64_t current = 0, peak = 0;
};

class Accountant {
 public:
  static Accountant& global();
  void on_alloc(Tier tier, Tag tag, size_t bytes);
  void on_free(Tier tier, Tag tag, size_t bytes);
  // An allocation counted by on_alloc that the allocator then failed: uncounted, the peaks as they
  // were before it (a failed allocation is no peak).
  void on_failed(Tier tier, Tag tag, size_t bytes, int64_t tag_peak_before, int64_t total_peak_before);
  MemCounter get(Tier tier, Tag tag) const;
  MemCounter total(Tier tier) const;  // all tags; peak is the peak of the sum
  int64_t allocations() const;        // buffers allocated so far (a steady-state step adds none)
  void reset_peaks();                 // peak := current, for every counter
  // A capacity for a tier (0 = none): an allocation beyond it fails naming the tag and the flag.
  void set_capacity(Tier tier, int64_t bytes, std::string flag);
  int64_t capacity(Tier tier) const;
  std::string report(Tier tier) const;  // one line: "weights 1.2 MiB (peak 1.2 MiB), ..."

 private:
  mutable std::mutex mu_;
  std::string report_locked(Tier tier) const;
  std::array<std::array<MemCounter, kNumTags>, kNumTiers> c_{};
  std::array<MemCounter, kNumTiers> total_{};
  std::array<int64_t, kNumTiers> cap_{};
  int64_t allocations_ = 0;
  std::array<std::string, kNumTiers> cap_flag_{};
};

// Device (and pinned host) allocation hooks, set by a device backend at start-up. Both must
// return zero-filled memory. Without a pinned hook, pinned memory is plain aligned host memory.
// Another allocator than the one in place is refused while memory of its tier is allocated (the
// simulated device and CUDA do not mix in a process: a buffer is freed by the allocator in place).
struct DeviceAllocator {
  void* (*alloc)(size_t bytes) = nullptr;
  void (*free)(void* p) = nullptr;
};
void set_device_allocator(DeviceAllocator a);
void set_pinned_allocator(DeviceAllocator a);
// True when device memory is addressable by the host (the simulated device): CPU kernels then
// run on it.
bool device_memory_is_host();
void set_device_memory_is_host(bool yes);
// 64-byte aligned, zero-filled host memory (free with std::free); `what` names it in the error.
void* zeroed_host_alloc(size_t bytes, std::string_view what);
// Memory the host's code (the CPU kernels) may read and write directly.
inline bool host_addressable(Tier t) { return t != Tier::Device || device_memory_is_host(); }
// Where state lives that only the host's code touches, kept beside state in tier t (AdamW's
// moments beside pinned masters): pinned memory is for what crosses to the device (page-locked,
// which the system cannot page or reuse), so pinned becomes plain host memory.
inline Tier host_side(Tier t) { return t == Tier::Pinned ? Tier::Host : t; }

// Out of memory: a tier's capacity (--device-memory) refused an allocation, or the tier's allocator
// failed. The message names the tier, the tag and the bytes, then the advice a command installed
// (set_out_of_memory_advice: what `oomb plan` says would fit, cli/guards.h plan_advice), computed
// when the allocation fails, while the command's objects still exist.
struct OutOfMemory : Error {
  OutOfMemory(const std::string& msg, Tier t, Tag g, int64_t b, int64_t used)
      : Error(msg), tier(t), tag(g), bytes(b), in_use(used) {}
  Tier tier;
  Tag tag;
  int64_t bytes;   // the allocation refused
  int64_t in_use;  // the tier's accounted bytes when it was refused
};

using OutOfMemoryAdvice = std::function<std::string(Tier tier, Tag tag, int64_t bytes, int64_t in_use)>;
void set_out_of_memory_advice(OutOfMemoryAdvice f);  // empty: none
// The largest block below up_to bytes the host's allocator gives now (found by allocating and at
// once freeing, untouched, within 1/64 of it): what an out-of-memory advice reckons is left.
int64_t largest_host_block(int64_t up_to);

// An owned, tagged allocation, zero-filled. Host memory is 64-byte aligned; device memory comes
// from the allocator a device backend installs (which must zero it too).
class Buffer {
 public:
  Buffer() = default;
  Buffer(Tier tier, Tag tag, size_t bytes);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return p_; }
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }
  Tier tier() const { return tier_; }
  Tag tag() const { return tag_; }
  void reset();

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
  Tier tier_ = Tier::Host;
  Tag tag_ = Tag::Workspace;
};

std::string format_bytes(int64_t b);  // "1.50 MiB"

}  // namespace oomb
