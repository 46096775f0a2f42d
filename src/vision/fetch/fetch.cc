// The remote image fetcher: URL checks, resolution under the address policy, one pinned GET with limits.
#include "vision/fetch/fetch.h"

#include <httplib.h>
#include <netdb.h>
#include <sys/socket.h>

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "vision/fetch/address.h"

namespace dsv4::vision {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

// Every address the host resolves to, as text, each checked against the policy.
StatusOr<std::vector<std::string>> resolve_checked(const HttpUrl& u, const FetchOptions& o) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(u.host.c_str(), nullptr, &hints, &res);
  if (rc != 0) return error(StatusCode::invalid_argument, "image URL host '{}' does not resolve: {}", u.host, gai_strerror(rc));
  std::vector<std::string> out;
  Status refusal;
  for (addrinfo* p = res; p; p = p->ai_next) {
    char text[INET6_ADDRSTRLEN] = {0};
    AddressClass cls;
    if (p->ai_family == AF_INET) {
      const auto* sa = reinterpret_cast<const sockaddr_in*>(p->ai_addr);
      inet_ntop(AF_INET, &sa->sin_addr, text, sizeof(text));
      cls = classify_ipv4(reinterpret_cast<const uint8_t*>(&sa->sin_addr));
    } else if (p->ai_family == AF_INET6) {
      const auto* sa = reinterpret_cast<const sockaddr_in6*>(p->ai_addr);
      inet_ntop(AF_INET6, &sa->sin6_addr, text, sizeof(text));
      cls = classify_ipv6(reinterpret_cast<const uint8_t*>(&sa->sin6_addr));
    } else {
      continue;
    }
    if (cls != AddressClass::public_unicast && !o.allow_private_addresses && refusal.ok()) {
      refusal = error(StatusCode::invalid_argument,
                      "image URL host '{}' resolves to {} ({} address); only public addresses are fetched", u.host,
                      text, address_class_name(cls));
    }
    out.emplace_back(text);
  }
  freeaddrinfo(res);
  DSV4_RETURN_IF_ERROR(refusal);  // one non-public answer refuses the host: no choosing among answers
  if (out.empty()) return error(StatusCode::invalid_argument, "image URL host '{}' has no IPv4 or IPv6 address", u.host);
  return out;
}

}  // namespace

StatusOr<HttpUrl> parse_http_url(std::string_view url) {
  HttpUrl u;
  const size_t colon = url.find("://");
  if (colon == std::string_view::npos) return error(StatusCode::invalid_argument, "image URL '{}' has no scheme", url);
  u.scheme = lower(url.substr(0, colon));
  if (u.scheme != "http" && u.scheme != "https") {
    return error(StatusCode::invalid_argument, "image URL scheme '{}' is not supported (http, https or data)", u.scheme);
  }
  std::string_view rest = url.substr(colon + 3);
  const size_t end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, end);
  std::string_view tail = end == std::string_view::npos ? std::string_view() : rest.substr(end);
  if (authority.find('@') != std::string_view::npos) {
    return error(StatusCode::invalid_argument, "image URL with user information ('user@host') is refused");
  }
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return error(StatusCode::invalid_argument, "image URL: unclosed '[' in the host");
    u.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return error(StatusCode::invalid_argument, "image URL: junk after ']' in the host");
      port_text = after.substr(1);
    }
  } else {
    const size_t c = authority.rfind(':');
    u.host = std::string(authority.substr(0, c));
    if (c != std::string_view::npos) port_text = authority.substr(c + 1);
  }
  if (u.host.empty()) return error(StatusCode::invalid_argument, "image URL '{}' has no host", url);
  u.port = u.scheme == "https" ? 443 : 80;
  if (!port_text.empty()) {
    int port = 0;
    for (char ch : port_text) {
      if (ch < '0' || ch > '9' || port > 65535) return error(StatusCode::invalid_argument, "image URL port '{}' is not valid", port_text);
      port = port * 10 + (ch - '0');
    }
    if (port < 1 || port > 65535) return error(StatusCode::invalid_argument, "image URL port '{}' is not valid", port_text);
    u.port = port;
  }
  const size_t hash = tail.find('#');
  tail = tail.substr(0, hash);
  u.target = tail.empty() ? "/" : (tail.front() == '?' ? "/" + std::string(tail) : std::string(tail));
  for (char ch : u.target) {
    if (static_cast<unsigned char>(ch) <= 0x20 || ch == 0x7F) {
      return error(StatusCode::invalid_argument, "image URL path has a space or control character");
    }
  }
  return u;
}

