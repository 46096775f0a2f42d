// Decoding a pack's EXL3 linears for the oracle (see load_exl3.h).
#include "backends/cpu/load_exl3.h"

#include "formats/exl3/half.h"
#include "formats/exl3/pack.h"

namespace dsv4::cpu {

void add_exl3_part(Exl3Weight& w, const family::Exl3Group& g, exl3::Linear L) {
  DSV4_CHECK(L.in_features == g.in_padded && L.out_features == g.out_padded);
  Exl3Part P;
  P.in = g.in;
  P.out = g.out;
  P.in_padded = L.in_features;
  P.out_padded = L.out_features;
  const std::vector<uint16_t> wq = exl3::decode_wq(L);  // [in_padded, out_padded]
  P.wq_t.resize(wq.size());
  for (int64_t k = 0; k < P.in_padded; ++k)
    for (int64_t n = 0; n < P.out_padded; ++n)
      P.wq_t[n * P.in_padded + k] = static_cast<float>(exl3::half_bits_to_double(wq[k * P.out_padded + n]));
  const auto widen = [](const std::vector<uint16_t>& h) {
    std::vector<float> f(h.size());
    for (size_t i = 0; i < h.size(); ++i) f[i] = static_cast<float>(exl3::half_bits_to_double(h[i]));
    return f;
  };
  P.suh = widen(L.suh);
  P.svh = widen(L.svh);
  P.bias = widen(L.bias);
  P.packed = std::move(L);
  w.in += P.in;
  w.out += P.out;
  w.parts.push_back(std::move(P));
}

StatusOr<std::shared_ptr<const Exl3Weight>> load_exl3_weight(const Checkpoint& ck, const family::Exl3PackPlan& plan,
                                                             std::string_view release_group) {
  const std::vector<const family::Exl3Group*> groups = plan.groups_of(release_group);
  if (groups.empty()) return std::shared_ptr<const Exl3Weight>();
  auto w = std::make_shared<Exl3Weight>();
  for (const family::Exl3Group* g : groups) {
    DSV4_ASSIGN_OR_RETURN(exl3::Linear L, exl3::load_linear(ck, g->prefix));
    if (L.in_features != g->in_padded || L.out_features != g->out_padded)
      return error(StatusCode::data_loss, "{}: EXL3 linear '{}' is [{}, {}], the layout needs [{}, {}]", ck.path(),
                   g->prefix, L.in_features, L.out_features, g->in_padded, g->out_padded);
    add_exl3_part(*w, *g, std::move(L));
  }
  return std::shared_ptr<const Exl3Weight>(std::move(w));
}

}  // namespace dsv4::cpu
