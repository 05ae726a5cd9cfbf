// Errors with context: every message names the op, file, field, tensor or flag at fault.
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace oomb {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace oomb

// OOMB_CHECK(cond, "op: message {}", x): throws oomb::Error with the formatted message.
#define OOMB_CHECK(cond, ...)              \
  do {                                     \
    if (!(cond)) ::oomb::fail(__VA_ARGS__); \
  } while (0)
