// The lightning indexer's scores on int8 tensor cores: index_scores_mma_kernel (from 8 rows) and its
// launcher (its design and building blocks: attn_index_mma.cuh; the exactness helpers it shares with
// the dp4a kernel: attn_index_common.cuh; that kernel and the dispatcher: attn_index.cu).
#include <type_traits>

#include "backends/cuda/kernels/attention/attention_kernels.cuh"
#include "backends/cuda/kernels/attention/attn_device.cuh"
#include "backends/cuda/kernels/attention/attn_index_common.cuh"
#include "backends/cuda/kernels/attention/attn_index_mma.cuh"

namespace dsv4::cuda {

namespace {

using namespace attn;
using namespace index_detail;

// dst[0, n) = src[0, n) by the block's threads, in 16- or 4-byte words where both addresses allow.
__device__ __forceinline__ void copy_block_bytes(uint8_t* dst, const uint8_t* src, int n) {
  int done = 0;
  const uintptr_t both = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst);
  if ((both & 15) == 0) {
    for (int i = threadIdx.x; i < n / 16; i += blockDim.x)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    done = n & ~15;
  } else if ((both & 3) == 0) {
    for (int i = threadIdx.x; i < n / 4; i += blockDim.x)
      reinterpret_cast<uint32_t*>(dst)[i] = reinterpret_cast<const uint32_t*>(src)[i];
    done = n & ~3;
  }
  for (int i = done + threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

template <int IHD, int NHB>
__global__ void __launch_bounds__(kMmaThreads, 2)
index_scores_mma_kernel(const float* qi, const float* wt, float wscale, const PieceDev* pieces, const int32_t* row_piece,
                        const int64_t* pos, int64_t rows, int ratio, float* score, int64_t stride, int tiles_per_chunk) {
  constexpr int IH = 32 * NHB, G = IHD / 32, RB = IHD / 2 + G;
  constexpr int QW = IH * IHD / 4;  // words of one row's B fragments
  extern __shared__ __align__(16) uint32_t shm[];
  uint32_t* qfrag = shm;                                                    // [rows][QW] B fragments
  float* hsq = reinterpret_cast<float*>(qfrag + kMmaRows * QW);             // [rows][IH] 2^qmin, 0 off the integer path
  float* hnq = hsq + kMmaRows * IH;                                         // [rows][IH] -kMagic * 2^qmin
  float* hw = hnq + kMmaRows * IH;                                          // [rows][IH] bf16(wt * wscale)
  uint32_t* qa = reinterpret_cast<uint32_t*>(hw + kMmaRows * IH);           // [rows][IH] group shifts, a byte each
  int* qe = reinterpret_cast<int*>(qa + kMmaRows * IH);                     // [rows][IH][G] group exponents / sentinels
  uint32_t* hgood = reinterpret_cast<uint32_t*>(qe + kMmaRows * IH * G);    // [rows][NHB] integer-path heads, a bit each
  uint32_t* kfrag = hgood + (kMmaRows * NHB + 3) / 4 * 4;                   // [kMmaKeys * IHD / 4] A fragments
  float* kpk = reinterpret_cast<float*>(kfrag + kMmaKeys * IHD / 4);        // [kMmaKeys] 2^kmin, 0 off the integer path
  uint32_t* kb = reinterpret_cast<uint32_t*>(kpk + kMmaKeys);               // [kMmaKeys] group shifts, a byte each
  uint32_t* kek = kb + kMmaKeys;                                            // [kMmaKeys] group scale bytes
  float* scr = reinterpret_cast<float*>(kek + kMmaKeys);                    // [rows][32][kScrStride] terms, or:
  uint8_t* raw = reinterpret_cast<uint8_t*>(scr);                           //   key staging [kMmaKeys][RB]
  __shared__ int64_t s_lc[kMmaRows];
  __shared__ int s_piece[kMmaRows];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kMmaRows;
  if (threadIdx.x < kMmaRows) {
    const int64_t r = r0 + threadIdx.x;
    s_lc[threadIdx.x] = r < rows ? (pos[r] + 1) / ratio : 0;
    s_piece[threadIdx.x] = r < rows ? row_piece[r] : -1;
  }
  __syncthreads();
  const int64_t k_begin = static_cast<int64_t>(blockIdx.x) * tiles_per_chunk * kMmaKeys;
  const int64_t k_end = k_begin + static_cast<int64_t>(tiles_per_chunk) * kMmaKeys;
  int64_t lc_max = 0;
  for (int i = 0; i < kMmaRows; ++i) lc_max = s_lc[i] > lc_max ? s_lc[i] : lc_max;
  if (k_begin >= lc_max) return;

  // Queries: the integer form of every group (words to their B-fragment places, unscaled) ...
  auto bfrag_word = [&](int w, int h, int g, int wd) -> uint32_t& {
    const int hb = h >> 5, hh = h & 31;
    const int gg = 2 * (hh >> 3) + (hh & 1), j = (hh & 7) >> 1;  // column gg of n-tile j holds head hh
    return qfrag[w * QW + ((hb * G + g) * 2 + (j >> 1)) * 128 + (gg * 4 + (wd & 3)) * 4 + 2 * (j & 1) + (wd >> 2)];
  };
  for (int task = threadIdx.x; task < kMmaRows * IH * G; task += kMmaThreads) {
    const int w = task / (IH * G), h = (task / G) % IH, g = task % G;
    const int64_t r = r0 + w;
    int e = kExcluded;
    if (r < rows) {
      uint32_t words[8];
      e = q_group_form(qi + (r * IH * G + task % (IH * G)) * 32, words);
#pragma unroll
      for (int wd = 0; wd < 8; ++wd) bfrag_word(w, h, g, wd) = words[wd];
    }
    qe[task] = e;
  }
  __syncthreads();
  // ... then per head: on the integer path or not, its scale and weight, the groups' shifts ...
  for (int task = threadIdx.x; task < kMmaRows * IH; task += kMmaThreads) {  // whole warps: 32 heads of one row
    const int w = task / IH, h = task % IH;
    const int64_t r = r0 + w;
    const int* e = qe + task * G;
    bool fp4 = true;
    int lo = 1 << 20, hi = -(1 << 20);
#pragma unroll
    for (int g = 0; g < G; ++g) {
      fp4 = fp4 && e[g] != kNotFp4;
      if (e[g] == kExcluded || e[g] == kNotFp4) continue;
      lo = min(lo, e[g]);
      hi = max(hi, e[g]);
    }
    if (hi < lo) lo = hi = 0;  // no nonzero group
    const float wv = r < rows ? rb(__fmul_rn(wt[r * IH + h], wscale)) : 0.0f;
    const bool good = r < rows && fp4 && hi - lo <= 3 && lo >= -64 && lo <= 40 &&
                      (__float_as_uint(wv) & 0x7fffffffu) < 0x7f800000u;
    uint32_t sh = 0;
#pragma unroll
    for (int g = 0; g < G; ++g)
      if (good && e[g] != kExcluded) sh |= static_cast<uint32_t>(e[g] - lo) << (8 * g);
    qa[task] = sh;
    const float sq = good ? pow2_exact(lo) : 0.0f;
    hsq[task] = sq;
    hnq[task] = __fmul_rn(-kMagic, sq);
    hw[task] = wv;
    const unsigned m = __ballot_sync(0xffffffffu, good);
    if (lane == 0) hgood[w * NHB + (h >> 5)] = m;
  }
  __syncthreads();
  // ... and the words of the integer-path heads scaled by their groups' shifts.
  for (int task = threadIdx.x; task < kMmaRows * IH * G; task += kMmaThreads) {
    const int w = task / (IH * G), h = (task / G) % IH, g = task % G;
    const int a = (qa[w * IH + h] >> (8 * g)) & 255;
    if (r0 + w >= rows || a == 0) continue;
#pragma unroll
    for (int wd = 0; wd < 8; ++wd) {
      uint32_t& x = bfrag_word(w, h, g, wd);
      x = shl_i8x4(x, a);
    }
  }
  __syncthreads();

  const int g4 = lane >> 2, c4 = lane & 3;
  uint32_t bq[G][8];  // B fragments of one head block: n-tile j's (b0, b1) = bq[ks][2j], bq[ks][2j + 1]
  int b_row = -1;     // the row whose fragments bq holds (one head block)
  auto load_b = [&](int w, int hb) {
    const uint32_t* src = qfrag + w * QW + hb * G * 256 + lane * 4;
#pragma unroll
    for (int ks = 0; ks < G; ++ks) {
      const uint4 x = *reinterpret_cast<const uint4*>(src + ks * 256);
      const uint4 y = *reinterpret_cast<const uint4*>(src + ks * 256 + 128);
      bq[ks][0] = x.x; bq[ks][1] = x.y; bq[ks][2] = x.z; bq[ks][3] = x.w;
      bq[ks][4] = y.x; bq[ks][5] = y.y; bq[ks][6] = y.z; bq[ks][7] = y.w;
    }
  };
  float* my_scr = scr + warp * 32 * kScrStride;
  // The term of head h of row w and key tl of the tile (key t of the piece) as the dp4a kernel
  // computes it: its group dots from the staged integers, unscaled by their shifts (exactly: every
  // product carries them), combined as sum_g D_g 2^E_g under its exponent condition; otherwise its
  // fp32 path from qi and the key row.
  auto exact_term = [&](int w, int h, int tl, int64_t t) -> float {
    const int* e = qe + (w * IH + h) * G;
    const uint32_t sb = kek[tl], a_sh = qa[w * IH + h], b_sh = kb[tl];
    int emin = 1 << 20, emax = -(1 << 20);
    bool fp4 = true;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      fp4 = fp4 && e[g] != kNotFp4;
      if (e[g] == kExcluded) continue;
      const int E = e[g] + static_cast<int>((sb >> (8 * g)) & 255u) - 128;
      emin = min(emin, E);
      emax = max(emax, E);
    }
    const float wv = hw[w * IH + h];
    if (!(fp4 && (emax < emin || (emax - emin <= 9 && emin >= -149 && emax <= 100))))
      return general_term<IHD>(qi + ((r0 + w) * IH + h) * IHD, pieces[s_piece[w]].ikeys.row(t, RB), wv);
    const int mt = tl >> 4, kr = tl & 15;
    float dot = 0.0f;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      int acc = 0;
#pragma unroll
      for (int wd = 0; wd < 8; ++wd)
        acc = __dp4a(static_cast<int>(kfrag[((mt * G + g) * 32 + (kr & 7) * 4 + (wd & 3)) * 4 + (kr >> 3) + 2 * (wd >> 2)]),
                     static_cast<int>(bfrag_word(w, h, g, wd)), acc);
      acc >>= static_cast<int>(((a_sh >> (8 * g)) & 255u) + ((b_sh >> (8 * g)) & 255u));
      if (e[g] != kExcluded)
        dot = __fadd_rn(dot, __fmul_rn(static_cast<float>(acc), pow2_exact(e[g] + static_cast<int>((sb >> (8 * g)) & 255u) - 128)));
    }
    float v = rb(dot);
    v = v < 0.0f ? 0.0f : v;
    return rb(__fmul_rn(v, wv));
  };

