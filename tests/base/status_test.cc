#include "base/status.h"

#include <gtest/gtest.h>

#include "base/check.h"

namespace moe {
namespace {

StatusOr<int> half(int x) {
  if (x % 2 != 0) return invalid_argument_error("x = ", x, " is odd");
  return x / 2;
}

Status quarter(int x, int* out) {
  MOE_ASSIGN_OR_RETURN(int h, half(x));
  MOE_ASSIGN_OR_RETURN(*out, half(h));
  return Status::OK();
}

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(Status::OK().ok());
  Status s = invalid_argument_error("top_k = ", 5, " > ", 4);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.to_string(), "INVALID_ARGUMENT: top_k = 5 > 4");
  EXPECT_EQ(s.with_context("layer 2").message(), "layer 2: top_k = 5 > 4");
}

TEST(StatusTest, StatusOrPropagates) {
  int out = 0;
  EXPECT_TRUE(quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  Status s = quarter(6, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("x = 3 is odd"), std::string::npos);
}

TEST(StatusDeathTest, CheckAbortsWithMessage) {
  EXPECT_DEATH(MOE_CHECK(1 + 1 == 3, "arithmetic is broken: ", 42), "arithmetic is broken: 42");
}

}  // namespace
}  // namespace moe
