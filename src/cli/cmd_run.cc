// `dsv4 run`: greedy generation or teacher-forced scoring on the CPU oracle (or --backend cuda), with tokens/s and an
// optional .npy dump of every row's fp32 logits.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "family/deepseek_v41/synthetic_weights.h"
#include "cli/backend_choice.h"
#include "cli/command.h"
#include "cli/memory_check.h"
#include "core/npz.h"
#include "family/deepseek_v41/model.h"
#include "family/deepseek_v41/default_model.h"
#include "family/deepseek_v41/preset.h"
#include "tokenizer/v41_tokenizer.h"

namespace dsv4::cli {
namespace {

bool parse_ids(const std::string& s, std::vector<int32_t>& out) {
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size()) return false;
      out.push_back(static_cast<int32_t>(v));
    } catch (...) {
      return false;
    }
  }
  return true;
}

// A little-endian float32 .npy of shape [rows, cols].
bool write_npy(const std::string& path, const std::vector<float>& data, int64_t rows, int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream f(path, std::ios::binary);
  if (!f) return false;
  const uint16_t hlen = static_cast<uint16_t>(header.size());
  f.write("\x93NUMPY\x01\x00", 8);
  f.write(reinterpret_cast<const char*>(&hlen), 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * 4));
  return static_cast<bool>(f);
}

int32_t argmax(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return static_cast<int32_t>(best);
}

