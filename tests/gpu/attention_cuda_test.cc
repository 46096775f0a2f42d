// CUDA attention layer against the CPU oracle (cpu::attention_layer in ref32 and ref64) on small
// synthetic models with every layer role, over calls that cross compression groups and the window;
// the exact equalities (pieces == whole, verify == steps, batched == alone, rollback, snapshot)
// bit for bit on the device; top-k and candidate selection equal to the oracle's selection. The
// V4 / 0731 layers (family::small_v4_test_config) against the oracle in the same way (the V4.1 head shape:
// attention_v41_shape_cuda_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <span>

#include "backends/cpu/attention.h"
#include "backends/cpu/kv_rows.h"
#include "backends/cpu/linear.h"
#include "family/deepseek_v41/layer_plan.h"
#include "backends/cpu/rope.h"
#include "family/deepseek_v41/synthetic_weights.h"
#include "backends/cuda/runtime/arena.h"
#include "backends/cuda/forward/attention.h"
#include "backends/cuda/kernels/attention/attention_kernels.cuh"
#include "backends/cuda/forward/attention_state.h"
#include "backends/cuda/model/attention_weights.h"
#include "backends/cuda/model/upload.h"
#include "attention_testing.h"
#include "paged_rows_testing.h"
#include "core/fp4.h"
#include "core/quant.h"
#include "core/ue8m0.h"
#include "family/deepseek_v41/engram_layout.h"

