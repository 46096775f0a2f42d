// Re-encoding of the oracle's decoded weights into e4m3 / e2m1 / ue8m0 / bf16 bytes on the device.
#include "backends/cuda/upload.h"

#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include "backends/cuda/check.h"
#include "backends/cuda/exl3_view.h"
#include "core/bf16.h"
#include "core/fp4.h"
#include "core/fp8.h"
#include "core/ue8m0.h"

namespace dsv4::cuda {
namespace {

Status not_representable(std::string_view name, std::string_view part, std::string_view fmt_name, size_t i, float v) {
  return error(StatusCode::invalid_argument, "upload of '{}': {}[{}] = {} is not an exact {} value", name, part, i, v,
               fmt_name);
}

// ue8m0 byte of a power of two (2^-127 .. 2^127), or nullopt.
std::optional<uint8_t> ue8m0_of(float v) {
  if (!(v > 0) || !std::isfinite(v)) return std::nullopt;
  int e = 0;
  const float m = std::frexp(v, &e);  // v = m * 2^e, m in [0.5, 1)
  if (m != 0.5f) return std::nullopt;
  const int b = e - 1 + 127;
  if (b < 0 || b > 254) return std::nullopt;
  const auto byte = static_cast<uint8_t>(b);
  if (ue8m0_to_f32(byte) != v) return std::nullopt;
  return byte;
}

Status scales_to_ue8m0(const std::vector<float>& s, std::vector<uint8_t>& out, std::string_view name) {
  out.resize(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const auto b = ue8m0_of(s[i]);
    if (!b) return not_representable(name, "scale", "ue8m0 (power of two)", i, s[i]);
    out[i] = *b;
  }
  return ok_status();
}

template <typename T>
StatusOr<const T*> copy(const std::vector<T>& host, Arena& arena, std::string_view name, std::string_view part) {
  DSV4_ASSIGN_OR_RETURN(void* p, arena_alloc(arena, host.size() * sizeof(T), fmt::format("{}.{}", name, part)));
  DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
                                   fmt::format("copying '{}.{}' to the device", name, part)));
  return static_cast<const T*>(p);
}

Status check_size(std::string_view name, std::string_view part, size_t have, int64_t want) {
  if (want < 0 || have != static_cast<size_t>(want))
    return error(StatusCode::invalid_argument, "upload of '{}': {} holds {} values, the shape needs {}", name, part,
                 have, want);
  return ok_status();
}

// The view of an EXL3 linear standing for a weight of kind View: dims and the EXL3 view only.
template <typename View, typename W>
StatusOr<View> exl3_only(const W& w, Arena& arena, std::string_view name) {
  View v;
  DSV4_ASSIGN_OR_RETURN(v.exl3, upload_exl3(*w.exl3, arena, name));
  v.out = w.out;
  v.in = w.in;
  if (v.exl3->in != w.in || v.exl3->out != w.out)  // block-diagonal parts (wo_a): totals on both sides
    return error(StatusCode::invalid_argument, "upload of '{}': the EXL3 linear is [{}, {}], the weight [{}, {}]", name,
                 v.exl3->in, v.exl3->out, w.in, w.out);
  return v;
}

}  // namespace

