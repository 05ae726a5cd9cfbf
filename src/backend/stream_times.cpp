#include "backend/stream_times.h"

#include <algorithm>

namespace oomb {

StreamTimes& StreamTimes::operator+=(const StreamTimes& o) {
  on = on || o.on;
  span_s += o.span_s, compute_s += o.compute_s, copy_s += o.copy_s, both_s += o.both_s, idle_s += o.idle_s;
  copy_in_s += o.copy_in_s, copy_out_s += o.copy_out_s, duplex_s += o.duplex_s;
  ops += o.ops, copies += o.copies;
  return *this;
}

namespace {

// The pieces merged where they touch or overlap: sorted, disjoint.
std::vector<Busy> merged(std::vector<Busy> v) {
  std::sort(v.begin(), v.end(), [](const Busy& a, const Busy& b) { return a.t0 < b.t0; });
  std::vector<Busy> out;
  for (const Busy& b : v) {
    if (!out.empty() && b.t0 <= out.back().t1)
      out.back().t1 = std::max(out.back().t1, b.t1);
    else
      out.push_back(b);
  }
  return out;
}

double length(const std::vector<Busy>& v) {
  double s = 0;
  for (const Busy& b : v) s += b.t1 - b.t0;
  return s;
}

// the length of the intersection of two sorted, disjoint lists
double overlap(const std::vector<Busy>& a, const std::vector<Busy>& b) {
  double s = 0;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    s += std::max(0.0, std::min(a[i].t1, b[j].t1) - std::max(a[i].t0, b[j].t0));
    if (a[i].t1 < b[j].t1) ++i;
    else ++j;
  }
  return s;
}

}  // namespace

StreamTimes stream_times(std::vector<Busy> compute, std::vector<Busy> copy_in, std::vector<Busy> copy_out,
                         double span) {
  StreamTimes t;
  t.on = true;
  t.ops = int64_t(compute.size()), t.copies = int64_t(copy_in.size() + copy_out.size());
  std::vector<Busy> copy = copy_in;
  copy.insert(copy.end(), copy_out.begin(), copy_out.end());
  const std::vector<Busy> a = merged(std::move(compute)), b = merged(std::move(copy));
  const std::vector<Busy> in = merged(std::move(copy_in)), out = merged(std::move(copy_out));
  t.compute_s = length(a), t.copy_s = length(b), t.both_s = overlap(a, b);
  t.copy_in_s = length(in), t.copy_out_s = length(out), t.duplex_s = overlap(in, out);
  t.span_s = span;
  t.idle_s = std::max(0.0, span - (t.compute_s + t.copy_s - t.both_s));
  return t;
}

}  // namespace oomb
