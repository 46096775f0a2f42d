// The control channel: bootstrap, receiver and heartbeat threads, fail-fast, collectives (see control.h).
#include "fabric/control.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace dsv4::fabric {
namespace {

using std::chrono::milliseconds;

int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

std::vector<uint8_t> fail_payload(int code, const std::string& reason) {
  ByteWriter w;
  w.u32(static_cast<uint32_t>(code));
  w.str(reason);
  return w.take();
}

void default_fatal(int code, const std::string& reason) {
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);
}

}  // namespace

int bootstrap_exit_code(const Status& status) {
  return status.code() == StatusCode::invalid_argument ? kExitAgreement : kExitBootstrap;
}

Control::Control(FabricOptions options) : options_(std::move(options)) {
  if (!options_.on_fatal) options_.on_fatal = default_fatal;
  peers_.resize(static_cast<size_t>(options_.world));
}

Control::~Control() {
  close();
  for (auto& p : peers_)
    if (p && p->receiver.joinable()) p->receiver.join();
  if (heartbeat_.joinable()) heartbeat_.join();
}

std::vector<int32_t> Control::peer_ranks() const {
  std::vector<int32_t> out;
  for (int32_t r = 0; r < options_.world; ++r)
    if (peers_[static_cast<size_t>(r)]) out.push_back(r);
  return out;
}

void Control::start() {
  for (int32_t r : peer_ranks()) {
    peers_[static_cast<size_t>(r)]->last_heard_ns = now_ns();
    peers_[static_cast<size_t>(r)]->receiver = std::thread([this, r] { receive_loop(r); });
  }
  heartbeat_ = std::thread([this] { heartbeat_loop(); });
}

void Control::receive_loop(int32_t r) {
  Peer& p = *peers_[static_cast<size_t>(r)];
  const int64_t timeout_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(options_.peer_timeout).count();
  while (!closed_.load() && !failed_.load()) {
    StatusOr<Frame> got = p.socket.recv_frame(deadline_in(milliseconds(100)));
    if (closed_.load() || failed_.load()) return;
    if (!got.ok()) {
      if (is_timeout(got.status())) {
        const int64_t silent = now_ns() - p.last_heard_ns.load();
        if (!p.closing.load() && silent > timeout_ns)
          fail(kExitPeerLost, fmt::format("rank {} has been silent for {:.1f} s (stopped, hung or cut off)", r,
                                          silent / 1e9));
        continue;
      }
      if (p.closing.load()) return;  // the clean stop's hang-up
      fail(kExitPeerLost, fmt::format("rank {} was lost: {}", r, got.status().message()));
      return;
    }
    p.last_heard_ns = now_ns();
    Frame& f = *got;
    if (f.kind == FrameKind::heartbeat) continue;
    if (f.kind == FrameKind::fail) {
      ByteReader in(f.payload);
      const int code = static_cast<int>(in.u32("code"));
      const std::string reason = in.str("reason");
      fail(in.status().ok() ? code : kExitPeerLost,
           in.status().ok() ? fmt::format("rank {} failed: {}", r, reason)
                            : fmt::format("rank {} sent a damaged fail frame", r));
      return;
    }
    if (f.kind == FrameKind::stop || f.kind == FrameKind::stopped) p.closing = true;
    std::lock_guard lock(mutex_);
    p.inbox.push_back(std::move(f));
    arrived_.notify_all();
  }
}

void Control::heartbeat_loop() {
  while (!closed_.load() && !failed_.load()) {
    for (int32_t r : peer_ranks()) {
      Peer& p = *peers_[static_cast<size_t>(r)];
      if (p.closing.load()) continue;
      // A busy sender is already proof of life for the peer: skip rather than queue behind it.
      std::unique_lock lock(p.send_mutex, std::try_to_lock);
      if (!lock.owns_lock()) continue;
      Status s = p.socket.send_frame(FrameKind::heartbeat, {}, deadline_in(options_.peer_timeout));
      lock.unlock();
      if (!s.ok() && !closed_.load() && !p.closing.load()) {
        fail(kExitPeerLost, fmt::format("rank {} was lost: heartbeat {}", r, s.message()));
        return;
      }
    }
    std::unique_lock lock(mutex_);
    arrived_.wait_for(lock, options_.heartbeat_interval, [&] { return closed_.load() || failed_.load(); });
  }
}

