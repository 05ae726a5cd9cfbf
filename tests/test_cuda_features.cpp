// The features' paths through the CUDA backend against the CPU: oomb generate's decoding, oomb
// eval's loss by position, page-sparse attention, sliding windows, --offload params through
// optimizer steps with the update beside the next step, a step's host waits, exact resume from a
// checkpoint, the plan against the measured peaks, and LoRA with trainable embeddings and norms.
// (test_cuda_model: the training step itself.) Skips without a GPU; runs everywhere on simt.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "backend/backend.h"
#include "data/repeat_task.h"
#include "hf/checkpoint.h"
#include "kv/sparse_select.h"
#include "model/chunk_inputs.h"
#include "model/lora.h"
#include "model/sweep_plan.h"
#include "checkpoint_runs.h"
#include "cuda_backend_with.h"
#include "model_fixture.h"
#ifdef OOMB_SIMT
#include "simt/cublaslt_calls.h"
#include "simt/cudnn_calls.h"
#endif
#include "test_util.h"
#include "train/eval.h"
#include "train/model.h"
#include "train/optimizer.h"
#include "train/sampling.h"
#include "train_steps.h"

using namespace oomb;
using namespace oomb::testing;

// oomb generate (and passkey evaluation) on CUDA: the prompt decoded in chunks, then one token at a
// time over the KV cache, gives the CPU's logits at every step (both fed the CPU's greedy choice, so
// the sequences stay the same), fp32 and under --precision bf16 against the CPU's bf16 policy (bf16
// K/V pages, as generate's --kv-dtype auto picks); decoding twice gives the same bits; the pages are
// all returned. Under bf16 the attention on the fp32 reference kernels
// (OOMB_CUDA_ATTENTION=reference) is held as tightly as fp32's sums allow; the default (oomb's
// tensor-core kernels: a decode step has fewer queries than cuDNN takes) also rounds P to bf16,
// which the CPU's policy does not (test_cuda_model's Bf16Step), so its logits lie further from the
// policy (bound 3e-2). On simt (2026-11-27): fp32 5.2e-7 from the CPU; bf16 with reference
// attention 6.9e-8 from the policy (bound 1e-3: a GPU's sums may move a value across a rounding
// midpoint) and at least 3.6e-3 from the CPU's fp32 (the control: it must be over 3 times nearer
// the policy); on tensor cores 9.8e-3 from the policy, 1.5e-2 from fp32. Not yet measured on a
// GPU: printed.
TEST(CudaFeatures, DecodingMatchesTheCpu) {
  std::string why;
  if (!make_cuda_backend(&why)) GTEST_SKIP() << why;
  auto cpu = make_cpu_backend();
  double worst_f32 = 0, worst_ref = 0, worst_tc = 0, least_control = INFINITY, tc_from_f32 = 0;
  for (std::string arch : {"llama", "qwen3"}) {
    const auto dir = temp_dir("_decode_" + arch);
    const ModelConfig cfg = write_tiny_model(dir, tiny_config_json(arch, 2), 73);
    std::vector<int32_t> seq = {3, 17, 42, 8, 8, 30, 1, 59, 12};  // the prompt: chunks of 5 and 4
    const int64_t total = 30;
    // every step's logits on one backend, fed `seq` (which the CPU's fp32 run extends by its greedy choice)
    const auto decode_all = [&](Backend& be, DType precision, bool extend) {
      ChunkPlan plan{5, 4};
      plan.precision = plan.kv_dtype = precision;
      Model m(cfg, be, plan);
      load_for_training(m, dir);
      std::vector<std::vector<float>> out;
      std::vector<float> logits(size_t(cfg.vocab));
      m.begin_decode(total);
      m.decode(seq.data(), 5, logits.data());
      m.decode(seq.data() + 5, 4, logits.data());
      for (int64_t t = 9;; ++t) {
        out.push_back(logits);
        if (t == total) break;
        std::mt19937_64 rng(1);
        if (extend) seq.push_back(sample_next(logits.data(), cfg.vocab, {}, rng));
        m.decode(&seq[size_t(t)], 1, logits.data());
      }
      m.end_decode();
      EXPECT_EQ(m.kv().pages_in_use(), 0);
      return out;
    };
    const auto gpu_run = [&](const char* attention, DType precision) {
      auto gpu = cuda_backend_with_attention(attention);
      auto out = decode_all(*gpu, precision, false);
      EXPECT_TRUE(out == decode_all(*gpu, precision, false)) << attention << ": not deterministic";
      return out;
    };
    const auto c32 = decode_all(*cpu, DType::F32, true), c16 = decode_all(*cpu, DType::BF16, false);
    const auto g32 = gpu_run("auto", DType::F32), ref = gpu_run("reference", DType::BF16),
               tc = gpu_run("auto", DType::BF16);
    for (size_t t = 0; t < c32.size(); ++t) {
      SCOPED_TRACE(fmt::format("{}, step {}", arch, t));
      const double e32 = rel_error(g32[t], c32[t]), eref = rel_error(ref[t], c16[t]), etc = rel_error(tc[t], c16[t]);
      EXPECT_LE(e32, 1e-5);
      EXPECT_LE(eref, 1e-3);
      EXPECT_LE(etc, 3e-2);
      EXPECT_GT(rel_error(ref[t], c32[t]), 3 * eref) << "the bf16 decoding is as near the CPU's fp32 as its policy";
      worst_f32 = std::max(worst_f32, e32), worst_ref = std::max(worst_ref, eref), worst_tc = std::max(worst_tc, etc);
      least_control = std::min(least_control, rel_error(ref[t], c32[t]));
      tc_from_f32 = std::max(tc_from_f32, rel_error(tc[t], c32[t]));
    }
  }
  std::cout << fmt::format("[ cuda     ] decoding 21 steps after a 9-token prompt, worst logits rel. error: fp32 vs "
                           "CPU {:.2e}; bf16 vs the CPU's bf16 policy {:.2e} (reference attention), {:.2e} (tensor "
                           "cores, {:.2e} from the CPU's fp32); the control (bf16 reference vs CPU fp32) at least "
                           "{:.2e}\n",
                           worst_f32, worst_ref, worst_tc, tc_from_f32, least_control);
}

