#include "hf/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "dtype_reference.h"
#include "model_fixture.h"
#include "test_util.h"

namespace oomb {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using oomb::testing::read_text;
using oomb::testing::temp_dir;
using oomb::testing::write_bytes;

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return s;
}
// A file from a hand-written header and `data` zero bytes of data section.
std::string st_file(const std::string& header, size_t data = 0) { return le64(header.size()) + header + std::string(data, '\0'); }

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(g());
  return v;
}

size_t nbytes(DType dt, const std::vector<int64_t>& shape) {
  size_t n = dtype_size(dt);
  for (int64_t d : shape) n *= size_t(d);
  return n;
}

TEST(Safetensors, RoundTripEveryDtypeScalarAndEmpty) {
  auto dir = temp_dir();
  struct Spec {
    std::string name;
    DType dt;
    std::vector<int64_t> shape;
  };
  std::vector<Spec> specs = {{"f32", DType::F32, {2, 3}},   {"bf16", DType::BF16, {5}}, {"f16", DType::F16, {3, 1}},
                             {"f64", DType::F64, {2, 2}},   {"i32", DType::I32, {7}},  {"u32", DType::U32, {1, 2}},
                             {"i64", DType::I64, {3}},      {"scalar", DType::F32, {}}, {"empty", DType::BF16, {0}},
                             {"empty2", DType::I64, {2, 0, 3}}};
  std::vector<std::vector<uint8_t>> data;
  std::vector<SaveTensor> ts;
  for (size_t i = 0; i < specs.size(); ++i) data.push_back(random_bytes(nbytes(specs[i].dt, specs[i].shape), uint32_t(i)));
  for (size_t i = 0; i < specs.size(); ++i)
    ts.push_back({specs[i].name, specs[i].dt, specs[i].shape, data[i].empty() ? nullptr : data[i].data()});
  save_safetensors(dir / "a.safetensors", ts, {{"step", "12"}});

  const std::string raw = read_text(dir / "a.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(raw[8], '{');

  auto f = SafetensorsFile::open(dir / "a.safetensors");
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("step"), "12");
  ASSERT_EQ(f.tensors().size(), specs.size());
  uint64_t prev_end = 0;
  for (const TensorInfo& t : f.tensors()) {
    EXPECT_GE(t.begin, prev_end);
    prev_end = t.end;
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorInfo* t = f.find(specs[i].name);
    ASSERT_NE(t, nullptr) << specs[i].name;
    EXPECT_EQ(t->dtype, specs[i].dt);
    EXPECT_EQ(t->shape, specs[i].shape);
    EXPECT_EQ(t->end - t->begin, data[i].size());
    std::vector<uint8_t> got(data[i].size());
    f.read_raw(*t, got.data());
    EXPECT_EQ(got, data[i]) << specs[i].name;
  }
  EXPECT_EQ(f.find("scalar")->numel(), 1);
  EXPECT_EQ(f.find("empty2")->numel(), 0);
  EXPECT_EQ(f.find("nope"), nullptr);
}

TEST(Safetensors, ReadF32ConvertsHalfTypesAndChecksShape) {
  auto dir = temp_dir();
  std::vector<float> ref = oomb::testing::randn(1000, 7);
  std::vector<uint16_t> bf(ref.size()), hf(ref.size());
  std::vector<double> db(ref.begin(), ref.end());
  for (size_t i = 0; i < ref.size(); ++i)  // the independent encodings (tests/dtype_reference.h)
    bf[i] = testing::ref::bf16_encode(ref[i]), hf[i] = testing::ref::f16_encode(ref[i]);
  std::vector<int32_t> ints = {1, 2, 3};
  std::vector<SaveTensor> ts = {{"bf", DType::BF16, {10, 100}, bf.data()}, {"hf", DType::F16, {1000}, hf.data()},
                                {"db", DType::F64, {1000}, db.data()},     {"f", DType::F32, {1000}, ref.data()},
                                {"i", DType::I32, {3}, ints.data()}};
  save_safetensors_dir(dir, ts);
  auto m = SafetensorsModel::open(dir);
  EXPECT_EQ(m.names(), (std::vector<std::string>{"bf", "db", "f", "hf", "i"}));
  std::vector<float> out(1000);
  m.read_f32("bf", out.data(), {10, 100});
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], testing::ref::bf16_value(bf[i])) << i;
  m.read_f32("hf", out.data());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], testing::ref::f16_value(hf[i])) << i;
  m.read_f32("db", out.data(), {1000});
  EXPECT_EQ(out, ref);
  m.read_f32("f", out.data(), {1000});
  EXPECT_EQ(out, ref);
  std::vector<int32_t> iout(3);
  m.read_raw("i", iout.data());
  EXPECT_EQ(iout, ints);

  std::string d = dir.string();
  EXPECT_THAT(error_of([&] { m.read_f32("bf", out.data(), {100, 10}); }),
              HasSubstr(d + ": tensor 'bf' has shape [10, 100], expected [100, 10]"));
  EXPECT_THAT(error_of([&] { m.read_f32("i", out.data()); }), HasSubstr("tensor 'i' has dtype I32"));
  EXPECT_THAT(error_of([&] { m.get("missing"); }), HasSubstr(d + ": tensor 'missing' not found"));
  EXPECT_EQ(m.find("missing"), nullptr);
  EXPECT_EQ(m.get("hf").shape, (std::vector<int64_t>{1000}));
}

