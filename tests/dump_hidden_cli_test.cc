// `dsv4 run --dump-hidden` on the tiny preset: the archive holds every layer's streams [T, hc, hidden] and sub-layer
// rows [T, hidden], each index source's picks, the final norm's output [T, hidden] and the prompt, every value finite; and final_norm is the head's input: multiplied by
// the head's stored weights (the preset's synthetic bf16 head, summed here in double) it gives the logits the run
// dumps with --dump-logits, row for row.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "backends/cpu/stored.h"
#include "family/deepseek_v41/synthetic_weights.h"
#include "cli_testing.h"
#include "npz_testing.h"
#include "family/deepseek_v41/preset.h"

namespace {

namespace fs = std::filesystem;
using namespace dsv4::npz_testing;


TEST(DumpHidden, LayersAndTheHeadsInputOnTiny) {
  const fs::path dir = fs::temp_directory_path() / ("dsv4_dump_hidden_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string npz = (dir / "h.npz").string(), npy = (dir / "l.npy").string();
  const auto r = dsv4::cli_testing::run_dsv4("run --preset tiny --seed 3 --ids 5,6,70000,8,9 --max-tokens 1 --threads 2 "
                                             "--dump-hidden " + npz + " --dump-logits " + npy);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto arrays = read_npz(npz);
  const dsv4::family::Config c = dsv4::family::preset_config(dsv4::family::Preset::tiny, dsv4::family::Variant::v41);
  const int64_t T = 5, C = c.hc_mult, D = c.hidden_size, V = c.vocab_size;
  // Per layer: the streams, four sub-layer row sets; per index source: its picks; then final_norm and tokens.
  const auto& sources = c.index_source_layer_ids;
  ASSERT_EQ(arrays.size(), static_cast<size_t>(5 * c.num_hidden_layers) + sources.size() + 2);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string n = fmt::format("layer_{:02d}", l);
    ASSERT_TRUE(arrays.count(n)) << n;
    EXPECT_EQ(arrays.at(n).shape, (std::vector<int64_t>{T, C, D})) << n;
    for (float x : floats_of(arrays.at(n))) ASSERT_TRUE(std::isfinite(x)) << n;
    for (const char* op : {"attn_in", "attn_out", "ffn_in", "ffn_out"}) {
      const std::string o = fmt::format("{}_{:02d}", op, l);
      ASSERT_TRUE(arrays.count(o)) << o;
      EXPECT_EQ(arrays.at(o).shape, (std::vector<int64_t>{T, D})) << o;
      for (float x : floats_of(arrays.at(o))) ASSERT_TRUE(std::isfinite(x)) << o;
    }
  }
  // An index source's picks at position p (model-spec.md §3.6): min(index_topk, L_c) distinct compressed rows below
  // L_c = (p + 1) / ratio, ascending, then -1.
  for (int l : sources) {
    const std::string n = fmt::format("topk_{:02d}", l);
    ASSERT_TRUE(arrays.count(n)) << n;
    const int64_t k = c.index_topk, R = c.compress_ratios[l];
    ASSERT_EQ(arrays.at(n).shape, (std::vector<int64_t>{T, k})) << n;
    std::vector<int32_t> sel(T * k);
    std::memcpy(sel.data(), arrays.at(n).data.data(), 4 * sel.size());
    for (int64_t p = 0; p < T; ++p) {
      const int64_t lc = (p + 1) / R, picks = std::min(k, lc);
      for (int64_t j = 0; j < k; ++j) {
        const int32_t v = sel[p * k + j];
        if (j < picks) {
          EXPECT_TRUE(v >= 0 && v < lc && (j == 0 || v > sel[p * k + j - 1])) << n << " row " << p << " pick " << j;
        } else {
          EXPECT_EQ(v, -1) << n << " row " << p << " pick " << j;
        }
      }
    }
  }
  EXPECT_NE(arrays.at("layer_00").data, arrays.at("layer_01").data);
  ASSERT_EQ(arrays.at("tokens").shape, std::vector<int64_t>{T});
  std::vector<int32_t> toks(T);
  std::memcpy(toks.data(), arrays.at("tokens").data.data(), 4 * T);
  EXPECT_EQ(toks, (std::vector<int32_t>{5, 6, 70000, 8, 9}));
  ASSERT_EQ(arrays.at("final_norm").shape, (std::vector<int64_t>{T, D}));
  const std::vector<float> xn = floats_of(arrays.at("final_norm"));
  // The dumped logits: T prompt rows, then the generated one.
  std::ifstream in(npy, std::ios::binary);
  const std::vector<uint8_t> lb((std::istreambuf_iterator<char>(in)), {});
  const Array logits = npy_array(lb.data(), lb.size());
  ASSERT_EQ(logits.shape, (std::vector<int64_t>{T + 1, V}));
  const std::vector<float> lv = floats_of(logits);
  // The head's stored bf16 weights of the same synthetic model (`run --preset tiny --seed 3`).
  const auto m = dsv4::family::synthetic_weights(c, 3, true);
  std::vector<float> row(D);
  double worst = 0;
  for (int64_t v = 0; v < V; ++v) {
    dsv4::cpu::floats_at(m->weights.head.weight, v * D, D, row.data());
    for (int64_t t = 0; t < T; ++t) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < D; ++k) s += double(xn[t * D + k]) * row[k], mag += std::fabs(double(xn[t * D + k]) * row[k]);
      worst = std::max(worst, std::fabs(s - lv[t * V + v]) / (mag + 1e-30));
    }
  }
  // The oracle sums 256 float products in float (8 interleaved partial sums): relative error ~1e-7 of sum |x·w|.
  EXPECT_LT(worst, 1e-5);
  fs::remove_all(dir);
}

}  // namespace
