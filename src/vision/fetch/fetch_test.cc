// The fetcher against a local test server: the address policy, size limits, redirects, statuses, timeout.
#include "vision/fetch/fetch.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <thread>

namespace dsv4::vision {
namespace {

class LocalServer {
 public:
  LocalServer() {
    server_.Get("/img.png", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(1500, 'x'), "image/png");
    });
    server_.Get("/big", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(5000, 'x'), "image/png");
    });
    server_.Get("/big-chunked", [](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("image/png", [](size_t offset, httplib::DataSink& sink) {
        const std::string chunk(1000, 'y');
        if (offset >= 5000) {
          sink.done();
          return true;
        }
        return sink.write(chunk.data(), chunk.size());
      });
    });
    server_.Get("/redirect", [](const httplib::Request&, httplib::Response& res) {
      res.set_redirect("/img.png");
    });
    server_.Get("/missing", [](const httplib::Request&, httplib::Response& res) { res.status = 404; });
    server_.Get("/slow", [this](const httplib::Request&, httplib::Response& res) {
      // A byte every 50 ms: each read is quick, the whole body is not.
      res.set_chunked_content_provider("image/png", [this](size_t offset, httplib::DataSink& sink) {
        if (offset >= 100 || stopping_) {
          sink.done();
          return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return sink.write("z", 1);
      });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~LocalServer() {
    stopping_ = true;
    server_.stop();
    thread_.join();
  }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }

 private:
  httplib::Server server_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  int port_ = 0;
};

FetchOptions local_options() {
  FetchOptions o;
  o.enabled = true;
  o.allow_private_addresses = true;  // the test server is on loopback
  o.max_bytes = 2000;
  o.total_timeout = std::chrono::milliseconds(2000);
  return o;
}

void expect_error(const Status& s, const std::string& needle) {
  ASSERT_FALSE(s.ok()) << "expected an error containing '" << needle << "'";
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(VisionFetch, DisabledByDefault) {
  expect_error(fetch_image("https://example.com/a.png", FetchOptions{}).status(), "not fetched by this server");
}

TEST(VisionFetch, RefusesNonPublicAddresses) {
  LocalServer server;
  FetchOptions o = local_options();
  o.allow_private_addresses = false;
  expect_error(fetch_image(server.url("/img.png"), o).status(), "resolves to 127.0.0.1 (loopback address)");
  expect_error(fetch_image("http://localhost:1/x.png", o).status(), "loopback address");
  expect_error(fetch_image("http://[::1]:1/x.png", o).status(), "::1 (loopback address)");
  expect_error(fetch_image("http://169.254.169.254/latest/meta-data", o).status(), "link-local address");
  expect_error(fetch_image("http://10.0.0.1/x.png", o).status(), "private address");
  expect_error(fetch_image("http://2130706433/x.png", o).status(), "loopback address");  // 127.0.0.1 as one number
}

TEST(VisionFetch, FetchesWithinLimits) {
  LocalServer server;
  StatusOr<FetchedImage> r = fetch_image(server.url("/img.png"), local_options());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->bytes.size(), 1500u);
  EXPECT_EQ(r->content_type, "image/png");
}

TEST(VisionFetch, SizeLimits) {
  LocalServer server;
  expect_error(fetch_image(server.url("/big"), local_options()).status(), "body is 5000 bytes, over the limit of 2000");
  expect_error(fetch_image(server.url("/big-chunked"), local_options()).status(), "exceeds the limit of 2000 bytes");
}

TEST(VisionFetch, RedirectsAreNotFollowedAndStatusesNamed) {
  LocalServer server;
  expect_error(fetch_image(server.url("/redirect"), local_options()).status(), "answered 302 (a redirect, not followed) to /img.png");
  expect_error(fetch_image(server.url("/missing"), local_options()).status(), "answered HTTP 404");
}

TEST(VisionFetch, TotalTimeout) {
  LocalServer server;
  FetchOptions o = local_options();
  o.total_timeout = std::chrono::milliseconds(300);
  const auto t0 = std::chrono::steady_clock::now();
  expect_error(fetch_image(server.url("/slow"), o).status(), "took longer than 300 ms");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1500));
}

TEST(VisionFetch, UrlParsing) {
  StatusOr<HttpUrl> u = parse_http_url("HTTPS://[2001:db8::1]:8443/a/b.png?x=1#frag");
  ASSERT_TRUE(u.ok()) << u.status().to_string();
  EXPECT_EQ(u->scheme, "https");
  EXPECT_EQ(u->host, "2001:db8::1");
  EXPECT_EQ(u->port, 8443);
  EXPECT_EQ(u->target, "/a/b.png?x=1");
  StatusOr<HttpUrl> q = parse_http_url("http://example.com?x");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->port, 80);
  EXPECT_EQ(q->target, "/?x");
  expect_error(parse_http_url("ftp://example.com/a.png").status(), "scheme 'ftp' is not supported");
  expect_error(parse_http_url("http://user:pw@example.com/").status(), "user information");
  expect_error(parse_http_url("http://example.com:99999/").status(), "port '99999'");
  expect_error(parse_http_url("http:///a.png").status(), "has no host");
  expect_error(parse_http_url("http://example.com/a b.png").status(), "space or control character");
  FetchOptions o = local_options();
  o.allow_http = false;
  expect_error(fetch_image("http://example.com/a.png", o).status(), "must be https");
}

}  // namespace
}  // namespace dsv4::vision
