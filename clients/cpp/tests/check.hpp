// The checks of the C++ test programs: CHECK(condition) and CHECK_EQ(actual, expected) count and
// report a failure with its line and go on (CHECK_EQ prints both sides with a Show() overload the
// test file provides); CheckSummary() prints the counts and is the program's exit status.
#pragma once

#include <cstdio>

namespace check {

inline int checks = 0;
inline int failures = 0;

inline int CheckSummary() {
  std::printf("%d checks, %d failures\n", checks, failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace check

#define CHECK(condition)                                                                  \
  do {                                                                                    \
    ++check::checks;                                                                      \
    if (!(condition)) {                                                                   \
      ++check::failures;                                                                  \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #condition); \
    }                                                                                     \
  } while (false)

#define CHECK_EQ(actual, expected)                                                                  \
  do {                                                                                              \
    ++check::checks;                                                                                \
    const auto& _a = (actual);                                                                      \
    const auto& _e = (expected);                                                                    \
    if (!(_a == _e)) {                                                                              \
      ++check::failures;                                                                            \
      std::fprintf(stderr, "%s:%d: CHECK_EQ failed: %s\n  actual:   %s\n  expected: %s\n", __FILE__, \
                   __LINE__, #actual, Show(_a).c_str(), Show(_e).c_str());                          \
    }                                                                                               \
  } while (false)
