// The CUDA runtime on simt: one device whose memory is host memory. Streams run their work as late
// as CUDA allows (OOMB_SIMT_STREAMS=eager: as it is issued): a stream's kernels, copies and sets
// wait in its queue until the host synchronizes with it (the stream, or an event recorded on it),
// a stream that waits for its event reaches that wait, the legacy stream is used (which waits for
// every blocking stream) or memory is freed (cudaFree synchronizes). So work on one stream that
// should have waited for another's reads what was there before, and the host reading a copy's
// destination, or rewriting its pinned source, without a wait sees the copy not yet done: the
// tests of the backend that runs on it fail where a GPU would race. A timing event is stamped with
// the steady clock when its stream reaches it (cudaEventElapsedTime: between two such stamps).
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

constexpr size_t kTotal = size_t(80) << 30;  // the device's memory as cudaMemGetInfo states it (an H100's)
thread_local cudaError_t g_last = cudaSuccess;
// every call below holds it: the queues, the allocations, and the work run from them (a host
// thread of the trainer may call the runtime beside the main one)
std::recursive_mutex g_mu;
std::map<uintptr_t, size_t> g_device, g_pinned;  // allocations: start -> bytes
size_t g_used = 0;

cudaError_t fail(cudaError_t e, const std::string& why) {
  std::fprintf(stderr, "simt: %s\n", why.c_str());
  g_last = e;
  return e;
}

void* aligned(size_t bytes) {
  void* p = nullptr;
  return posix_memalign(&p, 256, bytes > 0 ? bytes : 1) == 0 ? p : nullptr;
}

bool within(const std::map<uintptr_t, size_t>& m, const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = m.upper_bound(a);
  if (it == m.begin()) return false;
  --it;
  return a < it->first + std::max<size_t>(it->second, 1);
}
// host memory that is neither the device's nor pinned (CUDA stages copies from it, and copies into
// it complete before the call returns)
bool pageable(const void* p) { return !within(g_device, p) && !within(g_pinned, p); }

bool eager() {
  static const bool e = [] {
    const char* v = std::getenv("OOMB_SIMT_STREAMS");
    return v && std::string(v) == "eager";
  }();
  return e;
}

struct Stream {
  std::deque<std::function<void()>> queue;
  uint64_t issued = 0, done = 0;  // work items so far; those run
};
struct Event {
  Stream* stream = nullptr;  // where it was last recorded (none: complete)
  uint64_t at = 0;           // complete once that stream has run this many items
  bool timing = true;        // made without cudaEventDisableTiming
  // when the stream reached the record (seconds of the steady clock; NaN until then), written by
  // the record's own item in the stream's queue
  std::shared_ptr<double> t;
};
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
std::vector<std::unique_ptr<Stream>>& streams() {  // kept to the end: a wait may name a destroyed one
  static std::vector<std::unique_ptr<Stream>> v;
  return v;
}

void run_until(Stream& st, uint64_t n) {
  while (st.done < n) {
    std::function<void()> f = std::move(st.queue.front());
    st.queue.pop_front();
    f();  // may run another stream up to an event it waits for
    ++st.done;
  }
}
// every stream's work, in the order they were made (OOMB_SIMT_ORDER=reverse: the other way round;
// where one stream reads what another writes without waiting for it, one of the two orders shows it)
void run_all() {
  auto& v = streams();
  for (size_t i = 0; i < v.size(); ++i) {
    Stream& st = *v[simt::reverse_order() ? v.size() - 1 - i : i];
    run_until(st, st.issued);
  }
}

// Every item issued on stream s so far run (the legacy stream, null: every stream's).
void drain(cudaStream_t s) {
  if (s == nullptr) run_all();
  else run_until(*reinterpret_cast<Stream*>(s), reinterpret_cast<Stream*>(s)->issued);
}

// Work issued on stream s: queued, or run now on the legacy stream (null) once every blocking
// stream has run what it holds, as CUDA orders them.
void issue(cudaStream_t s, std::function<void()> f) {
  if (eager() || s == nullptr) {
    if (s == nullptr) run_all();
    f();
    if (s) ++reinterpret_cast<Stream*>(s)->issued, ++reinterpret_cast<Stream*>(s)->done;
    return;
  }
  Stream& st = *reinterpret_cast<Stream*>(s);
  st.queue.push_back(std::move(f));
  ++st.issued;
}

// A copy's source as it is when issued where CUDA reads it then (pageable host memory, which it
// stages), else as it will be when the copy runs.
std::function<const void*()> source(const void* src, size_t bytes) {
  if (!pageable(src)) return [src] { return src; };
  auto copy = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                           static_cast<const unsigned char*>(src) + bytes);
  return [copy] { return static_cast<const void*>(copy->data()); };
}

}  // namespace

void simt_issue(cudaStream_t s, std::function<void()> work) {
  std::lock_guard<std::recursive_mutex> l(g_mu);
  issue(s, std::move(work));
}

cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice, "cudaSetDevice: simt has one device");
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties: simt has one device");
  *p = {};
  std::snprintf(p->name, sizeof p->name, "simt (CUDA kernels on the CPU)");
  p->totalGlobalMem = kTotal;
  p->sharedMemPerBlockOptin = 227 << 10;
  p->multiProcessorCount = 1;
  p->major = 9;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  std::lock_guard<std::recursive_mutex> l(g_mu);
  *total = kTotal;
  *free = kTotal > g_used ? kTotal - g_used : 0;
  return cudaSuccess;
}
cudaError_t cudaPeekAtLastError() { return g_last; }
cudaError_t cudaGetLastError() {
  const cudaError_t e = g_last;
  g_last = cudaSuccess;
  return e;
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unknown error";
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = aligned(bytes);
  if (!*p) return fail(cudaErrorMemoryAllocation, "cudaMalloc: out of host memory");
  std::lock_guard<std::recursive_mutex> l(g_mu);
  g_device[reinterpret_cast<uintptr_t>(*p)] = bytes;
  g_used += bytes;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  std::lock_guard<std::recursive_mutex> l(g_mu);
  const auto it = g_device.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_device.end()) return fail(cudaErrorInvalidValue, "cudaFree of a pointer cudaMalloc did not return");
  run_all();  // cudaFree waits for the device
  g_used -= it->second;
  g_device.erase(it);
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) {
  *p = aligned(bytes);
  if (!*p) return fail(cudaErrorMemoryAllocation, "cudaHostAlloc: out of host memory");
  std::lock_guard<std::recursive_mutex> l(g_mu);
  g_pinned[reinterpret_cast<uintptr_t>(*p)] = bytes;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  if (!p) return cudaSuccess;
  std::lock_guard<std::recursive_mutex> l(g_mu);
  if (g_pinned.erase(reinterpret_cast<uintptr_t>(p)) == 0)
    return fail(cudaErrorInvalidValue, "cudaFreeHost of a pointer cudaHostAlloc did not return");
  run_all();
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  std::lock_guard<std::recursive_mutex> l(g_mu);
  run_all();  // the legacy stream
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t s) {
  if (bytes == 0) return cudaSuccess;
  std::lock_guard<std::recursive_mutex> l(g_mu);
  issue(s, [dst, from = source(src, bytes), bytes] { std::memmove(dst, from(), bytes); });
  if (pageable(dst)) drain(s);
  return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind, cudaStream_t s) {
  if (width > dpitch || width > spitch)
    return fail(cudaErrorInvalidValue, "cudaMemcpy2DAsync: a row wider than its pitch");
  if (width == 0 || height == 0) return cudaSuccess;
  std::lock_guard<std::recursive_mutex> l(g_mu);
  const size_t span = (height - 1) * spitch + width;
  issue(s, [=, from = source(src, span)] {
    const char* f = static_cast<const char*>(from());
    for (size_t r = 0; r < height; ++r) std::memmove(static_cast<char*>(dst) + r * dpitch, f + r * spitch, width);
  });
  if (pageable(dst)) drain(s);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  std::lock_guard<std::recursive_mutex> l(g_mu);
  run_all();
  std::memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> l(g_mu);
  issue(s, [=] { std::memset(p, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* s) {
  std::lock_guard<std::recursive_mutex> l(g_mu);
  streams().push_back(std::make_unique<Stream>());
  *s = reinterpret_cast<cudaStream_t>(streams().back().get());
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {  // CUDA finishes its work first
  std::lock_guard<std::recursive_mutex> l(g_mu);
  if (s) drain(s);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> l(g_mu);
  drain(s);
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  std::lock_guard<std::recursive_mutex> l(g_mu);
  const Event ev = *reinterpret_cast<Event*>(e);  // the record made before this call
  if (ev.stream) issue(s, [ev] { run_until(*ev.stream, ev.at); });
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  auto* ev = new Event;
  ev->timing = (flags & cudaEventDisableTiming) == 0;
  *e = reinterpret_cast<cudaEvent_t>(ev);
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<Event*>(e);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> l(g_mu);
  Event& ev = *reinterpret_cast<Event*>(e);
  const bool timing = ev.timing;
  if (s == nullptr) {
    run_all();
    ev = Event{};
    ev.t = std::make_shared<double>(now_s());
  } else {
    ev = Event{};
    if (timing) {  // an item of its own, run when the stream reaches it
      ev.t = std::make_shared<double>(std::nan(""));
      issue(s, [t = ev.t] { *t = now_s(); });
    }
    ev.stream = reinterpret_cast<Stream*>(s);
    ev.at = ev.stream->issued;
  }
  ev.timing = timing;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  std::lock_guard<std::recursive_mutex> l(g_mu);
  const Event& ev = *reinterpret_cast<Event*>(e);
  if (ev.stream) run_until(*ev.stream, ev.at);
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) { return cudaEventSynchronize(e); }  // as if the device had got there
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  std::lock_guard<std::recursive_mutex> l(g_mu);
  const Event &a = *reinterpret_cast<Event*>(start), &b = *reinterpret_cast<Event*>(end);
  if (!a.timing || !b.timing || !a.t || !b.t)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event never recorded, or made without timing");
  if (std::isnan(*a.t) || std::isnan(*b.t)) return cudaErrorNotReady;
  *ms = float((*b.t - *a.t) * 1e3);
  return cudaSuccess;
}

cudaError_t simt_func_set_max_shared(const void* kernel, int bytes) {
  std::lock_guard<std::recursive_mutex> l(g_mu);
  const std::string why = bytes < 0 ? "a negative size" : simt::set_max_shared(kernel, size_t(bytes));
  return why.empty() ? cudaSuccess : fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: " + why);
}

void simt_launch(const void* kernel, dim3 grid, dim3 block, size_t shared, cudaStream_t s,
                 std::function<void()> body) {
  const simt::Dim3 g{grid.x, grid.y, grid.z}, b{block.x, block.y, block.z};
  std::lock_guard<std::recursive_mutex> l(g_mu);
  // a configuration CUDA refuses is an error of the launch, not of the work when it runs
  if (const std::string why = simt::refusal(kernel, g, b, shared); !why.empty()) {
    fail(cudaErrorInvalidConfiguration, "a kernel launch CUDA refuses: " + why);
    return;
  }
  issue(s, [=, body = std::move(body)] {
    simt::launch(kernel, g, b, shared, [](void* f) { (*static_cast<const std::function<void()>*>(f))(); },
                 const_cast<std::function<void()>*>(&body));
  });
}