StatusOr<const Exl3View*> upload_exl3(const cpu::Exl3Weight& w, Arena& arena, std::string_view name) {
  if (w.parts.empty()) return error(StatusCode::invalid_argument, "upload of '{}': an EXL3 linear with no parts", name);
  if (!arena.exl3) arena.exl3 = std::make_shared<Exl3Store>();
  Exl3Store& store = *arena.exl3;
  std::vector<Exl3ViewPart> parts;
  int64_t x0 = 0, y0 = 0;
  for (size_t g = 0; g < w.parts.size(); ++g) {
    const cpu::Exl3Part& src = w.parts[g];
    const exl3::Linear& L = src.packed;
    const std::string pn = w.parts.size() > 1 ? fmt::format("{}.slice.{}", name, g) : std::string(name);
    DSV4_RETURN_IF_ERROR(exl3::validate(L).with_context(pn));
    if (L.in_features != src.in_padded || L.out_features != src.out_padded || src.in > src.in_padded ||
        src.out > src.out_padded)
      return error(StatusCode::invalid_argument, "upload of '{}': stored [{}, {}] for logical [{}, {}] padded [{}, {}]",
                   pn, L.in_features, L.out_features, src.in, src.out, src.in_padded, src.out_padded);
    Exl3ViewPart p;
    DSV4_ASSIGN_OR_RETURN(p.w.trellis, copy(L.trellis, arena, pn, "trellis"));
    DSV4_ASSIGN_OR_RETURN(p.w.suh, copy(L.suh, arena, pn, "suh"));
    DSV4_ASSIGN_OR_RETURN(p.w.svh, copy(L.svh, arena, pn, "svh"));
    p.w.in_features = L.in_features;
    p.w.out_features = L.out_features;
    p.w.bits = L.bits;
    p.w.codebook = static_cast<int>(L.codebook);
    // A rank's column slice chooses its K split from the whole part's width (exl3_gemm.cuh).
    p.w.split_out_features = src.k_split_out > 0 ? src.k_split_out : L.out_features;
    if (p.w.split_out_features % 128 != 0 || p.w.split_out_features < L.out_features)
      return error(StatusCode::invalid_argument, "upload of '{}': K split chosen from {} columns for a part of {}", pn,
                   p.w.split_out_features, L.out_features);
    if (!src.bias.empty()) {
      DSV4_RETURN_IF_ERROR(check_size(pn, "bias", src.bias.size(), src.out_padded));
      DSV4_ASSIGN_OR_RETURN(p.bias, copy(std::vector<float>(src.bias.begin(), src.bias.begin() + src.out), arena, pn, "bias"));
    }
    p.in = src.in;
    p.out = src.out;
    p.x0 = x0;
    p.y0 = y0;
    x0 += src.in;
    y0 += src.out;
    parts.push_back(p);
  }
  if (x0 != w.in || y0 != w.out)
    return error(StatusCode::invalid_argument, "upload of '{}': parts cover [{}, {}], the linear is [{}, {}]", name, x0, y0,
                 w.in, w.out);
  const std::vector<Exl3ViewPart>& stored = store.parts.emplace_back(std::move(parts));
  Exl3View& v = store.views.emplace_back();
  v.parts = stored.data();
  v.n_parts = static_cast<int32_t>(stored.size());
  v.in = w.in;
  v.out = w.out;
  v.scratch = &store.scratch;
  if (stored.size() > 1) {
    std::vector<Exl3View>& groups = store.groups.emplace_back(stored.size());
    for (size_t g = 0; g < stored.size(); ++g) {
      std::vector<Exl3ViewPart>& alone = store.parts.emplace_back(1, stored[g]);
      alone[0].x0 = alone[0].y0 = 0;
      groups[g] = Exl3View{alone.data(), 1, stored[g].in, stored[g].out, nullptr, &store.scratch};
    }
    v.groups = groups.data();
  }
  const auto [row, fixed] = exl3_scratch_need(v);
  store.scratch.require(row, fixed);
  return &v;
}

StatusOr<void*> arena_alloc(Arena& arena, size_t bytes, std::string_view what, size_t align) {
  void* p = arena.alloc(bytes, align);
  if (!p)
    return error(StatusCode::resource_exhausted, "device arena full: '{}' needs {} bytes, {} of {} used", what, bytes,
                 arena.used(), arena.capacity());
  return p;
}

StatusOr<Fp8View> upload(const cpu::Fp8Weight& w, Arena& arena, std::string_view name) {
  if (w.exl3) return exl3_only<Fp8View>(w, arena, name);
  if (w.block <= 0) return error(StatusCode::invalid_argument, "upload of '{}': block {}", name, w.block);
  const int64_t sb_out = (w.out + w.block - 1) / w.block, sb_in = (w.in + w.block - 1) / w.block;
  DSV4_RETURN_IF_ERROR(check_size(name, "w", w.w.size(), w.out * w.in));
  DSV4_RETURN_IF_ERROR(check_size(name, "scale", w.scale.size(), sb_out * sb_in));
  std::vector<uint8_t> codes(w.w.size()), scales;
  for (size_t i = 0; i < w.w.size(); ++i) {
    codes[i] = f32_to_e4m3(w.w[i]);
    if (e4m3_to_f32(codes[i]) != w.w[i] || std::isnan(w.w[i])) return not_representable(name, "w", "e4m3", i, w.w[i]);
  }
  DSV4_RETURN_IF_ERROR(scales_to_ue8m0(w.scale, scales, name));
  Fp8View v;
  DSV4_ASSIGN_OR_RETURN(v.w, copy(codes, arena, name, "w"));
  DSV4_ASSIGN_OR_RETURN(v.scale, copy(scales, arena, name, "scale"));
  v.out = w.out;
  v.in = w.in;
  v.block = w.block;
  return v;
}