namespace dsv4::cuda {
namespace {

// The tiny preset's attention shapes (family preset tiny: D 256, 4 heads of 128, window 16, ratios
// 0,0,2,2,2,1,1,1,1,1, KV sources 2/4/5, index sources 2/4/5/7, candidates from 5, top-8) over the rest of
// family::small_test_config.
family::Config tiny_config() {
  family::Config c = family::small_test_config();
  c.hidden_size = 256; c.num_hidden_layers = 10;
  c.num_attention_heads = 4; c.head_dim = 128; c.qk_rope_head_dim = 64;
  c.q_lora_rank = 128; c.o_lora_rank = 64; c.o_groups = 2; c.sliding_window = 16;
  c.compress_ratios = {0, 0, 2, 2, 2, 1, 1, 1, 1, 1, 0, 0, 0};  // then the 3 DSpark stages
  c.kv_source_layer_ids = {2, 4, 5};
  c.index_source_layer_ids = {2, 4, 5, 7};
  c.candidate_source_layer_id = 5;
  c.candidate_topk_blocks = 4; c.candidate_block_size = 4;
  c.index_n_heads = 4; c.index_head_dim = 128; c.index_topk = 8;
  c.engram_layer_ids = {1, 4};
  c.dspark_target_layer_ids = {7, 8, 9};
  c.engram_num_embeddings.clear();
  for (const auto& l : family::compute_engram_layout(c).layers) c.engram_num_embeddings.push_back(l.rows);
  return c;
}

// Attention input of (sequence, position, layer): the same bf16 row whatever the call shape.
void fill_x(uint64_t seq, int64_t pos, int layer, int64_t D, float* x) {
  std::mt19937_64 g(seq * 1000003ull + static_cast<uint64_t>(pos) * 131ull + static_cast<uint64_t>(layer));
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int64_t i = 0; i < D; ++i) x[i] = cpu::round_bf16(n(g));
}

struct Piece { int stream; int64_t T; };

// A model's attention on the CPU oracle (Acc) with its own stream states.
template <typename Acc>
struct CpuRunner {
  const family::Model& M;
  const family::ModelPlan cfg;
  std::vector<family::LayerPlan> roles;
  cpu::StateGeometry geo;
  ThreadPool pool{2};
  std::vector<float> fp, fy;
  std::map<int, cpu::StreamState> streams;
  std::map<int, uint64_t> seq;
  std::vector<std::vector<std::vector<int32_t>>> topk;  // [layer][row] of the last call
  CpuRunner(const family::Model& m, int64_t rollback) : M(m), cfg(family::build_plan(m.config)),
      roles(cfg.layers), geo(family::make_state_geometry(cfg, family::StateGeometryOptions{.max_rollback = rollback})) {
    const auto& c = cfg;
    fp = cpu::rope_frequencies({c.rope_dim, c.rope_theta, 0, c.rope_factor, c.beta_fast, c.beta_slow});
    fy = cpu::rope_frequencies({c.rope_dim, c.compress_rope_theta, c.original_seq_len, c.rope_factor, c.beta_fast, c.beta_slow});
  }
  void open(int s, uint64_t sq) { streams[s] = cpu::new_stream_state(geo); seq[s] = sq; }
  // Returns y [layer][rows * D].
  std::vector<std::vector<float>> call(const std::vector<Piece>& ps) {
    cpu::CallCtx c;
    c.M = &M; c.cfg = &cfg; c.roles = &roles; c.geo = &geo; c.pool = &pool;
    c.freqs_plain = &fp; c.freqs_yarn = &fy;
    for (const Piece& p : ps) {
      cpu::PieceCtx pc{&streams[p.stream], streams[p.stream].length, p.T, c.rows};
      for (int64_t i = 0; i < p.T; ++i) { c.pos.push_back(pc.start + i); c.piece_of.push_back(static_cast<int>(c.pieces.size())); }
      c.pieces.push_back(pc);
      c.rows += p.T;
    }
    c.image.assign(c.rows, 0);
    cpu::Published pub;  // the published slots, per call row
    pub.topk.assign(c.rows, {});
    pub.cand.assign(c.rows, {});
    c.pub = &pub;
    for (int64_t r = 0; r < c.rows; ++r) c.call_row.push_back(r);
    std::vector<std::vector<float>> ys(cfg.n_layers);
    topk.assign(cfg.n_layers, {});
    for (int l = 0; l < cfg.n_layers; ++l) {
      std::vector<float> x(c.rows * cfg.dim);
      int64_t r = 0;
      for (const Piece& p : ps)
        for (int64_t i = 0; i < p.T; ++i, ++r) fill_x(seq[p.stream], streams[p.stream].length + i, l, cfg.dim, &x[r * cfg.dim]);
      ys[l].resize(c.rows * cfg.dim);
      cpu::attention_layer<Acc>(c, l, x.data(), ys[l].data());
      topk[l] = pub.topk;
    }
    for (const Piece& p : ps) cpu::truncate_state(geo, streams[p.stream], streams[p.stream].length + p.T);
    return ys;
  }
};

// The same on the device.
struct GpuRunner {
  const family::ModelPlan cfg;
  std::vector<family::LayerPlan> roles;
  family::StateGeometry geo;
  Arena weights{size_t{256} << 20}, scratch{size_t{256} << 20};
  std::vector<AttentionDevice> attn;
  // Pages of 16 positions (8 rows of a ratio-2 table; the largest ratio where that is larger): every call and tile
  // crosses pages, placed by a pool shared by the streams in the order they grow.
  family::PageLayout layout;
  std::unique_ptr<KvPool> pool;
  std::map<int, std::unique_ptr<StreamCaches>> streams;
  std::map<int, uint64_t> seq;
  std::vector<std::vector<int32_t>> topk;  // [layer][rows * index_topk] of the last call
  GpuRunner(const family::Model& m, int64_t max_context, int64_t rollback)
      : cfg(family::build_plan(m.config)), roles(cfg.layers) {
    auto g = device_state_geometry(cfg, max_context, rollback);
    EXPECT_TRUE(g.ok()) << g.status().to_string();
    geo = *g;
    int64_t page = 16;
    for (const family::LayerStateShape& l : geo.layers) page = std::max<int64_t>(page, l.ratio);
    auto pl = family::page_layout(geo, page);
    EXPECT_TRUE(pl.ok()) << pl.status().to_string();
    layout = *pl;
    auto kp = KvPool::create({layout.slab_bytes, layout.page_bytes});
    EXPECT_TRUE(kp.ok()) << kp.status().to_string();
    pool = std::move(*kp);
    Uploader up(weights);
    for (int l = 0; l < cfg.n_layers; ++l) {
      auto a = upload_attention(m.weights.layers[l], cfg, l, up);
      EXPECT_TRUE(a.ok()) << a.status().to_string();
      attn.push_back(*a);
    }
    auto ran = up.run();
    EXPECT_TRUE(ran.ok()) << ran.status().to_string();
  }
  void open(int s, uint64_t sq) {
    auto c = StreamCaches::create(geo, layout, pool.get());
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    streams[s] = std::move(*c);
    seq[s] = sq;
  }
  std::vector<std::vector<float>> call(const std::vector<Piece>& ps) {
    CallCtx c;
    c.cfg = &cfg; c.roles = &roles; c.attn = attn.data(); c.scratch = &scratch;
    std::vector<int64_t> pos;
    for (const Piece& p : ps) {
      StreamCaches* sc = streams[p.stream].get();
      EXPECT_TRUE(sc->reserve(sc->length() + p.T, nullptr).ok());
      c.pieces.push_back({sc, sc->length(), p.T, c.rows});
      for (int64_t i = 0; i < p.T; ++i) pos.push_back(sc->length() + i);
      c.rows += p.T;
    }
    const size_t mark = scratch.mark();
    int64_t* dpos = scratch.alloc_n<int64_t>(c.rows);
    cudaMemcpy(dpos, pos.data(), 8 * c.rows, cudaMemcpyHostToDevice);
    c.pos = dpos;
    Status st = begin_attention_call(c);
    EXPECT_TRUE(st.ok()) << st.to_string();
    float* x = scratch.alloc_n<float>(c.rows * cfg.dim);
    float* y = scratch.alloc_n<float>(c.rows * cfg.dim);
    std::vector<std::vector<float>> ys(cfg.n_layers);
    topk.assign(cfg.n_layers, {});
    for (int l = 0; l < cfg.n_layers; ++l) {
      std::vector<float> hx(c.rows * cfg.dim);
      int64_t r = 0;
      for (const Piece& p : ps)
        for (int64_t i = 0; i < p.T; ++i, ++r) fill_x(seq[p.stream], streams[p.stream]->length() + i, l, cfg.dim, &hx[r * cfg.dim]);
      cudaMemcpy(x, hx.data(), 4 * hx.size(), cudaMemcpyHostToDevice);
      cudaMemset(y, 0xff, 4 * hx.size());
      st = attention_layer(c, l, x, y);
      EXPECT_TRUE(st.ok()) << st.to_string();
      ys[l].resize(hx.size());
      EXPECT_EQ(cudaMemcpy(ys[l].data(), y, 4 * hx.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      topk[l].resize(c.rows * cfg.index_topk);
      cudaMemcpy(topk[l].data(), c.topk, 4 * topk[l].size(), cudaMemcpyDeviceToHost);
    }
    scratch.reset(mark);
    for (const Piece& p : ps) EXPECT_TRUE(streams[p.stream]->commit(streams[p.stream]->length() + p.T).ok());
    return ys;
  }
};

// Concatenates per-call outputs of one stream: [layer] -> rows in position order.
void append(std::vector<std::vector<float>>& all, const std::vector<std::vector<float>>& ys) {
  if (all.empty()) all.resize(ys.size());
  for (size_t l = 0; l < ys.size(); ++l) all[l].insert(all[l].end(), ys[l].begin(), ys[l].end());
}

double nrms(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) { num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]); den += double(ref[i]) * ref[i]; }
  return std::sqrt(num / std::max(den, 1e-300));
}
double max_abs(const std::vector<float>& a, const std::vector<float>& ref) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - ref[i]));
  return m;
}