Status Control::send(int32_t peer, FrameKind kind, std::span<const uint8_t> payload) {
  if (failed_.load()) {
    std::lock_guard lock(mutex_);
    return error(StatusCode::unavailable, "the fabric has failed: {}", failure_);
  }
  if (peer < 0 || peer >= options_.world || !peers_[static_cast<size_t>(peer)])
    return error(StatusCode::internal, "rank {} has no connection to rank {}", options_.rank, peer);
  Peer& p = *peers_[static_cast<size_t>(peer)];
  std::unique_lock lock(p.send_mutex, std::defer_lock);
  if (!lock.try_lock_for(options_.peer_timeout))
    return error(StatusCode::unavailable, "sending to rank {} is stuck", peer);
  Status s = p.socket.send_frame(kind, payload, deadline_in(options_.peer_timeout));
  if (!s.ok()) {
    lock.unlock();
    fail(kExitPeerLost, fmt::format("rank {} was lost: {} frame: {}", peer, frame_kind_name(kind), s.message()));
  }
  return s;
}

StatusOr<Frame> Control::recv(int32_t peer, std::optional<Deadline> deadline) {
  if (peer < 0 || peer >= options_.world || !peers_[static_cast<size_t>(peer)])
    return error(StatusCode::internal, "rank {} has no connection to rank {}", options_.rank, peer);
  Peer& p = *peers_[static_cast<size_t>(peer)];
  std::unique_lock lock(mutex_);
  // Bounded: the receiver thread fails the fabric when the peer is silent for peer_timeout, which wakes us.
  for (;;) {
    if (!p.inbox.empty()) {
      Frame f = std::move(p.inbox.front());
      p.inbox.pop_front();
      return f;
    }
    if (failed_.load()) return error(StatusCode::unavailable, "the fabric has failed: {}", failure_);
    if (closed_.load()) return error(StatusCode::unavailable, "the fabric is closed");
    if (deadline.has_value()) {
      if (arrived_.wait_until(lock, *deadline) == std::cv_status::timeout && p.inbox.empty() && !failed_.load())
        return error(StatusCode::unavailable, "rank {} sent nothing before the deadline", peer);
    } else {
      arrived_.wait_for(lock, milliseconds(200));
    }
  }
}

StatusOr<Frame> Control::expect(int32_t peer, FrameKind kind, std::optional<Deadline> deadline) {
  DSV4_ASSIGN_OR_RETURN(Frame f, recv(peer, deadline));
  if (f.kind != kind)
    return error(StatusCode::data_loss, "rank {} sent a {} frame where a {} frame was due", peer,
                 frame_kind_name(f.kind), frame_kind_name(kind));
  return f;
}

void Control::fail(int code, const std::string& reason) {
  if (failed_.exchange(true)) return;
  {
    std::lock_guard lock(mutex_);
    failure_ = reason;
  }
  std::fprintf(stderr, "dsv4 fabric: rank %d: %s; ending all ranks (exit code %d)\n", options_.rank, reason.c_str(),
               code);
  std::fflush(stderr);
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard lock(mutex_);
    hooks = abort_hooks_;
  }
  for (auto& hook : hooks) hook();
  const std::vector<uint8_t> payload = fail_payload(code, reason);
  for (int32_t r : peer_ranks()) {
    Peer& p = *peers_[static_cast<size_t>(r)];
    std::unique_lock lock(p.send_mutex, std::defer_lock);
    if (lock.try_lock_for(milliseconds(200)))
      (void)p.socket.send_frame(FrameKind::fail, payload, deadline_in(milliseconds(200)));
  }
  for (int32_t r : peer_ranks()) peers_[static_cast<size_t>(r)]->socket.shutdown();
  arrived_.notify_all();
  options_.on_fatal(code, reason);
}

void Control::add_abort_hook(std::function<void()> hook) {
  std::lock_guard lock(mutex_);
  abort_hooks_.push_back(std::move(hook));
}

void Control::close() {
  if (closed_.exchange(true)) return;
  for (int32_t r : peer_ranks()) {
    peers_[static_cast<size_t>(r)]->closing = true;
    peers_[static_cast<size_t>(r)]->socket.shutdown();
  }
  arrived_.notify_all();
}

Status Control::goodbye() {
  for (int32_t r : peer_ranks()) DSV4_RETURN_IF_ERROR(send(r, FrameKind::stop, {}));
  for (int32_t r : peer_ranks()) {
    DSV4_ASSIGN_OR_RETURN(Frame f, expect(r, FrameKind::stop, deadline_in(options_.peer_timeout)));
    (void)f;
  }
  close();
  return ok_status();
}