StatusOr<FetchedImage> fetch_image(std::string_view url, const FetchOptions& o) {
  if (!o.enabled) {
    return error(StatusCode::invalid_argument,
                 "remote image URLs are not fetched by this server (the operator can enable it); send the image as a "
                 "data: URL");
  }
  DSV4_ASSIGN_OR_RETURN(HttpUrl u, parse_http_url(url));
  if (u.scheme == "http" && !o.allow_http) return error(StatusCode::invalid_argument, "image URL must be https");
  DSV4_ASSIGN_OR_RETURN(std::vector<std::string> addresses, resolve_checked(u, o));

  const bool v6 = u.host.find(':') != std::string::npos;
  const std::string origin = fmt::format("{}://{}:{}", u.scheme, v6 ? "[" + u.host + "]" : u.host, u.port);
  httplib::Client cli(origin);
  cli.set_hostname_addr_map({{u.host, addresses.front()}});  // connect only to the address just checked
  cli.set_follow_location(false);
  cli.set_keep_alive(false);
  const auto to_timeval = [](std::chrono::milliseconds ms) {
    return std::pair<time_t, time_t>(ms.count() / 1000, (ms.count() % 1000) * 1000);
  };
  const auto [cs, cus] = to_timeval(o.connect_timeout);
  const auto [ts, tus] = to_timeval(o.total_timeout);
  cli.set_connection_timeout(cs, cus);
  cli.set_read_timeout(ts, tus);
  cli.set_write_timeout(ts, tus);
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
  cli.enable_server_certificate_verification(true);
#endif

  // The total limit is kept by a watchdog that shuts the socket at the deadline, so a server that trickles
  // bytes (each read within the per-read timeout) cannot hold the request longer.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false, timed_out = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, o.total_timeout, [&] { return done; })) {
      timed_out = true;
      cli.stop();
    }
  });

  FetchedImage out;
  Status stop;  // why a callback ended the transfer
  const httplib::Headers headers = {{"Accept", "image/png, image/jpeg, image/webp, image/gif"}};
  httplib::Result res = cli.Get(
      u.target, headers,
      [&](const httplib::Response& r) {
        if (r.status != 200) {
          stop = r.status >= 300 && r.status < 400
                     ? error(StatusCode::invalid_argument, "image URL answered {} (a redirect, not followed){}", r.status,
                             r.has_header("Location") ? " to " + r.get_header_value("Location") : "")
                     : error(StatusCode::invalid_argument, "image URL answered HTTP {}", r.status);
          return false;
        }
        if (r.has_header("Content-Length")) {
          const std::string len = r.get_header_value("Content-Length");
          const bool digits = !len.empty() && len.size() <= 18 && len.find_first_not_of("0123456789") == std::string::npos;
          if (!digits || std::stoll(len) > o.max_bytes) {
            stop = error(StatusCode::invalid_argument, "image URL body is {} bytes, over the limit of {}", len, o.max_bytes);
            return false;
          }
        }
        out.content_type = r.get_header_value("Content-Type");
        return true;
      },
      [&](const char* data, size_t n) {
        if (static_cast<int64_t>(out.bytes.size() + n) > o.max_bytes) {
          stop = error(StatusCode::invalid_argument, "image URL body exceeds the limit of {} bytes", o.max_bytes);
          return false;
        }
        out.bytes.insert(out.bytes.end(), data, data + n);
        return true;
      });
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
  DSV4_RETURN_IF_ERROR(stop);
  if (timed_out) return error(StatusCode::invalid_argument, "image URL took longer than {} ms", o.total_timeout.count());
  if (!res) return error(StatusCode::invalid_argument, "image URL fetch failed: {}", httplib::to_string(res.error()));
  return out;
}

}  // namespace dsv4::vision
