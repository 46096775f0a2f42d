// Writes what tests/hf/compare_v4.py needs to check the oracle against Hugging Face transformers'
// DeepSeek-V4 port: the synthetic V4 / 0731 preset's weights dequantized to f32 under their
// checkpoint names (weights.safetensors), the prompt, and the oracle's logits of every prompt row
// in ref32, ref64 and the test-only unquantized mode in both widths (.npy, f32 [T, V]). Links no
// tokenizer.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <type_traits>
#include <variant>
#include <string>
#include <vector>

#include "backends/cpu/forward.h"
#include "backends/cpu/linear.h"
#include "family/deepseek_v41/synthetic_weights.h"
#include "core/safetensors_writer.h"
#include "family/deepseek_v41/preset.h"

namespace {

using namespace dsv4;
using namespace dsv4::cpu;

bool write_npy(const std::string& path, const std::vector<float>& v, int64_t rows, int64_t cols) {
  std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                  std::to_string(cols) + "), }";
  while ((10 + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  std::ofstream f(path, std::ios::binary);
  const uint16_t len = static_cast<uint16_t>(h.size());
  f.write("\x93NUMPY\x01\x00", 8);
  f.write(reinterpret_cast<const char*>(&len), 2);
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return static_cast<bool>(f);
}

void check(const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.to_string().c_str());
    std::exit(1);
  }
}

void add_f32(SafetensorsWriter& w, const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  check(w.add(name, DType::f32, std::move(shape), std::move(b)));
}

// The exact values [out, in] of a stored linear (FP8 / FP4 codes times their scales, bf16 or f32 widened).
std::vector<float> dense(const family::LinearRef& ref) {
  return std::visit([](auto* W) {
    using T = std::remove_cvref_t<decltype(*W)>;
    const int64_t out = W->out(), in = W->in();
    std::vector<float> v(static_cast<size_t>(out * in));
    if constexpr (std::is_same_v<T, family::Fp8Linear>) {
      std::vector<float> ws((in + W->block - 1) / W->block);
      for (int64_t n = 0; n < out; ++n) {
        fp8_weight_row(*W, n, &v[n * in], ws.data());
        for (int64_t k = 0; k < in; ++k) v[n * in + k] *= ws[k / W->block];
      }
    } else if constexpr (std::is_same_v<T, family::Fp4Linear>) {
      std::vector<float> ws(in / 32);
      for (int64_t n = 0; n < out; ++n) {
        e2m1_values(W->weight.bytes() + n * (in / 2), in, &v[n * in]);
        ue8m0_values(W->scale.bytes() + n * (in / 32), in / 32, ws.data());
        for (int64_t k = 0; k < in; ++k) v[n * in + k] *= ws[k / 32];
      }
    } else {
      v = floats(W->weight);
    }
    return v;
  }, ref);
}

// Every tensor the oracle reads, dequantized: linears as f32 [out, in] under "<group>.weight", the hash tables
// as I64, every other tensor widened to f32.
void dump_weights(const family::Model& m, const std::string& path) {
  SafetensorsWriter w;
  family::ModelWeights views = m.weights;
  std::set<std::string> stored;  // the stored tensors the linears stand for
  family::for_each_linear(views, m.plan, [&](const std::string& g, family::LinearRef ref) {
    const auto [out, in] = std::visit([](auto* W) { return std::pair{W->out(), W->in()}; }, ref);
    add_f32(w, g + ".weight", {out, in}, dense(ref));
    stored.insert(g + ".weight");
    stored.insert(g + ".scale");
  });
  family::for_each_tensor(m.weights, m.plan, [&](const std::string& n, const TensorView& v) {
    if (stored.count(n)) return;
    if (v.dtype == DType::i64) {
      check(w.add(n, DType::i64, v.shape, std::vector<uint8_t>(v.bytes(), v.bytes() + v.nbytes)));
    } else {
      add_f32(w, n, v.shape, floats(v));
    }
  });
  check(w.write(path));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: hf_v4_dump OUT_DIR [small|tiny] [seed] [tokens]\n");
    return 2;
  }
  const std::string out = argv[1];
  const std::string preset = argc > 2 ? argv[2] : "small";
  const uint64_t seed = argc > 3 ? std::stoull(argv[3]) : 1;
  const int T = argc > 4 ? std::stoi(argv[4]) : 160;
  auto p = family::parse_preset(preset);
  if (!p.ok()) { std::fprintf(stderr, "%s\n", p.status().to_string().c_str()); return 2; }
  const family::Config fc = family::preset_config(*p, family::Variant::v4);
  std::shared_ptr<const family::Model> w = family::synthetic_weights(fc, seed, false);
  const int64_t V = w->config.vocab_size;
  std::vector<int32_t> prompt(T), rows(T);
  for (int i = 0; i < T; ++i) { prompt[i] = static_cast<int32_t>((i * 7919 + 13) % V); rows[i] = i; }
  std::ofstream(out + "/prompt.txt") << [&] { std::string s; for (int t : prompt) s += std::to_string(t) + " "; return s; }();
  dump_weights(*w, out + "/weights.safetensors");
  struct Mode { const char* name; Precision prec; bool unq; };
  for (Mode m : {Mode{"oracle_ref32", Precision::ref32, false}, Mode{"oracle_ref64", Precision::ref64, false},
                 Mode{"oracle_unquantized", Precision::ref32, true},
                 Mode{"oracle_unquantized_ref64", Precision::ref64, true}}) {
    OracleOptions o;
    o.precision = m.prec;
    o.unquantized = m.unq;
    auto oracle = Oracle::create(w, o);
    if (!oracle.ok()) { std::fprintf(stderr, "%s\n", oracle.status().to_string().c_str()); return 1; }
    auto r = (*oracle)->forward({Piece{(*oracle)->open_stream(), prompt, rows}});
    if (!r.ok()) { std::fprintf(stderr, "%s\n", r.status().to_string().c_str()); return 1; }
    write_npy(out + "/" + m.name + ".npy", (*r)[0].logits, T, V);
    std::printf("wrote %s/%s.npy [%d, %lld]\n", out.c_str(), m.name, T, static_cast<long long>(V));
  }
  return 0;
}
