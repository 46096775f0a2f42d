// The vision tower and aligner of one image (see vision.h): patch embedding, pre-norm ViT blocks with 2-D RoPE
// and bidirectional attention, final norm, 3x3 unfold, aligner MLP, span assembly.
#include "backends/cpu/vision.h"

#include <fmt/format.h>

#include "backends/cpu/linear.h"
#include "backends/cpu/rmsnorm.h"
#include "backends/cpu/vision_ops.h"

namespace dsv4::cpu {
namespace {

constexpr float kVisionNormEps = 1e-6f;  // vision.py RMSNorm default (the text model's is 1e-20)

template <typename Acc>
void norm_rows(ThreadPool& pool, const float* x, int64_t n, int64_t V, const Vec& w, float* y) {
  pool.parallel_for(n, [&](int64_t a, int64_t b) {
    rmsnorm_rows<Acc>(x + a * V, b - a, V, w.data(), kVisionNormEps, y + a * V);
  }, 16);
}

// x += attention(norm1(x)) + ... : one pre-norm block on the residual x bf16 [n, V].
template <typename Acc>
void vit_block(ThreadPool& pool, const family::VisionBlockWeights& B, const vision::Rope2d& rope, int64_t n,
               int64_t V, int64_t H, int64_t I, float* x) {
  Vec h(static_cast<size_t>(n * V)), qkv(static_cast<size_t>(n * 3 * V)), o(h.size());
  norm_rows<Acc>(pool, x, n, V, floats(B.norm1), h.data());
  bf16_linear<Acc>(pool, h.data(), n, B.wqkv, qkv.data(), floats(B.wqkv_bias).data());
  // Split into q, k, v [n, H, 64] and rotate q and k per patch.
  Vec q(h.size()), k(h.size()), v(h.size());
  pool.parallel_for(n, [&](int64_t a, int64_t b) {
    for (int64_t p = a; p < b; ++p) {
      const float* row = &qkv[p * 3 * V];
      std::copy(row, row + V, &q[p * V]);
      std::copy(row + V, row + 2 * V, &k[p * V]);
      std::copy(row + 2 * V, row + 3 * V, &v[p * V]);
      for (int64_t hd = 0; hd < H; ++hd) {
        vision::rope_2d_head<Acc>(&q[p * V + hd * 64], &rope.cos[p * 32], &rope.sin[p * 32]);
        vision::rope_2d_head<Acc>(&k[p * V + hd * 64], &rope.cos[p * 32], &rope.sin[p * 32]);
      }
    }
  }, 16);
  vision::attention<Acc>(pool, q.data(), k.data(), v.data(), n, H, o.data());
  bf16_linear<Acc>(pool, o.data(), n, B.wo, h.data(), floats(B.wo_bias).data());
  vision::add_bf16<Acc>(x, h.data(), n * V);
  // MLP: SwiGLU over w1's two halves, then w2 (no biases).
  Vec g(static_cast<size_t>(n * 2 * I)), m(static_cast<size_t>(n * I));
  norm_rows<Acc>(pool, x, n, V, floats(B.norm2), h.data());
  bf16_linear<Acc>(pool, h.data(), n, B.w1, g.data());
  vision::swiglu<Acc>(pool, g.data(), n, I, m.data());
  bf16_linear<Acc>(pool, m.data(), n, B.w2, h.data());
  vision::add_bf16<Acc>(x, h.data(), n * V);
}

template <typename Acc>
ImageEmbedding encode(ThreadPool& pool, const family::VisionWeights& w, const ImagePatches& img,
                      const VisionOptions& o) {
  const family::VisionConfig& vc = w.config;
  const int64_t n = img.grid_h * img.grid_w, V = vc.hidden_size, H = vc.num_attention_heads;
  const int64_t I = vc.intermediate_size, D = w.hidden;
  const auto probe = [&](const std::string& name, int64_t rows, int64_t cols, const Vec& v) {
    if (o.probe) o.probe(name, rows, cols, v);
  };
  // Patch embedding of the bf16 patches.
  Vec px(img.patches.size());
  for (size_t i = 0; i < px.size(); ++i) px[i] = round_bf16(img.patches[i]);
  Vec x(static_cast<size_t>(n * V));
  bf16_linear<Acc>(pool, px.data(), n, w.patch_embed, x.data(), floats(w.patch_embed_bias).data());
  probe("patch_embed", n, V, x);
  const vision::Rope2d rope = vision::rope_2d_table(img.grid_h, img.grid_w, vc.rope_theta);
  for (size_t b = 0; b < w.blocks.size(); ++b) {
    vit_block<Acc>(pool, w.blocks[b], rope, n, V, H, I, x.data());
    if (o.probe) probe(fmt::format("block_{:02d}", b), n, V, x);
  }
  Vec y(x.size());
  norm_rows<Acc>(pool, x.data(), n, V, floats(w.norm), y.data());
  probe("vit_norm", n, V, y);
  // Aligner: unfold r x r blocks, w1 + bias, GELU, w2 + bias.
  ImageEmbedding e;
  e.grid = family::aligner_grid(img.grid_h, img.grid_w, vc.downsample_ratio);
  const int64_t m = e.grid.cells();
  const Vec u = vision::unfold_blocks(y.data(), img.grid_h, img.grid_w, V, vc.downsample_ratio);
  Vec a(static_cast<size_t>(m * D));
  bf16_linear<Acc>(pool, u.data(), m, w.aligner_w1, a.data(), floats(w.aligner_w1_bias).data());
  vision::gelu<Acc>(pool, a.data(), m * D);
  probe("aligner_hidden", m, D, a);
  e.aligner.resize(a.size());
  bf16_linear<Acc>(pool, a.data(), m, w.aligner_w2, e.aligner.data(), floats(w.aligner_w2_bias).data());
  probe("aligner", m, D, e.aligner);
  // The span in token order.
  const Vec start = floats(w.image_start), newline = floats(w.image_newline), end = floats(w.image_end);
  int64_t next = 0;
  for (family::ImageRow kind : family::image_span_layout(e.grid)) {
    const float* src = kind == family::ImageRow::start     ? start.data()
                       : kind == family::ImageRow::newline ? newline.data()
                       : kind == family::ImageRow::end     ? end.data()
                                                           : &e.aligner[next++ * D];
    e.span.insert(e.span.end(), src, src + D);
  }
  return e;
}

Status check_image(const family::VisionWeights& w, const ImagePatches& img) {
  const int64_t P = 3 * int64_t{w.config.patch_size} * w.config.patch_size;
  if (img.grid_h < 1 || img.grid_w < 1)
    return error(StatusCode::invalid_argument, "image grid {}x{} patches: both sides must be at least 1", img.grid_h,
                 img.grid_w);
  const int64_t want = img.grid_h * img.grid_w * P;
  if (static_cast<int64_t>(img.patches.size()) != want)
    return error(StatusCode::invalid_argument,
                 "image of {}x{} patches needs {} values ({} patches x 3·{}² = {} each), got {}", img.grid_h,
                 img.grid_w, want, img.grid_h * img.grid_w, w.config.patch_size, P, img.patches.size());
  return ok_status();
}

}  // namespace

StatusOr<ImageEmbedding> encode_image(ThreadPool& pool, const family::VisionWeights& w, const ImagePatches& image,
                                      const VisionOptions& options) {
  DSV4_RETURN_IF_ERROR(check_image(w, image));
  return options.precision == Precision::ref64 ? encode<double>(pool, w, image, options)
                                               : encode<float>(pool, w, image, options);
}

StatusOr<std::vector<ImageEmbedding>> encode_images(ThreadPool& pool, const family::VisionWeights& w,
                                                    const std::vector<ImagePatches>& images,
                                                    const VisionOptions& options) {
  for (size_t i = 0; i < images.size(); ++i)
    if (Status s = check_image(w, images[i]); !s.ok()) return s.with_context(fmt::format("image {}", i));
  std::vector<ImageEmbedding> out;
  out.reserve(images.size());
  for (const ImagePatches& img : images) {
    DSV4_ASSIGN_OR_RETURN(ImageEmbedding e, encode_image(pool, w, img, options));
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace dsv4::cpu
