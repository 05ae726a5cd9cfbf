// Linear layers and embeddings on the CPU: OpenBLAS sgemm, row-major, HF weight layout (out, in);
// bf16 operands are widened exactly to fp32 first.
#include <cblas.h>

#include <algorithm>

#include "backend/cpu/cpu_ops.h"

namespace oomb::cpu {

void check_f32(const char* op, const char* what, const Tensor& t, int ndim) {
  OOMB_CHECK(!t.empty(), "{}: {} is empty", op, what);
  OOMB_CHECK(t.dtype == DType::F32, "{}: {} must be f32, got {}", op, what, dtype_name(t.dtype));
  OOMB_CHECK(host_addressable(t.tier), "{}: {} must be in host memory for the CPU backend", op, what);
  OOMB_CHECK(ndim < 0 || t.ndim == ndim, "{}: {} must have {} dims, got {}", op, what, ndim, t.shape_str());
}

void check_same_shape(const char* op, const char* a_name, const Tensor& a, const char* b_name, const Tensor& b) {
  bool same = a.ndim == b.ndim;
  for (int i = 0; same && i < a.ndim; ++i) same = a.shape[i] == b.shape[i];
  OOMB_CHECK(same, "{}: {} {} and {} {} must have the same shape", op, a_name, a.shape_str(), b_name,
             b.shape_str());
}

void check_matmul(const char* op, const char* what, const Tensor& t, int ndim, const char* like_name,
                  const Tensor* like) {
  OOMB_CHECK(!t.empty(), "{}: {} is empty", op, what);
  OOMB_CHECK(t.dtype == DType::F32 || t.dtype == DType::BF16, "{}: {} must be f32 or bf16, got {}", op, what,
             dtype_name(t.dtype));
  OOMB_CHECK(!like || t.dtype == like->dtype, "{}: {} ({}) and {} ({}) must share one dtype", op, what,
             dtype_name(t.dtype), like_name, dtype_name(like->dtype));
  OOMB_CHECK(host_addressable(t.tier), "{}: {} must be in host memory for the CPU backend", op, what);
  OOMB_CHECK(ndim < 0 || t.ndim == ndim, "{}: {} must have {} dims, got {}", op, what, ndim, t.shape_str());
}

const float* widened(const Tensor& t, float*& scratch) {
  if (t.dtype == DType::F32) return t.f();
  float* out = scratch;
  const uint16_t* s = t.as<uint16_t>();
  const int64_t n = t.numel();
#pragma omp parallel for if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(s[i]);
  scratch += n;
  return out;
}

int64_t widen_elems(std::initializer_list<const Tensor*> operands) {
  int64_t n = 0;
  for (const Tensor* t : operands)
    if (t->dtype == DType::BF16) n += t->numel();
  return n;
}

// x: (T, in), w: (out, in), b: (out), y: (T, out)
void linear_fwd(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, float* widen) {
  check_matmul("linear_fwd", "x", x, 2);
  check_matmul("linear_fwd", "w", w, 2, "x", &x);
  check_f32("linear_fwd", "y", y, 2);
  const int64_t T = x.dim(0), in = x.dim(1), out = w.dim(0);
  OOMB_CHECK(w.dim(1) == in && y.dim(0) == T && y.dim(1) == out, "linear_fwd: shapes x {} w {} y {} do not fit",
             x.shape_str(), w.shape_str(), y.shape_str());
  float beta = 0.0f;
  if (b) {
    check_f32("linear_fwd", "b", *b, 1);
    OOMB_CHECK(b->dim(0) == out, "linear_fwd: bias {} does not match out {}", b->shape_str(), out);
    float* yp = y.f();
    const float* bp = b->f();
#pragma omp parallel for if (T * out >= kParallelMin)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t o = 0; o < out; ++o) yp[t * out + o] = bp[o];
    beta = 1.0f;
  }
  if (T == 0) return;
  const float* xf = widened(x, widen);
  const float* wf = widened(w, widen);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(T), int(out), int(in), 1.0f, xf, int(in), wf, int(in),
              beta, y.f(), int(out));
}

