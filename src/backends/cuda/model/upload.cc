// The uploader: reservations, queued copies of stored bytes, and their staged execution (see upload.h).
#include "backends/cuda/model/upload.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "backends/cuda/runtime/check.h"
#include "backends/cuda/kernels/linear/dequant.cuh"
#include "backends/cuda/exl3/exl3_view.h"
#include "core/bf16.h"
#include "formats/exl3/half.h"

namespace dsv4::cuda {
namespace {

// The dequantizations' device area: at most this much staged FP8 at a time (one wo_a of V4.1 is 32 MiB).
constexpr int64_t kDequantArea = int64_t{256} << 20;

// Pinned staging buffers, one CUDA stream per buffer; a buffer is reused once its copy is done.
class DeviceSink final : public StageSink {
 public:
  DeviceSink(std::span<const StageBuffer> buffers, const std::vector<void*>& dsts) : buffers_(buffers), dsts_(dsts) {
    for (size_t b = 0; b < buffers.size(); ++b) {
      cudaStream_t s = nullptr;
      cudaEvent_t e = nullptr;
      ok_ = ok_ && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
            cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess;
      streams_.push_back(s);
      events_.push_back(e);
    }
  }
  ~DeviceSink() override {
    for (cudaStream_t s : streams_)
      if (s) cudaStreamDestroy(s);
    for (cudaEvent_t e : events_)
      if (e) cudaEventDestroy(e);
  }
  bool ok() const { return ok_; }
  Status wait(int b) override { return cuda_status(cudaEventSynchronize(events_[b]), "waiting for a staged copy"); }
  Status consume(int b, const ReadJob& job, int64_t offset, int64_t n) override {
    auto* dst = static_cast<uint8_t*>(dsts_[job.tag]) + offset;
    DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(dst, buffers_[b].data, static_cast<size_t>(n),
                                                     cudaMemcpyHostToDevice, streams_[b]),
                                     "copying staged weights to the device"));
    return cuda_status(cudaEventRecord(events_[b], streams_[b]), "recording a staged copy");
  }
  Status finish() override {
    for (cudaStream_t s : streams_) DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(s), "finishing the weight upload"));
    return ok_status();
  }

 private:
  std::span<const StageBuffer> buffers_;
  const std::vector<void*>& dsts_;
  std::vector<cudaStream_t> streams_;
  std::vector<cudaEvent_t> events_;
  bool ok_ = true;
};

// Pinned host buffers, freed on destruction.
struct PinnedBuffers {
  std::vector<StageBuffer> buffers;
  ~PinnedBuffers() {
    for (const StageBuffer& b : buffers) cudaFreeHost(b.data);
  }
};

std::vector<uint8_t> float_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}


Status expect_dtype(const TensorView& v, std::initializer_list<DType> ok, std::string_view name) {
  for (DType d : ok)
    if (v.dtype == d || (d == DType::f8_e8m0 && v.dtype == DType::u8)) return ok_status();
  return error(StatusCode::invalid_argument, "upload of '{}': stored as {}, which this kind does not take", name,
               dtype_name(v.dtype));
}

// The view of an EXL3 linear standing for a weight of kind View: dims and the EXL3 view only.
template <typename View, typename W>
StatusOr<View> exl3_only(const W& w, Uploader& up, std::string_view name) {
  View v;
  DSV4_ASSIGN_OR_RETURN(v.exl3, upload_exl3(*w.exl3, up, name));
  v.out = w.out();
  v.in = w.in();
  return v;
}

}  // namespace

std::vector<float> host_floats(const TensorView& v) {
  std::vector<float> out(static_cast<size_t>(v.data ? v.numel() : 0));
  for (size_t i = 0; i < out.size(); ++i) {
    if (v.dtype == DType::bf16) {
      uint16_t h;
      std::memcpy(&h, v.bytes() + 2 * i, 2);
      out[i] = bf16_to_f32(h);
    } else {
      std::memcpy(&out[i], v.bytes() + 4 * i, 4);
    }
  }
  return out;
}

StatusOr<void*> arena_alloc(Arena& arena, size_t bytes, std::string_view what, size_t align) {
  void* p = arena.alloc(bytes, align);
  if (!p)
    return error(StatusCode::resource_exhausted, "device arena full: '{}' needs {} bytes, {} of {} used", what, bytes,
                 arena.used(), arena.capacity());
  return p;
}