// --sparse-pages on CUDA (issue 11): scores and top-K on the device, the attention kernels taking
// the chosen runs. K covering every earlier page gives the dense run's bits (fp32, and bf16 on the
// tensor cores); K = 2 chooses the CPU's pages for every layer, chunk, tile and head group and gives
// its loss and gradients (fp32 sums apart); offloaded, only the chosen pages streaming through, the
// resident run's bits. Per group and shared, mean and Quest scores, with and without --doc-mask.
TEST(CudaFeatures, SparsePagesMatchTheCpuAndDenseWhereKCoversEveryPage) {
  std::string why;
  auto gpu = make_cuda_backend(&why);
  if (!gpu) GTEST_SKIP() << why;
  auto cpu = make_cpu_backend();
  const auto dir = temp_dir("_sparse");
  const ModelConfig cfg = write_tiny_model(dir, tiny_config_json("qwen2", 2), 21);
  const int64_t N = 150, C = 40, P = 16;  // 10 pages; chunks at 0, 30, 70, 110
  auto toks = write_tokens(dir / "t.bin", N + 1, 61, 22);
  std::vector<int32_t> ids(toks.begin(), toks.end() - 1), tg(toks.begin() + 1, toks.end());
  for (size_t i = 0; i < ids.size(); i += 23) ids[i] = 60;
  struct Run {
    StepResult s;
    std::vector<int64_t> chosen;  // every recorded choice, in order
  };
  const auto run = [&](Backend& be, const ChunkPlan& plan) {
    Model m(cfg, be, plan);
    load_for_training(m, dir);
    const LossStats ls = m.forward_backward(ids.data(), tg.data(), N, 1.0f);
    Run r{{ls.loss_sum / double(ls.targets), host_grads(m)}, {}};
    const SparseOptions& o = plan.sparse;
    if (m.sparse())
      for (int64_t l = 0; l < cfg.layers; ++l)
        for (int64_t t = 0; t < chunk_count(N, C); ++t) {
          const ChunkSpan c = chunk_span(N, C, t);
          for (int64_t i = 0; i * o.tile < c.size(); ++i)
            for (int64_t s = 0; s < o.sets(cfg.kv_heads); ++s) {
              const auto p = m.sparse()->recorded(l, c.begin, i, s);
              r.chosen.push_back(-1);
              r.chosen.insert(r.chosen.end(), p.begin(), p.end());
            }
        }
    return r;
  };
  const auto same_bits = [](const StepResult& a, const StepResult& b) {
    return a.loss == b.loss && std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * 4) == 0;
  };
  struct Case {
    int32_t doc_sep;
    bool shared;
    PageScore score;
    bool covering;  // also K covering every page against dense, fp32 and bf16
  };
  double worst = 0;
  for (const Case& k : {Case{-1, false, PageScore::Mean, true}, Case{60, true, PageScore::Quest, true},
                        Case{60, false, PageScore::Quest, false}, Case{-1, true, PageScore::Mean, false}}) {
    SCOPED_TRACE(fmt::format("doc_sep={} shared={} {}", k.doc_sep, k.shared, page_score_name(k.score)));
    ChunkPlan sp{C, P, DType::F32, k.doc_sep};
    sp.sparse.pages = 2, sp.sparse.tile = 16, sp.sparse.sinks = 1;
    sp.sparse.shared = k.shared, sp.sparse.score = k.score;
    const ChunkPlan dense{C, P, DType::F32, k.doc_sep};
    const Run dense_run = run(*gpu, dense);
    if (k.covering)
      for (DType precision : {DType::F32, DType::BF16}) {
        ChunkPlan d = dense, covering = sp;
        d.precision = covering.precision = precision;
        covering.sparse.pages = 10, covering.sparse.tile = 8;
        EXPECT_TRUE(same_bits(precision == DType::F32 ? dense_run.s : run(*gpu, d).s, run(*gpu, covering).s))
            << "K covering every page, " << dtype_name(precision);
      }
    const Run c = run(*cpu, sp), g = run(*gpu, sp);
    EXPECT_FALSE(g.chosen.empty());
    EXPECT_EQ(g.chosen, c.chosen) << "the GPU chose other pages than the CPU";
    EXPECT_NEAR(g.s.loss, c.s.loss, 1e-5 * c.s.loss);
    const double e = rel_error(g.s.grads, c.s.grads);
    EXPECT_LE(e, 2e-5);
    worst = std::max(worst, e);
    EXPECT_GT(rel_error(g.s.grads, dense_run.s.grads), 1e-3) << "K = 2 gave dense's gradient";
    sp.offload_kv = true, sp.offload_group = 2;
    const Run off = run(*gpu, sp);
    EXPECT_TRUE(same_bits(off.s, g.s)) << "offloaded";
    EXPECT_EQ(off.chosen, g.chosen);
  }
  std::cout << fmt::format("[ cuda     ] --sparse-pages: the CPU's choices; K = 2 gradient rel. error vs CPU {:.2e} at "
                           "worst\n", worst);
}

