// Internal state shared by the HTTP routes and the generation handlers (not for other modules).
#pragma once

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "server/api_error.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/schema.h"
#include "server/structured_output.h"

namespace dsv4::server {

struct Server::Core {
  explicit Core(ServerOptions o);

  ServerOptions options;
  Metrics metrics;
  SchemaLimits limits;
  httplib::Server http;
  std::thread listener;

  std::atomic<int> state{static_cast<int>(ServerState::loading)};
  std::atomic<Engine*> engine{nullptr};
  std::atomic<const TextSide*> text{nullptr};
  std::atomic<const ImageSide*> images{nullptr};
  std::atomic<int64_t> in_progress{0};
  std::atomic<int64_t> open_streams{0};

  // Drain: signals counted; the drain thread waits on cv for in_progress == 0, the deadline or a
  // second signal.
  std::mutex drain_mu;
  std::condition_variable drain_cv;
  int drain_requests = 0;
  std::thread drainer;
  std::atomic<bool> stopped{false};

  ConstraintCache constraints;  // response_format and strict tools as token constraints

  std::mutex rng_mu;
  std::mt19937_64 rng;

  uint64_t random_u64();
  std::string random_id(const char* prefix);  // prefix + 24 hex digits
  ServerState current_state() const { return static_cast<ServerState>(state.load()); }
  void request_done();  // in_progress -1, wakes the drain thread
};

void send_error(httplib::Response& res, const ApiError& error);
// POST /v1/chat/completions and /v1/completions.
void handle_generate(Server::Core& core, Endpoint endpoint, const httplib::Request& req,
                     const std::string& body, httplib::Response& res);

// The socket of this request's connection (found by its addresses), or -1.
int find_connection_fd(const httplib::Request& req);
// True when the peer has closed or reset the connection.
bool peer_closed(int fd);
// cpp-httplib 0.11 (a compiled library) listens with a backlog of 5: a burst of connects overflows
// it and the dropped SYNs are retried a second later. Re-listens the bound socket on `port` with
// the system's maximum backlog.
void widen_listen_backlog(int port);
// Stops reading this request's connection (its unread body is not parsed as a next request).
void stop_reading(const httplib::Request& req);
// Largest body drained (read and dropped) to answer 413 cleanly; beyond it the read side closes.
inline size_t drain_cap(size_t max_body) { return max_body * 4 + (1u << 20); }

}  // namespace dsv4::server