StatusOr<void*> Uploader::reserve(size_t bytes, std::string_view what, size_t align) {
  return arena_alloc(arena_, bytes, what, align);
}

std::optional<FileSpan> Uploader::locate(const void* p) const {
  for (const TensorStore* s : stores_)
    if (auto f = s->locate(p)) return f;
  return std::nullopt;
}

StatusOr<void*> Uploader::stored(const void* bytes, int64_t n, std::string_view name) {
  DSV4_ASSIGN_OR_RETURN(void* dst, reserve(static_cast<size_t>(std::max<int64_t>(n, 1)), name));
  if (measuring() || n == 0) return dst;
  ReadJob j;
  j.src = bytes;
  j.bytes = n;
  j.file = locate(bytes);
  j.tag = dsts_.size();
  jobs_.push_back(j);
  dsts_.push_back(dst);
  queued_ += n;
  return dst;
}

StatusOr<void*> Uploader::stored(const TensorView& v, std::string_view name) {
  if (!v.data) return error(StatusCode::invalid_argument, "upload of '{}': the tensor is absent", name);
  return stored(v.data, v.nbytes, name);
}

StatusOr<void*> Uploader::held(std::vector<uint8_t> bytes, std::string_view name) {
  if (measuring()) return reserve(std::max<size_t>(bytes.size(), 1), name);
  held_.push_back(std::move(bytes));
  return stored(held_.back().data(), static_cast<int64_t>(held_.back().size()), name);
}

StatusOr<const float*> Uploader::floats(std::vector<float> v, std::string_view name) {
  DSV4_ASSIGN_OR_RETURN(void* p, held(float_bytes(v), name));
  return static_cast<const float*>(p);
}

StatusOr<uint16_t*> Uploader::dequant_bf16(const family::Fp8Linear& w, std::string_view name) {
  DSV4_RETURN_IF_ERROR(expect_dtype(w.weight, {DType::f8_e4m3}, name));
  DSV4_RETURN_IF_ERROR(expect_dtype(w.scale, {DType::f8_e8m0}, name));
  const int64_t out = w.out(), in = w.in();
  DSV4_ASSIGN_OR_RETURN(void* dst, reserve(static_cast<size_t>(out * in * 2), name));
  if (measuring()) return static_cast<uint16_t*>(dst);
  if (w.weight.nbytes + w.scale.nbytes > kDequantArea)
    return error(StatusCode::unimplemented, "upload of '{}': {} bytes to dequantize, more than the {}-byte area", name,
                 w.weight.nbytes + w.scale.nbytes, kDequantArea);
  Dequant d{out, in, w.block, dsts_.size(), dsts_.size() + 1, static_cast<uint16_t*>(dst)};
  for (const TensorView* v : {&w.weight, &w.scale}) {
    ReadJob j;
    j.src = v->data;
    j.bytes = v->nbytes;
    j.file = locate(v->data);
    j.tag = dsts_.size();
    jobs_.push_back(j);
    dsts_.push_back(nullptr);  // placed in the dequantization area at run()
    queued_ += v->nbytes;
  }
  dequants_.push_back(d);
  return static_cast<uint16_t*>(dst);
}

