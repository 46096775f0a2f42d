// Routes (/v1/chat/completions, /v1/completions, /v1/models, /health, /metrics), bearer auth,
// body limits, OpenAI-shaped errors for every refusal, and the drain sequence.
#include "server/http_server.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "server/responses.h"
#include "server/server_core.h"

namespace dsv4::server {
namespace {

using json = nlohmann::json;

const char* state_name(ServerState s) {
  switch (s) {
    case ServerState::loading: return "loading";
    case ServerState::ready: return "ready";
    case ServerState::draining: return "draining";
    case ServerState::stopped: return "stopped";
  }
  return "unknown";
}

// Constant-time comparison, so the key cannot be guessed byte by byte from timings.
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size() || b.empty()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// Metric label for a path: the routes, or "other" (so random paths cannot grow the series).
std::string endpoint_label(const std::string& path) {
  static const char* kKnown[] = {"/v1/chat/completions", "/v1/completions", "/v1/models",
                                 "/health", "/metrics"};
  for (const char* k : kKnown)
    if (path == k) return k;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models";
  return "other";
}

ApiError too_large(size_t max) {
  ApiError e;
  e.http_status = 413;
  e.message = fmt::format("the request body is larger than this server accepts ({} bytes)", max);
  e.code = "request_too_large";
  return e;
}

}  // namespace

Server::Core::Core(ServerOptions o)
    : options(std::move(o)), metrics(options.model_name), rng(std::random_device{}()) {
  limits.model_names.push_back(options.model_name);
  for (const auto& a : options.model_aliases) limits.model_names.push_back(a);
  limits.max_tokens = options.max_tokens;
  limits.max_images = options.images.max_images;
}

uint64_t Server::Core::random_u64() {
  std::lock_guard<std::mutex> lock(rng_mu);
  return rng();
}

std::string Server::Core::random_id(const char* prefix) {
  uint64_t a = random_u64(), b = random_u64();
  return fmt::format("{}{:016x}{:08x}", prefix, a, static_cast<uint32_t>(b));
}

void Server::Core::request_done() {
  in_progress.fetch_sub(1);
  std::lock_guard<std::mutex> lock(drain_mu);
  drain_cv.notify_all();
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  if (e.http_status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(e.body(), "application/json");
}

Server::Server(ServerOptions options) : core_(std::make_unique<Core>(std::move(options))) {
  Core& c = *core_;
  httplib::Server& http = c.http;
  const size_t threads = c.options.http_threads > 0 ? c.options.http_threads
                                                    : static_cast<size_t>(c.options.max_queue) + 32;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(drain_cap(c.options.max_body_bytes));
  http.set_keep_alive_max_count(1000);
  http.set_read_timeout(10, 0);
  http.set_write_timeout(10, 0);
  http.set_tcp_nodelay(true);

  http.set_pre_routing_handler([&c](const httplib::Request& req, httplib::Response& res) {
    if (c.current_state() == ServerState::draining) res.set_header("Connection", "close");
    // A Content-Length that is not a number, or beyond what would be drained, is refused before
    // any body is read (and the rest of the connection is not read either).
    if (req.has_header("Content-Length")) {
      const std::string v = req.get_header_value("Content-Length");
      bool digits = !v.empty() && v.size() <= 18 &&
                    v.find_first_not_of("0123456789") == std::string::npos;
      if (!digits || std::stoull(v) > drain_cap(c.options.max_body_bytes)) {
        res.set_header("Connection", "close");
        send_error(res, digits ? too_large(c.options.max_body_bytes)
                               : bad_request("", "invalid Content-Length header"));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (c.options.api_key.empty() || req.path.rfind("/v1/", 0) != 0)
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (auth.size() > prefix.size() && auth.compare(0, prefix.size(), prefix) == 0 &&
        same_secret(auth.substr(prefix.size()), c.options.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.http_status = 401;
    e.message = "missing or incorrect API key (send 'Authorization: Bearer KEY')";
    e.code = "invalid_api_key";
    send_error(res, e);
    return httplib::Server::HandlerResponse::Handled;
  });

  // Fills an OpenAI-shaped body into refusals made by the HTTP layer itself (404, 413, 400).
  http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req,
                                                                 httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.http_status = res.status;
    if (res.status == 404) {
      e.message = fmt::format("no route for {} {}", req.method, req.path);
      e.code = "not_found";
    } else if (res.status == 413) {
      e.message = "the request body is larger than this server accepts";
      e.code = "request_too_large";
    } else {
      e.message = fmt::format("the HTTP request was refused ({})", res.status);
    }
    res.set_content(e.body(), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));

  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    ApiError e;
    e.http_status = 500;
    e.type = "server_error";
    e.message = "internal error while handling the request";
    send_error(res, e);
  });

  // Runs after the response is written: a response marked "Connection: close" (draining, or a
  // body left unread) stops the connection's reading, so the library closes it.
  http.set_logger([&c](const httplib::Request& req, const httplib::Response& res) {
    c.metrics.http_request(endpoint_label(req.path), res.status);
    if (res.get_header_value("Connection") == "close") stop_reading(req);
  });

  // Bodies are read here, not by the HTTP library, so chunked uploads obey the limit too. A body
  // over the limit is drained (up to drain_cap) and refused with 413.
  auto generate_route = [&c](Endpoint endpoint) {
    return [&c, endpoint](const httplib::Request& req, httplib::Response& res,
                          const httplib::ContentReader& reader) {
      std::string body;
      size_t seen = 0;
      const size_t max = c.options.max_body_bytes, cap = drain_cap(max);
      bool read = reader([&](const char* data, size_t n) {
        seen += n;
        if (seen <= max) body.append(data, n);
        return seen <= cap;
      });
      if (seen > max) {
        if (seen > cap) res.set_header("Connection", "close");
        return send_error(res, too_large(max));
      }
      if (!read) {
        res.set_header("Connection", "close");
        return send_error(res, bad_request("", "the request body could not be read"));
      }
      handle_generate(c, endpoint, req, body, res);
    };
  };
  http.Post("/v1/chat/completions", generate_route(Endpoint::chat));
  http.Post("/v1/completions", generate_route(Endpoint::completions));
  for (const char* path : {"/v1/chat/completions", "/v1/completions"})
    http.Get(path, [](const httplib::Request& req, httplib::Response& res) {
      ApiError e;
      e.http_status = 405;
      e.message = fmt::format("{} takes POST", req.path);
      e.code = "method_not_allowed";
      res.set_header("Allow", "POST");
      send_error(res, e);
    });

  auto model_object = [&c](const std::string& id) {
    const TextSide* text = c.text.load();
    json m{{"id", id}, {"object", "model"}, {"created", 0}, {"owned_by", "dsv4"}};
    if (text) m["max_model_len"] = text->context_length;
    // What requests may hold: "image" only while image_url parts can be served (docs/server.md, "Images").
    const ImageSide* images = c.images.load();
    m["input_modalities"] = images != nullptr && images->ready() ? json::array({"text", "image"}) : json::array({"text"});
    return m;
  };
  http.Get("/v1/models", [&c, model_object](const httplib::Request&, httplib::Response& res) {
    json data = json::array();
    for (const auto& n : c.limits.model_names) data.push_back(model_object(n));
    res.set_content(dump_json({{"object", "list"}, {"data", data}}), "application/json");
  });
  http.Get(R"(/v1/models/(.+))", [&c, model_object](const httplib::Request& req,
                                                    httplib::Response& res) {
    const std::string id = req.matches[1];
    for (const auto& n : c.limits.model_names)
      if (n == id) return res.set_content(dump_json(model_object(n)), "application/json");
    ApiError e = bad_request("model", fmt::format("The model '{}' does not exist", id),
                             "model_not_found");
    e.http_status = 404;
    send_error(res, e);
  });

  http.Get("/health", [&c](const httplib::Request&, httplib::Response& res) {
    ServerState s = c.current_state();
    Engine* engine = c.engine.load();
    EngineStats st = engine ? engine->stats() : EngineStats{};
    json j{{"status", state_name(s)},
           {"model", c.options.model_name},
           {"in_progress", c.in_progress.load()},
           {"streams_open", c.open_streams.load()},
           {"running", st.running},
           {"waiting", st.waiting}};
    res.status = s == ServerState::ready ? 200 : 503;
    if (s != ServerState::ready) res.set_header("Retry-After", "5");
    res.set_content(dump_json(j), "application/json");
  });

  http.Get("/metrics", [&c](const httplib::Request&, httplib::Response& res) {
    MetricsSnapshotInputs in;
    Engine* engine = c.engine.load();
    if (engine) in.engine = engine->stats();
    in.open_streams = c.open_streams.load();
    in.in_progress = c.in_progress.load();
    in.state = static_cast<int32_t>(c.current_state());
    res.set_content(c.metrics.render(in), "text/plain; version=0.0.4; charset=utf-8");
  });
}

Server::~Server() {
  Core& c = *core_;
  {
    std::lock_guard<std::mutex> lock(c.drain_mu);
    c.stopped.store(true);   // no new drain thread
    c.drain_requests += 2;   // a running one stops waiting
    c.drain_cv.notify_all();
  }
  c.http.stop();
  if (c.listener.joinable()) c.listener.join();
  if (c.drainer.joinable()) c.drainer.join();
}

Status Server::bind() {
  Core& c = *core_;
  if (c.options.port == 0) {
    int port = c.http.bind_to_any_port(c.options.host);
    if (port <= 0) return error(StatusCode::unavailable, "cannot bind {}:0", c.options.host);
    c.options.port = port;
  } else if (!c.http.bind_to_port(c.options.host, c.options.port)) {
    return error(StatusCode::unavailable, "cannot bind {}:{} (in use, or not an address here)",
                 c.options.host, c.options.port);
  }
  widen_listen_backlog(c.options.port);
  return ok_status();
}

int Server::port() const { return core_->options.port; }

void Server::start() {
  core_->listener = std::thread([this] { core_->http.listen_after_bind(); });
}

void Server::set_ready(Engine* engine, const TextSide* text, const ImageSide* images) {
  Core& c = *core_;
  c.limits.vocab_size = text->vocab_size;
  c.text.store(text);
  c.images.store(images);
  c.engine.store(engine);
  int expected = static_cast<int>(ServerState::loading);
  c.state.compare_exchange_strong(expected, static_cast<int>(ServerState::ready));
}

ServerState Server::state() const { return core_->current_state(); }

void Server::request_drain() {
  Core& c = *core_;
  std::unique_lock<std::mutex> lock(c.drain_mu);
  ++c.drain_requests;
  c.drain_cv.notify_all();
  if (c.drain_requests != 1 || c.stopped.load()) return;
  c.state.store(static_cast<int>(ServerState::draining));
  c.drainer = std::thread([&c] {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(c.options.drain_seconds));
    std::unique_lock<std::mutex> lock(c.drain_mu);
    std::fprintf(stderr, "dsv4 serve: draining (%lld in progress, up to %.0f s)\n",
                 static_cast<long long>(c.in_progress.load()), c.options.drain_seconds);
    c.drain_cv.wait_until(lock, deadline, [&] {
      return c.in_progress.load() == 0 || c.drain_requests > 1;
    });
    if (c.in_progress.load() > 0) {
      std::fprintf(stderr, "dsv4 serve: halting the engine with %lld requests unfinished\n",
                   static_cast<long long>(c.in_progress.load()));
      if (Engine* e = c.engine.load()) e->halt();
      // Handlers turn the halt into errors for their clients; give them a moment to send them.
      c.drain_cv.wait_for(lock, std::chrono::seconds(5), [&] { return c.in_progress.load() == 0; });
    }
    lock.unlock();
    c.state.store(static_cast<int>(ServerState::stopped));
    c.stopped.store(true);
    c.http.stop();
  });
}

void Server::wait() {
  Core& c = *core_;
  if (c.listener.joinable()) c.listener.join();
  if (c.drainer.joinable()) c.drainer.join();
}

}  // namespace dsv4::server
