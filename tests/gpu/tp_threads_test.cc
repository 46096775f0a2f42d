// Tensor parallelism of the CUDA forward at TP 2, 4 and 8 on ONE GPU: each rank is a thread with its own
// Forward over its slice of the weights (fabric::rank_model, the expert-parallel plan), and the
// ranks' gathers are device copies through a shared buffer (ThreadCollective below) instead of NCCL. The
// per-rank arithmetic is the same code a rank process runs on its own GPU, so this shows what a 2-GPU
// machine cannot: TP 4 logits equal TP 1's bit for bit (every rank identical, pieces == whole), on random
// weights and on the gate weights, where TP N also passes the whole-model gate (docs/numerics.md); and the
// same on the EXL3 gate weights (family::exl3_gate_weights, the Mia layout's linears EXL3-coded) of the tiny
// and small presets at TP 2 and 4, where wq_b, wo_a and the head are cut along EXL3's out dimension and the
// routed experts run through exl3_routed_experts (fabric/exl3_cut.h). NCCL itself is covered by
// tests/gpu/tp/tp_forward_test on two GPUs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/gate.h"
#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/synthetic_exl3.h"
#include "family/deepseek_v41/synthetic_weights.h"
#include "backends/cuda/tp/collective.h"
#include "backends/cuda/forward/forward.h"
#include "backends/cuda/model/model.h"
#include "fabric/rank_weights.h"
#include "fabric/split_plan.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/tensors.h"
#include "forward_testing.h"

