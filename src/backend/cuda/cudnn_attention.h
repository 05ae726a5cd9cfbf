// Dense causal attention through cuDNN's fused SDPA (cudnn/cudnn_sdpa.h), for calls whose keys are
// masked only by causality (no documents, window or sparse selection): spans of earlier keys, and
// the chunk's own keys whole or not at all. The keys go in runs: the chunk's own keys one causal
// run, each stretch of earlier keys runs of T back from its end. Each run is gathered into
// contiguous bf16 once and is one cuDNN call per block of the chunk's queries (cudnn_query_block:
// cuDNN's backward keeps a bf16 dS of queries x heads x keys), the causal run's call over its keys
// up to the block's last query. The forward merges the runs' (o, lse) by the LSE algebra, the
// backward sums a run's dk, dv over the blocks in fp32, folds them into the blocks' pages, and
// sums dq. A fold over several
// calls (--offload kv: page groups streaming through) keeps the state between calls as oomb's
// tensor-core kernels do (kernels_runs.h: merge_fold), so its calls may go either way (a call
// cuDNN refuses runs on them). Fixed order: deterministic. Memory: buffers of the
// chunk's size (not the context's), planned by cudnn_attention_bytes (backend.h). Calls with fewer
// than cudnn_min_queries() queries keep oomb's kernels (runs would be as short as the call). cuDNN's
// fused engines take one i/o type: q, k, v, o, do and the run's o, dq, dk, dv are bf16 (o, do and
// dq declared fp32 were taken on the first H200 run, 2026-11-28, but its forward wrote a wrong o
// and its backward's kernel failed to compile, as deviceless here too), so each run's o, dq, dk and
// dv are rounded once more than oomb's kernels' fp32 sums, and rowsum(do * o) is taken over bf16
// copies, as FlashAttention's is.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>

#include "backend/backend.h"
#include "backend/cuda/cudnn/cudnn_sdpa.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/scratch.h"

namespace oomb::cuda {

class CudnnAttention {
 public:

  // Why a call cannot take this route, or "" (host-side checks of the call alone)
  static std::string unsupported(const AttnArgs& a, std::span<const KVBlock> blocks, int64_t T, int64_t D);

  // false: cuDNN cannot take a run of this call (no library, a shape it refuses, a workspace over
  // the plan, a plan it built but will not execute: Sdpa::trial); said once on stderr, and the caller runs its own kernels. p: the uploaded table, in
  // ascending idx0 (of `blocks`, the call's), and the fold's ends (first, last, the forward's
  // run_sum); everything runs on stream s (the same on every call).
  bool forward(const k::AttnParams& p, std::span<const KVBlock> blocks, const float* q, float* o, float* lse,
               cudaStream_t s);
  bool backward(const k::AttnParams& p, std::span<const KVBlock> blocks, const float* q, const float* o,
                const float* lse, const float* dout, float* dq, float* dsum, cudaStream_t s);
  // Every attention call of the backend that starts a fold (AttnArgs::first), whichever kernels
  // take it: q's bf16 copy is made once per fold (q is the same, unchanged, in all its calls)
  void new_fold() { q16_of_ = nullptr; }

 private:
  struct Run {
    int64_t a, len;
    bool causal;
    int64_t first, count;  // the table's entries (ascending idx0) holding keys of [a, a + len)
  };
  static std::vector<Run> runs(int64_t q_idx0, int64_t T, std::span<const KVBlock> blocks);
  struct QueryBlock {
    int64_t qa, nq;  // the chunk's queries [qa, qa + nq): one cuDNN call per run
  };
  static std::vector<QueryBlock> query_blocks(int64_t T, int64_t H);
  // the keys of run r a block's call takes: the causal run's up to the block's last query, or all
  static int64_t keys_of(const Run& r, const QueryBlock& b) { return r.causal ? b.qa + b.nq : r.len; }
  // null: refused (said once)
  cudnn::Sdpa* plan(const k::AttnParams& p, int64_t nq, int64_t R, bool causal, cudaStream_t s);
  bool plans_for(const k::AttnParams& p, const std::vector<Run>& rs, const std::vector<QueryBlock>& qb, cudaStream_t s);
  struct Buffers {
    uint16_t *q16, *k16, *v16, *dk16, *dv16;  // q and a run's keys, values and their gradients, bf16
    uint16_t *o16, *do16, *dq16;              // a run's o (forward); o, do and a run's dq (backward), bf16
    float *o_run, *lse_run;                   // a run's o and lse, fp32 (o_run holds do16 and dq16)
    float *dk_sum, *dv_sum;                   // a run's dk, dv summed over the query blocks, fp32
    void* ws;                                 // cuDNN's workspace
  };
  Buffers buffers(const k::AttnParams& p);  // what cudnn_attention_bytes plans, for p.T queries

  // a plan per (queries, R, H, G, D, causal, scale): the scale is a scalar of the graph
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool, float>;
  std::map<Key, std::unique_ptr<cudnn::Sdpa>> plans_;
  std::map<Key, std::string> refused_;
  Scratch q16_, k16_, v16_, dk16_, dv16_, o16_, run_out_, lse_run_, dk_sum_, dv_sum_, ws_;
  const float* q16_of_ = nullptr;  // the q whose bf16 copy q16_ holds in this fold; null: none
  void cast_q(const k::AttnParams& p, const float* q, uint16_t* q16, cudaStream_t s);
};

}  // namespace oomb::cuda
