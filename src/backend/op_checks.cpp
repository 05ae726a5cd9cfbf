// Every op's input checks, done once here for every backend (shapes, dtypes, and that each tensor
// is in memory the backend computes on); then the backend's do_ op. Errors start with the op's name.
// What a backend checks itself is only its own limits (grid sizes, shared memory) and, where it
// can read them, the values of ids.
#include <utility>

#include "backend/backend.h"

namespace oomb {

namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::BF16; }

// Checks for one op on one backend.
struct Check {
  const Backend& be;
  const char* op;

  // t holds data (or nothing), is in memory the backend computes on, has ndim dims (< 0: any)
  void where(const char* what, const Tensor& t, int ndim) const {
    OOMB_CHECK(!t.empty() || t.numel() == 0, "{}: {} is empty", op, what);
    OOMB_CHECK(be.computes_on(t.tier), "{}: {} is in {} memory; the {} backend computes on {} memory", op, what,
               tier_name(t.tier), be.name(), tier_name(be.tier()));
    OOMB_CHECK(ndim < 0 || t.ndim == ndim, "{}: {} must have {} dims, got {}", op, what, ndim, t.shape_str());
  }
  void tensor(const char* what, const Tensor& t, int ndim, DType dt = DType::F32) const {
    OOMB_CHECK(t.dtype == dt, "{}: {} must be {}, got {}", op, what, dtype_name(dt), dtype_name(t.dtype));
    where(what, t, ndim);
  }
  // A matmul operand: f32 or bf16, of `like`'s dtype when given (errors name both tensors).
  void matmul(const char* what, const Tensor& t, int ndim, const char* like_name = nullptr,
              const Tensor* like = nullptr) const {
    OOMB_CHECK(is_float(t.dtype), "{}: {} must be f32 or bf16, got {}", op, what, dtype_name(t.dtype));
    OOMB_CHECK(!like || t.dtype == like->dtype, "{}: {} ({}) and {} ({}) must share one dtype", op, what,
               dtype_name(t.dtype), like_name, dtype_name(like->dtype));
    where(what, t, ndim);
  }
  void same_shape(const char* a_name, const Tensor& a, const char* b_name, const Tensor& b) const {
    bool same = a.ndim == b.ndim;
    for (int i = 0; same && i < a.ndim; ++i) same = a.shape[i] == b.shape[i];
    OOMB_CHECK(same, "{}: {} {} and {} {} must have the same shape", op, a_name, a.shape_str(), b_name,
               b.shape_str());
  }
  // an f32 or bf16 tensor of `like`'s shape (an output that may be rounded to bf16)
  void float_like(const char* what, const Tensor& t, const char* like_name, const Tensor& like) const {
    matmul(what, t, like.ndim);
    same_shape(what, t, like_name, like);
  }
  // an fp32 tensor of `like`'s shape
  void f32_like(const char* what, const Tensor& t, const char* like_name, const Tensor& like) const {
    tensor(what, t, like.ndim);
    same_shape(what, t, like_name, like);
  }
  void numel(const char* what, const Tensor& t, const char* like_name, const Tensor& like) const {
    OOMB_CHECK(t.numel() == like.numel(), "{}: {} {} and {} {} differ in size", op, what, t.shape_str(), like_name,
               like.shape_str());
  }
  // an elementwise op's input a and output b: f32 or bf16 each, of one size (any shapes)
  void float_pair(const char* a_name, const Tensor& a, const char* b_name, const Tensor& b) const {
    OOMB_CHECK(is_float(a.dtype) && is_float(b.dtype), "{}: {} and {} must be f32 or bf16, got {} and {}", op, a_name,
               b_name, dtype_name(a.dtype), dtype_name(b.dtype));
    where(a_name, a, -1);
    where(b_name, b, -1);
    numel(a_name, a, b_name, b);
  }