// Sliding windows on CUDA (issue 13): Mistral's window on every layer, and Qwen2's from
// max_window_layers on (layer 0 full, layer 1 windowed), against the CPU: fp32 within the bounds of
// test_cuda_model's ChunkedStep; bf16 under the default attention (cuDNN for the full layer's
// chunks, every chunk of them with OOMB_CUDNN_MIN_QUERIES=1, oomb's tensor-core kernels for the
// windowed one) within test_cuda_model's Bf16Step bounds for the tensor cores; offloaded pages give
// the resident run's bits; the device's kv and kv_grad peaks are the plan's (pages outside every
// window of a chunk neither read nor kept).
TEST(CudaFeatures, SlidingWindowsMatchTheCpu) {
  std::string why;
  auto gpu = make_cuda_backend(&why);
  if (!gpu) GTEST_SKIP() << why;
  auto cpu = make_cpu_backend();
  nlohmann::json mistral = tiny_config_json("mistral", 2), qwen2 = tiny_config_json("qwen2", 2);
  mistral["sliding_window"] = 9;
  qwen2["use_sliding_window"] = true, qwen2["sliding_window"] = 7, qwen2["max_window_layers"] = 1;
  double worst = 0, worst_bf16 = 0;
  const ScopedEnv every_chunk_to_cudnn("OOMB_CUDNN_MIN_QUERIES", "1");
  for (const auto& [name, j] : {std::pair{"mistral", mistral}, std::pair{"qwen2", qwen2}}) {
    const auto dir = temp_dir(std::string("_window_") + name);
    const ModelConfig cfg = write_tiny_model(dir, j, 81);
    ASSERT_GT(cfg.layer_window.back(), 0) << name;
    auto toks = write_tokens(dir / "t.bin", 131, 61, 82);
    std::vector<int32_t> ids(toks.begin(), toks.end() - 1), tg(toks.begin() + 1, toks.end());
    for (size_t i = 0; i < ids.size(); i += 17) ids[i] = 60;
    for (ChunkPlan plan : {ChunkPlan{13, 4}, ChunkPlan{29, 8, DType::F32, 60}}) {
      SCOPED_TRACE(fmt::format("{} C={} P={} doc_sep={}", name, plan.chunk, plan.page_size, plan.doc_sep));
      Accountant::global().reset_peaks();
      const StepResult g = one_step(*gpu, dir, ids, tg, plan);
      const MemoryPlan mp = plan_memory(cfg, plan, int64_t(ids.size()), "sgd", 0, Tier::Device);
      for (Tag tag : {Tag::KV, Tag::KVGrad})
        EXPECT_EQ(Accountant::global().get(Tier::Device, tag).peak, mp.get(Tier::Device, tag)) << tag_name(tag);
      const StepResult c = one_step(*cpu, dir, ids, tg, plan);
      EXPECT_NEAR(g.loss, c.loss, 1e-5 * c.loss);
      const double e = rel_error(g.grads, c.grads);
      EXPECT_LE(e, 2e-5);
      worst = std::max(worst, e);
      ChunkPlan off = plan;
      off.offload_kv = true, off.offload_group = 2;
      const StepResult o = one_step(*gpu, dir, ids, tg, off);
      EXPECT_TRUE(o.loss == g.loss && std::memcmp(o.grads.data(), g.grads.data(), g.grads.size() * 4) == 0)
          << "offloaded";
      plan.precision = DType::BF16;
#ifdef OOMB_SIMT
      const size_t calls = cuda::cudnn::simt_calls();
#endif
      const StepResult gb = one_step(*gpu, dir, ids, tg, plan), cb = one_step(*cpu, dir, ids, tg, plan);
#ifdef OOMB_SIMT
      // cuDNN took the full layer's chunks (without documents), and none of a windowed layer's
      if (std::string(name) == "qwen2" && plan.doc_sep < 0) EXPECT_GT(cuda::cudnn::simt_calls(), calls) << "none";
      else EXPECT_EQ(cuda::cudnn::simt_calls(), calls) << "cuDNN took a windowed or masked call";
#endif
      EXPECT_NEAR(gb.loss, cb.loss, 4e-4 * cb.loss);
      const double eb = rel_error(gb.grads, cb.grads);
      EXPECT_LE(eb, 2e-2);
      worst_bf16 = std::max(worst_bf16, eb);
    }
  }
  std::cout << fmt::format("[ cuda     ] sliding windows: worst gradient rel. error vs CPU fp32 {:.2e}, bf16 vs the "
                           "CPU's bf16 policy {:.2e}\n", worst, worst_bf16);
}

