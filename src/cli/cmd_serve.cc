// `dsv4 serve`: the OpenAI-compatible HTTP server on a model (or, for tests, the scripted fake).
#include <CLI/CLI.hpp>

#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <cstdlib>
#include <memory>
#include <thread>

#include "family/deepseek_v41/model.h"
#include "cache/prompt_cache.h"
#include "cli/command.h"
#include "cli/fabric_serve.h"
#include "cli/memory_check.h"
#include "cli/tp_cuda.h"
#include "engine/lane_backend.h"
#include "cli/backend_choice.h"
#include "cli/image_side.h"
#include "cli/v41_text_side.h"
#include "fabric/leader.h"
#include "family/deepseek_v41/default_model.h"
#include "lanes/fake_backend.h"
#include "lanes/lane_host.h"
#include "server/fake_engine.h"
#include "server/http_server.h"
#include "server/lanes_engine.h"

namespace dsv4::cli {
namespace {

struct ServeFlags {
  server::ServerOptions server;
  std::string model_dir;
  std::string engram_shards;  // EXL3 packs: the release shards holding the Engram tables
  int32_t context = 4096;
  int32_t parallel = 4;
  int64_t kv_pool_tokens = 0;  // 0: --parallel x --context
  int64_t prompt_cache_mib = 256;
  int32_t prompt_cache_page = 64;
  int32_t step_rows = 0;   // 0: no row budget
  double step_ms = 0;      // 0: no time budget
  bool host_draws = false;    // every row whole to the host (no row reductions on the device)
  int32_t draw_threads = 4;   // host threads drawing whole rows
  bool fake_engine = false;
  bool lanes_fake_backend = false;
  std::string backend = "cpu";
  int32_t synthetic_layers = 0;          // benchmarks: full-width synthetic V4.1 layers on the GPU (no model files)
  int32_t synthetic_decoder_layers = 0;
  server::FakeEngineOptions fake;
  int32_t fake_load_ms = 0;
  double image_fetch_timeout = 15;  // seconds (server.images.fetch_timeout)
  FabricFlags fabric;  // --tp and the rank flags (cli/fabric_serve.h)
  MemoryFlags memory;  // --gpu-memory, --host-memory, --engram (cli/memory_check.h)
};

void add_flags(CLI::App& app, ServeFlags& f) {
  server::ServerOptions& o = f.server;
  app.add_option("--model", f.model_dir,
                 "checkpoint folder (config.json + safetensors); default: the embedded tiny model");
  app.add_option("--engram-shards", f.engram_shards,
                 "EXL3 packs: folder of the original release shards holding the Engram tables (checked first)");
  app.add_option("--backend", f.backend, "cpu (the oracle) or cuda (NVIDIA GPU; builds with CUDA only)")
      ->capture_default_str();
  app.add_option("--context", f.context, "positions per request (prompt + reply) on a model")
      ->capture_default_str()
      ->check(CLI::Range(16, 1 << 20));
  app.add_option("--parallel", f.parallel, "requests decoded together on a model")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--kv-pool-tokens", f.kv_pool_tokens,
                 "--backend cuda: positions the device KV pool holds for all requests together (in pages of 256 "
                 "positions); a request waits until the pool has room for its prompt plus max_tokens; 0 = "
                 "--parallel x --context (every request at the full context)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 34));
  app.add_option("--prompt-cache-mib", f.prompt_cache_mib,
                 "RAM for prompt-cache snapshots (a prompt that repeats a cached prefix resumes "
                 "there; usage reports the cached tokens); 0 turns the cache off")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_option("--prompt-cache-page", f.prompt_cache_page,
                 "prompt-cache page in tokens: prefixes are cached at multiples of it")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--step-rows", f.step_rows,
                 "rows per engine step, decoding rows and prompt chunk together: the decoding streams' rows go "
                 "first and a prompt being filled takes what they leave (at least 64 rows a step, or half of "
                 "--step-rows when that is smaller), so a long prompt "
                 "does not hold every decoding stream's next token for a whole prefill chunk; 0 = off (a prompt "
                 "takes its full chunk every step); otherwise at least --parallel")
      ->capture_default_str();
  app.add_option("--step-ms", f.step_ms,
                 "target time of one engine step: the prompt chunk is sized from the measured cost of a prompt row "
                 "and of a decoding row so that the step's predicted time stays within it (at least 64 prompt rows "
                 "a step); 0 = off; combines with --step-rows (the smaller chunk wins)")
      ->capture_default_str();
  app.add_option("--host", o.host, "address to bind; 0.0.0.0 exposes the server to the network")
      ->capture_default_str();
  app.add_option("--port", o.port, "TCP port; 0 picks a free one (printed on stderr)")
      ->capture_default_str();
  app.add_option("--served-model-name", o.model_name,
                 "the model id clients send and /v1/models lists")
      ->capture_default_str();
  app.add_option("--alias", o.model_aliases, "further accepted model ids (repeatable)");
  app.add_option("--api-key", o.api_key,
                 "require 'Authorization: Bearer KEY' on /v1/* (also $DSV4_API_KEY); /health and "
                 "/metrics stay open");
  app.add_option("--max-body-bytes", o.max_body_bytes, "largest request body accepted (413 above)")
      ->capture_default_str();
  app.add_option("--max-prompt-tokens", o.max_prompt_tokens,
                 "longest prompt accepted in tokens; 0: the model's context length")
      ->capture_default_str();
  app.add_option("--max-tokens", o.max_tokens,
                 "largest max_tokens a request may ask for; also the default when it asks none")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--max-queue", o.max_queue,
                 "generation requests in progress (running + waiting); more get 429")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--drain-seconds", o.drain_seconds,
                 "on SIGTERM/SIGINT, how long in-flight requests may finish before the engine "
                 "halts; a second signal halts at once")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--sse-keepalive-seconds", o.keepalive_seconds,
                 "interval of ': keepalive' SSE comments while a stream waits for its first token")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 3600.0));
  app.add_option("--http-threads", o.http_threads,
                 "connection threads; 0: max-queue + 32 (each open connection holds one)")
      ->capture_default_str();
  app.add_option("--max-images", o.images.max_images,
                 "image_url parts a chat request may hold (models that read images)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  app.add_option("--max-image-tokens", o.images.max_image_tokens,
                 "prompt positions all of a request's images may take together (each image is a span of up to "
                 "vision_config.max_image_tokens positions)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--max-image-bytes", o.images.max_image_bytes,
                 "encoded bytes of one image (a data: URL's payload or a fetched body)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 32));
  app.add_option("--max-image-pixels", o.images.max_image_pixels,
                 "width x height one image may declare; larger ones are refused before decoding (decompression bombs)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_flag("--host-draws", f.host_draws,
               "copy every logits row to the host and draw there (default: rows needing only a token - greedy, or "
               "sampling without top-k/top-p/min-p, logprobs or a token mask - are reduced on the device; the same "
               "tokens either way)");
  app.add_option("--draw-threads", f.draw_threads, "host threads drawing the rows that come whole (same tokens)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_flag("--allow-image-urls", o.images.allow_urls,
               "fetch http(s) image URLs (public addresses only, no redirects, limited by --max-image-bytes and "
               "--image-fetch-timeout); without it only data: URLs are accepted");
  app.add_option("--image-fetch-timeout", f.image_fetch_timeout,
                 "seconds one image fetch may take, from connecting to the last byte")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 600.0));
  // Benchmarks only (hidden): full-width V4.1 layers with weights generated on the GPU, as `dsv4 bench` builds them.
  app.add_option("--synthetic-layers", f.synthetic_layers)->group("");
  app.add_option("--synthetic-decoder-layers", f.synthetic_decoder_layers)->group("");
  // Test-only: serve the scripted fake engine (server/fake_engine.h) instead of a model.
  app.add_flag("--fake-engine", f.fake_engine,
               "FOR TESTS ONLY: serve a scripted fake engine with byte tokens, not a model");
  app.add_flag("--lanes-fake-backend", f.lanes_fake_backend,
               "FOR TESTS ONLY: the real lane core and V4.1 tokenizer/chat over the lane core's "
               "hash backend (no weights): random text, exact engine behaviour");
  app.add_option("--fake-token-ms", f.fake.token_ms, "FOR TESTS ONLY: fake engine round time")
      ->capture_default_str();
  app.add_option("--fake-prefill-ms", f.fake.prefill_ms,
                 "FOR TESTS ONLY: fake engine delay before the first token")
      ->capture_default_str();
  app.add_option("--fake-parallel", f.fake.parallel, "FOR TESTS ONLY: fake engine requests per round")
      ->capture_default_str();
  app.add_option("--fake-context", f.fake.context_length, "FOR TESTS ONLY: fake context length")
      ->capture_default_str();
  app.add_option("--fake-load-ms", f.fake_load_ms,
                 "FOR TESTS ONLY: time the fake spends 'loading' (health says loading)")
      ->capture_default_str();
  add_fabric_flags(app, f.fabric);
  add_memory_flags(app, f.memory);
}

