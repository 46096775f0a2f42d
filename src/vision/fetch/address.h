// Which IP addresses a remote image fetch may connect to: public unicast only, never loopback, private,
// link-local, multicast or reserved ranges (IPv4, IPv6, and IPv4 embedded in IPv6).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dsv4::vision {

enum class AddressClass : uint8_t {
  public_unicast,
  unspecified,  // 0.0.0.0/8, ::
  loopback,     // 127.0.0.0/8, ::1
  private_use,  // 10/8, 172.16/12, 192.168/16, 100.64/10 (shared), fc00::/7, fec0::/10
  link_local,   // 169.254/16, fe80::/10
  multicast,    // 224/4, ff00::/8
  reserved,     // 240/4 and broadcast, documentation, benchmarking, 192.0.0/24, 2001::/23, 2001:db8::/32, ...
};

std::string_view address_class_name(AddressClass c);  // "public", "loopback", "private", ...

// An IPv4 (dotted quad) or IPv6 literal, without brackets; nullopt when it is neither. IPv4-mapped
// (::ffff:a.b.c.d), NAT64 (64:ff9b::/96) and 6to4 (2002::/16) addresses take the class of the IPv4 inside.
std::optional<AddressClass> classify_address(std::string_view ip);

// The same on raw bytes: 4 for IPv4, 16 for IPv6 (network order).
AddressClass classify_ipv4(const uint8_t a[4]);
AddressClass classify_ipv6(const uint8_t a[16]);

}  // namespace dsv4::vision
