// Row kernels of CSA2 attention: RMSNorm + RoPE + FP8 window packing, head RoPE (+ FP4 QDQ of
// indexer queries), ring writes, the compressor's pooling and the emission of compressed and
// index-key rows (see attention_kernels.cuh).
#include "backends/cuda/kernels/attention/attention_kernels.cuh"
#include "backends/cuda/kernels/attention/attn_device.cuh"
#include "backends/cuda/runtime/pdl.cuh"

namespace dsv4::cuda {

namespace {

using namespace attn;
constexpr int kThreads = 256;

// RMSNorm of x [n] into sh (bf16 values), with every thread of the block. x is first staged in sh
// by coalesced loads, so the oracle-order sum of squares (eight serial partial sums) reads shared
// memory rather than waiting on global loads one after another; the values are the same.
__device__ void norm_into(const float* x, int64_t n, const float* w, float eps, float* sh, float* red) {
  if (x != sh) {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sh[i] = x[i];
    __syncthreads();
  }
  const float ss = sum_squares8(sh, n, red);
  const float r = 1.0f / sqrtf(__fadd_rn(ss / static_cast<float>(n), eps));
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = __fmul_rn(sh[i], r);
    sh[i] = rb(w ? __fmul_rn(w[i], v) : v);
  }
  __syncthreads();
}

// Rotates sh's tail (2*n_freq elements ending at n) at pos.
__device__ void rope_tail(float* sh, int64_t n, const float* freqs, int n_freq, int64_t pos, bool inverse) {
  for (int j = threadIdx.x; j < n_freq; j += blockDim.x) {
    float c, s;
    rope_cs(pos, freqs[j], c, s);
    if (inverse) s = -s;
    float* p = sh + n - 2 * n_freq + 2 * j;
    rope_pair(p[0], p[1], c, s);
  }
  __syncthreads();
}

// Packs sh [n] (n a multiple of 32) as an FP8 row into out and replaces sh by its QDQ.
__device__ void pack_fp8_row(float* sh, int64_t n, uint8_t* out) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int64_t g = w; g < n / 32; g += nw)
    sh[g * 32 + lane] = pack_fp8_group32(sh[g * 32 + lane], lane, out + g * 32, out + n + g);
  __syncthreads();
}

__global__ void norm_rope_rows_kernel(const float* x, int64_t n, const float* w, float eps, const float* freqs,
                                      int n_freq, const int64_t* pos, float* y, uint8_t* packed) {
  extern __shared__ float sh[];
  __shared__ float red[33];
  pdl_wait();
  pdl_launch_dependents();
  const int64_t r = blockIdx.x;
  norm_into(x + r * n, n, w, eps, sh, red);
  if (freqs) rope_tail(sh, n, freqs, n_freq, pos[r], false);
  if (packed) pack_fp8_row(sh, n, packed + r * (n + n / 32));
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[r * n + i] = sh[i];
}

// One warp per (row, head).
__global__ void rope_heads_kernel(float* x, int64_t rows, int64_t heads, int64_t hd, const float* freqs, int n_freq,
                                  const int64_t* pos, bool inverse, bool fp4_qdq) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t wid = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (wid >= rows * heads) return;
  const int64_t r = wid / heads;
  float* v = x + wid * hd;
  for (int j = lane; j < n_freq; j += 32) {
    float c, s;
    rope_cs(pos[r], freqs[j], c, s);
    if (inverse) s = -s;
    float* p = v + hd - 2 * n_freq + 2 * j;
    float a = p[0], b = p[1];
    rope_pair(a, b, c, s);
    p[0] = a;
    p[1] = b;
  }
  if (!fp4_qdq) return;
  __syncwarp();
  // FP4/UE8M0-per-32 QDQ (rule b): only the dequantized values are kept.
  for (int64_t g = 0; g < hd / 32; ++g) {
    const float xv = v[g * 32 + lane];
    const float amax = warp_max(fabsf(xv));
    const uint8_t sb = ::dsv4::fp4_ue8m0_scale(amax);
    const float sv = ::dsv4::ue8m0_to_f32(sb);
    v[g * 32 + lane] = ::dsv4::e2m1_to_f32(::dsv4::fp4_ue8m0_code(xv, 1.0f / sv)) * sv;
  }
}

