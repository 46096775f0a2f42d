// The lane-core adapter over a real LaneHost and the lane core's hash backend: tokens arrive in
// order and finish as asked (length, or stop at a stop string with the match's offset), a cancel
// ends with cancelled, a halt ends with unavailable.
#include "server/lanes_engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "lanes/fake_backend.h"
#include "lanes/fanout.h"
#include "lanes/lane_host.h"

namespace dsv4::server {
namespace {

struct Collected {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<TokenOut> tokens;
  bool done = false;
  GenerationEvent last;

  EventSink sink() {
    return [this](GenerationEvent&& e) {
      std::lock_guard<std::mutex> lock(mu);
      tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
      if (e.done) {
        done = true;
        last = std::move(e);
      }
      cv.notify_all();
    };
  }
  bool wait_tokens(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return tokens.size() >= n || done; });
  }
  bool wait_done() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return done; });
  }
};

class LanesEngineTest : public ::testing::Test {
 protected:
  LanesEngineTest() : backend_(lanes::FakeBackendOptions{}), host_(backend_, lanes::LaneHostOptions{}) {
    host_.start();
  }
  ~LanesEngineTest() override { host_.stop(); }

  GenerationRequest request(int32_t max_tokens) {
    GenerationRequest r;
    r.prompt = {5, 6, 7};
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.logprobs = true;
    r.top_logprobs = 2;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = 9;
    return r;
  }

  lanes::FakeBackend backend_;
  lanes::LaneHost host_;
  LanesEngine engine_{host_, [this] { host_.begin_drain(std::chrono::milliseconds(0)); }};
};

TEST_F(LanesEngineTest, DeliversMaxTokensThenLength) {
  Collected c;
  ASSERT_TRUE(engine_.submit(request(5), c.sink()).ok());
  ASSERT_TRUE(c.wait_done());
  EXPECT_EQ(c.tokens.size(), 5u);
  EXPECT_EQ(c.last.finish, Finish::length);
  EXPECT_EQ(c.last.cached_prompt_tokens, 0);
  for (const auto& t : c.tokens) {
    ASSERT_EQ(t.top.size(), 2u);
    EXPECT_GE(t.top[0].logprob, t.top[1].logprob);
    EXPECT_LE(t.logprob, t.top[0].logprob);
  }
}

TEST_F(LanesEngineTest, CancelEndsWithCancelled) {
  Collected c;
  auto id = engine_.submit(request(1000000), c.sink());
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(c.wait_tokens(3));
  engine_.cancel(*id);
  ASSERT_TRUE(c.wait_done());
  EXPECT_EQ(c.last.finish, Finish::cancelled);
}

TEST_F(LanesEngineTest, HaltEndsWithUnavailable) {
  Collected c;
  ASSERT_TRUE(engine_.submit(request(1000000), c.sink()).ok());
  ASSERT_TRUE(c.wait_tokens(3));
  engine_.halt();
  ASSERT_TRUE(c.wait_done());
  EXPECT_EQ(c.last.finish, Finish::error);
  EXPECT_EQ(c.last.error.code(), StatusCode::unavailable);
  // Counters are published between rounds; the halt's round publishes them too.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (engine_.stats().running != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(engine_.stats().running, 0);
}

// The events of a request with n candidates, by choice.
struct ByChoice {
  std::mutex mu;
  std::condition_variable cv;
  std::map<int32_t, std::vector<int32_t>> tokens;
  std::map<int32_t, std::vector<float>> logprobs;
  std::map<int32_t, int32_t> done;  // done events per choice
  std::map<int32_t, Finish> finish;
  int32_t events_after_done = 0;

  EventSink sink() {
    return [this](GenerationEvent&& e) {
      std::lock_guard<std::mutex> lock(mu);
      if (done[e.choice] > 0) ++events_after_done;
      for (const auto& t : e.tokens) {
        tokens[e.choice].push_back(t.token);
        logprobs[e.choice].push_back(t.logprob);
      }
      if (e.done) {
        ++done[e.choice];
        finish[e.choice] = e.finish;
      }
      cv.notify_all();
    };
  }
  bool wait_done(int32_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] {
      int32_t total = 0;
      for (const auto& [c, k] : done) total += k;
      return total >= n;
    });
  }
};

TEST_F(LanesEngineTest, ChoicesArriveByIndexEachEqualToItsSoloRequest) {
  GenerationRequest r = request(6);
  r.n = 3;
  ByChoice all;
  ASSERT_TRUE(engine_.submit(r, all.sink()).ok());
  ASSERT_TRUE(all.wait_done(3));
  for (int32_t i = 0; i < 3; ++i) {
    GenerationRequest solo = request(6);
    solo.sampling.seed = lanes::member_seed(9, i);
    ByChoice one;
    ASSERT_TRUE(engine_.submit(solo, one.sink()).ok());
    ASSERT_TRUE(one.wait_done(1));
    std::lock_guard<std::mutex> lock(all.mu);
    EXPECT_EQ(all.done[i], 1) << i;
    EXPECT_EQ(all.finish[i], Finish::length) << i;
    EXPECT_EQ(all.tokens[i], one.tokens[0]) << i;
    EXPECT_EQ(all.logprobs[i], one.logprobs[0]) << i;
  }
  EXPECT_EQ(all.events_after_done, 0);
  EXPECT_EQ(all.done.size(), 3u);
  // Different seeds draw different continuations (the hash backend samples by seed).
  EXPECT_NE(all.tokens[0], all.tokens[1]);
}

