// EXL3 GEMV/GEMM on tensor cores, one launch per product: a cluster of blocks shares one 128-column
// block, each block rotates its K-slice of the input into fp16 hi/lo B fragments, decodes its trellis
// tiles straight into mma.m16n8k16 A fragments, and the cluster adds its slices in index order
// through distributed shared memory before the output Hadamard ∘ svh. Rows never interact.
#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "backends/cuda/exl3/exl3_gemm.cuh"
#include "backends/cuda/exl3/exl3_tile.cuh"
#include "backends/cuda/runtime/pdl.cuh"
#include "core/bf16.h"

namespace dsv4::cuda {
namespace {

namespace cg = cooperative_groups;
using namespace exl3_tile;

constexpr int kHad = 128;           // Hadamard block
constexpr int kWarps = 8;           // one warp per 16-column tile column: 8 warps = 128 columns
constexpr int kThreads = 32 * kWarps;
constexpr int kTargetBlocks = 396;  // 3 per SM on 132 SMs; a constant, so the split is shape-only
constexpr int kMaxSliceHad = 16;    // 128-blocks per slice, unless that would need too many slices
constexpr int kMaxSegSlots = 256;   // grouped launches: segment slots along z; each loops over segments

// Each warp streams its tiles in batches of one 128-block (8 tiles) through a ring of 3 batches:
// two batches load while the third is decoded.
constexpr int kRingBatches = 3;
constexpr int ring_chunks(int bits) { return kRingBatches * 8 * 2 * bits; }  // 16-byte chunks per warp

__device__ __forceinline__ void cp_async16(uint4* dst, const uint4* src) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Programmatic dependent launch (pdl.cuh): every launch lets the next kernel of the
// stream start once its blocks have streamed their tiles (the next one's weight loads and launch
// overlap this one's epilogue; triggering at the start instead slowed the 1-slice wq_b shape from
// 19.9 to 24.5 us), and waits for the previous kernel's completion and memory only before reading
// anything a kernel writes (activations, pair tables). No-ops without a programmatic dependency.
enum class Mode : int { plain = 0, gate_up = 1, down = 2 };

struct Split {
  int splits;          // K-slices = cluster size
  int had_per_split;   // 128-wide Hadamard blocks per slice (the last slice may have fewer)
};

// Slices per column block are one cluster: 16 on Hopper and datacenter Blackwell (non-portable
// size), 8 elsewhere. A property of the device, never of the launch.
int max_cluster() {
  static const int value = [] {
    int dev = 0, major = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    return major == 9 || major == 10 ? 16 : 8;
  }();
  return value;
}

Split choose_split(int64_t in_features, int64_t out_features) {
  const int64_t column_blocks = out_features / kHad;
  const int64_t had_blocks = in_features / kHad;
  const int64_t cluster = max_cluster();
  const int64_t splits = std::max<int64_t>(1, std::min<int64_t>({kTargetBlocks / column_blocks, had_blocks, cluster}));
  int64_t per = (had_blocks + splits - 1) / splits;
  if (per > kMaxSliceHad) per = std::max<int64_t>(kMaxSliceHad, (had_blocks + cluster - 1) / cluster);
  return {static_cast<int>((had_blocks + per - 1) / per), static_cast<int>(per)};
}

// What one launch computes; the mode decides where rows come from and where they go.
struct Job {
  Mode mode = Mode::plain;
  Exl3Weights w;                       // shape, bits, codebook (and the pointers in plain mode)
  const Exl3Weights* group = nullptr;  // grouped: per-expert weights [E] (device)
  int column_blocks = 0;               // of one product; gate_up launches cover w1 then w3
  const Exl3Weights* group_b = nullptr;  // gate_up: w3 [E] for column blocks >= column_blocks
  Split split{};
  const float* x = nullptr;            // plain / gate_up input rows
  int64_t rows = 0;                    // plain: rows; grouped: pairs
  float* y = nullptr;                  // plain: y [rows, out]; down: out [pairs, out]
  int64_t in_logical = 0;              // inputs k >= in_logical read as zero; x's row stride (plain, gate_up)
  int64_t out_logical = 0;             // down: outputs n >= out_logical dropped; y's row stride
  const int32_t* pair_row = nullptr;   // gate_up: input row of each pair
  const int32_t* pair_expert = nullptr;  // grouped: expert of each pair (sorted)
  const int32_t* seg = nullptr;        // grouped: seg[0] = S, seg[1..S] segment starts, seg[S+1] = pairs
  const float* pair_weight = nullptr;  // down: routing weight of each pair
  float swiglu_limit = 0.f;
  float* a = nullptr;                  // gate_up out / down in: bf16 values [pairs, I]
  float* u = nullptr;
};

// Input values k..k+3 of pair/row `p` (grouped: the pair index; plain: the row); values at or past
// in_logical are zero (the padding of a linear whose logical width is not a multiple of 128).
__device__ __forceinline__ float4 load_input(const Job& job, int64_t p, int64_t k, int64_t in) {
  const int64_t L = job.in_logical;
  if (k >= L) return make_float4(0.f, 0.f, 0.f, 0.f);
  if (job.mode == Mode::down) {  // h = swiglu_clamped(a, u) · weight, bf16 (cpu::swiglu_clamped<float>)
    const float4 a4 = *reinterpret_cast<const float4*>(job.a + p * in + k);
    const float4 u4 = *reinterpret_cast<const float4*>(job.u + p * in + k);
    const float wt = job.pair_weight[p], lim = job.swiglu_limit;
    float av[4] = {a4.x, a4.y, a4.z, a4.w}, uv[4] = {u4.x, u4.y, u4.z, u4.w}, h[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float g = av[i], up = uv[i];
      if (lim > 0) {
        up = fminf(fmaxf(up, -lim), lim);
        g = fminf(g, lim);
      }
      const float sg = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
      h[i] = k + i < L ? ::dsv4::round_bf16(__fmul_rn(wt, __fmul_rn(sg, up))) : 0.f;
    }
    return make_float4(h[0], h[1], h[2], h[3]);
  }
  const int64_t r = job.mode == Mode::gate_up ? job.pair_row[p] : p;
  const float* src = job.x + r * L + k;
  if (L % 4 == 0) return *reinterpret_cast<const float4*>(src);  // k + 4 <= L
  return make_float4(src[0], k + 1 < L ? src[1] : 0.f, k + 2 < L ? src[2] : 0.f, k + 3 < L ? src[3] : 0.f);
}

// Block (column block, slice, segment slot) in a cluster of `splits` blocks along y. The decoded
// tile is the A operand (16 output columns × 16 k); the activations are B (16 k × 8 columns: 4 rows,
// each as hi and lo). Shared memory: B fragments [NT][slice tiles][32 lanes][2], the per-warp tile
// ring, inverse scales [4·NT rows][had_per_split], and the slice partials of the rows this block
// finishes, [rows owned][splits][128] (row r is finished by cluster rank r % splits).
template <int BITS, int CB, int NT>
__global__ void __launch_bounds__(kThreads, NT == 1 ? 3 : 2) exl3_mma(Job job) {
  extern __shared__ __align__(16) uint32_t smem[];
  constexpr int n32 = 8 * BITS;      // uint32 words per tile
  constexpr int kChunks = 2 * BITS;  // 16-byte chunks per tile
  constexpr int kPassRows = 4 * NT;
  cg::cluster_group cluster = cg::this_cluster();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int per = job.split.had_per_split;
  const int slice_tiles = per * 8;
  uint2* frag = reinterpret_cast<uint2*>(smem);  // [NT][slice_tiles][32]
  uint4* ring = reinterpret_cast<uint4*>(frag + NT * slice_tiles * 32) + warp * ring_chunks(BITS);  // [3][8][kChunks]
  float* scl = reinterpret_cast<float*>(reinterpret_cast<uint4*>(frag + NT * slice_tiles * 32) +
                                        kWarps * ring_chunks(BITS));  // [kPassRows][per]
  float* partial = scl + kPassRows * per;
  const int splits = job.split.splits;

  const bool grouped = job.mode != Mode::plain;
  int cb = blockIdx.x;
  const Exl3Weights* warr = job.group;
  if (job.mode == Mode::gate_up && cb >= job.column_blocks) {
    cb -= job.column_blocks;
    warr = job.group_b;
  }
  const int64_t in = job.w.in_features, out = job.w.out_features;
  const int64_t tiles_n = out / 16;
  const int ks = blockIdx.y;
  const int64_t k_begin = int64_t(ks) * per * kHad;
  const int nhb = static_cast<int>(std::min<int64_t>(per, in / kHad - int64_t(ks) * per));
  const int64_t nt = int64_t(cb) * kWarps + warp;

  // Per lane: where its bit window starts in the tile stream.
  const int first_bit = ((8 * lane + 1) * BITS - 16 + 256 * BITS) % (256 * BITS);
  const int o0 = first_bit & 31;
  int widx[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) widx[i] = ((first_bit >> 5) + i) % n32;

  // Distributed shared memory may be written only once every block of the cluster runs: arrive now,
  // wait before the first push.
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  if (grouped) pdl_wait();  // the segment table and pairs come from the previous kernels
  bool started = false;
  const int32_t n_seg = grouped ? job.seg[0] : 1;
  for (int sgi = blockIdx.z; sgi < n_seg; sgi += gridDim.z) {  // uniform over the cluster
    int64_t p_begin = 0, p_end = job.rows;
    Exl3Weights w = job.w;
    if (grouped) {
      p_begin = job.seg[1 + sgi];
      p_end = job.seg[2 + sgi];
      const int32_t expert = job.pair_expert[p_begin];
      if (expert < 0) continue;  // pairs of experts another tensor-parallel rank holds (tp_own_pairs): skipped
      w = warr[expert];
      // Another kind's launch takes this segment; an expert not held here (bits 0) matches no kind.
      if (w.bits != BITS || w.codebook != CB) continue;
    }
    const uint2 s2 = *reinterpret_cast<const uint2*>(w.svh + int64_t(cb) * kHad + 4 * lane);  // this lane's svh
    const uint32_t* base = reinterpret_cast<const uint32_t*>(w.trellis) + ((k_begin / 16) * tiles_n + nt) * n32;
    const int64_t tile_stride = tiles_n * n32;

    for (int64_t r0 = p_begin; r0 < p_end; r0 += kPassRows) {
      const int nrows = static_cast<int>(std::min<int64_t>(kPassRows, p_end - r0));
      // Each warp streams the tiles of 128-block hb into ring slot hb % 3 (one commit group per
      // batch, empty past the slice); the first two batches load while the input is rotated.
      const auto issue = [&](int hb) {
        if (hb < nhb) {
          uint4* slot = ring + (hb % kRingBatches) * 8 * kChunks;
#pragma unroll
          for (int c = lane; c < 8 * kChunks; c += 32) {
            const int tile = c / kChunks, chunk = c % kChunks;
            cp_async16(slot + c, reinterpret_cast<const uint4*>(base + (hb * 8 + tile) * tile_stride) + chunk);
          }
        }
        cp_async_commit();
      };
      issue(0);
      issue(1);
      pdl_wait();  // the weights are constant; the input rows are the previous kernel's output

      // B fragments: per (row, 128-block), u = H(x ∘ suh) as hi + lo fp16 at a per-block power-of-two
      // scale. A warp takes up to kTaskBatch (row, block) tasks at once so their loads overlap.
      constexpr int kTaskBatch = 4;
      const int tasks = nrows * nhb;  // real rows; padding rows get zero fragments
      for (int t0 = warp; t0 < kPassRows * nhb; t0 += kWarps * kTaskBatch) {
        float4 xv[kTaskBatch];
        uint2 sv[kTaskBatch];
#pragma unroll
        for (int j = 0; j < kTaskBatch; ++j) {
          const int task = t0 + j * kWarps;
          if (task < tasks) {
            const int64_t k = k_begin + int64_t(task % nhb) * kHad + 4 * lane;
            xv[j] = load_input(job, r0 + task / nhb, k, in);
            sv[j] = *reinterpret_cast<const uint2*>(w.suh + k);
          }
        }
#pragma unroll
        for (int j = 0; j < kTaskBatch; ++j) {
          const int task = t0 + j * kWarps;
          if (task >= kPassRows * nhb) break;
          const int r = task / nhb, hb = task % nhb;
          uint32_t* dst = reinterpret_cast<uint32_t*>(frag + ((r / 4) * slice_tiles + hb * 8 + lane / 4) * 32);
          const int reg = (lane % 4) / 2;
          uint32_t hi[2] = {0u, 0u}, lo[2] = {0u, 0u};
          float inv = 0.f;
          if (task < tasks) {
            const __half2 s01 = *reinterpret_cast<const __half2*>(&sv[j].x);
            const __half2 s23 = *reinterpret_cast<const __half2*>(&sv[j].y);
            float v[4] = {xv[j].x * __low2float(s01), xv[j].y * __high2float(s01), xv[j].z * __low2float(s23),
                          xv[j].w * __high2float(s23)};
            hadamard128(v);
            inv = split_hi_lo(v, hi, lo);
          }
          if (lane == 0) scl[r * per + hb] = inv;
          // Lane l holds k-offsets 4(l%4)+0..3 of tile hb·8 + l/4: pair p (k = 4(l%4) + 2p) goes to
          // B register (l%4)/2 (b0b1 for k < 8, b2b3 for k ≥ 8) of the fragment lane with
          // t = 2(l%2) + p and column g = 2(r%4) (hi) or 2(r%4) + 1 (lo).
#pragma unroll
          for (int p = 0; p < 2; ++p) {
            const int dl = 2 * (r % 4) * 4 + 2 * (lane % 2) + p;
            dst[dl * 2 + reg] = hi[p];
            dst[(dl + 4) * 2 + reg] = lo[p];
          }
        }
      }
      __syncthreads();

      float acc[NT][2];  // row 4·nt + t: columns g and g + 8 of the warp's tile column
#pragma unroll
      for (int m = 0; m < NT; ++m) acc[m][0] = acc[m][1] = 0.f;
      for (int hb = 0; hb < nhb; ++hb) {
        __syncwarp();  // every lane is done with the slot batch hb + 2 overwrites
        issue(hb + 2);
        cp_async_wait<2>();  // batch hb has landed
        __syncwarp();
        const uint32_t* slot = reinterpret_cast<const uint32_t*>(ring + (hb % kRingBatches) * 8 * kChunks);
        // One 128-block: 8 tiles into fresh accumulators, then added in fp32 at the block's scale.
        float d[NT][4];
#pragma unroll
        for (int m = 0; m < NT; ++m) d[m][0] = d[m][1] = d[m][2] = d[m][3] = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int tile = hb * 8 + i;
          uint32_t cur[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) cur[j] = slot[i * n32 + widx[j]];
          uint32_t b[4];
          decode_fragments<BITS, CB>(cur, o0, b);
          // As the A operand (row = output column): (n g, k 2t), (n g+8, k 2t), (n g, k 2t+8), (n g+8, k 2t+8).
          const uint4 a = make_uint4(b[0], b[2], b[1], b[3]);
#pragma unroll
          for (int m = 0; m < NT; ++m) {
            const uint2 x2 = frag[(m * slice_tiles + tile) * 32 + lane];
            mma16816(d[m], a, x2.x, x2.y);
          }
        }
        // d: (n g, hi of row t), (n g, lo of row t), (n g+8, hi), (n g+8, lo).
#pragma unroll
        for (int m = 0; m < NT; ++m) {
          const float sc = scl[(m * 4 + t) * per + hb];
          acc[m][0] += (d[m][0] + d[m][1]) * sc;
          acc[m][1] += (d[m][2] + d[m][3]) * sc;
        }
      }
      pdl_launch_dependents();  // the next kernel may start loading its weights during this epilogue
      cp_async_wait<0>();  // only empty groups remain; the ring is reused by the next pass
      // Each slice pushes its partial of row r into the finishing rank's slot [r / splits][ks]
      // (stores into distributed shared memory, no round trip); the barrier publishes them.
      if (!started) {
        asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
        started = true;
      }
#pragma unroll
      for (int m = 0; m < NT; ++m) {
        const int r = m * 4 + t;
        float* dst = cluster.map_shared_rank(partial, r % splits) + ((r / splits) * splits + ks) * kHad + warp * 16 + g;
        dst[0] = acc[m][0];
        dst[8] = acc[m][1];
      }
      cluster.sync();

      // Rank s finishes rows s, s + splits, ...: slices added in index order, then H(·)/128 ∘ svh.
      for (int r = ks + warp * splits; r < nrows; r += kWarps * splits) {
        float v[4] = {0.f, 0.f, 0.f, 0.f};
        const float* mine = partial + (r / splits) * splits * kHad + 4 * lane;
        for (int c = 0; c < splits; ++c) {  // slices in index order
          const float4 q = *reinterpret_cast<const float4*>(mine + c * kHad);
          v[0] += q.x;
          v[1] += q.y;
          v[2] += q.z;
          v[3] += q.w;
        }
        hadamard128(v);
        const int64_t n = int64_t(cb) * kHad + 4 * lane;
        const __half2 s01 = *reinterpret_cast<const __half2*>(&s2.x), s23 = *reinterpret_cast<const __half2*>(&s2.y);
        float4 o = make_float4(v[0] * (1.0f / 128.0f) * __low2float(s01), v[1] * (1.0f / 128.0f) * __high2float(s01),
                               v[2] * (1.0f / 128.0f) * __low2float(s23), v[3] * (1.0f / 128.0f) * __high2float(s23));
        const int64_t p = r0 + r;
        if (job.mode == Mode::plain) {
          *reinterpret_cast<float4*>(job.y + p * out + n) = o;
        } else if (job.mode == Mode::gate_up) {  // a, u [pairs, out] at the padded width
          o = make_float4(::dsv4::round_bf16(o.x), ::dsv4::round_bf16(o.y), ::dsv4::round_bf16(o.z), ::dsv4::round_bf16(o.w));
          *reinterpret_cast<float4*>((warr == job.group ? job.a : job.u) + p * out + n) = o;
        } else {  // out [pairs, out_logical]: the padding columns dropped
          const int64_t ol = job.out_logical;
          const float ov[4] = {::dsv4::round_bf16(o.x), ::dsv4::round_bf16(o.y), ::dsv4::round_bf16(o.z),
                               ::dsv4::round_bf16(o.w)};
          float* dst = job.y + p * ol + n;
          if (ol % 4 == 0 && n + 4 <= ol) {
            *reinterpret_cast<float4*>(dst) = make_float4(ov[0], ov[1], ov[2], ov[3]);
          } else {
#pragma unroll
            for (int i = 0; i < 4; ++i)
              if (n + i < ol) dst[i] = ov[i];
          }
        }
      }
      // Partials are rewritten by the next pass (or segment); after the last one nothing touches
      // another block's shared memory, so blocks may leave.
      if (r0 + kPassRows < p_end || sgi + int(gridDim.z) < n_seg) cluster.sync();
      else __syncthreads();
    }
  }
  if (!started) asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}

// seg[0] = S, seg[1..S] = the first pair of each run of equal experts, seg[S+1] = n_pairs.
__global__ void __launch_bounds__(256) segment_kernel(const int32_t* __restrict__ pair_expert, int64_t n_pairs,
                                                      int32_t* __restrict__ seg) {
  __shared__ int warp_counts[8];
  __shared__ int total;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t base = 0; base < n_pairs; base += 256) {
    const int64_t p = base + threadIdx.x;
    const bool start = p < n_pairs && (p == 0 || pair_expert[p] != pair_expert[p - 1]);
    const unsigned ballot = __ballot_sync(0xFFFFFFFFu, start);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int before = total;
    for (int i = 0; i < warp; ++i) before += warp_counts[i];
    if (start) seg[1 + before + __popc(ballot & ((1u << lane) - 1u))] = static_cast<int32_t>(p);
    __syncthreads();
    if (threadIdx.x == 0)
      for (int i = 0; i < 8; ++i) total += warp_counts[i];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    seg[0] = total;
    seg[1 + total] = static_cast<int32_t>(n_pairs);
  }
}

