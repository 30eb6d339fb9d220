#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "net/cidr.hpp"

using sluice::net::Cidr;
using sluice::net::IpAddress;

namespace {

struct TextCase {
    std::string input;
    std::string expected;  // str() of the parsed value
};

struct ContainsCase {
    std::string cidr;
    std::string address;
    bool expected;
};

}  // namespace

TEST_CASE("cidr: addresses parse and print in canonical form", "[net][cidr]") {
    const std::vector<TextCase> cases{
        {"1.2.3.4", "1.2.3.4"},
        {"0.0.0.0", "0.0.0.0"},
        {"255.255.255.255", "255.255.255.255"},
        {"::", "::"},
        {"::1", "::1"},
        {"[::1]", "::1"},
        {"1::", "1::"},
        {"2001:0db8:0000:0000:0000:0000:0000:0001", "2001:db8::1"},
        {"2001:DB8::A", "2001:db8::a"},
        {"1:0:0:1:0:0:0:1", "1:0:0:1::1"},        // the longest zero run is compressed
        {"1:0:0:2:0:0:3:4", "1::2:0:0:3:4"},      // on a tie, the first one
        {"1:0:2:3:4:5:6:7", "1:0:2:3:4:5:6:7"},   // a single zero group is not compressed
        {"::ffff:1.2.3.4", "::ffff:1.2.3.4"},     // v4-mapped keeps the dotted tail
        {"::FFFF:102:304", "::ffff:1.2.3.4"},
        {"64:ff9b::192.0.2.33", "64:ff9b::c000:221"},
        {"[2001:db8::8:800:200c:417a]", "2001:db8::8:800:200c:417a"},
    };
    for (const auto& c : cases) {
        CAPTURE(c.input);
        const auto address = IpAddress::parse(c.input);
        REQUIRE(address);
        CHECK(address->str() == c.expected);
    }
}

TEST_CASE("cidr: malformed addresses are refused", "[net][cidr]") {
    const std::vector<std::string> cases{
        "",           "1.2.3",       "1.2.3.4.5", "256.1.1.1",     "1.2.3.-4",   " 1.2.3.4",
        "1.2.3.4 ",   "[1.2.3.4]",   "[::1",      "::1]",          "[]",         "1:::2",
        "1::2::3",    "12345::",     "g::1",      "1:2:3:4:5:6:7:8:9",           "fe80::1%eth0",
        "localhost",  "1.2.3.4/32",  std::string("1.2.3.4\0", 8),
    };
    for (const auto& input : cases) {
        CAPTURE(input);
        CHECK_FALSE(IpAddress::parse(input));
    }
}

TEST_CASE("cidr: IPv4 is stored v4-mapped and flagged", "[net][cidr]") {
    const auto v4 = IpAddress::parse("10.1.2.3");
    const auto mapped = IpAddress::parse("::ffff:10.1.2.3");
    REQUIRE(v4);
    REQUIRE(mapped);
    CHECK(v4->v4);
    CHECK_FALSE(mapped->v4);  // written as IPv6, printed as IPv6
    CHECK(v4->bytes == mapped->bytes);
    CHECK(v4->bytes[10] == 0xff);
    CHECK(v4->bytes[11] == 0xff);
    CHECK(v4->bytes[12] == 10);
    CHECK(v4->bytes[15] == 3);
}

TEST_CASE("cidr: blocks parse, a bare address is one host, host bits are cleared", "[net][cidr]") {
    const std::vector<TextCase> cases{
        {"10.0.0.0/8", "10.0.0.0/8"},
        {"10.1.2.3/8", "10.0.0.0/8"},
        {"192.168.1.255/25", "192.168.1.128/25"},
        {"1.2.3.4", "1.2.3.4/32"},
        {"1.2.3.4/32", "1.2.3.4/32"},
        {"0.0.0.0/0", "0.0.0.0/0"},
        {"255.255.255.255/0", "0.0.0.0/0"},
        {"2001:db8::/32", "2001:db8::/32"},
        {"2001:db8:ffff::1/32", "2001:db8::/32"},
        {"fe80::1/10", "fe80::/10"},
        {"::1", "::1/128"},
        {"[::1]/128", "::1/128"},
        {"::/0", "::/0"},
        {"::ffff:10.9.8.7/104", "::ffff:10.0.0.0/104"},
    };
    for (const auto& c : cases) {
        CAPTURE(c.input);
        const auto cidr = Cidr::parse(c.input);
        REQUIRE(cidr);
        CHECK(cidr->str() == c.expected);
    }
}

TEST_CASE("cidr: malformed blocks are refused", "[net][cidr]") {
    const std::vector<std::string> cases{
        "10.0.0.0/33", "::/129",   "10.0.0.0/",     "10.0.0.0/-1", "10.0.0.0/+8", "10.0.0.0/8/8",
        "10.0.0.0/ 8", "/8",       "foo/8",         "10.0.0.0/0008", "10.0.0/8",  "",
        "1.2.3.4/32a", "::1/1e2",
    };
    for (const auto& input : cases) {
        CAPTURE(input);
        CHECK_FALSE(Cidr::parse(input));
    }
}

TEST_CASE("cidr: contains, across IPv4, IPv6 and v4-mapped forms", "[net][cidr]") {
    const std::vector<ContainsCase> cases{
        {"10.0.0.0/8", "10.0.0.0", true},
        {"10.0.0.0/8", "10.255.255.255", true},
        {"10.0.0.0/8", "11.0.0.0", false},
        {"10.0.0.0/8", "9.255.255.255", false},
        {"10.0.0.0/8", "::ffff:10.1.2.3", true},  // the same client through a dual-stack socket
        {"10.0.0.0/8", "::ffff:11.1.2.3", false},
        {"10.0.0.0/8", "::a01:203", false},       // IPv4-compatible is not IPv4-mapped
        {"192.168.1.128/25", "192.168.1.128", true},
        {"192.168.1.128/25", "192.168.1.255", true},
        {"192.168.1.128/25", "192.168.1.127", false},
        {"1.2.3.4", "1.2.3.4", true},
        {"1.2.3.4", "1.2.3.5", false},
        {"0.0.0.0/0", "8.8.8.8", true},
        {"0.0.0.0/0", "::1", false},              // every IPv4 address, no IPv6 one
        {"2001:db8::/32", "2001:db8:1::1", true},
        {"2001:db8::/32", "2001:db9::1", false},
        {"2001:db8::/32", "10.0.0.1", false},
        {"fe80::/10", "fe80::1", true},
        {"fe80::/10", "febf:ffff::1", true},
        {"fe80::/10", "fec0::1", false},
        {"::1/128", "::1", true},
        {"::1/128", "::2", false},
        {"::ffff:10.0.0.0/104", "10.1.1.1", true},
        {"::ffff:10.0.0.0/104", "11.1.1.1", false},
        {"::/0", "2001::1", true},
        {"::/0", "1.2.3.4", true},                // 128-bit view: ::/0 is everything
    };
    for (const auto& c : cases) {
        CAPTURE(c.cidr, c.address);
        const auto cidr = Cidr::parse(c.cidr);
        const auto address = IpAddress::parse(c.address);
        REQUIRE(cidr);
        REQUIRE(address);
        CHECK(cidr->contains(*address) == c.expected);
    }
}