  // The KV blocks of attention against q (T, H, D): every block (len, G, D) alike.
  void blocks(const Tensor& q, std::span<const KVBlock> blocks, bool backward) const {
    tensor("q", q, 3);
    OOMB_CHECK(!blocks.empty() || q.dim(0) == 0, "{}: no KV blocks", op);
    int64_t G = 0;
    for (size_t b = 0; b < blocks.size(); ++b) {
      const KVBlock& kb = blocks[b];
      OOMB_CHECK(!kb.k.empty() && is_float(kb.k.dtype) && kb.k.ndim == 3,
                 "{}: block {} k must be a (len, G, D) tensor of f32 or bf16, got {} {}", op, b,
                 dtype_name(kb.k.dtype), kb.k.shape_str());
      where("block k", kb.k, 3);
      where("block v", kb.v, 3);
      same_shape("block v", kb.v, "block k", kb.k);
      OOMB_CHECK(kb.v.dtype == kb.k.dtype, "{}: block {} v is {} but k is {}", op, b, dtype_name(kb.v.dtype),
                 dtype_name(kb.k.dtype));
      if (b == 0) G = kb.k.dim(1);
      OOMB_CHECK(kb.k.dim(1) == G && kb.k.dim(2) == q.dim(2), "{}: block {} k {} does not fit q {} (G={}, D={})", op,
                 b, kb.k.shape_str(), q.shape_str(), G, q.dim(2));
      if (!backward) continue;
      same_shape("block dk", kb.dk, "block k", kb.k);
      same_shape("block dv", kb.dv, "block k", kb.k);
      OOMB_CHECK(is_float(kb.dk.dtype) && kb.dv.dtype == kb.dk.dtype,
                 "{}: block {} gradients must be f32 or bf16, got {} and {}", op, b, dtype_name(kb.dk.dtype),
                 dtype_name(kb.dv.dtype));
      where("block dk", kb.dk, 3);
      where("block dv", kb.dv, 3);
    }
    if (G > 0) OOMB_CHECK(q.dim(1) % G == 0, "{}: query heads {} not a multiple of kv heads {}", op, q.dim(1), G);
  }
  // Sparse scores (tiles, S, pages) f32 of q (T, H, D) in tiles of `tile` rows against G kv heads.
  void scores(const Tensor& q, int64_t tile, int64_t G, int64_t pages, const Tensor& scores) const {
    tensor("scores", scores, 3);
    OOMB_CHECK(tile > 0, "{}: tile must be positive, got {}", op, tile);
    const int64_t tiles = (q.dim(0) + tile - 1) / tile, S = scores.dim(1);
    OOMB_CHECK(scores.dim(0) == tiles && (S == G || S == 1) && scores.dim(2) == pages,
               "{}: scores {} must be ({}, {} or 1, {})", op, scores.shape_str(), tiles, G, pages);
  }
  // Page metadata meta (pages, [2,] G, D) bf16 for keys k (T, G, D) of tokens [t0, t0 + T).
  void pages_of(const Tensor& k, int64_t t0, int64_t page_size, const char* what, const Tensor& meta) const {
    OOMB_CHECK(page_size > 0 && t0 >= 0, "{}: page size {} and t0 {} must be positive", op, page_size, t0);
    OOMB_CHECK(k.dim(0) == 0 || (t0 + k.dim(0) - 1) / page_size < meta.dim(0),
               "{}: tokens [{}, {}) reach past the {} pages of {}", op, t0, t0 + k.dim(0), meta.dim(0), what);
  }
};

}  // namespace

void Backend::linear_fwd(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) {
  const Check c{*this, "linear_fwd"};
  c.matmul("x", x, 2);
  c.matmul("w", w, 2, "x", &x);
  c.tensor("y", y, 2);
  const int64_t T = x.dim(0), in = x.dim(1), out = w.dim(0);
  OOMB_CHECK(w.dim(1) == in && y.dim(0) == T && y.dim(1) == out, "linear_fwd: shapes x {} w {} y {} do not fit",
             x.shape_str(), w.shape_str(), y.shape_str());
  if (b) {
    c.tensor("b", *b, 1);
    OOMB_CHECK(b->dim(0) == out, "linear_fwd: bias {} does not match out {}", b->shape_str(), out);
  }
  const OpScope op_scope(*this);
  do_linear_fwd(x, w, b, y);
}

