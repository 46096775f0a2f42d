// Rank processes for `dsv4 serve --tp N`: flags, local launch, bootstrap, identity, follower loop.
#include "cli/fabric_serve.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/checkpoint.h"

extern char** environ;

namespace dsv4::cli {
namespace {

using std::chrono::milliseconds;

std::chrono::milliseconds ms(double seconds) { return milliseconds(static_cast<int64_t>(seconds * 1000)); }

fabric::FabricOptions options_of(const FabricFlags& f) {
  fabric::FabricOptions o;
  o.world = f.tp;
  o.rank = std::max(0, f.rank);
  o.master_addr = f.master_addr;
  o.master_port = static_cast<uint16_t>(f.master_port);
  o.connect_timeout = ms(f.connect_seconds);
  o.peer_timeout = ms(f.timeout_seconds);
  o.heartbeat_interval = std::max(milliseconds(20), o.peer_timeout / 10);
  o.plan_timeout = ms(f.plan_seconds);
  return o;
}

// argv without the flags a child gets its own value of.
std::vector<std::string> child_args(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    bool drop = false;
    for (const char* f : {"--rank", "--master-port"}) {
      if (a == f) {
        drop = true;
        ++i;  // and its value
      } else if (a.rfind(std::string(f) + "=", 0) == 0) {
        drop = true;
      }
    }
    if (!drop) out.push_back(a);
  }
  return out;
}

}  // namespace

void add_fabric_flags(CLI::App& app, FabricFlags& f) {
  app.add_option("--tp,--world", f.tp,
                 "tensor-parallel ranks in all; >1 starts ranks 1..N-1 on this host unless --rank is given")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--rank", f.rank,
                 "this process's rank when each rank is started by hand (several hosts); rank 0 serves HTTP")
      ->check(CLI::Range(0, 63));
  app.add_option("--master-addr", f.master_addr, "rank 0's address for the control channel (rank 0 binds it)")
      ->capture_default_str();
  app.add_option("--master-port", f.master_port,
                 "rank 0's control port; 0 with local ranks picks a free one")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--fabric-connect-seconds", f.connect_seconds,
                 "all ranks must have joined within this time, else all exit 72")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 86400.0));
  app.add_option("--fabric-timeout-seconds", f.timeout_seconds,
                 "a rank silent this long counts as lost: all ranks exit 70")
      ->capture_default_str()
      ->check(CLI::Range(0.2, 600.0));
  app.add_option("--fabric-plan-seconds", f.plan_seconds,
                 "a live rank that does not answer one plan within this time counts as wedged: all ranks exit 70")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 86400.0));
  app.add_option("--test-refuse-stream", f.test_refuse_stream,
                 "FOR TESTS ONLY: this follower rank refuses to open backend stream K (as if out of memory)");
}

RankLauncher::~RankLauncher() {
  done_ = true;
  if (monitor_.joinable()) monitor_.join();
}

StatusOr<std::unique_ptr<RankLauncher>> RankLauncher::start(const FabricFlags& flags, int argc, char** argv,
                                                            uint16_t port) {
  std::unique_ptr<RankLauncher> l(new RankLauncher());
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::vector<std::string> rest = child_args(argc, argv);
  for (int32_t r = 1; r < flags.tp; ++r) {
    std::vector<std::string> args = {exe, "serve"};
    args.insert(args.end(), rest.begin(), rest.end());
    for (std::string a : {std::string("--rank"), std::to_string(r), std::string("--master-port"), std::to_string(port)})
      args.push_back(a);
    std::vector<char*> cargs;
    for (std::string& a : args) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, exe.c_str(), nullptr, nullptr, cargs.data(), environ);
    if (rc != 0) return error(StatusCode::unavailable, "cannot start rank {}: {}", r, std::strerror(rc));
    std::fprintf(stderr, "dsv4 serve: started rank %d (pid %d)\n", r, static_cast<int>(pid));
    l->children_.emplace_back(r, pid);
    l->codes_.push_back(-1);
  }
  l->monitor_ = std::thread([p = l.get()] { p->monitor(); });
  return l;
}

std::vector<int> RankLauncher::codes() {
  std::lock_guard lock(mutex_);
  return codes_;
}