__global__ void ring_write_kernel(const PieceDev* pieces, const int32_t* row_piece, int64_t cap, const uint8_t* packed,
                                  int64_t row_bytes, const float* kp, const float* gp, int64_t d) {
  const int64_t r = blockIdx.x;
  const PieceDev pc = pieces[row_piece[r]];
  const int64_t i = r - pc.row0;
  const int64_t keep = pc.T < cap ? pc.T : cap;
  if (i < pc.T - keep) return;
  const int64_t slot = (pc.start + i) % cap;
  for (int64_t b = threadIdx.x; b < row_bytes; b += blockDim.x) pc.window[slot * row_bytes + b] = packed[r * row_bytes + b];
  if (kp)
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
      pc.comp_kv[slot * d + c] = kp[r * d + c];
      pc.comp_gate[slot * d + c] = gp[r * d + c];
    }
}

__global__ void compress_pool2_kernel(const EmitDev* emit, const PieceDev* pieces, const float* kp, const float* gp,
                                      int64_t cap, int64_t d, const float* norm, float eps, float* out) {
  extern __shared__ float sh[];
  __shared__ float red[33];
  const EmitDev e = emit[blockIdx.x];
  if (e.row < 0) return;  // a padding entry (graph calls: lists of a fixed length)
  const PieceDev pc = pieces[e.piece];
  const float* k[2];
  const float* g[2];
  for (int t = 0; t < 2; ++t) {
    const int64_t q = e.j * 2 + t;
    if (q >= pc.start) {
      const int64_t row = pc.row0 + q - pc.start;
      k[t] = kp + row * d;
      g[t] = gp + row * d;
    } else {
      k[t] = pc.comp_kv + (q % cap) * d;
      g[t] = pc.comp_gate + (q % cap) * d;
    }
  }
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    const float g0 = g[0][c], g1 = g[1][c];
    const float mx = fmaxf(g0, g1);
    const float e0 = exp_f(__fsub_rn(g0, mx)), e1 = exp_f(__fsub_rn(g1, mx));
    const float sum = __fadd_rn(e0, e1);
    float v = __fmul_rn(k[0][c], e0 / sum);
    v = __fadd_rn(v, __fmul_rn(k[1][c], e1 / sum));
    sh[d + c] = rb(v);
  }
  __syncthreads();
  norm_into(sh + d, d, norm, eps, sh, red);
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) out[blockIdx.x * d + c] = sh[c];
}

__global__ void compress_norm1_kernel(const EmitDev* emit, const float* lat, int64_t d, const float* norm, float eps,
                                      float* out) {
  extern __shared__ float sh[];
  __shared__ float red[33];
  if (emit[blockIdx.x].row < 0) return;  // a padding entry
  norm_into(lat + static_cast<int64_t>(emit[blockIdx.x].row) * d, d, norm, eps, sh, red);
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) out[blockIdx.x * d + c] = sh[c];
}

__global__ void emit_rows_kernel(const EmitDev* emit, const PieceDev* pieces, const float* latent, int64_t d,
                                 const float* ik, int64_t ihd, const float* ik_norm, float eps, const float* freqs,
                                 int n_freq, int ratio, CompFormat fmt) {
  extern __shared__ float sh[];  // [d] latent, [ihd] index key
  __shared__ float red[33];
  const EmitDev e = emit[blockIdx.x];
  if (e.row < 0) return;  // a padding entry
  const PieceDev pc = pieces[e.piece];
  const int64_t pos = e.j * ratio;
  float* lat = sh;
  float* key = sh + d;
  // Index key from the un-rotated latent's projection.
  norm_into(ik + blockIdx.x * ihd, ihd, ik_norm, eps, key, red);
  rope_tail(key, ihd, freqs, n_freq, pos, false);
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) lat[c] = latent[blockIdx.x * d + c];
  __syncthreads();
  rope_tail(lat, d, freqs, n_freq, pos, false);
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int64_t irow = ihd / 2 + ihd / 32;
  uint8_t* krow = pc.ikeys.row(e.j, irow);
  for (int64_t g = w; g < ihd / 32; g += nw)
    pack_fp4_ue8m0_group32(key[g * 32 + lane], lane, krow + g * 16, krow + ihd / 2 + g);
  if (fmt == CompFormat::fp8_ue8m0_32) {
    uint8_t* row = pc.comp.row(e.j, d + d / 32);
    for (int64_t g = w; g < d / 32; g += nw) pack_fp8_group32(lat[g * 32 + lane], lane, row + g * 32, row + d + g);
  } else {
    uint8_t* row = pc.comp.row(e.j, d / 2 + d / 16);
    for (int64_t g = w; g < d / 32; g += nw)
      pack_fp4_e4m3_group16x2(lat[g * 32 + lane], lane, row + g * 16,
                              row + d / 2 + 2 * g);
  }
}

