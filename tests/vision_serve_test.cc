// Images through the HTTP server in-process: the real server, lane core, prompt cache and CPU oracle (tiny preset),
// the V4.1 text side and the image side cli wires, around the TEST-ONLY hash tower (engine/image_encoder_testing.h).
// Usage counts span positions; a repeated image resumes from the cache past its span, a different one never past its
// start; concurrent equals solo; every bad image is a 400 naming its content part and the server keeps serving;
// /v1/models reports image input only when images are served; text-only models and a missing tower refuse images.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backends/cpu/oracle_forward.h"
#include "family/deepseek_v41/synthetic_weights.h"
#include "cli/image_side.h"
#include "cli/v41_text_side.h"
#include "engine/image_encoder_testing.h"
#include "family/deepseek_v41/preset.h"
#include "lanes/lane_host.h"
#include "server/http_server.h"
#include "server/lanes_engine.h"

namespace dsv4 {
namespace {

using json = nlohmann::json;
constexpr int32_t kPage = 16;
constexpr int64_t kSpan37x91 = 8;  // 37 x 91 under kVision: canvas 42 x 98, ViT grid 7 x 3, aligner 3 x 1: 3 * 2 + 2

// The processor's sizes for these tests: no upscaling of small images (min_pixels 784), spans of at most 64.
family::VisionConfig test_vision() {
  family::VisionConfig v;
  v.min_pixels = 784;
  v.max_image_tokens = 64;
  return v;
}

// The tiny V4.1 preset's synthetic weights with a vision_config and image delimiters (bf16 [D] each).
std::shared_ptr<const family::Model> model(bool vision) {
  struct Held {
    family::Model model;
    engine::ImageDelimiters delimiters;
  };
  static std::shared_ptr<const family::Model> text = family::synthetic_weights(
      family::preset_config(family::Preset::tiny, family::Variant::v41), 7, true);
  if (!vision) return text;
  static std::shared_ptr<const family::Model> with = [] {
    auto h = std::make_shared<Held>(Held{*text, engine::testing::hashed_delimiters(text->plan.dim, 5)});
    h->model.config.vision = test_vision();
    auto view = [&](const std::vector<uint16_t>& v) {
      return TensorView{v.data(), DType::bf16, {static_cast<int64_t>(v.size())}, static_cast<int64_t>(v.size() * 2)};
    };
    h->model.weights.image_start = view(h->delimiters.start);
    h->model.weights.image_newline = view(h->delimiters.newline);
    h->model.weights.image_end = view(h->delimiters.end);
    return std::shared_ptr<const family::Model>(h, &h->model);
  }();
  return with;
}

enum class Images { served, no_tower, text_model };

// One server on a free port over its own backend, lane host and prompt cache.
struct Rig {
  explicit Rig(Images kind, server::ImageOptions limits = {}) {
    auto m = model(kind != Images::text_model);
    engine::LaneBackendOptions bo;
    bo.model_id = "vision-serve-test";
    bo.max_context = 2048;
    bo.max_streams = 4;
    cpu::OracleOptions oo;
    oo.threads = 2;
    backend = std::move(cpu::oracle_lane_backend(m, oo, bo)).value();
    cache = std::move(cache::PromptCache::open({.page_tokens = kPage, .ram_bytes = 64 << 20, .model_id = bo.model_id,
                                                .snapshot_version = backend->info().snapshot_version,
                                                .row_tables = lanes::cache_row_tables(backend->info())}))
                .value();
    // Pieces of one page: a snapshot at every page boundary of a prompt.
    host = std::make_unique<lanes::LaneHost>(
        *backend, lanes::LaneHostOptions{.max_batch_streams = 4, .prefill_rows = kPage, .cache = cache.get()});
    host->start();
    lanes::LaneHost* h = host.get();
    engine = std::make_unique<server::LanesEngine>(*host, [h] { h->begin_drain(std::chrono::milliseconds(0)); });
    text = std::move(cli::make_v41_text_side(2048, chat::ChatFormat::v41)).value();
    if (kind == Images::no_tower)
      images = cli::make_image_side(*m, error(StatusCode::unavailable, "vision tower not available: none in tests"));
    else
      images = cli::make_image_side(*m, std::unique_ptr<engine::VisionTower>(
                                            std::make_unique<engine::testing::HashTower>(m->plan.dim, 3)));
    server::ServerOptions so;
    so.port = 0;
    so.images = limits;
    srv = std::make_unique<server::Server>(so);
    EXPECT_TRUE(srv->bind().ok());
    srv->start();
    srv->set_ready(engine.get(), &text, &images);
  }
  ~Rig() {
    srv->request_drain();
    srv->wait();
    host->stop();
  }
  // POST /v1/chat/completions: (HTTP status, body).
  std::pair<int, json> chat(const json& body) {
    httplib::Client c("127.0.0.1", srv->port());
    c.set_read_timeout(120, 0);
    auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
    if (!r) return {0, json()};
    return {r->status, json::parse(r->body, nullptr, false)};
  }
  json models() {
    httplib::Client c("127.0.0.1", srv->port());
    auto r = c.Get("/v1/models");
    return r ? json::parse(r->body, nullptr, false) : json();
  }

