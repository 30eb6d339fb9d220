#include <catch2/catch.hpp>

#include "limit/client_ip.hpp"

using namespace sluice;

namespace {

std::vector<net::Cidr> cidrs(std::initializer_list<const char*> list) {
    std::vector<net::Cidr> out;
    for (auto* s : list) out.push_back(*net::Cidr::parse(s));
    return out;
}

}  // namespace

// In the style of nginx-tests realip.t: peer, X-Forwarded-For fields, trusted set, expected client.
TEST_CASE("client_ip walks X-Forwarded-For right to left past trusted hops") {
    struct Case {
        std::string peer;
        std::vector<std::string_view> xff;
        std::vector<net::Cidr> trusted;
        std::string expected;
    };
    const auto lb = cidrs({"10.0.0.0/8", "fd00::/8"});
    const std::vector<Case> cases = {
        {"203.0.113.7", {}, {}, "203.0.113.7"},
        {"203.0.113.7", {"1.2.3.4"}, {}, "203.0.113.7"},               // nobody trusted: XFF ignored
        {"203.0.113.7", {"1.2.3.4"}, lb, "203.0.113.7"},               // untrusted peer: XFF ignored
        {"10.0.0.1", {"1.2.3.4"}, lb, "1.2.3.4"},                      // trusted peer
        {"10.0.0.1", {"6.6.6.6, 1.2.3.4"}, lb, "1.2.3.4"},             // spoofed left part ignored
        {"10.0.0.1", {"6.6.6.6, 1.2.3.4, 10.0.0.2"}, lb, "1.2.3.4"},   // trusted hops skipped
        {"10.0.0.1", {"6.6.6.6", "1.2.3.4, 10.0.0.2"}, lb, "1.2.3.4"}, // several fields are one list
        {"10.0.0.1", {"10.0.0.3, 10.0.0.2"}, lb, "10.0.0.3"},          // all trusted: left-most
        {"10.0.0.1", {}, lb, "10.0.0.1"},                              // trusted peer, no XFF
        {"10.0.0.1", {"1.2.3.4, junk"}, lb, "10.0.0.1"},               // junk stops the walk at its sender
        {"10.0.0.1", {"1.2.3.4, junk, 10.0.0.2"}, lb, "10.0.0.2"},
        {"10.0.0.1", {" 2001:db8::1 ,  "}, lb, "2001:db8::1"},         // IPv6, spaces, empty items
        {"fd00::5", {"2001:db8::1"}, lb, "2001:db8::1"},                // IPv6 trusted peer
        {"10.0.0.1", {"::ffff:1.2.3.4"}, lb, "1.2.3.4"},                // v4-mapped is one key with v4
    };
    for (const auto& c : cases) {
        std::string fields;
        for (auto f : c.xff) fields += std::string(f) + " | ";
        INFO("peer " << c.peer << " xff " << fields);
        CHECK(limit::client_ip(c.peer, c.xff, c.trusted) == c.expected);
    }
}

// The client an X-Forwarded-For names is written as IpAddress::str() writes it, whatever form
// it came in (an IPv4 address is returned as it was written: the only form parse takes).
TEST_CASE("client_ip writes the client it finds in one canonical form") {
    const auto lb = cidrs({"10.0.0.0/8"});
    for (const std::string text : {"1.2.3.4", "0.0.0.0", "255.255.255.255", "192.168.100.10", "2001:DB8::1",
                                   "2001:db8:0:0:0:0:0:1", "::ffff:192.0.2.1", "[2001:db8::1]", "01.2.3.4",
                                   "1.2.3.04", "1.2.3", "1.2.3.4.5", "256.1.1.1", "1.2.3.4 5", "::ffff:c000:201"}) {
        INFO(text);
        const auto parsed = net::IpAddress::parse(text);
        const std::vector<std::string_view> xff{text};
        const std::string expected = parsed ? parsed->unmapped().str() : "10.0.0.1";
        CHECK(limit::client_ip("10.0.0.1", xff, lb) == expected);
        if (parsed && parsed->v4) CHECK(expected == text);
    }
}