TEST_F(LanesEngineTest, CancelOfTheIdEndsEveryChoice) {
  GenerationRequest r = request(1000000);
  r.n = 2;
  ByChoice all;
  auto id = engine_.submit(r, all.sink());
  ASSERT_TRUE(id.ok());
  engine_.cancel(*id);
  ASSERT_TRUE(all.wait_done(2));
  std::lock_guard<std::mutex> lock(all.mu);
  EXPECT_EQ(all.finish[0], Finish::cancelled);
  EXPECT_EQ(all.finish[1], Finish::cancelled);
}

TEST(LanesEngine, StopStringFinishCarriesItsLastTokensAndTheMatchOffset) {
  // Token t's output bytes are the letter 'a' + t % 26, so forced tokens 10..13 write "klmn". A
  // first run without stop strings gives the generated tokens g0 g1 g2 ...; with the stop string
  // spelling g0 g1 g2 the match is completed by g2 and starts at byte 4, right after the forced
  // bytes. "lm", inside the forced bytes, never matches (forced tokens are scored, not generated).
  auto letter = [](lanes::TokenId t) { return std::string(1, static_cast<char>('a' + t % 26)); };
  auto run = [&](const std::vector<std::string>& stop) {
    lanes::FakeBackend backend{lanes::FakeBackendOptions{}};
    lanes::LaneHostOptions ho;
    ho.token_bytes = letter;
    lanes::LaneHost host(backend, ho);
    host.start();
    LanesEngine engine(host, nullptr);
    GenerationRequest r;
    r.prompt = {5, 6, 7};
    r.forced = {10, 11, 12, 13};
    r.max_tokens = 12;
    r.ignore_eos = true;
    r.stop = stop;
    std::vector<GenerationEvent> events;
    std::mutex mu;
    std::condition_variable cv;
    EXPECT_TRUE(engine
                    .submit(r,
                            [&](GenerationEvent&& e) {
                              std::lock_guard<std::mutex> lock(mu);
                              events.push_back(std::move(e));
                              cv.notify_all();
                            })
                    .ok());
    {
      std::unique_lock<std::mutex> lock(mu);
      EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(10),
                              [&] { return !events.empty() && events.back().done; }));
    }
    host.stop();
    return events;
  };
  std::vector<int32_t> free_run;
  for (const auto& e : run({}))
    for (const auto& t : e.tokens) free_run.push_back(t.token);
  ASSERT_EQ(free_run.size(), 12u);
  const std::string stop = letter(free_run[4]) + letter(free_run[5]) + letter(free_run[6]);
  const std::vector<GenerationEvent> events = run({"lm", stop});
  std::vector<int32_t> tokens;
  for (const auto& e : events)
    for (const auto& t : e.tokens) tokens.push_back(t.token);
  EXPECT_EQ(tokens, std::vector<int32_t>(free_run.begin(), free_run.begin() + 7));
  const GenerationEvent& last = events.back();
  EXPECT_EQ(last.finish, Finish::stop);
  EXPECT_EQ(last.stop_offset, 4);
  // The token that completed the match travels with the finish, not before it.
  ASSERT_FALSE(last.tokens.empty());
  EXPECT_EQ(last.tokens.back().token, free_run[6]);
  for (size_t i = 0; i + 1 < events.size(); ++i) EXPECT_FALSE(events[i].done);
}

TEST(LanesEngine, RequestMapping) {
  GenerationRequest r;
  r.prompt = {1, 2};
  r.forced = {3};
  r.choices = {{4, 5}, {6}};
  r.sampling = {0.5f, 0.9f, -1, 0.05f, 77};
  r.max_tokens = 9;
  r.top_logprobs = 4;
  r.logprobs = true;
  r.draft = false;
  r.ignore_eos = true;
  r.stop = {"END"};
  r.n = 5;
  lanes::Request q = LanesEngine::to_lanes(r);
  EXPECT_EQ(q.n, 5);
  EXPECT_EQ(q.prompt, (std::vector<lanes::TokenId>{1, 2}));
  EXPECT_EQ(q.forced_tokens, (std::vector<lanes::TokenId>{3}));
  EXPECT_EQ(q.choices, (std::vector<std::vector<lanes::TokenId>>{{4, 5}, {6}}));
  EXPECT_EQ(q.sampling.temperature, 0.5f);
  EXPECT_EQ(q.sampling.top_p, 0.9f);
  EXPECT_EQ(q.sampling.top_k, 0);  // "off" is 0 in the lane core
  EXPECT_EQ(q.sampling.min_p, 0.05f);
  EXPECT_EQ(q.seed, 77u);
  EXPECT_EQ(q.max_tokens, 9);
  EXPECT_EQ(q.top_logprobs, 4);
  EXPECT_TRUE(q.logprobs);
  EXPECT_FALSE(q.draft);
  EXPECT_TRUE(q.ignore_eos);
  EXPECT_EQ(q.stop_strings, (std::vector<std::string>{"END"}));
}

}  // namespace
}  // namespace dsv4::server
