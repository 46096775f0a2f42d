// The OpenAI-compatible HTTP server: routes, auth, limits, health, metrics, drain.
//
// Lifecycle: bind() -> start() (serving; /health says "loading") -> set_ready(engine, text) ->
// request_drain() on SIGTERM/SIGINT (new generation requests get 503 + Retry-After, in-flight ones
// finish until drain_seconds, then the engine halts; a second call cuts the wait short) -> wait().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/engine.h"
#include "server/image_side.h"
#include "server/text_side.h"

namespace dsv4::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                       // 0: any free port (see port())
  std::string model_name = "deepseek-v4";
  std::vector<std::string> model_aliases;
  std::string api_key;                   // non-empty: /v1/* need "Authorization: Bearer KEY"
  size_t max_body_bytes = 8u << 20;
  int32_t max_prompt_tokens = 0;         // 0: the model's context length
  int32_t max_tokens = 4096;             // per request; also the default when max_tokens is absent
  int32_t max_queue = 64;                // generation requests in progress (running + waiting)
  double drain_seconds = 30;
  double keepalive_seconds = 5;          // SSE comment interval before the first token
  int32_t http_threads = 0;              // 0: max_queue + 32
  ImageOptions images;                   // limits on images in chat messages
};

enum class ServerState { loading = 0, ready = 1, draining = 2, stopped = 3 };

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  Status bind();
  int port() const;
  void start();  // serves on a background thread
  // Loading is over: generation requests go to `engine`, text through `text`, images through `images` (null: the
  // model reads no images); all outlive this.
  void set_ready(Engine* engine, const TextSide* text, const ImageSide* images = nullptr);
  // Starts a drain (first call) or cuts it short (later calls). Safe from any thread.
  void request_drain();
  // Blocks until the server has drained and stopped.
  void wait();
  ServerState state() const;

  struct Core;

 private:
  std::unique_ptr<Core> core_;
};

}  // namespace dsv4::server
