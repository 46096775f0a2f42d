// `dsv4 serve --tp 2` as rank processes on loopback with the embedded tiny model: replicated ranks equal one
// rank bit for bit, a refusal on rank 1 only ends that request and serving continues, a drain stops every rank
// after the same plan, a killed rank ends every rank within seconds with exit code 70, and ranks that
// disagree on a setting refuse to start with exit code 71.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fabric/socket.h"

extern char** environ;

namespace dsv4 {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;

int free_port() {
  auto s = fabric::listen_tcp("127.0.0.1", 0, 1);
  return s.ok() ? *fabric::bound_port(*s) : 0;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One dsv4 process with stdout+stderr in a log file; killed (by its pid) if still running at the end.
struct Proc {
  pid_t pid = -1;
  fs::path log;
  int code = -1;

  Proc(std::vector<std::string> args, const std::string& name) {
    const fs::path dir = fs::path(DSV4_BINARY_DIR) / "test-tmp" / "fabric_serve";
    fs::create_directories(dir);
    log = dir / (name + ".log");
    fs::remove(log);
    args.insert(args.begin(), {std::string(DSV4_BINARY_DIR) + "/dsv4", "serve"});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    EXPECT_EQ(posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
  }
  ~Proc() {
    if (pid > 0 && code < 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  // Exit code within `limit`, or -1 (still running).
  int wait_exit(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (code < 0 && std::chrono::steady_clock::now() < deadline) {
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      else std::this_thread::sleep_for(10ms);
    }
    return code;
  }
  bool wait_log(const std::string& needle, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (slurp(log).find(needle) != std::string::npos) return true;
      if (wait_exit(0ms) >= 0) return slurp(log).find(needle) != std::string::npos;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }
  std::string text() const { return slurp(log); }
};

struct Reply {
  int status = 0;
  std::string body;
};

Reply post(int port, const std::string& body, std::chrono::seconds timeout = 60s) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(timeout);
  auto r = c.Post("/v1/completions", body, "application/json");
  if (!r) return {-1, "no response: " + httplib::to_string(r.error())};
  return {r->status, r->body};
}

// Greedy unless `sampling` says otherwise (a request without a seed draws a fresh one).
std::string completion(const std::string& prompt, int max_tokens, const std::string& sampling = R"("temperature":0)") {
  return R"({"model":"deepseek-v4","prompt":")" + prompt + R"(","max_tokens":)" + std::to_string(max_tokens) +
         R"(,"ignore_eos":true,)" + sampling + "}";
}

// The reply without its id and creation time: what must be equal bit for bit.
std::string content(const std::string& body) {
  return std::regex_replace(body, std::regex(R"re("(id|created)":("[^"]*"|\d+),?)re"), "");
}

// "rank R stopped after N plans, M ops (trace X)" -> "N plans, M ops (trace X)" for every rank in the logs.
std::vector<std::string> stops(const std::string& logs) {
  std::vector<std::string> out;
  std::regex re(R"re(rank (\d+) stopped after ([^\n:]*\)))re");
  for (auto it = std::sregex_iterator(logs.begin(), logs.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[2].str());
  return out;
}

TEST(FabricServe, TwoReplicatedRanksEqualOneRankBitForBit) {
  const int p1 = free_port(), p2 = free_port();
  Proc one({"--port", std::to_string(p1)}, "tp1");
  Proc two({"--tp", "2", "--master-port", "0", "--port", std::to_string(p2)}, "tp2");
  ASSERT_TRUE(one.wait_log("ready on", 120s)) << one.text();
  ASSERT_TRUE(two.wait_log("ready on", 120s)) << two.text();
  for (const std::string& body :
       {completion("Hello there", 16), completion("The quick brown fox", 12, R"("temperature":0.9,"seed":7,"logprobs":3)")}) {
    const Reply a = post(p1, body), b = post(p2, body);
    ASSERT_EQ(a.status, 200) << a.body;
    ASSERT_EQ(b.status, 200) << b.body;
    EXPECT_EQ(content(a.body), content(b.body));
  }
  kill(one.pid, SIGTERM);
  kill(two.pid, SIGTERM);
  EXPECT_EQ(one.wait_exit(20s), 0) << one.text();
  EXPECT_EQ(two.wait_exit(20s), 0) << two.text();
  const std::vector<std::string> s = stops(two.text());  // rank 1 writes to the same log (inherited stderr)
  ASSERT_EQ(s.size(), 2u) << two.text();
  EXPECT_EQ(s[0], s[1]);
}

// Two ranks started by hand, as on two hosts.
struct TwoRanks {
  int http = free_port(), master = free_port();
  std::unique_ptr<Proc> r0, r1;
  TwoRanks(const std::string& name, std::vector<std::string> extra0, std::vector<std::string> extra1) {
    std::vector<std::string> a0 = {"--tp", "2", "--rank", "0", "--master-port", std::to_string(master), "--port",
                                   std::to_string(http), "--fabric-timeout-seconds", "2"};
    std::vector<std::string> a1 = {"--tp", "2", "--rank", "1", "--master-port", std::to_string(master),
                                   "--fabric-timeout-seconds", "2"};
    a0.insert(a0.end(), extra0.begin(), extra0.end());
    a1.insert(a1.end(), extra1.begin(), extra1.end());
    r0 = std::make_unique<Proc>(a0, name + "-rank0");
    r1 = std::make_unique<Proc>(a1, name + "-rank1");
  }
};

TEST(FabricServe, ARefusalOnRankOneEndsThatRequestAndServingContinues) {
  TwoRanks t("refusal", {}, {"--test-refuse-stream", "2"});
  ASSERT_TRUE(t.r0->wait_log("ready on", 120s)) << t.r0->text() << t.r1->text();
  const Reply first = post(t.http, completion("Hello there", 8));
  const Reply refused = post(t.http, completion("Hello there", 8));
  const Reply third = post(t.http, completion("Hello there", 8));
  EXPECT_EQ(first.status, 200) << first.body;
  EXPECT_NE(refused.status, 200);
  EXPECT_NE(refused.body.find("rank 1: test refusal: rank 1 refuses stream 2"), std::string::npos) << refused.body;
  EXPECT_EQ(third.status, 200) << third.body;
  EXPECT_EQ(content(third.body), content(first.body));
  kill(t.r0->pid, SIGTERM);
  EXPECT_EQ(t.r0->wait_exit(20s), 0) << t.r0->text();
  EXPECT_EQ(t.r1->wait_exit(20s), 0) << t.r1->text();
  const std::vector<std::string> s = stops(t.r0->text() + t.r1->text());
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0], s[1]);
}

TEST(FabricServe, ADrainMidRequestStopsEveryRankAfterTheSamePlan) {
  TwoRanks t("drain", {"--drain-seconds", "0.3"}, {});
  ASSERT_TRUE(t.r0->wait_log("ready on", 120s)) << t.r0->text() << t.r1->text();
  Reply halted;
  std::thread client([&] { halted = post(t.http, completion("Tell me a long story", 4000)); });
  std::this_thread::sleep_for(1500ms);  // decoding by now
  kill(t.r0->pid, SIGTERM);
  client.join();
  EXPECT_EQ(t.r0->wait_exit(20s), 0) << t.r0->text();
  EXPECT_EQ(t.r1->wait_exit(20s), 0) << t.r1->text();
  const std::vector<std::string> s = stops(t.r0->text() + t.r1->text());
  ASSERT_EQ(s.size(), 2u) << t.r0->text() << t.r1->text();
  EXPECT_EQ(s[0], s[1]);
}

TEST(FabricServe, AKilledRankEndsEveryRankWithinSecondsWithCode70) {
  TwoRanks t("kill", {}, {});
  ASSERT_TRUE(t.r0->wait_log("ready on", 120s)) << t.r0->text() << t.r1->text();
  Reply cut;
  std::thread client([&] { cut = post(t.http, completion("Tell me a long story", 4000), 30s); });
  std::this_thread::sleep_for(1000ms);  // mid-request
  const auto t0 = std::chrono::steady_clock::now();
  kill(t.r1->pid, SIGKILL);
  const int code = t.r0->wait_exit(10s);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  client.join();
  EXPECT_EQ(code, 70) << t.r0->text();
  EXPECT_LT(took, 5.0);
  EXPECT_NE(t.r0->text().find("rank 1 was lost"), std::string::npos) << t.r0->text();
  EXPECT_NE(cut.status, 200);  // the request did not pretend to finish
}

TEST(FabricServe, AKilledRankZeroEndsTheFollowersWithCode70) {
  TwoRanks t("kill0", {}, {});
  ASSERT_TRUE(t.r0->wait_log("ready on", 120s)) << t.r0->text() << t.r1->text();
  const auto t0 = std::chrono::steady_clock::now();
  kill(t.r0->pid, SIGKILL);
  EXPECT_EQ(t.r1->wait_exit(10s), 70) << t.r1->text();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST(FabricServe, RanksThatDisagreeOnASettingRefuseToStartWithCode71) {
  TwoRanks t("agree", {"--context", "4096"}, {"--context", "2048"});
  EXPECT_EQ(t.r0->wait_exit(120s), 71) << t.r0->text();
  EXPECT_EQ(t.r1->wait_exit(20s), 71) << t.r1->text();
  EXPECT_NE(t.r0->text().find("'context': rank 0 has '4096', rank 1 has '2048'"), std::string::npos) << t.r0->text();
  EXPECT_NE(t.r1->text().find("'context'"), std::string::npos) << t.r1->text();
}

}  // namespace
}  // namespace dsv4
