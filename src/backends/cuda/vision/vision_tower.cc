// The CUDA vision tower's pass (see vision_tower.h): the oracle's encode (backends/cpu/vision.cc) step by step,
// every image's rows in one buffer, the attention and the aligner's unfold per image.
#include "backends/cuda/vision/vision_tower.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "backends/cuda/kernels/linear/linear.cuh"
#include "backends/cuda/runtime/check.h"
#include "backends/cuda/vision/vision_kernels.cuh"
#include "core/bf16.h"
#include "engine/vision_memory.h"
#include "family/deepseek_v41/image_span.h"

namespace dsv4::cuda {
namespace {

constexpr float kVisionNormEps = 1e-6f;  // vision.py's RMSNorm (the text model's is 1e-20)

// The oracle's inverse frequencies: inv_k = f32(1 / f32(theta^(k/16))).
vision::InvFreq inv_freq(double theta) {
  vision::InvFreq f;
  for (int k = 0; k < 16; ++k) f.v[k] = 1.0f / static_cast<float>(std::pow(theta, k / 16.0));
  return f;
}

// Where each image's rows start: patches (ViT rows) and cells (aligner rows).
struct Layout {
  std::vector<int64_t> patch0, cell0;
  int64_t patches = 0, cells = 0;
};

}  // namespace

StatusOr<std::unique_ptr<VisionTowerDevice>> VisionTowerDevice::create(const family::VisionWeights& w, int device) {
  DSV4_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device), fmt::format("cudaSetDevice({})", device)));
  std::unique_ptr<VisionTowerDevice> t(new VisionTowerDevice());
  t->device_ = device;
  DSV4_ASSIGN_OR_RETURN(t->w_, upload_vision_weights(w));
  DSV4_ASSIGN_OR_RETURN(t->stream_, Stream::create());
  return t;
}

StatusOr<std::vector<std::vector<uint16_t>>> VisionTowerDevice::encode(std::span<const VisionImage> images,
                                                                       const VisionDeviceProbe& probe) {
  std::lock_guard<std::mutex> lock(mu_);
  const family::VisionConfig& vc = w_.config;
  const int64_t P = 3 * int64_t{vc.patch_size} * vc.patch_size, D = w_.hidden;
  for (size_t i = 0; i < images.size(); ++i) {
    const VisionImage& im = images[i];
    if (im.grid_h < 1 || im.grid_w < 1)
      return error(StatusCode::invalid_argument, "image {}: grid {}x{} patches: both sides must be at least 1", i,
                   im.grid_h, im.grid_w);
    if (static_cast<int64_t>(im.patches.size()) != im.grid_h * im.grid_w * P)
      return error(StatusCode::invalid_argument, "image {}: {}x{} patches need {} values, got {}", i, im.grid_h,
                   im.grid_w, im.grid_h * im.grid_w * P, im.patches.size());
  }
  std::vector<std::vector<uint16_t>> out(images.size());
  if (images.empty()) return out;
  DSV4_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), fmt::format("cudaSetDevice({})", device_)));
  DSV4_RETURN_IF_ERROR(run(images, probe));
  // The aligner rows sit at the scratch's `out`, image after image.
  int64_t cells = 0, patches = 0;
  for (const VisionImage& im : images) {
    patches += im.grid_h * im.grid_w;
    cells += family::aligner_grid(im.grid_h, im.grid_w, vc.downsample_ratio).cells();
  }
  const engine::VisionScratch sc = engine::vision_scratch(vc, D, patches, cells);
  const char* rows = scratch_.as<char>() + sc.out;
  for (size_t i = 0; i < images.size(); ++i) {
    const int64_t m = family::aligner_grid(images[i].grid_h, images[i].grid_w, vc.downsample_ratio).cells();
    out[i].resize(static_cast<size_t>(m * D));
    DSV4_RETURN_IF_ERROR(cuda_status(
        cudaMemcpyAsync(out[i].data(), rows, out[i].size() * 2, cudaMemcpyDeviceToHost, stream_.get()),
        "copying the aligner rows"));
    rows += out[i].size() * 2;
  }
  DSV4_RETURN_IF_ERROR(stream_.synchronize("the vision tower"));
  return out;
}

