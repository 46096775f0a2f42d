// A model's stored bytes onto the device: each upload reserves its place in an arena and queues its copy (views
// of the model's store, or small vectors computed on the host); run() then carries every queued copy through
// pinned staging buffers, file by file in offset order, reads overlapping copies (core/staged_reader.h). The
// device formats are the stored ones (e4m3 + UE8M0 tiles, e2m1x2 + UE8M0, bf16, f32, EXL3 trellis): nothing is
// decoded on the way but the few tensors the device keeps wider (norm weights and biases as f32, attn.wo_a
// dequantized to bf16 on the device, as the reference holds it).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cuda/runtime/arena.h"
#include "backends/cuda/model/weights.h"
#include "core/staged_reader.h"
#include "core/status.h"
#include "family/deepseek_v41/weights.h"

namespace dsv4::cuda {

struct Exl3View;

struct UploadOptions {
  int64_t staging_bytes = int64_t{64} << 20;  // each pinned staging buffer
  int staging_buffers = 4;                   // host memory in use: buffers x bytes
  int readers = 2;                           // threads reading the files
  std::function<void(const StageProgress&)> progress;
};

class Uploader {
 public:
  // Reserves in `arena`; a measuring arena (Arena::measuring) makes every call a size count that queues nothing.
  // Bytes inside one of `stores`' mapped files are read from the file (pread, in file order); any other bytes
  // are copied from memory.
  explicit Uploader(Arena& arena, std::vector<const TensorStore*> stores = {})
      : arena_(arena), stores_(std::move(stores)) {}
  Uploader(const Uploader&) = delete;
  Uploader& operator=(const Uploader&) = delete;

  Arena& arena() { return arena_; }
  bool measuring() const { return arena_.is_measuring(); }
  // `bytes` of the arena, or resource_exhausted naming `what` and the arena's fill.
  StatusOr<void*> reserve(size_t bytes, std::string_view what, size_t align = 256);
  // Stored bytes copied as they are: a view of the model's store (read from its file), or borrowed bytes that
  // live as long as the model.
  StatusOr<void*> stored(const TensorView& v, std::string_view name);
  StatusOr<void*> stored(const void* bytes, int64_t n, std::string_view name);
  // Bytes computed on the host, kept here until run().
  StatusOr<void*> held(std::vector<uint8_t> bytes, std::string_view name);
  StatusOr<const float*> floats(std::vector<float> v, std::string_view name);
  // An FP8 [out, in] weight as bf16 values bf16(e4m3 * 2^(s - 127)) (exact): its bytes staged, then a device
  // kernel writes the bf16 matrix (run() keeps one staging area for these on the device).
  StatusOr<uint16_t*> dequant_bf16(const family::Fp8Linear& w, std::string_view name);

  // Carries every queued copy to the device (the current device), then runs the dequantizations. Not for a
  // measuring uploader.
  StatusOr<StageStats> run(const UploadOptions& o = {});
  int64_t queued_bytes() const { return queued_; }

 private:
  struct Dequant {
    int64_t out, in, block;
    size_t codes_tag, scales_tag;  // their staged copies
    uint16_t* dst;
  };
  std::optional<FileSpan> locate(const void* p) const;

  Arena& arena_;
  std::vector<const TensorStore*> stores_;
  std::vector<ReadJob> jobs_;   // tag = index into dsts_
  std::vector<void*> dsts_;     // where a job's bytes go (null: the dequantization area, at offset dq_offsets_)
  std::vector<int64_t> dq_offsets_;
  std::deque<std::vector<uint8_t>> held_;
  std::vector<Dequant> dequants_;
  int64_t queued_ = 0, dq_area_ = 0;
};

// The device view of each weight kind; every failure names the tensor.
StatusOr<Fp8View> upload(const family::Fp8Linear& w, Uploader& up, std::string_view name);
StatusOr<Fp4View> upload(const family::Fp4Linear& w, Uploader& up, std::string_view name);
// A matrix stored bf16 (or an EXL3 linear standing for one).
StatusOr<Bf16View> upload_bf16(const family::Matrix& w, Uploader& up, std::string_view name);
// An FP8 weight the device holds as bf16 values (attn.wo_a, as the reference holds it), or its EXL3 linear.
StatusOr<Bf16View> upload_dequant_bf16(const family::Fp8Linear& w, Uploader& up, std::string_view name);
// A matrix as f32 values: stored f32 as it is, stored bf16 widened on the host (small matrices only).
StatusOr<F32View> upload_f32(const family::Matrix& w, Uploader& up, std::string_view name);
// A bf16 or f32 tensor's values as host floats (bf16 widened exactly; an absent view gives none).
std::vector<float> host_floats(const TensorView& v);
// A bf16 or f32 vector as f32 values (norm weights, biases, sinks, position biases).
StatusOr<const float*> upload_floats(const TensorView& v, Uploader& up, std::string_view name);
// An EXL3 linear: its parts' stored tensors (trellis, suh, svh, bias); the view's host objects belong to
// up.arena().exl3 (created on first use) and live as long as the arena.
StatusOr<const Exl3View*> upload_exl3(const family::Exl3Linear& w, Uploader& up, std::string_view name);

// One weight uploaded at once into `arena` (tests, benchmarks): reserve, copy, done.
StatusOr<Fp8View> upload_now(const family::Fp8Linear& w, Arena& arena, std::string_view name);
StatusOr<Fp4View> upload_now(const family::Fp4Linear& w, Arena& arena, std::string_view name);
StatusOr<Bf16View> upload_bf16_now(const family::Matrix& w, Arena& arena, std::string_view name);
StatusOr<F32View> upload_f32_now(const family::Matrix& w, Arena& arena, std::string_view name);

// arena.alloc or resource_exhausted naming `what` and the arena's fill.
StatusOr<void*> arena_alloc(Arena& arena, size_t bytes, std::string_view what, size_t align = 256);

}  // namespace dsv4::cuda
