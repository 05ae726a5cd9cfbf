#include "hf/safetensors.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/memory.h"

namespace oomb {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr int kMaxJsonDepth = 32;
constexpr const char* kIndexName = "model.safetensors.index.json";
// safetensors dtypes this engine does not store
constexpr std::string_view kOtherDtypes[] = {"BOOL",    "U8",      "I8",      "I16",         "U16",        "U64",
                                             "F8_E4M3", "F8_E5M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F4",
                                             "F6_E2M3", "F6_E3M2", "C64"};

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// Parses JSON, rejecting duplicate keys (nlohmann would keep the last) and nesting deeper than kMaxJsonDepth.
// `what` ("<path>: header") prefixes errors.
json parse_json_strict(std::string_view text, const std::string& what) {
  std::vector<std::set<std::string>> keys;  // keys of the open object at each depth
  std::string top_key, dup, dup_where;
  bool too_deep = false;
  auto cb = [&](int depth, json::parse_event_t ev, json& v) {
    if (depth > kMaxJsonDepth) {
      too_deep = true;
      return false;
    }
    if (ev == json::parse_event_t::object_start) {
      keys.resize(size_t(depth) + 2);
      keys[size_t(depth) + 1].clear();
    } else if (ev == json::parse_event_t::key) {
      const auto& k = v.get_ref<const std::string&>();
      if (!keys[size_t(depth)].insert(k).second && dup.empty()) {
        dup = k;
        dup_where = depth == 1 ? "" : fmt::format(" inside '{}'", top_key);
      }
      if (depth == 1) top_key = k;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), cb);
  } catch (const json::exception& e) {
    fail("{} is not valid JSON: {}", what, e.what());
  }
  OOMB_CHECK(!too_deep, "{}: JSON nested deeper than {} levels", what, kMaxJsonDepth);
  OOMB_CHECK(dup.empty(), "{} has duplicate key '{}'{}", what, dup, dup_where);
  return j;
}

// A non-negative JSON integer, or an error naming `field`.
uint64_t get_uint(const json& v, const std::string& p, const std::string& name, const std::string& field) {
  OOMB_CHECK(v.is_number_integer(), "{}: tensor '{}': {} is not an integer", p, name, field);
  OOMB_CHECK(v.is_number_unsigned(), "{}: tensor '{}': {} is negative ({})", p, name, field, v.get<int64_t>());
  return v.get<uint64_t>();
}

TensorInfo parse_entry(const std::string& name, const json& v, const std::string& p, uint64_t data_size) {
  TensorInfo t;
  t.name = name;
  OOMB_CHECK(v.is_object(), "{}: tensor '{}': entry is not a JSON object", p, name);
  auto field = [&](const char* f) -> const json& {
    auto it = v.find(f);
    OOMB_CHECK(it != v.end(), "{}: tensor '{}': missing field '{}'", p, name, f);
    return *it;
  };
  const json& dt = field("dtype");
  OOMB_CHECK(dt.is_string(), "{}: tensor '{}': field 'dtype' is not a string", p, name);
  const auto& ds = dt.get_ref<const std::string&>();
  if (!dtype_from_safetensors(ds, &t.dtype)) {
    bool known = std::find(std::begin(kOtherDtypes), std::end(kOtherDtypes), ds) != std::end(kOtherDtypes);
    OOMB_CHECK(!known, "{}: tensor '{}': dtype '{}' is not supported (supported: F32, BF16, F16, F64, I32, U32, I64)",
               p, name, ds);
    fail("{}: tensor '{}': unknown dtype '{}'", p, name, ds);
  }
  const json& sh = field("shape");
  OOMB_CHECK(sh.is_array(), "{}: tensor '{}': field 'shape' is not an array", p, name);
  uint64_t numel = 1;
  for (size_t i = 0; i < sh.size(); ++i) {
    uint64_t d = get_uint(sh[i], p, name, fmt::format("shape[{}]", i));
    OOMB_CHECK(d <= uint64_t(INT64_MAX) && !__builtin_mul_overflow(numel, d, &numel) && numel <= uint64_t(INT64_MAX),
               "{}: tensor '{}': element count overflows at shape[{}]", p, name, i);
    t.shape.push_back(int64_t(d));
  }
  uint64_t nbytes = 0;
  OOMB_CHECK(!__builtin_mul_overflow(numel, dtype_size(t.dtype), &nbytes),
             "{}: tensor '{}': byte size of shape {} overflows", p, name, shape_str(t.shape));
  const json& off = field("data_offsets");
  OOMB_CHECK(off.is_array() && off.size() == 2, "{}: tensor '{}': field 'data_offsets' is not an array of 2 integers",
             p, name);
  t.begin = get_uint(off[0], p, name, "data_offsets[0]");
  t.end = get_uint(off[1], p, name, "data_offsets[1]");
  OOMB_CHECK(t.begin <= t.end, "{}: tensor '{}': data_offsets begin {} is after end {}", p, name, t.begin, t.end);
  OOMB_CHECK(t.end - t.begin == nbytes, "{}: tensor '{}': data_offsets [{}, {}) hold {} bytes but {} {} needs {}", p,
             name, t.begin, t.end, t.end - t.begin, ds, shape_str(t.shape), nbytes);
  OOMB_CHECK(t.end <= data_size, "{}: tensor '{}': data_offsets end {} is past the end of the {}-byte data section",
             p, name, t.end, data_size);
  return t;
}