// oomb eval on CUDA (issue 12): the loss by position over windows, chunked, as the CPU scores it,
// every bucket's loss (fp32 sums apart; bf16 against the CPU's bf16 policy, the attention on tensor
// cores), targets and argmax hits (a near tie may flip one).
TEST(CudaFeatures, EvaluationByPositionMatchesTheCpu) {
  std::string why;
  auto gpu = make_cuda_backend(&why);
  if (!gpu) GTEST_SKIP() << why;
  auto cpu = make_cpu_backend();
  const auto dir = temp_dir("_eval");
  const ModelConfig cfg = write_tiny_model(dir, tiny_config_json("qwen2", 2), 91);
  const int64_t N = 96, B = 4, C = eval_chunk_size(N, B, 16);
  double worst[2] = {0, 0};
  for (DType precision : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(precision));
    ChunkPlan plan{C, 8};
    plan.precision = plan.kv_dtype = precision;
    std::vector<EvalResult> r;
    for (Backend* be : {cpu.get(), gpu.get()}) {
      Model m(cfg, *be, plan);
      load_for_training(m, dir);
      RepeatTask data(3, cfg.vocab);
      r.push_back(evaluate_by_position(m, data, N, 2, B));
      EXPECT_EQ(m.kv().pages_in_use(), 0);
    }
    const EvalResult &c = r[0], &g = r[1];
    ASSERT_EQ(g.buckets.size(), size_t(B));
    // bf16: a bucket is the mean of 48 targets, noisier than a whole step's (measured 2.9e-4 on simt)
    const double bound = precision == DType::F32 ? 1e-5 : 1e-3;
    int scored = 0;
    for (size_t b = 0; b < size_t(B); ++b) {
      EXPECT_EQ(g.buckets[b].targets, c.buckets[b].targets);
      if (c.buckets[b].targets == 0) continue;  // the repeat task's first half has no targets
      ++scored;
      const double e = std::abs(g.buckets[b].loss() - c.buckets[b].loss()) / c.buckets[b].loss();
      EXPECT_LE(e, bound) << "bucket " << b;
      worst[precision == DType::BF16] = std::max(worst[precision == DType::BF16], e);
      EXPECT_NEAR(double(g.buckets[b].correct), double(c.buckets[b].correct), 1.0) << "bucket " << b;
    }
    EXPECT_EQ(scored, 2);
    EXPECT_NEAR(g.loss(), c.loss(), bound * c.loss());
  }
  std::cout << fmt::format("[ cuda     ] oomb eval by position: worst bucket loss rel. error vs CPU fp32 {:.2e}, "
                           "bf16 vs the CPU's bf16 policy {:.2e}\n", worst[0], worst[1]);
}

