// Weight binding: a model's tensors as typed views per layer, in their stored formats (FP8 e4m3 + UE8M0 tiles,
// FP4 e2m1x2 + UE8M0 per 32, bf16, f32, EXL3 trellis), pointing into a TensorStore (a mapped checkpoint, or
// bytes held in memory). Every backend reads these: the CPU oracle decodes them operation by operation, CUDA
// uploads their bytes. Nothing is decoded here.
#pragma once

#include <functional>
#include <memory>
#include <variant>
#include <string>
#include <vector>

#include "core/checkpoint.h"
#include "core/status.h"
#include "core/tensor_store.h"
#include "core/tensor_view.h"
#include "family/deepseek_v41/config.h"
#include "family/deepseek_v41/engram_layout.h"
#include "family/deepseek_v41/layer_plan.h"
#include "family/deepseek_v41/tensors.h"
#include "formats/exl3/linear.h"

namespace dsv4::family {

struct Exl3PackPlan;  // exl3_layout.h

// An absent optional tensor has data == nullptr (check with present()).
inline bool present(const TensorView& v) { return v.data != nullptr; }

// One stored EXL3 linear W [in_padded, out_padded] (y = x·W; formats.md §1.3) standing for a block of a
// release linear: it reads `in` inputs and writes `out` outputs (the rest is padding).
struct Exl3Part {
  int64_t in = 0, out = 0;                // logical dims
  int64_t in_padded = 0, out_padded = 0;  // multiples of 128
  exl3::Linear packed;                    // trellis (borrowed from the pack, or held), suh, svh, bias (fp16)
  // The padded out width a device chooses this part's K split from: a tensor-parallel rank's column slice
  // keeps the whole part's (fabric/exl3_cut.h), so it sums K in the whole part's order; 0 = out_padded.
  int64_t k_split_out = 0;
};

// A release linear [out, in] held as block-diagonal EXL3 parts: part g reads inputs [sum of in of parts < g,
// + in) and writes outputs [sum of out of parts < g, + out). One part, or o_groups parts for attn.wo_a.
struct Exl3Linear {
  std::vector<Exl3Part> parts;
  int64_t in = 0, out = 0;  // totals over the parts
};
using Exl3Ref = std::shared_ptr<const Exl3Linear>;

// Appends stored linear L (dims padded to 128) as w's next block-diagonal part, reading `in` inputs and
// writing `out` outputs.
void add_exl3_part(Exl3Linear& w, int64_t in, int64_t out, exl3::Linear L);

// FP8 linear: weight e4m3 [out, in] + scale UE8M0 [ceil(out/block), ceil(in/block)]; or an EXL3 linear.
struct Fp8Linear {
  TensorView weight, scale;
  int32_t block = 0;  // the weight tile (quantization_config.weight_block_size)
  Exl3Ref exl3;
  int64_t out() const { return exl3 ? exl3->out : present(weight) ? weight.dim(0) : 0; }
  int64_t in() const { return exl3 ? exl3->in : present(weight) ? weight.dim(1) : 0; }
  bool held() const { return exl3 || present(weight); }
};
// FP4 routed-expert linear: weight I8 [out, in/2] (even k in the low nibble) + scale UE8M0 [out, in/32]; or EXL3.
struct Fp4Linear {
  TensorView weight, scale;
  Exl3Ref exl3;
  int64_t out() const { return exl3 ? exl3->out : present(weight) ? weight.dim(0) : 0; }
  int64_t in() const { return exl3 ? exl3->in : present(weight) ? 2 * weight.dim(1) : 0; }
  bool held() const { return exl3 || present(weight); }
};
// A plain matrix used as a linear: bf16 or f32 [out, in] (router, compressor, indexer, mHC mixes, head); or EXL3.
struct Matrix {
  TensorView weight;
  Exl3Ref exl3;
  int64_t out() const { return exl3 ? exl3->out : present(weight) ? weight.dim(0) : 0; }
  int64_t in() const { return exl3 ? exl3->in : present(weight) ? weight.dim(1) : 0; }
  bool held() const { return exl3 || present(weight); }
};
struct Expert {
  Fp4Linear w1, w2, w3;  // gate [I, D], down [D, I], up [I, D]; none held: another rank's expert
};

// One block (backbone layer or DSpark stage); which members are present follows its LayerPlan.
struct LayerWeights {
  // mHC: fn f32 [(2+hc)*hc, hc*D], base f32 [(2+hc)*hc], scale f32 [3].
  Matrix hc_attn_fn, hc_ffn_fn;
  TensorView hc_attn_base, hc_attn_scale, hc_ffn_base, hc_ffn_scale;
  TensorView attn_norm, ffn_norm;  // bf16 [D]
  // Attention.
  TensorView attn_sink;            // f32 [H]
  TensorView q_norm, kv_norm;      // bf16 [Q], [d]
  Fp8Linear wq_a, wq_b, wkv, wo_a, wo_b;
  // Compressor (KV sources; V4: every ratio>0 layer).
  Matrix compressor_wkv, compressor_wgate;  // bf16 [w, D]
  TensorView compressor_norm, compressor_ape;
  // Indexer: query side (index sources), key side (index-key owners), V4's own compressor.
  Fp8Linear indexer_wq_b;
  Matrix indexer_weights_proj, indexer_wk;
  Matrix indexer_compressor_wkv, indexer_compressor_wgate;
  TensorView indexer_k_norm, indexer_compressor_norm, indexer_compressor_ape;
  // MoE.
  Matrix gate_weight;              // bf16 [E, D]
  TensorView gate_bias, gate_bias_vl;  // f32 [E] (absent on V4 hash layers; bias_vl V4.1 only)
  TensorView tid2eid;              // i64 [vocab, k] (V4 hash layers)
  std::vector<Expert> experts;     // [E]
  Fp8Linear shared_w1, shared_w2, shared_w3;
  // Engram (V4.1 Engram layers).
  TensorView engram_table, engram_table_scale;  // e4m3 [rows, hd], ue8m0 [rows, hd/32]
  TensorView engram_q_weight, engram_k_weight;  // bf16 [hc, D]
  Fp8Linear engram_wkv;                         // [(hc+1)*D, orders*heads*hd]
  // DSpark stage extras: main_proj/main_norm on stage 0; the heads on the last stage.
  Fp8Linear main_proj;
  TensorView main_norm, final_norm, markov_embed;
  Matrix markov_head, confidence_proj;
  Matrix hc_head_fn;               // V4 last stage
  TensorView hc_head_base, hc_head_scale;
};

struct ModelWeights {
  TensorView embed;                 // bf16 [vocab, D]
  Matrix head;                      // bf16 [vocab, D]
  TensorView norm;                  // bf16 [D]
  Matrix hc_head_fn;                // V4 only: f32 [hc, hc*D]
  TensorView hc_head_base, hc_head_scale;
  TensorView image_start, image_end, image_newline;  // V4.1 with vision
  std::vector<LayerWeights> layers;  // backbone, by layer id
  std::vector<LayerWeights> dspark;  // by stage
};

// Lists every missing, extra, mis-typed or mis-shaped tensor of `ck` against `table` in one error.
Status validate_checkpoint(const Checkpoint& ck, const TensorTable& table);

// Where binding finds what the release layout names. An EXL3 pack (formats.md §1.12) stores some linears as
// EXL3 groups (pack_plan) and leaves its Engram tables in the original release shards (extra).
struct BindSources {
  const TensorStore* store = nullptr;
  std::vector<const TensorStore*> extra;          // searched after `store` for names it lacks
  const Exl3PackPlan* pack_plan = nullptr;  // set for an EXL3 pack
};

// Binds every tensor the plan's layers read (views into the sources; EXL3 groups as borrowed trellises).
// One error names every tensor that is missing or cannot be bound.
StatusOr<ModelWeights> bind_weights(const Config& c, const ModelPlan& plan, const BindSources& sources);
StatusOr<ModelWeights> bind_weights(const Config& c, const ModelPlan& plan, const TensorStore& store);

// Visits every stored tensor `w`'s views hold (not EXL3 linears), by its name in the release layout.
void for_each_tensor(const ModelWeights& w, const ModelPlan& plan,
                     const std::function<void(const std::string& name, const TensorView& view)>& f);

// One linear of a model: FP8, FP4 (routed experts) or a plain matrix (each possibly EXL3).
using LinearRef = std::variant<Fp8Linear*, Fp4Linear*, Matrix*>;
// Visits every linear `w` holds under its release group name ("layers.3.attn.wq_a", "layers.3.ffn.experts.7.w2",
// "head", "mtp.0.main_proj"); the mHC mixes (f32 [mixes, C*D]) are not visited.
void for_each_linear(ModelWeights& w, const ModelPlan& plan,
                     const std::function<void(const std::string& group, LinearRef linear)>& f);

}  // namespace dsv4::family