std::vector<std::string> model_files(const fs::path& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

// Every BF16 and F16 bit pattern read through the file reader, against the IEEE definitions written
// in tests/dtype_reference.h (not core/dtype's own conversions).
TEST(Safetensors, ReadF32DecodesEveryHalfPattern) {
  auto dir = temp_dir();
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = uint16_t(h);
  std::vector<SaveTensor> ts = {{"bf", DType::BF16, {256, 256}, all.data()}, {"hf", DType::F16, {65536}, all.data()}};
  save_safetensors_dir(dir, ts);
  auto m = SafetensorsModel::open(dir);
  std::vector<float> out(65536);
  for (const char* name : {"bf", "hf"}) {
    m.read_f32(name, out.data());
    int bad = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
      const double want = name[0] == 'b' ? testing::ref::bf16_value(uint16_t(h)) : testing::ref::f16_value(uint16_t(h));
      const bool ok = std::isnan(want) ? std::isnan(out[h]) && std::signbit(out[h]) == std::signbit(want)
                                       : double(out[h]) == want && std::signbit(out[h]) == std::signbit(want);
      if (!ok && ++bad <= 5) ADD_FAILURE() << name << " pattern " << h << ": read " << out[h] << ", want " << want;
    }
    EXPECT_EQ(bad, 0) << name;
  }
}

// A checkpoint saved in BF16 or F16 holds the round-to-nearest-even encodings of the fp32 weights
// (the same seed saved in F32 gives those), per the independent reference.
TEST(Safetensors, LowPrecisionSaveRoundsToNearestEven) {
  auto dir = temp_dir();
  const auto cfg = testing::tiny_config_json("llama", 2);
  testing::write_tiny_model(dir / "f32", cfg, 5, DType::F32);
  testing::write_tiny_model(dir / "bf16", cfg, 5, DType::BF16);
  testing::write_tiny_model(dir / "f16", cfg, 5, DType::F16);
  const auto f32 = SafetensorsModel::open(dir / "f32");
  const auto bf = SafetensorsModel::open(dir / "bf16"), hf = SafetensorsModel::open(dir / "f16");
  size_t n = 0, f16_subnormal = 0;
  for (const std::string& name : f32.names()) {
    const TensorInfo& t = f32.get(name);
    ASSERT_EQ(bf.get(name).dtype, DType::BF16) << name;
    ASSERT_EQ(hf.get(name).dtype, DType::F16) << name;
    std::vector<float> x(size_t(t.numel()));
    std::vector<uint16_t> b(x.size()), h(x.size());
    f32.read_raw(name, x.data());
    bf.read_raw(name, b.data());
    hf.read_raw(name, h.data());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(b[i], testing::ref::bf16_encode(x[i])) << name << "[" << i << "] = " << x[i];
      ASSERT_EQ(h[i], testing::ref::f16_encode(x[i])) << name << "[" << i << "] = " << x[i];
      f16_subnormal += std::fabs(x[i]) < 6.1e-5f;
    }
    n += x.size();
  }
  EXPECT_GT(n, 10000u);
  EXPECT_GT(f16_subnormal, 0u) << "some weights should land in f16's subnormal range";
}

