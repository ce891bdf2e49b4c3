#include "base/tensor.h"

#include <gtest/gtest.h>

#include "base/allocator.h"
#include "base/context.h"

namespace moe {
namespace {

TEST(TensorTest, ShapeAndViews) {
  Tensor t = Tensor::zeros({3, 4}, DType::kF32);
  EXPECT_EQ(t.numel(), 12);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_EQ(t.view().to_string(), "f32[3, 4]@host");
  float* p = t.data<float>();
  for (int i = 0; i < 12; ++i) p[i] = static_cast<float>(i);
  TensorView r = t.view().rows(1, 3);
  EXPECT_EQ(r.shape(), (Shape{2, 4}));
  EXPECT_EQ(r.data<float>()[0], 4.0f);
  EXPECT_EQ(t.view()[2].data<float>()[3], 11.0f);
  EXPECT_EQ(t.view().reshape({12}).dim(0), 12);
}

TEST(TensorTest, MoveTransfersOwnership) {
  Tensor a = Tensor::from_vector<int32_t>({2}, {7, 9});
  Tensor b = std::move(a);
  EXPECT_EQ(to_vector<int32_t>(b), (std::vector<int32_t>{7, 9}));
  EXPECT_EQ(a.numel(), 0);  // NOLINT: reading a moved-from tensor is defined (empty)
}

// Copies share storage (saving an activation costs no copy); the storage lives as long as any
// tensor does; reshape and rows keep it alive too. clone-like deep copies are explicit.
TEST(TensorTest, CopiesShareStorageUntilTheLastOneGoes) {
  Tensor a = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  Tensor b = a;
  b.data<float>()[0] = 10;
  EXPECT_EQ(a.data<float>()[0], 10);
  Tensor row = a.rows(1, 2);
  a = Tensor();
  b = Tensor();
  EXPECT_EQ(to_vector<float>(row), (std::vector<float>{3, 4}));  // still owned by `row`
  Tensor deep = Tensor::copy_of(row);
  deep.data<float>()[0] = -1;
  EXPECT_EQ(row.data<float>()[0], 3);
}

TEST(TensorTest, ConvertRoundsToBf16) {
  Tensor src = Tensor::from_vector<float>({3}, {1.0f, 1.00390625f, -2.5f});
  Tensor dst = Tensor::empty({3}, DType::kBF16);
  ASSERT_TRUE(convert_into(src, dst).ok());
  Tensor back = Tensor::empty({3}, DType::kF64);
  ASSERT_TRUE(convert_into(dst, back).ok());
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: round to even gives 1.
  EXPECT_EQ(to_vector<double>(back), (std::vector<double>{1.0, 1.0, -2.5}));
}

TEST(TensorDeathTest, WrongTypedAccessAborts) {
  Tensor t = Tensor::zeros({2}, DType::kF32);
  EXPECT_DEATH(t.data<double>(), "read as f64");
}

// A guarded context's tensors stand in for device memory: host access outside a
// DeviceAccessScope (a kernel, a communicator, the context's own copies) aborts, naming the rule.
TEST(TensorDeathTest, GuardedTensorsAbortOnHostAccessOutsideAScope) {
  ContextOptions opts;
  opts.guard_host_access = true;
  std::unique_ptr<Context> ctx = Context::host(opts);
  Tensor t = ctx->zeros({4}, DType::kF32).value();
  EXPECT_TRUE(t.view().guarded());
  EXPECT_TRUE(t.view().rows(1, 2).guarded());  // views inherit the guard
  EXPECT_DEATH(t.data<float>(), "core/layers and core/model must not read or write");
  EXPECT_DEATH(t.raw(), "outside a kernel");
  {
    DeviceAccessScope device_side;
    t.data<float>()[0] = 1.f;  // allowed: this is what a kernel does
  }
  // The one legal way to look: read_back, a counted synchronisation, into unguarded memory.
  const int64_t syncs = ctx->sync_count();
  Tensor host = ctx->read_back(t).value();
  EXPECT_EQ(ctx->sync_count(), syncs + 1);
  EXPECT_FALSE(host.view().guarded());
  EXPECT_EQ(host.data<float>()[0], 1.f);
  // Copying into unguarded host memory is a read back, not a stream-ordered copy.
  EXPECT_EQ(ctx->copy(t, Tensor::zeros({4}, DType::kF32)).code(), StatusCode::kInvalidArgument);
  // Uploads from host memory are fine.
  ASSERT_TRUE(ctx->copy(Tensor::from_vector<float>({4}, {1, 2, 3, 4}), t).ok());
  EXPECT_EQ(to_vector<float>(ctx->read_back(t).value()), (std::vector<float>{1, 2, 3, 4}));
}

TEST(AllocatorTest, BucketsAndReuse) {
  EXPECT_EQ(allocator_bucket_size(1), 64u);
  EXPECT_EQ(allocator_bucket_size(512), 512u);
  EXPECT_EQ(allocator_bucket_size(513), 576u);  // 512 + 64
  EXPECT_EQ(allocator_bucket_size(1000), 1024u);
  EXPECT_EQ(allocator_bucket_size(1 << 20), size_t{1} << 20);
  EXPECT_LE(allocator_bucket_size((1 << 20) + 1), (size_t{1} << 20) * 9 / 8);
  std::shared_ptr<Allocator> a = make_host_caching_allocator(size_t{1} << 20);
  void* p = a->allocate(1000, {}).value();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  a->deallocate(p, 1000, {});
  void* q = a->allocate(1010, {}).value();  // same bucket: the cached block comes back
  EXPECT_EQ(q, p);
  AllocatorStats s = a->stats();
  EXPECT_EQ(s.allocations, 2);
  EXPECT_EQ(s.cache_hits, 1);
  EXPECT_EQ(s.bytes_in_use, 1024u);
  a->deallocate(q, 1010, {});
  // A block larger than the cache limit is freed, not cached.
  void* big = a->allocate(size_t{2} << 20, {}).value();
  a->deallocate(big, size_t{2} << 20, {});
  EXPECT_EQ(a->stats().bytes_cached, 1024u);
  a->release_cached();
  EXPECT_EQ(a->stats().bytes_cached, 0u);
  EXPECT_EQ(a->allocate(0, {}).value(), nullptr);
}

// What every allocator's reset_peak promises: the peak drops to the bytes in use now and then
// follows the allocations made after the reset only.
void expect_peak_resets(Allocator& a) {
  SCOPED_TRACE(a.device().to_string());
  void* big = a.allocate(size_t{1} << 20, {}).value();
  void* kept = a.allocate(4096, {}).value();
  a.deallocate(big, size_t{1} << 20, {});
  const size_t kept_bytes = a.stats().bytes_in_use;
  EXPECT_GE(a.stats().peak_bytes_in_use, kept_bytes + (size_t{1} << 20));
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_bytes_in_use, kept_bytes);
  void* small = a.allocate(8192, {}).value();
  const size_t after = a.stats().bytes_in_use;
  a.deallocate(small, 8192, {});
  EXPECT_EQ(a.stats().peak_bytes_in_use, after);
  EXPECT_LT(after, kept_bytes + (size_t{1} << 20));
  a.deallocate(kept, 4096, {});
}

TEST(AllocatorTest, PeakResetsToTheBytesInUse) {
  std::shared_ptr<Allocator> a = make_host_caching_allocator();
  expect_peak_resets(*a);
}

// Tensors of a context come from its caching allocator: a step that frees and reallocates the
// same shapes is served from the cache.
TEST(ContextTest, TensorsReuseCachedBlocks) {
  std::unique_ptr<Context> ctx = Context::host();
  for (int i = 0; i < 3; ++i) {
    Tensor a = ctx->empty({256, 64}, DType::kF32).value();
    Tensor b = ctx->zeros({64}, DType::kI64).value();
    EXPECT_EQ(b.data<int64_t>()[63], 0);
  }
  const AllocatorStats s = ctx->allocator().stats();
  EXPECT_EQ(s.allocations, 6);
  EXPECT_EQ(s.cache_hits, 4);
  EXPECT_EQ(s.bytes_in_use, 0u);
  Tensor like = ctx->empty_like(Tensor::zeros({3, 5}, DType::kBF16)).value();
  EXPECT_EQ(like.shape(), (Shape{3, 5}));
  EXPECT_EQ(like.dtype(), DType::kBF16);
  EXPECT_EQ(like.device(), ctx->device());
}

// Without a GPU (CI) the count is 0, never an error, and asking for a CUDA context says why it
// cannot have one; with a GPU the context gets a stream-ordered pool on that device.
TEST(DeviceTest, CudaContextOnlyWithADevice) {
  const int n = cuda_device_count();
  StatusOr<std::unique_ptr<Context>> ctx = Context::cuda(0);
  if (n == 0) {
    ASSERT_FALSE(ctx.ok());
    EXPECT_EQ(ctx.status().code(),
              built_with_cuda() ? StatusCode::kFailedPrecondition : StatusCode::kUnimplemented)
        << ctx.status().to_string();
    EXPECT_FALSE(make_cuda_pool_allocator(0).ok());
    return;
  }
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  EXPECT_TRUE((*ctx)->device().is_cuda());
  EXPECT_TRUE((*ctx)->guarded());
  Tensor t = (*ctx)->upload(Tensor::from_vector<float>({3}, {1, 2, 3})).value();
  EXPECT_EQ(to_vector<float>((*ctx)->read_back(t).value()), (std::vector<float>{1, 2, 3}));
  expect_peak_resets((*ctx)->allocator());
}

}  // namespace
}  // namespace moe
