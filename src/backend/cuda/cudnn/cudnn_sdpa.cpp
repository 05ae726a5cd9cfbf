// sdpa::Graph -> cuDNN backend descriptors (tensors, operations, operation graph), then the
// heuristics' first engine config whose notes do not say nondeterministic, finalized into an
// execution plan (deviceless: compiled, as far as a stub driver lets it go), or none.
#include "backend/cuda/cudnn/cudnn_sdpa.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <vector>

#include "backend/cuda/stream_timeline.h"
#include "core/error.h"

#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
#define OOMB_CUDNN_HEADERS 1
bool oomb_cudnn_loaded();  // cudnn_lazy.cpp
#endif

namespace oomb::cuda::cudnn {

#ifdef OOMB_CUDNN_HEADERS

namespace {

constexpr size_t kMinVersion = 90000;  // cuDNN 9: the fused SDPA engines on Hopper

std::string last_error() {
  char buf[2048] = {};
  cudnnGetLastErrorString(buf, sizeof buf);
  return buf[0] ? std::string(buf) : "no further message";
}

void check(cudnnStatus_t st, const std::string& what) {
  OOMB_CHECK(st == CUDNN_STATUS_SUCCESS, "cuDNN attention: {}: {} ({})", what, cudnnGetErrorString(st), last_error());
}

class Desc {
 public:
  Desc(cudnnBackendDescriptorType_t type, std::string what) : what_(std::move(what)) {
    check(cudnnBackendCreateDescriptor(type, &d_), "create " + what_);
  }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  void set(cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, const void* v) {
    check(cudnnBackendSetAttribute(d_, a, t, n, v), what_ + ": attribute " + std::to_string(int(a)));
  }
  template <typename T>
  void set1(cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, T v) {
    set(a, t, 1, &v);
  }
  void desc(cudnnBackendAttributeName_t a, const Desc& other) {
    cudnnBackendDescriptor_t o = other.d_;
    set(a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o);
  }
  void finalize() { check(cudnnBackendFinalize(d_), "finalize " + what_); }
  cudnnStatus_t try_finalize() { return cudnnBackendFinalize(d_); }
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
  std::string what_;
};

cudnnDataType_t dtype(sdpa::DType t) {
  switch (t) {
    case sdpa::DType::bf16: return CUDNN_DATA_BFLOAT16;
    case sdpa::DType::f32: return CUDNN_DATA_FLOAT;
    case sdpa::DType::i32: return CUDNN_DATA_INT32;
    case sdpa::DType::boolean: return CUDNN_DATA_BOOLEAN;
  }
  return CUDNN_DATA_FLOAT;
}

cudnnPointwiseMode_t pointwise_mode(sdpa::Op op) {
  switch (op) {
    case sdpa::Op::add: return CUDNN_POINTWISE_ADD;
    case sdpa::Op::sub: return CUDNN_POINTWISE_SUB;
    case sdpa::Op::mul: return CUDNN_POINTWISE_MUL;
    case sdpa::Op::div: return CUDNN_POINTWISE_DIV;
    case sdpa::Op::exp: return CUDNN_POINTWISE_EXP;
    case sdpa::Op::log: return CUDNN_POINTWISE_LOG;
    case sdpa::Op::identity: return CUDNN_POINTWISE_IDENTITY;
    case sdpa::Op::gen_index: return CUDNN_POINTWISE_GEN_INDEX;
    case sdpa::Op::cmp_ge: return CUDNN_POINTWISE_CMP_GE;
    case sdpa::Op::binary_select: return CUDNN_POINTWISE_BINARY_SELECT;
    default: ::oomb::fail("cuDNN attention: {} is not a pointwise op", sdpa::name(op));
  }
}

// One handle per process, created on first use (it needs the device) and destroyed at exit: by a
// static destructor, which runs before the CUDA runtime's own teardown (registered earlier, at the
// device's first use), or, where plans outlive it (a test's static backends), by the last Sdpa's
// destructor. Without it compute-sanitizer's leak check counted what cudnnCreate allocates (25,352
// bytes in 3 allocations on the H200). Trivially destructible, so readable after static destruction.
struct HandleState {
  cudnnHandle_t h;
  std::atomic<int64_t> plans;  // Sdpa objects alive
  std::atomic<bool> exiting;
};
HandleState g_cudnn{};

void destroy_handle_if_unused() {
  if (g_cudnn.exiting && g_cudnn.plans == 0 && g_cudnn.h) {
    cudnnDestroy(g_cudnn.h);  // (at exit: nothing to report an error to)
    g_cudnn.h = nullptr;
  }
}

struct DestroyHandleAtExit {
  ~DestroyHandleAtExit() {
    g_cudnn.exiting = true;
    destroy_handle_if_unused();
  }
};

cudnnHandle_t handle() {
  static const bool made = [] {
    check(cudnnCreate(&g_cudnn.h), "cudnnCreate");
    static DestroyHandleAtExit at_exit;
    return true;
  }();
  (void)made;
  OOMB_CHECK(g_cudnn.h != nullptr, "cuDNN attention: used after its handle was destroyed at exit");
  return g_cudnn.h;
}

// What plans are built for: this process's GPU (a handle), or a GPU described by cuDNN's own JSON
// serialisation of its properties (deviceless: no GPU needed until execution).
struct Target {
  cudnnHandle_t handle = nullptr;
  const Desc* deviceprop = nullptr;
};

std::unique_ptr<Desc> deviceprop_from_json(const std::string& json) {
  auto d = std::make_unique<Desc>(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, "device properties");
  d->set(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, int64_t(json.size()), json.data());
  d->finalize();
  return d;
}

}  // namespace

struct Sdpa::Plan {
  std::vector<std::unique_ptr<Desc>> keep;  // every descriptor the plan was built from
  std::unique_ptr<Desc> plan;
  int64_t workspace = 0;
  int64_t engine = -1;
  std::vector<int64_t> uids;         // bound per call: the graph's external tensors, then its scalars
  std::vector<double> scalar_store;  // by-value scalars, each in the first bytes of its double
  size_t scalars_at = 0;             // uids[scalars_at..] are the scalars
  int64_t compiled_engine = -1;      // deviceless: the first engine whose kernel compiled but could not load
  std::string refused;               // each engine config tried and what cuDNN said

