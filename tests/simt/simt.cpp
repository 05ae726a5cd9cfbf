// simt's engine: fibers for a block's threads, barriers, warp collectives, the mma fragments.
#include "simt.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <boost/context/fiber.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define SIMT_ASAN 1
#endif

namespace simt {

// The way from a barrier or collective to the next fiber's stack switch, inlined into the caller:
// every lane's wait at a warp collective takes it (a CUDA model's simt tests a fifth faster)
#define SIMT_INLINE [[gnu::always_inline]] inline

namespace {

constexpr size_t kStack = size_t(256) << 10;  // per thread; kernels keep a few KB of arrays
constexpr size_t kDefaultShared = 48 << 10;   // CUDA's dynamic shared memory without opting in
constexpr size_t kMaxShared = 227 << 10;      // Hopper's most per block (sharedMemPerBlockOptin)
constexpr size_t kMaxExchange = 64;
constexpr int kMaxThreads = 1024;
using Threads = std::array<uint64_t, kMaxThreads / 64>;  // a set of a block's threads, bit i thread i

struct Barrier {
  int expected = 0, arrived = 0;
  const char* what = nullptr;  // what the threads arrived at so far wait for (each must wait for the same)
  Threads waiting{};           // those that arrived, in the words first..last (a warp's: one)
  int first = 0, last = kMaxThreads / 64 - 1;
};

namespace ctx = boost::context;

// Each fiber's stack starts this far below its mapping's top. The mappings are kStack apart, so their
// tops (where boost::context keeps a fiber's record and the hot frames lie) would all fall into the
// same few sets of the caches, and every switch to a fiber would miss; thread i starts i * 1040
// bytes lower (mod 64 KiB: 4096 distinct offsets, a line apart and more).
constexpr size_t kColorRange = size_t(64) << 10;
size_t stack_color(size_t i) { return i * 1040 % kColorRange; }

// boost::context's stack allocator over simt's stacks, reused across launches
struct PoolStack {
  char* base;
  size_t color;
  ctx::stack_context allocate() {
    ctx::stack_context sc;
    sc.size = kStack - color;
    sc.sp = base + kStack - color;
    return sc;
  }
  void deallocate(ctx::stack_context&) noexcept {}
};

struct Fiber {
  ctx::fiber cont;  // where it resumes
  char* stack = nullptr;
  Dim3 tid;
  int warp = 0, lane = 0;
  bool done = false;
  int parity = 0;  // which of its warp's two exchange buffers the next collective uses
  const char* where = "";
};

struct Warp {
  Barrier bar;
  int lanes = 32;
  alignas(16) unsigned char buf[2][32 * kMaxExchange];
  uint32_t wrote[2] = {0, 0};  // the lanes that gave a value to each buffer's collective
};

// One block's run on the calling thread. The fibers switch to one another directly (one stack switch
// per wait, not two through a scheduler), in the order a scheduler's passes over the threads would
// take: a fiber that waits hands over to the next thread after it, cyclically, that can go on.
struct Block {
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  Barrier bar;
  ctx::fiber sched;  // where run_block resumes once every thread is done
  Fiber* cur = nullptr;   // the running fiber (nullptr: run_block)
  Fiber* from = nullptr;  // the one that switched to it, whose continuation it keeps on arrival
  Threads ready{};        // the threads that can go on: neither done nor waiting at a barrier
  bool reverse = false;   // OOMB_SIMT_ORDER=reverse: the threads in the order last to first
  int finished = 0;
  Body body = nullptr;
  void* arg = nullptr;
  std::vector<unsigned char> shared;
#ifdef SIMT_ASAN
  const void* sched_bottom = nullptr;
  size_t sched_size = 0;
#endif
};

thread_local Block* g_block = nullptr;
thread_local std::vector<char*> g_stacks;  // reused across launches

std::map<const void*, size_t>& max_shared() {
  static std::map<const void*, size_t> m;
  return m;
}

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "simt: %s\n", why.c_str());
  std::fflush(stderr);
  std::abort();
}

