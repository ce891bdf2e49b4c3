// base/stream_graph.h and Context::staging on the host: no graphs (kUnimplemented, nothing
// recorded) and staging is ordinary, unguarded host memory. The GPU's side is
// stream_graph_gpu_test.
#include "base/stream_graph.h"

#include <gtest/gtest.h>

#include "base/context.h"

namespace moe {
namespace {

TEST(StreamGraphTest, TheHostHasNoGraphsAndStagesInHostMemory) {
  std::unique_ptr<Context> ctx = Context::host(ContextOptions{.guard_host_access = true});
  bool recorded = false;
  StatusOr<std::unique_ptr<StreamGraph>> g = StreamGraph::capture(*ctx, [&] {
    recorded = true;
    return Status::OK();
  });
  EXPECT_EQ(g.status().code(), StatusCode::kUnimplemented) << g.status().to_string();
  EXPECT_FALSE(recorded);
  EXPECT_FALSE(ctx->capturing());
  StatusOr<Tensor> staged = ctx->staging({4}, DType::kF32);
  ASSERT_TRUE(staged.ok()) << staged.status().to_string();
  EXPECT_TRUE(staged->device().is_host());
  EXPECT_FALSE(staged->view().guarded()) << "the host writes staging memory";
  staged->data<float>()[3] = 2.5f;  // host access is allowed
  StatusOr<Tensor> dev = ctx->upload(*staged);
  ASSERT_TRUE(dev.ok());
  StatusOr<Tensor> back = ctx->read_back(*dev);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->data<float>()[3], 2.5f);
}

}  // namespace
}  // namespace moe
