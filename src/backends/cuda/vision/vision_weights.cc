// Upload of the vision tower's weights (see vision_weights.h).
#include "backends/cuda/vision/vision_weights.h"

#include <cuda_runtime.h>

#include <cstring>

#include "backends/cuda/runtime/check.h"
#include "engine/vision_memory.h"

namespace dsv4::cuda {
namespace {

// Hands out 256-byte aligned places in one device allocation and copies host rows into them.
class Placer {
 public:
  explicit Placer(DeviceBuffer& mem) : mem_(mem) {}

  // `rows` x `cols` bf16 from `v` (row-major, cols_stored per row in the view) into rows of `cols` (>= stored,
  // the rest zero).
  StatusOr<const uint16_t*> put(const TensorView& v, const char* name, int64_t rows, int64_t cols_stored,
                                int64_t cols) {
    if (v.dtype != DType::bf16 || v.numel() != rows * cols_stored || v.data == nullptr)
      return error(StatusCode::invalid_argument, "vision tensor {} is not bf16 of {} x {} values", name, rows,
                   cols_stored);
    const int64_t bytes = 2 * rows * cols;
    if (at_ + bytes > static_cast<int64_t>(mem_.bytes()))
      return error(StatusCode::internal, "vision weights: {} does not fit the planned {} bytes", name, mem_.bytes());
    char* dst = mem_.as<char>() + at_;
    if (cols == cols_stored) {
      DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpy(dst, v.data, bytes, cudaMemcpyHostToDevice), name));
    } else {
      std::vector<uint16_t> padded(static_cast<size_t>(rows * cols), 0);
      const auto* src = static_cast<const uint16_t*>(v.data);
      for (int64_t r = 0; r < rows; ++r) std::memcpy(&padded[r * cols], src + r * cols_stored, 2 * cols_stored);
      DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpy(dst, padded.data(), bytes, cudaMemcpyHostToDevice), name));
    }
    at_ += (bytes + 255) / 256 * 256;
    return reinterpret_cast<const uint16_t*>(dst);
  }
  StatusOr<const uint16_t*> vec(const TensorView& v, const char* name, int64_t n) { return put(v, name, 1, n, n); }
  StatusOr<Bf16View> mat(const family::Matrix& m, const char* name, int64_t out, int64_t in, int64_t in_padded) {
    if (m.exl3) return error(StatusCode::invalid_argument, "vision tensor {} is an EXL3 linear (bf16 expected)", name);
    DSV4_ASSIGN_OR_RETURN(const uint16_t* p, put(m.weight, name, out, in, in_padded));
    return Bf16View{p, out, in_padded, nullptr};
  }
  int64_t used() const { return at_; }

 private:
  DeviceBuffer& mem_;
  int64_t at_ = 0;
};

}  // namespace

StatusOr<VisionDeviceWeights> upload_vision_weights(const family::VisionWeights& w) {
  const family::VisionConfig& vc = w.config;
  const int64_t V = vc.hidden_size, I = vc.intermediate_size, D = w.hidden, r = vc.downsample_ratio;
  const int64_t P = 3 * int64_t{vc.patch_size} * vc.patch_size;
  if (V % 64 || V < 64 || vc.num_attention_heads * 64 != V)
    return error(StatusCode::invalid_argument, "vision tower of width {} and {} heads: heads of 64 expected", V,
                 vc.num_attention_heads);
  if (I % 8 || D % 8)
    return error(StatusCode::invalid_argument, "vision tower: MLP width {} and output width {} must be multiples of 8",
                 I, D);
  const int64_t bytes = engine::vision_weight_bytes(vc, D);
  VisionDeviceWeights d;
  d.config = vc;
  d.hidden = D;
  d.patch_width = engine::vision_patch_width(vc);
  d.memory = DeviceBuffer(static_cast<size_t>(bytes));
  if (!d.memory)
    return error(StatusCode::resource_exhausted, "vision tower weights: cannot allocate {} bytes on the device", bytes);
  Placer at(d.memory);
  DSV4_ASSIGN_OR_RETURN(d.patch_embed, at.mat(w.patch_embed, "patch_embed", V, P, d.patch_width));
  DSV4_ASSIGN_OR_RETURN(d.patch_embed_bias, at.vec(w.patch_embed_bias, "patch_embed bias", V));
  for (const family::VisionBlockWeights& b : w.blocks) {
    VisionBlockDevice x;
    DSV4_ASSIGN_OR_RETURN(x.norm1, at.vec(b.norm1, "norm1", V));
    DSV4_ASSIGN_OR_RETURN(x.norm2, at.vec(b.norm2, "norm2", V));
    DSV4_ASSIGN_OR_RETURN(x.wqkv, at.mat(b.wqkv, "wqkv", 3 * V, V, V));
    DSV4_ASSIGN_OR_RETURN(x.wqkv_bias, at.vec(b.wqkv_bias, "wqkv bias", 3 * V));
    DSV4_ASSIGN_OR_RETURN(x.wo, at.mat(b.wo, "wo", V, V, V));
    DSV4_ASSIGN_OR_RETURN(x.wo_bias, at.vec(b.wo_bias, "wo bias", V));
    DSV4_ASSIGN_OR_RETURN(x.w1, at.mat(b.w1, "w1", 2 * I, V, V));
    DSV4_ASSIGN_OR_RETURN(x.w2, at.mat(b.w2, "w2", V, I, I));
    d.blocks.push_back(x);
  }
  if (static_cast<int64_t>(d.blocks.size()) != vc.num_hidden_layers)
    return error(StatusCode::invalid_argument, "vision tower: {} blocks bound for {} layers", d.blocks.size(),
                 vc.num_hidden_layers);
  DSV4_ASSIGN_OR_RETURN(d.norm, at.vec(w.norm, "norm", V));
  DSV4_ASSIGN_OR_RETURN(d.aligner_w1, at.mat(w.aligner_w1, "aligner w1", D, V * r * r, V * r * r));
  DSV4_ASSIGN_OR_RETURN(d.aligner_w1_bias, at.vec(w.aligner_w1_bias, "aligner w1 bias", D));
  DSV4_ASSIGN_OR_RETURN(d.aligner_w2, at.mat(w.aligner_w2, "aligner w2", D, D, D));
  DSV4_ASSIGN_OR_RETURN(d.aligner_w2_bias, at.vec(w.aligner_w2_bias, "aligner w2 bias", D));
  if (at.used() != bytes)
    return error(StatusCode::internal, "vision weights took {} bytes, planned {}", at.used(), bytes);
  return d;
}

}  // namespace dsv4::cuda