void Backend::linear_bwd(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, bool acc, Tensor* dw,
                         Tensor* db) {
  const Check c{*this, "linear_bwd"};
  c.matmul("x", x, 2);
  c.matmul("w", w, 2, "x", &x);
  c.matmul("dy", dy, 2, "x", &x);
  const int64_t T = x.dim(0), in = x.dim(1), out = w.dim(0);
  OOMB_CHECK(w.dim(1) == in && dy.dim(0) == T && dy.dim(1) == out, "linear_bwd: shapes x {} w {} dy {} do not fit",
             x.shape_str(), w.shape_str(), dy.shape_str());
  if (dx) c.f32_like("dx", *dx, "x", x);
  if (dw) c.f32_like("dw", *dw, "w", w);
  if (db) {
    c.tensor("db", *db, 1);
    OOMB_CHECK(db->dim(0) == out, "linear_bwd: db {} does not match out {}", db->shape_str(), out);
  }
  const OpScope op_scope(*this);
  do_linear_bwd(x, w, dy, dx, acc, dw, db);
}

void Backend::embedding_fwd(const Tensor& ids, const Tensor& table, Tensor& out) {
  const Check c{*this, "embedding_fwd"};
  c.tensor("ids", ids, 1, DType::I32);
  c.tensor("table", table, 2);
  c.tensor("out", out, 2);
  OOMB_CHECK(out.dim(0) == ids.dim(0) && out.dim(1) == table.dim(1), "embedding_fwd: out {} must be ({}, {})",
             out.shape_str(), ids.dim(0), table.dim(1));
  const OpScope op_scope(*this);
  do_embedding_fwd(ids, table, out);
}

void Backend::embedding_bwd(const Tensor& ids, const Tensor& dout, Tensor& dtable, int64_t skip) {
  const Check c{*this, "embedding_bwd"};
  c.tensor("ids", ids, 1, DType::I32);
  c.tensor("dout", dout, 2);
  c.tensor("dtable", dtable, 2);
  OOMB_CHECK(dout.dim(0) == ids.dim(0) && dout.dim(1) == dtable.dim(1), "embedding_bwd: dout {} must be ({}, {})",
             dout.shape_str(), ids.dim(0), dtable.dim(1));
  OOMB_CHECK(skip >= -1 && skip < dtable.dim(0), "embedding_bwd: skip {} must be -1 or a row of dtable ({} rows)", skip,
             dtable.dim(0));
  const OpScope op_scope(*this);
  do_embedding_bwd(ids, dout, dtable, skip);
}

void Backend::rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd, float w_offset) {
  const Check c{*this, "rmsnorm_fwd"};
  c.tensor("x", x, 2);
  c.tensor("w", w, 1);
  c.float_like("y", y, "x", x);
  c.tensor("rstd", rstd, 1);
  OOMB_CHECK(w.dim(0) == x.dim(1) && rstd.dim(0) == x.dim(0), "rmsnorm_fwd: w {} / rstd {} do not fit x {}",
             w.shape_str(), rstd.shape_str(), x.shape_str());
  const OpScope op_scope(*this);
  do_rmsnorm_fwd(x, w, eps, y, rstd, w_offset);
}

void Backend::rmsnorm_bwd(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx, bool acc,
                          Tensor& dw, float w_offset) {
  const Check c{*this, "rmsnorm_bwd"};
  c.tensor("x", x, 2);
  c.tensor("w", w, 1);
  c.tensor("rstd", rstd, 1);
  OOMB_CHECK(w.dim(0) == x.dim(1) && rstd.dim(0) == x.dim(0), "rmsnorm_bwd: w {} / rstd {} do not fit x {}",
             w.shape_str(), rstd.shape_str(), x.shape_str());
  c.f32_like("dy", dy, "x", x);
  c.f32_like("dx", dx, "x", x);
  c.f32_like("dw", dw, "w", w);
  const OpScope op_scope(*this);
  do_rmsnorm_bwd(x, w, rstd, dy, dx, acc, dw, w_offset);
}