struct Model {
  const char* name;
  std::shared_ptr<const family::Model> w;
  std::vector<int64_t> prompt_pieces;  // then single decode steps
  int decode_steps;
  // Allowed NRMS(gpu, ref64) / NRMS(ref32, ref64). V4.1: 1.05 (the device equals ref32 bit for bit
  // here). V4: its compressors pool 8 to 128 exp terms per channel into rows every later row reads,
  // and the device's exp (rounded once from double) differs from glibc's expf, which ref32 calls, in
  // 6.3e-4 of arguments (10^7 uniform draws in [-20, 0] on the build host); one flipped bf16 latent
  // moves a whole compressed row, so a layer lands up to ~1.1x the floor (measured on an H200,
  // docs/perf.md). 1.25 still catches any real defect, which shows as NRMS near 1.
  double tol = 1.05;
};

const std::vector<Model>& models() {
  static std::vector<Model> m = [] {
    std::vector<Model> v;
    v.push_back({"small_test", family::synthetic_weights(family::small_test_config(), 7, false), {5, 12, 1, 19}, 6});
    v.push_back({"tiny", family::synthetic_weights(tiny_config(), 11, false), {7, 30, 2, 40}, 8});
    // V4 / 0731: window 8, ratios 4 (overlapped, indexer, top-4) and 128 (every visible row), two
    // ratio-128 groups completed inside prompt pieces.
    v.push_back({"v4_small_test", family::synthetic_weights(family::small_v4_test_config(), 13, false), {7, 130, 2, 150}, 6, 1.25});
    return v;
  }();
  return m;
}