std::string where(const Fiber& f) {
  return fmt::format("block ({}, {}, {}) thread ({}, {}, {})", block_idx.x, block_idx.y, block_idx.z, f.tid.x, f.tid.y,
                     f.tid.z);
}

// the lowest thread of `s` at or above i, or -1
SIMT_INLINE int lowest_from(const Threads& s, int i) {
  if (i >= kMaxThreads) return -1;
  int w = i >> 6;
  for (uint64_t m = s[size_t(w)] & (~uint64_t(0) << (i & 63));; m = s[size_t(w)]) {
    if (m) return 64 * w + __builtin_ctzll(m);
    if (++w == int(s.size())) return -1;
  }
}

// the highest thread of `s` at or below i, or -1
SIMT_INLINE int highest_to(const Threads& s, int i) {
  if (i < 0) return -1;
  int w = i >> 6;
  for (uint64_t m = s[size_t(w)] & (~uint64_t(0) >> (63 - (i & 63)));; m = s[size_t(w)]) {
    if (m) return 64 * w + 63 - __builtin_clzll(m);
    if (--w < 0) return -1;
  }
}

// The next thread after the running one that can go on (nullptr: none can), in the threads' order
// (first to last, or last to first), cyclically: the order a scheduler's passes over them would take.
SIMT_INLINE Fiber* next_to_run(Block& b) {
  const int i = int(b.cur - b.fibers.data());
  int j = b.reverse ? highest_to(b.ready, i - 1) : lowest_from(b.ready, i + 1);
  if (j < 0) j = b.reverse ? highest_to(b.ready, kMaxThreads - 1) : lowest_from(b.ready, 0);
  return j < 0 ? nullptr : &b.fibers[size_t(j)];
}

SIMT_INLINE void set_ready(Block& b, const Fiber& f, bool ready) {
  const size_t i = size_t(&f - b.fibers.data());
  const uint64_t bit = uint64_t(1) << (i & 63);
  b.ready[i >> 6] = ready ? b.ready[i >> 6] | bit : b.ready[i >> 6] & ~bit;
}

// The barrier's last thread arrived (or its last that had not exited did): those waiting go on.
SIMT_INLINE void release(Block& b, Barrier& bar) {
  bar.arrived = 0;
  for (int w = bar.first; w <= bar.last; ++w) {
    b.ready[size_t(w)] |= bar.waiting[size_t(w)];
    bar.waiting[size_t(w)] = 0;
  }
}

[[noreturn]] void deadlock(const Block& b) {
  std::string at;
  for (const Fiber& f : b.fibers)
    if (!f.done && at.size() < 400) at += fmt::format("\n  {} waits at {}", where(f), f.where);
  die("deadlock: the block's threads wait at barriers that never fill (a __syncthreads or warp collective "
      "not every thread reaches):" + at);
}

// The continuation of the fiber (or run_block) that just switched to the running one.
SIMT_INLINE void keep(Block& b, ctx::fiber&& c) {
  if (b.from) {
    b.from->cont = std::move(c);
  } else {
    b.sched = std::move(c);
  }
}

// Makes `next` (nullptr: run_block) the running one: what the switch leaves behind is set.
SIMT_INLINE ctx::fiber& hand_over(Block& b, Fiber* next) {
  b.from = b.cur;
  b.cur = next;
  if (next) thread_idx = next->tid, running_lane = next->lane;
  return next ? next->cont : b.sched;
}

// From the running fiber (or run_block) to `next`, and back once something switches to it again.
SIMT_INLINE void switch_to(Block& b, Fiber* next) {
#ifdef SIMT_ASAN  // ASan's protocol for a stack switch: announce it, then confirm it on arrival
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, next ? next->stack : b.sched_bottom, next ? kStack : b.sched_size);
#endif
  ctx::fiber& target = hand_over(b, next);
  ctx::fiber c = std::move(target).resume();
#ifdef SIMT_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  keep(b, std::move(c));
}

// The running fiber waits at a barrier: the next that can go on runs.
SIMT_INLINE void wait_at_barrier() {
  Block& b = *g_block;
  Fiber* next = next_to_run(b);
  if (!next) deadlock(b);
  switch_to(b, next);
}