void RankLauncher::monitor() {
  while (!done_.load()) {
    const std::vector<int> now = codes();
    for (size_t i = 0; i < children_.size(); ++i) {
      if (now[i] >= 0) continue;
      int status = 0;
      if (waitpid(children_[i].second, &status, WNOHANG) != children_[i].second) continue;
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      {
        std::lock_guard lock(mutex_);
        codes_[i] = code;
      }
      if (!stopping_.load()) {
        // A rank died before the clean stop. Its own fail frame (or hang-up) usually ends rank 0 first;
        // this covers a death before the fabric was up.
        std::fprintf(stderr, "dsv4 serve: rank %d exited with code %d; ending all ranks\n", children_[i].first, code);
        std::fflush(stderr);
        _exit(code == fabric::kExitOk ? fabric::kExitPeerLost : code);
      }
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
}

int RankLauncher::wait_all(std::chrono::milliseconds limit) {
  stopping_ = true;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    bool all = true;
    int first = 0;
    for (int c : codes()) {
      if (c < 0) all = false;
      else if (first == 0 && c != 0) first = c;
    }
    if (all) return first;
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "dsv4 serve: a rank did not exit within %.1f s after the stop\n", limit.count() / 1000.0);
      return fabric::kExitPeerLost;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
}

StatusOr<std::unique_ptr<fabric::Control>> start_fabric(const FabricFlags& flags, int argc, char** argv,
                                                         std::unique_ptr<RankLauncher>* launcher) {
  fabric::FabricOptions o = options_of(flags);
  if (flags.rank > 0) {
    if (flags.rank >= flags.tp)
      return error(StatusCode::invalid_argument, "--rank {} is outside 0..{}", flags.rank, flags.tp - 1);
    if (flags.master_port == 0) return error(StatusCode::invalid_argument, "a follower needs rank 0's --master-port");
    return fabric::join_fabric(o);
  }
  if (flags.rank < 0 && o.master_addr.empty()) o.master_addr = "127.0.0.1";
  if (flags.rank == 0 && flags.master_port == 0)
    return error(StatusCode::invalid_argument, "--rank 0 with followers on other hosts needs a fixed --master-port");
  DSV4_ASSIGN_OR_RETURN(fabric::Rendezvous rv, fabric::Rendezvous::open(o));
  std::fprintf(stderr, "dsv4 serve: fabric: rank 0 of %d listening on %s:%d\n", flags.tp, o.master_addr.c_str(),
               rv.port());
  if (flags.rank < 0) {
    DSV4_ASSIGN_OR_RETURN(*launcher, RankLauncher::start(flags, argc, argv, rv.port()));
  }
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<fabric::Control> c, rv.accept_all());
  std::fprintf(stderr, "dsv4 serve: fabric: all %d ranks joined\n", flags.tp);
  return c;
}

fabric::Identity serve_identity(const std::string& model_dir, const lanes::BackendInfo& info,
                                const std::vector<std::pair<std::string, std::string>>& settings) {
  fabric::Identity id;
  for (const auto& [k, v] : settings) id.set(k, v);
  // The model: config.json bytes, then every tensor's name, dtype, shape and 3 x 64 sampled bytes.
  std::ifstream cfg(std::filesystem::path(model_dir) / "config.json", std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(cfg)), std::istreambuf_iterator<char>());
  uint64_t h = fabric::digest_bytes(bytes);
  StatusOr<Checkpoint> ck = Checkpoint::open(model_dir);
  if (ck.ok()) {
    for (const std::string& name : ck->names()) {
      StatusOr<TensorView> t = ck->tensor(name);
      if (!t.ok()) continue;
      fabric::ByteWriter w;
      w.str(name);
      w.u32(static_cast<uint32_t>(t->dtype));
      for (int64_t d : t->shape) w.i64(d);
      const auto all = t->byte_span();
      const size_t n = std::min<size_t>(64, all.size());
      for (size_t at : {size_t{0}, all.size() / 2 - std::min(all.size() / 2, n / 2), all.size() - n})
        w.bytes(all.subspan(at, n));
      h = fabric::digest_bytes(w.data(), h);
    }
  }
  id.set("model", fmt::format("{:016x} ({} tensors)", h, ck.ok() ? ck->tensor_count() : -1));
  const std::pair<const char*, int64_t> facts[] = {{"vocab", info.vocab_size},
                                                   {"max context", info.max_context},
                                                   {"stream slots", info.max_streams},
                                                   {"verify rows", info.max_verify_rows},
                                                   {"prefill rows", info.max_prefill_rows},
                                                   {"draft depth", info.max_draft_depth},
                                                   {"snapshot version", info.snapshot_version}};
  for (const auto& [key, value] : facts) id.set(key, std::to_string(value));
  fabric::add_build_identity(id);
  return id;
}

int run_follower_rank(fabric::Control& control, lanes::Backend& backend, const FabricFlags& flags) {
  fabric::FollowerOptions o;
  o.refuse_open_stream = flags.test_refuse_stream;
  std::fprintf(stderr, "dsv4 serve: rank %d: following rank 0\n", control.rank());
  std::fflush(stderr);
  const fabric::FollowerResult r = fabric::run_follower(control, backend, o);
  std::fprintf(stderr, "dsv4 serve: fabric: rank %d stopped after %llu plans, %llu ops (trace %016llx)%s%s\n",
               control.rank(), static_cast<unsigned long long>(r.counters.plans),
               static_cast<unsigned long long>(r.counters.ops), static_cast<unsigned long long>(r.counters.trace_digest),
               r.message.empty() ? "" : ": ", r.message.c_str());
  return r.exit_code;
}

}  // namespace dsv4::cli
