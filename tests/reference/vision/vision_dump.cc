// vision_dump: runs the CPU oracle's vision tower and aligner (ref32 and ref64) on a checkpoint and the patches
// that tests/reference/vision/vision_ref.py wrote, and writes every intermediate output per image as .npz
// (the same array names as the reference side). A test tool: see tests/reference/vision/README.md.
//
//   vision_dump --model CKPT --images PATCH_DIR/images.json --out DIR [--threads N]
//
// Writes DIR/dsv4_ref32_img{i}.npz and DIR/dsv4_ref64_img{i}.npz, arrays f32 (bf16 values): patch_embed [n, V],
// block_NN [n, V], vit_norm [n, V], aligner_hidden [m, D], aligner [m, D], span [rows, D].
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backends/cpu/vision.h"
#include "backends/cpu/vision_testing.h"
#include "core/npz.h"
#include "family/deepseek_v41/model.h"
#include "family/deepseek_v41/vision_weights.h"

namespace {

using namespace dsv4;

int fail(const std::string& msg) {
  std::fprintf(stderr, "vision_dump: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, images, out;
  int threads = 0;
  const char* usage = "usage: vision_dump --model CKPT --images PATCH_DIR/images.json --out DIR [--threads N]";
  if (argc == 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) return std::puts(usage), 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") model = v;
    else if (k == "--images") images = v;
    else if (k == "--out") out = v;
    else if (k == "--threads") threads = std::stoi(v);
    else return fail("unknown option " + k);
  }
  if (model.empty() || images.empty() || out.empty())
    return fail(usage);
  auto m = family::open_model(model);
  if (!m.ok()) return fail(m.status().to_string());
  auto w = family::bind_vision_weights(**m);
  if (!w.ok()) return fail(w.status().to_string());
  nlohmann::json manifest;
  try {
    std::ifstream f(images);
    manifest = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    return fail(images + ": " + e.what());
  }
  const std::filesystem::path dir = std::filesystem::path(images).parent_path();
  std::filesystem::create_directories(out);
  ThreadPool pool(threads);
  const int64_t P = 3 * int64_t{w->config.patch_size} * w->config.patch_size;
  int index = 0;
  for (const auto& im : manifest.at("images")) {
    cpu::ImagePatches img;
    img.grid_h = im.at("grid_h").get<int64_t>();
    img.grid_w = im.at("grid_w").get<int64_t>();
    int64_t rows = 0, cols = 0;
    auto patches = cpu::vision_testing::read_npy_f32((dir / im.at("file").get<std::string>()).string(), rows, cols);
    if (!patches.ok()) return fail(patches.status().to_string());
    if (rows != img.grid_h * img.grid_w || cols != P)
      return fail(fmt::format("image {}: patches [{}, {}] for a {}x{} grid of width {}", index, rows, cols, img.grid_h,
                              img.grid_w, P));
    img.patches = std::move(*patches);
    double seconds[2] = {};
    for (const auto& [prec, tag] : {std::pair{cpu::Precision::ref32, "ref32"}, std::pair{cpu::Precision::ref64, "ref64"}}) {
      NpzWriter npz;
      const std::string path = fmt::format("{}/dsv4_{}_img{}.npz", out, tag, index);
      Status st = npz.open(path);
      cpu::VisionOptions o;
      o.precision = prec;
      o.probe = [&](const std::string& name, int64_t r, int64_t c, const std::vector<float>& v) {
        if (st.ok()) st = npz.add_f32(name, {r, c}, v);
      };
      const auto t0 = std::chrono::steady_clock::now();
      auto e = cpu::encode_image(pool, *w, img, o);
      seconds[prec == cpu::Precision::ref64] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!e.ok()) return fail(e.status().to_string());
      if (st.ok()) st = npz.add_f32("span", {static_cast<int64_t>(e->span.size()) / w->hidden, w->hidden}, e->span);
      if (st.ok()) st = npz.finish();
      if (!st.ok()) return fail(st.to_string());
    }
    const family::AlignerGrid g = family::aligner_grid(img.grid_h, img.grid_w, w->config.downsample_ratio);
    std::printf("image %d: grid %ldx%ld -> aligner %ldx%ld; ref32 %.3f s, ref64 %.3f s (with the probe's copies)\n",
                index, img.grid_h, img.grid_w, g.h, g.w, seconds[0], seconds[1]);
    ++index;
  }
  return 0;
}