// The step budget's flags: off (0) or sane, with a message naming the flag otherwise.
Status check_step_budget(const ServeFlags& f, int32_t parallel, const char* parallel_flag) {
  constexpr int32_t kMaxStepRows = 1 << 20;
  constexpr double kMaxStepMs = 60'000;
  if (f.step_rows < 0 || f.step_rows > kMaxStepRows)
    return error(StatusCode::invalid_argument, "--step-rows {} is outside [0, {}] (0 turns the row budget off)",
                 f.step_rows, kMaxStepRows);
  if (f.step_rows > 0 && f.step_rows < std::max(2, parallel))
    return error(StatusCode::invalid_argument,
                 "--step-rows {} is below {}: every decoding stream takes at least one row a step ({} {}) "
                 "and a forced token two; use 0 (off) or at least {}",
                 f.step_rows, std::max(2, parallel), parallel_flag, parallel, std::max(2, parallel));
  if (!(f.step_ms >= 0 && f.step_ms <= kMaxStepMs))
    return error(StatusCode::invalid_argument, "--step-ms {} is outside [0, {}] milliseconds (0 turns the time "
                 "budget off)", f.step_ms, kMaxStepMs);
  return ok_status();
}

// The lane host's step budget from the flags (checked by check_step_budget).
void set_step_budget(const ServeFlags& f, lanes::LaneHostOptions& ho) {
  ho.step_rows = f.step_rows;
  ho.step_ns = static_cast<int64_t>(f.step_ms * 1e6 + 0.5);
}