size_t smem_bytes(int nt, int bits, const Split& split) {
  const size_t rows = 4 * size_t(nt);
  const size_t owned = (rows + split.splits - 1) / split.splits;
  return 8 * size_t(nt) * split.had_per_split * 8 * 32 + 16 * size_t(kWarps) * ring_chunks(bits) +
         sizeof(float) * (rows * split.had_per_split + owned * split.splits * kHad);
}

template <int BITS, int CB, int NT>
cudaError_t launch(const Job& job, unsigned grid_x, unsigned grid_z, cudaStream_t stream) {
  const size_t smem = smem_bytes(NT, BITS, job.split);
  auto kernel = exl3_mma<BITS, CB, NT>;
  if (smem > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (err != cudaSuccess) return err;
  }
  if (job.split.splits > 8) {
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (err != cudaSuccess) return err;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid_x, unsigned(job.split.splits), grid_z);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = unsigned(job.split.splits);
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 2;
  return cudaLaunchKernelEx(&cfg, kernel, job);
}

template <int BITS, int CB>
cudaError_t dispatch_rows(const Job& job, bool wide, unsigned grid_x, unsigned grid_z, cudaStream_t stream) {
  // The row tiles per pass (4 or 8 rows) are a launch detail only: each row's sums are the same.
  if (!wide) return launch<BITS, CB, 1>(job, grid_x, grid_z, stream);
  return launch<BITS, CB, 2>(job, grid_x, grid_z, stream);
}

