// GraphCache on the device: capture once per key, replays that see new input data, eager fallback
// for a callable that synchronizes inside capture, eager-first keys and eviction, and errors passed
// through.
#include <gtest/gtest.h>

#include <vector>

#include "backends/cuda/runtime/device_buffer.h"
#include "backends/cuda/runtime/graph_cache.h"
#include "backends/cuda/kernels/linear/linear.cuh"
#include "backends/cuda/runtime/stream.h"

namespace dsv4::cuda {
namespace {

// y = W x for W = [[1, 2, 3, 4], [0.5, -1, 0, 2]] (fp32 linear), computed by hand below.
struct LinearRig {
  DeviceBuffer w{sizeof(float) * 8}, x{sizeof(float) * 4}, y{sizeof(float) * 2};
  F32View view() const { return F32View{w.as<float>(), 2, 4}; }
  LinearRig() {
    const float wh[8] = {1, 2, 3, 4, 0.5f, -1, 0, 2};
    cudaMemcpy(w.get(), wh, sizeof wh, cudaMemcpyHostToDevice);
  }
  void set_x(const std::vector<float>& v, cudaStream_t s) {
    cudaMemcpyAsync(x.get(), v.data(), 16, cudaMemcpyHostToDevice, s);
  }
  std::vector<float> get_y(cudaStream_t s) {
    std::vector<float> out(2);
    cudaMemcpyAsync(out.data(), y.get(), 8, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    return out;
  }
};

TEST(GraphCache, CapturesOnceAndReplaysWithNewData) {
  auto stream = Stream::create();
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();
  const cudaStream_t s = stream->get();
  LinearRig d;
  GraphCache cache;
  int calls = 0;
  const GraphCache::Fn fn = [&](cudaStream_t st) {
    ++calls;
    cudaMemsetAsync(d.y.get(), 0, 8, st);
    return f32_linear(d.x.as<float>(), 1, d.view(), d.y.as<float>(), st) == cudaSuccess
               ? ok_status()
               : Status(StatusCode::internal, "f32_linear");
  };
  const std::vector<std::vector<float>> inputs = {{1, 1, 1, 1}, {2, 0, -1, 0.5f}, {0, 0, 0, 1}};
  const std::vector<std::vector<float>> want = {{10, 1.5f}, {1, 2}, {4, 2}};  // by hand
  for (size_t i = 0; i < inputs.size(); ++i) {
    d.set_x(inputs[i], s);
    ASSERT_TRUE(cache.run({1, 8}, s, fn).ok());
    EXPECT_EQ(d.get_y(s), want[i]) << "call " << i;
  }
  EXPECT_EQ(calls, 1);  // captured once, replayed twice
  EXPECT_EQ(cache.stats().captures, 1);
  EXPECT_EQ(cache.stats().replays, 2);
  EXPECT_EQ(cache.size(), 1u);
  // Another key captures its own graph.
  d.set_x(inputs[0], s);
  ASSERT_TRUE(cache.run({1, 16}, s, fn).ok());
  EXPECT_EQ(d.get_y(s), want[0]);
  EXPECT_EQ(cache.stats().captures, 2);
}

TEST(GraphCache, SynchronizingCallableRunsEagerly) {
  auto stream = Stream::create();
  ASSERT_TRUE(stream.ok());
  const cudaStream_t s = stream->get();
  LinearRig d;
  GraphCache cache;
  int calls = 0;
  const GraphCache::Fn fn = [&](cudaStream_t st) -> Status {
    ++calls;
    if (f32_linear(d.x.as<float>(), 1, d.view(), d.y.as<float>(), st) != cudaSuccess)
      return Status(StatusCode::internal, "f32_linear");
    // a host read of the result: illegal inside capture
    const cudaError_t e = cudaStreamSynchronize(st);
    return e == cudaSuccess ? ok_status() : Status(StatusCode::internal, cudaGetErrorString(e));
  };
  d.set_x({1, 1, 1, 1}, s);
  cudaStreamSynchronize(s);
  ASSERT_TRUE(cache.run({2, 1}, s, fn).ok());
  EXPECT_EQ(d.get_y(s), (std::vector<float>{10, 1.5f}));
  EXPECT_FALSE(cache.capturable({2, 1}));
  EXPECT_EQ(cache.stats().failed_captures, 1);
  d.set_x({0, 0, 0, 1}, s);
  cudaStreamSynchronize(s);
  ASSERT_TRUE(cache.run({2, 1}, s, fn).ok());
  EXPECT_EQ(d.get_y(s), (std::vector<float>{4, 2}));
  EXPECT_EQ(calls, 3);  // failed capture attempt, its eager rerun, then eager only
  EXPECT_EQ(cache.stats().eager, 2);
  EXPECT_EQ(cache.size(), 0u);
}

// eager_before = 1: a key's first call runs eagerly, its second captures; capacity 1: a new graph
// drops the least recently launched one, whose key then starts over. Outputs stay right throughout.
TEST(GraphCache, EagerFirstAndLeastRecentlyUsedEviction) {
  auto stream = Stream::create();
  ASSERT_TRUE(stream.ok());
  const cudaStream_t s = stream->get();
  LinearRig d;
  GraphCache cache(GraphCacheOptions{1, 1});
  int calls = 0;
  const GraphCache::Fn fn = [&](cudaStream_t st) {
    ++calls;
    return f32_linear(d.x.as<float>(), 1, d.view(), d.y.as<float>(), st) == cudaSuccess
               ? ok_status()
               : Status(StatusCode::internal, "f32_linear");
  };
  const std::vector<float> x0 = {1, 1, 1, 1}, x1 = {0, 0, 0, 1};
  const std::vector<float> y0 = {10, 1.5f}, y1 = {4, 2};  // by hand, as above
  const GraphKey a{1, 1, {7, 256}}, b{1, 1, {7, 512}};
  auto step = [&](const GraphKey& k, const std::vector<float>& x, const std::vector<float>& y) {
    d.set_x(x, s);
    ASSERT_TRUE(cache.run(k, s, fn).ok());
    EXPECT_EQ(d.get_y(s), y);
  };
  step(a, x0, y0);  // eager
  EXPECT_EQ(cache.stats().eager, 1);
  EXPECT_EQ(cache.size(), 0u);
  step(a, x1, y1);  // captured
  step(a, x0, y0);  // replayed
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(cache.stats().captures, 1);
  EXPECT_EQ(cache.stats().replays, 1);
  step(b, x1, y1);  // eager
  step(b, x0, y0);  // captured; drops a's graph
  EXPECT_EQ(cache.stats().evictions, 1);
  EXPECT_EQ(cache.size(), 1u);
  step(a, x1, y1);  // a starts over: eager
  EXPECT_EQ(cache.stats().eager, 3);
  step(b, x1, y1);  // b is still cached
  EXPECT_EQ(cache.stats().replays, 2);
  EXPECT_EQ(calls, 5);
}

TEST(GraphCache, ErrorsOfTheCallableAreReturned) {
  auto stream = Stream::create();
  ASSERT_TRUE(stream.ok());
  GraphCache cache;
  const Status st = cache.run({3, 1}, stream->get(), [](cudaStream_t) {
    return Status(StatusCode::invalid_argument, "bad rows");
  });
  EXPECT_EQ(st.code(), StatusCode::invalid_argument);
  EXPECT_EQ(st.message(), "bad rows");
}

}  // namespace
}  // namespace dsv4::cuda