  // Every piece of the block's rows in turn (one for a prefill chunk), its key tiles of this chunk.
  for (int lead = 0; lead < kMmaRows; ++lead) {
    const int p = s_piece[lead];
    bool seen = p < 0;
    for (int u = 0; u < lead; ++u) seen = seen || s_piece[u] == p;
    if (seen) continue;
    int64_t kmax = 0;
    int np = 0;  // rows of the piece
    for (int u = 0; u < kMmaRows; ++u)
      if (s_piece[u] == p) {
        ++np;
        if (s_lc[u] > kmax) kmax = s_lc[u];
      }
    const RowPages keys = pieces[p].ikeys;
    for (int64_t t0 = k_begin; t0 < k_end && t0 < kmax; t0 += kMmaKeys) {
      const int nk = static_cast<int>(kmax - t0 < kMmaKeys ? kmax - t0 : kMmaKeys);
      __syncthreads();  // the previous tile's readers are done
      for (int k = 0; k < nk;) {  // the tile's rows by pages: a page's rows are consecutive bytes
        const int n = static_cast<int>(nk - k < keys.run(t0 + k) ? nk - k : keys.run(t0 + k));
        copy_block_bytes(raw + k * RB, keys.row(t0 + k, RB), n * RB);
        k += n;
      }
      __syncthreads();
      if (threadIdx.x < kMmaKeys) {  // per key: on the integer path or not, its scale, the groups' shifts
        const int t = threadIdx.x;
        float pk = 1.0f;  // keys past the tile: zeros on the integer path
        uint32_t sh = 0, sb = 0;
        if (t < nk) {
          // A group whose 32 codes are all (+-)0 adds exactly 0 at any scale: its exponent is left out of the
          // span and its shift is 0 (zero-valued rows, scale byte 0, stay on the integer path).
          int e[G], lo = 1 << 20, hi = -(1 << 20);
          bool zero[G];
#pragma unroll
          for (int g = 0; g < G; ++g) {
            sb |= static_cast<uint32_t>(raw[t * RB + IHD / 2 + g]) << (8 * g);
            e[g] = static_cast<int>(raw[t * RB + IHD / 2 + g]) - 128;
            uint32_t mag = 0;
            for (int i = 0; i < 16; ++i) mag |= raw[t * RB + 16 * g + i] & 0x77u;
            zero[g] = mag == 0;
            if (zero[g]) continue;
            lo = min(lo, e[g]);
            hi = max(hi, e[g]);
          }
          if (lo > hi) lo = hi = 0;  // every group zero: the dot is 0
          const bool good = hi - lo <= 3 && lo >= -64 && lo <= 40;
          pk = good ? pow2_exact(lo) : 0.0f;
#pragma unroll
          for (int g = 0; g < G; ++g)
            if (good && !zero[g]) sh |= static_cast<uint32_t>(e[g] - lo) << (8 * g);
        }
        kpk[t] = pk;
        kb[t] = sh;
        kek[t] = sb;
      }
      __syncthreads();
      // A fragments, one 16-byte entry per (16-key tile, group, lane): keys g, g+8 of the tile,
      // elements 4c..4c+3 and 16+4c..16+4c+3 of the group.
      for (int task = threadIdx.x; task < (kMmaKeys / 16) * G * 32; task += kMmaThreads) {
        const int ln = task & 31, ks = (task >> 5) % G, mt = (task >> 5) / G;
        const int k0 = mt * 16 + (ln >> 2), c = ln & 3;
        uint32_t v[4];
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int k = k0 + 8 * hf;
          uint32_t lo = 0, hi = 0;
          if (k < nk) {
            const uint8_t* b8 = raw + k * RB + 16 * ks + 2 * c;
            const int b = static_cast<int>((kb[k] >> (8 * ks)) & 255u);
            lo = e2m1x4_to_i8x4_shl(b8[0] | (uint32_t{b8[1]} << 8), b);
            hi = e2m1x4_to_i8x4_shl(b8[8] | (uint32_t{b8[9]} << 8), b);
          }
          v[hf] = lo;
          v[2 + hf] = hi;
        }
        *reinterpret_cast<uint4*>(kfrag + task * 4) = make_uint4(v[0], v[1], v[2], v[3]);
      }
      __syncthreads();
      // Work units (row of the piece, 32 keys of the tile), unit pt * np + ri for the piece's row ri,
      // spread over the warps: a warp keeps its row when np divides 8 (one piece: row = warp), and a
      // block with fewer rows of the piece than warps still uses them. Per unit, per 16-key tile and
      // head block the MMAs, the terms to the warp's scratch, then lane l adds key l's terms in head order.
      for (int unit = warp; unit < np * (kMmaKeys / 32); unit += kMmaRows) {
        const int ri = unit % np, pt = unit / np;
        int w = 0;
        for (int u = 0, k = 0; u < kMmaRows; ++u)
          if (s_piece[u] == p) {
            if (k == ri) w = u;
            ++k;
          }
        const int64_t my_lc = s_lc[w], r = r0 + w, tb = t0 + 32 * pt;
        if (tb >= my_lc) continue;
        float s = 0.0f;
        for (int hb = 0; hb < NHB; ++hb) {
          if (NHB > 1 || b_row != w) {
            load_b(w, hb);
            b_row = w;
          }
          const int hoff = w * IH + hb * 32 + 8 * c4;
#pragma unroll
          for (int mh = 0; mh < 2; ++mh) {
            const int mt = 2 * pt + mh;
            int acc[4][4];
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
              for (int i = 0; i < 4; ++i) acc[j][i] = kMagicBits;
#pragma unroll
            for (int ks = 0; ks < G; ++ks) {
              const uint4 a = *reinterpret_cast<const uint4*>(kfrag + ((mt * G + ks) * 32 + lane) * 4);
#pragma unroll
              for (int j = 0; j < 4; ++j) mma_s8(acc[j], a, bq[ks][2 * j], bq[ks][2 * j + 1]);
            }
            float sq[8], nq[8], wv[8];
#pragma unroll
            for (int i = 0; i < 8; i += 4) {
              const float4 x = *reinterpret_cast<const float4*>(hsq + hoff + i);
              const float4 y = *reinterpret_cast<const float4*>(hnq + hoff + i);
              const float4 z = *reinterpret_cast<const float4*>(hw + hoff + i);
              sq[i] = x.x; sq[i + 1] = x.y; sq[i + 2] = x.z; sq[i + 3] = x.w;
              nq[i] = y.x; nq[i + 1] = y.y; nq[i + 2] = y.z; nq[i + 3] = y.w;
              wv[i] = z.x; wv[i + 1] = z.y; wv[i + 2] = z.z; wv[i + 3] = z.w;
            }
            // acc[j][2hf + e]: key 8hf + g4 of the tile, head 8c4 + 2j + e of the block.
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
              const int kl = 16 * mh + 8 * hf + g4;
              const float pk = kpk[32 * pt + kl];
              float term[8];
#pragma unroll
              for (int i = 0; i < 8; ++i) term[i] = mma_term(acc[i >> 1][2 * hf + (i & 1)], sq[i], nq[i], pk, wv[i]);
              float* dst = my_scr + kl * kScrStride + 8 * c4;
              *reinterpret_cast<float4*>(dst) = make_float4(term[0], term[1], term[2], term[3]);
              *reinterpret_cast<float4*>(dst + 4) = make_float4(term[4], term[5], term[6], term[7]);
            }
          }
          // Pairs off the integer path (keys with pk 0: all 32 heads, one per lane; heads off it: all keys,
          // one per lane), by the dp4a kernel's operations on the staged integers.
          const unsigned bad_keys = __ballot_sync(0xffffffffu, tb + lane < my_lc && kpk[32 * pt + lane] == 0.0f);
          const unsigned bad_heads = ~hgood[w * NHB + hb];
          if (bad_keys | bad_heads) {
            __syncwarp();  // the integer-path terms are written
            for (unsigned m = bad_keys; m; m &= m - 1) {
              const int kl = __ffs(m) - 1;
              my_scr[kl * kScrStride + lane] = exact_term(w, hb * 32 + lane, 32 * pt + kl, tb + kl);
            }
            if (tb + lane < my_lc && !((bad_keys >> lane) & 1u))
              for (unsigned m = bad_heads; m; m &= m - 1) {
                const int hh = __ffs(m) - 1;
                my_scr[lane * kScrStride + hh] = exact_term(w, hb * 32 + hh, 32 * pt + lane, tb + lane);
              }
            load_b(w, hb);  // again from shared memory: nothing of it live across the calls
          }
          __syncwarp();
          const float* mine = my_scr + lane * kScrStride;
#pragma unroll
          for (int i = 0; i < 32; i += 4) {
            const float4 x = *reinterpret_cast<const float4*>(mine + i);
            s = __fadd_rn(s, x.x);
            s = __fadd_rn(s, x.y);
            s = __fadd_rn(s, x.z);
            s = __fadd_rn(s, x.w);
          }
          __syncwarp();
        }
        const int64_t t = tb + lane;
        if (t < my_lc) score[r * stride + t] = rb(s);
      }
    }
  }
}