template <int BITS>
cudaError_t dispatch_codebook(const Job& job, bool wide, unsigned grid_x, unsigned grid_z, cudaStream_t stream) {
  switch (job.w.codebook) {
    case 0: return dispatch_rows<BITS, 0>(job, wide, grid_x, grid_z, stream);
    case 1: return dispatch_rows<BITS, 1>(job, wide, grid_x, grid_z, stream);
    case 2: return dispatch_rows<BITS, 2>(job, wide, grid_x, grid_z, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t dispatch(const Job& job, bool wide, unsigned grid_x, unsigned grid_z, cudaStream_t stream) {
  switch (job.w.bits) {
    case 1: return dispatch_codebook<1>(job, wide, grid_x, grid_z, stream);
    case 2: return dispatch_codebook<2>(job, wide, grid_x, grid_z, stream);
    case 3: return dispatch_codebook<3>(job, wide, grid_x, grid_z, stream);
    case 4: return dispatch_codebook<4>(job, wide, grid_x, grid_z, stream);
    case 5: return dispatch_codebook<5>(job, wide, grid_x, grid_z, stream);
    case 6: return dispatch_codebook<6>(job, wide, grid_x, grid_z, stream);
    case 7: return dispatch_codebook<7>(job, wide, grid_x, grid_z, stream);
    case 8: return dispatch_codebook<8>(job, wide, grid_x, grid_z, stream);
  }
  return cudaErrorInvalidValue;
}

// The out width the weight's K split is chosen from: the whole linear's for a column slice of it.
int64_t split_out(const Exl3Weights& w) { return w.split_out_features > 0 ? w.split_out_features : w.out_features; }

bool valid_shape(const Exl3Weights& w) {
  return w.in_features > 0 && w.out_features > 0 && w.in_features % kHad == 0 && w.out_features % kHad == 0 &&
         w.bits >= 1 && w.bits <= 8 && w.codebook >= 0 && w.codebook <= 2 && split_out(w) % kHad == 0 &&
         split_out(w) >= w.out_features && choose_split(w.in_features, split_out(w)).splits <= max_cluster();
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

int exl3_k_splits(int64_t in_features, int64_t out_features) {
  return choose_split(in_features, out_features).splits;
}

int exl3_k_splits(const Exl3Weights& w) { return choose_split(w.in_features, split_out(w)).splits; }

size_t exl3_workspace_bytes(const Exl3Weights&, int64_t) { return 256; }

// Nothing to initialise: no state is kept between calls (a memset here would only add a graph node
// between a linear's producer and its GEMM).
cudaError_t exl3_workspace_init(const Exl3Weights&, void*, cudaStream_t) { return cudaSuccess; }

cudaError_t exl3_gemm(const Exl3Weights& w, const float* x, int64_t rows, float* y, void*, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (!valid_shape(w) || !aligned16(x) || !aligned16(y) || !aligned16(w.trellis)) return cudaErrorInvalidValue;
  Job job;
  job.w = w;
  job.split = choose_split(w.in_features, split_out(w));  // a column slice sums K as its whole linear
  job.x = x;
  job.rows = rows;
  job.y = y;
  job.in_logical = w.in_features;
  job.out_logical = w.out_features;
  return dispatch(job, rows > 4, unsigned(w.out_features / kHad), 1, stream);
}

size_t exl3_routed_experts_scratch_bytes(int64_t n_pairs, const Exl3ExpertsView& X) {
  return sizeof(float) * size_t(2 * n_pairs * X.inter_p) + sizeof(int32_t) * size_t(n_pairs + 2) + 16;
}

cudaError_t exl3_routed_experts(const float* x, const int32_t* pair_row, const int32_t* pair_expert,
                                const float* pair_weight, int64_t n_pairs, const Exl3ExpertsView& X,
                                float swiglu_limit, void* scratch, float* out, cudaStream_t stream) {
  if (n_pairs < 0) return cudaErrorInvalidValue;
  if (n_pairs == 0) return cudaSuccess;
  const int64_t D = X.dim_p, I = X.inter_p;
  const Exl3Weights up_shape{nullptr, nullptr, nullptr, D, I, 1, 0}, down_shape{nullptr, nullptr, nullptr, I, D, 1, 0};
  if (X.n_experts <= 0 || !X.w1 || !X.w3 || !X.w2 || !valid_shape(up_shape) || !valid_shape(down_shape) ||
      X.dim <= 0 || X.dim > D || X.inter <= 0 || X.inter > I || !X.kinds[0] || !X.kinds[1] || !X.kinds[2] ||
      (X.kinds[0] | X.kinds[1] | X.kinds[2]) >> 24 || !aligned16(x) || !aligned16(scratch) || !aligned16(out))
    return cudaErrorInvalidValue;
  float* a = static_cast<float*>(scratch);
  float* u = a + n_pairs * I;
  int32_t* seg = reinterpret_cast<int32_t*>(u + n_pairs * I);
  segment_kernel<<<1, 256, 0, stream>>>(pair_expert, n_pairs, seg);
  const unsigned slots = unsigned(std::min<int64_t>(n_pairs, kMaxSegSlots));
  const bool wide = n_pairs > 64;  // decode: a few rows per expert
  // One launch per kind: its template decodes that kind and skips the other kinds' segments.
  const auto per_kind = [&](Job job, uint32_t kinds, unsigned grid_x) -> cudaError_t {
    for (int bit = 0; bit < 24; ++bit) {
      if (!(kinds >> bit & 1u)) continue;
      job.w.bits = bit / 3 + 1;
      job.w.codebook = bit % 3;
      const cudaError_t err = dispatch(job, wide, grid_x, slots, stream);
      if (err != cudaSuccess) return err;
    }
    return cudaSuccess;
  };
  Job job;
  job.mode = Mode::gate_up;
  job.w = up_shape;
  job.split = choose_split(D, I);
  job.column_blocks = int(I / kHad);
  job.x = x;
  job.in_logical = X.dim;
  job.rows = n_pairs;
  job.pair_row = pair_row;
  job.pair_expert = pair_expert;
  job.seg = seg;
  job.a = a;
  job.u = u;
  cudaError_t err;
  if (X.gate_up_same_kind) {  // gate and up in one launch per kind
    job.group = X.w1;
    job.group_b = X.w3;
    err = per_kind(job, X.kinds[0], unsigned(2 * job.column_blocks));
  } else {
    job.group = X.w1;
    err = per_kind(job, X.kinds[0], unsigned(job.column_blocks));
    if (err == cudaSuccess) {
      job.group = X.w3;  // writes u: the destination follows the array
      job.a = u;
      err = per_kind(job, X.kinds[1], unsigned(job.column_blocks));
    }
  }
  if (err != cudaSuccess) return err;
  Job down = job;
  down.mode = Mode::down;
  down.w = down_shape;
  down.group = X.w2;
  down.group_b = nullptr;
  down.split = choose_split(I, D);
  down.column_blocks = int(D / kHad);
  down.in_logical = X.inter;
  down.out_logical = X.dim;
  down.a = a;
  down.u = u;
  down.pair_weight = pair_weight;
  down.swiglu_limit = swiglu_limit;
  down.y = out;
  return per_kind(down, X.kinds[2], unsigned(down.column_blocks));
}

}  // namespace dsv4::cuda