namespace {
void check_rope(const Check& c, const Tensor& x, const Tensor& pos, const RopeTable& r) {
  c.tensor("x", x, 3);
  c.tensor("pos", pos, 1, DType::I32);
  OOMB_CHECK(pos.dim(0) == x.dim(0), "{}: pos must be ({}) i32, got {}", c.op, x.dim(0), pos.shape_str());
  OOMB_CHECK(r.inv_freq != nullptr, "{}: no inv_freq table", c.op);
  OOMB_CHECK(r.slot == 0 || r.slot == 1, "{}: RoPE table slot {} (0: the configured RoPE, 1: the plain one)", c.op,
             r.slot);
  const int64_t R = r.dims(x.dim(2));
  OOMB_CHECK(R % 2 == 0 && R > 0 && R <= x.dim(2), "{}: rotary dims {} must be even, positive and at most the head "
             "dim {}", c.op, R, x.dim(2));
}
}  // namespace

void Backend::rope_fwd(Tensor& x, const Tensor& pos, const RopeTable& r) {
  check_rope(Check{*this, "rope_fwd"}, x, pos, r);
  const OpScope op_scope(*this);
  do_rope_fwd(x, pos, r);
}

void Backend::rope_bwd(Tensor& dx, const Tensor& pos, const RopeTable& r) {
  check_rope(Check{*this, "rope_bwd"}, dx, pos, r);
  const OpScope op_scope(*this);
  do_rope_bwd(dx, pos, r);
}

void Backend::glu_fwd(const Tensor& gate, const Tensor& up, Tensor& out, Act act) {
  const Check c{*this, "glu_fwd"};
  c.tensor("gate", gate, -1);
  c.f32_like("up", up, "gate", gate);
  c.float_like("out", out, "gate", gate);
  const OpScope op_scope(*this);
  do_glu_fwd(gate, up, out, act);
}

void Backend::glu_bwd(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup, Act act) {
  const Check c{*this, "glu_bwd"};
  c.tensor("gate", gate, -1);
  c.f32_like("up", up, "gate", gate);
  c.f32_like("dout", dout, "gate", gate);
  c.float_like("dgate", dgate, "gate", gate);
  c.float_like("dup", dup, "gate", gate);
  OOMB_CHECK(dup.dtype == dgate.dtype, "glu_bwd: dup is {} but dgate is {}", dtype_name(dup.dtype),
             dtype_name(dgate.dtype));
  const OpScope op_scope(*this);
  do_glu_bwd(gate, up, dout, dgate, dup, act);
}

void Backend::attention_fwd(const Tensor& q, std::span<const KVBlock> blocks, const AttnArgs& a, Tensor& o,
                            Tensor& lse) {
  const Check c{*this, "attention_fwd"};
  c.blocks(q, blocks, false);
  c.f32_like("o", o, "q", q);
  c.tensor("lse", lse, 2);
  OOMB_CHECK(lse.dim(0) == q.dim(0) && lse.dim(1) == q.dim(1), "attention_fwd: lse {} must be ({}, {})",
             lse.shape_str(), q.dim(0), q.dim(1));
  if (!a.first || !a.last) c.f32_like("run_sum", a.run_sum, "lse", lse);
  const OpScope op_scope(*this);
  do_attention_fwd(q, blocks, a, o, lse);
}