// --offload params through optimizer steps on the GPU (issue 18): 3 AdamW steps of 2 accumulated
// sequences, the update on the host beside the next step (slowed, so that a missing wait would read
// weights mid-update), for params (chunk order) and kv,params (layer order), fp32 and bf16, against the
// resident run, whose AdamW runs on the device: every step's loss and gradient and the final weights
// and moments within 1e-5 (the GEMMs accumulate the weight gradients on the device with beta = 1
// where the offloaded run adds each chunk's on the host, and cuBLASLt may choose other algorithms
// for them), whether the bits are equal printed (on simt they must be). Untied with biases, and tied
// over 3 layers. (The backend's streams not waiting for each other's events fails it: 4.6e2 on simt.)
TEST(CudaFeatures, OffloadParamsStepsTrackTheResidentRun) {
  std::string why;
  auto gpu = make_cuda_backend(&why);
  if (!gpu) GTEST_SKIP() << why;
  nlohmann::json tied = tiny_config_json("llama", 1);
  tied["num_hidden_layers"] = 3, tied["tie_word_embeddings"] = true;
  double worst = 0;
  int runs = 0, bitwise = 0;
  for (const auto& [name, j] : {std::pair{"qwen2", tiny_config_json("qwen2", 2)}, std::pair{"llama-tied", tied}}) {
    const auto dir = temp_dir(std::string("_offload_steps_") + name);
    write_tiny_model(dir, j, 95);
    for (DType precision : {DType::F32, DType::BF16}) {
      ChunkPlan resident{13, 8};
      resident.precision = precision;
      const Trained ref = train_steps(*gpu, dir, resident, "adamw", 37, 3, 2);
      for (bool kv_and_layer_order : {false, true}) {
        ChunkPlan plan = resident;
        plan.offload_params = true;
        plan.offload_kv = kv_and_layer_order, plan.offload_group = kv_and_layer_order ? 2 : 0;
        plan.sweep = kv_and_layer_order ? SweepOrder::Layer : SweepOrder::Chunk;
        SCOPED_TRACE(fmt::format("{} {} --offload {} --sweep {}", name, dtype_name(precision),
                                 plan.offload_kv ? "kv,params" : "params", sweep_name(plan.sweep)));
        Optimizer::delay_update_for_test(2000);
        const Trained off = train_steps(*gpu, dir, plan, "adamw", 37, 3, 2);
        Optimizer::delay_update_for_test(0);
        ASSERT_EQ(off.losses.size(), ref.losses.size());
        double e = 0;
        for (size_t k = 0; k < ref.losses.size(); ++k) {
          e = std::max(e, std::abs(off.losses[k] - ref.losses[k]) / ref.losses[k]);
          e = std::max(e, rel_error(off.grads[k], ref.grads[k]));
        }
        for (auto [a, b] : {std::pair{&off.weights, &ref.weights}, std::pair{&off.exp_avg, &ref.exp_avg},
                            std::pair{&off.exp_avg_sq, &ref.exp_avg_sq}})
          e = std::max(e, rel_error(*a, *b));
        EXPECT_LE(e, 1e-5);
        worst = std::max(worst, e);
        bitwise += difference(ref, off).empty();
#ifdef OOMB_SIMT
        EXPECT_EQ(difference(ref, off), "");  // one summation order here: the same bits
#endif
        ++runs;
      }
    }
  }
  std::cout << fmt::format("[ cuda     ] --offload params, 3 AdamW steps, update beside the next step: worst rel. "
                           "error vs resident {:.1e}; {} of {} runs bit for bit\n", worst, bitwise, runs);
}

