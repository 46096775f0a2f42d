// The image span's rows: delimiters and the tower's aligner rows in span order (see image_encoder.h).
#include "engine/image_encoder.h"

#include <cstring>

#include "family/deepseek_v41/image_span.h"

namespace dsv4::engine {
namespace {

StatusOr<std::vector<uint16_t>> delimiter(const TensorView& v, const char* name, int64_t dim) {
  if (!family::present(v)) return error(StatusCode::not_found, "the checkpoint has no '{}' tensor", name);
  if (v.dtype != DType::bf16 || v.rank() != 1 || v.dim(0) != dim)
    return error(StatusCode::invalid_argument, "'{}' is not bf16 [{}]", name, dim);
  std::vector<uint16_t> out(static_cast<size_t>(dim));
  std::memcpy(out.data(), v.data, out.size() * 2);
  return out;
}

}  // namespace

StatusOr<ImageDelimiters> image_delimiters(const family::Model& model) {
  if (!model.config.vision.has_value())
    return error(StatusCode::not_found, "the model's config has no vision_config (it reads text only)");
  const family::ModelWeights& w = model.weights;
  const int64_t D = model.plan.dim;
  ImageDelimiters d;
  DSV4_ASSIGN_OR_RETURN(d.start, delimiter(w.image_start, "image_start", D));
  DSV4_ASSIGN_OR_RETURN(d.newline, delimiter(w.image_newline, "image_newline", D));
  DSV4_ASSIGN_OR_RETURN(d.end, delimiter(w.image_end, "image_end", D));
  return d;
}

StatusOr<std::unique_ptr<ImageEncoder>> ImageEncoder::create(ImageDelimiters delimiters,
                                                             std::unique_ptr<VisionTower> tower, int64_t dim) {
  if (tower == nullptr) return error(StatusCode::invalid_argument, "an image encoder needs a vision tower");
  if (dim < 1) return error(StatusCode::invalid_argument, "an image encoder of width {}", dim);
  for (const auto* v : {&delimiters.start, &delimiters.newline, &delimiters.end})
    if (static_cast<int64_t>(v->size()) != dim)
      return error(StatusCode::invalid_argument, "an image delimiter of {} values for width {}", v->size(), dim);
  std::unique_ptr<ImageEncoder> e(new ImageEncoder());
  e->delimiters_ = std::move(delimiters);
  e->tower_ = std::move(tower);
  e->dim_ = dim;
  return e;
}

StatusOr<ImageSpanRows> ImageEncoder::encode(const vision::PixelPatches& p) const {
  if (p.llm_h < 1 || p.llm_w < 1 || p.n_tokens != p.llm_h * (p.llm_w + 1) + 2 ||
      static_cast<int64_t>(p.patches.size()) != int64_t{p.grid_h} * p.grid_w * p.patch_dim)
    return error(StatusCode::invalid_argument, "image patches of grid {}x{} (aligner {}x{}, span {}, {} values)",
                 p.grid_h, p.grid_w, p.llm_h, p.llm_w, p.n_tokens, p.patches.size());
  StatusOr<std::vector<uint16_t>> rows = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return tower_->aligner_rows(p);
  }();
  DSV4_RETURN_IF_ERROR(rows.status().with_context("the vision tower"));
  const int64_t cells = int64_t{p.llm_h} * p.llm_w;
  if (static_cast<int64_t>(rows->size()) != cells * dim_)
    return error(StatusCode::internal, "the vision tower returned {} values for {} aligner rows of width {}",
                 rows->size(), cells, dim_);
  ImageSpanRows out;
  out.rows = p.n_tokens;
  out.dim = dim_;
  out.values.reserve(static_cast<size_t>(out.rows * dim_));
  int64_t next = 0;  // the next aligner row
  for (family::ImageRow kind : family::image_span_layout(family::AlignerGrid{p.llm_h, p.llm_w})) {
    const uint16_t* row = nullptr;
    switch (kind) {
      case family::ImageRow::start: row = delimiters_.start.data(); break;
      case family::ImageRow::newline: row = delimiters_.newline.data(); break;
      case family::ImageRow::end: row = delimiters_.end.data(); break;
      case family::ImageRow::image: row = rows->data() + (next++) * dim_; break;
    }
    out.values.insert(out.values.end(), row, row + dim_);
  }
  return out;
}

}  // namespace dsv4::engine