TEST(Safetensors, ShardedRoundTripAndStaleCleanup) {
  auto dir = temp_dir();
  std::vector<std::vector<float>> data;
  std::vector<SaveTensor> ts;
  for (int i = 0; i < 7; ++i) data.push_back(oomb::testing::randn(size_t(10 + i), uint64_t(i)));
  for (int i = 0; i < 7; ++i) ts.push_back({fmt::format("t{}", i), DType::F32, {10 + i}, data[size_t(i)].data()});
  save_safetensors_dir(dir, ts, 100);  // 40, 44, 48, ..., 64 bytes: shards {t0 t1} {t2 t3} {t4} {t5} {t6}
  auto files = model_files(dir);
  ASSERT_EQ(files.size(), 6u);
  EXPECT_EQ(files[0], "model-00001-of-00005.safetensors");
  EXPECT_EQ(files[5], "model.safetensors.index.json");
  auto idx = nlohmann::json::parse(read_text(dir / "model.safetensors.index.json"));
  EXPECT_EQ(idx["metadata"]["total_size"], 4 * (10 + 11 + 12 + 13 + 14 + 15 + 16));
  EXPECT_EQ(idx["weight_map"]["t1"], "model-00001-of-00005.safetensors");
  EXPECT_EQ(idx["weight_map"]["t3"], "model-00002-of-00005.safetensors");
  EXPECT_EQ(idx["weight_map"]["t6"], "model-00005-of-00005.safetensors");

  auto check = [&] {
    auto m = SafetensorsModel::open(dir);
    ASSERT_EQ(m.names().size(), 7u);
    for (int i = 0; i < 7; ++i) {
      std::vector<float> out(size_t(10 + i));
      m.read_f32(fmt::format("t{}", i), out.data(), {10 + i});
      EXPECT_EQ(out, data[size_t(i)]);
    }
  };
  check();
  save_safetensors_dir(dir, ts, 150);  // fewer shards: the 5-shard files are stale
  EXPECT_EQ(model_files(dir).size(), 4u);
  EXPECT_EQ(model_files(dir)[0], "model-00001-of-00003.safetensors");
  check();
  write_bytes(dir / "model-00009-of-00009.safetensors.tmp.99", "junk");  // a crashed save's leftover
  write_bytes(dir / "config.json", "{}");
  save_safetensors_dir(dir, ts);  // fits: one file
  EXPECT_EQ(model_files(dir), (std::vector<std::string>{"config.json", "model.safetensors"}));
  check();
  save_safetensors_dir(dir, ts, 100);  // back to shards: the single file goes
  EXPECT_EQ(model_files(dir).size(), 7u);  // 5 shards, the index and config.json
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
  check();
}

TEST(Safetensors, ModelOpensSingleFileAndReportsMissing) {
  auto dir = temp_dir();
  float x = 3;
  std::vector<SaveTensor> ts = {{"x", DType::F32, {}, &x}};
  save_safetensors(dir / "w.safetensors", ts);
  auto m = SafetensorsModel::open(dir / "w.safetensors");
  float y = 0;
  m.read_f32("x", &y);
  EXPECT_EQ(y, 3.0f);
  EXPECT_THAT(error_of([&] { SafetensorsModel::open(dir / "nope"); }), HasSubstr("no such file or directory"));
  EXPECT_THAT(error_of([&] { SafetensorsModel::open(dir); }),
              HasSubstr(dir.string() + ": neither model.safetensors nor model.safetensors.index.json found"));
  EXPECT_THAT(error_of([&] { SafetensorsFile::open(dir); }), HasSubstr("not a regular file"));
}

TEST(Safetensors, AcceptsEdgeCaseHeaders) {
  auto dir = temp_dir();
  write_bytes(dir / "a", st_file("{}"));
  EXPECT_TRUE(SafetensorsFile::open(dir / "a").tensors().empty());
  write_bytes(dir / "b", st_file(R"({"__metadata__":{},"z":{"dtype":"F16","shape":[0],"data_offsets":[4,4]},)"
                                 R"("w":{"dtype":"I32","shape":[],"data_offsets":[0,4]}}   )", 4));
  auto f = SafetensorsFile::open(dir / "b");
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "w");
}

// ---- malformed files: each case builds the bytes by hand and expects its own message ----

struct BadCase {
  const char* name;
  std::string bytes;
  std::string error;
};
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }


std::string one(const std::string& entry, size_t data) { return st_file(R"({"w":)" + entry + "}", data); }
const std::string kDeep = std::string(40, '[') + std::string(40, ']');

