// The host's optimizer loops (backend/cpu/cpu_optimizer): AdamW against its formula written out
// element by element; --offload params's update in one pass against the separate passes it
// replaced; the bf16 images' rounding against rounding to nearest even by cases.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

#include "backend/cpu/cpu_optimizer.h"
#include "core/dtype.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;

namespace {

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// x rounded to bf16 by cases: NaN keeps its upper half, made quiet; otherwise the upper half, one
// up where the dropped half is over the tie, or at it with an odd upper half (carrying into the
// exponent as IEEE does).
uint16_t nearest_even_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t upper = u >> 16, dropped = u & 0xffffu;
  if (std::isnan(x)) return uint16_t(upper | 0x40u);
  const bool up = dropped > 0x8000u || (dropped == 0x8000u && (upper & 1u));
  return uint16_t(upper + (up ? 1u : 0u));
}

}  // namespace

// The host AdamW (vectorized, every core) against the update written out element by element,
// as the CUDA kernel writes it, on one thread and on all: the same bits.
TEST(HostAdamW, EqualsTheFormulaOnAnyThreadCount) {
  const int64_t n = (int64_t(1) << 17) + 13;  // past the parallel threshold, and an odd tail
  std::mt19937_64 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t count = static_cast<size_t>(n);
  std::vector<float> p(count), g(count), m(count), v(count);
  for (size_t i = 0; i < count; ++i) {
    p[i] = nd(rng), g[i] = nd(rng), m[i] = 0.1f * nd(rng);
    v[i] = std::abs(0.01f * nd(rng));
  }
  const int threads = omp_get_max_threads();
  for (const int t : {1, threads}) {
    std::vector<float> P = p, M = m, V = v, rp = p, rm = m, rv = v;
    for (int64_t step = 1; step <= 3; ++step) {
      const Backend::AdamW a{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step};
      omp_set_num_threads(t);
      cpu::adamw(P.data(), g.data(), M.data(), V.data(), n, a);
      omp_set_num_threads(threads);
      const double bc1 = 1.0 - std::pow(double(0.9f), double(step)), bc2 = 1.0 - std::pow(double(0.95f), double(step));
      const float step_size = float(1e-3f / bc1), inv = float(1.0 / std::sqrt(bc2));
      for (size_t i = 0; i < size_t(n); ++i) {
        volatile float mi = 0.9f * rm[i];  // volatile: each product rounded on its own
        mi = mi + (1.0f - 0.9f) * g[i];
        volatile float gg = (1.0f - 0.95f) * g[i];
        gg = gg * g[i];
        volatile float vi = 0.95f * rv[i];
        vi = vi + gg;
        rm[i] = mi, rv[i] = vi;
        volatile float decay = 1e-3f * 0.1f;
        decay = decay * rp[i];
        float pi = rp[i] - decay;
        volatile float num = step_size * mi;
        volatile float den = std::sqrt(float(vi)) * inv;
        den = den + 1e-8f;
        pi -= num / den;
        rp[i] = pi;
      }
    }
    EXPECT_TRUE(same(P, rp)) << t << " threads: weights, rel. error " << rel_error(P, rp);
    EXPECT_TRUE(same(M, rm) && same(V, rv)) << t << " threads: moments";
  }
}

