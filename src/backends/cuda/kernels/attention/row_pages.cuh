// A stream's append-only row table as the attention kernels read it: rows in pages of the KV pool
// (family/deepseek_v41/state_pages.h). Row j is at pages[j >> shift] + offset + (j mod 2^shift) * row_bytes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

struct RowPages {
  uint8_t* const* pages = nullptr;  // the stream's page table (device); page k holds rows [k << shift, (k + 1) << shift)
  int64_t offset = 0;               // the table's first byte inside every page
  int32_t shift = 0;                // log2 of rows per page
  __host__ __device__ bool present() const { return pages != nullptr; }
  __host__ __device__ int64_t rows_per_page() const { return int64_t{1} << shift; }
#ifdef __CUDACC__
  __device__ __forceinline__ uint8_t* row(int64_t j, int64_t row_bytes) const {
    return pages[j >> shift] + offset + (j & (rows_per_page() - 1)) * row_bytes;
  }
  // Rows from j to the end of j's page: rows [j, j + run(j)) are consecutive bytes.
  __device__ __forceinline__ int64_t run(int64_t j) const { return rows_per_page() - (j & (rows_per_page() - 1)); }
#endif
};

}  // namespace dsv4::cuda