// The host waits of a step on CUDA (issue 10's item 6: none inside a step but the loss and norm
// readback), counted by the backend itself (every stream synchronize, a copy to or from host
// memory, an event waited for): a steady-state step of 4 chunks drains the device exactly as often
// as on the simulated device (test_host_waits: as often for 8 chunks as for 4, for 4 layers as for
// 2; the sparse chooser once per layer and chunk), and allocates nothing (cudaFree would drain).
// Event waits (the attention tables' double-buffered staging, a bounded run-ahead) are printed. On
// simt: a run of a plan already run asks cuBLASLt for no algorithm (one search per GEMM shape).
TEST(CudaFeatures, HostWaitsPerStepAsOnTheSimulatedDevice) {
  std::string why;
  if (!make_cuda_backend(&why)) GTEST_SKIP() << why;
  const auto dir = temp_dir("_waits");
  nlohmann::json tied = tiny_config_json("qwen2", 2);
  tied["tie_word_embeddings"] = true;
  write_tiny_model(dir, tied, 3);
  struct Case {
    const char* name;
    void (*set)(ChunkPlan&);
  };
  const Case cases[] = {
      {"resident", [](ChunkPlan&) {}},
      {"--offload kv", [](ChunkPlan& p) { p.offload_kv = true, p.offload_group = 2; }},
      {"--precision bf16, --offload kv,params",
       [](ChunkPlan& p) { p.precision = p.kv_dtype = DType::BF16, p.offload_kv = p.offload_params = true; }},
      {"--sweep layer, --offload params", [](ChunkPlan& p) { p.sweep = SweepOrder::Layer, p.offload_params = true; }},
      {"--doc-mask", [](ChunkPlan& p) { p.doc_sep = 5; }},
      {"--sparse-pages 1", [](ChunkPlan& p) { p.sparse = sparse_options(1, 8, 1, false, "mean", 16, 2); }},
      {"LoRA, --offload params", [](ChunkPlan& p) {
         p.lora.rank = 4, p.lora.alpha = 8, p.offload_params = true;
         parse_lora_targets("q,v,down", p.lora);
       }},
  };
  const auto plan_of = [](const Case& c) {
    ChunkPlan plan{16, 8};
    c.set(plan);
    return plan;
  };
  // the simulated device's first (one device backend kind at a time in a process); 4 chunks of 16
  std::vector<WaitsPerStep> on_sim;
  for (const Case& c : cases) {
    auto sim = make_sim_backend();
    on_sim.push_back(waits_per_step(*sim, dir, plan_of(c), 64));
  }
  auto gpu = make_cuda_backend(&why);
  ASSERT_GE(gpu->host_waits().drains, 0) << "the CUDA backend counts its host waits";
  size_t i = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const WaitsPerStep g = waits_per_step(*gpu, dir, plan_of(c), 64), &s = on_sim[i++];
    EXPECT_EQ(g.drains, s.drains);
    EXPECT_EQ(g.allocations, 0) << "a steady-state step allocated";
    std::cout << fmt::format("[ cuda     ] {}: drains a step {} (the simulated device {}), event waits {}\n", c.name,
                             g.drains, s.drains, g.event_waits);
  }
