// Linear layers and embeddings on the CPU: OpenBLAS sgemm, row-major, HF weight layout (out, in);
// bf16 operands are widened exactly to fp32 first.
#include <cblas.h>

#include <algorithm>

#include "backend/cpu/cpu_ops.h"

namespace oomb::cpu {

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
  const int64_t T = x.dim(0), in = x.dim(1), out = w.dim(0);
  float beta = 0.0f;
  if (b) {
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
  const int64_t T = x.dim(0), in = x.dim(1), out = w.dim(0);
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
    float* dbp = db->f();
#pragma omp parallel for if (T * out >= kParallelMin)
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t t = 0; t < T; ++t) s += dyp[t * out + o];
      dbp[o] += float(s);
    }
  }
}

// The ids' values (the CPU reads them; shapes and dtypes were checked once, op_checks.cpp).
static void check_ids(const char* op, const Tensor& ids, int64_t vocab) {
  const int32_t* p = ids.as<int32_t>();
  for (int64_t t = 0; t < ids.dim(0); ++t)
    OOMB_CHECK(p[t] >= 0 && p[t] < vocab, "{}: token id {} at position {} is outside the vocabulary (size {})", op,
               p[t], t, vocab);
}

// table: (V, d), out: (T, d)
void embedding_fwd(const Tensor& ids, const Tensor& table, Tensor& out) {
  check_ids("embedding_fwd", ids, table.dim(0));
  const int64_t T = ids.dim(0), d = table.dim(1);
  const int32_t* id = ids.as<int32_t>();
#pragma omp parallel for if (T * d >= kParallelMin)
  for (int64_t t = 0; t < T; ++t)
    std::copy_n(table.f() + int64_t(id[t]) * d, d, out.f() + t * d);
}

// Deterministic: each thread owns a range of hidden columns and walks tokens in order.
void embedding_bwd(const Tensor& ids, const Tensor& dout, Tensor& dtable, int64_t skip) {
  check_ids("embedding_bwd", ids, dtable.dim(0));
  const int64_t T = ids.dim(0), d = dtable.dim(1);
  const int32_t* id = ids.as<int32_t>();
#pragma omp parallel for if (T * d >= kParallelMin)
  for (int64_t c = 0; c < d; ++c)
    for (int64_t t = 0; t < T; ++t)
      if (id[t] != skip) dtable.f()[int64_t(id[t]) * d + c] += dout.f()[t * d + c];
}

}  // namespace oomb::cpu
