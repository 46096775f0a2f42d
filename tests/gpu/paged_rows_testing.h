// A row table uploaded the way the attention kernels read it from KV pool pages (kernels/attention/row_pages.cuh):
// its rows in pages of 2^shift rows, the pages placed last first in one device buffer, each with a filled gap before
// its rows, so a kernel that ran past a page or took the table as one run would read other bytes than the test's.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "backends/cuda/kernels/attention/row_pages.cuh"
#include "backends/cuda/runtime/device_buffer.h"

namespace dsv4::gpu_testing {

struct PagedRowsDev {
  cuda::DeviceBuffer mem, table;
  cuda::RowPages rows;
};

inline PagedRowsDev paged_rows(std::span<const uint8_t> bytes, int64_t row_bytes, int32_t shift = 3) {
  const int64_t per_page = int64_t{1} << shift;
  const int64_t n_rows = static_cast<int64_t>(bytes.size()) / row_bytes;
  const int64_t n_pages = std::max<int64_t>(1, (n_rows + per_page - 1) / per_page);
  const int64_t offset = 256, stride = (offset + per_page * row_bytes + 255) / 256 * 256;
  PagedRowsDev d;
  d.mem = cuda::DeviceBuffer(static_cast<size_t>(n_pages * stride));
  d.table = cuda::DeviceBuffer(static_cast<size_t>(n_pages) * sizeof(uint8_t*));
  if (!d.mem || !d.table) return d;
  cudaMemset(d.mem.get(), 0x55, d.mem.bytes());
  std::vector<uint8_t*> pages(static_cast<size_t>(n_pages));
  for (int64_t k = 0; k < n_pages; ++k) {
    pages[k] = d.mem.as<uint8_t>() + (n_pages - 1 - k) * stride;
    const int64_t r0 = k * per_page, n = std::min(per_page, n_rows - r0);
    if (n > 0) cudaMemcpy(pages[k] + offset, bytes.data() + r0 * row_bytes, n * row_bytes, cudaMemcpyHostToDevice);
  }
  cudaMemcpy(d.table.get(), pages.data(), pages.size() * sizeof(uint8_t*), cudaMemcpyHostToDevice);
  d.rows = cuda::RowPages{d.table.as<uint8_t*>(), offset, shift};
  return d;
}

}  // namespace dsv4::gpu_testing