uint64_t le64(const char* b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | uint8_t(b[i]);
  return v;
}

void pread_all(int fd, void* dst, uint64_t n, uint64_t off, const fs::path& path) {
  auto* d = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd, d, std::min<uint64_t>(n, 1u << 30), off_t(off));
    if (r < 0 && errno == EINTR) continue;
    OOMB_CHECK(r >= 0, "{}: read failed at offset {}: {}", path.string(), off, std::strerror(errno));
    OOMB_CHECK(r > 0, "{}: unexpected end of file at offset {} (file truncated since open?)", path.string(), off);
    d += r;
    off += uint64_t(r);
    n -= uint64_t(r);
  }
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsHeader parse_safetensors_header(std::string_view bytes, uint64_t file_size, const fs::path& path) {
  const std::string p = path.string();
  OOMB_CHECK(file_size >= 8, "{}: file is {} bytes, shorter than the 8-byte header length", p, file_size);
  OOMB_CHECK(bytes.size() >= 8, "{}: short read of the header length", p);
  const uint64_t n = le64(bytes.data());
  OOMB_CHECK(n != 0, "{}: header length is 0", p);
  OOMB_CHECK(n <= kMaxSafetensorsHeader, "{}: header length {} exceeds the {}-byte limit", p, n,
             kMaxSafetensorsHeader);
  OOMB_CHECK(n <= file_size - 8, "{}: header length {} runs past the end of the {}-byte file", p, n, file_size);
  OOMB_CHECK(bytes.size() - 8 >= n, "{}: short read of the {}-byte header", p, n);
  const std::string_view text = bytes.substr(8, n);
  json j = parse_json_strict(text, p + ": header");
  OOMB_CHECK(j.is_object(), "{}: header is not a JSON object", p);
  OOMB_CHECK(text[0] == '{', "{}: header does not start with '{{'", p);

  SafetensorsHeader h;
  h.data_start = 8 + n;
  const uint64_t data_size = file_size - h.data_start;
  for (const auto& [key, v] : j.items()) {
    if (key != "__metadata__") {
      h.tensors.push_back(parse_entry(key, v, p, data_size));
      continue;
    }
    OOMB_CHECK(v.is_object(), "{}: __metadata__ is not a JSON object", p);
    for (const auto& [k, s] : v.items()) {
      OOMB_CHECK(s.is_string(), "{}: __metadata__ value for key '{}' is not a string", p, k);
      h.metadata[k] = s.get<std::string>();
    }
  }
  // like the reference: sorted tensor byte ranges must tile the data section exactly
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t pos = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : h.tensors) {
    OOMB_CHECK(t.begin >= pos, "{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", p, prev->name, prev->begin,
               prev->end, t.name, t.begin, t.end);
    OOMB_CHECK(t.begin == pos, "{}: gap of {} bytes in the data section at offset {}, before tensor '{}'", p,
               t.begin - pos, pos, t.name);
    pos = t.end;
    prev = &t;
  }
  OOMB_CHECK(pos == data_size, "{}: {} trailing bytes at the end of the data section belong to no tensor", p,
             data_size - pos);
  return h;
}