// What serving a model of `model_id` with drafts of up to `depth` tokens asks of the lane adapter and the backend: the
// flags' streams, context and draws; verify rows for every decoding stream's window (its pending row and up to `depth`
// drafts) each round, at least the lane adapter's default of 64; a step's rows for its prompt pieces and windows
// together; a KV pool of --parallel streams and --kv-pool-tokens positions.
struct ServeBackend {
  engine::LaneBackendOptions lane;
  BackendChoice choice;
};
ServeBackend serve_backend(const ServeFlags& flags, std::string model_id, int32_t eos, int32_t depth) {
  ServeBackend b;
  engine::LaneBackendOptions& bo = b.lane;
  bo.model_id = std::move(model_id);
  bo.eos_ids = {eos};
  bo.max_context = flags.context;
  bo.max_streams = flags.parallel;
  bo.max_verify_rows = std::max(64, flags.parallel * (1 + std::max(0, depth)));
  bo.reduce_rows = !flags.host_draws;
  bo.draw_threads = flags.draw_threads;
  BackendChoice& bc = b.choice;
  bc.name = flags.backend;
  bc.max_context = flags.context;
  bc.max_call_rows = bo.max_prefill_rows + bo.max_verify_rows;
  bc.kv_pool_streams = flags.parallel;
  bc.kv_pool_positions = flags.kv_pool_tokens;
  return b;
}

