// What the CPU backend's op tests share (test_cpu_ops.cpp: each op at small sizes, against float64 and
// finite differences; test_cpu_ops_wide.cpp: at model widths and over vocabulary tiles).
#pragma once
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "test_util.h"

namespace oomb::testing {

// The relative error against the float64 reference, compared with its bound and printed, so the
// measured value beside each bound can be re-read from the test's output.
inline void expect_close(const std::vector<float>& got, const Vec& want, double tol, const std::string& what) {
  const double e = rel_error(got, to_f(want));
  EXPECT_LE(e, tol) << what;
  std::cout << fmt::format("[ error    ] {:<32} {:.2e} (bound {:.1e})\n", what, e, tol);
}

struct Fixture : ::testing::Test {
  std::unique_ptr<Backend> be = make_cpu_backend();
};

}  // namespace oomb::testing