// GPU vs ref64 within the ref32 floor, per layer (each layer role), over a prompt in pieces and
// decode steps; the published top-k lists agree with ref32's where the row's selection is the same.
TEST(AttentionCuda, MatchesOracleWithinRef32Floor) {
  // The tensor-core sparse attention (the default) sums q.k and P.V in the MMA's order, not the
  // oracle's: its V4.1 layers are one more fp32 evaluation of the same operations, as far from ref64
  // as ref32 is up to which bf16 roundings flip, so they get V4's 1.25 and no bit equality with
  // ref32; the CUDA-core kernels (DSV4_ATTN_TC=0) repeat ref32's order and are held to both.
  const bool tc = sparse_attention_impl() == SparseAttentionImpl::tensor_core;
  std::printf("sparse attention: %s\n", tc ? "tensor-core (V4.1 layers within 1.25 x the ref32 floor)"
                                            : "CUDA-core (V4.1 layers equal to ref32 bit for bit)");
  for (const Model& m : models()) {
    SCOPED_TRACE(m.name);
    CpuRunner<float> c32(*m.w, 16);
    const bool v41 = c32.cfg.window_format != KvRowFormat::model1;
    const double tol = v41 && tc ? 1.25 : m.tol;
    CpuRunner<double> c64(*m.w, 16);
    GpuRunner gpu(*m.w, 512, 16);
    c32.open(0, 1); c64.open(0, 1); gpu.open(0, 1);
    std::vector<std::vector<float>> a32, a64, ag;
    std::vector<int64_t> sched = m.prompt_pieces;
    for (int i = 0; i < m.decode_steps; ++i) sched.push_back(1);
    int64_t topk_rows = 0, topk_same = 0;
    for (int64_t T : sched) {
      append(a32, c32.call({{0, T}}));
      append(a64, c64.call({{0, T}}));
      append(ag, gpu.call({{0, T}}));
      const family::ModelPlan& cfg = c32.cfg;
      for (int l = 0; l < cfg.n_layers; ++l) {
        if (c32.roles[l].compress_ratio == 0) continue;
        for (int64_t r = 0; r < T; ++r) {
          std::vector<int32_t> g(gpu.topk[l].begin() + r * cfg.index_topk, gpu.topk[l].begin() + (r + 1) * cfg.index_topk);
          while (!g.empty() && g.back() < 0) g.pop_back();
          ++topk_rows;
          topk_same += g == c32.topk[l][r];
        }
      }
    }
    std::vector<float> p32, p64, pg;
    for (int l = 0; l < c32.cfg.n_layers; ++l) {
      const double floor = nrms(a32[l], a64[l]), err = nrms(ag[l], a64[l]);
      std::printf("[%s] layer %d ratio %d: NRMS(gpu, ref64) %.3e  NRMS(ref32, ref64) %.3e  max|gpu-ref64| %.3e  "
                  "max|ref32-ref64| %.3e  gpu==ref32 %s\n", m.name, l, c32.roles[l].compress_ratio, err, floor,
                  max_abs(ag[l], a64[l]), max_abs(a32[l], a64[l]), ag[l] == a32[l] ? "yes" : "no");
      // Per layer: within the ref32 floor, or below the outputs' bf16 resolution (2^-9 relative):
      // a layer whose ref32 happens to equal ref64 has floor 0, and one bf16 flip from a libm
      // difference (cos/sin/exp rounded once from double vs the C library's float functions) is
      // not an accuracy loss.
      EXPECT_LE(err, std::max(tol * floor, 1.0 / 512)) << "layer " << l;
      // V4.1 with the CUDA-core attention: the device follows the oracle's float operations in order
      // (scores, online softmax blocks, accumulators, selection ties): equal to ref32 bit for bit.
      if (v41 && !tc) EXPECT_TRUE(ag[l] == a32[l]) << "layer " << l << " differs from ref32";
      p32.insert(p32.end(), a32[l].begin(), a32[l].end());
      p64.insert(p64.end(), a64[l].begin(), a64[l].end());
      pg.insert(pg.end(), ag[l].begin(), ag[l].end());
    }
    // Pooled over every layer and row (as the whole-model gate pools the logits): the device follows
    // ref32's rounding points (and, CUDA-core, its summation orders), so its distance to ref64 is
    // about ref32's floor.
    const double floor = nrms(p32, p64), err = nrms(pg, p64);
    std::printf("[%s] pooled: NRMS(gpu, ref64) %.3e  NRMS(ref32, ref64) %.3e  ratio %.3f\n", m.name, err, floor,
                err / std::max(floor, 1e-300));
    EXPECT_LE(err, tol * floor);
    std::printf("[%s] top-k rows equal to ref32's: %ld of %ld\n", m.name, long(topk_same), long(topk_rows));
    if (c32.cfg.window_format != KvRowFormat::model1) EXPECT_EQ(topk_same, topk_rows);
  }
}

}  // namespace
}  // namespace dsv4::cuda

