// Tensor parallelism of the CUDA forward at TP 2, 4 and 8 on ONE GPU: each rank is a thread with its own
// Forward over its slice of the weights (fabric::slice_weights_for_rank, the expert-parallel plan), and the
// ranks' gathers are device copies through a shared buffer (ThreadCollective below) instead of NCCL. The
// per-rank arithmetic is the same code a rank process runs on its own GPU, so this proves what no 2-GPU
// machine can: TP 4 and TP 8 logits equal TP 1's bit for bit (and pieces == whole, every rank identical)
// on the small preset. NCCL itself is covered by tests/gpu/tp/tp_forward_test on two GPUs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/load.h"
#include "backends/cpu/synthetic.h"
#include "backends/cuda/collective.h"
#include "backends/cuda/forward.h"
#include "backends/cuda/model.h"
#include "fabric/rank_weights.h"
#include "fabric/split_plan.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/tensors.h"
#include "forward_testing.h"

namespace dsv4 {
namespace {

using cpu::Piece;
using gpu_testing::all_rows;
using gpu_testing::nrms;
using gpu_testing::prompt;

// What the ranks of one process share: a host barrier, a device staging buffer [world, max_count] and,
// per rank, the events that mark its copy into the buffer and its copy out of it.
class ThreadGroup {
 public:
  ThreadGroup(int world, int64_t max_count) : world_(world), max_count_(max_count), in_(world), out_(world) {
    ok_ = cudaMalloc(&staging_, static_cast<size_t>(world) * max_count * sizeof(float)) == cudaSuccess;
    for (int r = 0; r < world; ++r) {
      ok_ = ok_ && cudaEventCreateWithFlags(&in_[r], cudaEventDisableTiming) == cudaSuccess;
      ok_ = ok_ && cudaEventCreateWithFlags(&out_[r], cudaEventDisableTiming) == cudaSuccess;
    }
  }
  ~ThreadGroup() {
    for (int r = 0; r < world_; ++r) {
      if (in_[r]) cudaEventDestroy(in_[r]);
      if (out_[r]) cudaEventDestroy(out_[r]);
    }
    cudaFree(staging_);
  }
  bool ok() const { return ok_; }
  // True when every rank has arrived (a generation counter makes it reusable); false after 60 s, so a
  // rank that failed before a gather ends the test instead of hanging it.
  bool barrier() {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t gen = generation_;
    if (++arrived_ == world_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return true;
    }
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return generation_ != gen; });
  }
  int world_;
  int64_t max_count_;
  float* staging_ = nullptr;
  std::vector<cudaEvent_t> in_, out_;

 private:
  bool ok_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int64_t generation_ = 0;
};

// all_gather as two device copies per rank, ordered by events: (barrier: every rank recorded its previous
// copy-out) wait for every rank's previous copy-out, copy mine into slot `rank`, record; (barrier: every
// rank recorded its copy-in) wait for every rank's copy-in, copy the whole buffer out, record. The gathered
// bits are the ranks' bits, as with NCCL's all-gather.
class ThreadCollective : public cuda::Collective {
 public:
  ThreadCollective(ThreadGroup& g, int32_t rank) : g_(g), rank_(rank) {}
  int32_t rank() const override { return rank_; }
  int32_t world() const override { return g_.world_; }
  Status all_reduce_ordered(float*, int64_t, cudaStream_t) override {
    return Status(StatusCode::unimplemented, "the threaded test collective has no reduction (the expert-parallel plan only gathers)");
  }
  Status all_gather(const float* mine, int64_t count, float* all, cudaStream_t stream) override {
    if (count > g_.max_count_) return Status(StatusCode::invalid_argument, "gather larger than the staging buffer");
    if (!g_.barrier()) return Status(StatusCode::unavailable, "a rank never reached the gather");
    for (cudaEvent_t e : g_.out_)
      if (cudaStreamWaitEvent(stream, e, 0) != cudaSuccess) return Status(StatusCode::internal, "wait");
    float* slot = g_.staging_ + static_cast<int64_t>(rank_) * count;
    if (cudaMemcpyAsync(slot, mine, count * sizeof(float), cudaMemcpyDeviceToDevice, stream) != cudaSuccess ||
        cudaEventRecord(g_.in_[rank_], stream) != cudaSuccess)
      return Status(StatusCode::internal, "copy in");
    if (!g_.barrier()) return Status(StatusCode::unavailable, "a rank never reached the gather");
    for (cudaEvent_t e : g_.in_)
      if (cudaStreamWaitEvent(stream, e, 0) != cudaSuccess) return Status(StatusCode::internal, "wait");
    if (cudaMemcpyAsync(all, g_.staging_, g_.world_ * count * sizeof(float), cudaMemcpyDeviceToDevice, stream) != cudaSuccess ||
        cudaEventRecord(g_.out_[rank_], stream) != cudaSuccess)
      return Status(StatusCode::internal, "copy out");
    return ok_status();
  }

 private:
  ThreadGroup& g_;
  int32_t rank_;
};

constexpr int64_t kMaxCallRows = 64;

cuda::ForwardOptions forward_options() {
  cuda::ForwardOptions fo;
  fo.max_context = 1024;
  fo.max_rollback = 16;
  fo.max_call_rows = kMaxCallRows;
  return fo;
}

std::vector<float> logits_of(cuda::Forward& f, int32_t stream, const std::vector<int32_t>& toks) {
  auto r = f.forward({Piece{stream, toks, all_rows(static_cast<int>(toks.size()))}});
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.status().to_string());
  return r.ok() ? (*r)[0].logits : std::vector<float>{};
}