void Backend::attention_bwd(const Tensor& q, const Tensor& o, const Tensor& lse, const Tensor& dout,
                            std::span<const KVBlock> blocks, const AttnArgs& a, Tensor& dq) {
  const Check c{*this, "attention_bwd"};
  c.blocks(q, blocks, true);
  c.f32_like("o", o, "q", q);
  c.f32_like("dout", dout, "q", q);
  c.f32_like("dq", dq, "q", q);
  c.tensor("lse", lse, 2);
  OOMB_CHECK(lse.dim(0) == q.dim(0) && lse.dim(1) == q.dim(1), "attention_bwd: lse {} must be ({}, {})",
             lse.shape_str(), q.dim(0), q.dim(1));
  if (!a.q16.empty() || !a.dout16.empty()) {  // bf16 copies: both, q's shape
    c.tensor("q16", a.q16, q.ndim, DType::BF16);
    c.same_shape("q16", a.q16, "q", q);
    c.tensor("dout16", a.dout16, q.ndim, DType::BF16);
    c.same_shape("dout16", a.dout16, "q", q);
  }
  const OpScope op_scope(*this);
  do_attention_bwd(q, o, lse, dout, blocks, a, dq);
}

void Backend::page_key_means(const Tensor& k, int64_t t0, int64_t page_size, Tensor& means) {
  const Check c{*this, "page_key_means"};
  c.tensor("k", k, 3);
  c.tensor("means", means, 3, DType::BF16);
  OOMB_CHECK(means.dim(1) == k.dim(1) && means.dim(2) == k.dim(2), "page_key_means: means {} do not fit k {}",
             means.shape_str(), k.shape_str());
  c.pages_of(k, t0, page_size, "means", means);
  const OpScope op_scope(*this);
  do_page_key_means(k, t0, page_size, means);
}

void Backend::page_scores(const Tensor& q, int64_t tile, const Tensor& means, Tensor& scores) {
  const Check c{*this, "page_scores"};
  c.tensor("q", q, 3);
  c.tensor("means", means, 3, DType::BF16);
  OOMB_CHECK(means.dim(1) > 0 && q.dim(1) % means.dim(1) == 0 && means.dim(2) == q.dim(2),
             "page_scores: means {} do not fit q {}", means.shape_str(), q.shape_str());
  c.scores(q, tile, means.dim(1), means.dim(0), scores);
  const OpScope op_scope(*this);
  do_page_scores(q, tile, means, scores);
}

void Backend::page_key_minmax(const Tensor& k, int64_t t0, int64_t page_size, Tensor& minmax) {
  const Check c{*this, "page_key_minmax"};
  c.tensor("k", k, 3);
  c.tensor("minmax", minmax, 4, DType::BF16);
  OOMB_CHECK(minmax.dim(1) == 2 && minmax.dim(2) == k.dim(1) && minmax.dim(3) == k.dim(2),
             "page_key_minmax: minmax {} does not fit k {}", minmax.shape_str(), k.shape_str());
  c.pages_of(k, t0, page_size, "minmax", minmax);
  const OpScope op_scope(*this);
  do_page_key_minmax(k, t0, page_size, minmax);
}

void Backend::page_quest_scores(const Tensor& q, int64_t tile, const Tensor& minmax, Tensor& scores) {
  const Check c{*this, "page_quest_scores"};
  c.tensor("q", q, 3);
  c.tensor("minmax", minmax, 4, DType::BF16);
  OOMB_CHECK(minmax.dim(1) == 2 && minmax.dim(2) > 0 && q.dim(1) % minmax.dim(2) == 0 && minmax.dim(3) == q.dim(2),
             "page_quest_scores: minmax {} does not fit q {}", minmax.shape_str(), q.shape_str());
  c.scores(q, tile, minmax.dim(2), minmax.dim(0), scores);
  const OpScope op_scope(*this);
  do_page_quest_scores(q, tile, minmax, scores);
}

void Backend::page_topk(const Tensor& scores, int64_t first, Tensor& chosen) {
  const Check c{*this, "page_topk"};
  c.tensor("scores", scores, 3);
  c.tensor("chosen", chosen, 3, DType::I32);
  OOMB_CHECK(chosen.dim(0) == scores.dim(0) && chosen.dim(1) == scores.dim(1) && chosen.dim(2) >= 1,
             "page_topk: chosen {} must be ({}, {}, K >= 1)", chosen.shape_str(), scores.dim(0), scores.dim(1));
  OOMB_CHECK(first >= 0 && first <= scores.dim(2) && scores.dim(2) <= INT32_MAX,
             "page_topk: first page {} outside the {} pages of scores", first, scores.dim(2));
  const OpScope op_scope(*this);
  do_page_topk(scores, first, chosen);
}

