// open_model / model_from_store: a checkpoint or in-memory tensors bound as one Model (see model.h).
#include "family/deepseek_v41/model.h"

#include <fmt/ranges.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "core/checkpoint.h"
#include "family/deepseek_v41/exl3_layout.h"
#include "family/deepseek_v41/exl3_sources.h"
#include "tokenizer/engram_token_map.h"
#include "tokenizer/v41_tokenizer.h"

namespace dsv4::family {
namespace {

std::vector<FoundTensor> found_tensors(const TensorStore& s) {
  std::vector<FoundTensor> found;
  const auto* ck = dynamic_cast<const Checkpoint*>(&s);
  for (const std::string& n : s.names()) {
    std::string file = s.path();
    if (ck) {
      auto t = ck->find(n);
      if (t.ok()) file = std::filesystem::path(t->file->path()).filename().string();
    }
    auto v = s.tensor(n);
    if (v.ok()) found.push_back({n, v->dtype, v->shape, file});
  }
  return found;
}

// The Engram token map of a checkpoint: engram_token_map.json beside it, else derived from the V4.1 tokenizer.
StatusOr<std::vector<int32_t>> checkpoint_token_map(const std::string& dir, const Config& c) {
  std::optional<Tokenizer> tok;
  if (!std::ifstream(dir + "/" + std::string(kEngramTokenMapFile))) {
    DSV4_ASSIGN_OR_RETURN(Tokenizer t, load_v41_tokenizer());
    tok = std::move(t);
  }
  DSV4_ASSIGN_OR_RETURN(EngramTokenMap map, load_engram_token_map(dir, tok ? &*tok : nullptr, c.vocab_size,
                                                                  c.engram_compressed_vocab_size,
                                                                  c.engram_pad_token_id));
  return std::move(map.token_map);
}

Status bind(Model& m) {
  BindSources src;
  src.store = m.store.get();
  for (const auto& r : m.extra) src.extra.push_back(r.get());
  std::optional<Exl3PackPlan> pack;
  if (m.exl3_pack) {
    DSV4_ASSIGN_OR_RETURN(pack, exl3_pack_plan(m.config));
    src.pack_plan = &*pack;
  }
  DSV4_ASSIGN_OR_RETURN(m.weights, bind_weights(m.config, m.plan, src));
  return check_routing_tables(m);
}

}  // namespace

Status check_routing_tables(const Model& m) {
  for (size_t l = 0; l < m.weights.layers.size(); ++l) {
    const LayerWeights& w = m.weights.layers[l];
    if (!present(w.tid2eid)) continue;
    const int64_t E = w.gate_weight.out();
    for (int64_t i = 0; i < w.tid2eid.numel(); ++i) {
      int64_t e;
      std::memcpy(&e, w.tid2eid.bytes() + 8 * i, 8);
      if (e < 0 || e >= E)
        return error(StatusCode::data_loss, "layers.{}.ffn.gate.tid2eid: expert {} outside [0, {})", l, e, E);
    }
  }
  return ok_status();
}

StatusOr<std::shared_ptr<const Model>> open_model(const std::string& dir, const OpenOptions& options) {
  auto m = std::make_shared<Model>();
  m->path = dir;
  std::string config_text;
  if (std::ifstream in{dir + "/config.json", std::ios::binary}) config_text.assign(std::istreambuf_iterator<char>(in), {});
  std::optional<Exl3PackPlan> pack;
  if (is_exl3_config_text(config_text)) {
    auto pc = parse_exl3_pack_config(config_text);
    if (!pc.ok()) return pc.status().with_context(dir + "/config.json");
    m->config = pc->config;
    DSV4_ASSIGN_OR_RETURN(pack, exl3_pack_plan(m->config));
    m->exl3_pack = true;
  } else {
    DSV4_ASSIGN_OR_RETURN(m->config, load_config(dir + "/config.json"));
  }
  DSV4_RETURN_IF_ERROR(validate_config(m->config));
  const Config& c = m->config;
  m->plan = build_plan(c);
  m->table = expected_tensors(c);
  DSV4_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::open(dir));
  auto store = std::make_shared<const Checkpoint>(std::move(ck));
  m->store = store;
  if (pack) {
    const std::vector<FoundTensor> found = found_tensors(*store);
    DSV4_RETURN_IF_ERROR(validate_exl3_pack(*pack, found).with_context(dir));
    DSV4_RETURN_IF_ERROR(check_pack_tensor_storage(dir, *pack, found));
    if (!pack->release_shards.empty()) {
      if (options.engram_shards.empty())
        return error(StatusCode::invalid_argument, "{}: an EXL3 pack without its Engram tables (layers {}); give the "
                     "directory of the original release shards that hold them (--engram-shards DIR)", dir,
                     fmt::join(c.engram_layer_ids, ", "));
      DSV4_ASSIGN_OR_RETURN(EngramSources src, engram_sources_for(dir, c, pack->release));
      DSV4_ASSIGN_OR_RETURN(std::vector<Checkpoint> shards,
                            open_engram_shards(options.engram_shards, src, pack->release, &m->notes));
      for (Checkpoint& s : shards) m->extra.push_back(std::make_shared<const Checkpoint>(std::move(s)));
    }
  } else {
    DSV4_RETURN_IF_ERROR(validate_checkpoint(*store, m->table));
  }
  DSV4_RETURN_IF_ERROR(bind(*m));
  if (c.has_engram()) {
    m->engram = compute_engram_layout(c);
    DSV4_ASSIGN_OR_RETURN(m->engram_token_map, checkpoint_token_map(dir, c));
  }
  return std::shared_ptr<const Model>(std::move(m));
}

StatusOr<std::shared_ptr<const Model>> model_from_store(const Config& c, std::shared_ptr<const TensorStore> store,
                                                        EngramLayout engram, std::vector<int32_t> token_map,
                                                        bool exl3_pack) {
  if (!store) return error(StatusCode::invalid_argument, "model_from_store: no tensors");
  auto m = std::make_shared<Model>();
  m->config = c;
  m->plan = build_plan(c);
  m->table = expected_tensors(c);
  m->exl3_pack = exl3_pack;
  m->store = std::move(store);
  if (!exl3_pack) DSV4_RETURN_IF_ERROR(validate_tensors(m->table, found_tensors(*m->store)));
  DSV4_RETURN_IF_ERROR(bind(*m));
  if (c.has_engram()) {
    if (static_cast<int32_t>(engram.layers.size()) != static_cast<int32_t>(c.engram_layer_ids.size()))
      return error(StatusCode::invalid_argument, "Engram layout of {} layers for {} Engram layers", engram.layers.size(),
                   c.engram_layer_ids.size());
    if (static_cast<int64_t>(token_map.size()) != c.vocab_size)
      return error(StatusCode::invalid_argument, "Engram needs a token map of {} entries, got {}", c.vocab_size,
                   token_map.size());
    for (int32_t t : token_map)
      if (t < 0 || t >= c.engram_compressed_vocab_size)
        return error(StatusCode::invalid_argument, "Engram token map id {} outside [0, {})", t,
                     c.engram_compressed_vocab_size);
  }
  m->engram = std::move(engram);
  m->engram_token_map = std::move(token_map);
  return std::shared_ptr<const Model>(std::move(m));
}

}  // namespace dsv4::family