const BadCase kBadCases[] = {
    {"Empty", "", "file is 0 bytes, shorter than the 8-byte header length"},
    {"Short", "abc", "file is 3 bytes, shorter than the 8-byte header length"},
    {"HeaderLengthZero", le64(0) + "{}", "header length is 0"},
    {"HeaderTooLarge", le64(100'000'001) + "{}", "header length 100000001 exceeds the 100000000-byte limit"},
    {"HeaderPastEnd", le64(50) + "{}", "header length 50 runs past the end of the 10-byte file"},
    {"InvalidJson", st_file(R"({"w":)"), "header is not valid JSON"},
    {"InvalidUtf8", st_file("{\"\xff\":1}"), "header is not valid JSON"},
    {"TrailingGarbage", st_file("{} x"), "header is not valid JSON"},
    {"NotObject", st_file("[1, 2]"), "header is not a JSON object"},
    {"NoLeadingBrace", st_file(" {}"), "header does not start with '{'"},
    {"DuplicateTensor", st_file(R"({"w":1,"w":2})"), "header has duplicate key 'w'"},
    {"DuplicateField", one(R"({"dtype":"F32","dtype":"F32","shape":[],"data_offsets":[0,4]})", 4),
     "header has duplicate key 'dtype' inside 'w'"},
    {"TooDeep", st_file(R"({"__metadata__":)" + kDeep + "}"), "JSON nested deeper than 32 levels"},
    {"EntryNotObject", one("[1]", 0), "tensor 'w': entry is not a JSON object"},
    {"MissingDtype", one(R"({"shape":[],"data_offsets":[0,4]})", 4), "tensor 'w': missing field 'dtype'"},
    {"MissingShape", one(R"({"dtype":"F32","data_offsets":[0,4]})", 4), "tensor 'w': missing field 'shape'"},
    {"MissingOffsets", one(R"({"dtype":"F32","shape":[]})", 4), "tensor 'w': missing field 'data_offsets'"},
    {"DtypeNotString", one(R"({"dtype":4,"shape":[],"data_offsets":[0,4]})", 4),
     "tensor 'w': field 'dtype' is not a string"},
    {"UnknownDtype", one(R"({"dtype":"F31","shape":[],"data_offsets":[0,4]})", 4), "tensor 'w': unknown dtype 'F31'"},
    {"UnsupportedDtype", one(R"({"dtype":"BOOL","shape":[],"data_offsets":[0,1]})", 1),
     "tensor 'w': dtype 'BOOL' is not supported"},
    {"ShapeNotArray", one(R"({"dtype":"F32","shape":1,"data_offsets":[0,4]})", 4),
     "tensor 'w': field 'shape' is not an array"},
    {"NegativeDim", one(R"({"dtype":"F32","shape":[1,-2],"data_offsets":[0,4]})", 4),
     "tensor 'w': shape[1] is negative (-2)"},
    {"FloatDim", one(R"({"dtype":"F32","shape":[1.0],"data_offsets":[0,4]})", 4),
     "tensor 'w': shape[0] is not an integer"},
    {"StringDim", one(R"({"dtype":"F32","shape":["1"],"data_offsets":[0,4]})", 4),
     "tensor 'w': shape[0] is not an integer"},
    {"NumelOverflow", one(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]})", 4),
     "tensor 'w': element count overflows at shape[1]"},
    {"HugeDim", one(R"({"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]})", 4),
     "tensor 'w': element count overflows at shape[0]"},
    {"ByteSizeOverflow", one(R"({"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,4]})", 4),
     "tensor 'w': byte size of shape [4611686018427387904] overflows"},
    {"OffsetsNotArray", one(R"({"dtype":"F32","shape":[],"data_offsets":4})", 4),
     "tensor 'w': field 'data_offsets' is not an array of 2 integers"},
    {"OffsetsThree", one(R"({"dtype":"F32","shape":[],"data_offsets":[0,4,4]})", 4),
     "tensor 'w': field 'data_offsets' is not an array of 2 integers"},
    {"OffsetNegative", one(R"({"dtype":"F32","shape":[],"data_offsets":[-4,0]})", 4),
     "tensor 'w': data_offsets[0] is negative (-4)"},
    {"OffsetFloat", one(R"({"dtype":"F32","shape":[],"data_offsets":[0,4.5]})", 4),
     "tensor 'w': data_offsets[1] is not an integer"},
    {"BeginAfterEnd", one(R"({"dtype":"F32","shape":[0],"data_offsets":[8,4]})", 8),
     "tensor 'w': data_offsets begin 8 is after end 4"},
    {"SizeMismatch", one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})", 4),
     "tensor 'w': data_offsets [0, 4) hold 4 bytes but F32 [2] needs 8"},
    {"EndPastData", one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 4),
     "tensor 'w': data_offsets end 8 is past the end of the 4-byte data section"},
    {"Overlap",
     st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
     "tensors 'a' [0, 8) and 'b' [4, 12) overlap"},
    {"Gap",
     st_file(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
             R"("b":{"dtype":"F32","shape":[],"data_offsets":[8,12]}})", 12),
     "gap of 4 bytes in the data section at offset 4, before tensor 'b'"},
    {"GapAtStart", one(R"({"dtype":"F32","shape":[],"data_offsets":[4,8]})", 8),
     "gap of 4 bytes in the data section at offset 0, before tensor 'w'"},
    {"TrailingBytes", one(R"({"dtype":"F32","shape":[],"data_offsets":[0,4]})", 6),
     "2 trailing bytes at the end of the data section belong to no tensor"},
    {"DataWithoutTensors", st_file("{}", 3), "3 trailing bytes at the end of the data section belong to no tensor"},
    {"MetadataNotObject", st_file(R"({"__metadata__":"x"})"), "__metadata__ is not a JSON object"},
    {"MetadataValueNotString", st_file(R"({"__metadata__":{"k":1}})"),
     "__metadata__ value for key 'k' is not a string"},
};