// The running fiber arrives at a barrier; it goes on once every thread the barrier waits for has.
SIMT_INLINE void arrive(Barrier& bar, const char* what) {
  Block& b = *g_block;
  Fiber& f = *b.cur;
  if (bar.arrived == 0) {
    bar.what = what;
  } else if (bar.what != what) {  // e.g. one lane at __syncwarp, another at a shuffle: no such thing on a GPU
    die(fmt::format("{} arrives at {} while its warp's other threads wait at {}", where(f), what, bar.what));
  }
  if (++bar.arrived == bar.expected) {
    release(b, bar);
    return;
  }
  const size_t i = size_t(&f - b.fibers.data());
  bar.waiting[i >> 6] |= uint64_t(1) << (i & 63);
  set_ready(b, f, false);
  f.where = what;
  wait_at_barrier();
}

ctx::fiber fiber_main(ctx::fiber&& caller) {
  Block& b = *g_block;
#ifdef SIMT_ASAN
  const void* bottom = nullptr;
  size_t size = 0;
  __sanitizer_finish_switch_fiber(nullptr, &bottom, &size);
  if (!b.from) b.sched_bottom = bottom, b.sched_size = size;  // entered from run_block
#endif
  keep(b, std::move(caller));
  b.body(b.arg);
  Fiber& f = *b.cur;
  f.done = true;
  set_ready(b, f, false);
  ++b.finished;
  // an exited thread no longer holds back the block's barriers nor its warp's collectives (sm_70
  // and later); a shuffle that reads it dies (exchange's `valid`)
  Warp& w = b.warps[size_t(f.warp)];
  for (Barrier* bar : {&b.bar, &w.bar}) {
    --bar->expected;
    if (bar->arrived > 0 && bar->arrived == bar->expected) release(b, *bar);
  }
  Fiber* next = next_to_run(b);
  if (!next && b.finished < int(b.fibers.size())) deadlock(b);
#ifdef SIMT_ASAN  // this stack ends
  __sanitizer_start_switch_fiber(nullptr, next ? next->stack : b.sched_bottom, next ? kStack : b.sched_size);
#endif
  return std::move(hand_over(b, next));
}

char* stack(size_t i) {
  while (g_stacks.size() <= i) {
    void* p = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) die("cannot map a fiber's stack");
    g_stacks.push_back(static_cast<char*>(p));
  }
  return g_stacks[i];
}

// The static __shared__ variables of every kernel (cuda_runtime.h): the section's bounds, which the
// linker defines where the section exists. Written outside ASan's view (the section holds its
// redzones between the variables), 8 bytes at a time where aligned.
extern "C" char __start_simt_shared[] __attribute__((weak));
extern "C" char __stop_simt_shared[] __attribute__((weak));
__attribute__((no_sanitize_address, noinline)) void garble_static_shared() {
  if (__start_simt_shared == nullptr) return;
  char *p = __start_simt_shared, *end = __stop_simt_shared;
  for (; p < end && reinterpret_cast<uintptr_t>(p) % 8 != 0; ++p) *static_cast<volatile char*>(p) = char(0xCD);
  for (; end - p >= 8; p += 8) *reinterpret_cast<volatile uint64_t*>(p) = 0xCDCDCDCDCDCDCDCDull;
  for (; p < end; ++p) *static_cast<volatile char*>(p) = char(0xCD);
}

