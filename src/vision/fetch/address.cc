// IP range classification for the fetcher's connect policy.
#include "vision/fetch/address.h"

#include <arpa/inet.h>

#include <cstring>
#include <string>

namespace dsv4::vision {

std::string_view address_class_name(AddressClass c) {
  switch (c) {
    case AddressClass::public_unicast: return "public";
    case AddressClass::unspecified: return "unspecified";
    case AddressClass::loopback: return "loopback";
    case AddressClass::private_use: return "private";
    case AddressClass::link_local: return "link-local";
    case AddressClass::multicast: return "multicast";
    case AddressClass::reserved: return "reserved";
  }
  return "?";
}

AddressClass classify_ipv4(const uint8_t a[4]) {
  const uint32_t v = (uint32_t{a[0]} << 24) | (uint32_t{a[1]} << 16) | (uint32_t{a[2]} << 8) | a[3];
  auto in = [v](uint32_t net, int bits) { return bits == 0 || (v >> (32 - bits)) == (net >> (32 - bits)); };
  if (in(0x00000000, 8)) return AddressClass::unspecified;
  if (in(0x7F000000, 8)) return AddressClass::loopback;
  if (in(0x0A000000, 8) || in(0xAC100000, 12) || in(0xC0A80000, 16) || in(0x64400000, 10)) return AddressClass::private_use;
  if (in(0xA9FE0000, 16)) return AddressClass::link_local;
  if (in(0xE0000000, 4)) return AddressClass::multicast;
  if (in(0xF0000000, 4) ||                      // reserved, 255.255.255.255 included
      in(0xC0000000, 24) ||                     // IETF protocol assignments
      in(0xC0000200, 24) || in(0xC6336400, 24) || in(0xCB007100, 24) ||  // documentation
      in(0xC6120000, 15)) {                     // benchmarking
    return AddressClass::reserved;
  }
  return AddressClass::public_unicast;
}

AddressClass classify_ipv6(const uint8_t a[16]) {
  auto prefix = [a](std::initializer_list<uint8_t> bytes, int bits) {
    // The first `bits` bits of a equal those of `bytes` (given most significant first).
    int i = 0;
    for (uint8_t b : bytes) {
      if (bits <= 0) break;
      const int take = bits >= 8 ? 8 : bits;
      const uint8_t mask = static_cast<uint8_t>(0xFF << (8 - take));
      if ((a[i] & mask) != (b & mask)) return false;
      bits -= take, ++i;
    }
    return true;
  };
  static const uint8_t zero[16] = {0};
  if (std::memcmp(a, zero, 16) == 0) return AddressClass::unspecified;
  if (std::memcmp(a, zero, 15) == 0 && a[15] == 1) return AddressClass::loopback;
  if (prefix({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF}, 96) || prefix({0x00, 0x64, 0xFF, 0x9B, 0, 0, 0, 0, 0, 0, 0, 0}, 96)) {
    return classify_ipv4(a + 12);  // IPv4-mapped, NAT64
  }
  if (prefix({0x20, 0x02}, 16)) return classify_ipv4(a + 2);  // 6to4
  if (prefix({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 96)) return AddressClass::reserved;  // IPv4-compatible
  if (prefix({0xFC}, 7) || prefix({0xFE, 0xC0}, 10)) return AddressClass::private_use;
  if (prefix({0xFE, 0x80}, 10)) return AddressClass::link_local;
  if (prefix({0xFF}, 8)) return AddressClass::multicast;
  if (prefix({0x20, 0x01, 0x0D, 0xB8}, 32) || prefix({0x20, 0x01, 0x00}, 23) || prefix({0x01, 0, 0, 0, 0, 0, 0, 0}, 64)) {
    return AddressClass::reserved;  // documentation, IETF protocol assignments (Teredo included), discard
  }
  return AddressClass::public_unicast;
}

std::optional<AddressClass> classify_address(std::string_view ip) {
  const std::string s(ip);
  uint8_t buf[16];
  if (inet_pton(AF_INET, s.c_str(), buf) == 1) return classify_ipv4(buf);
  if (inet_pton(AF_INET6, s.c_str(), buf) == 1) return classify_ipv6(buf);
  return std::nullopt;
}

}  // namespace dsv4::vision
