// CUDA attention layer at V4.1 shapes (D 5120, 64 heads of 512, window 128, top-512, 32 index
// heads): batch-1 decode time per layer role at a given context, against the layer's memory floor
// (weight bytes + KV bytes read, at the device's peak bandwidth). Caches are filled with random
// valid packed rows, so no prefill is needed. Usage: attention_bench [--kernels] [context ...]
// (--kernels: only the attention-specific kernels, no weights and no layer steps, the sparse
// attention timed with both implementations, tensor-core and CUDA-core; DSV4_BENCH_ITERS: timed
// steps per layer, default 50, 1 under a per-kernel profiler; DSV4_ATTN_TC=0: the layer steps and the
// one-graph figure with the CUDA-core sparse attention).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "family/deepseek_v41/layer_plan.h"
#include "backends/cpu/numerics.h"
#include "family/deepseek_v41/synthetic_weights.h"
#include "core/fp4.h"
#include "core/quant.h"
#include "core/ue8m0.h"
#include "backends/cuda/runtime/arena.h"
#include "backends/cuda/forward/attention.h"
#include "backends/cuda/kernels/attention/attention_kernels.cuh"
#include "backends/cuda/forward/attention_state.h"
#include "backends/cuda/model/attention_weights.h"
#include "backends/cuda/model/upload.h"
#include "family/deepseek_v41/preset.h"
#include "bench_device.h"

using namespace dsv4;
using namespace dsv4::cuda;

namespace {

// Layers: 0 window-only, 1 ratio-2 KV+index source, 2 ratio-2 reuse, 3 ratio-1 KV+index+candidate
// source, 4 ratio-1 reindex (candidates), 5 ratio-1 reuse. Tiny MoE (not timed here).
family::Config bench_config() {
  family::Config c = family::v41_flash_config();  // V4.1 attention shapes
  c.vocab_size = 256; c.num_hidden_layers = 6;
  c.compress_ratios = {0, 2, 2, 1, 1, 1};
  c.kv_source_layer_ids = {1, 3};
  c.index_source_layer_ids = {1, 3, 4};
  c.candidate_source_layer_id = 3;
  c.n_routed_experts = 2; c.num_experts_per_tok = 1; c.moe_intermediate_size = 64;
  c.engram_layer_ids = {}; c.engram_num_embeddings = {};
  c.num_nextn_predict_layers = 0; c.dspark_target_layer_ids = {};
  c.vision.reset();
  return c;
}

int64_t bytes(const Fp8View& v) { return v.w ? v.out * v.in + ((v.out + 31) / 32) * ((v.in + 31) / 32) : 0; }
int64_t bytes(const Bf16View& v) { return v.w ? v.out * v.in * 2 : 0; }
int64_t bytes(const F32View& v) { return v.w ? v.out * v.in * 4 : 0; }

int64_t weight_bytes(const AttentionDevice& a) {
  return bytes(a.wq_a) + bytes(a.wq_b) + bytes(a.wkv) + bytes(a.wo_b) + bytes(a.wo_a) + bytes(a.comp_wkv) +
         bytes(a.comp_wgate) + bytes(a.comp_wkv32) + bytes(a.comp_wgate32) + bytes(a.idx_wk) + bytes(a.idx_wq_b) + bytes(a.idx_weights_proj);
}

// Random valid packed rows (no NaN codes, moderate scales) for every cache of the stream.
void fill_caches(StreamCaches& sc, const family::StateGeometry& g, int64_t length, std::mt19937& rng) {
  auto fp8_rows = [&](int64_t rows, int64_t d) {
    std::vector<uint8_t> h(rows * (d + d / 32));
    for (int64_t r = 0; r < rows; ++r) {
      uint8_t* row = &h[r * (d + d / 32)];
      for (int64_t i = 0; i < d; ++i) { uint8_t b = rng() & 0xff; if ((b & 0x7f) == 0x7f) b = 0x30; row[i] = b; }
      for (int64_t i = 0; i < d / 32; ++i) row[d + i] = 118 + rng() % 4;
    }
    return h;
  };
  auto fp4_rows = [&](int64_t rows, int64_t d, int group, bool e4m3) {
    const int64_t rb = d / 2 + d / group;
    std::vector<uint8_t> h(rows * rb);
    for (int64_t r = 0; r < rows; ++r) {
      uint8_t* row = &h[r * rb];
      for (int64_t i = 0; i < d / 2; ++i) row[i] = rng() & 0xff;
      for (int64_t i = 0; i < d / group; ++i) row[d / 2 + i] = e4m3 ? 0x20 + rng() % 16 : 120 + rng() % 4;
    }
    return h;
  };
  // Pages up to the decoded position.
  if (Status st = sc.reserve(length + 1, nullptr); !st.ok()) std::printf("caches: %s\n", st.to_string().c_str());
  const std::vector<family::PagedTable>& tables = sc.page_layout().tables;
  for (size_t t = 0; t < tables.size(); ++t) {
    const int64_t rows = length / tables[t].ratio;
    const std::vector<uint8_t> h = tables[t].index_keys ? fp4_rows(rows, g.index_head_dim, 32, false)
                                   : g.compressed_format == KvRowFormat::fp8_ue8m0_32 ? fp8_rows(rows, g.d)
                                                                                      : fp4_rows(rows, g.d, 16, true);
    if (Status st = sc.write_table(t, 0, h, nullptr); !st.ok()) std::printf("caches: %s\n", st.to_string().c_str());
  }
  for (int l = 0; l < static_cast<int>(g.layers.size()); ++l) {
    const LayerCachesDev& c = sc.layer(l);
    const std::vector<uint8_t> ring = fp8_rows(g.ring_capacity, g.d);
    cudaMemcpy(c.window, ring.data(), ring.size(), cudaMemcpyHostToDevice);
    if (!g.layers[l].kv_source) continue;
    if (c.comp_kv) {
      std::vector<float> f(g.ring_capacity * g.d);
      for (auto& v : f) v = std::normal_distribution<float>(0, 1)(rng);
      cudaMemcpy(c.comp_kv, f.data(), 4 * f.size(), cudaMemcpyHostToDevice);
      cudaMemcpy(c.comp_gate, f.data(), 4 * f.size(), cudaMemcpyHostToDevice);
    }
  }
  (void)sc.commit(length);
}

template <typename F>
double time_us(cudaStream_t s, F&& f, int iters = 50) {
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0); cudaEventCreate(&e1);
  cudaEventRecord(e0, s);
  for (int i = 0; i < iters; ++i) f();
  cudaEventRecord(e1, s);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0); cudaEventDestroy(e1);
  return ms * 1000.0 / iters;
}

