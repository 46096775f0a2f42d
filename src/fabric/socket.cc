// TCP sockets with bounded waits (see socket.h).
#include "fabric/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>

namespace dsv4::fabric {
namespace {

constexpr const char* kTimedOut = "timed out";

int ms_until(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

Status errno_status(const char* what) {
  return error(StatusCode::unavailable, "{}: {}", what, std::strerror(errno));
}

StatusOr<sockaddr_in> resolve(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.empty() ? "0.0.0.0" : host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr)
    return error(StatusCode::invalid_argument, "cannot resolve '{}': {}", host, gai_strerror(rc));
  sockaddr_in addr;
  std::memcpy(&addr, res->ai_addr, sizeof(addr));
  freeaddrinfo(res);
  addr.sin_port = htons(port);
  return addr;
}

void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // plans are small and latency-bound
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

}  // namespace

bool is_timeout(const Status& s) { return s.code() == StatusCode::unavailable && s.message() == kTimedOut; }

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

bool Socket::wait_readable(Deadline deadline) {
  pollfd p{fd_, POLLIN, 0};
  for (;;) {
    const int rc = ::poll(&p, 1, ms_until(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return true;  // let the read report the error
  }
}

Status Socket::send_all(const uint8_t* p, size_t n, Deadline deadline) {
  while (n > 0) {
    const ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd q{fd_, POLLOUT, 0};
      const int rc = ::poll(&q, 1, ms_until(deadline));
      if (rc == 0) return error(StatusCode::unavailable, "send timed out (the peer does not read)");
      continue;
    }
    return errno_status("send");
  }
  return ok_status();
}

Status Socket::recv_all(uint8_t* p, size_t n, Deadline deadline, bool first) {
  bool started = !first;
  while (n > 0) {
    const ssize_t r = ::recv(fd_, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      if (started) deadline = std::max(deadline, deadline_in(std::chrono::seconds(5)));  // progress: keep going
      started = true;
      continue;
    }
    if (r == 0) return error(StatusCode::unavailable, "hung up");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      // Once a frame has begun, the rest must follow within the deadline too (a torn frame is a dead peer).
      if (!wait_readable(deadline)) {
        if (!started) return Status(StatusCode::unavailable, kTimedOut);
        return error(StatusCode::unavailable, "a frame stopped arriving mid-way");
      }
      continue;
    }
    if (errno == ECONNRESET || errno == EPIPE) return error(StatusCode::unavailable, "hung up");
    return errno_status("recv");
  }
  return ok_status();
}

Status Socket::send_frame(FrameKind kind, std::span<const uint8_t> payload, Deadline deadline) {
  uint8_t header[kHeaderBytes];
  const uint32_t magic = kFrameMagic;
  const uint16_t k = static_cast<uint16_t>(kind), reserved = 0;
  const uint64_t length = payload.size();
  std::memcpy(header, &magic, 4);
  std::memcpy(header + 4, &k, 2);
  std::memcpy(header + 6, &reserved, 2);
  std::memcpy(header + 8, &length, 8);
  DSV4_RETURN_IF_ERROR(send_all(header, kHeaderBytes, deadline));
  return send_all(payload.data(), payload.size(), deadline);
}

StatusOr<Frame> Socket::recv_frame(Deadline deadline) {
  uint8_t header[kHeaderBytes];
  DSV4_RETURN_IF_ERROR(recv_all(header, kHeaderBytes, deadline, true));
  uint32_t magic;
  uint16_t kind;
  uint64_t length;
  std::memcpy(&magic, header, 4);
  std::memcpy(&kind, header + 4, 2);
  std::memcpy(&length, header + 8, 8);
  if (magic != kFrameMagic) return error(StatusCode::data_loss, "bad frame magic {:#010x} (not a dsv4 rank?)", magic);
  if (kind < 1 || kind > static_cast<uint16_t>(FrameKind::data))
    return error(StatusCode::data_loss, "unknown frame kind {}", kind);
  if (length > kMaxPayload) return error(StatusCode::data_loss, "frame payload of {} bytes is too large", length);
  Frame f;
  f.kind = static_cast<FrameKind>(kind);
  f.payload.resize(length);
  // The payload follows its header: allow it the same deadline, at least a few seconds.
  const Deadline body = std::max(deadline, deadline_in(std::chrono::seconds(5)));
  DSV4_RETURN_IF_ERROR(recv_all(f.payload.data(), f.payload.size(), body, false));
  return f;
}

StatusOr<Socket> listen_tcp(const std::string& host, uint16_t port, int backlog) {
  DSV4_ASSIGN_OR_RETURN(sockaddr_in addr, resolve(host, port));
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return errno_status("socket");
  int one = 1;
  setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    return error(StatusCode::unavailable, "cannot listen on {}:{}: {}", host, port, std::strerror(errno));
  if (::listen(s.fd(), backlog) != 0) return errno_status("listen");
  fcntl(s.fd(), F_SETFL, fcntl(s.fd(), F_GETFL) | O_NONBLOCK);
  return s;
}

StatusOr<uint16_t> bound_port(const Socket& s) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(s.fd(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) return errno_status("getsockname");
  return ntohs(addr.sin_port);
}

StatusOr<Socket> accept_tcp(const Socket& listener, Deadline deadline) {
  for (;;) {
    const int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      tune(fd);
      return Socket(fd);
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return errno_status("accept");
    pollfd p{listener.fd(), POLLIN, 0};
    if (::poll(&p, 1, ms_until(deadline)) == 0) return Status(StatusCode::unavailable, kTimedOut);
  }
}

StatusOr<Socket> connect_tcp(const std::string& host, uint16_t port, Deadline deadline,
                             std::chrono::milliseconds retry) {
  DSV4_ASSIGN_OR_RETURN(sockaddr_in addr, resolve(host, port));
  std::string last = "no attempt";
  for (;;) {
    Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!s.valid()) return errno_status("socket");
    // Non-blocking connect bounded by the deadline (an unreachable host must not hold us for minutes).
    fcntl(s.fd(), F_SETFL, fcntl(s.fd(), F_GETFL) | O_NONBLOCK);
    int rc = ::connect(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{s.fd(), POLLOUT, 0};
      if (::poll(&p, 1, std::min(ms_until(deadline), 2000)) > 0) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      tune(s.fd());
      return s;
    }
    last = std::strerror(errno);
    if (Clock::now() + retry >= deadline)
      return error(StatusCode::unavailable, "cannot reach rank 0 at {}:{} before the deadline: {}", host, port, last);
    std::this_thread::sleep_for(retry);
  }
}

}  // namespace dsv4::fabric
