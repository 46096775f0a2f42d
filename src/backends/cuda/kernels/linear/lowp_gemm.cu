// Host side of the many-row GEMM (lowp_gemm.cuh, lowp_wgmma.cuh): the switch between it and the 64 x 64
// prefill tiles, the switch between its warpgroup-MMA and mma.sync forms, its row-tile choice, the
// stream-ordered buffer of a launch's quantized rows.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "backends/cuda/kernels/linear/linear.cuh"
#include "backends/cuda/kernels/linear/lowp_wgmma.cuh"

namespace dsv4::cuda {
namespace lowp {
namespace {

int g_gemm = -1;  // -1: not read yet; 0: prefill_tile; 1: gemm_tile
int g_nt = 0;     // 0: the choice below; 1, 2, 4: forced (set_lowp_gemm_tile_rows)
int g_wg = -1;    // -1: not read yet; 0: gemm_tile (the default); 1: gemm_wg_tile where the device has it

// Memory the default pool keeps across launches instead of returning it to the device at every
// synchronization (the quantized rows of one launch at most, and a little more).
constexpr uint64_t kPoolKeep = uint64_t(256) << 20;

}  // namespace

bool gemm_enabled() {
  if (g_gemm < 0) {
    const char* e = std::getenv("DSV4_LOWP_GEMM");
    g_gemm = e && std::strcmp(e, "0") == 0 ? 0 : 1;
  }
  return g_gemm == 1;
}

bool wg_enabled() {
  static const bool device_has = [] {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) return false;
    return major == 9 && minor == 0;  // sm_90a code (wgmma) runs on compute capability 9.0 only
  }();
  if (g_wg < 0) {
    const char* e = std::getenv("DSV4_LOWP_WGMMA");
    g_wg = e && std::strcmp(e, "1") == 0 ? 1 : 0;
  }
  return device_has && g_wg == 1;
}

int wg_nt(int64_t rows, int64_t col_tiles, int sms) {
  if (g_nt) return g_nt >= 4 ? 4 : 2;
  return col_tiles * ((rows + 127) / 128) >= sms ? 4 : 2;
}

int wg_experts_nt(int64_t n_pairs) {
  if (g_nt) return g_nt >= 4 ? 4 : 2;
  return n_pairs >= 128 * 384 ? 4 : 2;
}

int gemm_nt(int64_t rows, int64_t col_tiles, int sms) {
  if (g_nt) return g_nt;
  for (int nt : {4, 2})
    if (col_tiles * ((rows + kGRows<1> * nt - 1) / (kGRows<1> * nt)) >= sms) return nt;
  return 1;
}

int experts_nt(int64_t n_pairs) {
  if (g_nt) return g_nt;
  return n_pairs >= 128 * 384 ? 4 : n_pairs >= 32 * 384 ? 2 : 1;
}

int64_t gemm_chunk_rows(int64_t in) {
  const int64_t n = static_cast<int64_t>(kGemmQuantBudget / quant_row_bytes(in)) / 128 * 128;
  return n < 128 ? 128 : n;
}

cudaError_t gemm_alloc(size_t bytes, cudaStream_t s, void** p) {
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing(s, &cs);
  if (e != cudaSuccess) return e;
  if (cs == cudaStreamCaptureStatusNone) {  // once per device, outside any capture: keep freed memory pooled
    static std::mutex mu;
    static std::set<int> done;
    int dev = 0;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
    std::lock_guard<std::mutex> lock(mu);
    if (!done.count(dev)) {
      cudaMemPool_t pool = nullptr;
      if (cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess) {
        uint64_t keep = kPoolKeep;
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
      }
      done.insert(dev);
    }
  }
  return cudaMallocAsync(p, bytes, s);
}

cudaError_t gemm_free(void* p, cudaStream_t s) { return cudaFreeAsync(p, s); }

}  // namespace lowp

void set_lowp_gemm(bool on) { lowp::g_gemm = on ? 1 : 0; }
void set_lowp_gemm_wgmma(bool on) { lowp::g_wg = on ? 1 : 0; }
bool lowp_gemm_wgmma_active() { return lowp::wg_enabled(); }
void set_lowp_gemm_tile_rows(int rows) { lowp::g_nt = rows == 32 ? 1 : rows == 64 ? 2 : rows == 128 ? 4 : 0; }

}  // namespace dsv4::cuda
