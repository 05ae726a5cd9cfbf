#include "dist/ulysses.h"

#include <cstring>

#include "core/error.h"

namespace oomb {

SeqParallel::SeqParallel(Comm& comm, Backend& be, int64_t max_elems, int64_t groups)
    : comm_(comm), be_(be), host_(be.tier() == Tier::Host), device_(comm.on_device()) {
  if (comm.size() == 1) return;
  OOMB_CHECK(groups >= 1 && max_elems % groups == 0, "sp: {} elements do not split into {} head groups", max_elems,
             groups);
  a_ = Buffer(device_ ? Tier::Device : Tier::Host, Tag::Workspace, size_t(max_elems / groups) * 4);
  if (!host_ && !device_) b_ = Buffer(Tier::Host, Tag::Workspace, size_t(max_elems) * 4);
}

int64_t SeqParallel::host_bytes(int64_t max_elems, int64_t P, Tier backend_tier, bool device_comm, int64_t groups) {
  if (P == 1 || device_comm) return 0;
  return (max_elems / groups + (backend_tier == Tier::Host ? 0 : max_elems)) * 4;
}
int64_t SeqParallel::device_bytes(int64_t max_elems, int64_t P, bool device_comm, int64_t groups) {
  return P > 1 && device_comm ? max_elems / groups * 4 : 0;
}

namespace {
bool g_group_fault = false;  // tests only
}  // namespace

void SeqParallel::group_fault_for_test(bool on) { g_group_fault = on; }

namespace {
// The shapes of one exchange: t tokens per rank, hp heads per rank and head group, P ranks, row = D
// elements; on the token side a token's row holds h = P K hp heads, and rank j's heads of group g
// start at head j h / P + g hp.
struct Split {
  int64_t t, hp, P, D, esize, h, g;
  size_t block() const { return size_t(t * hp * D * esize); }
  size_t piece() const { return size_t(hp * D * esize); }  // one token's heads of one rank and group
  size_t stride() const { return size_t(h * D * esize); }  // one token on the token side
  size_t at(int64_t j) const { return size_t((j * (h / P) + g * hp) * D * esize); }  // rank j's group in a token
};
Split check(const char* op, const Tensor& loc, const Tensor& att, int64_t P, int64_t group, int64_t groups) {
  OOMB_CHECK(loc.ndim == 3 && att.ndim == 3, "sp {}: expected (T/P, h, D) and (T, h/P, D), got {} and {} dims",
             op, loc.ndim, att.ndim);
  OOMB_CHECK(loc.dtype == att.dtype, "sp {}: dtypes differ", op);
  const int64_t t = loc.dim(0), h = loc.dim(1), D = loc.dim(2);
  OOMB_CHECK(groups >= 1 && group >= 0 && group < groups, "sp {}: head group {} of {}", op, group, groups);
  OOMB_CHECK(att.dim(0) == t * P && att.dim(1) * P * groups == h && att.dim(2) == D,
             "sp {}: ({}, {}, {}) and ({}, {}, {}) are not (T/P, h, D) and (T, h/(P K), D) for P = {}, K = {}", op, t,
             h, D, att.dim(0), att.dim(1), att.dim(2), P, groups);
  return {t, h / (P * groups), P, D, int64_t(dtype_size(loc.dtype)), h, group};
}
// send block j (t, hp, D) := loc[:, rank j's heads of the group, :]
void pack(const char* loc, char* send, const Split& s) {
  for (int64_t j = 0; j < s.P; ++j)
    for (int64_t i = 0; i < s.t; ++i)
      std::memcpy(send + size_t(j) * s.block() + size_t(i) * s.piece(), loc + size_t(i) * s.stride() + s.at(j),
                  s.piece());
}
// loc[:, rank j's heads of the group, :] := recv block j
void unpack(const char* recv, char* loc, const Split& s) {
  for (int64_t j = 0; j < s.P; ++j)
    for (int64_t i = 0; i < s.t; ++i)
      std::memcpy(loc + size_t(i) * s.stride() + s.at(j), recv + size_t(j) * s.block() + size_t(i) * s.piece(),
                  s.piece());
}
// The same two on the device's memory: one strided copy per rank's block.
void pack_on(Backend& be, const char* loc, char* send, const Split& s) {
  for (int64_t j = 0; j < s.P; ++j)
    be.copy_rows(send + size_t(j) * s.block(), s.piece(), Tier::Device, loc + s.at(j), s.stride(), Tier::Device,
                 s.piece(), size_t(s.t));
}
void unpack_on(Backend& be, const char* recv, char* loc, const Split& s) {
  for (int64_t j = 0; j < s.P; ++j)
    be.copy_rows(loc + s.at(j), s.stride(), Tier::Device, recv + size_t(j) * s.block(), s.piece(), Tier::Device,
                 s.piece(), size_t(s.t));
}
}  // namespace

void SeqParallel::to_heads(const Tensor& loc, Tensor& att, int64_t group, int64_t groups) {
  const Split s = check("to_heads", loc, att, size(), group, groups);
  if (size() == 1) {
    OOMB_CHECK(groups == 1, "sp to_heads: head groups need several ranks");
    if (loc.data != att.data) be_.copy(att.data, att.tier, loc.data, loc.tier, loc.bytes());
    return;
  }
  OOMB_CHECK(att.bytes() <= a_.bytes(), "sp to_heads: {} bytes exceed the staging's {}", att.bytes(), a_.bytes());
  char* A = static_cast<char*>(a_.data());
  if (device_) {  // NCCL: packed on the device, sent GPU to GPU
    pack_on(be_, static_cast<const char*>(loc.data), A, s);
    comm_.all_to_all(A, att.data, s.block());
    return;
  }
  if (host_) {
    pack(static_cast<const char*>(loc.data), A, s);
    comm_.all_to_all(A, att.data, s.block());
    return;
  }
  OOMB_CHECK(loc.bytes() <= b_.bytes(), "sp to_heads: {} bytes exceed the host copy's {}", loc.bytes(), b_.bytes());
  char* B = static_cast<char*>(b_.data());
  be_.copy(B, Tier::Host, loc.data, loc.tier, loc.bytes());
  pack(B, A, s);
  comm_.all_to_all(A, B, s.block());
  be_.copy(att.data, att.tier, B, Tier::Host, att.bytes());
}

void SeqParallel::to_tokens(const Tensor& att, Tensor& loc, int64_t group, int64_t groups) {
  const Split s = check("to_tokens", loc, att, size(), g_group_fault ? groups - 1 - group : group, groups);
  if (size() == 1) {
    OOMB_CHECK(groups == 1, "sp to_tokens: head groups need several ranks");
    if (loc.data != att.data) be_.copy(loc.data, loc.tier, att.data, att.tier, att.bytes());
    return;
  }
  OOMB_CHECK(att.bytes() <= a_.bytes(), "sp to_tokens: {} bytes exceed the staging's {}", att.bytes(), a_.bytes());
  char* A = static_cast<char*>(a_.data());
  if (device_) {
    comm_.all_to_all(att.data, A, s.block());
    unpack_on(be_, A, static_cast<char*>(loc.data), s);
    return;
  }
  if (host_) {
    comm_.all_to_all(att.data, A, s.block());
    unpack(A, static_cast<char*>(loc.data), s);
    return;
  }
  OOMB_CHECK(loc.bytes() <= b_.bytes(), "sp to_tokens: {} bytes exceed the host copy's {}", loc.bytes(), b_.bytes());
  char* B = static_cast<char*>(b_.data());
  be_.copy(B, Tier::Host, att.data, att.tier, att.bytes());
  comm_.all_to_all(B, A, s.block());
  // the other groups' columns of loc stay as they are: the whole of it comes over, this group's
  // columns are replaced, and it goes back (one group: every column is replaced)
  if (groups > 1) be_.copy(B, Tier::Host, loc.data, loc.tier, loc.bytes());
  unpack(A, B, s);
  be_.copy(loc.data, loc.tier, B, Tier::Host, loc.bytes());
}

void SeqParallel::sum_to_host(const void* sums, double* out, int n) {
  const size_t bytes = size_t(n) * sizeof(double);
  if (device_ && size() > 1) {
    OOMB_CHECK(bytes <= a_.bytes(), "sp sum_to_host: {} bytes exceed the staging's {}", bytes, a_.bytes());
    be_.copy(a_.data(), Tier::Device, sums, be_.tier(), bytes);
    comm_.all_reduce_sum(a_.as<double>(), size_t(n));
    be_.copy(out, Tier::Host, a_.data(), Tier::Device, bytes);
    return;
  }
  be_.copy(out, Tier::Host, sums, be_.tier(), bytes);
  comm_.all_reduce_sum(out, size_t(n));
}

}  // namespace oomb