int run_main(int argc, char** argv) {
  CLI::App app{"Generate (greedy) or score a forced continuation with the CPU oracle"};
  std::string model, engram_shards, prompt, ids_text, force_text, dump, preset;
  int max_tokens = 16, threads = 0;
  uint64_t seed = 1;
  bool ref64 = false, reference_shapes = false;
  app.add_option("--model", model, "checkpoint directory (config.json + safetensors); default: the embedded tiny model");
  app.add_option("--engram-shards", engram_shards,
                 "EXL3 packs: folder of the original release shards holding the Engram tables (checked first)");
  app.add_option("--preset", preset,
                 "instead of --model: random weights in checkpoint formats for a family preset (tiny|small)");
  app.add_option("--seed", seed, "seed of the --preset weights")->capture_default_str();
  std::string variant = "v41";
  app.add_option("--variant", variant, "family variant of the --preset weights (v41 | v4-0731)")->capture_default_str();
  auto* p_opt = app.add_option("--prompt", prompt, "prompt text (encoded with the V4.1 tokenizer, no template)");
  auto* i_opt = app.add_option("--ids", ids_text, "prompt token ids, comma separated");
  p_opt->excludes(i_opt);
  app.add_option("--max-tokens", max_tokens, "tokens to generate")->capture_default_str();
  app.add_flag("--ref64", ref64, "accumulate in double (ref64) instead of float (ref32)");
  app.add_flag("--reference-shapes", reference_shapes,
               "reproduce the reference's prefill/decode list layouts and its stale index keys at even decode "
               "positions (for comparisons with DeepSeek's reference; breaks pieces == whole)");
  app.add_option("--force", force_text, "feed this continuation (comma-separated ids) instead of generating");
  app.add_option("--dump-logits", dump,
                 "write fp32 logits [rows, vocab] of every prompt and generated/forced position to this .npy");
  std::string dump_hidden;
  app.add_option("--dump-hidden", dump_hidden,
                 "write every prompt position's residual streams after each layer (layer_NN [T, hc, hidden] f32), "
                 "the final norm's output (final_norm [T, hidden]), each layer's sub-layer rows (attn_in_NN, attn_out_NN, ffn_in_NN, "
                 "ffn_out_NN [T, hidden]), on the CPU oracle each index source's picked compressed rows "
                 "(topk_NN [T, index_topk] i32, -1 past the picks) and the prompt (tokens [T] i32) to this .npz, "
                 "to find the first layer and position where dsv4 and another implementation part");
  // Test-only, not in --help (tests/reference/v41/straddle.py): the CPU oracle's values before its bf16 roundings at
  // the layers given (OracleOptions::pre_round_probe names them), NAME_LL [T, n / T], f32 in ref32 (exact), f64 in
  // ref64, and the prompt (tokens [T] i32).
  std::string dump_pre_round, pre_round_layers_text;
  app.add_option("--dump-pre-round", dump_pre_round, "values before rounding, to this .npz")->group("");
  app.add_option("--pre-round-layers", pre_round_layers_text, "layers for --dump-pre-round (default: all)")->group("");
  std::string backend = "cpu";
  app.add_option("--backend", backend, "cpu (the oracle) or cuda (NVIDIA GPU; builds with CUDA only)")->capture_default_str();
  app.add_option("--threads", threads, "worker threads (0: all cores)")->capture_default_str();
  MemoryFlags memory;
  add_memory_flags(app, memory);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (prompt.empty() && ids_text.empty()) {
    std::fprintf(stderr, "dsv4 run: give --prompt TEXT or --ids 1,2,3\n");
    return 2;
  }
  std::vector<int32_t> ids, forced;
  if (!ids_text.empty() && !parse_ids(ids_text, ids)) {
    std::fprintf(stderr, "dsv4 run: --ids '%s' is not a comma-separated list of integers\n", ids_text.c_str());
    return 2;
  }
  if (!force_text.empty() && !parse_ids(force_text, forced)) {
    std::fprintf(stderr, "dsv4 run: --force '%s' is not a comma-separated list of integers\n", force_text.c_str());
    return 2;
  }
  std::optional<Tokenizer> tok;
  if (!prompt.empty()) {
    auto t = load_v41_tokenizer();
    if (!t.ok()) {
      std::fprintf(stderr, "dsv4 run: %s\n", t.status().to_string().c_str());
      return 1;
    }
    tok = *t;
    ids = tok->encode(prompt);
  }
  if (ids.empty()) {
    std::fprintf(stderr, "dsv4 run: the prompt has no tokens\n");
    return 2;
  }
  std::shared_ptr<const family::Model> weights;
  if (!preset.empty()) {
    auto p = family::parse_preset(preset);
    if (!p.ok()) {
      std::fprintf(stderr, "dsv4 run: %s\n", p.status().to_string().c_str());
      return 2;
    }
    auto v = family::parse_variant(variant);
    if (!v.ok()) {
      std::fprintf(stderr, "dsv4 run: %s\n", v.status().to_string().c_str());
      return 2;
    }
    // V4 runs without its drafter (model-spec.md §10.7), so only V4.1 gets DSpark weights.
    weights = family::synthetic_weights(family::preset_config(*p, *v), seed, *v == family::Variant::v41);
  } else if (!model.empty()) {
    auto w = family::open_model(model, family::OpenOptions{engram_shards});
    if (!w.ok()) {
      std::fprintf(stderr, "dsv4 run: %s\n", w.status().to_string().c_str());
      return 1;
    }
    weights = *w;
  } else {
    auto dir = family::ensure_default_model();
    if (!dir.ok()) {
      std::fprintf(stderr, "dsv4 run: default model: %s\n", dir.status().to_string().c_str());
      return 1;
    }
    auto w = family::open_model(*dir);
    if (!w.ok()) {
      std::fprintf(stderr, "dsv4 run: %s\n", w.status().to_string().c_str());
      return 1;
    }
    weights = *w;
  }
  std::vector<int32_t> pre_round_layers;
  if (!pre_round_layers_text.empty() && !parse_ids(pre_round_layers_text, pre_round_layers)) {
    std::fprintf(stderr, "dsv4 run: --pre-round-layers '%s' is not a comma-separated list of integers\n",
                 pre_round_layers_text.c_str());
    return 2;
  }
  if (!dump_pre_round.empty() && backend != "cpu") {
    std::fprintf(stderr, "dsv4 run: --dump-pre-round is the CPU oracle's\n");
    return 2;
  }
  if (reference_shapes && backend != "cpu") {
    std::fprintf(stderr, "dsv4 run: --reference-shapes is the CPU oracle's\n");
    return 2;
  }
  BackendChoice bc;
  bc.name = backend;
  bc.max_context = static_cast<int64_t>(ids.size()) + std::max<int64_t>(max_tokens, forced.size()) + 1;
  bc.max_call_rows = std::max<int64_t>(static_cast<int64_t>(ids.size()), 1);
  bc.pin_engram = memory.engram == "pinned";
  bc.log_prefix = "dsv4 run: ";
  bc.ref64 = ref64;
  bc.threads = threads;
  bc.reference_shapes = reference_shapes;
  if (backend == "cuda") {  // the memory plan before anything is allocated
    ServeShape shape;
    shape.context = bc.max_context;
    shape.parallel = 1;
    shape.call_rows = bc.max_call_rows;
    if (Status st = check_memory(*weights, shape, memory, stderr); !st.ok()) {
      std::fprintf(stderr, "dsv4 run: %s\n", st.to_string().c_str());
      return 1;
    }
  }
  // --dump-hidden: the prompt call's layers and final norm, written as they arrive (one array in memory at a time).
  NpzWriter hidden;
  bool in_prompt = false;
  Status hidden_status;
  const int64_t C = weights->config.hc_mult, D = weights->config.hidden_size, T = static_cast<int64_t>(ids.size());
  if (!dump_hidden.empty()) {
    if (Status st = hidden.open(dump_hidden); !st.ok()) {
      std::fprintf(stderr, "dsv4 run: %s\n", st.to_string().c_str());
      return 1;
    }
    bc.layer_probe = [&](int layer, const std::vector<float>& h) {
      if (in_prompt && hidden_status.ok())
        hidden_status = hidden.add_f32(fmt::format("layer_{:02d}", layer), {T, C, D}, h);
    };
    bc.op_probe = [&](int layer, const char* op, const std::vector<float>& v) {
      if (!in_prompt || !hidden_status.ok()) return;
      if (std::string_view(op) == "final_norm") {
        hidden_status = hidden.add_f32("final_norm", {T, D}, v);
      } else if (const std::string_view o(op); o == "attn.in" || o == "attn.out" || o == "ffn.in" || o == "ffn.out") {
        std::string name = fmt::format("{}_{:02d}", o, layer);  // sub-layer input/output rows, f32 [T, hidden]
        name[name.find('.')] = '_';
        hidden_status = hidden.add_f32(name, {T, D}, v);
      } else if (std::string_view(op) == "topk") {  // an index source's picks, compressed rows (-1: none)
        std::vector<int32_t> sel(v.begin(), v.end());
        hidden_status = hidden.add_i32(fmt::format("topk_{:02d}", layer), {T, static_cast<int64_t>(v.size()) / T}, sel);
      }
    };
  }
  // --dump-pre-round: the prompt call's tapped layers, written as they arrive.
  NpzWriter pre_round;
  Status pre_round_status;
  if (!dump_pre_round.empty()) {
    if (Status st = pre_round.open(dump_pre_round); !st.ok()) {
      std::fprintf(stderr, "dsv4 run: %s\n", st.to_string().c_str());
      return 1;
    }
    bc.pre_round_layers.assign(pre_round_layers.begin(), pre_round_layers.end());
    bc.pre_round_probe = [&](int layer, const char* name, int64_t rows, const std::vector<double>& v) {
      if (!in_prompt || !pre_round_status.ok() || rows <= 0) return;
      const std::string key = fmt::format("{}_{:02d}", name, layer);
      const std::vector<int64_t> shape{rows, static_cast<int64_t>(v.size()) / rows};
      if (ref64) {
        pre_round_status = pre_round.add_f64(key, shape, v);
      } else {
        const std::vector<float> f(v.begin(), v.end());  // float values widened to double: exact
        pre_round_status = pre_round.add_f32(key, shape, f);
      }
    };
  }
  auto fwd = make_stream_forward(bc, weights);
  if (!fwd.ok()) {
    std::fprintf(stderr, "dsv4 run: %s\n", fwd.status().to_string().c_str());
    return 1;
  }
  engine::StreamForward& o = **fwd;
  const int64_t V = o.config().vocab;
  auto opened = o.open_stream();
  if (!opened.ok()) {
    std::fprintf(stderr, "dsv4 run: %s\n", opened.status().to_string().c_str());
    return 1;
  }
  const int32_t s = *opened;
  std::vector<float> all;
  engine::Piece piece{s, ids, {}};
  const bool every_row = !dump.empty() || !dump_hidden.empty() || !dump_pre_round.empty();
  for (size_t i = every_row ? 0 : ids.size() - 1; i < ids.size(); ++i) piece.logit_rows.push_back(static_cast<int32_t>(i));
  const auto t0 = std::chrono::steady_clock::now();
  in_prompt = true;
  auto r = o.forward({piece});
  in_prompt = false;
  if (!r.ok()) {
    std::fprintf(stderr, "dsv4 run: %s\n", r.status().to_string().c_str());
    return 1;
  }
  // A dump file gets the prompt's ids and is closed; a failure at any point names its flag.
  auto finish_dump = [&](const std::string& path, NpzWriter& w, Status st, const char* flag) {
    if (path.empty()) return true;
    if (st.ok()) st = w.add_i32("tokens", {T}, ids);
    if (st.ok()) st = w.finish();
    if (!st.ok()) std::fprintf(stderr, "dsv4 run: %s: %s\n", flag, st.to_string().c_str());
    return st.ok();
  };
  if (!finish_dump(dump_hidden, hidden, hidden_status, "--dump-hidden") ||
      !finish_dump(dump_pre_round, pre_round, pre_round_status, "--dump-pre-round"))
    return 1;
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<float> last((*r)[0].logits.end() - V, (*r)[0].logits.end());
  if (!dump.empty()) all = (*r)[0].logits;
  const int n = forced.empty() ? max_tokens : static_cast<int>(forced.size());
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t next = forced.empty() ? argmax(last.data(), V) : forced[i];
    out.push_back(next);
    auto step = o.forward({engine::Piece{s, {next}, {0}}});
    if (!step.ok()) {
      std::fprintf(stderr, "dsv4 run: %s\n", step.status().to_string().c_str());
      return 1;
    }
    last = (*step)[0].logits;
    if (!dump.empty()) all.insert(all.end(), last.begin(), last.end());
  }
  const auto t2 = std::chrono::steady_clock::now();
  if (tok) {
    auto text = tok->decode(out);
    std::printf("%s\n", text.ok() ? text->c_str() : "(undecodable)");
  }
  std::string list;
  for (size_t i = 0; i < out.size(); ++i) list += (i ? "," : "") + std::to_string(out[i]);
  std::printf("ids: %s\n", list.c_str());
  const double pre_s = std::chrono::duration<double>(t1 - t0).count();
  const double gen_s = std::chrono::duration<double>(t2 - t1).count();
  std::fprintf(stderr, "prefill %zu tokens in %.3f s (%.1f tokens/s); %d tokens in %.3f s (%.2f tokens/s), %s, %d threads\n",
               ids.size(), pre_s, ids.size() / pre_s, n, gen_s, n > 0 ? n / gen_s : 0.0,
               backend == "cpu" ? (ref64 ? "ref64" : "ref32") : backend.c_str(),
               threads);
  if (!dump.empty() && !write_npy(dump, all, static_cast<int64_t>(all.size()) / V, V)) {
    std::fprintf(stderr, "dsv4 run: cannot write '%s'\n", dump.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

DSV4_COMMAND("run", "generate or score tokens with the CPU oracle (exact reference numerics) or on CUDA", run_main);

}  // namespace dsv4::cli