Status VisionTowerDevice::run(std::span<const VisionImage> images, const VisionDeviceProbe& probe) {
  const family::VisionConfig& vc = w_.config;
  const int64_t V = vc.hidden_size, H = vc.num_attention_heads, I = vc.intermediate_size, D = w_.hidden;
  const int r = vc.downsample_ratio;
  const int64_t P = 3 * int64_t{vc.patch_size} * vc.patch_size, Pw = w_.patch_width;
  const cudaStream_t s = stream_.get();
  Layout L;
  for (const VisionImage& im : images) {
    L.patch0.push_back(L.patches);
    L.cell0.push_back(L.cells);
    L.patches += im.grid_h * im.grid_w;
    L.cells += family::aligner_grid(im.grid_h, im.grid_w, r).cells();
  }
  const int64_t N = L.patches, M = L.cells;
  const engine::VisionScratch sc = engine::vision_scratch(vc, D, N, M);
  if (static_cast<int64_t>(scratch_.bytes()) < sc.total) {
    DSV4_RETURN_IF_ERROR(stream_.synchronize("growing the vision scratch"));
    scratch_ = DeviceBuffer();
    scratch_ = DeviceBuffer(static_cast<size_t>(sc.total));
    if (!scratch_)
      return error(StatusCode::resource_exhausted,
                   "vision tower: cannot allocate {} bytes of scratch for {} patches ({} aligner rows)", sc.total, N, M);
  }
  char* base = scratch_.as<char>();
  float* x = reinterpret_cast<float*>(base + sc.x);
  float* h = reinterpret_cast<float*>(base + sc.h);
  float* wide = reinterpret_cast<float*>(base + sc.wide);
  float* mlp = reinterpret_cast<float*>(base + sc.mlp);
  uint16_t* q = reinterpret_cast<uint16_t*>(base + sc.qkv);
  uint16_t* k = q + N * V;
  uint16_t* v = k + N * V;
  float* rope = reinterpret_cast<float*>(base + sc.rope);
  uint16_t* pixels = reinterpret_cast<uint16_t*>(base + sc.pixels);
  float* unfolded = reinterpret_cast<float*>(base + sc.unfold);
  float* hidden = reinterpret_cast<float*>(base + sc.hidden);
  float* sums = reinterpret_cast<float*>(base + sc.sums);
  uint16_t* rows = reinterpret_cast<uint16_t*>(base + sc.out);
  const std::string shape = shape_text({{"images", static_cast<int64_t>(images.size())}, {"patches", N}, {"cells", M}});

  // Copies one image's slice of a device buffer to the probe (bf16 values in f32).
  const auto emit = [&](const std::string& name, const float* dev, bool per_cell, int64_t cols) -> Status {
    if (!probe) return ok_status();
    DSV4_RETURN_IF_ERROR(stream_.synchronize("a vision probe"));
    for (size_t i = 0; i < images.size(); ++i) {
      const int64_t first = per_cell ? L.cell0[i] : L.patch0[i];
      const int64_t n = per_cell ? family::aligner_grid(images[i].grid_h, images[i].grid_w, r).cells()
                                 : images[i].grid_h * images[i].grid_w;
      std::vector<float> host(static_cast<size_t>(n * cols));
      DSV4_RETURN_IF_ERROR(cuda_status(
          cudaMemcpy(host.data(), dev + first * cols, host.size() * 4, cudaMemcpyDeviceToHost), "a vision probe"));
      probe(name, i, n, cols, host);
    }
    return ok_status();
  };

  // Patches, padded to Pw columns with zeros, widened into `wide` [N, Pw]; patch embedding + bias into x.
  {
    std::vector<uint16_t> staged(static_cast<size_t>(N * Pw), 0);
    for (size_t i = 0; i < images.size(); ++i)
      for (int64_t p = 0; p < images[i].grid_h * images[i].grid_w; ++p)
        std::memcpy(&staged[(L.patch0[i] + p) * Pw], images[i].patches.data() + p * P, 2 * P);
    DSV4_RETURN_IF_ERROR(cuda_status(
        cudaMemcpyAsync(pixels, staged.data(), staged.size() * 2, cudaMemcpyHostToDevice, s), "uploading patches"));
    // The staging vector must live until the copy has read it (pageable memory: the copy is synchronous with
    // the host for the source, but synchronize anyway before it goes).
    DSV4_RETURN_IF_ERROR(stream_.synchronize("uploading patches"));
  }
  DSV4_CUDA_LAUNCH(vision::widen_bf16(pixels, N * Pw, wide, s), "vision widen_bf16", shape);
  DSV4_CUDA_LAUNCH(bf16_linear_f32(wide, N, w_.patch_embed, h, s), "vision patch_embed", shape);
  DSV4_CUDA_LAUNCH(vision::bias_round(h, w_.patch_embed_bias, N, V, x, nullptr, s), "vision patch_embed bias", shape);
  DSV4_RETURN_IF_ERROR(emit("patch_embed", x, false, V));
  const vision::InvFreq inv = inv_freq(vc.rope_theta);
  for (size_t i = 0; i < images.size(); ++i)
    DSV4_CUDA_LAUNCH(vision::rope_table(images[i].grid_h, images[i].grid_w, inv, rope + L.patch0[i] * 64, s),
                     "vision rope_table", shape);

  for (size_t b = 0; b < w_.blocks.size(); ++b) {
    const VisionBlockDevice& B = w_.blocks[b];
    const std::string at = fmt::format("vision block {} ", b);
    DSV4_CUDA_LAUNCH(vision::rms_norm(x, N, V, B.norm1, kVisionNormEps, h, s), at + "norm1", shape);
    DSV4_CUDA_LAUNCH(bf16_linear_f32(h, N, B.wqkv, wide, s), at + "wqkv", shape);
    DSV4_CUDA_LAUNCH(vision::qkv_rope(wide, N, V, B.wqkv_bias, rope, q, k, v, s), at + "qkv_rope", shape);
    for (size_t i = 0; i < images.size(); ++i) {
      const int64_t o = L.patch0[i] * V;
      DSV4_CUDA_LAUNCH(vision::attention(q + o, k + o, v + o, images[i].grid_h * images[i].grid_w, H, h + o, s),
                       at + "attention", shape);
    }
    DSV4_CUDA_LAUNCH(bf16_linear_f32(h, N, B.wo, wide, s), at + "wo", shape);
    DSV4_CUDA_LAUNCH(vision::bias_residual(wide, B.wo_bias, N, V, x, s), at + "wo bias + residual", shape);
    DSV4_CUDA_LAUNCH(vision::rms_norm(x, N, V, B.norm2, kVisionNormEps, h, s), at + "norm2", shape);
    DSV4_CUDA_LAUNCH(bf16_linear(h, N, B.w1, wide, s), at + "w1", shape);
    DSV4_CUDA_LAUNCH(vision::swiglu(wide, N, I, mlp, s), at + "swiglu", shape);
    DSV4_CUDA_LAUNCH(bf16_linear(mlp, N, B.w2, h, s), at + "w2", shape);
    DSV4_CUDA_LAUNCH(vision::residual(h, N * V, x, s), at + "residual", shape);
    if (probe) DSV4_RETURN_IF_ERROR(emit(fmt::format("block_{:02d}", b), x, false, V));
  }
  DSV4_CUDA_LAUNCH(vision::rms_norm(x, N, V, w_.norm, kVisionNormEps, h, s), "vision final norm", shape);
  DSV4_RETURN_IF_ERROR(emit("vit_norm", h, false, V));

  // The aligner: unfold per image, w1 + bias, GELU, w2 + bias -> bf16 rows.
  for (size_t i = 0; i < images.size(); ++i)
    DSV4_CUDA_LAUNCH(vision::unfold(h + L.patch0[i] * V, images[i].grid_h, images[i].grid_w, V, r,
                                    unfolded + L.cell0[i] * V * r * r, s),
                     "vision unfold", shape);
  DSV4_CUDA_LAUNCH(bf16_linear_f32(unfolded, M, w_.aligner_w1, hidden, s), "vision aligner w1", shape);
  DSV4_CUDA_LAUNCH(vision::bias_gelu(hidden, w_.aligner_w1_bias, M, D, s), "vision aligner gelu", shape);
  DSV4_RETURN_IF_ERROR(emit("aligner_hidden", hidden, true, D));
  DSV4_CUDA_LAUNCH(bf16_linear_f32(hidden, M, w_.aligner_w2, sums, s), "vision aligner w2", shape);
  DSV4_CUDA_LAUNCH(vision::bias_round(sums, w_.aligner_w2_bias, M, D, nullptr, rows, s), "vision aligner w2 bias",
                   shape);
  if (probe) {
    DSV4_RETURN_IF_ERROR(stream_.synchronize("a vision probe"));
    for (size_t i = 0; i < images.size(); ++i) {
      const int64_t m = family::aligner_grid(images[i].grid_h, images[i].grid_w, r).cells();
      std::vector<uint16_t> bits(static_cast<size_t>(m * D));
      DSV4_RETURN_IF_ERROR(cuda_status(
          cudaMemcpy(bits.data(), rows + L.cell0[i] * D, bits.size() * 2, cudaMemcpyDeviceToHost), "a vision probe"));
      std::vector<float> values(bits.size());
      bf16_to_f32(bits, values);
      probe("aligner", i, m, D, values);
    }
  }
  return ok_status();
}

}  // namespace dsv4::cuda
