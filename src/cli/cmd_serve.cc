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
#include "server/fake_engine.h"
#include "server/http_server.h"

namespace dsv4::cli {
namespace {

struct ServeFlags {
  server::ServerOptions server;
  std::string model_dir;
  bool fake_engine = false;
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

  if (!flags.fake_engine) {
    std::fprintf(stderr,
                 "dsv4 serve: this build cannot run a model yet (the engine is not wired into the "
                 "server); only --fake-engine (for tests) is available\n");
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

  std::unique_ptr<server::Engine> engine;
  server::TextSide text;
  std::this_thread::sleep_for(std::chrono::milliseconds(flags.fake_load_ms));
  engine = std::make_unique<server::FakeEngine>(flags.fake);
  text = server::make_fake_text_side(flags.fake.context_length);
  std::fprintf(stderr, "dsv4 serve: FAKE ENGINE (tests only): scripted replies, byte tokens\n");

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