template <int IHD, int NHB>
cudaError_t launch_index_scores_mma(const float* qi, const float* wt, float wscale, const PieceDev* pieces,
                                    const int32_t* row_piece, const int64_t* pos, int64_t rows, int ratio, float* score,
                                    int64_t stride, int64_t max_lc, cudaStream_t s) {
  const int64_t row_tiles = (rows + kMmaRows - 1) / kMmaRows;
  const int64_t tiles = (max_lc + kMmaKeys - 1) / kMmaKeys;
  // Key tiles per block: each block prepares its rows' queries once (about a tile's work), so as
  // many tiles as keep every block slot of the device (2 per SM) busy in one wave, up to 32 (4096
  // keys) when there is more work; the tiles split evenly over the chunks.
  int dev = 0, sms = 132;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    sms = 132;
  const int64_t slots = 2 * static_cast<int64_t>(sms);
  int64_t per_chunk = (tiles * row_tiles + slots - 1) / slots;
  per_chunk = per_chunk < 1 ? 1 : per_chunk > 32 ? 32 : per_chunk;
  const int64_t chunks = (tiles + per_chunk - 1) / per_chunk;
  per_chunk = (tiles + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(row_tiles));
  const int64_t shm = mma_shared_bytes(32 * NHB, IHD);
  auto kernel = index_scores_mma_kernel<IHD, NHB>;
  if (shm > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shm));
    if (e != cudaSuccess) return e;
  }
  kernel<<<grid, kMmaThreads, shm, s>>>(qi, wt, wscale, pieces, row_piece, pos, rows, ratio, score, stride,
                                        static_cast<int>(per_chunk));
  return cudaGetLastError();
}

}  // namespace