// The small preset's synthetic weights (seed 1, no drafter), made once.
std::shared_ptr<const cpu::ModelWeights> full_weights(const cpu::ModelConfig& cfg) {
  static const std::shared_ptr<const cpu::ModelWeights> w = cpu::synthetic_weights(cfg, 1, false);
  return w;
}

// TP 1's logits of `toks` (every row), made once.
const std::vector<float>& tp1_logits(const std::shared_ptr<const cpu::ModelWeights>& w, const std::vector<int32_t>& toks) {
  static const std::vector<float> logits = [&] {
    cuda::ModelDeviceOptions mo;
    mo.dspark = false;
    auto m = cuda::ModelDevice::upload(*w, mo);
    if (!m.ok()) return std::vector<float>{};
    auto f = cuda::Forward::create(std::shared_ptr<const cuda::ModelDevice>(std::move(*m)), forward_options());
    if (!f.ok()) return std::vector<float>{};
    auto s = (*f)->open_stream();
    return s.ok() ? logits_of(**f, *s, toks) : std::vector<float>{};
  }();
  return logits;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return !a.empty() && a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Each rank's logits of the whole 40-token prompt, and of the same prompt as pieces 13 + 27.
struct RankOut {
  std::vector<float> whole, pieces;
  std::string error;
};

class TpThreads : public testing::TestWithParam<int> {};

TEST_P(TpThreads, EqualsOneGpuBitForBit) {
  const int tp = GetParam();
  const family::Config fc = family::preset_config(family::Preset::small, family::Variant::v41);
  const cpu::ModelConfig cfg = cpu::model_config_from(fc);
  auto plan = fabric::make_split_plan(fc, family::expected_tensors(fc), tp, fabric::ExpertSplit::expert_parallel);
  if (!plan.ok()) GTEST_SKIP() << "no TP " << tp << " plan for the small preset: " << plan.status().to_string();
  const auto toks = prompt(40, 0);

  // TP 1: the whole model, no collective (computed once for the three worlds).
  const std::shared_ptr<const cpu::ModelWeights> full = full_weights(cfg);
  const std::vector<float>& one = tp1_logits(full, toks);
  ASSERT_EQ(one.size(), static_cast<size_t>(40 * cfg.vocab));

  // TP N: the ranks' models built one after another, then run as threads.
  std::vector<std::unique_ptr<cuda::Forward>> ranks;
  ThreadGroup group(tp, kMaxCallRows * std::max<int64_t>(cfg.dim, cfg.vocab));
  ASSERT_TRUE(group.ok()) << "staging buffer or events";
  // Every rank's own copy of the weights (the generator is deterministic), made in parallel.
  std::vector<std::shared_ptr<cpu::ModelWeights>> rank_weights(tp);
  {
    std::vector<std::thread> makers;
    for (int r = 0; r < tp; ++r) makers.emplace_back([&, r] { rank_weights[r] = cpu::synthetic_weights(cfg, 1, false); });
    for (auto& t : makers) t.join();
  }
  for (int r = 0; r < tp; ++r) {
    std::shared_ptr<cpu::ModelWeights>& w = rank_weights[r];
    Status cut = fabric::slice_weights_for_rank(*w, *plan, r);
    ASSERT_TRUE(cut.ok()) << cut.to_string();
    cuda::ModelDeviceOptions mo;
    mo.dspark = false;
    auto m = cuda::ModelDevice::upload(*w, mo);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    cuda::ForwardOptions fo = forward_options();
    fo.collective = std::make_shared<ThreadCollective>(group, r);
    auto f = cuda::Forward::create(std::shared_ptr<const cuda::ModelDevice>(std::move(*m)), fo);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    ranks.push_back(std::move(*f));
    w.reset();
  }
  std::vector<RankOut> out(tp);
  std::vector<std::thread> threads;
  for (int r = 0; r < tp; ++r)
    threads.emplace_back([&, r] {
      cuda::Forward& f = *ranks[r];
      auto run = [&](int32_t s, const std::vector<int32_t>& t) -> std::vector<float> {
        auto res = f.forward({Piece{s, t, all_rows(static_cast<int>(t.size()))}});
        if (!res.ok()) {
          out[r].error = res.status().to_string();
          return {};
        }
        return (*res)[0].logits;
      };
      auto s0 = f.open_stream(), s1 = f.open_stream();
      if (!s0.ok() || !s1.ok()) {
        out[r].error = "open_stream";
        return;
      }
      out[r].whole = run(*s0, toks);
      out[r].pieces = run(*s1, std::vector<int32_t>(toks.begin(), toks.begin() + 13));
      const auto rest = run(*s1, std::vector<int32_t>(toks.begin() + 13, toks.end()));
      out[r].pieces.insert(out[r].pieces.end(), rest.begin(), rest.end());
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < tp; ++r) {
    ASSERT_TRUE(out[r].error.empty()) << "rank " << r << ": " << out[r].error;
    EXPECT_TRUE(same_bits(out[r].whole, out[0].whole)) << "rank " << r << " differs from rank 0";
    EXPECT_TRUE(same_bits(out[r].pieces, out[r].whole)) << "rank " << r << ": pieces 13 + 27 differ from the whole prompt";
  }
  const bool equal = same_bits(out[0].whole, one);
  std::printf("TP %d on one GPU (threads), small preset, 40-row prompt: TP %d == TP 1 bit for bit: %s (NRMS %.3e)\n", tp,
              tp, equal ? "yes" : "no", nrms(out[0].whole, one));
  EXPECT_TRUE(equal) << "TP " << tp << " logits differ from TP 1: NRMS " << nrms(out[0].whole, one);
}

INSTANTIATE_TEST_SUITE_P(World, TpThreads, testing::Values(2, 4, 8));

}  // namespace
}  // namespace dsv4