namespace dsv4::cuda {
namespace {

// Rows [r0, r0 + T) of every layer's output.
std::vector<std::vector<float>> slice(const std::vector<std::vector<float>>& ys, int64_t r0, int64_t T, int64_t D) {
  std::vector<std::vector<float>> out;
  for (const auto& y : ys) out.emplace_back(y.begin() + r0 * D, y.begin() + (r0 + T) * D);
  return out;
}

// Feeds `sizes` to stream s of gpu; returns every layer's rows in position order.
std::vector<std::vector<float>> feed(GpuRunner& g, int s, const std::vector<int64_t>& sizes) {
  std::vector<std::vector<float>> all;
  for (int64_t T : sizes) append(all, g.call({{s, T}}));
  return all;
}

TEST(AttentionCuda, ExactEqualitiesOnDevice) {
  const Model& m = models()[1];
  GpuRunner g(*m.w, 512, 16);
  const int64_t D = g.cfg.dim;
  // Pieces == whole (prompt of 45 crosses the 16-row window, ratio-2 groups, the top-8 limit and
  // the 4x4 candidate rows), then a 4-row verify == 4 single steps.
  g.open(0, 5);
  const auto whole = feed(g, 0, {45});
  const auto verify = feed(g, 0, {4});
  for (const auto& split : std::vector<std::vector<int64_t>>{{10, 3, 17, 15}, {1, 44}, {16, 16, 13}, {44, 1}}) {
    const int s = 100 + static_cast<int>(split.size()) * 10 + static_cast<int>(split[0]);
    g.open(s, 5);
    EXPECT_EQ(feed(g, s, split), whole) << "split starting with " << split[0];
  }
  g.open(1, 5);
  feed(g, 1, {45});
  EXPECT_EQ(feed(g, 1, {1, 1, 1, 1}), verify) << "verify != single steps";
  // A stream in a batch == alone: three streams at different lengths in one call.
  g.open(2, 5); feed(g, 2, {45});
  g.open(3, 9);
  g.open(4, 5); feed(g, 4, {48});
  const auto batch = g.call({{3, 20}, {2, 4}, {4, 1}});
  g.open(5, 9);
  EXPECT_EQ(slice(batch, 0, 20, D), feed(g, 5, {20})) << "fresh stream in a batch";
  EXPECT_EQ(slice(batch, 20, 4, D), verify) << "verify rows in a batch";
  g.open(6, 5); feed(g, 6, {48});
  EXPECT_EQ(slice(batch, 24, 1, D), feed(g, 6, {1})) << "decode row in a batch";
  // Rollback: 5 rows of other inputs, truncate, then the right rows == never fed.
  g.open(7, 5); feed(g, 7, {45});
  g.seq[7] = 77; feed(g, 7, {5}); g.seq[7] = 5;
  ASSERT_TRUE(g.streams[7]->truncate(45).ok());
  EXPECT_EQ(feed(g, 7, {4}), verify) << "rollback";
  EXPECT_FALSE(g.streams[7]->truncate(20).ok()) << "past max rollback";
  // Snapshot at 30, restored into a new stream: continuing equals the uninterrupted run.
  g.open(8, 5); feed(g, 8, {30});
  auto snap = g.streams[8]->to_bytes();
  ASSERT_TRUE(snap.ok()) << snap.status().to_string();
  g.open(9, 5);
  ASSERT_TRUE(g.streams[9]->from_bytes(*snap).ok());
  const auto tail = feed(g, 9, {15, 4});
  auto ref = whole;
  append(ref, verify);
  EXPECT_EQ(tail, slice(ref, 30, 19, D)) << "restored stream";
  // Split parts: the bounded part and each row table's rows, the tables handed back in two chunks; the rows
  // from position 16 on are the tail of the rows from 0.
  auto parts = g.streams[8]->to_parts(0);
  ASSERT_TRUE(parts.ok()) << parts.status().to_string();
  auto later = g.streams[8]->to_parts(16);
  ASSERT_TRUE(later.ok()) << later.status().to_string();
  ASSERT_EQ(later->rows.size(), parts->rows.size());
  std::vector<std::vector<std::span<const uint8_t>>> chunks;
  for (size_t t = 0; t < parts->rows.size(); ++t) {
    const std::vector<uint8_t>& all = parts->rows[t];
    const size_t tail = later->rows[t].size();
    ASSERT_LE(tail, all.size());
    EXPECT_TRUE(std::equal(later->rows[t].begin(), later->rows[t].end(), all.end() - tail)) << "table " << t;
    chunks.push_back({std::span<const uint8_t>(all).first(all.size() - tail), std::span<const uint8_t>(all).last(tail)});
  }
  g.open(10, 5);
  ASSERT_TRUE(g.streams[10]->from_parts(parts->bounded, chunks).ok());
  EXPECT_EQ(feed(g, 10, {15, 4}), slice(ref, 30, 19, D)) << "restored from parts";
  // Into caches of another max_context and max_rollback: the bounded part holds only the ring slots a restored
  // stream reads, so it continues the same.
  GpuRunner g2(*m.w, 300, 4);
  g2.open(9, 5);
  ASSERT_TRUE(g2.streams[9]->from_bytes(*snap).ok());
  EXPECT_EQ(feed(g2, 9, {15, 4}), slice(ref, 30, 19, D)) << "restored into caches of another size";
  // Refused, leaving nothing half-read: a cut snapshot, a header of another layout, a table short of a row.
  g.open(11, 5);
  std::vector<uint8_t> cut(snap->begin(), snap->end() - 1);
  EXPECT_FALSE(g.streams[11]->from_bytes(cut).ok());
  std::vector<uint8_t> other = parts->bounded;
  other[16 + 8 * 2] ^= 1;  // the window length in the header
  EXPECT_FALSE(g.streams[11]->from_parts(other, chunks).ok());
  if (!chunks.empty() && !chunks[0][1].empty()) {
    auto shorter = chunks;
    shorter[0][1] = shorter[0][1].first(shorter[0][1].size() - 1);
    EXPECT_FALSE(g.streams[11]->from_parts(parts->bounded, shorter).ok());
  }
  EXPECT_EQ(g.streams[11]->length(), 0);
}

// Selection kernels against the oracle's select_topk_rows / select_candidate_rows on scores with
// many exact ties (values from a small bf16 set, -inf included). Rows past 8192 scores take the
// two-level top-k (per-chunk selections, then the row's), past 12288 candidate blocks the tiled
// select; 140000 scores make chunks of two tiles.
TEST(AttentionCuda, TopkAndCandidatesEqualOracleSelection) {
  const int64_t rows = 9, K = 16, B = 4, kb = 5;
  const int64_t lens[rows] = {1, 7, 16, 40, 300, 2500, 9000, 70000, 140000};
  const int64_t stride = 140000;
  std::vector<float> sc(rows * stride, 0.0f);
  std::mt19937 g(3);
  const float vals[] = {-1.0f, 0.0f, 0.5f, 0.5f, 1.0f, 2.0f, -std::numeric_limits<float>::infinity(), 0.25f};
  for (auto& v : sc) v = vals[g() % 8];
  std::vector<int64_t> pos(rows);
  for (int r = 0; r < rows; ++r) pos[r] = lens[r] - 1;  // ratio 1: L_c = pos + 1
  Arena a(size_t{128} << 20);
  float* dsc = a.alloc_n<float>(sc.size());
  int64_t* dpos = a.alloc_n<int64_t>(rows);
  int32_t* dtop = a.alloc_n<int32_t>(rows * K);
  int32_t* dwork = a.alloc_n<int32_t>(std::max<int64_t>(1, topk_work_ints(rows, stride, K)));
  uint8_t* dcand = a.alloc_n<uint8_t>(rows * stride);
  CUDA_OK(cudaMemcpy(dsc, sc.data(), 4 * sc.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dpos, pos.data(), 8 * rows, cudaMemcpyHostToDevice));
  uint16_t* dckeys = a.alloc_n<uint16_t>(candidate_work_elems(rows, stride, B));
  CUDA_OK(candidate_rows(dsc, stride, dpos, rows, 1, kb, B, dcand, stride, dckeys, nullptr));
  // The mask applied inside the top-k, and the same after apply_candidates wrote -inf into the scores.
  CUDA_OK(topk_rows(dsc, stride, dpos, rows, 1, dcand, stride, K, dtop, dwork, nullptr));
  std::vector<int32_t> top(rows * K), top2(rows * K);
  CUDA_OK(cudaMemcpy(top.data(), dtop, 4 * top.size(), cudaMemcpyDeviceToHost));
  CUDA_OK(apply_candidates(dsc, stride, dpos, rows, 1, dcand, stride, stride, nullptr));
  CUDA_OK(topk_rows(dsc, stride, dpos, rows, 1, nullptr, stride, K, dtop, dwork, nullptr));
  CUDA_OK(cudaMemcpy(top2.data(), dtop, 4 * top2.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(top2, top) << "mask inside the top-k != mask written into the scores";
  std::vector<uint8_t> cand(rows * stride);
  CUDA_OK(cudaMemcpy(cand.data(), dcand, cand.size(), cudaMemcpyDeviceToHost));
  for (int r = 0; r < rows; ++r) {
    std::vector<float> s(sc.begin() + r * stride, sc.begin() + r * stride + lens[r]);
    const auto keep = cpu::select_candidate_rows(s, lens[r], kb, B);
    EXPECT_EQ(std::vector<uint8_t>(cand.begin() + r * stride, cand.begin() + r * stride + lens[r]), keep) << "row " << r;
    for (int64_t t = 0; t < lens[r]; ++t) if (!keep[t]) s[t] = -std::numeric_limits<float>::infinity();
    auto want = cpu::select_topk_rows(s, std::min<int64_t>(K, lens[r]));
    want.resize(K, -1);
    EXPECT_EQ(std::vector<int32_t>(top.begin() + r * K, top.begin() + (r + 1) * K), want) << "row " << r;
  }
}

}  // namespace
}  // namespace dsv4::cuda

namespace dsv4::cuda {
namespace {

using gpu_testing::bits_of;

// Index scores against the oracle's formula (cpu::index_layer: bf16(dot) with cpu::dot's order,
// relu, x bf16 weight -> bf16, head sum -> bf16), bit for bit, for every index head dim. The keys
// and queries cover the integer path (FP4 queries, key scales within a few binades), the float
// path (key rows whose group scales span more than 9 binades or sit at the UE8M0 extremes; a head
// of raw bf16 queries) and all-zero query groups.
TEST(AttentionCuda, IndexScoresEqualOracleFormula) {
  const int64_t IH = 4, rows = 2, n = 300;
  const int64_t pos[rows] = {n - 1, 150};
  for (int64_t ihd : {32, 64, 128}) {
    SCOPED_TRACE(ihd);
    const int64_t G = ihd / 32, row_bytes = ihd / 2 + G;
    std::mt19937 g(11 + static_cast<unsigned>(ihd));
    std::vector<uint8_t> keys(n * row_bytes);
    std::vector<float> kf(n * ihd);
    for (int64_t t = 0; t < n; ++t) {
      uint8_t* row = &keys[t * row_bytes];
      for (int64_t i = 0; i < ihd / 2; ++i) row[i] = static_cast<uint8_t>(g());
      for (int64_t j = 0; j < G; ++j) row[ihd / 2 + j] = static_cast<uint8_t>(119 + g() % 5);
      if (t % 7 == 3) row[ihd / 2 + (t / 7) % G] = static_cast<uint8_t>(140 + g() % 10);  // spread > 9 binades
      if (t % 11 == 5) row[ihd / 2] = 0;                                              // 2^-127
      if (t % 13 == 6) row[ihd / 2 + G - 1] = 250;                                    // 2^123
      for (int64_t i = 0; i < ihd; ++i)
        kf[t * ihd + i] = e2m1_to_f32((row[i >> 1] >> (4 * (i & 1))) & 15) * ue8m0_to_f32(row[ihd / 2 + i / 32]);
    }
    std::vector<float> q(rows * IH * ihd), wt(rows * IH);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < IH; ++h)
        for (int64_t j = 0; j < G; ++j) {
          float* x = &q[((r * IH + h) * ihd) + 32 * j];
          const float mult = std::ldexp(1.0f, static_cast<int>(g() % 9) - 4);
          for (int i = 0; i < 32; ++i) x[i] = cpu::round_bf16(nd(g) * mult);
          if (r == 0 && h == 3) continue;  // raw bf16 queries: the float path
          if (h == 1 && j == 0) {           // an all-zero group
            std::fill(x, x + 32, 0.0f);
            continue;
          }
          gpu_testing::qdq_fp4_ue8m0_32(x);
        }
    for (auto& v : wt) v = cpu::round_bf16(nd(g));
    const float wscale = 0.125f;
    Arena a(size_t{16} << 20);
    const gpu_testing::PagedRowsDev dkeys = gpu_testing::paged_rows(keys, row_bytes, 2);  // pages of 4 rows
    float* dq = a.alloc_n<float>(q.size());
    float* dwt = a.alloc_n<float>(wt.size());
    float* dsc = a.alloc_n<float>(rows * n);
    int64_t* dpos = a.alloc_n<int64_t>(rows);
    int32_t* drp = a.alloc_n<int32_t>(rows);
    PieceDev* dpc = a.alloc_n<PieceDev>(1);
    PieceDev pc;
    pc.start = 0; pc.T = n; pc.ikeys = dkeys.rows;
    const int32_t rp[rows] = {0, 0};
    CUDA_OK(cudaMemcpy(dq, q.data(), 4 * q.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dwt, wt.data(), 4 * wt.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dpos, pos, sizeof pos, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(drp, rp, sizeof rp, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dpc, &pc, sizeof pc, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(dsc, 0, 4 * rows * n));
    CUDA_OK(index_scores(dq, dwt, wscale, dpc, drp, dpos, rows, IH, ihd, 1, dsc, n, n, nullptr));
    std::vector<float> got(rows * n);
    CUDA_OK(cudaMemcpy(got.data(), dsc, 4 * got.size(), cudaMemcpyDeviceToHost));
    int64_t mismatches = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t t = 0; t <= pos[r]; ++t) {
        float s = 0;
        for (int64_t h = 0; h < IH; ++h) {
          float v = cpu::round_bf16(cpu::dot<float>(&q[(r * IH + h) * ihd], &kf[t * ihd], ihd));
          v = std::max(v, 0.0f);
          s += cpu::round_bf16(v * cpu::round_bf16(wt[r * IH + h] * wscale));
        }
        const float want = cpu::round_bf16(s);
        if (bits_of(got[r * n + t]) != bits_of(want) && ++mismatches <= 5)
          ADD_FAILURE() << "row " << r << " t " << t << ": " << got[r * n + t] << " want " << want;
      }
    EXPECT_EQ(mismatches, 0);
    // The same two rows nine times each in one 18-row launch (the many-row configuration: one
    // thread per key row) give the same bits.
    const int64_t rows2 = 18;
    std::vector<float> q2, wt2;
    std::vector<int64_t> pos2;
    std::vector<int32_t> rp2(rows2, 0);
    for (int64_t i = 0; i < rows2; ++i) {
      q2.insert(q2.end(), q.begin() + (i % 2) * IH * ihd, q.begin() + (i % 2 + 1) * IH * ihd);
      wt2.insert(wt2.end(), wt.begin() + (i % 2) * IH, wt.begin() + (i % 2 + 1) * IH);
      pos2.push_back(pos[i % 2]);
    }
    float* dq2 = a.alloc_n<float>(q2.size());
    float* dwt2 = a.alloc_n<float>(wt2.size());
    float* dsc2 = a.alloc_n<float>(rows2 * n);
    int64_t* dpos2 = a.alloc_n<int64_t>(rows2);
    int32_t* drp2 = a.alloc_n<int32_t>(rows2);
    CUDA_OK(cudaMemcpy(dq2, q2.data(), 4 * q2.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dwt2, wt2.data(), 4 * wt2.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dpos2, pos2.data(), 8 * rows2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(drp2, rp2.data(), 4 * rows2, cudaMemcpyHostToDevice));
    CUDA_OK(index_scores(dq2, dwt2, wscale, dpc, drp2, dpos2, rows2, IH, ihd, 1, dsc2, n, n, nullptr));
    std::vector<float> got2(rows2 * n);
    CUDA_OK(cudaMemcpy(got2.data(), dsc2, 4 * got2.size(), cudaMemcpyDeviceToHost));
    int64_t diff = 0;
    for (int64_t i = 0; i < rows2; ++i)
      for (int64_t t = 0; t <= pos2[i]; ++t) diff += bits_of(got2[i * n + t]) != bits_of(got[(i % 2) * n + t]);
    EXPECT_EQ(diff, 0) << "18-row launch != 2-row launch";
  }
}

}  // namespace
}  // namespace dsv4::cuda
