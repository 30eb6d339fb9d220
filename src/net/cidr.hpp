// IPv4/IPv6 addresses and CIDR blocks, without sockets.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::net {

// An address in IPv6 form; IPv4 is stored as IPv4-mapped (::ffff:a.b.c.d).
struct IpAddress {
    std::array<std::uint8_t, 16> bytes{};
    bool v4 = false;
    static std::optional<IpAddress> parse(std::string_view text);  // "1.2.3.4", "::1", "[::1]"
    std::string str() const;
    // The same address with an IPv4-mapped IPv6 form (::ffff:a.b.c.d) turned into IPv4,
    // so one client is one key whichever way it reached us.
    IpAddress unmapped() const;
    bool operator==(const IpAddress&) const = default;
};

struct Cidr {
    IpAddress base;
    unsigned prefix = 0;  // in the address's own family (0..32 for v4, 0..128 for v6)
    static std::optional<Cidr> parse(std::string_view text);  // "10.0.0.0/8", "::1/128", "1.2.3.4"
    bool contains(const IpAddress& ip) const;
    std::string str() const;
};

}  // namespace sluice::net
