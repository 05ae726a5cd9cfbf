#include "dist/ulysses.h"

#include <cstring>

#include "core/error.h"

namespace oomb {

SeqParallel::SeqParallel(Comm& comm, Backend& be, int64_t max_elems)
    : comm_(comm), be_(be), host_(be.tier() == Tier::Host), device_(comm.on_device()) {
  if (comm.size() == 1) return;
  a_ = Buffer(device_ ? Tier::Device : Tier::Host, Tag::Workspace, size_t(max_elems) * 4);
  if (!host_ && !device_) b_ = Buffer(Tier::Host, Tag::Workspace, size_t(max_elems) * 4);
}

int64_t SeqParallel::host_bytes(int64_t max_elems, int64_t P, Tier backend_tier, bool device_comm) {
  if (P == 1 || device_comm) return 0;
  return (backend_tier == Tier::Host ? 1 : 2) * max_elems * 4;
}
int64_t SeqParallel::device_bytes(int64_t max_elems, int64_t P, bool device_comm) {
  return P > 1 && device_comm ? max_elems * 4 : 0;
}

namespace {
// The shapes of one exchange: t tokens per rank, hp heads per rank, P ranks, row = D elements.
struct Split {
  int64_t t, hp, P, D, esize;
  size_t block() const { return size_t(t * hp * D * esize); }
  size_t piece() const { return size_t(hp * D * esize); }  // one token's heads of one rank
};
Split check(const char* op, const Tensor& loc, const Tensor& att, int64_t P) {
  OOMB_CHECK(loc.ndim == 3 && att.ndim == 3, "sp {}: expected (T/P, h, D) and (T, h/P, D), got {} and {} dims",
             op, loc.ndim, att.ndim);
  OOMB_CHECK(loc.dtype == att.dtype, "sp {}: dtypes differ", op);
  const int64_t t = loc.dim(0), h = loc.dim(1), D = loc.dim(2);
  OOMB_CHECK(att.dim(0) == t * P && att.dim(1) * P == h && att.dim(2) == D,
             "sp {}: ({}, {}, {}) and ({}, {}, {}) are not (T/P, h, D) and (T, h/P, D) for P = {}", op, t, h, D,
             att.dim(0), att.dim(1), att.dim(2), P);
  return {t, h / P, P, D, int64_t(dtype_size(loc.dtype))};
}
// send block j (t, hp, D) := loc[:, j hp : (j + 1) hp, :]
void pack(const char* loc, char* send, const Split& s) {
  for (int64_t j = 0; j < s.P; ++j)
    for (int64_t i = 0; i < s.t; ++i)
      std::memcpy(send + size_t(j) * s.block() + size_t(i) * s.piece(),
                  loc + (size_t(i) * size_t(s.P) + size_t(j)) * s.piece(), s.piece());
}
// loc[:, j hp : (j + 1) hp, :] := recv block j
void unpack(const char* recv, char* loc, const Split& s) {
  for (int64_t j = 0; j < s.P; ++j)
    for (int64_t i = 0; i < s.t; ++i)
      std::memcpy(loc + (size_t(i) * size_t(s.P) + size_t(j)) * s.piece(),
                  recv + size_t(j) * s.block() + size_t(i) * s.piece(), s.piece());
}
// The same two on the device's memory: one strided copy per rank's block.
void pack_on(Backend& be, const char* loc, char* send, const Split& s) {
  for (int64_t j = 0; j < s.P; ++j)
    be.copy_rows(send + size_t(j) * s.block(), s.piece(), loc + size_t(j) * s.piece(), size_t(s.P) * s.piece(),
                 s.piece(), size_t(s.t), Tier::Device);
}
void unpack_on(Backend& be, const char* recv, char* loc, const Split& s) {
  for (int64_t j = 0; j < s.P; ++j)
    be.copy_rows(loc + size_t(j) * s.piece(), size_t(s.P) * s.piece(), recv + size_t(j) * s.block(), s.piece(),
                 s.piece(), size_t(s.t), Tier::Device);
}
}  // namespace

void SeqParallel::to_heads(const Tensor& loc, Tensor& att) {
  const Split s = check("to_heads", loc, att, size());
  if (size() == 1) {
    if (loc.data != att.data) be_.copy(att.data, att.tier, loc.data, loc.tier, loc.bytes());
    return;
  }
  OOMB_CHECK(loc.bytes() <= a_.bytes(), "sp to_heads: {} bytes exceed the staging's {}", loc.bytes(), a_.bytes());
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
  char* B = static_cast<char*>(b_.data());
  be_.copy(B, Tier::Host, loc.data, loc.tier, loc.bytes());
  pack(B, A, s);
  comm_.all_to_all(A, B, s.block());
  be_.copy(att.data, att.tier, B, Tier::Host, att.bytes());
}

void SeqParallel::to_tokens(const Tensor& att, Tensor& loc) {
  const Split s = check("to_tokens", loc, att, size());
  if (size() == 1) {
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
  char* B = static_cast<char*>(b_.data());
  be_.copy(B, Tier::Host, att.data, att.tier, att.bytes());
  comm_.all_to_all(B, A, s.block());
  unpack(A, B, s);
  be_.copy(loc.data, loc.tier, B, Tier::Host, loc.bytes());
}

}  // namespace oomb
