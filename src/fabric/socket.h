// TCP for the control channel: listen, connect with retry until a deadline, and whole-frame send/receive
// where every wait is bounded by a deadline (poll), so no call can block forever.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "fabric/wire.h"

namespace dsv4::fabric {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline Deadline deadline_in(std::chrono::milliseconds ms) { return Clock::now() + ms; }

// An owned socket descriptor (closed on destruction).
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  ~Socket() { close(); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();
  // Wakes any thread blocked on this socket (poll returns) without closing the descriptor.
  void shutdown();

  // Sends the whole frame or fails (unavailable) by `deadline`; the caller serialises senders.
  Status send_frame(FrameKind kind, std::span<const uint8_t> payload, Deadline deadline);
  // Receives one whole frame: deadline_exceeded-like `unavailable` "timed out" when nothing complete came by
  // `deadline`, `unavailable` "hung up" on EOF/reset, data_loss on a bad header.
  StatusOr<Frame> recv_frame(Deadline deadline);
  // Waits until bytes are readable (or hang-up) or the deadline; true when readable.
  bool wait_readable(Deadline deadline);

 private:
  Status send_all(const uint8_t* p, size_t n, Deadline deadline);
  Status recv_all(uint8_t* p, size_t n, Deadline deadline, bool first);
  int fd_ = -1;
};

// A listening socket on `host:port` (port 0 picks a free one; see bound_port).
StatusOr<Socket> listen_tcp(const std::string& host, uint16_t port, int backlog);
StatusOr<uint16_t> bound_port(const Socket& s);
// Accepts one connection or times out (unavailable) at the deadline.
StatusOr<Socket> accept_tcp(const Socket& listener, Deadline deadline);
// Connects, retrying every `retry` until the deadline; the last error is named when it passes.
StatusOr<Socket> connect_tcp(const std::string& host, uint16_t port, Deadline deadline,
                             std::chrono::milliseconds retry = std::chrono::milliseconds(100));

// True when a receive failed because the deadline passed (nothing wrong with the peer yet).
bool is_timeout(const Status& s);

}  // namespace dsv4::fabric