StatusOr<StageStats> Uploader::run(const UploadOptions& o) {
  if (measuring()) return error(StatusCode::internal, "a measuring uploader has nothing to run");
  PinnedBuffers pinned;
  for (int b = 0; b < std::max(1, o.staging_buffers); ++b) {
    void* p = nullptr;
    DSV4_RETURN_IF_ERROR(cuda_status(cudaHostAlloc(&p, static_cast<size_t>(o.staging_bytes), cudaHostAllocDefault),
                                     fmt::format("{} bytes of pinned staging memory", o.staging_bytes)));
    pinned.buffers.push_back({static_cast<uint8_t*>(p), o.staging_bytes});
  }
  StageOptions so;
  so.threads = o.readers;
  so.progress = o.progress;
  std::vector<ReadJob> plain, dq;
  for (const ReadJob& j : jobs_) (dsts_[j.tag] ? plain : dq).push_back(j);
  StageStats total;
  auto add = [&total](const StageStats& s) {
    total.file_bytes += s.file_bytes;
    total.memory_bytes += s.memory_bytes;
    total.seconds += s.seconds;
    for (const auto& [f, n] : s.by_file) total.by_file[f] += n;
  };
  {
    DeviceSink sink(pinned.buffers, dsts_);
    if (!sink.ok()) return error(StatusCode::internal, "cannot create the upload's CUDA streams");
    DSV4_ASSIGN_OR_RETURN(StageStats s, stage_reads(std::move(plain), pinned.buffers, sink, so));
    add(s);
  }
  if (!dequants_.empty()) {
    void* area = nullptr;
    DSV4_RETURN_IF_ERROR(cuda_status(cudaMalloc(&area, kDequantArea), "the upload's dequantization area"));
    std::vector<void*> dsts = dsts_;
    size_t d0 = 0;
    Status st;
    while (d0 < dequants_.size() && st.ok()) {  // as many whole weights as the area holds, then their kernels
      int64_t used = 0;
      size_t d1 = d0;
      std::vector<ReadJob> batch;
      for (; d1 < dequants_.size(); ++d1) {
        const Dequant& d = dequants_[d1];
        const int64_t need = ((jobs_[d.codes_tag].bytes + 255) & ~int64_t{255}) + ((jobs_[d.scales_tag].bytes + 255) & ~int64_t{255});
        if (used + need > kDequantArea && d1 > d0) break;
        for (size_t t : {d.codes_tag, d.scales_tag}) {
          dsts[t] = static_cast<uint8_t*>(area) + used;
          used += (jobs_[t].bytes + 255) & ~int64_t{255};
          batch.push_back(jobs_[t]);
        }
      }
      DeviceSink sink(pinned.buffers, dsts);
      auto s = stage_reads(std::move(batch), pinned.buffers, sink, so);
      if (!s.ok()) {
        st = s.status();
        break;
      }
      add(*s);
      for (size_t k = d0; k < d1 && st.ok(); ++k) {
        const Dequant& d = dequants_[k];
        st = launch_status(fp8_to_bf16(static_cast<const uint8_t*>(dsts[d.codes_tag]),
                                       static_cast<const uint8_t*>(dsts[d.scales_tag]), d.out, d.in,
                                       static_cast<int>(d.block), d.dst, nullptr),
                           "fp8_to_bf16", shape_text({{"out", d.out}, {"in", d.in}}));
      }
      if (st.ok()) st = cuda_status(cudaDeviceSynchronize(), "after the dequantizations");
      d0 = d1;
    }
    cudaFree(area);
    DSV4_RETURN_IF_ERROR(st);
  }
  jobs_.clear();
  dsts_.clear();
  held_.clear();
  dequants_.clear();
  return total;
}

StatusOr<Fp8View> upload(const family::Fp8Linear& w, Uploader& up, std::string_view name) {
  if (w.exl3) return exl3_only<Fp8View>(w, up, name);
  if (w.block <= 0) return error(StatusCode::invalid_argument, "upload of '{}': block {}", name, w.block);
  DSV4_RETURN_IF_ERROR(expect_dtype(w.weight, {DType::f8_e4m3}, name));
  DSV4_RETURN_IF_ERROR(expect_dtype(w.scale, {DType::f8_e8m0}, name));
  const int64_t sb = ((w.out() + w.block - 1) / w.block) * ((w.in() + w.block - 1) / w.block);
  if (w.scale.nbytes != sb)
    return error(StatusCode::invalid_argument, "upload of '{}': {} scale bytes for [{}, {}] in {}-blocks", name,
                 w.scale.nbytes, w.out(), w.in(), w.block);
  Fp8View v;
  DSV4_ASSIGN_OR_RETURN(void* p, up.stored(w.weight, fmt::format("{}.weight", name)));
  DSV4_ASSIGN_OR_RETURN(void* s, up.stored(w.scale, fmt::format("{}.scale", name)));
  v.w = static_cast<const uint8_t*>(p);
  v.scale = static_cast<const uint8_t*>(s);
  v.out = w.out();
  v.in = w.in();
  v.block = w.block;
  return v;
}

