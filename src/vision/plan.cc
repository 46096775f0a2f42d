// Resize planning: min-pixel upscaling, patch rounding, the token budget and the pad/stretch placement.
#include "vision/plan.h"

#include <algorithm>
#include <cmath>

#include "family/deepseek_v41/image_span.h"

namespace dsv4::vision {
namespace {

// The aligner grid of a canvas (family::aligner_grid of its patch grid).
family::AlignerGrid llm_grid(int64_t canvas_h, int64_t canvas_w, int64_t p, int64_t r) {
  return family::aligner_grid(canvas_h / p, canvas_w / p, static_cast<int32_t>(r));
}

// Largest aspect-preserving canvas whose token grid fits max_tokens (h, w are step 2's doubles).
// For a grid of w' columns and h' = w' * h / w rows, tokens = h' * (w' + 1) + 2; the bound solves that for w'.
void shrink_to_budget(double h, double w, int64_t p, int64_t r, int64_t max_tokens, int64_t* canvas_h, int64_t* canvas_w) {
  const double aspect = h / w;
  const double max_w = std::sqrt(static_cast<double>(max_tokens - 2) / aspect + 0.25) - 0.5;
  const double max_h = max_w * aspect;
  const int64_t cell = p * r;  // one aligner row's pixels along a side
  if (max_w < 1.0) {  // very tall: a single column of tokens
    *canvas_h = (max_tokens - 2) / 2 * cell;
    *canvas_w = cell;
    return;
  }
  if (max_h < 1.0) {  // very wide: a single row
    *canvas_h = cell;
    *canvas_w = (max_tokens - 3) * cell;
    return;
  }
  const double beta = std::min(static_cast<double>(static_cast<int64_t>(std::floor(max_w)) * cell) / w,
                               static_cast<double>(static_cast<int64_t>(std::floor(max_h)) * cell) / h);
  *canvas_h = static_cast<int64_t>(std::floor(h * beta / static_cast<double>(p))) * p;
  *canvas_w = static_cast<int64_t>(std::floor(w * beta / static_cast<double>(p))) * p;
}

}  // namespace

StatusOr<ImagePlan> plan_image(int32_t width, int32_t height, const family::VisionConfig& cfg) {
  if (width <= 0 || height <= 0) return error(StatusCode::invalid_argument, "image size {}x{} is not positive", width, height);
  if (cfg.patch_size <= 0 || cfg.downsample_ratio <= 0) {
    return error(StatusCode::invalid_argument, "vision config: patch_size {} and downsample_ratio {} must be positive",
                 cfg.patch_size, cfg.downsample_ratio);
  }
  if (cfg.max_image_tokens < 4) {
    return error(StatusCode::invalid_argument, "vision config: max_image_tokens {} is below 4, the span of a 1x1 grid",
                 cfg.max_image_tokens);
  }
  if (cfg.min_pixels < 0) return error(StatusCode::invalid_argument, "vision config: min_pixels {} is negative", cfg.min_pixels);
  if (cfg.max_wh_ratio && !(*cfg.max_wh_ratio > 0)) {
    return error(StatusCode::invalid_argument, "vision config: max_wh_ratio {} must be positive", *cfg.max_wh_ratio);
  }
  const int64_t p = cfg.patch_size, r = cfg.downsample_ratio, max_tokens = cfg.max_image_tokens;

  // Steps 1-2 in doubles, as the reference's Python floats.
  double w = width, h = height;
  if (cfg.max_wh_ratio && w > h * *cfg.max_wh_ratio) w = h * *cfg.max_wh_ratio;
  if (w * h > 0 && w * h < static_cast<double>(cfg.min_pixels)) {
    const double scale = std::pow(static_cast<double>(cfg.min_pixels) / (w * h), 0.5);  // Python's ** 0.5
    w = std::trunc(w * scale);
    h = std::trunc(h * scale);
  }
  // Step 3.
  int64_t canvas_w = static_cast<int64_t>(std::ceil(w / static_cast<double>(p))) * p;
  int64_t canvas_h = static_cast<int64_t>(std::ceil(h / static_cast<double>(p))) * p;
  family::AlignerGrid g = llm_grid(canvas_h, canvas_w, p, r);
  // Step 4.
  if (family::image_span_rows(g) > max_tokens) {
    shrink_to_budget(h, w, p, r, max_tokens, &canvas_h, &canvas_w);
    g = llm_grid(canvas_h, canvas_w, p, r);
    if (family::image_span_rows(g) > max_tokens) {
      return error(StatusCode::internal, "vision plan: {}x{} still needs {} tokens after shrinking (limit {})", width,
                   height, family::image_span_rows(g), max_tokens);
    }
  }
  if (canvas_w <= 0 || canvas_h <= 0) {
    return error(StatusCode::invalid_argument, "image {}x{}: aspect ratio too extreme (canvas {}x{})", width, height,
                 canvas_w, canvas_h);
  }

  ImagePlan plan;
  plan.width = width, plan.height = height;
  plan.canvas_width = static_cast<int32_t>(canvas_w), plan.canvas_height = static_cast<int32_t>(canvas_h);
  plan.grid_h = static_cast<int32_t>(canvas_h / p), plan.grid_w = static_cast<int32_t>(canvas_w / p);
  plan.llm_h = static_cast<int32_t>(g.h), plan.llm_w = static_cast<int32_t>(g.w);
  plan.n_tokens = static_cast<int32_t>(family::image_span_rows(g));

  // Step 5.
  plan.content_width = plan.canvas_width, plan.content_height = plan.canvas_height;
  if (cfg.max_wh_ratio && static_cast<double>(width) >= *cfg.max_wh_ratio * static_cast<double>(height)) {
    plan.fit = Fit::stretch;
    return plan;
  }
  plan.fit = Fit::pad;
  const double im_ratio = static_cast<double>(width) / height;
  const double dest_ratio = static_cast<double>(canvas_w) / static_cast<double>(canvas_h);
  if (im_ratio > dest_ratio) {
    plan.content_height = static_cast<int32_t>(std::nearbyint(static_cast<double>(height) / width * static_cast<double>(canvas_w)));
  } else if (im_ratio < dest_ratio) {
    plan.content_width = static_cast<int32_t>(std::nearbyint(static_cast<double>(width) / height * static_cast<double>(canvas_h)));
  }
  if (plan.content_width <= 0 || plan.content_height <= 0) {
    return error(StatusCode::invalid_argument,
                 "image {}x{}: aspect ratio too extreme: it would be resized to {}x{} pixels inside a {}x{} canvas", width,
                 height, plan.content_width, plan.content_height, canvas_w, canvas_h);
  }
  if (plan.content_width != plan.canvas_width) {
    plan.content_x = static_cast<int32_t>(std::nearbyint((plan.canvas_width - plan.content_width) * 0.5));
  } else {
    plan.content_y = static_cast<int32_t>(std::nearbyint((plan.canvas_height - plan.content_height) * 0.5));
  }
  return plan;
}

}  // namespace dsv4::vision