class Malformed : public ::testing::TestWithParam<BadCase> {};

TEST_P(Malformed, FailsWithSpecificMessage) {
  const fs::path p = temp_dir() / "bad.safetensors";
  write_bytes(p, GetParam().bytes);
  std::string msg = error_of([&] { SafetensorsFile::open(p); });
  EXPECT_THAT(msg, StartsWith(p.string() + ": "));
  EXPECT_THAT(msg, HasSubstr(GetParam().error));
  // the parser gives the same answer on the bytes alone
  std::string msg2 = error_of([&] { parse_safetensors_header(GetParam().bytes, GetParam().bytes.size(), p); });
  EXPECT_EQ(msg, msg2);
}

INSTANTIATE_TEST_SUITE_P(Safetensors, Malformed, ::testing::ValuesIn(kBadCases),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- malformed sharded directories ----

class BadIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = temp_dir();
    std::vector<SaveTensor> s1 = {{"a", DType::F32, {}, &x}}, s2 = {{"b", DType::F32, {}, &x}};
    save_safetensors(dir / "s1.safetensors", s1);
    save_safetensors(dir / "s2.safetensors", s2);
  }
  std::string open_with(const std::string& index) {
    write_bytes(dir / "model.safetensors.index.json", index);
    return error_of([&] { SafetensorsModel::open(dir); });
  }
  std::string ip() const { return (dir / "model.safetensors.index.json").string(); }
  fs::path dir;
  float x = 1;
};