  // engine >= 0: that engine's config alone (by its global index), deterministic or not (the
  // lab's survey); -1: the first deterministic one (on a GPU; deviceless, the first that compiles).
  // survey (if given): every config offered, in the heuristics' order, and what building it said.
  Plan(const sdpa::Graph& g, const char* which, Target target, int64_t engine_wanted = -1,
       std::vector<EngineTry>* survey = nullptr) {
    std::map<int64_t, Desc*> tensors;
    for (const sdpa::Tensor& t : g.tensors) {
      auto d = std::make_unique<Desc>(CUDNN_BACKEND_TENSOR_DESCRIPTOR, std::string(which) + " tensor " + t.name);
      d->set1(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, dtype(t.dtype));
      d->set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t.dim.data());
      d->set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t.stride.data());
      d->set1(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, t.uid);
      d->set1(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, int64_t(16));
      d->set1(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, bool(t.is_virtual));
      if (t.by_value) d->set1(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, true);
      d->finalize();
      tensors[t.uid] = d.get();
      keep.push_back(std::move(d));
    }
    for (const sdpa::Tensor& t : g.tensors)
      if (!t.is_virtual && !t.by_value) uids.push_back(t.uid);
    scalars_at = uids.size();
    for (const sdpa::Tensor& t : g.tensors) {
      if (!t.by_value) continue;
      uids.push_back(t.uid);
      double slot = 0;
      if (t.dtype == sdpa::DType::i32) {
        const int32_t v = int32_t(t.value);
        std::memcpy(&slot, &v, sizeof v);
      } else {
        const float v = float(t.value);
        std::memcpy(&slot, &v, sizeof v);
      }
      scalar_store.push_back(slot);
    }

