// In-memory EXL3 re-encoding of synthetic weights (see synthetic_exl3.h).
#include "backends/cpu/synthetic_exl3.h"

#include <map>
#include <string>
#include <variant>
#include <vector>

#include "backends/cpu/gate.h"
#include "backends/cpu/load.h"
#include "backends/cpu/load_exl3.h"
#include "backends/cpu/synthetic.h"
#include "core/thread_pool.h"
#include "family/deepseek_v41/exl3_layout.h"
#include "family/deepseek_v41/synth_exl3.h"

namespace dsv4::cpu {
namespace {

using LinearRef = std::variant<Fp8Weight*, Fp4Weight*, Bf16Weight*>;

// Every linear of `w` under its release group name ("layers.3.attn.wq_a", "head", "mtp.0.main_proj"),
// the names load_weights reads them from. Linears a layer does not have (out == 0) are left out.
std::map<std::string, LinearRef> linears_of(ModelWeights& w) {
  std::map<std::string, LinearRef> m;
  const auto put = [&m](const std::string& name, auto* W) {
    if (W->out > 0) m.emplace(name, LinearRef{W});
  };
  const auto block = [&put](const std::string& p, BlockWeights& b) {
    AttentionWeights& a = b.attn;
    put(p + "attn.wq_a", &a.wq_a);
    put(p + "attn.wq_b", &a.wq_b);
    put(p + "attn.wkv", &a.wkv);
    put(p + "attn.wo_a", &a.wo_a);
    put(p + "attn.wo_b", &a.wo_b);
    put(p + "attn.compressor.wkv", &a.comp_wkv);
    put(p + "attn.compressor.wgate", &a.comp_wgate);
    put(p + "attn.indexer.wk", &a.idx_wk);
    put(p + "attn.indexer.wq_b", &a.idx_wq_b);
    put(p + "attn.indexer.weights_proj", &a.idx_weights_proj);
    put(p + "attn.indexer.compressor.wkv", &a.idx_comp_wkv);
    put(p + "attn.indexer.compressor.wgate", &a.idx_comp_wgate);
    put(p + "ffn.gate", &b.ffn.gate);
    for (size_t e = 0; e < b.ffn.experts.size(); ++e) {
      const std::string q = p + "ffn.experts." + std::to_string(e) + ".";
      put(q + "w1", &b.ffn.experts[e].w1);
      put(q + "w2", &b.ffn.experts[e].w2);
      put(q + "w3", &b.ffn.experts[e].w3);
    }
    put(p + "ffn.shared_experts.w1", &b.ffn.shared.w1);
    put(p + "ffn.shared_experts.w2", &b.ffn.shared.w2);
    put(p + "ffn.shared_experts.w3", &b.ffn.shared.w3);
    if (b.engram) put(p + "engram.wkv", &b.engram->wkv);
  };
  for (size_t l = 0; l < w.layers.size(); ++l) block("layers." + std::to_string(l) + ".", w.layers[l]);
  put("head", &w.head);
  if (w.dspark) {
    DsparkWeights& S = *w.dspark;
    for (size_t s = 0; s < S.stages.size(); ++s) block("mtp." + std::to_string(s) + ".", S.stages[s]);
    put("mtp.0.main_proj", &S.main_proj);
    const std::string last = "mtp." + std::to_string(S.stages.size() - 1) + ".";
    put(last + "markov_head.head", &S.markov_head);
    put(last + "confidence_head.proj", &S.confidence);
  }
  return m;
}

// The exact values [out, in] of a dense linear.
std::vector<float> dense(const Fp8Weight& W) {
  std::vector<float> v(W.out * W.in);
  for (int64_t n = 0; n < W.out; ++n)
    for (int64_t k = 0; k < W.in; ++k) v[n * W.in + k] = W.at(n, k);
  return v;
}
std::vector<float> dense(const Fp4Weight& W) {
  std::vector<float> v(W.out * W.in);
  for (int64_t n = 0; n < W.out; ++n)
    for (int64_t k = 0; k < W.in; ++k) v[n * W.in + k] = W.w[n * W.in + k] * W.scale[n * (W.in / 32) + k / 32];
  return v;
}
std::vector<float> dense(const Bf16Weight& W) { return W.w; }

// The linear as a loaded pack holds it: the EXL3 weight, no dense values; a bf16 matrix takes the
// EXL3 weight's totals as its shape (load.cc's matrix(): wo_a's block-diagonal parts summed on both sides).
void set_exl3(Fp8Weight& W, std::shared_ptr<const Exl3Weight> e) { W.exl3 = std::move(e), W.w = {}, W.scale = {}; }
void set_exl3(Fp4Weight& W, std::shared_ptr<const Exl3Weight> e) { W.exl3 = std::move(e), W.w = {}, W.scale = {}; }
void set_exl3(Bf16Weight& W, std::shared_ptr<const Exl3Weight> e) {
  W.out = e->out, W.in = e->in, W.w = {};
  W.exl3 = std::move(e);
}

struct Job {
  LinearRef linear;
  std::vector<const family::Exl3Group*> groups;  // one, or wo_a's slices in order
};

}  // namespace

Status reencode_as_exl3(const family::Config& c, ModelWeights& w, uint64_t seed, int threads) {
  DSV4_ASSIGN_OR_RETURN(const family::Exl3PackPlan plan, family::exl3_pack_plan(c));
  const std::map<std::string, LinearRef> linears = linears_of(w);
  std::vector<Job> jobs;
  for (const auto& [release, idx] : plan.by_release) {
    const auto it = linears.find(release);
    if (it == linears.end()) {
      if (release.rfind("mtp.", 0) == 0 && !w.dspark) continue;  // no drafter: its groups are not needed
      return error(StatusCode::invalid_argument, "EXL3 re-encoding: the weights have no linear '{}'", release);
    }
    Job j{it->second, plan.groups_of(release)};
    const auto [in, out] = std::visit([](auto* W) { return std::pair{W->in, W->out}; }, j.linear);
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
        auto e = std::make_shared<Exl3Weight>();
        for (const family::Exl3Group* g : jobs[j].groups) add_exl3_part(*e, *g, family::encode_synth_exl3(*g, v, seed));
        set_exl3(*W, std::move(e));
      }, jobs[j].linear);
  });
  return ok_status();
}

StatusOr<std::shared_ptr<ModelWeights>> exl3_gate_weights(const family::Config& c, int threads) {
  std::shared_ptr<ModelWeights> w = synthetic_weights(model_config_from(c), gate::kSeed, false, WeightProfile::gate);
  DSV4_RETURN_IF_ERROR(reencode_as_exl3(c, *w, gate::kSeed, threads));
  return w;
}

}  // namespace dsv4::cpu
