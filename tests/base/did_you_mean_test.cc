// base/did_you_mean.h: edit distances by hand, and which names are suggested.
#include "base/did_you_mean.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

TEST(DidYouMean, EditDistanceByHand) {
  EXPECT_EQ(edit_distance("", ""), 0);
  EXPECT_EQ(edit_distance("steps", "steps"), 0);
  EXPECT_EQ(edit_distance("step", "steps"), 1);    // an insertion
  EXPECT_EQ(edit_distance("stepss", "steps"), 1);  // a deletion
  EXPECT_EQ(edit_distance("stops", "steps"), 1);   // a substitution
  EXPECT_EQ(edit_distance("setps", "steps"), 1);   // a swap of neighbours
  EXPECT_EQ(edit_distance("STEPS", "steps"), 0);   // case-insensitive
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
  EXPECT_EQ(edit_distance("", "abc"), 3);
}

TEST(DidYouMean, SuggestsTheClosestOnly) {
  const std::vector<std::string> known = {"steps", "seed", "batch_size", "grad_accum", "lr"};
  EXPECT_EQ(closest_names("step", known), std::vector<std::string>({"steps"}));
  EXPECT_EQ(did_you_mean("step", known, "train."), " (did you mean train.steps?)");
  EXPECT_EQ(did_you_mean("batchsize", known), " (did you mean batch_size?)");
  // Nothing close: no suggestion rather than a wild one.
  EXPECT_EQ(did_you_mean("optimizer", known), "");
  EXPECT_TRUE(closest_names("xyz", known).empty());
  // An exact name is not a typo of itself.
  EXPECT_TRUE(closest_names("seed", {"seed"}).empty());
  // Ties are all named, in the order given.
  EXPECT_EQ(did_you_mean("ab", {"abc", "xb", "abd"}), " (did you mean abc, xb or abd?)");
  EXPECT_EQ(did_you_mean("ab", {"abc", "abd"}), " (did you mean abc or abd?)");
}

TEST(DidYouMean, AllowedDistanceGrowsWithTheName) {
  // Two edits are too many for a short name, fine for a longer one.
  EXPECT_TRUE(closest_names("ep", {"lr"}).empty());
  EXPECT_EQ(closest_names("run_dirrr", {"run_dir"}), std::vector<std::string>({"run_dir"}));
}

}  // namespace
}  // namespace moe
