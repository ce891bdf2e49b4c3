// base/stream_graph.h on a GPU (label gpu: skips without a device; tests/run_gpu.sh's kernels
// stage requires one): a recorded copy from staging memory reads the staging memory when
// replayed, not when recorded; a wait inside a recording is refused by name and leaves the stream
// usable; memory allocated and freed inside the recording is the graph's, replay after replay,
// and memory that crosses the recording's edges is refused.
#include <gtest/gtest.h>

#include "base/context.h"
#include "base/stream_graph.h"
#include "tests/testing/cuda_device.h"

namespace moe {
namespace {

TEST(StreamGraphTest, ReplaysReadStagingWhenTheyRunAndWaitsAreRefused) {
  MOE_REQUIRE_CUDA_DEVICE();
  StatusOr<std::unique_ptr<Context>> made = Context::cuda(0);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  Context& ctx = **made;
  StatusOr<Tensor> staged = ctx.staging({1024}, DType::kF32);
  StatusOr<Tensor> out = ctx.zeros({1024}, DType::kF32);
  ASSERT_TRUE(staged.ok() && out.ok());
  EXPECT_TRUE(staged->device().is_host());
  for (int i = 0; i < 1024; ++i) staged->data<float>()[i] = 1.0f;
  // Recorded: a temporary made and dropped inside (the graph's memory), copies through it.
  StatusOr<std::unique_ptr<StreamGraph>> g = StreamGraph::capture(ctx, [&]() -> Status {
    EXPECT_TRUE(ctx.capturing());
    MOE_ASSIGN_OR_RETURN(Tensor tmp, ctx.empty({1024}, DType::kF32));
    MOE_RETURN_IF_ERROR(ctx.copy(*staged, tmp));
    return ctx.copy(tmp, *out);
  });
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_FALSE(ctx.capturing());
  EXPECT_GE((*g)->nodes(), 2);
  StatusOr<Tensor> back = ctx.read_back(*out);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->data<float>()[7], 0.0f) << "recording must not run the work";
  for (float v : {3.0f, -4.5f}) {
    for (int i = 0; i < 1024; ++i) staged->data<float>()[i] = v + static_cast<float>(i);
    ASSERT_TRUE((*g)->replay(ctx).ok());
    back = ctx.read_back(*out);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->data<float>()[0], v);
    EXPECT_EQ(back->data<float>()[1023], v + 1023.0f);
  }
  // A wait inside a recording: refused by name; the stream works afterwards.
  StatusOr<std::unique_ptr<StreamGraph>> bad = StreamGraph::capture(ctx, [&]() -> Status {
    MOE_RETURN_IF_ERROR(ctx.zero(*out));
    return ctx.synchronize();
  });
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("captured into a CUDA graph"), std::string::npos)
      << bad.status().to_string();
  EXPECT_FALSE(ctx.capturing());
  ASSERT_TRUE(ctx.copy(*staged, *out).ok());
  back = ctx.read_back(*out);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->data<float>()[2], -4.5f + 2.0f);
}

// Memory across the recording's edges: a tensor made while recording that outlives it, and one
// made before that is freed inside, are refused by name; the stream works afterwards.
TEST(StreamGraphTest, AllocationsThatCrossTheRecordingAreRefused) {
  MOE_REQUIRE_CUDA_DEVICE();
  StatusOr<std::unique_ptr<Context>> made = Context::cuda(0);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  Context& ctx = **made;
  Tensor kept;
  StatusOr<std::unique_ptr<StreamGraph>> g = StreamGraph::capture(ctx, [&]() -> Status {
    MOE_ASSIGN_OR_RETURN(kept, ctx.zeros({256}, DType::kF32));
    return Status::OK();
  });
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("changed the memory in use"), std::string::npos)
      << g.status().to_string();
  kept = Tensor();
  StatusOr<Tensor> before = ctx.zeros({256}, DType::kF32);
  ASSERT_TRUE(before.ok());
  g = StreamGraph::capture(ctx, [&]() -> Status {
    *before = Tensor();
    return Status::OK();
  });
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("changed the memory in use"), std::string::npos)
      << g.status().to_string();
  StatusOr<Tensor> fresh = ctx.zeros({256}, DType::kF32);
  ASSERT_TRUE(fresh.ok()) << fresh.status().to_string();
  StatusOr<Tensor> back = ctx.read_back(*fresh);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->data<float>()[255], 0.0f);
}

}  // namespace
}  // namespace moe