// GPU time of one call of f: 10 calls captured in one CUDA graph, launched 20 times (no host
// launch overhead in the figure).
template <typename F>
double graph_us(cudaStream_t s, F&& f) {
  cudaGraph_t g;
  cudaGraphExec_t ex;
  double us = -1;
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return us;
  for (int i = 0; i < 10; ++i) f();
  if (cudaStreamEndCapture(s, &g) == cudaSuccess) {
    if (cudaGraphInstantiate(&ex, g, 0) == cudaSuccess) {
      us = time_us(s, [&] { cudaGraphLaunch(ex, s); }, 20) / 10;
      cudaGraphExecDestroy(ex);
    }
    cudaGraphDestroy(g);
  }
  cudaGetLastError();
  return us;
}

// The attention-specific kernels alone at one decode row (ratio-1 source layer `l` of the caches).
void kernel_breakdown(const family::ModelPlan& cfg, StreamCaches& sc, int l, int64_t ctx, Arena& ar,
                      cudaStream_t s, std::mt19937& rng) {
  const size_t mark = ar.mark();
  const int64_t H = cfg.n_heads, d = cfg.head_dim, IH = cfg.index_heads, ihd = cfg.index_head_dim, K = cfg.index_topk;
  const int64_t lc = ctx + 1;
  PieceDev pd;
  pd.start = ctx; pd.T = 1; pd.row0 = 0;
  pd.window = sc.layer(l).window; pd.comp = sc.layer(l).compressed; pd.ikeys = sc.layer(l).index_keys;
  auto up = [&](const void* h, size_t n) { void* p = ar.alloc(n); cudaMemcpy(p, h, n, cudaMemcpyHostToDevice); return p; };
  auto* dpd = static_cast<PieceDev*>(up(&pd, sizeof pd));
  int32_t zero = 0;
  auto* drp = static_cast<int32_t*>(up(&zero, 4));
  auto* dpos = static_cast<int64_t*>(up(&ctx, 8));
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> hq(H * d), hk(d), hqi(IH * ihd), hw(IH), freqs(cfg.rope_dim / 2, 0.01f), sink(H, 0.0f);
  for (auto& v : hq) v = cpu::round_bf16(nd(rng));
  for (auto& v : hk) v = cpu::round_bf16(nd(rng));
  // Indexer queries as the layer feeds them: FP4 (E2M1) values with a UE8M0 scale per 32.
  for (auto& v : hqi) v = cpu::round_bf16(nd(rng));
  for (int64_t g = 0; g < IH * ihd / 32; ++g) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(hqi[g * 32 + i]));
    const float sv = ue8m0_to_f32(fp4_ue8m0_scale(amax));
    for (int i = 0; i < 32; ++i) hqi[g * 32 + i] = e2m1_to_f32(fp4_ue8m0_code(hqi[g * 32 + i], 1.0f / sv)) * sv;
  }
  for (auto& v : hw) v = cpu::round_bf16(nd(rng));
  std::vector<int32_t> top(K);
  for (int64_t i = 0; i < K; ++i) top[i] = static_cast<int32_t>(i * (lc / K));
  auto* dq = static_cast<float*>(up(hq.data(), 4 * hq.size()));
  auto* dk = static_cast<float*>(up(hk.data(), 4 * hk.size()));
  auto* dqi = static_cast<float*>(up(hqi.data(), 4 * hqi.size()));
  auto* dw = static_cast<float*>(up(hw.data(), 4 * hw.size()));
  auto* df = static_cast<float*>(up(freqs.data(), 4 * freqs.size()));
  auto* dsink = static_cast<float*>(up(sink.data(), 4 * sink.size()));
  auto* dtop = static_cast<int32_t*>(up(top.data(), 4 * K));
  auto* dtop2 = ar.alloc_n<int32_t>(K);
  auto* sw = ar.alloc_n<float>(std::max<int64_t>(1, sparse_attention_work_floats(1, H, cfg.window, K)));
  auto* tw = ar.alloc_n<int32_t>(std::max<int64_t>(1, topk_work_ints(1, lc, K)));
  auto* cw = ar.alloc_n<uint16_t>(candidate_work_elems(1, lc, cfg.candidate_block_size));
  auto* o = ar.alloc_n<float>(H * d);
  auto* score = ar.alloc_n<float>(lc);
  auto* cand = ar.alloc_n<uint8_t>(lc);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int nf = cfg.rope_dim / 2;
  // Sparse attention, each implementation in turn (same run, same inputs): one decode row, then a
  // prefill chunk of R rows ending at position ctx (this call's keys for the window part where they
  // are new, the ring before), every row with the same K selected rows.
  const SparseAttentionImpl impl0 = sparse_attention_impl();
  double t_win = 0, t_sp = 0;
  for (SparseAttentionImpl impl : {SparseAttentionImpl::tensor_core, SparseAttentionImpl::cuda_core}) {
    set_sparse_attention_impl(impl);
    const char* name = impl == SparseAttentionImpl::tensor_core ? "tensor-core" : "CUDA-core (DSV4_ATTN_TC=0)";
    const double tw1 = graph_us(s, [&] { sparse_attention(dq, dk, dpd, drp, dpos, 1, H, d, cfg.window, cfg.window + 16, dtop, 0, CompFormat::fp4_e4m3_16, dsink, scale, df, nf, cfg.o_groups, o, sw, s); });
    const double ts1 = graph_us(s, [&] { sparse_attention(dq, dk, dpd, drp, dpos, 1, H, d, cfg.window, cfg.window + 16, dtop, K, CompFormat::fp4_e4m3_16, dsink, scale, df, nf, cfg.o_groups, o, sw, s); });
    if (impl == impl0) t_win = tw1, t_sp = ts1;
    const int64_t R = std::min<int64_t>(4096, ctx);
    PieceDev pp = pd;
    pp.start = ctx - R + 1; pp.T = R;
    std::vector<int64_t> hp(R);
    std::vector<int32_t> hr(R, 0), ht(R * K);
    for (int64_t r = 0; r < R; ++r) hp[r] = pp.start + r;
    for (int64_t r = 0; r < R; ++r) std::copy(top.begin(), top.end(), ht.begin() + r * K);
    // Device buffers of their own (the q and o of 4096 rows pass the scratch arena's size).
    PieceDev* ppd = nullptr;
    int32_t *prp = nullptr, *ptop = nullptr;
    int64_t* ppos = nullptr;
    float *pq = nullptr, *pk = nullptr, *po = nullptr, *pw = nullptr;
    const int64_t nw = std::max<int64_t>(1, sparse_attention_work_floats(R, H, cfg.window, K));
    double t_pre = -1, t_pre_win = -1;
    if (cudaMalloc(&ppd, sizeof pp) == cudaSuccess && cudaMalloc(&prp, 4 * R) == cudaSuccess &&
        cudaMalloc(&ptop, 4 * R * K) == cudaSuccess && cudaMalloc(&ppos, 8 * R) == cudaSuccess &&
        cudaMalloc(&pq, 4 * R * H * d) == cudaSuccess && cudaMalloc(&pk, 4 * R * d) == cudaSuccess &&
        cudaMalloc(&po, 4 * R * H * d) == cudaSuccess && cudaMalloc(&pw, 4 * nw) == cudaSuccess) {
      cudaMemcpy(ppd, &pp, sizeof pp, cudaMemcpyHostToDevice);
      cudaMemcpy(prp, hr.data(), 4 * R, cudaMemcpyHostToDevice);
      cudaMemcpy(ptop, ht.data(), 4 * R * K, cudaMemcpyHostToDevice);
      cudaMemcpy(ppos, hp.data(), 8 * R, cudaMemcpyHostToDevice);
      cudaMemset(pq, 0x3c, 4 * R * H * d);  // 0x3c3c3c3c: 0.0115 everywhere (timing only)
      cudaMemset(pk, 0x3c, 4 * R * d);
      auto run = [&](int64_t k) { sparse_attention(pq, pk, ppd, prp, ppos, R, H, d, cfg.window, cfg.window + 16, ptop, k, CompFormat::fp4_e4m3_16, dsink, scale, df, nf, cfg.o_groups, po, pw, s); };
      run(K);
      t_pre = time_us(s, [&] { run(K); }, 3) / 1e3;
      t_pre_win = time_us(s, [&] { run(0); }, 3) / 1e3;
    } else {
      cudaGetLastError();
    }
    for (void* b : {static_cast<void*>(ppd), static_cast<void*>(prp), static_cast<void*>(ptop), static_cast<void*>(ppos),
                    static_cast<void*>(pq), static_cast<void*>(pk), static_cast<void*>(po), static_cast<void*>(pw)})
      if (b) cudaFree(b);
    std::printf("sparse attention, %s: decode row window-only %.1f us, window+%ld selected %.1f us; %ld-row prefill "
                "chunk window-only %.2f ms, window+%ld selected %.2f ms\n",
                name, tw1, long(K), ts1, long(R), t_pre_win, long(K), t_pre);
  }
  set_sparse_attention_impl(impl0);
  const double t_sc = graph_us(s, [&] { index_scores(dqi, dw, 1.0f / 64, dpd, drp, dpos, 1, IH, ihd, 1, score, lc, lc, s); });
  const double t_ca = graph_us(s, [&] { candidate_rows(score, lc, dpos, 1, 1, cfg.candidate_topk_blocks, cfg.candidate_block_size, cand, lc, cw, s); });
  const double t_tk = graph_us(s, [&] { topk_rows(score, lc, dpos, 1, 1, nullptr, lc, K, dtop2, tw, s); });
  const double t_tm = graph_us(s, [&] { topk_rows(score, lc, dpos, 1, 1, cand, lc, K, dtop2, tw, s); });
  std::printf("kernels at L_c %ld (GPU time per call, 10 calls per graph): sparse attention window-only %.1f us, window+%ld selected %.1f us; index scores %.1f us "
              "(%.1f MB keys); candidate blocks %.1f us; top-%ld %.1f us (%.1f us under a candidate mask)\n", long(lc),
              t_win, long(K), t_sp, t_sc, lc * (ihd / 2 + ihd / 32) / 1e6, t_ca, long(K), t_tk, t_tm);
  // The same kernels as one CUDA graph (a ratio-1 candidate source's attention kernels, no linears).
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
    index_scores(dqi, dw, 1.0f / 64, dpd, drp, dpos, 1, IH, ihd, 1, score, lc, lc, s);
    candidate_rows(score, lc, dpos, 1, 1, cfg.candidate_topk_blocks, cfg.candidate_block_size, cand, lc, cw, s);
    topk_rows(score, lc, dpos, 1, 1, nullptr, lc, K, dtop2, tw, s);
    sparse_attention(dq, dk, dpd, drp, dpos, 1, H, d, cfg.window, cfg.window + 16, dtop, K, CompFormat::fp4_e4m3_16,
                     dsink, scale, df, nf, cfg.o_groups, o, sw, s);
    if (cudaStreamEndCapture(s, &graph) == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
      const double t_g = time_us(s, [&] { cudaGraphLaunch(exec, s); });
      std::printf("kernels at L_c %ld as one graph (index scores, candidate blocks, top-%ld, sparse attention): %.1f us\n",
                  long(lc), long(K), t_g);
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    }
    cudaGetLastError();
  }
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) std::printf("CUDA error: %s\n", cudaGetErrorString(e));
  ar.reset(mark);
}

}  // namespace