// Benchmarks: full-width V4.1 layers with synthetic weights generated on the GPU (make_synthetic_stream_forward), served
// with the V4.1 tokenizer and chat format; no files, no memory plan, no images.
Status load_synthetic(const ServeFlags& flags, server::TextSide& text, std::unique_ptr<lanes::Backend>& backend,
                      std::string* resolved_dir) {
  if (flags.backend != "cuda") return error(StatusCode::invalid_argument, "--synthetic-layers needs --backend cuda");
  DSV4_ASSIGN_OR_RETURN(text, make_v41_text_side(flags.context, chat::ChatFormat::v41));
  DSV4_ASSIGN_OR_RETURN(int32_t eos, v41_eos_id());
  // The synthetic layers have no drafter.
  auto [bo, bc] = serve_backend(flags, fmt::format("synthetic-v41-{}+{}", flags.synthetic_layers,
                                                   flags.synthetic_decoder_layers), eos, 0);
  family::ModelPlan plan;
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<engine::StreamForward> fwd,
                        make_synthetic_stream_forward(bc, flags.synthetic_layers, flags.synthetic_decoder_layers, &plan));
  DSV4_ASSIGN_OR_RETURN(backend, engine::LaneBackend::create(std::move(fwd), bc.max_rollback, bo));
  if (resolved_dir != nullptr) *resolved_dir = bo.model_id;
  std::fprintf(stderr, "dsv4 serve: %s: %d full-width V4.1 layers with synthetic weights on %s, context %d, %d parallel\n",
               bo.model_id.c_str(), plan.n_layers, backend_description(bc).c_str(), flags.context, flags.parallel);
  return ok_status();
}

// Loads the checkpoint (the embedded default model when --model is absent) onto the CPU oracle,
// printing progress and a one-line summary on stderr.
Status load_model(const ServeFlags& flags, server::TextSide& text,
                  std::unique_ptr<lanes::Backend>& backend, std::string* resolved_dir = nullptr,
                  fabric::Control* control = nullptr, server::ImageSide* images = nullptr) {
  namespace fs = std::filesystem;
  if (flags.synthetic_layers > 0) return load_synthetic(flags, text, backend, resolved_dir);
  std::string dir = flags.model_dir;
  if (dir.empty()) {
    std::fprintf(stderr, "dsv4 serve: no --model: using the embedded default model (tiny V4.1)\n");
    DSV4_ASSIGN_OR_RETURN(dir, family::ensure_default_model([](const family::SynthProgress& p) {
      std::fprintf(stderr, "dsv4 serve: writing the default model: shard %d/%d, %.1f/%.1f MiB\n",
                   p.shard, p.num_shards, p.bytes_done / 1048576.0, p.bytes_total / 1048576.0);
    }));
  }
  if (resolved_dir != nullptr) *resolved_dir = dir;
  int64_t bytes = 0, files = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") bytes += static_cast<int64_t>(e.file_size(ec)), ++files;
  std::fprintf(stderr, "dsv4 serve: loading %s (%lld safetensors files, %.1f MiB)\n", dir.c_str(),
               static_cast<long long>(files), bytes / 1048576.0);
  const auto t0 = std::chrono::steady_clock::now();
  DSV4_ASSIGN_OR_RETURN(std::shared_ptr<const family::Model> model,
                        family::open_model(dir, family::OpenOptions{flags.engram_shards}));
  for (const std::string& n : model->notes) std::fprintf(stderr, "dsv4 serve: note: %s\n", n.c_str());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const family::Config& c = model->config;
  DSV4_ASSIGN_OR_RETURN(text, make_v41_text_side(flags.context, c.variant == family::Variant::v41
                                                                    ? chat::ChatFormat::v41
                                                                    : chat::ChatFormat::v4));
  DSV4_ASSIGN_OR_RETURN(int32_t eos, v41_eos_id());
  if (c.vocab_size < text.vocab_size)
    return error(StatusCode::invalid_argument, "{}: vocab {} is smaller than the tokenizer's {}",
                 dir, c.vocab_size, text.vocab_size);
  auto [bo, bc] = serve_backend(flags, fs::weakly_canonical(dir, ec).string(), eos, c.dspark_block_size);
  bc.pin_engram = flags.memory.engram == "pinned";
  bc.log_prefix = "dsv4 serve: ";
  if (bc.name == "cuda") {
    // The memory plan before anything is allocated (every rank checks; rank 0 prints it).
    ServeShape shape;
    shape.tp = control != nullptr ? control->world() : 1;
    shape.context = flags.context;
    shape.parallel = flags.parallel;
    shape.kv_pool_tokens = flags.kv_pool_tokens;
    shape.call_rows = bc.max_call_rows;
    shape.prompt_cache_bytes = flags.prompt_cache_mib << 20;
    shape.vision_tower = images != nullptr && shape.tp == 1 && model->config.vision.has_value() &&
                         vision_tower_on_device(bc);
    std::FILE* out = control == nullptr || control->rank() == 0 ? stderr : nullptr;
    std::FILE* sink = out ? out : std::fopen("/dev/null", "w");
    const Status fits = check_memory(*model, shape, flags.memory, sink);
    if (!out && sink) std::fclose(sink);
    DSV4_RETURN_IF_ERROR(fits.with_context(dir));
  }
  // --tp N --backend cuda: this rank's slice on its GPU, joined over NCCL (the CPU oracle runs replicated).
  if (control != nullptr && control->world() > 1 && bc.name == "cuda")
    DSV4_RETURN_IF_ERROR(prepare_tensor_parallel_cuda(*control, model, bc));
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<engine::StreamForward> fwd, make_stream_forward(bc, model));
  DSV4_ASSIGN_OR_RETURN(backend, engine::LaneBackend::create(std::move(fwd), bc.max_rollback, bo));
  if (images != nullptr) {
    // Images: the model's vision weights and the backend's tower; the fabric's plans carry tokens only.
    *images = make_image_side(
        *model, control != nullptr && control->world() > 1
                    ? StatusOr<std::unique_ptr<engine::VisionTower>>(error(
                          StatusCode::unavailable, "images are not served with --tp above 1 (plans carry tokens only)"))
                    : make_vision_tower(bc, model));
    std::fprintf(stderr, "dsv4 serve: images: %s\n",
                 images->ready()            ? "served"
                 : images->accepts_images ? images->unavailable.c_str()
                                          : ("refused: " + images->unavailable).c_str());
  }
  std::fprintf(stderr,
               "dsv4 serve: loaded %s in %.2f s: %zu tensors, %d layers, dim %lld, vocab %lld, %s, context %d, "
               "%d parallel\n",
               dir.c_str(), s, model->table.tensors.size(), c.num_hidden_layers, static_cast<long long>(c.hidden_size),
               static_cast<long long>(c.vocab_size), backend_description(bc).c_str(), flags.context, flags.parallel);
  return ok_status();
}