// ---- SafetensorsFile ----

struct SafetensorsFile::Fd {
  int fd;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  ~Fd() { ::close(fd); }
};

SafetensorsFile SafetensorsFile::open(const fs::path& path) {
  SafetensorsFile f;
  f.path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  OOMB_CHECK(fd >= 0, "{}: cannot open: {}", path.string(), std::strerror(errno));
  f.fd_ = std::make_shared<Fd>(fd);
  struct stat st {};
  OOMB_CHECK(::fstat(fd, &st) == 0, "{}: cannot stat: {}", path.string(), std::strerror(errno));
  OOMB_CHECK(S_ISREG(st.st_mode), "{}: not a regular file", path.string());
  const uint64_t size = uint64_t(st.st_size);
  std::string buf(std::min<uint64_t>(size, 8), '\0');
  pread_all(fd, buf.data(), buf.size(), 0, path);
  if (size >= 8) {  // read the header only when its length is sane; the parser reports the rest
    uint64_t n = le64(buf.data());
    if (n <= kMaxSafetensorsHeader && n <= size - 8) {
      buf.resize(8 + n);
      pread_all(fd, buf.data() + 8, n, 8, path);
    }
  }
  f.h_ = parse_safetensors_header(buf, size, path);
  for (size_t i = 0; i < f.h_.tensors.size(); ++i) f.by_name_.emplace(f.h_.tensors[i].name, i);
  return f;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &h_.tensors[it->second];
}

void SafetensorsFile::read_range(const TensorInfo& t, uint64_t off, uint64_t n, void* dst) const {
  const TensorInfo* mine = find(t.name);
  OOMB_CHECK(mine && mine->begin == t.begin && mine->end == t.end, "{}: tensor '{}' is not in this file",
             path_.string(), t.name);
  const uint64_t size = t.end - t.begin;
  OOMB_CHECK(off <= size && n <= size - off, "{}: tensor '{}': read of bytes [{}, {}+{}) is outside its {} bytes",
             path_.string(), t.name, off, off, n, size);
  pread_all(fd_->fd, dst, n, h_.data_start + t.begin + off, path_);
}

void SafetensorsFile::read_raw(const TensorInfo& t, void* dst) const { read_range(t, 0, t.end - t.begin, dst); }

// ---- SafetensorsModel ----

