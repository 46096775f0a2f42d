// In-memory EXL3 re-encoding of synthetic weights (see synthetic_exl3.h).
#include "backends/cpu/synthetic_exl3.h"

#include <map>
#include <string>
#include <variant>
#include <vector>

#include "backends/cpu/gate.h"
#include "backends/cpu/linear.h"
#include "family/deepseek_v41/synthetic_weights.h"
#include "core/thread_pool.h"
#include "family/deepseek_v41/exl3_layout.h"
#include "family/deepseek_v41/synth_exl3.h"

namespace dsv4::cpu {
namespace {

// The exact values [out, in] of a dense linear.
std::vector<float> dense(const family::Fp8Linear& W) {
  const int64_t out = W.out(), in = W.in();
  std::vector<float> v(static_cast<size_t>(out * in)), ws((in + W.block - 1) / W.block);
  for (int64_t n = 0; n < out; ++n) {
    fp8_weight_row(W, n, &v[n * in], ws.data());
    for (int64_t k = 0; k < in; ++k) v[n * in + k] *= ws[k / W.block];
  }
  return v;
}
std::vector<float> dense(const family::Fp4Linear& W) {
  const int64_t out = W.out(), in = W.in();
  std::vector<float> v(static_cast<size_t>(out * in)), ws(in / 32);
  for (int64_t n = 0; n < out; ++n) {
    e2m1_values(W.weight.bytes() + n * (in / 2), in, &v[n * in]);
    ue8m0_values(W.scale.bytes() + n * (in / 32), in / 32, ws.data());
    for (int64_t k = 0; k < in; ++k) v[n * in + k] *= ws[k / 32];
  }
  return v;
}
std::vector<float> dense(const family::Matrix& W) { return floats(W.weight); }

// The linear as a loaded pack holds it: the EXL3 weight, no dense views.
void set_exl3(family::Fp8Linear& W, family::Exl3Ref e) { W.exl3 = std::move(e), W.weight = {}, W.scale = {}; }
void set_exl3(family::Fp4Linear& W, family::Exl3Ref e) { W.exl3 = std::move(e), W.weight = {}, W.scale = {}; }
void set_exl3(family::Matrix& W, family::Exl3Ref e) { W.exl3 = std::move(e), W.weight = {}; }

struct Job {
  family::LinearRef linear;
  std::vector<const family::Exl3Group*> groups;  // one, or wo_a's slices in order
};

}  // namespace

StatusOr<std::shared_ptr<const family::Model>> reencode_as_exl3(const family::Config& c, const family::Model& w,
                                                                uint64_t seed, int threads) {
  DSV4_ASSIGN_OR_RETURN(const family::Exl3PackPlan plan, family::exl3_pack_plan(c));
  auto m = std::make_shared<family::Model>(w);
  std::map<std::string, family::LinearRef> linears;
  family::for_each_linear(m->weights, m->plan, [&](const std::string& g, family::LinearRef r) { linears.emplace(g, r); });
  std::vector<Job> jobs;
  for (const auto& [release, idx] : plan.by_release) {
    const auto it = linears.find(release);
    if (it == linears.end()) {
      if (release.rfind("mtp.", 0) == 0 && m->weights.dspark.empty()) continue;  // no drafter: its groups are not needed
      return error(StatusCode::invalid_argument, "EXL3 re-encoding: the weights have no linear '{}'", release);
    }
    Job j{it->second, plan.groups_of(release)};
    const auto [in, out] = std::visit([](auto* W) { return std::pair{W->in(), W->out()}; }, j.linear);
    int64_t outs = 0;
    for (const family::Exl3Group* g : j.groups) {
      if (g->in != in) outs = -1;
      if (outs >= 0) outs += g->out;
    }
    if (outs != out)
      return error(StatusCode::invalid_argument, "EXL3 re-encoding: '{}' is [{}, {}], the layout's groups differ",
                   release, out, in);
    jobs.push_back(std::move(j));
  }
  // Each job reads and then replaces its own linear only: the jobs are independent.
  ThreadPool pool(threads);
  pool.parallel_for(static_cast<int64_t>(jobs.size()), [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j)
      std::visit([&](auto* W) {
        const std::vector<float> v = dense(*W);
        auto e = std::make_shared<family::Exl3Linear>();
        for (const family::Exl3Group* g : jobs[j].groups)
          family::add_exl3_part(*e, g->in, g->out, family::encode_synth_exl3(*g, v, seed));
        set_exl3(*W, std::move(e));
      }, jobs[j].linear);
  });
  return std::shared_ptr<const family::Model>(std::move(m));
}

StatusOr<std::shared_ptr<const family::Model>> exl3_gate_weights(const family::Config& c, int threads) {
  const auto w = family::synthetic_weights(c, gate::kSeed, false, family::WeightProfile::gate);
  return reencode_as_exl3(c, *w, gate::kSeed, threads);
}

}  // namespace dsv4::cpu