TEST_F(BadIndex, ValidIndexOpens) {
  EXPECT_EQ(open_with(R"({"weight_map":{"a":"s1.safetensors","b":"./s2.safetensors"}})"), "(no error)");
}
TEST_F(BadIndex, InvalidJson) { EXPECT_THAT(open_with("{"), HasSubstr(ip() + ": index is not valid JSON")); }
TEST_F(BadIndex, NotObject) { EXPECT_THAT(open_with("[]"), HasSubstr(ip() + ": index is not a JSON object")); }
TEST_F(BadIndex, MissingWeightMap) {
  EXPECT_THAT(open_with(R"({"metadata":{}})"), HasSubstr(ip() + ": index has no 'weight_map'"));
}
TEST_F(BadIndex, WeightMapNotObject) {
  EXPECT_THAT(open_with(R"({"weight_map":[]})"), HasSubstr("'weight_map' is not a JSON object"));
}
TEST_F(BadIndex, EntryNotString) {
  EXPECT_THAT(open_with(R"({"weight_map":{"a":1}})"), HasSubstr("weight_map entry for tensor 'a' is not a string"));
}
TEST_F(BadIndex, DuplicateEntry) {
  EXPECT_THAT(open_with(R"({"weight_map":{"a":"s1.safetensors","a":"s2.safetensors"}})"),
              HasSubstr("index has duplicate key 'a' inside 'weight_map'"));
}
TEST_F(BadIndex, ShardMissing) {
  EXPECT_THAT(open_with(R"({"weight_map":{"a":"s1.safetensors","b":"s3.safetensors"}})"),
              HasSubstr(ip() + ": shard 's3.safetensors' (holding tensor 'b') not found"));
}
TEST_F(BadIndex, TensorAbsentFromShard) {
  EXPECT_THAT(open_with(R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors","c":"s2.safetensors"}})"),
              HasSubstr("tensor 'c' is mapped to shard 's2.safetensors' but that shard does not hold it"));
}
TEST_F(BadIndex, TensorMappedToWrongShard) {
  EXPECT_THAT(open_with(R"({"weight_map":{"a":"s2.safetensors","b":"s1.safetensors"}})"),
              HasSubstr("tensor 'a' is mapped to shard 's2.safetensors' but that shard does not hold it"));
}
TEST_F(BadIndex, TensorInTwoShards) {
  std::vector<SaveTensor> s3 = {{"a", DType::F32, {}, &x}};
  save_safetensors(dir / "s3.safetensors", s3);
  EXPECT_THAT(open_with(R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors","c":"s3.safetensors"}})"),
              HasSubstr("tensor 'a' is in two shards, 's1.safetensors' and 's3.safetensors'"));
}
TEST_F(BadIndex, UnlistedTensor) {
  EXPECT_THAT(open_with(R"({"weight_map":{"a":"s1.safetensors"}})"), HasSubstr("(no error)"));
  std::vector<SaveTensor> s12 = {{"a", DType::F32, {}, &x}, {"z", DType::F32, {}, &x}};
  save_safetensors(dir / "s1.safetensors", s12);
  EXPECT_THAT(open_with(R"({"weight_map":{"a":"s1.safetensors"}})"),
              HasSubstr("tensor 'z' in shard 's1.safetensors' is not listed in weight_map"));
}
TEST_F(BadIndex, ShardEscapesDirectory) {
  EXPECT_THAT(open_with(R"({"weight_map":{"a":"../s1.safetensors"}})"),
              HasSubstr("shard '../s1.safetensors' of tensor 'a' is outside the model directory"));
  EXPECT_THAT(open_with(R"({"weight_map":{"a":"x/../../s1.safetensors"}})"), HasSubstr("outside the model directory"));
  EXPECT_THAT(open_with(R"({"weight_map":{"a":"/etc/passwd"}})"), HasSubstr("outside the model directory"));
  EXPECT_THAT(open_with(R"({"weight_map":{"a":""}})"), HasSubstr("outside the model directory"));
}
TEST_F(BadIndex, BadShardNamesItself) {
  write_bytes(dir / "s2.safetensors", "xyz");
  EXPECT_THAT(open_with(R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})"),
              HasSubstr((dir / "s2.safetensors").string() + ": file is 3 bytes"));
}

// ---- writer checks and atomicity ----

bool has_temp_files(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
  return false;
}

TEST(Safetensors, SaveRejectsBadInputAndKeepsTheOldFile) {
  auto dir = temp_dir();
  const fs::path p = dir / "m.safetensors";
  float v[2] = {1, 2};
  std::vector<SaveTensor> good = {{"w", DType::F32, {2}, v}};
  save_safetensors(p, good);
  const std::string before = read_text(p);
  auto bad = [&](std::vector<SaveTensor> ts) { return error_of([&] { save_safetensors(p, ts); }); };
  EXPECT_THAT(bad({{"w", DType::F32, {2}, v}, {"w", DType::F32, {1}, v}}), HasSubstr("duplicate tensor name 'w'"));
  EXPECT_THAT(bad({{"w", DType::F32, {2}, nullptr}}), HasSubstr("tensor 'w' has null data for 8 bytes"));
  EXPECT_THAT(bad({{"w", DType::F32, {-1}, v}}), HasSubstr("tensor 'w' has a negative dim in shape [-1]"));
  EXPECT_THAT(bad({{"__metadata__", DType::F32, {}, v}}), HasSubstr("'__metadata__' is reserved"));
  EXPECT_THAT(bad({{"w", DType::F32, {1LL << 62, 4}, v}}), HasSubstr("byte size of shape"));
  EXPECT_THAT(bad({{"\xff", DType::F32, {1}, v}}), HasSubstr("cannot encode the header"));
  EXPECT_THAT(error_of([&] { save_safetensors_dir(dir, std::vector<SaveTensor>{{"w", DType::F32, {1}, nullptr}}); }),
              HasSubstr("save_safetensors_dir: " + dir.string() + ": tensor 'w' has null data"));
  EXPECT_EQ(read_text(p), before);
  EXPECT_FALSE(has_temp_files(dir));
  // a failure after the temp file is written (renaming over a non-empty directory) leaves no temp behind
  fs::create_directories(dir / "d.safetensors" / "x");
  EXPECT_THAT(error_of([&] { save_safetensors(dir / "d.safetensors", good); }), HasSubstr("cannot rename"));
  EXPECT_FALSE(has_temp_files(dir));
  EXPECT_TRUE(fs::is_directory(dir / "d.safetensors" / "x"));
  std::vector<float> out(2);
  SafetensorsModel::open(p).read_f32("w", out.data(), {2});
  EXPECT_EQ(out, (std::vector<float>{1, 2}));
}

