#include <catch2/catch.hpp>

#include <arpa/inet.h>

#include <random>
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

TEST_CASE("cidr: every address prints as the C library prints it", "[net][cidr]") {
    // str() writes its digits by hand (it runs for every request of a trusted proxy's client):
    // compared with inet_ntop over every octet value and over IPv6 addresses with zero runs of
    // every length and place. glibc writes an address whose first 96 bits are zero in the
    // deprecated IPv4-compatible form (::1.2.3.4); RFC 5952 and str() do not: those are left out.
    char text[INET6_ADDRSTRLEN];
    for (unsigned octet = 0; octet < 256; ++octet) {
        const unsigned char raw[4] = {static_cast<unsigned char>(octet), static_cast<unsigned char>(255 - octet),
                                      static_cast<unsigned char>(octet / 3), static_cast<unsigned char>(octet % 10)};
        REQUIRE(inet_ntop(AF_INET, raw, text, sizeof text));
        const auto address = IpAddress::parse(text);
        REQUIRE(address);
        CHECK(address->str() == text);
    }
    std::mt19937 random(24);
    for (int i = 0; i < 200000; ++i) {
        unsigned char raw[16];
        for (int g = 0; g < 8; ++g) {
            const auto kind = random() % 4;  // zero half the time, then a small, a mid, a full group
            const unsigned group = kind < 2 ? 0 : kind == 2 ? random() % 16 : random() % 65536;
            raw[2 * g] = static_cast<unsigned char>(group >> 8);
            raw[2 * g + 1] = static_cast<unsigned char>(group & 0xff);
        }
        if (random() % 8 == 0)  // v4-mapped
            for (int b = 0; b < 12; ++b) raw[b] = b < 10 ? 0 : 0xff;
        bool compatible = true;
        for (int b = 0; b < 12; ++b) compatible = compatible && raw[b] == 0;
        if (compatible) continue;
        REQUIRE(inet_ntop(AF_INET6, raw, text, sizeof text));
        const auto address = IpAddress::parse(text);
        REQUIRE(address);
        if (address->str() != text) FAIL("str() " << address->str() << " vs inet_ntop " << text);
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

TEST_CASE("cidr: IPv4 text is read as inet_pton reads it", "[net][cidr]") {
    // parse() reads dotted decimal itself (in place, for every X-Forwarded-For entry of a
    // trusted proxy's request): the same verdict and bytes as glibc's inet_pton over texts
    // built from digits, dots and a few other bytes, near-misses included.
    const std::vector<std::string> fixed{
        "0.0.0.0", "1.2.3.4", "255.255.255.255", "01.2.3.4", "1.02.3.4", "1.2.3.00", "0.0.0.00",
        "256.0.0.0", "1.2.3.256", "1.2.3.999", "1.2.3.1000", "1.2.3.0255", "1..2.3", ".1.2.3.4",
        "1.2.3.4.", "1.2.3", "1.2.3.4.5", "1 .2.3.4", "1.2.3.4\n", "+1.2.3.4", "1.2.3.-0", "0x1.2.3.4",
        "1.2.3.4a", "4294967295", "1", "", "."};
    const auto agree = [](const std::string& text) {
        in_addr raw{};
        const bool libc = inet_pton(AF_INET, text.c_str(), &raw) == 1;
        const auto ours = IpAddress::parse(text);
        if (libc != ours.has_value()) FAIL("'" << text << "': inet_pton " << libc << ", parse " << ours.has_value());
        if (!libc) return;
        const auto* octets = reinterpret_cast<const unsigned char*>(&raw);
        for (int i = 0; i < 4; ++i) REQUIRE(ours->bytes[12 + i] == octets[i]);
        REQUIRE(ours->v4);
    };
    for (const auto& text : fixed) agree(text);
    std::mt19937 random(7);
    const std::string alphabet = "0123456789012345678901234567890123456789....1259 x-";
    for (int i = 0; i < 300000; ++i) {
        std::string text;
        const auto length = 1 + random() % 17;
        for (unsigned j = 0; j < length; ++j) text += alphabet[random() % alphabet.size()];
        agree(text);
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
        // prefixes that end inside a byte, and at its edges
        {"172.16.0.0/12", "172.31.255.255", true},
        {"172.16.0.0/12", "172.32.0.0", false},
        {"172.16.0.0/12", "172.15.255.255", false},
        {"198.51.100.0/23", "198.51.101.7", true},
        {"198.51.100.0/23", "198.51.102.7", false},
        {"128.0.0.0/1", "255.1.1.1", true},
        {"128.0.0.0/1", "127.255.255.255", false},
        {"203.0.113.6/31", "203.0.113.7", true},
        {"203.0.113.6/31", "203.0.113.8", false},
        {"203.0.113.0/24", "203.0.113.255", true},
        {"203.0.113.0/24", "203.0.114.0", false},
        {"2001:db8::/65", "2001:db8::7fff:0:0:1", true},
        {"2001:db8::/65", "2001:db8::8000:0:0:1", false},
        {"::2/127", "::3", true},
        {"::2/127", "::4", false},
        {"8000::/1", "ffff::", true},
        {"8000::/1", "7fff::", false},
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