namespace dsv4 {
namespace {

using engine::Piece;
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

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return !a.empty() && a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// The small preset with 16 attention heads (its 4 output groups stay): the CUDA sparse attention runs
// heads in blocks of 4 per rank, so TP 4 needs 16 heads (serve refuses fewer at load); TP 8 has no plan
// (4 output groups do not split over 8 ranks) and is skipped with that reason.
family::Config small_config() {
  family::Config c = family::preset_config(family::Preset::small, family::Variant::v41);
  c.num_attention_heads = 16;
  return c;
}

using Prompts = std::vector<std::vector<int32_t>>;
using Logits = std::vector<std::vector<float>>;

std::shared_ptr<const family::Model> weights(const family::Config& cfg, family::WeightProfile profile) {
  return family::synthetic_weights(cfg, cpu::gate::kSeed, false, profile);
}

// TP 1 (the whole model, no collective): each prompt's logits (every row), fed whole to a fresh stream.
Logits tp1_run(std::shared_ptr<const family::Model> w, const Prompts& prompts) {
  cuda::ModelDeviceOptions mo;
  mo.dspark = false;
  auto m = cuda::ModelDevice::upload(std::move(w), mo);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return {};
  auto f = cuda::Forward::create(std::shared_ptr<const cuda::ModelDevice>(std::move(*m)), forward_options());
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  if (!f.ok()) return {};
  Logits out;
  for (const auto& p : prompts) {
    auto s = (*f)->open_stream();
    EXPECT_TRUE(s.ok());
    out.push_back(s.ok() ? logits_of(**f, *s, p) : std::vector<float>{});
  }
  return out;
}

// A rank's logits of each prompt fed whole, and of prompt 0 as pieces 13 + the rest.
struct RankOut {
  Logits whole;
  std::vector<float> pieces;
  std::string error;
};

// TP `tp` with the ranks as threads on this GPU: each rank's slice of `whole` cut as a rank process cuts it,
// then every rank runs the same calls.
std::vector<RankOut> tp_run(const family::ModelPlan& cfg, const fabric::SplitPlan& plan, const family::Model& whole,
                            int tp, const Prompts& prompts) {
  std::vector<std::unique_ptr<cuda::Forward>> ranks;
  ThreadGroup group(tp, kMaxCallRows * std::max<int64_t>(cfg.dim, cfg.vocab));
  EXPECT_TRUE(group.ok()) << "staging buffer or events";
  if (!group.ok()) return {};
  for (int r = 0; r < tp; ++r) {
    auto cut = fabric::rank_model(whole, plan, r);
    EXPECT_TRUE(cut.ok()) << cut.status().to_string();
    if (!cut.ok()) return {};
    cuda::ModelDeviceOptions mo;
    mo.dspark = false;
    auto m = cuda::ModelDevice::upload(*cut, mo);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (!m.ok()) return {};
    cuda::ForwardOptions fo = forward_options();
    fo.collective = std::make_shared<ThreadCollective>(group, r);
    auto f = cuda::Forward::create(std::shared_ptr<const cuda::ModelDevice>(std::move(*m)), fo);
    EXPECT_TRUE(f.ok()) << f.status().to_string();
    if (!f.ok()) return {};
    ranks.push_back(std::move(*f));
  }
  std::vector<RankOut> out(tp);
  std::vector<std::thread> threads;
  for (int r = 0; r < tp; ++r)
    threads.emplace_back([&, r] {
      cuda::Forward& f = *ranks[r];
      auto run = [&](const std::vector<int32_t>& t, int32_t s) -> std::vector<float> {
        auto res = f.forward({Piece{s, t, all_rows(static_cast<int>(t.size()))}});
        if (!res.ok()) {
          out[r].error = res.status().to_string();
          return {};
        }
        return (*res)[0].logits;
      };
      auto fresh = [&]() -> int32_t {
        auto s = f.open_stream();
        if (!s.ok()) out[r].error = "open_stream";
        return s.ok() ? *s : -1;
      };
      for (const auto& p : prompts) out[r].whole.push_back(run(p, fresh()));
      const auto& p0 = prompts[0];
      const int32_t s = fresh();
      out[r].pieces = run(std::vector<int32_t>(p0.begin(), p0.begin() + 13), s);
      const auto rest = run(std::vector<int32_t>(p0.begin() + 13, p0.end()), s);
      out[r].pieces.insert(out[r].pieces.end(), rest.begin(), rest.end());
    });
  for (auto& t : threads) t.join();
  return out;
}

// Every rank equals rank 0, pieces == whole on every rank, and rank 0 equals TP 1 on every prompt.
void expect_equal_to_tp1(int tp, const std::vector<RankOut>& out, const Logits& one, const char* what) {
  ASSERT_EQ(static_cast<int>(out.size()), tp);
  for (int r = 0; r < tp; ++r) {
    ASSERT_TRUE(out[r].error.empty()) << "rank " << r << ": " << out[r].error;
    ASSERT_EQ(out[r].whole.size(), one.size());
    for (size_t k = 0; k < one.size(); ++k)
      EXPECT_TRUE(same_bits(out[r].whole[k], out[0].whole[k])) << "rank " << r << " differs from rank 0, prompt " << k;
    EXPECT_TRUE(same_bits(out[r].pieces, out[r].whole[0])) << "rank " << r << ": pieces 13 + rest differ from the whole prompt";
  }
  int equal = 0;
  double worst = 0;
  for (size_t k = 0; k < one.size(); ++k) {
    equal += same_bits(out[0].whole[k], one[k]);
    worst = std::max(worst, nrms(out[0].whole[k], one[k]));
  }
  std::printf("TP %d on one GPU (threads), %s: %d of %zu prompts equal TP 1 bit for bit (largest NRMS %.3e)\n", tp,
              what, equal, one.size(), worst);
  EXPECT_EQ(equal, static_cast<int>(one.size())) << "TP " << tp << " logits differ from TP 1";
}

class TpThreads : public testing::TestWithParam<int> {
 protected:
  const family::Config fc_ = small_config();
  const family::ModelPlan cfg_ = family::build_plan(fc_);
};

// Random weights (the exact-equality weights of the other tests), one 40-token prompt.
TEST_P(TpThreads, RandomWeightsEqualOneGpuBitForBit) {
  const int tp = GetParam();
  auto plan = fabric::make_split_plan(fc_, family::expected_tensors(fc_), tp, fabric::ExpertSplit::expert_parallel);
  if (!plan.ok()) GTEST_SKIP() << "no TP " << tp << " plan for the small preset: " << plan.status().to_string();
  const Prompts prompts = {prompt(40, 0)};
  static const std::shared_ptr<const family::Model> full = weights(fc_, family::WeightProfile::random);
  static const Logits one = tp1_run(full, prompts);
  ASSERT_EQ(one.size(), 1u);
  ASSERT_EQ(one[0].size(), static_cast<size_t>(40 * cfg_.vocab));
  expect_equal_to_tp1(tp, tp_run(cfg_, *plan, *full, tp, prompts), one, "small preset with 16 heads, random weights");
}

// The gate weights and prompts (docs/numerics.md): TP N equals TP 1 bit for bit on all 8 gate prompts, and
// passes the whole-model gate against the CPU oracle.
TEST_P(TpThreads, GateWeightsEqualOneGpuAndPassTheGate) {
  const int tp = GetParam();
  auto plan = fabric::make_split_plan(fc_, family::expected_tensors(fc_), tp, fabric::ExpertSplit::expert_parallel);
  if (!plan.ok()) GTEST_SKIP() << "no TP " << tp << " plan for the small preset: " << plan.status().to_string();
  Prompts prompts;
  for (int k = 0; k < cpu::gate::kPrompts; ++k) prompts.push_back(cpu::gate::prompt(k, cfg_.vocab));
  static const std::shared_ptr<const family::Model> full = weights(fc_, family::WeightProfile::gate);
  static const Logits one = tp1_run(full, prompts);
  ASSERT_EQ(one.size(), prompts.size());
  const std::vector<RankOut> out = tp_run(cfg_, *plan, *full, tp, prompts);
  expect_equal_to_tp1(tp, out, one, "small preset with 16 heads, gate weights");
  if (out.empty() || !out[0].error.empty()) return;
  const cpu::gate::Verdict v = gpu_testing::whole_model_gate(full, [&](int k) { return out[0].whole[static_cast<size_t>(k)]; });
  std::printf("TP %d whole-model gate: %s\n", tp, v.summary().c_str());
  EXPECT_TRUE(v.pass()) << v.summary();
}

INSTANTIATE_TEST_SUITE_P(World, TpThreads, testing::Values(2, 4, 8));

// The EXL3 presets: 16 attention heads (the CUDA sparse attention runs 4 heads per rank at TP 4); the tiny
// preset also with 4 output groups (its 2 do not split over 4 ranks; 64 outputs per group, one EXL3 part
// padded to 128 each). wq_b then has 16 x 128 (tiny) or 16 x 512 (small) columns: whole 128-column blocks
// per rank at TP 2 and 4. The head (V = 129,280) is cut at TP 2 and kept whole on every rank at TP 4.
family::Config exl3_config(family::Preset p) {
  family::Config c = family::preset_config(p, family::Variant::v41);
  c.num_attention_heads = 16;
  if (p == family::Preset::tiny) c.o_groups = 4;
  return c;
}

// One preset's EXL3 gate weights, encoded once, and TP 1's logits of the gate prompts on them.
struct Exl3Case {
  std::shared_ptr<const family::Model> weights;
  Logits one;
};

const Exl3Case& exl3_case(family::Preset p, const Prompts& prompts) {
  static std::map<family::Preset, Exl3Case> cases;  // the tests of one binary run one at a time
  auto it = cases.find(p);
  if (it != cases.end()) return it->second;
  Exl3Case k;
  auto w = family::exl3_gate_weights(exl3_config(p));
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  if (w.ok()) {
    k.weights = *w;
    k.one = tp1_run(k.weights, prompts);
  }
  return cases.emplace(p, std::move(k)).first->second;
}

class TpThreadsExl3 : public testing::TestWithParam<std::tuple<family::Preset, int>> {};

// The EXL3 gate weights and prompts: TP N equals TP 1 bit for bit on all 8 gate prompts (every rank alike,
// pieces == whole), and passes the whole-model gate against the CPU oracle on the same EXL3 weights.
TEST_P(TpThreadsExl3, GateWeightsEqualOneGpuAndPassTheGate) {
  const auto [preset, tp] = GetParam();
  const family::Config fc = exl3_config(preset);
  const family::ModelPlan cfg = family::build_plan(fc);
  auto plan = fabric::make_split_plan(fc, family::expected_tensors(fc), tp, fabric::ExpertSplit::expert_parallel);
  if (!plan.ok()) GTEST_SKIP() << "no TP " << tp << " plan: " << plan.status().to_string();
  Prompts prompts;
  for (int k = 0; k < cpu::gate::kPrompts; ++k) prompts.push_back(cpu::gate::prompt(k, cfg.vocab));
  const Exl3Case& k = exl3_case(preset, prompts);
  ASSERT_TRUE(k.weights);
  ASSERT_EQ(k.one.size(), prompts.size());
  const std::vector<RankOut> out = tp_run(cfg, *plan, *k.weights, tp, prompts);  // encoded once, cut per rank
  const std::string what = std::string(family::preset_name(preset)) + " preset with 16 heads, EXL3 gate weights";
  expect_equal_to_tp1(tp, out, k.one, what.c_str());
  if (out.empty() || !out[0].error.empty()) return;
  const cpu::gate::Verdict v =
      gpu_testing::whole_model_gate(k.weights, [&](int p) { return out[0].whole[static_cast<size_t>(p)]; });
  std::printf("TP %d whole-model gate, %s: %s\n", tp, what.c_str(), v.summary().c_str());
  EXPECT_TRUE(v.pass()) << v.summary();
}

INSTANTIATE_TEST_SUITE_P(Exl3, TpThreadsExl3,
                         testing::Combine(testing::Values(family::Preset::tiny, family::Preset::small),
                                          testing::Values(2, 4)),
                         [](const testing::TestParamInfo<std::tuple<family::Preset, int>>& i) {
                           return std::string(family::preset_name(std::get<0>(i.param))) + "_tp" +
                                  std::to_string(std::get<1>(i.param));
                         });

}  // namespace
}  // namespace dsv4
