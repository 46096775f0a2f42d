// Output-column cuts of EXL3 linears (see exl3_cut.h).
#include "fabric/exl3_cut.h"

#include <algorithm>
#include <vector>

#include "formats/exl3/hadamard.h"

namespace dsv4::fabric {
namespace {

constexpr int64_t kBlock = exl3::kHadamardSize;  // the output Hadamard's block: 128 columns

template <typename T>
std::vector<T> range(const std::vector<T>& v, int64_t b, int64_t e) {
  return std::vector<T>(v.begin() + b, v.begin() + e);
}

// Part `P`'s local outputs [lb, le) (0 <= lb < le <= P.out, not the whole part) with its padded columns
// [lb, pe): pe = le, or out_padded when the cut reaches the part's last logical output.
StatusOr<family::Exl3Part> part_columns(const family::Exl3Part& P, int64_t lb, int64_t le) {
  const int64_t pe = le == P.out ? P.out_padded : le;
  family::Exl3Part Q;
  Q.in = P.in;
  Q.in_padded = P.in_padded;
  Q.out = le - lb;
  Q.out_padded = pe - lb;
  DSV4_ASSIGN_OR_RETURN(Q.packed, exl3_columns(P.packed, lb, pe));
  Q.k_split_out = P.k_split_out > 0 ? P.k_split_out : P.out_padded;
  return Q;
}

}  // namespace

StatusOr<exl3::Linear> exl3_columns(const exl3::Linear& L, int64_t b, int64_t e) {
  DSV4_RETURN_IF_ERROR(exl3::validate(L));
  const int64_t out = L.out_features;
  if (b < 0 || e <= b || e > out || b % kBlock != 0 || e % kBlock != 0)
    return error(StatusCode::invalid_argument,
                 "EXL3 layer '{}': columns [{}, {}) of {} are not whole {}-column blocks of the output Hadamard", L.name,
                 b, e, out, kBlock);
  const int64_t tile_words = 16 * static_cast<int64_t>(L.bits);  // one 16x16 tile
  const int64_t tiles_n = out / 16, kt_n = L.in_features / 16, nb = b / 16, ne = e / 16;
  exl3::Linear C;
  C.name = L.name;
  C.in_features = L.in_features;
  C.out_features = e - b;
  C.bits = L.bits;
  C.codebook = L.codebook;
  std::vector<uint16_t> words(static_cast<size_t>(kt_n * (ne - nb) * tile_words));
  for (int64_t kt = 0; kt < kt_n; ++kt)  // tile (kt, nt) at words [(kt·tiles_n + nt)·16·bits, +16·bits)
    L.trellis.copy((kt * tiles_n + nb) * tile_words, (ne - nb) * tile_words, &words[kt * (ne - nb) * tile_words]);
  C.trellis = std::move(words);  // only this rank's columns are read
  C.suh = L.suh;
  C.svh = range(L.svh, b, e);
  if (!L.bias.empty()) C.bias = range(L.bias, b, e);
  return C;
}

Status exl3_check_cut(const family::Exl3Linear& w, int64_t b, int64_t e, std::string_view name) {
  if (b < 0 || e <= b || e > w.out)
    return error(StatusCode::invalid_argument, "{}: EXL3 outputs [{}, {}) are not a non-empty range of its {}", name, b,
                 e, w.out);
  int64_t y0 = 0;
  for (size_t g = 0; g < w.parts.size(); ++g) {
    const family::Exl3Part& P = w.parts[g];
    const int64_t lb = std::max<int64_t>(b - y0, 0), le = std::min<int64_t>(e - y0, P.out);
    y0 += P.out;
    if (le <= lb || (lb == 0 && le == P.out)) continue;  // outside, or whole
    if (w.parts.size() > 1)
      return error(StatusCode::invalid_argument,
                   "{}: EXL3 outputs [{}, {}) cut inside part {} of {} block-diagonal parts (a cut must fall between "
                   "parts, so each part keeps its inputs)", name, b, e, g, w.parts.size());
    if (lb % kBlock != 0 || (le % kBlock != 0 && le != P.out))
      return error(StatusCode::invalid_argument,
                   "{}: EXL3 outputs [{}, {}) do not fall on the output Hadamard's {}-column blocks (a rank's columns "
                   "would mix other ranks' columns)", name, b, e, kBlock);
  }
  return ok_status();
}

StatusOr<family::Exl3Ref> exl3_outputs(const family::Exl3Linear& w, int64_t b, int64_t e, std::string_view name) {
  DSV4_RETURN_IF_ERROR(exl3_check_cut(w, b, e, name));
  auto cut = std::make_shared<family::Exl3Linear>();
  int64_t y0 = 0;
  for (const family::Exl3Part& P : w.parts) {
    const int64_t lb = std::max<int64_t>(b - y0, 0), le = std::min<int64_t>(e - y0, P.out);
    y0 += P.out;
    if (le <= lb) continue;  // another rank's part, with its inputs
    if (lb == 0 && le == P.out) {
      cut->parts.push_back(P);
    } else {
      auto Q = part_columns(P, lb, le);
      if (!Q.ok()) return Q.status().with_context(name);
      cut->parts.push_back(std::move(Q).value());
    }
    cut->in += cut->parts.back().in;
    cut->out += cut->parts.back().out;
  }
  return family::Exl3Ref(std::move(cut));
}

}  // namespace dsv4::fabric
