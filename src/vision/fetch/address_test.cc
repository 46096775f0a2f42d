// Address classes on the boundaries of every refused range (IANA special-purpose registries).
#include "vision/fetch/address.h"

#include <gtest/gtest.h>

namespace dsv4::vision {
namespace {

AddressClass cls(const char* ip) {
  const std::optional<AddressClass> c = classify_address(ip);
  EXPECT_TRUE(c.has_value()) << ip;
  return c.value_or(AddressClass::public_unicast);
}

TEST(VisionAddress, Ipv4Ranges) {
  EXPECT_EQ(cls("0.0.0.0"), AddressClass::unspecified);
  EXPECT_EQ(cls("0.255.255.255"), AddressClass::unspecified);
  EXPECT_EQ(cls("1.0.0.0"), AddressClass::public_unicast);
  EXPECT_EQ(cls("127.0.0.1"), AddressClass::loopback);
  EXPECT_EQ(cls("127.255.255.254"), AddressClass::loopback);
  EXPECT_EQ(cls("10.0.0.1"), AddressClass::private_use);
  EXPECT_EQ(cls("11.0.0.1"), AddressClass::public_unicast);
  EXPECT_EQ(cls("172.15.255.255"), AddressClass::public_unicast);
  EXPECT_EQ(cls("172.16.0.0"), AddressClass::private_use);
  EXPECT_EQ(cls("172.31.255.255"), AddressClass::private_use);
  EXPECT_EQ(cls("172.32.0.0"), AddressClass::public_unicast);
  EXPECT_EQ(cls("192.168.1.1"), AddressClass::private_use);
  EXPECT_EQ(cls("100.63.255.255"), AddressClass::public_unicast);
  EXPECT_EQ(cls("100.64.0.1"), AddressClass::private_use);
  EXPECT_EQ(cls("100.127.255.255"), AddressClass::private_use);
  EXPECT_EQ(cls("100.128.0.0"), AddressClass::public_unicast);
  EXPECT_EQ(cls("169.254.169.254"), AddressClass::link_local);  // cloud metadata endpoints
  EXPECT_EQ(cls("224.0.0.1"), AddressClass::multicast);
  EXPECT_EQ(cls("239.255.255.255"), AddressClass::multicast);
  EXPECT_EQ(cls("240.0.0.1"), AddressClass::reserved);
  EXPECT_EQ(cls("255.255.255.255"), AddressClass::reserved);
  EXPECT_EQ(cls("192.0.0.8"), AddressClass::reserved);
  EXPECT_EQ(cls("192.0.2.1"), AddressClass::reserved);
  EXPECT_EQ(cls("198.18.0.1"), AddressClass::reserved);
  EXPECT_EQ(cls("198.19.255.255"), AddressClass::reserved);
  EXPECT_EQ(cls("198.20.0.0"), AddressClass::public_unicast);
  EXPECT_EQ(cls("198.51.100.7"), AddressClass::reserved);
  EXPECT_EQ(cls("203.0.113.9"), AddressClass::reserved);
  EXPECT_EQ(cls("8.8.8.8"), AddressClass::public_unicast);
  EXPECT_EQ(cls("93.184.216.34"), AddressClass::public_unicast);
}

TEST(VisionAddress, Ipv6RangesAndEmbeddedIpv4) {
  EXPECT_EQ(cls("::"), AddressClass::unspecified);
  EXPECT_EQ(cls("::1"), AddressClass::loopback);
  EXPECT_EQ(cls("::ffff:127.0.0.1"), AddressClass::loopback);
  EXPECT_EQ(cls("::ffff:10.1.2.3"), AddressClass::private_use);
  EXPECT_EQ(cls("::ffff:8.8.8.8"), AddressClass::public_unicast);
  EXPECT_EQ(cls("64:ff9b::a9fe:a9fe"), AddressClass::link_local);  // NAT64 of 169.254.169.254
  EXPECT_EQ(cls("2002:7f00:1::"), AddressClass::loopback);           // 6to4 of 127.0.0.1
  EXPECT_EQ(cls("2002:0808:0808::1"), AddressClass::public_unicast);
  EXPECT_EQ(cls("::127.0.0.1"), AddressClass::reserved);              // IPv4-compatible (deprecated)
  EXPECT_EQ(cls("fc00::1"), AddressClass::private_use);
  EXPECT_EQ(cls("fdff:ffff::1"), AddressClass::private_use);
  EXPECT_EQ(cls("fe80::1"), AddressClass::link_local);
  EXPECT_EQ(cls("febf:ffff::1"), AddressClass::link_local);
  EXPECT_EQ(cls("fec0::1"), AddressClass::private_use);
  EXPECT_EQ(cls("ff02::1"), AddressClass::multicast);
  EXPECT_EQ(cls("2001:db8::1"), AddressClass::reserved);
  EXPECT_EQ(cls("2001::1"), AddressClass::reserved);
  EXPECT_EQ(cls("2001:200::1"), AddressClass::public_unicast);
  EXPECT_EQ(cls("100::1"), AddressClass::reserved);
  EXPECT_EQ(cls("2606:4700::1111"), AddressClass::public_unicast);
}

TEST(VisionAddress, NotAnAddress) {
  EXPECT_EQ(classify_address("example.com"), std::nullopt);
  EXPECT_EQ(classify_address("127.1"), std::nullopt);  // shorthand is a name to resolve, then checked
  EXPECT_EQ(classify_address("[::1]"), std::nullopt);
}

}  // namespace
}  // namespace dsv4::vision
