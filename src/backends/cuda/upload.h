// Oracle weights (cpu::*Weight, exact decoded floats) re-encoded bit-exactly into device formats.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "backends/cpu/linear.h"
#include "backends/cuda/arena.h"
#include "backends/cuda/weights.h"
#include "core/status.h"

namespace dsv4::cuda {

// Every value must be exactly representable in the device format (e4m3 / e2m1 / bf16 values and
// power-of-two ue8m0 scales); the first one that is not is refused with its tensor name and index
// (invalid_argument). resource_exhausted names the tensor when the arena is full. Copies are
// synchronous (host memory is not pinned).
StatusOr<Fp8View> upload(const cpu::Fp8Weight& w, Arena& arena, std::string_view name);
StatusOr<Fp4View> upload(const cpu::Fp4Weight& w, Arena& arena, std::string_view name);
// cpu::F32Weight is the same type as cpu::Bf16Weight, hence the two names.
StatusOr<Bf16View> upload_bf16(const cpu::Bf16Weight& w, Arena& arena, std::string_view name);
StatusOr<F32View> upload_f32(const cpu::F32Weight& w, Arena& arena, std::string_view name);
// A float vector (norm weights, biases, sinks) copied as is.
StatusOr<const float*> upload(std::span<const float> v, Arena& arena, std::string_view name);
// Raw bytes (bf16 tables, int maps), 256-byte aligned.
StatusOr<void*> upload_bytes(const void* data, size_t bytes, Arena& arena, std::string_view name);

// An oracle weight with `exl3` set (a pack's linear) uploads its parts' stored tensors (trellis, suh,
// svh, bias) instead: the returned view carries only out, in and `exl3`, whose host objects belong
// to arena.exl3 (created on first use) and live as long as the arena.
StatusOr<const Exl3View*> upload_exl3(const cpu::Exl3Weight& w, Arena& arena, std::string_view name);

// arena.alloc or resource_exhausted naming `what` and the arena's fill.
StatusOr<void*> arena_alloc(Arena& arena, size_t bytes, std::string_view what, size_t align = 256);

}  // namespace dsv4::cuda
