// The CUDA forward's benchmark (see forward_perf.h).
#include "backends/cuda/forward/forward_perf.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <string>

#include "core/kv_rows.h"
#include "family/deepseek_v41/layer_plan.h"
#include "backends/cuda/forward/forward.h"
#include "backends/cuda/forward/forward_v4.h"
#include "backends/cuda/forward/forward_perf_layers.h"
#include "backends/cuda/model/model.h"
#include "backends/cuda/runtime/dense_rate.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/replay.h"
#include "family/deepseek_v41/with_layers.h"

namespace dsv4::cuda {

family::ModelPlan bench_config(int layers, family::Variant variant, int decoder_layers) {
  // The cut keeps every width and role (family/deepseek_v41/with_layers.h); the bench runs neither Engram nor
  // the drafter.
  family::Config cfg = family::preset_config(family::Preset::full, variant);
  StatusOr<family::Config> cut =
      decoder_layers > 0 ? family::with_decoder_layers(cfg, layers, decoder_layers) : family::with_layers(cfg, layers);
  if (cut.ok()) cfg = *std::move(cut);
  return bench_plan(std::move(cfg));
}

family::ModelPlan bench_plan(family::Config cfg) {
  cfg.engram_layer_ids.clear();
  cfg.engram_num_embeddings.clear();
  family::ModelPlan c = family::build_plan(cfg);
  c.engram_layers.clear();
  for (family::LayerPlan& l : c.layers) l.engram = false, l.engram_index = -1, l.dspark_tap = false, l.dspark_tap_index = -1;
  c.dspark_target_layers.clear();
  c.dspark_stages = 0;
  c.dspark.clear();
  return c;
}

// Every weight of the attention, mixes, router, the active routed experts and the shared expert
// per layer, the head (bf16); the window ring, the selected compressed rows, the scanned index keys.
double decode_bytes_v4(const family::ModelPlan& c, int64_t L, int batch, const std::vector<double>& experts);

// Routed experts of layer l a step reads: experts[l], or one row's n_active.
double touched(const family::ModelPlan& c, const std::vector<double>& experts, int l) {
  return experts.empty() ? static_cast<double>(c.n_active) : experts[static_cast<size_t>(l)];
}

double decode_bytes(const family::ModelPlan& c, int64_t L, int batch, const std::vector<double>& experts) {
  if (c.window_format == KvRowFormat::model1) return decode_bytes_v4(c, L, batch, experts);
  const double D = c.dim, Q = c.q_lora, Hd = static_cast<double>(c.n_heads) * c.head_dim, d = c.head_dim;
  const double G = c.o_groups, O = c.o_lora, C = c.hc_mult, nm = C * (C + 2), I = c.moe_inter, ihd = c.index_head_dim;
  const double fp8 = 1.0 + 1.0 / 1024, fp4 = 0.5 * (1.0 + 1.0 / 16);
  const auto& roles = c.layers;
  double b = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const family::LayerPlan& r = roles[l];
    b += (Q * D + Hd * Q + d * D + D * G * O) * fp8 + G * O * (Hd / G) * 2;
    if (r.kv_source) b += (r.compress_ratio > 1 ? 2 * d * D * 4 : d * D * 2) + ihd * d * 2;
    if (r.index_source) b += c.index_heads * ihd * Q * fp8 + c.index_heads * D * 2;
    b += 2 * nm * C * D * 4 + static_cast<double>(c.n_experts) * D * 2;  // mixes fp32, router bf16
    b += touched(c, experts, l) * 3 * I * D * fp4 + 3 * I * D * fp8;
    double rows = 128.0 * (d + d / 32);  // a stream's window ring
    if (r.compress_ratio > 0) {
      const double n = static_cast<double>(L / r.compress_ratio);
      rows += std::min(n, static_cast<double>(c.index_topk)) * (d / 2 + d / 16);
      if (r.index_source) rows += n * (ihd / 2 + ihd / 32);
    }
    b += batch * rows;
  }
  return b + static_cast<double>(c.vocab) * D * 2;  // bf16 head
}