#ifdef OOMB_SIMT
  // cuBLASLt's algorithm is chosen once per GEMM shape: a second run of the same plan asks for none
  const size_t searches = cuda::cublaslt::simt_heuristic_calls();
  EXPECT_GT(searches, 0u);
  waits_per_step(*gpu, dir, plan_of(cases[2]), 64);
  EXPECT_EQ(cuda::cublaslt::simt_heuristic_calls(), searches) << "a GEMM plan was made again";
#endif
}

// Exact resume on CUDA (issue 12): a run interrupted by a checkpoint after step 3 and resumed from
// it gives every later step's loss, gradient norm and lr and the final weights of the uninterrupted
// run bit for bit: AdamW's moments on the device, fp32 and bf16 (the weights' bf16 copy cast again
// after the load), and bf16 with --offload params (the update beside the next step, slowed).
TEST(CudaFeatures, ResumedRunEqualsTheUninterruptedOneBitForBit) {
  std::string why;
  auto gpu = make_cuda_backend(&why);
  if (!gpu) GTEST_SKIP() << why;
  const auto dir = temp_dir("_resume");
  write_tiny_model(dir, tiny_config_json("qwen2", 2), 11);
  write_tokens(dir / "t.bin", 2000, 61, 12);
  for (auto [precision, offload] : {std::pair{DType::F32, false}, std::pair{DType::BF16, false},
                                    std::pair{DType::BF16, true}}) {
    const std::string label = fmt::format("cuda-{}{}", dtype_name(precision), offload ? "-offload" : "");
    SCOPED_TRACE(label);
    ChunkPlan plan{16, 8};
    plan.precision = precision, plan.offload_params = offload;
    const RunResult whole = checkpoint_run(*gpu, label, plan, dir, "adamw");
    const RunResult first = checkpoint_run(*gpu, label, plan, dir, "adamw", {}, 3);
    const RunResult rest = checkpoint_run(*gpu, label, plan, dir, "adamw", first.checkpoint);
    EXPECT_EQ(resume_difference(whole, first, rest, 3), "");
  }
}

// `oomb plan --device cuda` for the features (issue 18's 7B and 70B plans, LoRA's, sparse and
// windowed runs are planned with the CUDA backend's workspace): after two steps, every (tier, tag)
// peak of the accountant equals the plan, for --offload params (bf16) and kv,params in the layer
// order, LoRA with --offload params, page-sparse attention offloaded, and Qwen2's sliding windows.
// (test_cuda_model's PlanEqualsEveryMeasuredPeak: resident and --offload kv, fp32 and bf16.)
TEST(CudaFeatures, PlanEqualsEveryMeasuredPeak) {
  std::string why;
  if (!make_cuda_backend(&why)) GTEST_SKIP() << why;
  nlohmann::json windowed = tiny_config_json("qwen2", 2);
  windowed["use_sliding_window"] = true, windowed["sliding_window"] = 40, windowed["max_window_layers"] = 1;
  struct Case {
    const char* name;
    void (*set)(ChunkPlan&);
    bool windows = false;
  };
  const Case cases[] = {
      {"--offload params, bf16", [](ChunkPlan& p) { p.offload_params = true, p.precision = DType::BF16; }},
      {"--offload kv,params, --sweep layer",
       [](ChunkPlan& p) { p.offload_params = p.offload_kv = true, p.offload_group = 2, p.sweep = SweepOrder::Layer; }},
      {"LoRA, bf16, --offload params", [](ChunkPlan& p) {
         p.lora.rank = 4, p.lora.alpha = 8, p.offload_params = true, p.precision = DType::BF16;
         parse_lora_targets("all", p.lora);
       }},
      {"--sparse-pages 2, --offload kv", [](ChunkPlan& p) {
         p.sparse = sparse_options(2, 32, 1, false, "mean", 64, 2), p.offload_kv = true, p.offload_group = 2;
       }},
      {"sliding windows, bf16", [](ChunkPlan& p) { p.precision = DType::BF16; }, true},
  };
  Accountant& acc = Accountant::global();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ChunkPlan plan{64, 16};
    c.set(plan);
    const ModelConfig cfg = parse_config(c.windows ? windowed : tiny_config_json("qwen2", 2), "plan test config");
    acc.reset_peaks();
    const MemoryPlan pred = train_for_peaks_on([] { return make_cuda_backend(nullptr); }, cfg, plan, 256, 2);
    expect_peaks_equal(pred);
    std::cout << fmt::format("[ cuda     ] plan, {}: device {} B, pinned {} B, host {} B, as measured\n", c.name,
                             pred.total(Tier::Device), pred.total(Tier::Pinned), pred.total(Tier::Host));
  }
}

