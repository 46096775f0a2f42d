// weight_reads: a model's views as read jobs (see weight_reads.h).
#include "engine/weight_reads.h"

#include <string>
#include <variant>

namespace dsv4::engine {

std::vector<ReadJob> weight_reads(const family::Model& m, bool engram_tables) {
  std::vector<const TensorStore*> stores{m.store.get()};
  for (const auto& x : m.extra) stores.push_back(x.get());
  std::vector<ReadJob> jobs;
  const auto add = [&](const void* p, int64_t n) {
    ReadJob j;
    j.src = p;
    j.bytes = n;
    for (const TensorStore* s : stores)
      if ((j.file = s->locate(p))) break;
    j.tag = jobs.size();
    jobs.push_back(j);
  };
  const auto is_engram_table = [](const std::string& n) {
    return n.find(".engram.embed.") != std::string::npos;
  };
  family::for_each_tensor(m.weights, m.plan, [&](const std::string& name, const TensorView& v) {
    if (engram_tables || !is_engram_table(name)) add(v.data, v.nbytes);
  });
  family::ModelWeights w = m.weights;
  family::for_each_linear(w, m.plan, [&](const std::string&, family::LinearRef ref) {
    const family::Exl3Ref e = std::visit([](auto* l) { return l->exl3; }, ref);
    if (e)
      for (const family::Exl3Part& p : e->parts) add(p.packed.trellis.bytes(), p.packed.trellis.nbytes());
  });
  return jobs;
}

}  // namespace dsv4::engine
