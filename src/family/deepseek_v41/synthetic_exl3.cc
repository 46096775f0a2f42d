// In-memory EXL3 re-encoding of synthetic weights (see synthetic_exl3.h).
#include "family/deepseek_v41/synthetic_exl3.h"

#include <map>
#include <string>
#include <variant>
#include <vector>

#include "core/thread_pool.h"
#include "family/deepseek_v41/exl3_layout.h"
#include "family/deepseek_v41/gate_weights.h"
#include "family/deepseek_v41/linear_values.h"
#include "family/deepseek_v41/synth_exl3.h"
#include "family/deepseek_v41/synthetic_weights.h"

namespace dsv4::family {
namespace {

// The exact values [out, in] of a dense linear.
std::vector<float> dense(const Fp8Linear& W) {
  const int64_t in = W.in(), B = W.block;
  return fp8_linear_values(W.weight.bytes(), W.scale.bytes(), W.out(), in, B, B, (in + B - 1) / B);
}
std::vector<float> dense(const Fp4Linear& W) {
  return fp4_linear_values(W.weight.bytes(), W.scale.bytes(), W.out(), W.in(), W.in() / 32);
}
std::vector<float> dense(const Matrix& W) {
  return present(W.weight) ? matrix_values(W.weight.bytes(), W.weight.dtype, W.weight.numel()) : std::vector<float>{};
}

// The linear as a loaded pack holds it: the EXL3 weight, no dense views.
void set_exl3(Fp8Linear& W, Exl3Ref e) { W.exl3 = std::move(e), W.weight = {}, W.scale = {}; }
void set_exl3(Fp4Linear& W, Exl3Ref e) { W.exl3 = std::move(e), W.weight = {}, W.scale = {}; }
void set_exl3(Matrix& W, Exl3Ref e) { W.exl3 = std::move(e), W.weight = {}; }

struct Job {
  LinearRef linear;
  std::vector<const Exl3Group*> groups;  // one, or wo_a's slices in order
};

}  // namespace

StatusOr<std::shared_ptr<const Model>> reencode_as_exl3(const Config& c, const Model& w, uint64_t seed,
                                                        int threads) {
  DSV4_ASSIGN_OR_RETURN(const Exl3PackPlan plan, exl3_pack_plan(c));
  auto m = std::make_shared<Model>(w);
  std::map<std::string, LinearRef> linears;
  for_each_linear(m->weights, m->plan, [&](const std::string& g, LinearRef r) { linears.emplace(g, r); });
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
    for (const Exl3Group* g : j.groups) {
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
        auto e = std::make_shared<Exl3Linear>();
        for (const Exl3Group* g : jobs[j].groups)
          add_exl3_part(*e, g->in, g->out, encode_synth_exl3(*g, v, seed));
        set_exl3(*W, std::move(e));
      }, jobs[j].linear);
  });
  return std::shared_ptr<const Model>(std::move(m));
}

StatusOr<std::shared_ptr<const Model>> exl3_gate_weights(const Config& c, int threads) {
  const auto w = synthetic_weights(c, kGateSeed, false, WeightProfile::gate);
  return reencode_as_exl3(c, *w, kGateSeed, threads);
}

}  // namespace dsv4::family