// Every bf16 operand is widened (also one a null output does not read): the scratch a call takes
// depends on its shapes and dtypes only, which is what the workspace plan counts.
void linear_bwd(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, bool dx_accumulate, Tensor* dw,
                Tensor* db, float* widen) {
  check_matmul("linear_bwd", "x", x, 2);
  check_matmul("linear_bwd", "w", w, 2, "x", &x);
  check_matmul("linear_bwd", "dy", dy, 2, "x", &x);
  const int64_t T = x.dim(0), in = x.dim(1), out = w.dim(0);
  OOMB_CHECK(w.dim(1) == in && dy.dim(0) == T && dy.dim(1) == out, "linear_bwd: shapes x {} w {} dy {} do not fit",
             x.shape_str(), w.shape_str(), dy.shape_str());
  if (dx) {
    check_f32("linear_bwd", "dx", *dx, 2);
    check_same_shape("linear_bwd", "dx", *dx, "x", x);
  }
  if (dw) {
    check_f32("linear_bwd", "dw", *dw, 2);
    check_same_shape("linear_bwd", "dw", *dw, "w", w);
  }
  if (T == 0) return;
  const float* xf = widened(x, widen);
  const float* wf = widened(w, widen);
  const float* dyp = widened(dy, widen);
  if (dx)  // dx (T, in) = dy (T, out) . w (out, in)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(T), int(in), int(out), 1.0f, dyp, int(out), wf,
                int(in), dx_accumulate ? 1.0f : 0.0f, dx->f(), int(in));
  if (dw)  // dw (out, in) += dy^T (out, T) . x (T, in)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(out), int(in), int(T), 1.0f, dyp, int(out), xf, int(in),
                1.0f, dw->f(), int(in));
  if (db) {
    check_f32("linear_bwd", "db", *db, 1);
    OOMB_CHECK(db->dim(0) == out, "linear_bwd: db {} does not match out {}", db->shape_str(), out);
    float* dbp = db->f();
#pragma omp parallel for if (T * out >= kParallelMin)
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t t = 0; t < T; ++t) s += dyp[t * out + o];
      dbp[o] += float(s);
    }
  }
}

static void check_ids(const char* op, const Tensor& ids, int64_t vocab) {
  OOMB_CHECK(ids.dtype == DType::I32 && ids.ndim == 1, "{}: ids must be (T) i32, got {} {}", op,
             dtype_name(ids.dtype), ids.shape_str());
  const int32_t* p = ids.as<int32_t>();
  for (int64_t t = 0; t < ids.dim(0); ++t)
    OOMB_CHECK(p[t] >= 0 && p[t] < vocab, "{}: token id {} at position {} is outside the vocabulary (size {})", op,
               p[t], t, vocab);
}

// table: (V, d), out: (T, d)
void embedding_fwd(const Tensor& ids, const Tensor& table, Tensor& out) {
  check_f32("embedding_fwd", "table", table, 2);
  check_f32("embedding_fwd", "out", out, 2);
  check_ids("embedding_fwd", ids, table.dim(0));
  const int64_t T = ids.dim(0), d = table.dim(1);
  OOMB_CHECK(out.dim(0) == T && out.dim(1) == d, "embedding_fwd: out {} must be ({}, {})", out.shape_str(), T, d);
  const int32_t* id = ids.as<int32_t>();
#pragma omp parallel for if (T * d >= kParallelMin)
  for (int64_t t = 0; t < T; ++t)
    std::copy_n(table.f() + int64_t(id[t]) * d, d, out.f() + t * d);
}

// Deterministic: each thread owns a range of hidden columns and walks tokens in order.
void embedding_bwd(const Tensor& ids, const Tensor& dout, Tensor& dtable) {
  check_f32("embedding_bwd", "dout", dout, 2);
  check_f32("embedding_bwd", "dtable", dtable, 2);
  check_ids("embedding_bwd", ids, dtable.dim(0));
  const int64_t T = ids.dim(0), d = dtable.dim(1);
  OOMB_CHECK(dout.dim(0) == T && dout.dim(1) == d, "embedding_bwd: dout {} must be ({}, {})", dout.shape_str(), T,
             d);
  const int32_t* id = ids.as<int32_t>();
#pragma omp parallel for if (T * d >= kParallelMin)
  for (int64_t c = 0; c < d; ++c)
    for (int64_t t = 0; t < T; ++t) dtable.f()[int64_t(id[t]) * d + c] += dout.f()[t * d + c];
}

}  // namespace oomb::cpu