SafetensorsModel SafetensorsModel::open(const fs::path& dir_or_file) {
  SafetensorsModel m;
  m.root_ = dir_or_file;
  const std::string r = dir_or_file.string();
  const fs::path index = dir_or_file / kIndexName;
  std::error_code ec;
  if (!fs::is_directory(dir_or_file, ec)) {
    OOMB_CHECK(fs::exists(dir_or_file, ec), "{}: no such file or directory", r);
    m.files_.push_back(SafetensorsFile::open(dir_or_file));
  } else if (!fs::exists(index, ec)) {
    OOMB_CHECK(fs::exists(dir_or_file / "model.safetensors", ec), "{}: neither model.safetensors nor {} found", r,
               kIndexName);
    m.files_.push_back(SafetensorsFile::open(dir_or_file / "model.safetensors"));
  }
  if (!m.files_.empty()) {
    const auto& ts = m.files_[0].tensors();
    for (size_t i = 0; i < ts.size(); ++i) m.index_.emplace(ts[i].name, Loc{0, i});
    return m;
  }

  const std::string ip = index.string();
  std::ifstream in(index, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  OOMB_CHECK(in.good(), "{}: cannot read", ip);
  json j = parse_json_strict(ss.str(), ip + ": index");
  OOMB_CHECK(j.is_object(), "{}: index is not a JSON object", ip);
  auto wm = j.find("weight_map");
  OOMB_CHECK(wm != j.end(), "{}: index has no 'weight_map'", ip);
  OOMB_CHECK(wm->is_object(), "{}: 'weight_map' is not a JSON object", ip);
  std::map<std::string, std::string> shard_of;     // tensor -> normalised shard path
  std::map<std::string, std::string> first_tensor;  // shard -> one tensor mapped to it, for messages
  for (const auto& [name, f] : wm->items()) {
    OOMB_CHECK(f.is_string(), "{}: weight_map entry for tensor '{}' is not a string", ip, name);
    const auto& s = f.get_ref<const std::string&>();
    fs::path rel = fs::path(s).lexically_normal();
    OOMB_CHECK(!rel.empty() && rel.is_relative() && *rel.begin() != "..",
               "{}: shard '{}' of tensor '{}' is outside the model directory", ip, s, name);
    shard_of[name] = rel.string();
    first_tensor.emplace(rel.string(), name);
  }
  std::vector<std::string> shard_names;
  for (const auto& [s, t] : first_tensor) {
    OOMB_CHECK(fs::exists(dir_or_file / s, ec), "{}: shard '{}' (holding tensor '{}') not found", ip, s, t);
    m.files_.push_back(SafetensorsFile::open(dir_or_file / s));
    shard_names.push_back(s);
  }
  for (size_t fi = 0; fi < m.files_.size(); ++fi) {
    const auto& ts = m.files_[fi].tensors();
    for (size_t ti = 0; ti < ts.size(); ++ti) {
      auto [it, fresh] = m.index_.emplace(ts[ti].name, Loc{fi, ti});
      OOMB_CHECK(fresh, "{}: tensor '{}' is in two shards, '{}' and '{}'", ip, ts[ti].name,
                 shard_names[it->second.file], shard_names[fi]);
      OOMB_CHECK(shard_of.contains(ts[ti].name), "{}: tensor '{}' in shard '{}' is not listed in weight_map", ip,
                 ts[ti].name, shard_names[fi]);
    }
  }
  for (const auto& [name, s] : shard_of) {
    auto it = m.index_.find(name);
    OOMB_CHECK(it != m.index_.end() && shard_names[it->second.file] == s,
               "{}: tensor '{}' is mapped to shard '{}' but that shard does not hold it", ip, name, s);
  }
  return m;
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> v;
  for (const auto& [n, l] : index_) v.push_back(n);
  return v;
}

const TensorInfo* SafetensorsModel::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &files_[it->second.file].tensors()[it->second.tensor];
}

const SafetensorsModel::Loc& SafetensorsModel::locate(std::string_view name) const {
  auto it = index_.find(name);
  OOMB_CHECK(it != index_.end(), "{}: tensor '{}' not found", root_.string(), name);
  return it->second;
}

const TensorInfo& SafetensorsModel::get(std::string_view name) const {
  const Loc& l = locate(name);
  return files_[l.file].tensors()[l.tensor];
}

void SafetensorsModel::read_raw(std::string_view name, void* dst) const {
  const Loc& l = locate(name);
  files_[l.file].read_raw(files_[l.file].tensors()[l.tensor], dst);
}

void SafetensorsModel::read_f32(std::string_view name, float* dst, const std::vector<int64_t>& expected_shape) const {
  const Loc& l = locate(name);
  const SafetensorsFile& f = files_[l.file];
  const TensorInfo& t = f.tensors()[l.tensor];
  OOMB_CHECK(expected_shape.empty() || t.shape == expected_shape, "{}: tensor '{}' has shape {}, expected {}",
             root_.string(), t.name, shape_str(t.shape), shape_str(expected_shape));
  OOMB_CHECK(dtype_is_float(t.dtype), "{}: tensor '{}' has dtype {}, which cannot be read as f32", root_.string(),
             t.name, dtype_safetensors_name(t.dtype));
  if (t.dtype == DType::F32) return f.read_raw(t, dst);
  // convert in chunks so the staging buffer stays small
  const size_t es = dtype_size(t.dtype);
  const int64_t n = t.numel(), chunk = std::min<int64_t>(n, int64_t((16u << 20) / es));
  Buffer buf(Tier::Host, Tag::IO, size_t(chunk) * es);
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t c = std::min(chunk, n - i);
    f.read_range(t, uint64_t(i) * es, uint64_t(c) * es, buf.data());
    convert_to_f32(buf.data(), t.dtype, dst + i, size_t(c));
  }
}