namespace index_detail {

cudaError_t index_scores_mma(const float* qi, const float* wt, float wscale, const PieceDev* pieces,
                             const int32_t* row_piece, const int64_t* pos, int64_t rows, int64_t IH, int64_t ihd,
                             int ratio, float* score, int64_t stride, int64_t max_lc, cudaStream_t s) {
  auto launch = [&](auto ihd_c, auto nhb_c) {
    return launch_index_scores_mma<decltype(ihd_c)::value, decltype(nhb_c)::value>(
        qi, wt, wscale, pieces, row_piece, pos, rows, ratio, score, stride, max_lc, s);
  };
  using I32 = std::integral_constant<int, 32>;
  using I64 = std::integral_constant<int, 64>;
  using I128 = std::integral_constant<int, 128>;
  using N1 = std::integral_constant<int, 1>;
  using N2 = std::integral_constant<int, 2>;
  if (IH == 32) return ihd == 32 ? launch(I32{}, N1{}) : ihd == 64 ? launch(I64{}, N1{}) : launch(I128{}, N1{});
  return ihd == 32 ? launch(I32{}, N2{}) : ihd == 64 ? launch(I64{}, N2{}) : launch(I128{}, N2{});
}

}  // namespace index_detail

}  // namespace dsv4::cuda