    std::vector<cudnnBackendDescriptor_t> ops;
    for (const sdpa::Node& n : g.nodes) {
      const std::string what = std::string(which) + " node " + n.name;
      std::unique_ptr<Desc> op;
      if (n.op == sdpa::Op::matmul) {
        auto mm = std::make_unique<Desc>(CUDNN_BACKEND_MATMUL_DESCRIPTOR, what);
        mm->set1(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, dtype(n.compute));
        mm->finalize();
        op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what);
        op->desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, *tensors.at(n.x));
        op->desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, *tensors.at(n.b));
        op->desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, *tensors.at(n.y));
        op->desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, *mm);
        keep.push_back(std::move(mm));
      } else if (n.op == sdpa::Op::reduce_add || n.op == sdpa::Op::reduce_max) {
        auto red = std::make_unique<Desc>(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what);
        red->set1(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE,
                  n.op == sdpa::Op::reduce_add ? CUDNN_REDUCE_TENSOR_ADD : CUDNN_REDUCE_TENSOR_MAX);
        red->set1(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, dtype(n.compute));
        red->finalize();
        op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what);
        op->desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, *tensors.at(n.x));
        op->desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, *tensors.at(n.y));
        op->desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, *red);
        keep.push_back(std::move(red));
      } else if (n.op == sdpa::Op::reshape) {
        op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, what);
        op->desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, *tensors.at(n.x));
        op->desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, *tensors.at(n.y));
      } else {
        auto pw = std::make_unique<Desc>(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
        pw->set1(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, pointwise_mode(n.op));
        pw->set1(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, dtype(n.compute));
        if (n.axis >= 0) pw->set1(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, n.axis);
        pw->finalize();
        op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
        op->desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, *pw);
        op->desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, *tensors.at(n.x));
        if (n.b) op->desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *tensors.at(n.b));
        if (n.t) op->desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *tensors.at(n.t));
        op->desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, *tensors.at(n.y));
        keep.push_back(std::move(pw));
      }
      op->finalize();
      ops.push_back(op->get());
      keep.push_back(std::move(op));
    }

    cudnnHandle_t h = target.handle;
    auto graph = std::make_unique<Desc>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, std::string(which) + " operation graph");
    if (h) graph->set1(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, h);
    graph->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops.size()), ops.data());
    graph->finalize();

    Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, std::string(which) + " heuristics");
    heur.desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, *graph);
    heur.set1(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, CUDNN_HEUR_MODE_A);
    if (target.deviceprop) heur.desc(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, *target.deviceprop);
    heur.finalize();
    int64_t count = 0;
    check(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                   nullptr),
          std::string(which) + ": engine configs");
    OOMB_CHECK(count > 0, "cuDNN attention: {}: no engine supports this graph ({})\n{}", which, last_error(),
               sdpa::describe(g));
    std::vector<std::unique_ptr<Desc>> cfgs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      cfgs.push_back(std::make_unique<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config"));
      raw.push_back(cfgs.back()->get());
    }
    int64_t got = 0;
    check(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                   &got, raw.data()),
          std::string(which) + ": engine configs");

    for (int64_t i = 0; i < got && !plan; ++i) {
      Desc eng(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
      cudnnBackendDescriptor_t e = eng.get();
      int64_t n = 0;
      if (cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e) !=
          CUDNN_STATUS_SUCCESS) {
        refused += " config " + std::to_string(i) + ": its engine unreadable (" + last_error() + ");";
        if (engine_wanted < 0 && !survey) break;  // (the first config, as a failed one)
        continue;
      }
      int64_t index = -1;
      cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
      cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
      int64_t nnotes = 0;
      cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nnotes, notes);
      bool deterministic = true;
      for (int64_t j = 0; j < nnotes; ++j) deterministic &= notes[j] != CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
      if (engine_wanted >= 0 && index != engine_wanted) continue;
      if (!deterministic && engine_wanted < 0 && !survey) {
        refused += " engine " + std::to_string(index) + ": nondeterministic;";
        continue;
      }
      auto p = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, std::string(which) + " plan");
      if (h) p->set1(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, h);
      if (target.deviceprop) p->desc(CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, *target.deviceprop);
      p->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[i]);
      const cudnnStatus_t st = p->try_finalize();
      if (survey) {
        EngineTry t{index, deterministic, "", 0};
        if (st != CUDNN_STATUS_SUCCESS)
          t.status = std::string(cudnnGetErrorString(st)) + " (" + last_error() + ")";
        if (st == CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER)  // (deviceless: compiled; its config's workspace)
          cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &t.workspace);
        else if (st == CUDNN_STATUS_SUCCESS)
          cudnnBackendGetAttribute(p->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                   &t.workspace);
        survey->push_back(t);
        continue;
      }
      if (st != CUDNN_STATUS_SUCCESS) {
        const std::string why = last_error();
        refused += " engine " + std::to_string(index) + ": " + cudnnGetErrorString(st) + " (" + why + ");";
        // deviceless, on a stub driver: cuDNN accepted the graph and compiled the kernel, and only
        // loading it into a driver failed
        // (its engine config says what workspace the plan would take)
        if (!h && st == CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER && compiled_engine < 0) {
          compiled_engine = index;
          check(cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                         &workspace),
                std::string(which) + ": workspace size of engine " + std::to_string(index));
        }
        // the heuristics' first deterministic engine or none (deviceless too, so that it says what
        // a GPU would run): on the first H200 run (2026-11-28) its kernel failed to compile
        // (NVRTC), and the engines cuDNN offered after it built plans that wrote a wrong o
        // (forward) or failed to execute (backward, "nullptr == dq_ptr") for this graph
        break;
      }
      check(cudnnBackendGetAttribute(p->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                     &workspace),
            std::string(which) + ": workspace size");
      engine = index;
      plan = std::move(p);
    }
    OOMB_CHECK(got > 0,
               "cuDNN attention: {}: cuDNN {} has no engine for this graph (CUDNN_LOGLEVEL_DBG=2 "
               "CUDNN_LOGDEST_DBG=stderr prints its reasons)\n{}",
               which, version(), sdpa::describe(g));
    if (survey) return;
    if (engine_wanted >= 0 && refused.empty()) refused = " not among the " + std::to_string(got) + " offered";
    OOMB_CHECK(plan != nullptr || compiled_engine >= 0, "cuDNN attention: {}: {} builds no plan:{}", which,
               engine_wanted >= 0 ? "engine " + std::to_string(engine_wanted)
                                  : std::string("the first deterministic engine config"),
               refused);
    keep.push_back(std::move(graph));
    for (auto& c : cfgs) keep.push_back(std::move(c));
  }

  void run(const std::map<int64_t, const void*>& bound, void* ws, cudaStream_t stream) {
    std::vector<void*> ptrs;
    for (size_t i = 0; i < uids.size(); ++i) {
      if (i < scalars_at) {
        auto it = bound.find(uids[i]);
        OOMB_CHECK(it != bound.end() && it->second != nullptr, "cuDNN attention: tensor uid {} not bound", uids[i]);
        ptrs.push_back(const_cast<void*>(it->second));
      } else {
        ptrs.push_back(&scalar_store[i - scalars_at]);
      }
    }
    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data());
    pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(ptrs.size()), ptrs.data());
    pack.set1(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, ws);
    pack.finalize();
    check(cudnnSetStream(handle(), stream), "cudnnSetStream");
    about_to_submit(stream);  // (OOMB_CUDA_TIMELINE: an op's start)
    check(cudnnBackendExecute(handle(), plan->get(), pack.get()), "execute");
  }
};