// ---- writing ----

namespace {

// Byte sizes of the tensors, after checking names, shapes and data pointers.
std::vector<uint64_t> check_inputs(std::span<const SaveTensor> ts, const std::string& where, bool need_data = true) {
  std::set<std::string_view> seen;
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (const SaveTensor& t : ts) {
    OOMB_CHECK(t.name != "__metadata__", "{}: '__metadata__' is reserved and cannot name a tensor", where);
    OOMB_CHECK(seen.insert(t.name).second, "{}: duplicate tensor name '{}'", where, t.name);
    uint64_t n = dtype_size(t.dtype);
    for (int64_t d : t.shape) {
      OOMB_CHECK(d >= 0, "{}: tensor '{}' has a negative dim in shape {}", where, t.name, shape_str(t.shape));
      OOMB_CHECK(!__builtin_mul_overflow(n, uint64_t(d), &n), "{}: tensor '{}': byte size of shape {} overflows",
                 where, t.name, shape_str(t.shape));
    }
    OOMB_CHECK(n == 0 || !need_data || t.data != nullptr, "{}: tensor '{}' has null data for {} bytes", where, t.name, n);
    OOMB_CHECK(!__builtin_add_overflow(total, n, &total), "{}: total size overflows", where);
    sizes.push_back(n);
  }
  return sizes;
}

// The 8-byte length and the JSON header, padded with spaces to a multiple of 8.
std::string make_header(std::span<const SaveTensor> ts, const std::vector<uint64_t>& sizes,
                        const std::map<std::string, std::string>& metadata, const std::string& where) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  auto& md = h["__metadata__"] = nlohmann::ordered_json(metadata);
  if (!metadata.contains("format")) md["format"] = "pt";
  uint64_t off = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    h[ts[i].name] = {{"dtype", std::string(dtype_safetensors_name(ts[i].dtype))},
                     {"shape", ts[i].shape},
                     {"data_offsets", {off, off + sizes[i]}}};
    off += sizes[i];
  }
  std::string s;
  try {
    s = h.dump();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: cannot encode the header (names must be UTF-8): {}", where, e.what());
  }
  s.resize((s.size() + 7) / 8 * 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(s.size()) >> (8 * i)) & 0xff);
  return out + s;
}

// "<target>.tmp.<pid>", written then committed by fsync + rename; removed unless committed.

void write_tensors(AtomicFile& f, std::span<const SaveTensor> ts, const std::vector<uint64_t>& sizes,
                   const std::map<std::string, std::string>& metadata, const std::string& where) {
  const std::string header = make_header(ts, sizes, metadata, where);
  f.write(header.data(), header.size());
  for (size_t i = 0; i < ts.size(); ++i) f.write(ts[i].data, sizes[i]);
}

// Removes model*.safetensors* files not in `keep`; a stale index goes first so it never names missing shards.
// The names a save writes: model.safetensors, its index, model-NNNNN-of-NNNNN.safetensors shards, and
// their temporaries (NAME.tmp.PID, left by a crashed save). Anything else in the directory (a user's
// backup, an adapter) is never touched.
bool is_model_file(const std::string& n) {
  static const std::regex ours(
      R"((model\.safetensors|model\.safetensors\.index\.json|model-[0-9]{5}-of-[0-9]{5}\.safetensors)(\.tmp\.[0-9]+)?)");
  return std::regex_match(n, ours);
}

