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