void run_block(Block& b, Dim3 block) {
  const int n = int(block.x * block.y * block.z), nw = (n + 31) / 32;
  b.fibers.clear();
  b.fibers.resize(size_t(n));
  b.warps.resize(size_t(nw));  // (kept across blocks: a collective reads only what its lanes wrote)
  for (int w = 0; w < nw; ++w) {
    Warp& wp = b.warps[size_t(w)];
    wp.bar = Barrier{};
    wp.wrote[0] = wp.wrote[1] = 0;
    wp.lanes = std::min(32, n - 32 * w);
    wp.bar.expected = wp.lanes;
    wp.bar.first = wp.bar.last = w / 2;
  }
  b.bar = Barrier{};
  b.bar.expected = n;
  b.bar.last = (n - 1) / 64;
  b.ready.fill(0);
  for (int i = 0; i < n; ++i) b.ready[size_t(i) >> 6] |= uint64_t(1) << (i & 63);
  std::memset(b.shared.data(), 0xCD, b.shared.size());  // shared memory starts as garbage, as on a GPU
  garble_static_shared();
  for (int i = 0; i < n; ++i) {
    Fiber& f = b.fibers[size_t(i)];
    f.tid = {unsigned(i) % block.x, unsigned(i) / block.x % block.y, unsigned(i) / (block.x * block.y)};
    f.warp = i / 32, f.lane = i % 32;
    f.stack = stack(size_t(i));
    f.cont = ctx::fiber(std::allocator_arg, PoolStack{f.stack, stack_color(size_t(i))}, fiber_main);
  }
  // the threads run from the first place; run_block goes on when the last is done
  b.cur = b.from = nullptr;
  b.finished = 0;
  b.reverse = reverse_order();
  switch_to(b, &b.fibers[b.reverse ? size_t(n) - 1 : 0]);
  if (b.finished != n) die("a block returned to its launch before every thread was done");
}

}  // namespace

bool reverse_order() {
  static const bool r = [] {
    const char* e = std::getenv("OOMB_SIMT_ORDER");
    return e && std::strcmp(e, "reverse") == 0;
  }();
  return r;
}

std::string set_max_shared(const void* kernel, size_t bytes) {
  if (bytes > kMaxShared) return fmt::format("{} bytes of dynamic shared memory exceed the device's {}", bytes, kMaxShared);
  max_shared()[kernel] = bytes;
  return "";
}

std::string refusal(const void* kernel, Dim3 grid, Dim3 block, size_t shared) {
  if (g_block) return "a kernel launched from a kernel";
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64)
    return fmt::format("a block of ({}, {}, {}) threads (at most 1024, z at most 64)", block.x, block.y, block.z);
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
    return fmt::format("a grid of ({}, {}, {}) blocks (x below 2^31, y and z at most 65535, none 0)", grid.x, grid.y,
                       grid.z);
  const auto it = max_shared().find(kernel);
  const size_t limit = it == max_shared().end() ? kDefaultShared : std::max(kDefaultShared, it->second);
  if (shared > limit)
    return fmt::format("{} bytes of dynamic shared memory, above the kernel's {} (cudaFuncSetAttribute raises it)",
                       shared, limit);
  return "";
}

std::string launch(const void* kernel, Dim3 grid, Dim3 block, size_t shared, Body body, void* arg) {
  if (std::string why = refusal(kernel, grid, block, shared); !why.empty()) return why;
  Block b;
  b.body = body, b.arg = arg;
  b.shared.resize(std::max<size_t>(shared, 16));
  g_block = &b;
  grid_dim = grid, block_dim = block;
  const bool rev = reverse_order();  // the blocks too: one block reading what a later one writes fails
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        block_idx = rev ? Dim3{grid.x - 1 - x, grid.y - 1 - y, grid.z - 1 - z} : Dim3{x, y, z};
        run_block(b, block);
      }
  g_block = nullptr;
  return "";
}

void* dynamic_shared() { return g_block->shared.data(); }

void sync_block() { arrive(g_block->bar, "__syncthreads"); }

void sync_warp() {
  Block& b = *g_block;
  arrive(b.warps[size_t(b.cur->warp)].bar, "__syncwarp");
}

int warp_lanes() { return g_block->warps[size_t(g_block->cur->warp)].lanes; }

namespace {
// one barrier name per size: lanes at collectives of other sizes are at different collectives
const char* collective_name(size_t bytes) {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (size_t i = 0; i <= kMaxExchange; ++i) v.push_back(fmt::format("a warp collective of {} bytes", i));
    return v;
  }();
  return names[bytes].c_str();
}
}  // namespace

