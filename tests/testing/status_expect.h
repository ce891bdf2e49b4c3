// GoogleTest expectations on a Status: OK, or the code and the words its message must name.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>

#include "base/status.h"

// EXPECT_OK(expr): the Status is OK, else its text in the failure.
#define EXPECT_OK(expr)                     \
  do {                                      \
    const ::moe::Status _s = (expr);        \
    EXPECT_TRUE(_s.ok()) << _s.to_string(); \
  } while (0)

namespace moe::testing {

// The status is kInvalidArgument and its message contains every needle.
inline void expect_invalid(const Status& s, std::initializer_list<std::string_view> needles) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  for (std::string_view needle : needles) {
    EXPECT_NE(s.message().find(needle), std::string::npos)
        << "'" << needle << "' not in: " << s.message();
  }
}
inline void expect_invalid(const Status& s, std::string_view needle) {
  expect_invalid(s, {needle});
}

}  // namespace moe::testing
