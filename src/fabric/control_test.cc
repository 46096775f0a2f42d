// The control channel: bootstrap, agreement, collectives in rank order, and fail-fast on a lost rank.
#include <gtest/gtest.h>

#include <cstring>

#include "fabric/agreement.h"
#include "fabric/control.h"
#include "fabric/fabric_test_support.h"

namespace dsv4::fabric {
namespace {
using testing::Fabric;
using testing::make_fabric;
using testing::on_all_ranks;

TEST(Control, BootstrapsThreeRanksAndGathersInRankOrder) {
  Fabric f = make_fabric(3);
  for (auto& c : f.controls) ASSERT_NE(c, nullptr);
  std::vector<std::vector<std::vector<uint8_t>>> got(3);
  on_all_ranks(3, [&](int32_t r) {
    // Rank 2 contributes first, rank 1 last: arrival order must not matter.
    std::this_thread::sleep_for(std::chrono::milliseconds(r == 1 ? 120 : r == 2 ? 0 : 40));
    std::vector<uint8_t> mine(static_cast<size_t>(r + 1), static_cast<uint8_t>(10 + r));
    auto all = f.controls[static_cast<size_t>(r)]->all_gather(mine);
    ASSERT_TRUE(all.ok()) << all.status().to_string();
    got[static_cast<size_t>(r)] = *all;
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(got[r].size(), 3u);
    for (int q = 0; q < 3; ++q) EXPECT_EQ(got[r][q], std::vector<uint8_t>(q + 1, 10 + q)) << r << " " << q;
  }
}

TEST(Control, OrderedSumAddsInRankOrderWhateverTheArrivalOrder) {
  // Contributions 1e8, 1, -1e8, 1 (ranks 0..3). In float, 1e8 + 1 rounds back to 1e8 (the spacing of floats
  // near 1e8 is 8), so rank order gives ((1e8 + 1) - 1e8) + 1 = 1 exactly, while e.g. the order 0, 2, 1, 3
  // would give 2. Expected value by hand from IEEE-754 binary32 spacing.
  Fabric f = make_fabric(4);
  const float contrib[4] = {1e8f, 1.0f, -1e8f, 1.0f};
  std::vector<std::vector<float>> out(4);
  on_all_ranks(4, [&](int32_t r) {
    std::this_thread::sleep_for(std::chrono::milliseconds((3 - r) * 40));  // rank 3 first, rank 0 last
    std::vector<float> v = {contrib[r], static_cast<float>(r)};
    ASSERT_TRUE(f.controls[static_cast<size_t>(r)]->ordered_sum(v).ok());
    out[static_cast<size_t>(r)] = v;
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(out[r][0], 1.0f) << "rank " << r;
    EXPECT_EQ(out[r][1], 6.0f) << "rank " << r;  // 0 + 1 + 2 + 3
  }
}

TEST(Control, BroadcastCarriesRankZerosBytes) {
  Fabric f = make_fabric(3);
  std::vector<std::vector<uint8_t>> got(3);
  on_all_ranks(3, [&](int32_t r) {
    std::vector<uint8_t> b = r == 0 ? std::vector<uint8_t>{7, 8, 9} : std::vector<uint8_t>{1};
    ASSERT_TRUE(f.controls[static_cast<size_t>(r)]->broadcast(&b).ok());
    got[static_cast<size_t>(r)] = b;
  });
  for (auto& b : got) EXPECT_EQ(b, (std::vector<uint8_t>{7, 8, 9}));
}

TEST(Control, AgreementPassesWhenIdentical) {
  Fabric f = make_fabric(3);
  on_all_ranks(3, [&](int32_t r) {
    Identity id;
    id.set("context", "4096");
    id.set("model", "abc");
    EXPECT_TRUE(agree(*f.controls[static_cast<size_t>(r)], id).ok());
  });
  for (auto& fatal : f.fatals) EXPECT_EQ(fatal->get_code(), -1);
}

TEST(Control, AgreementRefusesEveryRankNamingEachDifference) {
  Fabric f = make_fabric(3);
  on_all_ranks(3, [&](int32_t r) {
    Identity id;
    id.set("context", r == 2 ? "2048" : "4096");
    id.set("model", "abc");
    if (r == 1) id.set("nccl", "22809");
    (void)agree(*f.controls[static_cast<size_t>(r)], id);
  });
  const std::string reason = f.fatals[0]->get_reason();
  EXPECT_EQ(f.fatals[0]->get_code(), kExitAgreement);
  EXPECT_NE(reason.find("'nccl': rank 0 has nothing, rank 1 has '22809'"), std::string::npos) << reason;
  EXPECT_NE(reason.find("'context': rank 0 has '4096', rank 2 has '2048'"), std::string::npos) << reason;
  for (int r = 1; r < 3; ++r) {
    // Followers learn it from rank 0's fail frame, with the same code.
    for (int i = 0; i < 100 && f.fatals[r]->get_code() < 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(f.fatals[r]->get_code(), kExitAgreement) << "rank " << r;
    EXPECT_NE(f.fatals[r]->get_reason().find("'context'"), std::string::npos);
  }
}

TEST(Control, BootstrapRefusesAWorldMismatchOnBothSides) {
  testing::Fatal f0, f1;
  auto rv = Rendezvous::open(testing::test_options(2, 0, 0, &f0));
  ASSERT_TRUE(rv.ok());
  const uint16_t port = rv->port();
  StatusOr<std::unique_ptr<Control>> follower = error(StatusCode::internal, "not run");
  std::thread t([&] { follower = join_fabric(testing::test_options(3, 1, port, &f1)); });
  auto leader = rv->accept_all();
  t.join();
  ASSERT_FALSE(leader.ok());
  ASSERT_FALSE(follower.ok());
  EXPECT_EQ(bootstrap_exit_code(leader.status()), kExitAgreement);
  EXPECT_EQ(bootstrap_exit_code(follower.status()), kExitAgreement);
  EXPECT_NE(follower.status().message().find("rank 1 was started with world 3, rank 0 with world 2"),
            std::string::npos)
      << follower.status().to_string();
}

TEST(Control, BootstrapNamesTheRanksThatNeverJoined) {
  testing::Fatal f0;
  auto o = testing::test_options(3, 0, 0, &f0);
  o.connect_timeout = std::chrono::milliseconds(300);
  auto rv = Rendezvous::open(o);
  ASSERT_TRUE(rv.ok());
  auto leader = rv->accept_all();
  ASSERT_FALSE(leader.ok());
  EXPECT_EQ(bootstrap_exit_code(leader.status()), kExitBootstrap);
  EXPECT_NE(leader.status().message().find("ranks 1, 2 did not join"), std::string::npos) << leader.status().to_string();
}

TEST(Control, AFollowerThatHangsUpEndsEveryRankWithPeerLost) {
  Fabric f = make_fabric(3);
  const auto t0 = std::chrono::steady_clock::now();
  f.controls[2].reset();  // rank 2 closes its sockets without a stop (what the kernel does for a killed process)
  for (int i = 0; i < 300 && (f.fatals[0]->get_code() < 0 || f.fatals[1]->get_code() < 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(f.fatals[0]->get_code(), kExitPeerLost);
  EXPECT_NE(f.fatals[0]->get_reason().find("rank 2 was lost"), std::string::npos) << f.fatals[0]->get_reason();
  EXPECT_EQ(f.fatals[1]->get_code(), kExitPeerLost);  // told by rank 0
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  // Every wait now ends at once instead of hanging.
  EXPECT_FALSE(f.controls[1]->recv(0).ok());
}

TEST(Control, ASilentFollowerIsLostAfterThePeerTimeout) {
  // A raw client that says hello and then never sends a byte (a stopped or wedged process).
  testing::Fatal f0;
  auto rv = Rendezvous::open(testing::test_options(2, 0, 0, &f0));
  ASSERT_TRUE(rv.ok());
  const uint16_t port = rv->port();
  Socket raw;
  std::thread t([&] {
    auto s = connect_tcp("127.0.0.1", port, deadline_in(std::chrono::seconds(5)));
    ASSERT_TRUE(s.ok());
    ByteWriter w;
    w.u32(kProtocolVersion);
    w.u32(2);
    w.u32(1);
    ASSERT_TRUE(s->send_frame(FrameKind::hello, w.data(), deadline_in(std::chrono::seconds(1))).ok());
    raw = std::move(*s);
  });
  auto leader = rv->accept_all();
  t.join();
  ASSERT_TRUE(leader.ok());
  const auto t0 = std::chrono::steady_clock::now();
  // The leader waits for a reply that never comes: the wait ends when the peer counts as lost.
  auto frame = (*leader)->recv(1);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(frame.ok());
  // The receiver thread wakes waiters before it reports (in production the report is _exit).
  for (int i = 0; i < 100 && f0.get_code() < 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(f0.get_code(), kExitPeerLost);
  EXPECT_NE(f0.get_reason().find("rank 1 has been silent"), std::string::npos) << f0.get_reason();
  EXPECT_GE(waited, 0.7);  // peer_timeout is 0.8 s
  EXPECT_LT(waited, 2.0);
}

TEST(Wire, ReaderNamesTheTruncatedField) {
  ByteWriter w;
  w.u32(5);
  w.str("hello");
  std::vector<uint8_t> b = w.take();
  b.resize(b.size() - 2);
  ByteReader in(b);
  EXPECT_EQ(in.u32("count"), 5u);
  (void)in.str("greeting");
  Status s = in.finish("test");
  EXPECT_EQ(s.code(), StatusCode::data_loss);
  EXPECT_NE(s.message().find("'greeting'"), std::string::npos) << s.to_string();
}

TEST(Wire, ReaderRefusesACountLargerThanTheBuffer) {
  ByteWriter w;
  w.u64(uint64_t{1} << 40);  // a claimed token count no buffer holds
  ByteReader in(w.data());
  EXPECT_TRUE(in.i32s("tokens").empty());
  EXPECT_EQ(in.finish("test").code(), StatusCode::data_loss);
}

}  // namespace
}  // namespace dsv4::fabric