int main(int argc, char** argv) {
  const cudaDeviceProp prop = dsv4::bench::bench_device();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::vector<int64_t> contexts;
  bool kernels_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--kernels") kernels_only = true;
    else contexts.push_back(std::atoll(argv[i]));
  }
  if (contexts.empty()) contexts = {4096, 65536};
  const char* it_env = std::getenv("DSV4_BENCH_ITERS");
  const int iters = std::max(1, it_env ? std::atoi(it_env) : 50);
  // Floor bandwidth: a 2 GiB device-to-device copy (bytes read + written) measured here, as the
  // EXL3 bench does; the layer's bytes divided by it give its floor time.
  double peak = 0;
  {
    const size_t n = size_t{2} << 30;
    void *a = nullptr, *b = nullptr;
    if (cudaMalloc(&a, n) == cudaSuccess && cudaMalloc(&b, n) == cudaSuccess) {
      cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0); cudaEventCreate(&e1);
      cudaEventRecord(e0);
      for (int i = 0; i < 5; ++i) cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      peak = 2.0 * n * 5 / (ms / 1e3);
    }
    cudaFree(a); cudaFree(b);
  }
  std::printf("device %s, floor bandwidth %.0f GB/s (device-to-device copy, read + write)\n", prop.name, peak / 1e9);
  const family::Config fc = bench_config();
  const family::ModelPlan cfg = family::build_plan(fc);
  const auto& roles = cfg.layers;
  Arena weights(kernels_only ? size_t{1} << 20 : size_t{3} << 30), scratch(size_t{1} << 30);
  std::vector<AttentionDevice> attn;
  if (!kernels_only) {
    auto w = family::synthetic_weights(fc, 1, false);
    Uploader up(weights);
    for (int l = 0; l < cfg.n_layers; ++l) {
      auto a = upload_attention(w->weights.layers[l], cfg, l, up);
      if (!a.ok()) { std::printf("upload: %s\n", a.status().to_string().c_str()); return 1; }
      attn.push_back(*a);
    }
    auto ran = up.run();
    if (!ran.ok()) { std::printf("upload: %s\n", ran.status().to_string().c_str()); return 1; }
  }
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  std::mt19937 rng(5);
  const char* names[] = {"window only (ratio 0)", "ratio-2 KV+index source", "ratio-2 reuse",
                         "ratio-1 KV+index+candidate source", "ratio-1 reindex (candidates)", "ratio-1 reuse"};
  for (int64_t ctx : contexts) {
    auto geo = device_state_geometry(cfg, ctx + 16, 16);
    auto layout = family::page_layout(*geo);
    if (!layout.ok()) { std::printf("pages: %s\n", layout.status().to_string().c_str()); return 1; }
    auto pool = KvPool::create({layout->slab_bytes, layout->page_bytes});
    if (!pool.ok()) { std::printf("pool: %s\n", pool.status().to_string().c_str()); return 1; }
    auto sc = StreamCaches::create(*geo, *layout, pool->get());
    if (!sc.ok()) { std::printf("caches: %s\n", sc.status().to_string().c_str()); return 1; }
    fill_caches(**sc, *geo, ctx, rng);
    if (kernels_only) {
      std::printf("\ncontext %ld\n", long(ctx));
      kernel_breakdown(cfg, **sc, 3, ctx, scratch, stream, rng);
      continue;
    }
    CallCtx c;
    c.cfg = &cfg; c.roles = &roles; c.attn = attn.data(); c.scratch = &scratch; c.stream = stream; c.rows = 1;
    int64_t* pos = scratch.alloc_n<int64_t>(1);
    const int64_t p = ctx;  // decode the next position (odd ctx-1 -> a ratio-2 group completes at p odd)
    cudaMemcpy(pos, &p, 8, cudaMemcpyHostToDevice);
    c.pos = pos;
    c.pieces.push_back({sc->get(), ctx, 1, 0});
    float* x = scratch.alloc_n<float>(cfg.dim);
    float* y = scratch.alloc_n<float>(cfg.dim);
    std::vector<float> hx(cfg.dim);
    for (auto& v : hx) v = cpu::round_bf16(std::normal_distribution<float>(0, 1)(rng));
    cudaMemcpy(x, hx.data(), 4 * hx.size(), cudaMemcpyHostToDevice);
    if (Status s = begin_attention_call(c); !s.ok()) { std::printf("%s\n", s.to_string().c_str()); return 1; }
    std::printf("\ncontext %ld (decode at position %ld, batch 1)\n", long(ctx), long(p));
    std::printf("%-36s %10s %10s %10s %9s %9s\n", "layer", "us/step", "graph us", "floor us", "MB read", "of floor");
    for (int l = 0; l < cfg.n_layers; ++l) {
      const family::LayerPlan& r = roles[l];
      // Bytes a decode step must read: weights, 128 window rows, the selected compressed rows,
      // and on index sources every index key row of the context.
      int64_t kv = cfg.window * geo->window_row;
      if (r.compress_ratio > 0) kv += cfg.index_topk * geo->compressed_row;
      if (r.index_source) kv += ((p + 1) / r.compress_ratio) * geo->index_row;
      const double mb = (weight_bytes(attn[l]) + kv) / 1e6;
      const double floor_us = (weight_bytes(attn[l]) + kv) / peak * 1e6;
      for (int i = 0; i < std::min(3, iters); ++i) (void)attention_layer(c, l, x, y);
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0); cudaEventCreate(&e1);
      cudaEventRecord(e0, stream);
      for (int i = 0; i < iters; ++i) (void)attention_layer(c, l, x, y);
      cudaEventRecord(e1, stream);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      const double us = ms * 1000.0 / iters;
      // The same step as one CUDA graph (launch overhead removed).
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      double gus = -1;
      if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
        Status st = attention_layer(c, l, x, y);
        if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && st.ok() &&
            cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
          cudaGraphLaunch(exec, stream);
          cudaEventRecord(e0, stream);
          for (int i = 0; i < iters; ++i) cudaGraphLaunch(exec, stream);
          cudaEventRecord(e1, stream);
          cudaEventSynchronize(e1);
          cudaEventElapsedTime(&ms, e0, e1);
          gus = ms * 1000.0 / iters;
          cudaGraphExecDestroy(exec);
          cudaGraphDestroy(graph);
        }
        cudaGetLastError();
      }
      std::printf("%-36s %10.1f %10.1f %10.1f %9.1f %8.0f%%\n", names[l], us, gus, floor_us, mb,
                  100.0 * floor_us / (gus > 0 ? gus : us));
    }
    if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) { std::printf("CUDA error: %s\n", cudaGetErrorString(e)); return 1; }
    kernel_breakdown(cfg, **sc, 3, ctx, scratch, stream, rng);
  }
  return 0;
}