bool available(std::string* why) {
  if (!oomb_cudnn_loaded()) {
    if (why) *why = "libcudnn.so.9 not found (cuDNN 9 is needed; put its lib directory on LD_LIBRARY_PATH)";
    return false;
  }
  if (cudnnGetVersion() < kMinVersion) {
    if (why) *why = "cuDNN " + version() + " is older than 9.0";
    return false;
  }
  return true;
}

size_t version_code() { return oomb_cudnn_loaded() ? cudnnGetVersion() : 0; }

std::string version() {
  if (!oomb_cudnn_loaded()) return "none (libcudnn.so.9 not found)";
  const size_t v = cudnnGetVersion();
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

Sdpa::Sdpa(const sdpa::Shape& shape, cudaStream_t stream, int64_t fwd_engine, int64_t bwd_engine)
    : shape_(shape), stream_(stream) {
  std::string why;
  OOMB_CHECK(available(&why), "cuDNN attention: {}", why);
  const Target device{handle(), nullptr};
  fwd_ = std::make_unique<Plan>(sdpa::forward(shape), "forward", device, fwd_engine);
  bwd_ = std::make_unique<Plan>(sdpa::backward(shape), "backward", device, bwd_engine);
  ++g_cudnn.plans;  // (last: a constructor that throws runs no destructor)
}

std::vector<EngineTry> survey(const sdpa::Graph& graph, const char* which, const std::string& deviceprop_json) {
  std::string why;
  OOMB_CHECK(available(&why), "cuDNN attention: {}", why);
  std::vector<EngineTry> tries;
  if (deviceprop_json.empty()) {
    const Sdpa::Plan p(graph, which, Target{handle(), nullptr}, -1, &tries);
  } else {
    const auto prop = deviceprop_from_json(deviceprop_json);
    const Sdpa::Plan p(graph, which, Target{nullptr, prop.get()}, -1, &tries);
  }
  return tries;
}

std::string build_deviceless(const sdpa::Graph& graph, const std::string& deviceprop_json, const char* which,
                             size_t* workspace) {
  OOMB_CHECK(oomb_cudnn_loaded(), "cuDNN attention: libcudnn.so.9 not found");
  const auto prop = deviceprop_from_json(deviceprop_json);
  const Sdpa::Plan p(graph, which, Target{nullptr, prop.get()});
  if (workspace) *workspace = size_t(p.workspace);
  const std::string ws = " (workspace " + std::to_string(p.workspace) + " B)";
  if (p.plan) return "engine " + std::to_string(p.engine) + " built" + ws;
  return "engine " + std::to_string(p.compiled_engine) + " compiled" + ws + "; loading it needs a GPU driver";
}

std::string build_deviceless(const sdpa::Shape& shape, const std::string& deviceprop_json, size_t* workspace) {
  size_t f = 0, b = 0;
  std::string said = "forward " + build_deviceless(sdpa::forward(shape), deviceprop_json, "forward", &f) +
                     ", backward " + build_deviceless(sdpa::backward(shape), deviceprop_json, "backward", &b);
  if (workspace) *workspace = std::max(f, b);
  return said;
}

std::string deviceprop_json() {
  Desc d(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, "device properties");
  cudnnHandle_t h = handle();
  d.set1(CUDNN_ATTR_DEVICEPROP_HANDLE, CUDNN_TYPE_HANDLE, h);
  d.finalize();
  int64_t n = 0;
  check(cudnnBackendGetAttribute(d.get(), CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, 0, &n, nullptr),
        "device properties: JSON size");
  std::string json(size_t(n), '\0');
  check(cudnnBackendGetAttribute(d.get(), CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, n, &n,
                                 json.data()),
        "device properties: JSON");
  while (!json.empty() && json.back() == '\0') json.pop_back();
  return json;
}

Sdpa::~Sdpa() {
  fwd_.reset(), bwd_.reset();
  --g_cudnn.plans;
  destroy_handle_if_unused();
}

size_t Sdpa::workspace_bytes() const { return size_t(std::max(fwd_->workspace, bwd_->workspace)); }

std::string Sdpa::engines() const {
  return "forward engine " + std::to_string(fwd_->engine) + " (workspace " + std::to_string(fwd_->workspace) +
         " B), backward engine " + std::to_string(bwd_->engine) + " (workspace " + std::to_string(bwd_->workspace) +
         " B)";
}

void Sdpa::trial(const void* q, const void* k, const void* v, void* o, float* stats, void* dk, void* dv,
                 void* workspace) {
  forward(q, k, v, o, stats, workspace);
  backward(q, k, v, o, o, stats, o, dk, dv, stats, workspace);
}

void Sdpa::forward(const void* q, const void* k, const void* v, void* o, float* stats, void* workspace) {
  fwd_->run(sdpa::forward_bindings(q, k, v, o, stats), workspace, stream_);
}

void Sdpa::backward(const void* q, const void* k, const void* v, const void* o, const void* d_o, const float* stats,
                    void* dq, void* dk, void* dv, float* softmax_sum, void* workspace) {
  bwd_->run(sdpa::backward_bindings(q, k, v, o, d_o, stats, dq, dk, dv, softmax_sum), workspace, stream_);
}

#else  // built without cuDNN's headers

struct Sdpa::Plan {};

bool available(std::string* why) {
  if (why) *why = "this build had no cuDNN headers (cudnn_graph.h)";
  return false;
}
std::string version() { return "none (built without cuDNN headers)"; }
size_t version_code() { return 0; }
std::string build_deviceless(const sdpa::Graph&, const std::string&, const char*, size_t*) {
  ::oomb::fail("cuDNN attention: this build had no cuDNN headers (cudnn_graph.h)");
}
std::string build_deviceless(const sdpa::Shape&, const std::string&, size_t*) {
  ::oomb::fail("cuDNN attention: this build had no cuDNN headers (cudnn_graph.h)");
}
std::string deviceprop_json() { ::oomb::fail("cuDNN attention: this build had no cuDNN headers (cudnn_graph.h)"); }
Sdpa::Sdpa(const sdpa::Shape& shape, cudaStream_t stream, int64_t, int64_t) : shape_(shape), stream_(stream) {
  ::oomb::fail("cuDNN attention: this build had no cuDNN headers (cudnn_graph.h)");
}
std::vector<EngineTry> survey(const sdpa::Graph&, const char*, const std::string&) {
  ::oomb::fail("cuDNN attention: this build had no cuDNN headers (cudnn_graph.h)");
}
Sdpa::~Sdpa() = default;
size_t Sdpa::workspace_bytes() const { return 0; }
std::string Sdpa::engines() const { return "none"; }
void Sdpa::trial(const void*, const void*, const void*, void*, float*, void*, void*, void*) {}
void Sdpa::forward(const void*, const void*, const void*, void*, float*, void*) {}
void Sdpa::backward(const void*, const void*, const void*, const void*, const void*, const float*, void*, void*,
                    void*, float*, void*) {}

#endif

}  // namespace oomb::cuda::cudnn
