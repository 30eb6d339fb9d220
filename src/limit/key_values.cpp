#include "limit/key_values.hpp"

#include <algorithm>

#include "net/cidr.hpp"

namespace sluice::limit {
namespace {

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// %XX (either case) decoded, and with `plus_is_space` (form encoding) '+' as a space; a '%'
// not followed by two hex digits stays as it is.
std::string decoded(std::string_view text, bool plus_is_space) {
    std::string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == '+' && plus_is_space) {
            out.push_back(' ');
        } else if (c == '%' && i + 2 < text.size() && hex_digit(text[i + 1]) >= 0 && hex_digit(text[i + 2]) >= 0) {
            out.push_back(static_cast<char>(hex_digit(text[i + 1]) * 16 + hex_digit(text[i + 2])));
            i += 2;
        } else {
            out.push_back(c);
        }
    }
    return out;
}

std::string_view trimmed(std::string_view text) {
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
    return text;
}

}  // namespace

std::optional<std::string> query_value(std::string_view query, std::string_view name, bool& ambiguous) {
    ambiguous = false;
    std::optional<std::string> found;
    while (!query.empty()) {
        const auto amp = query.find('&');
        const std::string_view pair = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
        const auto eq = pair.find('=');
        if (decoded(pair.substr(0, eq), true) != name) continue;
        std::string value = eq == std::string_view::npos ? std::string() : decoded(pair.substr(eq + 1), true);
        if (found && *found != value) {
            ambiguous = true;
            return std::nullopt;
        }
        found = std::move(value);
    }
    return found;
}

std::string percent_decoded(std::string_view text) { return decoded(text, false); }

std::optional<std::string> cookie_value(std::string_view cookies, std::string_view name, bool& ambiguous) {
    ambiguous = false;
    std::optional<std::string> found;
    while (!cookies.empty()) {
        const auto semi = cookies.find(';');
        const std::string_view pair = trimmed(cookies.substr(0, semi));
        cookies = semi == std::string_view::npos ? std::string_view{} : cookies.substr(semi + 1);
        const auto eq = pair.find('=');
        if (eq == std::string_view::npos || trimmed(pair.substr(0, eq)) != name) continue;
        std::string_view quoted_value = trimmed(pair.substr(eq + 1));
        if (quoted_value.size() >= 2 && quoted_value.front() == '"' && quoted_value.back() == '"')
            quoted_value = quoted_value.substr(1, quoted_value.size() - 2);
        // Decoded as the frameworks behind read it (Express, PHP): `%61bc` is `abc`.
        std::string value = percent_decoded(quoted_value);
        if (found && *found != value) {
            ambiguous = true;
            return std::nullopt;
        }
        found = std::move(value);
    }
    return found;
}

std::optional<std::string_view> path_segment(std::string_view path, unsigned n) {
    unsigned index = 0;
    while (!path.empty()) {
        const auto slash = path.find('/');
        const std::string_view segment = path.substr(0, slash);
        path = slash == std::string_view::npos ? std::string_view{} : path.substr(slash + 1);
        if (segment.empty()) continue;
        if (++index == n) return segment;
    }
    return std::nullopt;
}

std::optional<std::string> client_network(std::string_view client_ip, unsigned v4_prefix, unsigned v6_prefix) {
    auto ip = net::IpAddress::parse(client_ip);
    if (!ip) return std::nullopt;
    const net::IpAddress address = ip->unmapped();
    net::Cidr network{address, address.v4 ? std::min(v4_prefix, 32u) : std::min(v6_prefix, 128u)};
    // IPv4 sits in the last 4 bytes (mapped form): its prefix starts 96 bits in.
    const unsigned keep = network.prefix + (address.v4 ? 96 : 0);
    for (unsigned bit = keep; bit < 128; ++bit)
        network.base.bytes[bit / 8] &= static_cast<std::uint8_t>(~(0x80u >> (bit % 8)));
    return network.str();
}

}  // namespace sluice::limit
