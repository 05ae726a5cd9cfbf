// bf16 and f16 conversions (core/dtype, the CPU backend's cast and round_bf16) against two
// references that share no code with them: the IEEE definitions written in tests/dtype_reference.h,
// and PyTorch's own conversions (tests/oracle/torch_dtype_ref.py, run at test time). Every bf16 and
// every f16 bit pattern is decoded; float32 values are encoded over ties to even both ways, the
// subnormal ranges, overflow, NaN, +-0, +-inf and random bit patterns.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <cstdlib>
#include <fstream>

#include "backend/backend.h"
#include "core/dtype.h"
#include "dtype_reference.h"
#include "test_util.h"

using namespace oomb;
using namespace oomb::testing;
namespace r = oomb::testing::ref;

namespace {

// got (float) equals the reference value: same bits for numbers (so -0 != +0), any NaN for NaN.
::testing::AssertionResult same_value(float got, double want) {
  if (std::isnan(want)) {
    if (std::isnan(got) && std::signbit(got) == std::signbit(want)) return ::testing::AssertionSuccess();
  } else if (double(got) == want && std::signbit(got) == std::signbit(want)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << fmt::format("got {} (0x{:08x}), want {}", got, r::bits_of(got), want);
}

// got equals the reference encoding, where any NaN pattern of the same sign stands for NaN
bool same_pattern(uint16_t got, uint16_t want, int eb, int fb, bool nan_sign = true) {
  if (r::is_nan_pattern(want, eb, fb))
    return r::is_nan_pattern(got, eb, fb) && (!nan_sign || (got & 0x8000) == (want & 0x8000));
  return got == want;
}

template <class F>
void check_decode_all(const char* what, F decode, double (*want)(uint16_t)) {
  int bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto res = same_value(decode(uint16_t(h)), want(uint16_t(h)));
    if (!res && ++bad <= 5) ADD_FAILURE() << what << fmt::format(" 0x{:04x}: ", h) << res.message();
  }
  EXPECT_EQ(bad, 0) << what << ": patterns decoded wrongly";
}

template <class F>
void check_encode(const char* what, const std::vector<float>& xs, F encode, uint16_t (*want)(float), int eb, int fb) {
  size_t bad = 0;
  for (float x : xs) {
    const uint16_t g = encode(x), w = want(x);
    if (!same_pattern(g, w, eb, fb) && ++bad <= 5)
      ADD_FAILURE() << what << fmt::format(": {} (0x{:08x}) gave 0x{:04x}, want 0x{:04x}", x, r::bits_of(x), g, w);
  }
  EXPECT_EQ(bad, 0u) << what << ": of " << xs.size() << " values encoded wrongly";
}

}  // namespace