// V4 / 0731 (model-spec.md §8): FP8 scales per 128x128 block; per compressed layer its bf16
// compressor [w, D] x2 (w = 2d at ratio 4) and position bias, ratio 4 also the indexer's compressor
// [2*ihd, D] x2, query side and weights_proj, the min(L/4, top-k) selected rows and the L/4 index
// keys it scans; larger ratios read every visible row (L/ratio). Hash-routed layers read no bias.
double decode_bytes_v4(const family::ModelPlan& c, int64_t L, int batch, const std::vector<double>& experts) {
  const double D = c.dim, Q = c.q_lora, Hd = static_cast<double>(c.n_heads) * c.head_dim, d = c.head_dim;
  const double G = c.o_groups, O = c.o_lora, C = c.hc_mult, nm = C * (C + 2), I = c.moe_inter, ihd = c.index_head_dim;
  const double wb = c.weight_block, fp8 = 1.0 + 1.0 / (wb * wb), fp4 = 0.5 * (1.0 + 1.0 / 16);
  const double row = static_cast<double>(kv_row_bytes(KvRowFormat::model1, c.head_dim, c.rope_dim));
  const double ikey = ihd / 2 + ihd / 32;  // FP4 / UE8M0-32 index key
  const auto& roles = c.layers;
  double b = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const family::LayerPlan& r = roles[l];
    b += (Q * D + Hd * Q + d * D + D * G * O) * fp8 + G * O * (Hd / G) * 2;
    if (r.kv_source) {
      const double w = r.compressor_overlap ? 2 * d : d;
      b += 2 * w * D * 2 + r.compress_ratio * w * 4;
      if (r.compressor_overlap) b += 2 * (2 * ihd) * D * 2 + r.compress_ratio * 2 * ihd * 4;
    }
    if (r.index_source) b += c.index_heads * ihd * Q * fp8 + c.index_heads * D * 2;
    b += 2 * nm * C * D * 4 + static_cast<double>(c.n_experts) * D * 2;  // mixes fp32, router bf16
    b += touched(c, experts, l) * 3 * I * D * fp4 + 3 * I * D * fp8;
    double rows = static_cast<double>(c.window) * row;  // a stream's window ring
    if (r.compress_ratio > 0) {
      const double n = static_cast<double>(L / r.compress_ratio);
      rows += (r.index_source ? std::min(n, static_cast<double>(c.index_topk)) : n) * row;
      if (r.index_source) rows += n * ikey;
    }
    b += batch * rows;
  }
  return b + C * C * D * 4 + static_cast<double>(c.vocab) * D * 2;  // hc_head fn, bf16 head
}

namespace {

// Bandwidth of a large device-to-device copy (bytes read + written per second).
double copy_bandwidth() {
  const size_t bytes = size_t{4} << 30;
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) return 0;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
  cudaEventRecord(e0);
  for (int i = 0; i < 5; ++i) cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaFree(a);
  cudaFree(b);
  return 5.0 * 2.0 * static_cast<double>(bytes) / (ms * 1e-3);
}

// Mean wall time of `iters` steps after `warmups` (decode and verify take two: a graph key runs
// eagerly once, then is captured on its second call).
template <typename F>
double time_ms(int iters, int warmups, F&& step) {
  for (int i = 0; i < warmups; ++i)
    if (!step()) return -1;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i)
    if (!step()) return -1;
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters;
}

// Matrix FLOPs per prompt token of the layers (linears of attention, compressor and indexer
// query side, router, active and shared experts, mixes); attention scores excluded.
double flops_per_token(const family::ModelPlan& c) {
  const double D = c.dim, Q = c.q_lora, Hd = static_cast<double>(c.n_heads) * c.head_dim, d = c.head_dim;
  const double G = c.o_groups, O = c.o_lora, C = c.hc_mult, nm = C * (C + 2), I = c.moe_inter;
  const auto& roles = c.layers;
  double f = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    f += Q * D + Hd * Q + d * D + D * G * O + O * Hd + 2 * nm * C * D + static_cast<double>(c.n_experts) * D;
    f += (c.n_active + 1) * 3 * I * D;
    if (roles[l].kv_source) f += (roles[l].compressor_overlap ? 2 : 1) * 2 * d * D;
    if (roles[l].compressor_overlap) f += 2 * 2.0 * c.index_head_dim * D;  // V4: the indexer's compressor
    if (roles[l].index_source) f += static_cast<double>(c.index_heads) * c.index_head_dim * Q + c.index_heads * D;
  }
  return 2 * f;
}