__global__ void ungroup_rows_kernel(const float* zt, int64_t rows, int64_t G, int64_t O, float* z) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * G * O) return;
  const int64_t r = i / (G * O), g = (i / O) % G, n = i % O;
  z[i] = zt[(g * rows + r) * O + n];
}

}  // namespace

cudaError_t norm_rope_rows(const float* x, int64_t rows, int64_t n, const float* w, float eps, const float* freqs,
                           int n_freq, const int64_t* pos, float* y, uint8_t* packed, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if ((packed && n % 32) || n * 4 > 48 * 1024) return cudaErrorInvalidValue;
  return launch_pdl(norm_rope_rows_kernel, dim3(static_cast<unsigned>(rows)), dim3(kThreads), n * sizeof(float), s, x, n, w,
                    eps, freqs, n_freq, pos, y, packed);
}

cudaError_t rope_heads(float* x, int64_t rows, int64_t heads, int64_t hd, const float* freqs, int n_freq,
                       const int64_t* pos, bool inverse, bool fp4_qdq, cudaStream_t s) {
  if (rows * heads == 0) return cudaSuccess;
  if (fp4_qdq && hd % 32) return cudaErrorInvalidValue;
  const int64_t warps = rows * heads;
  return launch_pdl(rope_heads_kernel, dim3(static_cast<unsigned>((warps + 7) / 8)), dim3(256), 0, s, x, rows, heads, hd,
                    freqs, n_freq, pos, inverse, fp4_qdq);
}

cudaError_t ring_write(const PieceDev* pieces, const int32_t* row_piece, int64_t rows, int64_t cap,
                       const uint8_t* packed, int64_t row_bytes, const float* kp, const float* gp, int64_t d,
                       cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  ring_write_kernel<<<rows, 128, 0, s>>>(pieces, row_piece, cap, packed, row_bytes, kp, gp, d);
  return cudaGetLastError();
}

cudaError_t compress_pool2(const EmitDev* emit, int64_t n_emit, const PieceDev* pieces, const float* kp,
                           const float* gp, int64_t cap, int64_t d, const float* norm, float eps, float* out,
                           cudaStream_t s) {
  if (n_emit == 0) return cudaSuccess;
  compress_pool2_kernel<<<n_emit, kThreads, 2 * d * sizeof(float), s>>>(emit, pieces, kp, gp, cap, d, norm, eps, out);
  return cudaGetLastError();
}

cudaError_t compress_norm1(const EmitDev* emit, int64_t n_emit, const float* lat, int64_t d, const float* norm,
                           float eps, float* out, cudaStream_t s) {
  if (n_emit == 0) return cudaSuccess;
  compress_norm1_kernel<<<n_emit, kThreads, d * sizeof(float), s>>>(emit, lat, d, norm, eps, out);
  return cudaGetLastError();
}

cudaError_t emit_rows(const EmitDev* emit, int64_t n_emit, const PieceDev* pieces, const float* latent, int64_t d,
                      const float* ik, int64_t ihd, const float* ik_norm, float eps, const float* freqs, int n_freq,
                      int ratio, CompFormat fmt, cudaStream_t s) {
  if (n_emit == 0) return cudaSuccess;
  if (d % 32 || ihd % 32) return cudaErrorInvalidValue;
  emit_rows_kernel<<<n_emit, kThreads, (d + ihd) * sizeof(float), s>>>(emit, pieces, latent, d, ik, ihd, ik_norm, eps,
                                                                        freqs, n_freq, ratio, fmt);
  return cudaGetLastError();
}

cudaError_t ungroup_rows(const float* zt, int64_t rows, int64_t G, int64_t O, float* z, cudaStream_t s) {
  const int64_t n = rows * G * O;
  if (n == 0) return cudaSuccess;
  ungroup_rows_kernel<<<(n + 255) / 256, 256, 0, s>>>(zt, rows, G, O, z);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda
