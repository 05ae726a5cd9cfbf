// Bad calls of every op, shared by the backends' tests (test_op_checks.cpp: cpu and sim;
// test_cuda_ops.cpp: cuda). Every backend must refuse each with the message given here: the
// checks are done once, for all of them, in Backend (src/backend/op_checks.cpp).
#pragma once
#include <algorithm>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace oomb::testing {

// Tensors in the backend's own memory, alive as long as this is.
struct OpMemory {
  Backend& be;
  std::deque<Buffer> bufs;
  Tensor operator()(DType dt, std::initializer_list<int64_t> dims) {
    Tensor t(nullptr, dt, dims, be.tier());
    bufs.emplace_back(be.tier(), Tag::Workspace, std::max<size_t>(t.bytes(), 16));
    t.data = bufs.back().data();
    return t;
  }
};

struct BadCall {
  std::string message;  // what the error says, whole
  std::function<void(Backend&)> call;
};

inline std::vector<BadCall> bad_calls() {
  using D = DType;
  std::vector<BadCall> c;
  auto add = [&](std::string m, std::function<void(OpMemory&)> f) {
    c.push_back({std::move(m), [f](Backend& be) {
                   OpMemory t{be, {}};
                   f(t);
                 }});
  };
  add("linear_fwd: shapes x (2, 3) w (4, 5) y (2, 4) do not fit", [](OpMemory& t) {
    Tensor y = t(D::F32, {2, 4});
    t.be.linear_fwd(t(D::F32, {2, 3}), t(D::F32, {4, 5}), nullptr, y);
  });
  add("linear_fwd: w (f32) and x (bf16) must share one dtype", [](OpMemory& t) {
    Tensor y = t(D::F32, {2, 4});
    t.be.linear_fwd(t(D::BF16, {2, 3}), t(D::F32, {4, 3}), nullptr, y);
  });
  add("linear_fwd: bias (5) does not match out 4", [](OpMemory& t) {
    Tensor y = t(D::F32, {2, 4}), b = t(D::F32, {5});
    t.be.linear_fwd(t(D::F32, {2, 3}), t(D::F32, {4, 3}), &b, y);
  });
  add("linear_bwd: dx (3, 2) and x (2, 3) must have the same shape", [](OpMemory& t) {
    Tensor dx = t(D::F32, {3, 2});
    t.be.linear_bwd(t(D::F32, {2, 3}), t(D::F32, {4, 3}), t(D::F32, {2, 4}), &dx, false, nullptr, nullptr);
  });
  add("linear_bwd: dw must be f32, got bf16", [](OpMemory& t) {
    Tensor dw = t(D::BF16, {4, 3});
    t.be.linear_bwd(t(D::BF16, {2, 3}), t(D::BF16, {4, 3}), t(D::BF16, {2, 4}), nullptr, false, &dw, nullptr);
  });
  add("dropout: y (3, 2) and x (2, 3) must have the same shape", [](OpMemory& t) {
    Tensor y = t(D::F32, {3, 2});
    t.be.dropout(t(D::F32, {2, 3}), dropout_mask(1, 0, 0.5), y, false);
  });
  add("dropout: accumulating into a bf16 y (f32 only)", [](OpMemory& t) {
    Tensor y = t(D::BF16, {2, 3});
    t.be.dropout(t(D::F32, {2, 3}), dropout_mask(1, 0, 0.5), y, true);
  });
  add("dropout: x must be f32 or bf16, got i32", [](OpMemory& t) {
    Tensor y = t(D::F32, {2, 3});
    t.be.dropout(t(D::I32, {2, 3}), dropout_mask(1, 0, 0.5), y, false);
  });
  add("embedding_fwd: ids must be i32, got f32", [](OpMemory& t) {
    Tensor out = t(D::F32, {2, 4});
    t.be.embedding_fwd(t(D::F32, {2}), t(D::F32, {3, 4}), out);
  });
  add("embedding_bwd: dout (2, 5) must be (2, 4)", [](OpMemory& t) {
    Tensor dtable = t(D::F32, {3, 4});
    t.be.embedding_bwd(t(D::I32, {2}), t(D::F32, {2, 5}), dtable);
  });
  add("rmsnorm_fwd: y must be f32 or bf16, got i32", [](OpMemory& t) {
    Tensor y = t(D::I32, {2, 3}), rstd = t(D::F32, {2});
    t.be.rmsnorm_fwd(t(D::F32, {2, 3}), t(D::F32, {3}), 1e-6f, y, rstd);
  });
  add("rmsnorm_bwd: w (3) / rstd (5) do not fit x (2, 3)", [](OpMemory& t) {
    Tensor dx = t(D::F32, {2, 3}), dw = t(D::F32, {3});
    t.be.rmsnorm_bwd(t(D::F32, {2, 3}), t(D::F32, {3}), t(D::F32, {5}), t(D::F32, {2, 3}), dx, false, dw);
  });
  add("rope_fwd: rotary dims 3 must be even, positive and at most the head dim 3", [](OpMemory& t) {
    const float inv[2] = {1.0f, 0.5f};
    Tensor x = t(D::F32, {2, 1, 3});
    t.be.rope_fwd(x, t(D::I32, {2}), RopeTable{inv, 1.0f});
  });
  add("rope_bwd: rotary dims 6 must be even, positive and at most the head dim 4", [](OpMemory& t) {
    const float inv[3] = {1.0f, 0.5f, 0.25f};
    Tensor x = t(D::F32, {2, 1, 4});
    t.be.rope_bwd(x, t(D::I32, {2}), RopeTable{inv, 1.0f, 6});
  });
  add("rope_fwd: RoPE table slot 2 (0: the configured RoPE, 1: the plain one)", [](OpMemory& t) {
    const float inv[2] = {1.0f, 0.5f};
    Tensor x = t(D::F32, {2, 1, 4});
    t.be.rope_fwd(x, t(D::I32, {2}), RopeTable{inv, 1.0f, 0, 2});
  });
  add("rope_bwd: pos must be (2) i32, got (3)", [](OpMemory& t) {
    const float inv[2] = {1.0f, 0.5f};
    Tensor x = t(D::F32, {2, 1, 4});
    t.be.rope_bwd(x, t(D::I32, {3}), RopeTable{inv, 1.0f});
  });
  add("glu_bwd: dup (2, 4) and gate (2, 3) must have the same shape", [](OpMemory& t) {
    Tensor g = t(D::F32, {2, 3}), dg = t(D::F32, {2, 3}), du = t(D::F32, {2, 4});
    t.be.glu_bwd(g, g, g, dg, du);
  });
  add("glu_bwd: dup is f32 but dgate is bf16", [](OpMemory& t) {
    Tensor g = t(D::F32, {2, 3}), dg = t(D::BF16, {2, 3}), du = t(D::F32, {2, 3});
    t.be.glu_bwd(g, g, g, dg, du);
  });
  add("glu_fwd: up must be f32, got bf16", [](OpMemory& t) {
    Tensor g = t(D::F32, {2, 3}), out = t(D::BF16, {2, 3});
    t.be.glu_fwd(g, t(D::BF16, {2, 3}), out);
  });
  add("attention_fwd: query heads 3 not a multiple of kv heads 2", [](OpMemory& t) {
    Tensor q = t(D::F32, {2, 3, 4}), o = t(D::F32, {2, 3, 4}), lse = t(D::F32, {2, 3});
    const KVBlock b{t(D::F32, {2, 2, 4}), t(D::F32, {2, 2, 4})};
    t.be.attention_fwd(q, {&b, 1}, AttnArgs{}, o, lse);
  });
  add("attention_fwd: block 1 k (2, 1, 8) does not fit q (2, 2, 4) (G=1, D=4)", [](OpMemory& t) {
    Tensor q = t(D::F32, {2, 2, 4}), o = t(D::F32, {2, 2, 4}), lse = t(D::F32, {2, 2});
    const KVBlock b[2] = {{t(D::F32, {2, 1, 4}), t(D::F32, {2, 1, 4})}, {t(D::F32, {2, 1, 8}), t(D::F32, {2, 1, 8})}};
    t.be.attention_fwd(q, b, AttnArgs{}, o, lse);
  });
  add("attention_bwd: block 0 gradients must be f32 or bf16, got f32 and bf16", [](OpMemory& t) {
    Tensor q = t(D::F32, {2, 2, 4}), dq = t(D::F32, {2, 2, 4});
    KVBlock b{t(D::F32, {2, 1, 4}), t(D::F32, {2, 1, 4})};
    b.dk = t(D::F32, {2, 1, 4}), b.dv = t(D::BF16, {2, 1, 4});
    t.be.attention_bwd(q, q, t(D::F32, {2, 2}), q, {&b, 1}, AttnArgs{}, dq);
  });
  add("page_key_means: tokens [6, 9) reach past the 2 pages of means", [](OpMemory& t) {
    Tensor means = t(D::BF16, {2, 1, 4});
    t.be.page_key_means(t(D::F32, {3, 1, 4}), 6, 4, means);
  });
  add("page_scores: scores (1, 1, 2) must be (2, 1 or 1, 3)", [](OpMemory& t) {
    Tensor scores = t(D::F32, {1, 1, 2});
    t.be.page_scores(t(D::F32, {4, 2, 4}), 2, t(D::BF16, {3, 1, 4}), scores);
  });
  add("page_quest_scores: minmax (3, 2, 1, 8) does not fit q (4, 2, 4)", [](OpMemory& t) {
    Tensor scores = t(D::F32, {2, 1, 3});
    t.be.page_quest_scores(t(D::F32, {4, 2, 4}), 2, t(D::BF16, {3, 2, 1, 8}), scores);
  });
  add("page_topk: first page 9 outside the 8 pages of scores", [](OpMemory& t) {
    Tensor chosen = t(D::I32, {2, 1, 4});
    t.be.page_topk(t(D::F32, {2, 1, 8}), 9, chosen);
  });
  add("lm_head_xent_stats: w (5, 3) / targets (3) / stats (2, 4) do not fit h (2, 3)", [](OpMemory& t) {
    Tensor stats = t(D::F64, {2, 4});
    t.be.lm_head_xent_stats(t(D::F32, {2, 3}), t(D::F32, {5, 3}), 0, t(D::I32, {3}), stats);
  });
  add("lm_head_xent_stats: the tile's first row v0 -5 is negative", [](OpMemory& t) {
    Tensor stats = t(D::F64, {2, 4});
    t.be.lm_head_xent_stats(t(D::F32, {2, 3}), t(D::F32, {5, 3}), -5, t(D::I32, {2}), stats);
  });
  add("lm_head_xent_loss: stats (2, 3) / sums (2) must be (2, 4) / (2)", [](OpMemory& t) {
    Tensor sums = t(D::F64, {2});
    t.be.lm_head_xent_loss(t(D::F64, {2, 3}), t(D::I32, {2}), sums);
  });
  add("lm_head_xent_grad: dw (5, 3) and w (4, 3) must have the same shape", [](OpMemory& t) {
    Tensor dw = t(D::F32, {5, 3});
    t.be.lm_head_xent_grad(t(D::F32, {2, 3}), t(D::F32, {4, 3}), 4, t(D::I32, {2}), t(D::F64, {2, 4}), 1.0f, nullptr,
                           false, &dw);
  });
  add("cast: src (4) and dst (3) differ in size", [](OpMemory& t) {
    Tensor dst = t(D::BF16, {3});
    t.be.cast(t(D::F32, {4}), dst);
  });
  add("cast_to_pieces: the pieces hold 3 rows, x (4, 2)", [](OpMemory& t) {
    const Tensor p = t(D::BF16, {3, 2});
    const Backend::RowPiece pieces[] = {{p.data, 1}, {p.as<uint16_t>() + 2, 2}};
    t.be.cast_to_pieces(t(D::F32, {4, 2}), pieces, D::BF16);
  });
  add("cast_to_pieces: piece 1 has no data", [](OpMemory& t) {
    const Tensor p = t(D::BF16, {4, 2});
    const Backend::RowPiece pieces[] = {{p.data, 2}, {nullptr, 2}};
    t.be.cast_to_pieces(t(D::F32, {4, 2}), pieces, D::BF16);
  });
  add("cast_from_pieces: x and the pieces must be f32 or bf16, got f32 and i32", [](OpMemory& t) {
    const Tensor p = t(D::I32, {4, 2});
    Tensor x = t(D::F32, {4, 2});
    const Backend::RowPiece pieces[] = {{p.data, 4}};
    t.be.cast_from_pieces(pieces, D::I32, x);
  });
  add("cast_from_pieces: piece 0 has -1 rows", [](OpMemory& t) {
    Tensor x = t(D::F32, {4, 2});
    const Backend::RowPiece pieces[] = {{nullptr, -1}, {nullptr, 5}};
    t.be.cast_from_pieces(pieces, D::BF16, x);
  });
  add("scale: x and y must be f32 or bf16, got i32 and f32", [](OpMemory& t) {
    Tensor y = t(D::F32, {4});
    t.be.scale(t(D::I32, {4}), 2.0f, y);
  });
  add("scale: x (4) and y (3) differ in size", [](OpMemory& t) {
    Tensor y = t(D::BF16, {3});
    t.be.scale(t(D::F32, {4}), 2.0f, y);
  });
  add("scale: in place, x and y must share one dtype, got f32 and bf16", [](OpMemory& t) {  // (it would read what it wrote)
    const Tensor x = t(D::F32, {4});
    Tensor y(x.data, D::BF16, {4}, x.tier);
    t.be.scale(x, 2.0f, y);
  });
  add("add: x must be f32 or bf16, got i32", [](OpMemory& t) {
    Tensor y = t(D::F32, {4});
    t.be.add(y, t(D::I32, {4}));
  });
  add("adamw_step: m (3) and param (4) differ in size", [](OpMemory& t) {
    Tensor p = t(D::F32, {4}), m = t(D::F32, {3}), v = t(D::F32, {4});
    t.be.adamw_step(p, t(D::F32, {4}), m, v, {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1});
  });
  add("sgd_step: grad must be f32, got bf16", [](OpMemory& t) {
    Tensor p = t(D::F32, {4});
    t.be.sgd_step(p, t(D::BF16, {4}), 0.1f);
  });
  return c;
}

}  // namespace oomb::testing
