// `dsv4 serve`: the OpenAI-compatible HTTP server on a model (or, for tests, the scripted fake).
#include <CLI/CLI.hpp>

#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "cli/command.h"
#include "cli/v41_text_side.h"
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
  bool fake_engine = false;
  bool lanes_fake_backend = false;
  server::FakeEngineOptions fake;
  int32_t fake_load_ms = 0;
};

void add_flags(CLI::App& app, ServeFlags& f) {
  server::ServerOptions& o = f.server;
  app.add_option("--model", f.model_dir,
                 "checkpoint folder (config.json + safetensors); default: the embedded tiny model");
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

  if (!flags.fake_engine && !flags.lanes_fake_backend) {
    std::fprintf(stderr,
                 "dsv4 serve: this build cannot run model weights yet (no model backend is wired "
                 "into the lane core); only the test modes --fake-engine and --lanes-fake-backend "
                 "are available\n");
    return 2;
  }

  server::Server srv(flags.server);
  if (Status s = srv.bind(); !s.ok()) {
    std::fprintf(stderr, "dsv4 serve: %s\n", s.to_string().c_str());
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
  std::unique_ptr<lanes::FakeBackend> backend;
  std::unique_ptr<lanes::LaneHost> host;
  std::unique_ptr<server::Engine> engine;
  server::TextSide text;
  std::this_thread::sleep_for(std::chrono::milliseconds(flags.fake_load_ms));
  if (flags.fake_engine) {
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

  srv.set_ready(engine.get(), &text);
  std::fprintf(stderr, "dsv4 serve: ready on http://%s:%d model '%s'\n", flags.server.host.c_str(),
               srv.port(), flags.server.model_name.c_str());
  std::fflush(stderr);
  srv.wait();
  std::fprintf(stderr, "dsv4 serve: stopped\n");
  return 0;
}

}  // namespace

DSV4_COMMAND("serve", "OpenAI-compatible HTTP server (chat, completions, models, health, metrics)",
             run_serve);

}  // namespace dsv4::cli