void remove_stale(const fs::path& dir, const std::set<std::string>& keep, const std::string& where) {
  std::vector<fs::path> stale;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_regular_file(ec) && is_model_file(n) && !keep.contains(n)) stale.push_back(e.path());
  }
  OOMB_CHECK(!ec, "{}: cannot list the directory: {}", where, ec.message());
  std::stable_partition(stale.begin(), stale.end(), [](const fs::path& p) { return p.filename() == kIndexName; });
  for (const fs::path& p : stale)
    OOMB_CHECK(fs::remove(p, ec) || !ec, "{}: cannot remove stale {}: {}", where, p.string(), ec.message());
}

}  // namespace

void save_safetensors(const fs::path& path, std::span<const SaveTensor> tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::string where = "save_safetensors: " + path.string();
  const std::vector<uint64_t> sizes = check_inputs(tensors, where);
  AtomicFile f(path);
  write_tensors(f, tensors, sizes, metadata, where);
  f.commit();
}

void save_safetensors_dir(const fs::path& dir, std::span<const SaveTensor> tensors, uint64_t max_shard_bytes) {
  const std::string where = "save_safetensors_dir: " + dir.string();
  const std::vector<uint64_t> sizes = check_inputs(tensors, where);
  std::error_code ec;
  fs::create_directories(dir, ec);
  OOMB_CHECK(!ec, "{}: cannot create the directory: {}", where, ec.message());
  uint64_t total = 0;
  for (uint64_t s : sizes) total += s;
  if (total <= max_shard_bytes) {
    save_safetensors(dir / "model.safetensors", tensors);
    return remove_stale(dir, {"model.safetensors"}, where);
  }
  // greedy plan in the given order: [starts[i], starts[i + 1]) is shard i
  std::vector<size_t> starts{0};
  uint64_t cur = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (cur + sizes[i] > max_shard_bytes && i > starts.back()) {
      starts.push_back(i);
      cur = 0;
    }
    cur += sizes[i];
  }
  starts.push_back(tensors.size());
  const size_t n = starts.size() - 1;
  std::vector<std::unique_ptr<AtomicFile>> shards;
  std::set<std::string> keep{kIndexName};
  json weight_map = json::object();
  for (size_t s = 0; s < n; ++s) {
    const std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, n);
    const size_t b = starts[s], e = starts[s + 1];
    shards.push_back(std::make_unique<AtomicFile>(dir / name));
    write_tensors(*shards.back(), tensors.subspan(b, e - b), {sizes.begin() + b, sizes.begin() + e}, {}, where);
    for (size_t i = b; i < e; ++i) weight_map[tensors[i].name] = name;
    keep.insert(name);
  }
  // an old index must not point at a mix of old and new shards of the same names
  if (std::any_of(shards.begin(), shards.end(), [&](const auto& f) { return fs::exists(f->target(), ec); }))
    fs::remove(dir / kIndexName, ec);
  for (auto& f : shards) f->commit();
  const std::string index =
      json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) + "\n";
  AtomicFile idx(dir / kIndexName);
  idx.write(index.data(), index.size());
  idx.commit();
  remove_stale(dir, keep, where);
}

SafetensorsWriter::SafetensorsWriter(const fs::path& path, std::span<const SaveTensor> layout,
                                     const std::map<std::string, std::string>& metadata)
    : where_("save_safetensors: " + path.string()) {
  const std::vector<uint64_t> sizes = check_inputs(layout, where_, false);
  for (uint64_t s : sizes) left_ += s;
  f_ = std::make_unique<AtomicFile>(path);
  const std::string header = make_header(layout, sizes, metadata, where_);
  f_->write(header.data(), header.size());
}

SafetensorsWriter::~SafetensorsWriter() = default;

void SafetensorsWriter::write(const void* data, uint64_t bytes) {
  OOMB_CHECK(bytes <= left_, "{}: {} bytes written past the tensors' end", where_, bytes - left_);
  f_->write(data, bytes);
  left_ -= bytes;
}

void SafetensorsWriter::commit() {
  OOMB_CHECK(left_ == 0, "{}: the tensors' last {} bytes were never written", where_, left_);
  f_->commit();
}

}  // namespace oomb