StatusOr<std::vector<std::vector<uint8_t>>> Control::all_gather(std::span<const uint8_t> mine) {
  const uint64_t seq = ++collective_seq_;
  const auto read_data = [&](int32_t from) -> StatusOr<std::vector<uint8_t>> {
    DSV4_ASSIGN_OR_RETURN(Frame f, expect(from, FrameKind::data));
    ByteReader in(f.payload);
    const uint64_t got = in.u64("sequence");
    std::vector<uint8_t> bytes = in.bytes("bytes");
    DSV4_RETURN_IF_ERROR(in.finish("data"));
    if (got != seq)
      return error(StatusCode::data_loss, "rank {} is at collective {}, rank {} at {}", from, got, rank(), seq);
    return bytes;
  };
  std::vector<std::vector<uint8_t>> all(static_cast<size_t>(world()));
  all[static_cast<size_t>(rank())].assign(mine.begin(), mine.end());
  if (rank() != 0) {
    ByteWriter w;
    w.u64(seq);
    w.bytes(mine);
    DSV4_RETURN_IF_ERROR(send(0, FrameKind::data, w.data()));
    DSV4_ASSIGN_OR_RETURN(std::vector<uint8_t> joined, read_data(0));
    ByteReader in(joined);
    for (int32_t r = 0; r < world(); ++r) all[static_cast<size_t>(r)] = in.bytes("rank bytes");
    DSV4_RETURN_IF_ERROR(in.finish("all_gather"));
    return all;
  }
  // Rank 0: each follower's bytes land in its own inbox, so arrival order does not matter.
  for (int32_t r = 1; r < world(); ++r) {
    DSV4_ASSIGN_OR_RETURN(all[static_cast<size_t>(r)], read_data(r));
  }
  ByteWriter joined;
  for (const auto& b : all) joined.bytes(b);
  ByteWriter w;
  w.u64(seq);
  w.bytes(joined.data());
  for (int32_t r = 1; r < world(); ++r) DSV4_RETURN_IF_ERROR(send(r, FrameKind::data, w.data()));
  return all;
}

Status Control::broadcast(std::vector<uint8_t>* bytes) {
  DSV4_ASSIGN_OR_RETURN(auto all, all_gather(rank() == 0 ? std::span<const uint8_t>(*bytes)
                                                          : std::span<const uint8_t>()));
  *bytes = std::move(all[0]);
  return ok_status();
}

Status Control::ordered_sum(std::span<float> values) {
  const std::span<const uint8_t> mine(reinterpret_cast<const uint8_t*>(values.data()), values.size_bytes());
  DSV4_ASSIGN_OR_RETURN(auto all, all_gather(mine));
  for (int32_t r = 0; r < world(); ++r)
    if (all[static_cast<size_t>(r)].size() != values.size_bytes())
      return error(StatusCode::invalid_argument, "ordered_sum: rank {} gave {} bytes, rank {} {}", r,
                   all[static_cast<size_t>(r)].size(), rank(), values.size_bytes());
  // Left to right in rank order: ((v0 + v1) + v2) + ...
  for (size_t i = 0; i < values.size(); ++i) {
    float acc;
    std::memcpy(&acc, all[0].data() + i * 4, 4);
    for (int32_t r = 1; r < world(); ++r) {
      float v;
      std::memcpy(&v, all[static_cast<size_t>(r)].data() + i * 4, 4);
      acc += v;
    }
    values[i] = acc;
  }
  return ok_status();
}

StatusOr<Rendezvous> Rendezvous::open(const FabricOptions& options) {
  if (options.world < 1 || options.rank != 0)
    return error(StatusCode::internal, "a rendezvous is rank 0's (rank {}, world {})", options.rank, options.world);
  Rendezvous rv;
  rv.options_ = options;
  DSV4_ASSIGN_OR_RETURN(rv.listener_, listen_tcp(options.master_addr, options.master_port, options.world + 8));
  DSV4_ASSIGN_OR_RETURN(rv.port_, bound_port(rv.listener_));
  return rv;
}