// SafetensorsWriter, fed in pieces that cut across tensors, writes save_safetensors' bytes; a piece
// past the end or a commit short of it is an error that leaves no file (nor a temp) behind.
TEST(Safetensors, WriterInPiecesEqualsWholeSave) {
  auto dir = temp_dir();
  std::vector<float> a(37), b(3 * 5);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i) * 0.25f - 3;
  for (size_t i = 0; i < b.size(); ++i) b[i] = -float(i) / 7;
  const std::vector<SaveTensor> ts = {{"a.exp_avg", DType::F32, {37}, a.data()}, {"b.exp_avg", DType::F32, {3, 5}, b.data()}};
  save_safetensors(dir / "whole.safetensors", ts, {{"oomb", "AdamW moments"}});
  std::vector<float> all(a);
  all.insert(all.end(), b.begin(), b.end());
  std::vector<SaveTensor> layout = ts;
  for (SaveTensor& t : layout) t.data = nullptr;  // not read
  SafetensorsWriter w(dir / "pieces.safetensors", layout, {{"oomb", "AdamW moments"}});
  for (size_t at = 0; at < all.size(); at += 10) w.write(all.data() + at, std::min<size_t>(10, all.size() - at) * 4);
  w.commit();
  EXPECT_EQ(read_text(dir / "pieces.safetensors"), read_text(dir / "whole.safetensors"));
  {  // negative controls: one value different gives another file; short and long writes are refused
    all[40] += 1;
    SafetensorsWriter x(dir / "other.safetensors", layout, {{"oomb", "AdamW moments"}});
    x.write(all.data(), all.size() * 4);
    x.commit();
    EXPECT_NE(read_text(dir / "other.safetensors"), read_text(dir / "whole.safetensors"));
  }
  EXPECT_THAT(error_of([&] {
                SafetensorsWriter x(dir / "short.safetensors", layout);
                x.write(all.data(), 8);
                x.commit();
              }),
              HasSubstr("the tensors' last 200 bytes were never written"));
  EXPECT_THAT(error_of([&] {
                SafetensorsWriter x(dir / "long.safetensors", layout);
                x.write(all.data(), all.size() * 4);
                x.write(all.data(), 4);
              }),
              HasSubstr("4 bytes written past the tensors' end"));
  EXPECT_FALSE(fs::exists(dir / "short.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "long.safetensors"));
  EXPECT_FALSE(has_temp_files(dir));
}

TEST(Safetensors, ReadFailsCleanlyWhenFileShrinks) {
  auto dir = temp_dir();
  std::vector<float> v(64, 1.0f);
  std::vector<SaveTensor> ts = {{"w", DType::F32, {64}, v.data()}};
  save_safetensors(dir / "a.safetensors", ts);
  auto f = SafetensorsFile::open(dir / "a.safetensors");
  fs::resize_file(dir / "a.safetensors", 100);
  std::vector<float> out(64);
  EXPECT_THAT(error_of([&] { f.read_raw(f.tensors()[0], out.data()); }), HasSubstr("unexpected end of file"));
  TensorInfo other = f.tensors()[0];
  other.end += 4;
  EXPECT_THAT(error_of([&] { f.read_raw(other, out.data()); }), HasSubstr("tensor 'w' is not in this file"));
}

}  // namespace
}  // namespace oomb
