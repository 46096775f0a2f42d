// The control channel between ranks: a TCP star on rank 0 with heartbeats, fail-fast and small collectives.
//
// Bootstrap: rank 0 listens on master_addr:master_port; every follower connects (retrying until
// connect_timeout), says hello {protocol, world, rank} and is welcomed or refused. Afterwards each
// connection has a receiver thread (frames into a per-peer inbox; heartbeats and fail frames handled at
// once) and one heartbeat thread sends a heartbeat to every peer each heartbeat_interval.
//
// Fail-fast: a peer that hangs up without a clean stop, or is silent for peer_timeout, or sends a fail
// frame, ends this rank: fail() runs the abort hooks, sends fail {code, reason} to every peer, and calls
// on_fatal (default: print and _exit(code)). So one lost rank ends all ranks within about peer_timeout
// (at once for a killed process: its sockets close) with the same exit code. No wait in this file is
// unbounded: every receive is bounded by a deadline or by the peer's liveness.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fabric/socket.h"

namespace dsv4::fabric {

// Process exit codes of a fabric rank (docs/fabric.md). Every rank of a failed fabric exits with the same one.
enum ExitCode : int {
  kExitOk = 0,          // clean stop (drain finished on every rank)
  kExitStartup = 1,     // this rank could not start (bad flags, model load failed, port in use)
  kExitPeerLost = 70,   // a rank died, hung up, went silent or failed while serving: restart all ranks
  kExitAgreement = 71,  // ranks disagree on settings, model or library versions: fix the deployment
  kExitBootstrap = 72,  // not every rank joined before the connect deadline
  kExitDiverged = 73,   // ranks computed different results for the same plan: a bug, report it
};

struct FabricOptions {
  int32_t world = 1;                       // ranks in all
  int32_t rank = 0;                        // this rank, 0 .. world-1; rank 0 plans and serves HTTP
  std::string master_addr = "127.0.0.1";   // rank 0's address (rank 0 binds it)
  uint16_t master_port = 29500;            // rank 0's control port; 0 on rank 0 picks a free port
  std::chrono::milliseconds connect_timeout{60000};   // all ranks must have met by then
  std::chrono::milliseconds heartbeat_interval{250};  // a heartbeat to every peer this often
  std::chrono::milliseconds peer_timeout{4000};       // silence after which a peer counts as lost
  // Longest a live rank may take to answer one plan (a rank that heartbeats but never answers is wedged).
  std::chrono::milliseconds plan_timeout{300000};
  // Called once when the fabric fails; must not return in production (default: message on stderr and
  // _exit(code)). Tests record the call instead; the Control then refuses every further call.
  std::function<void(int code, const std::string& reason)> on_fatal;
};

class Control {
 public:
  ~Control();
  Control(const Control&) = delete;
  Control& operator=(const Control&) = delete;

  int32_t rank() const { return options_.rank; }
  int32_t world() const { return options_.world; }
  const FabricOptions& options() const { return options_; }

  // Sends one frame to `peer` (rank 0 to any follower, a follower only to 0), bounded by peer_timeout.
  Status send(int32_t peer, FrameKind kind, std::span<const uint8_t> payload);
  // The next non-heartbeat frame from `peer`. Ends with an error when this rank failed (the peer was lost
  // or a fail frame came) or, when given, at `deadline`.
  StatusOr<Frame> recv(int32_t peer, std::optional<Deadline> deadline = std::nullopt);
  // recv() that also insists on the kind (anything else is a protocol error, data_loss).
  StatusOr<Frame> expect(int32_t peer, FrameKind kind, std::optional<Deadline> deadline = std::nullopt);

  // Ends this rank and, through fail frames, every other: abort hooks, fail frames, on_fatal(code, reason).
  // Only the first call acts.
  void fail(int code, const std::string& reason);
  bool failed() const { return failed_.load(); }
  // Run first by fail() (e.g. abort a collective communicator so kernels waiting on a dead peer end).
  void add_abort_hook(std::function<void()> hook);
  // After a clean stop exchange: the peers' hang-ups are no longer failures; stops the threads.
  void close();
  // A clean close without a plan protocol: every rank sends stop to its peers, waits (bounded) for theirs,
  // then closes. Call on every rank.
  Status goodbye();

  // Collectives over the control channel (small CPU payloads; the device path is nccl_comm.h).
  // Every rank receives every rank's bytes, in rank order.
  StatusOr<std::vector<std::vector<uint8_t>>> all_gather(std::span<const uint8_t> mine);
  // Rank 0's bytes reach every rank (`bytes` is read on rank 0 and written elsewhere).
  Status broadcast(std::vector<uint8_t>* bytes);
  // values <- v_0 + v_1 + ... + v_{world-1}, summed left to right in rank order on every rank, whatever
  // order the contributions arrive in: every rank holds the same bits.
  Status ordered_sum(std::span<float> values);

 private:
  friend class Rendezvous;
  friend StatusOr<std::unique_ptr<Control>> join_fabric(const FabricOptions& options);
  struct Peer {
    Socket socket;
    std::timed_mutex send_mutex;
    std::deque<Frame> inbox;
    std::atomic<int64_t> last_heard_ns{0};
    std::atomic<bool> closing{false};  // a stop/stopped frame passed: a hang-up is expected
    std::thread receiver;
  };
  explicit Control(FabricOptions options);
  void start();
  void receive_loop(int32_t peer);
  void heartbeat_loop();
  std::vector<int32_t> peer_ranks() const;

  FabricOptions options_;
  std::vector<std::unique_ptr<Peer>> peers_;  // [world]; null for self (and, on followers, for other followers)
  std::mutex mutex_;                          // inboxes and the abort hooks
  std::condition_variable arrived_;
  std::vector<std::function<void()>> abort_hooks_;
  std::atomic<bool> failed_{false};
  std::atomic<bool> closed_{false};
  std::string failure_;
  std::thread heartbeat_;
  uint64_t collective_seq_ = 0;
};

// Rank 0's side of the bootstrap: listen first (so the port is known), then wait for every follower.
class Rendezvous {
 public:
  static StatusOr<Rendezvous> open(const FabricOptions& options);
  uint16_t port() const { return port_; }
  // Accepts followers until all world-1 said hello (or refuses the fabric at connect_timeout: the error's
  // message names the missing ranks). A hello with another protocol or world is refused on both sides.
  StatusOr<std::unique_ptr<Control>> accept_all();

 private:
  FabricOptions options_;
  Socket listener_;
  uint16_t port_ = 0;
};

// A follower's side: connect to rank 0 with retry, say hello, wait for welcome.
StatusOr<std::unique_ptr<Control>> join_fabric(const FabricOptions& options);

// Rank 0: Rendezvous::open + accept_all; followers: join_fabric.
StatusOr<std::unique_ptr<Control>> bootstrap(const FabricOptions& options);

// The exit code a bootstrap failure maps to (agreement for protocol/world mismatches, else bootstrap).
int bootstrap_exit_code(const Status& status);

}  // namespace dsv4::fabric
