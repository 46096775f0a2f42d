// The engine's image seam (model-spec.md §3.10): one image's pixel patches to the embedding rows of its prompt span —
// the learned image_start / image_newline / image_end vectors at the delimiters, a backend's vision tower and aligner
// rows at the image positions in reading order. src/cli builds one where it wires the backend; the server only calls
// it through a function.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/status.h"
#include "family/deepseek_v41/model.h"
#include "vision/preprocess.h"

namespace dsv4::engine {

// A backend's vision tower and aligner: one image's ViT patches to its aligner rows.
class VisionTower {
 public:
  virtual ~VisionTower() = default;
  // bf16 [llm_h * llm_w, D] (D the text model's hidden size): row k is the aligner's row for block
  // (k / llm_w, k % llm_w) of the patch grid (row-major). Called for one image at a time.
  virtual StatusOr<std::vector<uint16_t>> aligner_rows(const vision::PixelPatches& patches) = 0;
};

// The learned span delimiters, bf16 [D] each (checkpoint tensors image_start, image_newline, image_end).
struct ImageDelimiters {
  std::vector<uint16_t> start, newline, end;
};

// The delimiters of a V4.1 checkpoint that reads images: not_found naming what is missing when the config has no
// vision_config (V4-0731) or the checkpoint lacks the tensors; invalid_argument for another dtype or shape.
StatusOr<ImageDelimiters> image_delimiters(const family::Model& model);

// One image's span rows in span order: bf16 [rows, dim].
struct ImageSpanRows {
  int64_t rows = 0, dim = 0;
  std::vector<uint16_t> values;
};

class ImageEncoder {
 public:
  // `dim`: the model's hidden size (every delimiter has it, every tower row must).
  static StatusOr<std::unique_ptr<ImageEncoder>> create(ImageDelimiters delimiters, std::unique_ptr<VisionTower> tower,
                                                        int64_t dim);
  int64_t dim() const { return dim_; }
  // The span of `patches`: n_tokens rows with the roles of family::image_span_layout of the llm grid — delimiter rows
  // from the learned vectors, the k-th image row from the tower's row k. Calls from several threads run one at a time.
  // invalid_argument when the patches' grids disagree with each other; internal when the tower returns another count
  // of rows.
  StatusOr<ImageSpanRows> encode(const vision::PixelPatches& patches) const;

 private:
  ImageEncoder() = default;
  ImageDelimiters delimiters_;
  std::unique_ptr<VisionTower> tower_;
  int64_t dim_ = 0;
  mutable std::mutex mu_;
};

}  // namespace dsv4::engine