// The reference itself, on values whose encodings are known by hand: a wrong reference would make
// every other check here meaningless.
TEST(DtypeReference, KnownEncodings) {
  EXPECT_EQ(r::bf16_encode(1.0f), 0x3f80);
  EXPECT_EQ(r::bf16_encode(1.00390625f), 0x3f80);  // tie, down to even
  EXPECT_EQ(r::bf16_encode(1.01171875f), 0x3f82);  // tie, up to even
  EXPECT_EQ(r::bf16_encode(r::from_bits(0x3f808001u)), 0x3f81);
  EXPECT_EQ(r::bf16_encode(r::from_bits(0x7f7f8000u)), 0x7f80);  // overflow tie -> inf
  EXPECT_EQ(r::bf16_encode(r::from_bits(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(r::bf16_encode(-0.0f), 0x8000);
  EXPECT_EQ(r::bf16_encode(r::from_bits(0x00018000u)), 0x0002);  // subnormal tie, up to even
  EXPECT_EQ(r::f16_encode(1.0f), 0x3c00);
  EXPECT_EQ(r::f16_encode(65504.0f), 0x7bff);
  EXPECT_EQ(r::f16_encode(65519.0f), 0x7bff);
  EXPECT_EQ(r::f16_encode(65520.0f), 0x7c00);  // max + ulp/2: a tie, to the even pattern (inf)
  EXPECT_EQ(r::f16_encode(float(std::ldexp(1.0, -24))), 0x0001);
  EXPECT_EQ(r::f16_encode(float(std::ldexp(1.0, -25))), 0x0000);       // tie, down to even 0
  EXPECT_EQ(r::f16_encode(float(3 * std::ldexp(1.0, -25))), 0x0002);   // tie, up to even
  EXPECT_EQ(r::f16_encode(float(std::ldexp(1.0, -14))), 0x0400);       // the smallest normal
  EXPECT_EQ(r::f16_encode(-2.0f), 0xc000);
  EXPECT_EQ(r::f16_value(0x3555), 0x1.554p-2);
  EXPECT_EQ(r::f16_value(0x0001), std::ldexp(1.0, -24));
  EXPECT_EQ(r::f16_value(0x7bff), 65504.0);
  EXPECT_EQ(r::bf16_value(0x0001), std::ldexp(1.0, -133));
  EXPECT_EQ(r::bf16_value(0xc049), -3.140625);
}

TEST(Dtype, DecodesEveryBf16AndF16Pattern) {
  check_decode_all("bf16_to_f32", bf16_to_f32, r::bf16_value);
  check_decode_all("f16_to_f32", f16_to_f32, r::f16_value);
  // the array converters the safetensors reader and writer use
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = uint16_t(h);
  std::vector<float> out(65536);
  for (DType t : {DType::BF16, DType::F16}) {
    convert_to_f32(all.data(), t, out.data(), all.size());
    check_decode_all(t == DType::BF16 ? "convert_to_f32 bf16" : "convert_to_f32 f16",
                     [&](uint16_t h) { return out[h]; }, t == DType::BF16 ? r::bf16_value : r::f16_value);
  }
}

TEST(Dtype, EncodesLikeTheIeeeDefinition) {
  const auto xs = r::encode_inputs(1 << 20);
  check_encode("f32_to_bf16", xs, f32_to_bf16, r::bf16_encode, 8, 7);
  check_encode("f32_to_f16", xs, f32_to_f16, r::f16_encode, 5, 10);
  std::vector<uint16_t> out(xs.size());
  convert_from_f32(xs.data(), out.data(), DType::BF16, xs.size());
  size_t i = 0;
  check_encode("convert_from_f32 bf16", xs, [&](float) { return out[i++]; }, r::bf16_encode, 8, 7);
  convert_from_f32(xs.data(), out.data(), DType::F16, xs.size());
  i = 0;
  check_encode("convert_from_f32 f16", xs, [&](float) { return out[i++]; }, r::f16_encode, 5, 10);
}

// The CPU backend's cast (f32 <-> bf16) and round_bf16, over the same values and every bf16 pattern.
TEST(Dtype, CpuBackendCastAndRoundBf16) {
  auto be = make_cpu_backend();
  auto xs = r::encode_inputs(1 << 18, false);
  const int64_t n = int64_t(xs.size());
  std::vector<uint16_t> h(xs.size());
  std::vector<float> rounded = xs;
  Tensor X = Tensor::f32(xs.data(), {n}), Hh(h.data(), DType::BF16, {n}), R = Tensor::f32(rounded.data(), {n});
  be->cast(X, Hh);
  size_t i = 0;
  check_encode("cast f32->bf16", xs, [&](float) { return h[i++]; }, r::bf16_encode, 8, 7);
  be->round_bf16(R);
  size_t bad = 0;
  for (size_t j = 0; j < xs.size(); ++j) {
    const auto res = same_value(rounded[j], r::bf16_value(r::bf16_encode(xs[j])));
    if (!res && ++bad <= 5) ADD_FAILURE() << "round_bf16 " << xs[j] << ": " << res.message();
  }
  EXPECT_EQ(bad, 0u);
  std::vector<uint16_t> all(65536);
  std::vector<float> wide(65536);
  for (uint32_t p = 0; p < 65536; ++p) all[p] = uint16_t(p);
  Tensor A(all.data(), DType::BF16, {65536}), W = Tensor::f32(wide.data(), {65536});
  be->cast(A, W);
  check_decode_all("cast bf16->f32", [&](uint16_t p) { return wide[p]; }, r::bf16_value);
}

// PyTorch's conversions (Debian's python3-torch) as a second, external reference.
TEST(Dtype, MatchesPyTorch) {
  std::string why;
  if (!torch_available(&why)) OOMB_MISSING_REFERENCE(why);
  const auto dir = temp_dir();
  const auto xs = r::encode_inputs(1 << 16, false);
  write_bytes(dir / "in.f32", std::string(reinterpret_cast<const char*>(xs.data()), xs.size() * 4));
  const std::string cmd = fmt::format("{} {}/tests/oracle/torch_dtype_ref.py {} {} > {} 2>&1", torch_python(),
                                      source_dir().string(), (dir / "in.f32").string(), (dir / "out.bin").string(),
                                      (dir / "log").string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_text(dir / "log");
  const std::string b = read_text(dir / "out.bin");
  ASSERT_EQ(b.size(), 2 * 65536 * 4 + 2 * xs.size() * 2) << "torch_dtype_ref.py wrote an unexpected size";
  std::vector<float> bf_dec(65536), f16_dec(65536);
  std::vector<uint16_t> bf_enc(xs.size()), f16_enc(xs.size());
  const char* p = b.data();
  for (auto* v : {&bf_dec, &f16_dec}) std::memcpy(v->data(), p, 65536 * 4), p += 65536 * 4;
  for (auto* v : {&bf_enc, &f16_enc}) std::memcpy(v->data(), p, xs.size() * 2), p += xs.size() * 2;
  // the in-test reference agrees with torch (NaN as NaN: torch drops a NaN's sign)...
  check_decode_all("torch bf16 decode vs reference", [&](uint16_t h) { return bf_dec[h]; }, r::bf16_value);
  check_decode_all("torch f16 decode vs reference", [&](uint16_t h) { return f16_dec[h]; }, r::f16_value);
  // ...and so does the engine
  size_t bad = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const bool ok = same_pattern(f32_to_bf16(xs[i]), bf_enc[i], 8, 7, false) &&
                    same_pattern(f32_to_f16(xs[i]), f16_enc[i], 5, 10, false);
    if (!ok && ++bad <= 5)
      ADD_FAILURE() << fmt::format("{} (0x{:08x}): engine bf16 0x{:04x} f16 0x{:04x}, torch bf16 0x{:04x} f16 0x{:04x}",
                                   xs[i], r::bits_of(xs[i]), f32_to_bf16(xs[i]), f32_to_f16(xs[i]), bf_enc[i],
                                   f16_enc[i]);
  }
  EXPECT_EQ(bad, 0u) << "of " << xs.size() << " values encoded unlike torch";
  bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float e[2] = {bf16_to_f32(uint16_t(h)), f16_to_f32(uint16_t(h))}, t[2] = {bf_dec[h], f16_dec[h]};
    for (int k = 0; k < 2; ++k)
      if (!(std::isnan(e[k]) ? std::isnan(t[k]) : r::bits_of(e[k]) == r::bits_of(t[k])) && ++bad <= 5)
        ADD_FAILURE() << fmt::format("{} 0x{:04x}: engine {} torch {}", k ? "f16" : "bf16", h, e[k], t[k]);
  }
  EXPECT_EQ(bad, 0u) << "patterns decoded unlike torch";
}