StatusOr<Fp4View> upload(const family::Fp4Linear& w, Uploader& up, std::string_view name) {
  if (w.exl3) return exl3_only<Fp4View>(w, up, name);
  if (w.in() % 32 != 0) return error(StatusCode::invalid_argument, "upload of '{}': in = {} is not a multiple of 32", name, w.in());
  DSV4_RETURN_IF_ERROR(expect_dtype(w.weight, {DType::i8, DType::u8}, name));
  DSV4_RETURN_IF_ERROR(expect_dtype(w.scale, {DType::f8_e8m0}, name));
  Fp4View v;
  DSV4_ASSIGN_OR_RETURN(void* p, up.stored(w.weight, fmt::format("{}.weight", name)));
  DSV4_ASSIGN_OR_RETURN(void* s, up.stored(w.scale, fmt::format("{}.scale", name)));
  v.w = static_cast<const uint8_t*>(p);
  v.scale = static_cast<const uint8_t*>(s);
  v.out = w.out();
  v.in = w.in();
  return v;
}

StatusOr<Bf16View> upload_bf16(const family::Matrix& w, Uploader& up, std::string_view name) {
  if (w.exl3) return exl3_only<Bf16View>(w, up, name);
  DSV4_RETURN_IF_ERROR(expect_dtype(w.weight, {DType::bf16}, name));
  Bf16View v;
  DSV4_ASSIGN_OR_RETURN(void* p, up.stored(w.weight, name));
  v.w = static_cast<const uint16_t*>(p);
  v.out = w.out();
  v.in = w.in();
  return v;
}

StatusOr<Bf16View> upload_dequant_bf16(const family::Fp8Linear& w, Uploader& up, std::string_view name) {
  if (w.exl3) return exl3_only<Bf16View>(w, up, name);
  Bf16View v;
  DSV4_ASSIGN_OR_RETURN(v.w, up.dequant_bf16(w, name));
  v.out = w.out();
  v.in = w.in();
  return v;
}

StatusOr<F32View> upload_f32(const family::Matrix& w, Uploader& up, std::string_view name) {
  if (w.exl3) return exl3_only<F32View>(w, up, name);
  DSV4_RETURN_IF_ERROR(expect_dtype(w.weight, {DType::bf16, DType::f32}, name));
  F32View v;
  if (w.weight.dtype == DType::f32) {
    DSV4_ASSIGN_OR_RETURN(void* p, up.stored(w.weight, name));
    v.w = static_cast<const float*>(p);
  } else {
    DSV4_ASSIGN_OR_RETURN(v.w, up.floats(host_floats(w.weight), name));
  }
  v.out = w.out();
  v.in = w.in();
  return v;
}

StatusOr<const float*> upload_floats(const TensorView& v, Uploader& up, std::string_view name) {
  if (!v.data) return error(StatusCode::invalid_argument, "upload of '{}': the tensor is absent", name);
  DSV4_RETURN_IF_ERROR(expect_dtype(v, {DType::bf16, DType::f32}, name));
  if (v.dtype == DType::f32) {
    DSV4_ASSIGN_OR_RETURN(void* p, up.stored(v, name));
    return static_cast<const float*>(p);
  }
  return up.floats(host_floats(v), name);
}