// The settings every rank must share (besides the model and build; see serve_identity).
std::vector<std::pair<std::string, std::string>> rank_settings(const ServeFlags& f) {
  return {{"tp", std::to_string(f.fabric.tp)}, {"context", std::to_string(f.context)},
          {"parallel", std::to_string(f.parallel)}};
}

// A follower rank: load, agree, then run rank 0's plans until it stops (no HTTP).
int serve_follower(const ServeFlags& flags, fabric::Control& control) {
  server::TextSide text;
  std::unique_ptr<lanes::Backend> backend;
  std::string dir;
  if (Status st = load_model(flags, text, backend, &dir, &control); !st.ok()) {
    control.fail(fabric::kExitStartup, fmt::format("rank {} could not load the model: {}", control.rank(), st.to_string()));
    return fabric::kExitStartup;
  }
  if (Status st = fabric::agree(control, serve_identity(dir, backend->info(), rank_settings(flags))); !st.ok())
    return fabric::kExitAgreement;
  const int code = run_follower_rank(control, *backend, flags.fabric);
  // The process exit releases the device state (CUDA graphs, the NCCL communicator): tearing it down here could
  // wait on rank 0, which is waiting for this rank to exit.
  std::fflush(nullptr);
  std::_Exit(code);
}

int run_serve(int argc, char** argv) {
  // SIGTERM/SIGINT go to one waiting thread (blocked here, before any thread starts, so every
  // thread inherits the mask); SIGPIPE from a vanished client is ignored (writes report it).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  CLI::App app{"dsv4 serve - OpenAI-compatible server: /v1/chat/completions, /v1/completions, "
               "/v1/models, /health, /metrics",
               "dsv4 serve"};
  ServeFlags flags;
  add_flags(app, flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (flags.server.api_key.empty())
    if (const char* k = std::getenv("DSV4_API_KEY")) flags.server.api_key = k;
  flags.server.images.fetch_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(flags.image_fetch_timeout * 1000.0 + 0.5));

  if (Status st = flags.lanes_fake_backend ? check_step_budget(flags, flags.fake.parallel, "--fake-parallel")
                                            : check_step_budget(flags, flags.parallel, "--parallel");
      !st.ok()) {
    std::fprintf(stderr, "dsv4 serve: %s\n", st.message().c_str());
    return 1;
  }

  // Tensor parallelism: rank processes meet before anything else; followers never serve HTTP.
  std::unique_ptr<fabric::Control> control;
  std::unique_ptr<RankLauncher> launcher;
  if (flags.fabric.tp > 1) {
    if (flags.fake_engine || flags.lanes_fake_backend) {
      std::fprintf(stderr, "dsv4 serve: --tp %d needs a model; the test engines run on one rank\n", flags.fabric.tp);
      return 1;
    }
    StatusOr<std::unique_ptr<fabric::Control>> c = start_fabric(flags.fabric, argc, argv, &launcher);
    if (!c.ok()) {
      std::fprintf(stderr, "dsv4 serve: fabric: %s\n", c.status().to_string().c_str());
      return fabric::bootstrap_exit_code(c.status());
    }
    control = std::move(c).value();
    if (control->rank() > 0) return serve_follower(flags, *control);
  } else if (flags.fabric.rank > 0) {
    std::fprintf(stderr, "dsv4 serve: --rank %d needs --tp above it\n", flags.fabric.rank);
    return 1;
  }

  server::Server srv(flags.server);
  if (Status s = srv.bind(); !s.ok()) {
    std::fprintf(stderr, "dsv4 serve: %s\n", s.to_string().c_str());
    if (control) control->fail(fabric::kExitStartup, "rank 0 cannot serve HTTP: " + s.to_string());
    return 1;
  }
  srv.start();
  std::fprintf(stderr, "dsv4 serve: listening on http://%s:%d (loading)\n",
               flags.server.host.c_str(), srv.port());
  std::thread([&srv, signals] {
    for (;;) {
      int sig = 0;
      if (sigwait(&signals, &sig) != 0) continue;
      std::fprintf(stderr, "dsv4 serve: %s received\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      srv.request_drain();
    }
  }).detach();

  // Declared in teardown order: the adapter before the lane host before its backend.
  std::unique_ptr<lanes::Backend> backend;
  std::unique_ptr<fabric::LeaderBackend> leader;  // tp > 1: rank 0's plans to every rank
  std::unique_ptr<cache::PromptCache> prompt_cache;
  std::unique_ptr<lanes::LaneHost> host;
  std::unique_ptr<server::Engine> engine;
  server::TextSide text;
  server::ImageSide images;
  bool model_images = false;  // serving a model: it answers for images (else the test engines: none)
  std::this_thread::sleep_for(std::chrono::milliseconds(flags.fake_load_ms));
  if (!flags.fake_engine && !flags.lanes_fake_backend) {
    std::string dir;
    model_images = true;
    Status st = load_model(flags, text, backend, &dir, control.get(), &images);
    if (!st.ok()) {
      std::fprintf(stderr, "dsv4 serve: %s\n", st.to_string().c_str());
      if (control) control->fail(fabric::kExitStartup, "rank 0 could not load the model");
      return 1;
    }
    if (control) {
      if (!fabric::agree(*control, serve_identity(dir, backend->info(), rank_settings(flags))).ok())
        return fabric::kExitAgreement;
      leader = std::make_unique<fabric::LeaderBackend>(*control, *backend);
      std::fprintf(stderr, "dsv4 serve: fabric: %d ranks agree; rank 0 plans every round\n", flags.fabric.tp);
    }
    lanes::LaneHostOptions ho;
    ho.max_batch_streams = flags.parallel;
    ho.max_queue = flags.server.max_queue;
    lanes::Backend& serving = leader ? static_cast<lanes::Backend&>(*leader) : *backend;
    ho.token_bytes = text.output_bytes;  // stop strings are matched in the lane core
    set_step_budget(flags, ho);
    if (flags.prompt_cache_mib > 0) {
      cache::PromptCacheOptions co;
      co.page_tokens = flags.prompt_cache_page;
      co.ram_bytes = flags.prompt_cache_mib << 20;
      co.model_id = serving.info().model_id;
      co.snapshot_version = serving.info().snapshot_version;
      co.row_tables = lanes::cache_row_tables(serving.info());
      auto opened = cache::PromptCache::open(co);
      if (!opened.ok()) {
        std::fprintf(stderr, "dsv4 serve: prompt cache: %s\n", opened.status().to_string().c_str());
        if (control) control->fail(fabric::kExitStartup, "rank 0: prompt cache: " + opened.status().to_string());
        return 1;
      }
      prompt_cache = std::move(*opened);
      ho.cache = prompt_cache.get();
    }
    host = std::make_unique<lanes::LaneHost>(serving, ho);
    host->start();
    lanes::LaneHost* h = host.get();
    engine = std::make_unique<server::LanesEngine>(
        *host, [h] { h->begin_drain(std::chrono::milliseconds(0)); });
  } else if (flags.fake_engine) {
    engine = std::make_unique<server::FakeEngine>(flags.fake);
    text = server::make_fake_text_side(flags.fake.context_length);
    std::fprintf(stderr, "dsv4 serve: FAKE ENGINE (tests only): scripted replies, byte tokens\n");
  } else {
    auto t = make_v41_text_side(flags.fake.context_length, chat::ChatFormat::v41);
    auto eos = v41_eos_id();
    if (!t.ok() || !eos.ok()) {
      std::fprintf(stderr, "dsv4 serve: %s\n",
                   (t.ok() ? eos.status() : t.status()).to_string().c_str());
      return 1;
    }
    text = std::move(*t);
    lanes::FakeBackendOptions bo;
    bo.vocab_size = text.vocab_size;
    bo.eos_ids = {*eos};
    bo.max_context = flags.fake.context_length;
    bo.max_streams = flags.fake.parallel;
    bo.memory_budget_bytes = int64_t{1} << 40;
    bo.max_prefill_rows = 2048;
    bo.max_verify_rows = 256;
    backend = std::make_unique<lanes::FakeBackend>(bo);
    lanes::LaneHostOptions ho;
    ho.max_batch_streams = flags.fake.parallel;
    ho.max_queue = flags.server.max_queue;
    ho.token_bytes = text.output_bytes;
    set_step_budget(flags, ho);
    host = std::make_unique<lanes::LaneHost>(*backend, ho);
    host->start();
    lanes::LaneHost* h = host.get();
    engine = std::make_unique<server::LanesEngine>(
        *host, [h] { h->begin_drain(std::chrono::milliseconds(0)); });
    std::fprintf(stderr,
                 "dsv4 serve: LANE CORE over the hash test backend (tests only): V4.1 tokenizer, "
                 "vocab %d, context %d, no weights\n",
                 text.vocab_size, text.context_length);
  }

  srv.set_ready(engine.get(), &text, model_images ? &images : nullptr);
  std::fprintf(stderr, "dsv4 serve: ready on http://%s:%d model '%s'\n", flags.server.host.c_str(),
               srv.port(), flags.server.model_name.c_str());
  std::fflush(stderr);
  srv.wait();
  int code = 0;
  if (leader) {
    // The lane host has halted at a round boundary; every rank stops after the same plan.
    host->stop();
    if (launcher) launcher->expect_exit();
    Status st = leader->stop();
    const fabric::FabricCounters& n = leader->counters();
    std::fprintf(stderr, "dsv4 serve: fabric: rank 0 stopped after %llu plans, %llu ops (trace %016llx)%s%s\n",
                 static_cast<unsigned long long>(n.plans), static_cast<unsigned long long>(n.ops),
                 static_cast<unsigned long long>(n.trace_digest), st.ok() ? "" : ": ", st.ok() ? "" : st.to_string().c_str());
    if (!st.ok()) code = fabric::kExitDiverged;
    if (launcher) {
      const int children = launcher->wait_all(std::chrono::seconds(10));
      if (code == 0) code = children;
    }
  }
  std::fprintf(stderr, "dsv4 serve: stopped\n");
  return code;
}

}  // namespace

DSV4_COMMAND("serve", "OpenAI-compatible HTTP server (chat, completions, models, health, metrics)",
             run_serve);

}  // namespace dsv4::cli