StatusOr<Fp4View> upload(const cpu::Fp4Weight& w, Arena& arena, std::string_view name) {
  if (w.exl3) return exl3_only<Fp4View>(w, arena, name);
  if (w.in % 32 != 0) return error(StatusCode::invalid_argument, "upload of '{}': in = {} is not a multiple of 32", name, w.in);
  DSV4_RETURN_IF_ERROR(check_size(name, "w", w.w.size(), w.out * w.in));
  DSV4_RETURN_IF_ERROR(check_size(name, "scale", w.scale.size(), w.out * (w.in / 32)));
  std::vector<uint8_t> packed(w.w.size() / 2), scales;
  for (size_t i = 0; i < w.w.size(); i += 2) {
    const uint8_t c0 = f32_to_e2m1(w.w[i]), c1 = f32_to_e2m1(w.w[i + 1]);
    if (e2m1_to_f32(c0) != w.w[i] || std::isnan(w.w[i])) return not_representable(name, "w", "e2m1", i, w.w[i]);
    if (e2m1_to_f32(c1) != w.w[i + 1] || std::isnan(w.w[i + 1]))
      return not_representable(name, "w", "e2m1", i + 1, w.w[i + 1]);
    packed[i / 2] = pack_e2m1_pair(c0, c1);
  }
  DSV4_RETURN_IF_ERROR(scales_to_ue8m0(w.scale, scales, name));
  Fp4View v;
  DSV4_ASSIGN_OR_RETURN(v.w, copy(packed, arena, name, "w"));
  DSV4_ASSIGN_OR_RETURN(v.scale, copy(scales, arena, name, "scale"));
  v.out = w.out;
  v.in = w.in;
  return v;
}

StatusOr<Bf16View> upload_bf16(const cpu::Bf16Weight& w, Arena& arena, std::string_view name) {
  if (w.exl3) return exl3_only<Bf16View>(w, arena, name);
  DSV4_RETURN_IF_ERROR(check_size(name, "w", w.w.size(), w.out * w.in));
  std::vector<uint16_t> bits(w.w.size());
  for (size_t i = 0; i < w.w.size(); ++i) {
    bits[i] = f32_to_bf16(w.w[i]);
    if (bf16_to_f32(bits[i]) != w.w[i] || std::isnan(w.w[i])) return not_representable(name, "w", "bf16", i, w.w[i]);
  }
  Bf16View v;
  DSV4_ASSIGN_OR_RETURN(v.w, copy(bits, arena, name, "w"));
  v.out = w.out;
  v.in = w.in;
  return v;
}

StatusOr<F32View> upload_f32(const cpu::F32Weight& w, Arena& arena, std::string_view name) {
  if (w.exl3) return exl3_only<F32View>(w, arena, name);
  DSV4_RETURN_IF_ERROR(check_size(name, "w", w.w.size(), w.out * w.in));
  F32View v;
  DSV4_ASSIGN_OR_RETURN(v.w, copy(w.w, arena, name, "w"));
  v.out = w.out;
  v.in = w.in;
  return v;
}

StatusOr<const float*> upload(std::span<const float> v, Arena& arena, std::string_view name) {
  DSV4_ASSIGN_OR_RETURN(void* p, upload_bytes(v.data(), v.size_bytes(), arena, name));
  return static_cast<const float*>(p);
}

StatusOr<void*> upload_bytes(const void* data, size_t bytes, Arena& arena, std::string_view name) {
  DSV4_ASSIGN_OR_RETURN(void* p, arena_alloc(arena, bytes, name));
  if (bytes)
    DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpy(p, data, bytes, cudaMemcpyHostToDevice),
                                     fmt::format("copying '{}' to the device", name)));
  return p;
}

}  // namespace dsv4::cuda
