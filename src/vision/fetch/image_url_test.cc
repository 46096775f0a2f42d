// image_url values end to end: data: URLs and fetched URLs decode to the golden pixels; refusals are named.
#include "vision/fetch/image_url.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <thread>

#include "vision/golden_testing.h"

namespace dsv4::vision {
namespace {

std::string base64(const std::vector<uint8_t>& b) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < b.size(); i += 3) {
    const uint32_t v = (b[i] << 16) | ((i + 1 < b.size() ? b[i + 1] : 0) << 8) | (i + 2 < b.size() ? b[i + 2] : 0);
    out += {k[(v >> 18) & 63], k[(v >> 12) & 63], i + 1 < b.size() ? k[(v >> 6) & 63] : '=', i + 2 < b.size() ? k[v & 63] : '='};
  }
  return out;
}

const std::string& golden_sha(const std::string& name) {
  return testing::manifest()["images"][name]["rgb_sha256"].get_ref<const std::string&>();
}

TEST(VisionImageUrl, DataUrls) {
  const std::vector<uint8_t> webp = testing::golden_image("lossy_640x480.webp");
  StatusOr<Image> im = load_image_url("data:image/webp;base64," + base64(webp), {});
  ASSERT_TRUE(im.ok()) << im.status().to_string();
  EXPECT_EQ(testing::sha256_of(im->rgb), golden_sha("lossy_640x480.webp"));
  EXPECT_TRUE(load_image_url("data:;base64," + base64(webp), {}).ok());  // no declared type: the bytes decide
  const Status wrong = load_image_url("data:image/png;base64," + base64(webp), {}).status();
  EXPECT_NE(wrong.message().find("declared type 'image/png' does not match the data, which is WebP"), std::string::npos)
      << wrong.message();
  ImageUrlOptions small;
  small.limits.max_encoded_bytes = 100;
  EXPECT_NE(load_image_url("data:image/webp;base64," + base64(webp), small).status().message().find("limit of 100 bytes"),
            std::string::npos);
}

TEST(VisionImageUrl, SchemesAndFetching) {
  EXPECT_NE(load_image_url("file:///etc/passwd", {}).status().message().find("must be a data: URL (got 'file:')"),
            std::string::npos);
  EXPECT_NE(load_image_url("https://example.com/a.png", {}).status().message().find("not fetched by this server"),
            std::string::npos);

  const std::vector<uint8_t> gif = testing::golden_image("palette_37x91.gif");
  httplib::Server server;
  server.Get("/a", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(std::string(gif.begin(), gif.end()), "application/octet-stream");
  });
  server.Get("/b", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(std::string(gif.begin(), gif.end()), "image/jpeg");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  std::thread t([&] { server.listen_after_bind(); });
  while (!server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ImageUrlOptions o;
  o.fetch.enabled = true;
  o.fetch.allow_private_addresses = true;
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  StatusOr<Image> im = load_image_url(base + "/a", o);
  EXPECT_TRUE(im.ok()) << im.status().to_string();
  if (im.ok()) EXPECT_EQ(testing::sha256_of(im->rgb), golden_sha("palette_37x91.gif"));
  const Status wrong = load_image_url(base + "/b", o).status();
  EXPECT_NE(wrong.message().find("declared type 'image/jpeg' does not match the data, which is GIF"), std::string::npos)
      << wrong.message();
  server.stop();
  t.join();
}

}  // namespace
}  // namespace dsv4::vision
