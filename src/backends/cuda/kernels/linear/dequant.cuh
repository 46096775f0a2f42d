// FP8 block-scaled weights widened on the device: bf16(e4m3 * 2^(s - 127)) for every element (exact for every
// scale a checkpoint stores), what the reference holds attn.wo_a as (convert.py).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

// codes e4m3 [out, in], scales ue8m0 [ceil(out/block), ceil(in/block)] -> dst bf16 bits [out, in].
cudaError_t fp8_to_bf16(const uint8_t* codes, const uint8_t* scales, int64_t out, int64_t in, int block,
                        uint16_t* dst, cudaStream_t s);

}  // namespace dsv4::cuda