// LoRA on CUDA with LongLoRA's trainable embeddings and norms (--train-embeddings-norms, issue 13):
// the embedding's fp32 gradient and the norms' beside the adapters' over a frozen base, Qwen3 (q/k
// norms) and a tied Llama. fp32: 3 AdamW steps of 2 sequences (A seeded, B zero, as PEFT starts)
// track the CPU's every step and in the final adapters, embeddings and norms (1e-5); bf16 (untied:
// the attention on the reference kernels): one step's gradients against the CPU's LoRA bf16 policy
// (on simt 1.8e-3 apart, 2026-11-27; bound 6e-3).
TEST(CudaFeatures, LoraWithTrainableEmbeddingsAndNormsTracksTheCpu) {
  std::string why;
  auto gpu = cuda_backend_with_attention("reference", &why);
  if (!gpu) GTEST_SKIP() << why;
  auto cpu = make_cpu_backend();
  nlohmann::json tied = tiny_config_json("llama", 2);
  tied["tie_word_embeddings"] = true;
  double worst = 0, worst_bf16 = 0, control = INFINITY;
  for (const auto& [name, j] : {std::pair{"qwen3", tiny_config_json("qwen3", 2)}, std::pair{"llama-tied", tied}}) {
    SCOPED_TRACE(name);
    const auto dir = temp_dir(std::string("_lora_emb_") + name);
    write_tiny_model(dir, j, 57);
    ChunkPlan plan{13, 8};
    plan.lora.rank = 4, plan.lora.alpha = 8, plan.lora.train_embeddings_norms = true;
    parse_lora_targets("all", plan.lora);
    const Trained c = train_steps(*cpu, dir, plan, "adamw", 37, 3, 2);
    const Trained g = train_steps(*gpu, dir, plan, "adamw", 37, 3, 2);
    double e = 0;
    for (size_t k = 0; k < c.losses.size(); ++k)
      e = std::max({e, std::abs(g.losses[k] - c.losses[k]) / c.losses[k], rel_error(g.grads[k], c.grads[k])});
    e = std::max(e, rel_error(g.weights, c.weights));
    EXPECT_LE(e, 1e-5);
    worst = std::max(worst, e);
    ASSERT_GT(c.weights.size(), size_t(lora_param_count(load_config(dir), plan.lora) - 1));
    if (j["tie_word_embeddings"].get<bool>()) continue;  // bf16 with a tied trainable embedding: refused (not yet)
    const Trained c32 = train_steps(*cpu, dir, plan, "adamw", 37, 1, 1);
    plan.precision = DType::BF16;
    const Trained cb = train_steps(*cpu, dir, plan, "adamw", 37, 1, 1);
    const Trained gb = train_steps(*gpu, dir, plan, "adamw", 37, 1, 1);
    const double eb = rel_error(gb.grads[0], cb.grads[0]);
    EXPECT_LE(eb, 6e-3);
    EXPECT_GT(rel_error(gb.grads[0], c32.grads[0]), 3 * eb) << "as near the CPU's fp32 as its bf16 policy";
    control = std::min(control, rel_error(gb.grads[0], c32.grads[0]));
    worst_bf16 = std::max(worst_bf16, eb);
  }
  std::cout << fmt::format("[ cuda     ] LoRA with trainable embeddings and norms: fp32 vs CPU {:.2e} (3 AdamW steps), "
                           "bf16 gradient vs the CPU's policy {:.2e} (the control, vs the CPU's fp32: {:.2e})\n", worst,
                           worst_bf16, control);
}