StatusOr<const Exl3View*> upload_exl3(const family::Exl3Linear& w, Uploader& up, std::string_view name) {
  if (w.parts.empty()) return error(StatusCode::invalid_argument, "upload of '{}': an EXL3 linear with no parts", name);
  Arena& arena = up.arena();
  if (!arena.exl3) arena.exl3 = std::make_shared<Exl3Store>();
  Exl3Store& store = *arena.exl3;
  std::vector<Exl3ViewPart> parts;
  int64_t x0 = 0, y0 = 0;
  for (size_t g = 0; g < w.parts.size(); ++g) {
    const family::Exl3Part& src = w.parts[g];
    const exl3::Linear& L = src.packed;
    const std::string pn = w.parts.size() > 1 ? fmt::format("{}.slice.{}", name, g) : std::string(name);
    DSV4_RETURN_IF_ERROR(exl3::validate(L).with_context(pn));
    if (L.in_features != src.in_padded || L.out_features != src.out_padded || src.in > src.in_padded ||
        src.out > src.out_padded)
      return error(StatusCode::invalid_argument, "upload of '{}': stored [{}, {}] for logical [{}, {}] padded [{}, {}]",
                   pn, L.in_features, L.out_features, src.in, src.out, src.in_padded, src.out_padded);
    Exl3ViewPart p;
    DSV4_ASSIGN_OR_RETURN(void* t, up.stored(L.trellis.bytes(), L.trellis.nbytes(), pn + ".trellis"));
    std::vector<uint8_t> suh(L.suh.size() * 2), svh(L.svh.size() * 2);
    std::memcpy(suh.data(), L.suh.data(), suh.size());
    std::memcpy(svh.data(), L.svh.data(), svh.size());
    DSV4_ASSIGN_OR_RETURN(void* su, up.held(std::move(suh), pn + ".suh"));
    DSV4_ASSIGN_OR_RETURN(void* sv, up.held(std::move(svh), pn + ".svh"));
    p.w.trellis = static_cast<const uint16_t*>(t);
    p.w.suh = static_cast<const uint16_t*>(su);
    p.w.svh = static_cast<const uint16_t*>(sv);
    p.w.in_features = L.in_features;
    p.w.out_features = L.out_features;
    p.w.bits = L.bits;
    p.w.codebook = static_cast<int>(L.codebook);
    // A rank's column slice chooses its K split from the whole part's width (exl3_gemm.cuh).
    p.w.split_out_features = src.k_split_out > 0 ? src.k_split_out : L.out_features;
    if (p.w.split_out_features % 128 != 0 || p.w.split_out_features < L.out_features)
      return error(StatusCode::invalid_argument, "upload of '{}': K split chosen from {} columns for a part of {}", pn,
                   p.w.split_out_features, L.out_features);
    if (!L.bias.empty()) {
      if (static_cast<int64_t>(L.bias.size()) != src.out_padded)
        return error(StatusCode::invalid_argument, "upload of '{}': bias holds {} values, the shape needs {}", pn,
                     L.bias.size(), src.out_padded);
      std::vector<float> b(static_cast<size_t>(src.out));
      for (int64_t i = 0; i < src.out; ++i) b[i] = static_cast<float>(exl3::half_bits_to_double(L.bias[i]));
      DSV4_ASSIGN_OR_RETURN(p.bias, up.floats(std::move(b), pn + ".bias"));
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
    return error(StatusCode::invalid_argument, "upload of '{}': parts cover [{}, {}], the linear is [{}, {}]", name, x0,
                 y0, w.in, w.out);
  const std::vector<Exl3ViewPart>& held = store.parts.emplace_back(std::move(parts));
  Exl3View& v = store.views.emplace_back();
  v.parts = held.data();
  v.n_parts = static_cast<int32_t>(held.size());
  v.in = w.in;
  v.out = w.out;
  v.scratch = &store.scratch;
  if (held.size() > 1) {
    std::vector<Exl3View>& groups = store.groups.emplace_back(held.size());
    for (size_t g = 0; g < held.size(); ++g) {
      std::vector<Exl3ViewPart>& alone = store.parts.emplace_back(1, held[g]);
      alone[0].x0 = alone[0].y0 = 0;
      groups[g] = Exl3View{alone.data(), 1, held[g].in, held[g].out, nullptr, &store.scratch};
    }
    v.groups = groups.data();
  }
  const auto [row, fixed] = exl3_scratch_need(v);
  store.scratch.require(row, fixed);
  return &v;
}

namespace {
template <typename View, typename W, typename F>
StatusOr<View> now(const W& w, Arena& arena, std::string_view name, F&& f) {
  Uploader up(arena);
  DSV4_ASSIGN_OR_RETURN(View v, f(w, up, name));
  UploadOptions o;
  o.staging_buffers = 1;
  o.staging_bytes = int64_t{8} << 20;
  o.readers = 1;
  DSV4_RETURN_IF_ERROR(up.run(o).status());
  return v;
}
}  // namespace

StatusOr<Fp8View> upload_now(const family::Fp8Linear& w, Arena& arena, std::string_view name) {
  return now<Fp8View>(w, arena, name, [](const auto& x, Uploader& u, std::string_view n) { return upload(x, u, n); });
}
StatusOr<Fp4View> upload_now(const family::Fp4Linear& w, Arena& arena, std::string_view name) {
  return now<Fp4View>(w, arena, name, [](const auto& x, Uploader& u, std::string_view n) { return upload(x, u, n); });
}
StatusOr<Bf16View> upload_bf16_now(const family::Matrix& w, Arena& arena, std::string_view name) {
  return now<Bf16View>(w, arena, name, [](const auto& x, Uploader& u, std::string_view n) { return upload_bf16(x, u, n); });
}
StatusOr<F32View> upload_f32_now(const family::Matrix& w, Arena& arena, std::string_view name) {
  return now<F32View>(w, arena, name, [](const auto& x, Uploader& u, std::string_view n) { return upload_f32(x, u, n); });
}

}  // namespace dsv4::cuda
