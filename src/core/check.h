// TERN_CHECK: the error tier for bugs (broken invariants). Prints the expression and file:line, aborts.
// Never use it for bad input; that is Status/Result (status.h).
#pragma once

#include <cstdio>
#include <cstdlib>

namespace tern::detail {
[[noreturn]] inline void check_failed(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "tern: CHECK failed: %s at %s:%d%s%s\n", expr, file, line, msg ? ": " : "", msg ? msg : "");
  std::fflush(stderr);
  std::abort();
}
}  // namespace tern::detail

#define TERN_CHECK(cond) \
  ((cond) ? (void)0 : ::tern::detail::check_failed(#cond, __FILE__, __LINE__, nullptr))
#define TERN_CHECK_MSG(cond, msg) \
  ((cond) ? (void)0 : ::tern::detail::check_failed(#cond, __FILE__, __LINE__, (msg)))