// The distinct routed experts each layer's router picks over one untimed step of `call` (every step routes the same
// tokens alike: the floor's expert bytes); the streams are rolled back to L after it.
StatusOr<std::vector<double>> experts_touched(Forward& F, const std::vector<engine::Piece>& call, int64_t L) {
  std::vector<std::set<int32_t>> seen(F.config().n_layers);
  F.set_routing_probe([&](int layer, const std::vector<int32_t>& e) {
    for (int32_t x : e)
      if (x >= 0) seen[static_cast<size_t>(layer)].insert(x);
  });
  auto routed = F.forward(call);
  F.set_routing_probe(nullptr);
  if (!routed.ok()) return routed.status();
  for (const engine::Piece& p : call) DSV4_RETURN_IF_ERROR(F.truncate(p.stream, L));
  std::vector<double> n;
  for (const std::set<int32_t>& e : seen) n.push_back(static_cast<double>(e.size()));
  return n;
}

double mean(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m += x / static_cast<double>(v.size());
  return m;
}

}  // namespace

Status run_forward_bench(const ForwardBenchOptions& f, std::FILE* out) {
  DSV4_ASSIGN_OR_RETURN(const BenchCut cut, bench_cut(f));
  const family::ModelPlan& cfg = cut.plan;
  std::fprintf(out, "dsv4 bench: %d full-width %s layers (dim %lld, %d experts, top-%d), synthetic weights on the device\n",
              cfg.n_layers, cfg.variant == family::Variant::v4 ? "V4-Flash-0731" : "V4.1", static_cast<long long>(cfg.dim), cfg.n_experts, cfg.n_active);
  std::string built;
  for (size_t k = 0; k < cut.ids.size(); ++k) built += fmt::format("{}{} {}", k ? ", " : "", cut.ids[k], cut.roles[k]);
  std::fprintf(out, "plan layers built (id role): %s\n", built.c_str());
  for (const std::string& n : cut.notes) std::fprintf(out, "  %s\n", n.c_str());
  std::fflush(out);
  // The cut is chosen and printed first: a bad selection is refused, and a good one shown, without a device.
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    return error(StatusCode::unavailable, "no CUDA device is visible; the benchmark needs an NVIDIA GPU");
  const double bw = copy_bandwidth();
  engine::RowDraw greedy;  // decode and verify steps draw their logit row on the device (lanes' greedy argmax)
  greedy.kind = engine::RowDraw::Kind::argmax;
  std::fprintf(out, "device-to-device copy bandwidth: %.0f GB/s\n", bw / 1e9);
  const auto t0 = std::chrono::steady_clock::now();
  auto made = ModelDevice::synthesize(cfg, f.seed);
  if (!made.ok()) return made.status();
  std::shared_ptr<const ModelDevice> model(std::move(*made));
  std::fprintf(out, "weights: %.2f GiB generated in %.1f s\n", model->weight_bytes() / 1073741824.0,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  auto fail = [](const Status& s) { return s; };
  // Decode (1 row per stream) and verify windows at each context, batch.
  std::fprintf(out, "\n| step | batch | context | ms/step | tokens/s | experts touched / layer | floor ms | x floor | eager "
                    "ms/step | graph replays |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (int64_t L : f.contexts) {
    for (int rows_per : {1, f.verify_rows}) {
      for (int b : f.batches) {
        ForwardOptions o;
        o.max_context = L + 64;
        o.max_rollback = 16;
        o.max_call_rows = static_cast<int64_t>(b) * rows_per;
        auto fw = Forward::create(model, o);
        if (!fw.ok()) return fail(fw.status());
        Forward& F = **fw;
        std::vector<engine::Piece> call;
        bool ok = true;
        for (int i = 0; i < b && ok; ++i) {
          auto s = F.open_stream();
          if (!s.ok()) return fail(s.status());
          ok = F.assume_length(*s, L).ok();
          // The logit row drawn greedily where the logits are, as serving does: its id comes back, not its logits.
          call.push_back(engine::Piece{*s, std::vector<int32_t>(rows_per, 1000 + i), {rows_per - 1}, {}, {greedy}});
        }
        Status last = ok_status();
        auto step = [&] {
          auto r = F.forward(call);
          if (!r.ok()) { last = r.status(); return false; }
          for (const engine::Piece& p : call) (void)F.truncate(p.stream, L);
          return true;
        };
        DSV4_ASSIGN_OR_RETURN(const std::vector<double> experts, experts_touched(F, call, L));
        const double ms = time_ms(f.iters, 2, step);
        if (ms < 0) return fail(last);
        const int64_t replays = F.graph_stats().replays;
        F.set_cuda_graphs(false);
        const double eager_ms = time_ms(f.iters, 1, step);
        if (eager_ms < 0) return fail(last);
        const double floor_ms = decode_bytes(cfg, L, b, experts) / bw * 1e3;
        std::fprintf(out, "| %s | %d | %lld | %.3f | %.1f | %.1f | %.3f | %.2f | %.3f | %lld |\n",
                     rows_per == 1 ? "decode" : ("verify-" + std::to_string(rows_per)).c_str(), b,
                     static_cast<long long>(L), ms, b * rows_per * 1e3 / ms, mean(experts), floor_ms, ms / floor_ms, eager_ms,
                     static_cast<long long>(replays));
        std::fflush(out);
      }
    }
  }
  // Per-op time of a decode step of each batch at the first context (events around each op, eager launches).
  if (!f.contexts.empty() && !f.batches.empty()) {
    const int64_t L = f.contexts.front();
    std::vector<std::map<std::string, double>> per_batch;
    std::vector<double> union_per_layer;  // per batch: the routed experts a step touches, mean over layers
    std::map<std::string, double> v4ops;  // batch 1 only
    for (int b : f.batches) {
      ForwardOptions o;
      o.max_context = L + 64;
      o.max_rollback = 16;
      o.max_call_rows = b;
      auto fw = Forward::create(model, o);
      if (!fw.ok()) return fw.status();
      Forward& F = **fw;
      std::vector<engine::Piece> call;
      for (int i = 0; i < b; ++i) {
        auto s = F.open_stream();
        if (!s.ok()) return s.status();
        DSV4_RETURN_IF_ERROR(F.assume_length(*s, L));
        call.push_back(engine::Piece{*s, {1000 + i}, {0}, {}, {greedy}});
      }
      DSV4_ASSIGN_OR_RETURN(const std::vector<double> experts, experts_touched(F, call, L));
      union_per_layer.push_back(mean(experts));
      std::map<std::string, double> prof;
      F.set_profile(&prof, false);  // events around each op, no synchronization
      const bool v4_timing = b == 1 && cfg.window_format == KvRowFormat::model1;
      if (v4_timing) set_v4_attention_timing(&v4ops);  // and around each launch of V4 attention
      const int n = std::max(1, f.iters);
      for (int i = 0; i < n; ++i) {
        auto r = F.forward(call);
        if (!r.ok()) {
          set_v4_attention_timing(nullptr);
          return r.status();
        }
        for (const engine::Piece& p : call) DSV4_RETURN_IF_ERROR(F.truncate(p.stream, L));
      }
      if (v4_timing) set_v4_attention_timing(nullptr);
      for (auto& [k, v] : prof) v /= n;
      per_batch.push_back(std::move(prof));
    }
    std::set<std::string> ops;
    for (const auto& m : per_batch)
      for (const auto& [k, v] : m) ops.insert(k);
    std::fprintf(out, "\nper-op device time of a decode step at context %lld, ms (events around each op, eager launches, "
                      "no synchronization; %d layers)\n\n| op |", static_cast<long long>(L), cfg.n_layers);
    std::string rule = "|---|";
    for (int b : f.batches) {
      std::fprintf(out, " batch %d | share |", b);
      rule += "---|---|";
    }
    std::fprintf(out, "\n%s\n", rule.c_str());
    std::vector<double> totals;
    for (const auto& m : per_batch) {
      double t = 0;
      for (const auto& [k, v] : m) t += v;
      totals.push_back(t);
    }
    for (const std::string& op : ops) {
      std::fprintf(out, "| %s |", op.c_str());
      for (size_t i = 0; i < per_batch.size(); ++i) {
        const auto it = per_batch[i].find(op);
        const double v = it == per_batch[i].end() ? 0.0 : it->second;
        std::fprintf(out, " %.3f | %.1f%% |", v, totals[i] > 0 ? 100 * v / totals[i] : 0.0);
      }
      std::fprintf(out, "\n");
    }
    std::fprintf(out, "| sum of the ops |");
    for (double t : totals) std::fprintf(out, " %.3f | |", t);
    std::fprintf(out, "\n");
    // The routed experts' floor: the experts the step's routing touched, each read once (w1, w3, w2 FP4 with their
    // scales), at the copy bandwidth above.
    const double expert_bytes = 3.0 * cfg.moe_inter * cfg.dim * 0.5 * (1.0 + 1.0 / 16);
    std::fprintf(out, "| routed experts touched / layer (counted) |");
    for (double u : union_per_layer) std::fprintf(out, " %.1f | |", u);
    std::fprintf(out, "\n| routed experts floor (ms), x floor |");
    for (size_t i = 0; i < per_batch.size(); ++i) {
      const double fl = union_per_layer[i] * cfg.n_layers * expert_bytes / bw * 1e3;
      const auto it = per_batch[i].find("moe routed experts");
      std::fprintf(out, " %.3f | %.2fx |", fl, it == per_batch[i].end() || fl <= 0 ? 0.0 : it->second / fl);
    }
    std::fprintf(out, "\n");
    if (!v4ops.empty()) {  // inside "attention": each launch of the V4 layers, summed over layers of a ratio
      const int n = std::max(1, f.iters);
      double at = 0;
      for (const auto& [k, v] : v4ops) at += v;
      std::fprintf(out, "\nV4 attention launches of the batch-1 step (events around each launch, summed over the layers of "
                        "a ratio)\n\n| layer ratio: launch | ms/step | share of attention |\n|---|---|---|\n");
      for (const auto& [k, v] : v4ops) std::fprintf(out, "| %s | %.4f | %.1f%% |\n", k.c_str(), v / n, 100 * v / at);
      std::fprintf(out, "| sum | %.3f | |\n", at / n);
    }
    std::fflush(out);
  }
  // Prefill chunks of one stream from position 0 (a fresh stream each run, rings of window + 128 rows as in
  // serving), without and with bounded replay; the chunk's last row's logits.
  const double dense = dense_bf16_rate(), dense8 = dense_fp8_rate(), fpt = flops_per_token(cfg);
  std::fprintf(out,
               "\ncuBLAS dense rates (8192^3): bf16 %.0f TFLOP/s, FP8 e4m3 %.0f TFLOP/s; matrix FLOPs per token of the %d "
               "layers: %.2f GFLOP\n",
               dense / 1e12, dense8 / 1e12, cfg.n_layers, fpt / 1e9);
  std::fprintf(out, "\n| prefill chunk | ms | tokens/s | tokens/s per layer | TFLOP/s | x bf16 rate | x FP8 rate | ms, bounded "
                    "replay | layer rows, bounded replay |\n|---|---|---|---|---|---|---|---|---|\n");
  std::vector<std::pair<int64_t, double>> per_layer_row_ms;  // chunk, ms per layer-row without replay
  for (int64_t T : f.prefill) {
    ForwardOptions o;
    o.max_context = T + 64;
    o.max_call_rows = T;
    auto fw = Forward::create(model, o);
    if (!fw.ok()) return fail(fw.status());
    Forward& F = **fw;
    std::vector<int32_t> toks(T);
    for (int64_t i = 0; i < T; ++i) toks[i] = static_cast<int32_t>((i * 7919) % cfg.vocab);
    Status last = ok_status();
    auto chunk = [&] {
      auto s = F.open_stream();
      if (!s.ok()) { last = s.status(); return false; }
      auto r = F.forward({engine::Piece{*s, toks, {static_cast<int32_t>(T - 1)}}});
      if (!r.ok()) { last = r.status(); return false; }
      return F.close_stream(*s).ok();
    };
    F.set_bounded_replay(false);
    const double ms = time_ms(std::max(1, f.iters / 2), 1, chunk);
    if (ms < 0) return fail(last);
    F.set_bounded_replay(true);
    const double ms_replay = time_ms(std::max(1, f.iters / 2), 1, chunk);
    if (ms_replay < 0) return fail(last);
    int64_t rows = 0;
    for (int64_t r : F.layer_rows()) rows += r;
    const double tps = T * 1e3 / ms;
    std::fprintf(out, "| %lld | %.1f | %.0f | %.0f | %.1f | %.3f | %.3f | %.1f | %lld of %lld |\n", static_cast<long long>(T),
                 ms, tps, tps * cfg.n_layers, tps * fpt / 1e12, dense > 0 ? tps * fpt / dense : 0.0,
                 dense8 > 0 ? tps * fpt / dense8 : 0.0, ms_replay,
                 static_cast<long long>(rows), static_cast<long long>(T * cfg.n_layers));
    std::fflush(out);
    per_layer_row_ms.emplace_back(T, ms / static_cast<double>(T * cfg.n_layers));
    if (T == f.prefill.front()) {  // where a prefill chunk's time goes (without replay)
      std::map<std::string, double> prof;
      F.set_bounded_replay(false);
      F.set_profile(&prof, false);
      const bool ran = chunk();
      F.set_profile(nullptr);
      F.set_bounded_replay(true);
      if (!ran) return last;
      // The experts' GEMMs also as a rate: 2 x 3 I D multiply-adds per row and expert (routed: n_active per row).
      const double expert_flop = 2.0 * 3.0 * cfg.moe_inter * double(cfg.dim) * double(T) * cfg.n_layers;
      for (const auto& [k, v] : prof) {
        const double flop = k == "moe routed experts"  ? expert_flop * cfg.n_active
                            : k == "moe shared expert" ? expert_flop
                                                       : 0;
        if (flop > 0 && v > 0) {
          const double rate = flop / (v * 1e-3);
          std::fprintf(out, "|   %s (%lld rows) | %.1f | | | %.1f | %.3f | %.3f | | |\n", k.c_str(), static_cast<long long>(T),
                       v, rate / 1e12, dense > 0 ? rate / dense : 0.0, dense8 > 0 ? rate / dense8 : 0.0);
        } else {
          std::fprintf(out, "|   %s (%lld rows) | %.1f | | | | | | | |\n", k.c_str(), static_cast<long long>(T), v);
        }
      }
    }
    std::fflush(out);
  }
  std::vector<family::RoleTime> role_times;
  if (cut.by_layer || !f.prefill_contexts.empty())
    DSV4_RETURN_IF_ERROR(run_layer_prefill(model, cut, f, out, &role_times));
  // One layer per role: the whole plan's time to first token from the roles' times.
  if (f.roles) print_ttft_projection(role_times, f, out);
  // A set of roles is no sample of the model's layers: no projection from the cut's layer-rows.
  if (cut.by_layer) return ok_status();
  // The whole model's chunks projected from the measured cost of a layer-row (the cut's chunk time without
  // replay over its layers and rows): every layer on every row, or each layer on the rows of its cone
  // (family::cone_first_rows for the full plan, rings of window + 128 rows, the chunk's last row's logits).
  const family::ModelPlan whole = family::build_plan(family::preset_config(family::Preset::full, f.variant));
  const family::ReplayShape shape = family::replay_shape(whole, whole.window + 128, whole.dspark_stages > 0);
  std::fprintf(out, "\nprojected %d-layer %s chunk (measured ms per layer-row x the rows computed; first bounded layer "
                    "%d)\n\n| prefill chunk | layer rows | ms | layer rows, bounded replay | ms, bounded replay |\n"
                    "|---|---|---|---|---|\n", whole.n_layers, f.variant == family::Variant::v4 ? "V4-Flash-0731" : "V4.1",
               shape.from);
  for (const auto& [T, per_row] : per_layer_row_ms) {
    int64_t rows = static_cast<int64_t>(whole.n_layers) * T;
    if (shape.bounded()) {
      rows = static_cast<int64_t>(shape.from) * T;
      for (int64_t first : family::cone_first_rows(shape, T, T - 1)) rows += T - first;
    }
    std::fprintf(out, "| %lld | %lld | %.1f | %lld | %.1f |\n", static_cast<long long>(T),
                 static_cast<long long>(whole.n_layers * T), per_row * whole.n_layers * T, static_cast<long long>(rows),
                 per_row * rows);
  }
  std::fflush(out);
  return ok_status();
}


}  // namespace dsv4::cuda