  std::unique_ptr<engine::LaneBackend> backend;
  std::unique_ptr<cache::PromptCache> cache;
  std::unique_ptr<lanes::LaneHost> host;
  std::unique_ptr<server::LanesEngine> engine;
  server::TextSide text;
  server::ImageSide images;
  std::unique_ptr<server::Server> srv;
};

std::string base64(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 2]);
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? k[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? k[v & 63] : '=';
  }
  return out;
}

std::string golden(const std::string& name) {
  std::ifstream in(std::string(DSV4_SOURCE_DIR) + "/tests/data/vision/images/" + name, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_FALSE(ss.str().empty()) << name;
  return ss.str();
}

std::string data_url(const std::string& mime, const std::string& bytes) { return "data:" + mime + ";base64," + base64(bytes); }

json image_part(const std::string& url) { return {{"type", "image_url"}, {"image_url", {{"url", url}}}}; }

// A user turn: text before, the images, text after (so page boundaries fall before and after the spans).
json chat_body(const std::vector<json>& images, int max_tokens = 3) {
  json content = json::array({{{"type", "text"}, {"text", "Here is a picture of a small test pattern, look at it carefully "
                                                            "and then describe what you see in one short sentence."}}});
  for (const json& i : images) content.push_back(i);
  content.push_back({{"type", "text"}, {"text", "Please answer briefly, in plain words, and mention the main colours "
                                                "you notice in the picture above, nothing else."}});
  return {{"model", "deepseek-v4"}, {"messages", json::array({{{"role", "user"}, {"content", content}}})},
          {"max_tokens", max_tokens}, {"temperature", 0}, {"chat_template_kwargs", {{"thinking", false}}}};
}

// The rendered chat's tokens (one image token per image) and the first image token's position.
std::pair<int64_t, int64_t> rendered(const Rig& rig, const json& body) {
  auto r = rig.text.render_chat(body.dump(), {});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  const auto at = std::find(r->tokens.begin(), r->tokens.end(), rig.images.image_token_id);
  return {static_cast<int64_t>(r->tokens.size()), at - r->tokens.begin()};
}

TEST(VisionServe, UsageCountsSpanPositionsAndTheCacheKeysImages) {
  Rig rig(Images::served);
  const json a = chat_body({image_part(data_url("image/png", golden("rgb_37x91.png")))});
  const auto [tokens, start] = rendered(rig, a);
  auto [status, first] = rig.chat(a);
  ASSERT_EQ(status, 200) << first.dump();
  EXPECT_EQ(first["usage"]["prompt_tokens"], tokens - 1 + kSpan37x91);
  EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  const int64_t prompt = tokens - 1 + kSpan37x91;
  ASSERT_GT((prompt - 1) / kPage * kPage, start + kSpan37x91) << "a page must end after the span";

  // The same image again: resumes past its span, the same reply.
  auto [status2, again] = rig.chat(a);
  ASSERT_EQ(status2, 200);
  EXPECT_EQ(again["usage"]["prompt_tokens_details"]["cached_tokens"], (prompt - 1) / kPage * kPage);
  EXPECT_EQ(again["choices"][0]["message"]["content"], first["choices"][0]["message"]["content"]);

  // Another image of the same size (same span, same tokens): never resumes past the page before its span.
  const json b = chat_body({image_part(data_url("image/png", golden("gray_37x91.png")))});
  auto [status3, other] = rig.chat(b);
  ASSERT_EQ(status3, 200);
  EXPECT_EQ(other["usage"]["prompt_tokens"], prompt);
  EXPECT_EQ(other["usage"]["prompt_tokens_details"]["cached_tokens"], start / kPage * kPage);

  // Streaming reports the same usage.
  json streamed = a;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  httplib::Client c("127.0.0.1", rig.srv->port());
  auto r = c.Post("/v1/chat/completions", streamed.dump(), "application/json");
  ASSERT_TRUE(r);
  const size_t at = r->body.find("\"prompt_tokens\":" + std::to_string(prompt));
  EXPECT_NE(at, std::string::npos) << r->body;
}

TEST(VisionServe, ConcurrentEqualsSolo) {
  Rig rig(Images::served);
  std::vector<json> bodies = {chat_body({image_part(data_url("image/png", golden("rgb_37x91.png")))}, 5),
                              chat_body({image_part(data_url("image/jpeg", golden("q444_37x91.jpg"))),
                                         image_part(data_url("image/gif", golden("palette_37x91.gif")))},
                                        5),
                              chat_body({image_part(data_url("image/webp", golden("lossless_37x91.webp")))}, 5)};
  for (json& b : bodies) b["temperature"] = 0.9, b["seed"] = 11;
  std::vector<json> solo;
  {
    Rig alone(Images::served);
    for (const json& b : bodies) solo.push_back(alone.chat(b).second);
  }
  std::vector<std::future<std::pair<int, json>>> together;
  for (const json& b : bodies) together.push_back(std::async(std::launch::async, [&rig, b] { return rig.chat(b); }));
  for (size_t i = 0; i < bodies.size(); ++i) {
    auto [status, reply] = together[i].get();
    ASSERT_EQ(status, 200) << reply.dump();
    EXPECT_EQ(reply["choices"][0]["message"]["content"], solo[i]["choices"][0]["message"]["content"]) << i;
    EXPECT_EQ(reply["usage"]["prompt_tokens"], solo[i]["usage"]["prompt_tokens"]) << i;
  }
}

struct Bad {
  json content_part;      // the image part (or a text part)
  std::string param;      // expected error.param
  std::string code;       // expected error.code ("" : not checked)
  std::string needle;     // in error.message
};

std::vector<Bad> bad_images() {
  const std::string png = golden("rgb_37x91.png");
  return {
      {image_part(data_url("image/png", png.substr(0, 100))), "messages[0].content[1]", "invalid_image",
       "corrupt or truncated PNG"},
      {image_part(data_url("image/jpeg", png)), "messages[0].content[1]", "invalid_image",
       "declared type 'image/jpeg' does not match the data, which is PNG"},
      {image_part(data_url("image/png", golden("rgb_640x480.png"))), "messages[0].content[1]", "invalid_image",
       "the limit of 16000 bytes"},
      {image_part(data_url("image/png", golden("palette8_640x480.png"))), "messages[0].content[1]", "invalid_image",
       "640x480 = 307200 pixels, over the limit of 100000"},
      // A 65-byte PNG declaring 100000 x 100000 (IHDR and CRCs by Python's zlib).
      {image_part("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgABhqAAAYagCAIAAAAnMJyfAAAACElEQVR4nAMAAAAAAUgGidIAAAAASUVORK5CYII="),
       "messages[0].content[1]", "invalid_image", "declares 100000x100000 = 10000000000 pixels"},
      // A GIF whose screen and frame are 0 x 0.
      {image_part("data:image/gif;base64,R0lGODlhAAAAAIAAAAAAAP///ywAAAAAAAAAAAACAkwBADs="), "messages[0].content[1]",
       "invalid_image", "zero width or height (0x0)"},
      {image_part("https://example.com/cat.png"), "messages[0].content[1]", "image_url_not_allowed",
       "--allow-image-urls"},
      {image_part("data:image/png;base64,!!!!"), "messages[0].content[1]", "invalid_image", "not base64"},
      {image_part("data:text/plain;base64," + base64(png)), "messages[0].content[1]", "invalid_image",
       "not a supported image type"},
      {image_part("ftp://example.com/cat.png"), "messages[0].content[1]", "invalid_image", ""},
      {{{"type", "image_url"}, {"image_url", {{"detail", "high"}}}}, "messages[0].content[1].image_url.url", "", "must be a string"},
      {{{"type", "image_url"}, {"image_url", {{"url", data_url("image/png", png)}, {"detail", "ultra"}}}},
       "messages[0].content[1].image_url.detail", "", "'auto', 'low' or 'high'"},
      {{{"type", "text"}, {"text", "an image token <｜deepseek_image｜> typed as text"}}, "messages", "", "image token"},
  };
}

TEST(VisionServe, EveryBadImageIsA400NamingItsPartAndServingContinues) {
  server::ImageOptions limits;
  limits.max_image_bytes = 16000;
  limits.max_image_pixels = 100000;
  limits.max_images = 3;
  limits.max_image_tokens = 20;
  Rig rig(Images::served, limits);
  for (const Bad& b : bad_images()) {
    auto [status, reply] = rig.chat(chat_body({b.content_part}));
    EXPECT_EQ(status, 400) << b.needle << ": " << reply.dump();
    EXPECT_EQ(reply["error"]["param"], b.param) << reply.dump();
    if (!b.code.empty()) EXPECT_EQ(reply["error"]["code"], b.code) << reply.dump();
    EXPECT_NE(reply["error"]["message"].get<std::string>().find(b.needle), std::string::npos) << reply.dump();
  }
  const json ok = image_part(data_url("image/png", golden("gray_37x91.png")));
  // Four images: the fourth part is named. Three spans of 8 exceed 20 positions.
  auto [many, many_reply] = rig.chat(chat_body({ok, ok, ok, ok}));
  EXPECT_EQ(many, 400);
  EXPECT_EQ(many_reply["error"]["param"], "messages[0].content[4]");
  EXPECT_EQ(many_reply["error"]["code"], "too_many_images");
  auto [tokens, tokens_reply] = rig.chat(chat_body({ok, ok, ok}));
  EXPECT_EQ(tokens, 400);
  EXPECT_EQ(tokens_reply["error"]["param"], "messages");
  EXPECT_EQ(tokens_reply["error"]["code"], "too_many_image_tokens");
  // Still serving: two good images.
  auto [status, reply] = rig.chat(chat_body({ok, ok}));
  ASSERT_EQ(status, 200) << reply.dump();
  EXPECT_EQ(reply["usage"]["prompt_tokens"], rendered(rig, chat_body({ok, ok})).first - 2 + 2 * kSpan37x91);
}

TEST(VisionServe, ModelsReportImagesOnlyWhenServedAndOtherModelsRefuse) {
  const json good = chat_body({image_part(data_url("image/png", golden("rgb_37x91.png")))});
  {
    Rig rig(Images::served);
    EXPECT_EQ(rig.models()["data"][0]["input_modalities"], json::array({"text", "image"}));
  }
  {
    // Vision weights but no tower: the images are checked, then refused with the tower's reason.
    Rig rig(Images::no_tower);
    EXPECT_EQ(rig.models()["data"][0]["input_modalities"], json::array({"text"}));
    auto [bad, bad_reply] = rig.chat(chat_body({bad_images()[0].content_part}));
    EXPECT_EQ(bad, 400);
    EXPECT_EQ(bad_reply["error"]["code"], "invalid_image");
    auto [status, reply] = rig.chat(good);
    EXPECT_EQ(status, 400);
    EXPECT_EQ(reply["error"]["code"], "vision_unavailable");
    EXPECT_EQ(reply["error"]["param"], "messages[0].content[1]");
    EXPECT_NE(reply["error"]["message"].get<std::string>().find("vision tower not available"), std::string::npos);
    EXPECT_EQ(rig.chat(chat_body({})).first, 200);  // text still served
  }
  {
    // A text-only model: refused at once, naming the model and why.
    Rig rig(Images::text_model);
    EXPECT_EQ(rig.models()["data"][0]["input_modalities"], json::array({"text"}));
    auto [status, reply] = rig.chat(good);
    EXPECT_EQ(status, 400);
    EXPECT_EQ(reply["error"]["code"], "images_not_supported");
    EXPECT_NE(reply["error"]["message"].get<std::string>().find("does not accept images"), std::string::npos);
    EXPECT_NE(reply["error"]["message"].get<std::string>().find("no vision_config"), std::string::npos);
  }
}

}  // namespace
}  // namespace dsv4