namespace {
// h (T, d) and a vocabulary tile w (Vt, d) of one dtype, targets (T) i32, stats (T, 4) f64
void check_xent(const Check& c, const Tensor& h, const Tensor& w, int64_t v0, const Tensor& targets,
                const Tensor& stats) {
  c.matmul("h", h, 2);
  c.matmul("w", w, 2, "h", &h);
  c.tensor("targets", targets, 1, DType::I32);
  c.tensor("stats", stats, 2, DType::F64);
  const int64_t T = h.dim(0);
  OOMB_CHECK(w.dim(1) == h.dim(1) && targets.dim(0) == T && stats.dim(0) == T && stats.dim(1) == 4,
             "{}: w {} / targets {} / stats {} do not fit h {}", c.op, w.shape_str(), targets.shape_str(),
             stats.shape_str(), h.shape_str());
  OOMB_CHECK(v0 >= 0, "{}: the tile's first row v0 {} is negative", c.op, v0);
}
}  // namespace

void Backend::lm_head_xent_stats(const Tensor& h, const Tensor& w, int64_t v0, const Tensor& targets, Tensor& stats) {
  check_xent(Check{*this, "lm_head_xent_stats"}, h, w, v0, targets, stats);
  const OpScope op_scope(*this);
  do_lm_head_xent_stats(h, w, v0, targets, stats);
}

void Backend::lm_head_xent_loss(const Tensor& stats, const Tensor& targets, Tensor& sums) {
  const Check c{*this, "lm_head_xent_loss"};
  c.tensor("stats", stats, 2, DType::F64);
  c.tensor("targets", targets, 1, DType::I32);
  c.tensor("sums", sums, 1, DType::F64);
  OOMB_CHECK(stats.dim(0) == targets.dim(0) && stats.dim(1) == 4 && sums.dim(0) == 2,
             "lm_head_xent_loss: stats {} / sums {} must be ({}, 4) / (2)", stats.shape_str(), sums.shape_str(),
             targets.dim(0));
  const OpScope op_scope(*this);
  do_lm_head_xent_loss(stats, targets, sums);
}

void Backend::lm_head_xent_grad(const Tensor& h, const Tensor& w, int64_t v0, const Tensor& targets,
                                const Tensor& stats, float scale, Tensor* dh, bool dh_accumulate, Tensor* dw) {
  const Check c{*this, "lm_head_xent_grad"};
  check_xent(c, h, w, v0, targets, stats);
  if (dh) c.f32_like("dh", *dh, "h", h);
  if (dw) c.f32_like("dw", *dw, "w", w);
  const OpScope op_scope(*this);
  do_lm_head_xent_grad(h, w, v0, targets, stats, scale, dh, dh_accumulate, dw);
}

void Backend::cast(const Tensor& src, Tensor& dst) {
  Check{*this, "cast"}.float_pair("src", src, "dst", dst);
  const OpScope op_scope(*this);
  do_cast(src, dst);
}

namespace {

void check_pieces(const Check& c, const Tensor& x, std::span<const Backend::RowPiece> pieces, DType dtype,
                  bool to_pieces) {
  OOMB_CHECK(is_float(x.dtype) && is_float(dtype), "{}: x and the pieces must be f32 or bf16, got {} and {}", c.op,
             dtype_name(x.dtype), dtype_name(dtype));
  c.where("x", x, -1);
  OOMB_CHECK(x.ndim >= 1, "{}: x must have rows, got {}", c.op, x.shape_str());
  int64_t rows = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    OOMB_CHECK(pieces[i].rows >= 0, "{}: piece {} has {} rows", c.op, i, pieces[i].rows);
    OOMB_CHECK(pieces[i].data != nullptr || !to_pieces || pieces[i].rows == 0, "{}: piece {} has no data", c.op, i);
    rows += pieces[i].rows;
  }
  OOMB_CHECK(rows == x.dim(0), "{}: the pieces hold {} rows, x {}", c.op, rows, x.shape_str());
}

}  // namespace

void Backend::cast_to_pieces(const Tensor& x, std::span<const RowPiece> pieces, DType dtype) {
  const Check c{*this, "cast_to_pieces"};
  check_pieces(c, x, pieces, dtype, true);
  const OpScope op_scope(*this);
  do_cast_pieces(x, pieces, dtype, true);
}

void Backend::cast_from_pieces(std::span<const RowPiece> pieces, DType dtype, Tensor& x) {
  const Check c{*this, "cast_from_pieces"};
  check_pieces(c, x, pieces, dtype, false);
  const OpScope op_scope(*this);
  do_cast_pieces(x, pieces, dtype, false);
}

void Backend::round_bf16(Tensor& x) {
  Check{*this, "round_bf16"}.tensor("x", x, -1);
  const OpScope op_scope(*this);
  do_round_bf16(x);
}

void Backend::add(Tensor& y, const Tensor& x) {
  const Check c{*this, "add"};
  c.tensor("y", y, -1);
  OOMB_CHECK(is_float(x.dtype), "add: x must be f32 or bf16, got {}", dtype_name(x.dtype));
  c.where("x", x, -1);
  c.numel("x", x, "y", y);
  const OpScope op_scope(*this);
  do_add(y, x);
}

void Backend::zero(Tensor& y) {
  Check{*this, "zero"}.where("y", y, -1);
  const OpScope op_scope(*this);
  do_zero(y);
}

void Backend::scale(Tensor& y, float s) {
  Check{*this, "scale"}.tensor("y", y, -1);
  const OpScope op_scope(*this);
  do_scale(y, s, y);
}

void Backend::scale(const Tensor& x, float s, Tensor& y) {
  Check{*this, "scale"}.float_pair("x", x, "y", y);
  OOMB_CHECK(x.data != y.data || x.dtype == y.dtype, "scale: in place, x and y must share one dtype, got {} and {}",
             dtype_name(x.dtype), dtype_name(y.dtype));
  const OpScope op_scope(*this);
  do_scale(x, s, y);
}

void Backend::dropout(const Tensor& x, const DropoutMask& m, Tensor& y, bool accumulate) {
  const Check c{*this, "dropout"};
  c.matmul("x", x, 2);
  c.float_like("y", y, "x", x);
  OOMB_CHECK(!accumulate || y.dtype == DType::F32, "dropout: accumulating into a {} y (f32 only)", dtype_name(y.dtype));
  OOMB_CHECK(m.row0 >= 0 && m.scale >= 1.0f, "dropout: row0 {} and scale {} (p in [0, 1))", m.row0, m.scale);
  const OpScope op_scope(*this);
  do_dropout(x, m, y, accumulate);
}

double Backend::sum_squares(const Tensor& x) {
  Check{*this, "sum_squares"}.tensor("x", x, -1);
  const OpScope op_scope(*this);
  return do_sum_squares(x);
}

void Backend::adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamW& a) {
  const Check c{*this, "adamw_step"};
  for (const auto& [name, t] :
       {std::pair<const char*, const Tensor*>{"param", &p}, {"grad", &g}, {"m", &m}, {"v", &v}}) {
    c.tensor(name, *t, -1);
    c.numel(name, *t, "param", p);
  }
  const OpScope op_scope(*this);
  do_adamw_step(p, g, m, v, a);
}

void Backend::sgd_step(Tensor& p, const Tensor& g, float lr) {
  const Check c{*this, "sgd_step"};
  c.tensor("param", p, -1);
  c.tensor("grad", g, -1);
  c.numel("grad", g, "param", p);
  const OpScope op_scope(*this);
  do_sgd_step(p, g, lr);
}

}  // namespace oomb