// --offload params's host update in one pass (cpu::adamw_update, sgd_update) against the passes
// it replaced, run one after another: Backend::scale for the clip, the step, core/dtype's rounding
// for the image (or a copy), the gradient zeroed. The same bits in every output, for every choice
// of clip, image and zero, on one thread and on all, with NaN, infinities, signed zeros and
// subnormals among the weights and gradients.
TEST(HostUpdate, OnePassEqualsTheSeparatePasses) {
  const int64_t n = (int64_t(1) << 16) + 29;  // past the parallel threshold, and an odd tail
  const size_t count = static_cast<size_t>(n);
  std::mt19937_64 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> p(count), g(count), m(count), v(count);
  for (size_t i = 0; i < count; ++i) {
    p[i] = nd(rng), g[i] = nd(rng), m[i] = 0.1f * nd(rng);
    v[i] = std::abs(0.01f * nd(rng));
  }
  const float odd[] = {NAN, INFINITY, -INFINITY, -0.0f, 1e-40f, -3e-39f, -2.0078125f, 3.4e38f};
  for (size_t k = 0; k < std::size(odd); ++k) p[100 + k] = odd[k], g[300 + k] = odd[k], p[n - 1 - k] = odd[k];
  auto bits_equal = [](const void* a, const void* b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; };
  auto cpu = make_cpu_backend();
  const int threads = omp_get_max_threads();
  int cases = 0;
  for (const bool adamw : {true, false})
    for (const float clip : {1.0f, 0.37f})
      for (const int image : {0, 1, 2})  // none, fp32, bf16
        for (const bool zero : {false, true})
          for (const int t : {1, threads}) {
            SCOPED_TRACE(fmt::format("{} clip {} image {} zero {} threads {}", adamw ? "adamw" : "sgd", clip, image,
                                     zero, t));
            std::vector<float> P = p, G = g, M = m, V = v, rp = p, rg = g, rm = m, rv = v;
            std::vector<uint16_t> img16(count, 0xdead), ref16(count, 0xdead);
            std::vector<float> img32(count, 7.0f), ref32(count, 7.0f);
            void* img = image == 1 ? static_cast<void*>(img32.data()) : image == 2 ? img16.data() : nullptr;
            const Backend::AdamW a{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 2};
            omp_set_num_threads(t);
            if (adamw)
              cpu::adamw_update(P.data(), G.data(), M.data(), V.data(), n, a, {clip, img, image == 2, zero});
            else
              cpu::sgd_update(P.data(), G.data(), n, 0.05f, {clip, img, image == 2, zero});
            omp_set_num_threads(threads);
            Tensor tg(rg.data(), DType::F32, {n}, Tier::Host);
            if (clip != 1.0f) cpu->scale(tg, clip);
            if (adamw)
              cpu::adamw(rp.data(), rg.data(), rm.data(), rv.data(), n, a);
            else
              cpu::sgd(rp.data(), rg.data(), n, 0.05f);
            for (size_t i = 0; i < count && image == 2; ++i) ref16[i] = f32_to_bf16(rp[i]);
            if (image == 1) ref32 = rp;
            if (zero) std::memset(rg.data(), 0, count * 4);
            EXPECT_TRUE(bits_equal(P.data(), rp.data(), count * 4)) << "weights";
            EXPECT_TRUE(bits_equal(G.data(), rg.data(), count * 4)) << "gradients";
            EXPECT_TRUE(bits_equal(M.data(), rm.data(), count * 4) && bits_equal(V.data(), rv.data(), count * 4))
                << "moments";
            EXPECT_TRUE(bits_equal(img16.data(), ref16.data(), count * 2)) << "bf16 image";
            EXPECT_TRUE(bits_equal(img32.data(), ref32.data(), count * 4)) << "fp32 image";
            ++cases;
          }
  std::cout << fmt::format("[ update   ] {} fused host updates equal their separate passes bit for bit\n", cases);
}

// The bf16 images' rounding (cpu::cast_to_bf16, and the fused pass's image where the step leaves a
// weight as it is: SGD with a zero gradient; both core/dtype's f32_to_bf16 in a vectorized loop)
// against rounding to nearest even written out by cases, for every upper half (sign, exponent, the
// 7 kept bits: NaN, infinities and subnormals among them) with the lower halves that decide the
// rounding: exact, just under, at and just over the tie, the most.
TEST(HostUpdate, Bf16ImagesRoundToNearestEven) {
  const uint32_t lows[] = {0x0000, 0x7fff, 0x8000, 0x8001, 0xffff};
  std::vector<float> x;
  for (uint32_t hi = 0; hi < 0x10000; ++hi)
    for (const uint32_t lo : lows) x.push_back(std::bit_cast<float>(hi << 16 | lo));
  const int64_t n = int64_t(x.size());
  std::vector<uint16_t> want(x.size()), cast(x.size(), 1), fused(x.size(), 1);
  for (size_t i = 0; i < x.size(); ++i) want[i] = nearest_even_bf16(x[i]);
  cpu::cast_to_bf16(x.data(), cast.data(), n);
  std::vector<float> p = x, g(x.size(), 0.0f);
  cpu::sgd_update(p.data(), g.data(), n, 0.1f, {1.0f, fused.data(), true, true});
  size_t cast_bad = 0, fused_bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    cast_bad += cast[i] != want[i];
    fused_bad += fused[i] != want[i];  // (p - 0.1 * 0 quiets a signalling NaN: the bits bf16's NaN has anyway)
  }
  EXPECT_EQ(cast_bad, 0u) << "of " << x.size();
  EXPECT_EQ(fused_bad, 0u) << "of " << x.size();
  // the set holds ties that round both ways: 1 + 2^-8 down to 1, 1 + 3 * 2^-8 up
  EXPECT_EQ(nearest_even_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);
  EXPECT_EQ(nearest_even_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);
}
