// The expected tensor table of a config (names, dtypes, shapes, shards; model-spec.md §5, §8) and its check.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "family/deepseek_v41/config.h"

namespace dsv4::family {

// What a tensor is for: lets a writer pick sane values and a loader pick a decoder.
enum class TensorRole : uint8_t {
  fp8_weight,    // F8_E4M3 [out, in] of an FP8 linear; its scale is "<same prefix>.scale"
  fp8_scale,     // F8_E8M0 [ceil(out/b), ceil(in/b)], b = weight_block_size
  fp4_weight,    // I8 [out, in/2] routed expert, two e2m1 codes per byte (even k in the low nibble)
  fp4_scale,     // F8_E8M0 [out, in/32]
  engram_table,  // F8_E4M3 [rows, engram_head_dim]
  engram_scale,  // F8_E8M0 [rows, engram_head_dim/32]
  norm,          // RMSNorm weight (BF16)
  linear,        // plain BF16 matrix used as a linear: router, compressor, indexer wk/weights_proj, head
  embedding,     // embedding tables (token, Markov) and the image delimiter vectors
  bias,          // additive bias: router bias/bias_vl (F32), vision/aligner biases (BF16)
  attn_sink,     // F32 [H]
  hc_fn,         // F32 [(2+hc)*hc, hc*D] mHC mixes (V4: hc_head_fn [hc, hc*D])
  hc_base,       // F32 [(2+hc)*hc] (hc_head_base [hc])
  hc_scale,      // F32 [3] (hc_head_scale [1])
  ape,           // F32 [ratio, width]: V4 compressor position bias added to the pooling scores
  engram_gate,   // BF16 [hc, D] Engram q_weight / k_weight
  tid2eid,       // I64 [vocab, experts_per_tok] V4 hash routing table
};

std::string_view tensor_role_name(TensorRole r);

struct TensorSpec {
  std::string name;
  DType dtype = DType::bf16;
  std::vector<int64_t> shape;
  int32_t shard = 0;  // 1-based shard index
  TensorRole role = TensorRole::linear;

  int64_t numel() const;
  int64_t bytes() const { return numel() * dtype_size(dtype); }
};

// Every tensor of one checkpoint, ordered by shard then name.
struct TensorTable {
  std::vector<TensorSpec> tensors;
  int32_t num_shards = 0;

  // "model-00003-of-00048.safetensors"
  std::string shard_file(int32_t shard) const;
  int64_t total_bytes() const;
  std::map<DType, int64_t> bytes_by_dtype() const;
  // nullptr when absent.
  const TensorSpec* find(std::string_view name) const;

  std::unordered_map<std::string, size_t> by_name;  // name -> index into tensors
};

// The complete table for a validated config: V4.1 per model-spec.md §5 (vision tower when the config
// has vision_config), V4 per §8.
TensorTable expected_tensors(const Config& c);

// One tensor as found in a checkpoint.
struct FoundTensor {
  std::string name;
  DType dtype = DType::u8;
  std::vector<int64_t> shape;
  std::string file;  // shard file name (for messages)
};

// Lists every missing, extra, mis-typed and mis-shaped tensor in one error (data_loss); ok when the
// checkpoint matches. A U8 tensor where F8_E8M0 is expected is accepted (some tools write scales as U8).
Status validate_tensors(const TensorTable& expected, const std::vector<FoundTensor>& found);

// Bytes of weights read per decoded token at batch 1 without DSpark (model-spec.md §7.2): every dense
// tensor of the backbone, num_experts_per_tok routed experts per layer, one embedding row and the
// Engram rows touched; excludes vision, DSpark stages and the untouched rows of the tables.
int64_t weight_bytes_per_token(const Config& c, const TensorTable& t);

// Whether a release tensor belongs to the vision side: the tower (vision.*), the aligner (aligner.*) and the
// image delimiter vectors (image_start, image_end, image_newline).
bool is_vision_tensor(std::string_view name);

// Resident weight bytes (model-spec.md §7.3).
struct ResidentSizes {
  int64_t total = 0;              // the whole payload
  int64_t without_engram = 0;     // minus the Engram tables and their scales (host/SSD candidates)
  int64_t text_backbone = 0;      // also minus vision (tower, aligner, image delimiters) and DSpark
};
ResidentSizes resident_sizes(const TensorTable& t);

}  // namespace dsv4::family
