// Prompts with given embedding rows (an image's span) through the lane core on the fake backend: any piece boundaries
// equal the serial reference, so do concurrent streams, a prompt resumed from the cache at any page (mid-span
// included), while a different image never resumes past its span's start; refusals; the cache keys.
#include <gtest/gtest.h>

#include "lanes/lane_host.h"
#include "lanes/prompt_embeds.h"
#include "lanes/test_support.h"

namespace dsv4::lanes {
namespace {

constexpr int64_t kDim = 6;  // the fake's embedding width

std::vector<TokenId> prompt_of(int64_t length, uint64_t salt) {
  std::vector<TokenId> out;
  for (int64_t i = 0; i < length; ++i) out.push_back(1 + static_cast<TokenId>(splitmix64_nth(salt, i + 1) % 60));
  return out;
}

// A span of `count` rows at `start` whose values and digest come from `salt` (a different salt: a different image).
PromptEmbeds span_of(int64_t start, int64_t count, uint64_t salt) {
  PromptEmbeds e;
  e.start = start;
  e.count = count;
  auto values = std::make_shared<std::vector<uint16_t>>();
  for (int64_t i = 0; i < count * kDim; ++i) values->push_back(static_cast<uint16_t>(splitmix64_nth(salt, i)));
  e.values = std::move(values);
  for (size_t i = 0; i < e.digest.size(); ++i) e.digest[i] = static_cast<uint8_t>(splitmix64_nth(salt ^ 0xD1, i));
  return e;
}

Request with_image(int64_t length, uint64_t salt, int64_t start, int64_t count, uint64_t image) {
  Request r;
  r.prompt = prompt_of(length, salt);
  for (int64_t i = start; i < start + count; ++i) r.prompt[static_cast<size_t>(i)] = 59;  // the "image token"
  r.embeds.push_back(span_of(start, count, image));
  r.sampling = SamplingParams{1.0f, 20, 0.9f, 0.02f};
  r.seed = 77 + salt;
  r.max_tokens = 16;
  return r;
}

FakeBackendOptions fake_options() {
  FakeBackendOptions o;
  o.embed_dim = kDim;
  o.max_streams = 4;
  return o;
}

testing::Outcome run_alone(const Request& r, int32_t prefill_rows) {
  FakeBackend fake(fake_options());
  LaneHost host(fake, LaneHostOptions{.prefill_rows = prefill_rows});
  auto sink = std::make_shared<testing::Collector>();
  const RequestId id = *host.submit(r, sink);
  host.run_until_idle();
  return sink->get(id);
}

TEST(PromptEmbeds, AnyPiecesEqualTheSerialReference) {
  FakeBackend reference(fake_options());
  const Request r = with_image(40, 1, 9, 21, 100);
  const std::vector<TokenId> expected = testing::serial_reference(reference, r);
  for (int32_t rows : {64, 13, 7, 3, 1}) {  // the span whole, cut once, several times, row by row
    testing::Outcome o = run_alone(r, rows);
    EXPECT_EQ(o.tokens, expected) << rows;
    EXPECT_EQ(o.finish.usage.prompt_tokens, 40);
  }
  // The rows matter: the same prompt with its tokens' embeddings, or with another image's rows, differs.
  Request text = r;
  text.embeds.clear();
  EXPECT_NE(run_alone(text, 64).tokens, expected);
  EXPECT_NE(run_alone(with_image(40, 1, 9, 21, 101), 64).tokens, expected);
  Request not_image = r;
  not_image.embeds[0].image = false;
  EXPECT_NE(run_alone(not_image, 64).tokens, expected);
}

TEST(PromptEmbeds, ConcurrentEqualsSolo) {
  FakeBackend fake(fake_options());
  LaneHost host(fake, LaneHostOptions{.max_batch_streams = 3, .prefill_rows = 11});
  auto sink = std::make_shared<testing::Collector>();
  std::vector<Request> requests = {with_image(30, 2, 4, 12, 200), with_image(45, 3, 20, 18, 201),
                                   with_image(25, 4, 1, 5, 200)};
  requests[2].embeds.push_back(span_of(10, 9, 202));  // two images in one prompt
  std::vector<RequestId> ids;
  for (const Request& r : requests) {
    ids.push_back(*host.submit(r, sink));
    host.step();
  }
  host.run_until_idle();
  for (size_t i = 0; i < requests.size(); ++i)
    EXPECT_EQ(sink->get(ids[i]).tokens, testing::serial_reference(fake, requests[i])) << i;
}

struct CacheRig {
  FakeBackend fake{fake_options()};
  std::unique_ptr<cache::PromptCache> cache = std::move(cache::PromptCache::open(
      {.page_tokens = 8, .ram_bytes = 1 << 20, .model_id = fake.info().model_id,
       .snapshot_version = fake.info().snapshot_version, .row_tables = cache_row_tables(fake.info())})).value();
  LaneHost host{fake, LaneHostOptions{.prefill_rows = 8, .cache = cache.get()}};  // a snapshot every page
  std::shared_ptr<testing::Collector> sink = std::make_shared<testing::Collector>();
  testing::Outcome run(const Request& r) {
    const RequestId id = *host.submit(r, sink);
    host.run_until_idle();
    return sink->get(id);
  }
};

TEST(PromptEmbeds, ResumedEqualsFreshAndAnotherImageNeverResumesPastItsStart) {
  CacheRig rig;
  // Span [10, 30): pages end at 8 (before it), 16 and 24 (inside it), 32 and 40 (after it).
  const Request a = with_image(45, 5, 10, 20, 300);
  EXPECT_EQ(rig.run(a).tokens, testing::serial_reference(rig.fake, a));
  EXPECT_EQ(rig.cache->ram_lru_rows(), (std::vector<int64_t>{8, 16, 24, 32, 40}));

  testing::Outcome again = rig.run(a);
  EXPECT_EQ(again.tokens, testing::serial_reference(rig.fake, a));
  EXPECT_EQ(again.finish.usage.cached_prompt_tokens, 40);

  // The same text and span position, another image: nothing past the page before the span is shared.
  const Request b = with_image(45, 5, 10, 20, 301);
  testing::Outcome other = rig.run(b);
  EXPECT_EQ(other.tokens, testing::serial_reference(rig.fake, b));
  EXPECT_NE(other.tokens, again.tokens);
  EXPECT_EQ(other.finish.usage.cached_prompt_tokens, 8);

  // The same image, text diverging inside the span's page 24..32: resumes mid-span at 24, the span's tail fed as a
  // piece of given rows at offset 14.
  Request c = a;
  for (size_t i = 30; i < c.prompt.size(); ++i) c.prompt[i] = 1 + (c.prompt[i] % 50);
  ASSERT_NE(c.prompt[30], a.prompt[30]);
  testing::Outcome mid = rig.run(c);
  EXPECT_EQ(mid.tokens, testing::serial_reference(rig.fake, c));
  EXPECT_EQ(mid.finish.usage.cached_prompt_tokens, 24);

  // The same image as a non-image span (another flag): keys differ from the first position on.
  Request d = a;
  d.embeds[0].image = false;
  testing::Outcome flag = rig.run(d);
  EXPECT_EQ(flag.tokens, testing::serial_reference(rig.fake, d));
  EXPECT_EQ(flag.finish.usage.cached_prompt_tokens, 8);
}

TEST(PromptEmbeds, Refusals) {
  FakeBackend fake(fake_options());
  LaneHost host(fake, {});
  auto sink = std::make_shared<testing::Collector>();
  auto refused = [&](const Request& r, const std::string& needle) {
    StatusOr<RequestId> id = host.submit(r, sink);
    ASSERT_FALSE(id.ok()) << needle;
    EXPECT_EQ(id.status().code(), StatusCode::invalid_argument);
    EXPECT_NE(id.status().message().find(needle), std::string::npos) << id.status().message();
  };
  Request last = with_image(20, 6, 10, 10, 1);  // reaches position 19, the prompt's last
  refused(last, "must end before its last token");
  Request overlap = with_image(30, 6, 4, 6, 1);
  overlap.embeds.push_back(span_of(8, 3, 2));
  refused(overlap, "before the end 10");
  Request size = with_image(30, 6, 4, 6, 1);
  auto short_values = std::make_shared<std::vector<uint16_t>>(*size.embeds[0].values);
  short_values->pop_back();
  size.embeds[0].values = short_values;
  refused(size, "expected 6 rows x 6");
  Request empty = with_image(30, 6, 4, 6, 1);
  empty.embeds[0].count = 0;
  refused(empty, "has 0 rows");
  // A backend without embedding rows refuses any.
  FakeBackend text_only(FakeBackendOptions{});
  LaneHost text_host(text_only, {});
  StatusOr<RequestId> id = text_host.submit(with_image(30, 6, 4, 6, 1), sink);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("takes no embedding rows"), std::string::npos);
}

TEST(PromptEmbeds, CacheKeys) {
  const Request r = with_image(30, 7, 4, 12, 400);
  const std::vector<cache::Key> keys = prompt_keys(r);
  ASSERT_EQ(keys.size(), 30u);
  for (size_t i = 0; i < 30; ++i) {
    const bool in_span = i >= 4 && i < 16;
    if (!in_span) EXPECT_EQ(keys[i], static_cast<cache::Key>(r.prompt[i])) << i;
    else EXPECT_EQ(keys[i], embed_key(r.embeds[0], static_cast<int64_t>(i) - 4)) << i;
  }
  // Seven consecutive offsets spell the whole digest: chunk j holds bits [42j, 42j + 42).
  const PromptEmbeds& e = r.embeds[0];
  std::array<uint8_t, 32> spelled{};
  for (int64_t k = 0; k < 7; ++k) {
    const cache::Key key = embed_key(e, k);
    EXPECT_EQ(key >> 63, 1u);
    EXPECT_EQ((key >> 62) & 1, 1u);
    EXPECT_EQ((key >> 42) & 0xFFFFF, static_cast<uint64_t>(k));
    for (int b = 0; b < 42 && k * 42 + b < 256; ++b)
      if ((key >> b) & 1) spelled[static_cast<size_t>((k * 42 + b) / 8)] |= uint8_t(1u << ((k * 42 + b) % 8));
  }
  EXPECT_EQ(spelled, e.digest);
  // One digest bit, the flag or the offset changes the key.
  PromptEmbeds flipped = e;
  flipped.digest[31] ^= 0x80;  // bit 255: chunk 6
  EXPECT_EQ(embed_key(flipped, 0), embed_key(e, 0));
  EXPECT_NE(embed_key(flipped, 6), embed_key(e, 6));
  PromptEmbeds plain = e;
  plain.image = false;
  EXPECT_NE(embed_key(plain, 0), embed_key(e, 0));
  EXPECT_NE(embed_key(e, 7), embed_key(e, 0));
}

}  // namespace
}  // namespace dsv4::lanes
