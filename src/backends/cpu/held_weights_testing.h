// Test helper: family weight views over bytes a test holds, made from exact values (each encoded in its stored
// format; a value the format cannot hold exactly fails the test's setup).
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/exact_encode.h"
#include "core/tensor_store.h"
#include "family/deepseek_v41/weights.h"

namespace dsv4::cpu::held_testing {

class HeldWeights {
 public:
  // FP8 [out, in]: e4m3 values and pow2 scales [ceil(out/block), ceil(in/block)].
  family::Fp8Linear fp8(int64_t out, int64_t in, int block, const std::vector<float>& w, const std::vector<float>& s) {
    family::Fp8Linear l;
    l.block = block;
    l.weight = add(DType::f8_e4m3, {out, in}, value(encode_e4m3(w)));
    l.scale = add(DType::f8_e8m0, {(out + block - 1) / block, (in + block - 1) / block}, value(encode_ue8m0(s)));
    return l;
  }
  // FP4 [out, in]: e2m1 values and pow2 scales [out, in / 32].
  family::Fp4Linear fp4(int64_t out, int64_t in, const std::vector<float>& w, const std::vector<float>& s) {
    family::Fp4Linear l;
    l.weight = add(DType::i8, {out, in / 2}, value(encode_e2m1_pairs(w)));
    l.scale = add(DType::f8_e8m0, {out, in / 32}, value(encode_ue8m0(s)));
    return l;
  }
  // A bf16 matrix [out, in].
  family::Matrix bf16(int64_t out, int64_t in, const std::vector<float>& w) {
    return {add(DType::bf16, {out, in}, value(encode_floats(w, DType::bf16))), nullptr};
  }
  TensorView f32(const std::vector<float>& v) {
    return add(DType::f32, {static_cast<int64_t>(v.size())}, value(encode_floats(v, DType::f32)));
  }
  TensorView i64(const std::vector<int64_t>& v, std::vector<int64_t> shape) {
    std::vector<uint8_t> b(v.size() * 8);
    std::memcpy(b.data(), v.data(), b.size());
    return add(DType::i64, std::move(shape), std::move(b));
  }

 private:
  static std::vector<uint8_t> value(StatusOr<std::vector<uint8_t>> b) {
    DSV4_CHECK(b.ok());
    return std::move(*b);
  }
  TensorView add(DType dt, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    const std::string name = "t" + std::to_string(n_++);
    DSV4_CHECK(store_->add(name, dt, std::move(shape), std::move(bytes)).ok());
    return *store_->tensor(name);
  }
  std::shared_ptr<MemoryTensors> store_ = std::make_shared<MemoryTensors>("held test weights");
  int n_ = 0;
};

}  // namespace dsv4::cpu::held_testing