StatusOr<std::unique_ptr<Control>> Rendezvous::accept_all() {
  std::unique_ptr<Control> c(new Control(options_));
  const Deadline deadline = deadline_in(options_.connect_timeout);
  int32_t joined = 0;
  while (joined < options_.world - 1) {
    StatusOr<Socket> s = accept_tcp(listener_, deadline);
    if (!s.ok()) {
      std::string missing;
      for (int32_t r = 1; r < options_.world; ++r)
        if (!c->peers_[static_cast<size_t>(r)]) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", r);
      return error(StatusCode::unavailable, "ranks {} did not join within {} s", missing,
                   options_.connect_timeout.count() / 1000.0);
    }
    // A hello must follow promptly; a stranger that says nothing is dropped.
    StatusOr<Frame> hello = s->recv_frame(std::min(deadline, deadline_in(std::chrono::seconds(5))));
    if (!hello.ok() || hello->kind != FrameKind::hello) continue;
    ByteReader in(hello->payload);
    const uint32_t protocol = in.u32("protocol"), world = in.u32("world"), rank = in.u32("rank");
    if (!in.finish("hello").ok()) continue;
    std::string refusal;
    int code = kExitAgreement;
    if (protocol != kProtocolVersion)
      refusal = fmt::format("rank {} speaks fabric protocol {}, rank 0 speaks {}", rank, protocol, kProtocolVersion);
    else if (static_cast<int32_t>(world) != options_.world)
      refusal = fmt::format("rank {} was started with world {}, rank 0 with world {}", rank, world, options_.world);
    else if (rank < 1 || static_cast<int32_t>(rank) >= options_.world)
      refusal = fmt::format("rank {} is outside 1..{}", rank, options_.world - 1);
    else if (c->peers_[rank])
      refusal = fmt::format("two processes claim rank {}", rank), code = kExitBootstrap;
    if (!refusal.empty()) {
      (void)s->send_frame(FrameKind::refuse, fail_payload(code, refusal), deadline_in(std::chrono::seconds(1)));
      return error(code == kExitAgreement ? StatusCode::invalid_argument : StatusCode::unavailable, "{}", refusal);
    }
    DSV4_RETURN_IF_ERROR(s->send_frame(FrameKind::welcome, {}, deadline_in(std::chrono::seconds(5))));
    auto peer = std::make_unique<Control::Peer>();
    peer->socket = std::move(*s);
    c->peers_[rank] = std::move(peer);
    ++joined;
  }
  listener_.close();
  c->start();
  return c;
}

StatusOr<std::unique_ptr<Control>> join_fabric(const FabricOptions& options) {
  if (options.rank < 1 || options.rank >= options.world)
    return error(StatusCode::invalid_argument, "rank {} is outside 1..{}", options.rank, options.world - 1);
  const Deadline deadline = deadline_in(options.connect_timeout);
  DSV4_ASSIGN_OR_RETURN(Socket s, connect_tcp(options.master_addr, options.master_port, deadline));
  ByteWriter w;
  w.u32(kProtocolVersion);
  w.u32(static_cast<uint32_t>(options.world));
  w.u32(static_cast<uint32_t>(options.rank));
  DSV4_RETURN_IF_ERROR(s.send_frame(FrameKind::hello, w.data(), deadline));
  StatusOr<Frame> reply = s.recv_frame(deadline);
  if (!reply.ok())
    return error(StatusCode::unavailable, "rank 0 at {}:{} did not welcome rank {}: {}", options.master_addr,
                 options.master_port, options.rank, reply.status().message());
  if (reply->kind == FrameKind::refuse) {
    ByteReader in(reply->payload);
    const int code = static_cast<int>(in.u32("code"));
    const std::string reason = in.str("reason");
    return error(code == kExitAgreement ? StatusCode::invalid_argument : StatusCode::unavailable,
                 "rank 0 refused rank {}: {}", options.rank, reason);
  }
  if (reply->kind != FrameKind::welcome)
    return error(StatusCode::data_loss, "rank 0 answered hello with a {} frame", frame_kind_name(reply->kind));
  std::unique_ptr<Control> c(new Control(options));
  auto peer = std::make_unique<Control::Peer>();
  peer->socket = std::move(s);
  c->peers_[0] = std::move(peer);
  c->start();
  return c;
}

StatusOr<std::unique_ptr<Control>> bootstrap(const FabricOptions& options) {
  if (options.rank != 0) return join_fabric(options);
  DSV4_ASSIGN_OR_RETURN(Rendezvous rv, Rendezvous::open(options));
  return rv.accept_all();
}

}  // namespace dsv4::fabric
