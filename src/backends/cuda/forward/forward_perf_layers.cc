// The per-layer prefill table of `dsv4 bench` (see forward_perf_layers.h).
#include "backends/cuda/forward/forward_perf_layers.h"

#include <algorithm>
#include <chrono>

#include "backends/cuda/forward/forward.h"
#include "family/deepseek_v41/layer_roles.h"

namespace dsv4::cuda {

Status run_layer_prefill(const std::shared_ptr<const ModelDevice>& model, const BenchCut& cut,
                         const ForwardBenchOptions& f, std::FILE* out, std::vector<family::RoleTime>* times) {
  const family::ModelPlan& cfg = model->config;
  const std::vector<int64_t> contexts = f.prefill_contexts.empty() ? std::vector<int64_t>{0} : f.prefill_contexts;
  const int n = std::max(1, f.iters / 2);
  std::fprintf(out, "\nper-layer prefill: one chunk after the cached rows (a fresh stream each chunk, declared to hold "
                    "them: zero-valued window, compressed and index-key rows), every layer on every row (no bounded "
                    "replay), eager; each layer's device time from events around its work, mean of %d chunks after one "
                    "warm-up\n\n| cached rows | chunk | layer | role | rows | ms/chunk | tokens/s | share |\n"
                    "|---|---|---|---|---|---|---|---|\n", n);
  for (int64_t P : contexts) {
    for (int64_t T : f.prefill) {
      ForwardOptions o;
      o.max_context = P + T + 64;
      o.max_call_rows = T;
      o.bounded_replay = false;
      auto fw = Forward::create(model, o);
      if (!fw.ok() && fw.status().code() == StatusCode::resource_exhausted) {  // the other points may still fit
        std::fprintf(out, "| %lld | %lld | - | does not fit: %s | | | | |\n", static_cast<long long>(P),
                     static_cast<long long>(T), fw.status().message().c_str());
        continue;
      }
      if (!fw.ok()) return fw.status().with_context(fmt::format("{} cached rows, {}-row chunk", P, T));
      Forward& F = **fw;
      std::vector<int32_t> toks(T);
      for (int64_t i = 0; i < T; ++i) toks[i] = static_cast<int32_t>((i * 7919) % cfg.vocab);
      auto chunk = [&]() -> Status {
        DSV4_ASSIGN_OR_RETURN(const int32_t s, F.open_stream());
        if (P > 0) DSV4_RETURN_IF_ERROR(F.assume_length(s, P));
        DSV4_RETURN_IF_ERROR(F.forward({engine::Piece{s, toks, {static_cast<int32_t>(T - 1)}}}).status());
        return F.close_stream(s);
      };
      DSV4_RETURN_IF_ERROR(chunk());  // warm-up
      std::vector<double> ms(cfg.n_layers, 0.0);
      F.set_layer_times(&ms);
      const auto t0 = std::chrono::steady_clock::now();
      Status st = ok_status();
      for (int i = 0; i < n && st.ok(); ++i) st = chunk();
      const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / n;
      F.set_layer_times(nullptr);
      DSV4_RETURN_IF_ERROR(st);
      double sum = 0;
      for (double& v : ms) sum += (v /= n);
      const std::vector<int64_t>& rows = F.layer_rows();
      if (times)
        for (int l = 0; l < cfg.n_layers; ++l) times->push_back({family::layer_role(cfg.layers[l]), T, P, ms[l]});
      for (int l = 0; l < cfg.n_layers; ++l)
        std::fprintf(out, "| %lld | %lld | %d | %s | %lld | %.2f | %.0f | %.1f%% |\n", static_cast<long long>(P),
                     static_cast<long long>(T), cut.ids[l], cut.roles[l].c_str(),
                     static_cast<long long>(l < static_cast<int>(rows.size()) ? rows[l] : T), ms[l],
                     ms[l] > 0 ? T * 1e3 / ms[l] : 0.0, sum > 0 ? 100 * ms[l] / sum : 0.0);
      std::fprintf(out, "| %lld | %lld | all | sum of the layers | | %.2f | %.0f | |\n", static_cast<long long>(P),
                   static_cast<long long>(T), sum, sum > 0 ? T * 1e3 / sum : 0.0);
      std::fprintf(out, "| %lld | %lld | chunk | wall time of the call (layers, embedding, head, host) | | %.2f | %.0f | |\n",
                   static_cast<long long>(P), static_cast<long long>(T), wall, T * 1e3 / wall);
      std::fflush(out);
    }
  }
  return ok_status();
}

}  // namespace dsv4::cuda