Exchanged exchange(const void* v, size_t bytes) {
  Block& b = *g_block;
  Fiber& f = *b.cur;
  Warp& w = b.warps[size_t(f.warp)];
  if (bytes > kMaxExchange) die(fmt::format("{}: a warp collective of {} bytes (simt takes {})", where(f), bytes, kMaxExchange));
  // two buffers in turn: a lane writes this one again only after every lane passed the next
  // collective, so after each has read this one
  const int p = f.parity;
  unsigned char* buf = w.buf[p];
  f.parity ^= 1;
  if (w.bar.arrived == 0) w.wrote[p] = 0;  // the collective's first lane: none has given a value yet
  std::memcpy(buf + size_t(f.lane) * bytes, v, bytes);
  w.wrote[p] |= 1u << f.lane;
  arrive(w.bar, collective_name(bytes));
  // the last lane to arrive may go on and exit before the others read: nothing writes it; lanes
  // that exited before the collective gave nothing (wrote says which)
  return {buf, w.wrote[p]};
}

void read_exited_lane(int src) {
  die(fmt::format("{} reads lane {} in a warp collective, which has exited (undefined on a GPU)", where(*g_block->cur),
                  src));
}

namespace {
float bf16_value(uint32_t reg, int high) {
  const uint32_t bits = (high ? reg >> 16 : reg & 0xffffu) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
}  // namespace

// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"), lane = 4 group + t:
//   A (16 x 16, row): element a_i of 8 (register i / 2, half i % 2) is at row group (+ 8 for i in
//     2, 3, 6, 7), column 2 t + (i & 1) (+ 8 for i >= 4);
//   B (16 x 8, col): b_i of 4 at row (k) 2 t + (i & 1) (+ 8 for i >= 2), column group;
//   C (16 x 8): c_i of 4 at row group (+ 8 for i >= 2), column 2 t + (i & 1).
void mma_m16n8k16_bf16(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  struct Frag {
    uint32_t a[4], b[2];
  };
  const auto ex = exchange(Frag{{a[0], a[1], a[2], a[3]}, {b[0], b[1]}});
  if (ex.valid != 0xffffffffu) die(where(*g_block->cur) + ": mma.sync with lanes of its warp exited");
  const Frag* all = ex.all();
  auto A = [&](int r, int k) {  // the lane holding (r, k) and its element index i
    const int i = (k & 1) + 2 * (r >= 8) + 4 * (k >= 8);
    const int l = 4 * (r & 7) + (k & 7) / 2;
    return bf16_value(all[l].a[i / 2], i & 1);
  };
  auto B = [&](int k, int n) {
    const int i = (k & 1) + 2 * (k >= 8);
    const int l = 4 * n + (k & 7) / 2;
    return bf16_value(all[l].b[i / 2], i & 1);
  };
  const int l = lane(), group = l >> 2, t = l & 3;
  // this lane's rows of A (group, group + 8) and columns of B (2 t, 2 t + 1), each decoded once
  float rows[2][16], cols[2][16];
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 16; ++k) rows[h][k] = A(group + 8 * h, k), cols[h][k] = B(k, 2 * t + h);
  for (int i = 0; i < 4; ++i) {  // c_i at row group + 8 (i >= 2), column 2 t + (i & 1)
    float acc = 0.0f;
    for (int k = 0; k < 16; ++k) acc += rows[i >> 1][k] * cols[i & 1][k];  // products of bf16 values are exact in fp32
    c[i] += acc;
  }
}

void ldmatrix_x4(uint32_t r[4], const void* row, bool trans) {
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0)
    die(fmt::format("{}: ldmatrix row address {} is not 16-byte aligned", where(*g_block->cur), row));
  const auto ex = exchange(row);
  if (ex.valid != 0xffffffffu) die(where(*g_block->cur) + ": ldmatrix with lanes of its warp exited");
  const void* const* rows = ex.all();
  const int l = lane();
  auto at = [&](int m, int rr, int c) {  // element (rr, c) of matrix m
    uint16_t v;
    std::memcpy(&v, static_cast<const unsigned char*>(rows[8 * m + rr]) + 2 * c, 2);
    return uint32_t(v);
  };
  for (int m = 0; m < 4; ++m) {
    const int a = l >> 2, b = 2 * (l & 3);
    r[m] = trans ? at(m, b, a) | at(m, b + 1, a) << 16 : at(m, a, b) | at(m, a, b + 1) << 16;
  }
}

}  // namespace simt
