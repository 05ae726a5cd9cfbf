// A property that must hold in a fuzz target: a failure aborts, which libFuzzer reports with the input.
#pragma once
#include <cstdio>
#include <cstdlib>

inline void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "property failed: %s\n", what);
    std::abort();
  }
}
